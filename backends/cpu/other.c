/* other.c - concat, pad, take_along_axis and index_select kernels. */
#include <string.h>
#include "cpu.h"

/* ---- concat: each input's rows land at a column offset of the output ---- */
typedef struct { lm_array *out; int axis; int64_t outer; } cat_ctx;

static void concat_task(void *p, int64_t b, int64_t e)
{
    cat_ctx *c = p;
    lm_array *out = c->out;
    size_t esz = lm_dtype_size(out->dtype);
    int64_t inner = 1;
    for (int d = c->axis + 1; d < out->ndim; d++) inner *= out->shape[d];
    int64_t orow = out->shape[c->axis] * inner;
    for (int64_t o = b; o < e; o++) {
        int64_t col = 0;
        for (int k = 0; k < out->ninputs; k++) {
            const lm_array *in = out->inputs[k];
            int64_t irow = in->shape[c->axis] * inner;
            if (lm_concat_placed(out, k)) {   /* its producer wrote it there */
                col += irow;
                continue;
            }
            char *dst = (char *)lm_cpu_ptr(out) + (o * orow + col) * (int64_t)esz;
            lm_cpu_gather(dst, out->dtype, lm_cpu_ptr(in), in->dtype, in->ndim, in->shape, in->strides,
                          o * irow, irow);
            col += irow;
        }
    }
}

/* ---- pad: fill, then copy the input's rows into the interior ---- */
typedef struct { lm_array *out; const lm_array *in; } pad_ctx;

static void pad_task(void *p, int64_t b, int64_t e)
{
    pad_ctx *c = p;
    const lm_array *in = c->in;
    lm_array *out = c->out;
    size_t esz = lm_dtype_size(out->dtype);
    int nd = in->ndim;
    int64_t w = nd ? in->shape[nd - 1] : 1;
    for (int64_t r = b; r < e; r++) {
        /* row r of the input (all axes but the last) -> output offset */
        int64_t rem = r, off = nd ? out->params.i[2 * (nd - 1)] : 0, ostride = nd ? out->shape[nd - 1] : 1;
        for (int d = nd - 2; d >= 0; d--) {
            int64_t i = rem % in->shape[d];
            rem /= in->shape[d];
            off += (i + out->params.i[2 * d]) * ostride;
            ostride *= out->shape[d];
        }
        lm_cpu_gather((char *)lm_cpu_ptr(out) + off * (int64_t)esz, out->dtype, lm_cpu_ptr(in), in->dtype,
                      nd, in->shape, in->strides, r * w, w);
    }
}

static lm_status run_pad(lm_array *out)
{
    const lm_array *in = out->inputs[0];
    size_t esz = lm_dtype_size(out->dtype);
    unsigned char v[8];
    lm_convert(v, out->dtype, &out->params.f[0], LM_F64, 1);
    char *o = lm_cpu_ptr(out);
    for (int64_t i = 0; i < out->size; i++) memcpy(o + i * (int64_t)esz, v, esz);
    if (in->size == 0) return LM_OK;
    int64_t w = in->ndim ? in->shape[in->ndim - 1] : 1;
    pad_ctx c = {out, in};
    lm_cpu_parallel_for(in->size / w, 64, pad_task, &c);
    return LM_OK;
}

/* ---- take_along_axis / index_select: index checks report the first bad one ---- */
typedef struct { lm_array *out; int axis; int64_t bad, bad_at; } idx_ctx;

static int64_t read_index(const lm_array *idx, int64_t flat, const int64_t *st, int nd, const int64_t *shape)
{
    int64_t off = 0, rem = flat;
    for (int d = nd - 1; d >= 0; d--) { off += (rem % shape[d]) * st[d]; rem /= shape[d]; }
    return ((const int64_t *)lm_cpu_ptr(idx))[off];
}

