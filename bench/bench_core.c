/* bench_core.c - the foundation's figures beside their peers in one run:
 * matmul vs cblas_sgemm called directly (same OpenBLAS, same core type),
 * elementwise and sum vs STREAM-style loops on the same thread pool, and
 * eval overhead per node.  numpy/PyTorch figures come from peer_core.py. */
#include <stdlib.h>
#include <string.h>
#include "bench.h"
#include "backends/cpu/cpu.h"

static void force(lm_array *a)
{
    if (lm_array_eval(a) != LM_OK) {
        fprintf(stderr, "eval failed: %s\n", lm_error_message());
        exit(1);
    }
}

static void bench_matmul(void)
{
    static const int sizes[] = {256, 512, 1024, 2048, 4096};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int n = sizes[i];
        int64_t sh[2] = {n, n};
        lm_array *a = lm_random_uniform(2, sh, -1, 1, LM_F32, lm_random_key(1), NULL);
        lm_array *b = lm_random_uniform(2, sh, -1, 1, LM_F32, lm_random_key(2), NULL);
        force(a);
        force(b);
        int reps = n >= 4096 ? 2 : n >= 2048 ? 3 : 5;
        double t, td;
        BENCH_BEST(reps, t, {
            lm_array *c = lm_matmul(a, b);
            force(c);
            lm_array_release(c);
        });
        float *out = malloc(sizeof(float) * (size_t)n * (size_t)n);
        BENCH_BEST(reps, td, lm_sgemm(LM_CBLAS_NOTRANS, LM_CBLAS_NOTRANS, n, n, n, 1.0f, lm_cpu_ptr(a), n,
                                      lm_cpu_ptr(b), n, 0.0f, out, n));
        free(out);
        char key[64];
        double flop = 2.0 * n * (double)n * n;
        snprintf(key, sizeof key, "matmul_f32_%d", n);
        RESULT(key, flop / t * 1e-9, "GFLOP/s");
        PEER(key, "cblas_sgemm-direct", flop / td * 1e-9, "GFLOP/s");
        lm_array_release(a);
        lm_array_release(b);
    }
}

typedef struct { float *a; const float *b, *c; float s; } stream_ctx;
static void triad_task(void *p, int64_t b, int64_t e)
{
    stream_ctx *c = p;
    for (int64_t i = b; i < e; i++) c->a[i] = c->b[i] + c->s * c->c[i];
}
static void scale_task(void *p, int64_t b, int64_t e)
{
    stream_ctx *c = p;
    for (int64_t i = b; i < e; i++) c->a[i] = c->s * c->b[i];
}
static void sum_task(void *p, int64_t b, int64_t e)
{
    stream_ctx *c = p;
    float acc[16] = {0};
    int64_t i = b;
    for (; i + 16 <= e; i += 16)
        for (int k = 0; k < 16; k++) acc[k] += c->b[i + k];
    for (; i < e; i++) acc[0] += c->b[i];
    float s = 0;
    for (int k = 0; k < 16; k++) s += acc[k];
    c->a[b / (1 << 20)] = s;
}

static void bench_bandwidth(void)
{
    const int64_t n = 16 << 20;
    lm_array *x = lm_random_uniform(1, &n, -1, 1, LM_F32, lm_random_key(3), NULL);
    lm_array *y = lm_random_uniform(1, &n, -1, 1, LM_F32, lm_random_key(4), NULL);
    force(x);
    force(y);
    double t, gb = 1e-9 * (double)n * 4;
    /* STREAM-style loops on the same pool */
    float *dst = malloc(sizeof(float) * (size_t)n);
    memset(dst, 0, sizeof(float) * (size_t)n);
    stream_ctx sc = {dst, lm_cpu_ptr(x), lm_cpu_ptr(y), 3.0f};
    double t_triad, t_scale;
    BENCH_BEST(5, t_triad, lm_cpu_parallel_for(n, 1 << 16, triad_task, &sc));
    BENCH_BEST(5, t_scale, lm_cpu_parallel_for(n, 1 << 16, scale_task, &sc));
    double triad = 3 * gb / t_triad, scale = 2 * gb / t_scale;
    printf("INFO STREAM loops on %d threads: scale %.1f GB/s, triad %.1f GB/s\n", lm_cpu_threads(), scale, triad);
    /* each op alternates with its STREAM loop (bytes: the loop's own) */
#define EW(key, bytes_mul, expr, ...) EW_(key, bytes_mul, expr, __VA_ARGS__)
#define EW_(key, bytes_mul, expr, peer_name, peer_task, peer_bytes) do { \
        double tp_; \
        BENCH_PAIR(7, t, tp_, { lm_array *res_ = (expr); force(res_); lm_array_release(res_); }, \
                   lm_cpu_parallel_for(n, 1 << 16, peer_task, &sc)); \
        RESULT(key, (bytes_mul) * gb / t, "GB/s"); \
        PEER(key, peer_name, (peer_bytes) * gb / tp_, "GB/s"); \
    } while (0)
