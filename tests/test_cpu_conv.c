/* test_cpu_conv.c - the CPU's choice of convolution algorithm: 3x3
 * stride-1 convolutions with enough channels run by Winograd F(2x2, 3x3)
 * (backends/cpu/nn_conv_wino.c), checked against the im2col + GEMM path
 * (LUMEN_CONV=im2col) and against a direct sum in double, over odd and even
 * sizes, paddings 0/1/2 and asymmetric, batches, bias, f16 inputs; an Inf or
 * NaN in x or w takes im2col.  Then the
 * weights prepared once (backends/cpu/conv_pack.c): the same bits with the
 * cache as without it, over repeated calls, in-place writes to the weight,
 * a freed weight whose buffer serves the next one, views, dtypes, the
 * size cap. */
#include "testutil.h"
#include "backends/cpu/nn.h"

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

/* ---- weights prepared once ---- */

/* conv2d(x, w) evaluated, its bits into out (f32, y->size elements) */
static int64_t conv_bits(lm_array *x, lm_array *w, const int64_t *pad, float **out, bool transpose)
{
    lm_array *y = transpose ? lm_conv_transpose2d(x, w, NULL, NULL, pad, NULL, NULL, 1)
                            : lm_conv2d(x, w, NULL, NULL, pad, NULL, 1);
    assert_non_null(y);
    assert_int_equal(lm_array_eval(y), LM_OK);
    int64_t n = y->size;
    *out = malloc(sizeof(float) * (size_t)n);
    assert_int_equal(lm_array_read(y, *out, LM_F32), LM_OK);
    lm_array_release(y);
    return n;
}

/* the conv with the cache, twice (the second a hit), bitwise equal to the
 * conv without it; returns the cache's misses during the first call */
static int64_t check_cached(lm_array *x, lm_array *w, const int64_t *pad, bool transpose)
{
    float *ref, *a, *b;
    setenv("LUMEN_CONV_PACK", "0", 1);
    int64_t n = conv_bits(x, w, pad, &ref, transpose);
    unsetenv("LUMEN_CONV_PACK");
    int64_t h0, m0, h1, m1, h2, m2;
    lm_cpu_pack_stats(&h0, &m0, NULL, NULL);
    conv_bits(x, w, pad, &a, transpose);
    lm_cpu_pack_stats(&h1, &m1, NULL, NULL);
    conv_bits(x, w, pad, &b, transpose);
    lm_cpu_pack_stats(&h2, &m2, NULL, NULL);
    assert_memory_equal(a, ref, sizeof(float) * (size_t)n);
    assert_memory_equal(b, ref, sizeof(float) * (size_t)n);
    /* what the first call kept or found, the second found */
    assert_int_equal(m2, m1);
    assert_int_equal(h2 - h1, (m1 - m0) + (h1 - h0));
    free(ref);
    free(a);
    free(b);
    return m1 - m0;
}

static const int64_t PAD1[4] = {1, 1, 1, 1};

/* An Inf or NaN in x (or w) reaches only the outputs whose window holds it:
 * such convolutions take im2col (Winograd's transforms would spread it over
 * whole tiles), so they equal LUMEN_CONV=im2col bit for bit */
static void test_winograd_nonfinite(void **state)
{
    (void)state;
    int64_t xs[4] = {1, 16, 8, 8}, ws[4] = {16, 16, 3, 3}, pad[4] = {1, 1, 1, 1};
    float bad[2] = {INFINITY, NAN};
    for (int k = 0; k < 4; k++) {
        lm_array *x = randn(4, xs, 11), *w = randn(4, ws, 12);
        float *xv = malloc(4 * x->size), *wv = malloc(4 * w->size);
        assert_int_equal(lm_array_read(x, xv, LM_F32), LM_OK);
        assert_int_equal(lm_array_read(w, wv, LM_F32), LM_OK);
        bool in_w = k >= 2;
        if (in_w) wv[(2 * 16 + 5) * 9 + 4] = bad[k % 2];   /* output channel 2 */
        else xv[(3 * 8 + 4) * 8 + 4] = bad[k % 2];          /* channel 3, pixel (4, 4) */
        lm_array *xb = lm_from_data(4, xs, LM_F32, xv, NULL), *wb = lm_from_data(4, ws, LM_F32, wv, NULL);
        lm_array *y = lm_conv2d(xb, wb, NULL, NULL, pad, NULL, 1);
        assert_int_equal(lm_array_eval(y), LM_OK);
        setenv("LUMEN_CONV", "im2col", 1);
        lm_array *r = lm_conv2d(xb, wb, NULL, NULL, pad, NULL, 1);
        assert_int_equal(lm_array_eval(r), LM_OK);
        unsetenv("LUMEN_CONV");
        float yv[16 * 64], rv[16 * 64];
        assert_int_equal(lm_array_read(y, yv, LM_F32), LM_OK);
        assert_int_equal(lm_array_read(r, rv, LM_F32), LM_OK);
        assert_memory_equal(yv, rv, sizeof yv);
        for (int o = 0; o < 16; o++)
            for (int i = 0; i < 8; i++)
                for (int j = 0; j < 8; j++) {
                    bool touched = in_w ? o == 2 : (abs(i - 4) <= 1 && abs(j - 4) <= 1);
                    assert_true(isfinite(yv[(o * 8 + i) * 8 + j]) == !touched);
                }
        lm_array *arrs[] = {x, w, xb, wb, y, r};
        for (int i = 0; i < 6; i++) lm_array_release(arrs[i]);
        free(xv);
        free(wv);
    }
}

