/* nn_norm.c - softmax, log_softmax, layer_norm, rms_norm, group_norm.
 *
 * Each op works on rows: softmax along its axis, layer/rms norm over the
 * trailing axes, group norm over one (sample, group).  A row is read in
 * place when it is contiguous and of the compute dtype, else gathered
 * through its strides into a per-task buffer; results go straight into the
 * output when possible.  Rows run in parallel.  f32/f16/bf16 compute in
 * f32 with 8-wide vector loops (statistics merged in f64 chunk by chunk, so
 * long rows stay accurate); f64 computes in f64 with plain loops. */
#include <stdlib.h>
#include "nn.h"
#include "vmath.h"

#define STAT_CHUNK 512

/* ------------------------------------------------------- f32 row helpers */

/* the row helpers at the CPU's width (vmath.h); SLEEF's exp */
double nn_exp_sub_sum(float *o, const float *x, int64_t n, float m)
{
    return lm_vm->exp_sub_sum(o, x, n, m);
}

float nn_max_row(const float *x, int64_t n) { return lm_vm->max(x, n); }

void nn_scale_row(float *o, const float *x, int64_t n, float s, bool nt) { lm_vm->scale(o, x, n, s, nt); }

/* mean and sum of squared deviations, chunk by chunk (Chan's merge) */
NN_CLONES static void stats_row(const float *x, int64_t n, double *mean_out, double *m2_out)
{
    double mean = 0, m2 = 0, cnt = 0;
    for (int64_t c0 = 0; c0 < n; c0 += STAT_CHUNK) {
        int64_t len = n - c0 < STAT_CHUNK ? n - c0 : STAT_CHUNK;
        const float *p = x + c0;
        nn_v8f s = nn_splat8(0);
        int64_t i = 0;
        float tail = 0;
        for (; i + 8 <= len; i += 8) s += nn_load8(p + i);
        for (; i < len; i++) tail += p[i];
        float cm = (nn_hsum8(s) + tail) / (float)len;
        nn_v8f q = nn_splat8(0), cv = nn_splat8(cm);
        float qt = 0;
        for (i = 0; i + 8 <= len; i += 8) {
            nn_v8f d = nn_load8(p + i) - cv;
            q += d * d;
        }
        for (; i < len; i++) qt += (p[i] - cm) * (p[i] - cm);
        double cq = (double)nn_hsum8(q) + qt, nb = (double)len, d = (double)cm - mean;
        mean += d * nb / (cnt + nb);
        m2 += cq + d * d * cnt * nb / (cnt + nb);
        cnt += nb;
    }
    *mean_out = mean;
    *m2_out = m2;
}

NN_CLONES static double sumsq_row(const float *x, int64_t n)
{
    double acc = 0;
    for (int64_t c0 = 0; c0 < n; c0 += STAT_CHUNK) {
        int64_t len = n - c0 < STAT_CHUNK ? n - c0 : STAT_CHUNK, i = 0;
        const float *p = x + c0;
        nn_v8f s = nn_splat8(0);
        for (; i + 8 <= len; i += 8) {
            nn_v8f v = nn_load8(p + i);
            s += v * v;
        }
        double t = nn_hsum8(s);
        for (; i < len; i++) t += (double)p[i] * p[i];
        acc += t;
    }
    return acc;
}

/* o = (x - mean) * rstd * w + b, w/b optional (per element) */
NN_CLONES static void affine_row(float *o, const float *x, int64_t n, float mean, float rstd,
                                 const float *w, const float *b, bool nt)
{
    nn_v8f mv = nn_splat8(mean), rv = nn_splat8(rstd);
    int64_t i = nn_head(o, n, nt);
    for (int64_t k = 0; k < i; k++) o[k] = (x[k] - mean) * rstd * (w ? w[k] : 1.0f) + (b ? b[k] : 0.0f);
    for (; i + 8 <= n; i += 8) {
        nn_v8f y = (nn_load8(x + i) - mv) * rv;
        if (w) y *= nn_load8(w + i);
        if (b) y += nn_load8(b + i);
        nn_put8(o + i, y, nt);
    }
    for (; i < n; i++) {
        float y = (x[i] - mean) * rstd;
        if (w) y *= w[i];
        if (b) y += b[i];
        o[i] = y;
    }
}

/* o = x * a + c */
NN_CLONES static void axpb_row(float *o, const float *x, int64_t n, float a, float c, bool nt)
{
    nn_v8f av = nn_splat8(a), cv = nn_splat8(c);
    int64_t i = nn_head(o, n, nt);
    for (int64_t k = 0; k < i; k++) o[k] = x[k] * a + c;
    for (; i + 8 <= n; i += 8) nn_put8(o + i, nn_load8(x + i) * av + cv, nt);
    for (; i < n; i++) o[i] = x[i] * a + c;
}

/* ------------------------------------------------------------ row access */

