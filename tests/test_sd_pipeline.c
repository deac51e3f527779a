/* test_sd_pipeline.c - models/sd_pipeline.c against diffusers
 * (tests/ref/gen_diffusion.py wrote tests/ref/diffusion/ on the GPU machine:
 * tiny random SD 1.x, SD 2.x (v-prediction) and SDXL pipelines in the
 * diffusers layout and as single files, and diffusers' outputs for them,
 * every random draw recorded).
 *
 * Prompt embeddings (SD 1.x, SD 2.x, SDXL with the pooled output and the
 * zeros of a None negative prompt); whole 4-step 64x64 runs with cfg 7 from
 * diffusers' initial latents and its ancestral draws (fed through the noise
 * hook) for every sampler on SD 1.x (issue 37's Heun, DPM++ 2M SDE Karras,
 * DPM++ 2S a, UniPC, LCM and LMS from ref_sched_37), Euler on SD 2.x (v-prediction), Euler a
 * on SDXL, img2img (strength 0.5, DPM++ 2M, diffusers' VAE sample and
 * add_noise draws); the same runs from the single files.  f32 on the CPU:
 * the max abs error of each image is printed and must be <= 1e-3.
 * Determinism: a batch of two equals two single runs byte for byte, and 1
 * and 4 threads give the same bytes.  Errors: a missing model, a size not
 * divisible by 8, an unknown sampler, options out of models/family.h's
 * ranges; the family rows each folder loads as.  Files: a folder whose
 * scheduler config is DPM++'s as Python writes it (-Infinity), Python's
 * JSON extensions, and a FIFO in place of each file of a folder. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>
#include "test_sd_util.h"
#include "backends/cpu/cpu.h"
#include "core/io/io.h"
#include "models/clip_text.h"
#include "models/clip_tokenizer.h"
#include "models/diffusers_config.h"
#include "models/sd_pipeline.h"
#include "models/vae.h"

#define DIR "tests/ref/diffusion/"
#define TOL 1e-3


static lm_tensor_set ref;
static lm_sd_pipeline *sd1, *sd2, *sdxl;
static lm_tensor_set *cur_ref = &ref;   /* the fixture R() reads */

static lm_array *R(const char *name) { return tu_set_get(cur_ref, name); }

static lm_sd_pipeline *load_on(const char *path, const char *tok, lm_device *dev)
{
    lm_sd_load_opts o;
    lm_sd_load_opts_init(&o);
    o.dtype = LM_F32;
    o.device = dev;
    o.tokenizer_dir = tok;
    o.vae_tiling = LM_VAE_TILING_OFF;   /* as diffusers without enable_tiling() */
    lm_sd_pipeline *p = lm_sd_pipeline_load(path, &o);
    if (!p) fprintf(stderr, "%s: %s\n", path, lm_error_message());
    assert_non_null(p);
    return p;
}

static lm_sd_pipeline *load(const char *path, const char *tok) { return load_on(path, tok, lm_device_cpu()); }

/* diffusers' recorded draws: k >= 1 the k-th of ancestral [n,1,C,h,w];
 * k = 0 add_noise's; k = -1 the VAE sample's */
typedef struct draws { lm_array *ancestral, *first, *vae; } draws;

static lm_status take(void *ctx, int k, int ndim, const int64_t *shape, lm_array **out)
{
    draws *d = ctx;
    lm_array *src = k == 0 ? d->first : k < 0 ? d->vae : d->ancestral;
    *out = NULL;
    if (!src) return LM_OK;
    if (k >= 1) {
        assert_true(k <= src->shape[0]);
        lm_array *s = lm_slice(src, 0, k - 1, k, 1);
        *out = lm_reshape(s, ndim, shape);
        lm_array_release(s);
    } else {
        *out = lm_reshape(src, ndim, shape);
    }
    return *out ? LM_OK : lm_error_status();
}

/* a noise hook that only counts its calls (and gives the seeds' draws) */
static lm_status count_draws(void *ctx, int k, int ndim, const int64_t *shape, lm_array **out)
{
    (void)k;
    (void)ndim;
    (void)shape;
    ++*(int *)ctx;
    *out = NULL;
    return LM_OK;
}

