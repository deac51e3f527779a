/* io_npy.c - numpy's .npy (one array) and .npz (a zip of .npy members).
 *
 * .npy: "\x93NUMPY", major, minor, header length (2 bytes in version 1,
 * 4 in 2 and 3), a Python dict literal
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * padded with spaces to a multiple of 64, then the raw elements.  We parse
 * that literal by hand (no eval): exactly the three keys, strings, True or
 * False, and a tuple of non-negative integers. */
#include <stdlib.h>
#include <string.h>
#include "io_internal.h"
#include "lumen.h"

typedef struct npy_hdr {
    char descr[16];
    bool fortran, has_descr, has_order, has_shape;
    int ndim;
    int64_t shape[LM_MAX_DIMS];
} npy_hdr;

typedef struct npy_type {
    lm_dtype dt;        /* what Lumen holds */
    int size;           /* bytes per element in the file */
    bool swap;          /* big endian in the file */
    bool unsig;         /* u2/u4/u8: widened */
} npy_type;

typedef struct npy_lex {
    const char *p, *end;
    const char *what;
} npy_lex;

static lm_status herr(const npy_lex *lx, const char *msg)
{
    return lm_error_set(LM_ERR_FORMAT, "%s: npy header: %s", lx->what, msg);
}

static void lws(npy_lex *lx)
{
    while (lx->p < lx->end && (*lx->p == ' ' || *lx->p == '\n' || *lx->p == '\t' ||
                               *lx->p == '\r'))
        lx->p++;
}

static bool leat(npy_lex *lx, char c)
{
    lws(lx);
    if (lx->p < lx->end && *lx->p == c) { lx->p++; return true; }
    return false;
}

/* A quoted Python string without escapes (what numpy writes) into buf. */
static lm_status lstring(npy_lex *lx, char *buf, size_t cap)
{
    lws(lx);
    if (lx->p >= lx->end || (*lx->p != '\'' && *lx->p != '"')) return herr(lx, "expected a string");
    char q = *lx->p++;
    size_t n = 0;
    while (lx->p < lx->end && *lx->p != q) {
        if (*lx->p == '\\' || n + 1 >= cap) return herr(lx, "string too long or escaped");
        buf[n++] = *lx->p++;
    }
    if (lx->p >= lx->end) return herr(lx, "unterminated string");
    lx->p++;
    buf[n] = 0;
    return LM_OK;
}

static lm_status lshape(npy_lex *lx, npy_hdr *h)
{
    if (!leat(lx, '(')) return herr(lx, "'shape' must be a tuple");
    h->ndim = 0;
    while (!leat(lx, ')')) {
        lws(lx);
        if (lx->p >= lx->end || *lx->p < '0' || *lx->p > '9')
            return herr(lx, "shape entries must be non-negative integers");
        int64_t v = 0;
        while (lx->p < lx->end && *lx->p >= '0' && *lx->p <= '9') {
            if (v > (INT64_MAX - 9) / 10) return herr(lx, "shape entry too large");
            v = v * 10 + (*lx->p++ - '0');
        }
        if (lx->p < lx->end && *lx->p == 'L') lx->p++;   /* Python 2 long */
        if (h->ndim == LM_MAX_DIMS) return herr(lx, "more than 8 dimensions");
        h->shape[h->ndim++] = v;
        if (!leat(lx, ',')) {
            if (!leat(lx, ')')) return herr(lx, "expected ',' or ')' in shape");
            break;
        }
    }
    return LM_OK;
}

