/* quant.c - the block quantizations (Q4_0 ... Q8_K) on the host: floats into
 * blocks and blocks back into floats.
 *
 * The block layouts (core/quant_blocks.h) and the algorithms that choose
 * each block's scales, minimums and codes follow ggml's definitions of these
 * formats, so that a file Lumen writes is the file ggml would write and a
 * file either reads decodes the same.  tests/test_gguf.c holds us to that:
 * every type quantizes to ggml's bytes and dequantizes to ggml's floats, bit
 * for bit, against files ggml itself made (tests/ref/gguf).
 *
 * Bit-exactness pins the order of every float operation ((a * b) * c is not
 * a * (b * c)), so the sums and products below are written in the order the
 * format's reference quantizer evaluates them, and this file must not be
 * compiled with floating-point contraction (a fused multiply-add changes
 * which scale the K-quant searches pick): the build's -std=c11 implies
 * -ffp-contract=off. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "dtype.h"
#include "ops.h"
#include "quant.h"
#include "quant_blocks.h"

/* Below this a sub-block counts as all zero: its scale would be noise. */
#define TINY_GROUP 1e-15f

static inline float half_f(uint16_t h) { return lm_f16_to_f32(h); }
static inline uint16_t f_half(float f) { return lm_f32_to_f16(f); }
static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Nearest integer, ties to even, by adding 1.5 * 2^23: the sum's mantissa
 * then holds the rounded value plus 2^22.  Exact for |f| < 2^22; beyond
 * that (or for inf/NaN) it wraps, and the bytes we match were made by this
 * very trick, so it is kept rather than lrintf. */
static inline int round_even(float f)
{
    float biased = f + 12582912.0f;
    int32_t bits;
    memcpy(&bits, &biased, sizeof bits);
    return (bits & 0x7fffff) - 0x400000;
}

/* The low byte of f truncated to int32, the way x86's cvttss2si truncates
 * (INT32_MIN for NaN and anything out of range).  The legacy formats turn
 * floats into codes with a plain cast, which C leaves undefined when a block
 * is all subnormal and 1 / d overflows to infinity; the files we match were
 * made on x86, so this gives their bytes with defined behaviour. */
static inline int trunc_byte(float f)
{
    int32_t i = f >= -2147483648.0f && f < 2147483648.0f ? (int32_t)f : INT32_MIN;
    return (int8_t)(uint8_t)((uint32_t)i & 0xffu);
}

/* The element of largest magnitude, with its sign (the first one on ties);
 * *amax gets its magnitude.  The symmetric formats put it on their most
 * negative code, which has one more step than the positive side. */
static float signed_extreme(const float *x, int n, float *amax)
{
    float ext = 0, mag = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > mag) {
            mag = fabsf(x[i]);
            ext = x[i];
        }
    *amax = mag;
    return ext;
}

/* ---- bit packing shared by several layouts ----
 * A 32-element block keeps element e's low nibble in qs[e % 16] (high
 * nibble for the second half).  A 256-element block keeps 2-bit fields in
 * bytes of four, one per 32-element run of a 128-element half
 * (qs[32 (e / 128) + e % 32] at bit 2 ((e / 32) % 4)), nibbles in pairs
 * `span` apart, and single bits in a plane of 32 bytes (bit e / 32 of byte
 * e % 32).  Packing assumes a zeroed destination where it ORs. */

static void pack_2bit(const uint8_t *v, uint8_t *qs)
{
    for (int e = 0; e < LM_KBLOCK; e++) {
        int byte = 32 * (e / 128) + e % 32, shift = 2 * ((e / 32) % 4);
        if (shift == 0) qs[byte] = 0;
        qs[byte] |= (uint8_t)((v[e] & 3) << shift);
    }
}

