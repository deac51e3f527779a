/* io.c - what the file formats share: tensor sets, format detection,
 * whole-file reads and safe (write-then-rename) writes. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "io_internal.h"
#include "lumen.h"

void lm_tensor_set_free(lm_tensor_set *s)
{
    if (!s) return;
    for (int i = 0; i < s->count; i++) {
        free(s->names[i]);
        lm_array_release(s->arrays[i]);
    }
    for (int i = 0; i < s->nmeta; i++) {
        free(s->meta[i].key);
        free(s->meta[i].value);
    }
    free(s->names);
    free(s->arrays);
    free(s->meta);
    memset(s, 0, sizeof *s);
}

int lm_tensor_set_find(const lm_tensor_set *s, const char *name)
{
    for (int i = 0; i < s->count; i++)
        if (!strcmp(s->names[i], name)) return i;
    return -1;
}

const char *lm_format_name(lm_file_format f)
{
    switch (f) {
    case LM_FORMAT_SAFETENSORS: return "safetensors";
    case LM_FORMAT_NPY: return "npy";
    case LM_FORMAT_NPZ: return "npz";
    case LM_FORMAT_PNG: return "png";
    default: return "unknown";
    }
}

lm_status lm_io_set_add(lm_tensor_set *s, const char *name, lm_array *a)
{
    if (s->count % 16 == 0) {
        size_t cap = (size_t)s->count + 16;
        char **nn = realloc(s->names, cap * sizeof *nn);
        if (nn) s->names = nn;
        lm_array **na = realloc(s->arrays, cap * sizeof *na);
        if (na) s->arrays = na;
        if (!nn || !na) {
            lm_array_release(a);
            return lm_error_set(LM_ERR_NOMEM, "load: out of memory for tensor names");
        }
    }
    char *copy = strdup(name);
    if (!copy) {
        lm_array_release(a);
        return lm_error_set(LM_ERR_NOMEM, "load: out of memory for tensor names");
    }
    s->names[s->count] = copy;
    s->arrays[s->count++] = a;
    return LM_OK;
}

lm_status lm_io_set_meta(lm_tensor_set *s, const char *key, size_t klen,
                         const char *value, size_t vlen)
{
    if (s->nmeta % 16 == 0) {
        lm_kv *m = realloc(s->meta, ((size_t)s->nmeta + 16) * sizeof *m);
        if (!m) return lm_error_set(LM_ERR_NOMEM, "load: out of memory for metadata");
        s->meta = m;
    }
    char *k = strndup(key, klen), *v = strndup(value, vlen);
    if (!k || !v) {
        free(k);
        free(v);
        return lm_error_set(LM_ERR_NOMEM, "load: out of memory for metadata");
    }
    s->meta[s->nmeta].key = k;
    s->meta[s->nmeta++].value = v;
    return LM_OK;
}

lm_file_format lm_detect_mem(const void *data, size_t size)
{
    const unsigned char *p = data;
    if (size >= 6 && !memcmp(p, "\x93NUMPY", 6)) return LM_FORMAT_NPY;
    if (size >= 4 && (!memcmp(p, "PK\x03\x04", 4) || !memcmp(p, "PK\x05\x06", 4)))
        return LM_FORMAT_NPZ;
    if (size >= 8 && !memcmp(p, "\x89PNG\r\n\x1a\n", 8)) return LM_FORMAT_PNG;
    /* safetensors: 8-byte length, then a JSON object (maybe after spaces) */
    if (size >= 9) {
        uint64_t n = lm_io_le64(p);
        size_t i = 8;
        while (i < size && i < 64 && p[i] == ' ') i++;
        if (n >= 2 && n <= LM_SAFETENSORS_MAX_HEADER && i < size && p[i] == '{')
            return LM_FORMAT_SAFETENSORS;
    }
    return LM_FORMAT_UNKNOWN;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcasecmp(s + a - b, suffix);
}

lm_file_format lm_file_detect(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        lm_error_set(LM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        return LM_FORMAT_UNKNOWN;
    }
    unsigned char head[64];
    size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    lm_file_format fmt = lm_detect_mem(head, n);
    if (fmt != LM_FORMAT_UNKNOWN) return fmt;
    if (n < 16) {
        if (ends_with(path, ".safetensors")) return LM_FORMAT_SAFETENSORS;
        if (ends_with(path, ".npy")) return LM_FORMAT_NPY;
        if (ends_with(path, ".npz")) return LM_FORMAT_NPZ;
        if (ends_with(path, ".png")) return LM_FORMAT_PNG;
    }
    lm_error_set(LM_ERR_FORMAT,
                 "%s: not a safetensors, npy, npz or PNG file (unknown magic bytes)", path);
    return LM_FORMAT_UNKNOWN;
}

/* "dir/x.npy" -> "x" */
static char *file_stem(const char *path)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    const char *dot = strrchr(b, '.');
    size_t n = dot && dot != b ? (size_t)(dot - b) : strlen(b);
    return strndup(b, n);
}

