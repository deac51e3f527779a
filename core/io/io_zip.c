/* io_zip.c - the small part of zip that .npz needs: read every member of an
 * archive (stored or deflated, zip64 sizes and offsets), write an archive
 * of in-memory members.
 *
 * Sizes and offsets come from the central directory (numpy writes its
 * local headers with zip64 placeholders); the local header is used only to
 * find where a member's data starts.  Every range is checked against the
 * file, members may not overlap (the overlapping-member zip bomb), and a
 * deflated member may not claim more than deflate's maximum ratio allows,
 * so a small file can never make us allocate much. */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include "io_internal.h"
#include "lumen.h"

#define SIG_LOCAL 0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_EOCD 0x06054b50u
#define SIG_EOCD64 0x06064b50u
#define SIG_LOC64 0x07064b50u
/* deflate cannot expand more than ~1032:1 (zlib technical details) */
#define DEFLATE_MAX_RATIO 1040u

typedef struct zip_entry {
    uint64_t csize, usize, local, start, end;   /* start/end: data range */
    uint32_t crc;
    uint16_t method, flags;
    char *name;
} zip_entry;

typedef struct zip_dir {
    uint64_t count, offset, size;
} zip_dir;

static lm_status zerr(const char *what, const char *msg)
{
    return lm_error_set(LM_ERR_FORMAT, "%s: zip: %s", what, msg);
}

/* The zip64 end record, found through its locator just before the EOCD. */
static lm_status find_dir64(const unsigned char *d, size_t size, size_t eocd,
                            const char *what, zip_dir *dir)
{
    if (eocd < 20 || lm_io_le32(d + eocd - 20) != SIG_LOC64)
        return zerr(what, "zip64 sizes without a zip64 locator");
    uint64_t off = lm_io_le64(d + eocd - 20 + 8);
    if (size < 56 || off > size - 56 || lm_io_le32(d + off) != SIG_EOCD64)
        return zerr(what, "zip64 end record outside the file");
    dir->count = lm_io_le64(d + off + 32);
    dir->size = lm_io_le64(d + off + 40);
    dir->offset = lm_io_le64(d + off + 48);
    return LM_OK;
}

static lm_status find_dir(const unsigned char *d, size_t size, const char *what, zip_dir *dir)
{
    if (size < 22) return zerr(what, "too short for a zip archive");
    size_t lo = size - 22 > 0xFFFF ? size - 22 - 0xFFFF : 0;
    size_t pos = size - 22;
    for (;; pos--) {
        if (lm_io_le32(d + pos) == SIG_EOCD && pos + 22 + lm_io_le16(d + pos + 20) <= size)
            break;
        if (pos == lo) return zerr(what, "no end of central directory record (truncated?)");
    }
    dir->count = lm_io_le16(d + pos + 10);
    dir->size = lm_io_le32(d + pos + 12);
    dir->offset = lm_io_le32(d + pos + 16);
    if (lm_io_le16(d + pos + 4) != 0 || lm_io_le16(d + pos + 6) != 0)
        return zerr(what, "multi-disk archives are not supported");
    if (dir->count == 0xFFFF || dir->size == 0xFFFFFFFFu || dir->offset == 0xFFFFFFFFu)
        if (find_dir64(d, size, pos, what, dir) != LM_OK) return LM_ERR_FORMAT;
    if (dir->offset > size || dir->size > size - dir->offset)
        return zerr(what, "central directory outside the file");
    if (dir->count > dir->size / 46) return zerr(what, "central directory too small for its entry count");
    return LM_OK;
}

