/* quant_blocks.h - the bytes of one block of each quantized dtype, for the
 * code that reads quantized storage: core/quant.c and the CPU's quantized
 * dot products (backends/cpu/quant_dot*.c).  The layouts are GGUF's (ggml
 * defines them; a file's tensors are these blocks back to back), little
 * endian, halves as IEEE binary16 bits.  Field names say what a field
 * holds: d the block scale, m / dmin its minimum, qs the low bits of the
 * codes, qh (hmask for Q3_K) their high bits, scales the sub-block scales. */
#ifndef LM_QUANT_BLOCKS_H
#define LM_QUANT_BLOCKS_H

#include <stdint.h>
#include <string.h>

#define LM_QBLOCK 32     /* elements in a Q4_0 ... Q8_0 block */
#define LM_KBLOCK 256    /* elements in a K-quant block */

typedef uint16_t lm_half;

/* 4 or 5-bit codes, two per byte (element e in byte e % 16, high nibble
 * for the second half); the fifth bits in a 32-bit mask */
typedef struct { lm_half d; uint8_t qs[16]; } lm_block_q4_0;
typedef struct { lm_half d, m; uint8_t qs[16]; } lm_block_q4_1;
typedef struct { lm_half d; uint8_t qh[4]; uint8_t qs[16]; } lm_block_q5_0;
typedef struct { lm_half d, m; uint8_t qh[4]; uint8_t qs[16]; } lm_block_q5_1;
typedef struct { lm_half d; int8_t qs[32]; } lm_block_q8_0;
/* K-quants: 16 sub-blocks of 16 (Q2_K, Q3_K, Q6_K) or 8 of 32 (Q4_K, Q5_K),
 * each with its own scale (and minimum) coded relative to d (and dmin) */
typedef struct { uint8_t scales[16]; uint8_t qs[64]; lm_half d, dmin; } lm_block_q2_K;
typedef struct { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; lm_half d; } lm_block_q3_K;
typedef struct { lm_half d, dmin; uint8_t scales[12]; uint8_t qs[128]; } lm_block_q4_K;
typedef struct { lm_half d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; } lm_block_q5_K;
typedef struct { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; lm_half d; } lm_block_q6_K;
/* the activations' format for the K-quant dots: f32 scale, 8-bit codes and
 * the sum of each 16 codes */
typedef struct { float d; int8_t qs[256]; int16_t bsums[16]; } lm_block_q8_K;

/* Q4_K's and Q5_K's 12 bytes of sub-block scales and minimums (6 bits
 * each) as eight of each.  Sub-blocks 0-3 keep theirs whole in bytes 0-3
 * (scale) and 4-7 (min); sub-blocks 4-7 keep their low four bits as the
 * nibbles of bytes 8-11 and their top two bits in the spare top bits of
 * bytes 0-7.  Inline: the dot kernels decode it once per block. */
static inline void lm_k_scales6_unpack(const uint8_t p[12], uint8_t scale[8], uint8_t min[8])
{
    /* four bytes at a time: every shift and mask below stays inside its
     * byte (a little-endian host, as the format itself) */
    const uint32_t low6 = 0x3f3f3f3fu, low4 = 0x0f0f0f0fu, low2 = 0x03030303u;
    uint32_t w[3];
    memcpy(w, p, 12);
    uint32_t s03 = w[0] & low6, m03 = w[1] & low6;
    uint32_t s47 = (w[2] & low4) | ((w[0] >> 6) & low2) << 4;
    uint32_t m47 = ((w[2] >> 4) & low4) | ((w[1] >> 6) & low2) << 4;
    memcpy(scale, &s03, 4);
    memcpy(scale + 4, &s47, 4);
    memcpy(min, &m03, 4);
    memcpy(min + 4, &m47, 4);
}

_Static_assert(sizeof(lm_block_q4_0) == 18, "q4_0"); _Static_assert(sizeof(lm_block_q4_1) == 20, "q4_1");
_Static_assert(sizeof(lm_block_q5_0) == 22, "q5_0"); _Static_assert(sizeof(lm_block_q5_1) == 24, "q5_1");
_Static_assert(sizeof(lm_block_q8_0) == 34, "q8_0"); _Static_assert(sizeof(lm_block_q2_K) == 84, "q2_K");
_Static_assert(sizeof(lm_block_q3_K) == 110, "q3_K"); _Static_assert(sizeof(lm_block_q4_K) == 144, "q4_K");
_Static_assert(sizeof(lm_block_q5_K) == 176, "q5_K"); _Static_assert(sizeof(lm_block_q6_K) == 210, "q6_K");
_Static_assert(sizeof(lm_block_q8_K) == 292, "q8_K");

#endif
