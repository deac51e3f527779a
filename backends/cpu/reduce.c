/* reduce.c - reductions and cumsum.
 *
 * The input is viewed as [kept axes..., reduced axes...]: each output
 * element streams its R reduced elements in chunks through a small state
 * (sum, Welford mean/M2, running max for logsumexp, ...).  Long reductions
 * are split into chunks that run in parallel and whose states merge, so a
 * full sum of 64M floats uses every thread.  Floats accumulate in f64 per
 * chunk; integers in i64.  A contiguous f32 run takes a vectorised path. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cpu.h"

#define CHUNK 16384

typedef struct {
    double sum, mx, mn, mean, m2, lse_m, lse_s;
    int64_t isum, iprod, imx, imn, count, arg;
    double argv;
    double prod;
    int any, all, nan;
} rstate;

typedef struct {
    lm_array *out;
    const lm_array *in;
    lm_op op;
    int nk, nr;
    int64_t kshape[LM_MAX_DIMS], kstr[LM_MAX_DIMS], rshape[LM_MAX_DIMS], rstr[LM_MAX_DIMS];
    int64_t K, R, nchunks;
    bool ints;          /* integer/bool input with an integer-exact op */
    bool run_f32;       /* reduced part is one contiguous f32 run */
    rstate *states;     /* K * nchunks when split */
} red_ctx;

static void st_init(rstate *s)
{
    memset(s, 0, sizeof *s);
    s->prod = 1;
    s->iprod = 1;
    s->mx = -INFINITY;
    s->mn = INFINITY;
    s->imx = INT64_MIN;
    s->imn = INT64_MAX;
    s->lse_m = -INFINITY;
    s->all = 1;
    s->arg = -1;
}

static void st_update(rstate *s, lm_op op, const double *v, int64_t n, int64_t base)
{
    switch (op) {
    case LM_OP_SUM: case LM_OP_MEAN: {
        double a = 0;
        for (int64_t i = 0; i < n; i++) a += v[i];
        s->sum += a;
        break;
    }
    case LM_OP_PROD: for (int64_t i = 0; i < n; i++) s->prod *= v[i]; break;
    case LM_OP_MAX:
        for (int64_t i = 0; i < n; i++) { if (v[i] != v[i]) s->nan = 1; else if (v[i] > s->mx) s->mx = v[i]; }
        break;
    case LM_OP_MIN:
        for (int64_t i = 0; i < n; i++) { if (v[i] != v[i]) s->nan = 1; else if (v[i] < s->mn) s->mn = v[i]; }
        break;
    case LM_OP_ARGMAX: case LM_OP_ARGMIN:
        for (int64_t i = 0; i < n; i++) {
            if (s->nan) break;
            double x = v[i];
            bool better = s->arg < 0 || x != x || (op == LM_OP_ARGMAX ? x > s->argv : x < s->argv);
            if (better) { s->arg = base + i; s->argv = x; if (x != x) s->nan = 1; }
        }
        break;
    case LM_OP_VAR: case LM_OP_STD: {
        /* chunk mean and M2, merged with Chan's formula */
        double m = 0, m2 = 0;
        for (int64_t i = 0; i < n; i++) m += v[i];
        m /= (double)n;
        for (int64_t i = 0; i < n; i++) m2 += (v[i] - m) * (v[i] - m);
        double na = (double)s->count, nb = (double)n, d = m - s->mean;
        s->mean += d * nb / (na + nb);
        s->m2 += m2 + d * d * na * nb / (na + nb);
        s->count += n;
        break;
    }
    case LM_OP_LOGSUMEXP: {
        double m = -INFINITY;
        for (int64_t i = 0; i < n; i++) { if (v[i] != v[i]) s->nan = 1; else if (v[i] > m) m = v[i]; }
        if (m == -INFINITY) break;
        double acc = 0;
        if (m == INFINITY) { s->lse_m = INFINITY; break; }
        for (int64_t i = 0; i < n; i++) acc += exp(v[i] - m);
        if (m > s->lse_m) { s->lse_s = s->lse_s * exp(s->lse_m - m) + acc; s->lse_m = m; }
        else s->lse_s += acc * exp(m - s->lse_m);
        break;
    }
    case LM_OP_ALL: for (int64_t i = 0; i < n; i++) s->all &= v[i] != 0; break;
    case LM_OP_ANY: for (int64_t i = 0; i < n; i++) s->any |= v[i] != 0; break;
    default: break;
    }
}

