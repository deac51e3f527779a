/* gather.c - reading strided, broadcast arrays into contiguous blocks, and
 * writing blocks back through strides (for in-place assignment). */
#include <stdlib.h>
#include <string.h>
#include "cpu.h"
#include "vmath.h"

void lm_cpu_convert(void *dst, lm_dtype dt, const void *src, lm_dtype st, int64_t n)
{
    if (dt == LM_F32 && st == LM_F16) lm_vm->f16_to_f32(dst, src, n);
    else if (dt == LM_F32 && st == LM_BF16) lm_vm->bf16_to_f32(dst, src, n);
    else if (dt == LM_F16 && st == LM_F32) lm_vm->f32_to_f16(dst, src, n);
    else if (dt == LM_BF16 && st == LM_F32) lm_vm->f32_to_bf16(dst, src, n);
    else lm_convert(dst, dt, src, st, (size_t)n);
}

/* Drops size-1 dims and merges dims that are contiguous with each other. */
static int collapse(int ndim, const int64_t *shape, const int64_t *strides, int64_t *sh, int64_t *st)
{
    int n = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 1) continue;
        if (n > 0 && st[n - 1] == strides[d] * shape[d]) {
            sh[n - 1] *= shape[d];
            st[n - 1] = strides[d];
        } else {
            sh[n] = shape[d];
            st[n++] = strides[d];
        }
    }
    if (n == 0) { sh[0] = 1; st[0] = 1; n = 1; }
    return n;
}

/* copies `count` elements of size esz with a source stride */
static void strided_copy(void *dst, const char *src, int64_t stride, int64_t count, size_t esz)
{
    if (stride == 1) { memcpy(dst, src, (size_t)count * esz); return; }
    switch (esz) {
    case 4: for (int64_t i = 0; i < count; i++) ((uint32_t *)dst)[i] = ((const uint32_t *)src)[i * stride]; break;
    case 8: for (int64_t i = 0; i < count; i++) ((uint64_t *)dst)[i] = ((const uint64_t *)src)[i * stride]; break;
    case 2: for (int64_t i = 0; i < count; i++) ((uint16_t *)dst)[i] = ((const uint16_t *)src)[i * stride]; break;
    default: for (int64_t i = 0; i < count; i++) ((uint8_t *)dst)[i] = ((const uint8_t *)src)[i * stride]; break;
    }
}

void lm_cpu_gather(void *dst, lm_dtype dt, const void *base, lm_dtype st, int ndim,
                   const int64_t *shape, const int64_t *strides, int64_t start, int64_t count)
{
    int64_t sh[LM_MAX_DIMS], sd[LM_MAX_DIMS], idx[LM_MAX_DIMS];
    if (count <= 0) return;
    int n = collapse(ndim, shape, strides, sh, sd);
    size_t ssz = lm_dtype_size(st), dsz = lm_dtype_size(dt);
    /* multi-index of `start` */
    int64_t rem = start, off = 0;
    for (int d = n - 1; d >= 0; d--) {
        idx[d] = rem % sh[d];
        rem /= sh[d];
        off += idx[d] * sd[d];
    }
    char tmp[4096 * 8];
    char *out = dst;
    while (count > 0) {
        int64_t run = sh[n - 1] - idx[n - 1];
        if (run > count) run = count;
        const char *src = (const char *)base + off * (int64_t)ssz;
        if (dt == st) {
            strided_copy(out, src, sd[n - 1], run, ssz);
        } else if (sd[n - 1] == 1) {
            lm_cpu_convert(out, dt, src, st, (size_t)run);
        } else {
            for (int64_t done = 0; done < run;) {
                int64_t m = run - done < 4096 ? run - done : 4096;
                strided_copy(tmp, src + done * sd[n - 1] * (int64_t)ssz, sd[n - 1], m, ssz);
                lm_cpu_convert(out + done * (int64_t)dsz, dt, tmp, st, (size_t)m);
                done += m;
            }
        }
        out += run * (int64_t)dsz;
        count -= run;
        /* advance the multi-index by run */
        off += run * sd[n - 1];
        idx[n - 1] += run;
        for (int d = n - 1; d > 0 && idx[d] == sh[d]; d--) {
            off -= sh[d] * sd[d];
            idx[d] = 0;
            idx[d - 1]++;
            off += sd[d - 1];
        }
    }
}

