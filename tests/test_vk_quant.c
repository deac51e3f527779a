/* test_vk_quant.c - ggml's block quantizations on Vulkan
 * (backends/vulkan/quant.c, shaders/quant*.glsl).
 *
 * Dequantize: every one of the 11 types, on ggml's own fixture
 * (tests/ref/gguf/types.gguf: zeros, constants, outliers, subnormal and
 * large blocks) and on Lumen-quantized data of several rows, must equal the
 * CPU's f32 (and ggml's) bit for bit.  Qlinear: x [..., K] f32 times a
 * quantized w [N, K] at M = 1, 3, 8 (the GEMV) and 9, 65, 130 (the GEMM's
 * two tiles), N not a multiple of any tile, K a multiple of the block,
 * batch dims on x and an x that starts inside its buffer, against
 *   - a float reference: x times the dequantized weight in f64 on the CPU,
 *     held to the NMSE every f32 matmul on Vulkan is held to
 *     (tests/parity/parity.h, thr_for: 1e-12): the GPU keeps x in f32, so
 *     this is the rounding of an f32 GEMM only (element-wise, at K = 512,
 *     that rounding passes lm.compare's rtol 1.3e-6 / atol 1e-5 on most
 *     elements but not all: 4e-5 on outputs near 15 was seen);
 *     the GEMMs on tensor cores (quant_gemm_coop.glsl, LUMEN_VK_QGEMM=coop
 *     on a device with NV cooperative matrices; and the default from 64
 *     rows, LUMEN_VK_QGEMM=deq: w's transient f16 copy into the f16 GEMM;
 *     the profiler says which kernels ran) round x and w to f16 and are
 *     held to NMSE 1e-6 instead (2^-11 an operand);
 *   - the CPU's qlinear, which quantizes x to Q8_0 / Q8_K first: NMSE under
 *     1e-4 (that rounding, a few 1e-6 measured).
 * Every node must run on the GPU (no CPU fallback, as with
 * LUMEN_FALLBACK=0); a K that does not fit the weight is an error naming
 * both shapes. */
#include "testutil.h"
#ifdef LM_HAVE_VULKAN

#include "core/backend.h"
#include "core/compare.h"
#include "core/io/io.h"
#include "core/profile.h"
#include "core/quant.h"
#include "parity/parity.h"

static const lm_dtype QTYPES[] = {LM_Q4_0, LM_Q4_1, LM_Q5_0, LM_Q5_1, LM_Q8_0, LM_Q2_K,
                                  LM_Q3_K, LM_Q4_K, LM_Q5_K, LM_Q6_K, LM_Q8_K};
#define NQ (sizeof QTYPES / sizeof *QTYPES)

/* evaluates a on the GPU and fails when any node of it ran on the CPU */
static void eval_gpu(const char *what, lm_array *a)
{
    assert_non_null(a);
    assert_ptr_equal(a->device, vk);
    lm_status st = lm_array_eval(a);
    if (st != LM_OK) fail_msg("%s: %s", what, lm_error_message());
    if (lm_eval_last_stats().fallbacks) fail_msg("%s: %lld CPU fallbacks", what,
                                                 (long long)lm_eval_last_stats().fallbacks);
}

static lm_array *on_vk(lm_array *a)
{
    lm_array *g = lm_array_to(a, vk);
    assert_non_null(g);
    assert_int_equal(lm_array_eval(g), LM_OK);
    return g;
}

/* GPU dequantize of q (on the CPU) equals want (f32, n elements) bit for bit */
static void check_dequant(const char *what, lm_array *q, const float *want)
{
    lm_array *g = on_vk(q), *d = lm_dequantize(g);
    eval_gpu(what, d);
    assert_int_equal(d->dtype, LM_F32);
    float *got = malloc(sizeof(float) * (size_t)d->size);
    assert_int_equal(lm_array_read(d, got, LM_F32), LM_OK);
    for (int64_t i = 0; i < d->size; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)))
            fail_msg("%s: element %lld: vulkan %.9g (0x%08x) cpu %.9g", what, (long long)i, got[i],
                     *(uint32_t *)&got[i], want[i]);
    free(got);
    lm_array_release(d);
    lm_array_release(g);
}

