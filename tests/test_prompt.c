/* test_prompt.c - models/prompt.c against A1111 (tests/ref/gen_prompt.py
 * wrote tests/ref/prompt/prompts.json from its reference transcription of
 * prompt_parser.parse_prompt_attention, extra_networks.parse_prompt and
 * sd_hijack_clip's tokenize_line chunking; the script also checked its
 * parse_prompt_attention against A1111's own file).
 *
 * Parser: 229 prompts (nesting, escapes, unbalanced brackets, BREAK and its
 * word boundaries, Unicode whitespace and digits, emoji, weights Python's
 * float() refuses, 160 random ones), the same pairs with the same weights
 * bit for bit, or an error where A1111 raises.  Extra networks: 37 texts,
 * the clean text and each tag's kind and args.  Chunks: 20 token layouts
 * (BREAK, commas within and beyond 20 tokens of a chunk's end, fragments of
 * 0 to 110 tokens), the ids and multipliers of every chunk. */
#include <cjson/cJSON.h>
#include "testutil.h"
#include "models/prompt.h"

#define FIXTURE "tests/ref/prompt/prompts.json"

static cJSON *load(void)
{
    char *js = tu_slurp(FIXTURE, NULL);
    assert_non_null(js);
    cJSON *root = cJSON_Parse(js);
    free(js);
    assert_non_null(root);
    return root;
}

static void show(const char *what, const char *prompt, const lm_prompt *got, const cJSON *want)
{
    char *w = cJSON_PrintUnformatted(want);
    fprintf(stderr, "%s: %s\n  want %s\n  got ", what, prompt, w ? w : "?");
    free(w);
    for (int64_t i = 0; got && i < got->n; i++)
        fprintf(stderr, "[\"%s\", %.17g] ", got->pairs[i].text, got->pairs[i].weight);
    fprintf(stderr, "\n");
}

static void test_parse(void **state)
{
    (void)state;
    cJSON *root = load(), *rows = cJSON_GetObjectItem(root, "parse"), *row;
    int count = 0, bad = 0, errors = 0;
    cJSON_ArrayForEach(row, rows) {
        const char *p = cJSON_GetObjectItem(row, "prompt")->valuestring;
        const cJSON *pairs = cJSON_GetObjectItem(row, "pairs");
        lm_prompt got;
        lm_status st = lm_prompt_parse(p, strlen(p), &got);
        count++;
        if (!pairs) {   /* A1111 raised */
            errors++;
            if (st != LM_ERR_ARG) {
                show("expected an error", p, &got, row);
                bad++;
            } else if (!strstr(lm_error_message(), "not a number")) {
                fprintf(stderr, "%s: message '%s'\n", p, lm_error_message());
                bad++;
            }
            lm_prompt_free(&got);
            continue;
        }
        int ok = st == LM_OK && got.n == cJSON_GetArraySize(pairs);
        for (int64_t i = 0; ok && i < got.n; i++) {
            const cJSON *pr = cJSON_GetArrayItem(pairs, (int)i);
            const char *t = cJSON_GetArrayItem(pr, 0)->valuestring;
            double w = cJSON_GetArrayItem(pr, 1)->valuedouble;
            ok = strlen(t) == got.pairs[i].len && memcmp(t, got.pairs[i].text, got.pairs[i].len) == 0 &&
                 w == got.pairs[i].weight;
        }
        if (!ok) {
            if (st != LM_OK) fprintf(stderr, "%s\n", lm_error_message());
            show("pairs differ", p, &got, pairs);
            bad++;
        }
        lm_prompt_free(&got);
    }
    printf("parse: %d prompts (%d A1111 refuses), %d differ\n", count, errors, bad);
    assert_true(count >= 100);
    assert_true(errors >= 1);
    assert_int_equal(bad, 0);
    cJSON_Delete(root);
}

