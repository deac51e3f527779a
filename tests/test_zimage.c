/* test_zimage.c - models/zimage.c (Z-Image's transformer), models/flowmatch.c
 * (FlowMatchEulerDiscreteScheduler and the pipelines' sigma and mu helpers)
 * and models/vae.c on Z-Image's 16-channel VAE, against diffusers
 * 0.40.0.dev0 (tests/ref/gen_dit.py wrote tests/ref/dit/ on the GPU
 * machine's CPU: diffusers' own tiny test configurations).
 *
 * Transformer, f32, within 1e-4 of the largest reference value, on the CPU
 * and on a Vulkan device (lavapipe) where there is one: one call on two
 * images with captions of 7 and 40 tokens (padded to 32 and 64 with the
 * caption pad token, the unified sequences to the longest with a key mask),
 * and the second item alone (no mask); bf16 and f16 runs compared
 * loosely with the f32 one.  Scheduler: Z-Image's sigmas and timesteps for 5
 * (steps, image tokens) pairs and Klein's for 4, from the fixtures'
 * scheduler_config.json; the mu helpers and the dynamic shift against
 * values worked out by hand.  VAE: decode and encode mean.  Denoising
 * steps: one transformer call and one scheduler step from each reference
 * latent give the next (img.nocfg), when the reference holds the caption
 * features of the pipeline's prompt (img.nocfg.cap); without them that
 * check says so and is skipped.  lm_zimage_load_from from a parsed config
 * and a tensor set (consumed, the file named in errors); the same weights
 * in the original layout (single files, ComfyUI-GGUF: prefixed, renamed,
 * fused qkv, with norm_final) renamed by lm_zimage_rename_original, in f32
 * and with Q8_0 qkv (loosely).  Errors: a
 * missing, an unexpected and a wrongly shaped weight, the Omni config,
 * refused scheduler keys. */
#include <cjson/cJSON.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>
#include "testutil.h"
#include "core/io/io.h"
#include "models/flowmatch.h"
#include "models/vae.h"
#include "models/zimage.h"

#define DIT_DIR "tests/ref/dit/"
#define ZDIR DIT_DIR "zimage/"
#define REL_TOL 1e-4

static lm_tensor_set ref, kref;
static char tmpdir[64];

static lm_array *ref_get(const char *name) { return tu_set_get(&ref, name); }

/* max |got - want| / max |want|, asserted <= tol */
static double check_tol(lm_array *got, lm_array *want, const char *name, const char *what, double tol)
{
    double err, rel = tu_rel_err(got, want, &err);
    printf("  %-28s %-22s max abs err %.3g, relative %.3g\n", name, what, err, rel);
    assert_true(rel <= tol);
    return rel;
}

static lm_zimage *zi_load(const char *dir, lm_dtype dt, lm_device *dev)
{
    lm_zimage *m = lm_zimage_load(dir, NULL, dt, dev);
    if (!m) fprintf(stderr, "%s\n", lm_error_message());
    assert_non_null(m);
    return m;
}

/* tr.x [B, C, 1, H, W] as [B, C, H, W] */
static lm_array *ref_x(void)
{
    lm_array *x = ref_get("tr.x");
    int64_t s[4] = {x->shape[0], x->shape[1], x->shape[3], x->shape[4]};
    return lm_reshape(x, 4, s);
}

/* item i of y [B, C, H, W] as diffusers' [C, 1, H, W] */
static lm_array *item(lm_array *y, int64_t i)
{
    lm_array *s = lm_slice(y, 0, i, i + 1, 1);
    int64_t sh[4] = {y->shape[1], 1, y->shape[2], y->shape[3]};
    lm_array *r = lm_reshape(s, 4, sh);
    lm_array_release(s);
    return r;
}

static lm_array *forward_ref(lm_zimage *m)
{
    lm_array *x = ref_x();
    lm_array *caps[2] = {ref_get("tr.cap0"), ref_get("tr.cap1")};
    lm_array *y = lm_zimage_forward(m, x, ref_get("tr.t"), 2, caps);
    if (!y) fprintf(stderr, "%s\n", lm_error_message());
    assert_non_null(y);
    assert_int_equal(lm_array_eval(y), LM_OK);
    lm_array_release(x);
    return y;
}

