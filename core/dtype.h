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
    LM_DTYPE_COUNT,     /* the element dtypes above; also "none given" */
    /* ggml's block quantizations (core/quant.h): storage in blocks, shape in
     * elements.  After LM_DTYPE_COUNT, so loops over element dtypes and
     * tables sized LM_DTYPE_COUNT never meet them; only the functions
     * below, the array's storage and the ops that say so handle them. */
    LM_Q4_0 = LM_DTYPE_COUNT + 1, LM_Q4_1, LM_Q5_0, LM_Q5_1, LM_Q8_0,
    LM_Q2_K, LM_Q3_K, LM_Q4_K, LM_Q5_K, LM_Q6_K, LM_Q8_K,
    LM_DTYPE_END
} lm_dtype;

size_t lm_dtype_size(lm_dtype t);               /* 0 for quantized dtypes */
const char *lm_dtype_name(lm_dtype t);          /* "f32", "bf16", "bool", "q4_k", ... */
/* Quantized dtypes: elements per block and bytes per block (1 and the
 * element size for the others); bytes of n elements (n whole blocks). */
bool lm_dtype_is_quant(lm_dtype t);
int64_t lm_dtype_block(lm_dtype t);
size_t lm_dtype_block_bytes(lm_dtype t);
size_t lm_dtype_nbytes(lm_dtype t, int64_t n);
/* lm_dtype_from_name, and also the quantized names ("q4_0", "q8_k"; case
 * ignored). */
bool lm_dtype_from_name_any(const char *name, lm_dtype *out);
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
