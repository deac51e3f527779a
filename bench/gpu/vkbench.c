/* vkbench.c - Lumen's figures on a Vulkan device, one "name value unit"
 * line each, for bench/gpu/compare.py to set beside PyTorch CUDA.
 * Links only liblumen.a, libvulkan and libm (OpenBLAS is opened at run time
 * by the CPU backend and is not needed here).
 * Usage: vkbench [quick]   (quick: small sizes, for a smoke run)
 * VKBENCH_ONLY=fused: the fused chains and the copy; VKBENCH_ONLY=nn: conv2d
 * and attention (the image-model shapes of the Vulkan issue);
 * VKBENCH_ONLY=attn: attention B=1 H=24 over L, D, dtype and causal, the
 * median, min and max of 9 evaluations each (bench/gpu/attn.py; with
 * VKBENCH_ATTN_WARM=1 after the warm-up of VKBENCH_ONLY=mm); head dims over
 * 256 also with each of their two paths forced (LUMEN_VK_ATTN512). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/lumen.h"
#include "backends/vulkan/vulkan.h"

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

typedef lm_array *(*graph_fn)(lm_array **in);

static double eval_once(graph_fn fn, lm_array **in)
{
    lm_array *g = fn(in);
    if (!g) die("build");
    double t0 = now();
    if (lm_array_eval(g) != LM_OK) die("eval");
    double t = now() - t0;
    lm_array_release(g);
    return t;
}

/* Untimed evaluations until the GPU runs at its steady speed: windows of
 * at least 100 ms, until the mean time of two windows in a row agrees
 * within 3% and at least VKBENCH_WARM_MS (default 500; 0: no warm-up at
 * all) have passed, at most 5 s.  Why (issue 25): a process that starts
 * with an empty pipeline cache spends 0.2-2 s compiling a kernel's
 * pipelines, the GPU idles meanwhile and the driver drops the SM clock to
 * 345-870 MHz (nvidia-smi, H100), and it takes a few hundred ms of work to
 * climb back to 1980 MHz: evaluations timed right after a compile ran at
 * 0.2-0.4x.  A process whose pipelines load from the cache never idles that
 * long.  Returns the milliseconds spent; *nout: how many evaluations. */
