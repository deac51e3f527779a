/* test_vae.c - models/vae.c against diffusers' AutoencoderKL
 * (tests/ref/gen_diffusion.py wrote tests/ref/diffusion/ on the GPU machine:
 * the tiny random VAEs of the sd1 and sdxl pipelines, stored f16, and
 * diffusers' f32 outputs computed from those same f16-rounded weights).
 *
 * Per VAE, f32, within 1e-4 of the largest reference value, on the CPU and
 * on a Vulkan device (lavapipe) where there is one: encode (mean, logvar),
 * decode, tiled decode of a latent larger than the tile (vae.enable_tiling(),
 * tile = sample_size), the same latent with tiling off, and tiled encode of
 * an image larger than the tile; auto mode untiled within its memory budget
 * and tiled past it.
 * Tiled decode keeps less memory at its peak than the untiled one.
 * Errors: a missing, an unexpected and a wrongly shaped weight, an
 * unsupported block type and activation, bad tiling arguments. */
#include <cjson/cJSON.h>
#include <sys/stat.h>
#include <unistd.h>
#include "testutil.h"
#include "core/io/io.h"
#include "models/vae.h"

#define DIFF_DIR "tests/ref/diffusion/"
#define REF_FILE DIFF_DIR "ref_vae.safetensors"
#define REL_TOL 1e-4

static lm_tensor_set ref;
static char tmpdir[64];

static lm_array *ref_get(const char *model, const char *name)
{
    char key[64];
    snprintf(key, sizeof key, "%s.%s", model, name);
    return tu_set_get(&ref, key);
}

/* max |got - want| / max |want|, asserted <= REL_TOL */
static double check(lm_array *got, const char *model, const char *name, const char *what)
{
    double err, rel = tu_rel_err(got, ref_get(model, name), &err);
    printf("  %-5s %-15s %-13s max abs err %.3g, relative %.3g\n", model, name, what, err, rel);
    assert_true(rel <= REL_TOL);
    return rel;
}

static lm_vae *vae_load(const char *model, lm_device *dev)
{
    char dir[128];
    snprintf(dir, sizeof dir, DIFF_DIR "%s/vae", model);
    lm_vae *m = lm_vae_load(dir, NULL, LM_F32, dev);
    if (!m) fprintf(stderr, "%s\n", lm_error_message());
    assert_non_null(m);
    return m;
}

static void run_model(const char *model, lm_device *dev)
{
    lm_vae *m = vae_load(model, dev);
    const lm_vae_config *c = lm_vae_get_config(m);
    assert_int_equal(c->latent_channels, 4);
    assert_int_equal(c->downscale, 1 << (c->nlevels - 1));
    const char *where = dev->spec;
    char auto_where[48];
    snprintf(auto_where, sizeof auto_where, "auto %s", dev->spec);

    lm_array *mean, *logvar;
    assert_int_equal(lm_vae_encode(m, ref_get(model, "img"), &mean, &logvar), LM_OK);
    check(mean, model, "mean", where);
    check(logvar, model, "logvar", where);
    lm_array_release(mean);
    lm_array_release(logvar);

    lm_array *dec = lm_vae_decode(m, ref_get(model, "z"));
    check(dec, model, "dec", where);
    lm_array_release(dec);

    /* on: what is larger than sample_size is tiled, as diffusers after
     * enable_tiling(); off: never */
    lm_vae_tiling off = {LM_VAE_TILING_OFF, 0, 0, 0}, on = {LM_VAE_TILING_ON, 0, 0, 0};
    assert_int_equal(lm_vae_set_tiling(m, &on), LM_OK);
    dec = lm_vae_decode(m, ref_get(model, "z_big"));
    check(dec, model, "dec_tiled", where);
    lm_array_release(dec);
    assert_int_equal(lm_vae_set_tiling(m, &off), LM_OK);
    dec = lm_vae_decode(m, ref_get(model, "z_big"));
    check(dec, model, "dec_big_untiled", where);
    lm_array_release(dec);
    /* auto (the default): untiled while the untiled pass fits the budget,
     * tiled past it */
    assert_int_equal(lm_vae_set_tiling(m, NULL), LM_OK);
    assert_int_equal(lm_vae_get_tiling(m).mode, LM_VAE_TILING_AUTO);
    dec = lm_vae_decode(m, ref_get(model, "z_big"));
    check(dec, model, "dec_big_untiled", auto_where);
    lm_array_release(dec);
    lm_vae_tiling small = {LM_VAE_TILING_AUTO, 0, 0, lm_vae_untiled_bytes(m, 1, 48, 48) - 1};
    assert_int_equal(lm_vae_set_tiling(m, &small), LM_OK);
    dec = lm_vae_decode(m, ref_get(model, "z_big"));
    check(dec, model, "dec_tiled", auto_where);
    lm_array_release(dec);
    assert_int_equal(lm_vae_set_tiling(m, &on), LM_OK);
    assert_int_equal(lm_vae_encode(m, ref_get(model, "img_big"), &mean, &logvar), LM_OK);
    check(mean, model, "mean_tiled", where);
    char key[64];
    snprintf(key, sizeof key, "%s.logvar_tiled", model);
    if (lm_tensor_set_find(&ref, key) >= 0) check(logvar, model, "logvar_tiled", where);
    lm_array_release(mean);
    lm_array_release(logvar);
    lm_vae_free(m);
}