typedef struct {
    lm_array *node;
    const lm_array *x;
    lm_dtype ct;                  /* F32 or F64 */
    int64_t rows, len, inner;     /* row r = (outer r / inner, j = r % inner) */
    int vn;                       /* x viewed with the row axis last */
    int64_t vsh[LM_MAX_DIMS], vst[LM_MAX_DIMS];
    bool in_direct, out_direct;
    bool nt;                      /* output far larger than the caches: stream it */
    const void *w, *b;            /* affine params, contiguous in ct (or NULL) */
    int64_t groups, spatial;      /* group norm */
    int failed;
} rows_ctx;

static void rows_setup(rows_ctx *c, lm_array *node, int axis, int64_t len)
{
    const lm_array *x = node->inputs[0];
    memset(c, 0, sizeof *c);
    c->node = node;
    c->x = x;
    c->ct = node->dtype == LM_F64 ? LM_F64 : LM_F32;
    c->len = len;
    c->inner = 1;
    c->rows = len ? node->size / len : 0;
    for (int d = 0; d < x->ndim; d++) {
        if (d == axis) continue;
        c->vsh[c->vn] = x->shape[d];
        c->vst[c->vn++] = x->strides[d];
        if (axis >= 0 && d > axis) c->inner *= x->shape[d];
    }
    if (axis >= 0) {
        c->vsh[c->vn] = x->shape[axis];
        c->vst[c->vn++] = x->strides[axis];
    }
    c->in_direct = c->inner == 1 && x->dtype == c->ct && lm_array_is_contiguous(x);
    c->out_direct = c->inner == 1 && node->dtype == c->ct;
    c->nt = c->out_direct && c->ct == LM_F32 && lm_array_nbytes(node) >= (16u << 20);
}

static const void *row_in(const rows_ctx *c, int64_t r, void *buf)
{
    size_t esz = lm_dtype_size(c->ct);
    if (c->in_direct) return (const char *)lm_cpu_ptr(c->x) + r * c->len * (int64_t)esz;
    lm_cpu_gather(buf, c->ct, lm_cpu_ptr(c->x), c->x->dtype, c->vn, c->vsh, c->vst, r * c->len, c->len);
    return buf;
}

static void *row_out(const rows_ctx *c, int64_t r, void *buf)
{
    if (c->out_direct) return (char *)lm_cpu_ptr(c->node) + r * c->len * (int64_t)lm_dtype_size(c->ct);
    return buf;
}

/* moves a row computed in buf (ct) to the output; tmp holds len elements */
static void row_done(const rows_ctx *c, int64_t r, const void *buf, void *tmp)
{
    if (c->out_direct) return;
    lm_array *o = c->node;
    size_t osz = lm_dtype_size(o->dtype);
    int64_t outer = r / c->inner, j = r % c->inner;
    char *dst = (char *)lm_cpu_ptr(o) + (outer * c->len * c->inner + j) * (int64_t)osz;
    if (c->inner == 1) {
        lm_cpu_convert(dst, o->dtype, buf, c->ct, (size_t)c->len);
        return;
    }
    lm_cpu_convert(tmp, o->dtype, buf, c->ct, (size_t)c->len);
    lm_cpu_scatter(dst, o->dtype, 1, &c->len, &c->inner, 0, c->len, tmp);
}

/* computes row r of y from row r of x; scratch holds len elements of ct */
typedef void (*row_fn)(rows_ctx *c, int64_t r, const void *x, void *y, void *scratch);

typedef struct { rows_ctx *c; row_fn fn; } rows_job;

static void rows_task(void *p, int64_t b, int64_t e)
{
    rows_job *j = p;
    rows_ctx *c = j->c;
    size_t n = (size_t)c->len * 8 + 64;
    char *mem = malloc(3 * n);
    if (!mem) {
        __atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t r = b; r < e; r++) {
        const void *x = row_in(c, r, mem);
        void *y = row_out(c, r, mem + n);
        j->fn(c, r, x, y, mem + 2 * n);
        row_done(c, r, y, mem + 2 * n);
    }
    nn_stream_fence();
    free(mem);
}

static lm_status rows_run(rows_ctx *c, row_fn fn)
{
    rows_job j = {c, fn};
    int64_t grain = c->len >= 4096 ? 1 : 4096 / (c->len ? c->len : 1);
    lm_cpu_parallel_for(c->rows, grain, rows_task, &j);
    if (c->failed) return lm_error_set(LM_ERR_NOMEM, "%s: out of host memory", lm_op_name(c->node->op));
    return LM_OK;
}

/* ---------------------------------------------------------------- softmax */

static void softmax_row(rows_ctx *c, int64_t r, const void *xv, void *yv, void *scratch)
{
    (void)r;
    bool lg = c->node->op == LM_OP_LOG_SOFTMAX;
    int64_t n = c->len;
    if (c->ct == LM_F32) {
        const float *x = xv;
        float *y = yv, m = nn_max_row(x, n);
        /* exponentials go to a cached scratch row so the output is written once */
        float *e = c->nt ? scratch : y;
        double s = nn_exp_sub_sum(e, x, n, m);
        if (!lg) {
            nn_scale_row(y, e, n, (float)(1.0 / s), c->nt);
        } else {
            float sub = (float)((double)m + log(s));
            for (int64_t i = 0; i < n; i++) y[i] = x[i] - sub;
        }
        return;
    }
    const double *x = xv;
    double *y = yv, m = -INFINITY, s = 0;
    bool nan = false;
    for (int64_t i = 0; i < n; i++) { if (x[i] != x[i]) nan = true; else if (x[i] > m) m = x[i]; }
    if (nan) m = NAN;
    for (int64_t i = 0; i < n; i++) s += (y[i] = exp(x[i] - m));
    for (int64_t i = 0; i < n; i++) y[i] = lg ? x[i] - m - log(s) : y[i] / s;
}

