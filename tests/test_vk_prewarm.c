/* test_vk_prewarm.c - the first image's pipelines started at load
 * (models/sd_pipeline.c's prewarm, the Vulkan backend's plan mode:
 * lm_device_plan).  For the tiny SD 1.x pipeline and the tiny Z-Image one,
 * on the first Vulkan device (lavapipe here):
 *  - loading starts pipelines in plan mode (their count is above zero);
 *  - the first generation at the family's defaults then starts no pipeline
 *    of its own: every one it needs was started by the load, so none is
 *    made on its critical path (lm_vulkan_pipelines_started, a count, not
 *    a time);
 *  - its image has the same bytes as the same generation from a pipeline
 *    loaded without the prewarm (no_prewarm): the dry run left nothing
 *    behind that the real one reads (derived data such as conv_halo's
 *    packed weights, recordings, model state); once more in f16 with the
 *    convolutions on conv_halo, whose packed weights are such data, and
 *    in f32 with the 3x3 convs on the Winograd path
 *    (LUMEN_VK_CONV_F32=winograd), whose transformed filters are too.
 * Pipelines are the process's, so each model's prewarmed load comes before
 * its plain one.  LUMEN_PREWARM=0 makes the first two checks fail. */
#include "testutil.h"
#ifdef LM_HAVE_VULKAN
#include "backends/vulkan/vulkan.h"
#include "core/random.h"
#include "models/sd_pipeline.h"

static lm_device *vk;

static lm_dtype dtype = LM_DTYPE_COUNT;   /* the load's (LM_DTYPE_COUNT: the device's default) */

static lm_sd_pipeline *load(const char *path, bool prewarm, int64_t size)
{
    lm_sd_load_opts o;
    lm_sd_load_opts_init(&o);
    o.device = vk;
    o.dtype = dtype;
    o.no_prewarm = !prewarm;
    o.prewarm_width = o.prewarm_height = size;
    lm_sd_pipeline *p = lm_sd_pipeline_load(path, &o);
    if (!p) fprintf(stderr, "%s: %s\n", path, lm_error_message());
    assert_non_null(p);
    return p;
}

/* the family's defaults, one prompt, steps as given (the prewarm plans at
 * most 3: the samplers' first, middle and last steps); the image's values
 * in a new buffer of *n floats */
static float *image(lm_sd_pipeline *p, const char *prompt, int steps, int64_t size, size_t *n)
{
    lm_sd_gen_opts o;
    lm_sd_gen_opts_init_for(&o, p);
    o.width = o.height = size;
    const char *pr[1] = {prompt};
    o.prompts = pr;
    o.nprompts = 1;
    o.steps = steps;
    o.seed = 7;
    lm_array *img = lm_sd_generate(p, &o);
    if (!img) fprintf(stderr, "generate: %s\n", lm_error_message());
    assert_non_null(img);
    *n = (size_t)img->size;
    float *v = malloc(*n * sizeof *v);
    assert_non_null(v);
    assert_int_equal(lm_array_read(img, v, LM_F32), LM_OK);
    lm_array_release(img);
    return v;
}

/* size 0: the family's default (the prewarm's and the image's) */
static void check(const char *path, const char *prompt, int steps, int64_t size)
{
    lm_error_clear();
    int64_t s0 = lm_vulkan_pipelines_started(), p0 = lm_vulkan_pipelines_planned();
    lm_sd_pipeline *p = load(path, true, size);
    int64_t s1 = lm_vulkan_pipelines_started(), planned = lm_vulkan_pipelines_planned() - p0;
    size_t n = 0, m = 0;
    float *a = image(p, prompt, steps, size, &n);
    int64_t s2 = lm_vulkan_pipelines_started();
    lm_sd_pipeline_free(p);
    printf("  %s: the load started %lld pipelines (%lld planned), the first image %lld more\n", path,
           (long long)(s1 - s0), (long long)planned, (long long)(s2 - s1));
    p = load(path, false, size);
    float *b = image(p, prompt, steps, size, &m);
    lm_sd_pipeline_free(p);
    /* nothing planned only where an earlier test in this process started
     * every pipeline the load needs (the H200: test_sd1's defaults
     * already take Winograd for test_sd1_winograd's convs of 32 or more
     * channels); the first image must still start none */
    if (planned == 0) printf("  %s: every pipeline existed already (%lld started before)\n", path, (long long)s0);
    assert_true(planned > 0 || s0 > 0);
    assert_int_equal(s2 - s1, 0);                /* none on the first image's critical path */
    assert_int_equal(n, m);
    assert_memory_equal(a, b, n * sizeof *a);    /* the same bytes with and without */
    free(a);
    free(b);
}

