/* test_cpu_vmath.c - the CPU's vector math (backends/cpu/vmath.h) at every
 * instruction-set level this machine runs: each SLEEF-backed function
 * against libm in double, in ulps, over its useful domain and at its
 * special values; tails of every length; half/bfloat16 conversions against
 * the portable ones in core/dtype.c; and ops evaluated through the backend
 * at each level.  The measured worst cases are printed (docs/CPU_MATH.md
 * records them); the bounds asserted are the documented ones. */
#include <float.h>
#include "testutil.h"
#include "backends/cpu/vmath.h"
#include "core/dtype.h"

static const char *const isas[] = {"sse2", "avx2", "avx512"};

/* |got - ref| in units of the last place of the float nearest ref (the
 * larger of its two neighbouring gaps) */
static double ulp_err(float got, double ref)
{
    if (isnan(ref)) return isnan(got) ? 0 : INFINITY;
    float r = (float)ref;
    if (isinf(r)) return got == r ? 0 : INFINITY;
    if (isnan(got) || isinf(got)) return INFINITY;
    float a = fabsf(r);
    double up = (double)nextafterf(a, INFINITY) - a, down = a > 0 ? (double)a - nextafterf(a, 0) : up;
    return fabs((double)got - ref) / (up > down ? up : down);
}

static double r_sigmoid(double x) { return 1 / (1 + exp(-x)); }
static double r_silu(double x) { return x / (1 + exp(-x)); }
static double r_gelu(double x) { return 0.5 * x * (1 + erf(x * 0.70710678118654752)); }
static double r_gelu_tanh(double x)
{
    return 0.5 * x * (1 + tanh(0.79788456080286536 * (x + 0.044715 * x * x * x)));
}
static double r_softplus(double x) { return x > 20 ? x : log1p(exp(x)); }
static double r_rsqrt(double x) { return 1 / sqrt(x); }
static double r_add(double a, double b) { return a + b; }
static double r_sub(double a, double b) { return a - b; }
static double r_mul(double a, double b) { return a * b; }
static double r_div(double a, double b) { return a / b; }
static double r_max(double a, double b) { return a > b || a != a ? a : b; }
static double r_min(double a, double b) { return a < b || a != a ? a : b; }
static double r_pow(double a, double b) { return pow(a, b); }
static double r_atan2(double a, double b) { return atan2(a, b); }
static double r_logaddexp(double a, double b) { return (a > b ? a : b) + log1p(exp(-fabs(a - b))); }
static double r_hypot(double a, double b) { return hypot(a, b); }

/* Both tables are made from vmath.h's rows, indexed by the function: a
 * row added there without its reference here (r_<name> for a binary one,
 * UFN_<name> for a unary one) does not compile, and the name printed on a
 * failure is the row's. */
typedef struct {
    const char *name;
    double (*ref)(double, double);
} bfn;
static const bfn binary_fns[LM_VM_NBINARY] = {
#define BFN_ROW(NAME, name) [LM_VM_##NAME] = {#name, r_##name},
    LM_VM_BINARY_FNS(BFN_ROW)
#undef BFN_ROW
};

typedef struct {
    const char *name;
    double (*ref)(double);
    double lo, hi;   /* domain tested (log-spaced when lo > 0 and hi/lo > 1e6) */
    double ulps;     /* bound asserted */
    double atol;     /* or an absolute bound, for results that cancel (0: none) */
} ufn;