static void st_update_int(rstate *s, lm_op op, const int64_t *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        switch (op) {
        case LM_OP_SUM: s->isum = (int64_t)((uint64_t)s->isum + (uint64_t)v[i]); break;
        case LM_OP_PROD: s->iprod = (int64_t)((uint64_t)s->iprod * (uint64_t)v[i]); break;
        case LM_OP_MAX: if (v[i] > s->imx) s->imx = v[i]; break;
        case LM_OP_MIN: if (v[i] < s->imn) s->imn = v[i]; break;
        default: break;
        }
    }
}

static void st_merge(rstate *a, const rstate *b, lm_op op)
{
    a->sum += b->sum;
    a->prod *= b->prod;
    a->isum = (int64_t)((uint64_t)a->isum + (uint64_t)b->isum);
    a->iprod = (int64_t)((uint64_t)a->iprod * (uint64_t)b->iprod);
    if (b->imx > a->imx) a->imx = b->imx;
    if (b->imn < a->imn) a->imn = b->imn;
    if (b->mx > a->mx) a->mx = b->mx;
    if (b->mn < a->mn) a->mn = b->mn;
    a->any |= b->any;
    a->all &= b->all;
    if (op == LM_OP_ARGMAX || op == LM_OP_ARGMIN) {
        /* chunks merge in order: a holds the earlier elements */
        if (!a->nan && b->arg >= 0) {
            bool better = a->arg < 0 || b->nan ||
                          (op == LM_OP_ARGMAX ? b->argv > a->argv : b->argv < a->argv);
            if (better) { a->arg = b->arg; a->argv = b->argv; a->nan = b->nan; }
        }
    } else {
        a->nan |= b->nan;
    }
    if (b->count) {
        double na = (double)a->count, nb = (double)b->count, d = b->mean - a->mean;
        a->mean += d * nb / (na + nb);
        a->m2 += b->m2 + d * d * na * nb / (na + nb);
        a->count += b->count;
    }
    if (b->lse_m == INFINITY || a->lse_m == INFINITY) a->lse_m = INFINITY;
    else if (b->lse_m > -INFINITY) {
        if (b->lse_m > a->lse_m) { a->lse_s = a->lse_s * exp(a->lse_m - b->lse_m) + b->lse_s; a->lse_m = b->lse_m; }
        else a->lse_s += b->lse_s * exp(b->lse_m - a->lse_m);
    }
}

static void st_store(const red_ctx *c, const rstate *s, int64_t o)
{
    lm_array *out = c->out;
    void *dst = (char *)lm_cpu_ptr(out) + o * (int64_t)lm_dtype_size(out->dtype);
    if (c->ints) {
        int64_t v = c->op == LM_OP_SUM ? s->isum : c->op == LM_OP_PROD ? s->iprod
                  : c->op == LM_OP_MAX ? s->imx : s->imn;
        lm_convert(dst, out->dtype, &v, LM_I64, 1);
        return;
    }
    double v = 0;
    int ddof = (int)out->params.i[2];
    switch (c->op) {
    case LM_OP_SUM: v = s->sum; break;
    case LM_OP_MEAN: v = c->R ? s->sum / (double)c->R : NAN; break;
    case LM_OP_PROD: v = s->prod; break;
    case LM_OP_MAX: v = s->nan ? NAN : s->mx; break;
    case LM_OP_MIN: v = s->nan ? NAN : s->mn; break;
    case LM_OP_VAR: case LM_OP_STD:
        v = c->R - ddof > 0 ? s->m2 / (double)(c->R - ddof) : NAN;
        if (c->op == LM_OP_STD) v = sqrt(v);
        break;
    case LM_OP_LOGSUMEXP:
        v = s->nan ? NAN : s->lse_m == INFINITY ? INFINITY : s->lse_m == -INFINITY ? -INFINITY
          : s->lse_m + log(s->lse_s);
        break;
    case LM_OP_ALL: v = s->all; break;
    case LM_OP_ANY: v = s->any; break;
    case LM_OP_ARGMAX: case LM_OP_ARGMIN: {
        int64_t a = s->arg < 0 ? 0 : s->arg;
        lm_convert(dst, out->dtype, &a, LM_I64, 1);
        return;
    }
    default: break;
    }
    lm_convert(dst, out->dtype, &v, LM_F64, 1);
}

