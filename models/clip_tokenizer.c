/* clip_tokenizer.c - CLIP's byte-level BPE (see clip_tokenizer.h).
 *
 * Unicode work (NFC, whitespace, lowercasing, letter / number classes) is
 * ICU's (Debian libicu-dev): the tokenizers library that transformers runs
 * uses the same Unicode data.  BPE works on vocabulary ids: every merge
 * "a b" must name two tokens of the vocabulary whose concatenation is one
 * too (as the tokenizers library requires), so a word is an array of ids and
 * a merge is a lookup of the id pair (tables and merge loop: bpe.c). */
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
#include "bpe.h"
#include "clip_tokenizer.h"
#include "diffusers_config.h"

#define TK_MAX_VOCAB_FILE (64u << 20)
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

struct lm_clip_tokenizer {
    lm_bpe bpe;                /* vocabulary, merges, byte table */
    char **names;              /* id -> token (borrowed from vocab keys) */
    int32_t byte_id[256], byte_eow_id[256];
    char *special[TK_MAX_SPECIAL];
    int32_t special_id[TK_MAX_SPECIAL];
    int nspecial;
    int32_t bos, eos, pad, unk;
    int64_t max_len;
    lm_bpe_table cache;        /* piece bytes -> ids */
    /* scratch */
    int32_t *out;
    size_t nout, capout;
};

