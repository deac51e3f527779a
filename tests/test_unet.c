/* test_unet.c - models/unet.c against diffusers' UNet2DConditionModel
 * (tests/ref/gen_diffusion.py wrote tests/ref/diffusion/ on the GPU
 * machine: tiny random SD1, SD2 and SDXL pipelines in the diffusers layout,
 * weights stored f16, references computed in f32 from those weights).
 *
 * Forward: sd1 (conv projection, 8 heads), sd2 (linear projection,
 * upcast_attention, heads of 64), sdxl (text_time embedding, two
 * transformer layers per block, DownBlock2D first) on the inputs of
 * ref_unet.safetensors; f32 within 1e-4 of the largest reference value on
 * the CPU and on a Vulkan device (lavapipe) where there is one; f16 on
 * Vulkan within F16_TOL.  The CPU time of each f32 forward is printed
 * (no threshold).  Errors: a missing, an unexpected and a wrongly shaped
 * weight, refused config values (resnet_time_scale_shift scale_shift,
 * class_embed_type, an unknown block), inputs of the wrong shape; the
 * fp16 variant file and a two-shard index load. */
#include <cjson/cJSON.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "testutil.h"
#include "core/io/io.h"
#include "models/diffusers_config.h"
#include "models/unet.h"

#define DIFF_DIR "tests/ref/diffusion/"
#define REL_TOL 1e-4
/* f16 activations (f32 accumulation inside each op) over ~40 layers: the
 * fixtures give 1.3e-3 to 2.5e-3; four times that */
#define F16_TOL 1e-2

static lm_tensor_set ref;
static char tmpdir[64];

static lm_array *ref_opt(const char *name)
{
    int i = lm_tensor_set_find(&ref, name);
    return i < 0 ? NULL : ref.arrays[i];
}

/* max |got - want| / max |want|, asserted <= tol */
static double check(lm_array *got, const char *name, const char *what, double tol)
{
    double err, rel = tu_rel_err(got, tu_set_get(&ref, name), &err);
    printf("  %-34s %-9s max abs err %.3g, relative %.3g (bound %g)\n", what, name, err, rel, tol);
    assert_true(rel <= tol);
    return rel;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static lm_unet *unet_load(const char *dir, lm_dtype dt, lm_device *dev)
{
    lm_unet *m = lm_unet_load(dir, NULL, dt, dev);
    if (!m) fprintf(stderr, "%s\n", lm_error_message());
    assert_non_null(m);
    return m;
}

static lm_array *input(const char *model, const char *what, lm_device *dev)
{
    char n[64];
    snprintf(n, sizeof n, "%s.%s", model, what);
    lm_array *a = ref_opt(n);
    return a ? lm_array_to(a, dev) : NULL;
}

/* one model's forward on dev in dt against M.out */
static void run_model(const char *model, lm_device *dev, lm_dtype dt, double tol)
{
    char dir[128], what[96], name[64];
    snprintf(dir, sizeof dir, DIFF_DIR "%s/unet", model);
    double t0 = now();
    lm_unet *m = unet_load(dir, dt, dev);
    double t1 = now();
    const lm_unet_config *c = lm_unet_get_config(m);
    bool xl = !strcmp(model, "sdxl");
    assert_int_equal(c->addition_embed_type, xl ? LM_UNET_ADD_TEXT_TIME : LM_UNET_ADD_NONE);
    lm_array *x = input(model, "x", dev), *t = input(model, "t", dev);
    lm_array *ctx = input(model, "ctx", dev);
    lm_array *te = xl ? input(model, "text_embeds", dev) : NULL;
    lm_array *ids = xl ? input(model, "time_ids", dev) : NULL;
    assert_non_null(x);
    assert_non_null(t);
    assert_non_null(ctx);
    lm_array *out = lm_unet_forward(m, x, t, ctx, te, ids);
    if (!out) fprintf(stderr, "%s\n", lm_error_message());
    assert_non_null(out);
    assert_int_equal(lm_array_eval(out), LM_OK);
    double t2 = now();
    snprintf(what, sizeof what, "%s %s %s", model, dev->spec, lm_dtype_name(dt));
    snprintf(name, sizeof name, "%s.out", model);
    check(out, name, what, tol);
    printf("    load %.3f s, forward [%lld,%lld,%lld,%lld] %.3f s\n", t1 - t0,
           (long long)x->shape[0], (long long)x->shape[1], (long long)x->shape[2],
           (long long)x->shape[3], t2 - t1);
    lm_array_release(out);
    lm_array_release(x);
    lm_array_release(t);
    lm_array_release(ctx);
    lm_array_release(te);
    lm_array_release(ids);
    lm_unet_free(m);
}

static const char *const models[] = {"sd1", "sd2", "sdxl"};

static void test_forward_cpu(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++) run_model(models[i], lm_device_cpu(), LM_F32, REL_TOL);
}

