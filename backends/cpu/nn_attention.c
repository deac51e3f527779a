/* nn_attention.c - scaled dot-product attention with an online softmax.
 *
 * For each (batch, head) and block of BQ queries, key blocks of BK are
 * folded in one at a time (FlashAttention's recurrence): S = scale * Q K^T
 * for the block (one sgemm), mask and causal limits applied, then per row
 * m' = max(m, max S), P = exp(S - m'), l = l*exp(m - m') + sum P, O =
 * O*exp(m - m') + P V (one sgemm with beta = 1); at the end O /= l.  Memory
 * beyond q, k, v and the output is one BQ x BK score block, whatever the
 * sequence length.  Key blocks entirely above the causal diagonal are
 * skipped.  Everything computes in f32 (f64 inputs too, documented).
 * Work items (batch, head, query block) run in parallel on the pool, each
 * with its own score block and single-threaded GEMMs. */
#include <stdlib.h>
#include "nn.h"

#define BQ 128
#define BK 512

typedef struct {
    float *S, *O, *m, *l;
    int64_t bq, bk, Dv, i0, j0;
    bool causal;
    int kind;                 /* 0 none, 1 additive f32, 2 bool */
    const char *mask;         /* element (i, j) at mask + i*ms2 + j*ms3 (this b, h) */
    int64_t ms2, ms3;
} sm_ctx;

static void apply_mask(const sm_ctx *c, float *s, int64_t i)
{
    if (c->kind == 1) {
        const float *mp = (const float *)c->mask + i * c->ms2 + c->j0 * c->ms3;
        for (int64_t j = 0; j < c->bk; j++) s[j] += mp[j * c->ms3];
    } else if (c->kind == 2) {
        const uint8_t *mp = (const uint8_t *)c->mask + i * c->ms2 + c->j0 * c->ms3;
        for (int64_t j = 0; j < c->bk; j++)
            if (!mp[j * c->ms3]) s[j] = -INFINITY;
    }
    if (c->causal)
        for (int64_t j = i + 1 - c->j0 > 0 ? i + 1 - c->j0 : 0; j < c->bk; j++) s[j] = -INFINITY;
}

static void online_softmax_task(void *p, int64_t r0, int64_t r1)
{
    const sm_ctx *c = p;
    for (int64_t r = r0; r < r1; r++) {
        float *s = c->S + r * c->bk, *o = c->O + r * c->Dv;
        apply_mask(c, s, c->i0 + r);
        float mx = nn_max_row(s, c->bk), mold = c->m[r];
        float mnew = mx > mold || mx != mx ? mx : mold;
        if (mnew == -INFINITY) {   /* nothing visible yet: this block adds nothing */
            memset(s, 0, sizeof(float) * (size_t)c->bk);
            continue;
        }
        double sum = nn_exp_sub_sum(s, s, c->bk, mnew);
        float corr = mold == -INFINITY ? 0.0f : expf(mold - mnew);
        if (corr != 1.0f) nn_scale_row(o, o, c->Dv, corr, false);
        c->l[r] = (float)((double)c->l[r] * corr + sum);
        c->m[r] = mnew;
    }
}

typedef struct { float *O, *l; int64_t Dv; } fin_ctx;

static void finish_task(void *p, int64_t r0, int64_t r1)
{
    const fin_ctx *c = p;
    for (int64_t r = r0; r < r1; r++)
        nn_scale_row(c->O + r * c->Dv, c->O + r * c->Dv, c->Dv, c->l[r] > 0 ? 1.0f / c->l[r] : NAN, false);
}

typedef struct {
    const float *q, *k, *v;
    float *out;
    int64_t Hq, Hk, Lq, Lk, D, Dv, nqb;
    float scale;
    bool causal;
    int kind;
    const lm_array *mask;
    int failed;               /* 1 out of memory, 2 cancelled */
} attn_ctx;

/* Query block `qb` of head (b, h): the whole key loop for BQ queries, with
 * this task's score block S and row state m, l. */
