/* test_lora.c - models/lora.c: LoRA / LyCORIS adapters merged into the tiny
 * SD 1.x fixture pipeline (tests/ref/diffusion/sd1).
 *
 * Against PEFT and diffusers (tests/ref/gen_lora.py wrote tests/ref/lora/ on
 * the GPU machine: torch 2.11, peft 0.21, diffusers 0.40.dev, transformers
 * 5): a PEFT-format LoRA, a DoRA, a kohya file, a LoHa and a LoKr, each
 * merged by Lumen and compared with PEFT's own merge (weight 1) and with
 * diffusers' load_lora_weights + fuse_lora (PEFT LoRA at 0.7, DoRA at 0.6
 * (its UNet: see CASES); diffusers' kohya converter failed on transformers
 * 5's text encoder there, so the kohya file has PEFT's reference only): the
 * adapted weights' first rows (relative error <= 1e-5) and the UNet's and
 * the text encoder's outputs (<= 1e-4), on the CPU and on Vulkan; the same
 * (DoRA aside) applied at run time on the UNet's linear weights, its output.
 * Against formulas computed here in double: kohya files with alpha, a 3x3
 * conv LoRA and LoCon's lora_mid, several adapters at once, the original
 * (sgm) UNet names, SDXL's two text encoders (lora_te1_ / lora_te2_ /
 * text_encoder_2.).  Unloading gives back every weight of the UNet and the
 * text encoders byte for byte.  At run time (forced on float weights, and
 * on q8_0 linear weights): the UNet's output equal to the merged one's
 * within f32 noise, the LoRA's effect on the quantized model within 5e-2 of
 * the float model's, unloading exact.
 * Errors: an unmatched key, a key of no known layout (strict and not),
 * shapes that do not fit, a missing half; the pipeline is unchanged after
 * each.  SHA-256 against FIPS 180-4's examples; <lora:...> prompt tags. */
#include <sys/stat.h>
#include "testutil.h"
#include "core/sha256.h"
#include "models/clip_text.h"
#include "models/lora.h"
#include "models/sd_pipeline.h"
#include "models/unet.h"
#include "models/vae.h"

#define SD1 "tests/ref/diffusion/sd1"
#define REF "tests/ref/lora/"

static char tmp[64];

/* ---- helpers ---- */

static lm_sd_pipeline *load_on(lm_device *dev)
{
    lm_sd_load_opts o;
    lm_sd_load_opts_init(&o);
    o.dtype = LM_F32;
    o.device = dev;
    lm_sd_pipeline *p = lm_sd_pipeline_load(SD1, &o);
    if (!p) fprintf(stderr, "%s\n", lm_error_message());
    assert_non_null(p);
    return p;
}

/* the slot of a weight by name: "unet:NAME" or "te:NAME" (with .weight) */
static lm_array *weight(lm_sd_pipeline *p, const char *comp, const char *name)
{
    if (!strcmp(comp, "unet")) {
        lm_unet *u = lm_sd_pipeline_unet(p);
        for (int i = 0; i < lm_unet_weight_count(u); i++)
            if (!strcmp(lm_unet_weight_name(u, i), name)) return *lm_unet_weight_slot(u, i);
    } else {
        lm_clip_text *m = lm_sd_pipeline_text_encoder(p, 0);
        char n[256];
        for (int i = 0; i < lm_clip_text_weight_count(m); i++) {
            lm_array **s = lm_clip_text_weight_slot(m, i, n, sizeof n);
            if (!strcmp(n, name)) return *s;
        }
    }
    fprintf(stderr, "no weight %s %s\n", comp, name);
    fail();
    return NULL;
}

/* every weight's bytes, in one buffer (the unload check) */
typedef struct snap { size_t n; unsigned char *b; } snap;

static void add_bytes(snap *s, lm_array *a)
{
    if (!a) return;
    size_t k = lm_array_nbytes(a);
    s->b = realloc(s->b, s->n + k);
    assert_non_null(s->b);
    assert_int_equal(lm_array_read(a, s->b + s->n, a->dtype), LM_OK);
    s->n += k;
}

static snap take_snap(lm_sd_pipeline *p)
{
    snap s = {0, NULL};
    lm_unet *u = lm_sd_pipeline_unet(p);
    for (int i = 0; i < lm_unet_weight_count(u); i++) add_bytes(&s, *lm_unet_weight_slot(u, i));
    char n[256];
    for (int e = 0; e < 2; e++) {
        lm_clip_text *m = lm_sd_pipeline_text_encoder(p, e);
        for (int i = 0; m && i < lm_clip_text_weight_count(m); i++)
            add_bytes(&s, *lm_clip_text_weight_slot(m, i, n, sizeof n));
    }
    return s;
}

static void expect_same(lm_sd_pipeline *p, const snap *before)
{
    snap now = take_snap(p);
    assert_int_equal(now.n, before->n);
    assert_int_equal(memcmp(now.b, before->b, now.n), 0);
    free(now.b);
}

/* deterministic values in [-0.5, 0.5) */
static float rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) / (double)(1ull << 24) - 0.5);
}

static lm_array *rand_arr(int nd, const int64_t *shape, uint64_t seed)
{
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= shape[d];
    float *v = malloc(sizeof *v * (size_t)n);
    for (int64_t i = 0; i < n; i++) v[i] = rnd(&seed) * 0.5f;
    lm_array *a = lm_from_data(nd, shape, LM_F32, v, lm_device_cpu());
    free(v);
    return a;
}

typedef struct file_b { int n; const char *names[32]; lm_array *arr[32]; } file_b;

