/* io.h - tensor files (safetensors, .npy, .npz) and PNG images.
 *
 * Every reader treats its input as untrusted: header sizes are bounded,
 * offsets and sizes are overflow-checked and must lie inside the file,
 * tensor ranges may not overlap.  A bad file gives LM_ERR_FORMAT with a
 * message "<path>: <problem>"; an unreadable one LM_ERR_IO.  Only regular
 * files are read: a directory, FIFO or device is refused at once (a FIFO
 * never blocks).  Writers replace their file atomically: a private
 * temporary beside it, renamed into place when whole (io_internal.h).
 *
 * Ownership: an lm_tensor_set owns its names, arrays (one reference each)
 * and metadata; lm_tensor_set_free() releases all of it.  Arrays passed to
 * writers are borrowed (they are evaluated, not consumed).
 *
 * safetensors tensors are not copied: each array wraps the file's mapping
 * (MAP_PRIVATE, so writes into a loaded tensor never reach the file) and the
 * mapping is unmapped when the last array made from it dies.  Its bytes are
 * read from disk only when the tensor is used. */
#ifndef LM_IO_H
#define LM_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "array.h"

typedef enum lm_file_format {
    LM_FORMAT_UNKNOWN = 0,
    LM_FORMAT_SAFETENSORS,
    LM_FORMAT_NPY,
    LM_FORMAT_NPZ,
    LM_FORMAT_PNG,
    LM_FORMAT_GGUF,       /* core/io/gguf.h */
} lm_file_format;

typedef struct lm_kv {
    char *key;
    char *value;
} lm_kv;

/* Tensors by name, in file order, and string metadata (safetensors
 * __metadata__, PNG text chunks). */
typedef struct lm_tensor_set {
    int count;
    char **names;
    lm_array **arrays;
    int nmeta;
    lm_kv *meta;
    lm_file_format format;
} lm_tensor_set;

void lm_tensor_set_free(lm_tensor_set *s);   /* leaves *s empty; NULL is fine */
/* Index of name in s, or -1. */
int lm_tensor_set_find(const lm_tensor_set *s, const char *name);
const char *lm_format_name(lm_file_format f);  /* "safetensors", "npy", ... */

/* The format by content (magic bytes), falling back to the extension for a
 * file too short to tell.  LM_FORMAT_UNKNOWN + error if neither decides. */
lm_file_format lm_file_detect(const char *path);
lm_file_format lm_detect_mem(const void *data, size_t size);

/* Opens path for reading if it is a regular file (a symlink to one is
 * fine); a directory, FIFO, socket or device is refused at once with a
 * message saying what it is (a FIFO never blocks the open).  The fd, or
 * -1 with the error set.  Every file Lumen reads is opened through it. */
int lm_io_open_read(const char *path);

/* Loads any tensor file (chosen by content): safetensors, npz, npy (one
 * tensor named after the file's stem, e.g. "x" for "dir/x.npy"), PNG.
 * The tensors belong to dev (NULL: the default device), as created ones do:
 * one not read onto dev becomes a lazy copy to it (lm_tensor_set_place). */
lm_status lm_load_file_to(const char *path, lm_device *dev, lm_tensor_set *out);
lm_status lm_load_file(const char *path, lm_tensor_set *out);   /* dev = NULL */
/* Gives every array of s to dev (NULL: the default device).  An array on
 * another device becomes a lazy copy to dev, so a tensor read from a file
 * (a mapped safetensors tensor stays mapped until then) is uploaded once, on
 * first use, and holds the device copy from then on, while it lives. */
lm_status lm_tensor_set_place(lm_tensor_set *s, lm_device *dev);

/* The readers below (path and memory forms) return host arrays, on the CPU
 * device: lm_load_file_to places them. */

/* ---- safetensors (core/io/io_safetensors.c) ---- */
/* Header length bound, as in the reference implementation (100 MB). */
#define LM_SAFETENSORS_MAX_HEADER 100000000ull
lm_status lm_load_safetensors(const char *path, lm_tensor_set *out);
/* From memory (copies the tensors); `what` names the source in errors. */
lm_status lm_load_safetensors_mem(const void *data, size_t size, const char *what,
                                  lm_tensor_set *out);
/* Writes n tensors (names unique, not "__metadata__") and nmeta string
 * pairs.  Data offsets follow the order given; the header is padded to 8. */
lm_status lm_save_safetensors(const char *path, int n, const char *const *names,
                              lm_array *const *arrays, int nmeta, const lm_kv *meta);

/* ---- npy / npz (core/io/io_npy.c, core/io/io_zip.c) ---- */
/* Header length bound for .npy (numpy's own reader allows 10000 by default). */
#define LM_NPY_MAX_HEADER (1u << 20)
/* Versions 1-3, C or Fortran order, either byte order; b1 i1 u1 i2 u2 i4 u4
 * i8 u8 f2 f4 f8.  u2 and u4 widen exactly to i32 and i64; u8 becomes i64
 * and fails if a value does not fit. */
lm_array *lm_load_npy(const char *path);
lm_array *lm_load_npy_mem(const void *data, size_t size, const char *what);
/* Writes version 1.0 (2.0 when the header needs it), little endian, C
 * order.  bf16 has no numpy type and is written as exact f4. */
lm_status lm_save_npy(const char *path, lm_array *a);
/* The .npy bytes of a in a malloc'd buffer (*out, *size; caller frees). */
lm_status lm_npy_encode(lm_array *a, void **out, size_t *size);

/* .npz: a zip of NAME.npy members, stored or deflated, zip64 understood.
 * Members not ending in .npy are skipped. */