/* each unary row's reference, domain and bounds */
#define UFN_exp {"exp", exp, -103, 88.7, 1.0, 0}
#define UFN_log {"log", log, 1e-37, 3e38, 1.0, 0}
#define UFN_log1p {"log1p", log1p, -0.9999, 1e30, 1.0, 0}
#define UFN_expm1 {"expm1", expm1, -20, 88.7, 1.0, 0}
#define UFN_sin {"sin", sin, -1e4, 1e4, 1.0, 0}
#define UFN_cos {"cos", cos, -1e4, 1e4, 1.0, 0}
#define UFN_tan {"tan", tan, -1e4, 1e4, 1.0, 0}
#define UFN_tanh {"tanh", tanh, -20, 20, 1.0, 0}
#define UFN_erf {"erf", erf, -6, 6, 1.0, 0}
#define UFN_sqrt {"sqrt", sqrt, 1e-37, 3e38, 0.5, 0}
#define UFN_rsqrt {"rsqrt", r_rsqrt, 1e-37, 3e38, 1.5, 0}   /* 1 / sqrt: two roundings */
#define UFN_sigmoid {"sigmoid", r_sigmoid, -80, 80, 2.5, 0}
#define UFN_silu {"silu", r_silu, -80, 80, 3.0, 0}
/* 1 + erf(x/sqrt2) cancels for x < -3: absolute error there */
#define UFN_gelu {"gelu", r_gelu, -10, 10, 3.0, 2e-7}
#define UFN_gelu_tanh {"gelu_tanh", r_gelu_tanh, -10, 10, 4.0, 2e-7}
#define UFN_softplus {"softplus", r_softplus, -80, 80, 2.0, 0}
#define UFN_erfc {"erfc", erfc, -6, 8.5, 1.5, 0}   /* SLEEF: 1.5 ulp; past 9 erfc nears denormals */
static const ufn unary_fns[LM_VM_NUNARY] = {
#define UFN_ROW(NAME, name) [LM_VM_##NAME] = UFN_##name,
    LM_VM_UNARY_FNS(UFN_ROW)
#undef UFN_ROW
};

#define NPTS 200000

/* domain points: a linear or logarithmic grid plus pseudo-random points */
static void fill_domain(float *x, int n, double lo, double hi)
{
    bool logsp = lo > 0 && hi / lo > 1e6;
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n; i++) {
        double t;
        if (i < n / 2) {
            t = (double)i / (n / 2 - 1);
        } else {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            t = (double)(s >> 11) / 9007199254740992.0;
        }
        x[i] = (float)(logsp ? exp(log(lo) + t * (log(hi) - log(lo))) : lo + t * (hi - lo));
    }
}

static void test_unary_accuracy(void **state)
{
    (void)state;
    float *x = malloc(sizeof(float) * NPTS), *y = malloc(sizeof(float) * NPTS);
    assert_non_null(x);
    assert_non_null(y);
    for (size_t l = 0; l < sizeof isas / sizeof isas[0]; l++) {
        const lm_vmath *t = lm_vmath_get(isas[l]);
        if (!t) {
            printf("  %s: not run by this CPU, skipped\n", isas[l]);
            continue;
        }
        assert_string_equal(t->name, isas[l]);
        for (int k = 0; k < LM_VM_NUNARY; k++) {
            const ufn *f = &unary_fns[k];
            fill_domain(x, NPTS, f->lo, f->hi);
            t->unary[k](y, x, NPTS);
            double worst = 0, worst_x = 0, worst_abs = 0;
            for (int i = 0; i < NPTS; i++) {
                double ref = f->ref((double)x[i]), e = ulp_err(y[i], ref);
                double ae = fabs((double)y[i] - ref);
                if (f->atol > 0 && ae <= f->atol) {
                    if (ae > worst_abs) worst_abs = ae;
                    continue;
                }
                if (e > worst) {
                    worst = e;
                    worst_x = x[i];
                }
            }
            printf("  %-6s %-9s max %.3f ulp (at %.7g)", t->name, f->name, worst, worst_x);
            if (f->atol > 0) printf(", or abs %.2g", worst_abs);
            printf("\n");
            if (worst > f->ulps) fail_msg("%s %s: %.3f ulp at x=%.9g > %.1f", t->name, f->name, worst, worst_x, f->ulps);
        }
    }
    free(x);
    free(y);
}

