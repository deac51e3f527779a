/* nn_index.c - RoPE, sort/argsort/topk, scatter/scatter_add, one_hot,
 * tril/triu: the ops that move or select elements by position. */
#include <stdlib.h>
#include "nn.h"

/* The geometry of x viewed with `axis` last (rows of len elements). */
typedef struct {
    int n;
    int64_t sh[LM_MAX_DIMS], st[LM_MAX_DIMS];
    int64_t len, inner, rows;
} axis_view;

static void view_axis_last(axis_view *v, const lm_array *x, int axis)
{
    v->n = 0;
    v->inner = 1;
    for (int d = 0; d < x->ndim; d++) {
        if (d == axis) continue;
        v->sh[v->n] = x->shape[d];
        v->st[v->n++] = x->strides[d];
        if (d > axis) v->inner *= x->shape[d];
    }
    v->sh[v->n] = x->shape[axis];
    v->st[v->n++] = x->strides[axis];
    v->len = x->shape[axis];
    v->rows = v->len ? x->size / v->len : 0;
}

/* ------------------------------------------------------------------ rope */

/* The angles usually broadcast over heads (stride 0): cos and sin are
 * computed once per distinct angle into a table laid out over the
 * "compact" shape (broadcast axes of size 1), and each row of x finds its
 * table row through that shape. */
typedef struct {
    lm_array *node;
    const lm_array *x;
    const double *cs;         /* [crows, half] cos, then [crows, half] sin */
    int64_t crows, half, D;
    int64_t rstride[LM_MAX_DIMS];   /* table-row stride of each leading axis (0: broadcast) */
    int failed;
} rope_ctx;

static void rope_task(void *p, int64_t b, int64_t e)
{
    rope_ctx *c = p;
    const lm_array *x = c->x;
    lm_array *o = c->node;
    int64_t D = c->D, half = c->half, nd = x->ndim;
    bool trad = o->params.i[1];
    double *row = malloc(sizeof(double) * (size_t)D);
    if (!row) {
        __atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t r = b; r < e; r++) {
        int64_t rem = r, t = 0;
        for (int d = (int)nd - 2; d >= 0; d--) {
            t += (rem % x->shape[d]) * c->rstride[d];
            rem /= x->shape[d];
        }
        const double *cs = c->cs + t * half, *sn = c->cs + (c->crows + t) * half;
        lm_cpu_gather(row, LM_F64, lm_cpu_ptr(x), x->dtype, x->ndim, x->shape, x->strides, r * D, D);
        for (int64_t j = 0; j < half; j++) {
            int64_t i1 = trad ? 2 * j : j, i2 = trad ? 2 * j + 1 : j + half;
            double x1 = row[i1], x2 = row[i2];
            row[i1] = x1 * cs[j] - x2 * sn[j];   /* pairs are disjoint: in place is safe */
            row[i2] = x1 * sn[j] + x2 * cs[j];
        }
        lm_convert((char *)lm_cpu_ptr(o) + r * D * (int64_t)lm_dtype_size(o->dtype), o->dtype, row, LM_F64,
                   (size_t)D);
    }
    free(row);
}

lm_status lm_nn_rope(lm_array *node)
{
    const lm_array *x = node->inputs[0], *a = node->inputs[1];
    int nd = x->ndim;
    rope_ctx c = {node, x, NULL, 1, node->params.i[0] / 2, x->shape[nd - 1], {0}, 0};
    int64_t csh[LM_MAX_DIMS];
    for (int d = nd - 2; d >= 0; d--) {
        bool bc = a->strides[d] == 0 || a->shape[d] == 1;
        csh[d] = bc ? 1 : a->shape[d];
        c.rstride[d] = bc ? 0 : c.crows;
        c.crows *= csh[d];
    }
    csh[nd - 1] = c.half;
    double *tab = malloc(sizeof(double) * (size_t)(2 * c.crows * c.half + 1));
    if (!tab) return lm_error_set(LM_ERR_NOMEM, "rope: out of host memory");
    lm_cpu_gather(tab, LM_F64, lm_cpu_ptr(a), a->dtype, nd, csh, a->strides, 0, c.crows * c.half);
    for (int64_t i = 0; i < c.crows * c.half; i++) {
        tab[c.crows * c.half + i] = sin(tab[i]);
        tab[i] = cos(tab[i]);
    }
    c.cs = tab;
    lm_cpu_parallel_for(c.D ? node->size / c.D : 0, 64, rope_task, &c);
    free(tab);
    if (c.failed) return lm_error_set(LM_ERR_NOMEM, "rope: out of host memory");
    return LM_OK;
}

