/* bpe.c - the byte-level BPE tables and merge loop (see bpe.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bpe.h"
#include "diffusers_config.h"

/* ---- string -> id table (open addressing, FNV-1a) ---- */
static uint64_t str_hash(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

lm_bpe_ent *lm_bpe_table_find(const lm_bpe_table *t, const char *k, size_t n)
{
    if (!t->cap) return NULL;
    size_t i = str_hash(k, n) & (t->cap - 1);
    for (;; i = (i + 1) & (t->cap - 1)) {
        lm_bpe_ent *e = &t->e[i];
        if (!e->key) return NULL;
        if (e->klen == n && !memcmp(e->key, k, n)) return e;
    }
}

void lm_bpe_table_clear(lm_bpe_table *t)
{
    for (size_t i = 0; i < t->cap; i++) {
        free(t->e[i].key);
        free(t->e[i].ids);
    }
    free(t->e);
    memset(t, 0, sizeof *t);
}

static lm_status table_grow(lm_bpe_table *t)
{
    size_t cap = t->cap ? t->cap * 2 : 1024;
    lm_bpe_ent *e = calloc(cap, sizeof *e);
    if (!e) return lm_error_set(LM_ERR_NOMEM, "tokenizer: out of memory");
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->e[i].key) continue;
        size_t j = str_hash(t->e[i].key, t->e[i].klen) & (cap - 1);
        while (e[j].key) j = (j + 1) & (cap - 1);
        e[j] = t->e[i];
    }
    free(t->e);
    t->e = e;
    t->cap = cap;
    return LM_OK;
}