static void test_forward_vulkan(void **state)
{
    (void)state;
    lm_device *vk = tu_vulkan_or_skip("no Vulkan device: the Vulkan half skipped");
    for (int i = 0; i < 3; i++) run_model(models[i], vk, LM_F32, REL_TOL);
    for (int i = 0; i < 3; i++) run_model(models[i], vk, LM_F16, F16_TOL);
}

/* ---- errors ---- */

static void expect_error(lm_status code, const char *needle1, const char *needle2)
{
    assert_null(lm_unet_load(tmpdir, NULL, LM_F32, lm_device_cpu()));
    tu_expect_message(needle1, needle2);
    assert_int_equal(lm_error_status(), code);
}

/* rewrites tmpdir's weights from sd1's, dropping tensor `drop`, adding
 * one named `extra` */
static void write_weights(const char *drop, const char *extra)
{
    lm_tensor_set s = {0};
    char *file = NULL;
    assert_int_equal(lm_dfs_load_weights_stem(DIFF_DIR "sd1/unet", "diffusion_pytorch_model",
                                              NULL, lm_device_cpu(), &s, &file), LM_OK);
    free(file);
    char p[128];
    snprintf(p, sizeof p, "%s/diffusion_pytorch_model.safetensors", tmpdir);
    tu_save_edited(&s, p, drop, extra);
    lm_tensor_set_free(&s);
}

/* tmpdir/config.json = sd1's with `from` replaced by `to` */
static void write_config(const char *from, const char *to)
{
    char *cfg = tu_slurp(DIFF_DIR "sd1/unet/config.json", NULL), *out = tu_replace(cfg, from, to);
    char p[128];
    snprintf(p, sizeof p, "%s/config.json", tmpdir);
    tu_spit(p, out, strlen(out));
    free(out);
    free(cfg);
}

