/* matmul.c - batched matrix products through OpenBLAS.
 *
 * Operands arrive as views [batch..., M, K] and [batch..., K, N] with any
 * strides (broadcast batch axes have stride 0).  A matrix whose inner or
 * outer stride is 1 goes to BLAS as is (transposed when needed); anything
 * else is copied first.  When B is shared by every batch and A's batches
 * stack into rows, the whole product is one GEMM.  f16/bf16 compute in
 * f32; integers use a plain loop in i64.
 *
 * The work items are (batch, tile of C) pairs on the pool, each tile one
 * single-threaded GEMM over the whole K; the tiles' size depends on M, N
 * and K only (lm_gemm_tiling), so the bits do not depend on the thread
 * count.  A product of a batch is cut as the same product alone, except
 * on the one-GEMM path above, whose M is the batch's rows together. */
#include <stdlib.h>
#include <string.h>
#include "cpu.h"
#include "core/profile.h"

/* BLAS layout of a rows x cols matrix with strides (rs, cs), or false. */
static bool blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, int *trans, int64_t *ld)
{
    if (cols == 1) cs = 1;
    if (rows == 1) rs = cols;
    if (cs == 1 && rs >= cols && rs > 0) { *trans = LM_CBLAS_NOTRANS; *ld = rs; return true; }
    if (rs == 1 && cs >= rows && cs > 0) { *trans = LM_CBLAS_TRANS; *ld = cs; return true; }
    return false;
}

typedef struct {
    lm_array *node;
    const lm_array *a, *b;
    int64_t M, K, N, batch;
    const char *pa, *pb;     /* f32/f64 data of the (possibly converted) operands */
    int64_t sa[LM_MAX_DIMS], sb[LM_MAX_DIMS];   /* batch strides in elements of pa/pb */
    int64_t ars, acs, brs, bcs;
    lm_dtype ct;
    float *outf;             /* f32 output staging for f16/bf16 */
    int64_t mb, nb, tn, tiles;   /* tiles of one product's C: mb x nb, tn per row of tiles */
    int failed;              /* cancelled */
} mm_ctx;

static void batch_offsets(const mm_ctx *c, int64_t bi, int64_t *oa, int64_t *ob)
{
    int nb = c->node->ndim - 2;
    *oa = *ob = 0;
    for (int d = nb - 1; d >= 0; d--) {
        int64_t i = bi % c->node->shape[d];
        bi /= c->node->shape[d];
        *oa += i * c->sa[d];
        *ob += i * c->sb[d];
    }
}

/* tile t of product bi */
static void gemm_tile(const mm_ctx *c, int64_t bi, int64_t t)
{
    int64_t oa, ob;
    batch_offsets(c, bi, &oa, &ob);
    int ta = LM_CBLAS_NOTRANS, tb = LM_CBLAS_NOTRANS;
    int64_t lda = c->K, ldb = c->N;
    blas_layout(c->M, c->K, c->ars, c->acs, &ta, &lda);
    blas_layout(c->K, c->N, c->brs, c->bcs, &tb, &ldb);
    size_t esz = lm_dtype_size(c->ct);
    const void *A = c->pa + oa * (int64_t)esz, *B = c->pb + ob * (int64_t)esz;
    char *C = c->ct == LM_F64 || !c->outf ? lm_cpu_ptr(c->node) : (char *)c->outf;
    C += bi * c->M * c->N * (int64_t)esz;
    lm_gemm_tile(c->ct == LM_F64, ta, tb, c->M, c->N, c->K, 1.0, A, lda, B, ldb, 0.0, C, c->N,
                 (t / c->tn) * c->mb, (t % c->tn) * c->nb, c->mb, c->nb);
}

/* items w = bi * tiles + t */
static void mm_task(void *p, int64_t w0, int64_t w1)
{
    mm_ctx *c = p;
    for (int64_t w = w0; w < w1; w++) {
        if (lm_cancel_requested()) {
            __atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
            return;
        }
        gemm_tile(c, w / c->tiles, w % c->tiles);
    }
}

static void plan_tiles(mm_ctx *c)
{
    lm_gemm_tiling(c->M, c->N, c->K, &c->mb, &c->nb);
    c->tn = (c->N + c->nb - 1) / c->nb;
    c->tiles = ((c->M + c->mb - 1) / c->mb) * c->tn;
}

static lm_status int_matmul(lm_array *node)
{
    const lm_array *a = node->inputs[0], *b = node->inputs[1];
    int nd = node->ndim;
    int64_t M = node->shape[nd - 2], N = node->shape[nd - 1], K = a->shape[nd - 1];
    int64_t batch = M != 0 && N != 0 ? node->size / (M * N) : 0;
    size_t esz = lm_dtype_size(a->dtype);
    for (int64_t bi = 0; bi < batch; bi++) {
        int64_t oa = 0, ob = 0, rem = bi;
        for (int d = nd - 3; d >= 0; d--) {
            int64_t i = rem % node->shape[d];
            rem /= node->shape[d];
            oa += i * a->strides[d];
            ob += i * b->strides[d];
        }
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                int64_t acc = 0;
                for (int64_t k = 0; k < K; k++) {
                    int64_t x, y;
                    lm_convert(&x, LM_I64, (const char *)lm_cpu_ptr(a) + (oa + i * a->strides[nd - 2] + k * a->strides[nd - 1]) * (int64_t)esz, a->dtype, 1);
                    lm_convert(&y, LM_I64, (const char *)lm_cpu_ptr(b) + (ob + k * b->strides[nd - 2] + j * b->strides[nd - 1]) * (int64_t)esz, b->dtype, 1);
                    acc = (int64_t)((uint64_t)acc + (uint64_t)x * (uint64_t)y);
                }
                lm_convert((char *)lm_cpu_ptr(node) + ((bi * M + i) * N + j) * (int64_t)lm_dtype_size(node->dtype),
                           node->dtype, &acc, LM_I64, 1);
            }
    }
    return LM_OK;
}

