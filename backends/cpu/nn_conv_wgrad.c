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
 * Y^T [B*OH*OW, Co] = T [B*OH*OW, Ci*KH*KW] x W^T.  Input channels are
 * taken in bands so T stays near BAND_BYTES; the bands accumulate
 * (beta = 1).  T's rows are filled on the pool, the GEMM is OpenBLAS's
 * threaded one. */
#include <stdlib.h>
#include "nn.h"

#define BAND_BYTES (8u << 20)

typedef struct {
    const char *x;            /* [B, Ci, H, W] */
    char *t;                  /* [B*OH*OW, cc*KH*KW] */
    size_t esz;
    int64_t Ci, H, W, KH, KW, OH, OW, sh, sw, pt, pl, dh, dw;
    int64_t c0, cc;           /* band of input channels */
} wg_ctx;

static void wg_rows(void *p, int64_t r0, int64_t r1)
{
    const wg_ctx *c = p;
    size_t esz = c->esz;
    int64_t KK = c->KH * c->KW, ld = c->cc * KK;
    for (int64_t r = r0; r < r1; r++) {
        int64_t ox = r % c->OW, oy = (r / c->OW) % c->OH, b = r / (c->OW * c->OH);
        int64_t ix0 = ox * c->sw - c->pl;
        /* kernel columns kx whose input column ix0 + kx*dw is inside [0, W) */
        int64_t lo = ix0 >= 0 ? 0 : (-ix0 + c->dw - 1) / c->dw;
        int64_t hi = c->W - ix0 <= 0 ? 0 : (c->W - ix0 + c->dw - 1) / c->dw;
        if (hi > c->KW) hi = c->KW;
        if (lo > hi) lo = hi;
        char *dst = c->t + r * ld * (int64_t)esz;
        for (int64_t ci = 0; ci < c->cc; ci++) {
            const char *plane = c->x + ((b * c->Ci + c->c0 + ci) * c->H * c->W) * (int64_t)esz;
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

lm_status nn_conv_wgrad(const void *x, const void *w, void *out, bool f64, int64_t B, int64_t Ci, int64_t H,
                        int64_t W, int64_t Co, int64_t KH, int64_t KW, int64_t OH, int64_t OW,
                        const int64_t *p)
{
    size_t esz = f64 ? 8 : 4;
    int64_t M = B * OH * OW, KK = KH * KW;
    int64_t cc = (int64_t)(BAND_BYTES / ((size_t)M * (size_t)KK * esz));
    if (cc < 1) cc = 1;
    if (cc > Ci) cc = Ci;
    char *t = malloc((size_t)(M * cc * KK) * esz);
    char *yt = t ? malloc((size_t)(M * Co) * esz) : NULL;
    if (!yt) {
        free(t);
        return lm_error_set(LM_ERR_NOMEM, "conv2d: out of host memory for a %lldx%lld unfolded band",
                            (long long)M, (long long)(cc * KK));
    }
    wg_ctx c = {x, t, esz, Ci, H, W, KH, KW, OH, OW, p[0], p[1], p[2], p[3], p[6], p[7], 0, 0};
    for (int64_t c0 = 0; c0 < Ci; c0 += cc) {
        if (lm_cancel_requested()) {
            free(t);
            free(yt);
            return lm_error_set(LM_ERR_CANCELLED, "conv2d: interrupted");
        }
        c.c0 = c0;
        c.cc = Ci - c0 < cc ? Ci - c0 : cc;
        lm_cpu_parallel_for(M, 1, wg_rows, &c);
        int64_t k = c.cc * KK;
        const char *wb = (const char *)w + c0 * KK * (int64_t)esz;   /* W [Co, Ci*KK], columns of the band */
        if (f64)
            lm_dgemm(LM_CBLAS_NOTRANS, LM_CBLAS_TRANS, (int)M, (int)Co, (int)k, 1.0, (const double *)t, (int)k,
                     (const double *)wb, (int)(Ci * KK), c0 ? 1.0 : 0.0, (double *)yt, (int)Co);
        else
            lm_sgemm(LM_CBLAS_NOTRANS, LM_CBLAS_TRANS, (int)M, (int)Co, (int)k, 1.0f, (const float *)t, (int)k,
                     (const float *)wb, (int)(Ci * KK), c0 ? 1.0f : 0.0f, (float *)yt, (int)Co);
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
    free(t);
    free(yt);
    return LM_OK;
}
