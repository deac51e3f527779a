/* test_vulkan_placement.c - where work runs with a Vulkan device beside the
 * CPU (run with LUMEN_DEVICE=vulkan, set by main): a node the device lacks
 * runs on the CPU and says so once per op, dtype, shape and device
 * (LUMEN_FALLBACK=quiet hides it, =0 makes it an error), counted in
 * lm_eval_last_stats(); an op with inputs on two devices runs on the default
 * device whatever the argument order; loaded tensors belong to the default
 * device and a model loaded from safetensors runs there whole. */
#include <unistd.h>
#include "testutil.h"
#ifdef LM_HAVE_VULKAN
#include "backends/vulkan/vulkan.h"
#include "core/internal.h"
#include "core/io/io.h"
#include "core/random.h"

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


static lm_array *on(lm_device *d, const float *v, int64_t n)
{
    lm_array *a = lm_from_data(1, &n, LM_F32, v, d);
    assert_non_null(a);
    return a;
}

static void expect_vals(lm_array *a, const float *want, int n)
{
    float got[16];
    assert_int_equal(lm_array_read(a, got, LM_F32), LM_OK);
    for (int i = 0; i < n; i++) assert_true(fabsf(got[i] - want[i]) < 1e-6f);
}

/* inputs on the CPU and the default device run on the default device in
 * either order; inputs all on the CPU stay there; numbers follow */
static void test_mixed_devices(void **state)
{
    (void)state;
    lm_device *cpu = lm_device_cpu();
    assert_ptr_equal(lm_device_default(), vk);
    float x[3] = {1, 2, 3}, y[3] = {10, 20, 30}, sum[3] = {11, 22, 33};
    lm_array *c = on(cpu, x, 3), *g = on(vk, y, 3), *c2 = on(cpu, y, 3);
    lm_array *r1 = lm_binary(LM_OP_ADD, c, g), *r2 = lm_binary(LM_OP_ADD, g, c);
    lm_array *r3 = lm_binary(LM_OP_ADD, c, c2);
    assert_ptr_equal(r1->device, vk);
    assert_ptr_equal(r2->device, vk);
    assert_ptr_equal(r3->device, cpu);
    expect_vals(r1, sum, 3);
    expect_vals(r2, sum, 3);
    expect_vals(r3, sum, 3);
    /* a weak scalar on the other device does not move the work */
    lm_array *s = lm_scalar(2, LM_F64, vk);
    lm_array *r4 = lm_binary(LM_OP_MUL, c, s), *r5 = lm_binary(LM_OP_MUL, s, c);
    assert_ptr_equal(r4->device, cpu);
    assert_ptr_equal(r5->device, cpu);
    expect_vals(r4, (float[]){2, 4, 6}, 3);
    /* matmul and where by the same rule */
    lm_array *cr = lm_reshape(c, 2, (int64_t[]){1, 3}), *gr = lm_reshape(g, 2, (int64_t[]){3, 1});
    lm_array *m1 = lm_matmul(cr, gr);
    assert_ptr_equal(m1->device, vk);
    expect_vals(m1, (float[]){140}, 1);
    lm_array *cond = lm_binary_scalar(LM_OP_GT, c, 1.5, false);
    lm_array *w = lm_where(cond, c, g);
    assert_ptr_equal(w->device, vk);
    expect_vals(w, (float[]){10, 2, 3}, 3);
    /* with the CPU as the default, the same mixed op runs there */
    lm_device_set_default(cpu);
    lm_array *r6 = lm_binary(LM_OP_SUB, g, c);
    assert_ptr_equal(r6->device, cpu);
    expect_vals(r6, (float[]){9, 18, 27}, 3);
    lm_device_set_default(vk);
    lm_array *all[] = {c, g, c2, r1, r2, r3, s, r4, r5, cr, gr, m1, cond, w, r6};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) lm_array_release(all[i]);
}