lm_status lm_nn_softmax(lm_array *node)
{
    int axis = (int)node->params.i[0];
    rows_ctx c;
    rows_setup(&c, node, axis, node->shape[axis]);
    /* the exponentials go straight into the output row and are scaled
     * there while it is in cache: measured faster than a scratch row and
     * streamed stores, though the row is read once more from memory */
    c.nt = false;
    return rows_run(&c, softmax_row);
}

/* ------------------------------------------------------------------ norms */

static void norm_row(rows_ctx *c, int64_t r, const void *xv, void *yv, void *scratch)
{
    (void)r;
    (void)scratch;
    lm_op op = c->node->op;
    double eps = c->node->params.f[0];
    int64_t n = c->len;
    if (c->ct == LM_F32) {
        const float *x = xv;
        float *y = yv;
        if (op == LM_OP_RMS_NORM) {
            double ms = n ? sumsq_row(x, n) / (double)n : 0;
            affine_row(y, x, n, 0.0f, (float)(1.0 / sqrt(ms + eps)), c->w, NULL, c->nt);
        } else {
            double mean, m2;
            stats_row(x, n, &mean, &m2);
            affine_row(y, x, n, (float)mean, (float)(1.0 / sqrt(m2 / (double)n + eps)), c->w, c->b, c->nt);
        }
        return;
    }
    const double *x = xv, *w = c->w, *b = c->b;
    double *y = yv, mean = 0, v = 0;
    if (op != LM_OP_RMS_NORM) {
        for (int64_t i = 0; i < n; i++) mean += x[i];
        mean /= (double)n;
    }
    for (int64_t i = 0; i < n; i++) v += (x[i] - mean) * (x[i] - mean);
    double rstd = 1.0 / sqrt(v / (double)n + eps);
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] - mean) * rstd * (w ? w[i] : 1) + (b ? b[i] : 0);
}

/* one (sample, group) row: statistics over it, affine per channel */
static void group_row(rows_ctx *c, int64_t r, const void *xv, void *yv, void *scratch)
{
    (void)scratch;
    int64_t n = c->len, S = c->spatial, cpg = n / (S ? S : 1), g = r % c->groups;
    double eps = c->node->params.f[0];
    if (c->ct == LM_F32) {
        const float *x = xv, *w = c->w, *b = c->b;
        float *y = yv;
        double mean, m2;
        stats_row(x, n, &mean, &m2);
        double rstd = 1.0 / sqrt(m2 / (double)n + eps);
        for (int64_t k = 0; k < cpg; k++) {
            int64_t ch = g * cpg + k;
            double a = rstd * (w ? w[ch] : 1.0f);
            axpb_row(y + k * S, x + k * S, S, (float)a, (float)((b ? b[ch] : 0.0f) - mean * a), c->nt);
        }
        return;
    }
    const double *x = xv, *w = c->w, *b = c->b;
    double *y = yv, mean = 0, v = 0;
    for (int64_t i = 0; i < n; i++) mean += x[i];
    mean /= (double)n;
    for (int64_t i = 0; i < n; i++) v += (x[i] - mean) * (x[i] - mean);
    double rstd = 1.0 / sqrt(v / (double)n + eps);
    for (int64_t i = 0; i < n; i++) {
        int64_t ch = g * cpg + i / S;
        y[i] = (x[i] - mean) * rstd * (w ? w[ch] : 1) + (b ? b[ch] : 0);
    }
}

lm_status lm_nn_norm(lm_array *node)
{
    const lm_params *p = &node->params;
    const lm_array *x = node->inputs[0];
    rows_ctx c;
    int64_t len = 1;
    if (node->op == LM_OP_GROUP_NORM) {
        len = x->ndim ? x->size / x->shape[0] / p->i[0] : 1;
        rows_setup(&c, node, -1, len);
        c.groups = p->i[0];
        c.spatial = x->shape[1] ? len / (x->shape[1] / p->i[0]) : 1;
    } else {
        for (int d = x->ndim - (int)p->i[0]; d < x->ndim; d++) len *= x->shape[d];
        rows_setup(&c, node, -1, len);
    }
    void *own_w = NULL, *own_b = NULL;
    int k = 1;
    if (p->i[1] && !(c.w = lm_cpu_contiguous(node->inputs[k++], c.ct, &own_w))) return lm_error_status();
    if (p->i[2] && !(c.b = lm_cpu_contiguous(node->inputs[k++], c.ct, &own_b))) {
        free(own_w);
        return lm_error_status();
    }
    lm_status st = rows_run(&c, node->op == LM_OP_GROUP_NORM ? group_row : norm_row);
    free(own_w);
    free(own_b);
    return st;
}