static void gen_opts(lm_sd_gen_opts *o, const char *sampler)
{
    sd_gen_opts(o, sampler);
    o->width = o->height = 64;
}

/* one whole run from diffusers' latents and draws; returns the max error */
static double run_ref(lm_sd_pipeline *p, const char *model, const char *sampler, const char *key)
{
    char name[128];
    lm_sd_gen_opts o;
    gen_opts(&o, sampler);
    snprintf(name, sizeof name, "%s.latents", model);
    lm_array *lat = R(name);
    int64_t shape[4] = {1, lat->shape[lat->ndim - 3], lat->shape[lat->ndim - 2], lat->shape[lat->ndim - 1]};
    lm_array *l4 = lm_reshape(lat, 4, shape);
    o.latents = l4;
    snprintf(name, sizeof name, "%s.%s.noise", model, key);
    draws d = {lm_tensor_set_find(cur_ref, name) >= 0 ? R(name) : NULL, NULL, NULL};
    o.noise = take;
    o.noise_ctx = &d;
    lm_array *img = lm_sd_generate(p, &o);
    if (!img) fprintf(stderr, "%s %s: %s\n", model, sampler, lm_error_message());
    assert_non_null(img);
    snprintf(name, sizeof name, "%s.%s.image", model, key);
    double e = tu_max_err(img, R(name));
    printf("  %-5s %-16s image max abs error %.3g\n", model, sampler, e);
    lm_array_release(img);
    lm_array_release(l4);
    return e;
}

static void check_embeds(lm_sd_pipeline *p, const char *model)
{
    const char *texts[2] = {NEGATIVE, PROMPT};
    lm_array *e = NULL, *pooled = NULL;
    char name[128];
    assert_int_equal(lm_sd_encode_prompt(p, 2, texts, &e, &pooled), LM_OK);
    snprintf(name, sizeof name, "%s.prompt_embeds", model);
    double err = tu_max_err(e, R(name)), perr = 0;
    if (pooled) perr = tu_max_err(pooled, R("sdxl.pooled"));
    printf("  %-5s prompt embeds max abs error %.3g%s", model, err, pooled ? "" : "\n");
    if (pooled) printf(", pooled %.3g\n", perr);
    assert_true(err <= 1e-4 && perr <= 1e-4);
    lm_array_release(e);
    lm_array_release(pooled);
}

static void test_prompt_embeds(void **state)
{
    (void)state;
    check_embeds(sd1, "sd1");
    check_embeds(sd2, "sd2");
    check_embeds(sdxl, "sdxl");
    /* SDXL: negative_prompt=None is zeros (force_zeros_for_empty_prompt) */
    const char *none[1] = {NULL};
    lm_array *e = NULL, *pooled = NULL;
    assert_int_equal(lm_sd_encode_prompt(sdxl, 1, none, &e, &pooled), LM_OK);
    assert_true(tu_max_err(e, R("sdxl.empty_negative_embeds")) == 0);
    assert_true(tu_max_err(pooled, R("sdxl.empty_negative_pooled")) == 0);
    lm_array_release(e);
    lm_array_release(pooled);
}

/* clip_skip as diffusers: SD 1.x final_layer_norm(hidden_states[-(k+1)]),
 * SDXL hidden_states[-(k+2)] of both encoders */
