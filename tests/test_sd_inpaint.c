/* test_sd_inpaint.c - inpainting (models/sd_inpaint.c and its hooks in
 * models/sd_pipeline.c) against diffusers.
 *
 * tests/ref/gen_inpaint.py (run on the GPU machine) ran diffusers'
 * StableDiffusionInpaintPipeline and StableDiffusionXLInpaintPipeline on the
 * tiny SD 1.x and SDXL folders, with 9-channel UNets (conv_in widened, its
 * weight in ref_inpaint.safetensors; tests/ref/make_inpaint.py builds the
 * folders into build/ref/diffusion/) and the ordinary 4-channel ones (masked
 * img2img), strength 1.0 (pure noise) and 0.6, Euler and DPM++ 2M, 4 steps of
 * a 32x32 image, its draws (the VAE samples of the init and the masked image,
 * the noise) recorded.  Lumen replays them through the noise hook (-1, 0, -2)
 * and its images must be within 1e-3 (f32, CPU; three of them on Vulkan where
 * there is one).  The blurred mask must equal PIL's GaussianBlur's bytes, the overlay
 * diffusers' apply_overlay within PIL's 8-bit rounding, the single-file
 * 9-channel checkpoint the folder's bytes; the errors name what is wrong. */
#include <math.h>
#include <cjson/cJSON.h>
#include "test_sd_util.h"
#include "core/io/io.h"
#include "models/sd_inpaint.h"
#include "models/sd_pipeline.h"
#include "models/vae.h"

#define DIR "tests/ref/diffusion/"
/* the fixtures make builds under $BUILD (build, build/novk, build/san) */
static const char *bdir(const char *name)
{
    static char buf[4][512];
    static int k;
    const char *b = getenv("BUILD");
    char *p = buf[k++ % 4];
    snprintf(p, 512, "%s/ref/diffusion/%s", b && *b ? b : "build", name);
    return p;
}
#define REF "tests/ref/inpaint/ref_inpaint.safetensors"
#define CROP "tests/ref/inpaint/ref_inpaint_crop.safetensors"
#define TOL 1e-3

static lm_sd_pipeline *sd4, *sd9, *xl9;
static lm_tensor_set ref;

static lm_array *get(const char *fmt, const char *name)
{
    char key[96];
    snprintf(key, sizeof key, fmt, name);
    int i = lm_tensor_set_find(&ref, key);
    if (i < 0) fail_msg("%s has no %s (tests/ref/gen_inpaint.py writes it)", REF, key);
    return ref.arrays[i];
}

/* diffusers' draws by the pipeline's keys: -1 the init image's VAE sample,
 * 0 the noise, -2 the masked image's VAE sample */
typedef struct hook { const char *name; int calls[3]; } hook;

static lm_status give(void *ctx, int k, int ndim, const int64_t *shape, lm_array **out)
{
    hook *h = ctx;
    *out = NULL;
    const char *what = k == -1 ? "%s.init_sample" : k == 0 ? "%s.noise" : k == -2 ? "%s.masked_sample" : NULL;
    if (!what) return lm_error_set(LM_ERR_ARG, "unexpected draw %d", k);
    h->calls[k == -1 ? 0 : k == 0 ? 1 : 2]++;
    *out = lm_reshape(get(what, h->name), ndim, shape);
    return *out ? LM_OK : lm_error_status();
}

static void gen_opts(lm_sd_gen_opts *o, const char *sampler, double strength, const char *mask)
{
    sd_gen_opts(o, sampler);
    o->strength = strength;
    o->init = get("%s", "init");
    o->mask = get("%s", mask);
}

/* one case of gen_inpaint.py: its image from its draws */
static void run_case(lm_sd_pipeline *p, const char *name, const char *sampler, double strength,
                     const char *mask, int want_init_sample)
{
    lm_sd_gen_opts o;
    gen_opts(&o, sampler, strength, mask);
    hook h = {name, {0, 0, 0}};
    o.noise = give;
    o.noise_ctx = &h;
    lm_array *img = tu_must(lm_sd_generate(p, &o), name);
    double e = tu_max_err(img, get("%s.image", name));
    printf("  %-9s %s, strength %.2g, %s: max abs error %.3g (draws: init sample %d, noise %d, "
           "masked sample %d)\n", name, sampler, strength, mask, e, h.calls[0], h.calls[1], h.calls[2]);
    assert_true(e <= TOL);
    /* the VAE samples are taken where diffusers takes them */
    assert_int_equal(h.calls[0], want_init_sample);
    assert_int_equal(h.calls[1], 1);
    lm_array_release(img);
}