/* sum/max/min of a contiguous f32 run without conversion */
static bool run_f32(rstate *s, lm_op op, const float *x, int64_t n)
{
    if (op == LM_OP_SUM || op == LM_OP_MEAN) {
        typedef float v4 __attribute__((vector_size(16)));
        v4 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) {
            v4 x0, x1, x2, x3;
            memcpy(&x0, x + i, 16); memcpy(&x1, x + i + 4, 16);
            memcpy(&x2, x + i + 8, 16); memcpy(&x3, x + i + 12, 16);
            a0 += x0; a1 += x1; a2 += x2; a3 += x3;
        }
        v4 t = (a0 + a1) + (a2 + a3);
        double acc = (double)t[0] + t[1] + t[2] + t[3];
        for (; i < n; i++) acc += x[i];
        s->sum += acc;
        return true;
    }
    return false;
}

static void chunk_of(const red_ctx *c, rstate *s, int64_t o, int64_t ch)
{
    const lm_array *in = c->in;
    int64_t off = 0, rem = o;
    for (int d = c->nk - 1; d >= 0; d--) {
        off += (rem % c->kshape[d]) * c->kstr[d];
        rem /= c->kshape[d];
    }
    const char *base = (const char *)lm_cpu_ptr(in) + off * (int64_t)lm_dtype_size(in->dtype);
    int64_t r0 = ch * CHUNK, r1 = r0 + CHUNK < c->R ? r0 + CHUNK : c->R;
    double buf[1024];
    int64_t ibuf[1024];
    if (c->run_f32 && run_f32(s, c->op, (const float *)base + r0, r1 - r0)) return;
    for (int64_t r = r0; r < r1; r += 1024) {
        int64_t n = r1 - r < 1024 ? r1 - r : 1024;
        if (c->ints) {
            lm_cpu_gather(ibuf, LM_I64, base, in->dtype, c->nr, c->rshape, c->rstr, r, n);
            st_update_int(s, c->op, ibuf, n);
        } else {
            lm_cpu_gather(buf, LM_F64, base, in->dtype, c->nr, c->rshape, c->rstr, r, n);
            st_update(s, c->op, buf, n, r);
        }
    }
}

static void whole_task(void *p, int64_t b, int64_t e)
{
    red_ctx *c = p;
    for (int64_t o = b; o < e; o++) {
        rstate s;
        st_init(&s);
        for (int64_t ch = 0; ch < c->nchunks; ch++) {
            rstate t;
            st_init(&t);
            chunk_of(c, &t, o, ch);
            st_merge(&s, &t, c->op);
        }
        st_store(c, &s, o);
    }
}

static void split_task(void *p, int64_t b, int64_t e)
{
    red_ctx *c = p;
    for (int64_t w = b; w < e; w++) {
        st_init(&c->states[w]);
        chunk_of(c, &c->states[w], w / c->nchunks, w % c->nchunks);
    }
}

