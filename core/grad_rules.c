/* grad_rules.c - the backward rule of every differentiable op.
 *
 * Each rule builds lazy nodes from the op builders.  Temporaries go into a
 * scope (K) released at the end of the rule, so a rule reads as the maths
 * it implements.  Ops with an involved kernel (the norms, attention, RoPE,
 * pooling, upsampling) are rebuilt here from primitive builders
 * (lm_grad_rebuild); core/grad.c walks that small graph on fresh leaves:
 * one rule per primitive, checked once. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "grad_rules.h"
#include "fused.h"
#include "ops_nn.h"

typedef struct scope {
    lm_array **tmp;
    int n, cap;
    bool failed;
} scope;

static lm_array *K(scope *s, lm_array *a)
{
    if (!a) { s->failed = true; return NULL; }
    if (s->n == s->cap) {
        int nc = s->cap ? s->cap * 2 : 32;
        lm_array **nt = realloc(s->tmp, (size_t)nc * sizeof *nt);
        if (!nt) { lm_array_release(a); s->failed = true; lm_error_set(LM_ERR_NOMEM, "grad: out of memory"); return NULL; }
        s->tmp = nt;
        s->cap = nc;
    }
    s->tmp[s->n++] = a;
    return a;
}

static void scope_end(scope *s)
{
    for (int i = 0; i < s->n; i++) lm_array_release(s->tmp[i]);
    free(s->tmp);
}

/* shorthand builders that park their result in the scope */
#define UN(op, a) K(s, lm_unary(LM_OP_##op, a))
#define BI(op, a, b) K(s, lm_binary(LM_OP_##op, a, b))
#define BS(op, a, v) K(s, lm_binary_scalar(LM_OP_##op, a, v, false))
#define SB(op, v, a) K(s, lm_binary_scalar(LM_OP_##op, a, v, true))

static lm_array *zeros_like(scope *s, const lm_array *a, lm_dtype dt)
{
    return K(s, lm_zeros(a->ndim, a->shape, dt, a->device));
}

static lm_array *scalar(scope *s, double v, lm_dtype dt, lm_device *dev)
{
    return K(s, lm_scalar(v, dt, dev));
}

/* where(c, a, 0) */
static lm_array *mask_by(scope *s, lm_array *c, lm_array *a)
{
    if (!c || !a) return NULL;
    return K(s, lm_where(c, a, scalar(s, 0, a->dtype, a->device)));
}

static bool same_shape(const lm_array *a, const lm_array *b)
{
    return a->ndim == b->ndim && !memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim);
}

/* g summed down to the shape of `like` (numpy broadcasting in reverse) */
static lm_array *unbroadcast(scope *s, lm_array *g, const lm_array *like)
{
    if (!g || same_shape(g, like)) return g;
    int axes[LM_MAX_DIMS], na = 0, lead = g->ndim - like->ndim;
    for (int d = 0; d < g->ndim; d++)
        if (d < lead || (like->shape[d - lead] == 1 && g->shape[d] != 1)) axes[na++] = d;
    lm_array *r = na ? K(s, lm_reduce(LM_OP_SUM, g, na, axes, true)) : g;
    return K(s, lm_reshape(r, like->ndim, like->shape));
}

/* a reduced array (keepdims or not) broadcast back to the input's shape */
static lm_array *expand_reduced(scope *s, lm_array *r, const lm_array *in, int64_t mask)
{
    if (!r) return NULL;
    int64_t ks[LM_MAX_DIMS];
    for (int d = 0; d < in->ndim; d++) ks[d] = (mask >> d) & 1 ? 1 : in->shape[d];
    lm_array *k = K(s, lm_reshape(r, in->ndim, ks));
    return K(s, lm_broadcast_to(k, in->ndim, in->shape));
}

/* ---------------------------------------------------------- elementwise */

static lm_array *unary_rule(scope *s, lm_array *n, lm_array *g)
{
    lm_array *x = n->inputs[0], *y = n;
    lm_dtype dt = g->dtype;
    switch (n->op) {
    case LM_OP_COPY: return g;
    case LM_OP_CAST: return K(s, lm_cast(g, x->dtype));
    case LM_OP_NEG: return UN(NEG, g);
    case LM_OP_ABS: return BI(MUL, g, UN(SIGN, x));
    case LM_OP_SIGN: case LM_OP_FLOOR: case LM_OP_CEIL: case LM_OP_ROUND:
        return zeros_like(s, g, dt);
    case LM_OP_EXP: return BI(MUL, g, y);
    case LM_OP_LOG: return BI(DIV, g, x);
    case LM_OP_LOG1P: return BI(DIV, g, SB(ADD, 1.0, x));
    case LM_OP_EXPM1: return BI(MUL, g, BS(ADD, y, 1.0));
    case LM_OP_SQRT: return BI(DIV, BS(MUL, g, 0.5), y);
    case LM_OP_RSQRT: return BI(MUL, BS(MUL, g, -0.5), BI(DIV, y, x));
    case LM_OP_SQUARE: return BI(MUL, BS(MUL, g, 2.0), x);
    case LM_OP_RECIPROCAL: return UN(NEG, BI(MUL, g, UN(SQUARE, y)));
    case LM_OP_SIN: return BI(MUL, g, UN(COS, x));
    case LM_OP_COS: return UN(NEG, BI(MUL, g, UN(SIN, x)));
    case LM_OP_TAN: return BI(MUL, g, SB(ADD, 1.0, UN(SQUARE, y)));
    case LM_OP_TANH: return BI(MUL, g, SB(SUB, 1.0, UN(SQUARE, y)));
    case LM_OP_SIGMOID: return BI(MUL, g, BI(MUL, y, SB(SUB, 1.0, y)));
    case LM_OP_RELU: return mask_by(s, BS(GT, x, 0.0), g);
    case LM_OP_SILU: {
        lm_array *sg = UN(SIGMOID, x);
        return BI(MUL, g, BI(MUL, sg, SB(ADD, 1.0, BI(MUL, x, SB(SUB, 1.0, sg)))));
    }
    case LM_OP_SOFTPLUS:   /* the kernel returns x itself past 20 */
        return BI(MUL, g, K(s, lm_where(BS(GT, x, 20.0), scalar(s, 1, dt, g->device), UN(SIGMOID, x))));
    case LM_OP_GELU: {     /* Phi(x) + x phi(x) */
        lm_array *cdf = BS(MUL, SB(ADD, 1.0, UN(ERF, BS(MUL, x, M_SQRT1_2))), 0.5);
        lm_array *pdf = BS(MUL, UN(EXP, BS(MUL, UN(SQUARE, x), -0.5)), 0.3989422804014327);
        return BI(MUL, g, BI(ADD, cdf, BI(MUL, x, pdf)));
    }
    case LM_OP_GELU_TANH: {
        const double c = 0.7978845608028654, a = 0.044715;
        lm_array *x2 = UN(SQUARE, x);
        lm_array *u = BS(MUL, BI(MUL, x, SB(ADD, 1.0, BS(MUL, x2, a))), c);
        lm_array *t = UN(TANH, u);
        lm_array *du = BS(MUL, SB(ADD, 1.0, BS(MUL, x2, 3 * a)), c);
        lm_array *d = BI(ADD, BS(MUL, SB(ADD, 1.0, t), 0.5),
                         BI(MUL, BS(MUL, x, 0.5), BI(MUL, SB(SUB, 1.0, UN(SQUARE, t)), du)));
        return BI(MUL, g, d);
    }
    case LM_OP_ERF:
        return BI(MUL, g, BS(MUL, UN(EXP, UN(NEG, UN(SQUARE, x))), 1.1283791670955126));
    case LM_OP_ERFC:
        return BI(MUL, g, BS(MUL, UN(EXP, UN(NEG, UN(SQUARE, x))), -1.1283791670955126));
    case LM_OP_CLAMP: {
        int has = (int)n->params.i[0];
        lm_array *keep = NULL;
        if (has & 1) keep = BS(GE, x, n->params.f[0]);
        if (has & 2) {
            lm_array *hi = BS(LE, x, n->params.f[1]);
            keep = keep ? BI(LOGICAL_AND, keep, hi) : hi;
        }
        return keep ? mask_by(s, keep, g) : g;
    }
    default: return NULL;
    }
}