static void run_transformer(lm_device *dev)
{
    char what[64];
    int64_t live = lm_array_live_count();
    lm_zimage *m = zi_load(ZDIR "transformer", LM_F32, dev);
    const lm_zimage_config *c = lm_zimage_get_config(m);
    assert_int_equal(c->dim, 32);
    assert_int_equal(c->ffn_dim, 85);
    assert_int_equal(c->patch_size, 2);
    lm_array *y = forward_ref(m);
    snprintf(what, sizeof what, "f32 %s", dev->spec);
    for (int i = 0; i < 2; i++) {
        char name[16];
        snprintf(name, sizeof name, "tr.out%d", i);
        lm_array *yi = item(y, i);
        check_tol(yi, ref_get(name), name, what, REL_TOL);
        lm_array_release(yi);
    }
    /* the second item alone: no key mask anywhere */
    lm_array *x = ref_x();
    lm_array *x1 = lm_slice(x, 0, 1, 2, 1), *t1 = lm_slice(ref_get("tr.t"), 0, 1, 2, 1);
    lm_array *cap1 = ref_get("tr.cap1");
    lm_array *y1 = lm_zimage_forward(m, x1, t1, 1, &cap1);
    lm_array *y1i = item(y1, 0);
    snprintf(what, sizeof what, "alone f32 %s", dev->spec);
    check_tol(y1i, ref_get("tr.out1"), "tr.out1", what, REL_TOL);
    lm_array_release(y1i);
    lm_array_release(y1);
    lm_array_release(x1);
    lm_array_release(t1);
    lm_array_release(x);

    /* bf16 and f16 weights and activations: near the f32 result */
    static const lm_dtype half[2] = {LM_BF16, LM_F16};
    for (int k = 0; k < 2; k++) {
        lm_zimage *h = zi_load(ZDIR "transformer", half[k], dev);
        assert_int_equal(lm_zimage_dtype(h), half[k]);
        lm_array *yh = forward_ref(h);
        assert_int_equal(yh->dtype, half[k]);
        snprintf(what, sizeof what, "%s vs f32 %s", lm_dtype_name(half[k]), dev->spec);
        check_tol(yh, y, "tr.out (both)", what, k ? 1e-2 : 5e-2);
        lm_array_release(yh);
        lm_zimage_free(h);
    }
    lm_array_release(y);
    lm_zimage_free(m);
    /* every array the loads and calls made is gone */
    assert_int_equal(lm_array_live_count(), live);
}

static void test_transformer_cpu(void **state)
{
    (void)state;
    run_transformer(lm_device_cpu());
}

static void test_transformer_vulkan(void **state)
{
    (void)state;
    lm_device *vk = tu_vulkan_or_skip("no Vulkan device: the Vulkan half skipped");
    run_transformer(vk);
}

/* ---- scheduler ---- */

static lm_array *floats(const float *v, int64_t n)
{
    return lm_from_data(1, &n, LM_F32, v, lm_device_cpu());
}

/* the schedule of one (steps, seq) reference of set r, with sigmas from
 * fill and mu from the family's helper */
