/* qwen_tokenizer.c - Qwen2's byte-level BPE and the Qwen3 / ChatML chat
 * templates (see qwen_tokenizer.h).
 *
 * Unicode work is ICU's (Debian libicu-dev): NFC (unorm2) and the split
 * pattern (uregex, icu-i18n), the Unicode data the tokenizers library uses.
 * The vocabulary, merges, byte table and merge loop are bpe.c's, shared with
 * CLIP's tokenizer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unicode/unorm2.h>
#include <unicode/uregex.h>
#include <unicode/ustring.h>
#include "bpe.h"
#include "diffusers_config.h"
#include "qwen_tokenizer.h"

#define QT_WHAT "qwen tokenizer"
#define QT_MAX_JSON (128u << 20)
#define QT_MAX_CONFIG (16u << 20)
#define QT_MAX_TEMPLATE (1u << 20)
#define QT_MAX_TEXT (16u << 20)
#define QT_MAX_ADDED 65536

/* Qwen2Tokenizer's pattern (vocab.json + merges.txt folders) */
static const char qwen2_split[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

typedef struct qt_added {
    char *content;      /* as matched: NFC'd when normalized */
    size_t n;
    int32_t id;
    bool special, normalized;
} qt_added;

enum { TPL_NONE, TPL_QWEN3, TPL_CHATML, TPL_UNKNOWN };

struct lm_qwen_tokenizer {
    lm_bpe bpe;
    char *dir;
    const char **names;        /* id -> token string (vocab keys or added contents) */
    int32_t byte_id[256];
    int16_t byte_of[0x144];    /* byte-level code point -> byte, -1 */
    qt_added *added;
    int nadded, added_cap;
    int32_t *by_first;         /* added token indexes by first byte ... */
    int32_t first_at[257];     /* ... those starting with byte b: [first_at[b], first_at[b+1]) */
    bool nfc, ignore_merges;
    int32_t unk, pad, eos;
    int64_t max_len;
    UChar *pattern;            /* the split regex, rewritten for ICU */
    int32_t npattern;
    URegularExpression *re;    /* compiled once; cloned per encode */
    char *tpl, *tpl_from;      /* the chat template and where it came from */
    int tpl_kind;
    char *tpl_system;          /* ChatML's default system message, or NULL */
};

static lm_status nomem(void)
{
    return lm_error_set(LM_ERR_NOMEM, QT_WHAT ": out of memory");
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* ---- the split pattern ---- */

/* Oniguruma (the tokenizers library's engine) reads \s as Unicode
 * White_Space; ICU's \s leaves out U+000B and U+0085.  Rewrites \s and \S
 * (not \\s) to the property, inside classes too. */
static lm_status set_pattern(lm_qwen_tokenizer *t, const char *pat, const char *what)
{
    size_t n = strlen(pat);
    char *p = malloc(n * 8 + 1);
    if (!p) return nomem();
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (pat[i] == '\\' && i + 1 < n) {
            if (pat[i + 1] == 's' || pat[i + 1] == 'S') {
                memcpy(p + o, pat[i + 1] == 's' ? "\\p{WSpace}" : "\\P{WSpace}", 10);
                o += 10;
            } else {
                p[o++] = pat[i];
                p[o++] = pat[i + 1];
            }
            i++;
        } else {
            p[o++] = pat[i];
        }
    }
    p[o] = 0;
    UErrorCode ue = U_ZERO_ERROR;
    int32_t n16 = 0;
    u_strFromUTF8(NULL, 0, &n16, p, (int32_t)o, &ue);
    ue = U_ZERO_ERROR;
    free(t->pattern);
    t->pattern = malloc(sizeof(UChar) * ((size_t)n16 + 1));
    if (!t->pattern) { free(p); return nomem(); }
    u_strFromUTF8(t->pattern, n16 + 1, &t->npattern, p, (int32_t)o, &ue);
    free(p);
    UParseError pe;
    if (U_SUCCESS(ue)) t->re = uregex_open(t->pattern, t->npattern, 0, &pe, &ue);
    if (U_FAILURE(ue))
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: pre_tokenizer Split pattern \"%.80s\": %s "
                            "(at offset %d)", what, pat, u_errorName(ue), (int)pe.offset);
    return LM_OK;
}

/* ---- NFC ---- */

/* UTF-8 (n bytes, invalid bytes -> U+FFFD) to UTF-16, NFC'd when nfc;
 * *out malloc'd. */
static lm_status to_utf16(const char *s, size_t n, bool nfc, UChar **out, int32_t *nout)
{
    UErrorCode ue = U_ZERO_ERROR;
    int32_t n16 = 0;
    *out = NULL;
    u_strFromUTF8WithSub(NULL, 0, &n16, s, (int32_t)n, 0xFFFD, NULL, &ue);
    if (ue != U_BUFFER_OVERFLOW_ERROR && U_FAILURE(ue))
        return lm_error_set(LM_ERR_ARG, QT_WHAT ": text: %s", u_errorName(ue));
    UChar *u = malloc(sizeof *u * ((size_t)n16 + 1));
    if (!u) return nomem();
    ue = U_ZERO_ERROR;
    u_strFromUTF8WithSub(u, n16 + 1, &n16, s, (int32_t)n, 0xFFFD, NULL, &ue);
    if (U_SUCCESS(ue) && nfc) {
        const UNormalizer2 *norm = unorm2_getNFCInstance(&ue);
        int32_t nv = 0;
        if (U_SUCCESS(ue)) {
            nv = unorm2_normalize(norm, u, n16, NULL, 0, &ue);
            if (ue == U_BUFFER_OVERFLOW_ERROR) ue = U_ZERO_ERROR;
        }
        UChar *v = U_SUCCESS(ue) ? malloc(sizeof *v * ((size_t)nv + 1)) : NULL;
        if (U_SUCCESS(ue) && !v) { free(u); return nomem(); }
        if (U_SUCCESS(ue)) nv = unorm2_normalize(norm, u, n16, v, nv + 1, &ue);
        free(u);
        u = v;
        n16 = nv;
    }
    if (U_FAILURE(ue)) {
        free(u);
        return lm_error_set(LM_ERR_ARG, QT_WHAT ": normalizing: %s", u_errorName(ue));
    }
    *out = u;
    *nout = n16;
    return LM_OK;
}

