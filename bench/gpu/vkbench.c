/* vkbench.c - Lumen's figures on a Vulkan device, one "name value unit"
 * line each, for bench/gpu/compare.py to set beside PyTorch CUDA.
 * Links only liblumen.a, libvulkan and libm (OpenBLAS is opened at run time
 * by the CPU backend and is not needed here).
 * Usage: vkbench [quick]   (quick: small sizes, for a smoke run) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/lumen.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static lm_device *dev;

static void die(const char *what)
{
    fprintf(stderr, "vkbench: %s: %s\n", what, lm_error_message());
    exit(1);
}

static lm_array *randn(int ndim, const int64_t *shape, lm_dtype dt)
{
    lm_array *a = lm_random_normal(ndim, shape, 0, 1, dt, lm_random_next_key(), dev);
    if (!a || lm_array_eval(a) != LM_OK) die("randn");
    return a;
}

/* best time of `reps` evaluations of the graph fn builds */
typedef lm_array *(*graph_fn)(lm_array **in);
static double best_time(graph_fn fn, lm_array **in, int reps)
{
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        lm_array *g = fn(in);
        if (!g) die("build");
        double t0 = now();
        if (lm_array_eval(g) != LM_OK) die("eval");
        double t = now() - t0;
        if (r > 0 && t < best) best = t;   /* the first run makes pipelines */
        lm_array_release(g);
    }
    return best;
}

static lm_array *g_matmul(lm_array **in) { return lm_matmul(in[0], in[1]); }
static lm_array *g_add(lm_array **in) { return lm_binary(LM_OP_ADD, in[0], in[1]); }
static lm_array *g_gelu(lm_array **in) { return lm_unary(LM_OP_GELU, in[0]); }
static lm_array *g_copy(lm_array **in) { return lm_unary(LM_OP_COPY, in[0]); }
static lm_array *g_chain(lm_array **in)
{
    /* exp(-|x|) * 0.5 + tanh(x): five elementwise kernels, unfused */
    lm_array *a = lm_unary(LM_OP_ABS, in[0]);
    lm_array *b = lm_unary(LM_OP_NEG, a);
    lm_array *c = lm_unary(LM_OP_EXP, b);
    lm_array *d = lm_binary_scalar(LM_OP_MUL, c, 0.5, false);
    lm_array *e = lm_unary(LM_OP_TANH, in[0]);
    lm_array *f = lm_binary(LM_OP_ADD, d, e);
    lm_array_release(a); lm_array_release(b); lm_array_release(c);
    lm_array_release(d); lm_array_release(e);
    return f;
}

static void bench_matmul(int64_t n, lm_dtype dt)
{
    int64_t s[2] = {n, n};
    lm_array *in[2] = {randn(2, s, dt), randn(2, s, dt)};
    int reps = n >= 8192 ? 3 : 5;
    double t = best_time(g_matmul, in, reps);
    printf("matmul_%s_%lld %.2f TFLOP/s\n", lm_dtype_name(dt), (long long)n,
           2.0 * (double)n * (double)n * (double)n / t * 1e-12);
    lm_array_release(in[0]);
    lm_array_release(in[1]);
}

static void bench_stream(int64_t n)
{
    lm_array *in[2] = {randn(1, &n, LM_F32), randn(1, &n, LM_F32)};
    double gb = (double)n * 4 * 1e-9;
    printf("add_f32_%lldM %.1f GB/s\n", (long long)(n >> 20), 3 * gb / best_time(g_add, in, 5));
    printf("gelu_f32_%lldM %.1f GB/s\n", (long long)(n >> 20), 2 * gb / best_time(g_gelu, in, 5));
    printf("copy_f32_%lldM %.1f GB/s\n", (long long)(n >> 20), 2 * gb / best_time(g_copy, in, 5));
    printf("chain_f32_%lldM %.3f ms\n", (long long)(n >> 20), 1e3 * best_time(g_chain, in, 3));
    lm_array_release(in[0]);
    lm_array_release(in[1]);
}

/* a 10,000-node chain of tiny adds in one eval: time per node */
static void bench_overhead(void)
{
    int64_t n = 16;
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        lm_array *a = lm_zeros(1, &n, LM_F32, dev);
        for (int i = 0; i < 10000; i++) {
            lm_array *b = lm_binary_scalar(LM_OP_ADD, a, 1.0, false);
            lm_array_release(a);
            a = b;
        }
        double t0 = now();
        if (lm_array_eval(a) != LM_OK) die("overhead eval");
        double t = now() - t0;
        if (t < best) best = t;
        lm_array_release(a);
    }
    printf("overhead_10000 %.2f us/node\n", best / 10000 * 1e6);
}

int main(int argc, char **argv)
{
    bool quick = argc > 1 && !strcmp(argv[1], "quick");
    if (lm_init() != LM_OK) die("init");
    const char *spec = getenv("LUMEN_DEVICE");
    dev = lm_device_find(spec && *spec ? spec : "vulkan");
    if (!dev || strncmp(dev->spec, "vulkan", 6)) die("no Vulkan device");
    printf("device %s | %s\n", dev->name, dev->info);
    fflush(stdout);
    const lm_dtype dts[3] = {LM_F32, LM_F16, LM_BF16};
    int64_t sizes[4] = {1024, 2048, 4096, 8192};
    for (int t = 0; t < 3; t++)
        for (int k = 0; k < (quick ? 1 : 4); k++) {
            bench_matmul(quick ? 256 : sizes[k], dts[t]);
            fflush(stdout);
        }
    bench_stream(quick ? (1 << 20) : ((int64_t)256 << 20));
    bench_overhead();
    return 0;
}
