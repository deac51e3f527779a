/* io_safetensors.c - the safetensors format: 8 bytes of little-endian header
 * length N, N bytes of JSON {"name": {"dtype", "shape", "data_offsets"},
 * "__metadata__": {str: str}}, then the raw little-endian tensor bytes, the
 * offsets counting from the end of the header.
 *
 * Reading maps the file once; every tensor wraps its slice of the mapping
 * (see io.h), so opening costs only the header.  The JSON parser below
 * accepts exactly what the format needs and rejects everything else with a
 * message naming the file and the place. */
#include <stdlib.h>
#include <string.h>
#include "io_internal.h"
#include "lumen.h"

#define ST_MAX_DEPTH 32

typedef struct st_entry {
    char *name;
    lm_dtype dt;
    int ndim;
    int64_t shape[LM_MAX_DIMS];
    uint64_t begin, end;
    int usize;                 /* U16/U32/U64: file element size, widened on load */
} st_entry;

typedef struct st_parser {
    const char *p, *end, *start;
    const char *what;          /* file name for errors */
    st_entry *e;
    int n, cap;
    lm_tensor_set *set;        /* receives metadata */
} st_parser;

static const struct { const char *name; lm_dtype dt; int usize; } st_dtypes[] = {
    {"F64", LM_F64, 0}, {"F32", LM_F32, 0}, {"F16", LM_F16, 0}, {"BF16", LM_BF16, 0},
    {"I64", LM_I64, 0}, {"I32", LM_I32, 0}, {"I16", LM_I16, 0}, {"I8", LM_I8, 0},
    {"U8", LM_U8, 0}, {"BOOL", LM_BOOL, 0},
    /* Lumen has no wide unsigned types: widened exactly (U64 checked) */
    {"U16", LM_I32, 2}, {"U32", LM_I64, 4}, {"U64", LM_I64, 8},
};

static const char *st_dtype_name(lm_dtype dt)
{
    for (size_t i = 0; i < sizeof st_dtypes / sizeof *st_dtypes; i++)
        if (st_dtypes[i].dt == dt) return st_dtypes[i].name;
    return NULL;
}

static lm_status perr(st_parser *ps, const char *msg)
{
    return lm_error_set(LM_ERR_FORMAT, "%s: safetensors header: %s at byte %ld", ps->what,
                        msg, (long)(ps->p - ps->start) + 8);
}

static void ws(st_parser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' ||
                               *ps->p == '\r'))
        ps->p++;
}

static bool eat(st_parser *ps, char c)
{
    ws(ps);
    if (ps->p < ps->end && *ps->p == c) {
        ps->p++;
        return true;
    }
    return false;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static bool hex4(st_parser *ps, unsigned *out)
{
    if (ps->end - ps->p < 4) return false;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(ps->p[i]);
        if (h < 0) return false;
        v = v * 16 + (unsigned)h;
    }
    ps->p += 4;
    *out = v;
    return true;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* One \u escape (after the "\u"), surrogate pairs joined. */
static lm_status unicode_escape(st_parser *ps, char *o, size_t *len)
{
    unsigned cp, lo;
    if (!hex4(ps, &cp)) return perr(ps, "bad \\u escape");
    if (cp >= 0xD800 && cp < 0xDC00) {
        if (ps->end - ps->p < 2 || ps->p[0] != '\\' || ps->p[1] != 'u')
            return perr(ps, "unpaired surrogate in \\u escape");
        ps->p += 2;
        if (!hex4(ps, &lo) || lo < 0xDC00 || lo > 0xDFFF)
            return perr(ps, "unpaired surrogate in \\u escape");
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        return perr(ps, "unpaired surrogate in \\u escape");
    }
    if (cp == 0) return perr(ps, "NUL character in string");
    *len += put_utf8(o + *len, cp);
    return LM_OK;
}

/* A JSON string into a new malloc'd C string (*out), its length in *len. */
static lm_status parse_string(st_parser *ps, char **out, size_t *olen)
{
    *out = NULL;
    if (!eat(ps, '"')) return perr(ps, "expected a string");
    const char *s = ps->p;
    while (s < ps->end && *s != '"') s += (*s == '\\' && s + 1 < ps->end) ? 2 : 1;
    if (s >= ps->end) return perr(ps, "unterminated string");
    /* decoded text is never longer than the escaped text */
    char *o = malloc((size_t)(s - ps->p) + 1);
    if (!o) return lm_error_set(LM_ERR_NOMEM, "%s: out of memory", ps->what);
    size_t len = 0;
    /* decode up to the closing quote only: an escape cannot run past it */
    const char *end = ps->end;
    ps->end = s;
    while (ps->p < ps->end) {
        unsigned char c = (unsigned char)*ps->p++;
        if (c < 0x20) { ps->end = end; free(o); return perr(ps, "control character in string"); }
        if (c != '\\') { o[len++] = (char)c; continue; }
        char e = *ps->p++;
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
        const char *k = e ? strchr(from, e) : NULL;
        if (k) {
            o[len++] = to[k - from];
        } else if (e == 'u') {
            if (unicode_escape(ps, o, &len) != LM_OK) {
                ps->end = end;
                free(o);
                return LM_ERR_FORMAT;
            }
        } else {
            ps->end = end;
            free(o);
            return perr(ps, "bad escape in string");
        }
    }
    ps->end = end;
    ps->p++;
    o[len] = 0;
    *out = o;
    if (olen) *olen = len;
    return LM_OK;
}

static lm_status parse_uint(st_parser *ps, uint64_t *v)
{
    ws(ps);
    if (ps->p < ps->end && *ps->p == '-') return perr(ps, "negative number");
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return perr(ps, "expected an integer");
    uint64_t x = 0;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        unsigned d = (unsigned)(*ps->p++ - '0');
        if (x > (UINT64_MAX - d) / 10) return perr(ps, "integer too large");
        x = x * 10 + d;
    }
    if (ps->p < ps->end && (*ps->p == '.' || *ps->p == 'e' || *ps->p == 'E'))
        return perr(ps, "expected an integer, found a fraction");
    *v = x;
    return LM_OK;
}