static void test_pack_repeat_and_write(void **state)
{
    (void)state;
    int64_t xs[4] = {1, 32, 12, 12}, ws[4] = {32, 32, 3, 3};
    lm_array *x = randn(4, xs, 11), *w = randn(4, ws, 12);
    assert_int_equal(check_cached(x, w, PAD1, false), 1);   /* Winograd's filters */
    int64_t e0;
    size_t b0;
    lm_cpu_pack_stats(NULL, NULL, &e0, &b0);
    assert_true(e0 >= 1);
    assert_true(b0 >= NN_WINO_BYTES(32, 32));
    /* an in-place write (a training step) drops the entry: the next call
     * sees the new weights, not the old transform */
    float *before;
    int64_t n = conv_bits(x, w, PAD1, &before, false);
    lm_array *w2 = lm_binary_scalar(LM_OP_MUL, w, -0.5, false);
    assert_int_equal(lm_array_assign(w, w2), LM_OK);
    lm_array_release(w2);
    int64_t e1;
    lm_cpu_pack_stats(NULL, NULL, &e1, NULL);
    assert_int_equal(e1, e0 - 1);
    assert_int_equal(check_cached(x, w, PAD1, false), 1);
    float *after;
    conv_bits(x, w, PAD1, &after, false);
    /* -0.5 is exact in binary: every output is -0.5 times the old one */
    for (int64_t i = 0; i < n; i++) assert_true(after[i] == -0.5f * before[i]);
    free(before);
    free(after);
    /* a write into part of the buffer (a view of it) drops it as well */
    lm_array *row = lm_slice(w, 0, 0, 1, 1);
    lm_array *z = lm_scalar(0, LM_F32, NULL);
    assert_int_equal(lm_array_eval(row), LM_OK);
    assert_int_equal(lm_array_assign(row, z), LM_OK);
    assert_int_equal(check_cached(x, w, PAD1, false), 1);
    conv_bits(x, w, PAD1, &after, false);
    for (int64_t i = 0; i < 12 * 12; i++) assert_true(after[i] == 0.0f);   /* output channel 0 */
    free(after);
    lm_array_release(row);
    lm_array_release(z);
    lm_array_release(x);
    lm_array_release(w);
}

/* a freed weight's entry goes with it; the next weight of the same size
 * gets the same buffer from the core's cache and must not see the old
 * transform */
static void test_pack_free_and_reuse(void **state)
{
    (void)state;
    int64_t xs[4] = {1, 16, 10, 10}, ws[4] = {16, 16, 3, 3};
    lm_array *x = randn(4, xs, 21), *w = randn(4, ws, 22);
    check_cached(x, w, PAD1, false);
    int64_t e0, e1;
    lm_cpu_pack_stats(NULL, NULL, &e0, NULL);
    lm_buffer *old = w->buf;
    void *host = old->host;
    lm_array_release(w);
    lm_cpu_pack_stats(NULL, NULL, &e1, NULL);
    assert_int_equal(e1, e0 - 1);
    w = randn(4, ws, 23);
    assert_ptr_equal(w->buf, old);      /* the same struct and memory, new contents */
    assert_ptr_equal(w->buf->host, host);
    assert_int_equal(check_cached(x, w, PAD1, false), 1);
    lm_array_release(w);
    lm_array_release(x);
}

/* views of one buffer: a permuted (HWIO stored) weight, and two halves of
 * one tensor, each its own entry */
