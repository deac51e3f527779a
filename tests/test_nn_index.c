/* test_nn_index.c - sort/argsort (stable, NaN last), topk, scatter and
 * scatter_add, one_hot, tril/triu against tests/ref/gen_nn.py. */
#include "test_nn_util.h"

static void test_sort(void **state)
{
    (void)state;
    for (int t = 0; t < NN_NDTYPES; t++) {
        lm_dtype dt = nn_dtypes[t];
        lm_array *x = nn_in("sort_xn", dt), *xs = nn_strided(x), *x0 = nn_in("sort_x", dt);
        for (int desc = 0; desc < 2; desc++) {
            char v[32], i[32];
            snprintf(v, sizeof v, "sort_%d_v", desc);
            snprintf(i, sizeof i, "sort_%d_i", desc);
            nn_check(lm_sort(xs, -1, desc), v, dt, "sort with NaN");
            nn_check(lm_argsort(x, -1, desc), i, LM_I64, "argsort stable with NaN");
            snprintf(v, sizeof v, "sort0_%d_v", desc);
            snprintf(i, sizeof i, "sort0_%d_i", desc);
            nn_check(lm_sort(x0, 0, desc), v, dt, "sort axis 0");
            nn_check(lm_argsort(x0, 0, desc), i, LM_I64, "argsort axis 0");
        }
        lm_array_release(x);
        lm_array_release(xs);
        lm_array_release(x0);
    }
    /* integers sort as integers */
    lm_array *xi = nn_in("topk_x", LM_I32);
    lm_array *s = lm_sort(xi, -1, false);
    assert_int_equal(s->dtype, LM_I32);
    double *v = tu_read(s);
    for (int r = 0; r < 3; r++)
        for (int j = 0; j < 9; j++) assert_true(v[r * 9 + j] == j - 4);
    free(v);
    lm_array_release(s);
    lm_array_release(xi);
}

static void test_topk(void **state)
{
    (void)state;
    for (int t = 0; t < NN_NDTYPES; t++) {
        lm_dtype dt = nn_dtypes[t];
        lm_array *x = nn_in("topk_x", dt), *xs = nn_strided(x), *v, *i;
        assert_int_equal(lm_topk(xs, 4, 1, true, &v, &i), LM_OK);
        nn_check(v, "topk_lv", dt, "topk largest values");
        nn_check(i, "topk_li", LM_I64, "topk largest indices");
        assert_int_equal(lm_topk(x, 2, 0, false, &v, &i), LM_OK);
        nn_check(v, "topk_sv", dt, "topk smallest values");
        nn_check(i, "topk_si", LM_I64, "topk smallest indices");
        lm_array_release(x);
        lm_array_release(xs);
    }
}

static void test_scatter(void **state)
{
    (void)state;
    for (int t = 0; t < NN_NDTYPES; t++) {
        lm_dtype dt = nn_dtypes[t];
        lm_array *a = nn_in("sc_a", dt), *src = nn_in("sc_src", dt), *src0 = nn_in("sc_src0", dt);
        lm_array *idx = nn_in("sc_idx", LM_I64), *idx2 = nn_in("sc_idx2", LM_I64), *idx0 = nn_in("sc_idx0", LM_I32);
        lm_array *as = nn_strided(a);
        nn_check(lm_scatter(as, 1, idx, src), "scatter_1", dt, "scatter (src larger than index)");
        nn_check(lm_scatter_add(a, 1, idx2, src), "scatter_add_1", dt, "scatter_add duplicates");
        nn_check(lm_scatter_add(as, 0, idx0, src0), "scatter_add_0", dt, "scatter_add axis 0");
        lm_array *arr[] = {a, src, src0, idx, idx2, idx0, as};
        for (int i = 0; i < 7; i++) lm_array_release(arr[i]);
    }
    /* a 0-d src broadcasts; an out-of-range index fails at evaluation */
    int64_t sh[2] = {2, 3};
    int64_t iv[2] = {2, 0};
    int64_t ish[2] = {1, 2};
    lm_array *z = lm_zeros(2, sh, LM_F32, NULL), *ix = lm_from_data(2, ish, LM_I64, iv, NULL);
    lm_array *s = lm_scalar(7, LM_F32, NULL), *r = lm_scatter(z, 1, ix, s);
    double *v = tu_read(r);
    assert_true(v[0] == 7 && v[2] == 7 && v[1] == 0 && v[3] == 0);
    free(v);
    iv[0] = 3;
    lm_array *bad = lm_from_data(2, ish, LM_I64, iv, NULL), *rb = lm_scatter(z, 1, bad, s);
    assert_int_equal(lm_array_eval(rb), LM_ERR_ARG);
    assert_non_null(strstr(lm_error_message(), "out of range"));
    lm_array *arr[] = {z, ix, s, r, bad, rb};
    for (int i = 0; i < 6; i++) lm_array_release(arr[i]);
}

