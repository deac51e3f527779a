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

#define CHUNK_BYTES (1u << 20)
/* chunks wanted over all images: a constant, not the thread count, since
 * a GEMM's bits depend on its column count (the chunk's tiles) */
#define WANT_CHUNKS 64

typedef struct {
    const float *x, *u;       /* x [N, C, H, W]; u [16, O, C] */
    float *out;               /* [N, O, OH, OW] */
    int64_t N, C, H, W, O, OH, OW, pt, pl, th, tw, ntiles, chunk;   /* chunk: rows of tiles */
    int failed;               /* 1 out of memory, 2 cancelled */
} wino_ctx;

/* U[k][o][c] = (G g G^T)[k] for each 3x3 filter g = w[o][c] */
void nn_wino_weights(float *u, const float *w, int64_t O, int64_t C)
{
    for (int64_t o = 0; o < O; o++)
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

/* A chunk is `rows` whole rows of tiles of one image, so each transform
 * runs along a row of tiles with contiguous vectors.  V[k][c][j] = (B^T d
 * B)[k] for the chunk's tile j and channel c. */
NN_CLONES static void transform_input(const wino_ctx *c, float *v, int64_t n, int64_t ty0, int64_t rows,
                                      float *buf)
{
    int64_t tw = c->tw, nt = rows * tw, len = 2 * tw + 2, step = c->C * nt;
    float *r[4] = {buf, buf + len, buf + 2 * len, buf + 3 * len}, *a = buf + 4 * len;
    for (int64_t q = 0; q < rows; q++)
        for (int64_t ch = 0; ch < c->C; ch++) {
            const float *plane = c->x + (n * c->C + ch) * c->H * c->W;
            int64_t y0 = 2 * (ty0 + q) - c->pt;
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

/* output rows 2ty, 2ty+1 of channel o = (A^T m A) over a row of tiles */
NN_CLONES static void transform_output(const wino_ctx *c, const float *m, int64_t n, int64_t ty0, int64_t rows,
                                       float *buf)
{
    int64_t tw = c->tw, nt = rows * tw, step = c->O * nt;
    float *s0 = buf, *s1 = buf + tw, *y = buf + 2 * tw;
    for (int64_t q = 0; q < rows; q++)
        for (int64_t o = 0; o < c->O; o++) {
            const float *mp = m + o * nt + q * tw;
            float *row[2] = {c->out + ((n * c->O + o) * c->OH + 2 * (ty0 + q)) * c->OW, NULL};
            row[1] = row[0] + c->OW;
            for (int i = 0; i < 2; i++) {
                if (2 * (ty0 + q) + i >= c->OH) break;
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
                memcpy(row[i], out2, sizeof(float) * (size_t)c->OW);
            }
        }
}

static void wino_task(void *p, int64_t b0, int64_t b1)
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
        int64_t cols = rows * c->tw;
        transform_input(c, v, n, ty0, rows, buf);
        for (int k = 0; k < 16; k++)
            lm_sgemm(LM_CBLAS_NOTRANS, LM_CBLAS_NOTRANS, (int)c->O, (int)cols, (int)c->C, 1.0f,
                     c->u + k * c->O * c->C, (int)c->C, v + k * c->C * cols, (int)cols, 0.0f,
                     m + k * c->O * cols, (int)cols);
        transform_output(c, m, n, ty0, rows, buf);
    }
    free(v);
    free(m);
    free(buf);
}

lm_status nn_conv_winograd(const float *x, const float *u, float *out, int64_t N, int64_t C, int64_t H,
                           int64_t W, int64_t O, int64_t OH, int64_t OW, int64_t pt, int64_t pl)
{
    wino_ctx c = {x, u, out, N, C, H, W, O, OH, OW, pt, pl, (OH + 1) / 2, (OW + 1) / 2, 0, 0, 0};
    c.ntiles = N * c.th * c.tw;
    /* chunks of whole rows of tiles, their V and M together near the size
     * of L2, and enough of them for every thread of a large machine */
    int64_t fit = (int64_t)(CHUNK_BYTES / (sizeof(float) * 16 * (size_t)(C + O))) / c.tw;
    int64_t split = N >= WANT_CHUNKS ? 1 : (WANT_CHUNKS + N - 1) / N;
    c.chunk = (c.th + split - 1) / split;
    if (c.chunk > fit) c.chunk = fit;
    if (c.chunk < 1) c.chunk = 1;
    lm_cpu_parallel_for(N * ((c.th + c.chunk - 1) / c.chunk), 1, wino_task, &c);
    if (c.failed == 1) return lm_error_set(LM_ERR_NOMEM, "conv2d: out of host memory for Winograd tiles");
    if (c.failed == 2) return lm_error_set(LM_ERR_CANCELLED, "conv2d: interrupted");
    return LM_OK;
}
