/* ops_view.c - views: new shape/strides/offset over the same buffer.
 * Copies happen only where strides cannot express the result (reshape of
 * some non-contiguous arrays). */
#include <string.h>
#include "internal.h"

#define SHAPE(buf, a) lm_shape_str(buf, sizeof buf, (a)->ndim, (a)->shape)

lm_status lm_broadcast_shapes(const char *op, int na, const int64_t *a, int nb,
                              const int64_t *b, int *nout, int64_t *out)
{
    int n = na > nb ? na : nb;
    int64_t tmp[LM_MAX_DIMS];
    for (int i = 0; i < n; i++) {
        int64_t da = i < n - na ? 1 : a[i - (n - na)];
        int64_t db = i < n - nb ? 1 : b[i - (n - nb)];
        if (da != db && da != 1 && db != 1) {
            char s1[128], s2[128];
            return lm_error_set(LM_ERR_SHAPE, "%s: shapes %s and %s cannot be broadcast", op,
                                lm_shape_str(s1, sizeof s1, na, a), lm_shape_str(s2, sizeof s2, nb, b));
        }
        tmp[i] = da == 1 ? db : da;
    }
    memcpy(out, tmp, (size_t)n * sizeof *out);
    *nout = n;
    return LM_OK;
}

/* numpy's no-copy reshape: new strides for shape, or false if impossible */
static bool reshape_strides(const lm_array *a, int ndim, const int64_t *shape, int64_t *st)
{
    int64_t os[LM_MAX_DIMS], ost[LM_MAX_DIMS];
    int on = 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != 1) { os[on] = a->shape[d]; ost[on++] = a->strides[d]; }
    int oi = 0, oj = 1, ni = 0, nj = 1;
    while (ni < ndim && oi < on) {
        int64_t np = shape[ni], op = os[oi];
        while (np != op) {
            if (np < op) np *= shape[nj++];
            else op *= os[oj++];
        }
        for (int k = oi; k < oj - 1; k++)
            if (ost[k] != os[k + 1] * ost[k + 1]) return false;
        st[nj - 1] = ost[oj - 1];
        for (int k = nj - 1; k > ni; k--) st[k - 1] = st[k] * shape[k];
        ni = nj++;
        oi = oj++;
    }
    /* trailing size-1 dims (and all dims when the array has no non-1 dims) */
    int64_t last = ni > 0 ? st[ni - 1] : 1;
    for (int k = ni; k < ndim; k++) st[k] = last;
    return true;
}

lm_array *lm_reshape(lm_array *a, int ndim, const int64_t *shape)
{
    if (!a) return NULL;
    char s1[128], s2[128];
    if (ndim < 0 || ndim > LM_MAX_DIMS) {
        lm_error_set(LM_ERR_SHAPE, "reshape: %d dimensions (at most %d)", ndim, LM_MAX_DIMS);
        return NULL;
    }
    int64_t sh[LM_MAX_DIMS], known = 1;
    int infer = -1;
    for (int d = 0; d < ndim; d++) {
        sh[d] = shape[d];
        if (shape[d] == -1 && infer < 0) infer = d;
        else if (shape[d] < 0) {
            lm_error_set(LM_ERR_SHAPE, "reshape: bad shape %s", lm_shape_str(s2, sizeof s2, ndim, shape));
            return NULL;
        } else if (!lm_mul64(known, shape[d], &known)) {
            lm_error_set(LM_ERR_SHAPE, "reshape: shape %s is too large", lm_shape_str(s2, sizeof s2, ndim, shape));
            return NULL;
        }
    }
    if (infer >= 0) {
        if (known == 0 || a->size % known) {
            lm_error_set(LM_ERR_SHAPE, "reshape: cannot reshape %s (%lld elements) into %s", SHAPE(s1, a),
                         (long long)a->size, lm_shape_str(s2, sizeof s2, ndim, shape));
            return NULL;
        }
        sh[infer] = a->size / known;
        known *= sh[infer];
    }
    if (known != a->size) {
        lm_error_set(LM_ERR_SHAPE, "reshape: cannot reshape %s (%lld elements) into %s", SHAPE(s1, a),
                     (long long)a->size, lm_shape_str(s2, sizeof s2, ndim, shape));
        return NULL;
    }
    /* an empty array fits any shape with a zero in it: bound the others */
    if (lm_shape_check("reshape", ndim, sh, NULL) != LM_OK) return NULL;
    int64_t st[LM_MAX_DIMS];
    if (a->size > 0 && reshape_strides(a, ndim, sh, st))
        return lm_view_new(a, ndim, sh, st, a->offset);
    lm_array *c = lm_unary(LM_OP_COPY, a);
    if (!c) return NULL;
    int64_t cs[LM_MAX_DIMS], acc = 1;
    for (int d = ndim - 1; d >= 0; d--) { cs[d] = acc; acc *= sh[d] ? sh[d] : 1; }
    lm_array *v = lm_view_new(c, ndim, sh, cs, 0);
    lm_array_release(c);
    return v;
}

