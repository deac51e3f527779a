/* test_vulkan_fused.c - compiled elementwise chains on Vulkan run as one
 * dispatch (backends/vulkan/fused.c) and agree with the same chains run
 * uncompiled on the CPU and uncompiled on Vulkan.
 *
 * Each case traces a chain on Vulkan placeholders, compiles it, and checks
 * that the compiled function is one kernel, that evaluating a call launches
 * exactly one kernel and one dispatch (twice: the second call finds its
 * program on the device), and that the result matches by normalised mean
 * squared error with a threshold per dtype (integers and bools exactly),
 * NaN and Inf at the same positions.  Chains: GELU-tanh with broadcast
 * operands, SwiGLU, a 10-op unary chain in f32/f16/bf16, the diamond
 * (a*b)*(a+b), mixed f16/bf16/i32 with casts, where, clamp and comparisons,
 * integer arithmetic with wrapping casts, a transposed (strided) input, and
 * 16 inputs (every binding); both kernels (interpreter and specialised,
 * LUMEN_VK_FUSED) on a subset.  A group the kernel does not take (i64 values)
 * falls back to unfused kernels with the same result.
 * The device: LUMEN_DEVICE when it names a Vulkan device, else the first
 * Vulkan device (lavapipe in CI); skipped when there is none. */
#include "testutil.h"
#ifdef LM_HAVE_VULKAN
#include "backends/vulkan/vulkan.h"

static lm_device *vk, *cpu;

#define MAXIN 16

typedef struct in_spec {
    int ndim;
    int64_t shape[4];
    lm_dtype dt;
    double lo, hi;
    bool specials;     /* NaN, +-Inf, +-0 sprinkled in (floats) */
    bool transposed;   /* a transposed view of a contiguous 2-D array */
} in_spec;

typedef lm_array *(*chain_fn)(lm_array **in);

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double urand(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static lm_array *make_input(const in_spec *s)
{
    int64_t shape[4], n = 1;
    memcpy(shape, s->shape, sizeof shape);
    if (s->transposed) { shape[0] = s->shape[1]; shape[1] = s->shape[0]; }
    for (int d = 0; d < s->ndim; d++) n *= shape[d];
    double *v = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        v[i] = s->lo + (s->hi - s->lo) * urand();
        if (!lm_dtype_is_float(s->dt)) v[i] = floor(v[i]);
    }
    if (s->specials && n >= 16) {
        v[1] = NAN; v[n / 2] = INFINITY; v[n - 2] = -INFINITY; v[3] = 0.0; v[n / 3] = -0.0;
    }
    lm_array *a = lm_from_data(s->ndim, shape, LM_F64, v, cpu);
    free(v);
    lm_array *c = lm_cast(a, s->dt);
    lm_array_release(a);
    assert_int_equal(lm_array_eval(c), LM_OK);
    return c;
}

/* against the unfused Vulkan kernels, which run the same op code and round
 * each step the same way: equal on lavapipe; a few rounding flips allowed */
static double thr_same(lm_dtype t)
{
    switch (t) {
    case LM_F32: return 1e-14;
    case LM_F16: return 1e-9;
    case LM_BF16: return 1e-8;
    default: return 0;
    }
}

static double thr_for(lm_dtype t)
{
    switch (t) {
    case LM_F32: return 1e-9;     /* transcendental steps: a few ulp of f32 */
    case LM_F16: return 1e-5;     /* a 1-ulp f32 difference can flip a rounding */
    case LM_BF16: return 1e-4;
    default: return 0;            /* integers and bool: exact */
    }
}

static int failures;

/* false (after printing why) when got differs from want */
static bool agree(const char *what, const char *vs, lm_array *want, lm_array *got, double thr)
{
    if (want->size != got->size || want->dtype != got->dtype) {
        fprintf(stderr, "FUSED FAIL %s vs %s: size/dtype differ\n", what, vs);
        return false;
    }
    double *a = tu_read(want), *b = tu_read(got), num = 0, den = 0;
    bool exact = !lm_dtype_is_float(want->dtype), ok = true;
    for (int64_t i = 0; i < want->size && ok; i++) {
        bool na = isnan(a[i]), nb = isnan(b[i]);
        if (na != nb || ((isinf(a[i]) || isinf(b[i])) && a[i] != b[i]) || (exact && a[i] != b[i])) {
            fprintf(stderr, "FUSED FAIL %s vs %s: element %lld: %.9g vs %.9g\n", what, vs, (long long)i, a[i], b[i]);
            ok = false;
        } else if (!na && !isinf(a[i])) {
            num += (a[i] - b[i]) * (a[i] - b[i]);
            den += a[i] * a[i];
        }
    }
    double nmse = num / (den > 1e-300 ? den : 1.0);
    if (getenv("FUSED_VERBOSE")) fprintf(stderr, "  %-26s vs %-15s %-5s nmse %.3g\n", what, vs, lm_dtype_name(want->dtype), nmse);
    if (ok && !(nmse <= thr)) {
        fprintf(stderr, "FUSED FAIL %s vs %s: nmse %.3g\n", what, vs, nmse);
        ok = false;
    }
    free(a);
    free(b);
    return ok;
}

