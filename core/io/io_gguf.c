/* io_gguf.c - GGUF read (mmap) and write (gguf.h). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "device.h"
#include "gguf.h"
#include "io_internal.h"

/* ggml's type numbers (ggml.h enum ggml_type) for the dtypes Lumen has */
static const struct { uint32_t ggml; lm_dtype dt; } type_map[] = {
    {0, LM_F32}, {1, LM_F16}, {2, LM_Q4_0}, {3, LM_Q4_1}, {6, LM_Q5_0}, {7, LM_Q5_1},
    {8, LM_Q8_0}, {10, LM_Q2_K}, {11, LM_Q3_K}, {12, LM_Q4_K}, {13, LM_Q5_K},
    {14, LM_Q6_K}, {15, LM_Q8_K}, {24, LM_I8}, {25, LM_I16}, {26, LM_I32},
    {27, LM_I64}, {28, LM_F64}, {30, LM_BF16},
};
#define NTYPES (sizeof type_map / sizeof type_map[0])

static const char *const type_names[LM_GGUF_TYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
};
/* bytes of a scalar value; 0 for string and array */
static const uint8_t type_size[LM_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *lm_gguf_type_name(lm_gguf_type t)
{
    return (unsigned)t < LM_GGUF_TYPE_COUNT ? type_names[t] : "?";
}

static void value_free(lm_gguf_value *v)
{
    if (v->type == LM_GGUF_STRING) free(v->str.s);
    if (v->type == LM_GGUF_ARRAY && v->arr.items) {
        for (uint64_t i = 0; i < v->arr.n; i++) value_free(&v->arr.items[i]);
        free(v->arr.items);
    }
    memset(v, 0, sizeof *v);
}

void lm_gguf_meta_free(lm_gguf_meta *m)
{
    if (!m) return;
    for (int i = 0; i < m->n; i++) {
        free(m->kv[i].key);
        value_free(&m->kv[i].v);
    }
    free(m->kv);
    memset(m, 0, sizeof *m);
}

int lm_gguf_meta_find(const lm_gguf_meta *m, const char *key)
{
    for (int i = 0; m && i < m->n; i++)
        if (!strcmp(m->kv[i].key, key)) return i;
    return -1;
}

/* ---- reading ---- */

typedef struct rd {
    const unsigned char *p;
    size_t size, pos;
    const char *what;
} rd;

typedef struct tinfo {
    char *name;
    lm_dtype dt;
    int ndim;
    int64_t shape[LM_MAX_DIMS];
    uint64_t offset, nbytes;
} tinfo;

__attribute__((format(printf, 2, 3))) static lm_status bad(const rd *r, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return lm_error_set(LM_ERR_FORMAT, "%s: %s (GGUF header, byte %zu)", r->what, msg, r->pos);
}

static bool left(const rd *r, uint64_t n) { return n <= r->size - r->pos; }

static lm_status get(rd *r, void *dst, size_t n, const char *what)
{
    if (!left(r, n)) return bad(r, "file ends inside %s", what);
    memcpy(dst, r->p + r->pos, n);   /* the format is little endian, as is every host we build for */
    r->pos += n;
    return LM_OK;
}

static lm_status get_u32(rd *r, uint32_t *v, const char *what) { return get(r, v, 4, what); }
static lm_status get_u64(rd *r, uint64_t *v, const char *what) { return get(r, v, 8, what); }

static lm_status get_str(rd *r, char **s, uint64_t *len, const char *what)
{
    uint64_t n = 0;
    if (get_u64(r, &n, what) != LM_OK) return lm_error_status();
    if (!left(r, n)) return bad(r, "%s of %" PRIu64 " bytes runs past the end of the file", what, n);
    char *b = malloc((size_t)n + 1);
    if (!b) return lm_error_set(LM_ERR_NOMEM, "%s: out of memory for %s", r->what, what);
    memcpy(b, r->p + r->pos, (size_t)n);
    b[n] = 0;
    r->pos += (size_t)n;
    *s = b;
    if (len) *len = n;
    return LM_OK;
}

static lm_status get_value(rd *r, lm_gguf_type t, lm_gguf_value *v, int depth)
{
    v->type = t;
    switch (t) {
    case LM_GGUF_U8: { uint8_t x = 0; if (get(r, &x, 1, "a value")) return lm_error_status(); v->u = x; return LM_OK; }
    case LM_GGUF_U16: { uint16_t x = 0; if (get(r, &x, 2, "a value")) return lm_error_status(); v->u = x; return LM_OK; }
    case LM_GGUF_U32: { uint32_t x = 0; if (get(r, &x, 4, "a value")) return lm_error_status(); v->u = x; return LM_OK; }
    case LM_GGUF_U64: return get(r, &v->u, 8, "a value");
    case LM_GGUF_I8: { int8_t x = 0; if (get(r, &x, 1, "a value")) return lm_error_status(); v->i = x; return LM_OK; }
    case LM_GGUF_I16: { int16_t x = 0; if (get(r, &x, 2, "a value")) return lm_error_status(); v->i = x; return LM_OK; }
    case LM_GGUF_I32: { int32_t x = 0; if (get(r, &x, 4, "a value")) return lm_error_status(); v->i = x; return LM_OK; }
    case LM_GGUF_I64: return get(r, &v->i, 8, "a value");
    case LM_GGUF_F32: { float x = 0; if (get(r, &x, 4, "a value")) return lm_error_status(); v->f = x; return LM_OK; }
    case LM_GGUF_F64: return get(r, &v->f, 8, "a value");
    case LM_GGUF_BOOL: {
        uint8_t x = 0;
        if (get(r, &x, 1, "a value")) return lm_error_status();
        if (x > 1) return bad(r, "bool value %u is neither 0 nor 1", x);
        v->b = x;
        return LM_OK;
    }
    case LM_GGUF_STRING: return get_str(r, &v->str.s, &v->str.len, "a string value");
    case LM_GGUF_ARRAY: {
        uint32_t et = 0;
        uint64_t n = 0;
        if (depth >= LM_GGUF_MAX_DEPTH) return bad(r, "arrays nested deeper than %d", LM_GGUF_MAX_DEPTH);
        if (get_u32(r, &et, "an array's type") || get_u64(r, &n, "an array's length")) return lm_error_status();
        if (et >= LM_GGUF_TYPE_COUNT) return bad(r, "array of unknown value type %u", et);
        /* every element takes at least this many bytes of the file: a
         * length the rest of the file cannot hold is refused before
         * anything is allocated */
        uint64_t min = type_size[et] ? type_size[et] : et == LM_GGUF_STRING ? 8 : 12;
        if (n > (r->size - r->pos) / min)
            return bad(r, "array of %" PRIu64 " %s values is longer than the file", n, type_names[et]);
        v->arr.elem = (lm_gguf_type)et;
        v->arr.items = calloc(n ? (size_t)n : 1, sizeof *v->arr.items);
        if (!v->arr.items) return lm_error_set(LM_ERR_NOMEM, "%s: out of memory for an array of %" PRIu64, r->what, n);
        for (uint64_t i = 0; i < n; i++) {
            v->arr.n = i + 1;   /* what value_free must walk if the next one fails */
            if (get_value(r, (lm_gguf_type)et, &v->arr.items[i], depth + 1) != LM_OK) return lm_error_status();
        }
        v->arr.n = n;
        return LM_OK;
    }
    default: return bad(r, "unknown value type %d", (int)t);
    }
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A name that occurs twice in s[0..n) (sorted in place), or NULL: in n log n,
 * as a file may hold a million of them. */
static const char *first_duplicate(const char **s, size_t n)
{
    qsort(s, n, sizeof *s, cmp_str);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(s[i - 1], s[i])) return s[i];
    return NULL;
}

static lm_status read_kv(rd *r, uint64_t nkv, lm_gguf_meta *m)
{
    m->kv = calloc(nkv ? (size_t)nkv : 1, sizeof *m->kv);
    if (!m->kv) return lm_error_set(LM_ERR_NOMEM, "%s: out of memory for metadata", r->what);
    for (uint64_t i = 0; i < nkv; i++) {
        lm_gguf_kv *kv = &m->kv[i];
        uint32_t t = 0;
        if (get_str(r, &kv->key, NULL, "a metadata key") != LM_OK) return lm_error_status();
        m->n = (int)i + 1;
        if (get_u32(r, &t, "a value type") != LM_OK) return lm_error_status();
        if (t >= LM_GGUF_TYPE_COUNT) return bad(r, "metadata '%s' has unknown value type %u", kv->key, t);
        if (get_value(r, (lm_gguf_type)t, &kv->v, 0) != LM_OK)
            return lm_error_prefix("metadata '%s'", kv->key);
    }
    const char **keys = malloc((nkv ? (size_t)nkv : 1) * sizeof *keys);
    if (!keys) return lm_error_set(LM_ERR_NOMEM, "%s: out of memory", r->what);
    for (uint64_t i = 0; i < nkv; i++) keys[i] = m->kv[i].key;
    const char *dup = first_duplicate(keys, (size_t)nkv);
    free(keys);
    if (dup) return bad(r, "metadata key '%s' given twice", dup);
    int a = lm_gguf_meta_find(m, "general.alignment");
    m->alignment = 32;
    if (a >= 0) {
        const lm_gguf_value *v = &m->kv[a].v;
        if (v->type != LM_GGUF_U32 || v->u == 0 || (v->u & (v->u - 1)))
            return bad(r, "general.alignment must be a u32 power of two");
        m->alignment = v->u;
    }
    return LM_OK;
}

static lm_status read_tensor_info(rd *r, tinfo *t)
{
    uint32_t nd = 0, gt = 0;
    if (get_str(r, &t->name, NULL, "a tensor name") != LM_OK) return lm_error_status();
    if (get_u32(r, &nd, "a tensor's dimension count") != LM_OK) return lm_error_status();
    if (nd > LM_MAX_DIMS) return bad(r, "tensor '%s' has %u dimensions (at most %d)", t->name, nd, LM_MAX_DIMS);
    t->ndim = (int)nd;
    for (uint32_t d = 0; d < nd; d++) {
        uint64_t ne = 0;
        if (get_u64(r, &ne, "a tensor dimension") != LM_OK) return lm_error_status();
        if (ne > (uint64_t)INT64_MAX) return bad(r, "tensor '%s': dimension %" PRIu64 " too large", t->name, ne);
        t->shape[nd - 1 - d] = (int64_t)ne;   /* ggml lists the innermost first */
    }
    if (get_u32(r, &gt, "a tensor type") != LM_OK || get_u64(r, &t->offset, "a tensor offset") != LM_OK)
        return lm_error_status();
    size_t k = 0;
    while (k < NTYPES && type_map[k].ggml != gt) k++;
    if (k == NTYPES) return bad(r, "tensor '%s' has ggml type %u, which Lumen does not read", t->name, gt);
    t->dt = type_map[k].dt;
    int64_t numel;
    if (!lm_shape_fits(t->ndim, t->shape, &numel)) return bad(r, "tensor '%s': shape too large", t->name);
    int64_t blk = lm_dtype_block(t->dt);
    if (blk > 1 && (nd == 0 || t->shape[nd - 1] % blk))
        return bad(r, "tensor '%s' (%s): first dimension %lld is not a multiple of the block size %lld",
                   t->name, lm_dtype_name(t->dt), nd ? (long long)t->shape[nd - 1] : 0LL, (long long)blk);
    t->nbytes = lm_dtype_nbytes(t->dt, numel);
    return LM_OK;
}

static int cmp_offset(const void *a, const void *b)
{
    const tinfo *x = *(tinfo *const *)a, *y = *(tinfo *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* offsets aligned, ranges inside the data section and disjoint, names unique */
static lm_status check_infos(rd *r, tinfo *ts, uint64_t n, uint64_t align, uint64_t data_len)
{
    tinfo **s = malloc((n ? n : 1) * sizeof *s);
    if (!s) return lm_error_set(LM_ERR_NOMEM, "%s: out of memory", r->what);
    lm_status st = LM_OK;
    for (uint64_t i = 0; i < n && st == LM_OK; i++) {
        s[i] = &ts[i];
        if (ts[i].offset % align)
            st = bad(r, "tensor '%s' at offset %" PRIu64 " is not aligned to %" PRIu64, ts[i].name, ts[i].offset, align);
        else if (ts[i].offset > data_len || ts[i].nbytes > data_len - ts[i].offset)
            st = bad(r, "tensor '%s' (%" PRIu64 " bytes at %" PRIu64 ") runs past the end of the file "
                     "(%" PRIu64 " data bytes)", ts[i].name, ts[i].nbytes, ts[i].offset, data_len);
    }
    if (st == LM_OK) qsort(s, (size_t)n, sizeof *s, cmp_offset);
    for (uint64_t i = 1; i < n && st == LM_OK; i++)
        if (s[i - 1]->offset + s[i - 1]->nbytes > s[i]->offset)
            st = bad(r, "tensors '%s' and '%s' overlap", s[i - 1]->name, s[i]->name);
    free(s);
    return st;
}

typedef struct parsed {
    tinfo *t;
    uint64_t n;
    size_t data;       /* where the data section starts */
} parsed;

static void parsed_free(parsed *p)
{
    for (uint64_t i = 0; p->t && i < p->n; i++) free(p->t[i].name);
    free(p->t);
    memset(p, 0, sizeof *p);
}

static lm_status parse(rd *r, lm_gguf_meta *m, parsed *out)
{
    uint32_t magic = 0, version = 0;
    uint64_t nt = 0, nkv = 0;
    memset(out, 0, sizeof *out);
    if (get_u32(r, &magic, "the magic") != LM_OK) return lm_error_status();
    if (memcmp(&magic, "GGUF", 4)) return bad(r, "not a GGUF file (magic bytes)");
    if (get_u32(r, &version, "the version") != LM_OK) return lm_error_status();
    if (version != 2 && version != 3)
        return bad(r, "GGUF version %u (Lumen reads versions 2 and 3)", version);
    m->version = version;
    if (get_u64(r, &nt, "the tensor count") || get_u64(r, &nkv, "the metadata count")) return lm_error_status();
    /* a key takes at least 8+4+1 bytes, a tensor info 8+4+4+8 */
    if (nkv > LM_GGUF_MAX_KV || nkv > (r->size - r->pos) / 13)
        return bad(r, "%" PRIu64 " metadata entries cannot fit in the file", nkv);
    if (nt > LM_GGUF_MAX_TENSORS || nt > (r->size - r->pos) / 24)
        return bad(r, "%" PRIu64 " tensors cannot fit in the file", nt);
    if (read_kv(r, nkv, m) != LM_OK) return lm_error_status();
    out->t = calloc(nt ? (size_t)nt : 1, sizeof *out->t);
    if (!out->t) return lm_error_set(LM_ERR_NOMEM, "%s: out of memory", r->what);
    for (uint64_t i = 0; i < nt; i++) {
        out->n = i + 1;
        if (read_tensor_info(r, &out->t[i]) != LM_OK) return lm_error_status();
    }
    const char **names = malloc((nt ? (size_t)nt : 1) * sizeof *names);
    if (!names) return lm_error_set(LM_ERR_NOMEM, "%s: out of memory", r->what);
    for (uint64_t i = 0; i < nt; i++) names[i] = out->t[i].name;
    const char *dup = first_duplicate(names, (size_t)nt);
    free(names);
    if (dup) return bad(r, "tensor '%s' given twice", dup);
    uint64_t data = r->pos;
    if (nt) data = (data + m->alignment - 1) / m->alignment * m->alignment;
    if (data > r->size) return bad(r, "the data section starts past the end of the file");
    out->data = (size_t)data;
    return check_infos(r, out->t, nt, m->alignment, r->size - data);
}

/* ---- the metadata as text, for lm_tensor_set's string pairs ---- */

typedef struct tbuf { char *p; size_t n, cap; bool oom; } tbuf;

static void tput(tbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) { b->oom = true; return; }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void tjson(tbuf *b, const char *s, uint64_t len)
{
    tput(b, "\"", 1);
    for (uint64_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        char e[8];
        if (c == '"' || c == '\\') { e[0] = '\\'; e[1] = (char)c; tput(b, e, 2); }
        else if (c < 0x20) { snprintf(e, sizeof e, "\\u%04x", c); tput(b, e, 6); }
        else tput(b, (const char *)&c, 1);
    }
    tput(b, "\"", 1);
}

static void ttext(tbuf *b, const lm_gguf_value *v, bool quoted)
{
    char num[40];
    switch (v->type) {
    case LM_GGUF_U8: case LM_GGUF_U16: case LM_GGUF_U32: case LM_GGUF_U64:
        snprintf(num, sizeof num, "%" PRIu64, v->u); break;
    case LM_GGUF_I8: case LM_GGUF_I16: case LM_GGUF_I32: case LM_GGUF_I64:
        snprintf(num, sizeof num, "%" PRId64, v->i); break;
    case LM_GGUF_F32: snprintf(num, sizeof num, "%.9g", v->f); break;
    case LM_GGUF_F64: snprintf(num, sizeof num, "%.17g", v->f); break;
    case LM_GGUF_BOOL: snprintf(num, sizeof num, "%s", v->b ? "true" : "false"); break;
    case LM_GGUF_STRING:
        if (quoted) tjson(b, v->str.s, v->str.len);
        else tput(b, v->str.s, strnlen(v->str.s, (size_t)v->str.len));
        return;
    case LM_GGUF_ARRAY:
        tput(b, "[", 1);
        for (uint64_t i = 0; i < v->arr.n; i++) {
            if (i) tput(b, ",", 1);
            ttext(b, &v->arr.items[i], true);
        }
        tput(b, "]", 1);
        return;
    default: return;
    }
    tput(b, num, strlen(num));
}

static lm_status meta_to_set(const lm_gguf_meta *m, lm_tensor_set *s, const char *what)
{
    for (int i = 0; i < m->n; i++) {
        tbuf b = {0};
        ttext(&b, &m->kv[i].v, false);
        if (!b.oom && !b.p) tput(&b, "", 0);
        if (b.oom) { free(b.p); return lm_error_set(LM_ERR_NOMEM, "%s: out of memory for metadata", what); }
        lm_status st = lm_io_set_meta(s, m->kv[i].key, strlen(m->kv[i].key), b.p, b.n);
        free(b.p);
        if (st != LM_OK) return st;
    }
    return LM_OK;
}

/* ---- tensors ---- */

/* the mapped bytes (io_map.c), or a copy where they are not aligned for the
 * element (or the block's widest field, 4 bytes) */
static lm_array *make_tensor(lm_io_map *m, const tinfo *t, const unsigned char *p)
{
    size_t al = lm_dtype_is_quant(t->dt) ? 4 : lm_dtype_size(t->dt);
    if (!m || t->nbytes == 0 || (uintptr_t)p % al)
        return lm_from_data(t->ndim, t->shape, t->dt, p, lm_device_cpu());
    return lm_io_map_array(m, p, (size_t)t->nbytes, t->dt, t->ndim, t->shape);
}

static lm_status load(const unsigned char *data, size_t size, const char *what, lm_io_map *map,
                      lm_tensor_set *out, lm_gguf_meta *meta)
{
    memset(out, 0, sizeof *out);
    lm_gguf_meta m = {0};
    parsed ps;
    rd r = {.p = data, .size = size, .what = what};
    lm_status st = parse(&r, &m, &ps);
    if (st == LM_OK) st = meta_to_set(&m, out, what);
    for (uint64_t i = 0; st == LM_OK && i < ps.n; i++) {
        lm_array *a = make_tensor(map, &ps.t[i], data + ps.data + ps.t[i].offset);
        st = a ? lm_io_set_add(out, ps.t[i].name, a) : lm_error_prefix("%s: tensor '%s'", what, ps.t[i].name);
    }
    parsed_free(&ps);
    if (st == LM_OK && meta) *meta = m;
    else lm_gguf_meta_free(&m);
    if (st != LM_OK) lm_tensor_set_free(out);
    else out->format = LM_FORMAT_GGUF;
    return st;
}

lm_status lm_load_gguf_mem(const void *data, size_t size, const char *what,
                           lm_tensor_set *out, lm_gguf_meta *meta)
{
    return load(data, size, what, NULL, out, meta);
}

lm_status lm_load_gguf(const char *path, lm_tensor_set *out, lm_gguf_meta *meta)
{
    memset(out, 0, sizeof *out);
    lm_io_map *m;
    size_t size;
    lm_status st = lm_io_map_file(path, 24, &m, &size);
    if (st != LM_OK) return st;
    if (!m)
        return lm_error_set(LM_ERR_FORMAT, "%s: %lld bytes is too short for a GGUF header", path, (long long)size);
    st = load(m->base, m->size, path, m, out, meta);
    lm_io_map_unref(m);   /* the arrays keep the mapping alive */
    return st;
}

lm_status lm_gguf_read_meta(const char *path, lm_gguf_meta *meta)
{
    memset(meta, 0, sizeof *meta);
    int fd = lm_io_open_read(path);
    if (fd < 0) return lm_error_status();
    struct stat sb;
    if (fstat(fd, &sb) != 0 || sb.st_size == 0) {
        close(fd);
        return lm_error_set(LM_ERR_FORMAT, "%s: empty or unreadable file", path);
    }
    void *base = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (base == MAP_FAILED) return lm_error_set(LM_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
    rd r = {.p = base, .size = (size_t)sb.st_size, .what = path};
    parsed ps;
    lm_status st = parse(&r, meta, &ps);
    parsed_free(&ps);
    munmap(base, (size_t)sb.st_size);
    if (st != LM_OK) lm_gguf_meta_free(meta);
    return st;
}

/* ---- writing ---- */

static void wput(tbuf *b, const void *p, size_t n) { tput(b, p, n); }
static void wu32(tbuf *b, uint32_t v) { unsigned char q[4]; lm_io_put32(q, v); wput(b, q, 4); }
static void wu64(tbuf *b, uint64_t v) { unsigned char q[8]; lm_io_put64(q, v); wput(b, q, 8); }
static void wstr(tbuf *b, const char *s, uint64_t n) { wu64(b, n); wput(b, s, (size_t)n); }

static lm_status wvalue(tbuf *b, const lm_gguf_value *v, const char *path, const char *key, int depth)
{
    if ((unsigned)v->type >= LM_GGUF_TYPE_COUNT || depth > LM_GGUF_MAX_DEPTH)
        return lm_error_set(LM_ERR_ARG, "save %s: metadata '%s' has a bad value type", path, key);
    unsigned char q[8];
    switch (v->type) {
    case LM_GGUF_U8: case LM_GGUF_U16: case LM_GGUF_U32: case LM_GGUF_U64:
    case LM_GGUF_I8: case LM_GGUF_I16: case LM_GGUF_I32: case LM_GGUF_I64:
        lm_io_put64(q, v->u);   /* two's complement: the low bytes are the narrow value */
        wput(b, q, type_size[v->type]);
        return LM_OK;
    case LM_GGUF_BOOL: q[0] = v->b; wput(b, q, 1); return LM_OK;
    case LM_GGUF_F32: { float f = (float)v->f; wput(b, &f, 4); return LM_OK; }
    case LM_GGUF_F64: wput(b, &v->f, 8); return LM_OK;
    case LM_GGUF_STRING: wstr(b, v->str.s, v->str.len); return LM_OK;
    case LM_GGUF_ARRAY:
        wu32(b, v->arr.elem);
        wu64(b, v->arr.n);
        for (uint64_t i = 0; i < v->arr.n; i++) {
            if (v->arr.items[i].type != v->arr.elem)
                return lm_error_set(LM_ERR_ARG, "save %s: metadata '%s': array of %s holds a %s", path, key,
                                    lm_gguf_type_name(v->arr.elem), lm_gguf_type_name(v->arr.items[i].type));
            if (wvalue(b, &v->arr.items[i], path, key, depth + 1) != LM_OK) return lm_error_status();
        }
        return LM_OK;
    default: return lm_error_set(LM_ERR_ARG, "save %s: metadata '%s' has a bad value type", path, key);
    }
}

static lm_status ggml_type_of(lm_dtype dt, uint32_t *out)
{
    for (size_t k = 0; k < NTYPES; k++)
        if (type_map[k].dt == dt) { *out = type_map[k].ggml; return LM_OK; }
    return LM_ERR_DTYPE;
}

lm_status lm_save_gguf(const char *path, int n, const char *const *names,
                       lm_array *const *arrays, int nkv, const lm_gguf_kv *kv)
{
    uint64_t align = 32;
    for (int i = 0; i < nkv; i++) {
        for (int j = 0; j < i; j++)
            if (!strcmp(kv[i].key, kv[j].key))
                return lm_error_set(LM_ERR_ARG, "save %s: metadata '%s' given twice", path, kv[i].key);
        if (!strcmp(kv[i].key, "general.alignment")) {
            const lm_gguf_value *v = &kv[i].v;
            if (v->type != LM_GGUF_U32 || !v->u || (v->u & (v->u - 1)))
                return lm_error_set(LM_ERR_ARG, "save %s: general.alignment must be a u32 power of two", path);
            align = v->u;
        }
    }
    for (int i = 0; i < n; i++) {
        uint32_t gt;
        if (!arrays[i] || !names[i]) return lm_error_set(LM_ERR_ARG, "save %s: tensor %d is missing", path, i + 1);
        for (int j = 0; j < i; j++)
            if (!strcmp(names[i], names[j])) return lm_error_set(LM_ERR_ARG, "save %s: name '%s' given twice", path, names[i]);
        if (ggml_type_of(arrays[i]->dtype, &gt) != LM_OK)
            return lm_error_set(LM_ERR_DTYPE, "save %s: tensor '%s' is %s, which GGUF has no type for "
                                "(use f32, f16, bf16, f64, i8, i16, i32, i64 or a quantized dtype)",
                                path, names[i], lm_dtype_name(arrays[i]->dtype));
        if (arrays[i]->ndim > 4)
            return lm_error_set(LM_ERR_SHAPE, "save %s: tensor '%s' has %d dimensions; ggml reads at most 4",
                                path, names[i], arrays[i]->ndim);
    }
    if (n > 0 && lm_eval(arrays, n) != LM_OK) return lm_error_prefix("save %s", path);
    tbuf h = {0};
    wput(&h, "GGUF", 4);
    wu32(&h, 3);
    wu64(&h, (uint64_t)n);
    wu64(&h, (uint64_t)nkv);
    lm_status st = LM_OK;
    for (int i = 0; i < nkv && st == LM_OK; i++) {
        wstr(&h, kv[i].key, strlen(kv[i].key));
        wu32(&h, kv[i].v.type);
        st = wvalue(&h, &kv[i].v, path, kv[i].key, 0);
    }
    uint64_t off = 0;
    for (int i = 0; i < n && st == LM_OK; i++) {
        const lm_array *a = arrays[i];
        uint32_t gt = 0;
        ggml_type_of(a->dtype, &gt);
        wstr(&h, names[i], strlen(names[i]));
        int nd = a->ndim ? a->ndim : 1;   /* a 0-d tensor is one element, ne0 = 1 */
        wu32(&h, (uint32_t)nd);
        for (int d = 0; d < nd; d++) wu64(&h, a->ndim ? (uint64_t)a->shape[a->ndim - 1 - d] : 1);
        wu32(&h, gt);
        wu64(&h, off);
        off += (lm_array_nbytes(a) + align - 1) / align * align;
    }
    static const unsigned char zeros[256];
    while (st == LM_OK && !h.oom && n && h.n % align) {
        size_t pad = (size_t)(align - h.n % align);
        wput(&h, zeros, pad < sizeof zeros ? pad : sizeof zeros);
    }
    if (st == LM_OK && h.oom) st = lm_error_set(LM_ERR_NOMEM, "save %s: out of memory for the header", path);
    lm_io_out o;
    if (st == LM_OK) st = lm_io_out_open(&o, path);
    if (st != LM_OK) { free(h.p); return st; }
    lm_io_out_write(&o, h.p, h.n);
    free(h.p);
    for (int i = 0; i < n && !o.failed; i++) {
        size_t nb = lm_array_nbytes(arrays[i]);
        void *bytes = lm_io_array_bytes(arrays[i]);
        if (!bytes) return lm_io_out_close(&o, false);
        lm_io_out_write(&o, bytes, nb);
        free(bytes);
        for (size_t pad = (size_t)((align - nb % align) % align); pad > 0;) {
            size_t k = pad < sizeof zeros ? pad : sizeof zeros;
            lm_io_out_write(&o, zeros, k);
            pad -= k;
        }
    }
    return lm_io_out_close(&o, true);
}