/* special values: NaN stays NaN, infinities and zeros where libm puts them */
static void test_unary_specials(void **state)
{
    (void)state;
    const float sp[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1.0f, -1.0f, 1e-45f, 100.0f, -100.0f};
    const int n = (int)(sizeof sp / sizeof sp[0]);
    for (size_t l = 0; l < sizeof isas / sizeof isas[0]; l++) {
        const lm_vmath *t = lm_vmath_get(isas[l]);
        if (!t) continue;
        for (int k = 0; k < LM_VM_NUNARY; k++) {
            const ufn *f = &unary_fns[k];
            float y[16];
            t->unary[k](y, sp, n);
            for (int i = 0; i < n; i++) {
                double ref = f->ref((double)sp[i]);
                if (isnan(sp[i]) || isnan(ref)) {
                    if (!isnan(y[i]) && !(k == LM_VM_SILU && isinf(sp[i])))
                        fail_msg("%s %s(%g) = %g, want NaN", t->name, f->name, sp[i], y[i]);
                    continue;
                }
                if (isinf((float)ref) || ref == 0) {
                    if (y[i] != (float)ref && !(f->atol > 0 && fabs(y[i] - ref) <= f->atol))
                        fail_msg("%s %s(%g) = %.9g, want %.9g", t->name, f->name, sp[i], y[i], ref);
                } else if (ulp_err(y[i], ref) > f->ulps && fabs(y[i] - ref) > f->atol &&
                           !(fabs(ref) < FLT_MIN && fabs(y[i] - ref) < 1e-40)) {   /* subnormal results */
                    fail_msg("%s %s(%g) = %.9g, want %.9g", t->name, f->name, sp[i], y[i], ref);
                }
            }
        }
    }
}

/* every length from 0 to three vectors: tails give the same values as
 * whole vectors, and nothing past n is written */
static void test_tails(void **state)
{
    (void)state;
    for (size_t l = 0; l < sizeof isas / sizeof isas[0]; l++) {
        const lm_vmath *t = lm_vmath_get(isas[l]);
        if (!t) continue;
        float x[64], full[64], y[65], b[64];
        for (int i = 0; i < 64; i++) {
            x[i] = 0.37f * (float)i - 7.0f;
            b[i] = 0.5f + 0.01f * (float)i;
        }
        for (int fn = 0; fn < LM_VM_NUNARY; fn++) {
            t->unary[fn](full, x, 64);
            for (int n = 0; n <= 3 * t->lanes + 1; n++) {
                for (int i = 0; i < 65; i++) y[i] = -12345.0f;
                t->unary[fn](y, x, n);
                for (int i = 0; i < n; i++) assert_memory_equal(&y[i], &full[i], sizeof(float));
                for (int i = n; i < 65; i++) assert_true(y[i] == -12345.0f);
            }
        }
        /* binary: one operand broadcast, tails */
        for (int fn = 0; fn < LM_VM_NBINARY; fn++) {
            float c = 1.25f;
            for (int n = 0; n <= 3 * t->lanes + 1; n++) {
                const bfn *f = &binary_fns[fn];
                t->binary[fn](y, b, 1, &c, 0, n);
                for (int i = 0; i < n; i++)
                    if (ulp_err(y[i], f->ref(b[i], c)) > 1.0)
                        fail_msg("%s %s(%g, %g) at length %d = %.9g, want %.9g", t->name, f->name, b[i], c, n, y[i],
                                 f->ref(b[i], c));
                t->binary[fn](y, &c, 0, b, 1, n);
                for (int i = 0; i < n; i++)
                    if (ulp_err(y[i], f->ref(c, b[i])) > 1.0)
                        fail_msg("%s %s(%g, %g) at length %d = %.9g, want %.9g", t->name, f->name, c, b[i], n, y[i],
                                 f->ref(c, b[i]));
            }
        }
    }
}

/* maximum/minimum propagate NaN (the first operand's when both are);
 * stream_copy copies any length at any alignment */