/* Skips any JSON value (for keys the format does not define). */
static lm_status skip_value(st_parser *ps, int depth)
{
    if (depth > ST_MAX_DEPTH) return perr(ps, "nesting too deep");
    ws(ps);
    if (ps->p >= ps->end) return perr(ps, "unexpected end");
    char c = *ps->p;
    if (c == '"') {
        char *s;
        lm_status st = parse_string(ps, &s, NULL);
        free(s);
        return st;
    }
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        ps->p++;
        if (eat(ps, close)) return LM_OK;
        do {
            if (c == '{') {
                char *k;
                if (parse_string(ps, &k, NULL) != LM_OK) return LM_ERR_FORMAT;
                free(k);
                if (!eat(ps, ':')) return perr(ps, "expected ':'");
            }
            if (skip_value(ps, depth + 1) != LM_OK) return LM_ERR_FORMAT;
        } while (eat(ps, ','));
        return eat(ps, close) ? LM_OK : perr(ps, "expected ',' or a closing bracket");
    }
    const char *s = ps->p;
    while (ps->p < ps->end && strchr("+-.0123456789eEtruefalsn", *ps->p)) ps->p++;
    return ps->p > s ? LM_OK : perr(ps, "unexpected character");
}

static lm_status parse_shape(st_parser *ps, st_entry *e)
{
    if (!eat(ps, '[')) return perr(ps, "shape must be a list");
    e->ndim = 0;
    if (eat(ps, ']')) return LM_OK;
    do {
        uint64_t d;
        if (parse_uint(ps, &d) != LM_OK) return LM_ERR_FORMAT;
        if (e->ndim == LM_MAX_DIMS) return perr(ps, "more than 8 dimensions");
        if (d > (uint64_t)INT64_MAX) return perr(ps, "dimension too large");
        e->shape[e->ndim++] = (int64_t)d;
    } while (eat(ps, ','));
    return eat(ps, ']') ? LM_OK : perr(ps, "expected ',' or ']' in shape");
}

static lm_status parse_offsets(st_parser *ps, st_entry *e)
{
    if (!eat(ps, '[')) return perr(ps, "data_offsets must be a list");
    if (parse_uint(ps, &e->begin) != LM_OK) return LM_ERR_FORMAT;
    if (!eat(ps, ',')) return perr(ps, "data_offsets needs two numbers");
    if (parse_uint(ps, &e->end) != LM_OK) return LM_ERR_FORMAT;
    return eat(ps, ']') ? LM_OK : perr(ps, "data_offsets needs exactly two numbers");
}

