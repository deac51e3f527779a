/* nn_conv.c - conv2d (conv1d is conv2d with H = 1) and conv_transpose2d.
 *
 * conv2d: for each image and group, the input is unfolded (im2col) a band
 * of output rows at a time into a [C/g*KH*KW, rows*OW] matrix, and one GEMM
 * with the weights [O/g, C/g*KH*KW] writes that band of the output in place
 * (ldc = OH*OW).  Bands keep the unfolded matrix near the caches' size
 * instead of 9x the input for a 3x3 kernel.  A 1x1 stride-1 unpadded conv
 * skips the unfolding.  GEMMs run on OpenBLAS's threads (called from this
 * thread only: OpenBLAS is not called from inside pool tasks); unfolding and
 * bias run on the pool.  f32/f16/bf16 compute in f32 (sgemm), f64 in f64.
 *
 * conv_transpose2d: col = W_g^T x_g (GEMM) for a band of input rows, then
 * col2im adds each column into the output (one output channel per task, so
 * no two tasks write the same element). */
#include <stdlib.h>
#include "nn.h"

#define BAND_BYTES (4u << 20)

typedef struct {
    const char *x;            /* one image, one group: [Cg, H, W] in ct */
    char *col;                /* [K, ncols] */
    size_t esz;
    int64_t H, W, KH, KW, sh, sw, pt, pl, dh, dw, OW;
    int64_t oy0, rows;        /* band of output rows */
} im2col_ctx;

/* rows k = (c, kh, kw) of the unfolded band */
static void im2col_task(void *p, int64_t k0, int64_t k1)
{
    const im2col_ctx *c = p;
    int64_t ncols = c->rows * c->OW, KK = c->KH * c->KW;
    size_t esz = c->esz;
    for (int64_t k = k0; k < k1; k++) {
        int64_t ch = k / KK, kh = (k % KK) / c->KW, kw = k % c->KW;
        char *dst = c->col + k * ncols * (int64_t)esz;
        /* output columns ox whose input column ix = ox*sw - pl + kw*dw is inside [0, W) */
        int64_t off = kw * c->dw - c->pl;
        int64_t lo = off >= 0 ? 0 : (-off + c->sw - 1) / c->sw;
        int64_t hi = c->W - off <= 0 ? 0 : (c->W - off + c->sw - 1) / c->sw;
        if (hi > c->OW) hi = c->OW;
        if (lo > hi) lo = hi;
        for (int64_t r = 0; r < c->rows; r++, dst += c->OW * (int64_t)esz) {
            int64_t iy = (c->oy0 + r) * c->sh - c->pt + kh * c->dh;
            if (iy < 0 || iy >= c->H) {
                memset(dst, 0, (size_t)c->OW * esz);
                continue;
            }
            const char *src = c->x + ((ch * c->H + iy) * c->W) * (int64_t)esz;
            memset(dst, 0, (size_t)lo * esz);
            if (c->sw == 1) {
                memcpy(dst + lo * (int64_t)esz, src + (lo + off) * (int64_t)esz, (size_t)(hi - lo) * esz);
            } else if (esz == 4) {
                for (int64_t ox = lo; ox < hi; ox++)
                    ((float *)dst)[ox] = ((const float *)src)[ox * c->sw + off];
            } else {
                for (int64_t ox = lo; ox < hi; ox++)
                    ((double *)dst)[ox] = ((const double *)src)[ox * c->sw + off];
            }
            memset(dst + hi * (int64_t)esz, 0, (size_t)(c->OW - hi) * esz);
        }
    }
}

