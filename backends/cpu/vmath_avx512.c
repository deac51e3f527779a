/* vmath_avx512.c - the vmath table for AVX-512 (F, with AVX2/FMA/F16C):
 * 16 lanes (compiled with -mavx512f and friends; see module.mk). */
#include <immintrin.h>

#define VM_TABLE lm_vmath_avx512
#define VM_NAME "avx512"
#define VF __m512
#define VW 16
#define VM_SL(f) Sleef_##f##f16_u10avx512f
#define VM_SL15(f) Sleef_##f##f16_u15avx512f   /* erfc: SLEEF has only the 1.5-ulp form */
#define VM_SL05(f) Sleef_##f##f16_u05avx512f   /* hypot: SLEEF has no 1.0-ulp form */
#define VLOAD(p) _mm512_loadu_ps(p)
#define VSTORE(p, v) _mm512_storeu_ps((p), (v))
#define VSTREAM(p, v) _mm512_stream_ps((p), (v))
#define VSQRT(v) _mm512_sqrt_ps(v)
#define VM_F16C
#define VH2F(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p)))
#define VF2H(p, v) _mm256_storeu_si256((__m256i *)(void *)(p), _mm512_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT))

#include "vmath_isa.h"