static inline int get_2bit(const uint8_t *qs, int e)
{
    return (qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
}

/* n elements in groups of 2 span: byte g / 2 + l holds element g + l low
 * and g + span + l high. */
static void pack_nibbles(const uint8_t *v, uint8_t *qs, int n, int span)
{
    for (int g = 0; g < n; g += 2 * span)
        for (int l = 0; l < span; l++)
            qs[g / 2 + l] = (uint8_t)((v[g + l] & 15) | (v[g + span + l] & 15) << 4);
}

static inline int get_nibble(const uint8_t *qs, int e, int span)
{
    int g = e / (2 * span), r = e % (2 * span);
    return (qs[g * span + r % span] >> (r < span ? 0 : 4)) & 15;
}

static void pack_bitplane(const uint8_t *v, int bit, uint8_t *plane)
{
    memset(plane, 0, 32);
    for (int e = 0; e < LM_KBLOCK; e++) plane[e % 32] |= (uint8_t)(((v[e] >> bit) & 1) << (e / 32));
}

static inline int get_bit(const uint8_t *plane, int e) { return (plane[e % 32] >> (e / 32)) & 1; }

/* Q4_K and Q5_K: eight 6-bit scales and eight 6-bit minimums in 12 bytes,
 * the inverse of lm_k_scales6_unpack (quant_blocks.h, which says where
 * each bit goes). */
static void pack_scales6(const uint8_t sc[8], const uint8_t mn[8], uint8_t out[12])
{
    for (int j = 0; j < 4; j++) {
        out[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        out[j + 4] = (uint8_t)(mn[j] | (mn[j + 4] >> 4) << 6);
        out[j + 8] = (uint8_t)((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
    }
}

/* Q3_K: sixteen 6-bit codes in 12 bytes: low nibbles of codes 0-7 and
 * 8-15 share bytes 0-7, top two bits go to byte 8 + j % 4 at bit 2 (j / 4). */
static void pack_scales_q3(const uint8_t code[16], uint8_t out[12])
{
    memset(out, 0, 12);
    for (int j = 0; j < 16; j++) {
        out[j % 8] |= (uint8_t)((code[j] & 15) << (j < 8 ? 0 : 4));
        out[8 + j % 4] |= (uint8_t)((code[j] >> 4) << (2 * (j / 4)));
    }
}

static int unpack_scale_q3(const uint8_t in[12], int j)
{
    int lo = (in[j % 8] >> (j < 8 ? 0 : 4)) & 15, hi = (in[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | hi << 4) - 32;
}

/* ---- the 32-element formats ----
 * Symmetric (Q4_0, Q5_0): d maps the extreme element onto code 0, so
 * x ~ d (code - 2^(bits-1)).  Affine (Q4_1, Q5_1): d and the minimum span
 * [min, max] in 2^bits - 1 steps, x ~ d code + min.  Codes are truncations
 * of a value offset by one half (rounding), capped at the top code. */

static float legacy_symmetric(const float *x, int bits, uint8_t q[32])
{
    float amax, ext = signed_extreme(x, 32, &amax);
    int half = 1 << (bits - 1), top = 2 * half - 1;
    float d = ext / (float)-half, id = d ? 1.0f / d : 0.0f;
    for (int e = 0; e < 32; e++) {
        int c = trunc_byte(x[e] * id + ((float)half + 0.5f));
        q[e] = (uint8_t)(c < top ? c : top);
    }
    return d;
}

static float legacy_affine(const float *x, int bits, uint8_t q[32], float *minp)
{
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int e = 0; e < 32; e++) {
        if (x[e] < lo) lo = x[e];
        if (x[e] > hi) hi = x[e];
    }
    int top = (1 << bits) - 1;
    float d = (hi - lo) / (float)top, id = d ? 1.0f / d : 0.0f;
    /* (x - lo) id stays within [0, top] (or is inf/NaN, giving 0), so the
     * cap only ever bites for garbage; it keeps the code in its bits */
    for (int e = 0; e < 32; e++) {
        int c = trunc_byte((x[e] - lo) * id + 0.5f);
        q[e] = (uint8_t)(c < top ? c : top);
    }
    *minp = lo;
    return d;
}

/* low nibbles into qs, the fifth bits (if qh) into a 32-bit little-endian mask */
static void legacy_pack(const uint8_t q[32], uint8_t qs[16], uint8_t *qh)
{
    pack_nibbles(q, qs, 32, 16);
    if (!qh) return;
    memset(qh, 0, 4);
    for (int e = 0; e < 32; e++) qh[e / 8] |= (uint8_t)(((q[e] >> 4) & 1) << (e % 8));
}

static inline int legacy_code(const uint8_t qs[16], const uint8_t *qh, int e)
{
    int c = get_nibble(qs, e, 16);
    return qh ? c | ((qh[e / 8] >> (e % 8)) & 1) << 4 : c;
}

static void quantize_q4_0(const float *x, void *dst, int64_t nb)
{
    lm_block_q4_0 *b = dst;
    uint8_t q[32];
    for (int64_t i = 0; i < nb; i++, x += 32) {
        b[i].d = f_half(legacy_symmetric(x, 4, q));
        legacy_pack(q, b[i].qs, NULL);
    }
}

static void quantize_q5_0(const float *x, void *dst, int64_t nb)
{
    lm_block_q5_0 *b = dst;
    uint8_t q[32];
    for (int64_t i = 0; i < nb; i++, x += 32) {
        b[i].d = f_half(legacy_symmetric(x, 5, q));
        legacy_pack(q, b[i].qs, b[i].qh);
    }
}

static void quantize_q4_1(const float *x, void *dst, int64_t nb)
{
    lm_block_q4_1 *b = dst;
    uint8_t q[32];
    float mn;
    for (int64_t i = 0; i < nb; i++, x += 32) {
        b[i].d = f_half(legacy_affine(x, 4, q, &mn));
        b[i].m = f_half(mn);
        legacy_pack(q, b[i].qs, NULL);
    }
}

static void quantize_q5_1(const float *x, void *dst, int64_t nb)
{
    lm_block_q5_1 *b = dst;
    uint8_t q[32];
    float mn;
    for (int64_t i = 0; i < nb; i++, x += 32) {
        b[i].d = f_half(legacy_affine(x, 5, q, &mn));
        b[i].m = f_half(mn);
        legacy_pack(q, b[i].qs, b[i].qh);
    }
}

/* Q8_0: d = amax / 127, codes round to nearest (half away from zero). */
static void quantize_q8_0(const float *x, void *dst, int64_t nb)
{
    lm_block_q8_0 *b = dst;
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float amax = 0;
        for (int e = 0; e < 32; e++) amax = fabsf(x[e]) > amax ? fabsf(x[e]) : amax;
        float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        b[i].d = f_half(d);
        for (int e = 0; e < 32; e++) b[i].qs[e] = (int8_t)trunc_byte(roundf(x[e] * id));
    }
}

/* ---- the searches that pick a K-quant sub-block's scale ---- */

/* Codes l = round(iscale x) in [-nmax, nmax - 1] for n elements (into L when
 * given) and the sums a least-squares scale needs, weighting each element by
 * x^2 so that the large values, which dominate a matmul, fit best. */
static void signed_sums(const float *x, int n, int nmax, float iscale, int8_t *L, float *slx, float *sl2)
{
    float sx = 0, s2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(round_even(iscale * x[i]), -nmax, nmax - 1);
        if (L) L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sx += w * x[i] * (float)l;
        s2 += w * (float)l * (float)l;
    }
    *slx = sx;
    *sl2 = s2;
}

/* Q6_K's sub-blocks: with codes fixed, the best scale is sum w x l / sum w l^2
 * and the error falls as (sum w x l)^2 / sum w l^2 grows.  Try the scale
 * that puts the extreme element on -nmax and 18 around it (nmax +- 0.1 k
 * steps), keep the best.  L gets l + nmax; returns the scale. */
static float fit_signed_scale(const float *x, int n, int nmax, uint8_t *L)
{
    float amax, ext = signed_extreme(x, n, &amax);
    if (amax < TINY_GROUP) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    int8_t cur[32], trial[32];
    float slx, sl2;
    signed_sums(x, n, nmax, (float)-nmax / ext, cur, &slx, &sl2);
    float scale = sl2 ? slx / sl2 : 0.0f, best = scale * slx;
    for (int k = -9; k <= 9; k++) {
        if (!k) continue;
        signed_sums(x, n, nmax, -((float)nmax + 0.1f * (float)k) / ext, trial, &slx, &sl2);
        if (sl2 > 0 && slx * slx > best * sl2) {
            memcpy(cur, trial, (size_t)n);
            scale = slx / sl2;
            best = scale * slx;
        }
    }
    for (int i = 0; i < n; i++) L[i] = (uint8_t)(cur[i] + nmax);
    return scale;
}

/* Q3_K's sub-blocks: start like fit_signed_scale's first guess, then move
 * one code at a time to the value its neighbours' fit asks for, keeping a
 * move when it raises (sum w x l)^2 / sum w l^2; at most five sweeps. */
static float fit_q3_scale(const float *x, int n, int nmax, uint8_t *L)
{
    float amax, ext = signed_extreme(x, n, &amax);
    if (amax < TINY_GROUP) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    int8_t l[16];
    float sumlx, suml2;
    signed_sums(x, n, nmax, (float)-nmax / ext, l, &sumlx, &suml2);
    for (int sweep = 0; sweep < 5; sweep++) {
        int moved = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)l[i];
            if (!(slx > 0)) continue;   /* NaN too */
            float sl2 = suml2 - w * (float)l[i] * (float)l[i];
            int want = clampi(round_even(x[i] * sl2 / slx), -nmax, nmax - 1);
            if (want == l[i]) continue;
            slx += w * x[i] * (float)want;
            sl2 += w * (float)want * (float)want;
            if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                l[i] = (int8_t)want;
                sumlx = slx;
                suml2 = sl2;
                moved++;
            }
        }
        if (!moved) break;
    }
    for (int i = 0; i < n; i++) L[i] = (uint8_t)(l[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* How fit_scale_min searches: scales nmax + rmin + k rdelta (k = 0..steps)
 * over the range, error as squared or absolute difference. */
typedef struct { float rmin, rdelta; int steps; int abs_error; } fit_plan;

static const fit_plan PLAN_Q2 = {-0.5f, 0.1f, 15, 1};
static const fit_plan PLAN_Q4 = {-1.0f, 0.1f, 20, 0};
static const fit_plan PLAN_Q5 = {-0.5f, 0.1f, 15, 0};

static float fit_error(const float *x, const float *w, const uint8_t *L, int n, float scale, float min, int abs_error)
{
    float err = 0;
    for (int i = 0; i < n; i++) {
        float diff = scale * (float)L[i] + min - x[i];
        err += w[i] * (abs_error ? fabsf(diff) : diff * diff);
    }
    return err;
}

/* The affine K-quants' sub-blocks (Q2_K, Q4_K, Q5_K): x ~ scale l + min with
 * l in [0, nmax] and min <= 0.  For each trial scale the codes are fixed by
 * rounding, then scale and min come from weighted least squares (min pinned
 * at 0 if it would come out positive); the trial with the least weighted
 * error wins over the plain max-min fit.  Returns the scale, *negmin = -min. */
static float fit_scale_min(const float *x, const float *w, int n, int nmax, const fit_plan *p,
                           uint8_t *L, float *negmin)
{
    float lo = x[0], hi = x[0], sum_w = w[0], sum_x = w[0] * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (lo > 0) lo = 0;
    if (hi == lo) {
        memset(L, 0, (size_t)n);
        *negmin = -lo;
        return 0.0f;
    }
    float iscale = (float)nmax / (hi - lo), scale = 1 / iscale;
    for (int i = 0; i < n; i++) L[i] = (uint8_t)clampi(round_even(iscale * (x[i] - lo)), 0, nmax);
    float best = fit_error(x, w, L, n, scale, lo, p->abs_error);
    uint8_t trial[32];
    for (int k = 0; k <= p->steps; k++) {
        iscale = (p->rmin + p->rdelta * (float)k + (float)nmax) / (hi - lo);
        float sl = 0, sl2 = 0, sxl = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(round_even(iscale * (x[i] - lo)), 0, nmax);
            trial[i] = (uint8_t)l;
            sl += w[i] * (float)l;
            sl2 += w[i] * (float)l * (float)l;
            sxl += w[i] * (float)l * x[i];
        }
        float det = sum_w * sl2 - sl * sl;
        if (!(det > 0)) continue;
        float s = (sum_w * sxl - sum_x * sl) / det, m = (sl2 * sum_x - sl * sxl) / det;
        if (m > 0) {
            m = 0;
            s = sxl / sl2;
        }
        float err = fit_error(x, w, trial, n, s, m, p->abs_error);
        if (err < best) {
            memcpy(L, trial, (size_t)n);
            best = err;
            scale = s;
            lo = m;
        }
    }
    *negmin = -lo;
    return scale;
}

/* After the block's scales are rounded to their codes, redo each code against
 * the scale the decoder will actually use.  A zero scale keeps the search's
 * codes (they decode to zero anyway). */
static void refit_affine(const float *x, int n, float d, float dm, int top, uint8_t *L)
{
    if (!d) return;
    for (int i = 0; i < n; i++) L[i] = (uint8_t)clampi(round_even((x[i] + dm) / d), 0, top);
}

static void refit_signed(const float *x, int n, float d, int lo, int hi, uint8_t *L)
{
    if (!d) return;
    for (int i = 0; i < n; i++) L[i] = (uint8_t)(clampi(round_even(x[i] / d), lo, hi) - lo);
}

/* ---- the K-quants (256 elements a block) ---- */

/* Q2_K: 16 sub-blocks of 16, 2-bit codes; each sub-block's scale and min
 * are 4-bit multiples of the block's d and dmin. */
static void quantize_q2_K(const float *x, void *dst, int64_t nb)
{
    lm_block_q2_K *b = dst;
    uint8_t L[LM_KBLOCK];
    float w[16], sc[16], mn[16];
    for (int64_t i = 0; i < nb; i++, x += LM_KBLOCK) {
        float max_sc = 0, max_mn = 0;
        for (int j = 0; j < 16; j++) {
            for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * j + l]);
            sc[j] = fit_scale_min(x + 16 * j, w, 16, 3, &PLAN_Q2, L + 16 * j, &mn[j]);
            if (sc[j] > max_sc) max_sc = sc[j];
            if (mn[j] > max_mn) max_mn = mn[j];
        }
        memset(b[i].scales, 0, sizeof b[i].scales);
        b[i].d = f_half(0.0f);
        b[i].dmin = f_half(0.0f);
        if (max_sc > 0) {
            float is = 15.0f / max_sc;
            for (int j = 0; j < 16; j++) b[i].scales[j] = (uint8_t)round_even(is * sc[j]);
            b[i].d = f_half(max_sc / 15.0f);
        }
        if (max_mn > 0) {
            float im = 15.0f / max_mn;
            for (int j = 0; j < 16; j++) b[i].scales[j] |= (uint8_t)(round_even(im * mn[j]) << 4);
            b[i].dmin = f_half(max_mn / 15.0f);
        }
        for (int j = 0; j < 16; j++)
            refit_affine(x + 16 * j, 16, half_f(b[i].d) * (float)(b[i].scales[j] & 15),
                         half_f(b[i].dmin) * (float)(b[i].scales[j] >> 4), 3, L + 16 * j);
        pack_2bit(L, b[i].qs);
    }
}

