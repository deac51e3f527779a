/* test_dit_pipeline.c - Z-Image and FLUX.2-klein through lm_sd_pipeline
 * (models/dit_pipeline.c) against diffusers' ZImagePipeline and
 * Flux2KleinPipeline (tests/ref/gen_dit.py wrote tests/ref/dit/ on the GPU
 * machine's CPU: diffusers' own tiny test pipelines with a small Qwen2
 * tokenizer, and the whole 4-step images they make from given latents).
 *
 * Whole images, f32 on the CPU and on a Vulkan device where there is one:
 * Z-Image without guidance, with guidance 3 and a negative prompt, with a
 * None negative ("") and renormalization 1, with truncation 0.5; FLUX.2-klein base without guidance and with guidance 4.
 * The max abs error of each image is printed and must be <= 1e-3 (as the SD
 * pipelines' test).  Also: the rows each folder loads as, the families'
 * defaults, a batch of two equal to two single runs byte for byte, and
 * errors (a size not a multiple of the patches, another sampler, clip_skip,
 * an unknown DiT class). */
#include <math.h>
#include <unistd.h>
#include "testutil.h"
#include "core/io/io.h"
#include "models/sd_pipeline.h"
#include "models/vae.h"

#define DIR "tests/ref/dit/"
#define TOL 1e-3

static lm_tensor_set zref, kref;

static float *read_f32(lm_array *a)
{
    float *v = malloc(sizeof *v * (size_t)a->size);
    assert_non_null(v);
    if (lm_array_read(a, v, LM_F32) != LM_OK) fprintf(stderr, "%s\n", lm_error_message());
    return v;
}

static double max_err(lm_array *a, lm_array *b)
{
    assert_int_equal(a->size, b->size);
    float *x = read_f32(a), *y = read_f32(b);
    double m = 0;
    for (int64_t i = 0; i < a->size; i++) {
        double d = fabs((double)x[i] - y[i]);
        if (!(d <= m)) m = d;
    }
    free(x);
    free(y);
    return m;
}

static lm_sd_pipeline *load_on(const char *path, lm_device *dev)
{
    lm_sd_load_opts o;
    lm_sd_load_opts_init(&o);
    o.dtype = LM_F32;
    o.device = dev;
    o.vae_tiling = LM_VAE_TILING_OFF;
    lm_sd_pipeline *p = lm_sd_pipeline_load(path, &o);
    if (!p) fprintf(stderr, "%s: %s\n", path, lm_error_message());
    assert_non_null(p);
    return p;
}

/* one whole 4-step 32x32 run from diffusers' latents; returns the max error */
static double run(lm_sd_pipeline *p, lm_tensor_set *ref, const char *key, const char *prompt,
                  const char *negative, double cfg, double renorm, double trunc)
{
    char name[128];
    const char *pr[1] = {prompt}, *ng[1] = {negative};
    lm_sd_gen_opts o;
    lm_sd_gen_opts_init_for(&o, p);
    o.prompts = pr;
    o.nprompts = 1;
    o.negatives = negative ? ng : NULL;
    o.nnegatives = negative ? 1 : 0;
    o.steps = 4;
    o.cfg = cfg;
    o.max_sequence_length = 32;
    o.cfg_normalization = renorm;
    o.cfg_truncation = trunc;
    static const int klein_layers[2] = {1, 2};   /* the fixture's text_encoder_out_layers */
    if (lm_sd_pipeline_family(p) != LM_SD_ZIMAGE) {
        o.text_layers = klein_layers;
        o.n_text_layers = 2;
    }
    snprintf(name, sizeof name, "img.%s.latents", key);
    o.latents = tu_set_get(ref, name);
    lm_array *img = lm_sd_generate(p, &o);
    if (!img) fprintf(stderr, "%s: %s\n", key, lm_error_message());
    assert_non_null(img);
    snprintf(name, sizeof name, "img.%s.image", key);
    double e = max_err(img, tu_set_get(ref, name));
    printf("  %-8s %-6s image max abs error %.3g\n", lm_sd_family_name(lm_sd_pipeline_family(p)), key, e);
    lm_array_release(img);
    return e;
}

