/* gguf_bench.c - Lumen's quantized linear (CPU) beside ggml's ggml_mul_mat
 * on the same shapes, weights and thread count.  Run by hand (ggml is not
 * a dependency of the build): bench/gguf_bench.sh GGML_SRC GGML_BUILD.
 *
 * For each weight type (Q8_0, Q4_K) and shape (M activations of K, N
 * outputs) both compute y[M, N] = x[M, K] w[N, K]^T from the same float
 * weights, each quantized by its own code (bytes identical: test_gguf).
 * Timings alternate Lumen and ggml (a shared machine's load touches both
 * alike); the median of REPS runs and the spread (min..max) are printed,
 * with GFLOP/s (2*M*N*K per run) and the ratio Lumen/ggml in speed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench/bench.h"
#include "core/lumen.h"
#include "core/ops_nn.h"
#include "core/quant.h"
#include "backends/cpu/cpu.h"
#include "ggml.h"
#include "ggml-cpu.h"

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void run(enum ggml_type gt, lm_dtype lt, int64_t M, int64_t N, int64_t K, int threads, int reps)
{
    float *x = malloc(sizeof(float) * (size_t)(M * K)), *w = malloc(sizeof(float) * (size_t)(N * K));
    uint64_t r = 42;
    for (int64_t i = 0; i < M * K; i++) { r = r * 6364136223846793005ull + 1; x[i] = (float)((r >> 40) / 16777216.0 - 0.5); }
    for (int64_t i = 0; i < N * K; i++) { r = r * 6364136223846793005ull + 1; w[i] = (float)((r >> 40) / 16777216.0 - 0.5); }
    /* ggml: w as a quantized [K, N] (ne0 = K), x as f32 [K, M] */
    size_t wbytes = ggml_row_size(gt, K) * (size_t)N;
    struct ggml_init_params ip = {.mem_size = wbytes + sizeof(float) * (size_t)(M * K + M * N) + (64 << 20),
                                  .mem_buffer = NULL, .no_alloc = false};
    struct ggml_context *g = ggml_init(ip);
    struct ggml_tensor *gw = ggml_new_tensor_2d(g, gt, K, N), *gx = ggml_new_tensor_2d(g, GGML_TYPE_F32, K, M);
    ggml_quantize_chunk(gt, w, gw->data, 0, N, K, NULL);
    memcpy(gx->data, x, sizeof(float) * (size_t)(M * K));
    struct ggml_tensor *gy = ggml_mul_mat(g, gw, gx);
    struct ggml_cgraph *gf = ggml_new_graph(g);
    ggml_build_forward_expand(gf, gy);
    /* Lumen */
    lm_array *xa = lm_from_data(2, (int64_t[]){M, K}, LM_F32, x, lm_device_cpu());
    lm_array *wa = lm_from_data(2, (int64_t[]){N, K}, LM_F32, w, lm_device_cpu());
    lm_array *wq = lm_quantize(wa, lt);
    lm_cpu_set_threads(threads);
    double *tl = malloc(sizeof(double) * (size_t)reps), *tg = malloc(sizeof(double) * (size_t)reps);
    float *yl = malloc(sizeof(float) * (size_t)(M * N));
    for (int i = -1; i < reps; i++) {   /* one warm-up round */
        double t0 = bench_now();
        lm_array *y = lm_linear(xa, wq, NULL);
        if (!y || lm_array_eval(y) != LM_OK) { fprintf(stderr, "lumen: %s\n", lm_error_message()); exit(1); }
        double t1 = bench_now();
        if (i == reps - 1) lm_array_read(y, yl, LM_F32);
        lm_array_release(y);
        double t2 = bench_now();
        if (ggml_graph_compute_with_ctx(g, gf, threads) != GGML_STATUS_SUCCESS) { fprintf(stderr, "ggml failed\n"); exit(1); }
        double t3 = bench_now();
        if (i >= 0) { tl[i] = t1 - t0; tg[i] = t3 - t2; }
    }
    double maxd = 0, maxy = 0;
    for (int64_t i = 0; i < M * N; i++) {
        maxd = fmax(maxd, fabs(yl[i] - ((float *)gy->data)[i]));
        maxy = fmax(maxy, fabs(((float *)gy->data)[i]));
    }
    qsort(tl, (size_t)reps, sizeof *tl, cmp_d);
    qsort(tg, (size_t)reps, sizeof *tg, cmp_d);
    double ml = tl[reps / 2], mg = tg[reps / 2], fl = 2.0 * (double)(M * N * K);
    printf("%-5s M=%-4lld N=%-5lld K=%-5lld threads=%d  lumen %8.3f ms (%.3f..%.3f) %6.1f GFLOP/s   "
           "ggml %8.3f ms (%.3f..%.3f) %6.1f GFLOP/s   lumen/ggml speed %.2f   max|diff| %.2g of %.2g\n",
           lm_dtype_name(lt), (long long)M, (long long)N, (long long)K, threads, ml * 1e3, tl[0] * 1e3,
           tl[reps - 1] * 1e3, fl / ml * 1e-9, mg * 1e3, tg[0] * 1e3, tg[reps - 1] * 1e3, fl / mg * 1e-9,
           mg / ml, maxd, maxy);
    fflush(stdout);
    free(tl); free(tg); free(yl); free(x); free(w);
    lm_array_release(xa); lm_array_release(wa); lm_array_release(wq);
    ggml_free(g);
}

int main(int argc, char **argv)
{
    /* gguf_bench [THREADS [REPS [TYPE [M]]]]: TYPE q8_0 or q4_k, M one of the
     * shapes' M, to time one case while tuning */
    int threads = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 11;
    const char *only_t = argc > 3 ? argv[3] : NULL;
    int64_t only_m = argc > 4 ? atoll(argv[4]) : 0;
    if (lm_init() != LM_OK) return 1;
    lm_device_set_default(lm_device_cpu());
    ggml_cpu_init();
    static const int64_t shapes[][3] = {{1, 4096, 4096}, {8, 4096, 4096}, {64, 4096, 4096}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        if (only_m && shapes[s][0] != only_m) continue;
        if (!only_t || !strcmp(only_t, "q8_0")) run(GGML_TYPE_Q8_0, LM_Q8_0, shapes[s][0], shapes[s][1], shapes[s][2], threads, reps);
        if (!only_t || !strcmp(only_t, "q4_k")) run(GGML_TYPE_Q4_K, LM_Q4_K, shapes[s][0], shapes[s][1], shapes[s][2], threads, reps);
    }
    return 0;
}
