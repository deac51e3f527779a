// quant.glsl - ggml's block quantizations (core/quant_blocks.h) decoded
// from 32-bit words, eight elements at a time, for the kernels that read
// quantized storage (quant_deq.glsl, quant_gemv.glsl, quant_gemm.glsl).
//
// Blocks are 18 to 292 bytes, so a block starts at any byte; every field is
// read from the uint words that hold it (no 8/16-bit storage needed) and
// halves go through unpackHalf2x16 (exact: every half is an f32).  A block's
// halves sit at even offsets, so one never straddles two words.
//
// Eight consecutive elements (e0 a multiple of 8) always share one
// sub-block (16 or 32 elements) and one bit position in every packed field,
// so their codes come from eight consecutive bytes.  The values are the
// CPU's (core/quant.c, dequantize_blocks) bit for bit: (d * scale) * code
// - dmin * min, each product rounded as there; `precise` keeps the compiler
// from fusing them into a multiply-add, which would round once less.
//
// The includer declares QW (the words of the quantized buffer) and QT, the
// type as QT_* below (a specialization constant, so each pipeline keeps one
// branch).
#define QT_Q4_0 0u
#define QT_Q4_1 1u
#define QT_Q5_0 2u
#define QT_Q5_1 3u
#define QT_Q8_0 4u
#define QT_Q2_K 5u
#define QT_Q3_K 6u
#define QT_Q4_K 7u
#define QT_Q5_K 8u
#define QT_Q6_K 9u
#define QT_Q8_K 10u

// elements and bytes of one block
uint q_block_elems() { return QT >= QT_Q2_K ? 256u : 32u; }
uint q_block_bytes()
{
    switch (QT) {
    case QT_Q4_0: return 18u;
    case QT_Q4_1: return 20u;
    case QT_Q5_0: return 22u;
    case QT_Q5_1: return 24u;
    case QT_Q8_0: return 34u;
    case QT_Q2_K: return 84u;
    case QT_Q3_K: return 110u;
    case QT_Q4_K: return 144u;
    case QT_Q5_K: return 176u;
    case QT_Q6_K: return 210u;
    default: return 292u;
    }
}

uint q_byte(uint a) { return (QW[a >> 2] >> ((a & 3u) * 8u)) & 0xffu; }
float q_half(uint a) { return unpackHalf2x16(QW[a >> 2] >> ((a & 2u) * 8u)).x; }
// four bytes from any address, little endian (the next word only when a
// is unaligned, so never past the buffer's last whole word)
uint q_word(uint a)
{
    uint s = (a & 3u) * 8u, lo = QW[a >> 2];
    return s == 0u ? lo : (lo >> s) | (QW[(a >> 2) + 1u] << (32u - s));
}
int q_sbyte(uint w, uint i) { return bitfieldExtract(int(w), int(i * 8u), 8); }