static lm_status parse_dtype(st_parser *ps, st_entry *e)
{
    char *s;
    if (parse_string(ps, &s, NULL) != LM_OK) return LM_ERR_FORMAT;
    for (size_t i = 0; i < sizeof st_dtypes / sizeof *st_dtypes; i++)
        if (!strcmp(s, st_dtypes[i].name)) {
            e->dt = st_dtypes[i].dt;
            e->usize = st_dtypes[i].usize;
            free(s);
            return LM_OK;
        }
    lm_status st = lm_error_set(LM_ERR_FORMAT,
        "%s: tensor '%s': dtype \"%.32s\" is not supported (F64 F32 F16 BF16 I64 I32 "
        "I16 I8 U8 BOOL U16 U32 U64 are)", ps->what, e->name, s);
    free(s);
    return st;
}

/* {"dtype": .., "shape": [..], "data_offsets": [b, e]} */
static lm_status parse_tensor(st_parser *ps, st_entry *e)
{
    int seen = 0;
    if (!eat(ps, '{')) return perr(ps, "a tensor entry must be an object");
    if (!eat(ps, '}')) do {
        char *k;
        if (parse_string(ps, &k, NULL) != LM_OK) return LM_ERR_FORMAT;
        if (!eat(ps, ':')) { free(k); return perr(ps, "expected ':'"); }
        lm_status st;
        if (!strcmp(k, "dtype")) { st = parse_dtype(ps, e); seen |= 1; }
        else if (!strcmp(k, "shape")) { st = parse_shape(ps, e); seen |= 2; }
        else if (!strcmp(k, "data_offsets")) { st = parse_offsets(ps, e); seen |= 4; }
        else st = skip_value(ps, 1);
        free(k);
        if (st != LM_OK) return st;
    } while (eat(ps, ','));
    else return perr(ps, "empty tensor entry");
    if (!eat(ps, '}')) return perr(ps, "expected ',' or '}' in tensor entry");
    if (seen != 7)
        return lm_error_set(LM_ERR_FORMAT, "%s: tensor '%s' lacks %s", ps->what, e->name,
                            !(seen & 1) ? "dtype" : !(seen & 2) ? "shape" : "data_offsets");
    return LM_OK;
}

static lm_status parse_metadata(st_parser *ps)
{
    if (!eat(ps, '{')) return perr(ps, "__metadata__ must be an object");
    if (eat(ps, '}')) return LM_OK;
    do {
        char *k, *v;
        size_t kl, vl;
        if (parse_string(ps, &k, &kl) != LM_OK) return LM_ERR_FORMAT;
        if (!eat(ps, ':')) { free(k); return perr(ps, "expected ':'"); }
        ws(ps);
        if (parse_string(ps, &v, &vl) != LM_OK) {
            free(k);
            return perr(ps, "__metadata__ values must be strings");
        }
        lm_status st = lm_io_set_meta(ps->set, k, kl, v, vl);
        free(k);
        free(v);
        if (st != LM_OK) return st;
    } while (eat(ps, ','));
    return eat(ps, '}') ? LM_OK : perr(ps, "expected ',' or '}' in __metadata__");
}

static lm_status parse_header(st_parser *ps)
{
    if (!eat(ps, '{')) return perr(ps, "expected '{'");
    if (!eat(ps, '}')) {
        do {
            char *k;
            if (parse_string(ps, &k, NULL) != LM_OK) return LM_ERR_FORMAT;
            if (!eat(ps, ':')) { free(k); return perr(ps, "expected ':'"); }
            if (!strcmp(k, "__metadata__")) {
                free(k);
                if (parse_metadata(ps) != LM_OK) return LM_ERR_FORMAT;
                continue;
            }
            if (ps->n == ps->cap) {
                int cap = ps->cap ? ps->cap * 2 : 16;
                st_entry *ne = realloc(ps->e, (size_t)cap * sizeof *ne);
                if (!ne) { free(k); return lm_error_set(LM_ERR_NOMEM, "%s: out of memory", ps->what); }
                ps->e = ne;
                ps->cap = cap;
            }
            st_entry *e = &ps->e[ps->n++];
            memset(e, 0, sizeof *e);
            e->name = k;
            if (parse_tensor(ps, e) != LM_OK) return LM_ERR_FORMAT;
        } while (eat(ps, ','));
        if (!eat(ps, '}')) return perr(ps, "expected ',' or '}'");
    }
    ws(ps);
    return ps->p == ps->end ? LM_OK : perr(ps, "trailing bytes after the header object");
}

