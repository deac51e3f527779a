/* test_vk_upload.c - uploads that do not wait for the GPU
 * (backends/vulkan/memory.c): while kernels run, an upload is recorded as a
 * copy from the staging block, ordered after the kernels already queued
 * (even into a buffer they still read, which the core's cache hands out
 * again at once) and before the ones that read it; to unmapped memory
 * every upload is recorded, and one that finds the staging block full
 * waits and goes in chunks.  Every value is read back exactly.  Runs as
 * the device maps its memory (lavapipe: mapped) and again with
 * LUMEN_VK_NO_MAP=1 in tests/parity/validate.sh, as a discrete GPU does. */
#include "testutil.h"
#ifdef LM_HAVE_VULKAN
#include "backends/vulkan/vulkan.h"

static lm_device *vk;

/* is the device's memory unmapped (a discrete GPU without resizable BAR,
 * or LUMEN_VK_NO_MAP=1)?  Asked of the device, not of the environment: an
 * idle upload above 4 KiB is recorded exactly when it is (the H100 showed
 * the environment's answer wrong: its memory is unmapped without the
 * variable) */
static bool unmapped(void)
{
    static int known = -1;
    if (known < 0) {
        int64_t n = 4096, before = lm_vulkan_recorded_upload_count();
        float *v = calloc((size_t)n, sizeof *v);
        lm_array *a = v ? lm_from_data(1, &n, LM_F32, v, vk) : NULL;
        if (a) lm_array_eval(a);
        known = lm_vulkan_recorded_upload_count() > before;
        lm_array_release(a);
        free(v);
    }
    return known == 1;
}

static float *ramp(int64_t n, float base)
{
    float *v = malloc((size_t)n * sizeof *v);
    assert_non_null(v);
    for (int64_t i = 0; i < n; i++) v[i] = base + (float)(i % 4093);
    return v;
}

static void expect_exact(lm_array *a, const float *want, int64_t n, float mul, float add)
{
    float *got = malloc((size_t)n * sizeof *got);
    assert_non_null(got);
    assert_int_equal(lm_array_read(a, got, LM_F32), LM_OK);
    for (int64_t i = 0; i < n; i++)
        if (got[i] != want[i] * mul + add) fail_msg("element %lld: %g, expected %g", (long long)i,
                                                    got[i], want[i] * mul + add);
    free(got);
}

/* a's buffer goes back to the cache while y = a * 3 + 1 still runs; b, of
 * the same size, most likely gets it: b's recorded copy must come after
 * y's reads, and b * 2 after the copy */
static void test_upload_while_running(void **state)
{
    (void)state;
    int64_t n = 1 << 20;
    float *va = ramp(n, 1), *vb = ramp(n, 7);
    lm_array *a = lm_from_data(1, &n, LM_F32, va, vk);
    lm_array *t = lm_binary_scalar(LM_OP_MUL, a, 3, false);
    lm_array *y = lm_binary_scalar(LM_OP_ADD, t, 1, false);
    lm_array_release(t);
    assert_int_equal(lm_eval_async(&y, 1), LM_OK);
    lm_array_release(a);
    int64_t before = lm_vulkan_recorded_upload_count();
    lm_array *b = lm_from_data(1, &n, LM_F32, vb, vk);
    assert_non_null(b);
    assert_int_equal(lm_vulkan_recorded_upload_count(), before + 1);   /* it did not wait */
    lm_array *z = lm_binary_scalar(LM_OP_MUL, b, 2, false);
    assert_int_equal(lm_eval_async(&z, 1), LM_OK);
    expect_exact(z, vb, n, 2, 0);
    expect_exact(y, va, n, 3, 1);
    expect_exact(b, vb, n, 1, 0);
    lm_array_release(y);
    lm_array_release(z);
    lm_array_release(b);
    free(va);
    free(vb);
}

/* 300 uploads of 256 KB (75 MB: more than the staging block holds, so
 * some wait for it), then one larger than half of it (chunked), then all
 * read back */
static void test_many_uploads(void **state)
{
    (void)state;
    enum { N = 300 };
    int64_t n = 64 << 10, big = 20 << 20;
    lm_array *a[N + 1];
    float *v = ramp(big, 0.5f);
    bool nomap = unmapped();     /* asked while the device is idle */
    int64_t before = lm_vulkan_recorded_upload_count();
    for (int i = 0; i < N; i++) {
        a[i] = lm_from_data(1, &n, LM_F32, v + i * 1000, vk);
        assert_non_null(a[i]);
    }
    a[N] = lm_from_data(1, &big, LM_F32, v, vk);
    assert_non_null(a[N]);
    int64_t recorded = lm_vulkan_recorded_upload_count() - before;
    /* unmapped: all but those that found the staging block full */
    if (nomap) assert_true(recorded >= N / 2 && recorded <= N);
    else assert_int_equal(recorded, 0);   /* mapped and idle: memcpy */
    for (int i = 0; i < N; i++) {
        expect_exact(a[i], v + i * 1000, n, 1, 0);
        lm_array_release(a[i]);
    }
    expect_exact(a[N], v, big, 1, 0);
    lm_array_release(a[N]);
    free(v);
}

int main(void)
{
    setenv("LUMEN_DEVICE", "vulkan", 1);
    lm_init();
    for (int i = 0; i < lm_device_count() && !vk; i++)
        if (!strncmp(lm_device_at(i)->spec, "vulkan", 6)) vk = lm_device_at(i);
    if (!vk) {
        printf("test_vk_upload: no Vulkan device (%s); skipped\n", lm_vulkan_status());
        return LM_TEST_SKIP;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_upload_while_running),
        cmocka_unit_test(test_many_uploads),
    };
    int r = cmocka_run_group_tests(tests, NULL, NULL);
    if (lm_vulkan_validation_messages()) {
        printf("test_vk_upload: %lld validation messages\n", (long long)lm_vulkan_validation_messages());
        return 1;
    }
    if (lm_array_live_count() != 0) {
        printf("test_vk_upload: %lld arrays left alive\n", (long long)lm_array_live_count());
        return 1;
    }
    return r;
}

#else
int main(void)
{
    printf("test_vk_upload: built without Vulkan; skipped\n");
    return LM_TEST_SKIP;
}
#endif
