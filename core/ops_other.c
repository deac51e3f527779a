/* ops_other.c - matmul, concat/stack/split, pad, gather builders. */
#include <stdlib.h>
#include <string.h>
#include "internal.h"

#define SHAPE(buf, a) lm_shape_str(buf, sizeof buf, (a)->ndim, (a)->shape)

lm_array *lm_matmul(lm_array *a, lm_array *b)
{
    if (!a || !b) return NULL;
    char s1[128], s2[128];
    /* w.T of a quantized w [out, in]: strides [1, in] (a one-row w's
     * transpose [in, 1] also counts as contiguous, but a quantized tensor
     * of its own never has a last dimension of 1) */
    bool wt = lm_dtype_is_quant(b->dtype) && b->ndim == 2 &&
              (!lm_array_is_contiguous(b) || (b->strides[0] == 1 && b->strides[1] == b->shape[0]));
    if (wt && !lm_dtype_is_quant(a->dtype)) {
        /* x @ w.T with a quantized w [out, in] is lm_linear(x, w): integer
         * dots with w as it is stored (backends/cpu/quant_linear.c) */
        lm_array *w = lm_transpose(b, 0, 1), *y = lm_linear(a, w, NULL);
        lm_array_release(w);
        return y;
    }
    if (lm_dtype_is_quant(a->dtype) || lm_dtype_is_quant(b->dtype)) {
        lm_error_set(LM_ERR_UNSUPPORTED, "matmul: %s @ %s: a quantized tensor multiplies only as the right "
                     "operand's transpose, x @ w.T (lm.linear(x, w)); dequantize() it for any other product",
                     lm_desc(s1, sizeof s1, a), lm_desc(s2, sizeof s2, b));
        return NULL;
    }
    if (a->ndim == 0 || b->ndim == 0) {
        lm_error_set(LM_ERR_SHAPE, "matmul: operands must have at least 1 dimension, got %s @ %s",
                     SHAPE(s1, a), SHAPE(s2, b));
        return NULL;
    }
    lm_array *a2 = a->ndim == 1 ? lm_unsqueeze(a, 0) : lm_array_retain(a);
    lm_array *b2 = b->ndim == 1 ? lm_unsqueeze(b, 1) : lm_array_retain(b);
    lm_array *r = NULL, *av = NULL, *bv = NULL, *ca = NULL, *cb = NULL;
    if (!a2 || !b2) goto done;
    int64_t m = a2->shape[a2->ndim - 2], k = a2->shape[a2->ndim - 1];
    int64_t k2 = b2->shape[b2->ndim - 2], n = b2->shape[b2->ndim - 1];
    if (k != k2) {
        lm_error_set(LM_ERR_SHAPE, "matmul: inner dimensions differ: %s @ %s", SHAPE(s1, a), SHAPE(s2, b));
        goto done;
    }
    int nb;
    int64_t batch[LM_MAX_DIMS];
    if (lm_broadcast_shapes("matmul", a2->ndim - 2, a2->shape, b2->ndim - 2, b2->shape, &nb, batch) != LM_OK)
        goto done;
    lm_dtype dt = lm_dtype_promote(a->dtype, b->dtype);
    if (dt == LM_BOOL) {
        lm_error_set(LM_ERR_DTYPE, "matmul: bool operands are not supported");
        goto done;
    }
    int64_t sa[LM_MAX_DIMS], sb[LM_MAX_DIMS], so[LM_MAX_DIMS];
    memcpy(sa, batch, sizeof(int64_t) * (size_t)nb);
    memcpy(sb, batch, sizeof(int64_t) * (size_t)nb);
    memcpy(so, batch, sizeof(int64_t) * (size_t)nb);
    sa[nb] = m; sa[nb + 1] = k;
    sb[nb] = k; sb[nb + 1] = n;
    so[nb] = m; so[nb + 1] = n;
    ca = lm_cast(a2, dt);
    cb = lm_cast(b2, dt);
    av = lm_broadcast_to(ca, nb + 2, sa);
    bv = lm_broadcast_to(cb, nb + 2, sb);
    if (!av || !bv) goto done;
    lm_array *in[2] = {av, bv};
    r = lm_node_new(LM_OP_MATMUL, dt, nb + 2, so, 2, in, NULL, NULL);
    if (r && (a->ndim == 1 || b->ndim == 1)) {
        lm_array *t = lm_squeeze(r, a->ndim == 1 ? -2 : -1);
        lm_array_release(r);
        r = t;
        if (r && a->ndim == 1 && b->ndim == 1) {
            t = lm_squeeze(r, -1);
            lm_array_release(r);
            r = t;
        }
    }
done:
    lm_array_release(a2);
    lm_array_release(b2);
    lm_array_release(ca);
    lm_array_release(cb);
    lm_array_release(av);
    lm_array_release(bv);
    return r;
}

