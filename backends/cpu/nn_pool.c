/* nn_pool.c - max/avg/adaptive-avg pooling and nearest/bilinear upsampling.
 *
 * The input is made contiguous in the compute type (f32 for f32/f16/bf16,
 * f64 for f64 and integers, which f64 holds exactly below 2^53); each task
 * takes whole [H, W] planes.  Index arithmetic follows PyTorch's CPU
 * kernels so window edges and source coordinates agree exactly. */
#include <stdlib.h>
#include "nn.h"

typedef struct {
    lm_array *node;
    const void *x;        /* [N*C, H, W] in ct */
    void *y;              /* [N*C, OH, OW] in ct */
    lm_dtype ct;
    int64_t H, W, OH, OW;
} plane_ctx;

static inline double ld(const plane_ctx *c, const void *base, int64_t i)
{
    return c->ct == LM_F64 ? ((const double *)base)[i] : ((const float *)base)[i];
}

static inline void st(const plane_ctx *c, void *base, int64_t i, double v)
{
    if (c->ct == LM_F64) ((double *)base)[i] = v;
    else ((float *)base)[i] = (float)v;
}

static double max_window(const plane_ctx *c, const void *x, int64_t oy, int64_t ox)
{
    const int64_t *p = c->node->params.i;
    int64_t y0 = oy * p[2] - p[4], x0 = ox * p[3] - p[5];
    double m = -INFINITY;
    for (int64_t kh = 0; kh < p[0]; kh++) {
        int64_t iy = y0 + kh * p[6];
        if (iy < 0 || iy >= c->H) continue;
        for (int64_t kw = 0; kw < p[1]; kw++) {
            int64_t ix = x0 + kw * p[7];
            if (ix < 0 || ix >= c->W) continue;
            double v = ld(c, x, iy * c->W + ix);
            if (v > m || v != v) m = v;
            if (m != m) return m;
        }
    }
    return m;
}

static double avg_window(const plane_ctx *c, const void *x, int64_t oy, int64_t ox)
{
    const int64_t *p = c->node->params.i;
    int64_t hs = oy * p[2] - p[4], ws = ox * p[3] - p[5];
    int64_t he = hs + p[0] < c->H + p[4] ? hs + p[0] : c->H + p[4];
    int64_t we = ws + p[1] < c->W + p[5] ? ws + p[1] : c->W + p[5];
    int64_t pool = (he - hs) * (we - ws);
    if (hs < 0) hs = 0;
    if (ws < 0) ws = 0;
    if (he > c->H) he = c->H;
    if (we > c->W) we = c->W;
    if (hs >= he || ws >= we) return 0;
    double s = 0;
    for (int64_t iy = hs; iy < he; iy++)
        for (int64_t ix = ws; ix < we; ix++) s += ld(c, x, iy * c->W + ix);
    int64_t div = p[10] ? p[10] : p[9] ? pool : (he - hs) * (we - ws);
    return s / (double)div;
}

static double adaptive_window(const plane_ctx *c, const void *x, int64_t oy, int64_t ox)
{
    int64_t hs = oy * c->H / c->OH, he = ((oy + 1) * c->H + c->OH - 1) / c->OH;
    int64_t ws = ox * c->W / c->OW, we = ((ox + 1) * c->W + c->OW - 1) / c->OW;
    double s = 0;
    for (int64_t iy = hs; iy < he; iy++)
        for (int64_t ix = ws; ix < we; ix++) s += ld(c, x, iy * c->W + ix);
    return s / (double)((he - hs) * (we - ws));
}

static void pool_task(void *p, int64_t b, int64_t e)
{
    const plane_ctx *c = p;
    lm_op op = c->node->op;
    size_t esz = lm_dtype_size(c->ct);
    for (int64_t pl = b; pl < e; pl++) {
        const char *x = (const char *)c->x + pl * c->H * c->W * (int64_t)esz;
        char *y = (char *)c->y + pl * c->OH * c->OW * (int64_t)esz;
        for (int64_t oy = 0; oy < c->OH; oy++)
            for (int64_t ox = 0; ox < c->OW; ox++) {
                double v = op == LM_OP_MAX_POOL ? max_window(c, x, oy, ox)
                         : op == LM_OP_AVG_POOL ? avg_window(c, x, oy, ox)
                         : adaptive_window(c, x, oy, ox);
                st(c, y, oy * c->OW + ox, v);
            }
    }
}

/* PyTorch's area_pixel_compute_source_index for bilinear */
static double src_index(double scale, int64_t dst, bool align)
{
    if (align) return scale * (double)dst;
    double s = scale * ((double)dst + 0.5) - 0.5;
    return s < 0 ? 0 : s;
}

/* Source taps along one axis for every output index: i0, i1 and the
 * weight of i1 (nearest: i0 only).  Computed once per kernel, shared by
 * every plane and row. */
typedef struct { int64_t *i0, *i1; double *w1; } taps;

