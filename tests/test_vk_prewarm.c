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

/* with the knob env=val (set and unset with the device idle: a driver
 * thread may read the environment, test_vk_replay's note), x @ y in plan
 * mode, then for real into got and on the CPU into want (n values each);
 * c[0] the pipelines the plan made, c[1] those the real product started,
 * c[2] / c[3] the GEMM tiles' split-K runs in the plan / the real product
 * (lm_vulkan_mm_split_count) */
static void plan_then_run(const char *env, const char *val, lm_array *x, lm_array *y, float *got, float *want,
                          int n, int64_t c[4])
{
    assert_int_equal(lm_device_sync(vk), LM_OK);
    setenv(env, val, 1);
    int64_t p0 = lm_vulkan_pipelines_planned(), n0 = lm_vulkan_mm_split_count();
    assert_int_equal(lm_device_plan(vk, true), LM_OK);
    lm_array *r = lm_matmul(x, y);
    assert_int_equal(lm_array_eval(r), LM_OK);
    lm_array_release(r);
    assert_int_equal(lm_device_plan(vk, false), LM_OK);
    int64_t n1 = lm_vulkan_mm_split_count(), s1 = lm_vulkan_pipelines_started();
    c[0] = lm_vulkan_pipelines_planned() - p0;
    r = lm_matmul(x, y);
    assert_int_equal(lm_array_read(r, got, LM_F32), LM_OK);
    c[1] = lm_vulkan_pipelines_started() - s1;
    c[2] = n1 - n0;
    c[3] = lm_vulkan_mm_split_count() - n1;
    assert_int_equal(lm_device_sync(vk), LM_OK);
    unsetenv(env);
    lm_array *xc = lm_array_to(x, lm_device_cpu()), *yc = lm_array_to(y, lm_device_cpu());
    lm_array *rc = lm_matmul(xc, yc);
    assert_int_equal(lm_array_read(rc, want, LM_F32), LM_OK);
    for (int i = 0; i < n; i++) assert_true(fabsf(got[i] - want[i]) <= 1e-3f * (1.0f + fabsf(want[i])));
    lm_array *all[4] = {r, xc, yc, rc};
    for (int i = 0; i < 4; i++) lm_array_release(all[i]);
}

/* the GEMV kernel's split-K (backends/vulkan/matmul_gemv.c: the parts'
 * dispatch, then conv_splitk adding them) in plan mode: both pipelines
 * planned (7 forced parts, a spec no other test makes), no scratch made and
 * nothing run; the real product then starts no pipeline, and its values
 * are the CPU's */
static void test_gemv_plan(void **state)
{
    (void)state;
    int64_t sx[2] = {3, 1100}, sw[2] = {37, 1100};
    lm_array *x = lm_random_normal(2, sx, 0, 1, LM_F32, lm_random_key(5), vk);
    lm_array *w = lm_random_normal(2, sw, 0, 1, LM_BF16, lm_random_key(6), vk);
    lm_array *wt = lm_transpose(w, 0, 1);
    assert_int_equal(lm_array_eval(x), LM_OK);
    assert_int_equal(lm_array_eval(w), LM_OK);
    float got[3 * 37], want[3 * 37];
    int64_t c[4];
    plan_then_run("LUMEN_VK_GEMV_PARTS", "7", x, wt, got, want, 3 * 37, c);
    printf("  gemv split-K: %lld pipelines planned, the real product started %lld\n", (long long)c[0],
           (long long)c[1]);
    assert_true(c[0] >= 2);
    assert_int_equal(c[1], 0);
    lm_array *all[3] = {x, w, wt};
    for (int i = 0; i < 3; i++) lm_array_release(all[i]);
}

/* the GEMM tiles' split-K (matmul.c: LUMEN_VK_MM_SPLITK, 5 parts forced)
 * in plan mode: the parts' kernel and conv_splitk planned, no scratch made
 * and nothing split (lm_vulkan_mm_split_count); the real product then
 * starts no pipeline, runs split, and its values are the CPU's.  Every
 * count shares one pipeline of each (matmul_pc.glsl's SPLITK = 0), so an
 * earlier split in the process may have made them: what the plan must do
 * is leave the real product nothing to start */
static void test_mm_split_plan(void **state)
{
    (void)state;
    int64_t sa[3] = {2, 130, 300}, sb[2] = {300, 200};
    lm_array *a = lm_random_normal(3, sa, 0, 1, LM_F32, lm_random_key(7), vk);
    lm_array *b = lm_random_normal(2, sb, 0, 1, LM_F32, lm_random_key(8), vk);
    assert_int_equal(lm_array_eval(a), LM_OK);
    assert_int_equal(lm_array_eval(b), LM_OK);
    static float got[2 * 130 * 200], want[2 * 130 * 200];
    int64_t c[4];
    plan_then_run("LUMEN_VK_MM_SPLITK", "5", a, b, got, want, 2 * 130 * 200, c);
    printf("  matmul split-K: %lld pipelines planned, the real product started %lld, split %lld then %lld\n",
           (long long)c[0], (long long)c[1], (long long)c[2], (long long)c[3]);
    assert_int_equal(c[1], 0);
    assert_int_equal(c[2], 0);
    assert_int_equal(c[3], 1);
    lm_array_release(a);
    lm_array_release(b);
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
