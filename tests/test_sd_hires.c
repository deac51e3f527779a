/* test_sd_hires.c - models/sd_hires.c (A1111's hires fix) and the variation
 * seeds of models/sd_pipeline.c.
 *
 * Hires fix: tests/ref/gen_hires.py (run on the GPU machine) composed
 * diffusers' txt2img (output_type="latent") -> torch interpolate (A1111's
 * "Latent (nearest)" at 2x, "Latent" = bilinear at 1.5x) -> img2img from the
 * latents on the tiny SD 1.x folder, its draws recorded; Lumen's whole hires
 * run replays them through the noise hook and its images must be within
 * 1e-3 (f32, CPU; and on Vulkan where there is one).  The model upscaler
 * path (tests/ref/fixtures/tfjs, a tiny x2 TF.js model) must equal its
 * composition by hand (decode, upscale, resize, img2img) byte for byte.
 * Target sizes, A1111's names and the errors.
 *
 * Variation seeds: lm_sd_noise_slerp against tests/ref/hires/variation.json
 * (tests/ref/gen_variation.py: A1111's slerp in pure Python, both its
 * branches), and in generation: strength 0 is the plain image, strength 1
 * with variation seed S is seed S's image (DPM++ 2M draws nothing more), a
 * batch's images take subseed, subseed+1, and out-of-range values are
 * refused.  seed_resize_from: lm_sd_noise_paste against the same script's
 * Python transcription of A1111's paste (6 size pairs, exact); the image's
 * own size gives the plain image, another size another. */
#include <math.h>
#include <cjson/cJSON.h>
#include "test_sd_util.h"
#include "core/io/io.h"
#include "models/sd_hires.h"
#include "models/sd_pipeline.h"
#include "models/tfjs.h"
#include "models/vae.h"
#include "ops_nn.h"

#define DIR "tests/ref/diffusion/"
#define HIRES "tests/ref/hires/"
#define TOL 1e-3

static lm_sd_pipeline *sd1;

static void gen_opts(lm_sd_gen_opts *o)
{
    sd_gen_opts(o, "dpm++2m");
    o->width = o->height = 64;
}

/* ---- variation seeds ---- */

static void test_slerp_reference(void **state)
{
    (void)state;
    size_t n = 0;
    char *text = tu_slurp(HIRES "variation.json", &n);
    assert_non_null(text);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    const cJSON *shape = cJSON_GetObjectItem(j, "shape"), *low = cJSON_GetObjectItem(j, "low");
    int64_t C = (int64_t)cJSON_GetArrayItem(shape, 0)->valuedouble,
            H = (int64_t)cJSON_GetArrayItem(shape, 1)->valuedouble,
            W = (int64_t)cJSON_GetArrayItem(shape, 2)->valuedouble;
    int64_t count = C * H * W;
    assert_int_equal(cJSON_GetArraySize(low), count);
    float *lo = malloc(sizeof *lo * (size_t)count * 3), *hi = lo + count, *out = hi + count;
    assert_non_null(lo);
    for (int64_t i = 0; i < count; i++) lo[i] = (float)cJSON_GetArrayItem(low, (int)i)->valuedouble;
    int ncases = 0, lerps = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "cases")) {
        const cJSON *h = cJSON_GetObjectItem(c, "high"), *want = cJSON_GetObjectItem(c, "out");
        double val = cJSON_GetObjectItem(c, "val")->valuedouble;
        for (int64_t i = 0; i < count; i++) hi[i] = (float)cJSON_GetArrayItem(h, (int)i)->valuedouble;
        lm_sd_noise_slerp(val, lo, hi, C, H, W, out);
        double m = 0;
        for (int64_t i = 0; i < count; i++) {
            double d = fabs(out[i] - cJSON_GetArrayItem(want, (int)i)->valuedouble);
            if (!(d <= m)) m = d;
        }
        lerps += !strcmp(cJSON_GetObjectItem(c, "branch")->valuestring, "lerp");
        printf("  slerp %-20s val %.2f (%s): max abs error %.3g\n", cJSON_GetObjectItem(c, "name")->valuestring,
               val, cJSON_GetObjectItem(c, "branch")->valuestring, m);
        assert_true(m <= 1e-5);
        ncases++;
    }
    assert_true(ncases >= 10);
    assert_true(lerps >= 1 && lerps < ncases);
    free(lo);
    cJSON_Delete(j);
}

