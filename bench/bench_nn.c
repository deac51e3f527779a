/* bench_nn.c - the NN op set's figures (issue 3): conv2d 3x3 in GFLOP/s,
 * softmax/layer_norm/rms_norm/group_norm over 16M f32 in GB/s (bytes read
 * + written) beside a STREAM-style copy on the same pool, and attention
 * time and peak memory (resident-set growth while it runs, the same
 * measure bench/peer_nn.py takes of PyTorch).  PyTorch's figures come from
 * bench/peer_nn.py with the same keys. */
#include <stdlib.h>
#include <string.h>
#include "bench.h"
#include "backends/cpu/cpu.h"

static void force(lm_array *a)
{
    if (!a || lm_array_eval(a) != LM_OK) {
        fprintf(stderr, "eval failed: %s\n", lm_error_message());
        exit(1);
    }
}

static lm_array *randn(int nd, const int64_t *sh, uint64_t seed)
{
    lm_array *a = lm_random_normal(nd, sh, 0, 1, LM_F32, lm_random_key(seed), NULL);
    force(a);
    return a;
}

/* ---- resident memory: peak growth over a baseline (Linux /proc) ---- */
static long status_kb(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t n = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, field, n)) v = strtol(line + n + 1, NULL, 10);
    if (f) fclose(f);
    return v;
}

static void reset_peak(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) {
        fputs("5", f);
        fclose(f);
    }
}

/* conv2d [1, Ci, HW, HW] -> Co channels, k x k, stride st, padding k/2 */
static void bench_conv(const char *key, int64_t Ci, int64_t Co, int64_t HW, int64_t k, int64_t st)
{
    int64_t xs[4] = {1, Ci, HW, HW}, ws[4] = {Co, Ci, k, k}, pad[4] = {k / 2, k / 2, k / 2, k / 2};
    int64_t stride[2] = {st, st};
    lm_array *x = randn(4, xs, 1), *w = randn(4, ws, 2);
    double t;
    BENCH_BEST(5, t, {
        lm_array *y = lm_conv2d(x, w, NULL, stride, pad, NULL, 1);
        force(y);
        lm_array_release(y);
    });
    int64_t OH = (HW + 2 * (k / 2) - k) / st + 1;
    RESULT(key, 2.0 * Co * Ci * k * k * OH * OH / t * 1e-9, "GFLOP/s");
    lm_array_release(x);
    lm_array_release(w);
}

/* a small 3x3 conv (a tile, batch 1) where preparing the weights is a
 * large part of each call: with the prepared weights kept on the weight
 * (backends/cpu/conv_pack.c) beside the same conv preparing them every
 * call (LUMEN_CONV_PACK=0), alternately */
static void bench_conv_pack(const char *key, int64_t Ci, int64_t Co, int64_t HW)
{
    int64_t xs[4] = {1, Ci, HW, HW}, ws[4] = {Co, Ci, 3, 3}, pad[4] = {1, 1, 1, 1};
    lm_array *x = randn(4, xs, 1), *w = randn(4, ws, 2);
    double t, t0;
    BENCH_PAIR(40, t, t0, {
        unsetenv("LUMEN_CONV_PACK");
        lm_array *y = lm_conv2d(x, w, NULL, NULL, pad, NULL, 1);
        force(y);
        lm_array_release(y);
    }, {
        setenv("LUMEN_CONV_PACK", "0", 1);
        lm_array *y = lm_conv2d(x, w, NULL, NULL, pad, NULL, 1);
        force(y);
        lm_array_release(y);
    });
    unsetenv("LUMEN_CONV_PACK");
    double flop = 2.0 * Co * Ci * 9 * HW * HW * 1e-9;
    RESULT(key, flop / t, "GFLOP/s");
    PEER(key, "lumen-unpacked", flop / t0, "GFLOP/s");
    lm_array_release(x);
    lm_array_release(w);
}

typedef struct { float *a; const float *b; } copy_ctx;
static void copy_task(void *p, int64_t b, int64_t e)
{
    copy_ctx *c = p;
    memcpy(c->a + b, c->b + b, sizeof(float) * (size_t)(e - b));
}