static void whole(lm_device *dev)
{
    lm_sd_pipeline *z = load_on(DIR "zimage", dev), *k = load_on(DIR "klein", dev);
    assert_true(run(z, &zref, "nocfg", "dance monkey", NULL, 0, 0, 0) <= TOL);
    assert_true(run(z, &zref, "cfg", "dance monkey", "bad quality", 3, 0, 0) <= TOL);
    assert_true(run(z, &zref, "cfgnorm", "dance monkey", NULL, 3, 1, 0) <= TOL);
    assert_true(run(z, &zref, "trunc", "dance monkey", NULL, 3, 0, 0.5) <= TOL);
    assert_true(run(k, &kref, "nocfg", "a dog is dancing", NULL, 1, 0, 0) <= TOL);
    assert_true(run(k, &kref, "cfg", "a dog is dancing", NULL, 4, 0, 0) <= TOL);
    lm_sd_pipeline_free(z);
    lm_sd_pipeline_free(k);
}

static void test_whole_cpu(void **state)
{
    (void)state;
    whole(lm_device_cpu());
}

static void test_whole_vulkan(void **state)
{
    (void)state;
    lm_device *vk = tu_vulkan_device();
    if (!vk) {
        printf("  no Vulkan device: skipped\n");
        skip();
    }
    printf("  on %s:\n", vk->spec);
    whole(vk);
}

static void test_rows(void **state)
{
    (void)state;
    lm_sd_pipeline *z = load_on(DIR "zimage", lm_device_cpu()), *k = load_on(DIR "klein", lm_device_cpu());
    assert_int_equal(lm_sd_pipeline_family(z), LM_SD_ZIMAGE);
    assert_int_equal(lm_sd_pipeline_family(k), LM_SD_KLEIN_BASE);   /* is_distilled false */
    const lm_sd_defaults *d = lm_sd_pipeline_defaults(z);
    assert_int_equal(d->steps, 9);
    assert_true(d->cfg == 0);
    d = lm_sd_pipeline_defaults(k);
    assert_int_equal(d->steps, 50);
    assert_true(d->cfg == 4);
    assert_int_equal(lm_sd_family_from_class("Flux2KleinPipeline", 1), LM_SD_KLEIN);
    assert_int_equal(lm_sd_family_from_class("ZImageImg2ImgPipeline", 0), LM_SD_ZIMAGE);
    assert_int_equal(lm_sd_family_from_class("StableDiffusionPipeline", 0), LM_SD_UNKNOWN);
    /* the default image: the VAE's scale times the row's latent side */
    assert_int_equal(lm_sd_pipeline_default_size(z), 2 * 128);

    /* batch of two == two single runs, byte for byte */
    const char *pr[1] = {"dance monkey"};
    uint64_t seeds[2] = {5, 6};
    lm_sd_gen_opts o;
    lm_sd_gen_opts_init_for(&o, z);
    o.prompts = pr;
    o.nprompts = 1;
    o.steps = 2;
    o.width = o.height = 32;
    o.max_sequence_length = 16;
    o.batch = 2;
    o.seeds = seeds;
    lm_array *both = lm_sd_generate(z, &o);
    assert_non_null(both);
    o.batch = 1;
    o.seeds = &seeds[1];
    lm_array *one = lm_sd_generate(z, &o);
    assert_non_null(one);
    lm_array *second = lm_slice(both, 0, 1, 2, 1);
    float *a = read_f32(second), *b = read_f32(one);
    assert_memory_equal(a, b, sizeof *a * (size_t)one->size);
    free(a);
    free(b);
    lm_array_release(second);
    lm_array_release(one);
    lm_array_release(both);

    /* errors */
    o.seeds = NULL;
    o.width = o.height = 30;   /* not a multiple of 2 * 2 */
    assert_null(lm_sd_generate(z, &o));
    printf("  %s\n", lm_error_message());
    assert_non_null(strstr(lm_error_message(), "multiples of 4"));
    o.width = o.height = 32;
    o.sampler = "dpm++2m_karras";
    assert_null(lm_sd_generate(z, &o));
    printf("  %s\n", lm_error_message());
    assert_non_null(strstr(lm_error_message(), "dpm++2m_karras"));
    o.sampler = NULL;
    o.clip_skip = 1;
    assert_null(lm_sd_generate(k, &o));
    printf("  %s\n", lm_error_message());
    assert_non_null(strstr(lm_error_message(), "clip_skip"));
    lm_sd_pipeline_free(z);
    lm_sd_pipeline_free(k);
}

static int setup(void **state)
{
    (void)state;
    if (lm_load_file(DIR "zimage_ref.safetensors", &zref) != LM_OK ||
        lm_load_file(DIR "klein_ref.safetensors", &kref) != LM_OK) {
        fprintf(stderr, "%s\n", lm_error_message());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    lm_tensor_set_free(&zref);
    lm_tensor_set_free(&kref);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows),
        cmocka_unit_test(test_whole_cpu),
        cmocka_unit_test(test_whole_vulkan),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