static void check_schedule(lm_tensor_set *r, const char *family, const lm_flowmatch_config *c, int steps,
                           int seq)
{
    float *sg = malloc(sizeof *sg * (size_t)steps);
    double mu;
    if (!strcmp(family, "zimage")) {
        lm_flowmatch_zimage_sigmas(steps, sg);
        mu = lm_flowmatch_zimage_mu(seq, (double)c->base_image_seq_len, (double)c->max_image_seq_len,
                                    c->base_shift, c->max_shift);
    } else {
        lm_flowmatch_klein_sigmas(steps, sg);
        mu = lm_flowmatch_klein_mu(seq, steps);
    }
    lm_flowmatch_schedule s;
    assert_int_equal(lm_flowmatch_set_timesteps(c, steps, sg, true, mu, &s), LM_OK);
    free(sg);
    char name[64], what[48];
    snprintf(what, sizeof what, "%s", family);
    lm_array *a = floats(s.sigmas, steps + 1), *b = floats(s.timesteps, steps);
    snprintf(name, sizeof name, "sched.%d.%d.sigmas", steps, seq);
    check_tol(a, tu_set_get(r, name), name, what, REL_TOL);
    snprintf(name, sizeof name, "sched.%d.%d.timesteps", steps, seq);
    check_tol(b, tu_set_get(r, name), name, what, REL_TOL);
    lm_array_release(a);
    lm_array_release(b);
    lm_flowmatch_schedule_free(&s);
}