static lm_status binary_rule(scope *s, lm_array *n, lm_array *g, const bool *need, lm_array **ga,
                             lm_array **gb)
{
    lm_array *a = n->inputs[0], *b = n->inputs[1], *y = n;
    lm_array *da = NULL, *db = NULL;
    switch (n->op) {
    case LM_OP_ADD: da = g; db = g; break;
    case LM_OP_SUB: da = g; db = need[1] ? UN(NEG, g) : NULL; break;
    case LM_OP_MUL:
        if (need[0]) da = BI(MUL, g, b);
        if (need[1]) db = BI(MUL, g, a);
        break;
    case LM_OP_DIV:
        if (need[0]) da = BI(DIV, g, b);
        if (need[1]) db = UN(NEG, BI(DIV, BI(MUL, g, y), b));
        break;
    case LM_OP_POW:
        if (need[0]) da = BI(MUL, g, BI(MUL, b, BI(POW, a, BS(SUB, b, 1.0))));
        if (need[1]) /* PyTorch: 0 where a == 0 and b >= 0 */
            db = mask_by(s, BS(NE, a, 0.0), BI(MUL, g, BI(MUL, y, UN(LOG, a))));
        break;
    case LM_OP_MAXIMUM: case LM_OP_MINIMUM: {
        /* PyTorch splits a tie evenly between the two */
        lm_array *win = n->op == LM_OP_MAXIMUM ? BI(GT, a, b) : BI(LT, a, b);
        lm_array *tie = BI(EQ, a, b);
        lm_array *wa = BI(ADD, K(s, lm_cast(win, g->dtype)), BS(MUL, K(s, lm_cast(tie, g->dtype)), 0.5));
        if (need[0]) da = BI(MUL, g, wa);
        if (need[1]) db = BI(MUL, g, SB(SUB, 1.0, wa));
        break;
    }
    case LM_OP_MOD:
        da = g;
        if (need[1]) db = UN(NEG, BI(MUL, g, UN(FLOOR, BI(DIV, a, b))));
        break;
    case LM_OP_LOGADDEXP:   /* softmax weights of the two operands */
        if (need[0]) da = BI(MUL, g, UN(EXP, BI(SUB, a, y)));
        if (need[1]) db = BI(MUL, g, UN(EXP, BI(SUB, b, y)));
        break;
    case LM_OP_HYPOT:   /* a / y and b / y (PyTorch: NaN where both are 0) */
        if (need[0]) da = BI(MUL, g, BI(DIV, a, y));
        if (need[1]) db = BI(MUL, g, BI(DIV, b, y));
        break;
    case LM_OP_ATAN2: {
        lm_array *r = BI(ADD, UN(SQUARE, a), UN(SQUARE, b));
        if (need[0]) da = BI(MUL, g, BI(DIV, b, r));
        if (need[1]) db = UN(NEG, BI(MUL, g, BI(DIV, a, r)));
        break;
    }
    default:
        return LM_ERR_UNSUPPORTED;
    }
    if (need[0]) *ga = unbroadcast(s, da, a);
    if (need[1]) *gb = unbroadcast(s, db, b);
    return LM_OK;
}

/* ----------------------------------------------------------- reductions */

static lm_array *reduce_rule(scope *s, lm_array *n, lm_array *g)
{
    lm_array *x = n->inputs[0];
    if (n->op == LM_OP_CUMSUM) {   /* reversed cumsum: total - cumsum + g */
        int ax = (int)n->params.i[0];
        lm_array *tot = K(s, lm_broadcast_to(K(s, lm_reduce(LM_OP_SUM, g, 1, &ax, true)), g->ndim, g->shape));
        return BI(ADD, BI(SUB, tot, K(s, lm_cumsum(g, ax))), g);
    }
    int64_t mask = n->params.i[0];
    int64_t count = 1;
    for (int d = 0; d < x->ndim; d++)
        if ((mask >> d) & 1) count *= x->shape[d];
    lm_array *ge = expand_reduced(s, g, x, mask);
    lm_array *ye = expand_reduced(s, n, x, mask);
    switch (n->op) {
    case LM_OP_SUM: return ge;
    case LM_OP_MEAN: return BS(DIV, ge, (double)count);
    case LM_OP_PROD: return BI(DIV, BI(MUL, ge, ye), x);
    case LM_OP_MAX: case LM_OP_MIN: {
        /* ties share the gradient evenly, as torch.amax */
        lm_array *hit = K(s, lm_cast(BI(EQ, x, ye), g->dtype));
        int axes[LM_MAX_DIMS], na = 0;
        for (int d = 0; d < x->ndim; d++)
            if ((mask >> d) & 1) axes[na++] = d;
        lm_array *cnt = K(s, lm_broadcast_to(K(s, lm_reduce(LM_OP_SUM, hit, na, axes, true)), x->ndim, x->shape));
        return BI(DIV, BI(MUL, ge, hit), cnt);
    }
    case LM_OP_LOGSUMEXP: return BI(MUL, ge, UN(EXP, BI(SUB, x, ye)));
    case LM_OP_VAR: case LM_OP_STD: {
        int axes[LM_MAX_DIMS], na = 0;
        for (int d = 0; d < x->ndim; d++)
            if ((mask >> d) & 1) axes[na++] = d;
        lm_array *mean = K(s, lm_broadcast_to(K(s, lm_reduce(LM_OP_MEAN, x, na, axes, true)), x->ndim, x->shape));
        lm_array *r = BS(MUL, BI(MUL, ge, BI(SUB, x, mean)), 2.0 / (double)(count - n->params.i[2]));
        return n->op == LM_OP_VAR ? r : BI(DIV, BS(MUL, r, 0.5), ye);
    }
    default: return NULL;
    }
}