/* ggml's fixture: q.<type> dequantized on the GPU is ggml's deq.<type> */
static void test_dequant_ggml(void **state)
{
    (void)state;
    static const char *const names[] = {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K",
                                        "q3_K", "q4_K", "q5_K", "q6_K", "q8_K"};
    lm_tensor_set s;
    assert_int_equal(lm_load_file_to("tests/ref/gguf/types.gguf", cpu, &s), LM_OK);
    for (size_t t = 0; t < NQ; t++) {
        char qn[32], dn[32];
        snprintf(qn, sizeof qn, "q.%s", names[t]);
        snprintf(dn, sizeof dn, "deq.%s", names[t]);
        int qi = lm_tensor_set_find(&s, qn), di = lm_tensor_set_find(&s, dn);
        assert_true(qi >= 0 && di >= 0);
        assert_int_equal(s.arrays[qi]->dtype, QTYPES[t]);
        float *want = malloc(sizeof(float) * (size_t)s.arrays[di]->size);
        assert_int_equal(lm_array_read(s.arrays[di], want, LM_F32), LM_OK);
        char what[64];
        snprintf(what, sizeof what, "dequantize %s (ggml's fixture)", names[t]);
        check_dequant(what, s.arrays[qi], want);
        free(want);
    }
    lm_tensor_set_free(&s);
}

/* rows with blocks of every kind: random, all zero, constant, one outlier,
 * tiny (subnormal scales), huge */
static lm_array *varied(int64_t rows, int64_t k)
{
    int64_t n = rows * k;
    double *v = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        int64_t blk = i / 256;
        double u = 2 * urand() - 1;
        switch (blk % 6) {
        case 1: v[i] = 0; break;
        case 2: v[i] = 0.75; break;
        case 3: v[i] = i % 97 == 0 ? 300.0 : u; break;
        case 4: v[i] = u * 1e-6; break;
        case 5: v[i] = u * 5e4; break;
        default: v[i] = u; break;
        }
    }
    int64_t shape[2] = {rows, k};
    return from_doubles(2, shape, LM_F32, v);
}

/* Lumen's quantization of several rows, each type: GPU equals CPU */
static void test_dequant_types(void **state)
{
    (void)state;
    lm_array *x = varied(7, 1536);
    for (size_t t = 0; t < NQ; t++) {
        lm_array *q = lm_quantize(x, QTYPES[t]), *dc = lm_dequantize(q);
        assert_non_null(dc);
        float *want = malloc(sizeof(float) * (size_t)x->size);
        assert_int_equal(lm_array_read(dc, want, LM_F32), LM_OK);
        char what[64];
        snprintf(what, sizeof what, "dequantize %s [7,1536]", lm_dtype_name(QTYPES[t]));
        check_dequant(what, q, want);
        free(want);
        lm_array_release(dc);
        lm_array_release(q);
    }
    lm_array_release(x);
}

/* x (CPU, f32, [..., K]) times the dequantized w (CPU) in f64, as f32 */
static lm_array *float_ref(lm_array *x, lm_array *wq)
{
    lm_array *wd = lm_dequantize(wq), *w64 = lm_cast(wd, LM_F64), *x64 = lm_cast(x, LM_F64);
    lm_array *y64 = lm_linear(x64, w64, NULL), *y = lm_cast(y64, LM_F32);
    lm_array_release(wd);
    lm_array_release(w64);
    lm_array_release(x64);
    lm_array_release(y64);
    assert_int_equal(lm_array_eval(y), LM_OK);
    return y;
}

static double worst_nmse_cpu, worst_nmse_ref, worst_nmse_coop;
static int coop_runs;

/* one qlinear: x of shape xs (ndim dims, last K) by a t-quantized [N, K];
 * start: x begins `start` rows into a larger tensor (an offset) */