/* Replaces 0xFFFFFFFF fields by their zip64 extra values. */
static lm_status zip64_extra(const unsigned char *x, size_t n, zip_entry *e, bool off64,
                             const char *what)
{
    while (n >= 4) {
        unsigned id = lm_io_le16(x), len = lm_io_le16(x + 2);
        if (len > n - 4) return zerr(what, "extra field runs past its entry");
        if (id == 1) {
            const unsigned char *p = x + 4, *end = p + len;
            uint64_t *f[3] = {e->usize == 0xFFFFFFFFu ? &e->usize : NULL,
                              e->csize == 0xFFFFFFFFu ? &e->csize : NULL,
                              off64 ? &e->local : NULL};
            for (int i = 0; i < 3; i++) {
                if (!f[i]) continue;
                if (end - p < 8) return zerr(what, "short zip64 extra field");
                *f[i] = lm_io_le64(p);
                p += 8;
            }
            return LM_OK;
        }
        x += 4 + len;
        n -= 4 + len;
    }
    return LM_OK;
}

static lm_status read_central(const unsigned char *d, const char *what,
                              const zip_dir *dir, zip_entry *es)
{
    size_t p = (size_t)dir->offset, end = (size_t)(dir->offset + dir->size);
    for (uint64_t i = 0; i < dir->count; i++) {
        zip_entry *e = &es[i];
        if (end - p < 46 || lm_io_le32(d + p) != SIG_CENTRAL)
            return zerr(what, "bad central directory entry");
        e->flags = lm_io_le16(d + p + 8);
        e->method = lm_io_le16(d + p + 10);
        e->crc = lm_io_le32(d + p + 16);
        e->csize = lm_io_le32(d + p + 20);
        e->usize = lm_io_le32(d + p + 24);
        size_t nl = lm_io_le16(d + p + 28), xl = lm_io_le16(d + p + 30),
               cl = lm_io_le16(d + p + 32);
        uint32_t local = lm_io_le32(d + p + 42);
        e->local = local;
        if (nl + xl + cl > end - p - 46) return zerr(what, "central directory entry runs past its end");
        e->name = strndup((const char *)d + p + 46, nl);
        if (!e->name) return lm_error_set(LM_ERR_NOMEM, "%s: out of memory", what);
        if (zip64_extra(d + p + 46 + nl, xl, e, local == 0xFFFFFFFFu, what) != LM_OK)
            return LM_ERR_FORMAT;
        p += 46 + nl + xl + cl;
    }
    return LM_OK;
}

static int cmp_local(const void *a, const void *b)
{
    const zip_entry *x = a, *y = b;
    return x->local < y->local ? -1 : x->local > y->local;
}

/* Finds each member's data through its local header; checks ranges. */
static lm_status locate_data(const unsigned char *d, size_t size, const char *what,
                             zip_entry *es, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        zip_entry *e = &es[i];
        if (e->flags & 1) return zerr(what, "encrypted members are not supported");
        if (e->method != 0 && e->method != 8)
            return zerr(what, "member compressed with a method other than stored or deflate");
        if (e->local > size || size - e->local < 30 || lm_io_le32(d + e->local) != SIG_LOCAL)
            return zerr(what, "member's local header outside the file or damaged");
        uint64_t start = e->local + 30 + lm_io_le16(d + e->local + 26) +
                         (uint64_t)lm_io_le16(d + e->local + 28);
        if (start > size || e->csize > size - start)
            return zerr(what, "member data runs past the end of the file (truncated?)");
        e->start = start;
        e->end = start + e->csize;
        if (e->method == 0 && e->csize != e->usize)
            return zerr(what, "stored member whose sizes differ");
        if (e->method == 8 && e->usize / DEFLATE_MAX_RATIO > e->csize + 64)
            return zerr(what, "deflated member claims an impossible size");
    }
    qsort(es, n, sizeof *es, cmp_local);
    for (size_t i = 1; i < n; i++)
        if (es[i].local < es[i - 1].end) return zerr(what, "members overlap");
    return LM_OK;
}