static lm_status lvalue(npy_lex *lx, const char *key, npy_hdr *h)
{
    if (!strcmp(key, "descr")) {
        lws(lx);
        if (lx->p < lx->end && *lx->p == '[')
            return herr(lx, "structured dtypes (a descr list) are not supported");
        h->has_descr = true;
        return lstring(lx, h->descr, sizeof h->descr);
    }
    if (!strcmp(key, "fortran_order")) {
        lws(lx);
        h->has_order = true;
        if (lx->end - lx->p >= 4 && !memcmp(lx->p, "True", 4)) { h->fortran = true; lx->p += 4; }
        else if (lx->end - lx->p >= 5 && !memcmp(lx->p, "False", 5)) lx->p += 5;
        else return herr(lx, "'fortran_order' must be True or False");
        return LM_OK;
    }
    if (!strcmp(key, "shape")) {
        h->has_shape = true;
        return lshape(lx, h);
    }
    return lm_error_set(LM_ERR_FORMAT, "%s: npy header: unexpected key '%s'", lx->what, key);
}

static lm_status parse_dict(npy_lex *lx, npy_hdr *h)
{
    memset(h, 0, sizeof *h);
    if (!leat(lx, '{')) return herr(lx, "expected a dict");
    while (!leat(lx, '}')) {
        char key[32];
        if (lstring(lx, key, sizeof key) != LM_OK) return LM_ERR_FORMAT;
        if (!leat(lx, ':')) return herr(lx, "expected ':'");
        if (lvalue(lx, key, h) != LM_OK) return LM_ERR_FORMAT;
        if (!leat(lx, ',')) {
            if (!leat(lx, '}')) return herr(lx, "expected ',' or '}'");
            break;
        }
    }
    lws(lx);
    if (lx->p != lx->end) return herr(lx, "bytes after the dict");
    if (!h->has_descr || !h->has_order || !h->has_shape)
        return herr(lx, "needs the keys 'descr', 'fortran_order' and 'shape'");
    return LM_OK;
}

static lm_status parse_descr(const char *what, const char *d, npy_type *t)
{
    memset(t, 0, sizeof *t);
    char order = d[0];
    if (order != '<' && order != '>' && order != '|' && order != '=')
        return lm_error_set(LM_ERR_FORMAT, "%s: npy dtype '%s': bad byte order", what, d);
    static const struct { const char *code; lm_dtype dt; int size; bool unsig; } map[] = {
        {"b1", LM_BOOL, 1, false}, {"i1", LM_I8, 1, false}, {"u1", LM_U8, 1, false},
        {"i2", LM_I16, 2, false}, {"u2", LM_I32, 2, true}, {"i4", LM_I32, 4, false},
        {"u4", LM_I64, 4, true}, {"i8", LM_I64, 8, false}, {"u8", LM_I64, 8, true},
        {"f2", LM_F16, 2, false}, {"f4", LM_F32, 4, false}, {"f8", LM_F64, 8, false},
        {"?", LM_BOOL, 1, false},
    };
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (!strcmp(d + 1, map[i].code)) {
            t->dt = map[i].dt;
            t->size = map[i].size;
            t->unsig = map[i].unsig;
            t->swap = order == '>' && t->size > 1;
            return LM_OK;
        }
    return lm_error_set(LM_ERR_FORMAT, "%s: npy dtype '%s' is not supported (bool, int8-64, "
                        "uint8-64, float16/32/64 are)", what, d);
}

/* The fixed prefix: magic, version, header length; hdr and hlen receive the dict. */
static lm_status parse_prefix(const unsigned char *d, size_t size, const char *what,
                              const char **hdr, size_t *hlen)
{
    if (size < 10 || memcmp(d, "\x93NUMPY", 6))
        return lm_error_set(LM_ERR_FORMAT, "%s: not an npy file (%s)", what,
                            size < 10 ? "truncated" : "bad magic");
    int major = d[6];
    size_t pre = major == 1 ? 10 : 12;
    if (major < 1 || major > 3)
        return lm_error_set(LM_ERR_FORMAT, "%s: npy format version %d.%d is not supported",
                            what, major, d[7]);
    if (size < pre) return lm_error_set(LM_ERR_FORMAT, "%s: truncated npy prefix", what);
    size_t n = major == 1 ? lm_io_le16(d + 8) : lm_io_le32(d + 8);
    if (n > LM_NPY_MAX_HEADER)
        return lm_error_set(LM_ERR_FORMAT, "%s: npy header length %zu exceeds the %u byte limit",
                            what, n, LM_NPY_MAX_HEADER);
    if (n > size - pre)
        return lm_error_set(LM_ERR_FORMAT, "%s: truncated: npy header length %zu but %zu bytes "
                            "follow", what, n, size - pre);
    *hdr = (const char *)d + pre;
    *hlen = n;
    return LM_OK;
}

