/* test_qwen3.c - models/qwen3.c (the Qwen3 text encoder) and the shared
 * helpers of models/dit_common.c against transformers 5.17 and diffusers
 * (tests/ref/gen_dit.py wrote tests/ref/dit/ on the GPU machine: tiny
 * random Qwen3 encoders inside the Z-Image and FLUX.2-klein pipeline
 * folders, and their outputs).
 *
 * Z-Image's encoder (Qwen3Model, 2 layers, 2 heads of head_dim 16 over
 * hidden 16, 1 key/value head): every hidden state of a right-padded
 * prompt (enc_all.*), negative indices, and the pipeline's
 * hidden_states[-2] at the unmasked tokens for "dance monkey" and "bad
 * quality" at max_sequence_length 16 (the ids are tokens.json's chat ids
 * with thinking, truncated to 16).  Klein's (Qwen3ForCausalLM, 3 layers,
 * an lm_head the encoder skips): hidden states 1 and 2 stacked as
 * Flux2KleinPipeline does, for "a dog is dancing" and "" padded to 32
 * (tokens.json's chat ids without thinking, padded with <|endoftext|>).
 * f32 within 1e-4 of the largest reference value, on the CPU and on a
 * Vulkan device (lavapipe) where there is one; bf16 and f16 against the
 * f32 result loosely; the same from lm_qwen3_load_from, from a config
 * inferred from the weights, and from two shards; the device memory back
 * where it was after three loads, runs and frees.  The helpers: RoPE on
 * [B, H, L, D] and [B, L, H, D] against lm_rope and lm_rope_multi.  GGUF in
 * llama.cpp's layout: Z-Image's encoder written as f16 against the
 * reference, a made-up q8_0 encoder against its own weights dequantized.
 * Errors: a missing, an unexpected and a wrongly shaped weight, head_dim
 * absent or null, rope_scaling and rope_type set, a hidden state past the
 * end, a mask row starting with padding, a token outside the vocabulary. */
#include <cjson/cJSON.h>
#include <unistd.h>
#include "testutil.h"
#include "core/io/gguf.h"
#include "core/io/io.h"
#include "models/dit_common.h"
#include "models/qwen3.h"

#define DIT_DIR "tests/ref/dit/"
#define ZTE DIT_DIR "zimage/text_encoder"
#define KTE DIT_DIR "klein/text_encoder"
#define REL_TOL 1e-4
#define PAD_ID 820   /* <|endoftext|> in the fixture's tokenizer */

static lm_tensor_set zref, kref;
static cJSON *tokens;
static char tmpdir[64];

/* max |got - want| / max |want|, asserted <= tol */
static double check(lm_array *got, lm_array *want, double tol, const char *what)
{
    double err, rel = tu_rel_err(got, want, &err);
    printf("  %-44s max abs err %.3g, relative %.3g\n", what, err, rel);
    assert_true(rel <= tol);
    return rel;
}

static int32_t *ref_ints(lm_tensor_set *s, const char *name, int64_t *b, int64_t *l)
{
    lm_array *a = tu_set_get(s, name);
    *b = a->shape[0];
    *l = a->shape[1];
    int32_t *v = malloc(sizeof *v * (size_t)a->size);
    assert_int_equal(lm_array_read(a, v, LM_I32), LM_OK);
    return v;
}

static lm_qwen3 *enc_load(const char *dir, lm_dtype dt, lm_device *dev)
{
    lm_qwen3 *m = lm_qwen3_load(dir, NULL, dt, dev);
    if (!m) fprintf(stderr, "%s\n", lm_error_message());
    assert_non_null(m);
    return m;
}

/* the tokens.json row of prompt p */
static const cJSON *token_row(const char *p)
{
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItem(tokens, "prompts"))
        if (!strcmp(cJSON_GetObjectItem(r, "prompt")->valuestring, p)) return r;
    fprintf(stderr, "tokens.json has no prompt \"%s\"\n", p);
    fail();
    return NULL;
}

/* ids[len] and mask[len] of field (an id list) truncated or padded to len */
static void padded(const char *prompt, const char *field, int64_t len, int32_t *ids, int32_t *mask)
{
    const cJSON *a = cJSON_GetObjectItem(token_row(prompt), field);
    int n = cJSON_GetArraySize(a);
    for (int64_t i = 0; i < len; i++) {
        ids[i] = i < n ? cJSON_GetArrayItem(a, (int)i)->valueint : PAD_ID;
        mask[i] = i < n;
    }
}

/* every hidden state of enc_all, returned (f32 runs) for the dtype checks */
static void run_all(lm_qwen3 *m, const char *what, lm_array **keep)
{
    int64_t B, L, mb, ml;
    int32_t *ids = ref_ints(&zref, "enc_all.ids", &B, &L);
    int32_t *mask = ref_ints(&zref, "enc_all.mask", &mb, &ml);
    int want[5] = {0, 1, 2, -1, -3};
    lm_array *out[5];
    assert_int_equal(lm_qwen3_forward(m, ids, mask, B, L, 5, want, out), LM_OK);
    for (int i = 0; i < 3; i++) {
        char n[32], w[96];
        snprintf(n, sizeof n, "enc_all.hidden.%d", i);
        snprintf(w, sizeof w, "hidden %d %s", i, what);
        check(out[i], tu_set_get(&zref, n), REL_TOL, w);
    }
    /* -1 is the last (normed) state and -3 the embeddings: the same arrays */
    assert_ptr_equal(out[3], out[2]);
    assert_ptr_equal(out[4], out[0]);
    for (int i = 0; i < 5; i++) {
        if (keep && i < 3) keep[i] = out[i];
        else lm_array_release(out[i]);
    }
    free(ids);
    free(mask);
}

