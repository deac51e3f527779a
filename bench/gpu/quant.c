/* quant.c - quantized linear layers on a Vulkan device (backends/vulkan/quant.c):
 * the GEMM (y = x w^T, x [M, K] f32, w [N, K] quantized: w's transient
 * f16 copy into the f16 GEMM, LUMEN_VK_QGEMM=deq; decoded on tensor cores,
 * =coop; the f32-arithmetic tiles, =f32; and the default) beside
 * Lumen's own f16 GEMM (lm_matmul of f16 [M, K] by [K, N]) in the same
 * process, and the GEMV (M = 1) as
 * the bandwidth its quantized bytes reach.  bench/gpu/quant.sh runs it.
 *
 * Times are the kernels' own, from the profiler's GPU timestamps
 * (core/profile.h: a barrier before each timed dispatch), so host submit
 * and wait are not in them.  Each figure is the median of REPS (default
 * 11) repetitions with min..max; a GEMV repetition is the mean over
 * enough distinct weights (at least 256 MB in all) that no weight is still
 * in the GPU's L2 cache (50 MB on an H100) when it is read again.
 * The weights are random blocks with their scales set to small normal
 * halves: the kernels' speed does not depend on the values, and
 * quantizing 8192x8192 floats on the host would cost seconds.
 * Usage: vkquant [quick]   (quick: small shapes, for a smoke run on lavapipe)
 * GEMM_MS=16,64,... sets the rows of x the GEMMs run at (0: no GEMMs);
 * GEMV_SHAPES=128x1,32x8g,... the GEMV shapes measured (LUMEN_VK_QGEMV);
 * GEMV=0: no GEMVs.
 * Lines: "name median [min-max] unit" and "# ..." comments. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/lumen.h"
#include "core/profile.h"
#include "backends/vulkan/vulkan.h"

#define MAX_REPS 64

static lm_device *dev;
static int reps = 11;
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static void die(const char *what)
{
    fprintf(stderr, "vkquant: %s: %s\n", what, lm_error_message());
    exit(1);
}

static uint64_t next(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return rng;
}

/* byte offsets of a block's f16 scale fields (d, dmin) per type; -1: none */
static void scale_fields(lm_dtype t, int *a, int *b)
{
    *a = 0;
    *b = -1;
    switch (t) {
    case LM_Q4_1: case LM_Q5_1: case LM_Q4_K: case LM_Q5_K: *b = 2; break;
    case LM_Q2_K: *a = 80; *b = 82; break;
    case LM_Q3_K: *a = 108; break;
    case LM_Q6_K: *a = 208; break;
    default: break;
    }
}

/* an [n, k] tensor of type t on the device: random blocks, sane scales */
static lm_array *random_blocks(lm_dtype t, int64_t n, int64_t k)
{
    size_t bytes = lm_dtype_nbytes(t, n * k), bb = lm_dtype_block_bytes(t);
    unsigned char *p = malloc(bytes + 8);
    if (!p) die("malloc");
    for (size_t i = 0; i < bytes; i += 8) {
        uint64_t r = next();
        memcpy(p + i, &r, 8);
    }
    int fa, fb;
    scale_fields(t, &fa, &fb);
    for (size_t i = 0; i < bytes; i += bb) {
        uint16_t h = (uint16_t)(0x1c00 + next() % 0x400);   /* about 2^-8 .. 2^-7 */
        memcpy(p + i + fa, &h, 2);
        if (fb >= 0) memcpy(p + i + fb, &h, 2);
    }
    int64_t shape[2] = {n, k};
    lm_array *a = lm_from_data(2, shape, t, p, dev);
    free(p);
    if (!a || lm_array_eval(a) != LM_OK) die("weight");
    return a;
}

