/* quant_dot_avx2.c - AVX2 forms of the Q8_0 x Q8_0 and Q4_K x Q8_K dot
 * products (quant_dot.c picks them when the vmath table in use is avx2 or
 * avx512, so LUMEN_ISA=sse2 selects the scalar ones).  Compiled with -mavx2
 * -mfma -mf16c (module.mk); only called on a CPU that has them.
 *
 * The integer sums are exact, as in the scalar forms; the float sums run
 * in 8 lanes, so results round differently from the scalar forms (within
 * the same bound).  Each row's result comes from one fixed sequence of
 * operations, shared by the one-row and four-row forms, so a row gives the
 * same bits whichever form computes it and for any thread count. */
#include <immintrin.h>
#include <string.h>
#include "core/quant_blocks.h"
#include "core/quant.h"
#include "quant_cpu.h"

static inline float half_to_f32(uint16_t h) { return _cvtsh_ss(h); }

/* the 8 lanes in a fixed pairwise order */
static inline float lanes_sum(__m256 v)
{
    float f[8];
    _mm256_storeu_ps(f, v);
    return ((f[0] + f[4]) + (f[1] + f[5])) + ((f[2] + f[6]) + (f[3] + f[7]));
}

static inline const void *row_at(const void *base, size_t stride, int r)
{
    return (const char *)base + (size_t)r * stride;
}

/* ---- Q8_0 x Q8_0 ----
 * maddubs multiplies unsigned by signed bytes, so the weight goes in as |w|
 * and its sign moves onto the activation (sign_epi8 also zeroes x where w
 * is 0).  Pairs of products stay below 2 * 128 * 127, inside int16; only
 * an activation of -128 against a negative weight would wrap, and our
 * quantizer never makes -128. */
typedef struct { __m256i mag, sgn; float d; } q8_wblock;

static inline q8_wblock q8_weight(const lm_block_q8_0 *b)
{
    __m256i w = _mm256_loadu_si256((const __m256i *)b->qs);
    return (q8_wblock){_mm256_sign_epi8(w, w), w, half_to_f32(b->d)};
}

static inline __m256 q8_block_step(const q8_wblock *w, const lm_block_q8_0 *a, __m256 acc)
{
    __m256i x = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)a->qs), w->sgn);
    __m256i pairs = _mm256_maddubs_epi16(w->mag, x);
    __m256i quads = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
    return _mm256_fmadd_ps(_mm256_set1_ps(w->d * half_to_f32(a->d)), _mm256_cvtepi32_ps(quads), acc);
}

float lm_cpu_qdot_q8_0_avx2(int64_t n, const void *wrow, const void *xrow)
{
    const lm_block_q8_0 *w = wrow, *x = xrow;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / LM_QBLOCK; i++) {
        q8_wblock wb = q8_weight(&w[i]);
        acc = q8_block_step(&wb, &x[i], acc);
    }
    return lanes_sum(acc);
}

void lm_cpu_qdot4_q8_0_avx2(int64_t n, const void *wrow, const void *x, size_t xs, float *out)
{
    const lm_block_q8_0 *w = wrow;
    __m256 acc[4];
    for (int r = 0; r < 4; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / LM_QBLOCK; i++) {
        q8_wblock wb = q8_weight(&w[i]);
        for (int r = 0; r < 4; r++) acc[r] = q8_block_step(&wb, (const lm_block_q8_0 *)row_at(x, xs, r) + i, acc[r]);
    }
    for (int r = 0; r < 4; r++) out[r] = lanes_sum(acc[r]);
}