/* two devices, neither the default: an error naming the op and both */
static void test_mixed_devices_error(void **state)
{
    (void)state;
    lm_device other = *lm_device_cpu();
    snprintf(other.spec, sizeof other.spec, "other:0");
    lm_array a = {0}, b = {0};
    a.device = vk;
    b.device = &other;
    lm_device_set_default(lm_device_cpu());
    lm_device *d = lm_node_place("add", 2, (lm_array *[]){&a, &b});
    lm_device_set_default(vk);
    assert_null(d);
    assert_int_equal(lm_error_status(), LM_ERR_DEVICE);
    char want[160];
    snprintf(want, sizeof want, "add: inputs on %s and other:0, and none on the default device cpu",
             vk->spec);
    assert_non_null(strstr(lm_error_message(), want));
    assert_ptr_equal(lm_node_place("add", 2, (lm_array *[]){&b, &a}), vk);   /* vk is the default */
}

/* A small model's layers: conv, group norm, SiLU, conv, linear, layer norm. */
enum { NW = 10 };
static const char *wnames[NW] = {"conv1.weight", "conv1.bias", "norm1.weight", "norm1.bias",
                                 "conv2.weight", "conv2.bias", "fc.weight", "fc.bias",
                                 "ln.weight", "ln.bias"};
static const int64_t wshapes[NW][4] = {{8, 3, 3, 3}, {8}, {8}, {8}, {8, 8, 3, 3}, {8},
                                       {10, 512}, {10}, {10}, {10}};
static const int wndim[NW] = {4, 1, 1, 1, 4, 1, 2, 1, 1, 1};

static lm_array *model(lm_array *const *w, lm_array *x)
{
    int64_t one[2] = {1, 1}, pad[4] = {1, 1, 1, 1};
    lm_array *h = lm_conv2d(x, w[0], w[1], one, pad, one, 1);
    lm_array *n = lm_group_norm(h, 4, w[2], w[3], 1e-5);
    lm_array *s = lm_unary(LM_OP_SILU, n);
    lm_array *h2 = lm_conv2d(s, w[4], w[5], one, pad, one, 1);
    lm_array *f = lm_reshape(h2, 2, (int64_t[]){2, 512});
    lm_array *l = lm_linear(f, w[6], w[7]);
    lm_array *out = lm_layer_norm(l, 1, w[8], w[9], 1e-5);
    lm_array *tmp[] = {h, n, s, h2, f, l};
    for (int i = 0; i < 6; i++) lm_array_release(tmp[i]);
    assert_non_null(out);
    return out;
}

/* The weights written to safetensors, loaded (LUMEN_DEVICE=vulkan,
 * LUMEN_FALLBACK=0): every tensor belongs to the device, every node runs
 * there, each weight is uploaded once and stays, and the result is the
 * CPU's within float tolerance. */