static lm_array *randn(int64_t r, int64_t c, lm_dtype dt)
{
    int64_t s[2] = {r, c};
    lm_array *a = lm_random_normal(2, s, 0, 1, dt, lm_random_next_key(), dev);
    if (!a || lm_array_eval(a) != LM_OK) die("randn");
    return a;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* GPU milliseconds of the rows of op `op` in one profiled run of nw graphs
 * (graph i from weight i), divided by nw */
typedef lm_array *(*graph_fn)(lm_array *x, lm_array *w);

static double gpu_ms(graph_fn fn, lm_array *x, lm_array **w, int nw, const char *op)
{
    if (lm_profile_begin() != LM_OK) die("profile");
    for (int i = 0; i < nw; i++) {
        lm_array *y = fn(x, w[i]);
        if (!y || lm_array_eval(y) != LM_OK) die("eval");
        lm_array_release(y);
    }
    lm_profile *p = lm_profile_end();
    if (!p) die("profile");
    double ms = 0;
    int64_t n = 0;
    for (int r = 0; r < p->nrows; r++)
        if (!strcmp(p->rows[r].op, op) && !strcmp(p->rows[r].timer, "gpu")) {
            ms += p->rows[r].total_ms;
            n += p->rows[r].count;
        }
    lm_profile_free(p);
    if (n != nw) {
        fprintf(stderr, "vkquant: %lld timed %s kernels for %d graphs (no GPU timestamps?)\n", (long long)n, op, nw);
        exit(1);
    }
    return ms / nw;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* the first run makes the pipelines; then 0.5 s of untimed runs so the
 * GPU's clock has climbed back (bench/gpu/vkbench.c, warm_up), then reps */
static void measure(graph_fn fn, lm_array *x, lm_array **w, int nw, const char *op, double ts[])
{
    gpu_ms(fn, x, w, nw, op);
    double t0 = now();
    while (now() - t0 < 0.5) gpu_ms(fn, x, w, nw, op);
    for (int r = 0; r < reps; r++) ts[r] = gpu_ms(fn, x, w, nw, op);
    qsort(ts, (size_t)reps, sizeof *ts, cmp_double);
}

static lm_array *g_linear(lm_array *x, lm_array *w) { return lm_linear(x, w, NULL); }
static lm_array *g_matmul(lm_array *x, lm_array *w) { return lm_matmul(x, w); }
static lm_array *g_matmul_t(lm_array *x, lm_array *w)
{
    lm_array *t = lm_transpose(w, 0, 1), *y = lm_matmul(x, t);
    lm_array_release(t);
    return y;
}

static const char *tname(lm_dtype t) { return lm_dtype_name(t); }

/* GEMM: M x N x K, quantized type t against f16, each kernel qlinear has
 * (LUMEN_VK_QGEMM; the default last) */
static void bench_gemm(lm_dtype t, int64_t M, int64_t N, int64_t K)
{
    lm_array *x = randn(M, K, LM_F32), *w = random_blocks(t, N, K);
    lm_array *x16 = randn(M, K, LM_F16), *w16 = randn(K, N, LM_F16);
    static const char *const modes[] = {"deq", "coop", "f32", NULL};
    static const char *const labels[] = {"deq", "coop", "f32", "default"};
    double tq[4][MAX_REPS], th[MAX_REPS], f = 2.0 * (double)M * (double)N * (double)K * 1e-9;
    measure(g_matmul, x16, &w16, 1, "matmul", th);
    int mid = reps / 2;
    printf("gemm_f16_M%lld_N%lld_K%lld %.2f [%.2f-%.2f] TFLOP/s\n", (long long)M, (long long)N, (long long)K,
           f / th[mid], f / th[reps - 1], f / th[0]);
    /* the f16 GEMM as the deq path runs it: B = w^T of an [N, K] weight */
    lm_array *wt = randn(N, K, LM_F16);
    double tt[MAX_REPS];
    measure(g_matmul_t, x16, &wt, 1, "matmul", tt);
    printf("gemm_f16_nt_M%lld_N%lld_K%lld %.2f [%.2f-%.2f] TFLOP/s\n", (long long)M, (long long)N, (long long)K,
           f / tt[mid], f / tt[reps - 1], f / tt[0]);
    lm_array_release(wt);
    printf("# gemm %s / f16 at M=%lld:", tname(t), (long long)M);
    for (int k = 0; k < 4; k++) {
        if (modes[k]) setenv("LUMEN_VK_QGEMM", modes[k], 1);
        else unsetenv("LUMEN_VK_QGEMM");
        measure(g_linear, x, &w, 1, "qlinear", tq[k]);
        printf(" %s %.3fx (%.3f ms)", labels[k], th[mid] / tq[k][mid], tq[k][mid]);
    }
    printf("; f16 %.3f ms\n", th[mid]);
    for (int k = 0; k < 4; k++)
        printf("gemm_%s_%s_M%lld_N%lld_K%lld %.2f [%.2f-%.2f] TFLOP/s\n", tname(t), labels[k], (long long)M,
               (long long)N, (long long)K, f / tq[k][mid], f / tq[k][reps - 1], f / tq[k][0]);
    fflush(stdout);
    lm_array_release(x); lm_array_release(w); lm_array_release(x16); lm_array_release(w16);
}

/* GEMV: x [1, K] by N x K of type t; GB/s of the weight's bytes, for each
 * shape in GEMV_SHAPES (LUMEN_VK_QGEMV values, comma-separated) or the default */
static void bench_gemv(lm_dtype t, int64_t N, int64_t K, double peak)
{
    size_t bytes = lm_dtype_nbytes(t, N * K);
    int nw = (int)((256u << 20) / bytes) + 1;
    if (nw < 2) nw = 2;
    if (nw > 64) nw = 64;
    lm_array **w = malloc(sizeof *w * (size_t)nw);
    for (int i = 0; i < nw; i++) w[i] = random_blocks(t, N, K);
    lm_array *x = randn(1, K, LM_F32);
    const char *shapes = getenv("GEMV_SHAPES");
    char list[256];
    snprintf(list, sizeof list, "%s", shapes && *shapes ? shapes : "default");
    for (char *sv = NULL, *sh = strtok_r(list, ",", &sv); sh; sh = strtok_r(NULL, ",", &sv)) {
        if (strcmp(sh, "default")) setenv("LUMEN_VK_QGEMV", sh, 1);
        else unsetenv("LUMEN_VK_QGEMV");
        double ts[MAX_REPS];
        measure(g_linear, x, w, nw, "qlinear", ts);
        double gb = (double)bytes * 1e-9;
        int mid = reps / 2;
        printf("gemv_%s_%s_N%lld_K%lld %.0f [%.0f-%.0f] GB/s\n", tname(t), sh, (long long)N, (long long)K,
               gb / ts[mid] * 1e3, gb / ts[reps - 1] * 1e3, gb / ts[0] * 1e3);
        printf("# gemv %s %s %lldx%lld: %.1f us a weight of %.2f MB (%d weights a repetition), %.2f of %.0f GB/s\n",
               tname(t), sh, (long long)N, (long long)K, ts[mid] * 1e3, gb * 1e3, nw, gb / ts[mid] * 1e3 / peak,
               peak);
        fflush(stdout);
    }
    unsetenv("LUMEN_VK_QGEMV");
    for (int i = 0; i < nw; i++) lm_array_release(w[i]);
    free(w);
    lm_array_release(x);
}

int main(int argc, char **argv)
{
    bool quick = argc > 1 && !strcmp(argv[1], "quick");
    if (lm_init() != LM_OK) die("init");
    for (int i = 0; i < lm_device_count() && !dev; i++)
        if (!strncmp(lm_device_at(i)->spec, "vulkan", 6)) dev = lm_device_at(i);
    if (!dev) {
        fprintf(stderr, "vkquant: no Vulkan device (%s)\n", lm_vulkan_status());
        return 77;
    }
    const char *r = getenv("REPS");
    if (r && atoi(r) > 0 && atoi(r) <= MAX_REPS) reps = atoi(r);
    const char *pk = getenv("PEAK_GBS");
    double peak = pk && atof(pk) > 0 ? atof(pk) : 3350.0;
    printf("# device %s, %d repetitions, GEMV peak taken as %.0f GB/s\n", dev->name, reps, peak);
    const lm_dtype gemm_t[] = {LM_Q4_K, LM_Q8_0};
    const lm_dtype gemv_t[] = {LM_Q4_K, LM_Q8_0, LM_Q6_K, LM_Q5_K, LM_Q4_0};
    int64_t n0 = quick ? 256 : 4096, n1 = quick ? 512 : 8192;
    /* GEMM_MS: the rows of x, comma-separated (default 512 and 4096; quick: 64, 256) */
    int64_t Ms[16] = {quick ? 64 : 512, quick ? 256 : 4096};
    int nm = 2;
    const char *ms = getenv("GEMM_MS");
    if (ms && *ms) {
        nm = 0;
        for (const char *c = ms; *c && nm < 16; c = strchr(c, ',') ? strchr(c, ',') + 1 : c + strlen(c))
            if (atoll(c) > 0) Ms[nm++] = atoll(c);
    }
    for (size_t i = 0; i < sizeof gemm_t / sizeof *gemm_t; i++)
        for (int m = 0; m < nm; m++) bench_gemm(gemm_t[i], Ms[m], n0, n0);
    const char *gv = getenv("GEMV");
    for (size_t i = 0; i < sizeof gemv_t / sizeof *gemv_t && !(gv && !strcmp(gv, "0")); i++) {
        bench_gemv(gemv_t[i], n0, n0, peak);
        if (i < 2) bench_gemv(gemv_t[i], n1, n1, peak);
    }
    return 0;
}