static void test_pack_views(void **state)
{
    (void)state;
    int64_t xs[4] = {1, 16, 9, 11}, hs[4] = {3, 3, 16, 32}, big[4] = {64, 16, 3, 3};
    lm_array *x = randn(4, xs, 31), *hwio = randn(4, hs, 32), *wb = randn(4, big, 33);
    int perm[4] = {3, 2, 0, 1};
    lm_array *w = lm_permute(hwio, perm);
    assert_int_equal(lm_array_eval(w), LM_OK);
    assert_false(lm_array_is_contiguous(w));
    assert_int_equal(check_cached(x, w, PAD1, false), 1);
    lm_array *lo = lm_slice(wb, 0, 0, 32, 1), *hi = lm_slice(wb, 0, 32, 64, 1);
    assert_int_equal(lm_array_eval(lo), LM_OK);
    assert_int_equal(lm_array_eval(hi), LM_OK);
    assert_ptr_equal(lo->buf, hi->buf);
    assert_int_equal(check_cached(x, lo, PAD1, false), 1);
    assert_int_equal(check_cached(x, hi, PAD1, false), 1);
    float *a, *b;
    int64_t n = conv_bits(x, lo, PAD1, &a, false);
    conv_bits(x, hi, PAD1, &b, false);
    assert_true(memcmp(a, b, sizeof(float) * (size_t)n) != 0);
    free(a);
    free(b);
    lm_array_release(lo);
    lm_array_release(hi);
    lm_array_release(w);
    lm_array_release(hwio);
    lm_array_release(wb);
    lm_array_release(x);
}

/* f16 and bf16 weights (converted once), f64 (im2col) with a strided
 * weight, an f16 conv, conv_transpose2d with f16 weights */
static void test_pack_dtypes(void **state)
{
    (void)state;
    int64_t xs[4] = {1, 16, 8, 8}, ws[4] = {16, 16, 3, 3}, ts[4] = {16, 8, 3, 3};
    lm_array *x = randn(4, xs, 41), *w = randn(4, ws, 42), *wt = randn(4, ts, 43);
    lm_dtype dts[2] = {LM_F16, LM_BF16};
    for (int i = 0; i < 2; i++) {
        lm_array *wh = lm_cast(w, dts[i]);
        assert_int_equal(lm_array_eval(wh), LM_OK);
        assert_int_equal(check_cached(x, wh, PAD1, false), 1);   /* f32 conv: Winograd from f16 */
        lm_array *xh = lm_cast(x, dts[i]);
        assert_int_equal(lm_array_eval(xh), LM_OK);
        assert_int_equal(check_cached(xh, wh, PAD1, false), 0);  /* the entry above serves it */
        lm_array_release(xh);
        lm_array_release(wh);
    }
    /* 1x1 f64 by a strided weight: an f64 copy, kept */
    lm_array *x64 = lm_cast(x, LM_F64), *w64 = lm_cast(w, LM_F64);
    assert_int_equal(lm_array_eval(x64), LM_OK);
    assert_int_equal(lm_array_eval(w64), LM_OK);
    lm_array *w11 = lm_slice(w64, 2, 1, 2, 1);
    lm_array *w1 = lm_slice(w11, 3, 1, 2, 1);
    assert_int_equal(lm_array_eval(w1), LM_OK);
    const int64_t p0[4] = {0, 0, 0, 0};
    assert_int_equal(check_cached(x64, w1, p0, false), 1);
    assert_int_equal(check_cached(x64, w64, PAD1, false), 0);   /* contiguous f64: its own memory */
    lm_array *th = lm_cast(wt, LM_F16);
    assert_int_equal(lm_array_eval(th), LM_OK);
    assert_int_equal(check_cached(x, th, PAD1, true), 1);
    lm_array_release(th);
    lm_array_release(w1);
    lm_array_release(w11);
    lm_array_release(x64);
    lm_array_release(w64);
    lm_array_release(wt);
    lm_array_release(w);
    lm_array_release(x);
}

/* the pack cache's hits so far */
static int64_t pack_hits(void)
{
    int64_t h;
    lm_cpu_pack_stats(&h, NULL, NULL, NULL);
    return h;
}

/* n lookups of one small weight's filters (a tick each): the entries not
 * looked up meanwhile grow stale */
static void age_entries(int n)
{
    int64_t xs[4] = {1, 16, 2, 2}, ws[4] = {16, 16, 3, 3};
    lm_array *x = randn(4, xs, 61), *w = randn(4, ws, 62);
    for (int i = 0; i < n; i++) {
        float *r;
        conv_bits(x, w, PAD1, &r, false);
        free(r);
    }
    lm_array_release(w);
    lm_array_release(x);
}

/* LUMEN_CONV_PACK_MB: an entry past the cap is not kept; a new entry takes
 * the room of stale ones only, so weights called in a cycle longer than
 * the cache keep the first of the cycle (the least recently used one went
 * just before its next use: no hit ever) */
