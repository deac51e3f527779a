/* parity.h - the Vulkan-against-CPU parity harness shared by the parity
 * test programs (test_vulkan_parity.c for the core ops, test_vulkan_nn*.c
 * for the neural-network ops): deterministic input data with special
 * values, NMSE comparison with NaN/Inf positions required to agree, guard
 * arrays around each result, views applied to inputs, and the summary that
 * fails on any mismatch or validation message.  Include it once, after
 * testutil.h, inside #ifdef LM_HAVE_VULKAN.  Each program's main calls
 * parity_setup() and ends its group with test_summary. */
#ifndef LM_TESTS_PARITY_H
#define LM_TESTS_PARITY_H

#include "backends/vulkan/vulkan.h"

#define PARITY_UNUSED __attribute__((unused))

static lm_device *vk, *cpu;
static int failures, cases;
/* PARITY_QUICK=1 (the validation-layer pass): every 6th case only, a
 * deterministic sample over every group, to bound the layer's cost */
static bool quick;
/* PARITY_VERBOSE=1: each case's name before it runs (to find a hang) */
static bool verbose;
static int sampled;
PARITY_UNUSED static bool skip_case(void) { return quick && sampled++ % 6 != 0; }

/* ---- inputs: deterministic data with special values sprinkled in ---- */
static uint64_t rng = 88172645463325252ull;
PARITY_UNUSED static double urand(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

enum { SPECIALS = 1 };

/* an evaluated CPU array of dtype dt from n doubles v (freed here) */
PARITY_UNUSED static lm_array *from_doubles(int ndim, const int64_t *shape, lm_dtype dt, double *v)
{
    lm_array *a = lm_from_data(ndim, shape, LM_F64, v, cpu);
    free(v);
    lm_array *c = lm_cast(a, dt);
    lm_array_release(a);
    assert_int_equal(lm_array_eval(c), LM_OK);
    return c;
}

/* a CPU array of dtype dt with values in [lo, hi); floats get NaN/Inf/0 at
 * a few positions when flags & SPECIALS */
PARITY_UNUSED static lm_array *data(int ndim, const int64_t *shape, lm_dtype dt, double lo, double hi, int flags)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) {
        double x = lo + (hi - lo) * urand();
        if (!lm_dtype_is_float(dt)) x = floor(x);
        v[i] = x;
    }
    if ((flags & SPECIALS) && lm_dtype_is_float(dt) && n >= 8) {
        v[1] = NAN; v[n / 2] = INFINITY; v[n - 2] = -INFINITY; v[3] = 0.0; v[n / 3] = -0.0;
    }
    return from_doubles(ndim, shape, dt, v);
}

/* ---- comparison ---- */
PARITY_UNUSED static void report(const char *what, const char *fmt, double x)
{
    failures++;
    fprintf(stderr, "PARITY FAIL %s: ", what);
    fprintf(stderr, fmt, x);
    fprintf(stderr, "\n");
}

PARITY_UNUSED static void compare(const char *what, lm_array *c, lm_array *g, double thr)
{
    cases++;
    lm_status s1 = lm_array_eval(c);
    if (s1 != LM_OK) { fprintf(stderr, "%s: cpu error: %s\n", what, lm_error_message()); failures++; return; }
    lm_status s2 = lm_array_eval(g);
    if (s2 != LM_OK) { fprintf(stderr, "PARITY FAIL %s: vulkan error: %s\n", what, lm_error_message()); failures++; return; }
    if (c->size != g->size || c->dtype != g->dtype || c->ndim != g->ndim) {
        report(what, "shape/dtype differ (%g)", 0);
        return;
    }
    int64_t n = c->size;
    double *a = malloc(sizeof(double) * (size_t)(n ? n : 1)), *b = malloc(sizeof(double) * (size_t)(n ? n : 1));
    assert_int_equal(lm_array_read(c, a, LM_F64), LM_OK);
    assert_int_equal(lm_array_read(g, b, LM_F64), LM_OK);
    double num = 0, den = 0;
    bool exact = !lm_dtype_is_float(c->dtype);
    for (int64_t i = 0; i < n; i++) {
        bool na = isnan(a[i]), nb = isnan(b[i]);
        if (na != nb || (isinf(a[i]) || isinf(b[i])) ? (na != nb || (!na && a[i] != b[i])) : false) {
            fprintf(stderr, "  element %lld: cpu %.9g vulkan %.9g\n", (long long)i, a[i], b[i]);
            report(what, "NaN/Inf positions differ (%g)", (double)i);
            goto out;
        }
        if (na || isinf(a[i])) continue;
        if (exact && a[i] != b[i]) {
            fprintf(stderr, "  element %lld: cpu %.17g vulkan %.17g\n", (long long)i, a[i], b[i]);
            report(what, "integer results differ (%g)", (double)i);
            goto out;
        }
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += a[i] * a[i];
    }
    double nmse = num / (den > 1e-300 ? den : 1.0);
    if (!(nmse <= thr)) report(what, "nmse %.3g over threshold", nmse);
    else if (verbose) fprintf(stderr, "  nmse %.3g (threshold %.3g)\n", nmse, thr);
out:
    free(a);
    free(b);
}

