/* test_qwen_tokenizer.c - models/qwen_tokenizer.c against transformers 5's
 * Qwen2TokenizerFast (tests/ref/gen_dit.py wrote tests/ref/dit/ on the GPU
 * machine: a small byte-level BPE laid out as Qwen2's tokenizer.json, with
 * Qwen3's chat template, and tokens.json: for 60 prompts (unicode, digits,
 * newlines, typed special tokens, over-long) the chat texts with and without
 * thinking, their ids, the prompt's own ids, and the chat text padded and
 * truncated to 32 with its mask; "extra": the ids of prompts with vertical
 * tab, U+0085, form feed, U+2028 and U+2029, which the pre-tokenizer's \s
 * must treat as transformers' Oniguruma regex does; "chatml": a ChatML
 * template and its rendering of "hi").
 *
 * Every prompt from tokenizer.json, from vocab.json + merges.txt (the added
 * tokens from tokenizer_config.json's added_tokens_decoder, as Qwen's hub
 * folders carry them) and from the Z-Image pipeline's saved tokenizer, the
 * extra prompts with them; the fixture's ChatML template as
 * tokenizer_config.json's chat_template renders as transformers did;
 * decode(encode(x)) == NFC(x); 100 KB inputs (one word, one whitespace run,
 * prose) finish and round-trip; Qwen3's template reindented and a ChatML
 * template with a default system message render; errors: a truncated
 * tokenizer.json, an unknown normalizer and pre-tokenizer, a merge naming
 * no token, an unknown and a missing template. */
#include <cjson/cJSON.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include "testutil.h"
#include "models/qwen_tokenizer.h"

#define DIT "tests/ref/dit/"
static cJSON *tokens;
static char tmpdir[64];

static int setup(void **state)
{
    (void)state;
    size_t n;
    char *s = tu_slurp(DIT "tokens.json", &n);
    tokens = cJSON_ParseWithLength(s, n);
    free(s);
    if (!tokens) return -1;
    return tu_tmpdir(tmpdir, sizeof tmpdir, "qtok");
}

static int teardown(void **state)
{
    (void)state;
    cJSON_Delete(tokens);
    tu_tmpdir_remove(tmpdir);
    return 0;
}

static lm_qwen_tokenizer *tok_load(const char *dir)
{
    lm_qwen_tokenizer *t = lm_qwen_tokenizer_load(dir);
    if (!t) fprintf(stderr, "%s\n", lm_error_message());
    assert_non_null(t);
    return t;
}

static int same_ids(const int32_t *got, int64_t n, const cJSON *want, const char *what,
                    const char *prompt)
{
    int ok = cJSON_GetArraySize(want) == n;
    for (int64_t i = 0; ok && i < n; i++) ok = cJSON_GetArrayItem(want, (int)i)->valueint == got[i];
    if (!ok) {
        fprintf(stderr, "%s differ for \"%s\"\n  got ", what, prompt);
        for (int64_t i = 0; i < n && i < 40; i++) fprintf(stderr, "%d ", got[i]);
        fprintf(stderr, "\n want ");
        for (int i = 0; i < cJSON_GetArraySize(want) && i < 40; i++)
            fprintf(stderr, "%d ", cJSON_GetArrayItem(want, i)->valueint);
        fprintf(stderr, "\n");
    }
    return ok;
}

static int check_ids(const lm_qwen_tokenizer *t, const char *text, const cJSON *want,
                     const char *what, const char *prompt)
{
    int32_t *ids;
    int64_t n;
    assert_int_equal(lm_qwen_tokenizer_encode(t, text, &ids, &n), LM_OK);
    int ok = same_ids(ids, n, want, what, prompt);
    free(ids);
    return ok;
}

static int check_text(char *got, const char *want, const char *what, const char *prompt)
{
    assert_non_null(got);
    int ok = !strcmp(got, want);
    if (!ok) fprintf(stderr, "%s differs for \"%s\":\n  got  \"%s\"\n  want \"%s\"\n", what, prompt,
                     got, want);
    free(got);
    return ok;
}