static void all_cases(lm_sd_pipeline *s4, lm_sd_pipeline *s9, lm_sd_pipeline *x9)
{
    run_case(s9, "sd9_s1", "euler", 1.0, "mask", 0);
    run_case(s9, "sd9_s06", "euler", 0.6, "mask", 1);
    run_case(s4, "sd4_s06", "euler", 0.6, "mask", 1);
    run_case(s4, "sd4_s1", "euler", 1.0, "mask", 1);
    run_case(s4, "sd4_dpm", "dpm++2m", 0.75, "mask", 1);
    run_case(x9, "xl9_s1", "euler", 1.0, "mask", 0);
    run_case(x9, "xl9_s06", "euler", 0.6, "mask", 1);
}

static void test_reference(void **state)
{
    (void)state;
    all_cases(sd4, sd9, xl9);
}

/* mask_blur: PIL's GaussianBlur bytes, then the same pipeline as diffusers
 * given the blurred mask */
static void test_blur(void **state)
{
    (void)state;
    lm_sd_mask m;
    assert_int_equal(lm_sd_mask_prepare(get("%s", "mask"), 2, 0, 0, "test", &m), LM_OK);
    int64_t shape[2] = {m.H, m.W};
    lm_array *soft = tu_must(lm_from_data(2, shape, LM_F32, m.soft, lm_device_cpu()), "soft");
    lm_array *want = get("%s", "blur.mask");
    double e = tu_max_err(soft, want);
    printf("  mask blur 2 against PIL's GaussianBlur: max abs error %.3g (%.3g levels)\n", e, e * 255);
    assert_true(e <= 1e-6);
    lm_array_release(soft);
    lm_sd_mask_free(&m);
    /* as the pipeline's option: blur 2 of the sharp mask is the blurred mask's case */
    lm_sd_gen_opts o;
    gen_opts(&o, "euler", 0.6, "mask");
    o.mask_blur = 2;
    hook h = {"sd4_blur", {0, 0, 0}};
    o.noise = give;
    o.noise_ctx = &h;
    lm_array *img = tu_must(lm_sd_generate(sd4, &o), "blur");
    e = tu_max_err(img, get("%s.image", "sd4_blur"));
    printf("  sd4_blur  generate with mask_blur 2: max abs error %.3g\n", e);
    assert_true(e <= TOL);
    /* the overlay: diffusers' apply_overlay of the 8-bit image (PIL's premultiplied
     * alpha in 8 bits: a few levels' rounding) */
    o.mask_overlay = true;
    lm_array *ov = tu_must(lm_sd_generate(sd4, &o), "overlay");
    e = tu_max_err(ov, get("%s.overlay", "sd4_blur"));
    double off = tu_max_err(img, get("%s.overlay", "sd4_blur"));
    printf("  sd4_blur  overlay against apply_overlay: max abs error %.3g (%.2g levels); without the "
           "overlay %.3g\n", e, e * 255, off);
    assert_true(e <= 3.0 / 255);
    assert_true(off > 3.0 / 255);   /* the check can fail */
    lm_array_release(ov);
    lm_array_release(img);
}

/* the single-file 9-channel checkpoint (conv_in [C0,9,3,3]) is the folder's model */
static void test_single_file(void **state)
{
    (void)state;
    lm_sd_load_opts lo;
    lm_sd_load_opts_init(&lo);
    lo.dtype = LM_F32;
    lo.device = lm_device_cpu();
    lo.vae_tiling = LM_VAE_TILING_OFF;
    lo.tokenizer_dir = DIR "sd1/tokenizer";
    lm_sd_pipeline *p = lm_sd_pipeline_load(bdir("sd1_inpaint.safetensors"), &lo);
    if (!p) fprintf(stderr, "%s\n", lm_error_message());
    assert_non_null(p);
    lm_sd_gen_opts o;
    gen_opts(&o, "euler", 0.6, "mask");
    hook h = {"sd9_s06", {0, 0, 0}};
    o.noise = give;
    o.noise_ctx = &h;
    lm_array *a = tu_must(lm_sd_generate(p, &o), "single file"), *b = tu_must(lm_sd_generate(sd9, &o), "folder");
    double e = tu_max_err(a, b);
    printf("  single-file 9-channel checkpoint against the folder: max abs error %.3g\n", e);
    assert_true(e == 0);
    lm_array_release(a);
    lm_array_release(b);
    lm_sd_pipeline_free(p);
}

