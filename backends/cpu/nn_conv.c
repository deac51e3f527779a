/* nn_conv.c - conv2d (conv1d is conv2d with H = 1) and conv_transpose2d.
 *
 * conv2d: for each image and group, the input is unfolded (im2col) a band
 * of output rows at a time into a [C/g*KH*KW, rows*OW] matrix, and one GEMM
 * with the weights [O/g, C/g*KH*KW] writes that band of the output in place
 * (ldc = OH*OW).  Bands keep the unfolded matrix near the caches' size
 * instead of 9x the input for a 3x3 kernel.  A 1x1 stride-1 unpadded conv
 * skips the unfolding.  The (image, group, band) items run in parallel on
 * the pool, each unfolding into its own buffer and calling a
 * single-threaded GEMM, so many groups (depthwise) parallelize as well as
 * one big image.  The bands' height depends on the problem only, never on
 * the thread count: a GEMM's bits depend on its shape (OpenBLAS picks other
 * kernels for other column counts), so the result is the same at any
 * thread count.
 *
 * conv_transpose2d: col = W_g^T x_g (a GEMM cut into fixed tiles on the
 * pool, lm_gemm_tiled) for a band of input rows, then col2im on the pool
 * adds each column into the output (one output channel per task, so no two
 * tasks write the same element, and each element's sum runs in one
 * order).  f32/f16/bf16 compute in f32 (sgemm), f64 in f64. */
#include <stdlib.h>
#include "nn.h"
#include "core/profile.h"

#define BAND_BYTES (2u << 20)
#define MIN_COLS 512
/* work items a convolution is cut into when its images and groups are
 * fewer: enough for a 16-core machine, a constant so that the cut (and so
 * the bits) is the same at any thread count */
#define WANT_ITEMS 64
/* staged convolutions: an image's unfolded band at most this large */
#define STAGED_BYTES (16u << 20)
/* and only for weights of at least this many elements (1 MiB in f32) */
#define STAGED_MIN_WEIGHTS (1 << 18)

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

/* A weight in ct, contiguous: its own memory, or a converted copy kept on
 * its buffer by nn_pack (f16/bf16 or strided weights are converted once). */
static lm_status fill_copy(void *dst, const lm_array *w, void *ctx)
{
    lm_dtype ct = *(const lm_dtype *)ctx;
    void *owned = NULL;
    const void *src = lm_cpu_contiguous(w, ct, &owned);
    if (!src) return lm_error_status();
    memcpy(dst, src, (size_t)w->size * lm_dtype_size(ct));
    free(owned);
    return LM_OK;
}

static const char *weights_in(const lm_array *w, lm_dtype ct, void **owned)
{
    *owned = NULL;
    if (w->dtype == ct && lm_array_is_contiguous(w)) return lm_cpu_ptr(w);
    return nn_pack(w, ct == LM_F64 ? NN_PACK_COPY_F64 : NN_PACK_COPY_F32, (size_t)w->size * lm_dtype_size(ct),
                   fill_copy, &ct, owned);
}

typedef struct { const float *p; int64_t n; int bad; } finite_ctx;

static void finite_task(void *pv, int64_t b0, int64_t b1)
{
    finite_ctx *c = pv;
    for (int64_t b = b0; b < b1; b++) {
        int64_t i = b * 4096, e = c->n - i < 4096 ? c->n - i : 4096;
        uint32_t bad = 0;
        for (int64_t k = 0; k < e; k++) {
            uint32_t u;
            memcpy(&u, c->p + i + k, sizeof u);
            bad |= (u & 0x7f800000u) == 0x7f800000u;
        }
        if (bad) {
            __atomic_store_n(&c->bad, 1, __ATOMIC_RELAXED);
            return;
        }
    }
}

/* no Inf or NaN among n floats (exponent bits all ones), checked on the pool */
static bool all_finite(const float *p, int64_t n)
{
    finite_ctx c = {p, n, 0};
    lm_cpu_parallel_for((n + 4095) / 4096, 16, finite_task, &c);
    return !c.bad;
}