/* every prompt of tokens.json; returns the number of mismatches */
static int check_all(const lm_qwen_tokenizer *t, const char *what)
{
    int bad = 0, rows = 0;
    int64_t max_len = cJSON_GetObjectItem(tokens, "max_length")->valueint;
    assert_int_equal(lm_qwen_tokenizer_vocab_size(t), cJSON_GetObjectItem(tokens, "vocab_size")->valueint);
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItem(tokens, "prompts")) {
        const char *p = cJSON_GetObjectItem(r, "prompt")->valuestring;
        const char *think = cJSON_GetObjectItem(r, "chat_think")->valuestring;
        const char *nothink = cJSON_GetObjectItem(r, "chat_nothink")->valuestring;
        bad += !check_text(lm_qwen_tokenizer_chat(t, p, 1), think, "chat_think", p);
        bad += !check_text(lm_qwen_tokenizer_chat(t, p, -1), think, "chat (undefined)", p);
        bad += !check_text(lm_qwen_tokenizer_chat(t, p, 0), nothink, "chat_nothink", p);
        bad += !check_ids(t, think, cJSON_GetObjectItem(r, "ids_think"), "ids_think", p);
        bad += !check_ids(t, nothink, cJSON_GetObjectItem(r, "ids_nothink"), "ids_nothink", p);
        bad += !check_ids(t, p, cJSON_GetObjectItem(r, "ids_plain"), "ids_plain", p);
        int32_t ids[64], mask[64];
        int64_t nreal;
        assert_int_equal(lm_qwen_tokenizer_encode_padded(t, think, max_len, ids, mask, &nreal), LM_OK);
        bad += !same_ids(ids, max_len, cJSON_GetObjectItem(r, "ids_pad32"), "ids_pad32", p);
        bad += !same_ids(mask, max_len, cJSON_GetObjectItem(r, "mask_pad32"), "mask_pad32", p);
        int64_t ones = 0;
        for (int64_t i = 0; i < max_len; i++) ones += mask[i];
        bad += ones != nreal;
        rows++;
    }
    int extra = 0;
    cJSON_ArrayForEach(r, cJSON_GetObjectItem(tokens, "extra")) {
        const char *p = cJSON_GetObjectItem(r, "prompt")->valuestring;
        bad += !check_ids(t, p, cJSON_GetObjectItem(r, "ids_plain"), "extra ids_plain", p);
        extra++;
    }
    printf("  %s: %d prompts and %d extra, %d mismatches\n", what, rows, extra, bad);
    assert_int_equal(rows, 60);
    assert_int_equal(extra, 6);
    return bad;
}

static void test_tokenizer_json(void **state)
{
    (void)state;
    lm_qwen_tokenizer *t = tok_load(DIT "tokenizer");
    assert_int_equal(lm_qwen_tokenizer_pad_id(t), 820);
    assert_int_equal(lm_qwen_tokenizer_eos_id(t), 822);
    assert_int_equal(lm_qwen_tokenizer_max_length(t), 131072);
    int bad = check_all(t, "tokenizer.json");
    lm_qwen_tokenizer_free(t);
    assert_int_equal(bad, 0);
}

static void test_zimage_folder(void **state)
{
    (void)state;
    lm_qwen_tokenizer *t = tok_load(DIT "zimage/tokenizer");
    int bad = check_all(t, "zimage/tokenizer");
    lm_qwen_tokenizer_free(t);
    assert_int_equal(bad, 0);
}

static char *path_in(const char *name)
{
    static char p[4][160];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", tmpdir, name);
    return p[k];
}

/* tmpdir as a vocab.json + merges.txt folder: tokenizer_config.json with
 * added_tokens_decoder made from tokenizer.json's added_tokens */