/* ---------------------------------------------------------------- views */

/* The view's geometry against its input's: for each element of the view
 * (row-major), the row-major index of the input element it reads. */
static int64_t *view_map(const lm_array *v, const lm_array *in)
{
    int64_t lo = in->offset, hi = in->offset;
    for (int d = 0; d < in->ndim; d++) {
        if (in->shape[d] == 0) return calloc(1, sizeof(int64_t));
        int64_t span = (in->shape[d] - 1) * in->strides[d];
        if (span < 0) lo += span; else hi += span;
    }
    int64_t range = hi - lo + 1;
    int64_t *tab = malloc((size_t)range * sizeof *tab);
    int64_t *map = malloc((size_t)(v->size ? v->size : 1) * sizeof *map);
    if (!tab || !map) { free(tab); free(map); return NULL; }
    int64_t idx[LM_MAX_DIMS] = {0};
    for (int64_t j = 0; j < in->size; j++) {
        int64_t p = in->offset;
        for (int d = 0; d < in->ndim; d++) p += idx[d] * in->strides[d];
        tab[p - lo] = j;
        for (int d = in->ndim - 1; d >= 0 && ++idx[d] == in->shape[d]; d--) idx[d] = 0;
    }
    memset(idx, 0, sizeof idx);
    for (int64_t k = 0; k < v->size; k++) {
        int64_t p = v->offset;
        for (int d = 0; d < v->ndim; d++) p += idx[d] * v->strides[d];
        map[k] = p >= lo && p <= hi ? tab[p - lo] : 0;
        for (int d = v->ndim - 1; d >= 0 && ++idx[d] == v->shape[d]; d--) idx[d] = 0;
    }
    free(tab);
    return map;
}

static bool is_plain(const lm_array *a)
{
    return a->offset == 0 && lm_array_is_contiguous(a);
}

static lm_array *view_rule(scope *s, lm_array *n, lm_array *g)
{
    lm_array *in = n->inputs[0];
    /* broadcast axes (stride 0) first: sum them away */
    lm_array vv = *n;   /* geometry only */
    int axes[LM_MAX_DIMS], na = 0;
    for (int d = 0; d < n->ndim; d++)
        if (n->strides[d] == 0 && n->shape[d] > 1) { axes[na++] = d; vv.shape[d] = 1; }
    if (na) {
        g = K(s, lm_reduce(LM_OP_SUM, g, na, axes, true));
        vv.size = 1;
        for (int d = 0; d < n->ndim; d++) vv.size *= vv.shape[d];
    }
    if (!g) return NULL;
    if (vv.size == in->size && is_plain(&vv) && is_plain(in))
        return K(s, lm_reshape(g, in->ndim, in->shape));
    /* the common geometries without a host map: a permutation of the
     * input's axes (transposes), and a step-1 box of a contiguous input */
    if (vv.ndim == in->ndim && vv.size > 0) {
        int perm[LM_MAX_DIMS], used = 0;
        bool ok = vv.offset == in->offset;
        for (int d = 0; ok && d < vv.ndim; d++) {
            perm[d] = -1;
            for (int e = 0; e < in->ndim; e++)
                if (!((used >> e) & 1) && in->shape[e] == vv.shape[d] &&
                    (vv.shape[d] == 1 || in->strides[e] == vv.strides[d])) { perm[d] = e; used |= 1 << e; break; }
            ok = perm[d] >= 0;
        }
        if (ok) {
            int inv[LM_MAX_DIMS];
            for (int d = 0; d < vv.ndim; d++) inv[perm[d]] = d;
            return K(s, lm_permute(g, inv));
        }
        if (is_plain(in)) {
            int64_t rem = vv.offset, start[LM_MAX_DIMS];
            ok = true;
            for (int d = 0; ok && d < in->ndim; d++) {
                ok = vv.shape[d] <= in->shape[d] && (vv.shape[d] == 1 || vv.strides[d] == in->strides[d]);
                start[d] = in->strides[d] ? rem / in->strides[d] : 0;
                rem -= start[d] * in->strides[d];
                ok = ok && start[d] + vv.shape[d] <= in->shape[d];
            }
            if (ok && rem == 0) {
                int64_t pads[2 * LM_MAX_DIMS];
                for (int d = 0; d < in->ndim; d++) {
                    pads[2 * d] = start[d];
                    pads[2 * d + 1] = in->shape[d] - start[d] - vv.shape[d];
                }
                return K(s, lm_pad(K(s, lm_reshape(g, vv.ndim, vv.shape)), pads, 0));
            }
        }
    }
    int64_t *map = view_map(&vv, in);
    if (!map) { lm_error_set(LM_ERR_NOMEM, "grad: out of memory for a view's map"); return NULL; }
    bool ident = vv.size == in->size;
    for (int64_t k = 0; ident && k < vv.size; k++) ident = map[k] == k;
    lm_array *r;
    int64_t flat = vv.size, iflat = in->size;
    lm_array *gf = K(s, lm_reshape(K(s, lm_contiguous(g)), 1, &flat));
    if (ident) {
        free(map);
        r = gf;
    } else if (vv.size == in->size) {
        /* a permutation: gather with its inverse */
        int64_t *inv = malloc((size_t)flat * sizeof *inv);
        if (!inv) { free(map); lm_error_set(LM_ERR_NOMEM, "grad: out of memory"); return NULL; }
        for (int64_t k = 0; k < flat; k++) inv[map[k]] = k;
        lm_array *ix = K(s, lm_from_data(1, &flat, LM_I64, inv, g->device));
        free(inv);
        free(map);
        r = K(s, lm_index_select(gf, 0, ix));
    } else {
        lm_array *ix = K(s, lm_from_data(1, &flat, LM_I64, map, g->device));
        free(map);
        r = K(s, lm_scatter_add(K(s, lm_zeros(1, &iflat, g->dtype, g->device)), 0, ix, gf));
    }
    return K(s, lm_reshape(r, in->ndim, in->shape));
}