/* the latent mask is torch's nearest; the masked image 0.5 where repainted */
static void test_mask_parts(void **state)
{
    (void)state;
    float px[6 * 4] = {0};
    /* (y, x): (0,1) 0.6, (2,2) 0.49, (4,2) 0.5, (2,0) and (3,0) 1 */
    px[0 * 4 + 1] = 0.6f, px[2 * 4 + 2] = 0.49f, px[4 * 4 + 2] = 0.5f, px[2 * 4 + 0] = 1, px[3 * 4 + 0] = 1;
    int64_t shape[3] = {1, 6, 4};
    lm_array *mk = lm_from_data(3, shape, LM_F32, px, lm_device_cpu());
    lm_sd_mask m;
    assert_int_equal(lm_sd_mask_prepare(mk, 0, 0, 0, "test", &m), LM_OK);
    /* 8-bit gray first (0.5 -> 128 -> 0.502 repaints; 0.49 -> 125 keeps) */
    assert_true(m.bin[1] == 1 && m.bin[2 * 4 + 2] == 0 && m.bin[4 * 4 + 2] == 1 && m.bin[3 * 4] == 1);
    lm_array *lat = lm_sd_mask_latents(&m, 3, 2, lm_device_cpu());
    float v[6];
    assert_int_equal(lm_array_read(lat, v, LM_F32), LM_OK);
    /* torch's nearest at scale 2: rows 0, 2, 4 and columns 0, 2 of the pixels */
    int ones = 0;
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 2; x++) {
            assert_true(v[y * 2 + x] == m.bin[(2 * y) * 4 + 2 * x]);
            ones += v[y * 2 + x] == 1;
        }
    assert_int_equal(ones, 2);
    lm_array *bin = lm_sd_mask_pixels(&m, false, lm_device_cpu());
    int64_t is[4] = {1, 3, 6, 4};
    lm_array *img = lm_full(4, is, 0.25, LM_F32, lm_device_cpu());
    lm_array *mi = lm_sd_inpaint_masked_image(img, bin);
    float out[72];
    assert_int_equal(lm_array_read(mi, out, LM_F32), LM_OK);
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 24; i++) assert_true(out[c * 24 + i] == (m.bin[i] ? 0.5f : 0.25f));
    /* RGB masks go to gray as PIL's convert("L"): (R 19595 + G 38470 + B 7471 + 2^15) >> 16 */
    float rgb[3] = {1, 0, 0};
    int64_t s3[3] = {3, 1, 1};
    lm_array *r = lm_from_data(3, s3, LM_F32, rgb, lm_device_cpu());
    lm_sd_mask m2;
    assert_int_equal(lm_sd_mask_prepare(r, 0, 0, 0, "test", &m2), LM_OK);
    assert_true(m2.soft[0] == 76.0f / 255.0f && m2.bin[0] == 0);
    lm_sd_mask_free(&m2);
    lm_array_release(r);
    lm_array_release(mi);
    lm_array_release(img);
    lm_array_release(bin);
    lm_array_release(lat);
    lm_array_release(mk);
    lm_sd_mask_free(&m);
}

/* ---- A1111's "Only masked" ---- */

/* PIL's Lanczos bytes (tests/ref/gen_lanczos.py) */
static void test_lanczos(void **state)
{
    (void)state;
    size_t n = 0;
    char *text = tu_slurp("tests/ref/inpaint/lanczos.json", &n);
    assert_non_null(text);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    int cases = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "cases")) {
        const cJSON *in = cJSON_GetObjectItem(c, "in"), *out = cJSON_GetObjectItem(c, "out");
        const cJSON *src = cJSON_GetObjectItem(c, "src"), *want = cJSON_GetObjectItem(c, "want");
        int64_t C = (int64_t)strlen(cJSON_GetObjectItem(c, "mode")->valuestring);
        int64_t ih = cJSON_GetArrayItem(in, 0)->valueint, iw = cJSON_GetArrayItem(in, 1)->valueint;
        int64_t oh = cJSON_GetArrayItem(out, 0)->valueint, ow = cJSON_GetArrayItem(out, 1)->valueint;
        uint8_t *a = malloc((size_t)(C * ih * iw)), *b = malloc((size_t)(C * oh * ow));
        assert_true(a && b);
        for (int64_t i = 0; i < C * ih * iw; i++) a[i] = (uint8_t)cJSON_GetArrayItem(src, (int)i)->valueint;
        assert_int_equal(lm_sd_resize_lanczos_u8(a, C, ih, iw, b, oh, ow), LM_OK);
        int differ = 0;
        for (int64_t i = 0; i < C * oh * ow; i++) differ += b[i] != cJSON_GetArrayItem(want, (int)i)->valueint;
        printf("  Lanczos %lldx%lldx%lld -> %lldx%lld: %d bytes differ from PIL's\n", (long long)C, (long long)ih,
               (long long)iw, (long long)oh, (long long)ow, differ);
        assert_int_equal(differ, 0);
        free(a);
        free(b);
        cases++;
    }
    assert_true(cases >= 7);
    cJSON_Delete(j);
}

