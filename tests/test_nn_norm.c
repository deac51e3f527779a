/* test_nn_norm.c - softmax, log_softmax, layer/rms/group/batch norm,
 * l2_normalize, linear, SwiGLU/GEGLU and embedding against the PyTorch
 * fixtures of tests/ref/gen_nn.py, in four float dtypes, contiguous and
 * strided. */
#include "test_nn_util.h"

static void test_softmax(void **state)
{
    (void)state;
    for (int t = 0; t < NN_NDTYPES; t++) {
        lm_dtype dt = nn_dtypes[t];
        lm_array *x = nn_in("sm_x", dt), *xs = nn_strided(x);
        nn_check(lm_softmax(x, -1), "softmax_2", dt, "softmax last axis");
        nn_check(lm_softmax(xs, -1), "softmax_2", dt, "softmax strided");
        nn_check(lm_softmax(x, 1), "softmax_1", dt, "softmax middle axis");
        nn_check(lm_softmax(xs, 0), "softmax_0", dt, "softmax first axis strided");
        nn_check(lm_log_softmax(x, -1), "log_softmax_2", dt, "log_softmax");
        nn_check(lm_log_softmax(xs, 1), "log_softmax_1", dt, "log_softmax middle strided");
        lm_array *big = lm_binary_scalar(LM_OP_MUL, x, 64, false);
        nn_check(lm_softmax(big, -1), "softmax_big", dt, "softmax large values");
        lm_array_release(big);
        lm_array_release(x);
        lm_array_release(xs);
    }
}

/* softmax over a long row (vector loop + tail) and rows of -inf / NaN */
static void test_softmax_edges(void **state)
{
    (void)state;
    lm_array *x = lm_linspace(-20, 20, 1003, LM_F32, NULL);
    lm_array *y = lm_softmax(x, 0);
    double *v = tu_read(y), s = 0, m = 0;
    for (int i = 0; i < 1003; i++) s += v[i];
    assert_true(fabs(s - 1) < 1e-5);
    for (int i = 0; i < 1003; i++) m += exp(-20 + 40.0 * i / 1002 - 20);
    assert_true(fabs(v[1002] - 1 / m) < 1e-6);
    free(v);
    float d[2][4] = {{-INFINITY, -INFINITY, -INFINITY, -INFINITY}, {1, NAN, 2, 3}};
    int64_t sh[2] = {2, 4};
    lm_array *z = lm_from_data(2, sh, LM_F32, d, NULL), *zs = lm_softmax(z, -1);
    v = tu_read(zs);
    for (int i = 0; i < 8; i++) assert_true(isnan(v[i]));   /* as PyTorch */
    free(v);
    lm_array *arr[] = {x, y, z, zs};
    for (int i = 0; i < 4; i++) lm_array_release(arr[i]);
}

static void test_layer_rms_norm(void **state)
{
    (void)state;
    for (int t = 0; t < NN_NDTYPES; t++) {
        lm_dtype dt = nn_dtypes[t];
        lm_array *x = nn_in("ln_x", dt), *xs = nn_strided(x), *w = nn_in("ln_w", dt), *b = nn_in("ln_b", dt);
        nn_check(lm_layer_norm(x, 1, w, b, 1e-5), "layer_norm_affine", dt, "layer_norm affine");
        nn_check(lm_layer_norm(xs, 1, w, b, 1e-5), "layer_norm_affine", dt, "layer_norm strided");
        nn_check(lm_layer_norm(xs, 2, NULL, NULL, 1e-5), "layer_norm_2", dt, "layer_norm two axes");
        nn_check(lm_layer_norm(x, 1, w, NULL, 1e-5), "layer_norm_w", dt, "layer_norm weight only");
        nn_check(lm_rms_norm(x, 1, w, 1e-6), "rms_norm_w", dt, "rms_norm");
        nn_check(lm_rms_norm(xs, 2, NULL, 1e-6), "rms_norm_2", dt, "rms_norm two axes strided");
        lm_array *arr[] = {x, xs, w, b};
        for (int i = 0; i < 4; i++) lm_array_release(arr[i]);
    }
}