#define TRIAD "stream-triad", triad_task, 3
#define SCALE "stream-scale", scale_task, 2
    EW("add_f32_16M", 3, lm_binary(LM_OP_ADD, x, y), TRIAD);
    EW("mul_scalar_f32_16M", 2, lm_binary_scalar(LM_OP_MUL, x, 3.0, false), SCALE);
    EW("neg_f32_16M", 2, lm_unary(LM_OP_NEG, x), SCALE);
    EW("exp_f32_16M", 2, lm_unary(LM_OP_EXP, x), SCALE);
    /* strided and broadcast paths */
    int64_t sq[2] = {4096, 4096};
    lm_array *m = lm_reshape(x, 2, sq);
    lm_array *mt = lm_transpose(m, 0, 1);
    lm_array *row = lm_slice(y, 0, 0, 4096, 1);
    EW("neg_transposed_f32_16M", 2, lm_unary(LM_OP_NEG, mt), SCALE);
    EW("add_transposed_f32_16M", 3, lm_binary(LM_OP_ADD, mt, mt), TRIAD);
    EW("add_row_broadcast_f32_16M", 2, lm_binary(LM_OP_ADD, m, row), SCALE);
    lm_array *h = lm_cast(x, LM_F16);
    force(h);
    EW("add_f16_16M", 1.5, lm_binary(LM_OP_ADD, h, h), TRIAD);
    lm_array *bh = lm_cast(x, LM_BF16);
    force(bh);
    EW("add_bf16_16M", 1.5, lm_binary(LM_OP_ADD, bh, bh), TRIAD);
    lm_array_release(bh);
    lm_array_release(h);
    lm_array_release(m);
    lm_array_release(mt);
    lm_array_release(row);
    lm_array_release(x);
    lm_array_release(y);
    free(dst);
    /* sum over 64M floats */
    const int64_t n64 = 64 << 20;
    lm_array *big = lm_random_uniform(1, &n64, -1, 1, LM_F32, lm_random_key(5), NULL);
    force(big);
    float partial[64];
    stream_ctx ss = {partial, lm_cpu_ptr(big), NULL, 0};
    double t_sum;
    BENCH_BEST(5, t_sum, lm_cpu_parallel_for(n64, 1 << 20, sum_task, &ss));
    BENCH_BEST(5, t, { lm_array *r = lm_reduce(LM_OP_SUM, big, 0, NULL, false); force(r); lm_array_release(r); });
    RESULT("sum_f32_64M", 4e-9 * (double)n64 / t, "GB/s");
    PEER("sum_f32_64M", "stream-read-loop", 4e-9 * (double)n64 / t_sum, "GB/s");
    lm_array *s1 = lm_reduce(LM_OP_SUM, big, 1, (int[]){0}, false);
    lm_array_release(s1);
    lm_array_release(big);
}

static void bench_overhead(void)
{
    /* a chain of 10,000 tiny ops, built and evaluated */
    double t;
    BENCH_BEST(5, t, {
        lm_array *x = lm_full(1, (int64_t[]){4}, 1, LM_F32, NULL);
        for (int i = 0; i < 10000; i++) {
            lm_array *y = lm_binary_scalar(LM_OP_ADD, x, 1.0, false);
            lm_array_release(x);
            x = y;
        }
        force(x);
        lm_array_release(x);
    });
    RESULT("eval_overhead_per_node", t / 10000 * 1e6 / 2, "us");   /* each add is 2 nodes: scalar + add */
}

int main(void)
{
    lm_init();
    printf("INFO cpu: %s, %s\n", lm_device_cpu()->name, lm_device_cpu()->info);
    bench_matmul();
    bench_bandwidth();
    bench_overhead();
    return 0;
}
