/* dtype.c - dtype facts, promotion and conversions. */
#include <math.h>
#include <string.h>
#include <strings.h>
#include "dtype.h"

static const struct { const char *name; size_t size; } info[LM_DTYPE_COUNT] = {
    [LM_F32] = {"f32", 4},  [LM_F16] = {"f16", 2}, [LM_BF16] = {"bf16", 2},
    [LM_F64] = {"f64", 8},  [LM_I8] = {"i8", 1},   [LM_U8] = {"u8", 1},
    [LM_I16] = {"i16", 2},  [LM_I32] = {"i32", 4}, [LM_I64] = {"i64", 8},
    [LM_BOOL] = {"bool", 1},
};

/* ggml's block formats (core/quant.h): elements and bytes per block */
static const struct { const char *name; int64_t block; size_t bytes; } qinfo[LM_DTYPE_END - LM_Q4_0] = {
    [LM_Q4_0 - LM_Q4_0] = {"q4_0", 32, 18},  [LM_Q4_1 - LM_Q4_0] = {"q4_1", 32, 20},
    [LM_Q5_0 - LM_Q4_0] = {"q5_0", 32, 22},  [LM_Q5_1 - LM_Q4_0] = {"q5_1", 32, 24},
    [LM_Q8_0 - LM_Q4_0] = {"q8_0", 32, 34},  [LM_Q2_K - LM_Q4_0] = {"q2_k", 256, 84},
    [LM_Q3_K - LM_Q4_0] = {"q3_k", 256, 110}, [LM_Q4_K - LM_Q4_0] = {"q4_k", 256, 144},
    [LM_Q5_K - LM_Q4_0] = {"q5_k", 256, 176}, [LM_Q6_K - LM_Q4_0] = {"q6_k", 256, 210},
    [LM_Q8_K - LM_Q4_0] = {"q8_k", 256, 292},
};

size_t lm_dtype_size(lm_dtype t) { return (unsigned)t < LM_DTYPE_COUNT ? info[t].size : 0; }
bool lm_dtype_is_quant(lm_dtype t) { return t >= LM_Q4_0 && t < LM_DTYPE_END; }
const char *lm_dtype_name(lm_dtype t)
{
    if ((unsigned)t < LM_DTYPE_COUNT) return info[t].name;
    return lm_dtype_is_quant(t) ? qinfo[t - LM_Q4_0].name : "?";
}
int64_t lm_dtype_block(lm_dtype t) { return lm_dtype_is_quant(t) ? qinfo[t - LM_Q4_0].block : 1; }
size_t lm_dtype_block_bytes(lm_dtype t)
{
    return lm_dtype_is_quant(t) ? qinfo[t - LM_Q4_0].bytes : lm_dtype_size(t);
}
size_t lm_dtype_nbytes(lm_dtype t, int64_t n)
{
    return n <= 0 ? 0 : (size_t)(n / lm_dtype_block(t)) * lm_dtype_block_bytes(t);
}

bool lm_dtype_from_name_any(const char *name, lm_dtype *out)
{
    if (lm_dtype_from_name(name, out)) return true;
    for (int t = LM_Q4_0; name && t < LM_DTYPE_END; t++)
        if (!strcasecmp(name, qinfo[t - LM_Q4_0].name)) { *out = (lm_dtype)t; return true; }
    return false;
}

bool lm_dtype_from_name(const char *name, lm_dtype *out)
{
    static const struct { const char *alias; lm_dtype t; } aliases[] = {
        {"float32", LM_F32}, {"float", LM_F32}, {"float16", LM_F16}, {"half", LM_F16},
        {"bfloat16", LM_BF16}, {"float64", LM_F64}, {"double", LM_F64},
        {"int8", LM_I8}, {"uint8", LM_U8}, {"int16", LM_I16}, {"int32", LM_I32},
        {"int", LM_I32}, {"int64", LM_I64}, {"long", LM_I64}, {"boolean", LM_BOOL},
    };
    if (!name) return false;
    for (int t = 0; t < LM_DTYPE_COUNT; t++)
        if (!strcmp(name, info[t].name)) { *out = (lm_dtype)t; return true; }
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (!strcmp(name, aliases[i].alias)) { *out = aliases[i].t; return true; }
    return false;
}