static void test_extra_networks(void **state)
{
    (void)state;
    cJSON *root = load(), *rows = cJSON_GetObjectItem(root, "extra"), *row;
    int count = 0, bad = 0, tags = 0;
    cJSON_ArrayForEach(row, rows) {
        const char *p = cJSON_GetObjectItem(row, "prompt")->valuestring;
        const char *want = cJSON_GetObjectItem(row, "clean")->valuestring;
        const cJSON *wt = cJSON_GetObjectItem(row, "tags");
        char *clean;
        size_t cl;
        lm_prompt_networks l;
        assert_int_equal(lm_prompt_extra_networks(p, strlen(p), &clean, &cl, &l), LM_OK);
        int ok = strcmp(clean, want) == 0 && cl == strlen(want) && l.n == cJSON_GetArraySize(wt);
        for (int i = 0; ok && i < l.n; i++) {
            const cJSON *t = cJSON_GetArrayItem(wt, i);
            ok = strcmp(cJSON_GetArrayItem(t, 0)->valuestring, l.items[i].kind) == 0 &&
                 l.items[i].nargs + 1 == cJSON_GetArraySize(t);
            for (int a = 0; ok && a < l.items[i].nargs; a++)
                ok = strcmp(cJSON_GetArrayItem(t, a + 1)->valuestring, l.items[i].args[a]) == 0;
            tags++;
        }
        if (!ok) {
            fprintf(stderr, "extra networks differ: '%s': clean '%s' (want '%s'), %d tags\n", p,
                    clean, want, l.n);
            bad++;
        }
        free(clean);
        lm_prompt_networks_free(&l);
        count++;
    }
    printf("extra networks: %d texts, %d tags, %d differ\n", count, tags, bad);
    assert_true(tags >= 10);
    assert_int_equal(bad, 0);
    cJSON_Delete(root);
}

static void test_chunks(void **state)
{
    (void)state;
    cJSON *root = load(), *rows = cJSON_GetObjectItem(root, "chunks"), *row;
    int count = 0, bad = 0, multi = 0;
    cJSON_ArrayForEach(row, rows) {
        const cJSON *parsed = cJSON_GetObjectItem(row, "parsed"), *toks = cJSON_GetObjectItem(row, "tokens");
        int np = cJSON_GetArraySize(parsed);
        lm_prompt pr = {calloc((size_t)np, sizeof(lm_prompt_pair)), np};
        int32_t **ids = calloc((size_t)np, sizeof *ids);
        int64_t *nids = calloc((size_t)np, sizeof *nids);
        assert_non_null(pr.pairs);
        for (int i = 0; i < np; i++) {
            const cJSON *pp = cJSON_GetArrayItem(parsed, i), *tl = cJSON_GetArrayItem(toks, i);
            pr.pairs[i].text = strdup(cJSON_GetArrayItem(pp, 0)->valuestring);
            pr.pairs[i].len = strlen(pr.pairs[i].text);
            pr.pairs[i].weight = cJSON_GetArrayItem(pp, 1)->valuedouble;
            nids[i] = cJSON_GetArraySize(tl);
            ids[i] = calloc((size_t)nids[i] + 1, sizeof **ids);
            for (int k = 0; k < nids[i]; k++) ids[i][k] = cJSON_GetArrayItem(tl, k)->valueint;
        }
        lm_prompt_chunks c;
        assert_int_equal(lm_prompt_chunk_tokens(&pr, (const int32_t *const *)ids, nids,
                                                cJSON_GetObjectItem(row, "bos")->valueint,
                                                cJSON_GetObjectItem(row, "eos")->valueint,
                                                cJSON_GetObjectItem(row, "comma")->valueint, NULL, &c), LM_OK);
        const cJSON *wc = cJSON_GetObjectItem(row, "chunks"), *wm = cJSON_GetObjectItem(row, "mults");
        int ok = c.n == cJSON_GetArraySize(wc);
        for (int64_t k = 0; ok && k < c.n; k++)
            for (int j = 0; ok && j < LM_PROMPT_CHUNK + 2; j++) {
                ok = c.ids[k * (LM_PROMPT_CHUNK + 2) + j] ==
                     cJSON_GetArrayItem(cJSON_GetArrayItem(wc, (int)k), j)->valueint;
                ok = ok && c.mults[k * (LM_PROMPT_CHUNK + 2) + j] ==
                     (float)cJSON_GetArrayItem(cJSON_GetArrayItem(wm, (int)k), j)->valuedouble;
            }
        if (!ok) {
            fprintf(stderr, "chunks differ in case %d: %lld chunks, want %d\n", count,
                    (long long)c.n, cJSON_GetArraySize(wc));
            bad++;
        }
        multi += c.n > 1;
        lm_prompt_chunks_free(&c);
        for (int i = 0; i < np; i++) free(ids[i]);
        free(ids);
        free(nids);
        lm_prompt_free(&pr);
        count++;
    }
    printf("chunks: %d layouts (%d of several chunks), %d differ\n", count, multi, bad);
    assert_true(multi >= 10);
    assert_int_equal(bad, 0);
    cJSON_Delete(root);
}

