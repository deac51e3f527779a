/* quant_cpu.h - the CPU's quantized matmul (backends/cpu/quant_*.c). */
#ifndef LM_CPU_QUANT_H
#define LM_CPU_QUANT_H

#include "cpu.h"

/* The dtype activations are quantized to for an integer dot with weight
 * dtype w (LM_Q8_0 or LM_Q8_K), or LM_DTYPE_COUNT when w has no integer
 * dot here (its rows are dequantized instead). */
lm_dtype lm_cpu_qdot_act(lm_dtype w);
/* The dot of n elements: a row of w's blocks with a row of act's blocks,
 * for weight dtype w at the instruction set in use (NULL where
 * lm_cpu_qdot_act says there is none).  Looked up once per kernel. */
typedef float (*lm_cpu_qdot_fn)(int64_t n, const void *wrow, const void *xrow);
lm_cpu_qdot_fn lm_cpu_qdot_get(lm_dtype w);
/* Four activation rows at once (x, x + xs, x + 2 xs, x + 3 xs bytes) into
 * out[0..3], each equal bit for bit to the one-row form; NULL where w has
 * no such kernel at the instruction set in use. */
typedef void (*lm_cpu_qdot4_fn)(int64_t n, const void *wrow, const void *x, size_t xs, float *out);
lm_cpu_qdot4_fn lm_cpu_qdot4_get(lm_dtype w);
/* The AVX2 forms (quant_dot_avx2.c; x86-64 with AVX2, FMA, F16C only). */
float lm_cpu_qdot_q8_0_avx2(int64_t n, const void *w, const void *x);
float lm_cpu_qdot_q4_K_avx2(int64_t n, const void *w, const void *x);
void lm_cpu_qdot4_q8_0_avx2(int64_t n, const void *w, const void *x, size_t xs, float *out);
void lm_cpu_qdot4_q4_K_avx2(int64_t n, const void *w, const void *x, size_t xs, float *out);
/* QLINEAR: out [..., N] f32 = x [..., K] f32 (contiguous) times w [N, K]
 * (quantized) transposed. */
lm_status lm_nn_qlinear(lm_array *node);

#endif