static void test_loaded_model_runs_on_device(void **state)
{
    (void)state;
    lm_device *cpu = lm_device_cpu();
    lm_array *w[NW];
    for (int i = 0; i < NW; i++) {
        w[i] = lm_random_normal(wndim[i], wshapes[i], i == 2 || i == 8 ? 1 : 0, 0.2, LM_F32,
                                lm_random_key(10 + (uint64_t)i), cpu);
        assert_int_equal(lm_array_eval(w[i]), LM_OK);
    }
    char path[] = "/tmp/lumen-placement-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(lm_save_safetensors(path, NW, wnames, w, 0, NULL), LM_OK);
    setenv("LUMEN_FALLBACK", "0", 1);
    lm_tensor_set s;
    assert_int_equal(lm_load_file(path, &s), LM_OK);
    assert_int_equal(s.count, NW);
    lm_array *lw[NW];
    for (int i = 0; i < NW; i++) {
        int k = lm_tensor_set_find(&s, wnames[i]);
        assert_true(k >= 0);
        lw[i] = s.arrays[k];
        assert_ptr_equal(lw[i]->device, vk);
        assert_false(lm_array_is_evaluated(lw[i]));   /* uploaded on first use */
    }
    lm_array *x = lm_random_normal(4, (int64_t[]){2, 3, 8, 8}, 0, 1, LM_F32, lm_random_key(7), NULL);
    assert_ptr_equal(x->device, vk);
    assert_int_equal(lm_array_eval(x), LM_OK);
    lm_array *y = model(lw, x);
    assert_ptr_equal(y->device, vk);
    assert_int_equal(lm_array_eval(y), LM_OK);
    lm_eval_stats st = lm_eval_last_stats();
    assert_int_equal(st.fallbacks, 0);
    assert_int_equal(st.cpu_nodes, 0);
    assert_int_equal(st.transfers, NW);   /* each weight once */
    assert_true(st.kernels > NW);
    for (int i = 0; i < NW; i++) assert_true(lm_array_is_evaluated(lw[i]) && !lw[i]->buf->host);
    /* a second pass uploads nothing: the weights stay on the device */
    lm_array *y2 = model(lw, x);
    assert_int_equal(lm_array_eval(y2), LM_OK);
    st = lm_eval_last_stats();
    assert_int_equal(st.transfers, 0);
    assert_int_equal(st.cpu_nodes, 0);
    unsetenv("LUMEN_FALLBACK");
    /* the same model on the CPU, weights loaded with device = cpu */
    lm_tensor_set hs;
    assert_int_equal(lm_load_file_to(path, cpu, &hs), LM_OK);
    lm_array *hw[NW];
    for (int i = 0; i < NW; i++) {
        hw[i] = hs.arrays[lm_tensor_set_find(&hs, wnames[i])];
        assert_ptr_equal(hw[i]->device, cpu);
    }
    lm_array *xc = lm_array_to(x, cpu);
    lm_array *yc = model(hw, xc);
    assert_ptr_equal(yc->device, cpu);
    float g[20], c[20];
    assert_int_equal(lm_array_read(y, g, LM_F32), LM_OK);
    assert_int_equal(lm_array_read(yc, c, LM_F32), LM_OK);
    for (int i = 0; i < 20; i++) assert_true(fabsf(g[i] - c[i]) < 1e-3f);
    assert_true(fabsf(c[0]) + fabsf(c[1]) > 0.1f);   /* a real result, not zeros */
    unlink(path);
    lm_array *rel[] = {x, y, y2, xc, yc};
    for (int i = 0; i < 5; i++) lm_array_release(rel[i]);
    for (int i = 0; i < NW; i++) lm_array_release(w[i]);
    lm_tensor_set_free(&s);
    lm_tensor_set_free(&hs);
}

/* A kept weight not yet uploaded survives lm_sweep with its host copy. */
static void test_kept_loaded_survives_sweep(void **state)
{
    (void)state;
    float v[4] = {1.5f, -2, 3, 4};
    lm_array *h = on(lm_device_cpu(), v, 4);
    char path[] = "/tmp/lumen-sweep-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(lm_save_safetensors(path, 1, (const char *[]){"w"}, &h, 0, NULL), LM_OK);
    lm_array_release(h);
    lm_tensor_set s;
    assert_int_equal(lm_load_file(path, &s), LM_OK);
    unlink(path);
    lm_array *w = s.arrays[0];
    assert_false(lm_array_is_evaluated(w));
    lm_array_keep(w);
    lm_sweep();
    expect_vals(w, v, 4);
    assert_ptr_equal(w->device, vk);
    lm_array_unkeep(w);
    lm_tensor_set_free(&s);
}

int main(void)
{
    setenv("LUMEN_DEVICE", "vulkan", 1);   /* lavapipe is the default only when asked */
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
        cmocka_unit_test(test_mixed_devices),
        cmocka_unit_test(test_mixed_devices_error),
        cmocka_unit_test(test_loaded_model_runs_on_device),
        cmocka_unit_test(test_kept_loaded_survives_sweep),
    };
    int r = cmocka_run_group_tests(tests, NULL, NULL);
    if (lm_array_live_count() != 0) {
        printf("test_vulkan_placement: %lld arrays left alive\n", (long long)lm_array_live_count());
        return 1;
    }
    return r;
}

#else
int main(void)
{
    printf("test_vulkan_placement: built without Vulkan; skipped\n");
    return LM_TEST_SKIP;
}
#endif