bool lm_dtype_is_float(lm_dtype t) { return t == LM_F32 || t == LM_F16 || t == LM_BF16 || t == LM_F64; }
bool lm_dtype_is_int(lm_dtype t) { return t >= LM_I8 && t <= LM_I64; }
bool lm_dtype_is_signed(lm_dtype t) { return lm_dtype_is_float(t) || (lm_dtype_is_int(t) && t != LM_U8); }

/* integer rank by width; u8 is special-cased */
static int int_bits(lm_dtype t)
{
    switch (t) {
    case LM_I8: case LM_U8: return 8;
    case LM_I16: return 16;
    case LM_I32: return 32;
    default: return 64;
    }
}

static lm_dtype signed_of_bits(int bits)
{
    return bits <= 8 ? LM_I8 : bits <= 16 ? LM_I16 : bits <= 32 ? LM_I32 : LM_I64;
}

lm_dtype lm_dtype_promote(lm_dtype a, lm_dtype b)
{
    if (a == b) return a;
    if (a == LM_BOOL) return b;
    if (b == LM_BOOL) return a;
    if (a == LM_F64 || b == LM_F64) return LM_F64;
    bool fa = lm_dtype_is_float(a), fb = lm_dtype_is_float(b);
    if (fa && fb) return LM_F32;      /* f32 with a half type, or f16 with bf16 */
    if (fa) return a;
    if (fb) return b;
    if (a == LM_U8) return signed_of_bits(int_bits(b) > 8 ? int_bits(b) : 16);
    if (b == LM_U8) return signed_of_bits(int_bits(a) > 8 ? int_bits(a) : 16);
    return int_bits(a) >= int_bits(b) ? a : b;
}

lm_dtype lm_dtype_promote_weak(lm_dtype tensor, lm_dtype scalar)
{
    if (lm_dtype_is_float(tensor)) return tensor;
    if (lm_dtype_is_float(scalar)) return LM_F32;
    if (lm_dtype_is_int(tensor)) return tensor;
    /* bool tensor */
    return scalar == LM_BOOL ? LM_BOOL : LM_I64;
}

uint16_t lm_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));
    int32_t e = (int32_t)exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10) return (uint16_t)sign;
        man |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) half++;   /* may carry into exp: correct */
    return (uint16_t)(sign | half);
}