static lm_tensor_set crop;
static bool have_crop;

static lm_array *cget(const char *fmt, const char *name)
{
    char key[96];
    snprintf(key, sizeof key, fmt, name);
    int i = lm_tensor_set_find(&crop, key);
    if (i < 0) fail_msg("%s has no %s (tests/ref/gen_inpaint_crop.py writes it)", CROP, key);
    return crop.arrays[i];
}

static lm_status cgive(void *ctx, int k, int ndim, const int64_t *shape, lm_array **out)
{
    const char *name = ctx;
    const char *what = k == -1 ? "%s.init_sample" : k == 0 ? "%s.noise" : k == -2 ? "%s.masked_sample" : NULL;
    *out = NULL;
    if (!what) return lm_error_set(LM_ERR_ARG, "unexpected draw %d", k);
    *out = lm_reshape(cget(what, name), ndim, shape);
    return *out ? LM_OK : lm_error_status();
}

/* diffusers' get_crop_region for 3 masks and 3 paddings */
static void test_crop_boxes(void **state)
{
    (void)state;
    if (!have_crop) {
        printf("  %s absent (tests/ref/gen_inpaint_crop.py writes it): skipped\n", CROP);
        skip();
    }
    lm_array *bx = cget("%s", "boxes");
    float v[64 * 6];
    assert_true(bx->size <= 64 * 6);
    assert_int_equal(lm_array_read(bx, v, LM_F32), LM_OK);
    for (int64_t r = 0; r < bx->shape[0]; r++) {
        char mk[16];
        snprintf(mk, sizeof mk, "mask_%c", 'a' + (int)v[r * 6]);
        lm_array *m = cget("%s", mk);
        float *f = tu_read_f32(m);
        int64_t H = m->shape[1], W = m->shape[2], box[4];
        uint8_t *g = malloc((size_t)(H * W));
        for (int64_t i = 0; i < H * W; i++) g[i] = (uint8_t)lrintf(f[i] * 255);
        assert_true(lm_sd_mask_crop_region(g, H, W, H, W, (int64_t)v[r * 6 + 1], box));
        printf("  %s pad %g: box (%lld, %lld, %lld, %lld), diffusers' (%g, %g, %g, %g)\n", mk, v[r * 6 + 1],
               (long long)box[0], (long long)box[1], (long long)box[2], (long long)box[3], v[r * 6 + 2],
               v[r * 6 + 3], v[r * 6 + 4], v[r * 6 + 5]);
        for (int k = 0; k < 4; k++) assert_true(box[k] == (int64_t)v[r * 6 + 2 + k]);
        free(g);
        free(f);
    }
}

static void crop_case(lm_sd_pipeline *p, const char *name, double strength, const char *mask, int64_t pad)
{
    lm_sd_gen_opts o;
    gen_opts(&o, "euler", strength, "mask");
    o.init = cget("%s", "init");
    o.mask = cget("%s", mask);
    o.inpaint_crop = true;
    o.inpaint_padding = pad;
    o.noise = cgive;
    o.noise_ctx = (void *)name;
    lm_array *img = tu_must(lm_sd_generate(p, &o), name);
    double e = tu_max_err(img, cget("%s.image", name));
    printf("  %-9s only masked, padding %lld: max abs error %.3g (%.2g levels)\n", name, (long long)pad, e,
           e * 255);
    assert_true(e <= 3.0 / 255);
    lm_array_release(img);
}

