/* shape.c - shape helpers for the kernels: dimension collapsing, index
 * range checks.  Kernels index with 32-bit integers (fast on every GPU), so
 * an operand whose furthest element lies past 2^31 is refused. */
#include <string.h>
#include "backends/vulkan/vk.h"

int lm_vk_collapse(int ndim, int64_t *shape, int nops, int64_t (*strides)[LM_MAX_DIMS])
{
    int n = 0;
    for (int d = 0; d < ndim; d++) {        /* drop size-1 dims */
        if (shape[d] == 1) continue;
        shape[n] = shape[d];
        for (int k = 0; k < nops; k++) strides[k][n] = strides[k][d];
        n++;
    }
    if (n == 0) {
        shape[0] = 1;
        for (int k = 0; k < nops; k++) strides[k][0] = 0;
        return 1;
    }
    int m = 0;
    for (int d = 1; d < n; d++) {
        bool merge = true;
        for (int k = 0; k < nops; k++)
            merge &= strides[k][m] == strides[k][d] * shape[d];
        if (merge) {
            shape[m] *= shape[d];
            for (int k = 0; k < nops; k++) strides[k][m] = strides[k][d];
        } else {
            m++;
            shape[m] = shape[d];
            for (int k = 0; k < nops; k++) strides[k][m] = strides[k][d];
        }
    }
    return m + 1;
}

bool lm_vk_fits_i32(const lm_array *a)
{
    int64_t hi = a->offset, lo = a->offset;
    for (int d = 0; d < a->ndim; d++) {
        if (a->shape[d] == 0) return true;
        int64_t ext = (a->shape[d] - 1) * a->strides[d];
        if (ext > 0) hi += ext; else lo += ext;
    }
    return lo >= 0 && hi < INT32_MAX && a->size < INT32_MAX;
}

bool lm_vk_dtype_ok(lm_vk_dev *v, lm_dtype t)
{
    return t < LM_DTYPE_COUNT && (t != LM_F64 || v->feat.f64);
}
