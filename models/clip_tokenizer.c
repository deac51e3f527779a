/* clip_tokenizer.c - CLIP's byte-level BPE (see clip_tokenizer.h).
 *
 * Unicode work (NFC, whitespace, lowercasing, letter / number classes) is
 * ICU's (Debian libicu-dev): the tokenizers library that transformers runs
 * uses the same Unicode data.  BPE works on vocabulary ids: every merge
 * "a b" must name two tokens of the vocabulary whose concatenation is one
 * too (as the tokenizers library requires), so a word is an array of ids and
 * a merge is a lookup of the id pair. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>
#include "clip_tokenizer.h"
#include "diffusers_config.h"

#define TK_MAX_VOCAB_FILE (64u << 20)
#define TK_MAX_MERGES_FILE (64u << 20)
#define TK_MAX_TOKENIZER_JSON (128u << 20)
#define TK_MAX_CONFIG (1u << 20)
/* transformers' CLIPTokenizer reads merges.txt lines 1 .. 49152-256-2: the
 * merges CLIP's 49408-entry vocabulary holds; SD's merges.txt has more */
#define TK_MAX_MERGES (49152 - 256 - 2)
#define TK_MAX_TEXT (1u << 20)
#define TK_MAX_WORD (16u << 10)
#define TK_CACHE_MAX 8192
#define TK_MAX_SPECIAL 64
#define TK_EOW "</w>"

/* ---- string -> id table (open addressing, FNV-1a) ---- */
typedef struct tk_ent {
    char *key;          /* NULL = empty */
    uint32_t klen;
    int32_t id;         /* vocab: the id; cache: number of ids */
    int32_t *ids;       /* cache only */
} tk_ent;
typedef struct tk_table {
    tk_ent *e;
    size_t cap, n;
} tk_table;

static uint64_t tk_hash(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

static tk_ent *tk_find(const tk_table *t, const char *k, size_t n)
{
    if (!t->cap) return NULL;
    size_t i = tk_hash(k, n) & (t->cap - 1);
    for (;; i = (i + 1) & (t->cap - 1)) {
        tk_ent *e = &t->e[i];
        if (!e->key) return NULL;
        if (e->klen == n && !memcmp(e->key, k, n)) return e;
    }
}

static void tk_table_clear(tk_table *t)
{
    for (size_t i = 0; i < t->cap; i++) {
        free(t->e[i].key);
        free(t->e[i].ids);
    }
    free(t->e);
    memset(t, 0, sizeof *t);
}

static lm_status tk_grow(tk_table *t)
{
    size_t cap = t->cap ? t->cap * 2 : 1024;
    tk_ent *e = calloc(cap, sizeof *e);
    if (!e) return lm_error_set(LM_ERR_NOMEM, "clip tokenizer: out of memory");
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->e[i].key) continue;
        size_t j = tk_hash(t->e[i].key, t->e[i].klen) & (cap - 1);
        while (e[j].key) j = (j + 1) & (cap - 1);
        e[j] = t->e[i];
    }
    free(t->e);
    t->e = e;
    t->cap = cap;
    return LM_OK;
}

/* Inserts (copying k) or returns the existing entry; NULL when out of memory. */
static tk_ent *tk_put(tk_table *t, const char *k, size_t n, bool *fresh)
{
    if ((t->n + 1) * 2 > t->cap && tk_grow(t) != LM_OK) return NULL;
    size_t i = tk_hash(k, n) & (t->cap - 1);
    for (;; i = (i + 1) & (t->cap - 1)) {
        tk_ent *e = &t->e[i];
        if (e->key && e->klen == n && !memcmp(e->key, k, n)) {
            *fresh = false;
            return e;
        }
        if (!e->key) {
            e->key = malloc(n + 1);
            if (!e->key) {
                lm_error_set(LM_ERR_NOMEM, "clip tokenizer: out of memory");
                return NULL;
            }
            memcpy(e->key, k, n);
            e->key[n] = 0;
            e->klen = (uint32_t)n;
            t->n++;
            *fresh = true;
            return e;
        }
    }
}