static void write_vocab_merges_folder(void)
{
    unlink(path_in("tokenizer.json"));
    tu_copy_file(DIT "tokenizer/vocab.json", path_in("vocab.json"));
    tu_copy_file(DIT "tokenizer/merges.txt", path_in("merges.txt"));
    tu_copy_file(DIT "tokenizer/chat_template.jinja", path_in("chat_template.jinja"));
    size_t n;
    char *s = tu_slurp(DIT "tokenizer/tokenizer.json", &n);
    cJSON *tj = cJSON_ParseWithLength(s, n);
    free(s);
    s = tu_slurp(DIT "tokenizer/tokenizer_config.json", &n);
    cJSON *cfg = cJSON_ParseWithLength(s, n);
    free(s);
    assert_non_null(tj);
    assert_non_null(cfg);
    cJSON *dec = cJSON_AddObjectToObject(cfg, "added_tokens_decoder"), *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(tj, "added_tokens")) {
        char id[16];
        snprintf(id, sizeof id, "%d", cJSON_GetObjectItem(e, "id")->valueint);
        cJSON *c = cJSON_Duplicate(e, 1);
        cJSON_DeleteItemFromObject(c, "id");
        cJSON_AddItemToObject(dec, id, c);
    }
    s = cJSON_PrintUnformatted(cfg);
    tu_spit(path_in("tokenizer_config.json"), s, strlen(s));
    free(s);
    cJSON_Delete(tj);
    cJSON_Delete(cfg);
}

/* the same folder with tokenizer.json in place of vocab.json + merges.txt
 * (the caller writes tokenizer.json) */
static void tokenizer_json_folder(void)
{
    write_vocab_merges_folder();
    unlink(path_in("vocab.json"));
    unlink(path_in("merges.txt"));
}

static void test_vocab_merges(void **state)
{
    (void)state;
    write_vocab_merges_folder();
    lm_qwen_tokenizer *t = tok_load(tmpdir);
    int bad = check_all(t, "vocab.json + merges.txt");
    lm_qwen_tokenizer_free(t);
    assert_int_equal(bad, 0);
}

static char *nfc(const char *s)
{
    UErrorCode ue = U_ZERO_ERROR;
    size_t n = strlen(s);
    UChar *u = malloc(sizeof *u * (n + 1)), *v = malloc(sizeof *v * (3 * n + 1));
    char *r = malloc(4 * 3 * n + 1);
    int32_t nu, nv, nr;
    u_strFromUTF8(u, (int32_t)n + 1, &nu, s, (int32_t)n, &ue);
    nv = unorm2_normalize(unorm2_getNFCInstance(&ue), u, nu, v, (int32_t)(3 * n + 1), &ue);
    u_strToUTF8(r, (int32_t)(12 * n + 1), &nr, v, nv, &ue);
    assert_true(U_SUCCESS(ue));
    free(u);
    free(v);
    return r;
}

static int roundtrip(const lm_qwen_tokenizer *t, const char *text, const char *what)
{
    int32_t *ids;
    int64_t n;
    assert_int_equal(lm_qwen_tokenizer_encode(t, text, &ids, &n), LM_OK);
    char *back = lm_qwen_tokenizer_decode(t, ids, n);
    free(ids);
    char *want = nfc(text);
    int ok = check_text(back, want, "decode(encode(x))", what);
    free(want);
    return ok;
}