static void run_encoders(lm_device *dev)
{
    char what[160];
    /* Z-Image: every hidden state of a padded prompt */
    lm_qwen3 *z = enc_load(ZTE, LM_F32, dev);
    const lm_qwen3_config *c = lm_qwen3_get_config(z);
    assert_int_equal(c->num_layers, 2);
    assert_int_equal(c->head_dim, 16);
    assert_int_equal(c->num_kv_heads, 1);
    assert_true(c->rope_theta == 10000.0);
    snprintf(what, sizeof what, "Qwen3Model %s", dev->spec);
    run_all(z, what, NULL);

    /* Z-Image's _encode_prompt: hidden_states[-2] at the unmasked tokens */
    const char *zp[2] = {"dance monkey", "bad quality"};
    int32_t ids[2 * 32], mask[2 * 32];
    for (int b = 0; b < 2; b++) padded(zp[b], "ids_think", 16, ids + 16 * b, mask + 16 * b);
    int want = -2;
    lm_array *h;
    assert_int_equal(lm_qwen3_forward(z, ids, mask, 2, 16, 1, &want, &h), LM_OK);
    for (int b = 0; b < 2; b++) {
        lm_array *row = lm_slice(h, 0, b, b + 1, 1);
        lm_array *e = lm_qwen3_masked_rows(row, mask + 16 * b, 16);
        char n[64];
        snprintf(n, sizeof n, "enc.%s", zp[b]);
        snprintf(what, sizeof what, "Z-Image %s %s", n, dev->spec);
        check(e, tu_set_get(&zref, n), REL_TOL, what);
        lm_array_release(row);
        lm_array_release(e);
    }
    lm_array_release(h);
    lm_qwen3_free(z);

    /* Klein: layers 1 and 2 stacked, prompts padded to 32 without thinking */
    lm_qwen3 *k = enc_load(KTE, LM_F32, dev);
    assert_int_equal(lm_qwen3_get_config(k)->num_layers, 3);
    const char *kp[2] = {"a dog is dancing", ""};
    for (int b = 0; b < 2; b++) padded(kp[b], "ids_nothink", 32, ids + 32 * b, mask + 32 * b);
    int kw[2] = {1, 2};
    lm_array *hs[2];
    assert_int_equal(lm_qwen3_forward(k, ids, mask, 2, 32, 2, kw, hs), LM_OK);
    lm_array *pe = lm_qwen3_stack_layers(2, hs);
    snprintf(what, sizeof what, "Klein enc.prompt_embeds %s", dev->spec);
    check(pe, tu_set_get(&kref, "enc.prompt_embeds"), REL_TOL, what);
    lm_array_release(pe);
    lm_array_release(hs[0]);
    lm_array_release(hs[1]);
    lm_qwen3_free(k);
}

static void test_encoder_cpu(void **state)
{
    (void)state;
    run_encoders(lm_device_cpu());
}

static void test_encoder_vulkan(void **state)
{
    (void)state;
    lm_device *vk = tu_vulkan_or_skip("no Vulkan device: the Vulkan half skipped");
    run_encoders(vk);
}

/* bf16 and f16 compute against the f32 result on dev */
static void run_dtypes(lm_device *dev)
{
    lm_array *f32[3], *lo[3];
    char what[96];
    lm_qwen3 *m = enc_load(ZTE, LM_F32, dev);
    snprintf(what, sizeof what, "f32 %s", dev->spec);
    run_all(m, what, f32);
    lm_qwen3_free(m);
    const lm_dtype dts[2] = {LM_BF16, LM_F16};
    const double tol[2] = {3e-2, 5e-3};
    for (int d = 0; d < 2; d++) {
        m = enc_load(ZTE, dts[d], dev);
        assert_int_equal(lm_qwen3_dtype(m), dts[d]);
        int64_t B, L, mb, ml;
        int32_t *ids = ref_ints(&zref, "enc_all.ids", &B, &L);
        int32_t *mask = ref_ints(&zref, "enc_all.mask", &mb, &ml);
        int want[3] = {0, 1, 2};
        assert_int_equal(lm_qwen3_forward(m, ids, mask, B, L, 3, want, lo), LM_OK);
        for (int i = 0; i < 3; i++) {
            snprintf(what, sizeof what, "%s hidden %d vs f32 %s", lm_dtype_name(dts[d]), i, dev->spec);
            assert_int_equal(lo[i]->dtype, dts[d]);
            check(lo[i], f32[i], tol[d], what);
            lm_array_release(lo[i]);
        }
        free(ids);
        free(mask);
        lm_qwen3_free(m);
    }
    for (int i = 0; i < 3; i++) lm_array_release(f32[i]);
}

