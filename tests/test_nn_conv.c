/* test_nn_conv.c - conv1d/conv2d/conv_transpose2d, pooling, upsampling and
 * pixel (un)shuffle against the PyTorch fixtures of tests/ref/gen_nn.py,
 * in f32, f64, f16 and bf16, on contiguous and strided inputs. */
#include "test_nn_util.h"

static const int64_t ONE[2] = {1, 1};

static void test_conv2d(void **state)
{
    (void)state;
    for (int t = 0; t < NN_NDTYPES; t++) {
        lm_dtype dt = nn_dtypes[t];
        lm_array *x = nn_in("conv_x", dt), *w = nn_in("conv_w", dt), *b = nn_in("conv_b", dt);
        lm_array *xs = nn_strided(x), *ws = nn_strided(w);
        int64_t p1[4] = {1, 1, 1, 1};
        nn_check(lm_conv2d(x, w, b, ONE, p1, ONE, 1), "conv_a", dt, "conv2d pad 1");
        nn_check(lm_conv2d(xs, ws, b, ONE, p1, ONE, 1), "conv_a", dt, "conv2d strided");
        int64_t st[2] = {2, 1}, pd[4] = {1, 2, 0, 1}, dl[2] = {1, 2};
        nn_check(lm_conv2d(x, w, NULL, st, pd, dl, 1), "conv_pad", dt, "conv2d explicit pad, stride, dilation");
        lm_array *wg = nn_in("conv_wg", dt), *wd = nn_in("conv_wd", dt), *w1 = nn_in("conv_w1", dt);
        int64_t s2[2] = {2, 2};
        nn_check(lm_conv2d(x, wg, b, s2, p1, ONE, 2), "conv_groups", dt, "conv2d groups");
        nn_check(lm_conv2d(xs, wd, NULL, ONE, p1, ONE, 4), "conv_depthwise", dt, "conv2d depthwise");
        nn_check(lm_conv2d(x, w1, NULL, NULL, NULL, NULL, 1), "conv_1x1", dt, "conv2d 1x1");
        nn_check(lm_conv2d(xs, w1, NULL, NULL, NULL, NULL, 1), "conv_1x1", dt, "conv2d 1x1 strided");
        lm_array *arr[] = {x, w, b, xs, ws, wg, wd, w1};
        for (size_t i = 0; i < sizeof arr / sizeof arr[0]; i++) lm_array_release(arr[i]);
    }
}

/* f32 activations with f16 / bf16 weights: computed in f32, result f32 */
static void test_conv2d_half_weights(void **state)
{
    (void)state;
    lm_array *x = nn_in("conv_x", LM_F32), *b = nn_in("conv_b", LM_F32);
    int64_t p1[4] = {1, 1, 1, 1};
    for (int k = 0; k < 2; k++) {
        lm_array *w = nn_in("conv_w", k ? LM_BF16 : LM_F16);
        lm_array *y = lm_conv2d(x, w, b, ONE, p1, ONE, 1);
        assert_int_equal(y->dtype, LM_F32);
        nn_check(y, "conv_a", LM_F32, "conv2d half weights");
        lm_array_release(w);
    }
    lm_array_release(x);
    lm_array_release(b);
}

static void test_conv1d(void **state)
{
    (void)state;
    for (int t = 0; t < NN_NDTYPES; t++) {
        lm_dtype dt = nn_dtypes[t];
        lm_array *x = nn_in("conv1d_x", dt), *w = nn_in("conv1d_w", dt), *b = nn_in("conv_b", dt);
        lm_array *xs = nn_strided(x);
        int64_t pad[2] = {1, 2};
        nn_check(lm_conv1d(x, w, b, 2, pad, 1, 1), "conv1d", dt, "conv1d");
        nn_check(lm_conv1d(xs, w, b, 2, pad, 1, 1), "conv1d", dt, "conv1d strided");
        lm_array_release(x);
        lm_array_release(w);
        lm_array_release(b);
        lm_array_release(xs);
    }
}

