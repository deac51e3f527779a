/* vmath_avx2.c - the vmath table for AVX2 + FMA + F16C: 8 lanes (compiled
 * with -mavx2 -mfma -mf16c; see module.mk). */
#include <immintrin.h>

#define VM_TABLE lm_vmath_avx2
#define VM_NAME "avx2"
#define VF __m256
#define VW 8
#define VM_SL(f) Sleef_##f##f8_u10avx2
#define VM_SL15(f) Sleef_##f##f8_u15avx2   /* erfc: SLEEF has only the 1.5-ulp form */
#define VM_SL05(f) Sleef_##f##f8_u05avx2   /* hypot: SLEEF has no 1.0-ulp form */
#define VLOAD(p) _mm256_loadu_ps(p)
#define VSTORE(p, v) _mm256_storeu_ps((p), (v))
#define VSTREAM(p, v) _mm256_stream_ps((p), (v))
#define VSQRT(v) _mm256_sqrt_ps(v)
#define VM_F16C
#define VH2F(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p)))
#define VF2H(p, v) _mm_storeu_si128((__m128i *)(void *)(p), _mm256_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT))

#include "vmath_isa.h"