static void test_decode(void **state)
{
    (void)state;
    lm_qwen_tokenizer *t = tok_load(DIT "tokenizer");
    int bad = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItem(tokens, "prompts")) {
        const char *p = cJSON_GetObjectItem(r, "prompt")->valuestring;
        bad += !roundtrip(t, p, p);
        bad += !roundtrip(t, cJSON_GetObjectItem(r, "chat_nothink")->valuestring, p);
    }
    cJSON_ArrayForEach(r, cJSON_GetObjectItem(tokens, "extra")) {
        const char *p = cJSON_GetObjectItem(r, "prompt")->valuestring;
        bad += !roundtrip(t, p, p);
    }
    /* bytes that are not UTF-8 decode as U+FFFD; an id outside the vocabulary */
    int32_t half[2] = {0, 0};
    int32_t *ids;
    int64_t n;
    assert_int_equal(lm_qwen_tokenizer_encode(t, "\xC3\xA9", &ids, &n), LM_OK);
    assert_int_equal(n, 1);   /* é is one token of this vocabulary */
    free(ids);
    assert_int_equal(lm_qwen_tokenizer_encode(t, "\xF0\x9F\x90\xB1", &ids, &n), LM_OK);
    assert_true(n >= 2);
    half[0] = ids[0];
    free(ids);
    bad += !check_text(lm_qwen_tokenizer_decode(t, half, 1), "\xEF\xBF\xBD", "a partial emoji", "🐱");
    int32_t out[1] = {825};
    assert_null(lm_qwen_tokenizer_decode(t, out, 1));
    tu_expect_message("id 825 (at 0) is not in the vocabulary of 825", NULL);
    lm_qwen_tokenizer_free(t);
    assert_int_equal(bad, 0);
}

static void test_long_inputs(void **state)
{
    (void)state;
    lm_qwen_tokenizer *t = tok_load(DIT "tokenizer");
    size_t n = 100 * 1024;
    char *s = malloc(n + 1);
    int bad = 0;
    static const char *fill[4] = {"a", " ", "the quick brown fox, 123\n", "東京の夜景 <|im_end|>"};
    for (int k = 0; k < 4; k++) {
        size_t m = strlen(fill[k]), i = 0;
        for (; i + m <= n; i += m) memcpy(s + i, fill[k], m);
        s[i] = 0;
        int32_t *ids;
        int64_t nid;
        assert_int_equal(lm_qwen_tokenizer_encode(t, s, &ids, &nid), LM_OK);
        printf("  %zu bytes of \"%s\": %lld ids\n", i, k == 2 ? "the quick brown fox, 123\\n" : fill[k],
               (long long)nid);
        assert_true(nid > 0);
        free(ids);
        bad += !roundtrip(t, s, fill[k]);
    }
    /* padded: the first ids, truncated */
    int32_t ids[512], mask[512];
    int64_t nreal;
    assert_int_equal(lm_qwen_tokenizer_encode_padded(t, s, 512, ids, mask, &nreal), LM_OK);
    assert_int_equal(nreal, 512);
    assert_int_equal(mask[511], 1);
    free(s);
    lm_qwen_tokenizer_free(t);
    assert_int_equal(bad, 0);
}

static void set_template(const char *text)
{
    tu_spit(path_in("chat_template.jinja"), text, strlen(text));
}