/* UTF-16 to malloc'd UTF-8 */
static char *to_utf8(const UChar *u, int32_t n, size_t *nout)
{
    UErrorCode ue = U_ZERO_ERROR;
    int32_t n8 = 0;
    u_strToUTF8WithSub(NULL, 0, &n8, u, n, 0xFFFD, NULL, &ue);
    ue = U_ZERO_ERROR;
    char *s = malloc((size_t)n8 + 1);
    if (!s) { nomem(); return NULL; }
    u_strToUTF8WithSub(s, n8 + 1, &n8, u, n, 0xFFFD, NULL, &ue);
    if (U_FAILURE(ue)) {
        free(s);
        lm_error_set(LM_ERR_ARG, QT_WHAT ": text: %s", u_errorName(ue));
        return NULL;
    }
    if (nout) *nout = (size_t)n8;
    return s;
}

static char *nfc_utf8(const char *s, size_t n, size_t *nout)
{
    UChar *u;
    int32_t nu;
    if (to_utf16(s, n, true, &u, &nu) != LM_OK) return NULL;
    char *r = to_utf8(u, nu, nout);
    free(u);
    return r;
}

/* ---- loading ---- */

static lm_status add_token(lm_qwen_tokenizer *t, const char *content, double id, bool special,
                           bool normalized, const char *what)
{
    if (!*content) return lm_error_set(LM_ERR_FORMAT, "%s: added token %g: empty content", what, id);
    if (!(id >= 0 && id < INT32_MAX && id == (double)(int64_t)id))
        return lm_error_set(LM_ERR_FORMAT, "%s: added token \"%.40s\": id %g is not an integer "
                            "in [0, 2^31)", what, content, id);
    for (int i = 0; i < t->nadded; i++)
        if (t->added[i].id == (int32_t)id) return LM_OK;   /* tokenizer.json's comes first */
    if (t->nadded == QT_MAX_ADDED)
        return lm_error_set(LM_ERR_FORMAT, "%s: more than %d added tokens", what, QT_MAX_ADDED);
    if (t->nadded == t->added_cap) {
        int cap = t->added_cap ? t->added_cap * 2 : 16;
        qt_added *a = realloc(t->added, sizeof *a * (size_t)cap);
        if (!a) return nomem();
        t->added = a;
        t->added_cap = cap;
    }
    qt_added *a = &t->added[t->nadded];
    a->content = normalized ? nfc_utf8(content, strlen(content), &a->n) : strdup(content);
    if (!a->content) return normalized ? LM_ERR_NOMEM : nomem();
    if (!normalized) a->n = strlen(content);
    a->id = (int32_t)id;
    a->special = special;
    a->normalized = normalized;
    t->nadded++;
    if ((int64_t)id + 1 > t->bpe.nids) t->bpe.nids = (int64_t)id + 1;
    return LM_OK;
}

static lm_status want_false(const cJSON *o, const char *key, const char *what, const char *where)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (v && !cJSON_IsNull(v) && !cJSON_IsFalse(v))
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: %s.%s is %s: not implemented (false only)",
                            what, where, key, cJSON_IsTrue(v) ? "true" : "set");
    return LM_OK;
}

static bool flag(const cJSON *o, const char *key, bool dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

static const char *type_of(const cJSON *o)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(v) ? v->valuestring : "(no type)";
}

static lm_status read_normalizer(lm_qwen_tokenizer *t, const cJSON *n, const char *path)
{
    if (!n || cJSON_IsNull(n)) return LM_OK;
    const char *ty = type_of(n);
    if (!strcmp(ty, "NFC")) {
        t->nfc = true;
        return LM_OK;
    }
    if (!strcmp(ty, "Sequence")) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(n, "normalizers")) {
            if (strcmp(type_of(e), "NFC"))
                return lm_error_set(LM_ERR_UNSUPPORTED, "%s: normalizer Sequence: type \"%s\" is "
                                    "not implemented (NFC only)", path, type_of(e));
            t->nfc = true;
        }
        return LM_OK;
    }
    return lm_error_set(LM_ERR_UNSUPPORTED, "%s: normalizer: type \"%s\" is not implemented "
                        "(NFC or none)", path, ty);
}

static lm_status read_byte_level(const cJSON *b, const char *path, const char *where)
{
    lm_status st = want_false(b, "add_prefix_space", path, where);
    if (st == LM_OK) st = want_false(b, "use_regex", path, where);
    return st;
}

