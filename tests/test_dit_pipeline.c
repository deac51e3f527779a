/* test_dit_pipeline.c - Z-Image and FLUX.2-klein through lm_sd_pipeline
 * (models/dit_pipeline.c) against diffusers' ZImagePipeline and
 * Flux2KleinPipeline (tests/ref/gen_dit.py wrote tests/ref/dit/ on the GPU
 * machine's CPU: diffusers' own tiny test pipelines with a small Qwen2
 * tokenizer, and the whole 4-step images they make from given latents).
 *
 * Whole images, f32 on the CPU and on a Vulkan device where there is one:
 * Z-Image without guidance, with guidance 3 and a negative prompt, with a
 * None negative ("") and renormalization 1, with truncation 0.5, and
 * img2img (ZImageImg2ImgPipeline, strength 0.6, diffusers' noise given
 * through the noise hook, the VAE's mean as the image's latents);
 * FLUX.2-klein base without guidance, with guidance 4, and with a 64x64
 * reference image (Flux2KleinPipeline's image=).  The max abs error of each
 * image is printed and must be <= 1e-3 (as the SD pipelines' test).  The
 * reference image's packed latents and ids against diffusers'
 * prepare_image_latents within 1e-4 of the largest value.  The img2img and
 * reference-image runs in bf16 on the CPU within 5e-2 of diffusers' f32
 * images (measured 1.1e-2).  Also: the rows
 * each folder loads as, the families' defaults, a batch of two equal to two
 * single runs byte for byte (also from one init image), the steps a
 * strength runs, a reference image off the multiples cropped to its
 * centre, and errors (a size or an init image not a multiple of the
 * patches, another sampler, clip_skip, a strength leaving no step, init
 * images and reference images given to the families without them (SD
 * too), reference images too small, too narrow or too large, an init image
 * beside latents). */
#include <math.h>
#include <unistd.h>
#include "testutil.h"
#include "core/io/io.h"
#include "models/dit_pipeline.h"
#include "models/sd_pipeline.h"
#include "models/vae.h"
#include "random.h"

#define DIR "tests/ref/dit/"
#define TOL 1e-3

static lm_tensor_set zref, kref;

static lm_sd_pipeline *load_as(const char *path, lm_device *dev, lm_dtype dt)
{
    lm_sd_load_opts o;
    lm_sd_load_opts_init(&o);
    o.dtype = dt;
    o.device = dev;
    o.vae_tiling = LM_VAE_TILING_OFF;
    lm_sd_pipeline *p = lm_sd_pipeline_load(path, &o);
    if (!p) fprintf(stderr, "%s: %s\n", path, lm_error_message());
    assert_non_null(p);
    return p;
}

static lm_sd_pipeline *load_on(const char *path, lm_device *dev) { return load_as(path, dev, LM_F32); }

/* the noise hook: diffusers' recorded draw as draw 0 */
static lm_status take(void *ctx, int k, int ndim, const int64_t *shape, lm_array **out)
{
    *out = k == 0 ? lm_reshape(ctx, ndim, shape) : NULL;
    return k != 0 || *out ? LM_OK : lm_error_status();
}

/* ref.pixels (uint8 HWC as int32) as [3,H,W] in 0..1: PIL's to_numpy / 255 */
static lm_array *pixels(lm_array *hwc)
{
    static const int perm[3] = {2, 0, 1};
    lm_array *a = lm_permute(hwc, perm), *f = lm_cast(a, LM_F32);
    lm_array *r = lm_binary_scalar(LM_OP_DIV, f, 255, false);
    lm_array_release(a);
    lm_array_release(f);
    assert_non_null(r);
    return r;
}

/* what a run takes besides the prompt: img2img's init image (latents
 * NULL; the noise recorded) or Klein's reference image */
typedef struct extra { lm_array *init, *noise, *ref; double strength; } extra;