/* ---------------------------------------------------------------- other */

static lm_array *transpose_last(scope *s, lm_array *a)
{
    return K(s, lm_transpose(a, -1, -2));
}

/* idx (integer) broadcast to shape as a contiguous i64 array */
static lm_array *index_like(scope *s, lm_array *idx, const lm_array *shape_of)
{
    lm_array *i64 = K(s, lm_cast(idx, LM_I64));
    return K(s, lm_contiguous(K(s, lm_broadcast_to(i64, shape_of->ndim, shape_of->shape))));
}

/* ------------------------------------------------------------------ conv */

/* g [N,O,OH,OW] back to x's [N,C,H,W] through conv's adjoint */
static lm_array *fit_hw(scope *s, lm_array *r, int64_t H, int64_t W)
{
    if (!r) return NULL;
    int64_t pads[8] = {0};
    bool pad = false;
    for (int a = 0; a < 2; a++) {
        int64_t want = a ? W : H, have = r->shape[2 + a];
        if (have > want) r = K(s, lm_slice(r, 2 + a, 0, want, 1));
        else if (have < want) { pads[2 * (2 + a) + 1] = want - have; pad = true; }
    }
    return pad ? K(s, lm_pad(r, pads, 0)) : r;
}

static lm_array *permute0213(scope *s, lm_array *a)   /* swap axes 0 and 1 */
{
    return K(s, lm_transpose(a, 0, 1));
}

/* d loss / d w for y = conv(x, w): per group, a conv of x^T with g^T */
static lm_array *conv_weight_grad(scope *s, lm_array *x, lm_array *g, int64_t groups,
                                  const int64_t st[2], const int64_t pad4[4], const int64_t dil[2],
                                  int64_t KH, int64_t KW, bool transposed)
{
    int64_t C = x->shape[1], O = g->shape[1];
    lm_array *parts[64];
    if (groups > 64) { lm_error_set(LM_ERR_UNSUPPORTED, "grad: conv with %lld groups", (long long)groups); return NULL; }
    for (int64_t gi = 0; gi < groups; gi++) {
        lm_array *xs = groups > 1 ? K(s, lm_slice(x, 1, gi * C / groups, (gi + 1) * C / groups, 1)) : x;
        lm_array *gs = groups > 1 ? K(s, lm_slice(g, 1, gi * O / groups, (gi + 1) * O / groups, 1)) : g;
        lm_array *r;
        if (!transposed) /* [C/G,N,H,W] (*) [O/G,N,OH,OW] -> [C/G,O/G,KH',KW'] */
            r = K(s, lm_conv2d(permute0213(s, xs), K(s, lm_contiguous(permute0213(s, gs))), NULL, dil, pad4, st, 1));
        else            /* [Cout/G,N,OH,OW] (*) [Cin/G,N,H,W] -> [Cout/G,Cin/G,KH',KW'] */
            r = K(s, lm_conv2d(permute0213(s, gs), K(s, lm_contiguous(permute0213(s, xs))), NULL, dil, pad4, st, 1));
        r = K(s, lm_slice(K(s, lm_slice(r, 2, 0, KH, 1)), 3, 0, KW, 1));
        parts[gi] = permute0213(s, r);
        if (!parts[gi]) return NULL;
    }
    return groups > 1 ? K(s, lm_concat((int)groups, parts, 0)) : parts[0];
}

static lm_status conv_rule(scope *s, lm_array *n, lm_array *g, const bool *need, lm_array **gin)
{
    const int64_t *p = n->params.i;
    lm_array *x = n->inputs[0], *w = n->inputs[1];
    int64_t st[2] = {p[0], p[1]}, dil[2] = {p[6], p[7]}, groups = p[8];
    int64_t KH = w->shape[2], KW = w->shape[3];
    if (n->op == LM_OP_CONV) {
        int64_t pad4[4] = {p[2], p[4], p[3], p[5]};   /* top, bottom, left, right */
        int64_t fp[4] = {dil[0] * (KH - 1) - p[2], dil[0] * (KH - 1) - p[4], dil[1] * (KW - 1) - p[3],
                         dil[1] * (KW - 1) - p[5]};
        if (need[0] && st[0] == 1 && st[1] == 1 && groups == 1 && fp[0] >= 0 && fp[1] >= 0 && fp[2] >= 0 &&
            fp[3] >= 0) {
            /* stride 1: the adjoint is a conv with the kernel flipped and
             * its channel axes swapped, which runs on the forward conv's
             * fast paths (Winograd for 3x3) instead of GEMM + col2im */
            lm_array *wf = K(s, lm_slice(K(s, lm_slice(w, 2, -1, -(KH + 1), -1)), 3, -1, -(KW + 1), -1));
            lm_array *wt = K(s, lm_contiguous(permute0213(s, wf)));
            gin[0] = K(s, lm_conv2d(g, wt, NULL, st, fp, dil, 1));
        } else if (need[0]) {
            int64_t ph[2] = {p[2], p[3]}, op[2];
            for (int a = 0; a < 2; a++) {
                int64_t in = x->shape[2 + a], k = a ? KW : KH;
                int64_t full = (g->shape[2 + a] - 1) * st[a] - 2 * ph[a] + dil[a] * (k - 1) + 1;
                int64_t lim = (st[a] > dil[a] ? st[a] : dil[a]) - 1;
                op[a] = in - full < 0 ? 0 : in - full > lim ? lim : in - full;
            }
            gin[0] = fit_hw(s, K(s, lm_conv_transpose2d(g, w, NULL, st, ph, op, dil, groups)), x->shape[2], x->shape[3]);
        }
        if (need[1]) gin[1] = conv_weight_grad(s, x, g, groups, st, pad4, dil, KH, KW, false);
    } else {
        int64_t pad4[4] = {p[2], p[2], p[3], p[3]};
        if (need[0]) gin[0] = K(s, lm_conv2d(g, w, NULL, st, pad4, dil, groups));
        if (need[1]) gin[1] = conv_weight_grad(s, x, g, groups, st, pad4, dil, KH, KW, true);
    }
    if (n->ninputs > 2 && need[2]) {
        int ax[3] = {0, 2, 3};
        gin[2] = K(s, lm_reduce(LM_OP_SUM, g, 3, ax, false));
    }
    return LM_OK;
}