static void test_minmax_stream(void **state)
{
    (void)state;
    const float a[6] = {1, NAN, 3, -0.0f, INFINITY, NAN}, b[6] = {2, 5, NAN, 0.0f, 1, -NAN};
    float y[6], buf[200], src[200];
    for (int i = 0; i < 200; i++) src[i] = (float)i;
    for (size_t l = 0; l < sizeof isas / sizeof isas[0]; l++) {
        const lm_vmath *t = lm_vmath_get(isas[l]);
        if (!t) continue;
        static const lm_vm_binary minmax[] = {LM_VM_MAXIMUM, LM_VM_MINIMUM};
        for (size_t k = 0; k < sizeof minmax / sizeof minmax[0]; k++) {
            lm_vm_binary fn = minmax[k];
            t->binary[fn](y, a, 1, b, 1, 6);
            for (int i = 0; i < 6; i++) {
                double r = binary_fns[fn].ref(a[i], b[i]);
                if (isnan(r)) assert_true(isnan(y[i]));
                else assert_memory_equal(&y[i], &(float){(float)r}, 4);
            }
        }
        for (int off = 0; off < 16; off++)
            for (int n = 0; n < 150; n += 7) {
                memset(buf, 0, sizeof buf);
                t->stream_copy(buf + off, src, n);
                for (int i = 0; i < 200; i++) assert_true(buf[i] == (i >= off && i < off + n ? src[i - off] : 0));
            }
    }
}

/* transpose32 at every level: ragged sizes around each block width, with
 * and without an op applied per block, with and without streamed stores,
 * rows that do and do not start on a cache line */
static void negate_seg(void *ctx, void *seg, int64_t n)
{
    (void)ctx;
    float *p = seg;
    for (int64_t i = 0; i < n; i++) p[i] = -p[i];
}

static void test_transpose32(void **state)
{
    (void)state;
    const int64_t sizes[] = {1, 3, 4, 7, 8, 15, 16, 17, 33, 63, 64, 65, 130};
    enum { LD = 160 };
    float *src = malloc(sizeof(float) * LD * LD), *dst = malloc(sizeof(float) * (LD * LD + 16));
    assert_non_null(src);
    assert_non_null(dst);
    for (int i = 0; i < LD * LD; i++) src[i] = (float)i * 0.5f - 1000.0f;
    for (size_t l = 0; l < sizeof isas / sizeof isas[0]; l++) {
        const lm_vmath *t = lm_vmath_get(isas[l]);
        if (!t) continue;
        for (size_t a = 0; a < sizeof sizes / sizeof sizes[0]; a++)
            for (size_t b = 0; b < sizeof sizes / sizeof sizes[0]; b++)
                for (int mode = 0; mode < 4; mode++) {
                    int64_t R = sizes[a], C = sizes[b], ldd = LD - (mode & 1);
                    bool neg = mode >= 2, nt = mode & 1;
                    for (int i = 0; i < LD * LD + 16; i++) dst[i] = NAN;
                    float *d = dst + (mode & 1);   /* streamed rows start off a line */
                    t->transpose32(d, ldd, src, LD, R, C, neg ? negate_seg : NULL, NULL, nt);
                    for (int64_t r = 0; r < R; r++)
                        for (int64_t c = 0; c < C; c++) {
                            float want = neg ? -src[c * LD + r] : src[c * LD + r];
                            if (d[r * ldd + c] != want)
                                fail_msg("%s transpose32 %lldx%lld mode %d at (%lld,%lld): %g, want %g", isas[l],
                                         (long long)R, (long long)C, mode, (long long)r, (long long)c,
                                         d[r * ldd + c], want);
                        }
                    /* nothing outside the R x C block is written */
                    for (int64_t r = 0; r < R; r++) assert_true(isnan(d[r * ldd + C]) || C == ldd);
                    assert_true(isnan(d[R * ldd]) || R * ldd >= LD * LD);
                }
    }
    free(src);
    free(dst);
}