/* one whole 4-step 32x32 run from diffusers' latents; returns the max error */
static double run_with(lm_sd_pipeline *p, lm_tensor_set *ref, const char *key, const char *prompt,
                       const char *negative, double cfg, double renorm, double trunc, const extra *x)
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
    lm_array *refs[1] = {x ? x->ref : NULL};
    if (x && x->init) {
        o.init = x->init;
        o.strength = x->strength;
        o.noise = take;
        o.noise_ctx = x->noise;
    } else {
        snprintf(name, sizeof name, "img.%s.latents", key);
        o.latents = tu_set_get(ref, name);
    }
    if (x && x->ref) {
        o.refs = refs;
        o.nrefs = 1;
    }
    lm_array *img = lm_sd_generate(p, &o);
    if (!img) fprintf(stderr, "%s: %s\n", key, lm_error_message());
    assert_non_null(img);
    snprintf(name, sizeof name, x && x->init ? "%s.image" : "img.%s.image", key);
    double e = tu_max_err(img, tu_set_get(ref, name));
    printf("  %-8s %-6s image max abs error %.3g\n", lm_sd_family_name(lm_sd_pipeline_family(p)), key, e);
    lm_array_release(img);
    return e;
}

static double run(lm_sd_pipeline *p, lm_tensor_set *ref, const char *key, const char *prompt,
                  const char *negative, double cfg, double renorm, double trunc)
{
    return run_with(p, ref, key, prompt, negative, cfg, renorm, trunc, NULL);
}

/* diffusers' prepare_image_latents of ref.pixels: the packed tokens within
 * 1e-4 of the largest value, the ids exactly */
static void ref_stage(lm_sd_pipeline *k, lm_array *img)
{
    lm_array *tok = NULL, *want = tu_set_get(&kref, "ref.latents"), *wid = tu_set_get(&kref, "ref.ids");
    int32_t *ids = NULL;
    int64_t S = 0, h0 = 0, w0 = 0;
    lm_array *refs[1] = {img};
    if (lm_dit_pipe_ref_latents(lm_sd_pipeline_vae(k), lm_sd_pipeline_vae_scale(k), 1, refs, &tok, &ids, &S, &h0,
                                &w0) != LM_OK)
        fprintf(stderr, "%s\n", lm_error_message());
    assert_non_null(tok);
    assert_int_equal(S, wid->shape[1]);
    assert_int_equal(h0, 64);
    assert_int_equal(w0, 64);
    assert_int_equal(tok->ndim, 3);
    assert_memory_equal(tok->shape, want->shape, sizeof *tok->shape * 3);
    float *w = tu_read_f32(want);
    double big = 0;
    for (int64_t i = 0; i < want->size; i++) big = fmax(big, fabs((double)w[i]));
    free(w);
    double e = tu_max_err(tok, want);
    printf("  klein    reference latents max abs error %.3g (largest %.3g)\n", e, big);
    assert_true(e <= 1e-4 * big);
    int32_t *r = malloc(sizeof *r * (size_t)wid->size);
    assert_non_null(r);
    assert_int_equal(lm_array_read(wid, r, LM_I32), LM_OK);
    assert_memory_equal(ids, r, sizeof *r * (size_t)wid->size);
    free(r);
    free(ids);
    lm_array_release(tok);
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
    extra zi = {.init = tu_set_get(&zref, "i2i.init"), .noise = tu_set_get(&zref, "i2i.noise"), .strength = 0.6};
    assert_true(run_with(z, &zref, "i2i", "dance monkey", NULL, 0, 0, 0, &zi) <= TOL);
    lm_array *px = pixels(tu_set_get(&kref, "ref.pixels"));
    ref_stage(k, px);
    extra kr = {.ref = px};
    assert_true(run_with(k, &kref, "ref", "a dog is dancing", NULL, 1, 0, 0, &kr) <= TOL);
    lm_array_release(px);
    lm_sd_pipeline_free(z);
    lm_sd_pipeline_free(k);
}

static void test_whole_cpu(void **state)
{
    (void)state;
    whole(lm_device_cpu());
}

/* img2img and the reference-image run in bf16 on the CPU: they run (every
 * dtype meets where it should) and land near diffusers' f32 images */