/* Q3_K: 16 sub-blocks of 16, signed 3-bit codes (2 bits in qs, the third
 * in hmask); signed 6-bit sub-block scales times the block's d. */
static void quantize_q3_K(const float *x, void *dst, int64_t nb)
{
    lm_block_q3_K *b = dst;
    uint8_t L[LM_KBLOCK], code[16] = {0};
    float sc[16];
    for (int64_t i = 0; i < nb; i++, x += LM_KBLOCK) {
        float ext = 0, mag = 0;
        for (int j = 0; j < 16; j++) {
            sc[j] = fit_q3_scale(x + 16 * j, 16, 4, L + 16 * j);
            if (fabsf(sc[j]) > mag) {
                mag = fabsf(sc[j]);
                ext = sc[j];
            }
        }
        memset(code, 0, sizeof code);
        b[i].d = f_half(0.0f);
        if (ext) {
            float is = -32.0f / ext;
            for (int j = 0; j < 16; j++) code[j] = (uint8_t)(clampi(round_even(is * sc[j]), -32, 31) + 32);
            b[i].d = f_half(1 / is);
        }
        pack_scales_q3(code, b[i].scales);
        for (int j = 0; j < 16; j++)
            refit_signed(x + 16 * j, 16, half_f(b[i].d) * (float)(code[j] - 32), -4, 3, L + 16 * j);
        pack_bitplane(L, 2, b[i].hmask);
        pack_2bit(L, b[i].qs);
    }
}

