/* nn_conv_wino.c - 3x3 stride-1 conv2d by Winograd's F(2x2, 3x3).
 *
 * Each 2x2 block of output (a tile) comes from a 4x4 block of input d:
 * Y = A^T [(G g G^T) . (B^T d B)] A.  The 16 products of the transformed
 * domain are 16 GEMMs, M[k] = U[k] V[k] with U[k] = the transformed weights
 * [O, C] and V[k] = the transformed input tiles [C, tiles]: 16 multiplies
 * per tile and channel pair instead of 36, so 2.25x fewer flops than
 * im2col + GEMM, at the cost of the transforms (additions only, linear in
 * C + O per tile).  Errors stay at f32 rounding (the transforms' constants
 * are 0, +-1 and 1/2).
 *
 * The caller transforms the weights (nn_wino_weights), once per weight
 * through the pack cache (conv_pack.c); tiles go in chunks (whole
 * rows of tiles of one image) that run in parallel, each task transforming its
 * chunk into its own V, calling 16 single-threaded sgemms into its own M
 * and writing the output blocks.  f32 only, groups = 1. */
#include <stdlib.h>
#include "nn.h"

/* fused mode: V and M of a task's chunk near this size (one core's L2),
 * and chunks wanted over all images (a constant, not the thread count,
 * since a GEMM's bits may depend on its column count) */
#define CHUNK_BYTES (1u << 20)
#define WANT_CHUNKS 64
/* fused mode needs chunks of at least this many tiles, and this many chunks */
#define FUSED_MIN_COLS 64
#define FUSED_MIN_CHUNKS 16
/* staged mode: V and M of a chunk at most this large */
#define STAGED_BYTES (8u << 20)
/* and only for filters of at least this many elements a k (256 KiB) */
#define STAGED_MIN_WEIGHTS (1 << 16)

typedef struct {
    const float *x, *u;       /* x [N, C, H, W]; u [16, O, C] */
    float *out;               /* [N, O, OH, OW] */
    int64_t N, C, H, W, O, OH, OW, pt, pl, th, tw;
    /* staged mode: the chunk in progress */
    float *v, *m;             /* its V [16, C, cols] and M [16, O, cols] */
    int64_t r0, rows, cols;   /* tile rows r0.. of all images' rows (n, ty) */
    int64_t mb, nb, tn, tiles;   /* the GEMM tiles of one k */
    int64_t chunk;            /* fused mode: rows of tiles of one image a task */
    int failed;               /* 1 out of memory, 2 cancelled */
} wino_ctx;

/* U[k][o][c] = (G g G^T)[k] for each 3x3 filter g = w[o][c] */
typedef struct { float *u; const float *w; int64_t O, C; } wweights_ctx;

static void wino_weights_task(void *p, int64_t o0, int64_t o1)
{
    const wweights_ctx *ww = p;
    float *u = ww->u;
    const float *w = ww->w;
    int64_t O = ww->O, C = ww->C;
    for (int64_t o = o0; o < o1; o++)
        for (int64_t c = 0; c < C; c++) {
            const float *g = w + (o * C + c) * 9;
            float t[4][3];
            for (int j = 0; j < 3; j++) {
                t[0][j] = g[j];
                t[1][j] = 0.5f * (g[j] + g[3 + j] + g[6 + j]);
                t[2][j] = 0.5f * (g[j] - g[3 + j] + g[6 + j]);
                t[3][j] = g[6 + j];
            }
            for (int i = 0; i < 4; i++) {
                float r[4] = {t[i][0], 0.5f * (t[i][0] + t[i][1] + t[i][2]), 0.5f * (t[i][0] - t[i][1] + t[i][2]),
                              t[i][2]};
                for (int j = 0; j < 4; j++) u[((i * 4 + j) * O + o) * C + c] = r[j];
            }
        }
}

/* each filter's transform is its own: the output channels run in parallel
 * (the first call of a large model transforms gigabytes) */
void nn_wino_weights(float *u, const float *w, int64_t O, int64_t C)
{
    wweights_ctx ww = {u, w, O, C};
    lm_cpu_parallel_for(O, C >= 64 ? 1 : 64 / C + 1, wino_weights_task, &ww);
}