static void test_encoder_dtypes(void **state)
{
    (void)state;
    run_dtypes(lm_device_cpu());
    lm_device *vk = tu_vulkan_device();
    if (vk) run_dtypes(vk);
    else printf("no Vulkan device: bf16 and f16 on the CPU only\n");
}

/* loading, running and freeing the encoder three times leaves the
 * device's memory where it was (the kept weights are dropped) */
static void test_encoder_memory(void **state)
{
    (void)state;
    lm_device *devs[2] = {lm_device_cpu(), tu_vulkan_device()};
    int64_t B, L, mb, ml;
    int32_t *ids = ref_ints(&zref, "enc_all.ids", &B, &L);
    int32_t *mask = ref_ints(&zref, "enc_all.mask", &mb, &ml);
    for (int d = 0; d < 2 && devs[d]; d++) {
        size_t start = lm_device_memory(devs[d]).active, mid = 0;
        for (int round = 0; round < 3; round++) {
            lm_qwen3 *m = enc_load(ZTE, LM_F32, devs[d]);
            int want = -2;
            lm_array *h;
            assert_int_equal(lm_qwen3_forward(m, ids, mask, B, L, 1, &want, &h), LM_OK);
            assert_int_equal(lm_array_eval(h), LM_OK);
            if (round == 0) mid = lm_device_memory(devs[d]).active;
            lm_array_release(h);
            lm_qwen3_free(m);
            size_t now = lm_device_memory(devs[d]).active;
            printf("  %s round %d: %zu bytes active after free (%zu before, %zu while loaded)\n",
                   devs[d]->spec, round, now, start, mid);
            assert_true(now == start);
            assert_true(mid > now);
        }
    }
    free(ids);
    free(mask);
}

/* RoPE on both layouts and the multi-axis table against Lumen's ops */
static void test_dit_rope(void **state)
{
    (void)state;
    lm_device *cpu = lm_device_cpu();
    int64_t B = 2, H = 3, L = 5, D = 8, half = D / 2;
    int64_t xs[4] = {B, H, L, D};
    float *xv = malloc(sizeof *xv * (size_t)(B * H * L * D));
    for (int64_t i = 0; i < B * H * L * D; i++) xv[i] = (float)sin(0.37 * (double)i + 0.1);
    lm_array *x = lm_from_data(4, xs, LM_F32, xv, cpu);
    free(xv);
    /* plain positions 0..L-1 on one axis: lm_rope */
    int64_t *pv = malloc(sizeof *pv * (size_t)L), ps[2] = {L, 1};
    for (int64_t i = 0; i < L; i++) pv[i] = i;
    lm_array *pos = lm_from_data(2, ps, LM_I64, pv, cpu);
    free(pv);
    lm_array *ang = lm_dit_rope_angles(pos, 1, &D, 100.0);
    assert_non_null(ang);
    assert_int_equal(ang->shape[1], half);
    for (int inter = 0; inter < 2; inter++) {
        lm_array *want = lm_rope(x, D, inter, 100.0, 1.0, 0);
        lm_array *got = lm_dit_rope(x, ang, LM_DIT_BHLD, inter);
        check(got, want, 1e-6, inter ? "rope [B,H,L,D] interleaved" : "rope [B,H,L,D] rotate_half");
        /* the same through [B, L, H, D] */
        lm_array *t = lm_transpose(x, 1, 2), *c = lm_contiguous(t);
        lm_array *g2 = lm_dit_rope(c, ang, LM_DIT_BLHD, inter), *back = lm_transpose(g2, 1, 2);
        check(back, want, 1e-6, inter ? "rope [B,L,H,D] interleaved" : "rope [B,L,H,D] rotate_half");
        lm_array_release(want); lm_array_release(got); lm_array_release(t);
        lm_array_release(c); lm_array_release(g2); lm_array_release(back);
    }
    lm_array_release(pos);
    lm_array_release(ang);
    /* three axes with per-batch positions: lm_rope_multi */
    int64_t axes[3] = {4, 2, 2}, p3s[3] = {B, L, 3};
    float *p3 = malloc(sizeof *p3 * (size_t)(B * L * 3));
    for (int64_t i = 0; i < B * L * 3; i++) p3[i] = (float)((i * 7) % 11) - 3.0f;
    lm_array *pos3 = lm_from_data(3, p3s, LM_F32, p3, cpu);
    free(p3);
    lm_array *a3 = lm_dit_rope_angles(pos3, 3, axes, 256.0);
    lm_array *p4 = lm_reshape(pos3, 4, (int64_t[]){B, 1, L, 3});
    lm_array *want = lm_rope_multi(x, p4, 3, axes, 256.0, true);
    lm_array *got = lm_dit_rope(x, a3, LM_DIT_BHLD, true);
    check(got, want, 1e-6, "rope 3 axes [B,L,D/2] angles");
    lm_array_release(want); lm_array_release(got); lm_array_release(p4);
    lm_array_release(a3); lm_array_release(pos3);
    /* an angle table of the wrong rank is an error naming both shapes */
    lm_array *bad = lm_dit_rope(x, x, LM_DIT_BHLD, false);
    assert_null(bad);
    tu_expect_message("rope: x [2,3,5,8]", "angles [2,3,5,8]");
    lm_array_release(x);
}

