/* quant_dot_avx2.c - AVX2 forms of the Q8_0 x Q8_0 and Q4_K x Q8_K dot
 * products (quant_dot.c picks them when the vmath table in use is avx2 or
 * avx512, so LUMEN_ISA=sse2 selects the scalar ones).  Compiled with -mavx2
 * -mfma -mf16c (module.mk); only called on a CPU that has them.
 *
 * The integer sums are exact, as in the scalar forms; the float sums run
 * in 8 lanes, so results round differently from the scalar forms (within
 * the same bound).  One inline body per type serves the one-row and the
 * four-row forms: a weight block is loaded and decoded once and then meets
 * each activation row, and every row's float steps are the same sequence
 * whatever R is, so a row gives the same bits whichever form computes it
 * and for any thread count. */
#include <immintrin.h>
#include <string.h>
#include "core/quant_blocks.h"
#include "core/quant.h"
#include "quant_cpu.h"

#define QD_INLINE static inline __attribute__((always_inline))
/* the row and run loops are short and fixed: unrolled, their vectors stay in registers */
#define UNROLL _Pragma("GCC unroll 4")

static inline float half_to_f32(uint16_t h) { return _cvtsh_ss(h); }

/* the 8 lanes in a fixed pairwise order */
static inline float lanes_sum(__m256 v)
{
    float f[8];
    _mm256_storeu_ps(f, v);
    return ((f[0] + f[4]) + (f[1] + f[5])) + ((f[2] + f[6]) + (f[3] + f[7]));
}

/* ---- Q8_0 x Q8_0 ----
 * maddubs multiplies unsigned by signed bytes, so the weight goes in as |w|
 * (once per weight block) and its sign moves onto each activation
 * (sign_epi8 also zeroes x where w is 0).  Pairs of products stay below
 * 2 * 128 * 127, inside int16; only an activation of -128 against a
 * negative weight would wrap, and our quantizer never makes -128.
 * Even and odd blocks go to two accumulators, so a row's chain of
 * multiply-adds is not the one-row form's limit. */
QD_INLINE void q8_0_step(int R, const lm_block_q8_0 *w, const unsigned char *x, size_t xs, int64_t i,
                         __m256 acc[4])
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i wv = _mm256_loadu_si256((const __m256i *)w[i].qs);
    __m256i mag = _mm256_sign_epi8(wv, wv);
    const lm_block_q8_0 *a[4];
    UNROLL for (int r = 0; r < R; r++) a[r] = (const lm_block_q8_0 *)(x + (size_t)r * xs) + i;
    /* the rows' scales d_w d_x: for several rows in one conversion and one
     * multiply (each lane rounds as the scalar product does) */
    float dw = half_to_f32(w[i].d);
    __m128 dd = _mm_setzero_ps();
    if (R > 1) {
        /* lanes set by value: _mm_insert_epi16's index must be a constant
         * (clang refuses the loop's r even unrolled); lanes >= R stay 0 */
        __m128i h = _mm_setr_epi16((short)a[0]->d, R > 1 ? (short)a[1]->d : 0,
                                   R > 2 ? (short)a[2]->d : 0, R > 3 ? (short)a[3]->d : 0, 0, 0, 0, 0);
        dd = _mm_mul_ps(_mm_cvtph_ps(h), _mm_set1_ps(dw));
    }
    UNROLL for (int r = 0; r < R; r++) {
        __m256i sx = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)a[r]->qs), wv);
        __m256i quads = _mm256_madd_epi16(_mm256_maddubs_epi16(mag, sx), ones);
        __m256 d = R > 1 ? _mm256_permutevar8x32_ps(_mm256_castps128_ps256(dd), _mm256_set1_epi32(r))
                         : _mm256_set1_ps(dw * half_to_f32(a[r]->d));
        acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(quads), acc[r]);
    }
}

QD_INLINE void q8_0_rows(int R, int64_t n, const lm_block_q8_0 *w, const unsigned char *x, size_t xs,
                         float *out)
{
    __m256 even[4], odd[4];
    UNROLL for (int r = 0; r < R; r++) even[r] = odd[r] = _mm256_setzero_ps();
    int64_t nb = n / LM_QBLOCK, i = 0;
    for (; i + 1 < nb; i += 2) {
        q8_0_step(R, w, x, xs, i, even);
        q8_0_step(R, w, x, xs, i + 1, odd);
    }
    if (i < nb) q8_0_step(R, w, x, xs, i, even);
    UNROLL for (int r = 0; r < R; r++) out[r] = lanes_sum(_mm256_add_ps(even[r], odd[r]));
}

float lm_cpu_qdot_q8_0_avx2(int64_t n, const void *wrow, const void *xrow)
{
    float o;
    q8_0_rows(1, n, wrow, xrow, 0, &o);
    return o;
}

void lm_cpu_qdot4_q8_0_avx2(int64_t n, const void *wrow, const void *x, size_t xs, float *out)
{
    q8_0_rows(4, n, wrow, x, xs, out);
}