/* ------------------------------------------------------------ composites */

/* Rebuilds op n on leaves and returns the rebuilt output (in the scope);
 * leaves[i] are identity views of n's inputs. */
static lm_array *rebuild(scope *s, lm_array *n, lm_array **lv)
{
    const lm_params *P = &n->params;
    const int64_t *p = P->i;
    lm_array *x = lv[0];
    switch (n->op) {
    case LM_OP_LAYER_NORM: case LM_OP_RMS_NORM: {
        int na = (int)p[0], axes[LM_MAX_DIMS];
        for (int d = 0; d < na; d++) axes[d] = x->ndim - na + d;
        lm_array *y;
        if (n->op == LM_OP_LAYER_NORM) {
            lm_array *xc = BI(SUB, x, K(s, lm_reduce(LM_OP_MEAN, x, na, axes, true)));
            lm_array *var = K(s, lm_reduce(LM_OP_MEAN, UN(SQUARE, xc), na, axes, true));
            y = BI(MUL, xc, UN(RSQRT, BS(ADD, var, P->f[0])));
        } else {
            lm_array *ms = K(s, lm_reduce(LM_OP_MEAN, UN(SQUARE, x), na, axes, true));
            y = BI(MUL, x, UN(RSQRT, BS(ADD, ms, P->f[0])));
        }
        int k = 1;
        if (p[1]) y = BI(MUL, y, lv[k++]);
        if (n->op == LM_OP_LAYER_NORM && p[2]) y = BI(ADD, y, lv[k++]);
        return y;
    }
    case LM_OP_GROUP_NORM: {
        int64_t G = p[0], N = x->shape[0], C = x->shape[1];
        int64_t sh3[3] = {N, G, -1};
        lm_array *xr = K(s, lm_reshape(x, 3, sh3));
        int ax = 2;
        lm_array *xc = BI(SUB, xr, K(s, lm_reduce(LM_OP_MEAN, xr, 1, &ax, true)));
        lm_array *var = K(s, lm_reduce(LM_OP_MEAN, UN(SQUARE, xc), 1, &ax, true));
        lm_array *y = K(s, lm_reshape(BI(MUL, xc, UN(RSQRT, BS(ADD, var, P->f[0]))), x->ndim, x->shape));
        int64_t cs[LM_MAX_DIMS];
        cs[0] = C;
        for (int d = 1; d < x->ndim - 1; d++) cs[d] = 1;
        int k = 1;
        if (p[1]) y = BI(MUL, y, K(s, lm_reshape(lv[k++], x->ndim - 1, cs)));
        if (p[2]) y = BI(ADD, y, K(s, lm_reshape(lv[k++], x->ndim - 1, cs)));
        return y;
    }
    case LM_OP_ATTENTION: {
        lm_array *q = lv[0], *k = lv[1], *v = lv[2];
        int64_t B = q->shape[0], Hq = q->shape[1], Lq = q->shape[2], Hk = k->shape[1], Lk = k->shape[2];
        if (Hk != Hq) {   /* grouped heads: repeat each key/value head */
            int64_t r = Hq / Hk;
            int64_t e5[5] = {B, Hk, 1, Lk, k->shape[3]}, b5[5] = {B, Hk, r, Lk, k->shape[3]};
            int64_t f4[4] = {B, Hq, Lk, k->shape[3]};
            k = K(s, lm_reshape(K(s, lm_broadcast_to(K(s, lm_reshape(k, 5, e5)), 5, b5)), 4, f4));
            e5[4] = b5[4] = v->shape[3];
            f4[3] = v->shape[3];
            v = K(s, lm_reshape(K(s, lm_broadcast_to(K(s, lm_reshape(v, 5, e5)), 5, b5)), 4, f4));
        }
        lm_array *sc = BS(MUL, K(s, lm_matmul(q, transpose_last(s, k))), P->f[0]);
        if (p[1] == 1) sc = BI(ADD, sc, lm_grad_is_stop(lv[3]) ? lv[3] : K(s, lm_cast(lv[3], sc->dtype)));
        if (p[1] == 2) sc = K(s, lm_where(lv[3], sc, scalar(s, -INFINITY, sc->dtype, sc->device)));
        if (p[0]) {
            lm_array *one = K(s, lm_ones(2, (int64_t[]){Lq, Lk}, LM_BOOL, sc->device));
            sc = K(s, lm_where(K(s, lm_tril(one, 0)), sc, scalar(s, -INFINITY, sc->dtype, sc->device)));
        }
        return K(s, lm_matmul(K(s, lm_softmax(sc, -1)), v));
    }
    case LM_OP_ROPE: {
        int64_t dims = p[0], D = x->shape[x->ndim - 1], h = dims / 2;
        lm_array *ang = lv[1];
        lm_array *c = K(s, lm_cast(UN(COS, ang), x->dtype)), *sn = K(s, lm_cast(UN(SIN, ang), x->dtype));
        lm_array *x1, *x2;
        int64_t sh[LM_MAX_DIMS + 1];
        if (p[1]) {
            lm_array *xr = K(s, lm_slice(x, -1, 0, dims, 1));
            memcpy(sh, x->shape, sizeof(int64_t) * (size_t)x->ndim);
            sh[x->ndim - 1] = h;
            sh[x->ndim] = 2;
            xr = K(s, lm_reshape(xr, x->ndim + 1, sh));
            x1 = K(s, lm_squeeze(K(s, lm_slice(xr, -1, 0, 1, 1)), -1));
            x2 = K(s, lm_squeeze(K(s, lm_slice(xr, -1, 1, 2, 1)), -1));
        } else {
            x1 = K(s, lm_slice(x, -1, 0, h, 1));
            x2 = K(s, lm_slice(x, -1, h, dims, 1));
        }
        lm_array *y1 = BI(SUB, BI(MUL, x1, c), BI(MUL, x2, sn));
        lm_array *y2 = BI(ADD, BI(MUL, x1, sn), BI(MUL, x2, c));
        lm_array *rot;
        if (p[1]) {
            lm_array *pair[2] = {y1, y2};
            lm_array *st = K(s, lm_stack(2, pair, -1));
            memcpy(sh, x->shape, sizeof(int64_t) * (size_t)x->ndim);
            sh[x->ndim - 1] = dims;
            rot = K(s, lm_reshape(st, x->ndim, sh));
        } else {
            lm_array *pair[2] = {y1, y2};
            rot = K(s, lm_concat(2, pair, -1));
        }
        if (dims == D) return rot;
        lm_array *parts[2] = {rot, K(s, lm_slice(x, -1, dims, D, 1))};
        return K(s, lm_concat(2, parts, -1));
    }
    case LM_OP_MAX_POOL: case LM_OP_AVG_POOL: {
        int64_t kh = p[0], kw = p[1], sh = p[2], sw = p[3], ph = p[4], pw = p[5];
        int64_t dh = n->op == LM_OP_MAX_POOL ? p[6] : 1, dw = n->op == LM_OP_MAX_POOL ? p[7] : 1;
        int64_t OH = n->shape[2], OW = n->shape[3];
        if (n->op == LM_OP_AVG_POOL && (p[8] || (!p[9] && (ph || pw)) || p[10])) {
            lm_error_set(LM_ERR_UNSUPPORTED, "grad: avg_pool2d with ceil_mode, count_include_pad=false "
                         "(with padding) or divisor_override has no gradient rule yet");
            return NULL;
        }
        int64_t H = x->shape[2], W = x->shape[3];
        if (kh == sh && kw == sw && !ph && !pw && dh == 1 && dw == 1 && H == OH * kh && W == OW * kw) {
            /* tiling windows: a reshape, no strided slices */
            int64_t s6[6] = {x->shape[0], x->shape[1], OH, kh, OW, kw};
            int ax[2] = {3, 5};
            return K(s, lm_reduce(n->op == LM_OP_MAX_POOL ? LM_OP_MAX : LM_OP_MEAN,
                                  K(s, lm_reshape(x, 6, s6)), 2, ax, false));
        }
        int64_t needH = (OH - 1) * sh + dh * (kh - 1) + 1, needW = (OW - 1) * sw + dw * (kw - 1) + 1;
        int64_t pads[8] = {0, 0, 0, 0, ph, needH - H - ph > 0 ? needH - H - ph : 0,
                           pw, needW - W - pw > 0 ? needW - W - pw : 0};
        lm_array *xp = K(s, lm_pad(x, pads, n->op == LM_OP_MAX_POOL ? -INFINITY : 0.0));
        lm_array **parts = calloc((size_t)(kh * kw), sizeof *parts);
        if (!parts) return NULL;
        for (int64_t i = 0; i < kh; i++)
            for (int64_t j = 0; j < kw; j++) {
                lm_array *r = K(s, lm_slice(xp, 2, i * dh, i * dh + (OH - 1) * sh + 1, sh));
                r = K(s, lm_slice(r, 3, j * dw, j * dw + (OW - 1) * sw + 1, sw));
                parts[i * kw + j] = K(s, lm_unsqueeze(r, 0));
            }
        lm_array *stk = K(s, lm_concat((int)(kh * kw), parts, 0));
        free(parts);
        int ax = 0;
        return K(s, lm_reduce(n->op == LM_OP_MAX_POOL ? LM_OP_MAX : LM_OP_MEAN, stk, 1, &ax, false));
    }
    case LM_OP_ADAPTIVE_AVG_POOL: {
        int64_t H = x->shape[2], W = x->shape[3], OH = p[0], OW = p[1];
        lm_array *rows[1024];
        if (OH > 1024 || OW > 1024) return NULL;
        for (int64_t i = 0; i < OH; i++) {
            int64_t a0 = i * H / OH, a1 = ((i + 1) * H + OH - 1) / OH;
            lm_array *r = K(s, lm_slice(x, 2, a0, a1, 1));
            lm_array *cols[1024];
            for (int64_t j = 0; j < OW; j++) {
                int64_t b0 = j * W / OW, b1 = ((j + 1) * W + OW - 1) / OW;
                int ax[2] = {2, 3};
                cols[j] = K(s, lm_reduce(LM_OP_MEAN, K(s, lm_slice(r, 3, b0, b1, 1)), 2, ax, true));
                if (!cols[j]) return NULL;
            }
            rows[i] = K(s, lm_concat((int)OW, cols, 3));
            if (!rows[i]) return NULL;
        }
        return K(s, lm_concat((int)OH, rows, 2));
    }
    case LM_OP_UPSAMPLE: {
        lm_array *y = x;
        /* nearest by whole factors: x broadcast over [N,C,H,kh,W,kw], whose
         * gradient is a sum over the kh x kw blocks (not a scatter) */
        int64_t k[2] = {0, 0};
        for (int a = 0; a < 2 && p[0] == LM_UPSAMPLE_NEAREST; a++) {
            int64_t in = x->shape[2 + a], out = n->shape[2 + a];
            k[a] = in > 0 && out % in == 0 ? out / in : 0;
            for (int64_t d = 0; d < out && k[a]; d++)
                if ((int64_t)floorf((float)d * (float)P->f[a]) != d / k[a]) k[a] = 0;
        }
        if (k[0] && k[1] && x->ndim == 4) {
            int64_t s6[6] = {x->shape[0], x->shape[1], x->shape[2], 1, x->shape[3], 1};
            int64_t b6[6] = {x->shape[0], x->shape[1], x->shape[2], k[0], x->shape[3], k[1]};
            return K(s, lm_reshape(K(s, lm_broadcast_to(K(s, lm_reshape(x, 6, s6)), 6, b6)), 4, n->shape));
        }
        for (int a = 0; a < 2; a++) {
            int64_t in = x->shape[2 + a], out = n->shape[2 + a];
            double sc = P->f[a];
            int64_t *i0 = malloc((size_t)out * sizeof *i0), *i1 = malloc((size_t)out * sizeof *i1);
            double *w1 = malloc((size_t)out * sizeof *w1);
            if (!i0 || !i1 || !w1) { free(i0); free(i1); free(w1); return NULL; }
            for (int64_t d = 0; d < out; d++) {
                if (p[0] == LM_UPSAMPLE_NEAREST) {
                    int64_t v = (int64_t)floorf((float)d * (float)sc);
                    i0[d] = i1[d] = v < in - 1 ? v : in - 1;
                    w1[d] = 0;
                } else {
                    double src = p[1] ? (out > 1 ? (double)d * (double)(in - 1) / (double)(out - 1) : 0)
                                      : fmax(((double)d + 0.5) * sc - 0.5, 0);
                    int64_t f = (int64_t)floor(src);
                    if (f > in - 1) f = in - 1;
                    i0[d] = f;
                    i1[d] = f + 1 < in ? f + 1 : in - 1;
                    w1[d] = src - (double)f;
                }
            }
            lm_array *ix0 = K(s, lm_from_data(1, &out, LM_I64, i0, x->device));
            lm_array *r = K(s, lm_index_select(y, 2 + a, ix0));
            if (p[0] != LM_UPSAMPLE_NEAREST) {
                lm_array *ix1 = K(s, lm_from_data(1, &out, LM_I64, i1, x->device));
                int64_t ws[4] = {1, 1, 1, 1};
                ws[2 + a] = out;
                lm_array *wt = K(s, lm_cast(K(s, lm_from_data(4, ws, LM_F64, w1, x->device)), x->dtype));
                lm_array *r1 = K(s, lm_index_select(y, 2 + a, ix1));
                r = BI(ADD, r, BI(MUL, BI(SUB, r1, r), wt));
            }
            free(i0); free(i1); free(w1);
            y = r;
        }
        return y;
    }
    case LM_OP_FUSED: {   /* a compiled elementwise chain: its steps one by one */
        const lm_fused *f = P->ext;
        if (!f || f->ninputs > n->ninputs) return NULL;
        lm_array **regs = calloc((size_t)(f->ninputs + f->nsteps), sizeof *regs);
        if (!regs) return NULL;
        for (int k = 0; k < f->ninputs; k++) regs[k] = K(s, lm_broadcast_to(lv[k], n->ndim, n->shape));
        lm_array *r = NULL;
        for (int k = 0; k < f->nsteps; k++) {
            const lm_fused_step *st = &f->steps[k];
            lm_array *a[3] = {0};
            for (int j = 0; j < st->nin; j++) a[j] = regs[st->in[j]];
            if (st->op == LM_OP_CAST) r = K(s, lm_cast(a[0], st->dtype));
            else if (st->op == LM_OP_CLAMP)
                r = K(s, lm_clamp(a[0], (st->params.i[0] & 1) ? st->params.f[0] : NAN,
                                  (st->params.i[0] & 2) ? st->params.f[1] : NAN));
            else if (st->op == LM_OP_WHERE) r = K(s, lm_where(a[0], a[1], a[2]));
            else if (lm_op_class_of(st->op) == LM_CLASS_BINARY) r = K(s, lm_binary(st->op, a[0], a[1]));
            else r = K(s, lm_unary(st->op, a[0]));
            if (r && r->dtype != st->dtype) r = K(s, lm_cast(r, st->dtype));
            regs[f->ninputs + k] = r;
            if (!r) break;
        }
        free(regs);
        return r;
    }
    default:
        return NULL;
    }
}