/* ---- errors ---- */
static void expect_enc_error(const char *needle1, const char *needle2)
{
    assert_null(lm_qwen3_load(tmpdir, NULL, LM_F32, lm_device_cpu()));
    tu_expect_message(needle1, needle2);
}

static void write_weights(const char *src, const char *drop, const char *extra)
{
    lm_tensor_set s = {0};
    assert_int_equal(lm_load_safetensors(src, &s), LM_OK);
    char p[128];
    snprintf(p, sizeof p, "%s/model.safetensors", tmpdir);
    tu_save_edited(&s, p, drop, extra);
    lm_tensor_set_free(&s);
}

/* config.json of tmpdir: the fixture's with `from` replaced by `to` */
static void write_config(const char *src, const char *from, const char *to)
{
    size_t n;
    char *cfg = tu_slurp(src, &n), p[128];
    snprintf(p, sizeof p, "%s/config.json", tmpdir);
    if (!from) {
        tu_spit(p, cfg, n);
        free(cfg);
        return;
    }
    char *at = strstr(cfg, from);
    assert_non_null(at);
    size_t nf = strlen(from), nt = strlen(to);
    char *out = malloc(n - nf + nt + 1);
    size_t pre = (size_t)(at - cfg);
    memcpy(out, cfg, pre);
    memcpy(out + pre, to, nt);
    memcpy(out + pre + nt, at + nf, n - pre - nf);
    tu_spit(p, out, n - nf + nt);
    free(out);
    free(cfg);
}