/* ---- id pair -> (rank, merged id) ---- */
typedef struct tk_merge {
    uint64_t pair;      /* a << 32 | b, +1 so that 0 is empty */
    int32_t rank, id;
} tk_merge;

struct lm_clip_tokenizer {
    tk_table vocab;
    char **names;              /* id -> token (borrowed from vocab keys) */
    int64_t nids;              /* largest id + 1 */
    tk_merge *merges;
    size_t mcap;
    int32_t byte_id[256], byte_eow_id[256];
    char byte_utf8[256][3];    /* the byte's printable stand-in, UTF-8 */
    char *special[TK_MAX_SPECIAL];
    int32_t special_id[TK_MAX_SPECIAL];
    int nspecial;
    int32_t bos, eos, pad, unk;
    int64_t max_len;
    tk_table cache;            /* piece bytes -> ids */
    /* scratch */
    int32_t *out;
    size_t nout, capout;
};

static uint64_t pair_key(int32_t a, int32_t b)
{
    return ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
}

static const tk_merge *merge_find(const lm_clip_tokenizer *t, int32_t a, int32_t b)
{
    if (!t->mcap) return NULL;
    uint64_t k = pair_key(a, b);
    size_t i = (size_t)(k * 0x9E3779B97F4A7C15ull >> 20) & (t->mcap - 1);
    for (;; i = (i + 1) & (t->mcap - 1)) {
        if (!t->merges[i].pair) return NULL;
        if (t->merges[i].pair == k) return &t->merges[i];
    }
}

/* adds a merge unless the pair is there already: a repeated pair keeps its
 * first (lowest) rank, as the tokenizers library does */
static void merge_put(lm_clip_tokenizer *t, int32_t a, int32_t b, int32_t rank, int32_t id)
{
    uint64_t k = pair_key(a, b);
    size_t i = (size_t)(k * 0x9E3779B97F4A7C15ull >> 20) & (t->mcap - 1);
    while (t->merges[i].pair && t->merges[i].pair != k) i = (i + 1) & (t->mcap - 1);
    if (t->merges[i].pair) return;
    t->merges[i] = (tk_merge){k, rank, id};
}

/* GPT-2's table: printable bytes stand for themselves, the others map to
 * U+0100 upwards in byte order. */
static void byte_table(lm_clip_tokenizer *t)
{
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        int cp = keep ? b : 256 + n++;
        char *u = t->byte_utf8[b];
        if (cp < 0x80) { u[0] = (char)cp; u[1] = 0; }
        else { u[0] = (char)(0xC0 | (cp >> 6)); u[1] = (char)(0x80 | (cp & 0x3F)); u[2] = 0; }
    }
}

static int32_t vocab_id(const lm_clip_tokenizer *t, const char *s, size_t n)
{
    const tk_ent *e = tk_find(&t->vocab, s, n);
    return e ? e->id : -1;
}

static lm_status vocab_add(lm_clip_tokenizer *t, const char *s, size_t n, double id,
                           const char *what)
{
    if (!(id >= 0 && id < INT32_MAX && id == (double)(int64_t)id))
        return lm_error_set(LM_ERR_FORMAT, "%s: token \"%.40s\": id %g is not an integer in "
                            "[0, 2^31)", what, s, id);
    bool fresh;
    tk_ent *e = tk_put(&t->vocab, s, n, &fresh);
    if (!e) return LM_ERR_NOMEM;
    if (fresh) e->id = (int32_t)id;
    if ((int64_t)id + 1 > t->nids) t->nids = (int64_t)id + 1;
    return LM_OK;
}