/* traces f on Vulkan placeholders, compiles, runs two calls; fused: one
 * kernel and one dispatch per call expected, else the unfused fallback */
static void run_chain(const char *what, chain_fn f, int nin, const in_spec *spec, bool fused)
{
    lm_array *cin[MAXIN], *gin[MAXIN], *ph[MAXIN];
    for (int k = 0; k < nin; k++) {
        cin[k] = make_input(&spec[k]);
        lm_array *g = lm_array_to(cin[k], vk);
        assert_non_null(g);
        assert_int_equal(lm_array_eval(g), LM_OK);
        if (spec[k].transposed) {
            gin[k] = lm_transpose(g, 0, 1);
            lm_array *t = lm_transpose(cin[k], 0, 1);
            lm_array_release(cin[k]);
            cin[k] = t;
            lm_array_release(g);
        } else {
            gin[k] = g;
        }
        ph[k] = lm_placeholder(gin[k]->ndim, gin[k]->shape, spec[k].dt, vk);
    }
    lm_array *traced = f(ph);
    assert_non_null(traced);
    lm_compiled *c = lm_compile_graph(nin, ph, 1, &traced, LM_COMPILE_ON);
    if (!c) fprintf(stderr, "%s: %s\n", what, lm_error_message());
    assert_non_null(c);
    if (fused && lm_compiled_kernels(c) != 1) {
        char *desc = lm_compiled_describe(c);
        fprintf(stderr, "%s: not one kernel:\n%s", what, desc);
        free(desc);
        fail();
    }
    lm_array *ref = f(cin);                     /* uncompiled, CPU */
    assert_int_equal(lm_array_eval(ref), LM_OK);
    lm_array *unf = f(gin);                     /* uncompiled, Vulkan */
    assert_int_equal(lm_array_eval(unf), LM_OK);
    bool ok = true;
    for (int call = 0; call < 2; call++) {
        lm_array *out = NULL;
        assert_int_equal(lm_compiled_call(c, nin, gin, &out), 1);
        int64_t k0 = lm_eval_kernel_count(), d0 = lm_vulkan_dispatch_count();
        lm_status st = lm_array_eval(out);
        if (st != LM_OK) fprintf(stderr, "%s: %s\n", what, lm_error_message());
        assert_int_equal(st, LM_OK);
        int64_t kernels = lm_eval_kernel_count() - k0, dispatches = lm_vulkan_dispatch_count() - d0;
        if (fused && (kernels != 1 || dispatches != 1)) {
            fprintf(stderr, "FUSED FAIL %s: %lld kernels, %lld dispatches\n", what, (long long)kernels,
                    (long long)dispatches);
            ok = false;
        }
        if (!fused && kernels < 2) {
            fprintf(stderr, "FUSED FAIL %s: expected the unfused fallback\n", what);
            ok = false;
        }
        ok &= agree(what, "cpu", ref, out, thr_for(ref->dtype));
        ok &= agree(what, "vulkan unfused", unf, out, thr_same(ref->dtype));
        lm_array_release(out);
    }
    if (!ok) failures++;
    lm_compiled_free(c);
    lm_array_release(traced);
    lm_array_release(ref);
    lm_array_release(unf);
    for (int k = 0; k < nin; k++) {
        lm_array_release(cin[k]);
        lm_array_release(gin[k]);
        lm_array_release(ph[k]);
    }
}

/* ---- chains (each releases its intermediates) ---- */
#define REL(...) do { lm_array *r_[] = {__VA_ARGS__}; \
    for (size_t i_ = 0; i_ < sizeof r_ / sizeof *r_; i_++) lm_array_release(r_[i_]); } while (0)