static lm_status inflate_member(const unsigned char *src, const zip_entry *e,
                                unsigned char *dst, const char *what)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, -15) != Z_OK) return zerr(what, "zlib init failed");
    uint64_t in_left = e->csize, out_left = e->usize;
    z.next_in = (unsigned char *)src;
    z.next_out = dst;
    int rc = Z_OK;
    while (rc == Z_OK) {
        /* zlib counts in 32 bits: feed big members in pieces */
        if (z.avail_in == 0) {
            z.avail_in = (uInt)(in_left < (1u << 30) ? in_left : (1u << 30));
            in_left -= z.avail_in;
        }
        if (z.avail_out == 0) {
            z.avail_out = (uInt)(out_left < (1u << 30) ? out_left : (1u << 30));
            out_left -= z.avail_out;
        }
        rc = inflate(&z, Z_NO_FLUSH);
        /* out of a piece, not of data: refill and go on */
        if (rc == Z_BUF_ERROR && ((!z.avail_in && in_left) || (!z.avail_out && out_left)))
            rc = Z_OK;
    }
    uint64_t produced = e->usize - out_left - z.avail_out;
    inflateEnd(&z);
    if (rc != Z_STREAM_END) return zerr(what, "corrupt deflate data");
    if (produced != e->usize) return zerr(what, "deflate data shorter than its stated size");
    return LM_OK;
}

static lm_status extract(const unsigned char *d, const zip_entry *e, const char *what,
                         lm_zip_member *m)
{
    m->data = malloc(e->usize ? (size_t)e->usize : 1);
    if (!m->data) return lm_error_set(LM_ERR_NOMEM, "%s: cannot allocate %llu bytes for %s",
                                      what, (unsigned long long)e->usize, e->name);
    m->size = (size_t)e->usize;
    if (e->method == 0) memcpy(m->data, d + e->start, m->size);
    else if (inflate_member(d + e->start, e, m->data, what) != LM_OK) return LM_ERR_FORMAT;
    if (crc32_z(0, m->data, m->size) != e->crc)
        return lm_error_set(LM_ERR_FORMAT, "%s: zip member %s: CRC mismatch (corrupt)", what,
                            e->name);
    return LM_OK;
}

lm_status lm_zip_read(const unsigned char *d, size_t size, const char *what,
                      lm_zip_member **members, int *count)
{
    *members = NULL;
    *count = 0;
    zip_dir dir = {0, 0, 0};
    if (find_dir(d, size, what, &dir) != LM_OK) return LM_ERR_FORMAT;
    if (dir.count > 1000000) return zerr(what, "too many members");
    size_t n = (size_t)dir.count;
    zip_entry *es = calloc(n + 1, sizeof *es);
    lm_zip_member *ms = calloc(n + 1, sizeof *ms);
    lm_status st = es && ms ? LM_OK : lm_error_set(LM_ERR_NOMEM, "%s: out of memory", what);
    if (st == LM_OK) st = read_central(d, what, &dir, es);
    if (st == LM_OK) st = locate_data(d, size, what, es, n);
    size_t done = 0;
    for (; st == LM_OK && done < n; done++) {
        st = extract(d, &es[done], what, &ms[done]);
        ms[done].name = es[done].name;
        es[done].name = NULL;
    }
    for (size_t i = 0; es && i < n; i++) free(es[i].name);
    free(es);
    if (st != LM_OK) {
        for (size_t i = 0; ms && i < done; i++) {
            free(ms[i].name);
            free(ms[i].data);
        }
        free(ms);
        return st;
    }
    *members = ms;
    *count = (int)n;
    return LM_OK;
}

/* ---- writing ---- */

static lm_status deflate_raw(const unsigned char *src, size_t n, unsigned char **out,
                             size_t *outn)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return lm_error_set(LM_ERR_NOMEM, "npz: zlib init failed");
    size_t cap = deflateBound(&z, (uLong)n);
    *out = malloc(cap);
    if (!*out) {
        deflateEnd(&z);
        return lm_error_set(LM_ERR_NOMEM, "npz: out of memory compressing %zu bytes", n);
    }
    z.next_in = (unsigned char *)src;
    z.avail_in = (uInt)n;
    z.next_out = *out;
    z.avail_out = (uInt)cap;
    int rc = deflate(&z, Z_FINISH);
    *outn = cap - z.avail_out;
    deflateEnd(&z);
    if (rc != Z_STREAM_END) {
        free(*out);
        return lm_error_set(LM_ERR_IO, "npz: deflate failed");
    }
    return LM_OK;
}