/* where: "line" (merges.txt) or "model.merges index" (tokenizer.json) */
static lm_status merge_line(lm_clip_tokenizer *t, const char *a, size_t na, const char *b,
                            size_t nb, int32_t rank, const char *what, const char *where,
                            long line)
{
    char buf[512];
    if (na + nb >= sizeof buf)
        return lm_error_set(LM_ERR_FORMAT, "%s: %s %ld: token longer than %zu bytes", what,
                            where, line, sizeof buf);
    int32_t ia = vocab_id(t, a, na), ib = vocab_id(t, b, nb);
    memcpy(buf, a, na);
    memcpy(buf + na, b, nb);
    int32_t ic = vocab_id(t, buf, na + nb);
    if (ia < 0 || ib < 0 || ic < 0) {
        const char *miss = ia < 0 ? a : ib < 0 ? b : buf;
        int nm = (int)(ia < 0 ? na : ib < 0 ? nb : na + nb);
        return lm_error_set(LM_ERR_FORMAT, "%s: %s %ld (\"%.*s %.*s\"): \"%.*s\" is not in "
                            "the vocabulary", what, where, line, (int)na, a, (int)nb, b, nm, miss);
    }
    merge_put(t, ia, ib, rank, ic);
    return LM_OK;
}

static lm_status merges_alloc(lm_clip_tokenizer *t, size_t n)
{
    size_t cap = 1024;
    while (cap < n * 2) cap *= 2;
    t->merges = calloc(cap, sizeof *t->merges);
    if (!t->merges) return lm_error_set(LM_ERR_NOMEM, "clip tokenizer: out of memory");
    t->mcap = cap;
    return LM_OK;
}

static lm_status load_vocab_json(lm_clip_tokenizer *t, const cJSON *v, const char *what)
{
    if (!cJSON_IsObject(v)) return lm_error_set(LM_ERR_FORMAT, "%s: vocab: expected an object", what);
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        if (!cJSON_IsNumber(e))
            return lm_error_set(LM_ERR_FORMAT, "%s: token \"%.40s\": id is not a number", what,
                                e->string);
        lm_status st = vocab_add(t, e->string, strlen(e->string), e->valuedouble, what);
        if (st != LM_OK) return st;
    }
    if (!t->vocab.n) return lm_error_set(LM_ERR_FORMAT, "%s: the vocabulary is empty", what);
    return LM_OK;
}

static lm_status load_merges_txt(lm_clip_tokenizer *t, const char *path)
{
    char *text;
    size_t n;
    lm_status st = lm_dfs_read(path, TK_MAX_MERGES_FILE, &text, &n);
    if (st != LM_OK) return st;
    size_t lines = 1;
    for (size_t i = 0; i < n; i++) lines += text[i] == '\n';
    st = merges_alloc(t, lines < TK_MAX_MERGES ? lines : TK_MAX_MERGES);
    int32_t rank = 0;
    long line = 0;
    for (char *p = text; st == LM_OK && p < text + n && rank < TK_MAX_MERGES;) {
        char *end = memchr(p, '\n', (size_t)(text + n - p));
        if (!end) end = text + n;
        line++;
        char *q = end;
        while (q > p && (q[-1] == '\r' || q[-1] == ' ' || q[-1] == '\t')) q--;
        if (q > p && !(line == 1 && !strncmp(p, "#version", 8))) {
            char *sp = memchr(p, ' ', (size_t)(q - p));
            if (!sp || sp == p || sp + 1 == q || memchr(sp + 1, ' ', (size_t)(q - sp - 1)))
                st = lm_error_set(LM_ERR_FORMAT, "%s: line %ld: expected two tokens separated "
                                  "by one space", path, line);
            else
                st = merge_line(t, p, (size_t)(sp - p), sp + 1, (size_t)(q - sp - 1), rank++,
                                path, "line", line);
        }
        p = end + 1;
    }
    free(text);
    return st;
}