static void test_templates(void **state)
{
    (void)state;
    write_vocab_merges_folder();
    /* Qwen3's template with its indentation and trims gone, quotes swapped */
    size_t n;
    char *q3 = tu_slurp(DIT "qwen3_chat_template.jinja", &n);
    char *flat = malloc(n + 1);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (q3[i] == '\n' && i + 1 < n && q3[i + 1] == ' ') continue;
        if (q3[i] == ' ' && (m == 0 || flat[m - 1] == ' ' || flat[m - 1] == '\n')) continue;
        if (q3[i] == '-' && m && (flat[m - 1] == '%' || flat[m - 1] == '{') && m >= 2 && flat[m - 2] == '{') continue;
        flat[m++] = q3[i];
    }
    flat[m] = 0;
    set_template(flat);
    lm_qwen_tokenizer *t = tok_load(tmpdir);
    char *got = lm_qwen_tokenizer_chat(t, "hi", 0);
    assert_int_equal(check_text(got, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
                                "<think>\n\n</think>\n\n", "reindented Qwen3", "hi"), 1);
    lm_qwen_tokenizer_free(t);
    free(flat);
    /* Qwen3's later template: the user turn renders a variable */
    char *later = tu_replace(q3, "{%- for message in messages %}\n    {%- if (message.role",
                             "{%- for message in messages %}\n    {%- if message.content is string %}\n"
                             "        {%- set content = message.content %}\n    {%- else %}\n"
                             "        {%- set content = '' %}\n    {%- endif %}\n    {%- if (message.role");
    char *later2 = tu_replace(later, "'\\n' + message.content + '<|im_end|>'", "'\\n' + content + '<|im_end|>'");
    set_template(later2);
    free(later);
    free(later2);
    t = tok_load(tmpdir);
    got = lm_qwen_tokenizer_chat(t, "hi", 1);
    assert_int_equal(check_text(got, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
                                "later Qwen3", "hi"), 1);
    lm_qwen_tokenizer_free(t);
    /* a Qwen3 template whose generation prompt differs: unknown */
    char *odd = tu_replace(q3, "'<think>\\n\\n</think>\\n\\n'", "'<think>\\n</think>\\n'");
    set_template(odd);
    free(odd);
    t = tok_load(tmpdir);
    assert_null(lm_qwen_tokenizer_chat(t, "hi", 0));
    tu_expect_message("unknown chat template in chat_template.jinja (\"{%- if tools %}", 
                      "only Qwen3's and ChatML are rendered");
    lm_qwen_tokenizer_free(t);
    free(q3);
    /* ChatML as Qwen2.5 writes it, its default system message first */
    set_template(
        "{%- if messages[0]['role'] == 'system' %}\n"
        "    {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
        "{%- else %}\n"
        "    {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}\n"
        "{%- endif %}\n"
        "{%- for message in messages %}\n"
        "    {%- if message.role == \"user\" or (message.role == \"system\" and not loop.first) %}\n"
        "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
        "    {%- endif %}\n"
        "{%- endfor %}\n"
        "{%- if add_generation_prompt %}\n"
        "    {{- '<|im_start|>assistant\\n' }}\n"
        "{%- endif %}\n");
    t = tok_load(tmpdir);
    got = lm_qwen_tokenizer_chat(t, "hi", 0);
    assert_int_equal(check_text(got, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. "
                                "You are a helpful assistant.<|im_end|>\n<|im_start|>user\nhi"
                                "<|im_end|>\n<|im_start|>assistant\n", "Qwen2.5 ChatML", "hi"), 1);
    lm_qwen_tokenizer_free(t);
    /* plain ChatML */
    set_template("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                 "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
                 "{{ '<|im_start|>assistant\\n' }}{% endif %}");
    t = tok_load(tmpdir);
    got = lm_qwen_tokenizer_chat(t, "hi", 1);
    assert_int_equal(check_text(got, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
                                "ChatML", "hi"), 1);
    lm_qwen_tokenizer_free(t);
    /* the template in tokenizer_config.json, unknown */
    unlink(path_in("chat_template.jinja"));
    char *cfg = tu_slurp(path_in("tokenizer_config.json"), &n);
    char *cfg2 = tu_replace(cfg, "\"model_max_length\"",
                            "\"chat_template\": \"{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}\",\n"
                            "\"model_max_length\"");
    tu_spit(path_in("tokenizer_config.json"), cfg2, strlen(cfg2));
    t = tok_load(tmpdir);
    assert_null(lm_qwen_tokenizer_chat(t, "hi", 1));
    tu_expect_message("unknown chat template in tokenizer_config.json (\"{{ bos_token }}{% for m in "
                      "messages %}{{ m.conte...\"", "only Qwen3's and ChatML are rendered");
    lm_qwen_tokenizer_free(t);
    free(cfg2);
    /* no template at all: encoding works, chat is an error */
    tu_spit(path_in("tokenizer_config.json"), cfg, strlen(cfg));
    free(cfg);
    t = tok_load(tmpdir);
    int32_t *ids;
    int64_t nid;
    assert_int_equal(lm_qwen_tokenizer_encode(t, "hi", &ids, &nid), LM_OK);
    free(ids);
    assert_null(lm_qwen_tokenizer_chat(t, "hi", 1));
    tu_expect_message("no chat template (neither chat_template.jinja nor tokenizer_config.json's "
                      "chat_template)", NULL);
    lm_qwen_tokenizer_free(t);
}