lm_array *lm_permute(lm_array *a, const int *perm)
{
    if (!a) return NULL;
    int64_t sh[LM_MAX_DIMS], st[LM_MAX_DIMS];
    int seen = 0;
    for (int d = 0; d < a->ndim; d++) {
        int p = perm[d];
        if (!lm_axis_norm("permute", &p, a->ndim)) return NULL;
        if (seen & (1 << p)) {
            lm_error_set(LM_ERR_ARG, "permute: axis %d repeated", perm[d]);
            return NULL;
        }
        seen |= 1 << p;
        sh[d] = a->shape[p];
        st[d] = a->strides[p];
    }
    return lm_view_new(a, a->ndim, sh, st, a->offset);
}

lm_array *lm_transpose(lm_array *a, int ax0, int ax1)
{
    if (!a) return NULL;
    if (!lm_axis_norm("transpose", &ax0, a->ndim) || !lm_axis_norm("transpose", &ax1, a->ndim))
        return NULL;
    int perm[LM_MAX_DIMS];
    for (int d = 0; d < a->ndim; d++) perm[d] = d;
    perm[ax0] = ax1;
    perm[ax1] = ax0;
    return lm_permute(a, perm);
}

lm_array *lm_slice(lm_array *a, int axis, int64_t start, int64_t stop, int64_t step)
{
    if (!a) return NULL;
    if (!lm_axis_norm("slice", &axis, a->ndim)) return NULL;
    if (step == 0) {
        lm_error_set(LM_ERR_ARG, "slice: step must not be zero");
        return NULL;
    }
    int64_t n = a->shape[axis];
    /* numpy's clipping rules (PySlice_AdjustIndices) */
    if (start < 0) { start += n; if (start < 0) start = step < 0 ? -1 : 0; }
    else if (start >= n) start = step < 0 ? n - 1 : n;
    if (stop < 0) { stop += n; if (stop < 0) stop = step < 0 ? -1 : 0; }
    else if (stop >= n) stop = step < 0 ? n - 1 : n;
    int64_t len = 0;
    /* written so that a step near INT64_MIN/MAX cannot overflow */
    if (step > 0 && stop > start) len = (stop - start - 1) / step + 1;
    if (step < 0 && start > stop) len = step < -n ? 1 : (start - stop - 1) / -step + 1;
    int64_t sh[LM_MAX_DIMS], st[LM_MAX_DIMS];
    memcpy(sh, a->shape, sizeof sh);
    memcpy(st, a->strides, sizeof st);
    sh[axis] = len;
    /* a step past the axis leaves one element, whose stride does not matter */
    if (len <= 1 || !lm_mul64(a->strides[axis], step, &st[axis])) st[axis] = a->strides[axis];
    int64_t off = a->offset + (len ? start * a->strides[axis] : 0);
    return lm_view_new(a, a->ndim, sh, st, off);
}