static void test_scheduler(void **state)
{
    (void)state;
    lm_flowmatch_config zc, kc;
    assert_int_equal(lm_flowmatch_config_load(ZDIR "scheduler", &zc), LM_OK);
    assert_int_equal(lm_flowmatch_config_load(DIT_DIR "klein/scheduler", &kc), LM_OK);
    static const int zs[][2] = {{4, 64}, {8, 4096}, {9, 1024}, {1, 256}, {50, 16384}};
    static const int ks[][2] = {{4, 64}, {4, 4096}, {28, 1024}, {50, 8192}};
    for (size_t i = 0; i < sizeof zs / sizeof *zs; i++) check_schedule(&ref, "zimage", &zc, zs[i][0], zs[i][1]);
    for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) check_schedule(&kref, "klein", &kc, ks[i][0], ks[i][1]);

    /* Klein's dynamic shift with its mu, when the fixture has it
     * (sched_dyn.STEPS.SEQ.*: FlowMatchEulerDiscreteScheduler(
     * use_dynamic_shifting=True, shift=3.0) with compute_empirical_mu) */
    int dyn = 0;
    lm_flowmatch_config kd = kc;
    kd.use_dynamic_shifting = true;
    kd.shift = 3.0;
    for (int i = 0; i < kref.count; i++) {
        int steps, seq, end = 0;
        /* %n: the whole name matched (sscanf counts conversions, not the
         * literal ".sigmas" after them, which a ".timesteps" name fails) */
        if (sscanf(kref.names[i], "sched_dyn.%d.%d.sigmas%n", &steps, &seq, &end) != 2 || !end ||
            kref.names[i][end])
            continue;
        float *sk = malloc(sizeof *sk * (size_t)steps);
        lm_flowmatch_klein_sigmas(steps, sk);
        lm_flowmatch_schedule ds;
        assert_int_equal(lm_flowmatch_set_timesteps(&kd, steps, sk, true, lm_flowmatch_klein_mu(seq, steps), &ds),
                         LM_OK);
        free(sk);
        char name[64];
        lm_array *a = floats(ds.sigmas, steps + 1), *b = floats(ds.timesteps, steps);
        check_tol(a, kref.arrays[i], kref.names[i], "klein dynamic", REL_TOL);
        snprintf(name, sizeof name, "sched_dyn.%d.%d.timesteps", steps, seq);
        check_tol(b, tu_set_get(&kref, name), name, "klein dynamic", REL_TOL);
        lm_array_release(a);
        lm_array_release(b);
        lm_flowmatch_schedule_free(&ds);
        dyn++;
    }
    if (!dyn) printf("  klein_ref.safetensors has no sched_dyn.* (a dynamic-shift schedule): not compared\n");

    /* the mu helpers, from the pipelines' formulas in Python floats */
    assert_true(fabs(lm_flowmatch_zimage_mu(4096, 256, 4096, 0.5, 1.15) - 1.15) < 1e-12);
    assert_true(fabs(lm_flowmatch_zimage_mu(1024, 256, 4096, 0.5, 1.15) - 0.63) < 1e-12);
    assert_true(fabs(lm_flowmatch_klein_mu(8192, 50) - (0.00016927 * 8192 + 0.45666666)) < 1e-12);
    /* klein_mu(1024, 4): m200 = 0.62999314, m10 = 1.98781...; a * 4 + b */
    double m200 = 0.00016927 * 1024 + 0.45666666, m10 = 8.73809524e-05 * 1024 + 1.89833333;
    double a = (m200 - m10) / 190.0;
    assert_true(fabs(lm_flowmatch_klein_mu(1024, 4) - (a * 4 + m200 - 200.0 * a)) < 1e-12);

    /* dynamic shifting (exponential): sigma' = e^mu / (e^mu + 1/sigma - 1);
     * mu = ln 3: sigma 0.5 -> 0.75, 0.25 -> 0.5 */
    lm_flowmatch_config d = zc;
    d.use_dynamic_shifting = true;
    float sg[2] = {0.5f, 0.25f};
    lm_flowmatch_schedule s;
    assert_int_equal(lm_flowmatch_set_timesteps(&d, 2, sg, false, 0, &s), LM_ERR_ARG);
    tu_expect_message("needs mu", NULL);
    assert_int_equal(lm_flowmatch_set_timesteps(&d, 2, sg, true, log(3.0), &s), LM_OK);
    assert_true(fabsf(s.sigmas[0] - 0.75f) < 1e-6f && fabsf(s.sigmas[1] - 0.5f) < 1e-6f && s.sigmas[2] == 0);
    assert_true(fabsf(s.timesteps[0] - 750.0f) < 1e-3f);
    lm_flowmatch_schedule_free(&s);
    /* a static shift of 3 (Z-Image-Turbo's): 3s / (1 + 2s); 0.5 -> 0.75 */
    lm_flowmatch_config t3 = zc;
    t3.shift = 3.0;
    assert_int_equal(lm_flowmatch_set_timesteps(&t3, 2, sg, false, 0, &s), LM_OK);
    assert_true(fabsf(s.sigmas[0] - 0.75f) < 1e-6f && fabsf(s.sigmas[1] - 0.5f) < 1e-6f);
    lm_flowmatch_schedule_free(&s);
    /* no sigmas given: linspace(1000, 1, n) / 1000 */
    assert_int_equal(lm_flowmatch_set_timesteps(&zc, 4, NULL, false, 0, &s), LM_OK);
    assert_true(s.sigmas[0] == 1.0f && fabsf(s.sigmas[3] - 0.001f) < 1e-7f && fabsf(s.sigmas[1] - 0.667f) < 1e-6f);
    lm_flowmatch_schedule_free(&s);

    /* the step: x + (sigma_next - sigma) * v */
    float xv[3] = {1, 2, 3}, vv[3] = {10, -10, 0.5f}, sg2[2] = {1.0f, 0.5f};
    assert_int_equal(lm_flowmatch_set_timesteps(&zc, 2, sg2, false, 0, &s), LM_OK);
    lm_array *x = floats(xv, 3), *v = floats(vv, 3);
    lm_array *y = lm_flowmatch_step(&s, 0, x, v);
    float got[3];
    assert_int_equal(lm_array_read(y, got, LM_F32), LM_OK);
    assert_true(got[0] == -4.0f && got[1] == 7.0f && got[2] == 2.75f);
    lm_array_release(y);
    assert_null(lm_flowmatch_step(&s, 2, x, v));
    tu_expect_message("flow-match step 2: the schedule has 2 steps", NULL);
    lm_array_release(x);
    lm_array_release(v);
    lm_flowmatch_schedule_free(&s);
}

static void expect_sched_error(const char *json, const char *needle)
{
    cJSON *j = cJSON_Parse(json);
    lm_flowmatch_config c;
    assert_int_not_equal(lm_flowmatch_config_parse(j, "scheduler_config.json", &c), LM_OK);
    tu_expect_message(needle, "scheduler_config.json");
    cJSON_Delete(j);
}