static void test_crop_reference(void **state)
{
    (void)state;
    if (!have_crop) {
        printf("  %s absent (tests/ref/gen_inpaint_crop.py writes it): skipped\n", CROP);
        skip();
    }
    crop_case(sd9, "sd9_crop", 1.0, "mask_a", 3);
    crop_case(sd4, "sd4_crop", 0.75, "mask_b", 2);
}

static void expect_error(lm_sd_pipeline *p, lm_sd_gen_opts *o, const char *part)
{
    lm_array *img = lm_sd_generate(p, o);
    if (img) lm_array_release(img);
    assert_null(img);
    printf("  %s\n", lm_error_message());
    assert_non_null(strstr(lm_error_message(), part));
}

static void test_errors(void **state)
{
    (void)state;
    lm_sd_gen_opts o;
    gen_opts(&o, "euler", 0.6, "mask");
    o.init = NULL;
    expect_error(sd4, &o, "a mask without an init image");
    gen_opts(&o, "euler", 0.6, "mask");
    o.mask = NULL;
    expect_error(sd9, &o, "its UNet takes 9 input channels");
    gen_opts(&o, "euler", 0.6, "mask");
    o.init = NULL;
    o.mask = NULL;
    expect_error(sd9, &o, "give an init image and a mask");
    gen_opts(&o, "euler", 0.6, "mask");
    int64_t s5[3] = {5, 32, 32};
    lm_array *five = lm_zeros(3, s5, LM_F32, lm_device_cpu());
    o.mask = five;
    expect_error(sd4, &o, "mask: expected [H,W] or [C,H,W]");
    gen_opts(&o, "euler", 0.6, "mask");
    o.mask_blur = -1;
    expect_error(sd4, &o, "mask blur -1");
    lm_array_release(five);
}

/* [..., H, W] with each pixel doubled: [..., 2H, 2W] on the CPU */
static lm_array *doubled(lm_array *a)
{
    int64_t H = a->shape[a->ndim - 2], W = a->shape[a->ndim - 1], n = a->size / (H * W);
    float *v = tu_read_f32(a), *d = malloc(sizeof *d * (size_t)(a->size * 4));
    assert_non_null(d);
    for (int64_t c = 0; c < n; c++)
        for (int64_t y = 0; y < 2 * H; y++)
            for (int64_t x = 0; x < 2 * W; x++) d[(c * 2 * H + y) * 2 * W + x] = v[(c * H + y / 2) * W + x / 2];
    int64_t shape[4];
    for (int i = 0; i < a->ndim; i++) shape[i] = a->shape[i];
    shape[a->ndim - 2] *= 2;
    shape[a->ndim - 1] *= 2;
    lm_array *r = lm_from_data(a->ndim, shape, LM_F32, d, lm_device_cpu());
    free(v);
    free(d);
    return tu_must(r, "doubled");
}

/* A mask or an init image of another size is resized as diffusers'
 * preprocess(image, height, width) does (PIL's Lanczos; A1111's "Just
 * resize"): a 64x64 mask of the 32x32 one's pixels doubled gives the 32x32
 * mask's image bit for bit (Lanczos halves a doubled binary mask back to it;
 * "Only masked" runs, at the init's size); an init image with another width and
 * height gives the image of the init resized first, at that size. */
static void test_resized(void **state)
{
    (void)state;
    for (int only = 0; only < 2; only++) {
        lm_sd_gen_opts o;
        gen_opts(&o, "euler", 0.6, "mask");
        o.seed = 7;
        o.inpaint_crop = only;
        o.inpaint_padding = 4;
        lm_array *want = tu_must(lm_sd_generate(sd4, &o), "mask 32x32");
        lm_array *m2 = doubled(o.mask);
        o.mask = m2;
        lm_array *got = tu_must(lm_sd_generate(sd4, &o), "mask 64x64");
        double e = tu_max_err(got, want);
        printf("  %s: a 64x64 mask against its 32x32 original: max abs difference %g\n",
               only ? "only masked" : "whole picture", e);
        /* "Only masked" boxes the resized mask's nonzero pixels and overlays
         * its soft values, where Lanczos' ringing leaves some: the same size */
        if (only) assert_true(got->shape[2] == 32 && got->shape[3] == 32);
        else assert_true(e == 0);
        lm_array_release(got);
        lm_array_release(want);
        lm_array_release(m2);
    }
    lm_sd_gen_opts o;
    gen_opts(&o, "euler", 0.6, "mask");
    o.seed = 7;
    lm_array *i2 = doubled(o.init), *small = tu_must(lm_sd_image_resize(i2, 32, 32, lm_device_cpu()), "resize");
    o.init = small;
    lm_array *want = tu_must(lm_sd_generate(sd4, &o), "init resized first");
    o.init = i2;
    o.width = o.height = 32;
    lm_array *got = tu_must(lm_sd_generate(sd4, &o), "init 64x64 at 32x32");
    assert_int_equal(got->shape[2], 32);
    assert_int_equal(got->shape[3], 32);
    double e = tu_max_err(got, want);
    printf("  a 64x64 init image at width and height 32: max abs difference %g\n", e);
    assert_true(e == 0);
    lm_array_release(got);
    /* without a size, the output is the init image's and the mask follows it */
    o.width = o.height = 0;
    got = tu_must(lm_sd_generate(sd4, &o), "init 64x64, mask 32x32");
    assert_int_equal(got->shape[2], 64);
    assert_int_equal(got->shape[3], 64);
    lm_array_release(got);
    lm_array_release(want);
    lm_array_release(small);
    lm_array_release(i2);
}