lm_array *lm_broadcast_to(lm_array *a, int ndim, const int64_t *shape)
{
    if (!a) return NULL;
    char s1[128], s2[128];
    if (ndim < a->ndim || ndim > LM_MAX_DIMS) goto bad;
    int64_t st[LM_MAX_DIMS];
    int lead = ndim - a->ndim;
    bool same = ndim == a->ndim;
    for (int d = 0; d < ndim; d++) {
        if (d < lead) { st[d] = 0; continue; }
        int64_t ad = a->shape[d - lead];
        if (ad == shape[d]) st[d] = a->strides[d - lead];
        else if (ad == 1) { st[d] = 0; same = false; }
        else goto bad;
    }
    if (same) return lm_array_retain(a);
    return lm_view_new(a, ndim, shape, st, a->offset);
bad:
    lm_error_set(LM_ERR_SHAPE, "broadcast_to: cannot broadcast %s to %s", SHAPE(s1, a),
                 lm_shape_str(s2, sizeof s2, ndim, shape));
    return NULL;
}

lm_array *lm_squeeze(lm_array *a, int axis)
{
    if (!a) return NULL;
    if (!lm_axis_norm("squeeze", &axis, a->ndim)) return NULL;
    if (a->shape[axis] != 1) {
        char s[128];
        lm_error_set(LM_ERR_SHAPE, "squeeze: axis %d of %s has size %lld, not 1", axis, SHAPE(s, a),
                     (long long)a->shape[axis]);
        return NULL;
    }
    int64_t sh[LM_MAX_DIMS], st[LM_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < a->ndim; d++)
        if (d != axis) { sh[n] = a->shape[d]; st[n++] = a->strides[d]; }
    return lm_view_new(a, n, sh, st, a->offset);
}

lm_array *lm_squeeze_all(lm_array *a)
{
    if (!a) return NULL;
    int64_t sh[LM_MAX_DIMS], st[LM_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != 1) { sh[n] = a->shape[d]; st[n++] = a->strides[d]; }
    return lm_view_new(a, n, sh, st, a->offset);
}

lm_array *lm_unsqueeze(lm_array *a, int axis)
{
    if (!a) return NULL;
    if (a->ndim == LM_MAX_DIMS) {
        lm_error_set(LM_ERR_SHAPE, "unsqueeze: already %d dimensions", LM_MAX_DIMS);
        return NULL;
    }
    if (!lm_axis_norm("unsqueeze", &axis, a->ndim + 1)) return NULL;
    int64_t sh[LM_MAX_DIMS], st[LM_MAX_DIMS];
    for (int d = 0, s = 0; d <= a->ndim; d++) {
        if (d == axis) {
            sh[d] = 1;
            /* any stride serves a size-1 axis; this one keeps contiguity visible */
            if (s >= a->ndim || !lm_mul64(a->strides[s], a->shape[s], &st[d])) st[d] = 1;
        } else {
            sh[d] = a->shape[s];
            st[d] = a->strides[s++];
        }
    }
    return lm_view_new(a, a->ndim + 1, sh, st, a->offset);
}

lm_array *lm_flatten(lm_array *a, int start, int end)
{
    if (!a) return NULL;
    if (a->ndim == 0) {
        int64_t one = 1;
        return lm_reshape(a, 1, &one);
    }
    if (!lm_axis_norm("flatten", &start, a->ndim) || !lm_axis_norm("flatten", &end, a->ndim))
        return NULL;
    if (end < start) {
        lm_error_set(LM_ERR_ARG, "flatten: end axis %d before start axis %d", end, start);
        return NULL;
    }
    int64_t sh[LM_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < start; d++) sh[n++] = a->shape[d];
    int64_t m = 1;
    for (int d = start; d <= end; d++) m *= a->shape[d];
    sh[n++] = m;
    for (int d = end + 1; d < a->ndim; d++) sh[n++] = a->shape[d];
    return lm_reshape(a, n, sh);
}

lm_array *lm_contiguous(lm_array *a)
{
    if (!a) return NULL;
    if (lm_array_is_contiguous(a)) return lm_array_retain(a);
    return lm_unary(LM_OP_COPY, a);
}