static void test_conv_transpose(void **state)
{
    (void)state;
    for (int t = 0; t < NN_NDTYPES; t++) {
        lm_dtype dt = nn_dtypes[t];
        lm_array *x = nn_in("convt_x", dt), *w = nn_in("convt_w", dt);
        lm_array *b = nn_in("convt_b", dt), *b6 = nn_in("convt_b6", dt), *xs = nn_strided(x);
        int64_t s2[2] = {2, 2}, p1[2] = {1, 1}, op[2] = {1, 1};
        nn_check(lm_conv_transpose2d(x, w, b, s2, p1, op, NULL, 1), "convt_a", dt, "conv_transpose2d");
        nn_check(lm_conv_transpose2d(xs, w, b, s2, p1, op, NULL, 1), "convt_a", dt, "conv_transpose2d strided");
        int64_t s12[2] = {1, 2}, p01[2] = {0, 1}, d21[2] = {2, 1};
        nn_check(lm_conv_transpose2d(x, w, b6, s12, p01, NULL, d21, 2), "convt_groups", dt,
                 "conv_transpose2d groups/dilation");
        lm_array *arr[] = {x, w, b, b6, xs};
        for (size_t i = 0; i < 5; i++) lm_array_release(arr[i]);
    }
}

static void test_pooling(void **state)
{
    (void)state;
    for (int t = 0; t < NN_NDTYPES; t++) {
        lm_dtype dt = nn_dtypes[t];
        lm_array *x = nn_in("pool_x", dt), *xs = nn_strided(x);
        int64_t k3[2] = {3, 3}, s2[2] = {2, 2}, p1[2] = {1, 1};
        nn_check(lm_max_pool2d(x, k3, s2, p1, NULL, false), "maxpool_a", dt, "max_pool2d");
        nn_check(lm_max_pool2d(xs, k3, s2, p1, NULL, false), "maxpool_a", dt, "max_pool2d strided");
        int64_t k32[2] = {3, 2}, s21[2] = {2, 1}, p10[2] = {1, 0}, d21[2] = {2, 1};
        nn_check(lm_max_pool2d(x, k32, s21, p10, d21, true), "maxpool_b", dt, "max_pool2d dilation ceil");
        nn_check(lm_avg_pool2d(x, k3, s2, p1, false, true, 0), "avgpool_a", dt, "avg_pool2d");
        nn_check(lm_avg_pool2d(xs, k3, s2, p1, true, false, 0), "avgpool_b", dt, "avg_pool2d ceil, no pad count");
        int64_t k2[2] = {2, 2};
        nn_check(lm_avg_pool2d(x, k2, NULL, NULL, false, true, 5), "avgpool_c", dt, "avg_pool2d divisor");
        int64_t o43[2] = {4, 3}, o57[2] = {5, 7};
        nn_check(lm_adaptive_avg_pool2d(x, o43), "adaptive_a", dt, "adaptive_avg_pool2d down");
        nn_check(lm_adaptive_avg_pool2d(xs, o57), "adaptive_b", dt, "adaptive_avg_pool2d overlapping");
        lm_array_release(x);
        lm_array_release(xs);
    }
}

static void test_upsample(void **state)
{
    (void)state;
    for (int t = 0; t < NN_NDTYPES; t++) {
        lm_dtype dt = nn_dtypes[t];
        lm_array *x = nn_in("up_x", dt), *xs = nn_strided(x);
        double s2[2] = {2, 2}, sf[2] = {1.5, 2.5};
        int64_t z811[2] = {8, 11}, z913[2] = {9, 13}, z34[2] = {3, 4};
        nn_check(lm_upsample(x, NULL, s2, LM_UPSAMPLE_NEAREST, false), "up_nearest_s2", dt, "nearest x2");
        nn_check(lm_upsample(xs, z811, NULL, LM_UPSAMPLE_NEAREST, false), "up_nearest_size", dt, "nearest size");
        nn_check(lm_upsample(x, NULL, s2, LM_UPSAMPLE_BILINEAR, false), "up_bilinear_s2", dt, "bilinear x2");
        nn_check(lm_upsample(xs, z913, NULL, LM_UPSAMPLE_BILINEAR, true), "up_bilinear_ac", dt,
                 "bilinear align_corners");
        nn_check(lm_upsample(x, NULL, sf, LM_UPSAMPLE_BILINEAR, false), "up_bilinear_frac", dt,
                 "bilinear fractional scale");
        nn_check(lm_upsample(x, z34, NULL, LM_UPSAMPLE_BILINEAR, false), "up_bilinear_down", dt,
                 "bilinear downsample");
        lm_array_release(x);
        lm_array_release(xs);
    }
}

static void test_pixel_shuffle(void **state)
{
    (void)state;
    for (int t = 0; t < NN_NDTYPES; t++) {
        lm_dtype dt = nn_dtypes[t];
        lm_array *x = nn_in("ps_x", dt), *y = nn_in("pu_x", dt), *ys = nn_strided(y);
        nn_check(lm_pixel_shuffle(x, 2), "pixel_shuffle", dt, "pixel_shuffle");
        nn_check(lm_pixel_unshuffle(ys, 2), "pixel_unshuffle", dt, "pixel_unshuffle strided");
        lm_array_release(x);
        lm_array_release(y);
        lm_array_release(ys);
    }
}