/* C-order copy of Fortran-order elements (a transpose of the reversed shape). */
static void fortran_to_c(unsigned char *dst, const unsigned char *src, int ndim,
                         const int64_t *shape, size_t es, size_t count)
{
    int64_t fstride[LM_MAX_DIMS], idx[LM_MAX_DIMS] = {0};
    int64_t s = 1;
    for (int d = 0; d < ndim; d++) { fstride[d] = s; s *= shape[d]; }
    int64_t off = 0;
    for (size_t i = 0; i < count; i++) {
        memcpy(dst + i * es, src + (size_t)off * es, es);
        for (int d = ndim - 1; d >= 0; d--) {
            off += fstride[d];
            if (++idx[d] < shape[d]) break;
            off -= fstride[d] * shape[d];
            idx[d] = 0;
        }
    }
}

/* Widens unsigned file elements into the signed Lumen dtype, in place into
 * dst (count elements).  False if a u8 value exceeds int64. */
static bool widen(void *dst, const unsigned char *src, const npy_type *t, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        const unsigned char *p = src + i * (size_t)t->size;
        if (t->size == 2) ((int32_t *)dst)[i] = lm_io_le16(p);
        else if (t->size == 4) ((int64_t *)dst)[i] = (int64_t)lm_io_le32(p);
        else {
            uint64_t v = lm_io_le64(p);
            if (v > (uint64_t)INT64_MAX) return false;
            ((int64_t *)dst)[i] = (int64_t)v;
        }
    }
    return true;
}

/* File bytes -> host elements of t->dt in C order (malloc'd). */
static void *decode_data(const unsigned char *raw, const npy_hdr *h, const npy_type *t,
                         size_t count, const char *what)
{
    size_t fbytes = count * (size_t)t->size;
    unsigned char *tmp = malloc(fbytes ? fbytes : 1);
    void *out = malloc(count * lm_dtype_size(t->dt) + 1);
    if (!tmp || !out) {
        free(tmp);
        free(out);
        lm_error_set(LM_ERR_NOMEM, "%s: cannot allocate %zu bytes", what, fbytes);
        return NULL;
    }
    if (h->fortran) fortran_to_c(tmp, raw, h->ndim, h->shape, (size_t)t->size, count);
    else memcpy(tmp, raw, fbytes);
    if (t->swap) lm_io_byteswap(tmp, count, (size_t)t->size);
    if (t->unsig) {
        if (!widen(out, tmp, t, count)) {
            free(tmp);
            free(out);
            lm_error_set(LM_ERR_FORMAT, "%s: uint64 value does not fit in int64", what);
            return NULL;
        }
    } else if (t->dt == LM_BOOL) {
        for (size_t i = 0; i < count; i++) ((unsigned char *)out)[i] = tmp[i] != 0;
    } else {
        memcpy(out, tmp, fbytes);
    }
    free(tmp);
    return out;
}