/* ---- Q4_K x Q8_K ----
 * A 64-element run of the block keeps sub-block 2j in the low nibbles of 32
 * bytes and sub-block 2j + 1 in the high ones, so one load gives two
 * sub-blocks of unsigned codes, maddubs's unsigned operand as they are
 * (pairs at most 2 * 15 * 128).  madd by the sub-block's scale then widens
 * to int32.  The minimums meet Q8_K's per-16 sums in plain integers.  The
 * four-row form shares the scale decoding and re-reads the weight bytes
 * from L1 per row (decoding the nibbles once for all four rows measured
 * slower: eight more live registers); the integer sum is exact, so only
 * q4k_accumulate's float steps, the same in both forms, decide the bits. */
/* the block's integer sum: sum over sub-blocks of scale * sum code * q */
static inline __m256i q4k_isum(const lm_block_q4_K *b, const uint8_t scale[8], const int8_t *x)
{
    const __m256i low4 = _mm256_set1_epi8(15);
    __m256i isum = _mm256_setzero_si256();
    for (int j = 0; j < 4; j++) {
        __m256i bytes = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * j));
        __m256i lo = _mm256_and_si256(bytes, low4), hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
        __m256i xl = _mm256_loadu_si256((const __m256i *)(x + 64 * j));
        __m256i xh = _mm256_loadu_si256((const __m256i *)(x + 64 * j + 32));
        __m256i pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, xl), _mm256_set1_epi16(scale[2 * j]));
        __m256i ph = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, xh), _mm256_set1_epi16(scale[2 * j + 1]));
        isum = _mm256_add_epi32(isum, _mm256_add_epi32(pl, ph));
    }
    return isum;
}

/* the block's two float steps, the only rounding a row sees per block */
static inline void q4k_accumulate(const lm_block_q4_K *b, const uint8_t min[8], const lm_block_q8_K *a,
                                  __m256i isum, __m256 *acc, float *mins)
{
    *acc = _mm256_fmadd_ps(_mm256_set1_ps(half_to_f32(b->d) * a->d), _mm256_cvtepi32_ps(isum), *acc);
    /* sum_s min_s (bsums[2s] + bsums[2s + 1]): pairs at most 2 * 16 * 127 */
    __m256i bs = _mm256_loadu_si256((const __m256i *)a->bsums);
    __m128i pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    __m128i prod = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)min)), pairs);
    prod = _mm_add_epi32(prod, _mm_shuffle_epi32(prod, 0x4e));
    prod = _mm_add_epi32(prod, _mm_shuffle_epi32(prod, 0xb1));
    int32_t msum = _mm_cvtsi128_si32(prod);
    *mins += (half_to_f32(b->dmin) * a->d) * (float)msum;
}

float lm_cpu_qdot_q4_K_avx2(int64_t n, const void *wrow, const void *xrow)
{
    const lm_block_q4_K *w = wrow;
    const lm_block_q8_K *x = xrow;
    __m256 acc = _mm256_setzero_ps();
    float mins = 0;
    for (int64_t i = 0; i < n / LM_KBLOCK; i++) {
        uint8_t sc[8], mn[8];
        lm_k_scales6_unpack(w[i].scales, sc, mn);
        q4k_accumulate(&w[i], mn, &x[i], q4k_isum(&w[i], sc, x[i].qs), &acc, &mins);
    }
    return lanes_sum(acc) - mins;
}

void lm_cpu_qdot4_q4_K_avx2(int64_t n, const void *wrow, const void *x, size_t xs, float *out)
{
    const lm_block_q4_K *w = wrow;
    __m256 acc[4];
    float mins[4] = {0, 0, 0, 0};
    for (int r = 0; r < 4; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / LM_KBLOCK; i++) {
        uint8_t sc[8], mn[8];
        lm_k_scales6_unpack(w[i].scales, sc, mn);
        for (int r = 0; r < 4; r++) {
            const lm_block_q8_K *a = (const lm_block_q8_K *)row_at(x, xs, r) + i;
            q4k_accumulate(&w[i], mn, a, q4k_isum(&w[i], sc, a->qs), &acc[r], &mins[r]);
        }
    }
    for (int r = 0; r < 4; r++) out[r] = lanes_sum(acc[r]) - mins[r];
}