/* ---- Q4_K x Q8_K ----
 * A 64-element run of the block keeps sub-block 2j in the low nibbles of 32
 * bytes and sub-block 2j + 1 in the high ones, so one load gives two
 * sub-blocks of unsigned codes, maddubs's unsigned operand as they are
 * (pairs at most 2 * 15 * 127).  madd by the sub-block's scale then widens
 * to int32.  The run is decoded once and meets every row before the next
 * run (a row's integer sum is exact, so the order is free).  The minimums
 * meet Q8_K's per-16 sums in one madd: each min is repeated for its two
 * sums.  Per block and row there is one float step,
 *     acc += (d dx) isum - (dmin dx) msum,   in 8 lanes.
 *
 * The 12 bytes of 6-bit scales and mins (lm_k_scales6_unpack says where
 * each bit lives) are decoded in two 64-bit registers, eight bytes at a
 * time, into one vector: bytes 0-3 scales 0-3, 4-7 mins 0-3, 8-11 scales
 * 4-7, 12-15 mins 4-7.  Every broadcast the block needs is then one byte
 * shuffle of that vector (zero high bytes widen to int16), not a trip
 * through a general register per scale. */
static inline __m256i q4k_scales6(const uint8_t p[12])
{
    uint64_t a;
    uint32_t c;
    memcpy(&a, p, 8);
    memcpy(&c, p + 8, 4);
    uint64_t low6 = a & 0x3f3f3f3f3f3f3f3full;                     /* s0-3 | m0-3 */
    uint64_t top2 = ((a >> 6) & 0x0303030303030303ull) << 4;         /* their top bits */
    uint64_t nib = ((uint64_t)c | (uint64_t)c << 28) & 0x0f0f0f0f0f0f0f0full;
    __m128i v = _mm_set_epi64x((long long)(nib | top2), (long long)low6);
    return _mm256_broadcastsi128_si256(v);
}

/* shuffle controls: (k) the int16 scale k in every lane, and the mins
 * each twice as int16 (mins 0-3 in the low half, 4-7 in the high) */
#define Z (char)0x80
#define SC(k) ((k) < 4 ? (k) : (k) + 4)
#define SPLAT(k) _mm256_setr_epi8(SC(k), Z, SC(k), Z, SC(k), Z, SC(k), Z, SC(k), Z, SC(k), Z, SC(k), Z, SC(k), Z, \
                                  SC(k), Z, SC(k), Z, SC(k), Z, SC(k), Z, SC(k), Z, SC(k), Z, SC(k), Z, SC(k), Z)
#define MINS _mm256_setr_epi8(4, Z, 4, Z, 5, Z, 5, Z, 6, Z, 6, Z, 7, Z, 7, Z, \
                              12, Z, 12, Z, 13, Z, 13, Z, 14, Z, 14, Z, 15, Z, 15, Z)

QD_INLINE void q4_K_rows(int R, int64_t n, const lm_block_q4_K *w, const unsigned char *x, size_t xs,
                         float *out)
{
    const __m256i low4 = _mm256_set1_epi8(15);
    const __m256i splat[8] = {SPLAT(0), SPLAT(1), SPLAT(2), SPLAT(3), SPLAT(4), SPLAT(5), SPLAT(6), SPLAT(7)};
    __m256 acc[4];
    UNROLL for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / LM_KBLOCK; i++) {
        const lm_block_q4_K *b = &w[i];
        __m256i sm = q4k_scales6(b->scales);
        __m256i mins = _mm256_shuffle_epi8(sm, MINS);
        __m256i isum[4];
        UNROLL for (int r = 0; r < R; r++) isum[r] = _mm256_setzero_si256();
        UNROLL for (int j = 0; j < 4; j++) {
            __m256i bytes = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * j));
            __m256i lo = _mm256_and_si256(bytes, low4), hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
            __m256i sl = _mm256_shuffle_epi8(sm, splat[2 * j]), sh = _mm256_shuffle_epi8(sm, splat[2 * j + 1]);
            UNROLL for (int r = 0; r < R; r++) {
                const int8_t *q = ((const lm_block_q8_K *)(x + (size_t)r * xs) + i)->qs + 64 * j;
                __m256i pl = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)q));
                __m256i ph = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(q + 32)));
                isum[r] = _mm256_add_epi32(isum[r], _mm256_add_epi32(_mm256_madd_epi16(pl, sl),
                                                                     _mm256_madd_epi16(ph, sh)));
                /* keep the running sum in a register: else the compiler
                 * reassociates the whole block's sum into one tree and
                 * spills its sixteen leaves */
                __asm__("" : "+x"(isum[r]));
            }
        }
        /* d and dmin, adjacent halves, in one conversion */
        uint32_t dd;
        memcpy(&dd, &b->d, 4);
        __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128((int)dd));
        float dw = _mm_cvtss_f32(dm), mw = _mm_cvtss_f32(_mm_movehdup_ps(dm));
        UNROLL for (int r = 0; r < R; r++) {
            const lm_block_q8_K *a = (const lm_block_q8_K *)(x + (size_t)r * xs) + i;
            __m256i msum = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a->bsums), mins);
            __m256 m = _mm256_mul_ps(_mm256_set1_ps(mw * a->d), _mm256_cvtepi32_ps(msum));
            acc[r] = _mm256_add_ps(acc[r], _mm256_fmsub_ps(_mm256_set1_ps(dw * a->d), _mm256_cvtepi32_ps(isum[r]), m));
        }
    }
    UNROLL for (int r = 0; r < R; r++) out[r] = lanes_sum(acc[r]);
}
#undef Z
#undef SC
#undef SPLAT
#undef MINS

float lm_cpu_qdot_q4_K_avx2(int64_t n, const void *wrow, const void *xrow)
{
    float o;
    q4_K_rows(1, n, wrow, xrow, 0, &o);
    return o;
}

void lm_cpu_qdot4_q4_K_avx2(int64_t n, const void *wrow, const void *x, size_t xs, float *out)
{
    q4_K_rows(4, n, wrow, x, xs, out);
}