/* Items i = q * C + ch of the chunk: row of tiles q (global row r0 + q,
 * image n, tile row ty) and input channel ch.  Each transform runs along
 * a row of tiles with contiguous vectors.  V[k][ch][j] = (B^T d B)[k] for
 * the chunk's tile j (column q * tw + tx). */
NN_CLONES static void transform_input(const wino_ctx *c, float *v, int64_t r0, int64_t nt, int64_t i0,
                                      int64_t i1, float *buf)
{
    int64_t tw = c->tw, len = 2 * tw + 2, step = c->C * nt;
    float *r[4] = {buf, buf + len, buf + 2 * len, buf + 3 * len}, *a = buf + 4 * len;
    for (int64_t it = i0; it < i1; it++) {
        int64_t q = it / c->C, ch = it % c->C, row = r0 + q, n = row / c->th, ty = row % c->th;
        const float *plane = c->x + (n * c->C + ch) * c->H * c->W;
        int64_t y0 = 2 * ty - c->pt;
        /* the four input rows of this row of tiles, zero outside */
        for (int i = 0; i < 4; i++) {
            int64_t yy = y0 + i;
            if (yy < 0 || yy >= c->H) {
                memset(r[i], 0, sizeof(float) * (size_t)len);
                continue;
            }
            const float *src = plane + yy * c->W;
            int64_t lo = c->pl < len ? c->pl : len, hi = c->W + c->pl < len ? c->W + c->pl : len;
            memset(r[i], 0, sizeof(float) * (size_t)lo);
            if (hi > lo) memcpy(r[i] + lo, src, sizeof(float) * (size_t)(hi - lo));
            if (hi < len) memset(r[i] + (hi > lo ? hi : lo), 0, sizeof(float) * (size_t)(len - (hi > lo ? hi : lo)));
        }
        /* B^T along y, then B along x (even/odd columns of each tile) */
        for (int i = 0; i < 4; i++) {
            for (int64_t k = 0; k < len; k++) {
                float d0 = r[0][k], d1 = r[1][k], d2 = r[2][k], d3 = r[3][k];
                a[k] = i == 0 ? d0 - d2 : i == 1 ? d1 + d2 : i == 2 ? d2 - d1 : d1 - d3;
            }
            float *v0 = v + ((i * 4) * c->C + ch) * nt + q * tw;
            for (int64_t t = 0; t < tw; t++) {
                float e = a[2 * t], f = a[2 * t + 1], g = a[2 * t + 2], h = a[2 * t + 3];
                v0[t] = e - g;
                v0[step + t] = f + g;
                v0[2 * step + t] = g - f;
                v0[3 * step + t] = f - h;
            }
        }
    }
}

/* Items i = q * O + o: output rows 2ty, 2ty+1 of channel o = (A^T m A)
 * over the chunk's row of tiles q */
NN_CLONES static void transform_output(const wino_ctx *c, const float *m, int64_t r0, int64_t nt, int64_t i0,
                                       int64_t i1, float *buf)
{
    int64_t tw = c->tw, step = c->O * nt;
    float *s0 = buf, *s1 = buf + tw, *y = buf + 2 * tw;
    for (int64_t it = i0; it < i1; it++) {
        int64_t q = it / c->O, o = it % c->O, row = r0 + q, n = row / c->th, ty = row % c->th;
        const float *mp = m + o * nt + q * tw;
        float *orow[2] = {c->out + ((n * c->O + o) * c->OH + 2 * ty) * c->OW, NULL};
        orow[1] = orow[0] + c->OW;
        for (int i = 0; i < 2; i++) {
            if (2 * ty + i >= c->OH) break;
            /* s_k = column k of A^T m: rows 0+1+2 or 1-2-3 */
            for (int k = 0; k < 4; k++) {
                const float *m0 = mp + k * step, *m1 = m0 + 4 * step, *m2 = m1 + 4 * step, *m3 = m2 + 4 * step;
                float *dst = k < 2 ? (k == 0 ? s0 : s1) : y + (k - 2) * tw;
                for (int64_t t = 0; t < tw; t++) dst[t] = i == 0 ? m0[t] + m1[t] + m2[t] : m1[t] - m2[t] - m3[t];
            }
            const float *s2 = y, *s3 = y + tw;
            float *out2 = y + 2 * tw;
            for (int64_t t = 0; t < tw; t++) {
                out2[2 * t] = s0[t] + s1[t] + s2[t];
                out2[2 * t + 1] = s1[t] - s2[t] - s3[t];
            }
            memcpy(orow[i], out2, sizeof(float) * (size_t)c->OW);
        }
    }
}