static lm_status read_pre_tokenizer(lm_qwen_tokenizer *t, const cJSON *p, const char *path)
{
    const cJSON *seq = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers");
    if (!p || strcmp(type_of(p), "Sequence") || cJSON_GetArraySize(seq) != 2)
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: pre_tokenizer: type \"%s\" is not "
                            "implemented (Sequence [Split, ByteLevel], as Qwen2's)", path,
                            p && !cJSON_IsNull(p) ? type_of(p) : "null");
    const cJSON *sp = seq->child, *bl = seq->child->next;
    if (strcmp(type_of(sp), "Split") || strcmp(type_of(bl), "ByteLevel"))
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: pre_tokenizer: Sequence [%s, %s] is not "
                            "implemented (Split, ByteLevel)", path, type_of(sp), type_of(bl));
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(sp, "pattern");
    const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
    const cJSON *beh = cJSON_GetObjectItemCaseSensitive(sp, "behavior");
    if (!cJSON_IsString(re))
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: pre_tokenizer Split: pattern is not a "
                            "Regex", path);
    if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated"))
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: pre_tokenizer Split: behavior \"%s\" is "
                            "not implemented (Isolated)", path,
                            cJSON_IsString(beh) ? beh->valuestring : "?");
    lm_status st = want_false(sp, "invert", path, "pre_tokenizer Split");
    if (st == LM_OK) st = read_byte_level(bl, path, "pre_tokenizer ByteLevel");
    if (st == LM_OK) st = set_pattern(t, re->valuestring, path);
    return st;
}

static lm_status read_model(lm_qwen_tokenizer *t, const cJSON *m, const char *path)
{
    if (!cJSON_IsObject(m)) return lm_error_set(LM_ERR_FORMAT, "%s: model: missing", path);
    if (strcmp(type_of(m), "BPE"))
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: model: type \"%s\" is not implemented (BPE)",
                            path, type_of(m));
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(m, "dropout");
    if (d && !cJSON_IsNull(d) && !(cJSON_IsNumber(d) && d->valuedouble == 0))
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: model.dropout %g: not implemented", path,
                            cJSON_IsNumber(d) ? d->valuedouble : -1.0);
    static const char *empty_keys[2] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, empty_keys[k]);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && !*v->valuestring))
            return lm_error_set(LM_ERR_UNSUPPORTED, "%s: model.%s \"%s\": not implemented "
                                "(null or \"\")", path, empty_keys[k],
                                cJSON_IsString(v) ? v->valuestring : "?");
    }
    lm_status st = want_false(m, "byte_fallback", path, "model");
    if (st != LM_OK) return st;
    t->ignore_merges = flag(m, "ignore_merges", false);
    if ((st = lm_bpe_load_vocab(&t->bpe, cJSON_GetObjectItemCaseSensitive(m, "vocab"), path)) != LM_OK)
        return st;
    const cJSON *unk = cJSON_GetObjectItemCaseSensitive(m, "unk_token");
    if (cJSON_IsString(unk)) {
        if (flag(m, "fuse_unk", false))
            return lm_error_set(LM_ERR_UNSUPPORTED, "%s: model.fuse_unk true: not implemented", path);
        t->unk = lm_bpe_id(&t->bpe, unk->valuestring, strlen(unk->valuestring));
        if (t->unk < 0)
            return lm_error_set(LM_ERR_FORMAT, "%s: model.unk_token \"%s\" is not in the "
                                "vocabulary", path, unk->valuestring);
    }
    return lm_bpe_load_merges_json(&t->bpe, cJSON_GetObjectItemCaseSensitive(m, "merges"), path);
}

static lm_status load_tokenizer_json(lm_qwen_tokenizer *t, const char *path)
{
    cJSON *j;
    lm_status st = lm_dfs_json(path, QT_MAX_JSON, false, &j);
    if (st != LM_OK) return st;
    if (st == LM_OK) st = read_normalizer(t, cJSON_GetObjectItemCaseSensitive(j, "normalizer"), path);
    if (st == LM_OK) st = read_pre_tokenizer(t, cJSON_GetObjectItemCaseSensitive(j, "pre_tokenizer"), path);
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(j, "decoder");
    if (st == LM_OK && dec && !cJSON_IsNull(dec) && strcmp(type_of(dec), "ByteLevel"))
        st = lm_error_set(LM_ERR_UNSUPPORTED, "%s: decoder: type \"%s\" is not implemented "
                          "(ByteLevel)", path, type_of(dec));
    const cJSON *pp = cJSON_GetObjectItemCaseSensitive(j, "post_processor");
    if (st == LM_OK && pp && !cJSON_IsNull(pp) && strcmp(type_of(pp), "ByteLevel"))
        st = lm_error_set(LM_ERR_UNSUPPORTED, "%s: post_processor: type \"%s\" is not "
                          "implemented (ByteLevel or none: Qwen2 adds no tokens)", path, type_of(pp));
    if (st == LM_OK) st = read_model(t, cJSON_GetObjectItemCaseSensitive(j, "model"), path);
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "added_tokens")) {
        if (st != LM_OK) break;
        const char *c;
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        if ((st = lm_dfs_str(e, "content", path, true, NULL, &c)) != LM_OK) break;
        if (!cJSON_IsNumber(id)) {
            st = lm_error_set(LM_ERR_FORMAT, "%s: added_tokens: \"%s\": id missing", path, c);
            break;
        }
        char where[96];
        snprintf(where, sizeof where, "added_tokens[\"%.40s\"]", c);
        if ((st = want_false(e, "lstrip", path, where)) != LM_OK) break;
        if ((st = want_false(e, "rstrip", path, where)) != LM_OK) break;
        if ((st = want_false(e, "single_word", path, where)) != LM_OK) break;
        bool special = flag(e, "special", false);
        st = add_token(t, c, id->valuedouble, special, flag(e, "normalized", !special), path);
    }
    cJSON_Delete(j);
    return st;
}