static void check_qlinear(lm_dtype t, int ndim, const int64_t *xs, int64_t N, int64_t start)
{
    int64_t K = xs[ndim - 1], M = 1;
    for (int d = 0; d < ndim - 1; d++) M *= xs[d];
    char what[128];
    snprintf(what, sizeof what, "qlinear %s M=%lld N=%lld K=%lld%s%s", lm_dtype_name(t), (long long)M,
             (long long)N, (long long)K, ndim > 2 ? " batched" : "", start ? " offset" : "");
    int64_t ws[2] = {N, K}, big[2] = {M + start, K};
    lm_array *w = data(2, ws, LM_F32, -1, 1, 0), *xb = data(2, big, LM_F32, -2, 2, 0);
    lm_array *wq = lm_quantize(w, t);
    assert_non_null(wq);
    lm_array *xr = lm_slice(xb, 0, start, start + M, 1), *x = lm_reshape(xr, ndim, xs);
    assert_non_null(x);
    lm_array *xg0 = on_vk(xb), *xgr = lm_slice(xg0, 0, start, start + M, 1), *xg = lm_reshape(xgr, ndim, xs);
    lm_array *wg = on_vk(wq);
    lm_array *yg = lm_linear(xg, wg, NULL), *yc = lm_linear(x, wq, NULL);
    assert_non_null(yg);
    assert_int_equal(yg->op, LM_OP_QLINEAR);
    assert_int_equal(lm_profile_begin(), LM_OK);
    eval_gpu(what, yg);
    lm_profile *p = lm_profile_end();
    assert_non_null(p);
    bool coop = false;
    /* f16 operands: the decoding GEMM on tensor cores, or the transient f16
     * copy of w into the f16 GEMM (several kernels in the node's row) */
    for (int i = 0; i < p->nrows; i++)
        coop |= strstr(p->rows[i].kernel, "quant_gemm_coop") || strstr(p->rows[i].kernel, "matmul_coop") ||
                strstr(p->rows[i].kernel, "matmul_cm2");
    lm_profile_free(p);
    coop_runs += coop;
    assert_int_equal(yg->ndim, ndim);
    assert_int_equal(yg->shape[ndim - 1], N);
    lm_array *yf = float_ref(x, wq);
    lm_compare_report r;
    assert_int_equal(lm_compare(yg, yf, NULL, &r), LM_OK);
    if (!(r.nmse <= (coop ? 1e-6 : thr_for(LM_F32, false))) || r.nan_mismatch || r.inf_mismatch)
        fail_msg("%s%s: against x * dequantized w: nmse %.3g (max abs %.3g)", what, coop ? " (tensor cores)" : "",
                 r.nmse, r.max_abs);
    double *worst = coop ? &worst_nmse_coop : &worst_nmse_ref;
    if (r.nmse > *worst) *worst = r.nmse;
    assert_int_equal(lm_compare(yg, yc, NULL, &r), LM_OK);
    if (!(r.nmse < 1e-4)) fail_msg("%s: against the CPU's qlinear: nmse %.3g", what, r.nmse);
    if (r.nmse > worst_nmse_cpu) worst_nmse_cpu = r.nmse;
    lm_array *objs[] = {w, xb, wq, xr, x, xg0, xgr, xg, wg, yg, yc, yf};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) lm_array_release(objs[i]);
}

/* the GEMV (M <= 8) and the GEMM (above) at odd shapes, every type */
static void test_qlinear_shapes(void **state)
{
    (void)state;
    static const int64_t Ms[] = {1, 3, 8, 9, 65};
    for (size_t t = 0; t < NQ; t++)
        for (size_t i = 0; i < sizeof Ms / sizeof *Ms; i++) {
            int64_t xs[2] = {Ms[i], 512};
            check_qlinear(QTYPES[t], 2, xs, 67, 0);
        }
    /* K of single 32-element blocks; N past one 64 tile and under another */
    static const lm_dtype small[] = {LM_Q4_0, LM_Q4_1, LM_Q5_0, LM_Q5_1, LM_Q8_0};
    for (size_t t = 0; t < sizeof small / sizeof *small; t++) {
        int64_t a[2] = {2, 96}, b[2] = {70, 96};
        check_qlinear(small[t], 2, a, 129, 0);
        check_qlinear(small[t], 2, b, 1, 0);
    }
}