lm_array *lm_concat(int n, lm_array *const *arrays, int axis)
{
    if (n <= 0) {
        lm_error_set(LM_ERR_ARG, "concat: needs at least one tensor");
        return NULL;
    }
    for (int i = 0; i < n; i++) if (!arrays[i]) return NULL;
    const lm_array *f = arrays[0];
    if (f->ndim == 0) {
        lm_error_set(LM_ERR_SHAPE, "concat: zero-dimensional tensors cannot be concatenated");
        return NULL;
    }
    if (!lm_axis_norm("concat", &axis, f->ndim)) return NULL;
    int64_t shape[LM_MAX_DIMS];
    memcpy(shape, f->shape, sizeof shape);
    shape[axis] = 0;
    lm_dtype dt = f->dtype;
    for (int i = 0; i < n; i++) {
        const lm_array *a = arrays[i];
        bool ok = a->ndim == f->ndim;
        for (int d = 0; ok && d < f->ndim; d++) ok = d == axis || a->shape[d] == f->shape[d];
        if (!ok) {
            char s1[128], s2[128];
            lm_error_set(LM_ERR_SHAPE, "concat: tensor %d has shape %s, incompatible with %s on axis %d",
                         i + 1, SHAPE(s1, a), SHAPE(s2, f), axis);
            return NULL;
        }
        if (!lm_add64(shape[axis], a->shape[axis], &shape[axis])) {
            lm_error_set(LM_ERR_SHAPE, "concat: axis %d sums past 64 bits", axis);
            return NULL;
        }
        dt = lm_dtype_promote(dt, a->dtype);
    }
    lm_array **in = calloc((size_t)n, sizeof *in);
    if (!in) {
        lm_error_set(LM_ERR_NOMEM, "concat: out of host memory");
        return NULL;
    }
    lm_array *r = NULL;
    int k = 0;
    for (; k < n; k++) if (!(in[k] = lm_cast(arrays[k], dt))) break;
    if (k == n) {
        lm_params p = {0};
        p.i[0] = axis;
        r = lm_node_new(LM_OP_CONCAT, dt, f->ndim, shape, n, in, &p, NULL);
    }
    for (int i = 0; i < k; i++) lm_array_release(in[i]);
    free(in);
    return r;
}

lm_array *lm_stack(int n, lm_array *const *arrays, int axis)
{
    if (n <= 0) {
        lm_error_set(LM_ERR_ARG, "stack: needs at least one tensor");
        return NULL;
    }
    for (int i = 0; i < n; i++) if (!arrays[i]) return NULL;
    for (int i = 1; i < n; i++) {
        bool ok = arrays[i]->ndim == arrays[0]->ndim;
        for (int d = 0; ok && d < arrays[0]->ndim; d++) ok = arrays[i]->shape[d] == arrays[0]->shape[d];
        if (!ok) {
            char s1[128], s2[128];
            lm_error_set(LM_ERR_SHAPE, "stack: tensor %d has shape %s, expected %s", i + 1,
                         SHAPE(s1, arrays[i]), SHAPE(s2, arrays[0]));
            return NULL;
        }
    }
    int ax = axis;
    if (!lm_axis_norm("stack", &ax, arrays[0]->ndim + 1)) return NULL;
    lm_array **u = calloc((size_t)n, sizeof *u);
    if (!u) {
        lm_error_set(LM_ERR_NOMEM, "stack: out of host memory");
        return NULL;
    }
    int k = 0;
    for (; k < n; k++) if (!(u[k] = lm_unsqueeze(arrays[k], ax))) break;
    lm_array *r = k == n ? lm_concat(n, u, ax) : NULL;
    for (int i = 0; i < k; i++) lm_array_release(u[i]);
    free(u);
    return r;
}

int lm_split(lm_array *a, int sections, const int64_t *sizes, int nsizes, int axis,
             lm_array **out, int max_out)
{
    if (!a) return -1;
    if (!lm_axis_norm("split", &axis, a->ndim)) return -1;
    int64_t len = a->shape[axis];
    int64_t tmp[256];
    int count;
    if (sizes) {
        int64_t total = 0;
        for (int i = 0; i < nsizes; i++) {
            if (sizes[i] < 0) { lm_error_set(LM_ERR_ARG, "split: negative size"); return -1; }
            total += sizes[i];
        }
        if (total != len) {
            lm_error_set(LM_ERR_SHAPE, "split: sizes add up to %lld, axis %d has %lld",
                         (long long)total, axis, (long long)len);
            return -1;
        }
        count = nsizes;
    } else {
        if (sections <= 0 || len % sections) {
            lm_error_set(LM_ERR_SHAPE, "split: axis %d of size %lld does not divide into %d equal parts",
                         axis, (long long)len, sections);
            return -1;
        }
        count = sections;
    }
    if (count > max_out || count > 256) {
        lm_error_set(LM_ERR_ARG, "split: %d parts, room for %d", count, max_out);
        return -1;
    }
    for (int i = 0; i < count; i++) tmp[i] = sizes ? sizes[i] : len / sections;
    int64_t start = 0;
    for (int i = 0; i < count; i++) {
        out[i] = lm_slice(a, axis, start, start + tmp[i], 1);
        if (!out[i]) {
            while (i-- > 0) lm_array_release(out[i]);
            return -1;
        }
        start += tmp[i];
    }
    return count;
}

