/* test_cpu_conv.c - the CPU's choice of convolution algorithm: 3x3
 * stride-1 convolutions with enough channels run by Winograd F(2x2, 3x3)
 * (backends/cpu/nn_conv_wino.c), checked against the im2col + GEMM path
 * (LUMEN_CONV=im2col) and against a direct sum in double, over odd and even
 * sizes, paddings 0/1/2 and asymmetric, batches, bias, f16 inputs. */
#include "testutil.h"

static lm_array *randn(int nd, const int64_t *sh, uint64_t seed)
{
    lm_array *a = lm_random_normal(nd, sh, 0, 1, LM_F32, lm_random_key(seed), NULL);
    assert_int_equal(lm_array_eval(a), LM_OK);
    return a;
}

/* y[n][o][i][j] by the definition, in double */
static double direct(const float *x, const float *w, const float *b, int64_t C, int64_t H, int64_t W, int64_t n,
                     int64_t o, int64_t i, int64_t j, const int64_t *pad)
{
    double s = b ? b[o] : 0;
    for (int64_t c = 0; c < C; c++)
        for (int ky = 0; ky < 3; ky++)
            for (int kx = 0; kx < 3; kx++) {
                int64_t yy = i - pad[0] + ky, xx = j - pad[2] + kx;
                if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
                s += (double)x[((n * C + c) * H + yy) * W + xx] * w[((o * C + c) * 3 + ky) * 3 + kx];
            }
    return s;
}

static void check(int64_t N, int64_t C, int64_t O, int64_t H, int64_t W, const int64_t pad[4], bool bias,
                  lm_dtype dt)
{
    int64_t xs[4] = {N, C, H, W}, ws[4] = {O, C, 3, 3};
    lm_array *x0 = randn(4, xs, 1), *w = randn(4, ws, 2), *b = bias ? randn(1, &O, 3) : NULL;
    lm_array *x = lm_cast(x0, dt);
    setenv("LUMEN_CONV", "winograd", 1);
    lm_array *y = lm_conv2d(x, w, b, NULL, pad, NULL, 1);
    assert_non_null(y);
    assert_int_equal(lm_array_eval(y), LM_OK);
    setenv("LUMEN_CONV", "im2col", 1);
    lm_array *r = lm_conv2d(x, w, b, NULL, pad, NULL, 1);
    assert_int_equal(lm_array_eval(r), LM_OK);
    unsetenv("LUMEN_CONV");
    int64_t OH = y->shape[2], OW = y->shape[3], n = y->size;
    float *yv = malloc(4 * n), *rv = malloc(4 * n), *xv = malloc(4 * x->size), *wv = malloc(4 * w->size),
          bv[256];
    assert_int_equal(lm_array_read(y, yv, LM_F32), LM_OK);
    assert_int_equal(lm_array_read(r, rv, LM_F32), LM_OK);
    assert_int_equal(lm_array_read(x, xv, LM_F32), LM_OK);
    assert_int_equal(lm_array_read(w, wv, LM_F32), LM_OK);
    if (b) assert_int_equal(lm_array_read(b, bv, LM_F32), LM_OK);
    /* both algorithms within f32 accumulation error of each other, and of
     * the definition at sampled points */
    double scale = sqrt((double)C * 9) * 4;
    double rel = dt == LM_F16 ? 2e-3 : 0;   /* f16 outputs round to 11 bits */
    for (int64_t i = 0; i < n; i++)
        if (fabs(yv[i] - rv[i]) > 1e-6 * scale * 8 + rel * fabs(rv[i]))
            fail_msg("conv [%lld,%lld,%lld,%lld] -> %lld: winograd %.7g vs im2col %.7g at %lld", (long long)N,
                     (long long)C, (long long)H, (long long)W, (long long)O, yv[i], rv[i], (long long)i);
    for (int64_t i = 0; i < n; i += 37) {
        int64_t nn = i / (O * OH * OW), o = (i / (OH * OW)) % O, yy = (i / OW) % OH, xx = i % OW;
        double ref = direct(xv, wv, b ? bv : NULL, C, H, W, nn, o, yy, xx, pad);
        if (fabs(yv[i] - ref) > 1e-6 * scale * 8 + rel * fabs(ref))
            fail_msg("conv: winograd %.7g vs direct %.7g at (%lld,%lld,%lld,%lld)", yv[i], ref, (long long)nn,
                     (long long)o, (long long)yy, (long long)xx);
    }
    free(yv);
    free(rv);
    free(xv);
    free(wv);
    lm_array_release(y);
    lm_array_release(r);
    lm_array_release(x);
    lm_array_release(x0);
    lm_array_release(w);
    if (b) lm_array_release(b);
}

static void test_winograd_matches(void **state)
{
    (void)state;
    const int64_t p1[4] = {1, 1, 1, 1}, p0[4] = {0, 0, 0, 0}, p2[4] = {2, 2, 2, 2}, pa[4] = {0, 1, 2, 0};
    check(1, 16, 16, 8, 8, p1, false, LM_F32);
    check(1, 16, 32, 17, 13, p1, true, LM_F32);
    check(2, 24, 16, 9, 10, p0, false, LM_F32);
    check(1, 16, 20, 11, 7, p2, true, LM_F32);
    check(3, 16, 16, 12, 15, pa, false, LM_F32);
    check(1, 64, 32, 33, 31, p1, true, LM_F32);
    check(1, 16, 16, 3, 3, p0, false, LM_F32);   /* a single output pixel */
    check(1, 32, 16, 20, 20, p1, true, LM_F16);
}

static int setup(void **state)
{
    (void)state;
    if (lm_init() != LM_OK) return -1;
    lm_device_set_default(lm_device_cpu());
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_winograd_matches),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