void lm_cpu_scatter(void *base, lm_dtype dt, int ndim, const int64_t *shape, const int64_t *strides,
                    int64_t start, int64_t count, const void *src)
{
    int64_t sh[LM_MAX_DIMS], sd[LM_MAX_DIMS], idx[LM_MAX_DIMS];
    if (count <= 0) return;
    int n = collapse(ndim, shape, strides, sh, sd);
    size_t esz = lm_dtype_size(dt);
    int64_t rem = start, off = 0;
    for (int d = n - 1; d >= 0; d--) {
        idx[d] = rem % sh[d];
        rem /= sh[d];
        off += idx[d] * sd[d];
    }
    const char *in = src;
    while (count > 0) {
        int64_t run = sh[n - 1] - idx[n - 1];
        if (run > count) run = count;
        char *o = (char *)base + off * (int64_t)esz;
        for (int64_t i = 0; i < run; i++)
            memcpy(o + i * sd[n - 1] * (int64_t)esz, in + i * (int64_t)esz, esz);
        in += run * (int64_t)esz;
        count -= run;
        off += run * sd[n - 1];
        idx[n - 1] += run;
        for (int d = n - 1; d > 0 && idx[d] == sh[d]; d--) {
            off -= sh[d] * sd[d];
            idx[d] = 0;
            idx[d - 1]++;
            off += sd[d - 1];
        }
    }
}

typedef struct { const lm_array *a; lm_dtype dt; void *out; } contig_ctx;

static void contig_task(void *p, int64_t b, int64_t e)
{
    contig_ctx *c = p;
    lm_cpu_gather((char *)c->out + b * (int64_t)lm_dtype_size(c->dt), c->dt, lm_cpu_ptr(c->a),
                  c->a->dtype, c->a->ndim, c->a->shape, c->a->strides, b, e - b);
}

void *lm_cpu_contiguous(const lm_array *a, lm_dtype dt, void **owned)
{
    *owned = NULL;
    if (a->dtype == dt && lm_array_is_contiguous(a)) return lm_cpu_ptr(a);
    void *p = lm_cpu_scratch((size_t)(a->size ? a->size : 1) * lm_dtype_size(dt));
    if (!p) {
        lm_error_set(LM_ERR_NOMEM, "out of host memory for a %lld-element copy", (long long)a->size);
        return NULL;
    }
    *owned = p;
    if (a->dtype == dt && lm_cpu_transpose_copy(p, a)) return p;
    contig_ctx c = {a, dt, p};
    lm_cpu_parallel_for(a->size, 1 << 16, contig_task, &c);
    return p;
}

/* A transposed layout ([..., R, C] whose R axis has stride 1) read row by
 * row touches a new cache line and often a new page per element.  Copied
 * by blocks instead: 4-byte elements in blocks of TR x TC (a band of TC
 * source rows read front to back, whole destination lines written)
 * through the vmath table's register transposes (the op, if any, applied
 * to each small block in L1 before it is written); other sizes in 32x32
 * tiles of plain moves.  An output far larger than the caches is written
 * with streamed stores (no read of each line before it is written) in
 * blocks of 64 x 512, long runs of whole lines.  Writes a's elements in row-major order to dst
 * (a's dtype); false when a has another layout. */
#define TS 32
#define TR 128
#define TC 128
typedef struct {
    const lm_array *a;
    char *dst;
    int64_t R, C, sB, sC, B, ur, uc;   /* ur x uc: the block */
    size_t esz;
    lm_cpu_seg_fn fn;
    void *fn_ctx;
    bool nt;   /* output far larger than the caches: streamed stores */
    const lm_array *b;   /* a second operand: of a's layout, or row-major (b_rows) */
    lm_cpu_pair_fn pair;
    bool b_rows;
} tr_ctx;

