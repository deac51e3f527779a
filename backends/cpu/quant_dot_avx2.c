/* quant_dot_avx2.c - the AVX2 forms of the Q8_0 x Q8_0 and Q4_K x Q8_K dot
 * products (quant_dot.c picks them when the vmath table in use is avx2 or
 * avx512, so LUMEN_ISA=sse2 selects the scalar ones).  Compiled with -mavx2
 * -mfma -mf16c (module.mk); only called on a CPU that has them.
 *
 * The bodies are ggml's AVX2 branches (ggml-org/ggml
 * src/ggml-cpu/arch/x86/quants.c at d99724f2, MIT licence, Copyright (c)
 * 2023-2026 The ggml authors).  Their float sums run in 8 lanes, so they
 * round differently from the scalar forms (within the same bound); each
 * output still comes from one call, the same for any thread count. */
#include <immintrin.h>
#include <string.h>
#include "core/quant_blocks.h"
#include "quant_cpu.h"

#define MM256_SET_M128I(a, b) _mm256_insertf128_si256(_mm256_castsi128_si256(b), (a), 1)

static inline float f16(uint16_t h) { return _cvtsh_ss(h); }

static inline float hsum_float_8(const __m256 x)
{
    __m128 res = _mm256_extractf128_ps(x, 1);
    res = _mm_add_ps(res, _mm256_castps256_ps128(x));
    res = _mm_add_ps(res, _mm_movehl_ps(res, res));
    res = _mm_add_ss(res, _mm_movehdup_ps(res));
    return _mm_cvtss_f32(res);
}

static inline __m256 mul_sum_i8_pairs_float(const __m256i x, const __m256i y)
{
    const __m256i ax = _mm256_sign_epi8(x, x);
    const __m256i sy = _mm256_sign_epi8(y, x);
    const __m256i dot = _mm256_maddubs_epi16(ax, sy);
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_set1_epi16(1), dot));
}

float lm_cpu_qdot_q8_0_avx2(int64_t n, const void *vx, const void *vy)
{
    const block_q8_0 *x = vx, *y = vy;
    const int64_t nb = n / QK8_0;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ++ib) {
        const __m256 d = _mm256_set1_ps(f16(x[ib].d) * f16(y[ib].d));
        __m256i qx = _mm256_loadu_si256((const __m256i *)x[ib].qs);
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[ib].qs);
        acc = _mm256_fmadd_ps(d, mul_sum_i8_pairs_float(qx, qy), acc);
    }
    return hsum_float_8(acc);
}

static inline __m256i get_scale_shuffle_k4(int i)
{
    static const uint8_t k_shuffle[256] = {
         0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
         2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3,
         4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5,
         6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7,
         8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9,
        10,11,10,11,10,11,10,11,10,11,10,11,10,11,10,11,10,11,10,11,10,11,10,11,10,11,10,11,10,11,10,11,
        12,13,12,13,12,13,12,13,12,13,12,13,12,13,12,13,12,13,12,13,12,13,12,13,12,13,12,13,12,13,12,13,
        14,15,14,15,14,15,14,15,14,15,14,15,14,15,14,15,14,15,14,15,14,15,14,15,14,15,14,15,14,15,14,15
    };
    return _mm256_loadu_si256((const __m256i *)k_shuffle + i);
}

float lm_cpu_qdot_q4_K_avx2(int64_t n, const void *vx, const void *vy)
{
    const block_q4_K *x = vx;
    const block_q8_K *y = vy;
    const int64_t nb = n / QK_K;
    static const uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    uint32_t utmp[4];
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256 acc = _mm256_setzero_ps();
    __m128 acc_m = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        const float d = y[i].d * f16(x[i].d);
        const float dmin = -y[i].d * f16(x[i].dmin);
        memcpy(utmp, x[i].scales, 12);
        utmp[3] = ((utmp[2] >> 4) & kmask2) | (((utmp[1] >> 6) & kmask3) << 4);
        const uint32_t uaux = utmp[1] & kmask1;
        utmp[1] = (utmp[2] & kmask2) | (((utmp[0] >> 6) & kmask3) << 4);
        utmp[2] = uaux;
        utmp[0] &= kmask1;
        const uint8_t *q4 = x[i].qs;
        const int8_t *q8 = y[i].qs;
        const __m256i mins_and_scales = _mm256_cvtepu8_epi16(_mm_set_epi32((int)utmp[3], (int)utmp[2],
                                                                           (int)utmp[1], (int)utmp[0]));
        const __m256i q8sums = _mm256_loadu_si256((const __m256i *)y[i].bsums);
        const __m128i q8s = _mm_hadd_epi16(_mm256_extracti128_si256(q8sums, 0), _mm256_extracti128_si256(q8sums, 1));
        const __m128i prod = _mm_madd_epi16(_mm256_extracti128_si256(mins_and_scales, 1), q8s);
        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m);
        const __m128i sc128 = _mm256_extracti128_si256(mins_and_scales, 0);
        const __m256i scales = MM256_SET_M128I(sc128, sc128);
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < QK_K / 64; ++j) {
            const __m256i scale_l = _mm256_shuffle_epi8(scales, get_scale_shuffle_k4(2 * j + 0));
            const __m256i scale_h = _mm256_shuffle_epi8(scales, get_scale_shuffle_k4(2 * j + 1));
            const __m256i q4bits = _mm256_loadu_si256((const __m256i *)q4); q4 += 32;
            const __m256i q4l = _mm256_and_si256(q4bits, m4);
            const __m256i q4h = _mm256_and_si256(_mm256_srli_epi16(q4bits, 4), m4);
            const __m256i q8l = _mm256_loadu_si256((const __m256i *)q8); q8 += 32;
            __m256i p16l = _mm256_maddubs_epi16(q4l, q8l);
            p16l = _mm256_madd_epi16(scale_l, p16l);
            const __m256i q8h = _mm256_loadu_si256((const __m256i *)q8); q8 += 32;
            __m256i p16h = _mm256_maddubs_epi16(q4h, q8h);
            p16h = _mm256_madd_epi16(scale_h, p16h);
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p16l, p16h));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    acc_m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
    acc_m = _mm_add_ss(acc_m, _mm_movehdup_ps(acc_m));
    return hsum_float_8(acc) + _mm_cvtss_f32(acc_m);
}