static int cmp_begin(const void *a, const void *b)
{
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp((*(const st_entry *const *)a)->name, (*(const st_entry *const *)b)->name);
}

/* Sizes match shapes, ranges lie in the data, no two overlap, names unique. */
static lm_status check_entries(st_parser *ps, uint64_t data_len)
{
    for (int i = 0; i < ps->n; i++) {
        st_entry *e = &ps->e[i];
        uint64_t nbytes = e->usize ? (uint64_t)e->usize : lm_dtype_size(e->dt);
        int64_t numel;
        if (!lm_shape_fits(e->ndim, e->shape, &numel))
            return lm_error_set(LM_ERR_FORMAT, "%s: tensor '%s': shape %s too large",
                                ps->what, e->name, lm_shape_str((char[96]){0}, 96, e->ndim, e->shape));
        nbytes *= (uint64_t)numel;   /* numel <= LM_MAX_SPAN, usize <= 8 */
        if (e->begin > e->end || e->end > data_len)
            return lm_error_set(LM_ERR_FORMAT,
                "%s: tensor '%s': data_offsets [%llu, %llu] outside the %llu data bytes",
                ps->what, e->name, (unsigned long long)e->begin,
                (unsigned long long)e->end, (unsigned long long)data_len);
        if (e->end - e->begin != nbytes)
            return lm_error_set(LM_ERR_FORMAT,
                "%s: tensor '%s': data_offsets span %llu bytes but %s%s needs %llu",
                ps->what, e->name, (unsigned long long)(e->end - e->begin),
                e->usize == 2 ? "U16" : e->usize == 4 ? "U32" : e->usize == 8 ? "U64"
                : st_dtype_name(e->dt), lm_shape_str((char[96]){0}, 96, e->ndim, e->shape),
                (unsigned long long)nbytes);
    }
    if (ps->n == 0) return LM_OK;   /* qsort must not see a NULL array */
    qsort(ps->e, (size_t)ps->n, sizeof *ps->e, cmp_begin);
    const st_entry *prev = NULL;
    for (int i = 0; i < ps->n; i++) {
        const st_entry *e = &ps->e[i];
        if (e->begin == e->end) continue;
        if (prev && e->begin < prev->end)
            return lm_error_set(LM_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap", ps->what,
                                prev->name, e->name);
        prev = e;
    }
    const st_entry **byname = malloc(((size_t)ps->n + 1) * sizeof *byname);
    if (!byname) return lm_error_set(LM_ERR_NOMEM, "%s: out of memory", ps->what);
    for (int i = 0; i < ps->n; i++) byname[i] = &ps->e[i];
    qsort(byname, (size_t)ps->n, sizeof *byname, cmp_name);
    for (int i = 1; i < ps->n; i++)
        if (!strcmp(byname[i]->name, byname[i - 1]->name)) {
            lm_status st = lm_error_set(LM_ERR_FORMAT, "%s: tensor name '%s' appears twice",
                                        ps->what, byname[i]->name);
            free(byname);
            return st;
        }
    free(byname);
    return LM_OK;
}

static void free_entries(st_parser *ps)
{
    for (int i = 0; i < ps->n; i++) free(ps->e[i].name);
    free(ps->e);
    ps->e = NULL;
    ps->n = ps->cap = 0;
}

/* Validates the 8-byte prefix and header; fills ps->e (sorted by offset)
 * and the set's metadata; *data_off is where tensor bytes start. */
static lm_status parse_file(st_parser *ps, const unsigned char *buf, size_t size,
                            size_t *data_off)
{
    if (size < 8)
        return lm_error_set(LM_ERR_FORMAT, "%s: truncated: %zu bytes, not even the 8-byte "
                            "header length", ps->what, size);
    uint64_t n = lm_io_le64(buf);
    if (n > LM_SAFETENSORS_MAX_HEADER)
        return lm_error_set(LM_ERR_FORMAT, "%s: header length %llu exceeds the %llu byte limit",
                            ps->what, (unsigned long long)n, LM_SAFETENSORS_MAX_HEADER);
    if (n > size - 8)
        return lm_error_set(LM_ERR_FORMAT, "%s: truncated: header length %llu but only %zu "
                            "bytes follow", ps->what, (unsigned long long)n, size - 8);
    ps->start = ps->p = (const char *)buf + 8;
    ps->end = ps->p + n;
    if (parse_header(ps) != LM_OK) return LM_ERR_FORMAT;
    *data_off = 8 + (size_t)n;
    return check_entries(ps, size - *data_off);
}