/* each test from the same settings, whatever one that failed left */
static int plain(void **state)
{
    (void)state;
    dtype = LM_DTYPE_COUNT;
    unsetenv("LUMEN_VK_CONV_HALO");
    unsetenv("LUMEN_VK_CONV_F32");
    return 0;
}

static void test_sd1(void **state)
{
    (void)state;
    check("tests/ref/diffusion/sd1", "a photo of an astronaut riding a horse", 4, 0);
}

/* in f16 with LUMEN_VK_CONV_HALO=simt the 3x3 convs run conv_halo, whose
 * packed weights are derived data kept on the weight's buffer: in plan
 * mode they must be neither made nor kept (the packing kernel does not
 * run), else the first real image reads garbage weights */
static void test_sd1_halo(void **state)
{
    (void)state;
    setenv("LUMEN_VK_CONV_HALO", "simt", 1);
    dtype = LM_F16;
    check("tests/ref/diffusion/sd1", "a photo of an astronaut riding a horse", 4, 0);
}

/* the same with LUMEN_VK_CONV_F32=winograd: the 3x3 convs take the
 * Winograd path, whose transformed filters are derived data too and whose
 * scratch (V, M) and GEMM pipelines the plan must start as the real call
 * chooses them */
static void test_sd1_winograd(void **state)
{
    (void)state;
    setenv("LUMEN_VK_CONV_F32", "winograd", 1);
    check("tests/ref/diffusion/sd1", "a photo of an astronaut riding a horse", 4, 0);
}

static void test_zimage(void **state)
{
    (void)state;
    check("tests/ref/dit/zimage", "dance monkey", 4, 64);   /* its default size is beyond the tiny model's */
}

/* the GEMV kernel's split-K (backends/vulkan/matmul_gemv.c: the parts'
 * dispatch, then conv_splitk adding them) in plan mode: both pipelines
 * planned (7 forced parts, a spec no other test makes), no scratch made and
 * nothing run; the real product then starts no pipeline, and its values
 * are the CPU's */
static void test_gemv_plan(void **state)
{
    (void)state;
    setenv("LUMEN_VK_GEMV_PARTS", "7", 1);
    int64_t sx[2] = {3, 1100}, sw[2] = {37, 1100};
    lm_array *x = lm_random_normal(2, sx, 0, 1, LM_F32, lm_random_key(5), vk);
    lm_array *w = lm_random_normal(2, sw, 0, 1, LM_BF16, lm_random_key(6), vk);
    lm_array *wt = lm_transpose(w, 0, 1);
    assert_int_equal(lm_array_eval(x), LM_OK);
    assert_int_equal(lm_array_eval(w), LM_OK);
    int64_t p0 = lm_vulkan_pipelines_planned();
    assert_int_equal(lm_device_plan(vk, true), LM_OK);
    lm_array *y = lm_matmul(x, wt);
    assert_int_equal(lm_array_eval(y), LM_OK);
    lm_array_release(y);
    assert_int_equal(lm_device_plan(vk, false), LM_OK);
    int64_t planned = lm_vulkan_pipelines_planned() - p0, s1 = lm_vulkan_pipelines_started();
    y = lm_matmul(x, wt);
    float got[3 * 37], want[3 * 37];
    assert_int_equal(lm_array_read(y, got, LM_F32), LM_OK);
    int64_t s2 = lm_vulkan_pipelines_started();
    lm_array *xc = lm_array_to(x, lm_device_cpu()), *wc = lm_array_to(wt, lm_device_cpu());
    lm_array *yc = lm_matmul(xc, wc);
    assert_int_equal(lm_array_read(yc, want, LM_F32), LM_OK);
    unsetenv("LUMEN_VK_GEMV_PARTS");
    printf("  gemv split-K: %lld pipelines planned, the real product started %lld\n", (long long)planned,
           (long long)(s2 - s1));
    assert_true(planned >= 2);
    assert_int_equal(s2 - s1, 0);
    for (int i = 0; i < 3 * 37; i++) assert_true(fabsf(got[i] - want[i]) <= 1e-3f * (1.0f + fabsf(want[i])));
    lm_array *all[6] = {x, w, wt, y, xc, wc};
    for (int i = 0; i < 6; i++) lm_array_release(all[i]);
    lm_array_release(yc);
}