static void test_binary_accuracy(void **state)
{
    (void)state;
    enum { N = 300 };
    float *a = malloc(sizeof(float) * N * N), *b = malloc(sizeof(float) * N * N), *y = malloc(sizeof(float) * N * N);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(y);
    for (size_t l = 0; l < sizeof isas / sizeof isas[0]; l++) {
        const lm_vmath *t = lm_vmath_get(isas[l]);
        if (!t) continue;
        /* pow: bases (0, 100], exponents [-20, 20]; atan2: both signs;
         * hypot: magnitudes 1e-30 to 1e30 of both signs, whose squares
         * overflow or underflow f32 */
        static const lm_vm_binary fns[] = {LM_VM_POW, LM_VM_ATAN2, LM_VM_HYPOT};
        for (size_t k = 0; k < sizeof fns / sizeof fns[0]; k++) {
            lm_vm_binary fn = fns[k];
            for (int i = 0; i < N; i++)
                for (int j = 0; j < N; j++) {
                    float u = (float)i / (N - 1), v = (float)j / (N - 1);
                    if (fn == LM_VM_POW) {
                        a[i * N + j] = 100.0f * (float)(i + 1) / N;
                        b[i * N + j] = -20.0f + 40.0f * v;
                    } else if (fn == LM_VM_ATAN2) {
                        a[i * N + j] = -50.0f + 100.0f * u;
                        b[i * N + j] = -50.0f + 100.0f * v;
                    } else {
                        a[i * N + j] = (i & 1 ? -1.0f : 1.0f) * powf(10.0f, -30.0f + 60.0f * u);
                        b[i * N + j] = (j & 1 ? -1.0f : 1.0f) * powf(10.0f, -30.0f + 60.0f * v);
                    }
                }
            t->binary[fn](y, a, 1, b, 1, N * N);
            double worst = 0;
            for (int i = 0; i < N * N; i++) {
                double ref = binary_fns[fn].ref(a[i], b[i]);
                if (fn == LM_VM_POW && (ref > 3e38 || ref < 1e-37)) continue;   /* overflow / subnormal */
                double e = ulp_err(y[i], ref);
                if (e > worst) worst = e;
            }
            printf("  %-6s %-9s max %.3f ulp\n", t->name, binary_fns[fn].name, worst);
            if (worst > 1.0) fail_msg("%s %s: %.3f ulp > 1.0", t->name, binary_fns[fn].name, worst);
        }
    }
    free(a);
    free(b);
    free(y);
}

static void test_exp_sub_sum(void **state)
{
    (void)state;
    enum { N = 10007 };
    float *x = malloc(sizeof(float) * N), *o = malloc(sizeof(float) * N);
    assert_non_null(x);
    assert_non_null(o);
    for (int i = 0; i < N; i++) x[i] = (float)sin(i * 0.1) * 30.0f;
    x[17] = -INFINITY;   /* a masked score */
    for (size_t l = 0; l < sizeof isas / sizeof isas[0]; l++) {
        const lm_vmath *t = lm_vmath_get(isas[l]);
        if (!t) continue;
        for (int n = 1; n <= N; n = n < 100 ? n + 1 : n * 3 + 1) {
            float m = 30.0f;
            double s = t->exp_sub_sum(o, x, n, m), ref = 0;
            for (int i = 0; i < n; i++) {
                double e = exp((double)(x[i] - m));   /* the f32 difference is the argument */
                ref += e;
                assert_true(ulp_err(o[i], e) <= 1.0);
            }
            assert_true(fabs(s - ref) <= 1e-6 * ref);
        }
    }
    free(x);
    free(o);
}

/* every half and bfloat16 pattern to f32, and f32 to both (ties, NaN,
 * overflow, subnormals), bit for bit as the portable conversions */
