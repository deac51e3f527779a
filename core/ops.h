/* ops.h - op builders: validate, infer shape and dtype, return a lazy node.
 *
 * Every builder returns a new reference (release it) or NULL with the error
 * message set ("matmul: inner dimensions differ: [2,3] @ [4,5]").  Input
 * arrays are borrowed; NULL inputs fail cleanly.  Axes are 0-based and may
 * be negative (counting from the end).  dev NULL means the default device.
 * Nothing is computed until lm_eval. */
#ifndef LM_OPS_H
#define LM_OPS_H

#include "array.h"
#include "device.h"

/* ---- creation (core/ops_create.c) ---- */
lm_array *lm_full(int ndim, const int64_t *shape, double value, lm_dtype dt, lm_device *dev);
lm_array *lm_zeros(int ndim, const int64_t *shape, lm_dtype dt, lm_device *dev);
lm_array *lm_ones(int ndim, const int64_t *shape, lm_dtype dt, lm_device *dev);
/* [start, stop) by step, like numpy.arange */
lm_array *lm_arange(double start, double stop, double step, lm_dtype dt, lm_device *dev);
/* n points from start to stop inclusive */
lm_array *lm_linspace(double start, double stop, int64_t n, lm_dtype dt, lm_device *dev);
/* n x m with ones on diagonal k */
lm_array *lm_eye(int64_t n, int64_t m, int64_t k, lm_dtype dt, lm_device *dev);

/* ---- views (core/ops_view.c): share the input's buffer when possible ---- */
/* one entry of shape may be -1; copies only when strides forbid a view */
lm_array *lm_reshape(lm_array *a, int ndim, const int64_t *shape);
lm_array *lm_permute(lm_array *a, const int *perm);
lm_array *lm_transpose(lm_array *a, int ax0, int ax1);
/* numpy a[start:stop:step] on one axis; out-of-range bounds are clipped as
 * numpy does; step may be negative, never 0. */
lm_array *lm_slice(lm_array *a, int axis, int64_t start, int64_t stop, int64_t step);
lm_array *lm_broadcast_to(lm_array *a, int ndim, const int64_t *shape);
lm_array *lm_squeeze(lm_array *a, int axis);          /* axis of size 1 */
lm_array *lm_squeeze_all(lm_array *a);
lm_array *lm_unsqueeze(lm_array *a, int axis);        /* axis in [-(ndim+1), ndim] */
lm_array *lm_flatten(lm_array *a, int start, int end);/* inclusive axes */
lm_array *lm_contiguous(lm_array *a);                 /* same array if already */
/* Broadcast shape of two shapes (numpy rules); fails with op in message. */
lm_status lm_broadcast_shapes(const char *op, int na, const int64_t *a, int nb,
                              const int64_t *b, int *nout, int64_t *out);

/* ---- elementwise (core/ops_elementwise.c) ---- */
/* op of class UNARY: NEG ... LOGICAL_NOT, COPY.  Float-only ops promote
 * integer/bool input to f32.  ISNAN/ISINF/LOGICAL_NOT give bool. */
lm_array *lm_unary(lm_op op, lm_array *a);
/* op of class BINARY.  Comparisons and logical ops give bool; DIV and ATAN2
 * of integers give f32 (true division); MOD follows Python (sign of the
 * divisor); POW of integers stays integer. */
lm_array *lm_binary(lm_op op, lm_array *a, lm_array *b);
/* a op s, or s op a when scalar_first; s is weak (see dtype.h). */
lm_array *lm_binary_scalar(lm_op op, lm_array *a, double s, bool scalar_first);
lm_array *lm_where(lm_array *cond, lm_array *a, lm_array *b);
/* NAN for a bound means none */
lm_array *lm_clamp(lm_array *a, double lo, double hi);
lm_array *lm_cast(lm_array *a, lm_dtype dt);

/* ---- reductions (core/ops_reduce.c) ---- */
/* op: SUM MEAN PROD MAX MIN LOGSUMEXP ALL ANY.  naxes == 0 reduces all. */
lm_array *lm_reduce(lm_op op, lm_array *a, int naxes, const int *axes, bool keepdims);
lm_array *lm_var(lm_array *a, int naxes, const int *axes, int ddof, bool keepdims);
lm_array *lm_std(lm_array *a, int naxes, const int *axes, int ddof, bool keepdims);
/* ARGMAX/ARGMIN along one axis (axis < -ndim.. for flattened: pass
 * LM_AXIS_ALL); i64 result, first occurrence wins, NaN counts as largest. */
#define LM_AXIS_ALL (-1000)
lm_array *lm_argreduce(lm_op op, lm_array *a, int axis, bool keepdims);
lm_array *lm_cumsum(lm_array *a, int axis);

/* ---- linear algebra and shape ops (core/ops_other.c) ---- */
/* numpy matmul: 1-D operands promoted and the dim removed after; batch dims
 * broadcast.  f16/bf16 inputs compute in f32 and return their dtype. */
lm_array *lm_matmul(lm_array *a, lm_array *b);
lm_array *lm_concat(int n, lm_array *const *arrays, int axis);
lm_array *lm_stack(int n, lm_array *const *arrays, int axis);
/* Splits into `sections` equal parts (sizes == NULL) or by nsizes explicit
 * sizes; fills out[] with new references (views).  Returns the count or -1. */
int lm_split(lm_array *a, int sections, const int64_t *sizes, int nsizes, int axis,
             lm_array **out, int max_out);
/* pads[2*d], pads[2*d+1]: before/after axis d (>= 0); constant value */
lm_array *lm_pad(lm_array *a, const int64_t *pads, double value);
/* numpy take_along_axis: idx (integer dtype) has a's ndim and broadcasts on
 * the other axes; negative indices count from the end; out of range fails
 * at evaluation with a clear error. */
lm_array *lm_take_along_axis(lm_array *a, lm_array *idx, int axis);
/* torch.index_select / numpy.take on an axis: idx 1-D integer */
lm_array *lm_index_select(lm_array *a, int axis, lm_array *idx);

/* ---- internals shared by builders (core/node.c) ---- */
/* A new lazy node: output dtype/shape contiguous, inputs retained, params
 * copied (ext ownership moves to the node).  Fails if inputs live on
 * different devices and cannot be moved (transfers are inserted for
 * evaluated CPU arrays). */
lm_array *lm_node_new(lm_op op, lm_dtype dt, int ndim, const int64_t *shape,
                      int ninputs, lm_array *const *inputs, const lm_params *p,
                      lm_device *dev);
/* Normalises axis for ndim (negative from end); false + error if out of range. */
bool lm_axis_norm(const char *op, int *axis, int ndim);

#endif