static lm_array *put(file_b *f, const char *name, int nd, const int64_t *shape, uint64_t seed)
{
    f->names[f->n] = name;
    f->arr[f->n] = rand_arr(nd, shape, seed);
    return f->arr[f->n++];
}

static void put_alpha(file_b *f, const char *name, double alpha)
{
    float a = (float)alpha;
    f->names[f->n] = name;
    f->arr[f->n++] = lm_from_data(0, NULL, LM_F32, &a, lm_device_cpu());
}

static void save_meta(file_b *f, const char *path, int nmeta, const lm_kv *meta)
{
    unlink(path);
    assert_int_equal(lm_save_safetensors(path, f->n, f->names, f->arr, nmeta, meta), LM_OK);
    for (int i = 0; i < f->n; i++) lm_array_release(f->arr[i]);
    f->n = 0;
}

static void save(file_b *f, const char *path)
{
    unlink(path);
    assert_int_equal(lm_save_safetensors(path, f->n, f->names, f->arr, 0, NULL), LM_OK);
    for (int i = 0; i < f->n; i++) lm_array_release(f->arr[i]);
    f->n = 0;
}

/* max |got - want| / max |want| over n values */
static double rel(const double *got, const double *want, int64_t n)
{
    double e = 0, b = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(got[i] - want[i]);
        e = d > e || d != d ? d : e;
        b = fmax(b, fabs(want[i]));
    }
    return e / (b > 0 ? b : 1);
}

/* want += s * up[out, r] @ down[r, K] */
static void add_lora(double *want, lm_array *up, lm_array *down, double s)
{
    double *u = tu_read(up), *d = tu_read(down);
    int64_t out = up->shape[0], r = down->shape[0], K = down->size / r;
    for (int64_t o = 0; o < out; o++)
        for (int64_t k = 0; k < K; k++) {
            double acc = 0;
            for (int64_t j = 0; j < r; j++) acc += u[o * r + j] * d[j * K + k];
            want[o * K + k] += s * acc;
        }
    free(u);
    free(d);
}

static void check_weight(lm_sd_pipeline *p, const char *comp, const char *name, const double *want,
                         double tol)
{
    lm_array *w = weight(p, comp, name);
    double *g = tu_read(w), e = rel(g, want, w->size);
    printf("  %s %s: rel err %.3g\n", comp, name, e);
    assert_true(e <= tol);
    free(g);
}

/* ---- SHA-256, tags ---- */