/* eos_token / pad_token: a string, {"content": ...} or null */
static lm_status config_token(lm_qwen_tokenizer *t, const cJSON *cfg, const char *key,
                              const char *path, int32_t *id)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    *id = -1;
    if (!v || cJSON_IsNull(v)) return LM_OK;
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    if (!cJSON_IsString(v))
        return lm_error_set(LM_ERR_FORMAT, "%s: %s: expected a string", path, key);
    for (int i = 0; i < t->nadded; i++)
        if (!strcmp(t->added[i].content, v->valuestring)) *id = t->added[i].id;
    if (*id < 0) *id = lm_bpe_id(&t->bpe, v->valuestring, strlen(v->valuestring));
    if (*id < 0)
        return lm_error_set(LM_ERR_FORMAT, "%s: %s \"%s\" is not in the vocabulary", path, key,
                            v->valuestring);
    return LM_OK;
}

static lm_status set_template(lm_qwen_tokenizer *t, const char *text, const char *from);

static lm_status load_config(lm_qwen_tokenizer *t, const char *dir)
{
    char *path = lm_dfs_path(dir, "tokenizer_config.json");
    cJSON *cfg = NULL;
    lm_status st = path ? lm_dfs_json(path, QT_MAX_CONFIG, true, &cfg) : nomem();
    t->pad = t->eos = -1;
    t->max_len = -1;
    const cJSON *e, *dec = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "added_tokens_decoder") : NULL;
    cJSON_ArrayForEach(e, dec) {
        if (st != LM_OK) break;
        const char *c;
        char *endp;
        long id = strtol(e->string, &endp, 10);
        st = lm_dfs_str(e, "content", path, true, NULL, &c);
        if (st == LM_OK && (*endp || id < 0 || endp == e->string))
            st = lm_error_set(LM_ERR_FORMAT, "%s: added_tokens_decoder: key \"%s\" is not an id",
                              path, e->string);
        char where[96];
        snprintf(where, sizeof where, "added_tokens_decoder[\"%.40s\"]", e->string);
        if (st == LM_OK) st = want_false(e, "lstrip", path, where);
        if (st == LM_OK) st = want_false(e, "rstrip", path, where);
        if (st == LM_OK) st = want_false(e, "single_word", path, where);
        bool special = flag(e, "special", false);
        if (st == LM_OK) st = add_token(t, c, (double)id, special, flag(e, "normalized", !special), path);
    }
    if (st == LM_OK && cfg) st = config_token(t, cfg, "eos_token", path, &t->eos);
    if (st == LM_OK && cfg) st = config_token(t, cfg, "pad_token", path, &t->pad);
    if (st == LM_OK && cfg) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(cfg, "model_max_length");
        /* transformers writes a huge number when the length was never set */
        if (cJSON_IsNumber(m) && m->valuedouble >= 1 && m->valuedouble <= (double)(1 << 30))
            t->max_len = (int64_t)m->valuedouble;
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
        if (cJSON_IsArray(ct)) {   /* [{"name": ..., "template": ...}]: the default one */
            const cJSON *pick = NULL;
            cJSON_ArrayForEach(e, ct) {
                const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
                if (cJSON_IsString(nm) && !strcmp(nm->valuestring, "default"))
                    pick = cJSON_GetObjectItemCaseSensitive(e, "template");
            }
            if (!cJSON_IsString(pick))
                st = lm_error_set(LM_ERR_FORMAT, "%s: chat_template: a list without a "
                                  "\"default\" template", path);
            ct = pick;
        }
        if (st == LM_OK && cJSON_IsString(ct)) {
            st = set_template(t, ct->valuestring, "tokenizer_config.json");
        } else if (st == LM_OK && ct && !cJSON_IsNull(ct)) {
            st = lm_error_set(LM_ERR_FORMAT, "%s: chat_template: expected a string", path);
        }
    }
    char *jinja = lm_dfs_path(dir, "chat_template.jinja");
    if (st == LM_OK && !jinja) st = nomem();
    if (st == LM_OK && exists(jinja)) {
        char *text = NULL;
        size_t n;
        st = lm_dfs_read(jinja, QT_MAX_TEMPLATE, &text, &n);
        if (st == LM_OK && memchr(text, 0, n))
            st = lm_error_set(LM_ERR_FORMAT, "%s: a NUL byte in the template", jinja);
        else if (st == LM_OK)
            st = set_template(t, text, "chat_template.jinja");
        free(text);
    }
    free(jinja);
    cJSON_Delete(cfg);
    free(path);
    return st;
}

void lm_qwen_tokenizer_free(lm_qwen_tokenizer *t)
{
    if (!t) return;
    lm_bpe_free(&t->bpe);
    for (int i = 0; i < t->nadded; i++) free(t->added[i].content);
    free(t->added);
    free(t->by_first);
    free(t->names);
    free(t->pattern);
    if (t->re) uregex_close(t->re);
    free(t->tpl);
    free(t->tpl_from);
    free(t->tpl_system);
    free(t->dir);
    free(t);
}