/* U16/U32/U64 elements widened into i32/i64; NULL if a U64 exceeds int64. */
static lm_array *widen_tensor(const st_entry *e, const unsigned char *p)
{
    size_t n = (size_t)(e->end - e->begin) / (size_t)e->usize;
    void *b = malloc(n * lm_dtype_size(e->dt) + 1);
    if (!b) { lm_error_set(LM_ERR_NOMEM, "load: out of memory"); return NULL; }
    for (size_t i = 0; i < n; i++) {
        const unsigned char *q = p + i * (size_t)e->usize;
        if (e->usize == 2) ((int32_t *)b)[i] = lm_io_le16(q);
        else if (e->usize == 4) ((int64_t *)b)[i] = (int64_t)lm_io_le32(q);
        else if (lm_io_le64(q) > (uint64_t)INT64_MAX) {
            free(b);
            lm_error_set(LM_ERR_FORMAT, "tensor '%s': U64 value does not fit in int64", e->name);
            return NULL;
        } else ((int64_t *)b)[i] = (int64_t)lm_io_le64(q);
    }
    lm_array *a = lm_from_data(e->ndim, e->shape, e->dt, b, lm_device_cpu());
    free(b);
    return a;
}

/* Bool bytes other than 0/1 are not valid C bools: normalise while copying. */
static lm_array *copy_tensor(const st_entry *e, const unsigned char *p)
{
    if (e->usize) return widen_tensor(e, p);
    if (e->dt != LM_BOOL) return lm_from_data(e->ndim, e->shape, e->dt, p, lm_device_cpu());
    size_t n = (size_t)(e->end - e->begin);
    unsigned char *b = malloc(n ? n : 1);
    if (!b) { lm_error_set(LM_ERR_NOMEM, "load: out of memory"); return NULL; }
    for (size_t i = 0; i < n; i++) b[i] = p[i] != 0;
    lm_array *a = lm_from_data(e->ndim, e->shape, LM_BOOL, b, lm_device_cpu());
    free(b);
    return a;
}

lm_status lm_load_safetensors_mem(const void *data, size_t size, const char *what,
                                  lm_tensor_set *out)
{
    memset(out, 0, sizeof *out);
    st_parser ps = {.what = what, .set = out};
    size_t off;
    lm_status st = parse_file(&ps, data, size, &off);
    for (int i = 0; st == LM_OK && i < ps.n; i++) {
        const unsigned char *p = (const unsigned char *)data + off + ps.e[i].begin;
        lm_array *a = copy_tensor(&ps.e[i], p);
        st = a ? lm_io_set_add(out, ps.e[i].name, a) : lm_error_prefix("%s", what);
    }
    free_entries(&ps);
    if (st != LM_OK) lm_tensor_set_free(out);
    else out->format = LM_FORMAT_SAFETENSORS;
    return st;
}

/* ---- reading through a mapping (io_map.c) ---- */

/* An array over the mapped bytes, or a copy when they are not aligned for
 * the dtype (the format does not promise alignment) or are bools. */
static lm_array *wrap_tensor(lm_io_map *m, const st_entry *e, const unsigned char *p)
{
    size_t nbytes = (size_t)(e->end - e->begin);
    if (e->dt == LM_BOOL || e->usize || nbytes == 0 || (uintptr_t)p % lm_dtype_size(e->dt) != 0)
        return copy_tensor(e, p);
    return lm_io_map_array(m, p, nbytes, e->dt, e->ndim, e->shape);
}

lm_status lm_load_safetensors(const char *path, lm_tensor_set *out)
{
    memset(out, 0, sizeof *out);
    lm_io_map *m;
    size_t size;
    lm_status st = lm_io_map_file(path, 1, &m, &size);
    if (st != LM_OK) return st;
    if (!m) return lm_error_set(LM_ERR_FORMAT, "%s: empty file", path);
    st_parser ps = {.what = path, .set = out};
    size_t off;
    st = parse_file(&ps, m->base, m->size, &off);
    for (int i = 0; st == LM_OK && i < ps.n; i++) {
        const unsigned char *p = (const unsigned char *)m->base + off + ps.e[i].begin;
        lm_array *a = wrap_tensor(m, &ps.e[i], p);
        st = a ? lm_io_set_add(out, ps.e[i].name, a) : lm_error_prefix("%s", path);
    }
    free_entries(&ps);
    lm_io_map_unref(m);   /* the arrays keep the mapping alive */
    if (st != LM_OK) lm_tensor_set_free(out);
    else out->format = LM_FORMAT_SAFETENSORS;
    return st;
}