/* Q4_K and Q5_K share everything but the code width: 8 sub-blocks of 32,
 * each fitted with weights |x| + rms(x) (no element ignored, big ones
 * favoured), then 6-bit sub-block scales and mins times d and dmin. */
static void affine_k_block(const float *x, int top, const fit_plan *p, uint16_t *d, uint16_t *dmin,
                           uint8_t scales[12], uint8_t L[LM_KBLOCK])
{
    float w[32], sc[8], mn[8], max_sc = 0, max_mn = 0;
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float sum2 = 0;
        for (int l = 0; l < 32; l++) sum2 += xs[l] * xs[l];
        float rms = sqrtf(sum2 / 32);
        for (int l = 0; l < 32; l++) w[l] = rms + fabsf(xs[l]);
        sc[j] = fit_scale_min(xs, w, 32, top, p, L + 32 * j, &mn[j]);
        if (sc[j] > max_sc) max_sc = sc[j];
        if (mn[j] > max_mn) max_mn = mn[j];
    }
    float is = max_sc > 0 ? 63.0f / max_sc : 0.0f, im = max_mn > 0 ? 63.0f / max_mn : 0.0f;
    uint8_t qs[8], qm[8];
    for (int j = 0; j < 8; j++) {
        /* the code is taken as a byte first, then capped: as the reference does */
        uint8_t a = (uint8_t)round_even(is * sc[j]), m = (uint8_t)round_even(im * mn[j]);
        qs[j] = a < 63 ? a : 63;
        qm[j] = m < 63 ? m : 63;
    }
    pack_scales6(qs, qm, scales);
    *d = f_half(max_sc / 63.0f);
    *dmin = f_half(max_mn / 63.0f);
    for (int j = 0; j < 8; j++)
        refit_affine(x + 32 * j, 32, half_f(*d) * (float)qs[j], half_f(*dmin) * (float)qm[j], top, L + 32 * j);
}