/* The extra prompts cannot tell \s apart with the fixture's merges alone: no
 * merge joins "!" to the vertical tab (ċ) or to U+0085's first byte (Â), so
 * a \s without U+000B and U+0085 (ICU's documented [\t\n\f\r\p{Z}]) and
 * Oniguruma's White_Space give the same ids.  With such merges added, "!\v!"
 * and "!\u0085!" must keep transformers' ids: Oniguruma's \s makes "!", the
 * space character and "!" three pieces, and BPE never merges across pieces
 * (the narrower \s makes one piece, and merges).  "!\v!" is tokens.json's; "!\u0085!" is the bytes' ids of its
 * "x\u0085y" with "!" around them. */
static void test_whitespace_pieces(void **state)
{
    (void)state;
    tokenizer_json_folder();
    size_t n;
    char *s = tu_slurp(DIT "tokenizer/tokenizer.json", &n);
    cJSON *tj = cJSON_ParseWithLength(s, n);
    free(s);
    assert_non_null(tj);
    cJSON *model = cJSON_GetObjectItem(tj, "model");
    cJSON *vocab = cJSON_GetObjectItem(model, "vocab"), *merges = cJSON_GetObjectItem(model, "merges");
    /* ! + the tab, the tab + !, ! + U+0085's first byte; ! + ?, which are
     * one piece either way */
    static const char *pairs[4][2] = {{"!", "\xC4\x8B"}, {"\xC4\x8B", "!"}, {"!", "\xC3\x82"}, {"!", "?"}};
    for (int i = 0; i < 4; i++) {
        char joined[16];
        snprintf(joined, sizeof joined, "%s%s", pairs[i][0], pairs[i][1]);
        cJSON_AddNumberToObject(vocab, joined, 825 + i);
        cJSON_AddItemToArray(merges, cJSON_CreateStringArray(pairs[i], 2));
    }
    s = cJSON_PrintUnformatted(tj);
    tu_spit(path_in("tokenizer.json"), s, strlen(s));
    free(s);
    cJSON_Delete(tj);
    lm_qwen_tokenizer *t = tok_load(tmpdir);
    int32_t *ids;
    int64_t nid;
    /* the added merges are read: "!?" is one piece and one token */
    assert_int_equal(lm_qwen_tokenizer_encode(t, "!?", &ids, &nid), LM_OK);
    assert_int_equal(nid, 1);
    assert_int_equal(ids[0], 828);
    free(ids);
    int bad = 0;
    const cJSON *r, *vt = NULL, *nel = NULL;
    cJSON_ArrayForEach(r, cJSON_GetObjectItem(tokens, "extra")) {
        const char *p = cJSON_GetObjectItem(r, "prompt")->valuestring;
        if (!strcmp(p, "!\x0b!")) vt = cJSON_GetObjectItem(r, "ids_plain");
        if (!strcmp(p, "x\xC2\x85y")) nel = cJSON_GetObjectItem(r, "ids_plain");
    }
    assert_non_null(vt);
    assert_non_null(nel);
    bad += !check_ids(t, "!\x0b!", vt, "ids with a merge across the pieces", "!\\v!");
    cJSON *want = cJSON_CreateArray();
    cJSON_AddItemToArray(want, cJSON_CreateNumber(cJSON_GetArrayItem(vt, 0)->valueint));
    cJSON_AddItemToArray(want, cJSON_CreateNumber(cJSON_GetArrayItem(nel, 1)->valueint));
    cJSON_AddItemToArray(want, cJSON_CreateNumber(cJSON_GetArrayItem(nel, 2)->valueint));
    cJSON_AddItemToArray(want, cJSON_CreateNumber(cJSON_GetArrayItem(vt, 0)->valueint));
    bad += !check_ids(t, "!\xC2\x85!", want, "ids with a merge across the pieces", "!\\u0085!");
    cJSON_Delete(want);
    printf("  merges across \\s pieces: %d of 2 prompts differ\n", bad);
    lm_qwen_tokenizer_free(t);
    assert_int_equal(bad, 0);
}