// codes of eight elements and the sub-block's d * scale (ds) and dmin * min
// (ms, 0 where the type has none)
void q_codes8(uint blk, uint e0, out int c[8], out float ds, out float ms)
{
    precise float pds, pms = 0.0;
    uint lo, hi;
    switch (QT) {
    case QT_Q4_0: case QT_Q4_1: case QT_Q5_0: case QT_Q5_1: {
        // d (and m) halves, the fifth bits as a little-endian word, nibbles
        // of element e in byte e % 16 (high nibble for the second half)
        uint qs = QT == QT_Q4_0 ? 2u : QT == QT_Q4_1 ? 4u : QT == QT_Q5_0 ? 6u : 8u;
        pds = q_half(blk);
        if (QT == QT_Q4_1 || QT == QT_Q5_1) pms = q_half(blk + 2u) * -1.0;
        uint sh = e0 >= 16u ? 4u : 0u;
        lo = q_word(blk + qs + (e0 & 15u));
        hi = q_word(blk + qs + (e0 & 15u) + 4u);
        uint qh = 0u;
        if (QT == QT_Q5_0 || QT == QT_Q5_1) qh = q_word(blk + (QT == QT_Q5_0 ? 2u : 4u)) >> e0;
        int off = QT == QT_Q4_0 ? 8 : QT == QT_Q5_0 ? 16 : 0;
        for (uint i = 0u; i < 8u; i++) {
            uint b = ((i < 4u ? lo : hi) >> (8u * (i & 3u) + sh)) & 15u;
            c[i] = int(b | ((qh >> i) & 1u) << 4) - off;
        }
        break;
    }
    case QT_Q8_0: case QT_Q8_K: {
        pds = QT == QT_Q8_0 ? q_half(blk) : uintBitsToFloat(QW[blk >> 2]);
        uint qs = blk + (QT == QT_Q8_0 ? 2u : 4u) + e0;
        lo = q_word(qs);
        hi = q_word(qs + 4u);
        for (uint i = 0u; i < 8u; i++) c[i] = q_sbyte(i < 4u ? lo : hi, i & 3u);
        break;
    }
    case QT_Q2_K: {
        // 2-bit codes: element e in byte 32 (e / 128) + e % 32 at bit
        // 2 ((e / 32) % 4); a byte per sub-block of 16: scale low, min high
        uint s = q_byte(blk + e0 / 16u);
        pds = q_half(blk + 80u) * float(s & 15u);
        pms = q_half(blk + 82u) * float(s >> 4);
        uint a = blk + 16u + 32u * (e0 / 128u) + e0 % 32u, sh = 2u * ((e0 / 32u) % 4u);
        lo = q_word(a);
        hi = q_word(a + 4u);
        for (uint i = 0u; i < 8u; i++) c[i] = int(((i < 4u ? lo : hi) >> (8u * (i & 3u) + sh)) & 3u);
        break;
    }
    case QT_Q3_K: {
        // 2 low bits as Q2_K's, the third in hmask (bit e / 32 of byte
        // e % 32; clear means code - 4); 6-bit signed scales in 12 bytes
        uint j = e0 / 16u;
        uint sl = (q_byte(blk + 96u + j % 8u) >> (j < 8u ? 0u : 4u)) & 15u;
        uint sh6 = (q_byte(blk + 104u + j % 4u) >> (2u * (j / 4u))) & 3u;
        pds = q_half(blk + 108u) * float(int(sl | sh6 << 4) - 32);
        uint a = blk + 32u + 32u * (e0 / 128u) + e0 % 32u, sh = 2u * ((e0 / 32u) % 4u);
        lo = q_word(a);
        hi = q_word(a + 4u);
        uint m0 = q_word(blk + e0 % 32u), m1 = q_word(blk + e0 % 32u + 4u), hb = e0 / 32u;
        for (uint i = 0u; i < 8u; i++) {
            uint q2 = ((i < 4u ? lo : hi) >> (8u * (i & 3u) + sh)) & 3u;
            uint h = ((i < 4u ? m0 : m1) >> (8u * (i & 3u) + hb)) & 1u;
            c[i] = int(q2) - (h != 0u ? 0 : 4);
        }
        break;
    }
    case QT_Q4_K: case QT_Q5_K: {
        // 6-bit scale and min of sub-block s (lm_k_scales6_unpack), nibbles
        // of element e in byte 32 (e / 64) + e % 32 (high for e % 64 >= 32),
        // Q5_K's fifth bit at bit e / 32 of qh[e % 32]
        uint s = e0 / 32u, sc, mn;
        if (s < 4u) {
            sc = q_byte(blk + 4u + s) & 63u;
            mn = q_byte(blk + 8u + s) & 63u;
        } else {
            uint b8 = q_byte(blk + 8u + s);
            sc = (b8 & 15u) | (q_byte(blk + s) >> 6) << 4;
            mn = (b8 >> 4) | (q_byte(blk + 4u + s) >> 6) << 4;
        }
        pds = q_half(blk) * float(sc);
        pms = q_half(blk + 2u) * float(mn);
        uint qs = QT == QT_Q4_K ? 16u : 48u;
        uint a = blk + qs + 32u * (e0 / 64u) + e0 % 32u, sh = (e0 % 64u) >= 32u ? 4u : 0u;
        lo = q_word(a);
        hi = q_word(a + 4u);
        uint m0 = 0u, m1 = 0u, hb = e0 / 32u;
        if (QT == QT_Q5_K) {
            m0 = q_word(blk + 16u + e0 % 32u);
            m1 = q_word(blk + 20u + e0 % 32u);
        }
        for (uint i = 0u; i < 8u; i++) {
            uint n = ((i < 4u ? lo : hi) >> (8u * (i & 3u) + sh)) & 15u;
            uint h = ((i < 4u ? m0 : m1) >> (8u * (i & 3u) + hb)) & 1u;
            c[i] = int(n | h << 4);
        }
        break;
    }
    default: {   // Q6_K
        // low nibbles in ql (span 64: byte 64 (e / 128) + e % 64, high
        // for e % 128 >= 64), top two bits in qh as Q2_K's codes, signed
        // 8-bit scales per 16
        pds = q_half(blk + 208u) * float(q_sbyte(q_byte(blk + 192u + e0 / 16u), 0u));
        uint a = blk + 64u * (e0 / 128u) + e0 % 64u, sh = (e0 % 128u) >= 64u ? 4u : 0u;
        lo = q_word(a);
        hi = q_word(a + 4u);
        uint b = blk + 128u + 32u * (e0 / 128u) + e0 % 32u, hs = 2u * ((e0 / 32u) % 4u);
        uint h0 = q_word(b), h1 = q_word(b + 4u);
        for (uint i = 0u; i < 8u; i++) {
            uint n = ((i < 4u ? lo : hi) >> (8u * (i & 3u) + sh)) & 15u;
            uint h = ((i < 4u ? h0 : h1) >> (8u * (i & 3u) + hs)) & 3u;
            c[i] = int(n | h << 4) - 32;
        }
        break;
    }
    }
    ds = pds;
    ms = pms;
}