bool lm_grad_is_composite(const lm_array *n)
{
    switch (n->op) {
    case LM_OP_LAYER_NORM: case LM_OP_RMS_NORM: case LM_OP_ATTENTION:
    case LM_OP_ROPE: case LM_OP_MAX_POOL: case LM_OP_AVG_POOL: case LM_OP_ADAPTIVE_AVG_POOL:
    case LM_OP_UPSAMPLE: case LM_OP_FUSED:
        return lm_op_differentiable(n->op);   /* else lm_grad_rule says it is not */
    default:
        return false;
    }
}

lm_array *lm_grad_rebuild(lm_array *n, lm_array **lv)
{
    scope sc = {0}, *s = &sc;
    lm_error_clear();
    lm_array *y = rebuild(s, n, lv);
    if (y) lm_array_retain(y);
    else if (!s->failed && lm_error_status() == LM_OK) {
        char s0[64];
        lm_error_set(LM_ERR_UNSUPPORTED, "grad: %s has no backward rule although core/op.h marks it "
                     "differentiable (output %s)", lm_op_name(n->op), lm_desc(s0, sizeof s0, n));
    }
    scope_end(s);
    return y;
}

/* group_norm's textbook backward (as PyTorch's): with xhat = (x - mean) *
 * rstd per (image, group), dx = rstd * (gy - mean(gy) - xhat * mean(gy *
 * xhat)) where gy = g * weight, dweight = sum(g * xhat), dbias = sum(g):
 * fewer passes over the activations than differentiating the rebuilt
 * primitives */