lm_array *lm_pad(lm_array *a, const int64_t *pads, double value)
{
    if (!a) return NULL;
    if (2 * a->ndim > LM_PARAM_INTS) {
        lm_error_set(LM_ERR_ARG, "pad: too many dimensions");
        return NULL;
    }
    lm_params p = {0};
    int64_t shape[LM_MAX_DIMS];
    for (int d = 0; d < a->ndim; d++) {
        if (pads[2 * d] < 0 || pads[2 * d + 1] < 0) {
            lm_error_set(LM_ERR_ARG, "pad: negative padding on axis %d", d);
            return NULL;
        }
        p.i[2 * d] = pads[2 * d];
        p.i[2 * d + 1] = pads[2 * d + 1];
        if (!lm_add64(a->shape[d], pads[2 * d], &shape[d]) ||
            !lm_add64(shape[d], pads[2 * d + 1], &shape[d])) {
            lm_error_set(LM_ERR_SHAPE, "pad: padding %lld, %lld on axis %d of size %lld overflows",
                         (long long)pads[2 * d], (long long)pads[2 * d + 1], d, (long long)a->shape[d]);
            return NULL;
        }
    }
    p.f[0] = value;
    return lm_node_new(LM_OP_PAD, a->dtype, a->ndim, shape, 1, &a, &p, NULL);
}

lm_array *lm_take_along_axis(lm_array *a, lm_array *idx, int axis)
{
    if (!a || !idx) return NULL;
    char s1[128], s2[128];
    if (!lm_dtype_is_int(idx->dtype)) {
        lm_error_set(LM_ERR_DTYPE, "take_along_axis: indices must be integers, got %s", lm_dtype_name(idx->dtype));
        return NULL;
    }
    if (idx->ndim != a->ndim) {
        lm_error_set(LM_ERR_SHAPE, "take_along_axis: indices %s must have the %d dimensions of %s",
                     SHAPE(s1, idx), a->ndim, SHAPE(s2, a));
        return NULL;
    }
    if (!lm_axis_norm("take_along_axis", &axis, a->ndim)) return NULL;
    /* broadcast every axis but `axis` between a and idx */
    int64_t sa[LM_MAX_DIMS], si[LM_MAX_DIMS];
    for (int d = 0; d < a->ndim; d++) {
        if (d == axis) { sa[d] = a->shape[d]; si[d] = idx->shape[d]; continue; }
        int64_t x = a->shape[d], y = idx->shape[d];
        if (x != y && x != 1 && y != 1) {
            lm_error_set(LM_ERR_SHAPE, "take_along_axis: shapes %s and indices %s do not broadcast",
                         SHAPE(s1, a), SHAPE(s2, idx));
            return NULL;
        }
        sa[d] = si[d] = x == 1 ? y : x;
    }
    lm_array *av = lm_broadcast_to(a, a->ndim, sa);
    lm_array *ic = lm_cast(idx, LM_I64);
    lm_array *iv = lm_broadcast_to(ic, a->ndim, si);
    lm_array *r = NULL;
    if (av && iv) {
        lm_params p = {0};
        p.i[0] = axis;
        lm_array *in[2] = {av, iv};
        r = lm_node_new(LM_OP_GATHER, a->dtype, a->ndim, si, 2, in, &p, NULL);
    }
    lm_array_release(av);
    lm_array_release(ic);
    lm_array_release(iv);
    return r;
}

lm_array *lm_index_select(lm_array *a, int axis, lm_array *idx)
{
    if (!a || !idx) return NULL;
    if (!lm_dtype_is_int(idx->dtype) || idx->ndim > 1) {
        char s[128];
        lm_error_set(LM_ERR_ARG, "index_select: indices must be a 1-D integer tensor, got %s%s",
                     lm_dtype_name(idx->dtype), SHAPE(s, idx));
        return NULL;
    }
    if (!lm_axis_norm("index_select", &axis, a->ndim)) return NULL;
    int64_t shape[LM_MAX_DIMS];
    memcpy(shape, a->shape, sizeof shape);
    shape[axis] = idx->size;
    lm_array *ic = lm_cast(idx, LM_I64);
    lm_array *r = NULL;
    if (ic) {
        lm_params p = {0};
        p.i[0] = axis;
        lm_array *in[2] = {a, ic};
        r = lm_node_new(LM_OP_INDEX_SELECT, a->dtype, a->ndim, shape, 2, in, &p, NULL);
    }
    lm_array_release(ic);
    return r;
}