static void test_errors(void **state)
{
    (void)state;
    write_config(NULL, NULL);
    write_weights(NULL, NULL);
    lm_unet *ok = lm_unet_load(tmpdir, NULL, LM_F32, lm_device_cpu());
    if (!ok) fprintf(stderr, "%s\n", lm_error_message());
    assert_non_null(ok);
    /* inputs of the wrong shape */
    int64_t xs[4] = {1, 3, 8, 8}, ts[1] = {1}, cs[3] = {1, 77, 32};
    lm_array *x = lm_zeros(4, xs, LM_F32, NULL), *t = lm_zeros(1, ts, LM_F32, NULL);
    lm_array *ctx = lm_zeros(3, cs, LM_F32, NULL);
    assert_null(lm_unet_forward(ok, x, t, ctx, NULL, NULL));
    printf("  error: %s\n", lm_error_message());
    assert_non_null(strstr(lm_error_message(), "x [1,3,8,8]: expected [B, 4, H, W]"));
    assert_null(lm_unet_forward(ok, ctx, t, ctx, ctx, NULL));
    lm_array_release(x);
    lm_array_release(t);
    lm_array_release(ctx);
    lm_unet_free(ok);

    write_weights("down_blocks.1.resnets.0.conv_shortcut.bias", NULL);
    expect_error(LM_ERR_FORMAT, "missing weight down_blocks.1.resnets.0.conv_shortcut.bias [64]",
                 "diffusion_pytorch_model.safetensors");
    write_weights(NULL, "down_blocks.7.extra");
    expect_error(LM_ERR_FORMAT, "unexpected weight down_blocks.7.extra",
                 "diffusion_pytorch_model.safetensors");
    write_weights(NULL, NULL);
    /* a config that disagrees with the weights */
    write_config("\"cross_attention_dim\": 64", "\"cross_attention_dim\": 48");
    expect_error(LM_ERR_SHAPE, "attn2.to_k.weight has shape [32,64], the config needs [32,48]",
                 "diffusion_pytorch_model.safetensors");
    write_config("\"resnet_time_scale_shift\": \"default\"", "\"resnet_time_scale_shift\": \"scale_shift\"");
    expect_error(LM_ERR_UNSUPPORTED, "resnet_time_scale_shift: \"scale_shift\" is not supported", NULL);
    write_config("\"class_embed_type\": null", "\"class_embed_type\": \"timestep\"");
    expect_error(LM_ERR_UNSUPPORTED, "class_embed_type: \"timestep\" is not supported", NULL);
    write_config("\"DownBlock2D\"", "\"SimpleCrossAttnDownBlock2D\"");
    expect_error(LM_ERR_UNSUPPORTED, "\"SimpleCrossAttnDownBlock2D\" is not supported", NULL);
    write_config("\"dual_cross_attention\": false", "\"dual_cross_attention\": true");
    expect_error(LM_ERR_UNSUPPORTED, "dual_cross_attention: true is not supported", NULL);

    /* only the fp16 variant there: variant NULL finds it */
    char from[128], to[128];
    snprintf(from, sizeof from, "%s/diffusion_pytorch_model.safetensors", tmpdir);
    snprintf(to, sizeof to, "%s/diffusion_pytorch_model.fp16.safetensors", tmpdir);
    write_config(NULL, NULL);
    assert_int_equal(rename(from, to), 0);
    lm_unet *v = lm_unet_load(tmpdir, NULL, LM_F32, lm_device_cpu());
    assert_non_null(v);
    lm_unet_free(v);
    assert_null(lm_unet_load(tmpdir, "", LM_F32, lm_device_cpu()));
    printf("  error: %s\n", lm_error_message());
    assert_non_null(strstr(lm_error_message(), "no diffusion_pytorch_model.safetensors"));
    assert_int_equal(rename(to, from), 0);

    /* load_from consumes the set, on failure too */
    write_config(NULL, NULL);
    char p[128];
    snprintf(p, sizeof p, "%s/config.json", tmpdir);
    cJSON *j = NULL;
    assert_int_equal(lm_dfs_json(p, 1 << 20, false, &j), LM_OK);
    lm_tensor_set s = {0};
    char *file = NULL;
    assert_int_equal(lm_dfs_load_weights_stem(tmpdir, "diffusion_pytorch_model", NULL,
                                              lm_device_cpu(), &s, &file), LM_OK);
    lm_unet *m = lm_unet_load_from(j, &s, file, LM_F32, lm_device_cpu());
    if (!m) fprintf(stderr, "%s\n", lm_error_message());
    assert_non_null(m);
    assert_int_equal(s.count, 0);
    lm_unet_free(m);
    cJSON_ReplaceItemInObjectCaseSensitive(j, "time_cond_proj_dim", cJSON_CreateNumber(8));
    assert_int_equal(lm_dfs_load_weights_stem(tmpdir, "diffusion_pytorch_model", NULL,
                                              lm_device_cpu(), &s, NULL), LM_OK);
    assert_null(lm_unet_load_from(j, &s, file, LM_F32, lm_device_cpu()));
    printf("  error: %s\n", lm_error_message());
    assert_int_equal(lm_error_status(), LM_ERR_UNSUPPORTED);
    assert_int_equal(s.count, 0);
    cJSON_Delete(j);
    free(file);
}