// the eight values of elements e0 .. e0 + 7 of the block at byte blk
void q_decode8(uint blk, uint e0, out float v[8])
{
    int c[8];
    float ds, ms;
    q_codes8(blk, e0, c, ds, ms);
    for (uint i = 0u; i < 8u; i++) {
        precise float y = ds * float(c[i]) - ms;
        v[i] = y;
    }
}

// ---- whole units from wide loads (quant_gemv.glsl, quant_deq.glsl) ----
// The includer declares QW4, the same buffer as uvec4s.
//
// Q4_K, unit u of a row of blocks (u / 8: the block, j = u % 8: group
// g = j / 2 of 32 code bytes, half h = j % 2): the block's 16-byte head (d,
// dmin, 12 bytes of scales) and 16 code bytes, whose low nibbles are
// elements 64 g + 16 h .. + 15 (sub-block 2 g) and high nibbles the same
// 32 further on (sub-block 2 g + 1).  Blocks are 144 bytes, so a row of
// them (K a multiple of 256) keeps every load on 16 bytes.
uint k_byte(uint w, uint i) { return (w >> (8u * i)) & 0xffu; }

// sub-block s's d * scale and dmin * min, as q_codes8 (lm_k_scales6_unpack),
// selecting the head's words by comparisons rather than a runtime index
void q4k_scale(uvec4 hd, uint s, out float ds, out float ms)
{
    uint sc, mn;
    if (s < 4u) {
        sc = k_byte(hd.y, s) & 63u;
        mn = k_byte(hd.z, s) & 63u;
    } else {
        uint b8 = k_byte(hd.w, s - 4u);
        sc = (b8 & 15u) | (k_byte(hd.y, s - 4u) >> 6) << 4;
        mn = (b8 >> 4) | (k_byte(hd.z, s - 4u) >> 6) << 4;
    }
    vec2 dm = unpackHalf2x16(hd.x);
    precise float pds = dm.x * float(sc), pms = dm.y * float(mn);
    ds = pds;
    ms = pms;
}

// the 32 values of unit j of a block (head hd, codes qs): lo = elements
// 64 g + 16 h .., hi = 32 further on
void q4k_unit(uvec4 hd, uvec4 qs, uint j, out vec4 lo[4], out vec4 hi[4])
{
    uint g = j / 2u;
    float ds0, ms0, ds1, ms1;
    q4k_scale(hd, 2u * g, ds0, ms0);
    q4k_scale(hd, 2u * g + 1u, ds1, ms1);
    [[unroll]] for (uint i = 0u; i < 4u; i++)
        [[unroll]] for (uint b = 0u; b < 4u; b++) {
            uint q = qs[i] >> (8u * b);
            precise float y0 = ds0 * float(q & 15u) - ms0;
            precise float y1 = ds1 * float((q >> 4) & 15u) - ms1;
            lo[i][b] = y0;
            hi[i][b] = y1;
        }
}

// Q8_0, the block at byte a (a multiple of 2) from the nine words that
// hold its 34 bytes (wd), as 32 values
void q80_unit(uint a, uint wd[9], out vec4 v[8])
{
    bool odd = (a & 2u) != 0u;      // the block starts 2 bytes into a word
    float d = unpackHalf2x16(odd ? wd[0] >> 16 : wd[0]).x;
    [[unroll]] for (uint k = 0u; k < 8u; k++) {
        uint q = odd ? wd[k + 1u] : (wd[k] >> 16) | (wd[k + 1u] << 16);
        [[unroll]] for (uint j = 0u; j < 4u; j++) {
            precise float y = d * float(q_sbyte(q, j)) - 0.0;
            v[k][j] = y;
        }
    }
}