/* tokens.json's ChatML template as tokenizer_config.json's chat_template in
 * a copy of tests/ref/dit/tokenizer (no chat_template.jinja): "hi" renders
 * as transformers' apply_chat_template did with add_generation_prompt,
 * whatever the thinking switch (ChatML has none) */
static void test_chatml_fixture(void **state)
{
    (void)state;
    const cJSON *ref = cJSON_GetObjectItem(tokens, "chatml");
    assert_non_null(ref);
    const char *tmpl = cJSON_GetObjectItem(ref, "template")->valuestring;
    const char *want = cJSON_GetObjectItem(ref, "hi")->valuestring;
    tokenizer_json_folder();
    unlink(path_in("chat_template.jinja"));
    tu_copy_file(DIT "tokenizer/tokenizer.json", path_in("tokenizer.json"));
    size_t n;
    char *s = tu_slurp(DIT "tokenizer/tokenizer_config.json", &n);
    cJSON *cfg = cJSON_ParseWithLength(s, n);
    free(s);
    assert_non_null(cfg);
    cJSON_AddStringToObject(cfg, "chat_template", tmpl);
    s = cJSON_PrintUnformatted(cfg);
    tu_spit(path_in("tokenizer_config.json"), s, strlen(s));
    free(s);
    cJSON_Delete(cfg);
    lm_qwen_tokenizer *t = tok_load(tmpdir);
    int bad = 0;
    for (int think = -1; think <= 1; think++) {
        char what[32];
        snprintf(what, sizeof what, "ChatML (thinking %d)", think);
        bad += !check_text(lm_qwen_tokenizer_chat(t, "hi", think), want, what, "hi");
    }
    printf("  tokenizer_config.json's ChatML template: %d of 3 renderings differ\n", bad);
    lm_qwen_tokenizer_free(t);
    unlink(path_in("tokenizer.json"));
    assert_int_equal(bad, 0);
}

/* added tokens: longest first; a normalized one matched after NFC, the
 * others in the raw text */
static void test_added_tokens(void **state)
{
    (void)state;
    tokenizer_json_folder();
    size_t n;
    char *tj = tu_slurp(DIT "tokenizer/tokenizer.json", &n);
    char *e = tu_replace(tj, "\"added_tokens\": [",
                         "\"added_tokens\": [{\"id\": 825, \"content\": \"na\u00efve\", "
                         "\"normalized\": true, \"special\": false}, {\"id\": 826, \"content\": "
                         "\"cafe\\u0301\", \"normalized\": false, \"special\": false}, {\"id\": 827, "
                         "\"content\": \"<|im_end|>!\", \"normalized\": false, \"special\": true},");
    tu_spit(path_in("tokenizer.json"), e, strlen(e));
    free(e);
    free(tj);
    lm_qwen_tokenizer *t = tok_load(tmpdir);
    assert_int_equal(lm_qwen_tokenizer_vocab_size(t), 828);
    int32_t *ids;
    int64_t nid;
    /* decomposed naïve: NFC first, then the normalized token */
    assert_int_equal(lm_qwen_tokenizer_encode(t, "x nai\xCC\x88ve", &ids, &nid), LM_OK);
    assert_int_equal(ids[nid - 1], 825);
    free(ids);
    /* "cafe" + U+0301 matches in the raw text only: NFC would make it café */
    assert_int_equal(lm_qwen_tokenizer_encode(t, "cafe\xCC\x81", &ids, &nid), LM_OK);
    assert_int_equal(nid, 1);
    assert_int_equal(ids[0], 826);
    free(ids);
    /* <|im_end|>! is longer than <|im_end|> */
    assert_int_equal(lm_qwen_tokenizer_encode(t, "<|im_end|>!<|im_end|>", &ids, &nid), LM_OK);
    assert_int_equal(nid, 2);
    assert_int_equal(ids[0], 827);
    assert_int_equal(ids[1], 822);
    free(ids);
    lm_qwen_tokenizer_free(t);
}