static void test_encoder_errors(void **state)
{
    (void)state;
    const char *zw = ZTE "/model.safetensors", *zc = ZTE "/config.json";
    write_config(zc, NULL, NULL);
    write_weights(zw, "layers.1.self_attn.k_norm.weight", NULL);
    expect_enc_error("missing weight layers.1.self_attn.k_norm.weight [16]", "model.safetensors");
    write_weights(zw, NULL, "layers.7.extra");
    expect_enc_error("unexpected weight layers.7.extra [825,16]", "model.safetensors");
    /* Klein's Qwen3ForCausalLM: the model under "model.", lm_head skipped */
    write_config(KTE "/config.json", NULL, NULL);
    write_weights(KTE "/model.safetensors", "model.norm.weight", NULL);
    expect_enc_error("missing weight model.norm.weight [16]", "model.safetensors");
    write_weights(KTE "/model.safetensors", "lm_head.weight", NULL);
    lm_qwen3 *ok = lm_qwen3_load(tmpdir, NULL, LM_F32, lm_device_cpu());
    assert_non_null(ok);   /* tied embeddings: no lm_head is fine */
    lm_qwen3_free(ok);
    write_config(zc, NULL, NULL);
    write_weights(zw, NULL, NULL);
    ok = lm_qwen3_load(tmpdir, NULL, LM_F32, lm_device_cpu());
    assert_non_null(ok);
    /* forward errors */
    int32_t ids[4] = {1, 2, 3, 4}, mask[4] = {0, 1, 1, 1}, bad_ids[4] = {1, 2, 825, 4};
    lm_array *out[1];
    int want = 3;
    assert_int_equal(lm_qwen3_forward(ok, ids, NULL, 1, 4, 1, &want, out), LM_ERR_ARG);
    tu_expect_message("hidden state 3 does not exist", "0..2, or -3..-1");
    want = -2;
    assert_int_equal(lm_qwen3_forward(ok, ids, mask, 1, 4, 1, &want, out), LM_ERR_ARG);
    tu_expect_message("mask row 0 starts with padding", NULL);
    assert_int_equal(lm_qwen3_forward(ok, bad_ids, NULL, 1, 4, 1, &want, out), LM_ERR_ARG);
    tu_expect_message("token id 825 at [0,2]", "[0,825)");
    assert_null(lm_qwen3_masked_rows(NULL, mask, 4));
    lm_qwen3_free(ok);
    /* a config that disagrees with the weights: wrong shape */
    write_config(zc, "\"intermediate_size\": 16", "\"intermediate_size\": 24");
    expect_enc_error("layers.0.mlp.gate_proj.weight has shape [16,16], the config needs [24,16]",
                     "model.safetensors");
    write_config(zc, "\"attention_bias\": false", "\"attention_bias\": true");
    expect_enc_error("missing weight layers.0.self_attn.q_proj.bias [32]", NULL);
    write_config(zc, "\"rms_norm_eps\"", "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}, "
                 "\"rms_norm_eps\"");
    expect_enc_error("config.json: rope_scaling: {\"rope_type\":\"yarn\",\"factor\":4}", "not supported");
    write_config(zc, "\"rope_type\": \"default\"", "\"rope_type\": \"linear\"");
    expect_enc_error("rope_parameters: rope_type \"linear\"", NULL);
    write_config(zc, "\"num_key_value_heads\": 1", "\"num_key_value_heads\": 3");
    expect_enc_error("num_attention_heads 2 is not a multiple of num_key_value_heads 3", NULL);
    /* head_dim absent is Qwen3Config's 128, null hidden / heads = 8 */
    write_config(zc, "\"head_dim\": 16,", "");
    expect_enc_error("layers.0.self_attn.q_proj.weight has shape [32,16], the config needs [256,16]",
                     NULL);
    write_config(zc, "\"head_dim\": 16,", "\"head_dim\": null,");
    expect_enc_error("layers.0.self_attn.q_proj.weight has shape [32,16], the config needs [16,16]",
                     NULL);
    write_config(zc, "\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"");
    expect_enc_error("hidden_act: \"gelu\" (only silu)", NULL);
}

/* Klein's encoder from a parsed config and weights (lm_qwen3_load_from),
 * and Z-Image's from two shards named by model.safetensors.index.json */
static void test_encoder_load_from(void **state)
{
    (void)state;
    char *js = tu_slurp(KTE "/config.json", NULL);
    cJSON *cfg = cJSON_Parse(js);
    free(js);
    lm_tensor_set w = {0};
    assert_int_equal(lm_load_file(KTE "/model.safetensors", &w), LM_OK);
    lm_qwen3 *m = lm_qwen3_load_from(cfg, &w, "klein.safetensors", LM_F32, lm_device_cpu());
    if (!m) fprintf(stderr, "%s\n", lm_error_message());
    assert_non_null(m);
    assert_int_equal(w.count, 0);   /* consumed */
    int32_t ids[32], mask[32];
    padded("a dog is dancing", "ids_nothink", 32, ids, mask);
    int kw[2] = {1, 2};
    lm_array *hs[2];
    assert_int_equal(lm_qwen3_forward(m, ids, mask, 1, 32, 2, kw, hs), LM_OK);
    lm_array *pe = lm_qwen3_stack_layers(2, hs), *want = tu_set_get(&kref, "enc.prompt_embeds");
    lm_array *w0 = lm_slice(want, 0, 0, 1, 1);
    check(pe, w0, REL_TOL, "load_from, Klein row 0");
    lm_array_release(w0); lm_array_release(pe); lm_array_release(hs[0]); lm_array_release(hs[1]);
    lm_qwen3_free(m);
    /* Klein's config (3 layers) with Z-Image's 2: the error names the file given */
    assert_int_equal(lm_load_file(ZTE "/model.safetensors", &w), LM_OK);
    assert_null(lm_qwen3_load_from(cfg, &w, "mixed.safetensors", LM_F32, lm_device_cpu()));
    tu_expect_message("mixed.safetensors: missing weight layers.2.input_layernorm.weight [16]", NULL);
    assert_int_equal(w.count, 0);
    cJSON_Delete(cfg);

    /* a config inferred from the weights (a single file comes without
     * one): the sizes from the shapes, rope_theta set back to the
     * fixture's 10000 from Qwen3's released 1000000 */
    assert_int_equal(lm_load_file(KTE "/model.safetensors", &w), LM_OK);
    cfg = lm_qwen3_config_infer(&w, "klein.safetensors");
    assert_non_null(cfg);
    char *ct = cJSON_PrintUnformatted(cfg);
    printf("  inferred: %s\n", ct);
    assert_non_null(strstr(ct, "\"Qwen3ForCausalLM\""));
    assert_non_null(strstr(ct, "\"num_hidden_layers\":3,\"head_dim\":16,\"num_attention_heads\":2,"
                                "\"num_key_value_heads\":1,\"attention_bias\":false"));
    free(ct);
    cJSON_ReplaceItemInObject(cfg, "rope_theta", cJSON_CreateNumber(10000.0));
    m = lm_qwen3_load_from(cfg, &w, "klein.safetensors", LM_F32, lm_device_cpu());
    assert_non_null(m);
    assert_int_equal(lm_qwen3_forward(m, ids, mask, 1, 32, 2, kw, hs), LM_OK);
    pe = lm_qwen3_stack_layers(2, hs);
    w0 = lm_slice(want, 0, 0, 1, 1);
    check(pe, w0, REL_TOL, "inferred config, Klein row 0");
    lm_array_release(w0); lm_array_release(pe); lm_array_release(hs[0]); lm_array_release(hs[1]);
    lm_qwen3_free(m);
    cJSON_Delete(cfg);
    assert_int_equal(lm_load_file(ZTE "/model.safetensors", &w), LM_OK);
    int qn = lm_tensor_set_find(&w, "layers.0.self_attn.q_norm.weight");
    assert_true(qn >= 0);
    w.names[qn][0] = 'X';
    assert_null(lm_qwen3_config_infer(&w, "noqnorm.safetensors"));
    tu_expect_message("noqnorm.safetensors: no 1-d weight [model.]layers.0.self_attn.q_norm.weight", NULL);
    lm_tensor_set_free(&w);

    /* shards */
    lm_tensor_set s = {0};
    assert_int_equal(lm_load_safetensors(ZTE "/model.safetensors", &s), LM_OK);
    char p[160];
    snprintf(p, sizeof p, "%s/model.safetensors", tmpdir);
    unlink(p);
    write_config(ZTE "/config.json", NULL, NULL);
    cJSON *idx = cJSON_CreateObject(), *map = cJSON_AddObjectToObject(idx, "weight_map");
    int half = s.count / 2;
    for (int part = 0; part < 2; part++) {
        int lo = part ? half : 0, hi = part ? s.count : half;
        char name[64];
        snprintf(name, sizeof name, "model-0000%d-of-00002.safetensors", part + 1);
        snprintf(p, sizeof p, "%s/%s", tmpdir, name);
        assert_int_equal(lm_save_safetensors(p, hi - lo, (const char **)s.names + lo, s.arrays + lo,
                                             0, NULL), LM_OK);
        for (int i = lo; i < hi; i++) cJSON_AddStringToObject(map, s.names[i], name);
    }
    char *text = cJSON_Print(idx);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", tmpdir);
    tu_spit(p, text, strlen(text));
    free(text);
    cJSON_Delete(idx);
    lm_tensor_set_free(&s);
    m = enc_load(tmpdir, LM_F32, lm_device_cpu());
    run_all(m, "sharded cpu", NULL);
    lm_qwen3_free(m);
}

/* llama.cpp's name of a transformers key of the fixture */
static void gguf_name(const char *n, char *out, size_t size)
{
    static const char *const map[][2] = {
        {"input_layernorm.weight", "attn_norm.weight"}, {"self_attn.q_proj.weight", "attn_q.weight"},
        {"self_attn.k_proj.weight", "attn_k.weight"}, {"self_attn.v_proj.weight", "attn_v.weight"},
        {"self_attn.o_proj.weight", "attn_output.weight"}, {"self_attn.q_norm.weight", "attn_q_norm.weight"},
        {"self_attn.k_norm.weight", "attn_k_norm.weight"},
        {"post_attention_layernorm.weight", "ffn_norm.weight"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"}, {"mlp.up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"},
    };
    int l, at = 0;
    if (!strcmp(n, "embed_tokens.weight")) snprintf(out, size, "token_embd.weight");
    else if (!strcmp(n, "norm.weight")) snprintf(out, size, "output_norm.weight");
    else {
        assert_int_equal(sscanf(n, "layers.%d.%n", &l, &at), 1);
        for (size_t k = 0; k < sizeof map / sizeof *map; k++)
            if (!strcmp(n + at, map[k][0])) {
                snprintf(out, size, "blk.%d.%s", l, map[k][1]);
                return;
            }
        fail_msg("no GGUF name for %s", n);
    }
}

static lm_gguf_kv kv_u32(const char *k, uint64_t v)
{
    lm_gguf_kv e = {.key = (char *)k};
    e.v.type = LM_GGUF_U32;
    e.v.u = v;
    return e;
}

/* Z-Image's encoder as llama.cpp writes a Qwen3 GGUF (f16 tensors, an
 * output.weight head), read back by lm_qwen3_load_gguf */
static void test_encoder_gguf(void **state)
{
    (void)state;
    lm_tensor_set s = {0};
    assert_int_equal(lm_load_safetensors(ZTE "/model.safetensors", &s), LM_OK);
    int n = s.count;
    char **names = calloc((size_t)n + 1, sizeof *names);
    lm_array **arr = calloc((size_t)n + 1, sizeof *arr);
    for (int i = 0; i < n; i++) {
        names[i] = malloc(96);
        gguf_name(s.names[i], names[i], 96);
        arr[i] = lm_cast(s.arrays[i], LM_F16);
    }
    names[n] = strdup("output.weight");
    arr[n] = lm_array_retain(s.arrays[0]);
    lm_gguf_kv kv[12];
    int nkv = 0;
    kv[nkv] = (lm_gguf_kv){.key = "general.architecture"};
    kv[nkv].v.type = LM_GGUF_STRING;
    kv[nkv].v.str.s = "qwen3";
    kv[nkv++].v.str.len = 5;
    kv[nkv++] = kv_u32("qwen3.block_count", 2);
    kv[nkv++] = kv_u32("qwen3.embedding_length", 16);
    kv[nkv++] = kv_u32("qwen3.feed_forward_length", 16);
    kv[nkv++] = kv_u32("qwen3.attention.head_count", 2);
    kv[nkv++] = kv_u32("qwen3.attention.head_count_kv", 1);
    kv[nkv++] = kv_u32("qwen3.attention.key_length", 16);
    kv[nkv++] = kv_u32("qwen3.context_length", 512);
    kv[nkv] = (lm_gguf_kv){.key = "qwen3.rope.freq_base"};
    kv[nkv].v.type = LM_GGUF_F32;
    kv[nkv++].v.f = 10000.0;
    kv[nkv] = (lm_gguf_kv){.key = "qwen3.attention.layer_norm_rms_epsilon"};
    kv[nkv].v.type = LM_GGUF_F32;
    kv[nkv++].v.f = 1e-6;   /* stored as f32, read back as its double */
    char p[160];
    snprintf(p, sizeof p, "%s/qwen3.gguf", tmpdir);
    assert_int_equal(lm_save_gguf(p, n + 1, (const char *const *)names, arr, nkv, kv), LM_OK);
    lm_device *devs[2] = {lm_device_cpu(), tu_vulkan_device()};
    for (int d = 0; d < 2 && devs[d]; d++) {
        lm_qwen3 *m = lm_qwen3_load_gguf(p, LM_F32, devs[d]);
        if (!m) fprintf(stderr, "%s\n", lm_error_message());
        assert_non_null(m);
        assert_int_equal(lm_qwen3_get_config(m)->num_kv_heads, 1);
        char what[64];
        /* f16 weights: within f16's rounding of the f32 reference */
        int64_t B, L, mb, ml;
        int32_t *ids = ref_ints(&zref, "enc_all.ids", &B, &L);
        int32_t *mask = ref_ints(&zref, "enc_all.mask", &mb, &ml);
        int want[3] = {0, 1, 2};
        lm_array *out[3];
        assert_int_equal(lm_qwen3_forward(m, ids, mask, B, L, 3, want, out), LM_OK);
        for (int i = 0; i < 3; i++) {
            char nm[32];
            snprintf(nm, sizeof nm, "enc_all.hidden.%d", i);
            snprintf(what, sizeof what, "GGUF f16 hidden %d %s", i, devs[d]->spec);
            check(out[i], tu_set_get(&zref, nm), 3e-3, what);
            lm_array_release(out[i]);
        }
        free(ids);
        free(mask);
        lm_qwen3_free(m);
    }
    /* another architecture, and RoPE scaling, are refused */
    kv[0].v.str.s = "llama";
    assert_int_equal(lm_save_gguf(p, n + 1, (const char *const *)names, arr, nkv, kv), LM_OK);
    assert_null(lm_qwen3_load_gguf(p, LM_F32, lm_device_cpu()));
    tu_expect_message("general.architecture is \"llama\", not \"qwen3\"", "qwen3.gguf");
    kv[0].v.str.s = "qwen3";
    kv[nkv] = (lm_gguf_kv){.key = "qwen3.rope.scaling.type"};
    kv[nkv].v.type = LM_GGUF_STRING;
    kv[nkv].v.str.s = "yarn";
    kv[nkv++].v.str.len = 4;
    assert_int_equal(lm_save_gguf(p, n + 1, (const char *const *)names, arr, nkv, kv), LM_OK);
    assert_null(lm_qwen3_load_gguf(p, LM_F32, lm_device_cpu()));
    tu_expect_message("qwen3.rope.scaling.type yarn", NULL);
    /* a tensor llama.cpp's names do not map stays as it is and is unexpected */
    kv[--nkv] = (lm_gguf_kv){0};
    free(names[n]);
    names[n] = strdup("blk.0.attn_gate.weight");
    assert_int_equal(lm_save_gguf(p, n + 1, (const char *const *)names, arr, nkv, kv), LM_OK);
    assert_null(lm_qwen3_load_gguf(p, LM_F32, lm_device_cpu()));
    tu_expect_message("qwen3.gguf: unexpected weight blk.0.attn_gate.weight [825,16]", NULL);
    for (int i = 0; i <= n; i++) {
        free(names[i]);
        lm_array_release(arr[i]);
    }
    free(names);
    free(arr);
    lm_tensor_set_free(&s);
}

/* f32 [r, c] ([r] when c is 0) filled with a smooth pseudo-random pattern of scale sc */
static lm_array *pattern(int64_t r, int64_t c, double seed, double sc)
{
    int64_t shape[2] = {r, c}, size = c ? r * c : r;
    float *v = malloc(sizeof *v * (size_t)size);
    for (int64_t i = 0; i < size; i++)
        v[i] = (float)(sc * sin(seed + 0.731 * (double)i + 0.013 * (double)(i * i % 97)));
    lm_array *a = lm_from_data(c ? 2 : 1, shape, LM_F32, v, lm_device_cpu());
    free(v);
    return a;
}

/* a made-up encoder (hidden 64, head_dim 32, GQA 2:1) written twice as a
 * GGUF: with q8_0 linear weights and embedding, and with those weights
 * dequantized to f32; the two agree (the quantized product and the
 * dequantized embedding are wired in), on the CPU and lavapipe */
static void test_encoder_gguf_quant(void **state)
{
    (void)state;
    const int64_t D = 64, F = 96, Dh = 32, V = 40;
    enum { NL = 2, PER = 11 };
    int n = 0;
    char *names[3 + NL * PER];
    lm_array *q[3 + NL * PER], *f[3 + NL * PER];
    struct { const char *name; int64_t r, c; bool lin; } w[PER] = {
        {"attn_norm.weight", D, 0, false}, {"attn_q.weight", 2 * Dh, D, true},
        {"attn_k.weight", Dh, D, true}, {"attn_v.weight", Dh, D, true},
        {"attn_output.weight", D, 2 * Dh, true}, {"attn_q_norm.weight", Dh, 0, false},
        {"attn_k_norm.weight", Dh, 0, false}, {"ffn_norm.weight", D, 0, false},
        {"ffn_gate.weight", F, D, true}, {"ffn_up.weight", F, D, true}, {"ffn_down.weight", D, F, true},
    };
    for (int l = -1; l < NL; l++) {
        for (int k = 0; k < (l < 0 ? 2 : PER); k++) {
            char nm[64];
            int64_t r, c;
            bool lin;
            if (l < 0) {
                snprintf(nm, sizeof nm, k ? "output_norm.weight" : "token_embd.weight");
                r = k ? D : V; c = k ? 0 : D; lin = !k;
            } else {
                snprintf(nm, sizeof nm, "blk.%d.%s", l, w[k].name);
                r = w[k].r; c = w[k].c; lin = w[k].lin;
            }
            lm_array *a = pattern(r, c, 0.1 * n, lin ? 0.2 : 0.0);
            if (!lin) {   /* norms near 1 */
                lm_array *one = lm_binary_scalar(LM_OP_ADD, a, 1.0, false);
                lm_array_release(a);
                a = one;
            }
            names[n] = strdup(nm);
            q[n] = lin ? lm_quantize(a, LM_Q8_0) : lm_array_retain(a);
            f[n] = lin ? lm_dequantize(q[n]) : lm_array_retain(a);
            assert_int_equal(lm_array_eval(q[n]), LM_OK);
            lm_array_release(a);
            n++;
        }
    }
    lm_gguf_kv kv[8];
    int nkv = 0;
    kv[nkv] = (lm_gguf_kv){.key = "general.architecture"};
    kv[nkv].v.type = LM_GGUF_STRING;
    kv[nkv].v.str.s = "qwen3";
    kv[nkv++].v.str.len = 5;
    kv[nkv++] = kv_u32("qwen3.block_count", NL);
    kv[nkv++] = kv_u32("qwen3.embedding_length", (uint64_t)D);
    kv[nkv++] = kv_u32("qwen3.feed_forward_length", (uint64_t)F);
    kv[nkv++] = kv_u32("qwen3.attention.head_count", 2);
    kv[nkv++] = kv_u32("qwen3.attention.head_count_kv", 1);
    kv[nkv++] = kv_u32("qwen3.attention.key_length", (uint64_t)Dh);
    char pq[160], pf[160];
    snprintf(pq, sizeof pq, "%s/q8.gguf", tmpdir);
    snprintf(pf, sizeof pf, "%s/f32.gguf", tmpdir);
    assert_int_equal(lm_save_gguf(pq, n, (const char *const *)names, q, nkv, kv), LM_OK);
    assert_int_equal(lm_save_gguf(pf, n, (const char *const *)names, f, nkv, kv), LM_OK);
    int32_t ids[2 * 12], mask[2 * 12];
    for (int i = 0; i < 24; i++) {
        ids[i] = (i * 7 + 3) % (int)V;
        mask[i] = i < 12 || i < 12 + 8;
    }
    lm_device *devs[2] = {lm_device_cpu(), tu_vulkan_device()};
    for (int d = 0; d < 2 && devs[d]; d++) {
        lm_qwen3 *mq = lm_qwen3_load_gguf(pq, LM_F32, devs[d]), *mf = lm_qwen3_load_gguf(pf, LM_F32, devs[d]);
        if (!mq || !mf) fprintf(stderr, "%s\n", lm_error_message());
        assert_true(mq && mf);
        assert_int_equal(lm_qwen3_get_config(mq)->rope_theta, 1000000);   /* the GGUF default */
        int want[2] = {1, -1};
        lm_array *oq[2], *of[2];
        assert_int_equal(lm_qwen3_forward(mq, ids, mask, 2, 12, 2, want, oq), LM_OK);
        assert_int_equal(lm_qwen3_forward(mf, ids, mask, 2, 12, 2, want, of), LM_OK);
        for (int i = 0; i < 2; i++) {
            char what[64];
            snprintf(what, sizeof what, "q8_0 GGUF hidden %d vs f32 %s", want[i], devs[d]->spec);
            check(oq[i], of[i], 2e-2, what);
            lm_array_release(oq[i]);
            lm_array_release(of[i]);
        }
        lm_qwen3_free(mq);
        lm_qwen3_free(mf);
    }
    for (int i = 0; i < n; i++) {
        free(names[i]);
        lm_array_release(q[i]);
        lm_array_release(f[i]);
    }
}

static int setup(void **state)
{
    (void)state;
    if (tu_setup_models(DIT_DIR "zimage_ref.safetensors", &zref, tmpdir, sizeof tmpdir, "qwen3"))
        return -1;
    if (lm_load_safetensors(DIT_DIR "klein_ref.safetensors", &kref) != LM_OK) {
        fprintf(stderr, "%s\n", lm_error_message());
        return -1;
    }
    char *js = tu_slurp(DIT_DIR "tokens.json", NULL);
    tokens = cJSON_Parse(js);
    free(js);
    return tokens ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    lm_tensor_set_free(&zref);
    lm_tensor_set_free(&kref);
    cJSON_Delete(tokens);
    tu_tmpdir_remove(tmpdir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encoder_cpu),
        cmocka_unit_test(test_encoder_vulkan),
        cmocka_unit_test(test_encoder_dtypes),
        cmocka_unit_test(test_encoder_memory),
        cmocka_unit_test(test_dit_rope),
        cmocka_unit_test(test_encoder_errors),
        cmocka_unit_test(test_encoder_load_from),
        cmocka_unit_test(test_encoder_gguf),
        cmocka_unit_test(test_encoder_gguf_quant),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