static void test_group_batch_norm(void **state)
{
    (void)state;
    for (int t = 0; t < NN_NDTYPES; t++) {
        lm_dtype dt = nn_dtypes[t];
        lm_array *x = nn_in("gn_x", dt), *xs = nn_strided(x), *w = nn_in("gn_w", dt), *b = nn_in("gn_b", dt);
        lm_array *x3 = nn_in("gn_x3", dt);
        nn_check(lm_group_norm(x, 3, w, b, 1e-5), "group_norm_affine", dt, "group_norm");
        nn_check(lm_group_norm(xs, 3, w, b, 1e-5), "group_norm_affine", dt, "group_norm strided");
        nn_check(lm_group_norm(x, 6, NULL, NULL, 1e-5), "group_norm_6", dt, "group_norm per channel");
        nn_check(lm_group_norm(x3, 2, NULL, NULL, 1e-5), "group_norm_3d", dt, "group_norm 3-D");
        lm_array *bx = nn_in("bn_x", dt), *bm = nn_in("bn_mean", dt), *bv = nn_in("bn_var", dt);
        lm_array *w3 = lm_slice(w, 0, 0, 3, 1), *b3 = lm_slice(b, 0, 0, 3, 1);
        nn_check(lm_batch_norm(bx, bm, bv, w3, b3, 1e-5), "batch_norm", dt, "batch_norm");
        lm_array *l2 = nn_in("l2_x", dt), *l2s = nn_strided(l2);
        nn_check(lm_l2_normalize(l2, -1, 1e-12), "l2_normalize_1", dt, "l2_normalize");
        nn_check(lm_l2_normalize(l2s, 0, 1e-12), "l2_normalize_0", dt, "l2_normalize axis 0 strided");
        lm_array *arr[] = {x, xs, w, b, x3, bx, bm, bv, w3, b3, l2, l2s};
        for (int i = 0; i < 12; i++) lm_array_release(arr[i]);
    }
}

/* a long group-norm row with a large mean: the chunked statistics stay exact */
static void test_norm_long_rows(void **state)
{
    (void)state;
    int64_t sh[3] = {1, 4, 30000};
    lm_array *r = lm_linspace(1000, 1001, 4 * 30000, LM_F32, NULL), *x = lm_reshape(r, 3, sh);
    lm_array *y = lm_group_norm(x, 2, NULL, NULL, 0);
    double *v = tu_read(y), s = 0, q = 0;
    for (int i = 0; i < 60000; i++) { s += v[i]; q += v[i] * v[i]; }
    assert_true(fabs(s / 60000) < 1e-3);
    assert_true(fabs(q / 60000 - 1) < 1e-2);
    free(v);
    lm_array_release(r);
    lm_array_release(x);
    lm_array_release(y);
}

/* outputs of 16 MB and more are written with streaming stores; rows of odd
 * length start unaligned.  Rows of the big result must equal the same op on
 * a small copy of those rows (the cached path). */
static void test_streaming_outputs(void **state)
{
    (void)state;
    int64_t sh[2] = {601, 7001};
    lm_array *f = lm_linspace(-4, 4, 601 * 7001, LM_F32, NULL), *x = lm_reshape(f, 2, sh);
    lm_array *sl = lm_slice(x, 0, 297, 300, 1), *small = lm_contiguous(sl);
    for (int k = 0; k < 3; k++) {
        lm_array *big = k == 0 ? lm_softmax(x, -1) : k == 1 ? lm_layer_norm(x, 1, NULL, NULL, 1e-5)
                      : lm_rms_norm(x, 1, NULL, 1e-6);
        lm_array *ref = k == 0 ? lm_softmax(small, -1) : k == 1 ? lm_layer_norm(small, 1, NULL, NULL, 1e-5)
                      : lm_rms_norm(small, 1, NULL, 1e-6);
        lm_array *part = lm_slice(big, 0, 297, 300, 1);
        double *a = tu_read(part), *b = tu_read(ref);
        for (int64_t i = 0; i < 3 * 7001; i++) assert_true(a[i] == b[i]);
        free(a);
        free(b);
        lm_array_release(big);
        lm_array_release(ref);
        lm_array_release(part);
    }
    lm_array *arr[] = {f, x, sl, small};
    for (int i = 0; i < 4; i++) lm_array_release(arr[i]);
}

