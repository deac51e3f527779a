/* nn.h - internals shared by the CPU kernels of the neural-network ops
 * (backends/cpu/nn*.c): kernel entry points, f32 staging of outputs.
 *
 * The build targets baseline x86-64 (SSE2) unless NATIVE=1.  The row
 * helpers of the norms, softmax and attention run at the CPU's width
 * through the vmath table (vmath.h); loops that stay here and are hot
 * (Winograd's transforms) are compiled twice with NN_CLONES: an x86-64-v3
 * copy (AVX2, FMA, with mul+add contracted) picked at load time when the
 * CPU has it.  (Sanitizer builds skip the clones.) */
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

/* ---- kernels (one per family) ---- */
lm_status lm_nn_conv(lm_array *node);            /* nn_conv.c */
lm_status lm_nn_conv_transpose(lm_array *node);  /* nn_conv.c */
/* 3x3 stride-1 conv2d of f32 [N, C, H, W] by [O, C, 3, 3] into [N, O, OH,
 * OW], padding pt (top) and pl (left), given the weights transformed by
 * nn_wino_weights (nn_conv_wino.c) */
lm_status nn_conv_winograd(const float *x, const float *u, float *out, int64_t N, int64_t C, int64_t H,
                           int64_t W, int64_t O, int64_t OH, int64_t OW, int64_t pt, int64_t pl);
/* u [16, O, C] (NN_WINO_BYTES(O, C) bytes) = Winograd's G g G^T of each
 * 3x3 filter g of w [O, C, 3, 3] */
#define NN_WINO_BYTES(O, C) (sizeof(float) * 16 * (size_t)(O) * (size_t)(C))
void nn_wino_weights(float *u, const float *w, int64_t O, int64_t C);

/* ---- weights prepared once (conv_pack.c) ---- */
enum { NN_PACK_COPY_F32, NN_PACK_COPY_F64, NN_PACK_WINO };
/* Writes what kind `kind` derives from weight w into dst (bytes long). */
typedef lm_status (*nn_pack_fill)(void *dst, const lm_array *w, void *ctx);
/* What fill derives from w (bytes long; kind names the derivation and
 * everything it depends on besides w): kept on w's buffer from an earlier
 * call, else filled now and kept.  *owned gets what the caller must free()
 * when it was not kept (cache off or full of larger entries).  The pointer
 * stays valid until the next nn_pack or a write to w.  NULL + error when
 * out of memory or when fill fails. */
const void *nn_pack(const lm_array *w, int kind, size_t bytes, nn_pack_fill fill, void *ctx, void **owned);
/* Counters of the cache since start, and what it holds now (for tests):
 * hits, lookups that found their entry; misses, entries derived and kept
 * (a derivation past the cap, not kept, counts in neither). */
void lm_cpu_pack_stats(int64_t *hits, int64_t *misses, int64_t *entries, size_t *bytes);
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


/* Ends a task's streamed (non-temporal) stores. */
NN_INLINE void nn_stream_fence(void)
{
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

/* Row helpers (nn_norm.c), used by attention too. */
/* o[i] = exp(x[i] - m) for n elements; returns their sum (double). */
double nn_exp_sub_sum(float *o, const float *x, int64_t n, float m);
float nn_max_row(const float *x, int64_t n);     /* NaN if any element is NaN */
void nn_scale_row(float *o, const float *x, int64_t n, float s, bool nt);

#endif