static void expect_load_error(const char *needle1, const char *needle2)
{
    assert_null(lm_qwen_tokenizer_load(tmpdir));
    tu_expect_message(needle1, needle2);
}

static void test_errors(void **state)
{
    (void)state;
    tokenizer_json_folder();
    size_t n;
    char *tj = tu_slurp(DIT "tokenizer/tokenizer.json", &n);
    const char *p = path_in("tokenizer.json");
    tu_spit(p, tj, n);
    lm_qwen_tokenizer_free(tok_load(tmpdir));
    /* truncated */
    tu_spit(p, tj, n / 2);
    expect_load_error("tokenizer.json: not valid JSON", NULL);
    /* another normalizer */
    char *e = tu_replace(tj, "\"type\": \"NFC\"", "\"type\": \"NFKC\"");
    tu_spit(p, e, strlen(e));
    free(e);
    expect_load_error("tokenizer.json: normalizer: type \"NFKC\" is not implemented", NULL);
    /* another pre-tokenizer */
    e = tu_replace(tj, "\"type\": \"Sequence\"", "\"type\": \"Whitespace\"");
    tu_spit(p, e, strlen(e));
    free(e);
    expect_load_error("tokenizer.json: pre_tokenizer: type \"Whitespace\" is not implemented", NULL);
    /* another model */
    e = tu_replace(tj, "\"type\": \"BPE\"", "\"type\": \"WordPiece\"");
    tu_spit(p, e, strlen(e));
    free(e);
    expect_load_error("tokenizer.json: model: type \"WordPiece\" is not implemented (BPE)", NULL);
    /* a prefix space */
    e = tu_replace(tj, "\"add_prefix_space\": false", "\"add_prefix_space\": true");
    tu_spit(p, e, strlen(e));
    free(e);
    expect_load_error("pre_tokenizer ByteLevel.add_prefix_space is true: not implemented", NULL);
    /* a vocabulary without "ing": the merge "in g" names no token */
    e = tu_replace(tj, "\"ing\":", "\"xyz\":");
    tu_spit(p, e, strlen(e));
    free(e);
    expect_load_error("model.merges index 4 (\"in g\"): \"ing\" is not in the vocabulary", NULL);
    /* a pad token outside the vocabulary */
    tu_spit(p, tj, n);
    char *cfg = tu_slurp(path_in("tokenizer_config.json"), &n);
    e = tu_replace(cfg, "\"pad_token\":\"<|endoftext|>\"", "\"pad_token\":\"<pad>\"");
    tu_spit(path_in("tokenizer_config.json"), e, strlen(e));
    free(e);
    expect_load_error("tokenizer_config.json: pad_token \"<pad>\" is not in the vocabulary", NULL);
    tu_spit(path_in("tokenizer_config.json"), cfg, strlen(cfg));
    free(cfg);
    free(tj);
    /* nothing to read */
    unlink(p);
    expect_load_error("neither tokenizer.json nor vocab.json + merges.txt", NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokenizer_json),
        cmocka_unit_test(test_vocab_merges),
        cmocka_unit_test(test_zimage_folder),
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_long_inputs),
        cmocka_unit_test(test_templates),
        cmocka_unit_test(test_chatml_fixture),
        cmocka_unit_test(test_whitespace_pieces),
        cmocka_unit_test(test_added_tokens),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