static void test_paste_reference(void **state)
{
    (void)state;
    size_t n = 0;
    char *text = tu_slurp(HIRES "variation.json", &n);
    assert_non_null(text);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    const cJSON *ps = cJSON_GetObjectItem(j, "paste_shape"), *c;
    int64_t C = (int64_t)cJSON_GetArrayItem(ps, 0)->valuedouble, H = (int64_t)cJSON_GetArrayItem(ps, 1)->valuedouble,
            W = (int64_t)cJSON_GetArrayItem(ps, 2)->valuedouble;
    int ncases = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "pastes")) {
        const cJSON *sz = cJSON_GetObjectItem(c, "small");
        int64_t sh = (int64_t)cJSON_GetArrayItem(sz, 0)->valuedouble, sw = (int64_t)cJSON_GetArrayItem(sz, 1)->valuedouble;
        float *small = malloc(sizeof *small * (size_t)(C * sh * sw)), *full = malloc(sizeof *full * (size_t)(C * H * W));
        assert_true(small && full);
        for (int64_t ch = 0; ch < C; ch++) {
            const cJSON *srow = cJSON_GetArrayItem(cJSON_GetObjectItem(c, "small_data"), (int)ch),
                        *frow = cJSON_GetArrayItem(cJSON_GetObjectItem(c, "full_data"), (int)ch);
            for (int64_t i = 0; i < sh * sw; i++) small[ch * sh * sw + i] = (float)cJSON_GetArrayItem(srow, (int)i)->valuedouble;
            for (int64_t i = 0; i < H * W; i++) full[ch * H * W + i] = (float)cJSON_GetArrayItem(frow, (int)i)->valuedouble;
        }
        lm_sd_noise_paste(small, sh, sw, full, C, H, W);
        int bad = 0;
        for (int64_t ch = 0; ch < C; ch++) {
            const cJSON *orow = cJSON_GetArrayItem(cJSON_GetObjectItem(c, "out"), (int)ch);
            for (int64_t i = 0; i < H * W; i++)
                bad += full[ch * H * W + i] != (float)cJSON_GetArrayItem(orow, (int)i)->valuedouble;
        }
        printf("  paste %lldx%lld into %lldx%lld: %d elements differ\n", (long long)sw, (long long)sh,
               (long long)W, (long long)H, bad);
        assert_int_equal(bad, 0);
        free(small);
        free(full);
        ncases++;
    }
    assert_int_equal(ncases, 6);
    cJSON_Delete(j);
}

static lm_array *variation(uint64_t seed, uint64_t subseed, double strength, int batch)
{
    lm_sd_gen_opts o;
    gen_opts(&o);
    o.steps = 3;
    o.seed = seed;
    o.batch = batch;
    o.subseed = subseed;
    o.subseed_strength = strength;
    return tu_must(lm_sd_generate(sd1, &o), "variation");
}

static void test_variation_generate(void **state)
{
    (void)state;
    lm_array *plain = variation(5, 0, 0, 1), *zero = variation(5, 9, 0, 1);
    lm_array *one = variation(5, 9, 1, 1), *nine = variation(9, 0, 0, 1), *half = variation(5, 9, 0.5, 1);
    assert_true(tu_same_bytes(plain, zero));
    assert_true(tu_same_bytes(one, nine));   /* DPM++ 2M draws nothing after the start */
    assert_false(tu_same_bytes(half, plain));
    assert_false(tu_same_bytes(half, nine));
    double e = tu_max_err(half, plain);
    printf("  variation 0.5 differs from the seed's image by %.3g\n", e);
    /* a batch: image i takes subseed + i */
    lm_array *b = variation(5, 9, 0.5, 2), *second = variation(6, 10, 0.5, 1);
    lm_array *b0 = lm_slice(b, 0, 0, 1, 1), *b1 = lm_slice(b, 0, 1, 2, 1);
    assert_true(tu_same_bytes(b0, half));
    assert_true(tu_same_bytes(b1, second));
    lm_array *arr[] = {plain, zero, one, nine, half, b, second, b0, b1};
    for (size_t i = 0; i < sizeof arr / sizeof *arr; i++) lm_array_release(arr[i]);
    /* seed_resize_from: the image's own size is the plain image; another differs */
    lm_sd_gen_opts r;
    gen_opts(&r);
    r.steps = 3;
    r.seed = 5;
    r.seed_resize_w = r.seed_resize_h = 64;
    lm_array *own = tu_must(lm_sd_generate(sd1, &r), "resize own"), *p5 = variation(5, 0, 0, 1);
    assert_true(tu_same_bytes(own, p5));
    r.seed_resize_w = 32;
    r.seed_resize_h = 48;
    lm_array *other = tu_must(lm_sd_generate(sd1, &r), "resize 32x48");
    assert_false(tu_same_bytes(other, p5));
    r.seed_resize_w = 0;
    assert_null(lm_sd_generate(sd1, &r));
    assert_non_null(strstr(lm_error_message(), "seed resize from 0x48"));
    lm_array_release(own);
    lm_array_release(p5);
    lm_array_release(other);
    /* refusals */
    lm_sd_gen_opts o;
    gen_opts(&o);
    o.subseed_strength = 1.5;
    assert_null(lm_sd_generate(sd1, &o));
    assert_non_null(strstr(lm_error_message(), "variation strength 1.5"));
    o.subseed_strength = 0.5;
    o.subseed = (uint64_t)1 << 63;
    assert_null(lm_sd_generate(sd1, &o));
    assert_non_null(strstr(lm_error_message(), "variation seed"));
}

