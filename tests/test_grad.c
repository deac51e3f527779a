/* test_grad.c - the C face of core/grad.c: lm_vjp on hand-checked graphs,
 * several outputs and shared nodes, stop_gradient, errors that name the op,
 * and no array left alive after a step.  (Every rule is checked against
 * finite differences and PyTorch in tests/lua/test_grad.lua.) */
#include "testutil.h"
#include "core/grad.h"

static lm_array *vec(int n, const double *v)
{
    return lm_from_data(1, (int64_t[]){n}, LM_F64, v, NULL);
}

static void read3(lm_array *a, double *out)
{
    assert_int_equal(lm_array_read(a, out, LM_F64), LM_OK);
}

static void test_square_sum(void **state)
{
    (void)state;
    int64_t live = lm_array_live_count();
    lm_array *x = vec(3, (double[]){1, 2, 3});
    lm_array *leaf = lm_grad_leaf(x);
    lm_array *sq = lm_unary(LM_OP_SQUARE, leaf);
    lm_array *y = lm_reduce(LM_OP_SUM, sq, 0, NULL, false);
    lm_array *one = lm_scalar(1, LM_F64, NULL);
    lm_array *g = NULL;
    assert_int_equal(lm_vjp(1, &y, &one, 1, &leaf, &g), LM_OK);
    double v[3];
    read3(g, v);
    assert_true(v[0] == 2 && v[1] == 4 && v[2] == 6);
    lm_array *all[] = {g, one, y, sq, leaf, x};
    for (int i = 0; i < 6; i++) lm_array_release(all[i]);
    assert_int_equal(lm_array_live_count(), live);
}

/* y1 = a*b, y2 = a + a (a shared twice): cotangents sum over outputs and uses */
static void test_two_outputs_shared(void **state)
{
    (void)state;
    lm_array *a0 = vec(3, (double[]){1, 2, 3}), *b0 = vec(3, (double[]){4, 5, 6});
    lm_array *a = lm_grad_leaf(a0), *b = lm_grad_leaf(b0);
    lm_array *y[2] = {lm_binary(LM_OP_MUL, a, b), lm_binary(LM_OP_ADD, a, a)};
    lm_array *c[2] = {vec(3, (double[]){1, 1, 1}), vec(3, (double[]){1, 0, 2})};
    lm_array *in[2] = {a, b}, *g[2];
    assert_int_equal(lm_vjp(2, y, c, 2, in, g), LM_OK);
    double ga[3], gb[3];
    read3(g[0], ga);
    read3(g[1], gb);
    assert_true(ga[0] == 6 && ga[1] == 5 && ga[2] == 10);   /* b + 2 c2 */
    assert_true(gb[0] == 1 && gb[1] == 2 && gb[2] == 3);    /* a */
    lm_array *all[] = {g[0], g[1], c[0], c[1], y[0], y[1], a, b, a0, b0};
    for (int i = 0; i < 10; i++) lm_array_release(all[i]);
}

static void test_stop_gradient_and_unreached(void **state)
{
    (void)state;
    lm_array *x0 = vec(3, (double[]){1, 2, 3}), *z0 = vec(3, (double[]){7, 7, 7});
    lm_array *x = lm_grad_leaf(x0), *z = lm_grad_leaf(z0);
    lm_array *x2 = lm_binary_scalar(LM_OP_MUL, x, 2, false);
    lm_array *st = lm_stop_gradient(x2);
    lm_array *y = lm_binary(LM_OP_MUL, st, x);            /* d/dx = stop(2x) = 2x */
    lm_array *c = vec(3, (double[]){1, 1, 1});
    lm_array *in[2] = {x, z}, *g[2];
    assert_int_equal(lm_vjp(1, &y, &c, 2, in, g), LM_OK);
    double gx[3], gz[3];
    read3(g[0], gx);
    read3(g[1], gz);
    assert_true(gx[0] == 2 && gx[1] == 4 && gx[2] == 6);
    assert_true(gz[0] == 0 && gz[1] == 0 && gz[2] == 0);  /* not reached: zeros */
    lm_array *all[] = {g[0], g[1], c, y, st, x2, x, z, x0, z0};
    for (int i = 0; i < 10; i++) lm_array_release(all[i]);
}

static void test_errors(void **state)
{
    (void)state;
    lm_array *x0 = vec(3, (double[]){1, 2, 3});
    lm_array *x = lm_grad_leaf(x0);
    lm_array *am = lm_argreduce(LM_OP_ARGMAX, x, 0, false);
    lm_array *f = lm_cast(am, LM_F64);
    lm_array *one = lm_scalar(1, LM_F64, NULL), *g = NULL;
    assert_int_equal(lm_vjp(1, &f, &one, 1, &x, &g), LM_ERR_UNSUPPORTED);
    assert_null(g);
    assert_non_null(strstr(lm_error_message(), "argmax"));
    /* a cotangent of the wrong shape */
    lm_array *c2 = vec(2, (double[]){1, 1});
    assert_int_not_equal(lm_vjp(1, &x, &c2, 1, &x, &g), LM_OK);
    assert_non_null(strstr(lm_error_message(), "cotangent"));
    lm_array *all[] = {c2, one, f, am, x, x0};
    for (int i = 0; i < 6; i++) lm_array_release(all[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_square_sum),
        cmocka_unit_test(test_two_outputs_shared),
        cmocka_unit_test(test_stop_gradient_and_unreached),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests_name("grad", tests, NULL, NULL);
}
