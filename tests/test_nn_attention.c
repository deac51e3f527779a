/* test_nn_attention.c - scaled dot-product attention (GQA, cross, causal,
 * additive and boolean masks, several key/query blocks), RoPE (standard,
 * traditional, partial, explicit frequencies, multi-axis) and the timestep
 * embedding against tests/ref/gen_nn.py. */
#include "test_nn_util.h"

static void test_attention(void **state)
{
    (void)state;
    for (int t = 0; t < NN_NDTYPES; t++) {
        lm_dtype in = nn_dtypes[t];
        lm_dtype dt = in == LM_F64 ? LM_F32 : in;   /* f64 attention computes in f32 (documented) */
        lm_array *q = nn_in("att_q", in), *k = nn_in("att_k", dt), *v = nn_in("att_v", dt);
        lm_array *qs = nn_strided(q), *ks = nn_strided(k);
        nn_check(lm_attention(q, k, v, NULL, false, 0), "att_plain", dt, "attention GQA cross");
        nn_check(lm_attention(qs, ks, v, NULL, false, 0), "att_plain", dt, "attention strided");
        nn_check(lm_attention(q, k, v, NULL, true, 0), "att_causal", dt, "attention causal");
        lm_array *ma = nn_in("att_madd", in), *mb = nn_in("att_mbool", LM_BOOL);
        nn_check(lm_attention(q, k, v, ma, false, 0.3), "att_maskadd", dt, "attention additive mask");
        nn_check(lm_attention(qs, k, v, mb, false, 0), "att_maskbool", dt, "attention bool mask");
        lm_array *arr[] = {q, k, v, qs, ks, ma, mb};
        for (int i = 0; i < 7; i++) lm_array_release(arr[i]);
    }
}

static void test_attention_blocks(void **state)
{
    (void)state;
    lm_dtype dts[2] = {LM_F32, LM_BF16};
    for (int t = 0; t < 2; t++) {
        lm_array *q = nn_in("attl_q", dts[t]), *k = nn_in("attl_k", dts[t]), *v = nn_in("attl_v", dts[t]);
        lm_array *m = nn_in("attl_mbool", LM_BOOL);
        nn_check(lm_attention(q, k, v, NULL, true, 0), "attl_causal", dts[t], "attention causal, blocks");
        nn_check(lm_attention(q, k, v, m, false, 0), "attl_maskbool", dts[t], "attention bool mask, blocks");
        lm_array *arr[] = {q, k, v, m};
        for (int i = 0; i < 4; i++) lm_array_release(arr[i]);
    }
}

/* a query row that sees no key gives NaN, as softmax of all -inf does */
static void test_attention_masked_row(void **state)
{
    (void)state;
    int64_t sq[4] = {1, 1, 2, 4}, sm[2] = {2, 3};
    uint8_t mk[6] = {0, 0, 0, 1, 0, 1};
    lm_array *q = lm_ones(4, sq, LM_F32, NULL), *m = lm_from_data(2, sm, LM_BOOL, mk, NULL);
    int64_t skv[4] = {1, 1, 3, 4};
    lm_array *kv = lm_ones(4, skv, LM_F32, NULL);
    lm_array *y = lm_attention(q, kv, kv, m, false, 0);
    double *v = tu_read(y);
    for (int i = 0; i < 4; i++) assert_true(isnan(v[i]));
    for (int i = 4; i < 8; i++) assert_true(fabs(v[i] - 1) < 1e-6);
    free(v);
    lm_array *arr[] = {q, m, kv, y};
    for (int i = 0; i < 4; i++) lm_array_release(arr[i]);
}

static void test_rope(void **state)
{
    (void)state;
    for (int t = 0; t < NN_NDTYPES; t++) {
        lm_dtype dt = nn_dtypes[t];
        lm_array *x = nn_in("rope_x", dt), *xs = nn_strided(x);
        nn_check(lm_rope(x, 8, false, 10000, 1, 0), "rope_std", dt, "rope standard");
        nn_check(lm_rope(xs, 8, false, 10000, 1, 0), "rope_std", dt, "rope strided");
        nn_check(lm_rope(x, 8, true, 10000, 1, 0), "rope_trad", dt, "rope traditional");
        nn_check(lm_rope(x, 4, false, 500, 0.5, 3), "rope_partial", dt, "rope partial, offset, scale");
        lm_array *f = nn_in("rope_freqs", LM_F32), *pos = nn_in("rope_pos", LM_I32);
        nn_check(lm_rope_freqs(x, 4, true, f, 1, 2), "rope_freq", dt, "rope explicit freqs");
        int64_t ad[3] = {2, 2, 4};
        nn_check(lm_rope_multi(xs, pos, 3, ad, 10000, true), "rope_multi", dt, "rope multi-axis");
        lm_array *arr[] = {x, xs, f, pos};
        for (int i = 0; i < 4; i++) lm_array_release(arr[i]);
    }
}

/* angles that differ per batch (not broadcast on axis 0) pick the right rows */
static void test_rope_batch_angles(void **state)
{
    (void)state;
    lm_array *x = nn_in("rope_x", LM_F32);
    int64_t ash[4] = {2, 1, 5, 4};
    lm_array *lin = lm_linspace(-3, 7, 40, LM_F32, NULL), *ang = lm_reshape(lin, 4, ash);
    lm_array *y = lm_rope_angles(x, ang, 8, false);
    double *all = tu_read(y);
    for (int b = 0; b < 2; b++) {
        lm_array *xb = lm_slice(x, 0, b, b + 1, 1), *ab = lm_slice(ang, 0, b, b + 1, 1);
        lm_array *yb = lm_rope_angles(xb, ab, 8, false);
        double *v = tu_read(yb);
        for (int i = 0; i < 3 * 5 * 8; i++) assert_true(v[i] == all[b * 120 + i]);
        free(v);
        lm_array_release(xb);
        lm_array_release(ab);
        lm_array_release(yb);
    }
    free(all);
    lm_array *arr[] = {x, lin, ang, y};
    for (int i = 0; i < 4; i++) lm_array_release(arr[i]);
}

static void test_timestep_embedding(void **state)
{
    (void)state;
    lm_array *t = nn_in("ts_t", LM_F32);
    nn_check(lm_timestep_embedding(t, 16, 10000, true, 0, 1), "ts_a", LM_F32, "timestep embedding");
    nn_check(lm_timestep_embedding(t, 15, 10000, false, 1, 2), "ts_b", LM_F32, "timestep embedding odd");
    lm_array *t64 = nn_in("ts_t", LM_F64);
    nn_check(lm_timestep_embedding(t64, 16, 10000, true, 0, 1), "ts_a", LM_F64, "timestep embedding f64");
    lm_array_release(t);
    lm_array_release(t64);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention), cmocka_unit_test(test_attention_blocks),
        cmocka_unit_test(test_attention_masked_row), cmocka_unit_test(test_rope), cmocka_unit_test(test_rope_batch_angles),
        cmocka_unit_test(test_timestep_embedding),
    };
    nn_init();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