float lm_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t x;
    if (exp == 0x1f) x = sign | 0x7f800000u | (man << 13);
    else if (exp == 0) {
        if (!man) x = sign;
        else {
            int e = -1;
            do { e++; man <<= 1; } while (!(man & 0x400u));
            x = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else x = sign | ((exp + 127 - 15) << 23) | (man << 13);
    float f;
    memcpy(&f, &x, 4);
    return f;
}

uint16_t lm_f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

float lm_bf16_to_f32(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* Float to integer: truncate, saturate, NaN -> 0 (C leaves these undefined). */
static int64_t sat_i64(double v, double lo, double hi)
{
    if (v != v) return 0;
    if (v <= lo) return (int64_t)lo;
    if (v >= hi) return (int64_t)hi;
    return (int64_t)v;
}

static double load_f64(const void *p, lm_dtype t, size_t i)
{
    switch (t) {
    case LM_F32: return ((const float *)p)[i];
    case LM_F16: return lm_f16_to_f32(((const uint16_t *)p)[i]);
    case LM_BF16: return lm_bf16_to_f32(((const uint16_t *)p)[i]);
    case LM_F64: return ((const double *)p)[i];
    case LM_I8: return ((const int8_t *)p)[i];
    case LM_U8: return ((const uint8_t *)p)[i];
    case LM_I16: return ((const int16_t *)p)[i];
    case LM_I32: return ((const int32_t *)p)[i];
    case LM_I64: return (double)((const int64_t *)p)[i];
    case LM_BOOL: return ((const uint8_t *)p)[i] != 0;
    default: return 0;
    }
}

static int64_t load_i64(const void *p, lm_dtype t, size_t i)
{
    switch (t) {
    case LM_I8: return ((const int8_t *)p)[i];
    case LM_U8: return ((const uint8_t *)p)[i];
    case LM_I16: return ((const int16_t *)p)[i];
    case LM_I32: return ((const int32_t *)p)[i];
    case LM_I64: return ((const int64_t *)p)[i];
    case LM_BOOL: return ((const uint8_t *)p)[i] != 0;
    default: return sat_i64(load_f64(p, t, i), -9223372036854775808.0, 9223372036854774784.0);
    }
}

static void store_int(void *p, lm_dtype t, size_t i, int64_t v)
{
    /* integer to narrower integer wraps (two's complement), as numpy/torch */
    switch (t) {
    case LM_I8: ((int8_t *)p)[i] = (int8_t)(uint8_t)v; break;
    case LM_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case LM_I16: ((int16_t *)p)[i] = (int16_t)(uint16_t)v; break;
    case LM_I32: ((int32_t *)p)[i] = (int32_t)(uint32_t)v; break;
    case LM_I64: ((int64_t *)p)[i] = v; break;
    case LM_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: break;
    }
}

static void store_f64(void *p, lm_dtype t, size_t i, double v)
{
    switch (t) {
    case LM_F32: ((float *)p)[i] = (float)v; break;
    case LM_F16: ((uint16_t *)p)[i] = lm_f32_to_f16((float)v); break;
    case LM_BF16: ((uint16_t *)p)[i] = lm_f32_to_bf16((float)v); break;
    case LM_F64: ((double *)p)[i] = v; break;
    case LM_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    case LM_I8: store_int(p, t, i, sat_i64(v, -128, 127)); break;
    case LM_U8: store_int(p, t, i, sat_i64(v, 0, 255)); break;
    case LM_I16: store_int(p, t, i, sat_i64(v, -32768, 32767)); break;
    case LM_I32: store_int(p, t, i, sat_i64(v, -2147483648.0, 2147483647.0)); break;
    case LM_I64: store_int(p, t, i, sat_i64(v, -9223372036854775808.0, 9223372036854774784.0)); break;
    default: break;
    }
}

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
/* F16C converts 8 halves per instruction with IEEE round-to-nearest-even,
 * the same results as the portable code above; used when the CPU has it. */
static int has_f16c(void)
{
    static int cached = -1;
    if (cached < 0) {
        unsigned a, b, c, d;
        cached = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) && (c & (1u << 28)) && (c & (1u << 27));
    }
    return cached;
}

__attribute__((target("avx,f16c"))) static void f16_to_f32_fast(float *d, const uint16_t *s, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
    for (; i < n; i++) d[i] = lm_f16_to_f32(s[i]);
}

__attribute__((target("avx,f16c"))) static void f32_to_f16_fast(uint16_t *d, const float *s, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) d[i] = lm_f32_to_f16(s[i]);
}
#else
static int has_f16c(void) { return 0; }
static void f16_to_f32_fast(float *d, const uint16_t *s, size_t n) { (void)d; (void)s; (void)n; }
static void f32_to_f16_fast(uint16_t *d, const float *s, size_t n) { (void)d; (void)s; (void)n; }
#endif

void lm_convert(void *dst, lm_dtype dt, const void *src, lm_dtype st, size_t n)
{
    if (dt == st) { memcpy(dst, src, n * lm_dtype_size(dt)); return; }
    /* the hot pairs get direct loops */
    if (dt == LM_F32 && st == LM_F16 && has_f16c()) {
        f16_to_f32_fast(dst, src, n);
    } else if (dt == LM_F16 && st == LM_F32 && has_f16c()) {
        f32_to_f16_fast(dst, src, n);
    } else if (dt == LM_F32 && st == LM_F16) {
        for (size_t i = 0; i < n; i++) ((float *)dst)[i] = lm_f16_to_f32(((const uint16_t *)src)[i]);
    } else if (dt == LM_F32 && st == LM_BF16) {
        for (size_t i = 0; i < n; i++) ((float *)dst)[i] = lm_bf16_to_f32(((const uint16_t *)src)[i]);
    } else if (dt == LM_F16 && st == LM_F32) {
        for (size_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = lm_f32_to_f16(((const float *)src)[i]);
    } else if (dt == LM_BF16 && st == LM_F32) {
        for (size_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = lm_f32_to_bf16(((const float *)src)[i]);
    } else if (dt == LM_F32 && st == LM_F64) {
        for (size_t i = 0; i < n; i++) ((float *)dst)[i] = (float)((const double *)src)[i];
    } else if (dt == LM_F64 && st == LM_F32) {
        for (size_t i = 0; i < n; i++) ((double *)dst)[i] = ((const float *)src)[i];
    } else if (!lm_dtype_is_float(dt) && !lm_dtype_is_float(st)) {
        for (size_t i = 0; i < n; i++) store_int(dst, dt, i, load_i64(src, st, i));
    } else {
        for (size_t i = 0; i < n; i++) store_f64(dst, dt, i, load_f64(src, st, i));
    }
}