/* a larger conv checked against a naive loop: exercises several im2col
 * bands and the threaded GEMM */
static void test_conv_bands(void **state)
{
    (void)state;
    int64_t xs[4] = {1, 3, 70, 300}, wsh[4] = {5, 3, 3, 3};
    lm_array *x = lm_linspace(-1, 1, 3 * 70 * 300, LM_F32, NULL), *w = lm_linspace(-1, 1, 5 * 27, LM_F32, NULL);
    lm_array *x4 = lm_reshape(x, 4, xs), *w4 = lm_reshape(w, 4, wsh);
    int64_t p1[4] = {1, 1, 1, 1};
    lm_array *y = lm_conv2d(x4, w4, NULL, ONE, p1, ONE, 1);
    double *xv = tu_read(x4), *wv = tu_read(w4), *yv = tu_read(y);
    for (int64_t o = 0; o < 5; o++)
        for (int64_t i = 0; i < 70; i += 7)
            for (int64_t j = 0; j < 300; j += 13) {
                double s = 0;
                for (int c = 0; c < 3; c++)
                    for (int a = 0; a < 3; a++)
                        for (int bb = 0; bb < 3; bb++) {
                            int64_t ii = i + a - 1, jj = j + bb - 1;
                            if (ii >= 0 && ii < 70 && jj >= 0 && jj < 300)
                                s += xv[(c * 70 + ii) * 300 + jj] * wv[((o * 3 + c) * 3 + a) * 3 + bb];
                        }
                assert_true(fabs(yv[(o * 70 + i) * 300 + j] - s) < 1e-4);
            }
    free(xv);
    free(wv);
    free(yv);
    lm_array *arr[] = {x, w, x4, w4, y};
    for (int i = 0; i < 5; i++) lm_array_release(arr[i]);
}

/* integer images: max_pool2d and nearest upsampling keep u8 exactly */
static void test_integer_images(void **state)
{
    (void)state;
    uint8_t px[16];
    for (int i = 0; i < 16; i++) px[i] = (uint8_t)(i * 17 % 256);
    int64_t sh[4] = {1, 1, 4, 4}, k2[2] = {2, 2};
    double s2[2] = {2, 2};
    lm_array *x = lm_from_data(4, sh, LM_U8, px, NULL);
    lm_array *m = lm_max_pool2d(x, k2, NULL, NULL, NULL, false);
    lm_array *u = lm_upsample(x, NULL, s2, LM_UPSAMPLE_NEAREST, false);
    assert_int_equal(m->dtype, LM_U8);
    assert_int_equal(u->dtype, LM_U8);
    double *mv = tu_read(m), *uv = tu_read(u);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            int a = (2 * i) * 4 + 2 * j, best = 0;
            int cand[4] = {a, a + 1, a + 4, a + 5};
            for (int k = 0; k < 4; k++) if (px[cand[k]] > best) best = px[cand[k]];
            assert_true(mv[i * 2 + j] == best);
        }
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++) assert_true(uv[i * 8 + j] == px[(i / 2) * 4 + j / 2]);
    free(mv);
    free(uv);
    lm_array_release(x);
    lm_array_release(m);
    lm_array_release(u);
}

/* no input channels: an empty sum, so the output is the bias */
static void test_conv_empty_channels(void **state)
{
    (void)state;
    int64_t xs[4] = {1, 0, 4, 4}, ws[4] = {3, 0, 3, 3};
    lm_array *x = lm_zeros(4, xs, LM_F32, NULL), *w = lm_zeros(4, ws, LM_F32, NULL);
    lm_array *b = lm_linspace(1, 3, 3, LM_F32, NULL);
    lm_array *y = lm_conv2d(x, w, b, NULL, NULL, NULL, 1);
    double *v = tu_read(y);
    assert_int_equal(y->size, 3 * 2 * 2);
    for (int i = 0; i < 12; i++) assert_true(v[i] == 1 + i / 4);
    free(v);
    lm_array *arr[] = {x, w, b, y};
    for (int i = 0; i < 4; i++) lm_array_release(arr[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv2d), cmocka_unit_test(test_conv2d_half_weights),
        cmocka_unit_test(test_conv1d), cmocka_unit_test(test_conv_transpose),
        cmocka_unit_test(test_pooling), cmocka_unit_test(test_upsample),
        cmocka_unit_test(test_pixel_shuffle), cmocka_unit_test(test_conv_bands),
        cmocka_unit_test(test_conv_empty_channels), cmocka_unit_test(test_integer_images),
    };
    nn_init();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
