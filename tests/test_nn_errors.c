/* test_nn_errors.c - bad arguments to the NN builders fail cleanly with a
 * status and a message that names the op and the shapes involved. */
#include "test_nn_util.h"

static lm_array *z(int nd, int64_t a, int64_t b, int64_t c, int64_t d)
{
    int64_t sh[4] = {a, b, c, d};
    return lm_zeros(nd, sh, LM_F32, NULL);
}

static void test_conv_errors(void **state)
{
    (void)state;
    lm_array *x = z(4, 1, 4, 5, 5), *w = z(4, 6, 4, 7, 7), *wg = z(4, 6, 3, 3, 3), *w3 = z(3, 6, 4, 3, 0);
    nn_expect_error(lm_conv2d(x, w, NULL, NULL, NULL, NULL, 1), LM_ERR_SHAPE,
                    "conv2d: kernel 7x7 (dilated) is larger than the padded input 5x5 (input f32[1,4,5,5]");
    nn_expect_error(lm_conv2d(x, wg, NULL, NULL, NULL, NULL, 2), LM_ERR_SHAPE,
                    "conv2d: groups=2 do not fit input f32[1,4,5,5] and weight f32[6,3,3,3]");
    nn_expect_error(lm_conv2d(x, w3, NULL, NULL, NULL, NULL, 1), LM_ERR_SHAPE, "conv2d: weight must have 4");
    lm_array *b = z(1, 5, 0, 0, 0), *w1 = z(4, 6, 4, 1, 1);
    nn_expect_error(lm_conv2d(x, w1, b, NULL, NULL, NULL, 1), LM_ERR_SHAPE, "conv2d: bias must have shape [6]");
    int64_t s0[2] = {0, 1};
    nn_expect_error(lm_conv2d(x, w1, NULL, s0, NULL, NULL, 1), LM_ERR_ARG, "conv2d: stride must be >= 1");
    lm_array *x3 = z(3, 1, 4, 2, 0), *wk = z(3, 6, 4, 5, 0);
    nn_expect_error(lm_conv1d(x3, wk, NULL, 1, NULL, 1, 1), LM_ERR_SHAPE, "conv1d: kernel 1x5");
    lm_array *wt = z(4, 3, 2, 3, 3);
    nn_expect_error(lm_conv_transpose2d(x, wt, NULL, NULL, NULL, NULL, NULL, 1), LM_ERR_SHAPE,
                    "conv_transpose2d: groups=1 do not fit input f32[1,4,5,5] and weight f32[3,2,3,3]");
    lm_array *arr[] = {x, w, wg, w3, b, w1, x3, wk, wt};
    for (int i = 0; i < 9; i++) lm_array_release(arr[i]);
}

static void test_pool_resample_errors(void **state)
{
    (void)state;
    lm_array *x = z(4, 1, 2, 3, 3), *x3 = z(3, 2, 3, 3, 0);
    int64_t k5[2] = {5, 5}, k2[2] = {2, 2}, p2[2] = {2, 2};
    nn_expect_error(lm_max_pool2d(x, k5, NULL, NULL, NULL, false), LM_ERR_SHAPE,
                    "max_pool2d: kernel 5 (dilated 5) is larger than the padded input f32[1,2,3,3]");
    nn_expect_error(lm_avg_pool2d(x, k2, NULL, p2, false, true, 0), LM_ERR_ARG,
                    "avg_pool2d: padding 2 must be at most half the kernel 2");
    nn_expect_error(lm_max_pool2d(x3, k2, NULL, NULL, NULL, false), LM_ERR_SHAPE,
                    "max_pool2d: input must have 4 dimensions, got f32[2,3,3]");
    double s[2] = {2, 2};
    int64_t sz[2] = {4, 4};
    nn_expect_error(lm_upsample(x, sz, s, LM_UPSAMPLE_NEAREST, false), LM_ERR_ARG, "upsample: give exactly one");
    nn_expect_error(lm_pixel_shuffle(x, 2), LM_ERR_SHAPE, "pixel_shuffle: channels of f32[1,2,3,3] must be divisible by 2^2");
    nn_expect_error(lm_pixel_unshuffle(x, 2), LM_ERR_SHAPE, "pixel_unshuffle: height and width of f32[1,2,3,3]");
    lm_array_release(x);
    lm_array_release(x3);
}

