/* test_clip.c - models/clip_tokenizer.c and clip_text.c against
 * transformers 5.17 (tests/ref/gen_clip.py wrote tests/ref/clip/ on the GPU
 * machine: a tiny BPE vocabulary, tiny random CLIP text encoders in the
 * diffusers layout, and transformers' ids and hidden states for them).
 *
 * Tokenizer: the ids of 55 prompts (unicode, accents, CJK, emoji, emphasis
 * syntax, contractions, whitespace, HTML entities, over-long) from
 * vocab.json + merges.txt, from tokenizer.json, and with pad "!" (SD 2.x /
 * SDXL's tokenizer_2).  Encoders: last hidden state, every hidden state,
 * pooled and projected output, f32, within 1e-4 of the largest reference
 * value, on the CPU and on a Vulkan device (lavapipe) where there is one;
 * CLIPTextModel (quick_gelu, argmax pooling, one file), WithProjection
 * (gelu, eos pooling, sharded), the fp16 variant file, a short sequence.
 * Errors: a missing, an unexpected and a wrongly shaped weight, a truncated
 * vocab.json, a merge naming no token, a pad token outside the vocabulary. */
#include <cjson/cJSON.h>
#include <sys/stat.h>
#include <unistd.h>
#include "testutil.h"
#include "core/io/io.h"
#include "models/clip_text.h"
#include "models/clip_tokenizer.h"

#define CLIP_DIR "tests/ref/clip/"
#define TINY CLIP_DIR "tiny/"
#define REL_TOL 1e-4

static lm_clip_tokenizer *tok_load(const char *dir)
{
    lm_clip_tokenizer *t = lm_clip_tokenizer_load(dir);
    if (!t) fprintf(stderr, "%s\n", lm_error_message());
    assert_non_null(t);
    return t;
}

/* compares the 77 ids of text with the JSON array want; returns 1 on a match */
static int ids_match(lm_clip_tokenizer *t, const char *text, const cJSON *want, int64_t want_full,
                     const char *what)
{
    int32_t ids[77];
    int64_t n, full;
    assert_int_equal(lm_clip_tokenizer_encode(t, text, strlen(text), true, ids, &n, &full), LM_OK);
    assert_int_equal(n, 77);
    int ok = cJSON_GetArraySize(want) == 77;
    for (int i = 0; ok && i < 77; i++) ok = cJSON_GetArrayItem(want, i)->valueint == ids[i];
    if (want_full >= 0 && full != want_full) ok = 0;
    if (!ok) {
        fprintf(stderr, "%s: ids differ for \"%s\" (untruncated %lld, transformers %lld)\n  got ",
                what, text, (long long)full, (long long)want_full);
        for (int i = 0; i < 24; i++) fprintf(stderr, "%d ", ids[i]);
        fprintf(stderr, "\n want ");
        for (int i = 0; i < 24; i++) fprintf(stderr, "%d ", cJSON_GetArrayItem(want, i)->valueint);
        fprintf(stderr, "\n");
    }
    return ok;
}

static void test_tokenizer_ids(void **state)
{
    (void)state;
    lm_clip_tokenizer *t = tok_load(TINY "tokenizer");
    lm_clip_tokenizer *t2 = tok_load(TINY "tokenizer_2");
    lm_clip_tokenizer *tj = tok_load(TINY "tokenizer_json");
    assert_int_equal(lm_clip_tokenizer_max_length(t), 77);
    assert_int_equal(lm_clip_tokenizer_bos(t), 827);
    assert_int_equal(lm_clip_tokenizer_eos(t), 828);
    assert_int_equal(lm_clip_tokenizer_pad(t), 828);
    assert_int_equal(lm_clip_tokenizer_pad(t2), 0);
    assert_string_equal(lm_clip_tokenizer_token(t, 828), "<|endoftext|>");
    char *js = tu_slurp(CLIP_DIR "tokens.json", NULL);
    cJSON *rows = cJSON_Parse(js);
    free(js);
    assert_non_null(rows);
    int total = 0, good = 0, good2 = 0, goodj = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, rows) {
        const char *text = cJSON_GetObjectItem(r, "text")->valuestring;
        int64_t full = cJSON_GetObjectItem(r, "n")->valueint;
        total++;
        good += ids_match(t, text, cJSON_GetObjectItem(r, "ids"), full, "vocab.json");
        good2 += ids_match(t2, text, cJSON_GetObjectItem(r, "ids_2"), -1, "pad !");
        goodj += ids_match(tj, text, cJSON_GetObjectItem(r, "ids"), full, "tokenizer.json");
    }
    printf("tokenizer: %d/%d prompts give transformers' ids (vocab.json+merges.txt), %d/%d "
           "with pad \"!\", %d/%d from tokenizer.json\n", good, total, good2, total, goodj, total);
    assert_true(total >= 50);
    assert_int_equal(good, total);
    assert_int_equal(good2, total);
    assert_int_equal(goodj, total);
    /* unpadded: bos ... eos only */
    int32_t ids[77];
    int64_t n;
    assert_int_equal(lm_clip_tokenizer_encode(t, "a cat", 5, false, ids, &n, NULL), LM_OK);
    assert_int_equal(n, 4);
    assert_int_equal(ids[3], 828);
    cJSON_Delete(rows);
    lm_clip_tokenizer_free(t);
    lm_clip_tokenizer_free(t2);
    lm_clip_tokenizer_free(tj);
}