/* The fields local and central headers share, from "version needed" on. */
static void common_fields(unsigned char *p, uint16_t method, uint32_t crc, uint32_t csize,
                          uint32_t usize, uint16_t nlen)
{
    lm_io_put16(p, 20);          /* version needed: 2.0 */
    lm_io_put16(p + 2, 0);       /* flags */
    lm_io_put16(p + 4, method);
    lm_io_put16(p + 6, 0);       /* time 00:00 */
    lm_io_put16(p + 8, 0x21);    /* date 1980-01-01: reproducible files */
    lm_io_put32(p + 10, crc);
    lm_io_put32(p + 14, csize);
    lm_io_put32(p + 18, usize);
    lm_io_put16(p + 22, nlen);
    lm_io_put16(p + 24, 0);      /* extra length */
}

lm_status lm_zip_write(lm_io_out *o, int n, const char *const *names,
                       const unsigned char *const *datas, const size_t *sizes, bool deflate)
{
    if (n > 0xFFFF) return lm_error_set(LM_ERR_ARG, "npz: more than 65535 members");
    size_t cdcap = 1;
    for (int i = 0; i < n; i++) {
        if (strlen(names[i]) > 0xFFFF || sizes[i] > 0xFFFFFFFFu)
            return lm_error_set(LM_ERR_ARG, "npz: member %s too large (zip64 is not written)",
                                names[i]);
        cdcap += 46 + strlen(names[i]);
    }
    unsigned char *cd = malloc(cdcap);
    if (!cd) return lm_error_set(LM_ERR_NOMEM, "npz: out of memory");
    size_t cdn = 0;
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        size_t nl = strlen(names[i]), cn = sizes[i];
        unsigned char *packed = NULL;
        const unsigned char *body = datas[i];
        if (deflate && deflate_raw(datas[i], sizes[i], &packed, &cn) != LM_OK) {
            free(cd);
            return lm_error_status();
        }
        if (packed) body = packed;
        if (off + 30 + nl + cn > 0xFFFFFFFFu) {
            free(packed);
            free(cd);
            return lm_error_set(LM_ERR_ARG, "npz: member %s too large (zip64 is not written)",
                                names[i]);
        }
        uint32_t crc = (uint32_t)crc32_z(0, datas[i], sizes[i]);
        unsigned char lh[30], *ch = cd + cdn;
        lm_io_put32(lh, SIG_LOCAL);
        common_fields(lh + 4, deflate ? 8 : 0, crc, (uint32_t)cn, (uint32_t)sizes[i], (uint16_t)nl);
        lm_io_put32(ch, SIG_CENTRAL);
        lm_io_put16(ch + 4, 20);                 /* version made by */
        common_fields(ch + 6, deflate ? 8 : 0, crc, (uint32_t)cn, (uint32_t)sizes[i], (uint16_t)nl);
        memset(ch + 32, 0, 10);                  /* comment, disk, attributes */
        lm_io_put32(ch + 42, (uint32_t)off);
        memcpy(ch + 46, names[i], nl);
        cdn += 46 + nl;
        lm_io_out_write(o, lh, 30);
        lm_io_out_write(o, names[i], nl);
        lm_io_out_write(o, body, cn);
        off += 30 + nl + cn;
        free(packed);
    }
    unsigned char eocd[22] = {0};
    lm_io_put32(eocd, SIG_EOCD);
    lm_io_put16(eocd + 8, (uint16_t)n);
    lm_io_put16(eocd + 10, (uint16_t)n);
    lm_io_put32(eocd + 12, (uint32_t)cdn);
    lm_io_put32(eocd + 16, (uint32_t)off);
    lm_io_out_write(o, cd, cdn);
    lm_io_out_write(o, eocd, 22);
    free(cd);
    return LM_OK;
}
