/* test_vulkan.c - the Vulkan backend's device, memory and execution layers:
 * memory returns to its start after 10,000 evaluations, long graphs are
 * split into bounded batches, unsupported nodes fall back to the CPU,
 * errors (bad index, memory limit) come back as statuses with messages, the
 * pipeline cache is written.  Op results are checked by test_vulkan_parity.c. */
#include "testutil.h"
#ifdef LM_HAVE_VULKAN
#include <sys/stat.h>
#include "backends/vulkan/vulkan.h"

static lm_device *vk;

static lm_array *vec(const float *v, int64_t n, lm_device *d)
{
    lm_array *a = lm_from_data(1, &n, LM_F32, v, d);
    assert_non_null(a);
    return a;
}

static void test_devices_listed(void **state)
{
    (void)state;
    assert_non_null(vk);
    assert_true(strstr(vk->info, "Vulkan") != NULL);
    assert_true(vk->mem.device_total > 0);
    assert_non_null(lm_device_find("vulkan:0"));
}

/* 10,000 small evaluations: active bytes come back to where they started
 * and the backend does not keep growing its blocks */
static void test_memory_returns(void **state)
{
    (void)state;
    float x[100];
    for (int i = 0; i < 100; i++) x[i] = (float)i * 0.25f;
    lm_array *a = vec(x, 100, vk);
    lm_memstats m0 = lm_device_memory(vk);
    size_t r0 = 0;
    for (int it = 0; it < 10000; it++) {
        lm_array *b = lm_binary_scalar(LM_OP_MUL, a, 2.0, false);
        lm_array *c = lm_binary(LM_OP_ADD, a, b);
        lm_array *s = lm_reduce(LM_OP_SUM, c, 0, NULL, false);
        double v;
        assert_int_equal(lm_array_get(s, NULL, &v), LM_OK);
        if (it == 0) r0 = lm_vulkan_reserved_bytes(vk);
        if (it % 2500 == 0) assert_true(fabs(v - 3 * 0.25 * 4950) < 1e-2);
        lm_array_release(b);
        lm_array_release(c);
        lm_array_release(s);
    }
    lm_memstats m1 = lm_device_memory(vk);
    assert_int_equal(m1.active, m0.active);
    assert_true(lm_vulkan_reserved_bytes(vk) <= r0);
    lm_array_release(a);
}

/* one eval of 3000 dependent nodes: more than one batch, right answer */
static void test_long_graph(void **state)
{
    (void)state;
    float x[16] = {0};
    lm_array *a = vec(x, 16, vk);
    int64_t d0 = lm_vulkan_dispatch_count();
    for (int i = 0; i < 3000; i++) {
        lm_array *b = lm_binary_scalar(LM_OP_ADD, a, 1.0, false);
        lm_array_release(a);
        a = b;
    }
    float out[16];
    assert_int_equal(lm_array_read(a, out, LM_F32), LM_OK);
    for (int i = 0; i < 16; i++) assert_true(out[i] == 3000.0f);
    assert_true(lm_vulkan_dispatch_count() - d0 >= 3000);
    lm_array_release(a);
}

/* one eval of 4000 nodes on 64K-element tensors whose intermediates the
 * core frees as it goes: the command buffers are submitted without
 * waiting (a ring, backends/vulkan/exec.c), so memory freed mid-eval
 * must not be handed out again while a running one still reads it; the
 * values equal the CPU's bit for bit (each op exact in IEEE f32) */
static void test_long_graph_ring(void **state)
{
    (void)state;
    int64_t shape[2] = {256, 256};
    lm_device *devs[2] = {vk, lm_device_cpu()};
    float *out[2], *init = malloc(256 * 256 * sizeof(float));
    for (int i = 0; i < 256 * 256; i++) init[i] = (float)((i * 7919) % 1000) / 999.0f;
    for (int k = 0; k < 2; k++) {
        lm_array *x = lm_from_data(2, shape, LM_F32, init, devs[k]);
        assert_non_null(x);
        for (int i = 0; i < 2000; i++) {
            lm_array *m = lm_binary_scalar(LM_OP_MUL, x, i % 2 ? -0.75 : 1.25, false);
            lm_array *y = lm_binary_scalar(LM_OP_ADD, m, 0.5, false);
            lm_array_release(m);
            lm_array_release(x);
            x = y;
        }
        out[k] = malloc(256 * 256 * sizeof(float));
        assert_int_equal(lm_array_read(x, out[k], LM_F32), LM_OK);
        lm_array_release(x);
    }
    assert_memory_equal(out[0], out[1], 256 * 256 * sizeof(float));
    free(init);
    free(out[0]);
    free(out[1]);
}