static lm_status load_tokenizer_json(lm_clip_tokenizer *t, const char *path)
{
    cJSON *j;
    lm_status st = lm_dfs_json(path, TK_MAX_TOKENIZER_JSON, false, &j);
    if (st != LM_OK) return st;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "model");
    const char *type = NULL, *eow = NULL, *prefix = NULL;
    if (!cJSON_IsObject(m)) { st = lm_error_set(LM_ERR_FORMAT, "%s: model: missing", path); goto done; }
    if ((st = lm_dfs_str(m, "type", path, true, NULL, &type)) != LM_OK) goto done;
    if ((st = lm_dfs_str(m, "end_of_word_suffix", path, false, "", &eow)) != LM_OK) goto done;
    if ((st = lm_dfs_str(m, "continuing_subword_prefix", path, false, "", &prefix)) != LM_OK) goto done;
    if (strcmp(type, "BPE") || strcmp(eow, TK_EOW) || *prefix) {
        st = lm_error_set(LM_ERR_UNSUPPORTED, "%s: model: type %s, end_of_word_suffix \"%s\", "
                          "continuing_subword_prefix \"%s\": not CLIP's BPE (BPE, \"</w>\", \"\")",
                          path, type, eow, prefix);
        goto done;
    }
    if ((st = load_vocab_json(t, cJSON_GetObjectItemCaseSensitive(m, "vocab"), path)) != LM_OK)
        goto done;
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(j, "added_tokens"), *e;
    cJSON_ArrayForEach(e, added) {
        const char *c;
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        if ((st = lm_dfs_str(e, "content", path, true, NULL, &c)) != LM_OK) goto done;
        if (!cJSON_IsNumber(id)) { st = lm_error_set(LM_ERR_FORMAT, "%s: added_tokens: %s: id missing", path, c); goto done; }
        if ((st = vocab_add(t, c, strlen(c), id->valuedouble, path)) != LM_OK) goto done;
    }
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(m, "merges");
    if (!cJSON_IsArray(merges)) { st = lm_error_set(LM_ERR_FORMAT, "%s: model.merges: missing", path); goto done; }
    int n = cJSON_GetArraySize(merges);
    if ((st = merges_alloc(t, (size_t)n)) != LM_OK) goto done;
    int32_t rank = 0;
    cJSON_ArrayForEach(e, merges) {
        const char *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        if (cJSON_IsString(e)) {
            const char *sp = strchr(e->valuestring, ' ');
            if (sp && !strchr(sp + 1, ' ')) {
                a = e->valuestring; na = (size_t)(sp - a);
                b = sp + 1; nb = strlen(b);
            }
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 &&
                   cJSON_IsString(e->child) && cJSON_IsString(e->child->next)) {
            a = e->child->valuestring; na = strlen(a);
            b = e->child->next->valuestring; nb = strlen(b);
        }
        if (!a || !na || !nb) {
            st = lm_error_set(LM_ERR_FORMAT, "%s: model.merges[%d]: expected \"a b\" or [a, b]",
                              path, rank);
            goto done;
        }
        if ((st = merge_line(t, a, na, b, nb, rank, path, "model.merges index", (long)rank)) != LM_OK) goto done;
        rank++;
    }
done:
    cJSON_Delete(j);
    return st;
}

/* The special tokens: CLIP's defaults, then tokenizer_config.json, then
 * special_tokens_map.json (which wins, as in transformers). */