static int32_t vocab_id(const lm_clip_tokenizer *t, const char *s, size_t n)
{
    return lm_bpe_id(&t->bpe, s, n);
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
    if ((st = lm_bpe_load_vocab(&t->bpe, cJSON_GetObjectItemCaseSensitive(m, "vocab"), path)) != LM_OK)
        goto done;
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(j, "added_tokens"), *e;
    cJSON_ArrayForEach(e, added) {
        const char *c;
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        if ((st = lm_dfs_str(e, "content", path, true, NULL, &c)) != LM_OK) goto done;
        if (!cJSON_IsNumber(id)) { st = lm_error_set(LM_ERR_FORMAT, "%s: added_tokens: %s: id missing", path, c); goto done; }
        if ((st = lm_bpe_add(&t->bpe, c, strlen(c), id->valuedouble, path)) != LM_OK) goto done;
    }
    st = lm_bpe_load_merges_json(&t->bpe, cJSON_GetObjectItemCaseSensitive(m, "merges"), path);
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
        if (st == LM_OK && vocab_id(t, c, strlen(c)) < 0) st = lm_bpe_add(&t->bpe, c, strlen(c), (double)id, cfg_path);
    }
    int32_t *dst[4] = {&t->bos, &t->eos, &t->pad, &t->unk};
    for (int k = 0; k < 4 && st == LM_OK; k++) {
        *dst[k] = vocab_id(t, val[k], strlen(val[k]));
        if (*dst[k] < 0)
            st = lm_error_set(LM_ERR_FORMAT, "%s: %s \"%s\" is not in the vocabulary", from[k],
                              keys[k], val[k]);
    }
    /* every special token and every added token is matched in the raw text */
    for (size_t i = 0; i < t->bpe.vocab.cap && st == LM_OK; i++) {
        const lm_bpe_ent *v = &t->bpe.vocab.e[i];
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
    lm_bpe_free(&t->bpe);
    lm_bpe_table_clear(&t->cache);
    free(t->names);
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
        lm_bpe_init(&t->bpe, "clip tokenizer");
        if (exists(vocab) || !exists(tj)) {
            cJSON *v = NULL;
            st = lm_dfs_json(vocab, TK_MAX_VOCAB_FILE, false, &v);
            if (st == LM_OK) st = lm_bpe_load_vocab(&t->bpe, v, vocab);
            cJSON_Delete(v);
            if (st == LM_OK) st = lm_bpe_load_merges_txt(&t->bpe, merges, TK_MAX_MERGES);
        } else {
            st = load_tokenizer_json(t, tj);
        }
    }
    if (st == LM_OK) st = load_specials(t, dir);
    if (st == LM_OK) {
        /* ids of the 256 byte symbols, alone and ending a word */
        for (int b = 0; b < 256; b++) {
            char s[8];
            size_t n = strlen(t->bpe.byte_utf8[b]);
            memcpy(s, t->bpe.byte_utf8[b], n);
            t->byte_id[b] = vocab_id(t, s, n);
            memcpy(s + n, TK_EOW, 4);
            t->byte_eow_id[b] = vocab_id(t, s, n + 4);
        }
        t->names = calloc((size_t)t->bpe.nids, sizeof *t->names);
        if (!t->names) st = lm_error_set(LM_ERR_NOMEM, "clip tokenizer: out of memory");
        for (size_t i = 0; st == LM_OK && i < t->bpe.vocab.cap; i++)
            if (t->bpe.vocab.e[i].key && !t->names[t->bpe.vocab.e[i].id])
                t->names[t->bpe.vocab.e[i].id] = t->bpe.vocab.e[i].key;
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
    lm_bpe_ent *c = lm_bpe_table_find(&t->cache, (const char *)s, n);
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
    int64_t merged = lm_bpe_merge_word(&t->bpe, w, n);
    if (merged < 0) {
        free(w);
        return LM_ERR_NOMEM;
    }
    size_t len = (size_t)merged;
    for (size_t i = 0; i < len; i++)
        if (w[i] < 0) w[i] = t->unk;
    if (t->cache.n >= TK_CACHE_MAX) lm_bpe_table_clear(&t->cache);
    bool fresh;
    c = lm_bpe_table_put(&t->cache, (const char *)s, n, &fresh);
    if (c && fresh) {
        c->ids = w;
        c->id = (int32_t)len;
    }
    lm_status st = LM_OK;
    for (size_t i = 0; i < len && st == LM_OK; i++) st = out_push(t, w[i]);
    if (!c || !fresh) free(w);
    return st;
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
        for (size_t q = i; q < j; q++) nb += lm_bpe_put_utf8(piece + nb, cp[q]);
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

/* the ids of text (special tokens split out first) appended to t->out */
static lm_status tokens_into(lm_clip_tokenizer *t, const char *text, size_t len)
{
    lm_status st = LM_OK;
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
    return st;
}

lm_status lm_clip_tokenizer_tokens(lm_clip_tokenizer *t, const char *text, size_t len,
                                   const int32_t **ids, int64_t *n)
{
    *ids = NULL;
    *n = 0;
    if (!t || (!text && len)) return lm_error_set(LM_ERR_ARG, "clip tokenizer: tokens: NULL argument");
    if (len > TK_MAX_TEXT)
        return lm_error_set(LM_ERR_ARG, "clip tokenizer: text of %zu bytes (at most %u)", len,
                            TK_MAX_TEXT);
    t->nout = 0;
    lm_status st = tokens_into(t, text, len);
    if (st != LM_OK) return st;
    *ids = t->out;
    *n = (int64_t)t->nout;
    return LM_OK;
}

int32_t lm_clip_tokenizer_find(const lm_clip_tokenizer *t, const char *token)
{
    return vocab_id(t, token, strlen(token));
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
    if (st == LM_OK) st = tokens_into(t, text, len);
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
int64_t lm_clip_tokenizer_vocab_size(const lm_clip_tokenizer *t) { return t->bpe.nids; }
int32_t lm_clip_tokenizer_bos(const lm_clip_tokenizer *t) { return t->bos; }
int32_t lm_clip_tokenizer_eos(const lm_clip_tokenizer *t) { return t->eos; }
int32_t lm_clip_tokenizer_pad(const lm_clip_tokenizer *t) { return t->pad; }

const char *lm_clip_tokenizer_token(const lm_clip_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->bpe.nids ? t->names[id] : NULL;
}
