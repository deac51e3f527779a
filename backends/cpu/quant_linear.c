/* quant_linear.c - y = x w^T with a quantized weight w [N, K], without
 * materialising w in a float type: each row of x is quantized once to Q8_0
 * or Q8_K (as ggml's CPU backend does), then every output element is one
 * integer dot product (quant_dot.c) of a weight row with an activation row.
 * Types without an integer dot here (Q4_1, Q5_1, Q8_K weights) dequantize
 * one weight row at a time into a task-local buffer and dot it in f32.
 *
 * Each output element is computed by one task, in one fixed order, so the
 * result is the same for any thread count and any split of the work. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include "core/quant.h"
#include "quant_cpu.h"

typedef struct ql_job {
    lm_dtype wt, at;
    lm_cpu_qdot_fn dot;
    lm_cpu_qdot4_fn dot4;      /* NULL: one row at a time */
    int64_t M, N, K;
    const unsigned char *w;      /* N rows of wrow bytes */
    size_t wrow;
    unsigned char *xq;           /* M rows of xrow bytes (quantized), or NULL */
    size_t xrow;
    const float *x;              /* M rows of K (the f32 path) */
    float *out;                  /* [M, N] */
    unsigned char *exact;        /* M flags: the row is computed in f32 (or NULL) */
    int failed;
} ql_job;

/* Weight rows a tile holds: about 256 KB of them, which stay in L2 while
 * each group of four activation rows (a few KB each) passes over them from
 * L1.  Walking weight row by weight row instead streamed every activation
 * row (300 KB of Q8_K at M = 64) through L2 again for each weight row. */
static int64_t ql_tile_rows(size_t wrow)
{
    int64_t t = (int64_t)((256u << 10) / (wrow ? wrow : 1));
    return t < 1 ? 1 : t;
}

static void ql_rows_q(const ql_job *j, int64_t n0, int64_t n1)
{
    int64_t m = 0;
    if (j->dot4)
        for (; m + 4 <= j->M; m += 4) {
            const unsigned char *xm = j->xq + (size_t)m * j->xrow;
            for (int64_t n = n0; n < n1; n++) {
                float o[4];
                j->dot4(j->K, j->w + (size_t)n * j->wrow, xm, j->xrow, o);
                for (int r = 0; r < 4; r++) j->out[(m + r) * j->N + n] = o[r];
            }
        }
    for (; m < j->M; m++)
        for (int64_t n = n0; n < n1; n++)
            j->out[m * j->N + n] = j->dot(j->K, j->w + (size_t)n * j->wrow, j->xq + (size_t)m * j->xrow);
}

/* rows begin..end of the weights dequantized to f32, each dotted with the
 * rows of x in f32: every row of x, or only those flagged in only */
static void ql_rows_f32(ql_job *j, int64_t begin, int64_t end, const unsigned char *only)
{
    float *wf = malloc((size_t)j->K * sizeof *wf);
    if (!wf) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t n = begin; n < end; n++) {
        lm_dequantize_row(j->wt, j->w + (size_t)n * j->wrow, wf, j->K);
        for (int64_t m = 0; m < j->M; m++) {
            if (only && !only[m]) continue;
            const float *xr = j->x + m * j->K;
            float s = 0;
            for (int64_t k = 0; k < j->K; k++) s += xr[k] * wf[k];
            j->out[m * j->N + n] = s;
        }
    }
    free(wf);
}

static void ql_task(void *ctx, int64_t begin, int64_t end)
{
    ql_job *j = ctx;
    if (j->xq) {
        int64_t tile = ql_tile_rows(j->wrow);
        for (int64_t n0 = begin; n0 < end; n0 += tile) ql_rows_q(j, n0, n0 + tile < end ? n0 + tile : end);
        return;
    }
    ql_rows_f32(j, begin, end, NULL);
}

/* A row the activation blocks cannot hold: a NaN or an infinity (its block
 * would quantize to finite codes, hiding it), or, for q8_0's f16 scale,
 * |x| so large that amax / 127 overflows f16 (the block would dequantize to
 * inf or NaN).  Such rows are computed in f32 against the dequantized
 * weights instead, as the f32 and Vulkan paths compute them: NaN stays NaN,
 * and 1e7-sized activations give f32's finite result within the weight
 * format's error.  ggml quantizes them anyway (NaN codes are undefined
 * there). */