static void test_clip_skip(void **state)
{
    (void)state;
    const char *texts[1] = {PROMPT};
    int32_t ids[77];
    int64_t n;
    lm_clip_tokenizer *tok = lm_sd_pipeline_tokenizer(sd1, 0);
    assert_int_equal(lm_clip_tokenizer_encode(tok, PROMPT, strlen(PROMPT), true, ids, &n, NULL), LM_OK);
    lm_clip_text_out out;
    assert_int_equal(lm_clip_text_forward(lm_sd_pipeline_text_encoder(sd1, 0), ids, 1, 77, &out), LM_OK);
    lm_array *want = lm_clip_text_final_norm(lm_sd_pipeline_text_encoder(sd1, 0),
                                             out.hidden_states[out.nhidden - 2]);
    lm_array *e0, *e1, *p;
    assert_int_equal(lm_sd_encode_prompt_skip(sd1, 1, texts, 0, &e0, &p), LM_OK);
    assert_int_equal(lm_sd_encode_prompt_skip(sd1, 1, texts, 1, &e1, &p), LM_OK);
    assert_true(tu_max_err(e1, want) == 0);
    assert_true(tu_max_err(e0, out.last_hidden_state) == 0);
    assert_true(tu_max_err(e0, e1) > 1e-3);
    lm_array_release(want);
    lm_array_release(e0);
    lm_array_release(e1);
    lm_clip_text_out_free(&out);
    /* more layers than the encoder has */
    assert_int_not_equal(lm_sd_encode_prompt_skip(sd1, 1, texts, 5, &e0, &p), LM_OK);
    assert_non_null(strstr(lm_error_message(), "clip_skip 5"));
    /* SDXL: one layer further down in both encoders, the pooled output unchanged */
    lm_array *x0, *x1, *p0, *p1;
    assert_int_equal(lm_sd_encode_prompt_skip(sdxl, 1, texts, 0, &x0, &p0), LM_OK);
    assert_int_equal(lm_sd_encode_prompt_skip(sdxl, 1, texts, 1, &x1, &p1), LM_OK);
    assert_true(tu_max_err(p0, p1) == 0);
    assert_true(tu_max_err(x0, x1) > 1e-3);
    lm_array_release(x0);
    lm_array_release(x1);
    lm_array_release(p0);
    lm_array_release(p1);
}

static void test_sd1_samplers(void **state)
{
    (void)state;
    static const char *const s[][2] = {{"euler", "euler"}, {"euler_a", "euler_a"},
                                       {"dpm++2m", "dpmpp_2m"}, {"dpm++2m_karras", "dpmpp_2m_karras"},
                                       {"ddim", "ddim"}};
    for (int i = 0; i < 5; i++) assert_true(run_ref(sd1, "sd1", s[i][0], s[i][1]) <= TOL);
}

/* issue 37's rows: whole 4-step runs of sd1 against diffusers' pipeline with
 * each scheduler (tests/ref/gen_samplers.py: ref_sched_37.safetensors, the
 * prompt embeddings ref_pipe's; the draws of the SDE and LCM steps fed
 * through the noise hook) */
static void test_sd1_samplers_37(void **state)
{
    (void)state;
    lm_tensor_set r37 = {0};
    if (access(DIR "ref_sched_37.safetensors", R_OK) != 0) {
        printf("%sref_sched_37.safetensors missing (tests/ref/gen_samplers.py): skipped\n", DIR);
        skip();
    }
    assert_int_equal(lm_load_safetensors(DIR "ref_sched_37.safetensors", &r37), LM_OK);
    static const char *const s[][2] = {{"heun", "heun"}, {"DPM++ 2M SDE Karras", "dpmpp_2m_sde_karras"},
                                       {"dpm++2s_a", "dpmpp_2s_a"}, {"UniPC", "unipc"}, {"lcm", "lcm"},
                                       {"LMS", "lms"}};
    cur_ref = &r37;
    int ran = 0;
    for (size_t i = 0; i < sizeof s / sizeof *s; i++) {
        char key[64];
        snprintf(key, sizeof key, "pipe.%s.image", s[i][1]);
        if (lm_tensor_set_find(&r37, key) < 0) continue;   /* the device run had no pipeline */
        double e = run_ref(sd1, "pipe", s[i][0], s[i][1]);
        assert_true(e <= TOL);
        ran++;
    }
    cur_ref = &ref;
    printf("  %d whole runs of issue 37's samplers\n", ran);
    lm_tensor_set_free(&r37);
}

static void test_sd2_v_prediction(void **state)
{
    (void)state;
    assert_true(run_ref(sd2, "sd2", "euler", "euler") <= TOL);
}

