/* ops_create.c - creation builders (lazy: filled by the device's kernel). */
#include <math.h>
#include "internal.h"

lm_array *lm_full(int ndim, const int64_t *shape, double value, lm_dtype dt, lm_device *dev)
{
    lm_params p = {0};
    p.f[0] = value;
    return lm_node_new(LM_OP_FULL, dt, ndim, shape, 0, NULL, &p, dev);
}

lm_array *lm_zeros(int ndim, const int64_t *shape, lm_dtype dt, lm_device *dev)
{
    return lm_full(ndim, shape, 0, dt, dev);
}

lm_array *lm_ones(int ndim, const int64_t *shape, lm_dtype dt, lm_device *dev)
{
    return lm_full(ndim, shape, 1, dt, dev);
}

lm_array *lm_arange(double start, double stop, double step, lm_dtype dt, lm_device *dev)
{
    if (step == 0 || !isfinite(start) || !isfinite(stop) || !isfinite(step)) {
        lm_error_set(LM_ERR_ARG, "arange: need finite start/stop and a non-zero step (got %g, %g, %g)",
                     start, stop, step);
        return NULL;
    }
    double n = ceil((stop - start) / step);
    if (n < 0) n = 0;
    if (n > 1e12) {
        lm_error_set(LM_ERR_ARG, "arange: %g elements is too many", n);
        return NULL;
    }
    int64_t len = (int64_t)n;
    lm_params p = {0};
    p.f[0] = start;
    p.f[1] = step;
    return lm_node_new(LM_OP_ARANGE, dt, 1, &len, 0, NULL, &p, dev);
}

lm_array *lm_linspace(double start, double stop, int64_t n, lm_dtype dt, lm_device *dev)
{
    if (n < 0) {
        lm_error_set(LM_ERR_ARG, "linspace: negative count %lld", (long long)n);
        return NULL;
    }
    lm_params p = {0};
    p.f[0] = start;
    p.f[1] = stop;
    return lm_node_new(LM_OP_LINSPACE, dt, 1, &n, 0, NULL, &p, dev);
}

lm_array *lm_eye(int64_t n, int64_t m, int64_t k, lm_dtype dt, lm_device *dev)
{
    int64_t shape[2] = {n, m < 0 ? n : m};
    lm_params p = {0};
    p.i[0] = k;
    return lm_node_new(LM_OP_EYE, dt, 2, shape, 0, NULL, &p, dev);
}