/* ------------------------------------------------------- sort and topk */

typedef struct { const double *f; const int64_t *i; bool desc; } sort_keys;

/* NaN is the largest value (PyTorch); ties keep index order (stable) */
static int cmp_keys(const void *pa, const void *pb, void *ctx)
{
    const sort_keys *k = ctx;
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    int c = 0;
    if (k->f) {
        double x = k->f[a], y = k->f[b];
        bool nx = x != x, ny = y != y;
        c = nx || ny ? (nx && ny ? 0 : nx ? 1 : -1) : (x > y) - (x < y);
    } else {
        c = (k->i[a] > k->i[b]) - (k->i[a] < k->i[b]);
    }
    if (k->desc) c = -c;
    return c ? c : (a > b) - (a < b);
}

typedef struct { lm_array *node; const lm_array *x; axis_view v; int failed; } sort_ctx;

static void sort_task(void *p, int64_t b, int64_t e)
{
    sort_ctx *c = p;
    const lm_array *x = c->x;
    lm_array *o = c->node;
    const lm_params *pr = &o->params;
    bool topk = o->op == LM_OP_TOPK, ints = !lm_dtype_is_float(x->dtype);
    bool want_idx = o->op == LM_OP_ARGSORT || (topk && pr->i[3] == 1);
    int64_t len = c->v.len, inner = c->v.inner, olen = topk ? pr->i[1] : len;
    size_t xsz = lm_dtype_size(x->dtype), osz = lm_dtype_size(o->dtype);
    size_t rawsz = ((size_t)len * xsz + 7) & ~(size_t)7;   /* keys and indices stay 8-aligned */
    char *raw = malloc(rawsz + (size_t)len * 16 + 16);
    if (!raw) {
        __atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    void *keys = raw + rawsz;
    int64_t *idx = (int64_t *)((char *)keys + (size_t)len * 8);
    sort_keys sk = {NULL, NULL, topk ? pr->i[2] != 0 : pr->i[1] != 0};
    for (int64_t r = b; r < e; r++) {
        lm_cpu_gather(raw, x->dtype, lm_cpu_ptr(x), x->dtype, c->v.n, c->v.sh, c->v.st, r * len, len);
        lm_convert(keys, ints ? LM_I64 : LM_F64, raw, x->dtype, (size_t)len);
        if (ints) sk.i = keys; else sk.f = keys;
        for (int64_t k = 0; k < len; k++) idx[k] = k;
        qsort_r(idx, (size_t)len, sizeof *idx, cmp_keys, &sk);
        int64_t outer = r / inner, j = r % inner;
        char *dst = (char *)lm_cpu_ptr(o) + (outer * olen * inner + j) * (int64_t)osz;
        for (int64_t k = 0; k < olen; k++, dst += inner * (int64_t)osz) {
            if (want_idx) memcpy(dst, &idx[k], 8);
            else memcpy(dst, raw + idx[k] * (int64_t)xsz, xsz);
        }
    }
    free(raw);
}

lm_status lm_nn_sort(lm_array *node)
{
    sort_ctx c = {node, node->inputs[0], {0}, 0};
    view_axis_last(&c.v, c.x, (int)node->params.i[0]);
    if (c.v.len == 0) return LM_OK;
    lm_cpu_parallel_for(c.v.rows, 1 + 1024 / (c.v.len + 1), sort_task, &c);
    if (c.failed) return lm_error_set(LM_ERR_NOMEM, "%s: out of host memory", lm_op_name(node->op));
    return LM_OK;
}

/* ---------------------------------------------------------------- scatter */

/* adds *src to *dst in dtype dt (one element) */
static void add_elem(void *dst, const void *src, lm_dtype dt)
{
    if (lm_dtype_is_float(dt)) {
        double a, b;
        lm_convert(&a, LM_F64, dst, dt, 1);
        lm_convert(&b, LM_F64, src, dt, 1);
        a += b;
        lm_convert(dst, dt, &a, LM_F64, 1);
    } else {
        int64_t a, b;
        lm_convert(&a, LM_I64, dst, dt, 1);
        lm_convert(&b, LM_I64, src, dt, 1);
        a = dt == LM_BOOL ? (a || b) : (int64_t)((uint64_t)a + (uint64_t)b);
        lm_convert(dst, dt, &a, LM_I64, 1);
    }
}

/* Sequential on purpose: "last write wins" and the order of additions are
 * then deterministic. */
lm_status lm_nn_scatter(lm_array *node)
{
    const lm_array *a = node->inputs[0], *ix = node->inputs[1], *src = node->inputs[2];
    int axis = (int)node->params.i[0], nd = node->ndim;
    size_t esz = lm_dtype_size(node->dtype);
    char *out = lm_cpu_ptr(node);
    lm_cpu_gather(out, node->dtype, lm_cpu_ptr(a), a->dtype, a->ndim, a->shape, a->strides, 0, a->size);
    void *own_i = NULL, *own_s = NULL;
    const int64_t *id = lm_cpu_contiguous(ix, LM_I64, &own_i);
    const char *sd = id ? lm_cpu_contiguous(src, node->dtype, &own_s) : NULL;
    if (!sd) {
        free(own_i);
        return lm_error_status();
    }
    lm_status st = LM_OK;
    int64_t pos[LM_MAX_DIMS] = {0};
    for (int64_t p = 0; p < ix->size; p++) {
        int64_t k = id[p], n = node->shape[axis];
        if (k < 0) k += n;
        if (k < 0 || k >= n) {
            st = lm_error_set(LM_ERR_ARG, "%s: index %lld out of range for axis %d of size %lld",
                              lm_op_name(node->op), (long long)id[p], axis, (long long)n);
            break;
        }
        int64_t off = 0;
        for (int d = 0; d < nd; d++) off += (d == axis ? k : pos[d]) * node->strides[d];
        if (node->op == LM_OP_SCATTER) memcpy(out + off * (int64_t)esz, sd + p * (int64_t)esz, esz);
        else add_elem(out + off * (int64_t)esz, sd + p * (int64_t)esz, node->dtype);
        for (int d = nd - 1; d >= 0 && ++pos[d] == ix->shape[d]; d--) pos[d] = 0;
    }
    free(own_i);
    free(own_s);
    return st;
}

/* ---------------------------------------------------------------- one_hot */

lm_status lm_nn_one_hot(lm_array *node)
{
    const lm_array *ix = node->inputs[0];
    int64_t nc = node->params.i[0];
    void *own = NULL;
    const int64_t *id = lm_cpu_contiguous(ix, LM_I64, &own);
    if (!id) return lm_error_status();
    int64_t *out = lm_cpu_ptr(node);
    memset(out, 0, lm_array_nbytes(node));
    for (int64_t p = 0; p < ix->size; p++) {
        if (id[p] < 0 || id[p] >= nc) {
            free(own);
            return lm_error_set(LM_ERR_ARG, "one_hot: index %lld outside [0, %lld)", (long long)id[p],
                                (long long)nc);
        }
        out[p * nc + id[p]] = 1;
    }
    free(own);
    return LM_OK;
}

/* -------------------------------------------------------------- tril/triu */

lm_status lm_nn_tri(lm_array *node)
{
    const lm_array *x = node->inputs[0];
    size_t esz = lm_dtype_size(node->dtype);
    char *out = lm_cpu_ptr(node);
    lm_cpu_gather(out, node->dtype, lm_cpu_ptr(x), x->dtype, x->ndim, x->shape, x->strides, 0, x->size);
    int64_t M = node->shape[node->ndim - 2], N = node->shape[node->ndim - 1], k = node->params.i[0];
    bool lower = node->op == LM_OP_TRIL;
    int64_t mats = M > 0 && N > 0 ? node->size / (M * N) : 0;
    for (int64_t m = 0; m < mats; m++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++)
                if (lower ? j > i + k : j < i + k) memset(out + ((m * M + i) * N + j) * (int64_t)esz, 0, esz);
    return LM_OK;
}