static void test_scheduler_errors(void **state)
{
    (void)state;
    expect_sched_error("{\"use_karras_sigmas\": true}", "use_karras_sigmas is true");
    expect_sched_error("{\"use_beta_sigmas\": true}", "use_beta_sigmas is true");
    expect_sched_error("{\"use_exponential_sigmas\": true}", "use_exponential_sigmas is true");
    expect_sched_error("{\"stochastic_sampling\": true}", "stochastic_sampling is true");
    expect_sched_error("{\"time_shift_type\": \"cosine\"}", "time_shift_type \"cosine\"");
    expect_sched_error("{\"_class_name\": \"EulerDiscreteScheduler\"}", "EulerDiscreteScheduler");
}

/* ---- the denoising loop, step by step ---- */

static void run_steps(lm_device *dev)
{
    if (lm_tensor_set_find(&ref, "img.nocfg.cap") < 0) {
        printf("zimage_ref.safetensors has no img.nocfg.cap (the caption features of \"dance monkey\" at "
               "max_sequence_length 32): the step-by-step loop check skipped\n");
        skip();
    }
    lm_zimage *m = zi_load(ZDIR "transformer", LM_F32, dev);
    lm_flowmatch_config c;
    assert_int_equal(lm_flowmatch_config_load(ZDIR "scheduler", &c), LM_OK);
    lm_array *lat = ref_get("img.nocfg.latents");
    int steps = 4;
    int64_t seq = (lat->shape[2] / 2) * (lat->shape[3] / 2);
    float sg[4];
    lm_flowmatch_zimage_sigmas(steps, sg);
    lm_flowmatch_schedule s;
    assert_int_equal(lm_flowmatch_set_timesteps(&c, steps, sg, true,
                                                lm_flowmatch_zimage_mu((double)seq, (double)c.base_image_seq_len,
                                                                       (double)c.max_image_seq_len, c.base_shift,
                                                                       c.max_shift), &s), LM_OK);
    lm_array *cap = ref_get("img.nocfg.cap");
    char what[48];
    snprintf(what, sizeof what, "step %s", dev->spec);
    for (int i = 0; i < steps; i++) {
        char prev[32], next[32];
        snprintf(prev, sizeof prev, i ? "img.nocfg.step%d" : "img.nocfg.latents", i - 1);
        snprintf(next, sizeof next, "img.nocfg.step%d", i);
        float tv = (1000.0f - s.timesteps[i]) / 1000.0f;
        int64_t one = 1;
        lm_array *t = lm_from_data(1, &one, LM_F32, &tv, dev);
        lm_array *x = ref_get(prev);
        lm_array *out = lm_zimage_forward(m, x, t, 1, &cap);
        lm_array *v = lm_unary(LM_OP_NEG, out);
        lm_array *y = lm_flowmatch_step(&s, i, x, v);
        check_tol(y, ref_get(next), next, what, REL_TOL);
        lm_array_release(y);
        lm_array_release(v);
        lm_array_release(out);
        lm_array_release(t);
    }
    lm_flowmatch_schedule_free(&s);
    lm_zimage_free(m);
}

static void test_steps_cpu(void **state)
{
    (void)state;
    run_steps(lm_device_cpu());
}

static void test_steps_vulkan(void **state)
{
    (void)state;
    lm_device *vk = tu_vulkan_or_skip("no Vulkan device: the Vulkan half skipped");
    run_steps(vk);
}

/* ---- the VAE (AutoencoderKL, 16 latent channels) ---- */

static void run_vae(lm_device *dev)
{
    lm_vae *v = lm_vae_load(ZDIR "vae", NULL, LM_F32, dev);
    if (!v) fprintf(stderr, "%s\n", lm_error_message());
    assert_non_null(v);
    const lm_vae_config *c = lm_vae_get_config(v);
    assert_int_equal(c->latent_channels, 16);
    assert_true(fabs(c->scaling_factor - 0.3611) < 1e-12 && fabs(c->shift_factor - 0.1159) < 1e-12);
    char what[48];
    snprintf(what, sizeof what, "vae %s", dev->spec);
    lm_array *dec = lm_vae_decode(v, ref_get("vae.z"));
    check_tol(dec, ref_get("vae.decode"), "vae.decode", what, REL_TOL);
    lm_array_release(dec);
    lm_array *mean = NULL, *logvar = NULL;
    assert_int_equal(lm_vae_encode(v, ref_get("vae.image"), &mean, &logvar), LM_OK);
    check_tol(mean, ref_get("vae.encode_mean"), "vae.encode_mean", what, REL_TOL);
    lm_array_release(mean);
    lm_array_release(logvar);
    lm_vae_free(v);
}