static lm_status group_norm_rule(scope *s, lm_array *n, lm_array *g, const bool *need, lm_array **gin)
{
    const int64_t *p = n->params.i;
    lm_array *x = n->inputs[0];
    int iw = p[1] ? 1 : 0, ib = p[2] ? 1 + (p[1] ? 1 : 0) : 0;
    int64_t N = x->shape[0], C = x->shape[1], sh3[3] = {N, p[0], -1}, cs[LM_MAX_DIMS];
    int ax = 2, red[LM_MAX_DIMS], nred = 0;
    cs[0] = C;
    for (int d = 1; d < x->ndim - 1; d++) cs[d] = 1;
    for (int d = 0; d < x->ndim; d++)
        if (d != 1) red[nred++] = d;
    lm_array *xr = K(s, lm_reshape(x, 3, sh3));
    lm_array *xc = BI(SUB, xr, K(s, lm_reduce(LM_OP_MEAN, xr, 1, &ax, true)));
    lm_array *var = K(s, lm_reduce(LM_OP_MEAN, UN(SQUARE, xc), 1, &ax, true));
    lm_array *rstd = UN(RSQRT, BS(ADD, var, n->params.f[0]));
    lm_array *xhat = BI(MUL, xc, rstd);
    if (iw && need[iw]) {
        lm_array *w = n->inputs[iw];
        lm_array *r = K(s, lm_reduce(LM_OP_SUM, BI(MUL, g, K(s, lm_reshape(xhat, x->ndim, x->shape))), nred, red, false));
        gin[iw] = r && r->dtype != w->dtype ? K(s, lm_cast(r, w->dtype)) : r;
    }
    if (ib && need[ib]) {
        lm_array *b = n->inputs[ib];
        lm_array *r = K(s, lm_reduce(LM_OP_SUM, g, nred, red, false));
        gin[ib] = r && r->dtype != b->dtype ? K(s, lm_cast(r, b->dtype)) : r;
    }
    if (need[0]) {
        lm_array *gy = iw ? BI(MUL, g, K(s, lm_reshape(n->inputs[iw], x->ndim - 1, cs))) : g;
        lm_array *gr = K(s, lm_reshape(gy, 3, sh3));
        lm_array *m1 = K(s, lm_reduce(LM_OP_MEAN, gr, 1, &ax, true));
        lm_array *m2 = K(s, lm_reduce(LM_OP_MEAN, BI(MUL, gr, xhat), 1, &ax, true));
        lm_array *dx = BI(MUL, BI(SUB, BI(SUB, gr, m1), BI(MUL, xhat, m2)), rstd);
        dx = K(s, lm_reshape(dx, x->ndim, x->shape));
        gin[0] = dx && dx->dtype != x->dtype ? K(s, lm_cast(dx, x->dtype)) : dx;
    }
    return s->failed ? lm_error_status() : LM_OK;
}

