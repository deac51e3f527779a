/* nn.h - internals shared by the CPU kernels of the neural-network ops
 * (backends/cpu/nn*.c): kernel entry points, f32 staging of outputs, and
 * the 8-wide vector helpers the hot loops use.
 *
 * The build targets baseline x86-64 (SSE2) unless NATIVE=1, so the hot
 * row kernels are compiled twice with NN_CLONES: an x86-64-v3 copy (AVX2,
 * FMA, with mul+add contracted) picked at load time when the CPU has it.
 * The helpers below are always_inline so they take the caller's
 * instruction set.  (Sanitizer builds skip the clones.) */
#ifndef LM_CPU_NN_H
#define LM_CPU_NN_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include "cpu.h"
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define NN_CLONES __attribute__((target_clones("arch=x86-64-v3", "default"), optimize("fp-contract=fast")))
#else
#define NN_CLONES
#endif
#define NN_INLINE static inline __attribute__((always_inline))
/* the vector helpers are always inlined, so no vector crosses a call */
#pragma GCC diagnostic ignored "-Wpsabi"

/* ---- kernels (one per family) ---- */
lm_status lm_nn_conv(lm_array *node);            /* nn_conv.c */
lm_status lm_nn_conv_transpose(lm_array *node);  /* nn_conv.c */
/* 3x3 stride-1 conv2d of f32 [N, C, H, W] by [O, C, 3, 3] into [N, O, OH,
 * OW], padding pt (top) and pl (left) (nn_conv_wino.c) */
lm_status nn_conv_winograd(const float *x, const float *w, float *out, int64_t N, int64_t C, int64_t H,
                           int64_t W, int64_t O, int64_t OH, int64_t OW, int64_t pt, int64_t pl);
/* conv2d whose kernel is much larger than its output (a weight gradient):
 * x [B, Ci, H, W] by w [Co, Ci, KH, KW] into out [B, Co, OH, OW], f32 or
 * f64, p the conv node's params (nn_conv_wgrad.c) */
lm_status nn_conv_wgrad(const void *x, const void *w, void *out, bool f64, int64_t B, int64_t Ci, int64_t H,
                        int64_t W, int64_t Co, int64_t KH, int64_t KW, int64_t OH, int64_t OW,
                        const int64_t *p);
lm_status lm_nn_pool(lm_array *node);            /* nn_pool.c: max, avg, adaptive */
lm_status lm_nn_upsample(lm_array *node);        /* nn_pool.c */
lm_status lm_nn_softmax(lm_array *node);         /* nn_norm.c: softmax, log_softmax */
lm_status lm_nn_norm(lm_array *node);            /* nn_norm.c: layer, rms, group */
lm_status lm_nn_attention(lm_array *node);       /* nn_attention.c */
lm_status lm_nn_rope(lm_array *node);            /* nn_index.c */
lm_status lm_nn_sort(lm_array *node);            /* nn_index.c: topk, sort, argsort */
lm_status lm_nn_scatter(lm_array *node);         /* nn_index.c */
lm_status lm_nn_one_hot(lm_array *node);         /* nn_index.c */
lm_status lm_nn_tri(lm_array *node);             /* nn_index.c */

/* Where an f32-computing kernel writes its result: the node's own buffer
 * when it is f32, else a staging buffer (*stage, to pass to nn_out_end).
 * NULL + error when out of memory. */
float *nn_out_begin(lm_array *node, float **stage);
/* Converts the staging buffer into the node's dtype and frees it. */
void nn_out_end(lm_array *node, float *stage);

/* Sets OpenBLAS's thread count to n (n <= 0: leaves it) and returns the
 * previous count, or 0 without OpenBLAS.  Kernels that run many small
 * GEMMs at once on the pool set it to 1 for their duration, so OpenBLAS's
 * own threads do not fight the pool's. */
int nn_blas_threads(int n);

/* ---- 8-wide float vectors (GCC vector extensions) ---- */
typedef float nn_v8f __attribute__((vector_size(32)));
typedef int32_t nn_v8i __attribute__((vector_size(32)));