static void attend_block(const attn_ctx *a, int64_t b, int64_t h, int64_t qb, float *S, float *m, float *l)
{
    int64_t kh = h / (a->Hq / a->Hk), i0 = qb * BQ;
    int64_t bq = a->Lq - i0 < BQ ? a->Lq - i0 : BQ;
    int64_t kend = a->causal && i0 + bq < a->Lk ? i0 + bq : a->Lk;
    const float *Q = a->q + ((b * a->Hq + h) * a->Lq + i0) * a->D;
    const float *K = a->k + ((b * a->Hk + kh) * a->Lk) * a->D;
    const float *V = a->v + ((b * a->Hk + kh) * a->Lk) * a->Dv;
    float *O = a->out + ((b * a->Hq + h) * a->Lq + i0) * a->Dv;
    sm_ctx c = {S, O, m, l, bq, 0, a->Dv, i0, 0, a->causal, a->kind, NULL, 0, 0};
    if (a->mask) {
        const lm_array *mk = a->mask;
        c.mask = (const char *)lm_cpu_ptr(mk) + (b * mk->strides[0] + h * mk->strides[1]) *
                 (int64_t)lm_dtype_size(mk->dtype);
        c.ms2 = mk->strides[2];
        c.ms3 = mk->strides[3];
    }
    memset(O, 0, sizeof(float) * (size_t)(bq * a->Dv));
    for (int64_t r = 0; r < bq; r++) { m[r] = -INFINITY; l[r] = 0; }
    for (int64_t j0 = 0; j0 < kend; j0 += BK) {
        int64_t bk = kend - j0 < BK ? kend - j0 : BK;
        lm_sgemm(LM_CBLAS_NOTRANS, LM_CBLAS_TRANS, (int)bq, (int)bk, (int)a->D, a->scale, Q, (int)a->D,
                 K + j0 * a->D, (int)a->D, 0.0f, S, (int)bk);
        c.bk = bk;
        c.j0 = j0;
        online_softmax_task(&c, 0, bq);
        lm_sgemm(LM_CBLAS_NOTRANS, LM_CBLAS_NOTRANS, (int)bq, (int)a->Dv, (int)bk, 1.0f, S, (int)bk,
                 V + j0 * a->Dv, (int)a->Dv, 1.0f, O, (int)a->Dv);
    }
    fin_ctx f = {O, l, a->Dv};
    finish_task(&f, 0, bq);
}

/* work items w = (b * Hq + h) * nqb + qb */
static void attend_task(void *p, int64_t w0, int64_t w1)
{
    attn_ctx *a = p;
    float *S = malloc(sizeof(float) * (BQ * BK + 2 * BQ));
    if (!S) {
        __atomic_store_n(&a->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t w = w0; w < w1; w++) {
        if (lm_cancel_requested()) {
            __atomic_store_n(&a->failed, 2, __ATOMIC_RELAXED);
            break;
        }
        int64_t qb = w % a->nqb, bh = w / a->nqb;
        attend_block(a, bh / a->Hq, bh % a->Hq, qb, S, S + BQ * BK, S + BQ * BK + BQ);
    }
    free(S);
}

lm_status lm_nn_attention(lm_array *node)
{
    const lm_array *q = node->inputs[0], *k = node->inputs[1], *v = node->inputs[2];
    attn_ctx a = {0};
    a.Hq = q->shape[1];
    a.Hk = k->shape[1];
    a.Lq = q->shape[2];
    a.Lk = k->shape[2];
    a.D = q->shape[3];
    a.Dv = v->shape[3];
    a.nqb = (a.Lq + BQ - 1) / BQ;
    a.scale = (float)node->params.f[0];
    a.causal = node->params.i[0] != 0;
    a.kind = (int)node->params.i[1];
    a.mask = node->ninputs > 3 ? node->inputs[3] : NULL;
    void *oq = NULL, *ok = NULL, *ov = NULL;
    float *stage = NULL;
    lm_status st = LM_OK;
    a.q = lm_cpu_contiguous(q, LM_F32, &oq);
    a.k = a.q ? lm_cpu_contiguous(k, LM_F32, &ok) : NULL;
    a.v = a.k ? lm_cpu_contiguous(v, LM_F32, &ov) : NULL;
    a.out = a.v ? nn_out_begin(node, &stage) : NULL;
    if (!a.out) {
        st = lm_error_status();
        goto done;
    }
    lm_cpu_parallel_for(q->shape[0] * a.Hq * a.nqb, 1, attend_task, &a);
    if (a.failed == 1) st = lm_error_set(LM_ERR_NOMEM, "attention: out of host memory");
    else if (a.failed == 2) st = lm_error_set(LM_ERR_CANCELLED, "attention: interrupted");
    else if (stage) { nn_out_end(node, stage); stage = NULL; }
done:
    free(stage);
    free(oq);
    free(ok);
    free(ov);
    return st;
}