lm_qwen_tokenizer *lm_qwen_tokenizer_load(const char *dir)
{
    lm_qwen_tokenizer *t = calloc(1, sizeof *t);
    char *vocab = lm_dfs_path(dir, "vocab.json"), *merges = lm_dfs_path(dir, "merges.txt");
    char *tj = lm_dfs_path(dir, "tokenizer.json");
    lm_status st = (!t || !vocab || !merges || !tj) ? nomem() : LM_OK;
    if (st == LM_OK) {
        lm_bpe_init(&t->bpe, QT_WHAT);
        t->unk = -1;
        t->dir = strdup(dir);
        if (!t->dir) st = nomem();
    }
    if (st == LM_OK) {
        if (exists(tj)) {
            st = load_tokenizer_json(t, tj);
        } else if (exists(vocab) && exists(merges)) {
            /* Qwen2Tokenizer: NFC, the Qwen2 split, every merge */
            cJSON *v = NULL;
            t->nfc = true;
            st = lm_dfs_json(vocab, QT_MAX_JSON, false, &v);
            if (st == LM_OK) st = lm_bpe_load_vocab(&t->bpe, v, vocab);
            cJSON_Delete(v);
            if (st == LM_OK) st = lm_bpe_load_merges_txt(&t->bpe, merges, SIZE_MAX);
            if (st == LM_OK) st = set_pattern(t, qwen2_split, "Qwen2's split");
        } else {
            st = lm_error_set(LM_ERR_IO, "neither tokenizer.json nor vocab.json + merges.txt");
        }
    }
    if (st == LM_OK) st = load_config(t, dir);
    if (st == LM_OK) {
        for (int b = 0; b < 256; b++)
            t->byte_id[b] = lm_bpe_id(&t->bpe, t->bpe.byte_utf8[b], strlen(t->bpe.byte_utf8[b]));
        for (int c = 0; c < 0x144; c++) t->byte_of[c] = -1;
        for (int b = 0; b < 256; b++) {
            const unsigned char *u = (const unsigned char *)t->bpe.byte_utf8[b];
            int cp = u[0] < 0x80 ? u[0] : ((u[0] & 0x1F) << 6) | (u[1] & 0x3F);
            t->byte_of[cp] = (int16_t)b;
        }
        t->names = calloc((size_t)t->bpe.nids, sizeof *t->names);
        if (!t->names) st = nomem();
        for (size_t i = 0; st == LM_OK && i < t->bpe.vocab.cap; i++)
            if (t->bpe.vocab.e[i].key && !t->names[t->bpe.vocab.e[i].id])
                t->names[t->bpe.vocab.e[i].id] = t->bpe.vocab.e[i].key;
        for (int i = 0; st == LM_OK && i < t->nadded; i++) {
            t->names[t->added[i].id] = t->added[i].content;
        }
        /* the added tokens bucketed by first byte (a counting sort) */
        t->by_first = malloc(sizeof *t->by_first * (size_t)(t->nadded + 1));
        if (st == LM_OK && !t->by_first) st = nomem();
        for (int i = 0; st == LM_OK && i < t->nadded; i++)
            t->first_at[(unsigned char)t->added[i].content[0] + 1]++;
        for (int b = 0; st == LM_OK && b < 256; b++) t->first_at[b + 1] += t->first_at[b];
        int32_t fill[256];
        memcpy(fill, t->first_at, sizeof fill);
        for (int i = 0; st == LM_OK && i < t->nadded; i++)
            t->by_first[fill[(unsigned char)t->added[i].content[0]]++] = i;
    }
    free(vocab);
    free(merges);
    free(tj);
    if (st != LM_OK) {
        lm_error_prefix(QT_WHAT " %s", dir);
        lm_qwen_tokenizer_free(t);
        return NULL;
    }
    return t;
}

int64_t lm_qwen_tokenizer_vocab_size(const lm_qwen_tokenizer *t) { return t->bpe.nids; }
int32_t lm_qwen_tokenizer_pad_id(const lm_qwen_tokenizer *t) { return t->pad; }
int32_t lm_qwen_tokenizer_eos_id(const lm_qwen_tokenizer *t) { return t->eos; }
int64_t lm_qwen_tokenizer_max_length(const lm_qwen_tokenizer *t) { return t->max_len; }

/* ---- encoding ---- */
typedef struct qt_out {
    int32_t *ids;
    size_t n, cap;
    int32_t *w;          /* BPE scratch */
    size_t wcap;
} qt_out;

static lm_status push(qt_out *o, int32_t id)
{
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 256;
        int32_t *p = realloc(o->ids, cap * sizeof *p);
        if (!p) return nomem();
        o->ids = p;
        o->cap = cap;
    }
    o->ids[o->n++] = id;
    return LM_OK;
}

/* BPE of one piece's UTF-8 bytes */
static lm_status bpe_piece(const lm_qwen_tokenizer *t, qt_out *o, const unsigned char *s, size_t n)
{
    if (!n) return LM_OK;
    if (t->ignore_merges) {
        /* the piece's byte-level form as one token, when there is one */
        char *f = malloc(n * 2 + 1);
        if (!f) return nomem();
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            size_t l = strlen(t->bpe.byte_utf8[s[i]]);
            memcpy(f + m, t->bpe.byte_utf8[s[i]], l);
            m += l;
        }
        int32_t id = lm_bpe_id(&t->bpe, f, m);
        free(f);
        if (id >= 0) return push(o, id);
    }
    if (n > o->wcap) {
        int32_t *w = realloc(o->w, n * sizeof *w);
        if (!w) return nomem();
        o->w = w;
        o->wcap = n;
    }
    for (size_t i = 0; i < n; i++) o->w[i] = t->byte_id[s[i]];
    int64_t len = lm_bpe_merge_word(&t->bpe, o->w, n);
    if (len < 0) return LM_ERR_NOMEM;
    lm_status st = LM_OK;
    for (int64_t i = 0; i < len && st == LM_OK; i++) {
        /* a symbol outside the vocabulary: the unk token, or dropped (as
         * the tokenizers library does without one) */
        int32_t id = o->w[i] >= 0 ? o->w[i] : t->unk;
        if (id >= 0) st = push(o, id);
    }
    return st;
}

/* Splits normalized UTF-16 text with the pattern (matches and the gaps
 * between them are pieces) and encodes each piece. */