static void test_vae_cpu(void **state)
{
    (void)state;
    run_model("sd1", lm_device_cpu());
    run_model("sdxl", lm_device_cpu());
}

static void test_vae_vulkan(void **state)
{
    (void)state;
    lm_device *vk = tu_vulkan_or_skip("no Vulkan device: the Vulkan half skipped");
    run_model("sd1", vk);
    run_model("sdxl", vk);
}

/* f16 compute (what force_upcast false would give): the blend's f32 ramps
 * meet f16 tiles; bound 1e-2 of the largest value (f16 has 11 bits). */
static void test_vae_f16(void **state)
{
    (void)state;
    lm_vae *m = lm_vae_load(DIFF_DIR "sd1/vae", NULL, LM_F16, lm_device_cpu());
    assert_non_null(m);
    assert_int_equal(lm_vae_dtype(m), LM_F16);
    lm_vae_tiling on = {LM_VAE_TILING_ON, 0, 0, 0};
    assert_int_equal(lm_vae_set_tiling(m, &on), LM_OK);
    lm_array *dec = lm_vae_decode(m, ref_get("sd1", "z_big"));
    assert_non_null(dec);
    assert_int_equal(dec->dtype, LM_F16);
    lm_array *want = ref_get("sd1", "dec_tiled");
    double *g = tu_read(dec), *w = tu_read(want), err = 0, big = 0;
    for (int64_t i = 0; i < want->size; i++) {
        err = fmax(err, fabs(g[i] - w[i]));
        big = fmax(big, fabs(w[i]));
    }
    printf("  sd1   dec_tiled    f16 cpu  max abs err %.3g, relative %.3g\n", err, err / big);
    assert_true(err / big <= 1e-2);
    free(g);
    free(w);
    lm_array_release(dec);
    lm_vae_free(m);
}

/* Tiling keeps one tile's work: the peak of a tiled decode of a latent of
 * 4x4 tiles stays below the untiled one's (which holds whole-image
 * activations), and both give an image of the same size. */
static void test_tiled_memory(void **state)
{
    (void)state;
    lm_device *cpu = lm_device_cpu();
    lm_vae *m = vae_load("sd1", cpu);
    int64_t side = 4 * lm_vae_get_config(m)->sample_size / lm_vae_get_config(m)->downscale;
    int64_t zs[4] = {1, 4, side, side};
    lm_array *z = lm_full(4, zs, 0.5, LM_F32, cpu);
    assert_int_equal(lm_array_eval(z), LM_OK);
    size_t peak[2];
    for (int k = 0; k < 2; k++) {
        lm_vae_tiling t = {k ? LM_VAE_TILING_OFF : LM_VAE_TILING_ON, 0, 0, 0};
        assert_int_equal(lm_vae_set_tiling(m, &t), LM_OK);
        lm_device_clear_cache(cpu);
        size_t base = lm_device_memory(cpu).active;
        lm_device_reset_peak(cpu);
        lm_array *img = lm_vae_decode(m, z);
        assert_non_null(img);
        assert_int_equal(lm_array_eval(img), LM_OK);
        assert_int_equal(img->shape[2], side * lm_vae_get_config(m)->downscale);
        peak[k] = lm_device_memory(cpu).peak - base;
        lm_array_release(img);
    }
    printf("  decode of %lldx%lld latents: peak %.2f MiB tiled, %.2f MiB untiled\n",
           (long long)side, (long long)side, peak[0] / 1048576.0, peak[1] / 1048576.0);
    assert_true(peak[0] < peak[1]);
    lm_array_release(z);
    lm_vae_free(m);
}

/* ---- errors ---- */

static void expect_error(const char *needle1, const char *needle2)
{
    assert_null(lm_vae_load(tmpdir, NULL, LM_F32, lm_device_cpu()));
    tu_expect_message(needle1, needle2);
}

/* rewrites tmpdir's weights from sd1's, dropping `drop`, adding `extra` */
static void write_weights(const char *drop, const char *extra)
{
    lm_tensor_set s = {0};
    assert_int_equal(lm_load_safetensors(DIFF_DIR "sd1/vae/diffusion_pytorch_model.safetensors", &s),
                     LM_OK);
    char p[128];
    snprintf(p, sizeof p, "%s/diffusion_pytorch_model.safetensors", tmpdir);
    tu_save_edited(&s, p, drop, extra);
    lm_tensor_set_free(&s);
}