static lm_status run_reduction(lm_array *node)
{
    red_ctx c;
    memset(&c, 0, sizeof c);
    const lm_array *in = node->inputs[0];
    int64_t mask = node->params.i[0];
    c.out = node;
    c.in = in;
    c.op = node->op;
    c.K = 1;
    c.R = 1;
    for (int d = 0; d < in->ndim; d++) {
        if (mask & (1 << d)) {
            c.rshape[c.nr] = in->shape[d];
            c.rstr[c.nr++] = in->strides[d];
            c.R *= in->shape[d];
        } else {
            c.kshape[c.nk] = in->shape[d];
            c.kstr[c.nk++] = in->strides[d];
            c.K *= in->shape[d];
        }
    }
    if (c.nr == 0) { c.rshape[0] = 1; c.rstr[0] = 1; c.nr = 1; }
    c.ints = !lm_dtype_is_float(in->dtype) &&
             (c.op == LM_OP_SUM || c.op == LM_OP_PROD || c.op == LM_OP_MAX || c.op == LM_OP_MIN);
    int64_t expect = 1;
    c.run_f32 = in->dtype == LM_F32;
    for (int d = c.nr - 1; d >= 0; d--) {
        if (c.rshape[d] != 1 && c.rstr[d] != expect) c.run_f32 = false;
        expect *= c.rshape[d];
    }
    c.nchunks = c.R ? (c.R + CHUNK - 1) / CHUNK : 1;
    if (c.K == 0) return LM_OK;
    /* The chunks are fixed by R (CHUNK), and both ways merge each output's
     * chunk states in chunk order, starting from the first chunk's state
     * (merging it into a fresh state changes no bit: the first of several
     * chunks holds 2^14 elements, so Chan's d*n/n is exact), so the thread
     * count chooses only where the states live, never the bits. */
    int threads = lm_cpu_threads();
    if (c.nchunks == 1 || c.K >= 4 * threads) {
        int64_t grain = c.R >= 4096 ? 1 : 4096 / (c.R ? c.R : 1);
        lm_cpu_parallel_for(c.K, grain, whole_task, &c);
        return LM_OK;
    }
    c.states = malloc(sizeof(rstate) * (size_t)(c.K * c.nchunks));
    if (!c.states) return lm_error_set(LM_ERR_NOMEM, "%s: out of host memory", lm_op_name(c.op));
    lm_cpu_parallel_for(c.K * c.nchunks, 1, split_task, &c);
    for (int64_t o = 0; o < c.K; o++) {
        rstate *s = &c.states[o * c.nchunks];
        for (int64_t ch = 1; ch < c.nchunks; ch++) st_merge(s, &c.states[o * c.nchunks + ch], c.op);
        st_store(&c, s, o);
    }
    free(c.states);
    return LM_OK;
}

/* ---------------------------------------------------------------- cumsum */

typedef struct { lm_array *out; const lm_array *in; int axis; int64_t len, inner; } cum_ctx;

static void cumsum_task(void *p, int64_t b, int64_t e)
{
    cum_ctx *c = p;
    const lm_array *in = c->in;
    lm_array *out = c->out;
    bool ints = !lm_dtype_is_float(out->dtype);
    size_t isz = lm_dtype_size(in->dtype), osz = lm_dtype_size(out->dtype);
    for (int64_t line = b; line < e; line++) {
        /* line = outer * inner + j over the output's row-major layout */
        int64_t outer = line / c->inner, j = line % c->inner;
        int64_t ioff = 0, rem = j;
        for (int d = in->ndim - 1; d > c->axis; d--) { ioff += (rem % in->shape[d]) * in->strides[d]; rem /= in->shape[d]; }
        rem = outer;
        for (int d = c->axis - 1; d >= 0; d--) { ioff += (rem % in->shape[d]) * in->strides[d]; rem /= in->shape[d]; }
        double acc = 0;
        int64_t iacc = 0;
        for (int64_t k = 0; k < c->len; k++) {
            const char *src = (const char *)lm_cpu_ptr(in) + (ioff + k * in->strides[c->axis]) * (int64_t)isz;
            char *dst = (char *)lm_cpu_ptr(out) + ((outer * c->len + k) * c->inner + j) * (int64_t)osz;
            if (ints) {
                int64_t v;
                lm_convert(&v, LM_I64, src, in->dtype, 1);
                iacc = (int64_t)((uint64_t)iacc + (uint64_t)v);
                lm_convert(dst, out->dtype, &iacc, LM_I64, 1);
            } else {
                double v;
                lm_convert(&v, LM_F64, src, in->dtype, 1);
                acc += v;
                lm_convert(dst, out->dtype, &acc, LM_F64, 1);
            }
        }
    }
}

lm_status lm_cpu_run_reduce(lm_device *d, lm_array *node)
{
    (void)d;
    if (node->op != LM_OP_CUMSUM) return run_reduction(node);
    cum_ctx c = {node, node->inputs[0], (int)node->params.i[0], 0, 1};
    c.len = node->shape[c.axis];
    for (int k = c.axis + 1; k < node->ndim; k++) c.inner *= node->shape[k];
    if (c.len == 0 || node->size == 0) return LM_OK;
    lm_cpu_parallel_for(node->size / c.len, 64, cumsum_task, &c);
    return LM_OK;
}