static bool ql_row_needs_f32(lm_dtype at, const float *x, int64_t K)
{
    float amax = 0;
    for (int64_t k = 0; k < K; k++) {
        if (!isfinite(x[k])) return true;
        float a = fabsf(x[k]);
        if (a > amax) amax = a;
    }
    return at == LM_Q8_0 && amax / 127.0f >= 65504.0f;
}

static void ql_quant_task(void *ctx, int64_t begin, int64_t end)
{
    ql_job *j = ctx;
    for (int64_t m = begin; m < end; m++) {
        const float *xr = j->x + m * j->K;
        j->exact[m] = ql_row_needs_f32(j->at, xr, j->K);
        if (!j->exact[m]) lm_quantize_row(j->at, xr, j->xq + (size_t)m * j->xrow, j->K);
        else memset(j->xq + (size_t)m * j->xrow, 0, j->xrow);
    }
}

/* the rows flagged exact, again in f32 (after the quantized pass wrote
 * something for them) */
static void ql_exact_task(void *ctx, int64_t begin, int64_t end)
{
    ql_job *j = ctx;
    ql_rows_f32(j, begin, end, j->exact);
}

lm_status lm_nn_qlinear(lm_array *node)
{
    lm_array *x = node->inputs[0], *w = node->inputs[1];
    if (x->dtype != LM_F32 || !lm_array_is_contiguous(x) || !lm_dtype_is_quant(w->dtype) || node->dtype != LM_F32)
        return lm_error_set(LM_ERR_DTYPE, "qlinear: want f32 x and a quantized weight, got %s and %s",
                            lm_dtype_name(x->dtype), lm_dtype_name(w->dtype));
    /* w is read as whole rows of blocks from its buffer's start, the only
     * layout lm_linear passes (lm_matmul turns w.T back first) */
    if (!lm_array_is_contiguous(w) || w->offset)
        return lm_error_set(LM_ERR_UNSUPPORTED, "qlinear: the %s weight [%lld, %lld] is a view, not its own "
                            "blocks", lm_dtype_name(w->dtype), (long long)w->shape[0], (long long)w->shape[1]);
    ql_job j = {.wt = w->dtype, .at = lm_cpu_qdot_act(w->dtype), .dot = lm_cpu_qdot_get(w->dtype),
                .dot4 = lm_cpu_qdot4_get(w->dtype)};
    j.N = w->shape[0];
    j.K = w->shape[1];
    j.M = j.K ? x->size / j.K : 0;
    j.w = w->buf->host;
    j.wrow = lm_dtype_nbytes(w->dtype, j.K);
    j.x = (const float *)x->buf->host + x->offset;
    j.out = node->buf->host;
    unsigned char *xq = NULL;
    if (j.at != LM_DTYPE_COUNT) {
        j.xrow = lm_dtype_nbytes(j.at, j.K);
        xq = malloc(j.xrow * (size_t)(j.M ? j.M : 1));
        j.exact = calloc((size_t)(j.M ? j.M : 1), 1);
        if (!xq || !j.exact) {
            free(xq);
            free(j.exact);
            return lm_error_set(LM_ERR_NOMEM, "qlinear: out of host memory for the quantized input");
        }
        j.xq = xq;
        /* rows are independent: quantized in parallel, about 64K elements a task */
        lm_cpu_parallel_for(j.M, j.K >= 65536 ? 1 : 65536 / (j.K ? j.K : 1), ql_quant_task, &j);
    }
    /* about 64K multiply-adds a task: a fixed split, never by thread count */
    int64_t work = j.M * j.K, grain = work >= 65536 ? 1 : 65536 / (work ? work : 1);
    lm_cpu_parallel_for(j.N, grain, ql_task, &j);
    int64_t nexact = 0;
    for (int64_t m = 0; j.exact && m < j.M; m++) nexact += j.exact[m];
    if (nexact) {
        int64_t ework = nexact * j.K, egrain = ework >= 65536 ? 1 : 65536 / (ework ? ework : 1);
        lm_cpu_parallel_for(j.N, egrain, ql_exact_task, &j);
    }
    free(j.exact);
    free(xq);
    if (j.failed) return lm_error_set(LM_ERR_NOMEM, "qlinear: out of host memory");
    return LM_OK;
}
