/* test_clip.c - core/models/clip_tokenizer.c and clip_text.c against
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
#include "core/models/clip_text.h"
#include "core/models/clip_tokenizer.h"

#define CLIP_DIR "tests/ref/clip/"
#define TINY CLIP_DIR "tiny/"
#define REL_TOL 1e-4

static void spit(const char *path, const char *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

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

static lm_array *ref_get(const char *name)
{
    int i = lm_tensor_set_find(&ref, name);
    if (i < 0) fprintf(stderr, "reference %s missing\n", name);
    assert_true(i >= 0);
    return ref.arrays[i];
}

/* max |got - want| / max |want|, asserted <= REL_TOL */
static double check(lm_array *got, const char *name, const char *what)
{
    lm_array *want = ref_get(name);
    assert_non_null(got);
    assert_int_equal(got->ndim, want->ndim);
    for (int d = 0; d < got->ndim; d++) assert_int_equal(got->shape[d], want->shape[d]);
    double *g = tu_read(got), *w = tu_read(want), err = 0, big = 0;
    for (int64_t i = 0; i < want->size; i++) {
        assert_false(isnan(g[i]));
        err = fmax(err, fabs(g[i] - w[i]));
        big = fmax(big, fabs(w[i]));
    }
    free(g);
    free(w);
    double rel = err / (big > 0 ? big : 1);
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
    lm_device *vk = NULL;
    for (int i = 0; i < lm_device_count(); i++)
        if (!strncmp(lm_device_at(i)->spec, "vulkan", 6)) { vk = lm_device_at(i); break; }
    if (!vk) {
        printf("no Vulkan device: the Vulkan half skipped\n");
        skip();
    }
    run_encoders(vk);
}

/* ---- errors ---- */
static char tmpdir[64];

static void copy_file(const char *from, const char *to)
{
    size_t n;
    char *d = tu_slurp(from, &n);
    spit(to, d, n);
    free(d);
}

static void expect_enc_error(const char *needle1, const char *needle2)
{
    lm_clip_text *m = lm_clip_text_load(tmpdir, NULL, LM_F32, lm_device_cpu());
    assert_null(m);
    const char *msg = lm_error_message();
    printf("  error: %s\n", msg);
    assert_non_null(strstr(msg, needle1));
    if (needle2) assert_non_null(strstr(msg, needle2));
}

/* rewrites model.safetensors of tmpdir from the fixture, dropping tensor
 * `drop`, adding one named `extra` */
static void write_weights(const char *drop, const char *extra)
{
    lm_tensor_set s = {0};
    assert_int_equal(lm_load_safetensors(TINY "text_encoder/model.safetensors", &s), LM_OK);
    const char *names[64];
    lm_array *arr[64];
    int n = 0;
    for (int i = 0; i < s.count; i++) {
        if (drop && !strcmp(s.names[i], drop)) continue;
        names[n] = s.names[i];
        arr[n++] = s.arrays[i];
    }
    if (extra) { names[n] = extra; arr[n++] = s.arrays[0]; }
    char p[128];
    snprintf(p, sizeof p, "%s/model.safetensors", tmpdir);
    unlink(p);
    assert_int_equal(lm_save_safetensors(p, n, names, arr, 0, NULL), LM_OK);
    lm_tensor_set_free(&s);
}

static void test_encoder_errors(void **state)
{
    (void)state;
    char p[128];
    snprintf(p, sizeof p, "%s/config.json", tmpdir);
    copy_file(TINY "text_encoder/config.json", p);
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
    spit(p, cfg, n);
    free(cfg);
    expect_enc_error("encoder.layers.0.mlp.fc1.weight has shape [48,32], the config needs [40,32]",
                     "model.safetensors");
    spit(p, "{\"hidden_size\": 32", 18);
    expect_enc_error("config.json: not valid JSON", NULL);
    const char *heads5 = "{\"hidden_size\": 32, \"intermediate_size\": 48, "
                         "\"num_attention_heads\": 5, \"num_hidden_layers\": 2}";
    spit(p, heads5, strlen(heads5));
    expect_enc_error("not a multiple of num_attention_heads 5", NULL);
}

static void expect_tok_error(const char *needle1, const char *needle2)
{
    lm_clip_tokenizer *t = lm_clip_tokenizer_load(tmpdir);
    assert_null(t);
    const char *msg = lm_error_message();
    printf("  error: %s\n", msg);
    assert_non_null(strstr(msg, needle1));
    if (needle2) assert_non_null(strstr(msg, needle2));
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
        copy_file(q, p);
    }
    lm_clip_tokenizer *t = tok_load(tmpdir);
    lm_clip_tokenizer_free(t);
    /* truncated vocab.json */
    size_t n;
    char *v = tu_slurp(TINY "tokenizer/vocab.json", &n);
    snprintf(p, sizeof p, "%s/vocab.json", tmpdir);
    spit(p, v, n / 2);
    expect_tok_error("vocab.json: not valid JSON", NULL);
    /* a vocabulary without "ing</w>": the merge "in g</w>" names no token */
    char *at = strstr(v, "\"ing</w>\"");
    assert_non_null(at);
    memcpy(at + 1, "xyz", 3);
    spit(p, v, n);
    expect_tok_error("merges.txt: line 3 (\"in g</w>\"): \"ing</w>\" is not in the vocabulary",
                     NULL);
    free(v);
    copy_file(TINY "tokenizer/vocab.json", p);
    /* a merges line with three tokens */
    snprintf(p, sizeof p, "%s/merges.txt", tmpdir);
    spit(p, "#version: 0.2\ni n\na b c\n", 24);
    expect_tok_error("merges.txt: line 3: expected two tokens", NULL);
    copy_file(TINY "tokenizer/merges.txt", p);
    /* a pad token the vocabulary lacks */
    snprintf(p, sizeof p, "%s/special_tokens_map.json", tmpdir);
    spit(p, "{\"pad_token\": \"<pad>\"}", 22);
    expect_tok_error("special_tokens_map.json: pad_token \"<pad>\" is not in the vocabulary", NULL);
    copy_file(TINY "tokenizer/special_tokens_map.json", p);
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
    if (lm_init() != LM_OK) return -1;
    lm_device_set_default(lm_device_cpu());
    if (lm_load_safetensors(CLIP_DIR "outputs.safetensors", &ref) != LM_OK) {
        fprintf(stderr, "%s\n", lm_error_message());
        return -1;
    }
    snprintf(tmpdir, sizeof tmpdir, "/tmp/lumen_clip_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    lm_tensor_set_free(&ref);
    static const char *files[] = {"vocab.json", "merges.txt", "tokenizer_config.json",
                                  "special_tokens_map.json", "config.json", "model.safetensors"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char p[128];
        snprintf(p, sizeof p, "%s/%s", tmpdir, files[i]);
        unlink(p);
    }
    rmdir(tmpdir);
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