/* Winograd's transformed filters of a [O, C, 3, 3] weight */
static lm_status fill_wino(void *dst, const lm_array *w, void *ctx)
{
    (void)ctx;
    void *owned = NULL;
    const float *wd = lm_cpu_contiguous(w, LM_F32, &owned);
    if (!wd) return lm_error_status();
    int64_t n = 16 * w->shape[0] * w->shape[1];
    nn_wino_weights(dst, wd, w->shape[0], w->shape[1]);
    /* whether they are all finite, found once here rather than on every
     * call: filters with an Inf or NaN are never used, so their first
     * element is made a NaN, and a finite first element means all are */
    if (!all_finite(dst, n)) *(float *)dst = NAN;
    free(owned);
    return LM_OK;
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

typedef struct {
    const char *xd, *wd;
    char *out;
    lm_dtype ct;
    size_t esz;
    const int64_t *p;
    int64_t C, H, W, O, G, Cg, Og, K, KH, KW, OH, OW, band, nbands;
    bool direct;
    int failed;               /* 1 out of memory, 2 cancelled */
} conv_ctx;

/* work items w = ((n * G) + g) * nbands + band: unfold the band into this
 * task's buffer, then one single-threaded GEMM writes it */
static void conv_task(void *pv, int64_t w0, int64_t w1)
{
    conv_ctx *c = pv;
    size_t esz = c->esz;
    char *col = c->direct ? NULL : malloc((size_t)(c->K * c->band * c->OW) * esz);
    if (!c->direct && !col) {
        __atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t w = w0; w < w1; w++) {
        if (lm_cancel_requested()) {
            __atomic_store_n(&c->failed, 2, __ATOMIC_RELAXED);
            break;
        }
        int64_t bi = w % c->nbands, ng = w / c->nbands, n = ng / c->G, g = ng % c->G;
        int64_t oy0 = bi * c->band, rows = c->OH - oy0 < c->band ? c->OH - oy0 : c->band;
        const char *xg = c->xd + ((n * c->C + g * c->Cg) * c->H * c->W) * (int64_t)esz;
        const char *wg = c->wd + (g * c->Og * c->K) * (int64_t)esz;
        char *og = c->out + ((n * c->O + g * c->Og) * c->OH * c->OW + oy0 * c->OW) * (int64_t)esz;
        if (c->direct) {   /* 1x1, stride 1, no padding: x is already the unfolded matrix */
            gemm(c->ct, LM_CBLAS_NOTRANS, c->Og, rows * c->OW, c->K, wg, c->K,
                 xg + oy0 * c->OW * (int64_t)esz, c->H * c->W, 0.0, og, c->OH * c->OW);
            continue;
        }
        const int64_t *p = c->p;
        im2col_ctx ic = {xg, col, esz, c->H, c->W, c->KH, c->KW, p[0], p[1], p[2], p[3], p[6], p[7],
                         c->OW, oy0, rows};
        im2col_task(&ic, 0, c->K);
        gemm(c->ct, LM_CBLAS_NOTRANS, c->Og, rows * c->OW, c->K, wg, c->K, col, rows * c->OW, 0.0, og,
             c->OH * c->OW);
    }
    free(col);
}

/* groups = 1, staged: per image, bands of STAGED_BYTES of unfolded rows
 * (all of the image where it fits), each band unfolded by rows k on the
 * pool, then one GEMM [O, K] x [K, cols] cut into tiles (lm_gemm_tiled,
 * by the shapes only) on the pool */
static lm_status conv_staged(conv_ctx *c, int64_t N)
{
    size_t esz = c->esz;
    int64_t rows_fit = c->direct ? c->OH : (int64_t)(STAGED_BYTES / ((size_t)c->K * esz * (size_t)c->OW));
    if (rows_fit < 1) rows_fit = 1;
    int64_t nb = (c->OH + rows_fit - 1) / rows_fit, band = (c->OH + nb - 1) / nb;
    char *col = c->direct ? NULL : lm_cpu_scratch((size_t)(c->K * band * c->OW) * esz);
    if (!c->direct && !col)
        return lm_error_set(LM_ERR_NOMEM, "conv2d: out of host memory for a %lldx%lld unfolded band",
                            (long long)c->K, (long long)(band * c->OW));
    const int64_t *p = c->p;
    for (int64_t n = 0; n < N; n++)
        for (int64_t oy0 = 0; oy0 < c->OH; oy0 += band) {
            if (lm_cancel_requested()) {
                free(col);
                return lm_error_set(LM_ERR_CANCELLED, "conv2d: interrupted");
            }
            int64_t rows = c->OH - oy0 < band ? c->OH - oy0 : band;
            const char *xg = c->xd + (n * c->C * c->H * c->W) * (int64_t)esz;
            char *og = c->out + (n * c->O * c->OH * c->OW + oy0 * c->OW) * (int64_t)esz;
            const char *b = xg + oy0 * c->OW * (int64_t)esz;
            int64_t ldb = c->H * c->W;
            if (!c->direct) {
                im2col_ctx ic = {xg, col, esz, c->H, c->W, c->KH, c->KW, p[0], p[1], p[2], p[3], p[6], p[7],
                                 c->OW, oy0, rows};
                lm_cpu_parallel_for(c->K, rows * c->OW >= 4096 ? 1 : 4096 / (rows * c->OW) + 1, im2col_task, &ic);
                b = col;
                ldb = rows * c->OW;
            }
            lm_gemm_tiled(c->ct == LM_F64, LM_CBLAS_NOTRANS, LM_CBLAS_NOTRANS, c->O, rows * c->OW, c->K, 1.0, c->wd,
                          c->K, b, ldb, 0.0, og, c->OH * c->OW);
        }
    free(col);
    return LM_OK;
}

lm_status lm_nn_conv(lm_array *node)
{
    const lm_params *p = &node->params;
    const lm_array *x = node->inputs[0], *w = node->inputs[1];
    conv_ctx c = {0};
    c.ct = node->dtype == LM_F64 ? LM_F64 : LM_F32;
    c.esz = lm_dtype_size(c.ct);
    c.p = p->i;
    int64_t N = x->shape[0];
    c.C = x->shape[1]; c.H = x->shape[2]; c.W = x->shape[3];
    c.O = w->shape[0]; c.KH = w->shape[2]; c.KW = w->shape[3]; c.G = p->i[8];
    c.OH = node->shape[2]; c.OW = node->shape[3];
    c.Cg = c.C / c.G; c.Og = c.O / c.G; c.K = c.Cg * c.KH * c.KW;
    void *ox = NULL, *ow = NULL, *ob = NULL;
    float *stage = NULL;
    lm_status st = LM_OK;
    /* 3x3, stride 1, undilated, enough channels for the GEMMs: Winograd
     * (2.25x fewer flops); LUMEN_CONV=im2col turns it off */
    const char *how = getenv("LUMEN_CONV");
    bool im2col = how && !strcmp(how, "im2col");
    bool wino = c.ct == LM_F32 && c.G == 1 && c.KH == 3 && c.KW == 3 && p->i[0] == 1 && p->i[1] == 1 &&
                p->i[6] == 1 && p->i[7] == 1 && c.C >= 16 && c.O >= 16 && !im2col;
    c.xd = lm_cpu_contiguous(x, c.ct, &ox);
    /* Winograd's transforms mix a tile's inputs (and a filter's taps), so an
     * Inf or NaN would spread over its whole tile; such inputs take im2col,
     * where it reaches only the outputs it touches, as on the GPU and in
     * PyTorch */
    if (wino && c.xd && !all_finite((const float *)c.xd, N * c.C * c.H * c.W)) wino = false;
    if (c.xd && wino) {
        c.wd = nn_pack(w, NN_PACK_WINO, NN_WINO_BYTES(c.O, c.C), fill_wino, NULL, &ow);
        if (c.wd && !isfinite(*(const float *)c.wd)) {
            free(ow);
            ow = NULL;
            wino = false;
        }
    }
    if (c.xd && !wino) c.wd = weights_in(w, c.ct, &ow);
    const char *bd = c.wd && p->i[9] ? lm_cpu_contiguous(node->inputs[2], c.ct, &ob) : NULL;
    c.out = c.wd && (bd || !p->i[9]) ? out_begin(node, c.ct, &stage) : NULL;
    if (!c.out) { st = lm_error_status(); goto done; }
    if (c.K == 0) {   /* no input channels: the sum is empty */
        memset(c.out, 0, (size_t)node->size * c.esz);
        if (bd) add_bias(c.out, bd, N, c.O, c.OH * c.OW, c.ct);
        goto done;
    }
    if (wino) {   /* c.wd holds the transformed weights */
        lm_profile_kernel_name("winograd");
        st = nn_conv_winograd((const float *)c.xd, (const float *)c.wd, (float *)c.out, N, c.C, c.H, c.W, c.O,
                              c.OH, c.OW, p->i[2], p->i[3]);
        if (st == LM_OK && bd) add_bias(c.out, bd, N, c.O, c.OH * c.OW, c.ct);
        goto done;
    }
    /* a kernel far larger than the output (a weight gradient): unfold per output element */
    if (c.G == 1 && c.KH * c.KW >= 16 && c.KH * c.KW >= 4 * c.OH * c.OW && !im2col) {
        lm_profile_kernel_name("unfold_per_output");
        st = nn_conv_wgrad(c.xd, c.wd, c.out, c.ct == LM_F64, N, c.C, c.H, c.W, c.O, c.KH, c.KW, c.OH, c.OW, p->i);
        if (st == LM_OK && bd) add_bias(c.out, bd, N, c.O, c.OH * c.OW, c.ct);
        goto done;
    }
    c.direct = c.KH == 1 && c.KW == 1 && p->i[0] == 1 && p->i[1] == 1 && p->i[2] == 0 && p->i[3] == 0 &&
               p->i[4] == 0 && p->i[5] == 0;
    lm_profile_kernel_name(c.direct ? "gemm_1x1" : "im2col_gemm");
    /* bands small enough to stay in this core's L2, and enough of them
     * that every thread of a large machine has a few */
    int64_t rows_fit = (int64_t)(BAND_BYTES / ((size_t)c.K * c.esz * (size_t)c.OW));
    /* but at least MIN_COLS columns, so each repacking of the weights by
     * the GEMM serves enough work (many channels, small images) */
    if (rows_fit * c.OW < MIN_COLS) rows_fit = (MIN_COLS + c.OW - 1) / c.OW;
    int64_t per = N * c.G;
    int64_t split = per >= WANT_ITEMS ? 1 : (WANT_ITEMS + per - 1) / per;
    c.band = (c.OH + split - 1) / split;
    if (c.band > rows_fit) c.band = rows_fit;
    if (c.band < 1) c.band = 1;
    c.nbands = (c.OH + c.band - 1) / c.band;
    /* one group whose bands are narrow (many channels, small images: SD's
     * 8x8 latents gave GEMMs of 8 columns that read the whole weight each)
     * or too few to share: staged, each image's band unfolded on the pool,
     * then its GEMM cut into tiles of M and N on the pool.  Small weights
     * keep the bands (cheap to re-read, and their bits as before) */
    if (c.G == 1 && c.O * c.K >= STAGED_MIN_WEIGHTS && (c.band * c.OW < MIN_COLS || N * c.nbands < WANT_ITEMS / 4)) {
        st = conv_staged(&c, N);
        goto bias;
    }
    lm_cpu_parallel_for(N * c.G * c.nbands, 1, conv_task, &c);
    if (c.failed == 1) st = lm_error_set(LM_ERR_NOMEM, "conv2d: out of host memory for a %lldx%lld unfolded band",
                                         (long long)c.K, (long long)(c.band * c.OW));
    else if (c.failed == 2) st = lm_error_set(LM_ERR_CANCELLED, "conv2d: interrupted");
bias:
    if (st == LM_OK && bd) add_bias(c.out, bd, N, c.O, c.OH * c.OW, c.ct);
done:
    if (stage) {
        if (st == LM_OK) nn_out_end(node, stage);
        else free(stage);
    }
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
    const char *wd = xd ? weights_in(w, ct, &ow) : NULL;
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
                lm_gemm_tiled(ct == LM_F64, LM_CBLAS_TRANS, LM_CBLAS_NOTRANS, M, rows * W, Cig, 1.0, wg, M,
                              xg + iy0 * W * (int64_t)esz, H * W, 0.0, col, rows * W);
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