static void test_vulkan(void **state)
{
    (void)state;
    lm_device *vk = tu_vulkan_or_skip("  no Vulkan device: skipped");
    lm_device *was = lm_device_default();
    lm_device_set_default(vk);
    lm_sd_load_opts lo;
    lm_sd_load_opts_init(&lo);
    lo.dtype = LM_F32;
    lo.device = vk;
    lo.vae_tiling = LM_VAE_TILING_OFF;
    lm_sd_pipeline *p[3] = {lm_sd_pipeline_load(DIR "sd1", &lo), lm_sd_pipeline_load(bdir("sd1_inpaint"), &lo),
                            lm_sd_pipeline_load(bdir("sdxl_inpaint"), &lo)};
    for (int i = 0; i < 3; i++) {
        if (!p[i]) fprintf(stderr, "on Vulkan: %s\n", lm_error_message());
        assert_non_null(p[i]);
    }
    printf("  on %s:\n", vk->spec);
    /* one of each kind (lavapipe is slow): 9-channel SD from noise, SDXL from the
     * image, 4-channel masked img2img */
    run_case(p[1], "sd9_s1", "euler", 1.0, "mask", 0);
    run_case(p[2], "xl9_s06", "euler", 0.6, "mask", 1);
    run_case(p[0], "sd4_s06", "euler", 0.6, "mask", 1);
    for (int i = 0; i < 3; i++) lm_sd_pipeline_free(p[i]);
    lm_device_set_default(was);
}

static lm_sd_pipeline *load(const char *path)
{
    lm_sd_load_opts o;
    lm_sd_load_opts_init(&o);
    o.dtype = LM_F32;
    o.device = lm_device_cpu();
    o.vae_tiling = LM_VAE_TILING_OFF;   /* as diffusers without enable_tiling() */
    lm_sd_pipeline *p = lm_sd_pipeline_load(path, &o);
    if (!p) fprintf(stderr, "%s (make inpaint-fixtures builds build/ref/diffusion/*_inpaint)\n",
                    lm_error_message());
    return p;
}

static int setup(void **state)
{
    (void)state;
    if (lm_init() != LM_OK) return -1;
    lm_device_set_default(lm_device_cpu());
    if (lm_load_safetensors(REF, &ref) != LM_OK) {
        fprintf(stderr, "%s (tests/ref/gen_inpaint.py writes it)\n", lm_error_message());
        return -1;
    }
    if (!(sd4 = load(DIR "sd1")) || !(sd9 = load(bdir("sd1_inpaint"))) || !(xl9 = load(bdir("sdxl_inpaint"))))
        return -1;
    have_crop = lm_load_safetensors(CROP, &crop) == LM_OK;
    lm_error_clear();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    lm_sd_pipeline_free(sd4);
    lm_sd_pipeline_free(sd9);
    lm_sd_pipeline_free(xl9);
    lm_tensor_set_free(&ref);
    if (have_crop) lm_tensor_set_free(&crop);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mask_parts),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_resized),
        cmocka_unit_test(test_blur),
        cmocka_unit_test(test_reference),
        cmocka_unit_test(test_single_file),
        cmocka_unit_test(test_lanczos),
        cmocka_unit_test(test_crop_boxes),
        cmocka_unit_test(test_crop_reference),
        cmocka_unit_test(test_vulkan),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
