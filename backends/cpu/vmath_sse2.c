/* vmath_sse2.c - the vmath table for baseline x86-64: 4 lanes of SSE2
 * (compiled with -msse2 only; see module.mk). */
#include <immintrin.h>

#define VM_TABLE lm_vmath_sse2
#define VM_NAME "sse2"
#define VF __m128
#define VW 4
#define VM_SL(f) Sleef_##f##f4_u10sse2
#define VM_SL15(f) Sleef_##f##f4_u15sse2   /* erfc: SLEEF has only the 1.5-ulp form */
#define VM_SL05(f) Sleef_##f##f4_u05sse2   /* hypot: SLEEF has no 1.0-ulp form */
#define VLOAD(p) _mm_loadu_ps(p)
#define VSTORE(p, v) _mm_storeu_ps((p), (v))
#define VSTREAM(p, v) _mm_stream_ps((p), (v))
#define VSQRT(v) _mm_sqrt_ps(v)

#include "vmath_isa.h"