/* NUL bytes, invalid UTF-8 and a text with nothing but brackets */
static void test_bytes(void **state)
{
    (void)state;
    lm_prompt p;
    assert_int_equal(lm_prompt_parse("a\0(b)", 5, &p), LM_OK);
    assert_int_equal(p.n, 2);
    assert_int_equal(p.pairs[0].len, 2);
    assert_true(p.pairs[1].weight == 1.1);
    lm_prompt_free(&p);
    assert_int_equal(lm_prompt_parse("\xff" "BREAK\xc3", 7, &p), LM_OK);
    assert_int_equal(p.n, 3);   /* invalid bytes are no word characters */
    assert_true(lm_prompt_pair_is_break(&p.pairs[1]));
    lm_prompt_free(&p);
    assert_int_equal(lm_prompt_parse("(((", 3, &p), LM_OK);
    assert_int_equal(p.n, 1);
    assert_int_equal(p.pairs[0].len, 0);
    assert_true(p.pairs[0].weight == 1.0);
    lm_prompt_free(&p);
    assert_int_equal(lm_prompt_parse("(a:1.2.3)", 9, &p), LM_ERR_ARG);
    tu_expect_message("'1.2.3'", "byte 2");
    lm_prompt_free(&p);
}

/* a textual-inversion embedding: found by its name's tokens (the longest
 * first), its vectors in the chunk with the pair's weight and id 0; one
 * that does not fit starts the next chunk */
static void test_chunks_ti(void **state)
{
    (void)state;
    int32_t toks[80], name_a[2] = {7, 8}, name_b[1] = {7};
    for (int i = 0; i < 80; i++) toks[i] = 300 + i;
    toks[3] = 7, toks[4] = 8, toks[10] = 7, toks[71] = 7, toks[72] = 8;
    const int32_t *names[2] = {name_a, name_b};
    int64_t nn[2] = {2, 1}, vec[2] = {3, 2}, row[2] = {0, 3};
    lm_prompt_ti ti = {2, names, nn, vec, row};
    lm_prompt_pair pair = {"x", 1, 1.5};
    lm_prompt p = {&pair, 1};
    const int32_t *tl[1] = {toks};
    int64_t n = 80;
    lm_prompt_chunks c;
    assert_int_equal(lm_prompt_chunk_tokens(&p, tl, &n, 1, 2, -1, &ti, &c), LM_OK);
    assert_non_null(c.extra);
    assert_int_equal(c.n, 2);
    /* chunk 1: 300 301 302 [a a a] 305..309 [b b] 311 ... */
    int32_t want_x[14] = {-1, -1, -1, -1, 0, 1, 2, -1, -1, -1, -1, -1, 3, 4};
    for (int j = 0; j < 14; j++) assert_int_equal(c.extra[j], want_x[j]);
    assert_int_equal(c.ids[4], 0);
    assert_true(c.mults[4] == 1.5f);
    /* 13 tokens, then tokens 11..70 make 73: the second a (3 vectors) does
       not fit in the 2 left and opens chunk 2 */
    int64_t used = 0;
    for (int j = 1; j <= LM_PROMPT_CHUNK; j++) used += c.ids[j] != 2;
    assert_int_equal(used, 73);
    int64_t at = 1 * (LM_PROMPT_CHUNK + 2);
    assert_true(c.extra[at + 1] == 0 && c.extra[at + 2] == 1 && c.extra[at + 3] == 2);
    assert_int_equal(c.ids[at + 4], 373);
    lm_prompt_chunks_free(&c);
    /* no embedding found: no extra table */
    int32_t plain[3] = {300, 301, 302};
    const int32_t *pl[1] = {plain};
    n = 3;
    assert_int_equal(lm_prompt_chunk_tokens(&p, pl, &n, 1, 2, -1, &ti, &c), LM_OK);
    assert_null(c.extra);
    lm_prompt_chunks_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_extra_networks),
        cmocka_unit_test(test_chunks),
        cmocka_unit_test(test_bytes),
        cmocka_unit_test(test_chunks_ti),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