static lm_status split_encode(const lm_qwen_tokenizer *t, qt_out *o, const UChar *u, int32_t nu)
{
    if (!nu) return LM_OK;
    UErrorCode ue = U_ZERO_ERROR;
    URegularExpression *re = uregex_clone(t->re, &ue);
    if (U_SUCCESS(ue)) uregex_setText(re, u, nu, &ue);
    unsigned char *buf = malloc((size_t)nu * 3 + 4);
    lm_status st = buf ? LM_OK : nomem();
    int32_t at = 0;
    while (st == LM_OK && U_SUCCESS(ue)) {
        bool found = uregex_findNext(re, &ue);
        if (U_FAILURE(ue)) break;
        int32_t s = found ? uregex_start(re, 0, &ue) : nu, e = found ? uregex_end(re, 0, &ue) : nu;
        if (U_FAILURE(ue)) break;
        for (int pass = 0; pass < 2 && st == LM_OK; pass++) {
            int32_t a = pass ? s : at, b = pass ? e : s;
            if (a >= b) continue;
            int32_t nb = 0;
            u_strToUTF8WithSub((char *)buf, nu * 3 + 4, &nb, u + a, b - a, 0xFFFD, NULL, &ue);
            if (U_FAILURE(ue)) break;
            st = bpe_piece(t, o, buf, (size_t)nb);
        }
        at = e;
        if (!found) break;
    }
    if (U_FAILURE(ue) && st == LM_OK)
        st = lm_error_set(LM_ERR_ARG, QT_WHAT ": splitting the text: %s", u_errorName(ue));
    free(buf);
    if (re) uregex_close(re);
    return st;
}

/* The next added token of the set (normalized or not) in s[0..n): leftmost,
 * then longest; *at = n when there is none. */
static const qt_added *next_added(const lm_qwen_tokenizer *t, const char *s, size_t n,
                                  bool normalized, size_t *at)
{
    for (size_t i = 0; i < n; i++) {
        const qt_added *best = NULL;
        unsigned char c = (unsigned char)s[i];
        for (int32_t k = t->first_at[c]; k < t->first_at[c + 1]; k++) {
            const qt_added *a = &t->added[t->by_first[k]];
            if (a->normalized != normalized || a->n > n - i) continue;
            if ((!best || a->n > best->n) && !memcmp(s + i, a->content, a->n)) best = a;
        }
        if (best) {
            *at = i;
            return best;
        }
    }
    *at = n;
    return NULL;
}

static bool has_normalized(const lm_qwen_tokenizer *t)
{
    for (int k = 0; k < t->nadded; k++)
        if (t->added[k].normalized) return true;
    return false;
}

/* one stretch between non-normalized added tokens */
static lm_status encode_stretch(const lm_qwen_tokenizer *t, qt_out *o, const char *s, size_t n)
{
    if (!n) return LM_OK;
    UChar *u;
    int32_t nu;
    lm_status st = to_utf16(s, n, t->nfc, &u, &nu);
    if (st != LM_OK) return st;
    if (!has_normalized(t)) {
        st = split_encode(t, o, u, nu);
        free(u);
        return st;
    }
    size_t n8;
    char *s8 = to_utf8(u, nu, &n8);
    free(u);
    if (!s8) return LM_ERR_NOMEM;
    for (size_t at = 0; st == LM_OK && at <= n8;) {
        size_t pos;
        const qt_added *a = next_added(t, s8 + at, n8 - at, true, &pos);
        UChar *v;
        int32_t nv;
        st = to_utf16(s8 + at, pos, false, &v, &nv);
        if (st == LM_OK) st = split_encode(t, o, v, nv);
        if (st == LM_OK) free(v);
        if (st != LM_OK || !a) break;
        st = push(o, a->id);
        at += pos + a->n;
    }
    free(s8);
    return st;
}

static lm_status encode_all(const lm_qwen_tokenizer *t, const char *text, qt_out *o)
{
    if (!t || !text) return lm_error_set(LM_ERR_ARG, QT_WHAT ": encode: NULL argument");
    size_t len = strlen(text);
    if (len > QT_MAX_TEXT)
        return lm_error_set(LM_ERR_ARG, QT_WHAT ": text of %zu bytes (at most %u)", len,
                            QT_MAX_TEXT);
    lm_status st = LM_OK;
    for (size_t at = 0; st == LM_OK && at <= len;) {
        size_t pos;
        const qt_added *a = next_added(t, text + at, len - at, false, &pos);
        st = encode_stretch(t, o, text + at, pos);
        if (st != LM_OK || !a) break;
        st = push(o, a->id);
        at += pos + a->n;
    }
    free(o->w);
    o->w = NULL;
    return st;
}

lm_status lm_qwen_tokenizer_encode(const lm_qwen_tokenizer *t, const char *text, int32_t **ids,
                                   int64_t *n)
{
    qt_out o = {0};
    lm_status st = encode_all(t, text, &o);
    if (st == LM_OK && !o.ids && !(o.ids = malloc(sizeof *o.ids))) st = nomem();   /* no ids */
    if (st != LM_OK) {
        free(o.ids);
        return st;
    }
    *ids = o.ids;
    *n = (int64_t)o.n;
    return LM_OK;
}

lm_status lm_qwen_tokenizer_encode_padded(const lm_qwen_tokenizer *t, const char *text,
                                          int64_t max_length, int32_t *ids, int32_t *mask,
                                          int64_t *n_real)
{
    if (!t || !ids || max_length < 1)
        return lm_error_set(LM_ERR_ARG, QT_WHAT ": encode_padded: NULL argument or max_length "
                            "%lld < 1", (long long)max_length);
    if (t->pad < 0)
        return lm_error_set(LM_ERR_ARG, QT_WHAT " %s: no pad_token in tokenizer_config.json to "
                            "pad with", t->dir);
    qt_out o = {0};
    lm_status st = encode_all(t, text, &o);
    if (st != LM_OK) {
        free(o.ids);
        return st;
    }
    int64_t keep = (int64_t)o.n < max_length ? (int64_t)o.n : max_length;
    for (int64_t i = 0; i < max_length; i++) {
        ids[i] = i < keep ? o.ids[i] : t->pad;
        if (mask) mask[i] = i < keep;
    }
    if (n_real) *n_real = keep;
    free(o.ids);
    return LM_OK;
}