/* lm_eval_async: results queued and not waited for are right when read,
 * when used by the next evaluation (queued too), and when released
 * before anything waited (their memory is given back only after); a
 * kernel's index error is still reported by the call */
static void test_async_eval(void **state)
{
    (void)state;
    lm_memstats m0 = lm_device_memory(vk);
    float x[64], got[64];
    for (int i = 0; i < 64; i++) x[i] = (float)i;
    lm_array *a = vec(x, 64, vk), *prev = lm_array_retain(a);
    for (int step = 0; step < 50; step++) {
        lm_array *y = prev;
        for (int i = 0; i < 40; i++) {
            lm_array *z = lm_binary_scalar(LM_OP_ADD, y, 1.0, false);
            if (y != prev) lm_array_release(y);
            y = z;
        }
        assert_int_equal(lm_eval_async(&y, 1), LM_OK);
        lm_array *dropped = lm_binary_scalar(LM_OP_MUL, y, 3.0, false);
        assert_int_equal(lm_eval_async(&dropped, 1), LM_OK);
        lm_array_release(dropped);   /* never read: freed while it may still run */
        lm_array_release(prev);
        prev = y;
    }
    assert_int_equal(lm_array_read(prev, got, LM_F32), LM_OK);
    for (int i = 0; i < 64; i++) assert_true(got[i] == x[i] + 2000.0f);
    lm_array_release(prev);
    lm_array_release(a);
    assert_int_equal(lm_device_sync(vk), LM_OK);
    assert_int_equal(lm_device_memory(vk).active, m0.active);
    /* an index error is not left for a later wait */
    int64_t n = 2, idx_v[2] = {0, 99};
    lm_array *b = vec(x, 64, vk), *idx = lm_from_data(1, &n, LM_I64, idx_v, vk);
    lm_array *r = lm_index_select(b, 0, idx);
    assert_int_equal(lm_eval_async(&r, 1), LM_ERR_ARG);
    assert_true(strstr(lm_error_message(), "out of range") != NULL);
    lm_array_release(r);
    lm_array_release(idx);
    lm_array_release(b);
}

static void test_index_error(void **state)
{
    (void)state;
    float x[4] = {1, 2, 3, 4};
    lm_array *a = vec(x, 4, vk);
    int64_t n = 2, idx_v[2] = {1, 9};
    lm_array *idx = lm_from_data(1, &n, LM_I64, idx_v, vk);
    lm_array *r = lm_index_select(a, 0, idx);
    assert_non_null(r);
    assert_int_equal(lm_array_eval(r), LM_ERR_ARG);
    assert_true(strstr(lm_error_message(), "out of range") != NULL);
    lm_array_release(r);
    /* the device keeps working afterwards */
    lm_array *s = lm_reduce(LM_OP_SUM, a, 0, NULL, false);
    double v;
    assert_int_equal(lm_array_get(s, NULL, &v), LM_OK);
    assert_true(v == 10.0);
    lm_array_release(s);
    lm_array_release(idx);
    lm_array_release(a);
}

/* f64 transcendental ops have no exact GPU form: the node runs on the CPU
 * between GPU nodes (a*2 on the GPU, exp on the CPU, +1 on the GPU) and the
 * result is the CPU's, bit for bit */
static void test_unsupported_falls_back(void **state)
{
    (void)state;
    double x[5] = {1, 2, 3, -0.5, 700};
    int64_t n = 5;
    lm_array *res[2];
    lm_device *devs[2] = {vk, lm_device_cpu()};
    for (int k = 0; k < 2; k++) {
        lm_array *a = lm_from_data(1, &n, LM_F64, x, devs[k]);
        lm_array *b = lm_binary_scalar(LM_OP_MUL, a, 2, false), *e = lm_unary(LM_OP_EXP, b);
        res[k] = lm_binary_scalar(LM_OP_ADD, e, 1, false);
        assert_int_equal(lm_array_eval(res[k]), LM_OK);
        if (k == 0) assert_int_equal(lm_eval_last_stats().fallbacks, 1);
        lm_array_release(a);
        lm_array_release(b);
        lm_array_release(e);
    }
    assert_ptr_equal(res[0]->device, vk);
    double g[5], c[5];
    assert_int_equal(lm_array_read(res[0], g, LM_F64), LM_OK);
    assert_int_equal(lm_array_read(res[1], c, LM_F64), LM_OK);
    assert_memory_equal(g, c, sizeof g);
    assert_true(isinf(g[4]));
    lm_array_release(res[0]);
    lm_array_release(res[1]);
}

