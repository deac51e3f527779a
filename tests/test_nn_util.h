/* test_nn_util.h - helpers shared by the NN op tests (tests/test_nn_*.c):
 * fixtures of tests/ref/gen_nn.py, strided copies, per-dtype tolerances. */
#ifndef LM_TEST_NN_UTIL_H
#define LM_TEST_NN_UTIL_H
#include "testutil.h"

/* These tests pin the CPU kernels: the default device would be a GPU where
 * one exists (other backends are checked against the CPU by the parity
 * tests). */
static inline void nn_init(void)
{
    assert_int_equal(lm_init(), LM_OK);
    lm_device_set_default(lm_device_cpu());
}

static const lm_dtype nn_dtypes[] = {LM_F32, LM_F64, LM_F16, LM_BF16};
#define NN_NDTYPES 4

/* The fixture tests/ref/fixtures/nn/<name>.npy as an evaluated array of dt. */
static inline lm_array *nn_in(const char *name, lm_dtype dt)
{
    char path[160];
    tu_fixture fx;
    snprintf(path, sizeof path, "nn/%s.npy", name);
    assert_int_equal(tu_load(path, &fx), 0);
    lm_array *a = tu_array(&fx, dt);
    tu_free(&fx);
    return a;
}

/* The same values with non-contiguous strides: the last two axes are
 * swapped in memory and swapped back as a view.  1-D arrays come back as a
 * stride-2 slice of a doubled copy. */
static inline lm_array *nn_strided(lm_array *x)
{
    if (x->ndim >= 2) {
        lm_array *t = lm_transpose(x, -1, -2), *c = lm_contiguous(t), *b = lm_transpose(c, -1, -2);
        assert_int_equal(lm_array_eval(b), LM_OK);
        lm_array_release(t);
        lm_array_release(c);
        if (x->shape[x->ndim - 1] > 1 && x->shape[x->ndim - 2] > 1) assert_false(lm_array_is_contiguous(b));
        return b;
    }
    lm_array *two[2] = {x, x};
    lm_array *s = lm_stack(2, two, -1), *f = lm_flatten(s, 0, -1), *r = lm_slice(f, 0, 0, 2 * x->size, 2);
    assert_int_equal(lm_array_eval(r), LM_OK);
    lm_array_release(s);
    lm_array_release(f);
    return r;
}

static inline double nn_tol(lm_dtype dt)
{
    switch (dt) {
    case LM_F64: return 1e-9;
    case LM_F32: return 2e-5;
    case LM_F16: return 4e-3;
    case LM_BF16: return 3e-2;
    default: return 0;
    }
}

/* Compares y (released here) with fixture `name`: |y - e| <= tol*|e| +
 * tol*max(1, max|e|) for float dtypes, exact otherwise. */
static inline void nn_check(lm_array *y, const char *name, lm_dtype dt, const char *what)
{
    char path[160], msg[200];
    tu_fixture fx;
    if (!y) fprintf(stderr, "%s: %s\n", what, lm_error_message());
    assert_non_null(y);
    snprintf(path, sizeof path, "nn/%s.npy", name);
    assert_int_equal(tu_load(path, &fx), 0);
    double mx = 1;
    for (int64_t i = 0; i < fx.size; i++) if (isfinite(fx.data[i]) && fabs(fx.data[i]) > mx) mx = fabs(fx.data[i]);
    double t = nn_tol(dt);
    snprintf(msg, sizeof msg, "%s (%s, %s)", what, name, lm_dtype_name(dt));
    tu_assert_close(y, &fx, t, t * mx, msg);
    tu_free(&fx);
    lm_array_release(y);
}

/* asserts that a builder failed with status st and a message containing sub */
static inline void nn_expect_error(lm_array *r, lm_status st, const char *sub)
{
    if (r) lm_array_release(r);
    assert_null(r);
    if (lm_error_status() != st || !strstr(lm_error_message(), sub))
        fprintf(stderr, "unexpected error: %s (%s), wanted '%s'\n", lm_error_message(),
                lm_status_name(lm_error_status()), sub);
    assert_int_equal(lm_error_status(), st);
    assert_non_null(strstr(lm_error_message(), sub));
}

#endif