/* ---- writing ---- */

typedef struct st_buf { char *p; size_t n, cap; bool oom; } st_buf;

static void sb_put(st_buf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->cap + n + 64) * 2;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = true; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_str(st_buf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_json(st_buf *b, const char *s)
{
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') { esc[0] = '\\'; esc[1] = (char)c; sb_put(b, esc, 2); }
        else if (c < 0x20) { snprintf(esc, sizeof esc, "\\u%04x", c); sb_str(b, esc); }
        else sb_put(b, (const char *)&c, 1);
    }
    sb_put(b, "\"", 1);
}

static lm_status build_header(st_buf *b, int n, const char *const *names,
                              lm_array *const *arrays, int nmeta, const lm_kv *meta)
{
    char num[64];
    uint64_t off = 0;
    sb_str(b, "{");
    if (nmeta > 0) {
        sb_str(b, "\"__metadata__\":{");
        for (int i = 0; i < nmeta; i++) {
            if (i) sb_str(b, ",");
            sb_json(b, meta[i].key);
            sb_str(b, ":");
            sb_json(b, meta[i].value);
        }
        sb_str(b, "}");
    }
    for (int i = 0; i < n; i++) {
        const lm_array *a = arrays[i];
        if (nmeta > 0 || i) sb_str(b, ",");
        sb_json(b, names[i]);
        sb_str(b, ":{\"dtype\":\"");
        sb_str(b, st_dtype_name(a->dtype));
        sb_str(b, "\",\"shape\":[");
        for (int d = 0; d < a->ndim; d++) {
            snprintf(num, sizeof num, d ? ",%lld" : "%lld", (long long)a->shape[d]);
            sb_str(b, num);
        }
        uint64_t nb = lm_array_nbytes(a);
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                 (unsigned long long)(off + nb));
        sb_str(b, num);
        off += nb;
    }
    sb_str(b, "}");
    while ((b->n + 8) % 8) sb_str(b, " ");
    return b->oom ? lm_error_set(LM_ERR_NOMEM, "save: out of memory for the header") : LM_OK;
}

static lm_status check_save_args(const char *path, int n, const char *const *names,
                                 lm_array *const *arrays)
{
    for (int i = 0; i < n; i++) {
        if (!arrays[i] || !names[i])
            return lm_error_set(LM_ERR_ARG, "save %s: tensor %d is missing", path, i + 1);
        if (lm_dtype_is_quant(arrays[i]->dtype))
            return lm_error_set(LM_ERR_DTYPE, "save %s: tensor '%s' is %s; safetensors has no quantized "
                                "types (save it as .gguf, or dequantize() it)", path, names[i],
                                lm_dtype_name(arrays[i]->dtype));
        if (!strcmp(names[i], "__metadata__"))
            return lm_error_set(LM_ERR_ARG, "save %s: '__metadata__' cannot name a tensor", path);
        for (int j = 0; j < i; j++)
            if (!strcmp(names[i], names[j]))
                return lm_error_set(LM_ERR_ARG, "save %s: name '%s' given twice", path, names[i]);
    }
    return LM_OK;
}

lm_status lm_save_safetensors(const char *path, int n, const char *const *names,
                              lm_array *const *arrays, int nmeta, const lm_kv *meta)
{
    if (check_save_args(path, n, names, arrays) != LM_OK) return lm_error_status();
    if (n > 0 && lm_eval(arrays, n) != LM_OK) return lm_error_prefix("save %s", path);
    st_buf hb = {0};
    lm_status st = build_header(&hb, n, names, arrays, nmeta, meta);
    lm_io_out o;
    if (st == LM_OK) st = lm_io_out_open(&o, path);
    if (st != LM_OK) { free(hb.p); return st; }
    unsigned char len[8];
    lm_io_put64(len, hb.n);
    lm_io_out_write(&o, len, 8);
    lm_io_out_write(&o, hb.p, hb.n);
    free(hb.p);
    for (int i = 0; i < n && !o.failed; i++) {
        void *bytes = lm_io_array_bytes(arrays[i]);
        if (!bytes) return lm_io_out_close(&o, false);
        lm_io_out_write(&o, bytes, lm_array_nbytes(arrays[i]));
        free(bytes);
    }
    return lm_io_out_close(&o, true);
}