/* batch dims on x, an x that starts inside its buffer, the 128x128 GEMM
 * tile (taken once 128 of them fill a device: forced here) */
static void test_qlinear_layouts(void **state)
{
    (void)state;
    int64_t b3[3] = {2, 3, 256}, b4[4] = {2, 2, 5, 768};
    check_qlinear(LM_Q4_K, 3, b3, 40, 0);        /* M = 6: GEMV */
    check_qlinear(LM_Q6_K, 4, b4, 33, 0);        /* M = 20: GEMM */
    int64_t x1[2] = {1, 512}, x9[2] = {9, 256}, x130[2] = {130, 256};
    check_qlinear(LM_Q8_0, 2, x1, 100, 3);       /* GEMV, x at an offset */
    check_qlinear(LM_Q5_K, 2, x9, 100, 5);       /* GEMM, x at an offset */
    check_qlinear(LM_Q4_0, 2, x130, 1030, 0);
    check_qlinear(LM_Q5_1, 2, x130, 1030, 0);
    /* the GEMV's lanes past one round of loads (units of 32: 256 at K = 8192) */
    int64_t xl[2] = {2, 8192};
    check_qlinear(LM_Q4_K, 2, xl, 20, 0);
    check_qlinear(LM_Q8_0, 2, xl, 20, 1);
    check_qlinear(LM_Q6_K, 2, xl, 20, 0);
    check_qlinear(LM_Q4_K, 2, x130, 9, 0);       /* 130 rows, the default: the f16 GEMM where there are tensor cores */
    setenv("LUMEN_VK_QGEMM", "coop", 1);   /* tensor cores where the device has them, else the f32 tiles */
    check_qlinear(LM_Q4_K, 2, x130, 1030, 0);
    check_qlinear(LM_Q8_0, 2, x9, 100, 5);
    check_qlinear(LM_Q6_K, 4, b4, 33, 0);
    check_qlinear(LM_Q2_K, 2, x130, 250, 1);
    setenv("LUMEN_VK_QGEMM", "deq", 1);    /* w's f16 copy and the f16 GEMM where there are tensor cores */
    check_qlinear(LM_Q4_K, 2, x130, 1030, 0);
    check_qlinear(LM_Q8_0, 2, x9, 100, 5);
    check_qlinear(LM_Q6_K, 4, b4, 33, 0);
    check_qlinear(LM_Q3_K, 2, x130, 250, 1);
    setenv("LUMEN_VK_QGEMM", "128", 1);
    check_qlinear(LM_Q8_0, 2, x130, 1030, 1);
    check_qlinear(LM_Q4_K, 2, x130, 250, 0);
    check_qlinear(LM_Q6_K, 2, x130, 250, 0);
    setenv("LUMEN_VK_QGEMM", "64", 1);
    check_qlinear(LM_Q3_K, 2, x130, 70, 0);
    unsetenv("LUMEN_VK_QGEMM");
    fprintf(stderr, "qlinear: worst NMSE against x * dequantized w in f64: %.3g in f32, %.3g on tensor cores "
            "(%d cases); against the CPU's qlinear (x quantized to q8): %.3g\n", worst_nmse_ref, worst_nmse_coop,
            coop_runs, worst_nmse_cpu);
}

/* the GEMV's shapes (LUMEN_VK_QGEMV: lanes a row of w x rows a workgroup,
 * g: eight elements at a time instead of whole Q4_K / Q8_0 units), each
 * with lanes past one round of loads, M up to 8 and x at an offset */