/* the weights split over two shards named by
 * diffusion_pytorch_model.safetensors.index.json: the same output as the
 * single file */
static void test_sharded(void **state)
{
    (void)state;
    lm_tensor_set s = {0};
    assert_int_equal(lm_dfs_load_weights_stem(DIFF_DIR "sd1/unet", "diffusion_pytorch_model",
                                              NULL, lm_device_cpu(), &s, NULL), LM_OK);
    char p[160], *json = malloc(256 * (size_t)s.count + 64);
    snprintf(p, sizeof p, "%s/diffusion_pytorch_model.safetensors", tmpdir);
    unlink(p);   /* else it would be read instead of the index */
    size_t at = (size_t)sprintf(json, "{\"metadata\": {}, \"weight_map\": {");
    int half = s.count / 2;
    for (int k = 0; k < 2; k++) {
        int lo = k ? half : 0, hi = k ? s.count : half;
        snprintf(p, sizeof p, "%s/diffusion_pytorch_model-%05d-of-00002.safetensors", tmpdir, k + 1);
        assert_int_equal(lm_save_safetensors(p, hi - lo, (const char *const *)s.names + lo,
                                             s.arrays + lo, 0, NULL), LM_OK);
        for (int i = lo; i < hi; i++)
            at += (size_t)sprintf(json + at, "%s\"%s\": \"diffusion_pytorch_model-%05d-of-00002"
                                  ".safetensors\"", i ? ", " : "", s.names[i], k + 1);
    }
    at += (size_t)sprintf(json + at, "}}");
    snprintf(p, sizeof p, "%s/diffusion_pytorch_model.safetensors.index.json", tmpdir);
    tu_spit(p, json, at);
    free(json);
    lm_tensor_set_free(&s);
    write_config(NULL, NULL);
    lm_unet *m = unet_load(tmpdir, LM_F32, lm_device_cpu());
    lm_unet *one = unet_load(DIFF_DIR "sd1/unet", LM_F32, lm_device_cpu());
    lm_device *cpu = lm_device_cpu();
    lm_array *x = input("sd1", "x", cpu), *t = input("sd1", "t", cpu), *c = input("sd1", "ctx", cpu);
    lm_array *a = lm_unet_forward(m, x, t, c, NULL, NULL), *b = lm_unet_forward(one, x, t, c, NULL, NULL);
    assert_non_null(a);
    assert_non_null(b);
    double *va = tu_read(a), *vb = tu_read(b);
    for (int64_t i = 0; i < a->size; i++) assert_true(va[i] == vb[i]);
    printf("  two shards: %lld outputs identical to the single file's\n", (long long)a->size);
    free(va);
    free(vb);
    lm_array_release(a); lm_array_release(b);
    lm_array_release(x); lm_array_release(t); lm_array_release(c);
    lm_unet_free(m);
    lm_unet_free(one);
    for (int k = 0; k < 2; k++) {
        snprintf(p, sizeof p, "%s/diffusion_pytorch_model-%05d-of-00002.safetensors", tmpdir, k + 1);
        unlink(p);
    }
    snprintf(p, sizeof p, "%s/diffusion_pytorch_model.safetensors.index.json", tmpdir);
    unlink(p);
}

static int setup(void **state)
{
    (void)state;
    return tu_setup_models(DIFF_DIR "ref_unet.safetensors", &ref, tmpdir, sizeof tmpdir, "unet");
}

static int teardown(void **state)
{
    (void)state;
    lm_tensor_set_free(&ref);
    tu_tmpdir_remove(tmpdir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_cpu),
        cmocka_unit_test(test_forward_vulkan),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_sharded),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
