/* ops_reduce.c - reduction builders: axes to a mask, output shape, dtype. */
#include "internal.h"

static lm_array *reduce_node(lm_op op, lm_array *a, int naxes, const int *axes, bool keepdims,
                             int ddof, lm_dtype out)
{
    int64_t mask = 0;
    if (naxes == 0) mask = (1 << a->ndim) - 1;
    for (int i = 0; i < naxes; i++) {
        int ax = axes[i];
        if (!lm_axis_norm(lm_op_name(op), &ax, a->ndim)) return NULL;
        if (mask & (1 << ax)) {
            lm_error_set(LM_ERR_ARG, "%s: axis %d given twice", lm_op_name(op), axes[i]);
            return NULL;
        }
        mask |= 1 << ax;
    }
    int64_t shape[LM_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < a->ndim; d++) {
        if (!(mask & (1 << d))) shape[n++] = a->shape[d];
        else if (keepdims) shape[n++] = 1;
        if ((mask & (1 << d)) && a->shape[d] == 0 &&
            (op == LM_OP_MAX || op == LM_OP_MIN || op == LM_OP_ARGMAX || op == LM_OP_ARGMIN)) {
            lm_error_set(LM_ERR_SHAPE, "%s: reduction over an empty axis %d", lm_op_name(op), d);
            return NULL;
        }
    }
    lm_params p = {0};
    p.i[0] = mask;
    p.i[1] = keepdims;
    p.i[2] = ddof;
    return lm_node_new(op, out, n, shape, 1, &a, &p, NULL);
}

lm_array *lm_reduce(lm_op op, lm_array *a, int naxes, const int *axes, bool keepdims)
{
    if (!a) return NULL;
    lm_dtype out = a->dtype;
    switch (op) {
    case LM_OP_SUM: case LM_OP_PROD:
        /* integer sums accumulate in i64, as numpy and torch */
        if (!lm_dtype_is_float(out)) out = LM_I64;
        break;
    case LM_OP_MEAN: case LM_OP_LOGSUMEXP:
        if (!lm_dtype_is_float(out)) out = LM_F32;
        break;
    case LM_OP_MAX: case LM_OP_MIN:
        break;
    case LM_OP_ALL: case LM_OP_ANY:
        out = LM_BOOL;
        break;
    default:
        lm_error_set(LM_ERR_ARG, "reduce: %s is not a reduction", lm_op_name(op));
        return NULL;
    }
    lm_array *c = out == LM_F32 && !lm_dtype_is_float(a->dtype) ? lm_cast(a, LM_F32) : lm_array_retain(a);
    lm_array *r = c ? reduce_node(op, c, naxes, axes, keepdims, 0, out) : NULL;
    lm_array_release(c);
    return r;
}

static lm_array *moment(lm_op op, lm_array *a, int naxes, const int *axes, int ddof, bool keepdims)
{
    if (!a) return NULL;
    if (ddof < 0) {
        lm_error_set(LM_ERR_ARG, "%s: ddof must be >= 0, got %d", lm_op_name(op), ddof);
        return NULL;
    }
    lm_array *c = lm_dtype_is_float(a->dtype) ? lm_array_retain(a) : lm_cast(a, LM_F32);
    lm_array *r = c ? reduce_node(op, c, naxes, axes, keepdims, ddof, c->dtype) : NULL;
    lm_array_release(c);
    return r;
}

lm_array *lm_var(lm_array *a, int naxes, const int *axes, int ddof, bool keepdims)
{
    return moment(LM_OP_VAR, a, naxes, axes, ddof, keepdims);
}

lm_array *lm_std(lm_array *a, int naxes, const int *axes, int ddof, bool keepdims)
{
    return moment(LM_OP_STD, a, naxes, axes, ddof, keepdims);
}

lm_array *lm_argreduce(lm_op op, lm_array *a, int axis, bool keepdims)
{
    if (!a) return NULL;
    if (op != LM_OP_ARGMAX && op != LM_OP_ARGMIN) {
        lm_error_set(LM_ERR_ARG, "argreduce: %s is not argmax/argmin", lm_op_name(op));
        return NULL;
    }
    if (axis == LM_AXIS_ALL) {
        lm_array *f = lm_flatten(a, 0, -1);
        lm_array *r = f ? reduce_node(op, f, 1, &(int){0}, false, 0, LM_I64) : NULL;
        lm_array_release(f);
        if (r && keepdims) {
            int64_t ones[LM_MAX_DIMS] = {1, 1, 1, 1, 1, 1, 1, 1};
            lm_array *k = lm_reshape(r, a->ndim, ones);
            lm_array_release(r);
            r = k;
        }
        return r;
    }
    return reduce_node(op, a, 1, &axis, keepdims, 0, LM_I64);
}

lm_array *lm_cumsum(lm_array *a, int axis)
{
    if (!a) return NULL;
    if (!lm_axis_norm("cumsum", &axis, a->ndim)) return NULL;
    lm_params p = {0};
    p.i[0] = axis;
    lm_dtype out = lm_dtype_is_float(a->dtype) ? a->dtype : LM_I64;
    return lm_node_new(LM_OP_CUMSUM, out, a->ndim, a->shape, 1, &a, &p, NULL);
}