static lm_array *gelu_chain(lm_array **in)
{
    lm_array *t1 = lm_binary(LM_OP_MUL, in[0], in[1]), *t2 = lm_binary(LM_OP_ADD, t1, in[2]);
    lm_array *t3 = lm_unary(LM_OP_GELU_TANH, t2), *y = lm_binary(LM_OP_MUL, t3, in[1]);
    REL(t1, t2, t3);
    return y;
}

static lm_array *swiglu(lm_array **in)
{
    lm_array *s = lm_unary(LM_OP_SILU, in[0]), *y = lm_binary(LM_OP_MUL, s, in[1]);
    REL(s);
    return y;
}

static lm_array *ten_ops(lm_array **in)
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

static lm_array *diamond(lm_array **in)
{
    lm_array *m = lm_binary(LM_OP_MUL, in[0], in[1]), *s = lm_binary(LM_OP_ADD, in[0], in[1]);
    lm_array *r = lm_binary(LM_OP_MUL, m, s);
    REL(m, s);
    return r;
}

/* x f16, y bf16, i i32: where(i > 3, x + y, clamp(2x, -1, 1)) + max(7i, 5),
 * as f16 (every intermediate used once, so the whole chain fuses; integer %
 * is not in it: a zero divisor is an error, so the CPU runs it) */
static lm_array *mixed(lm_array **in)
{
    lm_array *xf = lm_cast(in[0], LM_F32), *yf = lm_cast(in[1], LM_F32);
    lm_array *s = lm_binary(LM_OP_ADD, xf, yf);
    lm_array *m = lm_binary_scalar(LM_OP_GT, in[2], 3, false);
    lm_array *x2 = lm_binary_scalar(LM_OP_MUL, in[0], 2, false), *cl = lm_clamp(x2, -1, 1);
    lm_array *w = lm_where(m, s, cl);
    lm_array *i7 = lm_binary_scalar(LM_OP_MUL, in[2], 7, false), *j = lm_binary_scalar(LM_OP_MAXIMUM, i7, 5, false);
    lm_array *jf = lm_cast(j, LM_F32), *t = lm_binary(LM_OP_ADD, w, jf);
    lm_array *y = lm_cast(t, LM_F16);
    REL(xf, yf, s, m, x2, cl, w, i7, j, jf, t);
    return y;
}

/* i32 arithmetic, comparisons and logic, then a wrapping cast to i8 */
static lm_array *ints(lm_array **in)
{
    lm_array *p = lm_binary(LM_OP_MUL, in[0], in[1]), *d = lm_binary(LM_OP_SUB, in[0], in[1]);
    lm_array *mx = lm_binary(LM_OP_MAXIMUM, p, d);
    lm_array *sum = lm_binary(LM_OP_ADD, in[0], in[1]), *r = lm_binary_scalar(LM_OP_SUB, sum, 97, false);
    lm_array *ge = lm_binary_scalar(LM_OP_GE, r, 10, false), *nz = lm_binary_scalar(LM_OP_NE, in[0], 0, false);
    lm_array *b = lm_binary(LM_OP_LOGICAL_AND, ge, nz);
    lm_array *j3 = lm_binary_scalar(LM_OP_MUL, in[1], 3, false), *nr = lm_unary(LM_OP_NEG, j3);
    lm_array *w = lm_where(b, mx, nr), *cl = lm_clamp(w, -5000, 100000);
    lm_array *y = lm_cast(cl, LM_I8);
    REL(p, d, mx, sum, r, ge, nz, b, j3, nr, w, cl);
    return y;
}

/* i8, u8, i16 and bool inputs: widening and wrapping casts, where */
static lm_array *small_ints(lm_array **in)
{
    lm_array *a = lm_cast(in[0], LM_I32), *b = lm_cast(in[1], LM_I32), *c = lm_cast(in[2], LM_I32);
    lm_array *p = lm_binary(LM_OP_MUL, a, b), *s = lm_binary(LM_OP_ADD, p, c);
    lm_array *t = lm_binary_scalar(LM_OP_MUL, s, 3, false), *b16 = lm_cast(in[1], LM_I16);
    lm_array *w = lm_where(in[3], t, b16), *y = lm_cast(w, LM_I16);
    REL(a, b, c, p, s, t, b16, w);
    return y;
}

