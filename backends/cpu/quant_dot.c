/* quant_dot.c - dot products of a quantized weight row with an activation
 * row quantized to Q8_0 (for Q4_0, Q5_0, Q8_0 weights) or Q8_K (the
 * K-quants), in integers.
 *
 * Why integers: within a sub-block every weight is scale * code (minus
 * min), so sum_e w_e x_e is d_w d_x (sum_s scale_s sum_e code_e q_e - min_s
 * sum_e q_e) with every inner sum an exact int32 (the activation format
 * keeps sum_e q_e per 16 elements for the min term).  Only one float
 * multiply-add per block remains, so the result is fixed by the data and
 * the order of the blocks, not by how the integer sums are vectorised.
 *
 * The scalar forms here work on any dtype through lm_quant_unpack (the
 * block as codes, scales, mins); they are compiled twice (QD_CLONES), an
 * AVX2 copy the compiler vectorises and the baseline, which give the same
 * bits (integer sums are exact, the float sum keeps its order, no
 * contraction).  Hand-written AVX2 forms for Q8_0 and Q4_K, the common
 * weight types, are in quant_dot_avx2.c. */
#include <string.h>
#include "cpu.h"
#include "core/quant_blocks.h"
#include "core/quant.h"
#include "quant_cpu.h"
#include "vmath.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define QD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define QD_CLONES
#endif

static inline int32_t idot(const int8_t *a, const int8_t *b, int n)
{
    int32_t s = 0;
    for (int i = 0; i < n; i++) s += (int32_t)a[i] * b[i];
    return s;
}

/* 32-element weights (no minimum) against Q8_0 */
QD_CLONES static float dot_q8_0_act(lm_dtype w, int64_t n, const void *wrow, const void *xrow)
{
    const unsigned char *wb = wrow;
    const lm_block_q8_0 *x = xrow;
    size_t bytes = lm_dtype_block_bytes(w);
    lm_qblock q;
    float sum = 0;
    for (int64_t i = 0; i < n / LM_QBLOCK; i++, wb += bytes) {
        lm_quant_unpack(w, wb, &q);
        sum += (float)idot(q.code, x[i].qs, LM_QBLOCK) * (q.d * lm_f16_to_f32(x[i].d));
    }
    return sum;
}

/* K-quant weights against Q8_K */
QD_CLONES static float dot_q8_K_act(lm_dtype w, int64_t n, const void *wrow, const void *xrow)
{
    const unsigned char *wb = wrow;
    const lm_block_q8_K *x = xrow;
    size_t bytes = lm_dtype_block_bytes(w);
    lm_qblock q;
    float sum = 0;
    for (int64_t i = 0; i < n / LM_KBLOCK; i++, wb += bytes) {
        lm_quant_unpack(w, wb, &q);
        int nsub = LM_KBLOCK / q.sub, per = q.sub / 16;   /* Q8_K sums per 16 */
        int32_t isum = 0, msum = 0;
        for (int s = 0; s < nsub; s++) isum += q.scale[s] * idot(q.code + s * q.sub, x[i].qs + s * q.sub, q.sub);
        if (q.has_min)
            for (int s = 0; s < nsub; s++) {
                int32_t xs = 0;
                for (int k = 0; k < per; k++) xs += x[i].bsums[s * per + k];
                msum += q.min[s] * xs;
            }
        sum += (q.d * x[i].d) * (float)isum - (q.dmin * x[i].d) * (float)msum;
    }
    return sum;
}

static float dot_q4_0(int64_t n, const void *w, const void *x) { return dot_q8_0_act(LM_Q4_0, n, w, x); }
static float dot_q5_0(int64_t n, const void *w, const void *x) { return dot_q8_0_act(LM_Q5_0, n, w, x); }
static float dot_q8_0(int64_t n, const void *w, const void *x) { return dot_q8_0_act(LM_Q8_0, n, w, x); }
static float dot_q2_K(int64_t n, const void *w, const void *x) { return dot_q8_K_act(LM_Q2_K, n, w, x); }
static float dot_q3_K(int64_t n, const void *w, const void *x) { return dot_q8_K_act(LM_Q3_K, n, w, x); }
static float dot_q4_K(int64_t n, const void *w, const void *x) { return dot_q8_K_act(LM_Q4_K, n, w, x); }
static float dot_q5_K(int64_t n, const void *w, const void *x) { return dot_q8_K_act(LM_Q5_K, n, w, x); }
static float dot_q6_K(int64_t n, const void *w, const void *x) { return dot_q8_K_act(LM_Q6_K, n, w, x); }

/* Q4_1, Q5_1 (whose float minimum has no integer form against Q8_0 here)
 * and Q8_K weights have none: quant_linear.c dequantizes their rows. */
static lm_cpu_qdot_fn scalar_dot(lm_dtype w)
{
    switch (w) {
    case LM_Q4_0: return dot_q4_0;
    case LM_Q5_0: return dot_q5_0;
    case LM_Q8_0: return dot_q8_0;
    case LM_Q2_K: return dot_q2_K;
    case LM_Q3_K: return dot_q3_K;
    case LM_Q4_K: return dot_q4_K;
    case LM_Q5_K: return dot_q5_K;
    case LM_Q6_K: return dot_q6_K;
    default: return NULL;
    }
}

lm_dtype lm_cpu_qdot_act(lm_dtype w)
{
    if (!scalar_dot(w)) return LM_DTYPE_COUNT;
    return lm_dtype_block(w) == LM_KBLOCK ? LM_Q8_K : LM_Q8_0;
}

/* the vmath table in use says which instruction set runs (LUMEN_ISA) */
static bool use_avx2(void)
{
#if defined(__x86_64__)
    return lm_vm && (!strcmp(lm_vm->name, "avx2") || !strcmp(lm_vm->name, "avx512"));
#else
    return false;
#endif
}

lm_cpu_qdot_fn lm_cpu_qdot_get(lm_dtype w)
{
#if defined(__x86_64__)
    if (w == LM_Q8_0 && use_avx2()) return lm_cpu_qdot_q8_0_avx2;
    if (w == LM_Q4_K && use_avx2()) return lm_cpu_qdot_q4_K_avx2;
#endif
    return scalar_dot(w);
}

lm_cpu_qdot4_fn lm_cpu_qdot4_get(lm_dtype w)
{
#if defined(__x86_64__)
    if (w == LM_Q8_0 && use_avx2()) return lm_cpu_qdot4_q8_0_avx2;
    if (w == LM_Q4_K && use_avx2()) return lm_cpu_qdot4_q4_K_avx2;
#endif
    (void)w;
    return NULL;
}