static void test_vae_cpu(void **state)
{
    (void)state;
    run_vae(lm_device_cpu());
}

static void test_vae_vulkan(void **state)
{
    (void)state;
    lm_device *vk = tu_vulkan_or_skip("no Vulkan device: the Vulkan half skipped");
    run_vae(vk);
}

/* ---- load errors ---- */

static void expect_load_error(const char *needle1, const char *needle2)
{
    assert_null(lm_zimage_load(tmpdir, NULL, LM_F32, lm_device_cpu()));
    tu_expect_message(needle1, needle2);
}

static void write_weights(const char *drop, const char *extra)
{
    lm_tensor_set s = {0};
    assert_int_equal(lm_load_safetensors(ZDIR "transformer/diffusion_pytorch_model.safetensors", &s), LM_OK);
    char p[128];
    snprintf(p, sizeof p, "%s/diffusion_pytorch_model.safetensors", tmpdir);
    tu_save_edited(&s, p, drop, extra);
    lm_tensor_set_free(&s);
}

static void test_errors(void **state)
{
    (void)state;
    char p[128];
    snprintf(p, sizeof p, "%s/config.json", tmpdir);
    tu_copy_file(ZDIR "transformer/config.json", p);
    write_weights("layers.1.attention.norm_k.weight", NULL);
    expect_load_error("missing weight layers.1.attention.norm_k.weight [16]", "diffusion_pytorch_model");
    write_weights(NULL, "layers.2.extra");
    expect_load_error("unexpected weight layers.2.extra", "diffusion_pytorch_model");
    write_weights(NULL, NULL);
    lm_zimage *ok = lm_zimage_load(tmpdir, NULL, LM_F32, lm_device_cpu());
    assert_non_null(ok);
    /* inputs that do not fit */
    int64_t xs[4] = {1, 16, 7, 8}, cs[2] = {5, 16};
    lm_array *x = lm_zeros(4, xs, LM_F32, lm_device_cpu()), *cap = lm_zeros(2, cs, LM_F32, lm_device_cpu());
    int64_t one = 1;
    lm_array *t = lm_zeros(1, &one, LM_F32, lm_device_cpu());
    assert_null(lm_zimage_forward(ok, x, t, 1, &cap));
    tu_expect_message("x [1,16,7,8]", "multiples of 2");
    lm_zimage_free(ok);
    lm_array_release(x);
    lm_array_release(cap);
    lm_array_release(t);
    /* the config disagrees with the weights: a wrong shape */
    size_t n;
    char *cfg = tu_slurp(ZDIR "transformer/config.json", &n);
    char *edit = tu_replace(cfg, "\"cap_feat_dim\": 16", "\"cap_feat_dim\": 24");
    tu_spit(p, edit, strlen(edit));
    free(edit);
    expect_load_error("cap_embedder.0.weight has shape [16], the config needs [24]", "diffusion_pytorch_model");
    /* the Omni variant */
    edit = tu_replace(cfg, "\"siglip_feat_dim\": null", "\"siglip_feat_dim\": 24");
    tu_spit(p, edit, strlen(edit));
    free(edit);
    expect_load_error("siglip_feat_dim", "config.json");
    edit = tu_replace(cfg, "\"axes_dims\": [\n    8,", "\"axes_dims\": [\n    10,");
    tu_spit(p, edit, strlen(edit));
    free(edit);
    expect_load_error("axes_dims sum to 18, the head size dim / n_heads is 16", "config.json");
    free(cfg);
}