NN_INLINE nn_v8f nn_load8(const float *p) { nn_v8f v; memcpy(&v, p, 32); return v; }
NN_INLINE void nn_store8(float *p, nn_v8f v) { memcpy(p, &v, 32); }
/* A store that bypasses the caches when nt (p 16-byte aligned): for
 * outputs far larger than the caches, it saves reading every line before
 * writing it.  Callers end with nn_stream_fence(). */
NN_INLINE void nn_put8(float *p, nn_v8f v, bool nt)
{
#if defined(__SSE2__)
    if (nt) {
        __m128 lo, hi;
        memcpy(&lo, &v, 16);
        memcpy(&hi, (char *)&v + 16, 16);
        _mm_stream_ps(p, lo);
        _mm_stream_ps(p + 4, hi);
        return;
    }
#endif
    (void)nt;
    memcpy(p, &v, 32);
}
NN_INLINE void nn_stream_fence(void)
{
#if defined(__SSE2__)
    _mm_sfence();
#endif
}
/* elements to handle one by one before p + i is 32-byte aligned */
NN_INLINE int64_t nn_head(const float *p, int64_t n, bool nt)
{
    int64_t h = nt ? (int64_t)(((32 - ((uintptr_t)p & 31)) & 31) / 4) : 0;
    return h < n ? h : n;
}
NN_INLINE nn_v8f nn_splat8(float x) { return (nn_v8f){x, x, x, x, x, x, x, x}; }
/* mask ? a : b, mask lanes all-ones or zero */
NN_INLINE nn_v8f nn_sel8(nn_v8i mask, nn_v8f a, nn_v8f b)
{
    return (nn_v8f)((mask & (nn_v8i)a) | (~mask & (nn_v8i)b));
}
NN_INLINE float nn_hsum8(nn_v8f v)
{
    return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}
NN_INLINE float nn_hmax8(nn_v8f v)
{
    float m = v[0];
    for (int i = 1; i < 8; i++) m = v[i] > m ? v[i] : m;
    return m;
}

/* exp for x <= 0 (the shifted scores of a softmax): Cephes expf's
 * polynomial, evaluated in Estrin form for a shorter dependency chain;
 * about 1e-7 relative error.  Below -87.3 the result is exactly 0, so
 * masked (-inf) scores vanish; NaN stays NaN. */
NN_INLINE nn_v8f nn_exp8_neg(nn_v8f x)
{
    nn_v8i under = x < nn_splat8(-87.3f);
    x = nn_sel8(under, nn_splat8(-87.3f), x);
    const nn_v8f magic = nn_splat8(12582912.0f);   /* 1.5 * 2^23: round to nearest */
    nn_v8f r = (x * nn_splat8(1.44269504088896341f) + magic) - magic;
    x = x - r * nn_splat8(0.693359375f) + r * nn_splat8(2.12194440e-4f);
    nn_v8f x2 = x * x;
    nn_v8f p1 = nn_splat8(1.9875691500e-4f) * x + nn_splat8(1.3981999507e-3f);
    nn_v8f p2 = nn_splat8(8.3334519073e-3f) * x + nn_splat8(4.1665795894e-2f);
    nn_v8f p3 = nn_splat8(1.6666665459e-1f) * x + nn_splat8(5.0000001201e-1f);
    nn_v8f p = ((p1 * x2 + p2) * x2 + p3) * x2 + x + nn_splat8(1.0f);
    nn_v8i n = __builtin_convertvector(r, nn_v8i);
    p = p * (nn_v8f)((n + 127) << 23);
    return (nn_v8f)((nn_v8i)p & ~under);
}

/* Row helpers (nn_norm.c), used by attention too. */
/* o[i] = exp(x[i] - m) for n elements; returns their sum (double). */
double nn_exp_sub_sum(float *o, const float *x, int64_t n, float m);
float nn_max_row(const float *x, int64_t n);     /* NaN if any element is NaN */
void nn_scale_row(float *o, const float *x, int64_t n, float s, bool nt);

#endif