/* ---- hires fix ---- */

typedef struct hook { lm_array *first; int calls; } hook;

static lm_status give(void *ctx, int k, int ndim, const int64_t *shape, lm_array **out)
{
    hook *h = ctx;
    h->calls++;
    *out = NULL;
    if (k == 0 && h->first) {
        *out = lm_reshape(h->first, ndim, shape);
        return *out ? LM_OK : lm_error_status();
    }
    return LM_OK;
}

static void run_case(lm_tensor_set *ref, const char *name, const char *upscaler, double scale, int steps,
                     double denoise, int64_t size)
{
    char key[64];
    lm_sd_gen_opts o;
    gen_opts(&o);
    o.latents = tu_set_get(ref, "latents");
    snprintf(key, sizeof key, "%s.noise", name);
    hook h = {tu_set_get(ref, key), 0};
    o.noise = give;
    o.noise_ctx = &h;
    lm_sd_hires_opts ho;
    lm_sd_hires_opts_init(&ho);
    ho.scale = scale;
    ho.steps = steps;
    ho.denoise = denoise;
    ho.upscaler = upscaler;
    lm_array *img = tu_must(lm_sd_generate_hires(sd1, &o, &ho), name);
    assert_int_equal(img->shape[2], size);
    assert_int_equal(img->shape[3], size);
    snprintf(key, sizeof key, "%s.image", name);
    double e = tu_max_err(img, tu_set_get(ref, key));
    printf("  hires %-8s %s x%g, %d steps, denoise %g: %lldx%lld, max abs error %.3g\n", name, upscaler,
           scale, steps, denoise, (long long)size, (long long)size, e);
    assert_true(e <= TOL);
    lm_array_release(img);
}

static void hires_ref(lm_sd_pipeline *p)
{
    lm_tensor_set ref;
    if (lm_load_safetensors(HIRES "ref_hires.safetensors", &ref) != LM_OK)
        fail_msg("%s (tests/ref/gen_hires.py writes it)", lm_error_message());
    lm_sd_pipeline *keep = sd1;
    sd1 = p;
    /* the base latents first: txt2img with output_type="latent" */
    lm_sd_gen_opts o;
    gen_opts(&o);
    o.latents = tu_set_get(&ref, "latents");
    lm_array *lat = tu_must(lm_sd_generate_latents(p, &o), "latents");
    double e = tu_max_err(lat, tu_set_get(&ref, "base_latents"));
    printf("  base latents max abs error %.3g\n", e);
    assert_true(e <= TOL);
    lm_array_release(lat);
    /* 16x16 latents: 32x32 pixels through the tiny VAE (scale 2) */
    run_case(&ref, "nearest", "latent-nearest", 2, 4, 0.5, 64);
    run_case(&ref, "bilinear", "latent", 1.5, 6, 0.55, 48);
    sd1 = keep;
    lm_tensor_set_free(&ref);
}

static void test_hires_reference(void **state)
{
    (void)state;
    hires_ref(sd1);
}

static void test_hires_vulkan(void **state)
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
    lm_sd_pipeline *p = lm_sd_pipeline_load(DIR "sd1", &lo);
    if (!p) fprintf(stderr, "sd1 on Vulkan: %s\n", lm_error_message());
    assert_non_null(p);
    printf("  on %s:\n", vk->spec);
    hires_ref(p);
    lm_sd_pipeline_free(p);
    lm_device_set_default(was);
}