static void test_sdxl(void **state)
{
    (void)state;
    assert_true(run_ref(sdxl, "sdxl", "euler_a", "euler_a") <= TOL);
}

static void test_img2img(void **state)
{
    (void)state;
    lm_sd_gen_opts o;
    gen_opts(&o, "dpm++2m");
    o.width = o.height = 0;
    o.init = R("sd1.img2img.init");
    o.strength = 0.5;
    draws d = {NULL, R("sd1.img2img.noise"), R("sd1.img2img.enc_noise")};
    o.noise = take;
    o.noise_ctx = &d;
    lm_array *img = lm_sd_generate(sd1, &o);
    if (!img) fprintf(stderr, "img2img: %s\n", lm_error_message());
    assert_non_null(img);
    double e = tu_max_err(img, R("sd1.img2img.image"));
    printf("  sd1   img2img 0.5 dpm++2m  image max abs error %.3g\n", e);
    assert_true(e <= TOL);
    lm_array_release(img);
}

/* the single files make_single.py builds into $BUILD/ref/diffusion/ */
static void test_single_files(void **state)
{
    (void)state;
    const char *build = getenv("BUILD") ? getenv("BUILD") : "build";
    static const char *const m[][3] = {{"sd1", "euler_a", "euler_a"}, {"sd2", "euler", "euler"},
                                       {"sdxl", "euler_a", "euler_a"}};
    for (int i = 0; i < 3; i++) {
        char file[512], tok[256];
        snprintf(file, sizeof file, "%s/ref/diffusion/%s.safetensors", build, m[i][0]);
        snprintf(tok, sizeof tok, DIR "%s", m[i][0]);
        lm_sd_pipeline *p = load(file, tok);
        assert_true(run_ref(p, m[i][0], m[i][1], m[i][2]) <= TOL);
        lm_sd_pipeline_free(p);
    }
}

/* the same runs on a Vulkan device (lavapipe here), f32, same bound */
static void test_vulkan(void **state)
{
    (void)state;
    lm_device *vk = tu_vulkan_or_skip("  no Vulkan device: skipped");
    lm_device *was = lm_device_default();
    lm_device_set_default(vk);
    static const char *const m[][3] = {{"sd1", "euler_a", "euler_a"}, {"sd1", "dpm++2m_karras", "dpmpp_2m_karras"},
                                       {"sd2", "euler", "euler"}, {"sdxl", "euler_a", "euler_a"}};
    for (int i = 0; i < 4; i++) {
        char dir[256];
        snprintf(dir, sizeof dir, DIR "%s", m[i][0]);
        lm_sd_pipeline *p = load_on(dir, NULL, vk);
        printf("  on %s:", vk->spec);
        double e = run_ref(p, m[i][0], m[i][1], m[i][2]);
        lm_sd_pipeline_free(p);
        assert_true(e <= TOL);
    }
    lm_device_set_default(was);
}

/* seeded noise, no hook: images [B,3,H,W] for seeds */
static lm_array *seeded(lm_sd_pipeline *p, int n, const uint64_t *seeds, const char *sampler)
{
    lm_sd_gen_opts o;
    gen_opts(&o, sampler);
    o.batch = n;
    o.seeds = seeds;
    o.steps = 3;
    lm_array *img = lm_sd_generate(p, &o);
    if (!img) fprintf(stderr, "seeded: %s\n", lm_error_message());
    assert_non_null(img);
    return img;
}

static void test_batch_bytes(void **state)
{
    (void)state;
    uint64_t seeds[2] = {11, 12};
    lm_array *both = seeded(sd1, 2, seeds, "euler_a");
    for (int i = 0; i < 2; i++) {
        lm_array *one = seeded(sd1, 1, seeds + i, "euler_a");
        lm_array *part = lm_slice(both, 0, i, i + 1, 1), *c = lm_contiguous(part);
        assert_non_null(c);
        bool same = tu_same_bytes(c, one);
        printf("  batch of 2, image %d: %s a single run\n", i, same ? "the same bytes as" : "DIFFERS from");
        assert_true(same);
        lm_array_release(one);
        lm_array_release(part);
        lm_array_release(c);
    }
    lm_array_release(both);
    /* and the seeds matter */
    uint64_t other = 13;
    lm_array *a = seeded(sd1, 1, seeds, "euler_a"), *b = seeded(sd1, 1, &other, "euler_a");
    assert_false(tu_same_bytes(a, b));
    lm_array_release(a);
    lm_array_release(b);
}