/* broadcast inputs (stride 0) read like their materialized copies */
static void test_broadcast_inputs(void **state)
{
    (void)state;
    lm_array *x = nn_in("ln_x", LM_F32), *w = nn_in("ln_w", LM_F32);
    lm_array *one = lm_slice(x, 0, 1, 2, 1);                    /* [1, 6, 8] */
    int64_t sh[3] = {4, 6, 8};
    lm_array *bc = lm_broadcast_to(one, 3, sh), *mat = lm_contiguous(bc);
    for (int k = 0; k < 3; k++) {
        lm_array *a = k == 0 ? lm_softmax(bc, 1) : k == 1 ? lm_layer_norm(bc, 1, w, NULL, 1e-5)
                    : lm_group_norm(bc, 2, NULL, NULL, 1e-5);
        lm_array *b = k == 0 ? lm_softmax(mat, 1) : k == 1 ? lm_layer_norm(mat, 1, w, NULL, 1e-5)
                    : lm_group_norm(mat, 2, NULL, NULL, 1e-5);
        double *va = tu_read(a), *vb = tu_read(b);
        for (int i = 0; i < 4 * 6 * 8; i++) assert_true(va[i] == vb[i]);
        free(va);
        free(vb);
        lm_array_release(a);
        lm_array_release(b);
    }
    lm_array *arr[] = {x, w, one, bc, mat};
    for (int i = 0; i < 5; i++) lm_array_release(arr[i]);
}

static void test_linear_gates_embedding(void **state)
{
    (void)state;
    for (int t = 0; t < NN_NDTYPES; t++) {
        lm_dtype dt = nn_dtypes[t];
        lm_array *x = nn_in("lin_x", dt), *w = nn_in("lin_w", dt), *b = nn_in("lin_b", dt), *xs = nn_strided(x);
        nn_check(lm_linear(x, w, b), "linear", dt, "linear");
        nn_check(lm_linear(xs, w, b), "linear", dt, "linear strided");
        lm_array *g = nn_in("glu_x", dt), *parts[2];
        assert_int_equal(lm_split(g, 2, NULL, 0, -1, parts, 2), 2);
        nn_check(lm_swiglu(g, NULL), "swiglu", dt, "swiglu split");
        nn_check(lm_swiglu(parts[0], parts[1]), "swiglu", dt, "swiglu two tensors");
        nn_check(lm_geglu(g, NULL), "geglu", dt, "geglu");
        nn_check(lm_leaky_relu(g, 0.2), "leaky_relu", dt, "leaky_relu");
        lm_array *ew = nn_in("emb_w", dt), *ei = nn_in("emb_idx", LM_I32);
        nn_check(lm_embedding(ew, ei), "embedding", dt, "embedding");
        lm_array *arr[] = {x, w, b, xs, g, parts[0], parts[1], ew, ei};
        for (int i = 0; i < 9; i++) lm_array_release(arr[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_softmax), cmocka_unit_test(test_softmax_edges),
        cmocka_unit_test(test_layer_rms_norm), cmocka_unit_test(test_group_batch_norm),
        cmocka_unit_test(test_norm_long_rows), cmocka_unit_test(test_streaming_outputs),
        cmocka_unit_test(test_broadcast_inputs), cmocka_unit_test(test_linear_gates_embedding),
    };
    nn_init();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
