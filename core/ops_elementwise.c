/* ops_elementwise.c - unary, binary, where, clamp and cast builders. */
#include <math.h>
#include "internal.h"


lm_array *lm_unary(lm_op op, lm_array *a)
{
    if (!a) return NULL;
    if (lm_op_class_of(op) != LM_CLASS_UNARY || op == LM_OP_CLAMP || op == LM_OP_CAST) {
        lm_error_set(LM_ERR_ARG, "unary: %s is not a unary elementwise op", lm_op_name(op));
        return NULL;
    }
    lm_dtype dt = a->dtype;
    lm_op_dtype_rule rule = lm_op_dtype_rule_of(op);
    if (rule == LM_DT_FLOAT && !lm_dtype_is_float(dt)) dt = LM_F32;
    if (rule == LM_DT_BOOL) dt = LM_BOOL;
    if (rule == LM_DT_SAME && dt == LM_BOOL) {   /* the bl column: what a bool input gives */
        lm_op_bool_rule bl = lm_op_bool_rule_of(op);
        if (bl == LM_BOOL_ERR) {
            lm_error_set(LM_ERR_DTYPE, "%s: not defined for bool (as in PyTorch; logical_not negates a bool)",
                         lm_op_name(op));
            return NULL;
        }
        if (bl == LM_BOOL_I64) dt = LM_I64;
    }
    return lm_node_new(op, dt, a->ndim, a->shape, 1, &a, NULL, NULL);
}

lm_array *lm_cast(lm_array *a, lm_dtype dt)
{
    if (!a) return NULL;
    if (lm_dtype_is_quant(a->dtype) || lm_dtype_is_quant(dt)) {
        lm_error_set(LM_ERR_UNSUPPORTED, "cast: dtype %s is quantized storage; dequantize() it first "
                     "(lm.quantize makes one)", lm_dtype_name(lm_dtype_is_quant(dt) ? dt : a->dtype));
        return NULL;
    }
    if ((unsigned)dt >= LM_DTYPE_COUNT) {
        lm_error_set(LM_ERR_DTYPE, "cast: invalid dtype %d", (int)dt);
        return NULL;
    }
    if (a->dtype == dt) return lm_array_retain(a);
    lm_array *r = lm_node_new(LM_OP_CAST, dt, a->ndim, a->shape, 1, &a, NULL, NULL);
    /* a cast number is still a number: it must not decide where work runs */
    if (r && a->ndim == 0) r->flags |= a->flags & LM_ARRAY_WEAK;
    return r;
}

lm_array *lm_clamp(lm_array *a, double lo, double hi)
{
    if (!a) return NULL;
    if (!isnan(lo) && !isnan(hi) && lo > hi) {
        lm_error_set(LM_ERR_ARG, "clamp: min %g greater than max %g", lo, hi);
        return NULL;
    }
    lm_params p = {0};
    p.f[0] = lo;
    p.f[1] = hi;
    p.i[0] = (isnan(lo) ? 0 : 1) | (isnan(hi) ? 0 : 2);
    lm_dtype dt = a->dtype == LM_BOOL ? LM_I64 : a->dtype;
    if (!lm_dtype_is_float(dt) && ((!isnan(lo) && lo != floor(lo)) || (!isnan(hi) && hi != floor(hi))))
        dt = LM_F32;
    return lm_node_new(LM_OP_CLAMP, dt, a->ndim, a->shape, 1, &a, &p, NULL);
}

/* The common dtype both operands are computed in. */
static lm_dtype operand_dtype(const lm_array *a, const lm_array *b)
{
    bool wa = a->flags & LM_ARRAY_WEAK, wb = b->flags & LM_ARRAY_WEAK;
    if (wa && !wb) return lm_dtype_promote_weak(b->dtype, a->dtype);
    if (wb && !wa) return lm_dtype_promote_weak(a->dtype, b->dtype);
    return lm_dtype_promote(a->dtype, b->dtype);
}

lm_array *lm_binary(lm_op op, lm_array *a, lm_array *b)
{
    if (!a || !b) return NULL;
    if (lm_op_class_of(op) != LM_CLASS_BINARY) {
        lm_error_set(LM_ERR_ARG, "binary: %s is not a binary elementwise op", lm_op_name(op));
        return NULL;
    }
    int n;
    int64_t shape[LM_MAX_DIMS];
    if (lm_broadcast_shapes(lm_op_name(op), a->ndim, a->shape, b->ndim, b->shape, &n, shape) != LM_OK)
        return NULL;
    lm_dtype ct = operand_dtype(a, b), out = ct;
    lm_op_dtype_rule rule = lm_op_dtype_rule_of(op);
    if (rule == LM_DT_BOOL) out = LM_BOOL;
    else if (rule == LM_DT_FLOAT && !lm_dtype_is_float(ct)) ct = out = LM_F32;
    else if (rule == LM_DT_SAME && ct == LM_BOOL) {   /* the bl column: what bool operands give */
        lm_op_bool_rule bl = lm_op_bool_rule_of(op);
        if (bl == LM_BOOL_ERR) {
            lm_error_set(LM_ERR_DTYPE, "%s: not defined for two bool tensors", lm_op_name(op));
            return NULL;
        }
        if (bl == LM_BOOL_I64) ct = out = LM_I64;
    }
    /* operands are cast to the compute dtype here so kernels see one dtype */
    lm_array *ca = lm_cast(a, ct), *cb = lm_cast(b, ct);
    lm_array *ab[2] = {ca, cb};
    lm_array *r = NULL;
    if (ca && cb) r = lm_node_new(op, out, n, shape, 2, ab, NULL, NULL);
    lm_array_release(ca);
    lm_array_release(cb);
    return r;
}

lm_array *lm_binary_scalar(lm_op op, lm_array *a, double s, bool scalar_first)
{
    if (!a) return NULL;
    lm_dtype sd = s == floor(s) && fabs(s) < 9.2e18 ? LM_I64 : LM_F64;
    lm_dtype ct = lm_dtype_promote_weak(a->dtype, sd);
    lm_array *sc = lm_scalar(s, ct, a->device);
    if (!sc) return NULL;
    lm_array *r = scalar_first ? lm_binary(op, sc, a) : lm_binary(op, a, sc);
    lm_array_release(sc);
    return r;
}

lm_array *lm_where(lm_array *cond, lm_array *a, lm_array *b)
{
    if (!cond || !a || !b) return NULL;
    int n, n2;
    int64_t s1[LM_MAX_DIMS], s2[LM_MAX_DIMS];
    if (lm_broadcast_shapes("where", a->ndim, a->shape, b->ndim, b->shape, &n, s1) != LM_OK ||
        lm_broadcast_shapes("where", cond->ndim, cond->shape, n, s1, &n2, s2) != LM_OK)
        return NULL;
    lm_dtype ct = operand_dtype(a, b);
    lm_array *c = lm_cast(cond, LM_BOOL), *ca = lm_cast(a, ct), *cb = lm_cast(b, ct);
    lm_array *in[3] = {c, ca, cb};
    lm_array *r = NULL;
    if (c && ca && cb) r = lm_node_new(LM_OP_WHERE, ct, n2, s2, 3, in, NULL, NULL);
    lm_array_release(c);
    lm_array_release(ca);
    lm_array_release(cb);
    return r;
}