static void test_threads(void **state)
{
    (void)state;
    int was = lm_cpu_threads();
    uint64_t seed = 7;
    lm_cpu_set_threads(1);
    lm_array *a = seeded(sdxl, 1, &seed, "dpm++2m_karras");
    lm_cpu_set_threads(4);
    lm_array *b = seeded(sdxl, 1, &seed, "dpm++2m_karras");
    lm_cpu_set_threads(was);
    bool same = tu_same_bytes(a, b);
    printf("  sdxl, 1 and 4 threads: %s\n", same ? "the same bytes" : "DIFFERENT bytes");
    assert_true(same);
    lm_array_release(a);
    lm_array_release(b);
}

static void test_errors(void **state)
{
    (void)state;
    lm_sd_load_opts lo;
    lm_sd_load_opts_init(&lo);
    assert_null(lm_sd_pipeline_load(DIR "no_such_model", &lo));
    assert_non_null(strstr(lm_error_message(), "no_such_model"));
    lm_sd_gen_opts o;
    gen_opts(&o, "euler");
    o.width = 61;
    assert_null(lm_sd_generate(sd1, &o));
    assert_non_null(strstr(lm_error_message(), "multiples of"));
    gen_opts(&o, "dpm++3m_sde");
    assert_null(lm_sd_generate(sd1, &o));
    assert_non_null(strstr(lm_error_message(), "unknown sampler \"dpm++3m_sde\""));
    gen_opts(&o, "euler");
    o.steps = 0;
    assert_null(lm_sd_generate(sd1, &o));
    assert_non_null(strstr(lm_error_message(), "steps 0: expected a whole number from 1 to 10000"));
    /* the ranges of models/family.h, the ones the CLI and Lua check with:
     * a negative size is an error, not the default size */
    gen_opts(&o, "euler");
    o.width = o.height = -40;
    assert_null(lm_sd_generate(sd1, &o));
    assert_non_null(strstr(lm_error_message(), "width -40: expected a whole number from 8 to 65536"));
    gen_opts(&o, "euler");
    o.clip_skip = 64;
    assert_null(lm_sd_generate(sd1, &o));
    assert_non_null(strstr(lm_error_message(), "clip_skip 64: expected a whole number from 0 to 63"));
    gen_opts(&o, "euler");
    o.cfg = NAN;
    assert_null(lm_sd_generate(sd1, &o));
    assert_non_null(strstr(lm_error_message(), "cfg nan: expected a number from 0 to 1000"));
    gen_opts(&o, "euler");
    o.batch = 0;
    assert_null(lm_sd_generate(sd1, &o));
    assert_non_null(strstr(lm_error_message(), "batch 0: expected a whole number from 1 to 4096"));
    /* issue 34 items 3 and 12: a strength that leaves no step is named
     * before any network runs (no noise drawn), with what would run; a
     * batch from one seed must not run past the largest seed */
    assert_int_equal(lm_sd_img2img_check(NULL, 2, 0.5), LM_OK);
    assert_int_not_equal(lm_sd_img2img_check("g", 3, 0.2), LM_OK);
    assert_string_equal(lm_error_message(), "g: strength 0.2 of 3 steps leaves no step to run (img2img "
                        "runs int(steps * strength) of them): give 5 steps or more, or a strength of "
                        "1/3 or more");
    int64_t ishape[3] = {3, 64, 64};
    lm_array *init = lm_full(3, ishape, 0.5, LM_F32, NULL);
    int ndraws = 0;
    gen_opts(&o, "euler");
    o.init = init;
    o.strength = 0.1;
    o.noise = count_draws;
    o.noise_ctx = &ndraws;
    assert_null(lm_sd_generate(sd1, &o));
    assert_non_null(strstr(lm_error_message(), "generate: strength 0.1 of 4 steps leaves no step to run"));
    assert_int_equal(ndraws, 0);
    lm_array_release(init);
    gen_opts(&o, "euler");
    o.seed = INT64_MAX;
    o.batch = 2;
    assert_null(lm_sd_generate(sd1, &o));
    assert_non_null(strstr(lm_error_message(), "the last image's seed would be 9223372036854775808"));
    /* a clip_skip past the encoder's layers names its real count (it was
     * read after the encoder's outputs were freed) */
    lm_array *e = NULL, *pl = NULL;
    const char *one[1] = {"x"};
    assert_int_not_equal(lm_sd_encode_prompt_skip(sd1, 1, one, 63, &e, &pl), LM_OK);
    int layers = -1;
    const char *at = strstr(lm_error_message(), "text_encoder has ");
    assert_non_null(at);
    assert_int_equal(sscanf(at, "text_encoder has %d layers", &layers), 1);
    assert_true(layers >= 1 && layers < 63);
    /* ... and the largest clip_skip in both counts (issue 34 item 12) */
    char want[160];
    snprintf(want, sizeof want, "so clip_skip %d at most (diffusers' count; A1111's Clip skip, lumen "
             "generate's --clip-skip, is one more: %d)", layers, layers + 1);
    assert_non_null(strstr(lm_error_message(), want));
}

