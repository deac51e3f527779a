/* load.c - one loader for every tensor file: tells the format by its
 * magic bytes (the extension only for a file too short to tell), hands the
 * file to that format's reader (io_safetensors.c, io_npy.c, io_png.c,
 * io_gguf.c) and places the tensors on the device.  The readers share
 * io.c's helpers and know nothing of this dispatcher. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include "gguf.h"
#include "io_internal.h"
#include "lumen.h"

const char *lm_format_name(lm_file_format f)
{
    switch (f) {
    case LM_FORMAT_SAFETENSORS: return "safetensors";
    case LM_FORMAT_NPY: return "npy";
    case LM_FORMAT_NPZ: return "npz";
    case LM_FORMAT_PNG: return "png";
    case LM_FORMAT_GGUF: return "gguf";
    default: return "unknown";
    }
}

lm_file_format lm_detect_mem(const void *data, size_t size)
{
    const unsigned char *p = data;
    if (size >= 6 && !memcmp(p, "\x93NUMPY", 6)) return LM_FORMAT_NPY;
    if (size >= 4 && (!memcmp(p, "PK\x03\x04", 4) || !memcmp(p, "PK\x05\x06", 4)))
        return LM_FORMAT_NPZ;
    if (size >= 8 && !memcmp(p, "\x89PNG\r\n\x1a\n", 8)) return LM_FORMAT_PNG;
    if (size >= 4 && !memcmp(p, "GGUF", 4)) return LM_FORMAT_GGUF;
    /* safetensors: 8-byte length, then a JSON object (maybe after spaces).
     * A length past the limit still counts when the object opens with a
     * key, so the reader can say the header is too large instead of
     * "unknown magic bytes" (text that merely has a '{' at byte 8 does not
     * pass: its first 8 bytes read as a length far past the limit). */
    if (size >= 9) {
        uint64_t n = lm_io_le64(p);
        size_t i = 8;
        while (i < size && i < 64 && p[i] == ' ') i++;
        bool object = i < size && p[i] == '{';
        bool keyed = object && i + 1 < size && p[i + 1] == '"';
        if (n >= 2 && object && (n <= LM_SAFETENSORS_MAX_HEADER || keyed))
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
    int fd = lm_io_open_read(path);
    if (fd < 0) return LM_FORMAT_UNKNOWN;
    unsigned char head[64];
    size_t n = 0;
    while (n < sizeof head) {
        ssize_t r = read(fd, head + n, sizeof head - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int err = errno;
            close(fd);
            lm_error_set(LM_ERR_IO, "%s: cannot read: %s", path, strerror(err));
            return LM_FORMAT_UNKNOWN;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    lm_file_format fmt = lm_detect_mem(head, n);
    if (fmt != LM_FORMAT_UNKNOWN) return fmt;
    /* no other format's magic: a .safetensors file goes to its reader,
     * whose messages say what is wrong with it */
    if (ends_with(path, ".safetensors")) return LM_FORMAT_SAFETENSORS;
    if (n < 16) {
        if (ends_with(path, ".npy")) return LM_FORMAT_NPY;
        if (ends_with(path, ".npz")) return LM_FORMAT_NPZ;
        if (ends_with(path, ".png")) return LM_FORMAT_PNG;
        if (ends_with(path, ".gguf")) return LM_FORMAT_GGUF;
    }
    const char *kind = lm_io_kind_of(head, n);
    if (kind)
        lm_error_set(LM_ERR_FORMAT, "%s: %s; only safetensors, npy, npz, PNG and GGUF files "
                     "are read%s", path, kind, strstr(kind, "image") ? " (convert it to PNG)" : "");
    else
        lm_error_set(LM_ERR_FORMAT,
                     "%s: not a safetensors, npy, npz, PNG or GGUF file (unknown magic bytes)", path);
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
    case LM_FORMAT_GGUF: return lm_load_gguf(path, out, NULL);
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