lm_status lm_load_npz(const char *path, lm_tensor_set *out);
lm_status lm_load_npz_mem(const void *data, size_t size, const char *what,
                          lm_tensor_set *out);
/* compress: deflate (numpy.savez_compressed) instead of stored (savez). */
lm_status lm_save_npz(const char *path, int n, const char *const *names,
                      lm_array *const *arrays, bool compress);

/* ---- PNG (core/io/io_png.c) ---- */
typedef enum lm_layout { LM_LAYOUT_CHW = 0, LM_LAYOUT_HWC } lm_layout;

typedef struct lm_png_opts {
    lm_layout layout;     /* of 3-D input/output; default CHW */
    double lo, hi;        /* float range mapped to [0, max]; default 0..1 */
    bool has_range;       /* range given: also applies to integer input */
    int bits;             /* 8 (default) or 16 */
    int level;            /* zlib level 0-9; -1 = libpng default (6) */
    int ntext;            /* tEXt chunks to write */
    const lm_kv *text;
    lm_dtype dtype;       /* read: LM_U8/LM_I32 (raw values; default u8 for
                             8-bit files, i32 for 16-bit), or a float dtype
                             (scaled to 0..1) */
    bool has_dtype;
} lm_png_opts;

void lm_png_opts_init(lm_png_opts *o);

/* Writes a [H,W] (gray), [C,H,W] or [H,W,C] (per layout) image with C in
 * 1..4 (gray, gray+alpha, RGB, RGBA).  Floats map lo..hi to 0..max,
 * clamped, rounded to nearest (NaN -> 0); integers and bool are pixel
 * values (bool: 0/max; u8 written at 16 bits scales by 257), clamped.
 * A 4-D batch [N,C,H,W] (or [N,H,W,C]) writes N files: a "%d"/"%0Nd" in
 * path is replaced by the index (from 0), else "_0000" goes before the
 * extension.  o may be NULL. */
lm_status lm_png_write(const char *path, lm_array *a, const lm_png_opts *o);
/* Reads any PNG (palette, gray 1/2/4/8/16, gray+alpha, RGB, RGBA; tRNS
 * becomes an alpha channel) as [C,H,W] or [H,W,C].  text (may be NULL)
 * receives the tEXt/zTXt/iTXt chunks in its meta.  NULL + error on a bad
 * file.  Images whose pixels could not come from a file of that size
 * (deflate expands at most ~1032x) are refused before allocating. */
lm_array *lm_png_read(const char *path, const lm_png_opts *o, lm_tensor_set *text);
lm_array *lm_png_read_mem(const void *data, size_t size, const char *what,
                          const lm_png_opts *o, lm_tensor_set *text);

/* An f32 image [C,H,W] (CHW planes, values 0..1) in plain memory; data is
 * malloc'd, the caller frees it.  bits: the file's depth (8 or 16) on read.
 * lm_png_read_f32 / lm_png_write_f32 give the values and bytes
 * lm_png_read (dtype f32) and lm_png_write of such an array give, but make
 * no lm_array, so a worker thread may run them while another evaluates
 * (lumen upscale's pipeline). */
typedef struct lm_png_f32 {
    int64_t c, h, w;
    int bits;
    float *data;
} lm_png_f32;
lm_status lm_png_read_f32(const char *path, lm_png_f32 *img);
lm_status lm_png_write_f32(const char *path, const lm_png_f32 *img, const lm_png_opts *o);

/* An 8-bit image in plain memory: c*h*w samples, interleaved (HWC); data
 * is malloc'd, the caller frees it. */
typedef struct lm_png_u8 {
    int64_t c, h, w;
    unsigned char *data;
} lm_png_u8;
/* The samples lm_png_write of a at 8 bits writes (the same shapes, layout,
 * ranges and rounding; o->bits is ignored), in memory.  what names the
 * image in errors.  img->data is NULL on failure. */
lm_status lm_png_pixels8(lm_array *a, const lm_png_opts *o, const char *what,
                         lm_png_u8 *img);

/* Removes the temporary files of writes still in progress in this process.
 * Async-signal-safe: for a signal handler that is about to _exit (a second
 * Ctrl-C or SIGTERM), so an abrupt end leaves no temporary beside the
 * outputs.  Writes finish or fail normally otherwise. */
void lm_io_unlink_temporaries(void);

/* Whether name (a file name, no folder) is a temporary of core/io's
 * writers, "<base>.<pid>-<k>-<hex>.tmp" (create_temp in io.c): *n is then
 * the length of <base>.  For sweeps of what a killed process left. */
bool lm_io_temp_base(const char *name, size_t *n);

/* An atomic file: written to a temporary created exclusively beside path
 * ("<path>.<pid>-<n>-<x>.tmp", never shared with another writer) and
 * renamed over path on success, so readers see the old file or the new
 * one, never a part, and a failed write leaves the old file as it was and
 * no temporary behind.  An existing path that is not a regular file is
 * refused before anything is written. */
typedef struct lm_io_out {
    FILE *f;
    char *tmp;
    const char *path;
    bool failed;
    int err;              /* errno of the first failed write */
    int slot;             /* its entry for lm_io_unlink_temporaries, or -1 */
} lm_io_out;
lm_status lm_io_out_open(lm_io_out *o, const char *path);
/* false once any write has failed (o->err says why). */
bool lm_io_out_write(lm_io_out *o, const void *p, size_t n);
/* Closes and renames (ok) or removes the temporary (!ok or write error,
 * the message naming path and errno). */
lm_status lm_io_out_close(lm_io_out *o, bool ok);


#endif