lm_array *lm_load_npy_mem(const void *data, size_t size, const char *what)
{
    const unsigned char *d = data;
    const char *hdr = NULL;
    size_t hlen = 0;
    if (parse_prefix(d, size, what, &hdr, &hlen) != LM_OK) return NULL;
    npy_lex lx = {hdr, hdr + hlen, what};
    npy_hdr h;
    npy_type t;
    if (parse_dict(&lx, &h) != LM_OK || parse_descr(what, h.descr, &t) != LM_OK) return NULL;
    int64_t numel;
    uint64_t count, nbytes;
    if (!lm_shape_fits(h.ndim, h.shape, &numel)) {
        char sh[96];
        lm_error_set(LM_ERR_FORMAT, "%s: npy shape %s too large", what,
                     lm_shape_str(sh, sizeof sh, h.ndim, h.shape));
        return NULL;
    }
    count = (uint64_t)numel;
    size_t off = (size_t)(hdr - (const char *)d) + hlen;
    if (!lm_io_mul(count, (uint64_t)t.size, UINT64_MAX, &nbytes) || nbytes > size - off) {
        char sh[96];
        lm_error_set(LM_ERR_FORMAT, "%s: truncated: %s of shape %s needs %llu data bytes, the "
                     "file has %zu", what, h.descr, lm_shape_str(sh, sizeof sh, h.ndim, h.shape),
                     (unsigned long long)count * (unsigned long long)t.size, size - off);
        return NULL;
    }
    void *host = decode_data(d + off, &h, &t, (size_t)count, what);
    if (!host) return NULL;
    lm_array *a = lm_from_data(h.ndim, h.shape, t.dt, host, lm_device_cpu());
    free(host);
    return a;
}

lm_array *lm_load_npy(const char *path)
{
    void *data;
    size_t size;
    if (lm_io_read_all(path, &data, &size) != LM_OK) return NULL;
    lm_array *a = lm_load_npy_mem(data, size, path);
    free(data);
    return a;
}

/* ---- writing ---- */

static const char *npy_descr(lm_dtype dt)
{
    switch (dt) {
    case LM_F32: case LM_BF16: return "<f4";
    case LM_F16: return "<f2";
    case LM_F64: return "<f8";
    case LM_I8: return "|i1";
    case LM_U8: return "|u1";
    case LM_I16: return "<i2";
    case LM_I32: return "<i4";
    case LM_I64: return "<i8";
    case LM_BOOL: return "|b1";
    default: return NULL;
    }
}

lm_status lm_npy_encode(lm_array *a, void **out, size_t *size)
{
    *out = NULL;
    if (!a) return lm_error_status() ? lm_error_status() : LM_ERR_ARG;
    if (lm_dtype_is_quant(a->dtype))
        return lm_error_set(LM_ERR_DTYPE, "npy: %s is quantized storage, which numpy has no type for "
                            "(save it as .gguf, or dequantize() it)", lm_dtype_name(a->dtype));
    lm_dtype dt = a->dtype == LM_BF16 ? LM_F32 : a->dtype;
    char dict[512], shape[LM_MAX_DIMS * 24 + 8] = "(";
    for (int d = 0; d < a->ndim; d++) {
        size_t l = strlen(shape);
        snprintf(shape + l, sizeof shape - l, d ? ", %lld" : "%lld", (long long)a->shape[d]);
    }
    strcat(shape, a->ndim == 1 ? ",)" : ")");
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                     npy_descr(a->dtype), shape);
    /* numpy pads prefix + dict + '\n' to a multiple of 64 */
    size_t hlen = (size_t)n + 1;
    hlen += (64 - (10 + hlen) % 64) % 64;
    size_t nbytes = (size_t)a->size * lm_dtype_size(dt);
    unsigned char *buf = malloc(10 + hlen + nbytes);
    if (!buf) return lm_error_set(LM_ERR_NOMEM, "npy: cannot allocate %zu bytes", nbytes);
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    lm_io_put16(buf + 8, (uint16_t)hlen);
    memset(buf + 10, ' ', hlen);
    memcpy(buf + 10, dict, (size_t)n);
    buf[10 + hlen - 1] = '\n';
    if (lm_array_read(a, buf + 10 + hlen, dt) != LM_OK) {
        free(buf);
        return lm_error_status();
    }
    *out = buf;
    *size = 10 + hlen + nbytes;
    return LM_OK;
}