static void test_edits_bf16(void **state)
{
    (void)state;
    lm_sd_pipeline *z = load_as(DIR "zimage", lm_device_cpu(), LM_BF16);
    lm_sd_pipeline *k = load_as(DIR "klein", lm_device_cpu(), LM_BF16);
    extra zi = {.init = tu_set_get(&zref, "i2i.init"), .noise = tu_set_get(&zref, "i2i.noise"), .strength = 0.6};
    assert_true(run_with(z, &zref, "i2i", "dance monkey", NULL, 0, 0, 0, &zi) <= 0.05);
    lm_array *px = pixels(tu_set_get(&kref, "ref.pixels"));
    extra kr = {.ref = px};
    assert_true(run_with(k, &kref, "ref", "a dog is dancing", NULL, 1, 0, 0, &kr) <= 0.05);
    lm_array_release(px);
    lm_sd_pipeline_free(z);
    lm_sd_pipeline_free(k);
}

static void test_whole_vulkan(void **state)
{
    (void)state;
    lm_device *vk = tu_vulkan_or_skip("  no Vulkan device: skipped");
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
    float *a = tu_read_f32(second), *b = tu_read_f32(one);
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
    /* the checks every family shares (lm_sd_gen_opts_check): a batch whose
     * seeds run past 2^63-1 */
    o.seed = (uint64_t)INT64_MAX;
    o.batch = 2;
    assert_null(lm_sd_generate(z, &o));
    printf("  %s\n", lm_error_message());
    assert_non_null(strstr(lm_error_message(), "past the largest seed"));
    o.seed = 0;
    o.batch = 1;
    o.clip_skip = 1;
    assert_null(lm_sd_generate(k, &o));
    printf("  %s\n", lm_error_message());
    assert_non_null(strstr(lm_error_message(), "clip_skip"));
    lm_sd_pipeline_free(z);
    lm_sd_pipeline_free(k);
}

static void count_steps(void *ctx, int step, int steps)
{
    int *c = ctx;
    c[0]++;
    c[1] = step;
    c[2] = steps;
}

/* the error of generate(p, o), which must fail, holds want */
static void refused(lm_sd_pipeline *p, const lm_sd_gen_opts *o, const char *want)
{
    assert_null(lm_sd_generate(p, o));
    printf("  %s\n", lm_error_message());
    assert_non_null(strstr(lm_error_message(), want));
}

static lm_array *image(int64_t h, int64_t w, uint64_t seed)
{
    int64_t shape[3] = {3, h, w};
    lm_array *a = lm_random_uniform(3, shape, 0, 1, LM_F32, lm_random_key(seed), lm_device_cpu());
    assert_non_null(a);
    assert_int_equal(lm_eval(&a, 1), LM_OK);
    return a;
}

/* img2img and reference images beyond the fixtures: the steps a strength
 * runs, one init image shared by a batch, a reference image's crop, errors */