static lm_status load_specials(lm_clip_tokenizer *t, const char *dir)
{
    static const char *keys[4] = {"bos_token", "eos_token", "pad_token", "unk_token"};
    const char *val[4] = {"<|startoftext|>", "<|endoftext|>", "<|endoftext|>", "<|endoftext|>"};
    const char *from[4] = {"default", "default", "default", "default"};
    char *cfg_path = lm_dfs_path(dir, "tokenizer_config.json");
    char *map_path = lm_dfs_path(dir, "special_tokens_map.json");
    cJSON *cfg = NULL, *map = NULL;
    lm_status st = (!cfg_path || !map_path) ? LM_ERR_NOMEM : LM_OK;
    if (st == LM_OK) st = lm_dfs_json(cfg_path, TK_MAX_CONFIG, true, &cfg);
    if (st == LM_OK) st = lm_dfs_json(map_path, TK_MAX_CONFIG, true, &map);
    for (int k = 0; k < 4 && st == LM_OK; k++) {
        if (cfg && cJSON_GetObjectItemCaseSensitive(cfg, keys[k])) {
            st = lm_dfs_str(cfg, keys[k], cfg_path, false, val[k], &val[k]);
            from[k] = cfg_path;
        }
        if (st == LM_OK && map && cJSON_GetObjectItemCaseSensitive(map, keys[k])) {
            st = lm_dfs_str(map, keys[k], map_path, false, val[k], &val[k]);
            from[k] = map_path;
        }
    }
    int64_t maxlen = 77;
    if (st == LM_OK && cfg) {
        /* transformers writes a huge number when the length was never set */
        double d;
        st = lm_dfs_num(cfg, "model_max_length", cfg_path, false, 77, &d);
        if (st == LM_OK && d >= 2 && d <= 4096 && d == (double)(int64_t)d) maxlen = (int64_t)d;
    }
    t->max_len = maxlen;
    /* tokens a tokenizer_config.json adds (added_tokens_decoder) split out too */
    const cJSON *dec = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "added_tokens_decoder") : NULL, *e;
    cJSON_ArrayForEach(e, dec) {
        if (st != LM_OK) break;
        const char *c;
        char *endp;
        long id = strtol(e->string, &endp, 10);
        st = lm_dfs_str(e, "content", cfg_path, true, NULL, &c);
        if (st == LM_OK && (*endp || id < 0))
            st = lm_error_set(LM_ERR_FORMAT, "%s: added_tokens_decoder: key %s is not an id",
                              cfg_path, e->string);
        if (st == LM_OK && vocab_id(t, c, strlen(c)) < 0) st = vocab_add(t, c, strlen(c), (double)id, cfg_path);
    }
    int32_t *dst[4] = {&t->bos, &t->eos, &t->pad, &t->unk};
    for (int k = 0; k < 4 && st == LM_OK; k++) {
        *dst[k] = vocab_id(t, val[k], strlen(val[k]));
        if (*dst[k] < 0)
            st = lm_error_set(LM_ERR_FORMAT, "%s: %s \"%s\" is not in the vocabulary", from[k],
                              keys[k], val[k]);
    }
    /* every special token and every added token is matched in the raw text */
    for (size_t i = 0; i < t->vocab.cap && st == LM_OK; i++) {
        const tk_ent *v = &t->vocab.e[i];
        if (!v->key) continue;
        bool sp = false;
        for (int k = 0; k < 4; k++) sp |= !strcmp(v->key, val[k]);
        if (!sp && v->klen > 4 && !strncmp(v->key, "<|", 2) && !strcmp(v->key + v->klen - 2, "|>"))
            sp = true;   /* <|...|> added tokens of tokenizer.json / added_tokens_decoder */
        if (!sp) continue;
        if (t->nspecial == TK_MAX_SPECIAL) {
            st = lm_error_set(LM_ERR_FORMAT, "%s: more than %d special tokens", dir, TK_MAX_SPECIAL);
            break;
        }
        t->special[t->nspecial] = v->key;
        t->special_id[t->nspecial++] = v->id;
    }
    cJSON_Delete(cfg);
    cJSON_Delete(map);
    free(cfg_path);
    free(map_path);
    return st;
}