/* the family rows the loaders chose, and their columns the pipeline reads */
static void test_family(void **state)
{
    (void)state;
    assert_int_equal(lm_sd_pipeline_family(sd1), LM_SD_1);
    assert_int_equal(lm_sd_pipeline_family(sd2), LM_SD_2);
    assert_int_equal(lm_sd_pipeline_family(sdxl), LM_SD_XL);
    assert_int_equal(lm_sd_pipeline_row(sd1)->n_encoders, 1);
    assert_int_equal(lm_sd_pipeline_row(sdxl)->n_encoders, 2);
    assert_true(lm_sd_pipeline_row(sdxl)->time_ids && !lm_sd_pipeline_row(sd1)->time_ids);
    assert_non_null(lm_sd_pipeline_tokenizer(sdxl, 1));
    assert_null(lm_sd_pipeline_tokenizer(sd1, 1));
    lm_sd_gen_opts o;
    lm_sd_gen_opts_init_for(&o, sdxl);
    const lm_sd_defaults *d = lm_sd_pipeline_defaults(sdxl);
    assert_int_equal(o.steps, d->steps);
    assert_string_equal(o.sampler, d->sampler);
    assert_true(o.cfg == d->cfg && o.strength == d->strength && o.batch == 1);
}

/* tests/ref/diffusion/sd1_dpmpp: sd1 with the scheduler_config.json that
 * DPMSolverMultistepScheduler.from_config(sd1's).save_pretrained writes
 * ("lambda_min_clipped": -Infinity, Python's JSON); it loads and gives
 * diffusers' DPM++ 2M image (the schedule is sd1's).  Before lm_dfs_parse:
 * "scheduler_config.json: not valid JSON (near byte 400)". */
static void test_dpmpp_folder(void **state)
{
    (void)state;
    lm_sd_pipeline *p = load(DIR "sd1_dpmpp", NULL);
    assert_true(run_ref(p, "sd1", "dpm++2m", "dpmpp_2m") <= TOL);
    lm_sd_pipeline_free(p);
}

/* JSON as Python writes it: NaN, Infinity, -Infinity outside strings are
 * numbers; inside strings they stay text; a finite field refuses them */