lm_status lm_save_npy(const char *path, lm_array *a)
{
    void *bytes;
    size_t n;
    if (lm_npy_encode(a, &bytes, &n) != LM_OK) return lm_error_prefix("save %s", path);
    lm_io_out o;
    lm_status st = lm_io_out_open(&o, path);
    if (st == LM_OK) {
        lm_io_out_write(&o, bytes, n);
        st = lm_io_out_close(&o, true);
    }
    free(bytes);
    return st;
}

/* ---- npz ---- */

static bool is_npy_name(const char *s)
{
    size_t n = strlen(s);
    return n > 4 && !strcmp(s + n - 4, ".npy");
}

lm_status lm_load_npz_mem(const void *data, size_t size, const char *what, lm_tensor_set *out)
{
    memset(out, 0, sizeof *out);
    lm_zip_member *ms;
    int n;
    if (lm_zip_read(data, size, what, &ms, &n) != LM_OK) return LM_ERR_FORMAT;
    lm_status st = LM_OK;
    for (int i = 0; i < n; i++) {
        if (st == LM_OK && is_npy_name(ms[i].name)) {
            char where[512];
            snprintf(where, sizeof where, "%s[%s]", what, ms[i].name);
            lm_array *a = lm_load_npy_mem(ms[i].data, ms[i].size, where);
            ms[i].name[strlen(ms[i].name) - 4] = 0;
            if (a && lm_tensor_set_find(out, ms[i].name) >= 0) {
                lm_array_release(a);
                a = NULL;
                lm_error_set(LM_ERR_FORMAT, "%s: member %s.npy appears twice", what, ms[i].name);
            }
            st = a ? lm_io_set_add(out, ms[i].name, a) : lm_error_status();
        }
        free(ms[i].name);
        free(ms[i].data);
    }
    free(ms);
    if (st != LM_OK) lm_tensor_set_free(out);
    else out->format = LM_FORMAT_NPZ;
    return st;
}

lm_status lm_load_npz(const char *path, lm_tensor_set *out)
{
    void *data;
    size_t size;
    memset(out, 0, sizeof *out);
    if (lm_io_read_all(path, &data, &size) != LM_OK) return lm_error_status();
    lm_status st = lm_load_npz_mem(data, size, path, out);
    free(data);
    return st;
}

lm_status lm_save_npz(const char *path, int n, const char *const *names,
                      lm_array *const *arrays, bool compress)
{
    char **fn = calloc((size_t)n + 1, sizeof *fn);
    unsigned char **datas = calloc((size_t)n + 1, sizeof *datas);
    size_t *sizes = calloc((size_t)n + 1, sizeof *sizes);
    lm_status st = fn && datas && sizes ? LM_OK : lm_error_set(LM_ERR_NOMEM, "save %s: out of memory", path);
    for (int i = 0; i < n && st == LM_OK; i++) {
        for (int j = 0; j < i; j++)
            if (!strcmp(names[i], names[j]))
                st = lm_error_set(LM_ERR_ARG, "save %s: name '%s' given twice", path, names[i]);
        if (st == LM_OK && asprintf(&fn[i], "%s.npy", names[i]) < 0) {
            fn[i] = NULL;
            st = lm_error_set(LM_ERR_NOMEM, "save %s: out of memory", path);
        }
        if (st == LM_OK) st = lm_npy_encode(arrays[i], (void **)&datas[i], &sizes[i]);
        if (st != LM_OK) lm_error_prefix("save %s: %s", path, names[i]);
    }
    lm_io_out o;
    if (st == LM_OK) st = lm_io_out_open(&o, path);
    if (st == LM_OK) {
        st = lm_zip_write(&o, n, (const char *const *)fn, (const unsigned char *const *)datas,
                          sizes, compress);
        st = lm_io_out_close(&o, st == LM_OK);
    }
    for (int i = 0; i < n; i++) {
        if (fn) free(fn[i]);
        if (datas) free(datas[i]);
    }
    free(fn);
    free(datas);
    free(sizes);
    return st;
}
