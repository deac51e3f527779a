/* internal.h - core-private helpers shared by the core files (not public API). */
#ifndef LM_INTERNAL_H
#define LM_INTERNAL_H
#include "lumen.h"
#include "backend.h"

lm_array *lm_array_alloc(lm_dtype dt, int ndim, const int64_t *shape, lm_device *dev);
void lm_array_detach(lm_array *a);
/* A view of base with the given geometry (shares base's buffer once base is
 * evaluated). */
lm_array *lm_view_new(lm_array *base, int ndim, const int64_t *shape,
                      const int64_t *strides, int64_t offset);
/* Checked int64 arithmetic for sizes, strides and offsets: false on
 * overflow (then *out is unspecified). */
static inline bool lm_mul64(int64_t a, int64_t b, int64_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline bool lm_add64(int64_t a, int64_t b, int64_t *out) { return !__builtin_add_overflow(a, b, out); }
/* The device a node with these inputs runs on (the placement rule), or
 * NULL with an error naming op and the devices. */
lm_device *lm_node_place(const char *op, int n, lm_array *const *inputs);
/* formats "f32[2,3]" for messages */
const char *lm_desc(char *buf, size_t n, const lm_array *a);
#endif