static void test_python_json(void **state)
{
    (void)state;
    const char *t = "{\"a\": -Infinity, \"b\": [NaN, Infinity, 1], \"s\": \"NaN Infinity\", "
                    "\"c\": {\"d\": NaN}, \"lumen:NaN:0\": \"lumen:NaN:0\"}";
    cJSON *j = lm_dfs_parse(t, strlen(t), "t.json");
    if (!j) fprintf(stderr, "%s\n", lm_error_message());
    assert_non_null(j);
    const cJSON *a = cJSON_GetObjectItem(j, "a"), *b = cJSON_GetObjectItem(j, "b");
    assert_true(cJSON_IsNumber(a) && isinf(a->valuedouble) && a->valuedouble < 0);
    assert_true(isnan(cJSON_GetArrayItem(b, 0)->valuedouble));
    assert_true(isinf(cJSON_GetArrayItem(b, 1)->valuedouble) && cJSON_GetArrayItem(b, 1)->valuedouble > 0);
    assert_true(cJSON_GetArrayItem(b, 2)->valuedouble == 1);
    assert_string_equal(cJSON_GetObjectItem(j, "s")->valuestring, "NaN Infinity");
    assert_true(isnan(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "c"), "d")->valuedouble));
    /* a string that is the first marker stays a string */
    assert_string_equal(cJSON_GetObjectItem(j, "lumen:NaN:0")->valuestring, "lumen:NaN:0");
    double d;
    int64_t i;
    assert_int_not_equal(lm_dfs_num(j, "a", "t.json", true, 0, &d), LM_OK);
    printf("  %s\n", lm_error_message());
    assert_non_null(strstr(lm_error_message(), "-Infinity"));
    assert_int_not_equal(lm_dfs_num(cJSON_GetObjectItem(j, "c"), "d", "t.json", true, 0, &d), LM_OK);
    assert_non_null(strstr(lm_error_message(), "NaN"));
    assert_int_not_equal(lm_dfs_int(cJSON_GetObjectItem(j, "c"), "d", "t.json", true, 0, 0, 9, &i), LM_OK);
    assert_int_not_equal(lm_dfs_int(j, "a", "t.json", true, 0, INT64_MIN, 9, &i), LM_OK);
    cJSON_Delete(j);
    /* an error's byte is the file's, after a NaN that the parse widened */
    const char *bad = "{\"x\": NaN, \"y\": ]}";
    assert_null(lm_dfs_parse(bad, strlen(bad), "bad.json"));
    printf("  %s\n", lm_error_message());
    assert_non_null(strstr(lm_error_message(), "bad.json: not valid JSON (near byte 16)"));
    /* tokens that are not Python's stay errors */
    const char *nan2 = "{\"x\": nan}";
    assert_null(lm_dfs_parse(nan2, strlen(nan2), "n.json"));
}

/* copies the tree at from into to: folders made, files linked (scandir:
 * DIR is this file's fixture folder) */
static void mirror(const char *from, const char *to)
{
    assert_int_equal(mkdir(to, 0755) == 0 || errno == EEXIST, 1);
    struct dirent **e;
    int n = scandir(from, &e, NULL, alphasort);
    assert_true(n >= 0);
    for (int k = 0; k < n; k++) {
        if (e[k]->d_name[0] != '.') {
            char a[1024], b[1024], real[PATH_MAX];
            snprintf(a, sizeof a, "%s/%s", from, e[k]->d_name);
            snprintf(b, sizeof b, "%s/%s", to, e[k]->d_name);
            struct stat sb;
            assert_int_equal(stat(a, &sb), 0);
            if (S_ISDIR(sb.st_mode)) mirror(a, b);
            else assert_int_equal(symlink(realpath(a, real), b), 0);
        }
        free(e[k]);
    }
    free(e);
}

static void remove_tree(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0) return;
    if (!S_ISDIR(sb.st_mode)) {
        unlink(path);
        return;
    }
    struct dirent **e;
    int n = scandir(path, &e, NULL, alphasort);
    for (int k = 0; k < n; k++) {
        if (strcmp(e[k]->d_name, ".") && strcmp(e[k]->d_name, "..")) {
            char p[1024];
            snprintf(p, sizeof p, "%s/%s", path, e[k]->d_name);
            remove_tree(p);
        }
        free(e[k]);
    }
    if (n >= 0) free(e);
    rmdir(path);
}