static void test_memory_limit(void **state)
{
    (void)state;
    lm_device_set_memory_limit(vk, 1 << 20);
    int64_t shape[2] = {1024, 1024};
    lm_array *big = lm_full(2, shape, 1.0, LM_F32, vk);
    assert_int_not_equal(lm_array_eval(big), LM_OK);
    lm_array_release(big);
    lm_device_set_memory_limit(vk, 0);
    big = lm_full(2, shape, 1.0, LM_F32, vk);
    assert_int_equal(lm_array_eval(big), LM_OK);
    lm_array_release(big);
}

static void test_pipeline_cache_written(void **state)
{
    (void)state;
    const char *xdg = getenv("XDG_CACHE_HOME");
    if (!xdg) skip();
    char dir[512];
    snprintf(dir, sizeof dir, "%s/lumen", xdg);
    struct stat sb;
    assert_int_equal(stat(dir, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
}

/* Small uploads: where device memory is not mapped (a discrete GPU, or
 * LUMEN_VK_NO_MAP=1, as tests/parity/validate.sh runs this) they are recorded
 * into the open command buffer; values, order against kernels and reads
 * right after them must be as if each had been copied at once. */
static void test_small_uploads_in_order(void **state)
{
    (void)state;
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, got[8];
    lm_array *a = vec(x, 8, vk);
    /* many scalars made before any evaluation, each used once */
    lm_array *acc = lm_array_retain(a);
    for (int i = 1; i <= 50; i++) {
        lm_array *s = lm_scalar((double)i, LM_F32, vk);
        lm_array *t = lm_binary(LM_OP_ADD, acc, s);
        lm_array_release(s);
        lm_array_release(acc);
        acc = t;
    }
    assert_int_equal(lm_array_read(acc, got, LM_F32), LM_OK);
    for (int i = 0; i < 8; i++) assert_true(got[i] == x[i] + 1275.0f);
    /* a read straight after an upload sees it */
    float y[8] = {-1, -2, -3, -4, -5, -6, -7, -8};
    lm_array *b = vec(y, 8, vk);
    assert_int_equal(lm_array_read(b, got, LM_F32), LM_OK);
    for (int i = 0; i < 8; i++) assert_true(got[i] == y[i]);
    /* an in-place write after a kernel that read the old values, then a
     * kernel that reads the new ones, in one command buffer */
    lm_array *old2 = lm_binary_scalar(LM_OP_MUL, b, 2.0, false);
    assert_int_equal(lm_array_eval(old2), LM_OK);
    lm_array *nb = vec(x, 8, vk);
    assert_int_equal(lm_array_assign(b, nb), LM_OK);
    lm_array *new2 = lm_binary_scalar(LM_OP_MUL, b, 2.0, false);
    assert_int_equal(lm_array_read(new2, got, LM_F32), LM_OK);
    for (int i = 0; i < 8; i++) assert_true(got[i] == 2 * x[i]);
    assert_int_equal(lm_array_read(old2, got, LM_F32), LM_OK);
    for (int i = 0; i < 8; i++) assert_true(got[i] == 2 * y[i]);
    lm_array *arrs[] = {a, acc, b, old2, nb, new2};
    for (int i = 0; i < 6; i++) lm_array_release(arrs[i]);
}

static void test_no_validation_messages(void **state)
{
    (void)state;
    assert_int_equal(lm_vulkan_validation_messages(), 0);
}

int main(void)
{
    lm_init();
    for (int i = 0; i < lm_device_count() && !vk; i++)
        if (!strncmp(lm_device_at(i)->spec, "vulkan", 6)) vk = lm_device_at(i);
    if (!vk) {
        printf("test_vulkan: no Vulkan device (%s); skipped\n", lm_vulkan_status());
        return LM_TEST_SKIP;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_devices_listed), cmocka_unit_test(test_memory_returns),
        cmocka_unit_test(test_long_graph), cmocka_unit_test(test_long_graph_ring),
        cmocka_unit_test(test_async_eval),
        cmocka_unit_test(test_index_error),
        cmocka_unit_test(test_unsupported_falls_back), cmocka_unit_test(test_memory_limit),
        cmocka_unit_test(test_pipeline_cache_written), cmocka_unit_test(test_small_uploads_in_order),
        cmocka_unit_test(test_no_validation_messages),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else
int main(void)
{
    printf("test_vulkan: built without Vulkan; skipped\n");
    return LM_TEST_SKIP;
}
#endif