/* writes tmpdir's config.json: sd1's with `from` replaced by `to` */
static void write_config(const char *from, const char *to)
{
    char *cfg = tu_slurp(DIFF_DIR "sd1/vae/config.json", NULL);
    cJSON *j = cJSON_Parse(cfg);
    free(cfg);
    assert_non_null(j);
    char *text = cJSON_Print(j);   /* tabs after the colons, as the replacements expect */
    cJSON_Delete(j);
    char *out = tu_replace(text, from, to);
    char p[128];
    snprintf(p, sizeof p, "%s/config.json", tmpdir);
    tu_spit(p, out, strlen(out));
    free(out);
    free(text);
}

static void test_errors(void **state)
{
    (void)state;
    write_config(NULL, NULL);
    write_weights(NULL, NULL);
    lm_vae *ok = lm_vae_load(tmpdir, NULL, LM_F32, lm_device_cpu());
    if (!ok) fprintf(stderr, "%s\n", lm_error_message());
    assert_non_null(ok);
    lm_vae_tiling bad = {LM_VAE_TILING_ON, 13, 0, 0};
    assert_int_equal(lm_vae_set_tiling(ok, &bad), LM_ERR_ARG);
    printf("  error: %s\n", lm_error_message());
    bad.tile = 0;
    bad.overlap = 1.5;
    assert_int_equal(lm_vae_set_tiling(ok, &bad), LM_ERR_ARG);
    printf("  error: %s\n", lm_error_message());
    int64_t s3[4] = {1, 3, 8, 8};
    lm_array *three = lm_zeros(4, s3, LM_F32, lm_device_cpu());
    assert_null(lm_vae_decode(ok, three));
    printf("  error: %s\n", lm_error_message());
    assert_non_null(strstr(lm_error_message(), "expected [B, 4, H, W]"));
    lm_array_release(three);
    lm_vae_free(ok);

    /* load_from consumes the set, on success and on failure */
    char *text = tu_slurp(DIFF_DIR "sd1/vae/config.json", NULL);
    cJSON *cfg = cJSON_Parse(text);
    free(text);
    lm_tensor_set s = {0};
    assert_int_equal(lm_load_safetensors(DIFF_DIR "sd1/vae/diffusion_pytorch_model.safetensors", &s),
                     LM_OK);
    ok = lm_vae_load_from(cfg, &s, "sd1 vae", LM_F32, lm_device_cpu());
    assert_non_null(ok);
    assert_int_equal(s.count, 0);
    lm_vae_free(ok);
    assert_int_equal(lm_load_safetensors(DIFF_DIR "sd1/vae/diffusion_pytorch_model.safetensors", &s),
                     LM_OK);
    assert_null(lm_vae_load_from(cfg, &s, "sd1 vae", LM_I32, lm_device_cpu()));
    printf("  error: %s\n", lm_error_message());
    assert_int_equal(s.count, 0);
    cJSON_Delete(cfg);

    write_weights("decoder.up_blocks.1.resnets.1.conv2.bias", NULL);
    expect_error("missing weight decoder.up_blocks.1.resnets.1.conv2.bias [32]",
                 "diffusion_pytorch_model.safetensors");
    write_weights(NULL, "decoder.up_blocks.7.extra");
    expect_error("unexpected weight decoder.up_blocks.7.extra", "diffusion_pytorch_model.safetensors");
    write_weights(NULL, NULL);
    write_config("\"latent_channels\":\t4", "\"latent_channels\":\t3");
    expect_error("encoder.conv_out.weight has shape [8,64,3,3], the config needs [6,64,3,3]", NULL);
    write_config("\"DownEncoderBlock2D\"", "\"AttnDownEncoderBlock2D\"");
    expect_error("down_block_types[0]: AttnDownEncoderBlock2D is not supported", "config.json");
    write_config("\"silu\"", "\"gelu\"");
    expect_error("act_fn: \"gelu\" is not supported", "config.json");
    write_config("\"AutoencoderKL\"", "\"AutoencoderTiny\"");
    expect_error("_class_name: AutoencoderTiny is not supported", NULL);
}

static int setup(void **state)
{
    (void)state;
    return tu_setup_models(REF_FILE, &ref, tmpdir, sizeof tmpdir, "vae");
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
    struct stat st;
    if (stat(REF_FILE, &st) != 0) {
        printf("test_vae: %s is missing (tests/ref/gen_diffusion.py makes it): skipped\n", REF_FILE);
        return LM_TEST_SKIP;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vae_cpu),
        cmocka_unit_test(test_vae_vulkan),
        cmocka_unit_test(test_vae_f16),
        cmocka_unit_test(test_tiled_memory),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