/* ---- decoding ---- */
char *lm_qwen_tokenizer_decode(const lm_qwen_tokenizer *t, const int32_t *ids, int64_t n)
{
    if (!t || (!ids && n) || n < 0) {
        lm_error_set(LM_ERR_ARG, QT_WHAT ": decode: NULL argument");
        return NULL;
    }
    size_t cap = 64, len = 0;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->bpe.nids || !t->names[ids[i]]) {
            lm_error_set(LM_ERR_ARG, QT_WHAT ": decode: id %d (at %lld) is not in the vocabulary "
                         "of %lld", ids[i], (long long)i, (long long)t->bpe.nids);
            return NULL;
        }
        cap += strlen(t->names[ids[i]]);
    }
    char *bytes = malloc(cap);
    if (!bytes) { nomem(); return NULL; }
    /* ByteLevel: every character of a token back to its byte; a token with a
     * character outside the table stays as it is (as the tokenizers library
     * decodes) */
    for (int64_t i = 0; i < n; i++) {
        const unsigned char *s = (const unsigned char *)t->names[ids[i]];
        size_t start = len;
        bool ok = true;
        for (size_t k = 0; s[k] && ok;) {
            int cp = -1;
            if (s[k] < 0x80) { cp = s[k]; k += 1; }
            else if ((s[k] & 0xE0) == 0xC0 && (s[k + 1] & 0xC0) == 0x80) {
                cp = ((s[k] & 0x1F) << 6) | (s[k + 1] & 0x3F);
                k += 2;
            }
            if (cp < 0 || cp >= 0x144 || t->byte_of[cp] < 0) ok = false;
            else bytes[len++] = (char)t->byte_of[cp];
        }
        if (!ok) {
            len = start;
            size_t l = strlen((const char *)s);
            memcpy(bytes + len, s, l);
            len += l;
        }
    }
    /* errors="replace": what is not UTF-8 becomes U+FFFD */
    UChar *u;
    int32_t nu;
    char *r = NULL;
    if (to_utf16(bytes, len, false, &u, &nu) == LM_OK) {
        r = to_utf8(u, nu, NULL);
        free(u);
    }
    free(bytes);
    return r;
}

/* ---- the chat template ---- */

/* The template without whitespace, Jinja's "-" trims, with ' for " and
 * .role / .content for ['role'] / ['content']: what the recognisers compare. */
static char *squeeze(const char *s)
{
    size_t n = strlen(s);
    char *o = malloc(n + 1);
    if (!o) return NULL;
    size_t m = 0;
    char quote = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (quote) {                      /* string literals stay as written */
            if (c == '\\' && i + 1 < n) {
                o[m++] = c;
                o[m++] = s[++i];
            } else if (c == quote) {
                o[m++] = '\'';
                quote = 0;
            } else {
                o[m++] = c;
            }
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
        if (c == '\'' || c == '"') {
            quote = c;
            o[m++] = '\'';
            continue;
        }
        if (c == '-') {
            /* {%- {{- and -%} -}} */
            if (m >= 2 && o[m - 2] == '{' && (o[m - 1] == '%' || o[m - 1] == '{')) continue;
            size_t j = i + 1;
            while (j < n && (s[j] == ' ' || s[j] == '\t' || s[j] == '\n' || s[j] == '\r')) j++;
            if (j + 1 < n && s[j + 1] == '}' && (s[j] == '%' || s[j] == '}')) continue;
        }
        o[m++] = c;
    }
    o[m] = 0;
    static const char *from[2] = {"['role']", "['content']"}, *to[2] = {".role", ".content"};
    for (int r = 0; r < 2; r++) {
        char *p;
        while ((p = strstr(o, from[r]))) {
            size_t lf = strlen(from[r]), lt = strlen(to[r]);
            memcpy(p, to[r], lt);
            memmove(p + lt, p + lf, strlen(p + lf) + 1);
        }
    }
    return o;
}

static bool ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && !strcmp(s + n - m, tail);
}

/* ChatML's default system message: a literal '<|im_start|>system\n...<|im_end|>\n'
 * string of the template (Qwen2 / Qwen2.5's), unescaped; NULL when none. */
static lm_status default_system(const char *tpl, char **out)
{
    *out = NULL;
    static const char *open[2] = {"'<|im_start|>system\\n", "\"<|im_start|>system\\n"};
    for (int q = 0; q < 2; q++) {
        for (const char *p = strstr(tpl, open[q]); p; p = strstr(p + 1, open[q])) {
            const char *body = p + strlen(open[q]);
            const char *end = body;
            while (*end && *end != open[q][0]) end += *end == '\\' && end[1] ? 2 : 1;
            if (!*end) continue;
            size_t n = (size_t)(end - body);
            static const char tail[] = "<|im_end|>\\n";
            if (n <= strlen(tail) || strncmp(end - strlen(tail), tail, strlen(tail))) continue;
            n -= strlen(tail);
            char *s = malloc(n + 1);
            if (!s) return nomem();
            size_t m = 0;
            for (size_t i = 0; i < n; i++) {
                if (body[i] != '\\') { s[m++] = body[i]; continue; }
                char c = body[++i];
                if (c == 'n') s[m++] = '\n';
                else if (c == '\\' || c == '\'' || c == '"') s[m++] = c;
                else {
                    free(s);
                    return lm_error_set(LM_ERR_UNSUPPORTED, "chat template: the escape \\%c in "
                                        "its default system message", c);
                }
            }
            s[m] = 0;
            *out = s;
            return LM_OK;
        }
    }
    return LM_OK;
}