/* Four activation rows (x, x + xs, ...) against one weight row: the weight's
 * loads and unpacking are shared, and each row's accumulators see exactly
 * the operations of the one-row form, so out[r] equals its result bit for
 * bit (the kernel may pick either form for any row). */
void lm_cpu_qdot4_q8_0_avx2(int64_t n, const void *vx, const void *vy, size_t xs, float *out)
{
    const block_q8_0 *x = vx;
    const block_q8_0 *y[4];
    for (int r = 0; r < 4; r++) y[r] = (const block_q8_0 *)((const char *)vy + (size_t)r * xs);
    const int64_t nb = n / QK8_0;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t ib = 0; ib < nb; ++ib) {
        const float dx = f16(x[ib].d);
        const __m256i qx = _mm256_loadu_si256((const __m256i *)x[ib].qs);
        const __m256i ax = _mm256_sign_epi8(qx, qx);
        for (int r = 0; r < 4; r++) {
            const __m256 d = _mm256_set1_ps(dx * f16(y[r][ib].d));
            const __m256i sy = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)y[r][ib].qs), qx);
            const __m256i dot = _mm256_maddubs_epi16(ax, sy);
            const __m256 q = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_set1_epi16(1), dot));
            acc[r] = _mm256_fmadd_ps(d, q, acc[r]);
        }
    }
    for (int r = 0; r < 4; r++) out[r] = hsum_float_8(acc[r]);
}

void lm_cpu_qdot4_q4_K_avx2(int64_t n, const void *vx, const void *vy, size_t xs, float *out)
{
    const block_q4_K *x = vx;
    const block_q8_K *y[4];
    for (int r = 0; r < 4; r++) y[r] = (const block_q8_K *)((const char *)vy + (size_t)r * xs);
    const int64_t nb = n / QK_K;
    static const uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    uint32_t utmp[4];
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    __m128 acc_m[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps()};
    for (int64_t i = 0; i < nb; ++i) {
        const float xd = f16(x[i].d), xdmin = f16(x[i].dmin);
        memcpy(utmp, x[i].scales, 12);
        utmp[3] = ((utmp[2] >> 4) & kmask2) | (((utmp[1] >> 6) & kmask3) << 4);
        const uint32_t uaux = utmp[1] & kmask1;
        utmp[1] = (utmp[2] & kmask2) | (((utmp[0] >> 6) & kmask3) << 4);
        utmp[2] = uaux;
        utmp[0] &= kmask1;
        const __m256i mins_and_scales = _mm256_cvtepu8_epi16(_mm_set_epi32((int)utmp[3], (int)utmp[2],
                                                                           (int)utmp[1], (int)utmp[0]));
        const __m128i mins = _mm256_extracti128_si256(mins_and_scales, 1);
        const __m128i sc128 = _mm256_extracti128_si256(mins_and_scales, 0);
        const __m256i scales = MM256_SET_M128I(sc128, sc128);
        __m256i q4l[4], q4h[4], scl[4], sch[4];
        const uint8_t *q4 = x[i].qs;
        for (int j = 0; j < QK_K / 64; ++j) {
            scl[j] = _mm256_shuffle_epi8(scales, get_scale_shuffle_k4(2 * j + 0));
            sch[j] = _mm256_shuffle_epi8(scales, get_scale_shuffle_k4(2 * j + 1));
            const __m256i q4bits = _mm256_loadu_si256((const __m256i *)q4); q4 += 32;
            q4l[j] = _mm256_and_si256(q4bits, m4);
            q4h[j] = _mm256_and_si256(_mm256_srli_epi16(q4bits, 4), m4);
        }
        for (int r = 0; r < 4; r++) {
            const float d = y[r][i].d * xd;
            const float dmin = -y[r][i].d * xdmin;
            const __m256i q8sums = _mm256_loadu_si256((const __m256i *)y[r][i].bsums);
            const __m128i q8s = _mm_hadd_epi16(_mm256_extracti128_si256(q8sums, 0), _mm256_extracti128_si256(q8sums, 1));
            const __m128i prod = _mm_madd_epi16(mins, q8s);
            acc_m[r] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m[r]);
            const int8_t *q8 = y[r][i].qs;
            __m256i sumi = _mm256_setzero_si256();
            for (int j = 0; j < QK_K / 64; ++j) {
                const __m256i q8l = _mm256_loadu_si256((const __m256i *)q8); q8 += 32;
                const __m256i p16l = _mm256_madd_epi16(scl[j], _mm256_maddubs_epi16(q4l[j], q8l));
                const __m256i q8h = _mm256_loadu_si256((const __m256i *)q8); q8 += 32;
                const __m256i p16h = _mm256_madd_epi16(sch[j], _mm256_maddubs_epi16(q4h[j], q8h));
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p16l, p16h));
            }
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[r]);
        }
    }
    for (int r = 0; r < 4; r++) {
        __m128 am = _mm_add_ps(acc_m[r], _mm_movehl_ps(acc_m[r], acc_m[r]));
        am = _mm_add_ss(am, _mm_movehdup_ps(am));
        out[r] = hsum_float_8(acc[r]) + _mm_cvtss_f32(am);
    }
}