static void input_task(void *p, int64_t i0, int64_t i1)
{
    wino_ctx *c = p;
    float *buf = malloc(sizeof(float) * (size_t)(10 * c->tw + 16));
    if (!buf) {
        __atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    transform_input(c, c->v, c->r0, c->cols, i0, i1, buf);
    free(buf);
}

static void output_task(void *p, int64_t i0, int64_t i1)
{
    wino_ctx *c = p;
    float *buf = malloc(sizeof(float) * (size_t)(10 * c->tw + 16));
    if (!buf) {
        __atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    transform_output(c, c->m, c->r0, c->cols, i0, i1, buf);
    free(buf);
}

/* items (k, tile of M[k]): M[k] = U[k] V[k], one single-threaded sgemm a
 * tile, tiles cut by the shapes only */
static void gemm_task(void *p, int64_t i0, int64_t i1)
{
    const wino_ctx *c = p;
    for (int64_t i = i0; i < i1; i++) {
        int64_t k = i / c->tiles, t = i % c->tiles;
        lm_gemm_tile(false, LM_CBLAS_NOTRANS, LM_CBLAS_NOTRANS, c->O, c->cols, c->C, 1.0, c->u + k * c->O * c->C,
                     c->C, c->v + k * c->C * c->cols, c->cols, 0.0, c->m + k * c->O * c->cols, c->cols,
                     (t / c->tn) * c->mb, (t % c->tn) * c->nb, c->mb, c->nb);
    }
}

/* fused mode: items b = (image, chunk of `chunk` tile rows), each task
 * transforming its chunk into its own V, 16 sgemms into its own M, and
 * the output transform, all near one core's L2 */
static void fused_task(void *p, int64_t b0, int64_t b1)
{
    wino_ctx *c = p;
    int64_t nt = c->chunk * c->tw;
    float *v = malloc(sizeof(float) * 16 * (size_t)(c->C * nt));
    float *m = malloc(sizeof(float) * 16 * (size_t)(c->O * nt));
    float *buf = malloc(sizeof(float) * (size_t)(10 * c->tw + 16));
    if (!v || !m || !buf) {
        __atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
        free(v);
        free(m);
        free(buf);
        return;
    }
    int64_t per = (c->th + c->chunk - 1) / c->chunk;   /* chunks per image */
    for (int64_t b = b0; b < b1; b++) {
        if (lm_cancel_requested()) {
            __atomic_store_n(&c->failed, 2, __ATOMIC_RELAXED);
            break;
        }
        int64_t n = b / per, ty0 = (b % per) * c->chunk, rows = c->th - ty0 < c->chunk ? c->th - ty0 : c->chunk;
        int64_t cols = rows * c->tw, r0 = n * c->th + ty0;
        transform_input(c, v, r0, cols, 0, rows * c->C, buf);
        for (int k = 0; k < 16; k++)
            lm_sgemm(LM_CBLAS_NOTRANS, LM_CBLAS_NOTRANS, (int)c->O, (int)cols, (int)c->C, 1.0f,
                     c->u + k * c->O * c->C, (int)c->C, v + k * c->C * cols, (int)cols, 0.0f,
                     m + k * c->O * cols, (int)cols);
        transform_output(c, m, r0, cols, 0, rows * c->O, buf);
    }
    free(v);
    free(m);
    free(buf);
}

/* grain of a loop over items of about `work` element operations each: a
 * few thousand operations an item at least */
static int64_t grain_of(int64_t work) { return work >= 8192 ? 1 : 8192 / (work + 1) + 1; }

/* staged mode: chunks of whole rows of tiles over all images (a small
 * image's tiles join the next image's in one GEMM), V and M of a chunk
 * within STAGED_BYTES, each of a chunk's three steps on the pool: the
 * input transform by (row, channel), the 16 GEMMs by (k, tile of M[k]),
 * the output transform by (row, output channel) */
static lm_status staged(wino_ctx *c)
{
    int64_t R = c->N * c->th, per_row = (int64_t)sizeof(float) * 16 * (c->C + c->O) * c->tw;
    int64_t chunk = (int64_t)(STAGED_BYTES / (size_t)per_row);
    if (chunk < 1) chunk = 1;
    if (chunk > R) chunk = R;
    int64_t nchunks = (R + chunk - 1) / chunk;
    chunk = (R + nchunks - 1) / nchunks;   /* even chunks: no short last one */
    c->v = lm_cpu_scratch(sizeof(float) * 16 * (size_t)(c->C * chunk * c->tw));
    c->m = lm_cpu_scratch(sizeof(float) * 16 * (size_t)(c->O * chunk * c->tw));
    lm_status st = LM_OK;
    if (!c->v || !c->m)
        st = lm_error_set(LM_ERR_NOMEM, "conv2d: out of host memory for Winograd tiles (%lld rows of %lld)",
                          (long long)chunk, (long long)c->tw);
    for (c->r0 = 0; c->r0 < R && st == LM_OK; c->r0 += chunk) {
        if (lm_cancel_requested()) {
            st = lm_error_set(LM_ERR_CANCELLED, "conv2d: interrupted");
            break;
        }
        c->rows = R - c->r0 < chunk ? R - c->r0 : chunk;
        c->cols = c->rows * c->tw;
        lm_cpu_parallel_for(c->rows * c->C, grain_of(16 * c->tw), input_task, c);
        lm_gemm_tiling(c->O, c->cols, c->C, &c->mb, &c->nb);
        c->tn = (c->cols + c->nb - 1) / c->nb;
        c->tiles = ((c->O + c->mb - 1) / c->mb) * c->tn;
        lm_cpu_parallel_for(16 * c->tiles, 1, gemm_task, c);
        lm_cpu_parallel_for(c->rows * c->O, grain_of(16 * c->tw), output_task, c);
        if (c->failed) st = lm_error_set(LM_ERR_NOMEM, "conv2d: out of host memory for Winograd transforms");
    }
    free(c->v);
    free(c->m);
    return st;
}

lm_status nn_conv_winograd(const float *x, const float *u, float *out, int64_t N, int64_t C, int64_t H,
                           int64_t W, int64_t O, int64_t OH, int64_t OW, int64_t pt, int64_t pl)
{
    wino_ctx c = {x, u, out, N, C, H, W, O, OH, OW, pt, pl, (OH + 1) / 2, (OW + 1) / 2, NULL, NULL, 0, 0, 0,
                  0, 0, 0, 0, 0, 0};
    /* fused chunks: whole rows of tiles of one image, their V and M
     * together near the size of L2, and WANT_CHUNKS of them over all
     * images where the rows allow.  The cut depends on the shapes only,
     * never on the thread count (a GEMM's bits may depend on its shape). */
    int64_t fit = (int64_t)(CHUNK_BYTES / (sizeof(float) * 16 * (size_t)(C + O))) / c.tw;
    int64_t split = N >= WANT_CHUNKS ? 1 : (WANT_CHUNKS + N - 1) / N;
    c.chunk = (c.th + split - 1) / split;
    if (c.chunk > fit) c.chunk = fit;
    if (c.chunk < 1) c.chunk = 1;
    int64_t nfused = N * ((c.th + c.chunk - 1) / c.chunk);
    /* Fused chunks of too few tiles make each sgemm pack its U[k] for a
     * few columns (weight-bound: SD's 8x8 latents gave GEMMs of 4
     * columns), and too few chunks leave cores idle: such convolutions
     * (many channels, small images) run staged.  Small filters stay fused
     * (cheap to re-read, and their bits as before). */
    if (O * C >= STAGED_MIN_WEIGHTS && (c.chunk * c.tw < FUSED_MIN_COLS || nfused < FUSED_MIN_CHUNKS))
        return staged(&c);
    lm_cpu_parallel_for(nfused, 1, fused_task, &c);
    if (c.failed == 1) return lm_error_set(LM_ERR_NOMEM, "conv2d: out of host memory for Winograd tiles");
    if (c.failed == 2) return lm_error_set(LM_ERR_CANCELLED, "conv2d: interrupted");
    return LM_OK;
}