static void test_pack_cap(void **state)
{
    (void)state;
    int64_t xs[4] = {1, 128, 4, 4}, ws[4] = {128, 128, 3, 3};   /* 1 MiB of filters each */
    lm_array *x = randn(4, xs, 51), *a = randn(4, ws, 52), *b = randn(4, ws, 53), *c3 = randn(4, ws, 56);
    int64_t e1, e2, m0, m1;
    age_entries(600);                         /* the earlier tests' entries: stale */
    setenv("LUMEN_CONV_PACK_MB", "2", 1);    /* 2 MiB: fits two of them */
    float *ref[3], *r;
    lm_array *cyc[3] = {a, b, c3};
    setenv("LUMEN_CONV_PACK", "0", 1);
    int64_t n = 0;
    for (int k = 0; k < 3; k++) n = conv_bits(x, cyc[k], PAD1, &ref[k], false);
    unsetenv("LUMEN_CONV_PACK");
    lm_cpu_pack_stats(NULL, &m0, NULL, NULL);
    int64_t h0 = pack_hits();
    for (int pass = 0; pass < 3; pass++)
        for (int k = 0; k < 3; k++) {
            conv_bits(x, cyc[k], PAD1, &r, false);
            assert_memory_equal(r, ref[k], sizeof(float) * (size_t)n);
            free(r);
        }
    lm_cpu_pack_stats(NULL, &m1, &e1, NULL);
    /* a and b kept at their first call and found in passes 2 and 3; c made each time */
    assert_int_equal(m1 - m0, 2);
    assert_int_equal(pack_hits() - h0, 4);
    for (int k = 0; k < 3; k++) free(ref[k]);
    int64_t ws2[4] = {160, 128, 3, 3};
    lm_array *c = randn(4, ws2, 54);
    float *r1, *r2;
    lm_cpu_pack_stats(NULL, &m0, NULL, NULL);
    n = conv_bits(x, c, PAD1, &r1, false);   /* past the cap: computed, not kept */
    conv_bits(x, c, PAD1, &r2, false);
    lm_cpu_pack_stats(NULL, &m1, &e2, NULL);
    assert_int_equal(m1, m0);
    assert_int_equal(e2, e1);
    assert_memory_equal(r1, r2, sizeof(float) * (size_t)n);
    free(r1);
    free(r2);
    /* a and b unused for long: c3 takes the room of the least recently used */
    age_entries(600);
    lm_cpu_pack_stats(NULL, &m0, NULL, NULL);
    assert_int_equal(check_cached(x, c3, PAD1, false), 1);
    lm_cpu_pack_stats(NULL, &m1, &e2, NULL);
    assert_int_equal(e2, e1);
    assert_int_equal(check_cached(x, b, PAD1, false), 0);   /* b stayed, a went */
    unsetenv("LUMEN_CONV_PACK_MB");
    /* a memory limit on the device caps the cache at a quarter of it: with
     * a limit just above what is active, d's 1 MiB is not kept (and the
     * entries stay) */
    lm_array *d = randn(4, ws, 55);
    lm_cpu_pack_stats(NULL, &m0, &e1, NULL);
    size_t limit = lm_device_memory(lm_device_cpu()).active + ((size_t)256 << 10);
    assert_true(limit / 4 < NN_WINO_BYTES(128, 128));
    lm_device_set_memory_limit(lm_device_cpu(), limit);
    n = conv_bits(x, d, PAD1, &r1, false);
    lm_device_set_memory_limit(lm_device_cpu(), 0);
    lm_cpu_pack_stats(NULL, &m1, &e2, NULL);
    assert_int_equal(m1, m0);
    assert_int_equal(e2, e1);
    conv_bits(x, d, PAD1, &r2, false);        /* no limit: kept */
    lm_cpu_pack_stats(NULL, &m1, &e2, NULL);
    assert_int_equal(m1, m0 + 1);
    assert_memory_equal(r1, r2, sizeof(float) * (size_t)n);
    free(r1);
    free(r2);
    lm_array_release(d);
    lm_array_release(c);
    lm_array_release(c3);
    lm_array_release(a);
    lm_array_release(b);
    lm_array_release(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_winograd_matches),
        cmocka_unit_test(test_winograd_nonfinite),
        cmocka_unit_test(test_pack_repeat_and_write),
        cmocka_unit_test(test_pack_free_and_reuse),
        cmocka_unit_test(test_pack_views),
        cmocka_unit_test(test_pack_dtypes),
        cmocka_unit_test(test_pack_cap),
    };
    return cmocka_run_group_tests(tests, tu_setup_cpu, NULL);
}