/* the GEMM tiles' split-K (matmul.c: LUMEN_VK_MM_SPLITK, 5 parts forced,
 * a count no other test makes) in plan mode: the parts' kernel and
 * conv_splitk planned, no scratch made and nothing split
 * (lm_vulkan_mm_split_count); the real product then starts no pipeline,
 * runs split, and its values are the CPU's */
static void test_mm_split_plan(void **state)
{
    (void)state;
    setenv("LUMEN_VK_MM_SPLITK", "5", 1);
    int64_t sa[3] = {2, 130, 300}, sb[2] = {300, 200};
    lm_array *a = lm_random_normal(3, sa, 0, 1, LM_F32, lm_random_key(7), vk);
    lm_array *b = lm_random_normal(2, sb, 0, 1, LM_F32, lm_random_key(8), vk);
    assert_int_equal(lm_array_eval(a), LM_OK);
    assert_int_equal(lm_array_eval(b), LM_OK);
    int64_t p0 = lm_vulkan_pipelines_planned(), n0 = lm_vulkan_mm_split_count();
    assert_int_equal(lm_device_plan(vk, true), LM_OK);
    lm_array *y = lm_matmul(a, b);
    assert_int_equal(lm_array_eval(y), LM_OK);
    lm_array_release(y);
    assert_int_equal(lm_device_plan(vk, false), LM_OK);
    int64_t planned = lm_vulkan_pipelines_planned() - p0, n1 = lm_vulkan_mm_split_count();
    int64_t s1 = lm_vulkan_pipelines_started();
    y = lm_matmul(a, b);
    static float got[2 * 130 * 200], want[2 * 130 * 200];
    assert_int_equal(lm_array_read(y, got, LM_F32), LM_OK);
    int64_t s2 = lm_vulkan_pipelines_started(), n2 = lm_vulkan_mm_split_count();
    lm_array *ac = lm_array_to(a, lm_device_cpu()), *bc = lm_array_to(b, lm_device_cpu());
    lm_array *yc = lm_matmul(ac, bc);
    assert_int_equal(lm_array_read(yc, want, LM_F32), LM_OK);
    unsetenv("LUMEN_VK_MM_SPLITK");
    printf("  matmul split-K: %lld pipelines planned, the real product started %lld, split %lld then %lld\n",
           (long long)planned, (long long)(s2 - s1), (long long)(n1 - n0), (long long)(n2 - n1));
    assert_true(planned >= 2);
    assert_int_equal(s2 - s1, 0);
    assert_int_equal(n1 - n0, 0);
    assert_int_equal(n2 - n1, 1);
    for (int i = 0; i < 2 * 130 * 200; i++) assert_true(fabsf(got[i] - want[i]) <= 1e-3f * (1.0f + fabsf(want[i])));
    lm_array *all[6] = {a, b, y, ac, bc, yc};
    for (int i = 0; i < 6; i++) lm_array_release(all[i]);
}

/* plan mode refused where it cannot start the pipelines ahead: the CPU */
static void test_cpu_refuses(void **state)
{
    (void)state;
    assert_int_equal(lm_device_plan(lm_device_cpu(), true), LM_ERR_UNSUPPORTED);
    lm_error_clear();
}

int main(void)
{
    setenv("LUMEN_DEVICE", "vulkan", 1);
    unsetenv("LUMEN_VK_COMPILE_THREADS");
    lm_init();
    vk = tu_vulkan_device();
    if (!vk) {
        printf("test_vk_prewarm: no Vulkan device (%s); skipped\n", lm_vulkan_status());
        return LM_TEST_SKIP;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_sd1, plain),
        cmocka_unit_test_setup(test_sd1_halo, plain),
        cmocka_unit_test_setup(test_sd1_winograd, plain),
        cmocka_unit_test_setup(test_zimage, plain),
        cmocka_unit_test(test_gemv_plan),
        cmocka_unit_test(test_mm_split_plan),
        cmocka_unit_test(test_cpu_refuses),
    };
    int r = cmocka_run_group_tests(tests, NULL, NULL);
    if (lm_vulkan_validation_messages()) {
        printf("test_vk_prewarm: %lld validation messages\n", (long long)lm_vulkan_validation_messages());
        return 1;
    }
    if (lm_array_live_count() != 0) {
        printf("test_vk_prewarm: %lld arrays left alive\n", (long long)lm_array_live_count());
        return 1;
    }
    return r;
}

#else
int main(void)
{
    printf("test_vk_prewarm: built without Vulkan; skipped\n");
    return LM_TEST_SKIP;
}
#endif
