/* nn_conv_wgrad.c - conv2d with a kernel much larger than its output: the
 * shape of a weight gradient (core/grad_rules.c computes d loss / d w of a
 * conv as conv(x^T, g^T), whose "kernel" is the whole OHxOW gradient and
 * whose output is the KHxKW weight).
 *
 * im2col would unfold one row per kernel element (Ci*KH*KW rows of a few
 * columns each), copying three floats at a time, into a GEMM with a
 * handful of columns.  Here the unfolding is transposed: one row per
 * output element (b, oy, ox), holding the input window under the kernel
 * (KW contiguous floats at a time for an undilated kernel), and one GEMM
 * Y^T [B*OH*OW, Co] = T [B*OH*OW, Ci*KH*KW] x W^T.  The rows of Y^T are
 * split among the pool's threads, each unfolding its rows into its own
 * buffer and calling a single-threaded GEMM (as conv2d's im2col path
 * does: OpenBLAS's own threads wait by spinning, which costs dearly on a
 * loaded machine); input channels go in bands so a buffer stays near
 * BAND_BYTES, the bands accumulating (beta = 1) in channel order.  The
 * rows per item and channels per band depend on the problem only, so the
 * bits do not depend on the thread count. */
#include <stdlib.h>
#include "nn.h"

#define BAND_BYTES (8u << 20)
#define WANT_ITEMS 64

typedef struct {
    const char *x;            /* [B, Ci, H, W] */
    const char *w;            /* [Co, Ci*KH*KW] */
    char *yt;                 /* [B*OH*OW, Co] */
    size_t esz;
    int64_t Ci, H, W, KH, KW, OH, OW, sh, sw, pt, pl, dh, dw, Co;
    int64_t rows, rb, cc;     /* rows of Y^T (B*OH*OW), rows per item, input channels per band */
    int failed;               /* 1 out of memory, 2 cancelled */
} wg_ctx;

static void wg_rows(const wg_ctx *c, char *t, int64_t r0, int64_t r1, int64_t c0, int64_t cn)
{
    size_t esz = c->esz;
    for (int64_t r = r0; r < r1; r++) {
        int64_t ox = r % c->OW, oy = (r / c->OW) % c->OH, b = r / (c->OW * c->OH);
        int64_t ix0 = ox * c->sw - c->pl;
        /* kernel columns kx whose input column ix0 + kx*dw is inside [0, W) */
        int64_t lo = ix0 >= 0 ? 0 : (-ix0 + c->dw - 1) / c->dw;
        int64_t hi = c->W - ix0 <= 0 ? 0 : (c->W - ix0 + c->dw - 1) / c->dw;
        if (hi > c->KW) hi = c->KW;
        if (lo > hi) lo = hi;
        char *dst = t + (r - r0) * cn * c->KH * c->KW * (int64_t)esz;
        for (int64_t ci = 0; ci < cn; ci++) {
            const char *plane = c->x + ((b * c->Ci + c0 + ci) * c->H * c->W) * (int64_t)esz;
            for (int64_t ky = 0; ky < c->KH; ky++, dst += c->KW * (int64_t)esz) {
                int64_t iy = oy * c->sh - c->pt + ky * c->dh;
                if (iy < 0 || iy >= c->H) {
                    memset(dst, 0, (size_t)c->KW * esz);
                    continue;
                }
                const char *row = plane + iy * c->W * (int64_t)esz;
                memset(dst, 0, (size_t)lo * esz);
                if (c->dw == 1) {
                    memcpy(dst + lo * (int64_t)esz, row + (ix0 + lo) * (int64_t)esz, (size_t)(hi - lo) * esz);
                } else if (esz == 4) {
                    for (int64_t kx = lo; kx < hi; kx++) ((float *)dst)[kx] = ((const float *)row)[ix0 + kx * c->dw];
                } else {
                    for (int64_t kx = lo; kx < hi; kx++) ((double *)dst)[kx] = ((const double *)row)[ix0 + kx * c->dw];
                }
                memset(dst + hi * (int64_t)esz, 0, (size_t)(c->KW - hi) * esz);
            }
        }
    }
}

/* items i: rows [i*rb, (i+1)*rb) of Y^T, unfolded a band of channels at a
 * time into this task's buffer, each band one single-threaded GEMM */