/* ---- encoders ---- */
static lm_tensor_set ref;

static lm_array *ref_get(const char *name) { return tu_set_get(&ref, name); }

/* max |got - want| / max |want|, asserted <= REL_TOL */
static double check(lm_array *got, const char *name, const char *what)
{
    double err, rel = tu_rel_err(got, ref_get(name), &err);
    printf("  %-28s %-10s max abs err %.3g, relative %.3g\n", what, name, err, rel);
    assert_true(rel <= REL_TOL);
    return rel;
}

static int32_t *ref_ids(const char *name, int64_t *b, int64_t *l)
{
    lm_array *a = ref_get(name);
    *b = a->shape[0];
    *l = a->shape[1];
    int32_t *ids = malloc(sizeof *ids * (size_t)a->size);
    assert_int_equal(lm_array_read(a, ids, LM_I32), LM_OK);
    return ids;
}

static lm_clip_text *enc_load(const char *dir, lm_device *dev)
{
    lm_clip_text *m = lm_clip_text_load(dir, NULL, LM_F32, dev);
    if (!m) fprintf(stderr, "%s\n", lm_error_message());
    assert_non_null(m);
    return m;
}

static void run_encoders(lm_device *dev)
{
    int64_t B, L;
    int32_t *ids = ref_ids("ids", &B, &L);
    lm_clip_text_out o;
    char what[64];

    lm_clip_text *a = enc_load(TINY "text_encoder", dev);
    assert_int_equal(lm_clip_text_get_config(a)->projection_dim, 0);
    assert_true(lm_clip_text_get_config(a)->quick_gelu);
    assert_int_equal(lm_clip_text_forward(a, ids, B, L, &o), LM_OK);
    assert_int_equal(o.nhidden, 3);
    assert_null(o.text_embeds);
    snprintf(what, sizeof what, "CLIPTextModel %s", dev->spec);
    check(o.last_hidden_state, "a.last", what);
    for (int i = 0; i < 3; i++) {
        char n[32];
        snprintf(n, sizeof n, "a.hidden.%d", i);
        check(o.hidden_states[i], n, what);
    }
    check(o.pooled, "a.pooled", what);
    lm_clip_text_out_free(&o);
    int64_t sb, sl;
    int32_t *sids = ref_ids("ids_short", &sb, &sl);
    assert_int_equal(lm_clip_text_forward(a, sids, sb, sl, &o), LM_OK);
    check(o.last_hidden_state, "s.last", what);
    check(o.hidden_states[1], "s.hidden.1", what);
    check(o.pooled, "s.pooled", what);
    lm_clip_text_out_free(&o);
    free(sids);
    lm_clip_text_free(a);

    lm_clip_text *b = enc_load(TINY "text_encoder_2", dev);
    assert_int_equal(lm_clip_text_get_config(b)->projection_dim, 24);
    assert_int_equal(lm_clip_text_forward(b, ids, B, L, &o), LM_OK);
    snprintf(what, sizeof what, "WithProjection sharded %s", dev->spec);
    check(o.last_hidden_state, "b.last", what);
    for (int i = 0; i < 3; i++) {
        char n[32];
        snprintf(n, sizeof n, "b.hidden.%d", i);
        check(o.hidden_states[i], n, what);
    }
    check(o.text_embeds, "b.embeds", what);
    lm_clip_text_out_free(&o);
    lm_clip_text_free(b);

    lm_clip_text *h = enc_load(TINY "text_encoder_fp16", dev);
    assert_int_equal(lm_clip_text_forward(h, ids, B, L, &o), LM_OK);
    snprintf(what, sizeof what, "fp16 file, f32 compute %s", dev->spec);
    check(o.last_hidden_state, "h.last", what);
    check(o.pooled, "h.pooled", what);
    lm_clip_text_out_free(&o);
    lm_clip_text_free(h);
    free(ids);
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

/* ---- errors ---- */
static char tmpdir[64];

static void expect_enc_error(const char *needle1, const char *needle2)
{
    assert_null(lm_clip_text_load(tmpdir, NULL, LM_F32, lm_device_cpu()));
    tu_expect_message(needle1, needle2);
}

/* rewrites model.safetensors of tmpdir from the fixture, dropping tensor
 * `drop`, adding one named `extra` */
static void write_weights(const char *drop, const char *extra)
{
    lm_tensor_set s = {0};
    assert_int_equal(lm_load_safetensors(TINY "text_encoder/model.safetensors", &s), LM_OK);
    char p[128];
    snprintf(p, sizeof p, "%s/model.safetensors", tmpdir);
    tu_save_edited(&s, p, drop, extra);
    lm_tensor_set_free(&s);
}

static void test_encoder_errors(void **state)
{
    (void)state;
    char p[128];
    snprintf(p, sizeof p, "%s/config.json", tmpdir);
    tu_copy_file(TINY "text_encoder/config.json", p);
    write_weights("encoder.layers.1.mlp.fc2.bias", NULL);
    expect_enc_error("missing weight encoder.layers.1.mlp.fc2.bias [32]", "model.safetensors");
    write_weights(NULL, "encoder.layers.7.extra");
    expect_enc_error("unexpected weight encoder.layers.7.extra [77,32]", "model.safetensors");
    write_weights(NULL, NULL);
    lm_clip_text *ok = lm_clip_text_load(tmpdir, NULL, LM_F32, lm_device_cpu());
    assert_non_null(ok);
    lm_clip_text_free(ok);
    /* a config that disagrees with the weights: wrong shape */
    size_t n;
    char *cfg = tu_slurp(TINY "text_encoder/config.json", &n);
    char *at = strstr(cfg, "\"intermediate_size\": 48");
    assert_non_null(at);
    memcpy(at, "\"intermediate_size\": 40", 23);
    tu_spit(p, cfg, n);
    free(cfg);
    expect_enc_error("encoder.layers.0.mlp.fc1.weight has shape [48,32], the config needs [40,32]",
                     "model.safetensors");
    tu_spit(p, "{\"hidden_size\": 32", 18);
    expect_enc_error("config.json: not valid JSON", NULL);
    const char *heads5 = "{\"hidden_size\": 32, \"intermediate_size\": 48, "
                         "\"num_attention_heads\": 5, \"num_hidden_layers\": 2}";
    tu_spit(p, heads5, strlen(heads5));
    expect_enc_error("not a multiple of num_attention_heads 5", NULL);
}

static void expect_tok_error(const char *needle1, const char *needle2)
{
    assert_null(lm_clip_tokenizer_load(tmpdir));
    tu_expect_message(needle1, needle2);
}

static void test_tokenizer_errors(void **state)
{
    (void)state;
    static const char *files[] = {"vocab.json", "merges.txt", "tokenizer_config.json",
                                  "special_tokens_map.json"};
    char p[128], q[128];
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", tmpdir, files[i]);
        snprintf(q, sizeof q, TINY "tokenizer/%s", files[i]);
        tu_copy_file(q, p);
    }
    lm_clip_tokenizer *t = tok_load(tmpdir);
    lm_clip_tokenizer_free(t);
    /* truncated vocab.json */
    size_t n;
    char *v = tu_slurp(TINY "tokenizer/vocab.json", &n);
    snprintf(p, sizeof p, "%s/vocab.json", tmpdir);
    tu_spit(p, v, n / 2);
    expect_tok_error("vocab.json: not valid JSON", NULL);
    /* a vocabulary without "ing</w>": the merge "in g</w>" names no token */
    char *at = strstr(v, "\"ing</w>\"");
    assert_non_null(at);
    memcpy(at + 1, "xyz", 3);
    tu_spit(p, v, n);
    expect_tok_error("merges.txt: line 3 (\"in g</w>\"): \"ing</w>\" is not in the vocabulary",
                     NULL);
    free(v);
    tu_copy_file(TINY "tokenizer/vocab.json", p);
    /* a merges line with three tokens */
    snprintf(p, sizeof p, "%s/merges.txt", tmpdir);
    tu_spit(p, "#version: 0.2\ni n\na b c\n", 24);
    expect_tok_error("merges.txt: line 3: expected two tokens", NULL);
    tu_copy_file(TINY "tokenizer/merges.txt", p);
    /* a pad token the vocabulary lacks */
    snprintf(p, sizeof p, "%s/special_tokens_map.json", tmpdir);
    tu_spit(p, "{\"pad_token\": \"<pad>\"}", 22);
    expect_tok_error("special_tokens_map.json: pad_token \"<pad>\" is not in the vocabulary", NULL);
    tu_copy_file(TINY "tokenizer/special_tokens_map.json", p);
    /* a text over the bound is an error, not a long wait */
    t = tok_load(tmpdir);
    size_t big = (1u << 20) + 1;
    char *text = malloc(big);
    memset(text, 'a', big);
    int32_t ids[77];
    int64_t m;
    assert_int_equal(lm_clip_tokenizer_encode(t, text, big, true, ids, &m, NULL), LM_ERR_ARG);
    assert_int_equal(lm_clip_tokenizer_encode(t, text, 20000, true, ids, &m, NULL), LM_ERR_ARG);
    assert_non_null(strstr(lm_error_message(), "a word of 20000 bytes"));
    /* invalid UTF-8 is replaced, not refused */
    assert_int_equal(lm_clip_tokenizer_encode(t, "a\xff\xfe b", 5, true, ids, &m, NULL), LM_OK);
    free(text);
    lm_clip_tokenizer_free(t);
}

static int setup(void **state)
{
    (void)state;
    return tu_setup_models(CLIP_DIR "outputs.safetensors", &ref, tmpdir, sizeof tmpdir, "clip");
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
        cmocka_unit_test(test_tokenizer_ids),
        cmocka_unit_test(test_encoder_cpu),
        cmocka_unit_test(test_encoder_vulkan),
        cmocka_unit_test(test_encoder_errors),
        cmocka_unit_test(test_tokenizer_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
