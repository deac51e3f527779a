/* quant.h - the block quantizations (Q4_0 ... Q8_K, GGUF's formats) on the host.
 *
 * A quantized dtype stores its elements in blocks: lm_dtype_block(t)
 * elements (32, or 256 for the K-quants) in lm_dtype_block_bytes(t) bytes,
 * laid out as GGUF stores them (core/quant_blocks.h, little endian), so GGUF
 * tensors are used as they are in the file.  A tensor of such a dtype has
 * its shape in elements and its last dimension a whole number of blocks.
 *
 * The layouts and the quantization algorithms follow ggml's definitions
 * (its reference quantizers, what ggml_quantize_chunk runs without an
 * importance matrix), so results are byte- and bit-identical to ggml's:
 * tests/test_gguf.c checks them against files ggml wrote (tests/ref/gguf). */
#ifndef LM_QUANT_H
#define LM_QUANT_H

#include <stdint.h>
#include "dtype.h"
#include "array.h"
#include "error.h"

/* n elements (a multiple of the block size: else LM_ERR_SHAPE) of x into
 * n / block blocks at dst.  Values must be finite. */
lm_status lm_quantize_row(lm_dtype t, const float *x, void *dst, int64_t n);
/* n elements of the blocks at src into y. */
lm_status lm_dequantize_row(lm_dtype t, const void *src, float *y, int64_t n);

/* Tensor forms (the result lives on a's device).  lm_quantize (evaluated
 * at once, on the host): a float tensor (any float dtype, read as f32) whose
 * last dimension is a multiple of t's block, as dtype t.  lm_dequantize (a
 * lazy node, op dequantize, run by a's device): a quantized tensor as f32
 * (any other dtype: a converted to f32).  NEW references; NULL + error
 * otherwise. */
lm_array *lm_quantize(lm_array *a, lm_dtype t);

/* One block of any quantized dtype as integers, for the dequantizer and the
 * CPU's integer dot products (backends/cpu/quant_dot.c): element e is
 *     (d * scale[s]) * code[e] - dmin * min[s],   s = e / sub,
 * the min term only where has_min.  Block-scaled types (Q4_0 ... Q8_0,
 * Q8_K) have one sub-block of scale 1; Q4_1 and Q5_1 keep their float
 * offset m as dmin with min -1 (a - m * -1 is a + m exactly, so the floats
 * equal the format's own x = d code + m bit for bit). */
typedef struct lm_qblock {
    int8_t code[256];
    int16_t scale[16], min[16];
    int n, sub;        /* elements in the block, elements per sub-block */
    float d, dmin;
    int has_min;
} lm_qblock;
/* t must be a quantized dtype (the caller checked). */
void lm_quant_unpack(lm_dtype t, const void *block, lm_qblock *q);
lm_array *lm_dequantize(lm_array *a);

#endif