/* floats to bool and u8 through comparisons and saturating casts */
static lm_array *to_small(lm_array **in)
{
    lm_array *s = lm_binary_scalar(LM_OP_MUL, in[0], 100, false), *u = lm_cast(s, LM_U8);
    lm_array *n = lm_unary(LM_OP_ISNAN, in[0]), *nn = lm_unary(LM_OP_LOGICAL_NOT, n);
    lm_array *uf = lm_cast(u, LM_F32), *z = lm_binary_scalar(LM_OP_LT, uf, 50, false);
    lm_array *y = lm_binary(LM_OP_LOGICAL_XOR, nn, z);
    REL(s, u, n, nn, uf, z);
    return y;
}

/* hypot (its row sits among the comparisons in core/op.h) beside
 * comparisons: a float result and bool results in one chain */
static lm_array *hypot_cmp(lm_array **in)
{
    lm_array *h = lm_binary(LM_OP_HYPOT, in[0], in[1]), *gt = lm_binary_scalar(LM_OP_GT, in[0], 0.5, false);
    lm_array *ne = lm_binary(LM_OP_NE, in[0], in[1]), *b = lm_binary(LM_OP_LOGICAL_AND, gt, ne);
    lm_array *y = lm_where(b, h, in[1]);
    REL(h, gt, ne, b);
    return y;
}

static lm_array *strided(lm_array **in)
{
    lm_array *e = lm_unary(LM_OP_EXP, in[0]), *d = lm_binary(LM_OP_SUB, e, in[1]);
    lm_array *a = lm_unary(LM_OP_ABS, d), *y = lm_unary(LM_OP_SQRT, a);
    REL(e, d, a);
    return y;
}

static lm_array *sixteen(lm_array **in)
{
    lm_array *acc = lm_array_retain(in[0]);
    for (int k = 1; k < 16; k++) {
        lm_array *t = lm_binary(k % 3 ? LM_OP_ADD : LM_OP_MUL, acc, in[k]);
        lm_array_release(acc);
        acc = t;
    }
    return acc;
}

static lm_array *int64_chain(lm_array **in)
{
    lm_array *a = lm_binary_scalar(LM_OP_MUL, in[0], 3, false), *y = lm_binary_scalar(LM_OP_ADD, a, 1, false);
    REL(a);
    return y;
}

/* ---- tests ---- */
#define V1(n, dt, sp) {1, {n}, dt, -2, 2, sp, false}

static void test_gelu_swiglu(void **state)
{
    (void)state;
    static const lm_dtype dts[] = {LM_F32, LM_F16, LM_BF16};
    for (int t = 0; t < 3; t++) {
        in_spec g[3] = {{2, {37, 129}, dts[t], -3, 3, true, false}, {1, {129}, dts[t], -2, 2, false, false},
                        {2, {37, 1}, dts[t], -1, 1, false, false}};
        run_chain("gelu_tanh(x*a+b)*a", gelu_chain, 3, g, true);
        in_spec s[2] = {V1(100003, dts[t], true), V1(100003, dts[t], false)};
        run_chain("silu(g)*u", swiglu, 2, s, true);
    }
    assert_int_equal(failures, 0);
}

static void test_ten_ops_diamond(void **state)
{
    (void)state;
    static const lm_dtype dts[] = {LM_F32, LM_F16, LM_BF16};
    for (int t = 0; t < 3; t++) {
        in_spec x[1] = {V1(4099, dts[t], true)};
        run_chain("10-op chain", ten_ops, 1, x, true);
        in_spec ab[2] = {V1(65536, dts[t], true), V1(65536, dts[t], false)};
        run_chain("(a*b)*(a+b)", diamond, 2, ab, true);
        run_chain("hypot among comparisons", hypot_cmp, 2, ab, true);
    }
    assert_int_equal(failures, 0);
}

static void test_mixed_dtypes(void **state)
{
    (void)state;
    /* the core fuses only ops of the output's shape: no broadcast intermediates here */
    in_spec m[3] = {{2, {300, 7}, LM_F16, -2, 2, true, false}, {2, {300, 7}, LM_BF16, -2, 2, false, false},
                    {2, {300, 7}, LM_I32, -10, 10, false, false}};
    run_chain("mixed f16/bf16/i32", mixed, 3, m, true);
    in_spec i[2] = {{1, {5000}, LM_I32, -3000, 3000, false, false}, {1, {5000}, LM_I32, -3000, 3000, false, false}};
    run_chain("i32 logic to i8", ints, 2, i, true);
    in_spec si[4] = {{1, {4000}, LM_I8, -128, 128, false, false}, {1, {4000}, LM_U8, 0, 256, false, false},
                     {1, {4000}, LM_I16, -32768, 32768, false, false}, {1, {4000}, LM_BOOL, 0, 2, false, false}};
    run_chain("i8/u8/i16/bool to i16", small_ints, 4, si, true);
    in_spec f[1] = {{1, {3001}, LM_F32, -1, 4, true, false}};
    run_chain("f32 to u8 and bool", to_small, 1, f, true);
    assert_int_equal(failures, 0);
}