static void gather_task(void *p, int64_t b, int64_t e)
{
    idx_ctx *c = p;
    lm_array *out = c->out;
    const lm_array *a = out->inputs[0], *idx = out->inputs[1];
    size_t esz = lm_dtype_size(out->dtype);
    int nd = out->ndim;
    int64_t n = a->shape[c->axis];
    for (int64_t i = b; i < e; i++) {
        int64_t k = read_index(idx, i, idx->strides, nd, out->shape);
        if (k < 0) k += n;
        if (k < 0 || k >= n) {
            __atomic_store_n(&c->bad, 1, __ATOMIC_RELAXED);
            __atomic_store_n(&c->bad_at, k < 0 ? k - n : k, __ATOMIC_RELAXED);
            memset((char *)lm_cpu_ptr(out) + i * (int64_t)esz, 0, esz);
            continue;
        }
        int64_t off = 0, rem = i;
        for (int d = nd - 1; d >= 0; d--) {
            int64_t j = rem % out->shape[d];
            rem /= out->shape[d];
            off += (d == c->axis ? k : j) * a->strides[d];
        }
        memcpy((char *)lm_cpu_ptr(out) + i * (int64_t)esz, (const char *)lm_cpu_ptr(a) + off * (int64_t)esz, esz);
    }
}

static void select_task(void *p, int64_t b, int64_t e)
{
    idx_ctx *c = p;
    lm_array *out = c->out;
    const lm_array *a = out->inputs[0], *idx = out->inputs[1];
    size_t esz = lm_dtype_size(out->dtype);
    int64_t m = out->shape[c->axis], n = a->shape[c->axis], inner = 1;
    for (int d = c->axis + 1; d < out->ndim; d++) inner *= out->shape[d];
    /* one task item = one (outer, j) slab of `inner` elements */
    for (int64_t it = b; it < e; it++) {
        int64_t outer = it / m, j = it % m;
        int64_t k = ((const int64_t *)lm_cpu_ptr(idx))[j * (idx->ndim ? idx->strides[0] : 0)];
        char *dst = (char *)lm_cpu_ptr(out) + it * inner * (int64_t)esz;
        if (k < 0) k += n;
        if (k < 0 || k >= n) {
            __atomic_store_n(&c->bad, 1, __ATOMIC_RELAXED);
            __atomic_store_n(&c->bad_at, k < 0 ? k - n : k, __ATOMIC_RELAXED);
            memset(dst, 0, (size_t)inner * esz);
            continue;
        }
        /* the source slab: a[outer..., k, ...] flattened over the inner axes */
        int64_t off = k * a->strides[c->axis], rem = outer;
        for (int d = c->axis - 1; d >= 0; d--) { off += (rem % a->shape[d]) * a->strides[d]; rem /= a->shape[d]; }
        lm_cpu_gather(dst, out->dtype, (const char *)lm_cpu_ptr(a) + off * (int64_t)esz, a->dtype,
                      a->ndim - c->axis - 1, a->shape + c->axis + 1, a->strides + c->axis + 1, 0, inner);
    }
}

lm_status lm_cpu_run_other(lm_device *d, lm_array *node)
{
    (void)d;
    switch (node->op) {
    case LM_OP_CONCAT: {
        cat_ctx c = {node, (int)node->params.i[0], 1};
        for (int k = 0; k < c.axis; k++) c.outer *= node->shape[k];
        if (node->size) lm_cpu_parallel_for(c.outer, 16, concat_task, &c);
        return LM_OK;
    }
    case LM_OP_PAD:
        return run_pad(node);
    case LM_OP_GATHER: case LM_OP_INDEX_SELECT: {
        idx_ctx c = {node, (int)node->params.i[0], 0, 0};
        if (node->op == LM_OP_GATHER) lm_cpu_parallel_for(node->size, 4096, gather_task, &c);
        else if (node->size) {
            int64_t inner = 1;
            for (int k = c.axis + 1; k < node->ndim; k++) inner *= node->shape[k];
            lm_cpu_parallel_for(node->size / inner, 16, select_task, &c);
        }
        if (c.bad)
            return lm_error_set(LM_ERR_ARG, "%s: index %lld out of range for axis %d of size %lld",
                                lm_op_name(node->op), (long long)c.bad_at, c.axis,
                                (long long)node->inputs[0]->shape[c.axis]);
        return LM_OK;
    }
    default:
        return lm_error_set(LM_ERR_UNSUPPORTED, "cpu: %s has no kernel", lm_op_name(node->op));
    }
}