lm_status lm_tensor_set_place(lm_tensor_set *s, lm_device *dev)
{
    if (!dev && !(dev = lm_device_default())) return lm_error_status();
    for (int i = 0; i < s->count; i++) {
        if (s->arrays[i]->device == dev) continue;
        lm_array *t = lm_array_to(s->arrays[i], dev);
        if (!t) return lm_error_prefix("load: tensor '%s' to %s", s->names[i], dev->spec);
        lm_array_release(s->arrays[i]);
        s->arrays[i] = t;
    }
    return LM_OK;
}

static lm_status load_host(const char *path, lm_tensor_set *out);

lm_status lm_load_file_to(const char *path, lm_device *dev, lm_tensor_set *out)
{
    lm_status st = load_host(path, out);
    if (st == LM_OK && (st = lm_tensor_set_place(out, dev)) != LM_OK) lm_tensor_set_free(out);
    return st;
}

lm_status lm_load_file(const char *path, lm_tensor_set *out)
{
    return lm_load_file_to(path, NULL, out);
}

static lm_status load_host(const char *path, lm_tensor_set *out)
{
    memset(out, 0, sizeof *out);
    lm_file_format fmt = lm_file_detect(path);
    switch (fmt) {
    case LM_FORMAT_SAFETENSORS: return lm_load_safetensors(path, out);
    case LM_FORMAT_NPZ: return lm_load_npz(path, out);
    case LM_FORMAT_NPY: {
        lm_array *a = lm_load_npy(path);
        if (!a) return lm_error_status();
        char *stem = file_stem(path);
        lm_status st = stem ? lm_io_set_add(out, stem, a)
                            : (lm_array_release(a),
                               lm_error_set(LM_ERR_NOMEM, "load: out of memory"));
        free(stem);
        out->format = LM_FORMAT_NPY;
        return st;
    }
    case LM_FORMAT_PNG: {
        lm_array *a = lm_png_read(path, NULL, out);
        if (!a) return lm_error_status();
        out->format = LM_FORMAT_PNG;
        return lm_io_set_add(out, "image", a);
    }
    default: return lm_error_status();
    }
}

lm_status lm_io_read_all(const char *path, void **data, size_t *size)
{
    *data = NULL;
    *size = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return lm_error_set(LM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return lm_error_set(LM_ERR_IO, "%s: not a regular file", path);
    }
    size_t n = (size_t)sb.st_size;
    unsigned char *buf = malloc(n + 1);
    if (!buf) {
        fclose(f);
        return lm_error_set(LM_ERR_NOMEM, "%s: cannot allocate %zu bytes to read it", path, n);
    }
    size_t got = fread(buf, 1, n, f);
    int err = ferror(f);
    fclose(f);
    if (got != n || err) {
        free(buf);
        return lm_error_set(LM_ERR_IO, "%s: read failed (%zu of %zu bytes)", path, got, n);
    }
    buf[n] = 0;
    *data = buf;
    *size = n;
    return LM_OK;
}

lm_status lm_io_out_open(lm_io_out *o, const char *path)
{
    memset(o, 0, sizeof *o);
    o->path = path;
    size_t n = strlen(path) + 8;
    o->tmp = malloc(n);
    if (!o->tmp) return lm_error_set(LM_ERR_NOMEM, "%s: out of memory", path);
    snprintf(o->tmp, n, "%s.tmp", path);
    o->f = fopen(o->tmp, "wb");
    if (!o->f) {
        lm_status st = lm_error_set(LM_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
        free(o->tmp);
        o->tmp = NULL;
        return st;
    }
    return LM_OK;
}

void lm_io_out_write(lm_io_out *o, const void *p, size_t n)
{
    if (!o->failed && n && fwrite(p, 1, n, o->f) != n) o->failed = true;
}

lm_status lm_io_out_close(lm_io_out *o, bool ok)
{
    lm_status st = LM_OK;
    if (!o->f) return lm_error_set(LM_ERR_IO, "%s: not open", o->path);
    int err = errno;
    if (fclose(o->f) != 0) o->failed = true;
    o->f = NULL;
    if (ok && o->failed)
        st = lm_error_set(LM_ERR_IO, "%s: write failed: %s", o->path, strerror(err));
    if (ok && !o->failed && rename(o->tmp, o->path) != 0)
        st = lm_error_set(LM_ERR_IO, "%s: cannot rename into place: %s", o->path,
                          strerror(errno));
    if (!ok || st != LM_OK) remove(o->tmp);
    free(o->tmp);
    o->tmp = NULL;
    return ok ? st : lm_error_status();
}

void *lm_io_array_bytes(lm_array *a)
{
    size_t n = lm_array_nbytes(a);
    void *buf = malloc(n ? n : 1);
    if (!buf) {
        lm_error_set(LM_ERR_NOMEM, "save: cannot allocate %zu bytes", n);
        return NULL;
    }
    if (lm_array_read(a, buf, a->dtype) != LM_OK) {
        free(buf);
        return NULL;
    }
    return buf;
}

void lm_io_byteswap(void *data, size_t n, size_t es)
{
    unsigned char *p = data;
    if (es < 2) return;
    for (size_t i = 0; i < n; i++, p += es)
        for (size_t a = 0, b = es - 1; a < b; a++, b--) {
            unsigned char t = p[a];
            p[a] = p[b];
            p[b] = t;
        }
}