static void wg_task(void *p, int64_t i0, int64_t i1)
{
    wg_ctx *c = p;
    size_t esz = c->esz;
    int64_t KK = c->KH * c->KW;
    char *t = malloc((size_t)(c->rb * c->cc * KK) * esz);
    if (!t) {
        __atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t i = i0; i < i1; i++) {
        int64_t r0 = i * c->rb, r1 = r0 + c->rb;
        if (r1 > c->rows) r1 = c->rows;
        for (int64_t c0 = 0; c0 < c->Ci; c0 += c->cc) {
            if (lm_cancel_requested()) {
                __atomic_store_n(&c->failed, 2, __ATOMIC_RELAXED);
                free(t);
                return;
            }
            int64_t cn = c->Ci - c0 < c->cc ? c->Ci - c0 : c->cc, k = cn * KK;
            wg_rows(c, t, r0, r1, c0, cn);
            const char *wb = c->w + c0 * KK * (int64_t)esz;   /* W's columns of the band */
            char *y = c->yt + r0 * c->Co * (int64_t)esz;
            if (esz == 8)
                lm_dgemm(LM_CBLAS_NOTRANS, LM_CBLAS_TRANS, (int)(r1 - r0), (int)c->Co, (int)k, 1.0,
                         (const double *)t, (int)k, (const double *)wb, (int)(c->Ci * KK), c0 ? 1.0 : 0.0,
                         (double *)y, (int)c->Co);
            else
                lm_sgemm(LM_CBLAS_NOTRANS, LM_CBLAS_TRANS, (int)(r1 - r0), (int)c->Co, (int)k, 1.0f,
                         (const float *)t, (int)k, (const float *)wb, (int)(c->Ci * KK), c0 ? 1.0f : 0.0f,
                         (float *)y, (int)c->Co);
        }
    }
    free(t);
}

lm_status nn_conv_wgrad(const void *x, const void *w, void *out, bool f64, int64_t B, int64_t Ci, int64_t H,
                        int64_t W, int64_t Co, int64_t KH, int64_t KW, int64_t OH, int64_t OW,
                        const int64_t *p)
{
    size_t esz = f64 ? 8 : 4;
    int64_t M = B * OH * OW, KK = KH * KW;
    char *yt = malloc((size_t)(M * Co) * esz);
    if (!yt) return lm_error_set(LM_ERR_NOMEM, "conv2d: out of host memory for a [%lld,%lld] product",
                                 (long long)M, (long long)Co);
    wg_ctx c = {x, w, yt, esz, Ci, H, W, KH, KW, OH, OW, p[0], p[1], p[2], p[3], p[6], p[7], Co, M, 0, 0, 0};
    /* a few items per thread of a large machine (a constant: the rows per
     * GEMM set its bits); each unfolds at most BAND_BYTES */
    c.rb = (M + WANT_ITEMS - 1) / WANT_ITEMS;
    if (c.rb < 16) c.rb = 16;
    if (c.rb > M) c.rb = M;
    c.cc = (int64_t)(BAND_BYTES / ((size_t)c.rb * (size_t)KK * esz));
    if (c.cc < 1) c.cc = 1;
    if (c.cc > Ci) c.cc = Ci;
    lm_cpu_parallel_for((M + c.rb - 1) / c.rb, 1, wg_task, &c);
    if (c.failed) {
        free(yt);
        if (c.failed == 2) return lm_error_set(LM_ERR_CANCELLED, "conv2d: interrupted");
        return lm_error_set(LM_ERR_NOMEM, "conv2d: out of host memory for a %lldx%lld unfolded band",
                            (long long)c.rb, (long long)(c.cc * KK));
    }
    /* Y^T [(b, oy, ox), co] -> Y [b, co, oy, ox] */
    int64_t P = OH * OW;
    for (int64_t b = 0; b < B; b++)
        for (int64_t co = 0; co < Co; co++)
            for (int64_t q = 0; q < P; q++) {
                int64_t s = (b * P + q) * Co + co, d = (b * Co + co) * P + q;
                if (f64) ((double *)out)[d] = ((const double *)yt)[s];
                else ((float *)out)[d] = ((const float *)yt)[s];
            }
    free(yt);
    return LM_OK;
}
