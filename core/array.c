/* array.c - arrays meeting host memory: construction from data, reading
 * back, in-place assignment, device transfer, and descriptions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

const char *lm_desc(char *buf, size_t n, const lm_array *a)
{
    char s[96];
    snprintf(buf, n, "%s%s", lm_dtype_name(a->dtype), lm_shape_str(s, sizeof s, a->ndim, a->shape));
    return buf;
}

lm_array *lm_from_data(int ndim, const int64_t *shape, lm_dtype dt, const void *data,
                       lm_device *dev)
{
    lm_array *a = lm_array_alloc(dt, ndim, shape, dev);
    if (!a) return NULL;
    size_t n = lm_array_nbytes(a);
    a->buf = lm_buffer_alloc(a->device, n);
    if (!a->buf) {
        lm_array_release(a);
        return NULL;
    }
    if (n && data) {
        lm_status st = lm_device_upload(a->device, a->buf->handle, 0, data, n);
        if (st != LM_OK) {
            lm_array_release(a);
            return NULL;
        }
    }
    return a;
}

lm_array *lm_array_from_buffer(lm_buffer *b, lm_dtype dt, int ndim, const int64_t *shape)
{
    if (!b) return NULL;
    lm_array *a = lm_array_alloc(dt, ndim, shape, b->device);
    if (!a) return NULL;
    if (lm_array_nbytes(a) > b->size) {
        char s[96];
        lm_error_set(LM_ERR_SHAPE, "array %s%s does not fit in a buffer of %zu bytes",
                     lm_dtype_name(dt), lm_shape_str(s, sizeof s, ndim, shape), b->size);
        lm_array_release(a);
        return NULL;
    }
    a->buf = lm_buffer_retain(b);
    return a;
}

lm_array *lm_scalar(double v, lm_dtype dt, lm_device *dev)
{
    unsigned char tmp[8];
    lm_convert(tmp, dt, &v, LM_F64, 1);
    lm_array *a = lm_from_data(0, NULL, dt, tmp, dev);
    if (a) a->flags |= LM_ARRAY_WEAK;
    return a;
}

/* Quantized storage has no element strides; the one view it allows is the
 * 2-D transpose of an evaluated tensor (and back), which no op reads but
 * matmul, where w.T means lm.linear's weight w (lm_matmul), and dequantize. */
static bool quant_transpose(const lm_array *base, int ndim, const int64_t *shape, const int64_t *strides,
                            int64_t offset)
{
    return base->buf && base->ndim == 2 && ndim == 2 && offset == base->offset && shape[0] == base->shape[1] &&
           shape[1] == base->shape[0] && strides[0] == base->strides[1] && strides[1] == base->strides[0];
}

lm_array *lm_view_new(lm_array *base, int ndim, const int64_t *shape,
                      const int64_t *strides, int64_t offset)
{
    lm_array *v;
    if (!base) return NULL;
    if (base->flags & LM_ARRAY_FREED) {
        lm_error_set(LM_ERR_STATE, "view: tensor was freed");
        return NULL;
    }
    if (lm_dtype_is_quant(base->dtype) && !quant_transpose(base, ndim, shape, strides, offset)) {
        /* blocks have no element strides */
        lm_error_set(LM_ERR_UNSUPPORTED, "view: dtype %s is quantized storage; dequantize() it first",
                     lm_dtype_name(base->dtype));
        return NULL;
    }
    if (base->buf) {
        /* an evaluated base: the view is evaluated at once, no graph */
        /* a quantized transpose is made in its storage's shape (whole
         * blocks along the last axis), then given the view's */
        bool qt = lm_dtype_is_quant(base->dtype) && strides[ndim - 1] != 1;
        v = lm_array_alloc(base->dtype, ndim, qt ? base->shape : shape, base->device);
        if (v) v->buf = lm_buffer_retain(base->buf);
        if (v && qt) memcpy(v->shape, shape, sizeof(int64_t) * (size_t)ndim);
    } else {
        v = lm_node_new(LM_OP_VIEW, base->dtype, ndim, shape, 1, &base, NULL, base->device);
    }
    if (!v) return NULL;
    for (int d = 0; d < ndim; d++) v->strides[d] = strides[d];
    v->offset = offset;
    v->flags |= base->flags & LM_ARRAY_TRACER;
    return v;
}

