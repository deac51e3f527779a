/* vmath.h - vectorised exp for f32 kernels (4 lanes with GCC vector
 * extensions: plain SSE2, so it needs no -march and no ABI change).
 *
 * Cephes' expf: n = round(x / ln2), r = x - n ln2 in two parts, a degree-5
 * polynomial, then 2^n applied in two halves so results that are subnormal
 * stay right.  Max error about 1 ulp over the normal range; overflow gives
 * inf, NaN stays NaN.  Used for exp, sigmoid, silu and the tanh form of
 * GELU; libm stays in use for everything else. */
#ifndef LM_VMATH_H
#define LM_VMATH_H

#include <stdint.h>
#include <string.h>

typedef float lm_v8f __attribute__((vector_size(16)));
typedef int32_t lm_v8i __attribute__((vector_size(16)));

static inline lm_v8f lm_v8_exp(lm_v8f x)
{
    const lm_v8f hi = (lm_v8f){0} + 88.7228394f, lo = (lm_v8f){0} - 103.972084f;
    lm_v8f xc = x;
    xc = (lm_v8f)((lm_v8i)xc & (xc <= hi)) + (lm_v8f)((lm_v8i)hi & ~(xc <= hi));
    xc = (lm_v8f)((lm_v8i)xc & (xc >= lo)) + (lm_v8f)((lm_v8i)lo & ~(xc >= lo));
    lm_v8f fx = xc * 1.44269504088896341f;
    /* round to nearest: truncate (fx + 0.5) and fix negatives */
    lm_v8f t = fx + 0.5f;
    lm_v8i n = __builtin_convertvector(t, lm_v8i);
    lm_v8f nf = __builtin_convertvector(n, lm_v8f);
    n -= (lm_v8i)(nf > t) & 1;
    nf = __builtin_convertvector(n, lm_v8f);
    lm_v8f r = xc - nf * 0.693359375f - nf * -2.12194440e-4f;
    lm_v8f y = (lm_v8f){0} + 1.9875691500e-4f;
    y = y * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * r * r + r + 1.0f;
    lm_v8i n1 = n >> 1, n2 = n - n1;
    lm_v8f s1 = (lm_v8f)((n1 + 127) << 23), s2 = (lm_v8f)((n2 + 127) << 23);
    y = y * s1 * s2;
    lm_v8i over = x > hi;
    const lm_v8f inf = (lm_v8f){0} + __builtin_inff();
    y = (lm_v8f)(((lm_v8i)y & ~over) | ((lm_v8i)inf & over));
    lm_v8i nan = x != x;
    return (lm_v8f)(((lm_v8i)y & ~nan) | ((lm_v8i)x & nan));
}

/* o[i] = f(x[i]) for the four exp-based functions, 4 at a time */
enum { LM_VEXP, LM_VSIGMOID, LM_VSILU, LM_VGELU_TANH };

static inline lm_v8f lm_v8_apply(int fn, lm_v8f v)
{
    switch (fn) {
    case LM_VEXP: return lm_v8_exp(v);
    case LM_VSIGMOID: return 1.0f / (1.0f + lm_v8_exp(-v));
    case LM_VSILU: return v / (1.0f + lm_v8_exp(-v));
    default: {
        /* 0.5 x (1 + tanh(u)) == x * sigmoid(2u) */
        lm_v8f u = 0.79788456080286536f * (v + 0.044715f * v * v * v);
        return v / (1.0f + lm_v8_exp(-2.0f * u));
    }
    }
}

static inline void lm_vexp_map(int fn, float *o, const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        lm_v8f v;
        memcpy(&v, x + i, sizeof v);
        v = lm_v8_apply(fn, v);
        memcpy(o + i, &v, sizeof v);
    }
    if (i < n) {
        float tmp[4] = {0};
        memcpy(tmp, x + i, (size_t)(n - i) * sizeof(float));
        lm_v8f v;
        memcpy(&v, tmp, sizeof v);
        v = lm_v8_apply(fn, v);
        memcpy(tmp, &v, sizeof v);
        memcpy(o + i, tmp, (size_t)(n - i) * sizeof(float));
    }
}

#endif