/* the model upscaler path equals its composition by hand */
static void test_hires_model(void **state)
{
    (void)state;
    const char *model = "tests/ref/fixtures/tfjs/model.json";
    lm_sd_gen_opts o;
    gen_opts(&o);
    o.seed = 3;
    o.steps = 3;
    lm_sd_hires_opts ho;
    lm_sd_hires_opts_init(&ho);
    ho.scale = 1.5;
    ho.steps = 4;
    ho.denoise = 0.5;
    ho.upscaler = model;
    lm_array *img = tu_must(lm_sd_generate_hires(sd1, &o, &ho), "hires model");
    assert_int_equal(img->shape[2], 96);
    assert_int_equal(img->shape[3], 96);
    /* by hand */
    lm_array *base = tu_must(lm_sd_generate(sd1, &o), "base");
    lm_tfjs_found f;
    assert_int_equal(lm_tfjs_find(model, 2, &f), LM_OK);
    lm_tfjs_model *m = lm_tfjs_load(f.path, lm_device_cpu());
    assert_non_null(m);
    lm_upscale_opts uo;
    lm_upscale_opts_init(&uo);
    uo.range = f.range;
    lm_array *sq = lm_squeeze(base, 0), *up = tu_must(lm_tfjs_upscale(m, sq, &uo), "upscale");
    lm_array *u4 = lm_unsqueeze(up, 0);
    int64_t size[2] = {96, 96};
    lm_array *rs = lm_upsample(u4, size, NULL, LM_UPSAMPLE_BILINEAR, false), *cl = lm_clamp(rs, 0, 1);
    lm_sd_gen_opts two = o;
    two.width = two.height = 0;
    two.steps = 4;
    two.strength = 0.5;
    two.init = cl;
    lm_array *want = tu_must(lm_sd_generate(sd1, &two), "img2img");
    assert_true(tu_same_bytes(img, want));
    lm_array *arr[] = {img, base, sq, up, u4, rs, cl, want};
    for (size_t i = 0; i < sizeof arr / sizeof *arr; i++) lm_array_release(arr[i]);
    lm_tfjs_free(m);
}

static void test_hires_target(void **state)
{
    (void)state;
    lm_sd_hires_opts h;
    lm_sd_hires_opts_init(&h);
    int64_t w, hh;
    h.scale = 1.5;
    assert_int_equal(lm_sd_hires_target(&h, 512, 768, 8, &w, &hh), LM_OK);
    assert_int_equal(w, 768);
    assert_int_equal(hh, 1152);
    h.scale = 1.3;   /* 665.6 -> 665 -> 664 as A1111's target // 8 */
    assert_int_equal(lm_sd_hires_target(&h, 512, 512, 8, &w, &hh), LM_OK);
    assert_int_equal(w, 664);
    h.width = 1024;  /* the other side keeps the aspect */
    assert_int_equal(lm_sd_hires_target(&h, 512, 768, 8, &w, &hh), LM_OK);
    assert_int_equal(w, 1024);
    assert_int_equal(hh, 1536);
    h.width = 0;
    h.scale = 0;
    assert_int_not_equal(lm_sd_hires_target(&h, 512, 512, 8, &w, &hh), LM_OK);
    assert_non_null(strstr(lm_error_message(), "scale 0"));
    h.scale = 2;
    h.denoise = 0;
    assert_int_not_equal(lm_sd_hires_target(&h, 512, 512, 8, &w, &hh), LM_OK);
    assert_non_null(strstr(lm_error_message(), "denoise"));
    assert_string_equal(lm_sd_hires_upscaler_a1111("latent"), "Latent");
    assert_string_equal(lm_sd_hires_upscaler_a1111("latent-nearest"), "Latent (nearest)");
    assert_string_equal(lm_sd_hires_upscaler_a1111("esrgan-thick"), "esrgan-thick");
    /* a denoise that leaves no step, an init image, a missing upscaler */
    lm_sd_gen_opts o;
    gen_opts(&o);
    lm_sd_hires_opts_init(&h);
    h.steps = 2;
    h.denoise = 0.3;
    assert_null(lm_sd_generate_hires(sd1, &o, &h));
    assert_non_null(strstr(lm_error_message(), "hires fix: strength 0.3 of 2 steps"));
    lm_sd_hires_opts_init(&h);
    h.upscaler = "no-such-upscaler";
    o.steps = 1;
    assert_null(lm_sd_generate_hires(sd1, &o, &h));
    printf("  %s\n", lm_error_message());
    assert_non_null(strstr(lm_error_message(), "no-such-upscaler"));
}

static int setup(void **state)
{
    (void)state;
    if (lm_init() != LM_OK) return -1;
    lm_device_set_default(lm_device_cpu());
    lm_sd_load_opts o;
    lm_sd_load_opts_init(&o);
    o.dtype = LM_F32;
    o.device = lm_device_cpu();
    o.vae_tiling = LM_VAE_TILING_OFF;   /* as diffusers without enable_tiling() */
    if (!(sd1 = lm_sd_pipeline_load(DIR "sd1", &o))) {
        fprintf(stderr, "%s\n", lm_error_message());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    lm_sd_pipeline_free(sd1);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slerp_reference),
        cmocka_unit_test(test_paste_reference),
        cmocka_unit_test(test_variation_generate),
        cmocka_unit_test(test_hires_target),
        cmocka_unit_test(test_hires_model),
        cmocka_unit_test(test_hires_reference),
        cmocka_unit_test(test_hires_vulkan),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