void lm_clip_tokenizer_free(lm_clip_tokenizer *t)
{
    if (!t) return;
    tk_table_clear(&t->vocab);
    tk_table_clear(&t->cache);
    free(t->names);
    free(t->merges);
    free(t->out);
    free(t);
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

lm_clip_tokenizer *lm_clip_tokenizer_load(const char *dir)
{
    lm_clip_tokenizer *t = calloc(1, sizeof *t);
    char *vocab = lm_dfs_path(dir, "vocab.json"), *merges = lm_dfs_path(dir, "merges.txt");
    char *tj = lm_dfs_path(dir, "tokenizer.json");
    lm_status st = (!t || !vocab || !merges || !tj)
        ? lm_error_set(LM_ERR_NOMEM, "clip tokenizer: out of memory") : LM_OK;
    if (st == LM_OK) {
        byte_table(t);
        if (exists(vocab) || !exists(tj)) {
            cJSON *v = NULL;
            st = lm_dfs_json(vocab, TK_MAX_VOCAB_FILE, false, &v);
            if (st == LM_OK) st = load_vocab_json(t, v, vocab);
            cJSON_Delete(v);
            if (st == LM_OK) st = load_merges_txt(t, merges);
        } else {
            st = load_tokenizer_json(t, tj);
        }
    }
    if (st == LM_OK) st = load_specials(t, dir);
    if (st == LM_OK) {
        /* ids of the 256 byte symbols, alone and ending a word */
        for (int b = 0; b < 256; b++) {
            char s[8];
            size_t n = strlen(t->byte_utf8[b]);
            memcpy(s, t->byte_utf8[b], n);
            t->byte_id[b] = vocab_id(t, s, n);
            memcpy(s + n, TK_EOW, 4);
            t->byte_eow_id[b] = vocab_id(t, s, n + 4);
        }
        t->names = calloc((size_t)t->nids, sizeof *t->names);
        if (!t->names) st = lm_error_set(LM_ERR_NOMEM, "clip tokenizer: out of memory");
        for (size_t i = 0; st == LM_OK && i < t->vocab.cap; i++)
            if (t->vocab.e[i].key && !t->names[t->vocab.e[i].id])
                t->names[t->vocab.e[i].id] = t->vocab.e[i].key;
    }
    free(vocab);
    free(merges);
    free(tj);
    if (st != LM_OK) {
        lm_error_prefix("clip tokenizer %s", dir);
        lm_clip_tokenizer_free(t);
        return NULL;
    }
    return t;
}

/* ---- encoding ---- */
static lm_status out_push(lm_clip_tokenizer *t, int32_t id)
{
    if (t->nout == t->capout) {
        size_t cap = t->capout ? t->capout * 2 : 256;
        int32_t *p = realloc(t->out, cap * sizeof *p);
        if (!p) return lm_error_set(LM_ERR_NOMEM, "clip tokenizer: out of memory");
        t->out = p;
        t->capout = cap;
    }
    t->out[t->nout++] = id;
    return LM_OK;
}

/* BPE of one piece (raw UTF-8 bytes), appended to t->out. */
static lm_status bpe(lm_clip_tokenizer *t, const unsigned char *s, size_t n)
{
    tk_ent *c = tk_find(&t->cache, (const char *)s, n);
    if (c) {
        for (int32_t i = 0; i < c->id; i++)
            if (out_push(t, c->ids[i]) != LM_OK) return LM_ERR_NOMEM;
        return LM_OK;
    }
    if (n > TK_MAX_WORD)
        return lm_error_set(LM_ERR_ARG, "clip tokenizer: a word of %zu bytes (at most %u)", n,
                            TK_MAX_WORD);
    int32_t *w = malloc(n * sizeof *w);
    if (!w) return lm_error_set(LM_ERR_NOMEM, "clip tokenizer: out of memory");
    for (size_t i = 0; i < n; i++) w[i] = i + 1 == n ? t->byte_eow_id[s[i]] : t->byte_id[s[i]];
    size_t len = n;
    while (len > 1) {
        const tk_merge *best = NULL;
        for (size_t i = 0; i + 1 < len; i++) {
            if (w[i] < 0 || w[i + 1] < 0) continue;
            const tk_merge *m = merge_find(t, w[i], w[i + 1]);
            if (m && (!best || m->rank < best->rank)) best = m;
        }
        if (!best) break;
        int32_t a = (int32_t)((best->pair - 1) >> 32), b = (int32_t)(uint32_t)(best->pair - 1);
        size_t j = 0;
        for (size_t i = 0; i < len;) {
            if (i + 1 < len && w[i] == a && w[i + 1] == b) {
                w[j++] = best->id;
                i += 2;
            } else {
                w[j++] = w[i++];
            }
        }
        len = j;
    }
    for (size_t i = 0; i < len; i++)
        if (w[i] < 0) w[i] = t->unk;
    if (t->cache.n >= TK_CACHE_MAX) tk_table_clear(&t->cache);
    bool fresh;
    c = tk_put(&t->cache, (const char *)s, n, &fresh);
    if (c && fresh) {
        c->ids = w;
        c->id = (int32_t)len;
    }
    lm_status st = LM_OK;
    for (size_t i = 0; i < len && st == LM_OK; i++) st = out_push(t, w[i]);
    if (!c || !fresh) free(w);
    return st;
}

static size_t put_utf8(unsigned char *o, UChar32 c)
{
    if (c < 0x80) { o[0] = (unsigned char)c; return 1; }
    if (c < 0x800) { o[0] = (unsigned char)(0xC0 | (c >> 6)); o[1] = (unsigned char)(0x80 | (c & 0x3F)); return 2; }
    if (c < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (c >> 12)); o[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (c >> 18)); o[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3F)); o[3] = (unsigned char)(0x80 | (c & 0x3F));
    return 4;
}