static void test_qlinear_gemv_shapes(void **state)
{
    (void)state;
    static const char *const shapes[] = {"32x8", "32x8g", "64x4", "128x1", "128x1g", "256x1", "16x16"};
    static const lm_dtype types[] = {LM_Q4_K, LM_Q8_0, LM_Q5_0};
    size_t nshapes = sizeof shapes / sizeof *shapes;
#ifdef __SANITIZE_ADDRESS__
    /* under ASan lavapipe compiles each of these 21 pipelines through the
     * sanitizer's interceptors: 26 minutes of make check for host code that
     * is the same for every shape; the plain build runs them all */
    nshapes = 2;
    print_message("  sanitizer build: GEMV shapes %s and %s only\n", shapes[0], shapes[1]);
#endif
    /* each shape is a pipeline per type that lavapipe compiles anew (the
     * suite's slowest part in CI): the first shape with every type, each
     * other with one type in turn, so every shape and every type runs */
    size_t ntypes = sizeof types / sizeof *types;
    for (size_t i = 0; i < nshapes; i++) {
        setenv("LUMEN_VK_QGEMV", shapes[i], 1);
        for (size_t t = 0; t < ntypes; t++) {
            if (i > 0 && t != i % ntypes) continue;
            int64_t a[2] = {1, 4608}, b[2] = {8, 1024};
            check_qlinear(types[t], 2, a, 37, 1);
            check_qlinear(types[t], 2, b, 19, 0);
        }
    }
    unsetenv("LUMEN_VK_QGEMV");
}

/* a memory limit that leaves no room for the f16 copies (where the device
 * takes that path): qlinear still runs, on the kernels that need no scratch */
static void test_qlinear_memory_limit(void **state)
{
    (void)state;
    int64_t ws[2] = {512, 1024}, xs[2] = {130, 1024};
    lm_array *w = data(2, ws, LM_F32, -1, 1, 0), *x = data(2, xs, LM_F32, -2, 2, 0);
    lm_array *wq = lm_quantize(w, LM_Q4_K), *wg = on_vk(wq), *xg = on_vk(x);
    lm_array *yg = lm_linear(xg, wg, NULL);
    assert_non_null(yg);
    lm_device_clear_cache(vk);
    lm_memstats m = lm_device_memory(vk);
    lm_device_set_memory_limit(vk, m.active + (600u << 10));   /* y (266 KB) fits, w's copy (1 MB) does not */
    lm_status st = lm_array_eval(yg);
    lm_device_set_memory_limit(vk, 0);
    if (st != LM_OK) fail_msg("qlinear under a memory limit: %s", lm_error_message());
    lm_array *yf = float_ref(x, wq);
    lm_compare_report r;
    assert_int_equal(lm_compare(yg, yf, NULL, &r), LM_OK);
    if (!(r.nmse <= 1e-6)) fail_msg("qlinear under a memory limit: nmse %.3g", r.nmse);
    lm_array *objs[] = {w, x, wq, wg, xg, yg, yf};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) lm_array_release(objs[i]);
}

/* a K that does not fit the weight: an error naming both shapes, on either device */
static void test_qlinear_wrong_k(void **state)
{
    (void)state;
    int64_t ws[2] = {16, 256}, xs[2] = {3, 255};
    lm_array *w = data(2, ws, LM_F32, -1, 1, 0), *x = data(2, xs, LM_F32, -1, 1, 0);
    lm_array *wq = lm_quantize(w, LM_Q8_0), *wg = on_vk(wq), *xg = on_vk(x);
    lm_error_clear();
    lm_array *y = lm_linear(xg, wg, NULL);
    assert_null(y);
    assert_int_equal(lm_error_status(), LM_ERR_SHAPE);
    const char *m = lm_error_message();
    if (!strstr(m, "linear") || !strstr(m, "[3,255]") || !strstr(m, "[16,256]")) fail_msg("message: %s", m);
    lm_array *objs[] = {w, x, wq, wg, xg};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) lm_array_release(objs[i]);
}

int main(void)
{
    parity_setup(NULL);
    if (!vk) {
        printf("test_vk_quant: no Vulkan device (%s); skipped\n", lm_vulkan_status());
        return LM_TEST_SKIP;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dequant_ggml), cmocka_unit_test(test_dequant_types),
        cmocka_unit_test(test_qlinear_shapes), cmocka_unit_test(test_qlinear_layouts),
        cmocka_unit_test(test_qlinear_gemv_shapes), cmocka_unit_test(test_qlinear_memory_limit),
        cmocka_unit_test(test_qlinear_wrong_k), cmocka_unit_test(test_summary),
    };
    return PARITY_RUN(tests);
}

#else
int main(void)
{
    printf("test_vk_quant: built without Vulkan; skipped\n");
    return LM_TEST_SKIP;
}
#endif