static void bench_norms(void)
{
    int64_t sh[2] = {4096, 4096}, gsh[4] = {8, 512, 64, 64};
    lm_array *x = randn(2, sh, 3), *w = randn(1, sh + 1, 4), *b = randn(1, sh + 1, 5);
    lm_array *gx = randn(4, gsh, 6), *gw = randn(1, gsh + 1, 7), *gb = randn(1, gsh + 1, 8);
    double gb2 = 2.0 * 4096 * 4096 * 4 * 1e-9, t;
    const char *keys[4] = {"softmax_f32_4096x4096", "layer_norm_f32_4096x4096", "rms_norm_f32_4096x4096",
                           "group_norm_f32_8x512x64x64"};
    float *dst = malloc(sizeof(float) * 4096 * 4096);
    copy_ctx cc = {dst, lm_cpu_ptr(x)};
    /* each op alternates with the copy, so load changes touch both */
    for (int k = 0; k < 4; k++) {
        double tc;
        BENCH_PAIR(7, t, tc, {
            lm_array *y = k == 0 ? lm_softmax(x, -1) : k == 1 ? lm_layer_norm(x, 1, w, b, 1e-5)
                        : k == 2 ? lm_rms_norm(x, 1, w, 1e-6) : lm_group_norm(gx, 32, gw, gb, 1e-5);
            force(y);
            lm_array_release(y);
        }, lm_cpu_parallel_for(4096 * 4096, 1 << 16, copy_task, &cc));
        RESULT(keys[k], gb2 / t, "GB/s");
        PEER(keys[k], "stream-copy", gb2 / tc, "GB/s");
    }
    free(dst);
    lm_array *arr[] = {x, w, b, gx, gw, gb};
    for (int i = 0; i < 6; i++) lm_array_release(arr[i]);
}

static void bench_attention(int64_t L)
{
    int64_t sh[4] = {1, 8, L, 64};
    lm_array *q = randn(4, sh, 9), *k = randn(4, sh, 10), *v = randn(4, sh, 11);
    lm_device_clear_cache(lm_device_cpu());
    long base = status_kb("VmRSS:");
    reset_peak();
    lm_array *y = lm_attention(q, k, v, NULL, false, 0);
    force(y);
    long peak = status_kb("VmHWM:");
    lm_array_release(y);
    double t;
    BENCH_BEST(L >= 4096 ? 2 : 4, t, {
        lm_array *o = lm_attention(q, k, v, NULL, false, 0);
        force(o);
        lm_array_release(o);
    });
    char key[64];
    snprintf(key, sizeof key, "attention_L%lld", (long long)L);
    RESULT(key, t * 1e3, "ms");
    snprintf(key, sizeof key, "attention_L%lld_peak", (long long)L);
    RESULT(key, (double)(peak - base) / 1024.0, "MB");
    lm_array_release(q);
    lm_array_release(k);
    lm_array_release(v);
}

int main(void)
{
    if (lm_init() != LM_OK) {
        fprintf(stderr, "lm_init: %s\n", lm_error_message());
        return 1;
    }
    lm_device_set_default(lm_device_cpu());   /* the peers are PyTorch on the CPU */
    bench_attention(1024);
    bench_attention(4096);
    /* the shapes, then ESRGAN's dense-block convolutions (RRDB: 64
     * features, 32 growth channels) at two image sizes */
    bench_conv("conv2d_3x3_64c_256", 64, 64, 256, 3, 1);
    bench_conv("conv2d_3x3_128c_128", 128, 128, 128, 3, 1);
    bench_conv("conv2d_1x1_128c_128", 128, 128, 128, 1, 1);
    bench_conv("conv2d_3x3s2_64to128_128", 64, 128, 128, 3, 2);
    bench_conv("conv2d_esrgan_64to32_256", 64, 32, 256, 3, 1);
    bench_conv("conv2d_esrgan_192to64_128", 192, 64, 128, 3, 1);
    bench_conv_pack("conv2d_3x3_64c_32", 64, 64, 32);
    bench_conv_pack("conv2d_esrgan_192to64_64", 192, 64, 64);
    bench_norms();
    return 0;
}