static bool is_ws(UChar32 c) { return u_isUWhiteSpace(c); }
static bool is_l(UChar32 c) { return (U_GET_GC_MASK(c) & U_GC_L_MASK) != 0; }
static bool is_n(UChar32 c) { return (U_GET_GC_MASK(c) & U_GC_N_MASK) != 0; }

/* How many code points of the contraction at cp[i] ('s 't 're 've 'm 'll 'd), or 0. */
static size_t contraction(const UChar32 *cp, size_t n, size_t i)
{
    if (cp[i] != '\'' || i + 1 >= n) return 0;
    UChar32 a = cp[i + 1], b = i + 2 < n ? cp[i + 2] : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* Normalizes, splits and encodes one stretch of text without special tokens. */
static lm_status encode_plain(lm_clip_tokenizer *t, const char *text, size_t len)
{
    if (!len) return LM_OK;
    UErrorCode ue = U_ZERO_ERROR;
    int32_t n16 = 0;
    u_strFromUTF8WithSub(NULL, 0, &n16, text, (int32_t)len, 0xFFFD, NULL, &ue);
    if (ue != U_BUFFER_OVERFLOW_ERROR && U_FAILURE(ue))
        return lm_error_set(LM_ERR_ARG, "clip tokenizer: text: %s", u_errorName(ue));
    UChar *u = malloc(sizeof *u * ((size_t)n16 + 1));
    const UNormalizer2 *nfc = NULL;
    UChar *v = NULL;
    UChar32 *cp = NULL;
    unsigned char *piece = NULL;
    lm_status st = LM_OK;
    if (!u) return lm_error_set(LM_ERR_NOMEM, "clip tokenizer: out of memory");
    ue = U_ZERO_ERROR;
    u_strFromUTF8WithSub(u, n16 + 1, &n16, text, (int32_t)len, 0xFFFD, NULL, &ue);
    if (U_SUCCESS(ue)) nfc = unorm2_getNFCInstance(&ue);
    int32_t nv = 0;
    if (U_SUCCESS(ue)) {
        nv = unorm2_normalize(nfc, u, n16, NULL, 0, &ue);
        if (ue == U_BUFFER_OVERFLOW_ERROR) ue = U_ZERO_ERROR;
    }
    if (U_SUCCESS(ue)) {
        v = malloc(sizeof *v * ((size_t)nv + 1));
        if (!v) { st = lm_error_set(LM_ERR_NOMEM, "clip tokenizer: out of memory"); goto done; }
        nv = unorm2_normalize(nfc, u, n16, v, nv + 1, &ue);
    }
    if (U_FAILURE(ue)) { st = lm_error_set(LM_ERR_ARG, "clip tokenizer: normalizing: %s", u_errorName(ue)); goto done; }
    /* whitespace runs -> one space, then full lowercase per code point: a
     * code point lowercases to at most 3 */
    cp = malloc(sizeof *cp * ((size_t)nv * 3 + 1));
    piece = malloc((size_t)nv * 12 + 4);
    if (!cp || !piece) { st = lm_error_set(LM_ERR_NOMEM, "clip tokenizer: out of memory"); goto done; }
    size_t ncp = 0;
    for (int32_t i = 0; i < nv;) {
        UChar32 c;
        int32_t at = i;
        U16_NEXT(v, i, nv, c);
        if (is_ws(c)) {
            cp[ncp++] = ' ';
            while (i < nv) {
                int32_t j = i;
                UChar32 d;
                U16_NEXT(v, j, nv, d);
                if (!is_ws(d)) break;
                i = j;
            }
            continue;
        }
        UChar low[8];
        UErrorCode le = U_ZERO_ERROR;
        int32_t nl = u_strToLower(low, 8, v + at, i - at, "", &le);
        if (U_FAILURE(le)) { st = lm_error_set(LM_ERR_ARG, "clip tokenizer: lowercasing: %s", u_errorName(le)); goto done; }
        for (int32_t k = 0; k < nl;) {
            UChar32 d;
            U16_NEXT(low, k, nl, d);
            cp[ncp++] = d;
        }
    }
    /* CLIP's pattern, leftmost first */
    for (size_t i = 0; i < ncp && st == LM_OK;) {
        size_t j = i;
        if (is_ws(cp[i])) { i++; continue; }
        size_t k = contraction(cp, ncp, i);
        if (k) j = i + k;
        else if (is_l(cp[i])) { while (j < ncp && is_l(cp[j])) j++; }
        else if (is_n(cp[i])) j = i + 1;
        else { while (j < ncp && !is_ws(cp[j]) && !is_l(cp[j]) && !is_n(cp[j])) j++; }
        size_t nb = 0;
        for (size_t q = i; q < j; q++) nb += put_utf8(piece + nb, cp[q]);
        st = bpe(t, piece, nb);
        i = j;
    }
done:
    free(u);
    free(v);
    free(cp);
    free(piece);
    return st;
}

lm_status lm_clip_tokenizer_encode(lm_clip_tokenizer *t, const char *text, size_t len, bool pad,
                                   int32_t *ids, int64_t *n, int64_t *n_full)
{
    if (!t || (!text && len)) return lm_error_set(LM_ERR_ARG, "clip tokenizer: encode: NULL argument");
    if (len > TK_MAX_TEXT)
        return lm_error_set(LM_ERR_ARG, "clip tokenizer: text of %zu bytes (at most %u)", len,
                            TK_MAX_TEXT);
    t->nout = 0;
    lm_status st = out_push(t, t->bos);
    size_t at = 0;
    while (st == LM_OK && at <= len) {
        /* the next special token: leftmost, then longest */
        size_t best_at = len, best_n = 0;
        int32_t best_id = -1;
        for (int s = 0; s < t->nspecial; s++) {
            size_t sl = strlen(t->special[s]);
            const char *p = sl <= len - at ? memmem(text + at, len - at, t->special[s], sl) : NULL;
            if (!p) continue;
            size_t pos = (size_t)(p - text);
            if (pos < best_at || (pos == best_at && sl > best_n)) {
                best_at = pos;
                best_n = sl;
                best_id = t->special_id[s];
            }
        }
        st = encode_plain(t, text + at, best_at - at);
        if (st != LM_OK || best_id < 0) break;
        st = out_push(t, best_id);
        at = best_at + best_n;
    }
    if (st == LM_OK) st = out_push(t, t->eos);
    if (st != LM_OK) return st;
    int64_t full = (int64_t)t->nout, m = 0;
    int64_t keep = full - 2 < t->max_len - 2 ? full - 2 : t->max_len - 2;
    ids[m++] = t->bos;
    for (int64_t i = 0; i < keep; i++) ids[m++] = t->out[1 + i];
    ids[m++] = t->eos;
    while (pad && m < t->max_len) ids[m++] = t->pad;
    *n = m;
    if (n_full) *n_full = full;
    return LM_OK;
}

int64_t lm_clip_tokenizer_max_length(const lm_clip_tokenizer *t) { return t->max_len; }
int64_t lm_clip_tokenizer_vocab_size(const lm_clip_tokenizer *t) { return t->nids; }
int32_t lm_clip_tokenizer_bos(const lm_clip_tokenizer *t) { return t->bos; }
int32_t lm_clip_tokenizer_eos(const lm_clip_tokenizer *t) { return t->eos; }
int32_t lm_clip_tokenizer_pad(const lm_clip_tokenizer *t) { return t->pad; }

const char *lm_clip_tokenizer_token(const lm_clip_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->nids ? t->names[id] : NULL;
}