/* NMSE thresholds: results are rounded to the output dtype on both sides */
PARITY_UNUSED static double thr_for(lm_dtype t, bool transcendental)
{
    switch (t) {
    case LM_F64: return transcendental ? 1e-12 : 1e-24;
    case LM_F32: return transcendental ? 1e-9 : 1e-12;
    case LM_F16: return 1e-6;
    case LM_BF16: return 1e-4;
    default: return 0;
    }
}

/* ---- building the same graph on both devices ---- */
typedef lm_array *(*build_fn)(lm_array **in, const void *ctx);

PARITY_UNUSED static lm_array *guard(void)
{
    int64_t s = 64;
    lm_array *g = lm_full(1, &s, 12345.0, LM_F32, vk);
    assert_int_equal(lm_array_eval(g), LM_OK);
    return g;
}

PARITY_UNUSED static void check_guard(const char *what, lm_array *g)
{
    float v[64];
    assert_int_equal(lm_array_read(g, v, LM_F32), LM_OK);
    for (int i = 0; i < 64; i++)
        if (v[i] != 12345.0f) { report(what, "guard array overwritten (element %g)", i); return; }
}

/* one case: the graph f builds on CPU inputs cin and on their Vulkan copies,
 * compared with threshold thr, guards checked.  fallback: -1 ignores CPU
 * fallbacks, 0 requires the Vulkan graph to need none, 1 requires some. */
PARITY_UNUSED static void run_case_fb(const char *what, int nin, lm_array **cin, build_fn f, const void *ctx,
                                      double thr, int fallback)
{
    if (skip_case()) return;
    if (verbose) fprintf(stderr, "case %s\n", what);
    lm_array *gin[4];
    for (int k = 0; k < nin; k++) {
        gin[k] = lm_array_to(cin[k], vk);
        assert_non_null(gin[k]);
        assert_int_equal(lm_array_eval(gin[k]), LM_OK);
    }
    lm_array *g0 = guard();
    lm_array *rc = f(cin, ctx), *rg = f(gin, ctx);
    if (!rc || !rg) {
        fprintf(stderr, "PARITY FAIL %s: build failed: %s\n", what, lm_error_message());
        failures++;
    } else {
        lm_array *g1 = guard();     /* allocated after the graph's inputs, before its output */
        if (fallback >= 0) {
            assert_int_equal(lm_array_eval(rc), LM_OK);
            lm_status st = lm_array_eval(rg);
            int64_t fb = lm_eval_last_stats().fallbacks;
            if (st == LM_OK && (fb != 0) != (fallback != 0)) {
                fprintf(stderr, "PARITY FAIL %s: %lld CPU fallbacks (expected %s)\n", what, (long long)fb,
                        fallback ? "some" : "none");
                failures++;
            }
        }
        compare(what, rc, rg, thr);
        check_guard(what, g0);
        check_guard(what, g1);
        lm_array_release(g1);
    }
    lm_array_release(g0);
    lm_array_release(rc);
    lm_array_release(rg);
    for (int k = 0; k < nin; k++) lm_array_release(gin[k]);
}

PARITY_UNUSED static void run_case(const char *what, int nin, lm_array **cin, build_fn f, const void *ctx, double thr)
{
    run_case_fb(what, nin, cin, f, ctx, thr, -1);
}

/* ---- views applied to inputs before the op ---- */
typedef enum { V_NONE, V_T, V_SLICE, V_NEG } view_kind;
PARITY_UNUSED static const char *view_name[] = {"", " transposed", " sliced", " reversed"};

PARITY_UNUSED static lm_array *apply_view(lm_array *a, view_kind v)
{
    switch (v) {
    case V_T: return lm_transpose(a, 0, a->ndim - 1);
    case V_SLICE: return lm_slice(a, a->ndim - 1, 1, a->shape[a->ndim - 1], 2);
    case V_NEG: return lm_slice(a, 0, a->shape[0] - 1, -a->shape[0] - 1, -1);
    default: return lm_array_retain(a);
    }
}


PARITY_UNUSED static int parity_setup(void **state)
{
    (void)state;
    lm_init();
    cpu = lm_device_cpu();
    vk = NULL;
    for (int i = 0; i < lm_device_count(); i++)
        if (!strncmp(lm_device_at(i)->spec, "vulkan", 6)) { vk = lm_device_at(i); break; }
    const char *v = getenv("PARITY_VERBOSE");
    verbose = v && *v && strcmp(v, "0");
    return 0;
}

/* the environment of a parity program's main: PARITY_QUICK=1 samples every
 * sixth case, PARITY_ONLY=<group> runs one group (see PARITY_RUN) */
PARITY_UNUSED static void parity_env(void)
{
    const char *q = getenv("PARITY_QUICK");
    quick = q && *q && strcmp(q, "0");
    const char *only = getenv("PARITY_ONLY");
    if (only && *only) cmocka_set_test_filter(only);
}

/* a parity program's exit status: cmocka's, and failed cases count even when
 * PARITY_ONLY filtered out test_summary, which asserts on them */
#define PARITY_RUN(tests) \
    (parity_env(), cmocka_run_group_tests(tests, NULL, NULL) + (failures != 0))

PARITY_UNUSED static void test_summary(void **state)
{
    (void)state;
    fprintf(stderr, "parity: %d cases, %d failures on %s; validation messages: %lld\n", cases,
            failures, vk->name, (long long)lm_vulkan_validation_messages());
    assert_int_equal(failures, 0);
    assert_int_equal(lm_vulkan_validation_messages(), 0);
}


#endif
