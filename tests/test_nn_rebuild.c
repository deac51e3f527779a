/* test_nn_rebuild.c - lm_nn_rebuild makes, for inputs of new shapes, the
 * node the NN builder itself would make (what compile replays). */
#include "test_nn_util.h"

static lm_array *rnd(int nd, int64_t a, int64_t b, int64_t c, int64_t d, uint64_t seed)
{
    int64_t sh[4] = {a, b, c, d};
    lm_array *r = lm_random_normal(nd, sh, 0, 1, LM_F32, lm_random_key(seed), NULL);
    assert_int_equal(lm_array_eval(r), LM_OK);
    return r;
}

/* rebuilds `traced` on `in` and compares with `fresh` (built directly on in) */
static void same(lm_array *traced, lm_array *const *in, int n, lm_array *fresh)
{
    assert_non_null(traced);
    assert_non_null(fresh);
    lm_array *r = lm_nn_rebuild(traced->op, &traced->params, n, in);
    if (!r) fprintf(stderr, "rebuild %s: %s\n", lm_op_name(traced->op), lm_error_message());
    assert_non_null(r);
    assert_int_equal(r->op, fresh->op);
    assert_int_equal(r->dtype, fresh->dtype);
    assert_int_equal(r->ndim, fresh->ndim);
    for (int d = 0; d < r->ndim; d++) assert_int_equal(r->shape[d], fresh->shape[d]);
    double *a = tu_read(r), *b = tu_read(fresh);
    for (int64_t i = 0; i < r->size; i++) assert_true(a[i] == b[i] || (isnan(a[i]) && isnan(b[i])));
    free(a);
    free(b);
    lm_array_release(r);
    lm_array_release(fresh);
    lm_array_release(traced);
}

static void test_rebuild(void **state)
{
    (void)state;
    lm_array *x = rnd(4, 1, 4, 6, 7, 1), *y = rnd(4, 2, 4, 9, 5, 2), *w = rnd(4, 6, 2, 3, 3, 3);
    lm_array *b = rnd(1, 6, 0, 0, 0, 4), *wt = rnd(4, 4, 3, 3, 3, 5);
    int64_t st[2] = {2, 1}, pad[4] = {1, 0, 2, 1}, dl[2] = {1, 2}, k[2] = {3, 2}, p1[2] = {1, 1}, o[2] = {3, 2};
    lm_array *in3[3] = {y, w, b};
    same(lm_conv2d(x, w, b, st, pad, dl, 2), in3, 3, lm_conv2d(y, w, b, st, pad, dl, 2));
    lm_array *t3[3] = {y, wt, NULL};
    int64_t op[2] = {1, 0};
    same(lm_conv_transpose2d(x, wt, NULL, st, p1, op, NULL, 1), t3, 2,
         lm_conv_transpose2d(y, wt, NULL, st, p1, op, NULL, 1));
    same(lm_max_pool2d(x, k, st, p1, NULL, true), &y, 1, lm_max_pool2d(y, k, st, p1, NULL, true));
    same(lm_avg_pool2d(x, k, NULL, p1, false, false, 0), &y, 1, lm_avg_pool2d(y, k, NULL, p1, false, false, 0));
    same(lm_adaptive_avg_pool2d(x, o), &y, 1, lm_adaptive_avg_pool2d(y, o));
    double sc[2] = {2, 1.5};
    int64_t sz[2] = {5, 11};
    same(lm_upsample(x, NULL, sc, LM_UPSAMPLE_BILINEAR, false), &y, 1,
         lm_upsample(y, NULL, sc, LM_UPSAMPLE_BILINEAR, false));
    same(lm_upsample(x, sz, NULL, LM_UPSAMPLE_NEAREST, false), &y, 1, lm_upsample(y, sz, NULL, LM_UPSAMPLE_NEAREST, false));
    same(lm_softmax(x, 2), &y, 1, lm_softmax(y, 2));
    lm_array *lw = rnd(1, 5, 0, 0, 0, 6), *lw7 = rnd(1, 7, 0, 0, 0, 7), *l2[2] = {y, lw};
    same(lm_layer_norm(x, 1, NULL, lw7, 1e-5), l2, 2, lm_layer_norm(y, 1, NULL, lw, 1e-5));
    same(lm_rms_norm(x, 1, lw7, 1e-6), l2, 2, lm_rms_norm(y, 1, lw, 1e-6));
    same(lm_group_norm(x, 2, NULL, NULL, 1e-5), &y, 1, lm_group_norm(y, 2, NULL, NULL, 1e-5));
    lm_array *q = rnd(4, 1, 4, 6, 8, 8), *kk = rnd(4, 1, 2, 5, 8, 9), *q2 = rnd(4, 2, 4, 3, 8, 10);
    lm_array *k2 = rnd(4, 2, 2, 7, 8, 11), *a3[3] = {q2, k2, k2};
    same(lm_attention(q, kk, kk, NULL, true, 0.5), a3, 3, lm_attention(q2, k2, k2, NULL, true, 0.5));
    same(lm_sort(x, -1, true), &y, 1, lm_sort(y, -1, true));
    same(lm_tril(x, 1), &y, 1, lm_tril(y, 1));
    lm_array *arr[] = {x, y, w, b, wt, lw, lw7, q, kk, q2, k2};
    for (int i = 0; i < 11; i++) lm_array_release(arr[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_rebuild)};
    nn_init();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
