// sort.glsl - sort keys and element moves shared by sort.comp and
// sort_merge.comp.  Include after common.glsl, with binding 0 (x) declared
// by DECL_IO(0) and the constant DT (x's dtype) defined.
//
// Every dtype maps to a uint64 whose unsigned order is the CPU's order
// (cmp_keys in backends/cpu/nn_index.c): floats by value with -0 == +0 and
// every NaN equal and above +inf, integers by value.  Only bits are
// touched, so f64 needs no double arithmetic.  Descending inverts the key;
// ties are broken by the original index, ascending in both directions, so
// (key, index) is a total order and the result is the CPU's stable order.

// IEEE bits of `bits` width (sign at bit `bits`-1, exponent all ones above
// `inf`) to an order-preserving unsigned key
uint64_t float_key(uint64_t u, int bits, uint64_t inf)
{
    uint64_t sign = uint64_t(1) << (bits - 1);
    uint64_t ones = bits == 64 ? ~uint64_t(0) : (uint64_t(1) << bits) - uint64_t(1);
    if ((u & (sign - uint64_t(1))) > inf) return ones;       // NaN: above everything
    if (u == sign) u = uint64_t(0);                             // -0 == +0
    return (u & sign) != uint64_t(0) ? (~u & ones) : (u | sign);
}

uint64_t sort_key(int i, bool desc)
{
    uint64_t k;
    if (DT == DT_F32) k = float_key(uint64_t(u32_0.v[i]), 32, uint64_t(0x7f800000u));
    else if (DT == DT_F16) k = float_key(uint64_t(uint(u16_0.v[i])), 16, uint64_t(0x7c00u));
    else if (DT == DT_BF16) k = float_key(uint64_t(uint(u16_0.v[i])), 16, uint64_t(0x7f80u));
    else if (DT == DT_F64) k = float_key(u64_0.v[i], 64, 0x7ff0000000000000ul);
    else k = uint64_t(ldi_0(DT, i)) ^ 0x8000000000000000ul;
    return desc ? ~k : k;
}

bool key_less(uint64_t ka, uint ia, uint64_t kb, uint ib)
{
    return ka < kb || (ka == kb && ia < ib);
}

// the element of x at src to binding OUTB at dst, as raw bits
#define DEF_MOVE(OUTB) \
void move_elem(int src, int dst) { \
    if (DT == DT_F64 || DT == DT_I64) u64_##OUTB.v[dst] = u64_0.v[src]; \
    else if (DT == DT_F32 || DT == DT_I32) u32_##OUTB.v[dst] = u32_0.v[src]; \
    else if (DT == DT_F16 || DT == DT_BF16 || DT == DT_I16) u16_##OUTB.v[dst] = u16_0.v[src]; \
    else u8_##OUTB.v[dst] = u8_0.v[src]; \
}