static void test_strided_and_wide(void **state)
{
    (void)state;
    in_spec s[2] = {{2, {33, 65}, LM_F32, -2, 2, false, true}, {1, {65}, LM_F32, -2, 2, false, false}};
    run_chain("transposed input", strided, 2, s, true);
    in_spec w[16];
    for (int k = 0; k < 16; k++) w[k] = (in_spec)V1(1001, LM_F32, false);
    run_chain("16 inputs", sixteen, 16, w, true);
    assert_int_equal(failures, 0);
}

/* both kernels, whichever the device defaults to (LUMEN_VK_FUSED): the
 * interpreter and the chain baked in by specialization constants */
static void test_both_kernels(void **state)
{
    (void)state;
    static const char *modes[] = {"interp", "spec"};
    for (int m = 0; m < 2; m++) {
        setenv("LUMEN_VK_FUSED", modes[m], 1);
        in_spec g[3] = {{2, {37, 129}, LM_BF16, -3, 3, true, false}, {1, {129}, LM_BF16, -2, 2, false, false},
                        {2, {37, 1}, LM_BF16, -1, 1, false, false}};
        run_chain(m ? "spec: gelu bf16" : "interp: gelu bf16", gelu_chain, 3, g, true);
        in_spec x[3] = {{2, {300, 7}, LM_F16, -2, 2, true, false}, {2, {300, 7}, LM_BF16, -2, 2, false, false},
                        {2, {300, 7}, LM_I32, -10, 10, false, false}};
        run_chain(m ? "spec: mixed" : "interp: mixed", mixed, 3, x, true);
        in_spec si[4] = {{1, {999}, LM_I8, -128, 128, false, false}, {1, {999}, LM_U8, 0, 256, false, false},
                         {1, {999}, LM_I16, -32768, 32768, false, false}, {1, {999}, LM_BOOL, 0, 2, false, false}};
        run_chain(m ? "spec: small ints" : "interp: small ints", small_ints, 4, si, true);
        in_spec w[16];
        for (int k = 0; k < 16; k++) w[k] = (in_spec)V1(257, LM_F32, false);
        run_chain(m ? "spec: 16 inputs" : "interp: 16 inputs", sixteen, 16, w, true);
    }
    setenv("LUMEN_VK_FUSED", "interp", 1);
    assert_int_equal(failures, 0);
}

static void test_fallback(void **state)
{
    (void)state;
    in_spec x[1] = {{1, {777}, LM_I64, -1000, 1000, false, false}};
    run_chain("i64 (unfused fallback)", int64_chain, 1, x, false);
    assert_int_equal(failures, 0);
    assert_int_equal(lm_vulkan_validation_messages(), 0);
}

int main(void)
{
    /* most cases on the interpreter (one pipeline for all: quick to build on
     * lavapipe); test_both_kernels runs a subset on each */
    setenv("LUMEN_VK_FUSED", "interp", 1);
    lm_init();
    cpu = lm_device_cpu();
    const char *spec = getenv("LUMEN_DEVICE");
    vk = spec && !strncmp(spec, "vulkan", 6) ? lm_device_find(spec) : NULL;
    for (int i = 0; !vk && i < lm_device_count(); i++)
        if (!strncmp(lm_device_at(i)->spec, "vulkan", 6)) vk = lm_device_at(i);
    if (!vk) {
        printf("test_vulkan_fused: no Vulkan device (%s); skipped\n", lm_vulkan_status());
        return LM_TEST_SKIP;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gelu_swiglu), cmocka_unit_test(test_ten_ops_diamond),
        cmocka_unit_test(test_mixed_dtypes), cmocka_unit_test(test_strided_and_wide),
        cmocka_unit_test(test_both_kernels), cmocka_unit_test(test_fallback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else
int main(void)
{
    printf("test_vulkan_fused: built without Vulkan; skipped\n");
    return LM_TEST_SKIP;
}
#endif