static void transpose_task(void *p, int64_t b0, int64_t e0)
{
    tr_ctx *t = p;
    const char *src = lm_cpu_ptr(t->a);
    int64_t tiles_r = (t->R + t->ur - 1) / t->ur, tiles_c = (t->C + t->uc - 1) / t->uc;
    for (int64_t task = b0; task < e0; task++) {
        /* column bands outermost, so a task reads its band's rows front to back */
        int64_t bi = task / (tiles_r * tiles_c), tc = (task / tiles_r) % tiles_c, tr = task % tiles_r;
        int64_t r0 = tr * t->ur, c0 = tc * t->uc;
        int64_t r1 = r0 + t->ur < t->R ? r0 + t->ur : t->R, c1 = c0 + t->uc < t->C ? c0 + t->uc : t->C;
        const char *sb = src + bi * t->sB * (int64_t)t->esz;
        char *db = t->dst + bi * t->R * t->C * (int64_t)t->esz;
        if (t->pair && t->b_rows) {
            /* b in the output's order: a's tile transposed into cache, then
             * the op with b's rows straight into the output */
            _Alignas(64) float buf[TR / 2 * TC];
            const char *bb = (const char *)lm_cpu_ptr(t->b) + bi * t->R * t->C * 4;
            int64_t h = r1 - r0, w = c1 - c0;
            lm_vm->transpose32(buf, w, sb + (c0 * t->sC + r0) * 4, t->sC, h, w, NULL, NULL, false);
            for (int64_t r = 0; r < h; r++) {
                int64_t off = ((r0 + r) * t->C + c0) * 4;
                t->pair(t->fn_ctx, db + off, buf + r * w, bb + off, w);
            }
            continue;
        }
        if (t->pair) {
            /* a and b share a layout: the op on their source rows into a
             * tile in cache, then the tile transposed out */
            _Alignas(64) float buf[TR / 2 * TC];
            const char *bb = (const char *)lm_cpu_ptr(t->b) + bi * t->sB * 4;
            int64_t h = r1 - r0, w = c1 - c0;
            for (int64_t k = 0; k < w; k++) {
                int64_t off = ((c0 + k) * t->sC + r0) * 4;
                t->pair(t->fn_ctx, buf + k * h, sb + off, bb + off, h);
            }
            lm_vm->transpose32(db + (r0 * t->C + c0) * 4, t->C, buf, h, h, w, NULL, NULL, t->nt);
            continue;
        }
        if (t->esz == 4) {
            lm_vm->transpose32(db + (r0 * t->C + c0) * 4, t->C, sb + (c0 * t->sC + r0) * 4, t->sC, r1 - r0, c1 - c0,
                               t->fn, t->fn_ctx, t->nt);
            continue;
        }
#define TILE(T) \
        for (int64_t c = c0; c < c1; c++) \
            for (int64_t r = r0; r < r1; r++) \
                ((T *)db)[r * t->C + c] = ((const T *)sb)[r + c * t->sC]
        switch (t->esz) {
        case 8: TILE(uint64_t); break;
        case 2: TILE(uint16_t); break;
        default: TILE(uint8_t); break;
        }
#undef TILE
        if (t->fn)
            for (int64_t r = r0; r < r1; r++) t->fn(t->fn_ctx, db + (r * t->C + c0) * (int64_t)t->esz, c1 - c0);
    }
}

bool lm_cpu_transpose_map(void *dst, const lm_array *a, lm_cpu_seg_fn fn, void *ctx)
{
    int64_t sh[LM_MAX_DIMS], sd[LM_MAX_DIMS];
    int n = collapse(a->ndim, a->shape, a->strides, sh, sd);
    if (n < 2 || n > 3 || sd[n - 2] != 1 || sd[n - 1] == 1) return false;
    size_t esz = lm_dtype_size(a->dtype);
    bool nt = esz == 4 && lm_array_nbytes(a) >= (16u << 20);
    tr_ctx t = {a, dst, sh[n - 2], sh[n - 1], n == 3 ? sd[0] : 0, sd[n - 1], n == 3 ? sh[0] : 1,
                esz != 4 ? TS : nt ? TR / 2 : TR, esz != 4 ? TS : nt ? TC * 4 : TC, esz, fn, ctx, nt, NULL, NULL, false};
    int64_t work = t.B * ((t.R + t.ur - 1) / t.ur) * ((t.C + t.uc - 1) / t.uc);
    lm_cpu_parallel_for(work, esz == 4 ? 1 : 16, transpose_task, &t);
    return true;
}

bool lm_cpu_transpose_map2(void *dst, const lm_array *a, const lm_array *b, lm_cpu_pair_fn fn, void *ctx)
{
    int64_t sh[LM_MAX_DIMS], sd[LM_MAX_DIMS];
    if (lm_dtype_size(a->dtype) != 4 || lm_dtype_size(b->dtype) != 4 || a->ndim != b->ndim) return false;
    bool same = true;
    for (int d = 0; d < a->ndim; d++) {
        if (a->shape[d] != b->shape[d]) return false;
        if (a->shape[d] != 1 && a->strides[d] != b->strides[d]) same = false;
    }
    if (!same && !lm_array_is_contiguous(b)) return false;
    int n = collapse(a->ndim, a->shape, a->strides, sh, sd);
    if (n < 2 || n > 3 || sd[n - 2] != 1 || sd[n - 1] == 1) return false;
    tr_ctx t = {a, dst, sh[n - 2], sh[n - 1], n == 3 ? sd[0] : 0, sd[n - 1], n == 3 ? sh[0] : 1, TR / 2, TC, 4,
                NULL, ctx, same && lm_array_nbytes(a) >= (16u << 20), b, fn, !same};
    int64_t work = t.B * ((t.R + t.ur - 1) / t.ur) * ((t.C + t.uc - 1) / t.uc);
    lm_cpu_parallel_for(work, 1, transpose_task, &t);
    return true;
}

bool lm_cpu_transpose_copy(void *dst, const lm_array *a)
{
    return lm_cpu_transpose_map(dst, a, NULL, NULL);
}
