/* dtype.h - element types, promotion and exact half-precision conversion.
 *
 * Promotion (lm_dtype_promote) follows PyTorch's table:
 *   bool < integers < floats; two integers promote to the smallest type
 *   holding both (u8 with a signed type goes to the next signed size, u8+i64
 *   -> i64); integer with float -> the float; f16 with bf16 -> f32; any with
 *   f64 -> f64.
 * Weak scalars (Lua numbers) do not widen a tensor's type within its kind:
 *   f16 tensor + 2.5 -> f16, i32 tensor + 2 -> i32, but i32 tensor + 2.5 ->
 *   f32 and bool tensor + 2 -> i64. */
#ifndef LM_DTYPE_H
#define LM_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum lm_dtype {
    LM_F32 = 0, LM_F16, LM_BF16, LM_F64,
    LM_I8, LM_U8, LM_I16, LM_I32, LM_I64, LM_BOOL,
    LM_DTYPE_COUNT
} lm_dtype;

size_t lm_dtype_size(lm_dtype t);
const char *lm_dtype_name(lm_dtype t);          /* "f32", "bf16", "bool", ... */
/* Accepts the names above and the aliases float32/float/half/float16/
 * bfloat16/double/float64/int8/uint8/int16/int32/int/int64/long.
 * Returns false for anything else. */
bool lm_dtype_from_name(const char *name, lm_dtype *out);
bool lm_dtype_is_float(lm_dtype t);
bool lm_dtype_is_int(lm_dtype t);                /* integer, not bool */
bool lm_dtype_is_signed(lm_dtype t);
lm_dtype lm_dtype_promote(lm_dtype a, lm_dtype b);
/* Promotion with a weak (scalar) operand: see the header comment. */
lm_dtype lm_dtype_promote_weak(lm_dtype tensor, lm_dtype scalar);

/* IEEE half and bfloat16, round to nearest even, NaN kept NaN. */
uint16_t lm_f32_to_f16(float f);
float lm_f16_to_f32(uint16_t h);
uint16_t lm_f32_to_bf16(float f);
float lm_bf16_to_f32(uint16_t h);

/* Converts n elements between any two dtypes (host memory, contiguous).
 * Float to integer truncates toward zero and saturates NaN to 0; anything to
 * bool is (x != 0). */
void lm_convert(void *dst, lm_dtype dt, const void *src, lm_dtype st, size_t n);

#endif
