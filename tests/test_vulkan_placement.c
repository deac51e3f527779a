/* test_vulkan_placement.c - where work runs with a Vulkan device beside the
 * CPU: a node the device lacks runs on the CPU and says so once per op,
 * dtype, shape and device (LUMEN_FALLBACK=quiet hides it, =0 makes it an
 * error), counted in lm_eval_last_stats(). */
#include <unistd.h>
#include "testutil.h"
#ifdef LM_HAVE_VULKAN
#include "backends/vulkan/vulkan.h"

static lm_device *vk;

/* stderr captured into a temporary file between begin and end */
static int saved_fd = -1;
static FILE *cap;

static void capture_begin(void)
{
    fflush(stderr);
    cap = tmpfile();
    assert_non_null(cap);
    saved_fd = dup(2);
    assert_true(saved_fd >= 0);
    assert_true(dup2(fileno(cap), 2) >= 0);
}

/* returns what was written (static buffer) */
static const char *capture_end(void)
{
    static char buf[4096];
    fflush(stderr);
    dup2(saved_fd, 2);
    close(saved_fd);
    rewind(cap);
    size_t n = fread(buf, 1, sizeof buf - 1, cap);
    buf[n] = 0;
    fclose(cap);
    return buf;
}

static int count_of(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)); p += strlen(what)) n++;
    return n;
}

/* exp of an f64 vector of length n on the device: the GPU has no exact f64
 * exp, so the node falls back; returns the eval status */
static lm_status run_exp(int64_t n, double *out0, lm_eval_stats *stats)
{
    double x[16];
    for (int i = 0; i < n; i++) x[i] = 0.25 * i;
    lm_array *a = lm_from_data(1, &n, LM_F64, x, vk);
    lm_array *e = lm_unary(LM_OP_EXP, a);
    lm_status st = lm_array_eval(e);
    if (stats) *stats = lm_eval_last_stats();
    if (st == LM_OK && out0) assert_int_equal(lm_array_get(e, (int64_t[]){1}, out0), LM_OK);
    lm_array_release(a);
    lm_array_release(e);
    return st;
}

static void test_fallback_said_once(void **state)
{
    (void)state;
    unsetenv("LUMEN_FALLBACK");
    double v = 0;
    capture_begin();
    lm_eval_stats st1, st2;
    lm_status s1 = run_exp(5, &v, &st1);
    lm_status s2 = run_exp(5, NULL, &st2);   /* same op, dtype, shape: no second line */
    lm_status s3 = run_exp(6, NULL, NULL);   /* another shape: a line of its own */
    const char *err = capture_end();
    assert_int_equal(s1, LM_OK);
    assert_int_equal(s2, LM_OK);
    assert_int_equal(s3, LM_OK);
    assert_true(fabs(v - exp(0.25)) < 1e-15);
    assert_int_equal(st1.fallbacks, 1);
    assert_int_equal(st1.cpu_nodes, 1);
    assert_int_equal(st2.fallbacks, 1);
    char want[320];
    snprintf(want, sizeof want, "lumen: exp f64[5] is not supported on %s (%s); running it on the CPU",
             vk->spec, vk->name);
    assert_int_equal(count_of(err, want), 1);
    assert_int_equal(count_of(err, "exp f64[6] is not supported"), 1);
    assert_int_equal(count_of(err, "LUMEN_FALLBACK=quiet hides this"), 2);
}

static void test_fallback_quiet_and_off(void **state)
{
    (void)state;
    setenv("LUMEN_FALLBACK", "quiet", 1);
    capture_begin();
    lm_eval_stats st1;
    lm_status s1 = run_exp(7, NULL, &st1);
    const char *err = capture_end();
    assert_int_equal(s1, LM_OK);
    assert_int_equal(st1.fallbacks, 1);   /* quiet, still counted */
    assert_string_equal(err, "");
    setenv("LUMEN_FALLBACK", "0", 1);
    capture_begin();
    lm_status s2 = run_exp(8, NULL, NULL);
    err = capture_end();
    assert_int_equal(s2, LM_ERR_UNSUPPORTED);
    char want[96];
    snprintf(want, sizeof want, "exp: not supported on %s for f64[8]", vk->spec);
    assert_non_null(strstr(lm_error_message(), want));
    assert_string_equal(err, "");
    unsetenv("LUMEN_FALLBACK");
}

/* a graph the device runs whole: no fallback, no CPU kernel, no word */
static void test_no_fallback_no_word(void **state)
{
    (void)state;
    float x[4] = {1, 2, 3, 4};
    int64_t n = 4;
    lm_array *a = lm_from_data(1, &n, LM_F32, x, vk);
    lm_array *e = lm_unary(LM_OP_EXP, a);
    capture_begin();
    lm_status st = lm_array_eval(e);
    const char *err = capture_end();
    assert_int_equal(st, LM_OK);
    lm_eval_stats s = lm_eval_last_stats();
    assert_int_equal(s.fallbacks, 0);
    assert_int_equal(s.cpu_nodes, 0);
    assert_int_equal(s.transfers, 0);
    assert_string_equal(err, "");
    lm_array_release(a);
    lm_array_release(e);
}

int main(void)
{
    lm_init();
    for (int i = 0; i < lm_device_count() && !vk; i++)
        if (!strncmp(lm_device_at(i)->spec, "vulkan", 6)) vk = lm_device_at(i);
    if (!vk) {
        printf("test_vulkan_placement: no Vulkan device (%s); skipped\n", lm_vulkan_status());
        return LM_TEST_SKIP;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fallback_said_once),
        cmocka_unit_test(test_fallback_quiet_and_off),
        cmocka_unit_test(test_no_fallback_no_word),
    };
    int r = cmocka_run_group_tests(tests, NULL, NULL);
    assert_int_equal(lm_array_live_count(), 0);
    return r;
}

#else
int main(void)
{
    printf("test_vulkan_placement: built without Vulkan; skipped\n");
    return LM_TEST_SKIP;
}
#endif