/* lm_zimage_load_from: a parsed config and a tensor set, consumed */
static void test_load_from(void **state)
{
    (void)state;
    size_t n;
    char *text = tu_slurp(ZDIR "transformer/config.json", &n);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    lm_tensor_set s = {0};
    assert_int_equal(lm_load_safetensors(ZDIR "transformer/diffusion_pytorch_model.safetensors", &s), LM_OK);
    lm_zimage *m = lm_zimage_load_from(j, &s, "z.safetensors", LM_F32, lm_device_cpu());
    if (!m) fprintf(stderr, "%s\n", lm_error_message());
    assert_non_null(m);
    assert_int_equal(s.count, 0);
    lm_array *y = forward_ref(m);
    lm_array *y0 = item(y, 0);
    check_tol(y0, ref_get("tr.out0"), "tr.out0", "load_from cpu", REL_TOL);
    lm_array_release(y0);
    lm_array_release(y);
    lm_zimage_free(m);
    /* a weight missing: the error names the file given */
    assert_int_equal(lm_load_safetensors(ZDIR "transformer/diffusion_pytorch_model.safetensors", &s), LM_OK);
    int at = lm_tensor_set_find(&s, "x_pad_token");
    assert_true(at >= 0);
    /* drop it: the last entry takes its place */
    lm_array_release(s.arrays[at]);
    free(s.names[at]);
    s.count--;
    s.arrays[at] = s.arrays[s.count];
    s.names[at] = s.names[s.count];
    assert_null(lm_zimage_load_from(j, &s, "z.safetensors", LM_F32, lm_device_cpu()));
    tu_expect_message("z.safetensors: missing weight x_pad_token [1,32]", NULL);
    assert_int_equal(s.count, 0);
    cJSON_Delete(j);
}

/* The fixture's weights in the original Z-Image layout (as single files and
 * ComfyUI-GGUF carry them): prefixed, renamed, q/k/v fused into qkv, plus
 * the norm_final.weight diffusers drops; with quant set, every fused qkv
 * is Q8_0. */
static void original_layout(lm_tensor_set *out, bool quant)
{
    static const char *from[] = {"all_final_layer.2-1.", "all_x_embedder.2-1.", ".attention.to_out.0.",
                                 ".attention.norm_k.", ".attention.norm_q."};
    static const char *to[] = {"final_layer.", "x_embedder.", ".attention.out.", ".attention.k_norm.",
                               ".attention.q_norm."};
    lm_tensor_set s = {0};
    assert_int_equal(lm_load_safetensors(ZDIR "transformer/diffusion_pytorch_model.safetensors", &s), LM_OK);
    memset(out, 0, sizeof *out);
    out->names = calloc((size_t)s.count + 1, sizeof *out->names);
    out->arrays = calloc((size_t)s.count + 1, sizeof *out->arrays);
    for (int i = 0; i < s.count; i++) {
        char name[256], *at;
        snprintf(name, sizeof name, "%s", s.names[i]);
        if (strstr(name, ".attention.to_k.") || strstr(name, ".attention.to_v.")) continue;
        lm_array *a = lm_array_retain(s.arrays[i]);
        if ((at = strstr(name, ".attention.to_q."))) {
            char kn[256], vn[256];
            snprintf(kn, sizeof kn, "%.*s.attention.to_k.weight", (int)(at - name), name);
            snprintf(vn, sizeof vn, "%.*s.attention.to_v.weight", (int)(at - name), name);
            lm_array *three[3] = {a, tu_set_get(&s, kn), tu_set_get(&s, vn)};
            lm_array *f = lm_concat(3, three, 0);
            lm_array_release(a);
            a = f;
            if (quant) {
                assert_int_equal(lm_array_eval(a), LM_OK);
                lm_array *qa = lm_quantize(a, LM_Q8_0);
                assert_non_null(qa);
                lm_array_release(a);
                a = qa;
            }
            snprintf(at, sizeof name - (size_t)(at - name), ".attention.qkv.weight");
        }
        for (int r = 0; r < 5; r++) {
            char *hit = strstr(name, from[r]);
            if (!hit) continue;
            char tail[256];
            snprintf(tail, sizeof tail, "%s", hit + strlen(from[r]));
            snprintf(hit, sizeof name - (size_t)(hit - name), "%s%s", to[r], tail);
        }
        char full[300];
        snprintf(full, sizeof full, "model.diffusion_model.%s", name);
        out->names[out->count] = strdup(full);
        out->arrays[out->count++] = a;
    }
    out->names[out->count] = strdup("model.diffusion_model.norm_final.weight");
    out->arrays[out->count++] = lm_array_retain(tu_set_get(&s, "x_pad_token"));
    lm_tensor_set_free(&s);
}