static void test_sha256(void **state)
{
    (void)state;
    char hex[65];
    lm_sha256_hex("abc", 3, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    lm_sha256_hex("", 0, hex);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    lm_sha256_hex(two, strlen(two), hex);
    assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* a million 'a' fed in uneven pieces (the block boundary handling) */
    lm_sha256 s;
    lm_sha256_init(&s);
    char a[1000];
    memset(a, 'a', sizeof a);
    for (int i = 0, n = 0; n < 1000000; i++) {
        int k = 1 + (i * 37) % 999;
        if (n + k > 1000000) k = 1000000 - n;
        lm_sha256_update(&s, a, (size_t)k);
        n += k;
    }
    uint8_t d[32];
    lm_sha256_final(&s, d);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
    assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

static void test_tags(void **state)
{
    (void)state;
    char *clean = NULL, *names[4];
    double w[4];
    int n = lm_lora_tags("a fox <lora:water_color:0.8>, snow <lora:ink>", &clean, names, w, 4);
    assert_int_equal(n, 2);
    assert_string_equal(clean, "a fox , snow ");
    assert_string_equal(names[0], "water_color");
    assert_true(w[0] == 0.8);
    assert_string_equal(names[1], "ink");
    assert_true(w[1] == 1.0);
    free(names[0]);
    free(names[1]);
    free(clean);
    n = lm_lora_tags("<lora:a:0.5:0.2> x", &clean, names, w, 4);   /* A1111's te:unet: the first */
    assert_int_equal(n, 1);
    assert_true(w[0] == 0.5);
    free(names[0]);
    free(clean);
    assert_int_equal(lm_lora_tags("x <lora:a:lots>", &clean, names, w, 4), -1);
    tu_expect_message("<lora:a:lots>", "not a number");
    assert_int_equal(lm_lora_tags("x <lora::1>", &clean, names, w, 4), -1);
    tu_expect_message("names no LoRA", NULL);
    n = lm_lora_tags("no tags <b>", &clean, names, w, 4);
    assert_int_equal(n, 0);
    assert_string_equal(clean, "no tags <b>");
    free(clean);
    /* one tag parser (models/prompt.c's, A1111's extra_networks): every
     * <kind:args> tag leaves the text, as the prompt encoder removes them */
    n = lm_lora_tags("a <hypernet:h:1>fox<lora:x:0.5>", &clean, names, w, 4);
    assert_int_equal(n, 1);
    assert_string_equal(clean, "a fox");
    assert_string_equal(names[0], "x");
    assert_true(w[0] == 0.5);
    free(names[0]);
    free(clean);
}

/* ---- against formulas ---- */

#define TO_Q "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.weight"
#define CONV1 "down_blocks.0.resnets.0.conv1.weight"
#define MIDC "mid_block.resnets.0.conv1.weight"
#define TEQ "text_model.encoder.layers.0.self_attn.q_proj.weight"

static void run_formulas(lm_device *dev)
{
    lm_sd_pipeline *p = load_on(dev);
    snap base = take_snap(p);
    double *wq = tu_read(weight(p, "unet", TO_Q)), *wc = tu_read(weight(p, "unet", CONV1));
    double *wm = tu_read(weight(p, "unet", MIDC)), *wt = tu_read(weight(p, "te", TEQ));

    char fa[128], fb[128];
    snprintf(fa, sizeof fa, "%s/a.safetensors", tmp);
    snprintf(fb, sizeof fb, "%s/b.safetensors", tmp);
    file_b f = {0};
    int64_t d2[2] = {2, 32}, u2[2] = {32, 2}, dc[4] = {2, 32, 3, 3}, uc[4] = {32, 2, 1, 1};
    int64_t dm[4] = {2, 64, 1, 1}, mm[4] = {2, 2, 3, 3}, um[4] = {64, 2, 1, 1};
    int64_t dt[2] = {2, 64}, ut[2] = {64, 2};
    const char *q = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q";
    char k[8][160];
    snprintf(k[0], 160, "%s.lora_down.weight", q);
    snprintf(k[1], 160, "%s.lora_up.weight", q);
    snprintf(k[2], 160, "%s.alpha", q);
    lm_array *qd = put(&f, k[0], 2, d2, 1), *qu = put(&f, k[1], 2, u2, 2);
    put_alpha(&f, k[2], 1.0);                                           /* scale 1/2 */
    lm_array *cd = put(&f, "lora_unet_down_blocks_0_resnets_0_conv1.lora_down.weight", 4, dc, 3);
    lm_array *cu = put(&f, "lora_unet_down_blocks_0_resnets_0_conv1.lora_up.weight", 4, uc, 4);
    put_alpha(&f, "lora_unet_down_blocks_0_resnets_0_conv1.alpha", 2.0);   /* scale 1 */
    lm_array *md = put(&f, "lora_unet_mid_block_resnets_0_conv1.lora_down.weight", 4, dm, 5);
    lm_array *mi = put(&f, "lora_unet_mid_block_resnets_0_conv1.lora_mid.weight", 4, mm, 6);
    lm_array *mu = put(&f, "lora_unet_mid_block_resnets_0_conv1.lora_up.weight", 4, um, 7);
    put_alpha(&f, "lora_unet_mid_block_resnets_0_conv1.alpha", 4.0);      /* scale 2 */
    lm_array *td = put(&f, "lora_te_text_model_encoder_layers_0_self_attn_q_proj.lora_down.weight", 2, dt, 8);
    lm_array *tu = put(&f, "lora_te_text_model_encoder_layers_0_self_attn_q_proj.lora_up.weight", 2, ut, 9);
    /* the expected weights at weight 0.8 */
    double s = 0.8;
    add_lora(wq, qu, qd, s * 0.5);
    add_lora(wc, cu, cd, s * 1.0);
    add_lora(wt, tu, td, s * 1.0);
    {   /* LoCon: delta[o, c, k] = sum_i up[o, i] sum_j mid[i, j, k] down[j, c] */
        double *U = tu_read(mu), *M = tu_read(mi), *D = tu_read(md);
        for (int o = 0; o < 64; o++)
            for (int c = 0; c < 64; c++)
                for (int kk = 0; kk < 9; kk++) {
                    double acc = 0;
                    for (int i = 0; i < 2; i++)
                        for (int j = 0; j < 2; j++) acc += U[o * 2 + i] * M[(i * 2 + j) * 9 + kk] * D[j * 64 + c];
                    wm[(o * 64 + c) * 9 + kk] += s * 2.0 * acc;
                }
        free(U);
        free(M);
        free(D);
    }
    save(&f, fa);
    lm_lora_opts o;
    lm_lora_opts_init(&o);
    o.scale = s;
    assert_int_equal(lm_lora_load(p, fa, &o), LM_OK);
    const lm_lora_info *inf = lm_lora_get(p, 0);
    assert_non_null(inf);
    assert_string_equal(inf->name, "a");
    assert_string_equal(inf->format, "lora");
    assert_int_equal(inf->modules, 4);
    assert_int_equal(strlen(inf->hash), 12);
    check_weight(p, "unet", TO_Q, wq, 1e-6);
    check_weight(p, "unet", CONV1, wc, 1e-6);
    check_weight(p, "unet", MIDC, wm, 1e-6);
    check_weight(p, "te", TEQ, wt, 1e-6);

    double *wq_a = malloc(sizeof *wq_a * 32 * 32);
    memcpy(wq_a, wq, sizeof *wq_a * 32 * 32);
    /* a second adapter on to_q, PEFT-named: both apply */
    lm_array *bd = put(&f, "unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.lora_A.weight", 2, d2, 11);
    lm_array *bu = put(&f, "unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.lora_B.weight", 2, u2, 12);
    add_lora(wq, bu, bd, -0.5);
    /* kohya's sshs_model_hash is the hash A1111 writes, when there is one */
    lm_kv meta[1] = {{"sshs_model_hash", "0123456789abcdef0123456789abcdef"}};
    save_meta(&f, fb, 1, meta);
    o.scale = -0.5;
    o.name = "se,c:ond";   /* A1111 writes it without ':' and ',' */
    assert_int_equal(lm_lora_load(p, fb, &o), LM_OK);
    assert_int_equal(lm_lora_count(p), 2);
    check_weight(p, "unet", TO_Q, wq, 1e-6);
    char buf[256];
    lm_lora_hashes(p, buf, sizeof buf);
    printf("  Lora hashes: \"%s\"\n", buf);
    char h[13], want[64];
    assert_int_equal(lm_lora_file_hash(fa, h), LM_OK);
    assert_string_equal(h, lm_lora_get(p, 0)->hash);
    snprintf(want, sizeof want, "a: %s, second: 0123456789ab", h);
    assert_string_equal(buf, want);

    lm_lora_unload_all(p);
    assert_int_equal(lm_lora_count(p), 0);
    expect_same(p, &base);
    /* loading again after an unload merges the same again */
    o.scale = s;
    o.name = NULL;
    assert_int_equal(lm_lora_load(p, fa, &o), LM_OK);
    check_weight(p, "unet", CONV1, wc, 1e-6);
    lm_lora_unload_all(p);
    /* the same modules under the original (sgm) names kohya gives SDXL's UNet:
     * input_blocks.1.1 is down_blocks.0.attentions.0, middle_block.0.in_layers.2
     * mid_block.resnets.0.conv1 */
    const char *sq = "lora_unet_input_blocks_1_1_transformer_blocks_0_attn1_to_q";
    snprintf(k[3], 160, "%s.lora_down.weight", sq);
    snprintf(k[4], 160, "%s.lora_up.weight", sq);
    snprintf(k[5], 160, "%s.alpha", sq);
    put(&f, k[3], 2, d2, 1);
    put(&f, k[4], 2, u2, 2);
    put_alpha(&f, k[5], 1.0);
    put(&f, "lora_unet_middle_block_0_in_layers_2.lora_down.weight", 4, dm, 5);
    put(&f, "lora_unet_middle_block_0_in_layers_2.lora_mid.weight", 4, mm, 6);
    put(&f, "lora_unet_middle_block_0_in_layers_2.lora_up.weight", 4, um, 7);
    put_alpha(&f, "lora_unet_middle_block_0_in_layers_2.alpha", 4.0);
    save(&f, fb);
    assert_int_equal(lm_lora_load(p, fb, &o), LM_OK);
    assert_int_equal(lm_lora_get(p, 0)->modules, 2);
    check_weight(p, "unet", TO_Q, wq_a, 1e-6);
    check_weight(p, "unet", MIDC, wm, 1e-6);
    free(wq_a);
    lm_sd_pipeline_free(p);   /* frees the merged weights with the adapters */
    free(base.b);
    free(wq);
    free(wc);
    free(wm);
    free(wt);
}

static void test_formulas_cpu(void **state)
{
    (void)state;
    int64_t live = lm_array_live_count();
    run_formulas(lm_device_cpu());
    printf("  live arrays: %lld before, %lld after\n", (long long)live, (long long)lm_array_live_count());
    assert_int_equal(lm_array_live_count(), live);   /* nothing leaked, merged or kept */
}

static void test_formulas_vulkan(void **state)
{
    (void)state;
    lm_device *vk = tu_vulkan_or_skip("no Vulkan device: the Vulkan half skipped");
    run_formulas(vk);
}

/* ---- SDXL: both text encoders (lora_te1_ / lora_te2_, text_encoder_2.), sgm UNet names ---- */

/* weight `name` of component comp ("unet", "te", "te2") */
static lm_array *weight2(lm_sd_pipeline *p, const char *comp, const char *name)
{
    if (strcmp(comp, "te2")) return weight(p, comp, name);
    lm_clip_text *m = lm_sd_pipeline_text_encoder(p, 1);
    char n[256];
    for (int i = 0; i < lm_clip_text_weight_count(m); i++) {
        lm_array **s = lm_clip_text_weight_slot(m, i, n, sizeof n);
        if (!strcmp(n, name)) return *s;
    }
    fail();
    return NULL;
}

static void test_sdxl(void **state)
{
    (void)state;
    lm_sd_load_opts lo;
    lm_sd_load_opts_init(&lo);
    lo.dtype = LM_F32;
    lo.device = lm_device_cpu();
    lm_sd_pipeline *p = lm_sd_pipeline_load("tests/ref/diffusion/sdxl", &lo);
    assert_non_null(p);
    struct { const char *key, *comp, *name; } mods[] = {
        {"lora_te1_text_model_encoder_layers_0_self_attn_q_proj", "te", TEQ},
        {"lora_te2_text_model_encoder_layers_1_mlp_fc1", "te2", "text_model.encoder.layers.1.mlp.fc1.weight"},
        {"text_encoder_2.text_model.encoder.layers.0.self_attn.k_proj", "te2",
         "text_model.encoder.layers.0.self_attn.k_proj.weight"},
        {"lora_unet_input_blocks_4_1_transformer_blocks_1_attn2_to_k", "unet",
         "down_blocks.1.attentions.0.transformer_blocks.1.attn2.to_k.weight"},
        {"lora_unet_output_blocks_0_1_proj_in", "unet", "up_blocks.0.attentions.0.proj_in.weight"},
    };
    enum { NM = sizeof mods / sizeof *mods };
    file_b f = {0};
    char keys[NM][2][192];
    double *want[NM];
    for (int i = 0; i < NM; i++) {
        lm_array *w = weight2(p, mods[i].comp, mods[i].name);
        want[i] = tu_read(w);
        bool peft = !strncmp(mods[i].key, "text_encoder", 12);
        snprintf(keys[i][0], 192, "%s.%s", mods[i].key, peft ? "lora_A.weight" : "lora_down.weight");
        snprintf(keys[i][1], 192, "%s.%s", mods[i].key, peft ? "lora_B.weight" : "lora_up.weight");
        int64_t ds[2] = {3, w->shape[1]}, us[2] = {w->shape[0], 3};
        lm_array *d = put(&f, keys[i][0], 2, ds, 100 + (uint64_t)i), *u = put(&f, keys[i][1], 2, us, 200 + (uint64_t)i);
        add_lora(want[i], u, d, 0.7);
    }
    char path[128];
    snprintf(path, sizeof path, "%s/xl.safetensors", tmp);
    save(&f, path);
    snap base = take_snap(p);
    lm_lora_opts o;
    lm_lora_opts_init(&o);
    o.scale = 0.7;
    if (lm_lora_load(p, path, &o) != LM_OK) fprintf(stderr, "%s\n", lm_error_message());
    assert_int_equal(lm_lora_count(p), 1);
    assert_int_equal(lm_lora_get(p, 0)->modules, NM);
    for (int i = 0; i < NM; i++) {
        lm_array *w = weight2(p, mods[i].comp, mods[i].name);
        double *g = tu_read(w), e = rel(g, want[i], w->size);
        printf("  sdxl %s: rel err %.3g\n", mods[i].key, e);
        assert_true(e <= 1e-6);
        free(g);
        free(want[i]);
    }
    lm_lora_unload_all(p);
    expect_same(p, &base);   /* the UNet and both encoders, byte for byte */
    free(base.b);
    lm_sd_pipeline_free(p);
}

/* ---- an f16 pipeline: merged in f32, rounded once to f16; unload bit for bit ---- */

static void test_f16(void **state)
{
    (void)state;
    lm_sd_load_opts lo;
    lm_sd_load_opts_init(&lo);
    lo.dtype = LM_F16;
    lo.device = lm_device_cpu();
    lm_sd_pipeline *p = lm_sd_pipeline_load(SD1, &lo);
    assert_non_null(p);
    lm_array *w = weight(p, "unet", CONV1);
    assert_int_equal(w->dtype, LM_F16);
    double *want = tu_read(w);
    file_b f = {0};
    int64_t dc[4] = {2, 32, 3, 3}, uc[4] = {32, 2, 1, 1};
    lm_array *d = put(&f, "lora_unet_down_blocks_0_resnets_0_conv1.lora_down.weight", 4, dc, 3);
    lm_array *u = put(&f, "lora_unet_down_blocks_0_resnets_0_conv1.lora_up.weight", 4, uc, 4);
    add_lora(want, u, d, 1.0);
    char path[128];
    snprintf(path, sizeof path, "%s/h.safetensors", tmp);
    save(&f, path);
    snap base = take_snap(p);
    assert_int_equal(lm_lora_load(p, path, NULL), LM_OK);
    w = weight(p, "unet", CONV1);
    assert_int_equal(w->dtype, LM_F16);
    double *g = tu_read(w), e = rel(g, want, w->size);
    printf("  f16 %s: rel err %.3g (one rounding to f16)\n", CONV1, e);
    assert_true(e <= 1e-3);
    free(g);
    free(want);
    lm_lora_unload_all(p);
    expect_same(p, &base);
    free(base.b);
    lm_sd_pipeline_free(p);
}

/* ---- DoRA from kohya's dora_scale (one magnitude per output), PEFT's definition ---- */

static void test_dora(void **state)
{
    (void)state;
    lm_sd_pipeline *p = load_on(lm_device_cpu());
    snap base = take_snap(p);
    double *w = tu_read(weight(p, "unet", TO_Q));
    const char *q = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q";
    char k[4][192];
    snprintf(k[0], 192, "%s.lora_down.weight", q);
    snprintf(k[1], 192, "%s.lora_up.weight", q);
    snprintf(k[2], 192, "%s.alpha", q);
    snprintf(k[3], 192, "%s.dora_scale", q);
    file_b f = {0};
    int64_t d2[2] = {2, 32}, u2[2] = {32, 2}, ms[2] = {32, 1}, bad_ms[2] = {1, 32};
    lm_array *d = put(&f, k[0], 2, d2, 1), *u = put(&f, k[1], 2, u2, 2);
    put_alpha(&f, k[2], 2.0);
    lm_array *m = put(&f, k[3], 2, ms, 3);
    add_lora(w, u, d, 0.6);   /* V = W + s up @ down */
    double *mv = tu_read(m);
    for (int o = 0; o < 32; o++) {
        double n = 0;
        for (int c = 0; c < 32; c++) n += w[o * 32 + c] * w[o * 32 + c];
        for (int c = 0; c < 32; c++) w[o * 32 + c] *= (mv[o] + 1.0) / sqrt(n);
    }
    free(mv);
    /* the magnitudes near 1 (as trained ones are): rand_arr is in [-0.25, 0.25) */
    lm_array *m1 = lm_binary_scalar(LM_OP_ADD, m, 1.0, false);
    lm_array_release(f.arr[3]);
    f.arr[3] = m1;
    char path[128];
    snprintf(path, sizeof path, "%s/dora.safetensors", tmp);
    save(&f, path);
    lm_lora_opts o;
    lm_lora_opts_init(&o);
    o.scale = 0.6;
    assert_int_equal(lm_lora_load(p, path, &o), LM_OK);
    assert_string_equal(lm_lora_get(p, 0)->format, "dora");
    check_weight(p, "unet", TO_Q, w, 1e-6);
    lm_lora_unload_all(p);
    expect_same(p, &base);
    /* LyCORIS' dora_scale over the input axis ([1, in]): refused */
    put(&f, k[0], 2, d2, 1);
    put(&f, k[1], 2, u2, 2);
    put(&f, k[3], 2, bad_ms, 3);
    save(&f, path);
    assert_int_not_equal(lm_lora_load(p, path, &o), LM_OK);
    tu_expect_message("over the input axis", k[0]);
    expect_same(p, &base);
    free(w);
    free(base.b);
    lm_sd_pipeline_free(p);
}

/* ---- at run time: on quantized linear weights, and forced on float ones ---- */

static lm_array *unet_out(lm_sd_pipeline *p)
{
    int64_t xs[4] = {1, 4, 8, 8}, cs[3] = {1, 8, 64}, ts[1] = {1};
    float tv = 500;
    lm_array *x = rand_arr(4, xs, 77), *c = rand_arr(3, cs, 78), *t = lm_from_data(1, ts, LM_F32, &tv, lm_device_cpu());
    lm_array *y = lm_unet_forward(lm_sd_pipeline_unet(p), x, t, c, NULL, NULL);
    assert_non_null(y);
    assert_int_equal(lm_array_eval(y), LM_OK);
    lm_array_release(x);
    lm_array_release(c);
    lm_array_release(t);
    return y;
}

static void test_runtime(void **state)
{
    (void)state;
    int64_t live = lm_array_live_count();
    lm_sd_pipeline *p = load_on(lm_device_cpu());
    /* a LoRA on linears and a 3x3 conv, and a LoKr (a dense term at run time) */
    file_b f = {0};
    int64_t d2[2] = {2, 32}, u2[2] = {32, 2}, dc[4] = {2, 32, 3, 3}, uc[4] = {32, 2, 1, 1}, k1[2] = {4, 4};
    int64_t k2a[2] = {8, 2}, k2b[2] = {2, 8};
    const char *q = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q";
    const char *v = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_v";
    char k[8][192];
    snprintf(k[0], 192, "%s.lora_down.weight", q);
    snprintf(k[1], 192, "%s.lora_up.weight", q);
    snprintf(k[2], 192, "%s.lokr_w1", v);
    snprintf(k[3], 192, "%s.lokr_w2_a", v);
    snprintf(k[4], 192, "%s.lokr_w2_b", v);
    snprintf(k[5], 192, "%s.alpha", v);
    put(&f, k[0], 2, d2, 1);
    put(&f, k[1], 2, u2, 2);
    put(&f, "lora_unet_down_blocks_0_resnets_0_conv1.lora_down.weight", 4, dc, 3);
    put(&f, "lora_unet_down_blocks_0_resnets_0_conv1.lora_up.weight", 4, uc, 4);
    put(&f, k[2], 2, k1, 5);
    put(&f, k[3], 2, k2a, 6);
    put(&f, k[4], 2, k2b, 7);
    put_alpha(&f, k[5], 1.0);
    char path[128];
    snprintf(path, sizeof path, "%s/rt.safetensors", tmp);
    save(&f, path);
    lm_array *base = unet_out(p);
    lm_lora_opts o;
    lm_lora_opts_init(&o);
    o.scale = 0.9;
    assert_int_equal(lm_lora_load(p, path, &o), LM_OK);
    lm_array *merged = unet_out(p);
    lm_lora_unload_all(p);
    o.runtime = true;
    assert_int_equal(lm_lora_load(p, path, &o), LM_OK);
    lm_array *rt = unet_out(p);
    double e = tu_rel_err(rt, merged, NULL), eff = tu_rel_err(merged, base, NULL);
    printf("  run time vs merged: rel err %.3g (the LoRA moves the output by %.3g)\n", e, eff);
    assert_true(e <= 1e-5);
    assert_true(eff > 1e-3);
    lm_lora_unload_all(p);
    lm_array *back = unet_out(p);
    assert_true(tu_rel_err(back, base, NULL) == 0);
    lm_array_release(back);

    /* to_q and to_v quantized (q8_0): the adapters apply at run time; unloading
     * gives the quantized model's output back exactly */
    lm_unet *u = lm_sd_pipeline_unet(p);
    lm_array **slots[2] = {NULL, NULL}, *orig[2], *qw[2];
    const char *names[2] = {TO_Q, "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_v.weight"};
    for (int j = 0; j < 2; j++) {
        for (int i = 0; i < lm_unet_weight_count(u); i++)
            if (!strcmp(lm_unet_weight_name(u, i), names[j])) slots[j] = lm_unet_weight_slot(u, i);
        assert_non_null(slots[j]);
        orig[j] = *slots[j];
        qw[j] = lm_quantize(orig[j], LM_Q8_0);
        assert_int_equal(lm_array_eval(qw[j]), LM_OK);
        *slots[j] = qw[j];
    }
    lm_array *qbase = unet_out(p);
    o.runtime = false;
    assert_int_equal(lm_lora_load(p, path, &o), LM_OK);
    lm_array *qlora = unet_out(p);
    /* the LoRA's effect on the quantized model, against the float model's */
    lm_array *d1 = lm_binary(LM_OP_SUB, qlora, qbase), *d2f = lm_binary(LM_OP_SUB, merged, base);
    double eq = tu_rel_err(d1, d2f, NULL);
    printf("  q8_0 to_q / to_v at run time: the effect within %.3g of the float model's\n", eq);
    assert_true(eq <= 5e-2);
    lm_lora_unload_all(p);
    lm_array *qback = unet_out(p);
    assert_true(tu_rel_err(qback, qbase, NULL) == 0);
    for (int j = 0; j < 2; j++) {
        *slots[j] = orig[j];
        lm_array_release(qw[j]);
    }
    lm_array *arr[] = {base, merged, rt, qbase, qlora, d1, d2f, qback};
    for (size_t i = 0; i < sizeof arr / sizeof *arr; i++) lm_array_release(arr[i]);
    lm_sd_pipeline_free(p);
    assert_int_equal(lm_array_live_count(), live);   /* the run-time terms freed too */
}

/* ---- errors ---- */

static void test_errors(void **state)
{
    (void)state;
    lm_sd_pipeline *p = load_on(lm_device_cpu());
    snap base = take_snap(p);
    char path[128];
    snprintf(path, sizeof path, "%s/bad.safetensors", tmp);
    file_b f = {0};
    int64_t d2[2] = {2, 32}, u2[2] = {32, 2}, u3[2] = {16, 2};
    lm_lora_opts o;
    lm_lora_opts_init(&o);
    const char *q = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q";
    char k0[160], k1[160];
    snprintf(k0, sizeof k0, "%s.lora_down.weight", q);
    snprintf(k1, sizeof k1, "%s.lora_up.weight", q);

    /* an unmatched module: an error naming it; strict=false loads the rest and lists it */
    put(&f, k0, 2, d2, 1);
    put(&f, k1, 2, u2, 2);
    put(&f, "lora_unet_down_blocks_9_no_such_layer.lora_down.weight", 2, d2, 3);
    save(&f, path);
    assert_int_not_equal(lm_lora_load(p, path, &o), LM_OK);
    tu_expect_message("lora_unet_down_blocks_9_no_such_layer.lora_down.weight", "adapts no weight");
    expect_same(p, &base);
    o.strict = false;
    assert_int_equal(lm_lora_load(p, path, &o), LM_OK);
    assert_int_equal(lm_lora_get(p, 0)->unmatched, 1);
    assert_non_null(strstr(lm_lora_get(p, 0)->unmatched_keys, "no_such_layer"));
    lm_lora_unload_all(p);
    expect_same(p, &base);
    o.strict = true;

    /* a key of no known layout */
    put(&f, k0, 2, d2, 1);
    put(&f, k1, 2, u2, 2);
    put(&f, "lora_unet_down_blocks_0_resnets_0_conv1.weird_w", 2, d2, 3);
    save(&f, path);
    assert_int_not_equal(lm_lora_load(p, path, &o), LM_OK);
    tu_expect_message("lora_unet_down_blocks_0_resnets_0_conv1.weird_w", "no key of a known adapter layout");

    /* shapes that do not fit: named, with the weight's shape */
    put(&f, k0, 2, d2, 1);
    put(&f, k1, 2, u3, 2);
    save(&f, path);
    assert_int_not_equal(lm_lora_load(p, path, &o), LM_OK);
    tu_expect_message("lora_up [16,2] and lora_down [2,32]", "is [32,32]");
    expect_same(p, &base);

    /* a missing half */
    put(&f, k0, 2, d2, 1);
    save(&f, path);
    assert_int_not_equal(lm_lora_load(p, path, &o), LM_OK);
    tu_expect_message(k0, "both its down");

    /* DoRA on a quantized weight (as GGUF files load on the CPU), which
     * applies at run time: refused, naming it */
    put(&f, k0, 2, d2, 1);
    put(&f, k1, 2, u2, 2);
    int64_t ms[1] = {32};
    char k2[192];
    snprintf(k2, sizeof k2, "%s.dora_scale", q);
    put(&f, k2, 1, ms, 3);
    save(&f, path);
    lm_unet *u = lm_sd_pipeline_unet(p);
    lm_array **slot = NULL;
    for (int i = 0; i < lm_unet_weight_count(u); i++)
        if (!strcmp(lm_unet_weight_name(u, i), TO_Q)) slot = lm_unet_weight_slot(u, i);
    assert_non_null(slot);
    lm_array *orig = *slot, *qw = lm_quantize(orig, LM_Q8_0);
    assert_non_null(qw);
    assert_int_equal(lm_array_eval(qw), LM_OK);
    *slot = qw;
    assert_int_not_equal(lm_lora_load(p, path, &o), LM_OK);
    tu_expect_message("DoRA on a weight applied at run time (quantized) is not supported", "attn1.to_q");
    *slot = orig;
    lm_array_release(qw);
    expect_same(p, &base);

    /* not a file, not safetensors */
    assert_int_not_equal(lm_lora_load(p, "/nonexistent/x.safetensors", &o), LM_OK);
    tu_expect_message("/nonexistent/x.safetensors", NULL);
    expect_same(p, &base);
    assert_int_equal(lm_lora_count(p), 0);
    lm_sd_pipeline_free(p);
    free(base.b);
}

/* ---- against PEFT and diffusers ---- */

/* diffusers: whether the reference has diffusers' fuse at scale; te_diffusers:
 * whether its text encoder is a reference: diffusers 0.40.dev with
 * transformers 5 leaves the text encoder's DoRA magnitudes at PEFT's
 * initial ||W|| instead of the file's (its rows are ||W|| V / ||V|| to 1.6e-8,
 * checked by hand), so only PEFT's own merge is the text encoder's there */
typedef struct { const char *name; double scale; bool diffusers, te_diffusers; } fx_case;
static const fx_case CASES[] = {
    {"peft", 0.7, true, true}, {"dora", 0.6, true, false}, {"kohya", 0.8, true, true},
    {"loha", 1, false, false}, {"lokr", 1, false, false},
};

static int checks;

static void compare(lm_sd_pipeline *p, const lm_tensor_set *ref, const char *tag, bool with_te)
{
    char pre[96];
    snprintf(pre, sizeof pre, "%s.w.", tag);
    double worst = 0;
    int n = 0;
    for (int i = 0; i < ref->count; i++) {
        const char *k = ref->names[i];
        if (strncmp(k, pre, strlen(pre))) continue;
        const char *rest = k + strlen(pre);
        bool te = !strncmp(rest, "te.", 3);
        if (te && !with_te) continue;
        char name[256];
        snprintf(name, sizeof name, "%s.weight", rest + (te ? 3 : 5));
        lm_array *w = weight(p, te ? "te" : "unet", name), *want = ref->arrays[i];
        int64_t rows = want->shape[0], cols = want->shape[1];
        double *g = tu_read(w), *r = tu_read(want);
        assert_int_equal(cols, w->size / w->shape[0]);
        double e = rel(g, r, rows * cols);
        if (e > 1e-5) printf("  %s %s: rel err %.3g\n", tag, name, e);
        worst = fmax(worst, e);
        n++;
        free(g);
        free(r);
    }
    assert_true(n > 0);
    /* the outputs */
    char key[96];
    lm_array *x = tu_set_get(ref, "x"), *t = tu_set_get(ref, "t"), *ctx = tu_set_get(ref, "ctx");
    lm_device *dev = lm_sd_pipeline_device(p);
    lm_array *xd = lm_array_to(x, dev), *td = lm_array_to(t, dev), *cd = lm_array_to(ctx, dev);
    lm_array *u = lm_unet_forward(lm_sd_pipeline_unet(p), xd, td, cd, NULL, NULL);
    snprintf(key, sizeof key, "%s.unet", tag);
    double eu = tu_rel_err(u, tu_set_get(ref, key), NULL);
    lm_array *ids = tu_set_get(ref, "ids");
    double *idd = tu_read(ids);
    int32_t iv[64];
    for (int64_t i = 0; i < ids->size; i++) iv[i] = (int32_t)idd[i];
    free(idd);
    lm_clip_text_out out;
    assert_int_equal(lm_clip_text_forward(lm_sd_pipeline_text_encoder(p, 0), iv, 1, ids->shape[1], &out), LM_OK);
    snprintf(key, sizeof key, "%s.te", tag);
    double et = with_te ? tu_rel_err(out.last_hidden_state, tu_set_get(ref, key), NULL) : 0;
    printf("  %s: %d weights, worst rel err %.3g; unet %.3g, text encoder %.3g%s\n", tag, n, worst, eu,
           et, with_te ? "" : " (not compared: no reference)");
    assert_true(worst <= 1e-5);
    assert_true(eu <= 1e-4);
    assert_true(et <= 1e-4);
    checks++;
    lm_clip_text_out_free(&out);
    lm_array_release(u);
    lm_array_release(xd);
    lm_array_release(td);
    lm_array_release(cd);
}

static void run_fixtures(lm_device *dev)
{
    struct stat st;
    if (stat(REF "ref_lora.safetensors", &st)) {
        printf("no %sref_lora.safetensors (tests/ref/gen_lora.py makes it): skipped\n", REF);
        skip();
    }
    lm_tensor_set ref = {0};
    assert_int_equal(lm_load_safetensors(REF "ref_lora.safetensors", &ref), LM_OK);
    lm_sd_pipeline *p = load_on(dev);
    snap base = take_snap(p);
    compare(p, &ref, "base", true);
    for (size_t c = 0; c < sizeof CASES / sizeof *CASES; c++) {
        char path[128], tag[64];
        snprintf(path, sizeof path, REF "%s.safetensors", CASES[c].name);
        for (int src = 0; src < 2; src++) {
            if (src == 1 && !CASES[c].diffusers) continue;
            snprintf(tag, sizeof tag, "%s.%s", CASES[c].name, src ? "diffusers" : "peft");
            char probe[160];
            snprintf(probe, sizeof probe, "%s.unet", tag);
            if (lm_tensor_set_find(&ref, probe) < 0) {
                printf("  %s: not in the reference (its case failed there)\n", tag);
                continue;
            }
            lm_lora_opts o;
            lm_lora_opts_init(&o);
            o.scale = src ? CASES[c].scale : 1.0;
            if (lm_lora_load(p, path, &o) != LM_OK) fprintf(stderr, "%s\n", lm_error_message());
            assert_int_equal(lm_lora_count(p), 1);
            printf("  %s: format %s, %d weights\n", tag, lm_lora_get(p, 0)->format, lm_lora_get(p, 0)->modules);
            compare(p, &ref, tag, src == 0 || CASES[c].te_diffusers);
            lm_lora_unload_all(p);
            expect_same(p, &base);
            if (strcmp(CASES[c].name, "dora")) {   /* the UNet's linear weights at run time */
                o.runtime = true;
                assert_int_equal(lm_lora_load(p, path, &o), LM_OK);
                lm_array *x = lm_array_to(tu_set_get(&ref, "x"), dev), *t = lm_array_to(tu_set_get(&ref, "t"), dev);
                lm_array *ctx = lm_array_to(tu_set_get(&ref, "ctx"), dev);
                lm_array *u = lm_unet_forward(lm_sd_pipeline_unet(p), x, t, ctx, NULL, NULL);
                snprintf(probe, sizeof probe, "%s.unet", tag);
                double e = tu_rel_err(u, tu_set_get(&ref, probe), NULL);
                printf("  %s at run time: unet %.3g\n", tag, e);
                assert_true(e <= 1e-4);
                lm_array_release(u);
                lm_array_release(x);
                lm_array_release(t);
                lm_array_release(ctx);
                lm_lora_unload_all(p);
                expect_same(p, &base);
            }
        }
    }
    lm_sd_pipeline_free(p);
    free(base.b);
    lm_tensor_set_free(&ref);
}

static void test_fixtures_cpu(void **state)
{
    (void)state;
    run_fixtures(lm_device_cpu());
}

static void test_fixtures_vulkan(void **state)
{
    (void)state;
    lm_device *vk = tu_vulkan_or_skip("no Vulkan device: the Vulkan half skipped");
    run_fixtures(vk);
}

static int setup(void **state)
{
    (void)state;
    if (lm_init() != LM_OK) return -1;
    lm_device_set_default(lm_device_cpu());
    return tu_tmpdir(tmp, sizeof tmp, "lora");
}

static int teardown(void **state)
{
    (void)state;
    tu_tmpdir_remove(tmp);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256),
        cmocka_unit_test(test_tags),
        cmocka_unit_test(test_formulas_cpu),
        cmocka_unit_test(test_formulas_vulkan),
        cmocka_unit_test(test_sdxl),
        cmocka_unit_test(test_f16),
        cmocka_unit_test(test_dora),
        cmocka_unit_test(test_runtime),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_fixtures_cpu),
        cmocka_unit_test(test_fixtures_vulkan),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