static void test_half_conversions(void **state)
{
    (void)state;
    enum { N = 65536 };
    uint16_t *h = malloc(2 * N), *h2 = malloc(2 * N);
    float *f = malloc(4 * N);
    assert_non_null(h);
    assert_non_null(h2);
    assert_non_null(f);
    for (size_t l = 0; l < sizeof isas / sizeof isas[0]; l++) {
        const lm_vmath *t = lm_vmath_get(isas[l]);
        if (!t) continue;
        for (int i = 0; i < N; i++) h[i] = (uint16_t)i;
        t->f16_to_f32(f, h, N);
        for (int i = 0; i < N; i++) {
            float want = lm_f16_to_f32(h[i]);
            if (isnan(want)) assert_true(isnan(f[i]));
            else assert_memory_equal(&f[i], &want, 4);
        }
        t->bf16_to_f32(f, h, N);
        for (int i = 0; i < N; i++) {
            float want = lm_bf16_to_f32(h[i]);
            assert_memory_equal(&f[i], &want, 4);
        }
        uint32_t s = 12345;
        for (int i = 0; i < N; i++) {
            s = s * 1664525u + 1013904223u;
            uint32_t bits = i < 32768 ? s : (uint32_t)i * 0x2001u;   /* random, then ties and near-ties */
            memcpy(&f[i], &bits, 4);
        }
        f[0] = NAN;
        f[1] = INFINITY;
        f[2] = 65520.0f;   /* rounds to inf in half */
        f[3] = 5.96e-8f;   /* half subnormal */
        t->f32_to_f16(h2, f, N);
        for (int i = 0; i < N; i++) {
            uint16_t want = lm_f32_to_f16(f[i]);
            if (isnan(f[i])) assert_true((h2[i] & 0x7c00) == 0x7c00 && (h2[i] & 0x3ff));
            else if (h2[i] != want) fail_msg("%s f32_to_f16(%a) = %04x, want %04x", t->name, f[i], h2[i], want);
        }
        t->f32_to_bf16(h2, f, N);
        for (int i = 0; i < N; i++) {
            uint16_t want = lm_f32_to_bf16(f[i]);
            if (h2[i] != want) fail_msg("%s f32_to_bf16(%a) = %04x, want %04x", t->name, f[i], h2[i], want);
        }
    }
    free(h);
    free(h2);
    free(f);
}

/* ops through the backend at every level give the table's results */
static void test_ops_each_level(void **state)
{
    (void)state;
    assert_int_equal(lm_init(), LM_OK);
    lm_device_set_default(lm_device_cpu());
    assert_null(lm_vmath_get("avx9000"));
    const lm_vmath *start = lm_vm;
    const char *forced = getenv("LUMEN_ISA");
    if (forced && *forced && lm_vmath_get(forced)) assert_string_equal(lm_vm->name, forced);
    enum { n = 5000 };
    static float xp[n], yp[n];
    for (size_t l = 0; l < sizeof isas / sizeof isas[0]; l++) {
        const lm_vmath *t = lm_vmath_get(isas[l]);
        if (!t) continue;
        lm_vmath_use(t);
        lm_array *x = lm_linspace(-4, 4, n, LM_F32, NULL);
        lm_op ops[] = {LM_OP_EXP, LM_OP_TANH, LM_OP_ERF, LM_OP_SIN, LM_OP_GELU, LM_OP_SILU};
        double (*refs[])(double) = {exp, tanh, erf, sin, r_gelu, r_silu};
        for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
            lm_array *y = lm_unary(ops[k], x);
            assert_int_equal(lm_array_read(x, xp, LM_F32), LM_OK);
            assert_int_equal(lm_array_read(y, yp, LM_F32), LM_OK);
            for (int64_t i = 0; i < n; i++) {
                double ref = refs[k]((double)xp[i]);
                if (ulp_err(yp[i], ref) > 3.0 && fabs(yp[i] - ref) > 2e-7)
                    fail_msg("%s %s(%g) = %.9g, want %.9g", t->name, lm_op_name(ops[k]), xp[i], yp[i], ref);
            }
            lm_array_release(y);
        }
        lm_array *p = lm_binary_scalar(LM_OP_POW, x, 2.5, false);
        assert_int_equal(lm_array_read(p, yp, LM_F32), LM_OK);
        for (int64_t i = 0; i < n; i++)
            assert_true(xp[i] < 0 ? isnan(yp[i]) : ulp_err(yp[i], pow(xp[i], 2.5)) <= 1.0);
        lm_array_release(p);
        lm_array_release(x);
    }
    lm_vmath_use(start);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unary_accuracy),
        cmocka_unit_test(test_unary_specials),
        cmocka_unit_test(test_tails),
        cmocka_unit_test(test_binary_accuracy),
        cmocka_unit_test(test_minmax_stream),
        cmocka_unit_test(test_transpose32),
        cmocka_unit_test(test_exp_sub_sum),
        cmocka_unit_test(test_half_conversions),
        cmocka_unit_test(test_ops_each_level),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