static void test_original_layout(void **state)
{
    (void)state;
    size_t n;
    char *text = tu_slurp(ZDIR "transformer/config.json", &n);
    cJSON *j = cJSON_Parse(text);
    free(text);
    for (int quant = 0; quant < 2; quant++) {
        lm_tensor_set s;
        original_layout(&s, quant);
        assert_true(lm_zimage_is_original(&s));
        assert_int_equal(lm_tensor_set_find(&s, "model.diffusion_model.layers.0.attention.to_q.weight"), -1);
        assert_int_equal(lm_zimage_rename_original(&s, "orig.safetensors"), LM_OK);
        assert_false(lm_zimage_is_original(&s));
        assert_true(lm_tensor_set_find(&s, "layers.1.attention.qkv.weight") >= 0);
        assert_true(lm_tensor_set_find(&s, "all_final_layer.2-1.adaLN_modulation.1.weight") >= 0);
        assert_true(lm_tensor_set_find(&s, "noise_refiner.0.attention.norm_k.weight") >= 0);
        assert_int_equal(lm_tensor_set_find(&s, "norm_final.weight"), -1);
        lm_zimage *m = lm_zimage_load_from(j, &s, "orig.safetensors", LM_F32, lm_device_cpu());
        if (!m) fprintf(stderr, "%s\n", lm_error_message());
        assert_non_null(m);
        lm_array *y = forward_ref(m);
        for (int i = 0; i < 2; i++) {
            char name[16];
            snprintf(name, sizeof name, "tr.out%d", i);
            lm_array *yi = item(y, i);
            /* Q8_0 qkv: a loose bound, the product is no longer f32's */
            check_tol(yi, ref_get(name), name, quant ? "original, q8_0 qkv" : "original layout", quant ? 3e-2 : REL_TOL);
            lm_array_release(yi);
        }
        lm_array_release(y);
        lm_zimage_free(m);
    }
    /* two keys onto one name */
    lm_tensor_set s;
    original_layout(&s, false);
    free(s.names[1]);
    s.names[1] = strdup("all_x_embedder.2-1.weight");
    assert_int_not_equal(lm_zimage_rename_original(&s, "orig.safetensors"), LM_OK);
    tu_expect_message("both name the weight all_x_embedder.2-1.weight", "orig.safetensors");
    lm_tensor_set_free(&s);
    cJSON_Delete(j);
}

static int setup(void **state)
{
    (void)state;
    if (tu_setup_models(DIT_DIR "zimage_ref.safetensors", &ref, tmpdir, sizeof tmpdir, "zimage")) return -1;
    if (lm_load_safetensors(DIT_DIR "klein_ref.safetensors", &kref) != LM_OK) {
        fprintf(stderr, "%s\n", lm_error_message());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    lm_tensor_set_free(&ref);
    lm_tensor_set_free(&kref);
    tu_tmpdir_remove(tmpdir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_transformer_cpu),
        cmocka_unit_test(test_transformer_vulkan),
        cmocka_unit_test(test_scheduler),
        cmocka_unit_test(test_scheduler_errors),
        cmocka_unit_test(test_steps_cpu),
        cmocka_unit_test(test_steps_vulkan),
        cmocka_unit_test(test_vae_cpu),
        cmocka_unit_test(test_vae_vulkan),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_load_from),
        cmocka_unit_test(test_original_layout),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