static void test_edits(void **state)
{
    (void)state;
    lm_sd_pipeline *z = load_on(DIR "zimage", lm_device_cpu()), *k = load_on(DIR "klein", lm_device_cpu());
    const char *pr[1] = {"dance monkey"};
    uint64_t seeds[2] = {5, 6};
    lm_sd_gen_opts o;
    lm_sd_gen_opts_init_for(&o, z);
    assert_true(o.strength == 0.6);      /* ZImageImg2ImgPipeline's default */
    o.prompts = pr;
    o.nprompts = 1;
    o.steps = 4;
    o.max_sequence_length = 16;
    o.init = image(32, 32, 1);
    int calls[3] = {0};
    o.progress = count_steps;
    o.progress_ctx = calls;
    /* get_timesteps: 4 steps at 0.6 run 4 - int(4 - 2.4) = 3 */
    o.batch = 2;
    o.seeds = seeds;
    lm_array *both = lm_sd_generate(z, &o);
    assert_non_null(both);
    assert_int_equal(calls[0], 3);
    assert_int_equal(calls[1], 3);
    assert_int_equal(calls[2], 3);
    o.batch = 1;
    o.seeds = &seeds[1];
    lm_array *one = lm_sd_generate(z, &o), *second = lm_slice(both, 0, 1, 2, 1);
    assert_non_null(one);
    float *a = tu_read_f32(second), *b = tu_read_f32(one);
    assert_memory_equal(a, b, sizeof *a * (size_t)one->size);   /* the batch's init encoded once */
    free(a);
    free(b);
    lm_array_release(second);
    lm_array_release(one);
    lm_array_release(both);
    o.progress = NULL;
    o.seeds = NULL;

    /* a reference image off the multiples of 4: its centre 68x64 is kept */
    lm_array *big = image(66, 70, 2), *c1 = lm_slice(big, 1, 1, 65, 1), *mid = lm_slice(c1, 2, 1, 69, 1);
    lm_array *t1 = NULL, *t2 = NULL;
    int32_t *i1 = NULL, *i2 = NULL;
    int64_t S1 = 0, S2 = 0, h0 = 0, w0 = 0;
    lm_vae *vae = lm_sd_pipeline_vae(k);
    assert_int_equal(lm_dit_pipe_ref_latents(vae, lm_sd_pipeline_vae_scale(k), 1, &big, &t1, &i1, &S1, &h0, &w0),
                     LM_OK);
    assert_int_equal(lm_dit_pipe_ref_latents(vae, lm_sd_pipeline_vae_scale(k), 1, &mid, &t2, &i2, &S2, NULL, NULL),
                     LM_OK);
    assert_int_equal(h0, 64);
    assert_int_equal(w0, 68);
    assert_int_equal(S1, 16 * 17);
    assert_int_equal(S1, S2);
    assert_memory_equal(i1, i2, sizeof *i1 * 4 * (size_t)S1);
    a = tu_read_f32(t1);
    b = tu_read_f32(t2);
    assert_memory_equal(a, b, sizeof *a * (size_t)t1->size);
    free(a);
    free(b);
    free(i1);
    free(i2);
    lm_array_release(t1);
    lm_array_release(t2);
    lm_array_release(c1);
    lm_array_release(mid);

    /* errors, all found before anything runs */
    lm_array *odd = image(30, 32, 3), *init = o.init;
    o.init = odd;
    refused(z, &o, "init image 32x30: Z-Image needs width and height multiples of 4");
    o.init = init;
    lm_array_release(odd);
    o.strength = 1e-17;     /* 4 - 4e-17 is 4 in a double: t_start 4 */
    refused(z, &o, "leaves no step");
    o.strength = 0;
    refused(z, &o, "strength 0");
    o.strength = 0.6;
    o.latents = tu_set_get(&zref, "img.nocfg.latents");
    refused(z, &o, "init image and latents");
    o.latents = NULL;
    lm_array *refs[1] = {big};
    o.refs = refs;
    o.nrefs = 1;
    refused(z, &o, "takes none");
    o.refs = NULL;
    o.nrefs = 0;
    o.max_sequence_length = 32;
    refused(k, &o, "reference image (refs)");   /* Klein has no img2img */
    lm_array_release(o.init);
    o.init = NULL;
    o.refs = refs;
    o.nrefs = 1;
    int64_t small[3] = {3, 32, 64}, narrow[3] = {3, 64, 520}, huge[3] = {3, 1100, 1000}, four[3] = {4, 64, 64};
    refs[0] = lm_full(3, small, 0.5, LM_F32, lm_device_cpu());
    refused(k, &o, "64 pixels or more");
    lm_array_release(refs[0]);
    refs[0] = lm_full(3, narrow, 0.5, LM_F32, lm_device_cpu());
    refused(k, &o, "8.1:1");
    lm_array_release(refs[0]);
    refs[0] = lm_full(3, huge, 0.5, LM_F32, lm_device_cpu());
    refused(k, &o, "to 976x1073");
    lm_array_release(refs[0]);
    refs[0] = lm_full(3, four, 0.5, LM_F32, lm_device_cpu());
    refused(k, &o, "expected [3,H,W]");
    lm_array_release(refs[0]);
    /* nor does SD take reference images */
    lm_sd_pipeline *sd = load_on("tests/ref/diffusion/sd1", lm_device_cpu());
    refs[0] = big;
    refused(sd, &o, "SD 1.x takes none");
    lm_sd_pipeline_free(sd);
    lm_array_release(big);
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
        cmocka_unit_test(test_edits),
        cmocka_unit_test(test_whole_cpu),
        cmocka_unit_test(test_whole_vulkan),
        cmocka_unit_test(test_edits_bf16),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