static double warm_up(graph_fn fn, lm_array **in, int *nout)
{
    const char *w = getenv("VKBENCH_WARM_MS");
    double least = w && *w ? atof(w) * 1e-3 : 0.5, spent = 0, last = 0;
    int n = 0;
    if (least <= 0) { *nout = 0; return 0; }
    while (spent < 5.0) {
        double win = 0;
        int k = 0;
        while (win < 0.1) { win += eval_once(fn, in); k++; }
        spent += win;
        n += k;
        double mean = win / k;
        if (spent >= least && last > 0 && mean < last * 1.03 && mean > last / 1.03) break;
        last = mean;
    }
    *nout = n;
    return spent * 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* the median, min and max of `reps` evaluations of the graph fn builds,
 * after the first (it makes the pipelines) and a warm-up; every figure is
 * printed as "name median [a-b] unit" (a-b: the figure at the slowest and at
 * the fastest run), so compare.py can flag a spread over 15% */
typedef struct { double med, lo, hi; } timing;

static timing time_of(graph_fn fn, lm_array **in, int reps)
{
    double ts[64];
    int nw;
    if (reps > 64) reps = 64;
    eval_once(fn, in);
    warm_up(fn, in, &nw);
    for (int r = 0; r < reps; r++) ts[r] = eval_once(fn, in);
    qsort(ts, (size_t)reps, sizeof *ts, cmp_double);
    return (timing){ts[reps / 2], ts[0], ts[reps - 1]};
}

/* a rate (work / time): the bracket runs from the slowest run's to the fastest's */
static void print_rate(const char *name, double work, timing t, const char *unit)
{
    printf("%s %.4g [%.4g-%.4g] %s\n", name, work / t.med, work / t.hi, work / t.lo, unit);
}

static void print_ms(const char *name, double scale, timing t)
{
    printf("%s %.4g [%.4g-%.4g] ms\n", name, t.med * scale * 1e3, t.lo * scale * 1e3, t.hi * scale * 1e3);
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
    char name[64];
    snprintf(name, sizeof name, "matmul_%s_%lld", lm_dtype_name(dt), (long long)n);
    print_rate(name, 2.0 * (double)n * (double)n * (double)n * 1e-12, time_of(g_matmul, in, 7), "TFLOP/s");
    lm_array_release(in[0]);
    lm_array_release(in[1]);
}

static lm_array *g_matmul_bt(lm_array **in)
{
    lm_array *t = lm_transpose(in[1], 0, 1), *r = lm_matmul(in[0], t);
    lm_array_release(t);
    return r;
}

/* one [m, k] x [k, n] product: "matmul_DT_NAME median [min-max] TFLOP/s",
 * then its first evaluation and warm-up on a comment line; bt: B stored
 * [n, k] and read transposed (a linear layer's weight); batch > 0: A is
 * [batch, m, k] and B the same [k, n] for every entry (broadcast, as a
 * model's weight is) */
static void bench_mm_one(lm_dtype dt, int64_t batch, int64_t m, int64_t k, int64_t n, int reps, const char *name,
                         bool bt)
{
    int64_t sa[3] = {batch, m, k}, sb[2] = {bt ? n : k, bt ? k : n};
    lm_array *in[2] = {batch > 0 ? randn(3, sa, dt) : randn(2, sa + 1, dt), randn(2, sb, dt)};
    lm_array *(*fn)(lm_array **) = bt ? g_matmul_bt : g_matmul;
    double first = eval_once(fn, in);
    int nwarm;
    double spent = warm_up(fn, in, &nwarm);
    double ts[64];
    for (int r = 0; r < reps; r++) ts[r] = eval_once(fn, in);
    qsort(ts, (size_t)reps, sizeof *ts, cmp_double);
    double f = 2.0 * (double)(batch > 0 ? batch : 1) * (double)m * (double)k * (double)n * 1e-12;
    printf("matmul_%s_%s %.4g [%.4g-%.4g] TFLOP/s\n", lm_dtype_name(dt), name, f / ts[reps / 2],
           f / ts[reps - 1], f / ts[0]);
    printf("# matmul_%s_%s: first evaluation %.1f ms, then %d untimed (%.0f ms)\n", lm_dtype_name(dt), name,
           first * 1e3, nwarm, spent);
    fflush(stdout);
    lm_array_release(in[0]);
    lm_array_release(in[1]);
}

/* VKBENCH_ONLY=mm: matmul at VKBENCH_SIZES (a comma list, default
 * 1024,2048,4096,8192) in each of VKBENCH_DTYPE (a comma list of f16, bf16,
 * f32; default f16), as the median, min and max of VKBENCH_REPS (7) timed
 * evaluations after the first (it makes the pipelines; its time is
 * printed) and the warm-up above (bench/gpu/coldwarm.sh; variant sweeps:
 * bench/gpu/mm_sweep.sh); VKBENCH_SIZES= (empty) with VKBENCH_MM_SHAPES
 * gives the listed shapes alone. */
static void bench_mm_spread(void)
{
    const char *sz = getenv("VKBENCH_SIZES"), *dn = getenv("VKBENCH_DTYPE"), *rp = getenv("VKBENCH_REPS");
    int reps = rp && atoi(rp) > 0 && atoi(rp) <= 64 ? atoi(rp) : 7;
    char dts[64];
    snprintf(dts, sizeof dts, "%s", dn && *dn ? dn : "f16");
    char *save_d = NULL;
    for (char *d = strtok_r(dts, ",", &save_d); d; d = strtok_r(NULL, ",", &save_d)) {
        lm_dtype dt = !strcmp(d, "f32") ? LM_F32 : !strcmp(d, "bf16") ? LM_BF16 : LM_F16;
        char buf[512], name[96];
        const char *shp = getenv("VKBENCH_MM_SHAPES");
        bool shapes_only = sz && !*sz && shp && *shp;
        snprintf(buf, sizeof buf, "%s", sz && *sz ? sz : shapes_only ? "" : "1024,2048,4096,8192");
        char *save_s = NULL;
        for (char *t = strtok_r(buf, ",", &save_s); t; t = strtok_r(NULL, ",", &save_s)) {
            long long n = atoll(t);
            snprintf(name, sizeof name, "%lld", n);
            bench_mm_one(dt, 0, n, n, n, reps, name, false);
        }
        /* VKBENCH_MM_SHAPES="M:K:N,...": [M, K] x [K, N] products besides the
         * squares (a DiT's linear layers: M tokens), "matmul_DT_MxKxN"; a
         * shape ending in t ("1:2560:9728t") stores B [N, K] and reads it
         * transposed, as a linear layer does ("matmul_DT_MxKxNt"); a
         * prefix bBx ("b2x1024:1280:1280") makes A [B, M, K] times the same
         * [K, N] for every entry, as a UNet's CFG batch of 2 meets a weight
         * ("matmul_DT_bBxMxKxN", TFLOP/s over all B entries).
         * VKBENCH_MM_GEMM=1 times each shape again on the GEMM kernels
         * (LUMEN_VK_GEMV=0), "matmul_DT_MxKxN_gemm": the GEMV kernel's
         * products (matmul_gemv.c) both ways in one call */
        const char *both = getenv("VKBENCH_MM_GEMM");
        if (shp && *shp) {
            snprintf(buf, sizeof buf, "%s", shp);
            save_s = NULL;
            for (char *t = strtok_r(buf, ",", &save_s); t; t = strtok_r(NULL, ",", &save_s)) {
                long long m, k, n, nb = 0;
                char tail[8] = "";
                int used = 0;
                if (t[0] == 'b' && (sscanf(t, "b%lldx%n", &nb, &used) < 1 || used == 0 || nb < 1))
                    die("VKBENCH_MM_SHAPES wants [bBx]M:K:N[t],...");
                if (sscanf(t + used, "%lld:%lld:%lld%7s", &m, &k, &n, tail) < 3 || m < 1 || k < 1 || n < 1 ||
                    (*tail && strcmp(tail, "t")))
                    die("VKBENCH_MM_SHAPES wants [bBx]M:K:N[t],...");
                bool bt = *tail == 't';
                char pre[32] = "";
                if (nb) snprintf(pre, sizeof pre, "b%lldx", nb);
                snprintf(name, sizeof name, "%s%lldx%lldx%lld%s", pre, m, k, n, bt ? "t" : "");
                bench_mm_one(dt, nb, m, k, n, reps, name, bt);
                if (both && !strcmp(both, "1")) {
                    const char *was = getenv("LUMEN_VK_GEMV");
                    char keep[16];
                    snprintf(keep, sizeof keep, "%s", was ? was : "");
                    setenv("LUMEN_VK_GEMV", "0", 1);
                    snprintf(name, sizeof name, "%s%lldx%lldx%lld%s_gemm", pre, m, k, n, bt ? "t" : "");
                    bench_mm_one(dt, nb, m, k, n, reps, name, bt);
                    if (was) setenv("LUMEN_VK_GEMV", keep, 1);
                    else unsetenv("LUMEN_VK_GEMV");
                }
            }
        }
    }
}

static void bench_stream(int64_t n)
{
    lm_array *in[2] = {randn(1, &n, LM_F32), randn(1, &n, LM_F32)};
    double gb = (double)n * 4 * 1e-9;
    char name[64];
    long long m = (long long)(n >> 20);
    snprintf(name, sizeof name, "add_f32_%lldM", m);
    print_rate(name, 3 * gb, time_of(g_add, in, 7), "GB/s");
    snprintf(name, sizeof name, "gelu_f32_%lldM", m);
    print_rate(name, 2 * gb, time_of(g_gelu, in, 7), "GB/s");
    snprintf(name, sizeof name, "copy_f32_%lldM", m);
    print_rate(name, 2 * gb, time_of(g_copy, in, 7), "GB/s");
    snprintf(name, sizeof name, "chain_f32_%lldM", m);
    print_ms(name, 1, time_of(g_chain, in, 7));
    lm_array_release(in[0]);
    lm_array_release(in[1]);
}

/* ---- fused chains (compile): compiled vs uncompiled ---- */
static lm_array *c_gelu(lm_array **in)
{
    lm_array *t1 = lm_binary(LM_OP_MUL, in[0], in[1]), *t2 = lm_binary(LM_OP_ADD, t1, in[2]);
    lm_array *t3 = lm_unary(LM_OP_GELU_TANH, t2), *y = lm_binary(LM_OP_MUL, t3, in[1]);
    lm_array_release(t1); lm_array_release(t2); lm_array_release(t3);
    return y;
}
static lm_array *c_swiglu(lm_array **in)
{
    lm_array *s = lm_unary(LM_OP_SILU, in[0]), *y = lm_binary(LM_OP_MUL, s, in[1]);
    lm_array_release(s);
    return y;
}
static lm_array *c_chain10(lm_array **in)
{
    static const lm_op ops[] = {LM_OP_SIN, LM_OP_EXP, LM_OP_NEG, LM_OP_TANH, LM_OP_ABS,
                                LM_OP_SQRT, LM_OP_SIGMOID, LM_OP_SQUARE, LM_OP_SILU, LM_OP_COS};
    lm_array *v = lm_array_retain(in[0]);
    for (int k = 0; k < 10; k++) {
        lm_array *w = lm_unary(ops[k], v);
        lm_array_release(v);
        v = w;
    }
    return v;
}

static lm_compiled *compiled_now;
static int compiled_nin;
static lm_array *g_compiled(lm_array **in)
{
    lm_array *out = NULL;
    if (lm_compiled_call(compiled_now, compiled_nin, in, &out) != 1) return NULL;
    return out;
}

/* effective GB/s: inputs read once and the output written once */
static void bench_fused_one(const char *name, graph_fn fn, int nin, lm_array **in, int64_t n)
{
    lm_array *ph[4];
    for (int k = 0; k < nin; k++) ph[k] = lm_placeholder(1, &n, LM_F32, dev);
    lm_array *traced = fn(ph);
    compiled_now = lm_compile_graph(nin, ph, 1, &traced, LM_COMPILE_ON);
    if (!compiled_now) die("compile");
    compiled_nin = nin;
    double gb = (double)n * 4 * (nin + 1) * 1e-9;
    timing tc = time_of(g_compiled, in, 7);
    int64_t k0 = lm_eval_kernel_count();      /* kernels of one call, warm */
    eval_once(g_compiled, in);
    double kc = (double)(lm_eval_kernel_count() - k0);
    timing tu = time_of(fn, in, 7);
    k0 = lm_eval_kernel_count();
    eval_once(fn, in);
    double ku = (double)(lm_eval_kernel_count() - k0);
    char key[64];
    snprintf(key, sizeof key, "fused_%s_%lldM", name, (long long)(n >> 20));
    print_rate(key, gb, tc, "GB/s");
    snprintf(key, sizeof key, "unfused_%s_%lldM", name, (long long)(n >> 20));
    print_rate(key, gb, tu, "GB/s");
    printf("# %s: compiled %.3f ms (%.0f kernel/call), uncompiled %.3f ms (%.0f kernels/call)\n", name,
           tc.med * 1e3, kc, tu.med * 1e3, ku);
    fflush(stdout);
    lm_compiled_free(compiled_now);
    lm_array_release(traced);
    for (int k = 0; k < nin; k++) lm_array_release(ph[k]);
}

static void bench_fused(int64_t n)
{
    lm_array *in[3] = {randn(1, &n, LM_F32), randn(1, &n, LM_F32), randn(1, &n, LM_F32)};
    bench_fused_one("gelu_chain", c_gelu, 3, in, n);
    bench_fused_one("swiglu", c_swiglu, 2, in, n);
    bench_fused_one("chain10", c_chain10, 1, in, n);
    for (int k = 0; k < 3; k++) lm_array_release(in[k]);
}

/* ---- neural-network ops: conv2d 3x3 and attention ---- */
static lm_array *g_conv(lm_array **in)
{
    const int64_t st[2] = {1, 1}, pad[4] = {1, 1, 1, 1}, dil[2] = {1, 1};
    return lm_conv2d(in[0], in[1], in[2], st, pad, dil, 1);
}
static lm_array *g_attn(lm_array **in) { return lm_attention(in[0], in[1], in[2], NULL, false, 0); }
static lm_array *g_attn_causal(lm_array **in) { return lm_attention(in[0], in[1], in[2], NULL, true, 0); }

/* conv2d 3x3, 128 -> 128 channels at hw x hw, batch 1, bias */
static void bench_conv(int64_t hw, lm_dtype dt)
{
    int64_t xs[4] = {1, 128, hw, hw}, ws[4] = {128, 128, 3, 3}, bs[1] = {128};
    lm_array *in[3] = {randn(4, xs, dt), randn(4, ws, dt), randn(1, bs, dt)};
    timing tm = time_of(g_conv, in, 7);
    double t = tm.med;
    double flop = 2.0 * 128 * 128 * 9 * (double)hw * (double)hw;
    char name[64];
    snprintf(name, sizeof name, "conv3x3_%s_%lld", lm_dtype_name(dt), (long long)hw);
    print_ms(name, 1, tm);
    printf("# conv3x3_%s_%lld: %.1f TFLOP/s (CPU fallbacks in the last eval: %lld)\n", lm_dtype_name(dt),
           (long long)hw, flop / t * 1e-12, (long long)lm_eval_last_stats().fallbacks);
    fflush(stdout);
    for (int k = 0; k < 3; k++) lm_array_release(in[k]);
}

/* attention B=1, H=24, L, D=128 */
static void bench_attn(int64_t L, lm_dtype dt, bool causal)
{
    int64_t s[4] = {1, 24, L, 128};
    lm_array *in[3] = {randn(4, s, dt), randn(4, s, dt), randn(4, s, dt)};
    timing tm = time_of(causal ? g_attn_causal : g_attn, in, 7);
    double t = tm.med;
    double flop = 4.0 * 24 * (double)L * (double)L * 128 / (causal ? 2 : 1);
    char name[64];
    snprintf(name, sizeof name, "attn%s_%s_%lld", causal ? "_causal" : "", lm_dtype_name(dt), (long long)L);
    print_ms(name, 1, tm);
    printf("# attn%s_%s_%lld: %.1f TFLOP/s (CPU fallbacks in the last eval: %lld)\n",
           causal ? "_causal" : "", lm_dtype_name(dt), (long long)L, flop / t * 1e-12,
           (long long)lm_eval_last_stats().fallbacks);
    fflush(stdout);
    for (int k = 0; k < 3; k++) lm_array_release(in[k]);
}

static void bench_nn(bool quick)
{
    bench_conv(quick ? 64 : 512, LM_F32);
    bench_conv(quick ? 64 : 512, LM_F16);
    bench_attn(quick ? 256 : 4096, LM_F32, false);
    bench_attn(quick ? 256 : 4096, LM_F16, false);
    bench_attn(quick ? 256 : 4096, LM_F16, true);
}

/* attention B=1, H=24: "attn[_causal]_DT_dD_L median ms" and a comment
 * line with min, max and TFLOP/s of the median; `variant` (or NULL) is
 * appended to the name (the D > 256 paths below) */
static void bench_attn_one(int64_t B, int64_t H, int64_t L, int64_t D, lm_dtype dt, bool causal, const char *variant)
{
    int64_t s[4] = {B, H, L, D};
    lm_array *in[3] = {randn(4, s, dt), randn(4, s, dt), randn(4, s, dt)};
    enum { REPS = 9 };
    double t[REPS];
    int64_t gemm0 = lm_vulkan_attn_gemm_count();
    for (int r = 0; r < REPS + 1; r++) {
        lm_array *g = (causal ? g_attn_causal : g_attn)(in);
        if (!g) die("build");
        double t0 = now();
        if (lm_array_eval(g) != LM_OK) die("eval");
        if (r > 0) t[r - 1] = now() - t0;   /* the first run makes pipelines */
        lm_array_release(g);
        /* VKBENCH_ATTN_WARM=1: mm's warm-up after the first run (the clock
         * drops while a cold pipeline cache compiles: see warm_up) */
        const char *aw = getenv("VKBENCH_ATTN_WARM");
        if (r == 0 && aw && !strcmp(aw, "1")) {
            int nw;
            warm_up(causal ? g_attn_causal : g_attn, in, &nw);
        }
    }
    qsort(t, REPS, sizeof *t, cmp_double);
    char key[80];
    snprintf(key, sizeof key, "attn%s_%s_d%lld_%lld", causal ? "_causal" : "", lm_dtype_name(dt), (long long)D,
             (long long)L);
    if (B != 1 || H != 24)
        snprintf(key + strlen(key), sizeof key - strlen(key), "_b%lldh%lld", (long long)B, (long long)H);
    if (variant) snprintf(key + strlen(key), sizeof key - strlen(key), "_%s", variant);
    double flop = 4.0 * (double)(B * H) * (double)L * (double)L * (double)D / (causal ? 2 : 1);
    printf("%s %.4f ms\n", key, t[REPS / 2] * 1e3);
    printf("# %s: min %.4f max %.4f ms, %.1f TFLOP/s (CPU fallbacks in the last eval: %lld; %s)\n", key,
           t[0] * 1e3, t[REPS - 1] * 1e3, flop / t[REPS / 2] * 1e-12, (long long)lm_eval_last_stats().fallbacks,
           lm_vulkan_attn_gemm_count() > gemm0 ? "two products" : "one kernel");
    fflush(stdout);
    for (int k = 0; k < 3; k++) lm_array_release(in[k]);
}

/* the default's figure; with D over 256 also each path forced
 * (LUMEN_VK_ATTN512=gemm, =simt: names ending _gemm, _simt), in the same
 * process one after the other */
static void bench_attn_bhld(int64_t B, int64_t H, int64_t L, int64_t D, lm_dtype dt, bool causal)
{
    bench_attn_one(B, H, L, D, dt, causal, NULL);
    if (D <= 256) return;
    const char *was = getenv("LUMEN_VK_ATTN512");
    char keep[32];
    snprintf(keep, sizeof keep, "%s", was ? was : "");
    const char *paths[2] = {"gemm", "simt"};
    for (int i = 0; i < 2; i++) {
        setenv("LUMEN_VK_ATTN512", paths[i], 1);
        bench_attn_one(B, H, L, D, dt, causal, paths[i]);
    }
    if (was) setenv("LUMEN_VK_ATTN512", keep, 1);
    else unsetenv("LUMEN_VK_ATTN512");
}

static void bench_attn_med(int64_t L, int64_t D, lm_dtype dt, bool causal)
{
    bench_attn_bhld(1, 24, L, D, dt, causal);
}

/* VKBENCH_ATTN_SHAPES="B:H:L:D:dtype:causal,...": these shapes instead
 * (bench/gpu/attn_khr.py) */
static bool bench_attn_listed(bool quick)
{
    const char *e = getenv("VKBENCH_ATTN_SHAPES");
    if (!e || !*e) return false;
    while (*e) {
        long long B, H, L, D;
        int c, n = 0;
        char dt[8];
        if (sscanf(e, "%lld:%lld:%lld:%lld:%7[a-z0-9]:%d%n", &B, &H, &L, &D, dt, &c, &n) != 6) die("VKBENCH_ATTN_SHAPES");
        lm_dtype t = !strcmp(dt, "f16") ? LM_F16 : !strcmp(dt, "bf16") ? LM_BF16 : LM_F32;
        bench_attn_bhld(B, H, quick ? L / 16 : L, D, t, c != 0);
        e += n;
        if (*e == ',') e++;
    }
    return true;
}

static void bench_attn_sweep(bool quick)
{
    if (bench_attn_listed(quick)) return;
    static const struct { int64_t L, D; lm_dtype dt; bool causal; } shapes[] = {
        {4096, 128, LM_F16, false}, {4096, 128, LM_F16, true}, {1024, 128, LM_F16, false},
        {1024, 128, LM_F16, true},  {4096, 64, LM_F16, false},  {4096, 64, LM_F16, true},
        {4096, 128, LM_BF16, false}, {4096, 128, LM_F32, false},
    };
    /* VKBENCH_ATTN_FIRST=n: the first n shapes only; VKBENCH_ATTN_D=d: head dim d only */
    const char *first = getenv("VKBENCH_ATTN_FIRST"), *d = getenv("VKBENCH_ATTN_D");
    size_t n = sizeof shapes / sizeof *shapes;
    if (first && atoi(first) > 0 && (size_t)atoi(first) < n) n = (size_t)atoi(first);
    for (size_t i = 0; i < n; i++)
        if (!d || !*d || atoi(d) == shapes[i].D) bench_attn_med(quick ? shapes[i].L / 16 : shapes[i].L, shapes[i].D, shapes[i].dt, shapes[i].causal);
}

/* a 10,000-node chain of tiny adds in one eval: time per node */
static void bench_overhead(void)
{
    int64_t n = 16;
    double ts[7];
    for (int r = 0; r < 7; r++) {
        lm_array *a = lm_zeros(1, &n, LM_F32, dev);
        for (int i = 0; i < 10000; i++) {
            lm_array *b = lm_binary_scalar(LM_OP_ADD, a, 1.0, false);
            lm_array_release(a);
            a = b;
        }
        double t0 = now();
        if (lm_array_eval(a) != LM_OK) die("overhead eval");
        ts[r] = now() - t0;
        lm_array_release(a);
    }
    qsort(ts, 7, sizeof *ts, cmp_double);
    printf("overhead_10000 %.3g [%.3g-%.3g] us/node\n", ts[3] / 1e4 * 1e6, ts[0] / 1e4 * 1e6, ts[6] / 1e4 * 1e6);
}

int main(int argc, char **argv)
{
    bool quick = argc > 1 && !strcmp(argv[1], "quick");
    if (lm_init() != LM_OK) die("init");
    const char *spec = getenv("LUMEN_DEVICE");
    dev = lm_device_find(spec && *spec ? spec : "vulkan");
    if (!dev || strncmp(dev->spec, "vulkan", 6)) {
        fprintf(stderr, "vkbench: Vulkan: %s\n", lm_vulkan_status());
        die("no Vulkan device");
    }
    printf("device %s | %s\n", dev->name, dev->info);
    fflush(stdout);
    const lm_dtype dts[3] = {LM_F32, LM_F16, LM_BF16};
    int64_t sizes[4] = {1024, 2048, 4096, 8192};
    /* VKBENCH_ONLY=fused: the fused chains alone */
    const char *only = getenv("VKBENCH_ONLY");
    if (only && !strcmp(only, "fused")) {
        int64_t n = quick ? (1 << 20) : ((int64_t)256 << 20);
        lm_array *x = randn(1, &n, LM_F32);
        char name[64];
        snprintf(name, sizeof name, "copy_f32_%lldM", (long long)(n >> 20));
        print_rate(name, 8e-9 * (double)n, time_of(g_copy, &x, 7), "GB/s");
        lm_array_release(x);
        bench_fused(n);
        return 0;
    }
    if (only && !strcmp(only, "attn")) {
        bench_attn_sweep(quick);
        return 0;
    }
    if (only && !strcmp(only, "mm")) {
        bench_mm_spread();
        return 0;
    }
    if (only && !strcmp(only, "nn")) {
        bench_nn(quick);
        return 0;
    }
    for (int t = 0; t < 3; t++)
        for (int k = 0; k < (quick ? 1 : 4); k++) {
            bench_matmul(quick ? 256 : sizes[k], dts[t]);
            fflush(stdout);
        }
    bench_stream(quick ? (1 << 20) : ((int64_t)256 << 20));
    bench_fused(quick ? (1 << 20) : ((int64_t)256 << 20));
    bench_overhead();
    return 0;
}