lm_status lm_array_read(lm_array *a, void *dst, lm_dtype as)
{
    if (!a) return lm_error_status();
    lm_status st = lm_array_eval(a);
    if (st != LM_OK) return st;
    if (lm_dtype_is_quant(a->dtype) || lm_dtype_is_quant(as)) {
        /* quantized storage reads only as its own blocks (never a view) */
        if (as != a->dtype || !lm_array_is_contiguous(a))
            return lm_error_set(LM_ERR_UNSUPPORTED, "read: dtype %s is quantized storage; dequantize() it first",
                                lm_dtype_name(lm_dtype_is_quant(a->dtype) ? a->dtype : as));
        if (a->buf->host) memcpy(dst, a->buf->host, lm_array_nbytes(a));
        else st = lm_device_download(a->device, a->buf->handle, 0, dst, lm_array_nbytes(a));
        return st;
    }
    lm_array *c = a;
    /* a contiguous array of the wanted dtype reads directly */
    if (!lm_array_is_contiguous(a) || (a->dtype != as && !a->buf->host)) {
        c = a->dtype != as ? lm_cast(a, as) : lm_unary(LM_OP_COPY, a);
        if (!c) return lm_error_status();
        if ((st = lm_array_eval(c)) != LM_OK) {
            lm_array_release(c);
            return st;
        }
    } else {
        lm_array_retain(c);
    }
    size_t esz = lm_dtype_size(c->dtype);
    size_t off = (size_t)c->offset * esz, n = (size_t)c->size * esz;
    if (c->buf->host) {
        lm_convert(dst, as, (char *)c->buf->host + off, c->dtype, (size_t)c->size);
    } else if (c->dtype == as) {
        st = lm_device_download(c->device, c->buf->handle, off, dst, n);
    } else {
        st = lm_error_set(LM_ERR_STATE, "read: internal dtype mismatch");
    }
    lm_array_release(c);
    return st;
}

lm_status lm_array_get(lm_array *a, const int64_t *index, double *out)
{
    if (!a) return lm_error_status();
    int64_t off = a->offset;
    for (int d = 0; d < a->ndim; d++) {
        if (index[d] < 0 || index[d] >= a->shape[d])
            return lm_error_set(LM_ERR_ARG, "index %lld out of range for axis %d of size %lld",
                                (long long)index[d], d, (long long)a->shape[d]);
        off += index[d] * a->strides[d];
    }
    if (lm_dtype_is_quant(a->dtype))
        return lm_error_set(LM_ERR_UNSUPPORTED, "item: dtype %s is quantized storage; dequantize() it first",
                            lm_dtype_name(a->dtype));
    lm_status st = lm_array_eval(a);
    if (st != LM_OK) return st;
    unsigned char tmp[8];
    size_t esz = lm_dtype_size(a->dtype);
    if (a->buf->host) memcpy(tmp, (char *)a->buf->host + off * (int64_t)esz, esz);
    else if ((st = lm_device_download(a->device, a->buf->handle,
                                                (size_t)off * esz, tmp, esz)) != LM_OK)
        return st;
    lm_convert(out, LM_F64, tmp, a->dtype, 1);
    return LM_OK;
}

lm_status lm_array_assign(lm_array *dst, lm_array *src)
{
    char s1[96], s2[96];
    if (!dst || !src) return lm_error_status();
    if (!dst->buf || (dst->flags & LM_ARRAY_FREED))
        return lm_error_set(LM_ERR_STATE, "assign: target %s is not evaluated (in-place writes need an evaluated tensor)",
                            lm_desc(s1, sizeof s1, dst));
    lm_array *c = lm_cast(src, dst->dtype);
    lm_array *b = lm_broadcast_to(c, dst->ndim, dst->shape);
    lm_array_release(c);
    if (!b)
        return lm_error_prefix("assign %s into %s", lm_desc(s1, sizeof s1, src),
                               lm_desc(s2, sizeof s2, dst));
    lm_status st = lm_array_eval(b);
    if (st != LM_OK) {
        lm_array_release(b);
        return st;
    }
    if (b->buf == dst->buf) {
        /* reading and writing one buffer: copy the source out first */
        lm_array *t = lm_unary(LM_OP_COPY, b);
        lm_array_release(b);
        if (!t) return lm_error_status();
        b = t;
    }
    lm_array *node = lm_node_new(LM_OP_COPY, dst->dtype, dst->ndim, dst->shape, 1, &b, NULL, dst->device);
    lm_array_release(b);
    if (!node) return lm_error_status();
    for (int d = 0; d < dst->ndim; d++) node->strides[d] = dst->strides[d];
    node->offset = dst->offset;
    node->buf = lm_buffer_retain(dst->buf);
    lm_buffer_written(dst->buf);   /* what backends derived from the old contents goes */
    st = lm_eval_into(node);
    lm_array_release(node);
    return st;
}

lm_array *lm_array_to(lm_array *a, lm_device *dev)
{
    if (!a) return NULL;
    if (!dev) dev = lm_device_default();
    if (a->device == dev) return lm_array_retain(a);
    lm_array *c = lm_contiguous(a);
    if (!c) return NULL;
    lm_array *t = lm_node_new(LM_OP_COPY, a->dtype, a->ndim, a->shape, 0, NULL, NULL, dev);
    if (t) {
        /* wired by hand: lm_node_new would move the input to dev itself */
        t->inputs = malloc(sizeof *t->inputs);
        if (!t->inputs) {
            lm_array_release(t);
            lm_array_release(c);
            lm_error_set(LM_ERR_NOMEM, "to: out of host memory");
            return NULL;
        }
        t->inputs[0] = c;
        t->ninputs = 1;
        t->flags |= c->flags & LM_ARRAY_TRACER;
        return t;
    }
    lm_array_release(c);
    return NULL;
}