static void gemm(lm_dtype ct, int ta, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                 const void *b, int64_t ldb, double beta, void *c, int64_t ldc)
{
    if (ct == LM_F64)
        lm_dgemm(ta, LM_CBLAS_NOTRANS, (int)m, (int)n, (int)k, 1.0, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
    else
        lm_sgemm(ta, LM_CBLAS_NOTRANS, (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b, (int)ldb, (float)beta, c,
                 (int)ldc);
}

typedef struct { void *out; const void *bias; int64_t O, plane; lm_dtype ct; } bias_ctx;

/* planes r = n * O + o of out [N, O, plane] get bias[o] added */
static void bias_task(void *p, int64_t b, int64_t e)
{
    const bias_ctx *c = p;
    for (int64_t r = b; r < e; r++) {
        if (c->ct == LM_F64) {
            double *o = (double *)c->out + r * c->plane, v = ((const double *)c->bias)[r % c->O];
            for (int64_t i = 0; i < c->plane; i++) o[i] += v;
        } else {
            float *o = (float *)c->out + r * c->plane, v = ((const float *)c->bias)[r % c->O];
            for (int64_t i = 0; i < c->plane; i++) o[i] += v;
        }
    }
}

static void add_bias(void *out, const void *bias, int64_t N, int64_t O, int64_t plane, lm_dtype ct)
{
    bias_ctx c = {out, bias, O, plane, ct};
    lm_cpu_parallel_for(N * O, plane >= 4096 ? 1 : 4096 / plane + 1, bias_task, &c);
}

/* the node's output in ct: its own buffer, or a staging copy (f16/bf16) */
static void *out_begin(lm_array *node, lm_dtype ct, float **stage)
{
    if (ct == LM_F64) {
        *stage = NULL;
        return lm_cpu_ptr(node);
    }
    return nn_out_begin(node, stage);
}

lm_status lm_nn_conv(lm_array *node)
{
    const lm_params *p = &node->params;
    const lm_array *x = node->inputs[0], *w = node->inputs[1];
    lm_dtype ct = node->dtype == LM_F64 ? LM_F64 : LM_F32;
    size_t esz = lm_dtype_size(ct);
    int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    int64_t O = w->shape[0], KH = w->shape[2], KW = w->shape[3], G = p->i[8];
    int64_t OH = node->shape[2], OW = node->shape[3], Cg = C / G, Og = O / G, K = Cg * KH * KW;
    void *ox = NULL, *ow = NULL, *ob = NULL, *col = NULL;
    float *stage = NULL;
    lm_status st = LM_OK;
    const char *xd = lm_cpu_contiguous(x, ct, &ox);
    const char *wd = xd ? lm_cpu_contiguous(w, ct, &ow) : NULL;
    const char *bd = wd && p->i[9] ? lm_cpu_contiguous(node->inputs[2], ct, &ob) : NULL;
    char *out = wd && (bd || !p->i[9]) ? out_begin(node, ct, &stage) : NULL;
    if (!out) { st = lm_error_status(); goto done; }
    bool direct = KH == 1 && KW == 1 && p->i[0] == 1 && p->i[1] == 1 && p->i[2] == 0 && p->i[3] == 0 &&
                  p->i[4] == 0 && p->i[5] == 0;
    int64_t band = (int64_t)(BAND_BYTES / ((size_t)K * esz * (size_t)OW));
    if (band < 1) band = 1;
    if (band > OH) band = OH;
    if (!direct && !(col = malloc((size_t)(K * band * OW) * esz))) {
        st = lm_error_set(LM_ERR_NOMEM, "conv2d: out of host memory for a %lldx%lld unfolded band",
                          (long long)K, (long long)(band * OW));
        goto done;
    }
    for (int64_t n = 0; n < N; n++) {
        for (int64_t g = 0; g < G; g++) {
            const char *xg = xd + ((n * C + g * Cg) * H * W) * (int64_t)esz;
            const char *wg = wd + (g * Og * K) * (int64_t)esz;
            char *og = out + ((n * O + g * Og) * OH * OW) * (int64_t)esz;
            if (lm_cancel_requested()) { st = lm_error_set(LM_ERR_CANCELLED, "conv2d: interrupted"); goto done; }
            if (direct) {
                gemm(ct, LM_CBLAS_NOTRANS, Og, OH * OW, K, wg, K, xg, H * W, 0.0, og, OH * OW);
                continue;
            }
            for (int64_t oy0 = 0; oy0 < OH; oy0 += band) {
                int64_t rows = OH - oy0 < band ? OH - oy0 : band;
                im2col_ctx c = {xg, col, esz, H, W, KH, KW, p->i[0], p->i[1], p->i[2], p->i[3],
                                p->i[6], p->i[7], OW, oy0, rows};
                lm_cpu_parallel_for(K, 4, im2col_task, &c);
                gemm(ct, LM_CBLAS_NOTRANS, Og, rows * OW, K, wg, K, col, rows * OW, 0.0,
                     og + oy0 * OW * (int64_t)esz, OH * OW);
            }
        }
    }
    if (bd) add_bias(out, bd, N, O, OH * OW, ct);
done:
    if (stage) {
        if (st == LM_OK) nn_out_end(node, stage);
        else free(stage);
    }
    free(col);
    free(ox);
    free(ow);
    free(ob);
    return st;
}

/* ------------------------------------------------------- conv_transpose */

typedef struct {
    const char *col;          /* [Cog*KH*KW, rows*W] for input rows iy0.. */
    char *out;                /* this image's group: [Cog, OH, OW] */
    size_t esz;
    int64_t W, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, iy0, rows;
} col2im_ctx;

static void col2im_task(void *p, int64_t c0, int64_t c1)
{
    const col2im_ctx *c = p;
    int64_t ncols = c->rows * c->W, KK = c->KH * c->KW;
    for (int64_t co = c0; co < c1; co++)
        for (int64_t kk = 0; kk < KK; kk++) {
            int64_t kh = kk / c->KW, kw = kk % c->KW;
            const char *src = c->col + ((co * KK + kk) * ncols) * (int64_t)c->esz;
            for (int64_t r = 0; r < c->rows; r++) {
                int64_t oy = (c->iy0 + r) * c->sh - c->ph + kh * c->dh;
                if (oy < 0 || oy >= c->OH) continue;
                for (int64_t ix = 0; ix < c->W; ix++) {
                    int64_t oxx = ix * c->sw - c->pw + kw * c->dw;
                    if (oxx < 0 || oxx >= c->OW) continue;
                    int64_t o = (co * c->OH + oy) * c->OW + oxx, s = r * c->W + ix;
                    if (c->esz == 8) ((double *)c->out)[o] += ((const double *)src)[s];
                    else ((float *)c->out)[o] += ((const float *)src)[s];
                }
            }
        }
}

lm_status lm_nn_conv_transpose(lm_array *node)
{
    const lm_params *p = &node->params;
    const lm_array *x = node->inputs[0], *w = node->inputs[1];
    lm_dtype ct = node->dtype == LM_F64 ? LM_F64 : LM_F32;
    size_t esz = lm_dtype_size(ct);
    int64_t N = x->shape[0], Cin = x->shape[1], H = x->shape[2], W = x->shape[3];
    int64_t KH = w->shape[2], KW = w->shape[3], G = p->i[8], Cog = w->shape[1], Cig = Cin / G;
    int64_t Cout = Cog * G, OH = node->shape[2], OW = node->shape[3], M = Cog * KH * KW;
    void *ox = NULL, *ow = NULL, *ob = NULL, *col = NULL;
    float *stage = NULL;
    lm_status st = LM_OK;
    const char *xd = lm_cpu_contiguous(x, ct, &ox);
    const char *wd = xd ? lm_cpu_contiguous(w, ct, &ow) : NULL;
    const char *bd = wd && p->i[9] ? lm_cpu_contiguous(node->inputs[2], ct, &ob) : NULL;
    char *out = wd && (bd || !p->i[9]) ? out_begin(node, ct, &stage) : NULL;
    if (!out) { st = lm_error_status(); goto done; }
    memset(out, 0, (size_t)node->size * esz);
    int64_t band = (int64_t)(BAND_BYTES / ((size_t)M * esz * (size_t)W));
    if (band < 1) band = 1;
    if (band > H) band = H;
    if (!(col = malloc((size_t)(M * band * W) * esz))) {
        st = lm_error_set(LM_ERR_NOMEM, "conv_transpose2d: out of host memory");
        goto done;
    }
    for (int64_t n = 0; n < N; n++)
        for (int64_t g = 0; g < G; g++) {
            if (lm_cancel_requested()) { st = lm_error_set(LM_ERR_CANCELLED, "conv_transpose2d: interrupted"); goto done; }
            const char *xg = xd + ((n * Cin + g * Cig) * H * W) * (int64_t)esz;
            const char *wg = wd + (g * Cig * M) * (int64_t)esz;   /* [Cig, M] */
            char *og = out + ((n * Cout + g * Cog) * OH * OW) * (int64_t)esz;
            for (int64_t iy0 = 0; iy0 < H; iy0 += band) {
                int64_t rows = H - iy0 < band ? H - iy0 : band;
                gemm(ct, LM_CBLAS_TRANS, M, rows * W, Cig, wg, M, xg + iy0 * W * (int64_t)esz, H * W, 0.0,
                     col, rows * W);
                col2im_ctx c = {col, og, esz, W, KH, KW, p->i[0], p->i[1], p->i[2], p->i[3],
                                p->i[6], p->i[7], OH, OW, iy0, rows};
                lm_cpu_parallel_for(Cog, 1, col2im_task, &c);
            }
        }
    if (bd) add_bias(out, bd, N, Cout, OH * OW, ct);
done:
    if (stage) {
        if (st == LM_OK) nn_out_end(node, stage);
        else free(stage);
    }
    free(col);
    free(ox);
    free(ow);
    free(ob);
    return st;
}