static lm_status set_template(lm_qwen_tokenizer *t, const char *text, const char *from)
{
    free(t->tpl);
    free(t->tpl_from);
    free(t->tpl_system);
    t->tpl_system = NULL;
    t->tpl = strdup(text);
    t->tpl_from = strdup(from);
    char *q = squeeze(text);
    if (!t->tpl || !t->tpl_from || !q) {
        free(q);
        return nomem();
    }
    /* the user turn, and the generation prompt closing the template */
    static const char user[] =
        "{{'<|im_start|>'+message.role+'\\n'+message.content+'<|im_end|>'+'\\n'}}";
    static const char qwen3_gen[] =
        "{%ifadd_generation_prompt%}{{'<|im_start|>assistant\\n'}}"
        "{%ifenable_thinkingisdefinedandenable_thinkingisfalse%}{{'<think>\\n\\n</think>\\n\\n'}}"
        "{%endif%}{%endif%}";
    static const char chatml_gen[] =
        "{%ifadd_generation_prompt%}{{'<|im_start|>assistant\\n'}}{%endif%}";
    /* Qwen3: the user turn only after the system turn (when messages[0] is
     * one) and the tools block, which render nothing for one user message */
    static const char qwen3_user[] = "{%if(message.role=='user')or(message.role=='system'andnotloop.first)%}";
    static const char qwen3_start[] = "{%iftools%}";
    static const char sys_guard[] = "{%ifmessages[0].role=='system'%}";
    /* the later Qwen3 templates render a variable set from the message:
     * {%- if message.content is string %}{%- set content = message.content %} */
    static const char user_var[] =
        "{{'<|im_start|>'+message.role+'\\n'+content+'<|im_end|>'+'\\n'}}";
    static const char set_var[] = "{%ifmessage.contentisstring%}{%setcontent=message.content%}";
    bool has_user = strstr(q, user) || (strstr(q, user_var) && strstr(q, set_var));
    lm_status st = LM_OK;
    if (has_user && strstr(q, qwen3_user) && ends_with(q, qwen3_gen) &&
        !strncmp(q, qwen3_start, strlen(qwen3_start)) && strstr(q, sys_guard)) {
        t->tpl_kind = TPL_QWEN3;
    } else if (has_user && ends_with(q, chatml_gen) && !strstr(q, "enable_thinking")) {
        t->tpl_kind = TPL_CHATML;
        st = default_system(text, &t->tpl_system);
        /* a default system message is rendered only when the template
         * guards it with messages[0].role == 'system' */
        if (st == LM_OK && t->tpl_system && !strstr(q, sys_guard)) t->tpl_kind = TPL_UNKNOWN;
    } else {
        t->tpl_kind = TPL_UNKNOWN;
    }
    free(q);
    return st;
}

char *lm_qwen_tokenizer_chat(const lm_qwen_tokenizer *t, const char *user_prompt,
                             int enable_thinking)
{
    if (!t || !user_prompt || enable_thinking < -1 || enable_thinking > 1) {
        lm_error_set(LM_ERR_ARG, QT_WHAT ": chat: NULL argument or enable_thinking %d (1, 0 or "
                     "-1)", enable_thinking);
        return NULL;
    }
    if (!t->tpl) {
        lm_error_set(LM_ERR_UNSUPPORTED, QT_WHAT " %s: no chat template (neither "
                     "chat_template.jinja nor tokenizer_config.json's chat_template)", t->dir);
        return NULL;
    }
    if (t->tpl_kind == TPL_UNKNOWN) {
        uint64_t h = 1469598103934665603ull;
        for (const unsigned char *p = (const unsigned char *)t->tpl; *p; p++)
            h = (h ^ *p) * 1099511628211ull;
        char head[49];
        size_t k = 0;
        for (const char *p = t->tpl; *p && k < 48; p++)
            head[k++] = (*p == '\n' || *p == '\r' || *p == '\t') ? ' ' : *p;
        head[k] = 0;
        lm_error_set(LM_ERR_UNSUPPORTED, QT_WHAT " %s: unknown chat template in %s (\"%s%s\", "
                     "%zu bytes, FNV-1a %016llx): only Qwen3's and ChatML are rendered", t->dir,
                     t->tpl_from, head, strlen(t->tpl) > k ? "..." : "", strlen(t->tpl),
                     (unsigned long long)h);
        return NULL;
    }
    const char *sys_open = "<|im_start|>system\n", *sys_close = "<|im_end|>\n";
    const char *u_open = "<|im_start|>user\n", *u_close = "<|im_end|>\n<|im_start|>assistant\n";
    const char *nothink = t->tpl_kind == TPL_QWEN3 && enable_thinking == 0
        ? "<think>\n\n</think>\n\n" : "";
    const char *sys = t->tpl_system;
    size_t n = strlen(u_open) + strlen(user_prompt) + strlen(u_close) + strlen(nothink) + 1;
    if (sys) n += strlen(sys_open) + strlen(sys) + strlen(sys_close);
    char *r = malloc(n);
    if (!r) { nomem(); return NULL; }
    snprintf(r, n, "%s%s%s%s%s%s%s%s", sys ? sys_open : "", sys ? sys : "", sys ? sys_close : "",
             u_open, user_prompt, u_close, nothink, "");
    return r;
}
