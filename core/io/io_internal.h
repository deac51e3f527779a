/* io_internal.h - helpers shared by the file readers and writers (core only). */
#ifndef LM_IO_INTERNAL_H
#define LM_IO_INTERNAL_H

#include <stdio.h>
#include "io.h"

/* Appends (name, a) to s, taking over the reference to a (released on
 * failure).  name is copied. */
lm_status lm_io_set_add(lm_tensor_set *s, const char *name, lm_array *a);
lm_status lm_io_set_meta(lm_tensor_set *s, const char *key, size_t klen,
                         const char *value, size_t vlen);

/* lm_io_open_read, the one open of every file Lumen reads, is in io.h */

/* Reads a whole regular file into a malloc'd buffer (NUL-terminated
 * beyond size). */
lm_status lm_io_read_all(const char *path, void **data, size_t *size);


/* What the first n bytes of a file say it is, for a message about a file
 * a reader does not take ("a JPEG image", "a GGUF file"), or NULL when
 * they name no format Lumen knows of. */
const char *lm_io_kind_of(const unsigned char *head, size_t n);

/* The array's elements, row-major, in its own dtype (evaluates), in a
 * malloc'd buffer of lm_array_nbytes(a) bytes (at least 1). */
void *lm_io_array_bytes(lm_array *a);

/* a*b without overflow past limit: false when the product exceeds it. */
static inline bool lm_io_mul(uint64_t a, uint64_t b, uint64_t limit, uint64_t *out)
{
    if (a != 0 && b > limit / a) return false;
    *out = a * b;
    return true;
}

/* A file mapped once, private and writable (a write to a loaded tensor
 * copies its page and never reaches the file), and shared by the arrays
 * made over its bytes (core/io/io_map.c).  refs counts those arrays and the
 * loader while it runs; the last lm_io_map_unref unmaps it. */
typedef struct lm_io_map {
    void *base;
    size_t size;
    int refs;
} lm_io_map;
/* Maps the regular file path with refs 1; *size gets its size.  A file of
 * fewer than min bytes (or none) is not mapped: LM_OK with *out NULL, and
 * the caller says what is wrong with it. */
lm_status lm_io_map_file(const char *path, size_t min, lm_io_map **out, size_t *size);
void lm_io_map_unref(void *m);
/* An array of dt and shape over the nbytes at p in m's mapping, holding a
 * reference to m (NULL with the error set on failure).  The caller copies
 * instead where p is not aligned for dt. */
lm_array *lm_io_map_array(lm_io_map *m, const void *p, size_t nbytes, lm_dtype dt, int ndim,
                          const int64_t *shape);

/* Little-endian loads from unaligned bytes. */
static inline uint16_t lm_io_le16(const unsigned char *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t lm_io_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}
static inline uint64_t lm_io_le64(const unsigned char *p)
{
    return (uint64_t)lm_io_le32(p) | ((uint64_t)lm_io_le32(p + 4) << 32);
}
static inline void lm_io_put16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8);
}
static inline void lm_io_put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline void lm_io_put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Reverses the bytes of each of n elements of size es, in place. */
void lm_io_byteswap(void *data, size_t n, size_t es);

/* The members of a zip archive (core/io/io_zip.c). */
typedef struct lm_zip_member {
    char *name;
    unsigned char *data;    /* uncompressed, malloc'd */
    size_t size;
} lm_zip_member;
/* Reads every member (stored or deflated, CRC checked).  On success the
 * caller frees each name and data and the array. */
lm_status lm_zip_read(const unsigned char *data, size_t size, const char *what,
                      lm_zip_member **members, int *count);
/* Writes a zip of n members to o (stored or deflated). */
lm_status lm_zip_write(lm_io_out *o, int n, const char *const *names,
                       const unsigned char *const *datas, const size_t *sizes,
                       bool deflate);

/* fn(ctx, k) for k in [0, n) on up to LUMEN_THREADS threads (the cores
 * where unset), the caller one of them (core/io/io_deflate.c).  For work
 * whose result does not depend on which thread runs which k. */
void lm_io_parallel(size_t n, void (*fn)(void *ctx, size_t k), void *ctx);

/* One zlib stream (header, deflate, adler32) of n bytes, compressed in
 * bands of band_bytes on up to LUMEN_THREADS threads (core/io/io_deflate.c):
 * the same bytes at any thread count.  *out is malloc'd; what names the
 * caller in errors. */
lm_status lm_io_deflate_bands(const unsigned char *in, size_t n, size_t band_bytes, int level,
                              unsigned char **out, size_t *outn, const char *what);

#endif