lm_bpe_ent *lm_bpe_table_put(lm_bpe_table *t, const char *k, size_t n, bool *fresh)
{
    if ((t->n + 1) * 2 > t->cap && table_grow(t) != LM_OK) return NULL;
    size_t i = str_hash(k, n) & (t->cap - 1);
    for (;; i = (i + 1) & (t->cap - 1)) {
        lm_bpe_ent *e = &t->e[i];
        if (e->key && e->klen == n && !memcmp(e->key, k, n)) {
            *fresh = false;
            return e;
        }
        if (!e->key) {
            e->key = malloc(n + 1);
            if (!e->key) {
                lm_error_set(LM_ERR_NOMEM, "tokenizer: out of memory");
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
static uint64_t pair_key(int32_t a, int32_t b)
{
    return ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
}

static const lm_bpe_merge *merge_find(const lm_bpe *t, int32_t a, int32_t b)
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
static void merge_put(lm_bpe *t, int32_t a, int32_t b, int32_t rank, int32_t id)
{
    uint64_t k = pair_key(a, b);
    size_t i = (size_t)(k * 0x9E3779B97F4A7C15ull >> 20) & (t->mcap - 1);
    while (t->merges[i].pair && t->merges[i].pair != k) i = (i + 1) & (t->mcap - 1);
    if (t->merges[i].pair) return;
    t->merges[i] = (lm_bpe_merge){k, rank, id};
}

/* GPT-2's table: printable bytes stand for themselves, the others map to
 * U+0100 upwards in byte order. */
void lm_bpe_init(lm_bpe *t, const char *what)
{
    memset(t, 0, sizeof *t);
    t->what = what;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        int cp = keep ? b : 256 + n++;
        char *u = t->byte_utf8[b];
        if (cp < 0x80) { u[0] = (char)cp; u[1] = 0; }
        else { u[0] = (char)(0xC0 | (cp >> 6)); u[1] = (char)(0x80 | (cp & 0x3F)); u[2] = 0; }
    }
}

void lm_bpe_free(lm_bpe *t)
{
    lm_bpe_table_clear(&t->vocab);
    free(t->merges);
    t->merges = NULL;
    t->mcap = 0;
}

int32_t lm_bpe_id(const lm_bpe *t, const char *s, size_t n)
{
    const lm_bpe_ent *e = lm_bpe_table_find(&t->vocab, s, n);
    return e ? e->id : -1;
}

lm_status lm_bpe_add(lm_bpe *t, const char *s, size_t n, double id, const char *what)
{
    if (!(id >= 0 && id < INT32_MAX && id == (double)(int64_t)id))
        return lm_error_set(LM_ERR_FORMAT, "%s: token \"%.40s\": id %g is not an integer in "
                            "[0, 2^31)", what, s, id);
    bool fresh;
    lm_bpe_ent *e = lm_bpe_table_put(&t->vocab, s, n, &fresh);
    if (!e) return LM_ERR_NOMEM;
    if (fresh) e->id = (int32_t)id;
    if ((int64_t)id + 1 > t->nids) t->nids = (int64_t)id + 1;
    return LM_OK;
}

/* where: "line" (merges.txt) or "model.merges index" (tokenizer.json) */
static lm_status merge_line(lm_bpe *t, const char *a, size_t na, const char *b, size_t nb,
                            int32_t rank, const char *what, const char *where, long line)
{
    char buf[512];
    if (na + nb >= sizeof buf)
        return lm_error_set(LM_ERR_FORMAT, "%s: %s %ld: token longer than %zu bytes", what,
                            where, line, sizeof buf);
    int32_t ia = lm_bpe_id(t, a, na), ib = lm_bpe_id(t, b, nb);
    memcpy(buf, a, na);
    memcpy(buf + na, b, nb);
    int32_t ic = lm_bpe_id(t, buf, na + nb);
    if (ia < 0 || ib < 0 || ic < 0) {
        const char *miss = ia < 0 ? a : ib < 0 ? b : buf;
        int nm = (int)(ia < 0 ? na : ib < 0 ? nb : na + nb);
        return lm_error_set(LM_ERR_FORMAT, "%s: %s %ld (\"%.*s %.*s\"): \"%.*s\" is not in "
                            "the vocabulary", what, where, line, (int)na, a, (int)nb, b, nm, miss);
    }
    merge_put(t, ia, ib, rank, ic);
    return LM_OK;
}

static lm_status merges_alloc(lm_bpe *t, size_t n)
{
    size_t cap = 1024;
    while (cap < n * 2) cap *= 2;
    free(t->merges);
    t->merges = calloc(cap, sizeof *t->merges);
    if (!t->merges) return lm_error_set(LM_ERR_NOMEM, "%s: out of memory", t->what);
    t->mcap = cap;
    return LM_OK;
}

lm_status lm_bpe_load_vocab(lm_bpe *t, const cJSON *v, const char *what)
{
    if (!cJSON_IsObject(v)) return lm_error_set(LM_ERR_FORMAT, "%s: vocab: expected an object", what);
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        if (!cJSON_IsNumber(e))
            return lm_error_set(LM_ERR_FORMAT, "%s: token \"%.40s\": id is not a number", what,
                                e->string);
        lm_status st = lm_bpe_add(t, e->string, strlen(e->string), e->valuedouble, what);
        if (st != LM_OK) return st;
    }
    if (!t->vocab.n) return lm_error_set(LM_ERR_FORMAT, "%s: the vocabulary is empty", what);
    return LM_OK;
}

lm_status lm_bpe_load_merges_txt(lm_bpe *t, const char *path, size_t max_merges)
{
    char *text;
    size_t n;
    lm_status st = lm_dfs_read(path, 64u << 20, &text, &n);
    if (st != LM_OK) return st;
    size_t lines = 1;
    for (size_t i = 0; i < n; i++) lines += text[i] == '\n';
    st = merges_alloc(t, lines < max_merges ? lines : max_merges);
    int32_t rank = 0;
    long line = 0;
    for (char *p = text; st == LM_OK && p < text + n && (size_t)rank < max_merges;) {
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

lm_status lm_bpe_load_merges_json(lm_bpe *t, const cJSON *merges, const char *path)
{
    if (!cJSON_IsArray(merges)) return lm_error_set(LM_ERR_FORMAT, "%s: model.merges: missing", path);
    lm_status st = merges_alloc(t, (size_t)cJSON_GetArraySize(merges));
    int32_t rank = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, merges) {
        if (st != LM_OK) break;
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
        if (!a || !na || !nb)
            st = lm_error_set(LM_ERR_FORMAT, "%s: model.merges[%d]: expected \"a b\" or [a, b]",
                              path, (int)rank);
        else
            st = merge_line(t, a, na, b, nb, rank, path, "model.merges index", (long)rank);
        rank++;
    }
    return st;
}

/* ---- the merge loop ---- */
typedef struct heap_ent {
    int32_t rank, pos, id;
} heap_ent;

static bool heap_less(const heap_ent *a, const heap_ent *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(heap_ent *h, size_t *n, heap_ent v)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&v, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static heap_ent heap_pop(heap_ent *h, size_t *n)
{
    heap_ent top = h[0], v = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && heap_less(&h[c + 1], &h[c])) c++;
        if (!heap_less(&h[c], &v)) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
    return top;
}

int64_t lm_bpe_merge_word(const lm_bpe *t, int32_t *w, size_t n)
{
    if (n < 2) return (int64_t)n;
    if (n > INT32_MAX / 4) {
        lm_error_set(LM_ERR_ARG, "%s: a word of %zu symbols", t->what, n);
        return -1;
    }
    /* symbols as a list; every merge adds at most two pairs */
    int32_t *prev = malloc(n * sizeof *prev), *next = malloc(n * sizeof *next);
    heap_ent *h = malloc(3 * n * sizeof *h);
    if (!prev || !next || !h) {
        free(prev);
        free(next);
        free(h);
        lm_error_set(LM_ERR_NOMEM, "%s: out of memory", t->what);
        return -1;
    }
    size_t nh = 0;
    for (size_t i = 0; i < n; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
        if (i + 1 < n && w[i] >= 0 && w[i + 1] >= 0) {
            const lm_bpe_merge *m = merge_find(t, w[i], w[i + 1]);
            if (m) heap_push(h, &nh, (heap_ent){m->rank, (int32_t)i, m->id});
        }
    }
    while (nh) {
        heap_ent top = heap_pop(h, &nh);
        int32_t p = top.pos, q = next[p];
        /* stale: the left symbol was merged away, or its pair changed */
        if (w[p] < 0 || q < 0 || w[q] < 0) continue;
        const lm_bpe_merge *m = merge_find(t, w[p], w[q]);
        if (!m || m->id != top.id || m->rank != top.rank) continue;
        w[p] = top.id;
        w[q] = INT32_MIN;                 /* dead */
        next[p] = next[q];
        if (next[q] >= 0) prev[next[q]] = p;
        if (prev[p] >= 0 && w[prev[p]] >= 0) {
            const lm_bpe_merge *l = merge_find(t, w[prev[p]], w[p]);
            if (l) heap_push(h, &nh, (heap_ent){l->rank, prev[p], l->id});
        }
        if (next[p] >= 0 && w[next[p]] >= 0) {
            const lm_bpe_merge *r = merge_find(t, w[p], w[next[p]]);
            if (r) heap_push(h, &nh, (heap_ent){r->rank, p, r->id});
        }
    }
    size_t j = 0;
    for (int32_t i = 0; i >= 0; i = next[i]) w[j++] = w[i];
    free(prev);
    free(next);
    free(h);
    return (int64_t)j;
}

size_t lm_bpe_put_utf8(unsigned char *o, int32_t c)
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