static bool make_taps(taps *t, int64_t in, int64_t out, double scale, bool bilinear, bool align)
{
    t->i0 = malloc(sizeof(int64_t) * (size_t)out * 2 + 1);
    t->w1 = malloc(sizeof(double) * (size_t)out + 1);
    if (!t->i0 || !t->w1) {
        free(t->i0);
        free(t->w1);
        return false;
    }
    t->i1 = t->i0 + out;
    /* align_corners maps corners onto corners */
    double s = align ? (out > 1 ? (double)(in - 1) / (double)(out - 1) : 0) : scale;
    for (int64_t o = 0; o < out; o++) {
        if (!bilinear) {
            /* float arithmetic, as PyTorch's nearest kernel */
            int64_t i = (int64_t)floorf((float)o * (float)scale);
            t->i0[o] = t->i1[o] = i > in - 1 ? in - 1 : i;
            t->w1[o] = 0;
        } else {
            double f = src_index(s, o, align);
            int64_t i = (int64_t)f;
            t->i0[o] = i;
            t->i1[o] = i + (i < in - 1);
            t->w1[o] = f - (double)i;
        }
    }
    return true;
}

typedef struct { plane_ctx pc; taps ty, tx; bool bilinear; } up_ctx;

static void upsample_task(void *p, int64_t b, int64_t e)
{
    const up_ctx *u = p;
    const plane_ctx *c = &u->pc;
    size_t esz = lm_dtype_size(c->ct);
    for (int64_t pl = b; pl < e; pl++) {
        const char *x = (const char *)c->x + pl * c->H * c->W * (int64_t)esz;
        char *y = (char *)c->y + pl * c->OH * c->OW * (int64_t)esz;
        for (int64_t oy = 0; oy < c->OH; oy++) {
            int64_t r0 = u->ty.i0[oy] * c->W, r1 = u->ty.i1[oy] * c->W, o = oy * c->OW;
            double ly = u->ty.w1[oy];
            if (!u->bilinear && c->ct == LM_F32) {
                const float *src = (const float *)x + r0;
                float *dst = (float *)y + o;
                for (int64_t ox = 0; ox < c->OW; ox++) dst[ox] = src[u->tx.i0[ox]];
                continue;
            }
            for (int64_t ox = 0; ox < c->OW; ox++) {
                int64_t x0 = u->tx.i0[ox], x1 = u->tx.i1[ox];
                double lx = u->tx.w1[ox], v;
                if (!u->bilinear) v = ld(c, x, r0 + x0);
                else v = (1 - ly) * ((1 - lx) * ld(c, x, r0 + x0) + lx * ld(c, x, r0 + x1)) +
                         ly * ((1 - lx) * ld(c, x, r1 + x0) + lx * ld(c, x, r1 + x1));
                st(c, y, o + ox, v);
            }
        }
    }
}

/* Runs fn over the planes with ctx (whose first member is the plane_ctx,
 * filled in here). */
static lm_status run_planes(lm_array *node, lm_cpu_task fn, void *ctx)
{
    const lm_array *x = node->inputs[0];
    plane_ctx *cp = ctx;
    plane_ctx c = {node, NULL, NULL, LM_F32, x->shape[2], x->shape[3], node->shape[2], node->shape[3]};
    if (node->dtype != LM_F32 && node->dtype != LM_F16 && node->dtype != LM_BF16) c.ct = LM_F64;
    void *own_x = NULL, *own_y = NULL;
    c.x = lm_cpu_contiguous(x, c.ct, &own_x);
    if (!c.x) return lm_error_status();
    if (node->dtype == c.ct) {
        c.y = lm_cpu_ptr(node);
    } else if (!(c.y = own_y = malloc((size_t)node->size * lm_dtype_size(c.ct)))) {
        free(own_x);
        return lm_error_set(LM_ERR_NOMEM, "%s: out of host memory", lm_op_name(node->op));
    }
    int64_t planes = node->shape[0] * node->shape[1];
    int64_t work = c.OH * c.OW + 1;
    *cp = c;
    lm_cpu_parallel_for(planes, work >= 4096 ? 1 : 4096 / work, fn, ctx);
    if (own_y) lm_cpu_convert(lm_cpu_ptr(node), node->dtype, own_y, c.ct, (size_t)node->size);
    free(own_x);
    free(own_y);
    return LM_OK;
}

lm_status lm_nn_pool(lm_array *node)
{
    plane_ctx c;
    return run_planes(node, pool_task, &c);
}

lm_status lm_nn_upsample(lm_array *node)
{
    const lm_params *p = &node->params;
    const lm_array *x = node->inputs[0];
    up_ctx u;
    u.bilinear = p->i[0] == LM_UPSAMPLE_BILINEAR;
    bool align = p->i[1] != 0;
    if (!make_taps(&u.ty, x->shape[2], node->shape[2], p->f[0], u.bilinear, align))
        return lm_error_set(LM_ERR_NOMEM, "upsample: out of host memory");
    if (!make_taps(&u.tx, x->shape[3], node->shape[3], p->f[1], u.bilinear, align)) {
        free(u.ty.i0);
        free(u.ty.w1);
        return lm_error_set(LM_ERR_NOMEM, "upsample: out of host memory");
    }
    lm_status st = run_planes(node, upsample_task, &u);
    free(u.ty.i0);
    free(u.ty.w1);
    free(u.tx.i0);
    free(u.tx.w1);
    return st;
}