/* ------------------------------------------------------------- dispatch */

lm_status lm_grad_rule(lm_array *n, lm_array *g, const bool *need, lm_array **gin)
{
    scope sc = {0}, *s = &sc;
    lm_status st = LM_OK;
    lm_array *r[64] = {0};
    bool handled = true;
    lm_error_clear();
    char s0[64];
    /* the op table (core/op.h, column gr) says which ops have a rule */
    if (!lm_op_differentiable(n->op))
        return lm_error_set(LM_ERR_UNSUPPORTED, "grad: %s is not differentiable (no backward rule; output %s)",
                            lm_op_name(n->op), lm_desc(s0, sizeof s0, n));
    switch (lm_op_class_of(n->op)) {
    case LM_CLASS_VIEW: r[0] = view_rule(s, n, g); break;
    case LM_CLASS_UNARY:
        r[0] = unary_rule(s, n, g);
        if (!r[0] && !s->failed) handled = false;
        break;
    case LM_CLASS_BINARY:
        if (binary_rule(s, n, g, need, &r[0], &r[1]) != LM_OK) handled = false;
        break;
    case LM_CLASS_TERNARY: {   /* where(cond, a, b) */
        lm_array *c = n->inputs[0];
        if (need[1]) r[1] = unbroadcast(s, mask_by(s, c, g), n->inputs[1]);
        if (need[2]) r[2] = unbroadcast(s, K(s, lm_where(c, scalar(s, 0, g->dtype, g->device), g)), n->inputs[2]);
        break;
    }
    case LM_CLASS_REDUCE:
        r[0] = reduce_rule(s, n, g);
        if (!r[0] && !s->failed) handled = false;
        break;
    default:
        switch (n->op) {
        case LM_OP_MATMUL:
            if (need[0]) r[0] = K(s, lm_matmul(g, transpose_last(s, n->inputs[1])));
            if (need[1]) r[1] = K(s, lm_matmul(transpose_last(s, n->inputs[0]), g));
            break;
        case LM_OP_CONCAT: {
            int ax = (int)n->params.i[0];
            int64_t at = 0;
            for (int i = 0; i < n->ninputs; i++) {
                int64_t len = n->inputs[i]->shape[ax];
                if (need[i]) r[i] = K(s, lm_slice(g, ax, at, at + len, 1));
                at += len;
            }
            break;
        }
        case LM_OP_PAD: {
            lm_array *x = g;
            for (int d = 0; d < g->ndim; d++) {
                int64_t b = n->params.i[2 * d];
                x = K(s, lm_slice(x, d, b, b + n->inputs[0]->shape[d], 1));
            }
            r[0] = x;
            break;
        }
        case LM_OP_GATHER: {
            int ax = (int)n->params.i[0];
            lm_array *a = n->inputs[0];
            r[0] = K(s, lm_scatter_add(zeros_like(s, a, g->dtype), ax, index_like(s, n->inputs[1], g), g));
            break;
        }
        case LM_OP_INDEX_SELECT: {
            int ax = (int)n->params.i[0];
            lm_array *a = n->inputs[0], *idx = n->inputs[1];
            int64_t sh[LM_MAX_DIMS];
            for (int d = 0; d < g->ndim; d++) sh[d] = d == ax ? idx->size : 1;
            lm_array *ir = K(s, lm_reshape(idx, g->ndim, sh));
            r[0] = K(s, lm_scatter_add(zeros_like(s, a, g->dtype), ax, ir ? index_like(s, ir, g) : NULL, g));
            break;
        }
        case LM_OP_CONV: case LM_OP_CONV_TRANSPOSE:
            st = conv_rule(s, n, g, need, r);
            break;
        case LM_OP_SOFTMAX: {
            int ax = (int)n->params.i[0];
            lm_array *gy = BI(MUL, g, n);
            r[0] = BI(SUB, gy, BI(MUL, n, K(s, lm_reduce(LM_OP_SUM, gy, 1, &ax, true))));
            break;
        }
        case LM_OP_LOG_SOFTMAX: {
            int ax = (int)n->params.i[0];
            r[0] = BI(SUB, g, BI(MUL, UN(EXP, n), K(s, lm_reduce(LM_OP_SUM, g, 1, &ax, true))));
            break;
        }
        case LM_OP_TRIL: r[0] = K(s, lm_tril(g, n->params.i[0])); break;
        case LM_OP_TRIU: r[0] = K(s, lm_triu(g, n->params.i[0])); break;
        case LM_OP_GROUP_NORM:
            st = group_norm_rule(s, n, g, need, r);
            break;
        default:
            handled = false;
        }
    }
    if (!handled) {   /* marked differentiable, yet no rule: an error, never a zero gradient */
        scope_end(s);
        return lm_error_set(LM_ERR_UNSUPPORTED, "grad: %s has no backward rule although core/op.h marks it "
                            "differentiable (output %s)", lm_op_name(n->op), lm_desc(s0, sizeof s0, n));
    }
    if (st == LM_OK && s->failed) st = lm_error_status();
    for (int i = 0; i < n->ninputs && i < 64; i++) {
        gin[i] = NULL;
        if (st == LM_OK && need[i] && r[i]) gin[i] = lm_array_retain(r[i] == g ? g : r[i]);
    }
    scope_end(s);
    if (st != LM_OK) {
        for (int i = 0; i < n->ninputs && i < 64; i++) { lm_array_release(gin[i]); gin[i] = NULL; }
        if (lm_error_message()[0] == 0)
            lm_error_set(st, "grad: backward of %s failed", lm_op_name(n->op));
        return st;
    }
    return LM_OK;
}