static void test_norm_errors(void **state)
{
    (void)state;
    lm_array *x = z(3, 2, 6, 8, 0), *w = z(1, 7, 0, 0, 0);
    nn_expect_error(lm_layer_norm(x, 1, w, NULL, 1e-5), LM_ERR_SHAPE,
                    "layer_norm: weight f32[7] does not match the last 1 axes of input f32[2,6,8]");
    nn_expect_error(lm_layer_norm(x, 4, NULL, NULL, 1e-5), LM_ERR_ARG, "layer_norm: cannot normalize over the last 4 axes");
    nn_expect_error(lm_group_norm(x, 4, NULL, NULL, 1e-5), LM_ERR_SHAPE,
                    "group_norm: 4 groups do not divide the 6 channels of f32[2,6,8]");
    nn_expect_error(lm_softmax(x, 3), LM_ERR_ARG, "softmax: axis 3 out of range for 3 dimensions");
    nn_expect_error(lm_rms_norm(x, 1, w, 1e-6), LM_ERR_SHAPE, "rms_norm: weight f32[7]");
    lm_array *lw = z(2, 4, 9, 0, 0);
    nn_expect_error(lm_linear(x, lw, NULL), LM_ERR_SHAPE,
                    "linear: input f32[2,6,8] does not fit weight f32[4,9]");
    lm_array *odd = z(2, 3, 5, 0, 0);
    nn_expect_error(lm_swiglu(odd, NULL), LM_ERR_SHAPE, "swiglu: the last axis of f32[3,5] must split");
    lm_array *bad = z(2, 3, 4, 0, 0), *g2 = z(2, 3, 5, 0, 0);
    nn_expect_error(lm_geglu(bad, g2), LM_ERR_SHAPE, "geglu");
    lm_array *arr[] = {x, w, lw, odd, bad, g2};
    for (int i = 0; i < 6; i++) lm_array_release(arr[i]);
}

static void test_attention_errors(void **state)
{
    (void)state;
    lm_array *q = z(4, 1, 6, 5, 8), *k = z(4, 1, 4, 7, 8), *v = z(4, 1, 4, 7, 3);
    nn_expect_error(lm_attention(q, k, v, NULL, false, 0), LM_ERR_SHAPE,
                    "attention: 6 query heads are not a multiple of 4 key/value heads (q f32[1,6,5,8], k f32[1,4,7,8])");
    lm_array *k2 = z(4, 1, 2, 7, 4);
    nn_expect_error(lm_attention(q, k2, v, NULL, false, 0), LM_ERR_SHAPE,
                    "attention: q f32[1,6,5,8], k f32[1,2,7,4], v f32[1,4,7,3] do not fit");
    lm_array *k3 = z(4, 1, 2, 7, 8), *v3 = z(4, 1, 2, 7, 3), *m = z(2, 5, 6, 0, 0);
    nn_expect_error(lm_attention(q, k3, v3, m, false, 0), LM_ERR_SHAPE,
                    "attention: mask f32[5,6] cannot broadcast to the scores [1,6,5,7]");
    lm_array *x = z(4, 1, 2, 5, 8);
    nn_expect_error(lm_rope(x, 10, false, 10000, 1, 0), LM_ERR_ARG,
                    "rope: rotary dims 10 must be even, positive and at most D of f32[1,2,5,8]");
    lm_array *ang = z(2, 4, 4, 0, 0);
    nn_expect_error(lm_rope_angles(x, ang, 8, false), LM_ERR_SHAPE,
                    "rope: angles f32[4,4] do not broadcast to [..., L, dims/2] of input f32[1,2,5,8]");
    lm_array *arr[] = {q, k, v, k2, k3, v3, m, x, ang};
    for (int i = 0; i < 9; i++) lm_array_release(arr[i]);
}

static void test_index_errors(void **state)
{
    (void)state;
    lm_array *x = z(2, 3, 4, 0, 0), *v = NULL, *i = NULL;
    assert_int_equal(lm_topk(x, 5, -1, true, &v, &i), LM_ERR_ARG);
    assert_null(v);
    assert_non_null(strstr(lm_error_message(), "topk: k=5 out of range for axis 1 of f32[3,4]"));
    int64_t ish[2] = {4, 2};
    lm_array *idx = lm_zeros(2, ish, LM_I64, NULL), *fidx = z(2, 3, 4, 0, 0);
    nn_expect_error(lm_scatter(x, 1, idx, x), LM_ERR_SHAPE, "scatter: index i64[4,2] must have the dimensions of input f32[3,4]");
    nn_expect_error(lm_scatter_add(x, 1, fidx, x), LM_ERR_DTYPE, "scatter_add: indices must be integers, got f32[3,4]");
    nn_expect_error(lm_one_hot(x, 3), LM_ERR_DTYPE, "one_hot: indices must be integers");
    nn_expect_error(lm_one_hot(idx, 0), LM_ERR_ARG, "one_hot: num_classes must be > 0");
    lm_array *one = z(1, 4, 0, 0, 0);
    nn_expect_error(lm_tril(one, 0), LM_ERR_SHAPE, "tril: input must have at least 2 dimensions, got f32[4]");
    nn_expect_error(lm_embedding(x, x), LM_ERR_ARG, "embedding: want weight [V, D] and integer indices");
    /* NULL inputs fail cleanly (an earlier builder failed) */
    assert_null(lm_conv2d(NULL, x, NULL, NULL, NULL, NULL, 1));
    assert_null(lm_attention(x, NULL, x, NULL, false, 0));
    assert_null(lm_softmax(NULL, 0));
    lm_array *arr[] = {x, idx, fidx, one};
    for (int k = 0; k < 4; k++) lm_array_release(arr[k]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_errors), cmocka_unit_test(test_pool_resample_errors),
        cmocka_unit_test(test_norm_errors), cmocka_unit_test(test_attention_errors),
        cmocka_unit_test(test_index_errors),
    };
    nn_init();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