/* A FIFO in place of any file of a diffusers folder is refused by name at
 * once: the load never waits for a writer (an alarm ends a hang with a
 * failure).  Before the one open path, model_index.json, the configs, the
 * tokenizer files and the VAE weights blocked the load in open(). */
static void test_fifo_files(void **state)
{
    (void)state;
    static const char *const files[] = {
        "model_index.json", "unet/config.json", "unet/diffusion_pytorch_model.safetensors",
        "vae/config.json", "vae/diffusion_pytorch_model.safetensors", "text_encoder/config.json",
        "text_encoder/model.safetensors", "tokenizer/tokenizer.json",
        "tokenizer/tokenizer_config.json", "scheduler/scheduler_config.json"};
    char dir[64];
    assert_int_equal(tu_tmpdir(dir, sizeof dir, "fifo"), 0);
    for (size_t k = 0; k < sizeof files / sizeof *files; k++) {
        char root[128], f[256];
        snprintf(root, sizeof root, "%s/m%zu", dir, k);
        mirror(DIR "sd1", root);
        snprintf(f, sizeof f, "%s/%s", root, files[k]);
        assert_int_equal(unlink(f), 0);
        assert_int_equal(mkfifo(f, 0644), 0);
        alarm(60);
        lm_sd_load_opts lo;
        lm_sd_load_opts_init(&lo);
        lo.dtype = LM_F32;
        lo.device = lm_device_cpu();
        lm_sd_pipeline *p = lm_sd_pipeline_load(root, &lo);
        alarm(0);
        printf("  FIFO %-40s %s\n", files[k], p ? "LOADED" : lm_error_message());
        assert_null(p);
        assert_non_null(strstr(lm_error_message(), "FIFO"));
        assert_non_null(strstr(lm_error_message(), strrchr(files[k], '/') ? strrchr(files[k], '/') + 1
                                                                           : files[k]));
    }
    remove_tree(dir);
}

static int setup(void **state)
{
    (void)state;
    if (lm_init() != LM_OK) return -1;
    lm_device_set_default(lm_device_cpu());
    struct stat sb;
    if (stat(DIR "ref_pipe.safetensors", &sb) != 0) {
        fprintf(stderr, "test_sd_pipeline: %sref_pipe.safetensors is missing (tests/ref/gen_diffusion.py "
                "writes it)\n", DIR);
        return -1;
    }
    if (lm_load_safetensors(DIR "ref_pipe.safetensors", &ref) != LM_OK) {
        fprintf(stderr, "%s\n", lm_error_message());
        return -1;
    }
    lm_sd_load_opts o;
    lm_sd_load_opts_init(&o);
    o.dtype = LM_F32;
    o.device = lm_device_cpu();
    /* the tiny VAE's sample_size is 32: img2img's 64x64 image would be tiled */
    o.vae_tiling = LM_VAE_TILING_OFF;
    if (!(sd1 = lm_sd_pipeline_load(DIR "sd1", &o)) || !(sd2 = lm_sd_pipeline_load(DIR "sd2", &o)) ||
        !(sdxl = lm_sd_pipeline_load(DIR "sdxl", &o))) {
        fprintf(stderr, "%s\n", lm_error_message());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    lm_sd_pipeline_free(sd1);
    lm_sd_pipeline_free(sd2);
    lm_sd_pipeline_free(sdxl);
    lm_tensor_set_free(&ref);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prompt_embeds),
        cmocka_unit_test(test_clip_skip),
        cmocka_unit_test(test_sd1_samplers),
        cmocka_unit_test(test_sd1_samplers_37),
        cmocka_unit_test(test_sd2_v_prediction),
        cmocka_unit_test(test_sdxl),
        cmocka_unit_test(test_img2img),
        cmocka_unit_test(test_single_files),
        cmocka_unit_test(test_vulkan),
        cmocka_unit_test(test_batch_bytes),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_family),
        cmocka_unit_test(test_dpmpp_folder),
        cmocka_unit_test(test_python_json),
        cmocka_unit_test(test_fifo_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