static void test_one_hot_tri(void **state)
{
    (void)state;
    lm_array *oi = nn_in("oh_idx", LM_I64);
    nn_check(lm_one_hot(oi, 5), "one_hot", LM_I64, "one_hot");
    lm_array *bad = lm_one_hot(oi, 3);
    assert_int_equal(lm_array_eval(bad), LM_ERR_ARG);
    lm_array_release(bad);
    lm_array_release(oi);
    for (int t = 0; t < NN_NDTYPES; t++) {
        lm_dtype dt = nn_dtypes[t];
        lm_array *x = nn_in("tri_x", dt), *xs = nn_strided(x);
        for (int k = -2; k <= 1; k += (k == -2 ? 2 : 1)) {
            char n1[16], n2[16];
            snprintf(n1, sizeof n1, "tril_%d", k + 2);
            snprintf(n2, sizeof n2, "triu_%d", k + 2);
            nn_check(lm_tril(x, k), n1, dt, "tril");
            nn_check(lm_triu(xs, k), n2, dt, "triu strided");
        }
        lm_array_release(x);
        lm_array_release(xs);
    }
}

/* integer dtypes: tril keeps i32, scatter_add adds in i64, sort/topk on i64 */
static void test_integer_dtypes(void **state)
{
    (void)state;
    int64_t sh[2] = {3, 4};
    lm_array *r = lm_arange(1, 13, 1, LM_I32, NULL), *x = lm_reshape(r, 2, sh), *t = lm_tril(x, 0);
    assert_int_equal(t->dtype, LM_I32);
    double *v = tu_read(t);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) assert_true(v[i * 4 + j] == (j <= i ? i * 4 + j + 1 : 0));
    free(v);
    int64_t iv[4] = {0, 0, 2, 0}, ish[2] = {1, 4};
    lm_array *idx = lm_from_data(2, ish, LM_I64, iv, NULL);
    lm_array *x64 = lm_cast(x, LM_I64), *src = lm_scalar(5, LM_I64, NULL);
    lm_array *sa = lm_scatter_add(x64, 0, idx, src);
    assert_int_equal(sa->dtype, LM_I64);
    v = tu_read(sa);
    assert_true(v[0] == 1 + 5 && v[1] == 2 + 5 && v[3] == 4 + 5 && v[2 * 4 + 2] == 11 + 5 && v[2] == 3);
    free(v);
    lm_array *vals, *ids;
    assert_int_equal(lm_topk(x64, 2, 1, true, &vals, &ids), LM_OK);
    v = tu_read(vals);
    assert_true(v[0] == 4 && v[1] == 3 && v[4] == 12 && v[5] == 11);
    free(v);
    lm_array *arr[] = {r, x, t, idx, x64, src, sa, vals, ids};
    for (int i = 0; i < 9; i++) lm_array_release(arr[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sort), cmocka_unit_test(test_topk),
        cmocka_unit_test(test_scatter), cmocka_unit_test(test_one_hot_tri),
        cmocka_unit_test(test_integer_dtypes),
    };
    nn_init();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