lm_status lm_cpu_run_matmul(lm_device *d, lm_array *node)
{
    (void)d;
    const lm_array *a = node->inputs[0], *b = node->inputs[1];
    if (!lm_dtype_is_float(node->dtype)) {
        lm_profile_kernel_name("int_matmul");
        return int_matmul(node);
    }
    int nd = node->ndim;
    mm_ctx c;
    memset(&c, 0, sizeof c);
    c.node = node;
    c.M = node->shape[nd - 2];
    c.N = node->shape[nd - 1];
    c.K = a->shape[nd - 1];
    c.batch = c.M != 0 && c.N != 0 ? node->size / (c.M * c.N) : 0;
    c.ct = node->dtype == LM_F64 ? LM_F64 : LM_F32;
    if (node->size == 0) return LM_OK;
    if (c.K == 0) {
        memset(lm_cpu_ptr(node), 0, lm_array_nbytes(node));
        return LM_OK;
    }
    void *owned_a = NULL, *owned_b = NULL;
    int t;
    int64_t ld;
    /* operands usable in place: the compute dtype and a BLAS layout */
    bool a_ok = a->dtype == c.ct && blas_layout(c.M, c.K, a->strides[nd - 2], a->strides[nd - 1], &t, &ld);
    bool b_ok = b->dtype == c.ct && blas_layout(c.K, c.N, b->strides[nd - 2], b->strides[nd - 1], &t, &ld);
    /* an operand BLAS cannot read in place is copied first: a cost worth seeing */
    lm_profile_kernel_name(c.ct == LM_F64 ? "dgemm" : "sgemm");
    if (!a_ok || !b_ok) lm_profile_kernel_name("operand_copy");
    if (a_ok) {
        c.pa = lm_cpu_ptr(a);
        memcpy(c.sa, a->strides, sizeof c.sa);
        c.ars = a->strides[nd - 2];
        c.acs = a->strides[nd - 1];
    } else {
        c.pa = lm_cpu_contiguous(a, c.ct, &owned_a);
        int64_t acc = 1;
        for (int k = nd - 1; k >= 0; k--) { c.sa[k] = acc; acc *= a->shape[k]; }
        c.ars = c.K;
        c.acs = 1;
    }
    if (b_ok) {
        c.pb = lm_cpu_ptr(b);
        memcpy(c.sb, b->strides, sizeof c.sb);
        c.brs = b->strides[nd - 2];
        c.bcs = b->strides[nd - 1];
    } else {
        c.pb = lm_cpu_contiguous(b, c.ct, &owned_b);
        int64_t acc = 1;
        for (int k = nd - 1; k >= 0; k--) { c.sb[k] = acc; acc *= b->shape[k]; }
        c.brs = c.N;
        c.bcs = 1;
    }
    lm_status st = LM_OK;
    if (!c.pa || !c.pb) { st = lm_error_status(); goto done; }
    if (node->dtype != c.ct) {
        c.outf = malloc(sizeof(float) * (size_t)node->size);
        if (!c.outf) { st = lm_error_set(LM_ERR_NOMEM, "matmul: out of host memory"); goto done; }
    }
    /* one GEMM when B is shared and A's batches are rows of one matrix */
    bool b_shared = true, a_rows = c.acs == 1 && (c.ars == c.K || c.M == 1);
    int64_t expect = c.M * c.ars;
    for (int k = nd - 3; k >= 0; k--) {
        if (node->shape[k] == 1) continue;
        if (c.sb[k] != 0) b_shared = false;
        if (c.sa[k] != expect) a_rows = false;
        expect *= node->shape[k];
    }
    if (c.batch > 1 && b_shared && a_rows) {
        mm_ctx one = c;
        one.M = c.M * c.batch;
        one.batch = 1;
        one.ars = c.K;
        memset(one.sa, 0, sizeof one.sa);
        memset(one.sb, 0, sizeof one.sb);
        plan_tiles(&one);
        lm_cpu_parallel_for(one.tiles, 1, mm_task, &one);
        c.failed = one.failed;
    } else {
        plan_tiles(&c);
        lm_cpu_parallel_for(c.batch * c.tiles, 1, mm_task, &c);
    }
    if (c.failed) st = lm_error_set(LM_ERR_CANCELLED, "matmul: interrupted");
    if (c.outf && st == LM_OK) lm_cpu_convert(lm_cpu_ptr(node), node->dtype, c.outf, LM_F32, (size_t)node->size);
done:
    free(c.outf);
    free(owned_a);
    free(owned_b);
    return st;
}