static void quantize_q4_K(const float *x, void *dst, int64_t nb)
{
    lm_block_q4_K *b = dst;
    uint8_t L[LM_KBLOCK];
    for (int64_t i = 0; i < nb; i++, x += LM_KBLOCK) {
        affine_k_block(x, 15, &PLAN_Q4, &b[i].d, &b[i].dmin, b[i].scales, L);
        pack_nibbles(L, b[i].qs, LM_KBLOCK, 32);
    }
}

static void quantize_q5_K(const float *x, void *dst, int64_t nb)
{
    lm_block_q5_K *b = dst;
    uint8_t L[LM_KBLOCK];
    for (int64_t i = 0; i < nb; i++, x += LM_KBLOCK) {
        affine_k_block(x, 31, &PLAN_Q5, &b[i].d, &b[i].dmin, b[i].scales, L);
        pack_nibbles(L, b[i].qs, LM_KBLOCK, 32);
        pack_bitplane(L, 4, b[i].qh);
    }
}

/* Q6_K: 16 sub-blocks of 16, signed 6-bit codes (nibble in ql, top two bits
 * in qh), signed 8-bit sub-block scales times d. */
static void quantize_q6_K(const float *x, void *dst, int64_t nb)
{
    lm_block_q6_K *b = dst;
    uint8_t L[LM_KBLOCK], hi[LM_KBLOCK];
    float sc[16];
    for (int64_t i = 0; i < nb; i++, x += LM_KBLOCK) {
        float ext = 0, mag = 0;
        for (int j = 0; j < 16; j++) {
            sc[j] = fit_signed_scale(x + 16 * j, 16, 32, L + 16 * j);
            if (fabsf(sc[j]) > mag) {
                mag = fabsf(sc[j]);
                ext = sc[j];
            }
        }
        if (mag < TINY_GROUP) {
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        float is = -128.0f / ext;
        b[i].d = f_half(1 / is);
        for (int j = 0; j < 16; j++) {
            int c = round_even(is * sc[j]);
            b[i].scales[j] = (int8_t)(c < 127 ? c : 127);
            refit_signed(x + 16 * j, 16, half_f(b[i].d) * (float)b[i].scales[j], -32, 31, L + 16 * j);
        }
        pack_nibbles(L, b[i].ql, LM_KBLOCK, 64);
        for (int e = 0; e < LM_KBLOCK; e++) hi[e] = L[e] >> 4;
        pack_2bit(hi, b[i].qh);
    }
}

/* Q8_K: the activations' format for the K-quant dots: d = extreme / -127
 * in f32, and per-16 sums of the codes so a dot can subtract a minimum
 * without touching every element again. */
static void quantize_q8_K(const float *x, void *dst, int64_t nb)
{
    lm_block_q8_K *b = dst;
    for (int64_t i = 0; i < nb; i++, x += LM_KBLOCK) {
        float amax, ext = signed_extreme(x, LM_KBLOCK, &amax);
        memset(&b[i], 0, sizeof b[i]);
        if (!amax) continue;
        float is = -127.0f / ext;
        for (int e = 0; e < LM_KBLOCK; e++) {
            int c = round_even(is * x[e]);
            b[i].qs[e] = (int8_t)(c < 127 ? c : 127);
            b[i].bsums[e / 16] = (int16_t)(b[i].bsums[e / 16] + b[i].qs[e]);
        }
        b[i].d = 1 / is;
    }
}

/* ---- blocks as integers (lm_quant_unpack) ---- */

static void unpack_legacy(const uint8_t qs[16], const uint8_t *qh, int offset, lm_qblock *q)
{
    for (int e = 0; e < 32; e++) q->code[e] = (int8_t)(legacy_code(qs, qh, e) - offset);
}

/* the affine K-quants' minimums are subtracted: min[] holds them positive */
static void unpack_affine_k(const uint8_t scales[12], const uint8_t *qs, const uint8_t *qh, lm_qblock *q)
{
    uint8_t sc[8], mn[8];
    lm_k_scales6_unpack(scales, sc, mn);
    for (int j = 0; j < 8; j++) {
        q->scale[j] = sc[j];
        q->min[j] = mn[j];
    }
    for (int e = 0; e < LM_KBLOCK; e++) q->code[e] = (int8_t)(get_nibble(qs, e, 32) | (qh ? get_bit(qh, e) << 4 : 0));
}

void lm_quant_unpack(lm_dtype t, const void *block, lm_qblock *q)
{
    q->n = (int)lm_dtype_block(t);
    q->sub = q->n;
    q->scale[0] = 1;
    q->min[0] = -1;
    q->dmin = 0;
    q->has_min = 0;
    switch (t) {
    case LM_Q4_0: { const lm_block_q4_0 *b = block; q->d = half_f(b->d); unpack_legacy(b->qs, NULL, 8, q); break; }
    case LM_Q5_0: { const lm_block_q5_0 *b = block; q->d = half_f(b->d); unpack_legacy(b->qs, b->qh, 16, q); break; }
    case LM_Q4_1: { const lm_block_q4_1 *b = block; q->d = half_f(b->d); q->dmin = half_f(b->m); q->has_min = 1;
                    unpack_legacy(b->qs, NULL, 0, q); break; }
    case LM_Q5_1: { const lm_block_q5_1 *b = block; q->d = half_f(b->d); q->dmin = half_f(b->m); q->has_min = 1;
                    unpack_legacy(b->qs, b->qh, 0, q); break; }
    case LM_Q8_0: { const lm_block_q8_0 *b = block; q->d = half_f(b->d); memcpy(q->code, b->qs, 32); break; }
    case LM_Q8_K: { const lm_block_q8_K *b = block; q->d = b->d; memcpy(q->code, b->qs, LM_KBLOCK); break; }
    case LM_Q2_K: {
        const lm_block_q2_K *b = block;
        q->sub = 16;
        q->d = half_f(b->d);
        q->dmin = half_f(b->dmin);
        q->has_min = 1;
        for (int j = 0; j < 16; j++) {
            q->scale[j] = b->scales[j] & 15;
            q->min[j] = b->scales[j] >> 4;
        }
        for (int e = 0; e < LM_KBLOCK; e++) q->code[e] = (int8_t)get_2bit(b->qs, e);
        break;
    }
    case LM_Q3_K: {
        const lm_block_q3_K *b = block;
        q->sub = 16;
        q->d = half_f(b->d);
        for (int j = 0; j < 16; j++) q->scale[j] = (int16_t)unpack_scale_q3(b->scales, j);
        /* the hmask bit set means the code is 0..3, clear means -4..-1 */
        for (int e = 0; e < LM_KBLOCK; e++) q->code[e] = (int8_t)(get_2bit(b->qs, e) - (get_bit(b->hmask, e) ? 0 : 4));
        break;
    }
    case LM_Q4_K: case LM_Q5_K: {
        const lm_block_q4_K *b4 = block;
        const lm_block_q5_K *b5 = block;
        q->sub = 32;
        q->has_min = 1;
        if (t == LM_Q4_K) {
            q->d = half_f(b4->d);
            q->dmin = half_f(b4->dmin);
            unpack_affine_k(b4->scales, b4->qs, NULL, q);
        } else {
            q->d = half_f(b5->d);
            q->dmin = half_f(b5->dmin);
            unpack_affine_k(b5->scales, b5->qs, b5->qh, q);
        }
        break;
    }
    case LM_Q6_K: {
        const lm_block_q6_K *b = block;
        q->sub = 16;
        q->d = half_f(b->d);
        for (int j = 0; j < 16; j++) q->scale[j] = b->scales[j];
        for (int e = 0; e < LM_KBLOCK; e++) q->code[e] = (int8_t)((get_nibble(b->ql, e, 64) | get_2bit(b->qh, e) << 4) - 32);
        break;
    }
    default: break;
    }
}

/* Every type decodes the same way once unpacked; the products are taken in
 * the format's order, (d * scale) * code, so the floats are the reference
 * dequantizer's bit for bit. */
static void dequantize_blocks(lm_dtype t, const void *src, float *y, int64_t nb)
{
    size_t bytes = lm_dtype_block_bytes(t);
    lm_qblock q;
    for (int64_t i = 0; i < nb; i++) {
        lm_quant_unpack(t, (const unsigned char *)src + (size_t)i * bytes, &q);
        for (int s = 0; s < q.n / q.sub; s++) {
            float ds = q.d * (float)q.scale[s], ms = q.dmin * (float)q.min[s];
            const int8_t *c = q.code + s * q.sub;
            if (q.has_min)
                for (int e = 0; e < q.sub; e++) *y++ = ds * (float)c[e] - ms;
            else
                for (int e = 0; e < q.sub; e++) *y++ = ds * (float)c[e];
        }
    }
}

/* ---- the public face ---- */

/* n blocks of floats into blocks */
typedef void (*quant_fn)(const float *x, void *dst, int64_t nblocks);

static const quant_fn quantizers[] = {
    quantize_q4_0, quantize_q4_1, quantize_q5_0, quantize_q5_1, quantize_q8_0,
    quantize_q2_K, quantize_q3_K, quantize_q4_K, quantize_q5_K, quantize_q6_K, quantize_q8_K,
};
_Static_assert(sizeof quantizers / sizeof quantizers[0] == LM_DTYPE_END - LM_Q4_0, "one entry per quantized dtype");

static lm_status check(const char *op, lm_dtype t, int64_t n)
{
    if (!lm_dtype_is_quant(t))
        return lm_error_set(LM_ERR_DTYPE, "%s: %s is not a quantized dtype", op, lm_dtype_name(t));
    int64_t b = lm_dtype_block(t);
    if (n < 0 || n % b)
        return lm_error_set(LM_ERR_SHAPE, "%s: %s stores blocks of %lld elements; %lld elements "
                            "are not whole blocks", op, lm_dtype_name(t), (long long)b, (long long)n);
    return LM_OK;
}

lm_status lm_quantize_row(lm_dtype t, const float *x, void *dst, int64_t n)
{
    lm_status st = check("quantize", t, n);
    if (st == LM_OK && n) quantizers[t - LM_Q4_0](x, dst, n / lm_dtype_block(t));
    return st;
}

lm_status lm_dequantize_row(lm_dtype t, const void *src, float *y, int64_t n)
{
    lm_status st = check("dequantize", t, n);
    if (st == LM_OK && n) dequantize_blocks(t, src, y, n / lm_dtype_block(t));
    return st;
}

lm_array *lm_quantize(lm_array *a, lm_dtype t)
{
    if (!a) return NULL;
    if (!lm_dtype_is_quant(t)) {
        lm_error_set(LM_ERR_DTYPE, "quantize: %s is not a quantized dtype (q4_0 q4_1 q5_0 q5_1 q8_0 "
                     "q2_k q3_k q4_k q5_k q6_k q8_k)", lm_dtype_name(t));
        return NULL;
    }
    if (!lm_dtype_is_float(a->dtype)) {
        lm_error_set(LM_ERR_DTYPE, "quantize: to %s needs a float tensor, got %s", lm_dtype_name(t),
                     lm_dtype_name(a->dtype));
        return NULL;
    }
    int64_t b = lm_dtype_block(t), last = a->ndim ? a->shape[a->ndim - 1] : 1;
    if (a->ndim == 0 || last % b) {
        lm_error_set(LM_ERR_SHAPE, "quantize: %s stores blocks of %lld along the last dimension; "
                     "the last dimension is %lld", lm_dtype_name(t), (long long)b, (long long)last);
        return NULL;
    }
    float *x = malloc((size_t)(a->size ? a->size : 1) * sizeof *x);
    void *q = malloc(lm_dtype_nbytes(t, a->size) + 1);
    lm_array *r = NULL;
    if (!x || !q) lm_error_set(LM_ERR_NOMEM, "quantize: out of host memory");
    else if (lm_array_read(a, x, LM_F32) == LM_OK) {
        /* ggml's reference quantizers round huge values through an int:
         * refuse what they cannot represent instead of computing garbage */
        int64_t i = 0;
        while (i < a->size && isfinite(x[i])) i++;
        if (i < a->size)
            lm_error_set(LM_ERR_ARG, "quantize: element %lld is %g; only finite values quantize", (long long)i, x[i]);
        else if (lm_quantize_row(t, x, q, a->size) == LM_OK) {
            /* the block scales are f16 (GGUF's, as ggml writes them): a block
             * of values too large for them would dequantize to inf or NaN.
             * Refused, naming the first such element (ggml writes it). */
            float *y = x;
            lm_dequantize_row(t, q, y, a->size);
            i = 0;
            while (i < a->size && isfinite(y[i])) i++;
            if (i < a->size) {
                int64_t b0 = i / b * b;
                lm_array_read(a, x, LM_F32);
                float amax = 0;
                for (int64_t k = b0; k < b0 + b; k++) amax = fmaxf(amax, fabsf(x[k]));
                lm_error_set(LM_ERR_ARG, "quantize: %s: the block of element %lld holds |x| up to %g, "
                             "beyond what its f16 block scale can represent (it would dequantize to "
                             "%s); scale the tensor down first", lm_dtype_name(t), (long long)i,
                             (double)amax, isnan(y[i]) ? "NaN" : "inf");
            } else {
                r = lm_from_data(a->ndim, a->shape, t, q, a->device);
            }
        }
    }
    free(x);
    free(q);
    return r;
}

/* A node (op dequantize) rather than a decode on the host, so that a tensor
 * on a GPU decodes there (backends/vulkan/quant.c) and the CPU runs
 * lm_dequantize_row (backends/cpu/nn.c). */
lm_array *lm_dequantize(lm_array *a)
{
    if (!a) return NULL;
    if (!lm_dtype_is_quant(a->dtype)) return lm_cast(a, LM_F32);
    if (!lm_array_is_contiguous(a) && a->size > 0) {
        /* w.T (lm_view_new's one quantized view): w's values, transposed.
         * Anything else (an empty tensor's strides need not look
         * contiguous either way: fuzz_gguf's shape [2^38, 0] recursed
         * until the stack ran out) is refused, never recursed on. */
        lm_array *w = a->ndim == 2 ? lm_transpose(a, 0, 1) : NULL;
        if (!w || !lm_array_is_contiguous(w)) {
            lm_array_release(w);
            char sh[128];
            lm_error_set(LM_ERR_UNSUPPORTED, "dequantize: a %s view of shape %s that is not w.T",
                         lm_dtype_name(a->dtype), lm_shape_str(sh, sizeof sh, a->ndim, a->shape));
            return NULL;
        }
        lm_array *d = lm_dequantize(w);
        lm_array *r = lm_transpose(d, 0, 1);
        lm_array_release(w);
        lm_array_release(d);
        return r;
    }
    return lm_node_new(LM_OP_DEQUANTIZE, LM_F32, a->ndim, a->shape, 1, &a, NULL, a->device);
}
