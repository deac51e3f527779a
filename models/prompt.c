/* prompt.c - A1111's prompt syntax (see prompt.h): the emphasis parser, the
 * extra-network tags and the 75-token chunks. */
#include "models/prompt.h"
#include "models/clip_tokenizer.h"
#include "core/io/io.h"
#include "ops.h"

#include <dirent.h>
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unicode/uchar.h>

/* ---- characters as Python's re sees them ---- */

/* the code point at s[i] (n bytes in all), *len its bytes; -1 for a byte
 * that starts no valid UTF-8 sequence (one byte long) */
static int32_t cp_at(const unsigned char *s, size_t n, size_t i, size_t *len)
{
    unsigned char c = s[i];
    *len = 1;
    if (c < 0x80) return c;
    int k = c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2 : c >= 0xF0 && c <= 0xF4 ? 3 : 0;
    if (!k || i + (size_t)k >= n) return -1;
    int32_t v = c & (0x3F >> k);
    for (int j = 1; j <= k; j++) {
        if ((s[i + j] & 0xC0) != 0x80) return -1;
        v = (v << 6) | (s[i + j] & 0x3F);
    }
    static const int32_t lo[4] = {0, 0x80, 0x800, 0x10000};
    if (v < lo[k] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return -1;
    *len = (size_t)k + 1;
    return v;
}

/* the code point that ends just before s[i] (i > 0) */
static int32_t cp_before(const unsigned char *s, size_t n, size_t i)
{
    for (size_t back = 1; back <= 4 && back <= i; back++) {
        size_t len;
        if ((s[i - back] & 0xC0) == 0x80 && back < 4) continue;
        int32_t c = cp_at(s, n, i - back, &len);
        return len == back ? c : -1;
    }
    return -1;
}

/* Python's str.isspace(), which re's \s uses for str patterns */
static bool py_space(int32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Python's \w for str patterns: str.isalnum() or '_' */
static bool py_word(int32_t c)
{
    if (c < 0) return false;
    if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (U_GET_GC_MASK(c) & (U_GC_L_MASK)) return true;
    return u_getIntPropertyValue(c, UCHAR_NUMERIC_TYPE) != U_NT_NONE;
}

/* Python's \d: a decimal digit (Nd), its value, else -1 */
static int py_digit(int32_t c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c < 0x80 || u_charType(c) != U_DECIMAL_DIGIT_NUMBER) return -1;
    return u_charDigitValue(c);
}

/* ---- the parser's result ---- */

typedef struct plist {
    lm_prompt_pair *v;
    int64_t n, cap;
} plist;

static lm_status plist_add(plist *l, const char *s, size_t len, double w)
{
    if (l->n == l->cap) {
        int64_t cap = l->cap ? l->cap * 2 : 8;
        lm_prompt_pair *v = realloc(l->v, sizeof *v * (size_t)cap);
        if (!v) return lm_error_set(LM_ERR_NOMEM, "prompt: out of memory");
        l->v = v;
        l->cap = cap;
    }
    char *t = malloc(len + 1);
    if (!t) return lm_error_set(LM_ERR_NOMEM, "prompt: out of memory");
    if (len) memcpy(t, s, len);
    t[len] = 0;
    l->v[l->n++] = (lm_prompt_pair){t, len, w};
    return LM_OK;
}

static void scale_from(plist *l, int64_t from, double m)
{
    for (int64_t i = from; i < l->n; i++) l->v[i].weight *= m;
}

/* whether "BREAK" with word boundaries starts at s[j] (seg of n bytes) */
static bool break_at(const unsigned char *s, size_t n, size_t j)
{
    if (n - j < 5 || memcmp(s + j, "BREAK", 5) != 0) return false;
    if (j > 0 && py_word(cp_before(s, n, j))) return false;
    size_t len;
    return j + 5 == n || !py_word(cp_at(s, n, j + 5, &len));
}

static size_t skip_space(const unsigned char *s, size_t n, size_t i)
{
    while (i < n) {
        size_t len;
        if (!py_space(cp_at(s, n, i, &len))) break;
        i += len;
    }
    return i;
}

/* plain text: split at \s*\bBREAK\b\s* as re.split does, a ("BREAK", -1)
 * pair between the parts */
static lm_status add_plain(plist *l, const unsigned char *s, size_t n)
{
    size_t last = 0, i = 0;
    while (i < n) {
        size_t j = skip_space(s, n, i);
        if (break_at(s, n, j)) {
            lm_status st = plist_add(l, (const char *)s + last, i - last, 1.0);
            if (st == LM_OK) st = plist_add(l, "BREAK", 5, -1.0);
            if (st != LM_OK) return st;
            last = i = skip_space(s, n, j + 5);
            continue;
        }
        if (j > i) i = j;   /* no match anywhere in this run of whitespace */
        else {
            size_t len;
            cp_at(s, n, i, &len);
            i += len;
        }
    }
    return plist_add(l, (const char *)s + last, n - last, 1.0);
}

/* ":([+-]?[.\d]+)\)" at s[i] (s[i] == ':'): its length (0: no match) and the
 * weight's text as ASCII in buf (Unicode digits by value) */
static size_t weight_token(const unsigned char *s, size_t n, size_t i, char *buf, size_t cap,
                           size_t *blen)
{
    size_t j = i + 1, b = 0;
    if (j < n && (s[j] == '+' || s[j] == '-')) {
        if (b + 1 < cap) buf[b] = (char)s[j];
        b++;
        j++;
    }
    size_t body = 0;
    while (j < n) {
        size_t len;
        int32_t c = cp_at(s, n, j, &len);
        int d = c == '.' ? -2 : py_digit(c);
        if (d == -1) break;
        if (b + 1 < cap) buf[b] = d == -2 ? '.' : (char)('0' + d);
        b++;
        body++;
        j += len;
    }
    if (!body || j >= n || s[j] != ')') return 0;
    *blen = b;
    return j + 1 - i;
}

/* Python's float() of [+-]?[.0-9]+: at most one '.', a digit somewhere */
static lm_status weight_value(const char *w, size_t len, size_t cap, double *out, size_t at)
{
    int dots = 0, digits = 0;
    for (size_t k = 0; k < len && k < cap; k++) {
        if (w[k] == '.') dots++;
        else if (w[k] >= '0' && w[k] <= '9') digits++;
    }
    if (len >= cap || dots > 1 || !digits)
        return lm_error_set(LM_ERR_ARG, "prompt: weight '%.*s' at byte %zu is not a number "
                            "(A1111's float() refuses it too)", (int)(len < 64 ? len : 64), w, at);
    char *buf = (char *)w;   /* NUL-terminated in place: the caller's scratch */
    buf[len] = 0;
    /* strtod reads the locale's decimal point */
    const char *dp = localeconv()->decimal_point;
    if (dp && dp[0] && dp[0] != '.' && !dp[1])
        for (size_t k = 0; k < len; k++)
            if (buf[k] == '.') buf[k] = dp[0];
    *out = strtod(buf, NULL);
    return LM_OK;
}

typedef struct istack {
    int64_t *v;
    int64_t n, cap;
} istack;

static lm_status ipush(istack *s, int64_t x)
{
    if (s->n == s->cap) {
        int64_t cap = s->cap ? s->cap * 2 : 8;
        int64_t *v = realloc(s->v, sizeof *v * (size_t)cap);
        if (!v) return lm_error_set(LM_ERR_NOMEM, "prompt: out of memory");
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = x;
    return LM_OK;
}

lm_status lm_prompt_parse(const char *text, size_t len, lm_prompt *out)
{
    memset(out, 0, sizeof *out);
    if (!text && len) return lm_error_set(LM_ERR_ARG, "prompt: NULL text");
    const unsigned char *s = (const unsigned char *)text;
    plist l = {0};
    istack round = {0}, square = {0};
    lm_status st = LM_OK;
    /* a weight's ASCII form is never longer than its UTF-8 */
    size_t wcap = len + 2;
    char *wbuf = malloc(wcap);
    if (!wbuf) return lm_error_set(LM_ERR_NOMEM, "prompt: out of memory");
    for (size_t i = 0; st == LM_OK && i < len;) {
        unsigned char c = s[i];
        size_t wl = 0, tl;
        if (c == '\\') {
            bool esc = i + 1 < len && s[i + 1] && strchr("()[]\\", s[i + 1]);
            st = plist_add(&l, text + i + 1, esc ? 1 : 0, 1.0);
            i += esc ? 2 : 1;
        } else if (c == '(') {
            st = ipush(&round, l.n);
            i++;
        } else if (c == '[') {
            st = ipush(&square, l.n);
            i++;
        } else if (c == ':' && (tl = weight_token(s, len, i, wbuf, wcap, &wl)) && round.n) {
            double w = 1.0;
            st = weight_value(wbuf, wl, wcap, &w, i);
            if (st == LM_OK) scale_from(&l, round.v[--round.n], w);
            i += tl;
        } else if (c == ':' && tl) {
            st = add_plain(&l, s + i, tl);   /* ":1.3)" with no "(" open */
            i += tl;
        } else if (c == ')' && round.n) {
            scale_from(&l, round.v[--round.n], 1.1);
            i++;
        } else if (c == ']' && square.n) {
            scale_from(&l, square.v[--square.n], 1 / 1.1);
            i++;
        } else if (c == ':' || c == ')' || c == ']') {
            st = add_plain(&l, s + i, 1);
            i++;
        } else {
            size_t j = i;
            while (j < len && !(s[j] && strchr("\\()[]:", s[j]))) j++;
            st = add_plain(&l, s + i, j - i);
            i = j;
        }
    }
    for (int64_t k = 0; st == LM_OK && k < round.n; k++) scale_from(&l, round.v[k], 1.1);
    for (int64_t k = 0; st == LM_OK && k < square.n; k++) scale_from(&l, square.v[k], 1 / 1.1);
    free(round.v);
    free(square.v);
    free(wbuf);
    if (st == LM_OK && l.n == 0) st = plist_add(&l, "", 0, 1.0);
    /* merge runs of equal weight (each run at once: linear in the text) */
    int64_t k = 0;
    for (int64_t i = 0; st == LM_OK && i < l.n;) {
        int64_t j = i + 1;
        size_t total = l.v[i].len;
        while (j < l.n && l.v[j].weight == l.v[i].weight) total += l.v[j++].len;
        lm_prompt_pair m = l.v[i];
        l.v[i].text = NULL;   /* every slot is NULL or owns its text, for an error's cleanup */
        if (j - i > 1) {
            char *t = malloc(total + 1);
            if (!t) {
                l.v[i].text = m.text;
                st = lm_error_set(LM_ERR_NOMEM, "prompt: out of memory");
                break;
            }
            memcpy(t, m.text, m.len);
            size_t at = m.len;
            free(m.text);
            for (int64_t q = i + 1; q < j; q++) {
                memcpy(t + at, l.v[q].text, l.v[q].len);
                at += l.v[q].len;
                free(l.v[q].text);
                l.v[q].text = NULL;
            }
            t[total] = 0;
            m = (lm_prompt_pair){t, total, m.weight};
        }
        l.v[k++] = m;
        i = j;
    }
    if (st == LM_OK) l.n = k;
    out->pairs = l.v;
    out->n = l.n;
    if (st != LM_OK) lm_prompt_free(out);
    return st;
}

void lm_prompt_free(lm_prompt *p)
{
    if (!p) return;
    for (int64_t i = 0; i < p->n; i++) free(p->pairs[i].text);
    free(p->pairs);
    p->pairs = NULL;
    p->n = 0;
}

bool lm_prompt_pair_is_break(const lm_prompt_pair *p)
{
    return p->weight == -1.0 && p->len == 5 && memcmp(p->text, "BREAK", 5) == 0;
}

/* ---- extra networks ---- */

/* "<(\w+):([^>]+)>" at s[i]: the length, 0 for none; *colon the ':' */
static size_t tag_at(const unsigned char *s, size_t n, size_t i, size_t *colon)
{
    if (s[i] != '<') return 0;
    size_t j = i + 1;
    while (j < n) {
        size_t len;
        if (!py_word(cp_at(s, n, j, &len))) break;
        j += len;
    }
    if (j == i + 1 || j >= n || s[j] != ':') return 0;
    *colon = j;
    const unsigned char *gt = memchr(s + j + 1, '>', n - j - 1);
    if (!gt || gt == s + j + 1) return 0;
    return (size_t)(gt - s) + 1 - i;
}

static char *dup_n(const char *s, size_t n)
{
    char *t = malloc(n + 1);
    if (!t) return NULL;
    if (n) memcpy(t, s, n);
    t[n] = 0;
    return t;
}

static lm_status add_network(lm_prompt_networks *l, const char *s, size_t colon, size_t end)
{
    lm_prompt_network *v = l->items;
    if (l->n == 0 || (l->n >= 4 && !(l->n & (l->n - 1)))) {   /* capacity 4, 8, 16, ... */
        v = realloc(l->items, sizeof *v * (size_t)(l->n ? 2 * l->n : 4));
        if (!v) return lm_error_set(LM_ERR_NOMEM, "prompt: out of memory");
        l->items = v;
    }
    lm_prompt_network *it = &v[l->n];
    memset(it, 0, sizeof *it);
    l->n++;
    int nargs = 1;
    for (size_t k = colon + 1; k < end; k++) nargs += s[k] == ':';
    it->kind = dup_n(s + 1, colon - 1);
    it->args = calloc((size_t)nargs, sizeof *it->args);
    if (!it->kind || !it->args) return lm_error_set(LM_ERR_NOMEM, "prompt: out of memory");
    size_t from = colon + 1;
    for (size_t k = colon + 1; k <= end; k++) {
        if (k < end && s[k] != ':') continue;
        if (!(it->args[it->nargs] = dup_n(s + from, k - from)))
            return lm_error_set(LM_ERR_NOMEM, "prompt: out of memory");
        it->nargs++;
        from = k + 1;
    }
    return LM_OK;
}

lm_status lm_prompt_extra_networks(const char *text, size_t len, char **clean, size_t *clean_len,
                                   lm_prompt_networks *list)
{
    *clean = NULL;
    if (clean_len) *clean_len = 0;
    if (list) memset(list, 0, sizeof *list);
    if (!text && len) return lm_error_set(LM_ERR_ARG, "prompt: NULL text");
    const unsigned char *s = (const unsigned char *)text;
    char *o = malloc(len + 1);
    if (!o) return lm_error_set(LM_ERR_NOMEM, "prompt: out of memory");
    size_t m = 0;
    lm_status st = LM_OK;
    for (size_t i = 0; i < len;) {
        size_t colon, tl = tag_at(s, len, i, &colon);
        if (tl) {
            if (list && (st = add_network(list, text + i, colon - i, tl - 1)) != LM_OK) break;
            i += tl;
            continue;
        }
        o[m++] = text[i++];
    }
    if (st != LM_OK) {
        free(o);
        if (list) lm_prompt_networks_free(list);
        return st;
    }
    o[m] = 0;
    *clean = o;
    if (clean_len) *clean_len = m;
    return LM_OK;
}

void lm_prompt_networks_free(lm_prompt_networks *l)
{
    if (!l) return;
    for (int i = 0; i < l->n; i++) {
        free(l->items[i].kind);
        for (int a = 0; l->items[i].args && a < l->items[i].nargs; a++) free(l->items[i].args[a]);
        free(l->items[i].args);
    }
    free(l->items);
    l->items = NULL;
    l->n = 0;
}

/* ---- chunks ---- */

#define CL LM_PROMPT_CHUNK
#define CW (LM_PROMPT_CHUNK + 2)

typedef struct chunker {
    lm_prompt_chunks *out;
    int64_t cap;
    int32_t cur[CL];
    float cm[CL];
    int32_t cx[CL]; /* -1 or a vector table row */
    int n;          /* tokens in cur */
    int last_comma; /* -1 none */
    int32_t bos, eos;
    bool any_extra;
} chunker;

static lm_status close_chunk(chunker *k)
{
    lm_prompt_chunks *o = k->out;
    if (o->n == k->cap) {
        int64_t cap = k->cap ? k->cap * 2 : 4;
        int32_t *ids = realloc(o->ids, sizeof *ids * (size_t)(cap * CW));
        if (!ids) return lm_error_set(LM_ERR_NOMEM, "prompt: out of memory");
        o->ids = ids;
        float *m = realloc(o->mults, sizeof *m * (size_t)(cap * CW));
        if (!m) return lm_error_set(LM_ERR_NOMEM, "prompt: out of memory");
        o->mults = m;
        int32_t *x = realloc(o->extra, sizeof *x * (size_t)(cap * CW));
        if (!x) return lm_error_set(LM_ERR_NOMEM, "prompt: out of memory");
        o->extra = x;
        k->cap = cap;
    }
    int32_t *ids = o->ids + o->n * CW, *x = o->extra + o->n * CW;
    float *m = o->mults + o->n * CW;
    ids[0] = k->bos;
    m[0] = 1.0f;
    x[0] = x[CW - 1] = -1;
    for (int i = 0; i < CL; i++) {
        ids[1 + i] = i < k->n ? k->cur[i] : k->eos;
        m[1 + i] = i < k->n ? k->cm[i] : 1.0f;
        x[1 + i] = i < k->n ? k->cx[i] : -1;
    }
    ids[CW - 1] = k->eos;
    m[CW - 1] = 1.0f;
    o->n++;
    k->n = 0;
    k->last_comma = -1;
    return LM_OK;
}

/* the embedding whose name's tokens start at toks[t] (the longest), or -1 */
static int find_ti(const lm_prompt_ti *ti, const int32_t *toks, int64_t n, int64_t t)
{
    int best = -1;
    for (int i = 0; ti && i < ti->n; i++) {
        int64_t m = ti->nids[i];
        if (m < 1 || m > n - t || (best >= 0 && m <= ti->nids[best])) continue;
        if (!memcmp(toks + t, ti->ids[i], sizeof *toks * (size_t)m)) best = i;
    }
    return best;
}

lm_status lm_prompt_chunk_tokens(const lm_prompt *p, const int32_t *const *tokens,
                                 const int64_t *ntokens, int32_t bos, int32_t eos, int32_t comma,
                                 const lm_prompt_ti *ti, lm_prompt_chunks *out)
{
    memset(out, 0, sizeof *out);
    chunker k = {.out = out, .last_comma = -1, .bos = bos, .eos = eos};
    lm_status st = LM_OK;
    for (int64_t q = 0; st == LM_OK && q < p->n; q++) {
        if (lm_prompt_pair_is_break(&p->pairs[q])) {
            st = close_chunk(&k);
            continue;
        }
        float w = (float)p->pairs[q].weight;
        for (int64_t t = 0; st == LM_OK && t < ntokens[q];) {
            int32_t id = tokens[q][t];
            if (id == comma) k.last_comma = k.n;
            else if (k.n == CL && k.last_comma != -1 && k.n - k.last_comma <= LM_PROMPT_COMMA_BACKTRACK) {
                int cut = k.last_comma + 1, move = k.n - cut;
                int32_t mi[CL], mx[CL];
                float mm[CL];
                memcpy(mi, k.cur + cut, sizeof *mi * (size_t)move);
                memcpy(mm, k.cm + cut, sizeof *mm * (size_t)move);
                memcpy(mx, k.cx + cut, sizeof *mx * (size_t)move);
                k.n = cut;
                if ((st = close_chunk(&k)) != LM_OK) break;
                memcpy(k.cur, mi, sizeof *mi * (size_t)move);
                memcpy(k.cm, mm, sizeof *mm * (size_t)move);
                memcpy(k.cx, mx, sizeof *mx * (size_t)move);
                k.n = move;
            }
            if (k.n == CL && (st = close_chunk(&k)) != LM_OK) break;
            int e = find_ti(ti, tokens[q], ntokens[q], t);
            if (e < 0) {
                k.cur[k.n] = id;
                k.cm[k.n] = w;
                k.cx[k.n] = -1;
                k.n++;
                t++;
                continue;
            }
            int64_t v = ti->vectors[e];
            if (v > CL) {
                st = lm_error_set(LM_ERR_ARG, "prompt: a textual-inversion embedding of %lld vectors: "
                                  "at most %d fit in a chunk", (long long)v, CL);
                break;
            }
            if (k.n + v > CL && (st = close_chunk(&k)) != LM_OK) break;
            for (int64_t j = 0; j < v; j++) {
                k.cur[k.n] = 0;
                k.cm[k.n] = w;
                k.cx[k.n] = (int32_t)(ti->row[e] + j);
                k.n++;
            }
            k.any_extra = true;
            t += ti->nids[e];
        }
    }
    if (st == LM_OK && (k.n || out->n == 0)) st = close_chunk(&k);
    if (st != LM_OK) lm_prompt_chunks_free(out);
    else if (!k.any_extra) {
        free(out->extra);
        out->extra = NULL;
    }
    return st;
}

void lm_prompt_chunks_free(lm_prompt_chunks *c)
{
    if (!c) return;
    free(c->ids);
    free(c->mults);
    free(c->extra);
    memset(c, 0, sizeof *c);
}

/* ---- textual-inversion embeddings ---- */

static int cmp_emb(const void *a, const void *b)
{
    return strcmp(((const lm_prompt_embedding *)a)->name, ((const lm_prompt_embedding *)b)->name);
}

static lm_array *rows_f32(lm_array *a, const char *file, const char *key)
{
    if (a->ndim < 1 || a->ndim > 2 || a->shape[a->ndim - 1] < 1 || (a->ndim == 2 && a->shape[0] < 1)) {
        lm_error_set(LM_ERR_FORMAT, "%s: %s: a textual-inversion embedding is [vectors, width] or "
                     "[width], not %d-dimensional with %lld values", file, key, a->ndim,
                     (long long)(a->ndim ? a->shape[a->ndim - 1] : 0));
        return NULL;
    }
    int64_t shape[2] = {a->ndim == 2 ? a->shape[0] : 1, a->shape[a->ndim - 1]};
    lm_array *f = lm_cast(a, LM_F32), *r = f ? lm_reshape(f, 2, shape) : NULL;
    lm_array_release(f);
    return r;
}

static lm_status load_one(const char *dir, const char *fname, lm_prompt_embedding *e)
{
    size_t dl = strlen(dir), fl = strlen(fname);
    e->file = malloc(dl + fl + 2);
    e->name = dup_n(fname, fl - strlen(".safetensors"));
    if (!e->file || !e->name) return lm_error_set(LM_ERR_NOMEM, "prompt: out of memory");
    snprintf(e->file, dl + fl + 2, "%s/%s", dir, fname);
    lm_tensor_set s = {0};
    lm_status st = lm_load_safetensors(e->file, &s);
    if (st != LM_OK) return st;
    int l = lm_tensor_set_find(&s, "clip_l"), g = lm_tensor_set_find(&s, "clip_g");
    if (l >= 0 && g >= 0) {
        e->sdxl = true;
        e->vec[0] = rows_f32(s.arrays[l], e->file, "clip_l");
        e->vec[1] = e->vec[0] ? rows_f32(s.arrays[g], e->file, "clip_g") : NULL;
        if (e->vec[1] && e->vec[1]->shape[0] != e->vec[0]->shape[0])
            st = lm_error_set(LM_ERR_FORMAT, "%s: clip_l has %lld vectors and clip_g %lld", e->file,
                              (long long)e->vec[0]->shape[0], (long long)e->vec[1]->shape[0]);
    } else if (s.count == 1) {
        e->vec[0] = rows_f32(s.arrays[0], e->file, s.names[0]);
    } else {
        char keys[256] = "";
        size_t at = 0;
        for (int i = 0; i < s.count && at < sizeof keys; i++)
            at += (size_t)snprintf(keys + at, sizeof keys - at, "%s%s", i ? ", " : "", s.names[i]);
        st = lm_error_set(LM_ERR_FORMAT, "%s: %d tensors (%s): a textual-inversion embedding has one "
                          "(emb_params, string_to_param.*) or clip_l and clip_g (SDXL)", e->file,
                          s.count, s.count ? keys : "none");
    }
    lm_tensor_set_free(&s);
    if (st == LM_OK && (!e->vec[0] || (e->sdxl && !e->vec[1]))) st = lm_error_status();
    if (st == LM_OK) e->vectors = e->vec[0]->shape[0];
    return st;
}

lm_status lm_prompt_embeddings_load(const char *dir, lm_prompt_embeddings *out)
{
    memset(out, 0, sizeof *out);
    DIR *d = opendir(dir);
    if (!d) return lm_error_set(LM_ERR_IO, "embeddings folder %s: %s", dir, strerror(errno));
    lm_status st = LM_OK;
    for (struct dirent *de; st == LM_OK && (de = readdir(d));) {
        size_t n = strlen(de->d_name), x = strlen(".safetensors");
        if (n <= x || strcmp(de->d_name + n - x, ".safetensors")) continue;
        lm_prompt_embedding *v = realloc(out->items, sizeof *v * (size_t)(out->n + 1));
        if (!v) {
            st = lm_error_set(LM_ERR_NOMEM, "prompt: out of memory");
            break;
        }
        out->items = v;
        memset(&v[out->n], 0, sizeof *v);
        st = load_one(dir, de->d_name, &v[out->n++]);
    }
    closedir(d);
    if (st != LM_OK) {
        lm_prompt_embeddings_free(out);
        return st;
    }
    if (out->n) qsort(out->items, (size_t)out->n, sizeof *out->items, cmp_emb);
    return LM_OK;
}

void lm_prompt_embeddings_free(lm_prompt_embeddings *e)
{
    if (!e) return;
    for (int i = 0; i < e->n; i++) {
        free(e->items[i].name);
        free(e->items[i].file);
        lm_array_release(e->items[i].vec[0]);
        lm_array_release(e->items[i].vec[1]);
    }
    free(e->items);
    e->items = NULL;
    e->n = 0;
}

/* ---- a CLIP tokenizer's chunks ---- */

/* the embeddings of db usable with the encoder, their names' tokens and rows */
typedef struct ti_set {
    lm_prompt_ti ti;
    int32_t **ids;
    int64_t *nids, *vectors, *row;
    lm_array **vec;
    int n;
} ti_set;

static void ti_free(ti_set *t)
{
    for (int i = 0; i < t->n; i++) free(t->ids[i]);
    free(t->ids);
    free(t->nids);
    free(t->vectors);
    free(t->row);
    free(t->vec);
}

static lm_status ti_build(lm_clip_tokenizer *tok, const lm_prompt_embeddings *db, int which,
                          int n_encoders, int64_t width, ti_set *t)
{
    memset(t, 0, sizeof *t);
    int m = db ? db->n : 0;
    if (!m) return LM_OK;
    t->ids = calloc((size_t)m, sizeof *t->ids);
    t->nids = calloc((size_t)m, sizeof *t->nids);
    t->vectors = calloc((size_t)m, sizeof *t->vectors);
    t->row = calloc((size_t)m, sizeof *t->row);
    t->vec = calloc((size_t)m, sizeof *t->vec);
    if (!t->ids || !t->nids || !t->vectors || !t->row || !t->vec)
        return lm_error_set(LM_ERR_NOMEM, "prompt: out of memory");
    int64_t rows = 0;
    for (int i = 0; i < m; i++) {
        const lm_prompt_embedding *e = &db->items[i];
        lm_array *v = e->sdxl ? (n_encoders == 2 ? e->vec[which] : NULL) : (n_encoders == 1 ? e->vec[0] : NULL);
        if (!v || v->shape[1] != width) continue;   /* A1111 skips it */
        const int32_t *ids;
        int64_t n;
        lm_status st = lm_clip_tokenizer_tokens(tok, e->name, strlen(e->name), &ids, &n);
        if (st != LM_OK) return st;
        int k = t->n;
        if (!(t->ids[k] = malloc(sizeof *ids * (size_t)(n + 1))))
            return lm_error_set(LM_ERR_NOMEM, "prompt: out of memory");
        memcpy(t->ids[k], ids, sizeof *ids * (size_t)n);
        t->nids[k] = n;
        t->vectors[k] = e->vectors;
        t->row[k] = rows;
        t->vec[k] = v;
        rows += e->vectors;
        t->n++;
    }
    t->ti = (lm_prompt_ti){t->n, (const int32_t *const *)t->ids, t->nids, t->vectors, t->row};
    return LM_OK;
}

lm_status lm_prompt_clip_chunks(lm_clip_tokenizer *tok, const char *prompt, size_t len, lm_prompt_chunks *c)
{
    return lm_prompt_clip_chunks_ti(tok, prompt, len, NULL, 0, 1, 0, c, NULL);
}

lm_status lm_prompt_clip_chunks_ti(lm_clip_tokenizer *tok, const char *prompt, size_t len,
                                   const lm_prompt_embeddings *db, int which, int n_encoders,
                                   int64_t width, lm_prompt_chunks *c, lm_array **table)
{
    if (table) *table = NULL;
    memset(c, 0, sizeof *c);
    ti_set tis;
    lm_status tst = ti_build(tok, db, which, n_encoders, width, &tis);
    if (tst != LM_OK) {
        ti_free(&tis);
        memset(c, 0, sizeof *c);
        return tst;
    }
    char *clean = NULL;
    size_t cl = 0;
    lm_prompt pr = {0};
    int32_t **ids = NULL;
    int64_t *nids = NULL;
    lm_status st = lm_prompt_extra_networks(prompt, len, &clean, &cl, NULL);
    if (st == LM_OK) st = lm_prompt_parse(clean, cl, &pr);
    if (st == LM_OK && (!(ids = calloc((size_t)pr.n, sizeof *ids)) || !(nids = calloc((size_t)pr.n, sizeof *nids))))
        st = lm_error_set(LM_ERR_NOMEM, "prompt: out of memory");
    for (int64_t i = 0; st == LM_OK && i < pr.n; i++) {
        const int32_t *t;
        if (lm_prompt_pair_is_break(&pr.pairs[i])) continue;
        if ((st = lm_clip_tokenizer_tokens(tok, pr.pairs[i].text, pr.pairs[i].len, &t, &nids[i])) != LM_OK) break;
        if (!(ids[i] = malloc(sizeof **ids * (size_t)(nids[i] + 1)))) {
            st = lm_error_set(LM_ERR_NOMEM, "prompt: out of memory");
            break;
        }
        if (nids[i]) memcpy(ids[i], t, sizeof **ids * (size_t)nids[i]);   /* t may be NULL for none */
    }
    if (st == LM_OK)
        st = lm_prompt_chunk_tokens(&pr, (const int32_t *const *)ids, nids, lm_clip_tokenizer_bos(tok),
                                    lm_clip_tokenizer_eos(tok), lm_clip_tokenizer_find(tok, ",</w>"),
                                    tis.n ? &tis.ti : NULL, c);
    /* the vector table of the embeddings found */
    if (st == LM_OK && c->extra && table) {
        *table = tis.n > 1 ? lm_concat(tis.n, tis.vec, 0) : lm_array_retain(tis.vec[0]);
        if (!*table) st = lm_error_status();
    }
    /* ids after the first eos become the pad id where it differs (SD 2.x,
       SDXL's second tokenizer), as A1111's process_tokens does */
    int32_t eos = lm_clip_tokenizer_eos(tok), pad = lm_clip_tokenizer_pad(tok);
    for (int64_t k = 0; st == LM_OK && k < c->n; k++) {
        int32_t *row = c->ids + k * (LM_PROMPT_CHUNK + 2);
        int j = 1;
        while (j < LM_PROMPT_CHUNK + 2 && row[j] != eos) j++;
        for (j++; j < LM_PROMPT_CHUNK + 2; j++) row[j] = pad;
    }
    for (int64_t i = 0; ids && i < pr.n; i++) free(ids[i]);
    free(ids);
    free(nids);
    lm_prompt_free(&pr);
    free(clean);
    ti_free(&tis);
    if (st != LM_OK) lm_prompt_chunks_free(c);
    return st;
}
