// matmul_gemv.glsl - what the GEMV kernels share (matmul_gemv.comp and
// matmul_gemv_shuf.comp, matmul_gemv.c's two kernels for few rows of A):
// the specialization constants 0..7, the push constants, the bindings, the
// 8-element units of A and B (vector or scalar loads: the same values) and
// the rows of a workgroup (its z index).  Their headers say how the sums are
// ordered; both keep matmul_gemv.comp's order, so their bits agree.
#include "common.glsl"

layout(constant_id = 0) const uint DTA = 0;
layout(constant_id = 1) const uint DTB = 0;
layout(constant_id = 2) const uint DTO = 0;
layout(constant_id = 3) const bool B_T = false;     // B stored [n][k] (sbk == 1)
layout(constant_id = 4) const bool A_VEC = false;   // B_T: A's units start 16-byte aligned (sak == 1)
layout(constant_id = 5) const bool B_VEC = false;   // B's units start 16-byte aligned
layout(constant_id = 6) const int LANES = 32;       // B_T: invocations a column (8, 16, 32)
layout(constant_id = 7) const int UN = 4;           // units (B_T) or rows of B (else) loaded ahead (<= 8)

#define MM_PC_MORE int gpe, rows, kc;   // groups an entry (0: flat), batch * M, K a part
#include "matmul_pc.glsl"

DECL_IO(0)
DECL_IO(1)
DECL_IO(2)
layout(std430, set = 0, binding = 0) readonly buffer A4 { uvec4 v[]; } a4;
layout(std430, set = 0, binding = 1) readonly buffer B4 { uvec4 v[]; } b4;

#define UNMAX 8

// 8 consecutive elements from a 16-byte aligned start e (vector loads)
void unit16(uint dt, uvec4 w, inout float x[8])
{
    [[unroll]] for (int j = 0; j < 4; j++) {
        uint u = w[j];
        x[2 * j] = dt == DT_BF16 ? uintBitsToFloat(u << 16) : unpackHalf2x16(u).x;
        x[2 * j + 1] = dt == DT_BF16 ? uintBitsToFloat(u & 0xffff0000u) : unpackHalf2x16(u).y;
    }
}

// unit_a / unit_b: 8 elements of A / B from e (stride apart where the
// operand's units are not 16-byte vectors)
#define DEF_UNIT(NAME, VEC, DT, BUF, LDF) \
void NAME(int e, int stride, inout float x[8]) \
{ \
    if (VEC) { \
        if (DT == DT_F32) { \
            uvec4 w0 = BUF.v[e / 4], w1 = BUF.v[e / 4 + 1]; \
            [[unroll]] for (int j = 0; j < 4; j++) { \
                x[j] = uintBitsToFloat(w0[j]); \
                x[j + 4] = uintBitsToFloat(w1[j]); \
            } \
        } else { \
            unit16(DT, BUF.v[e / 8], x); \
        } \
    } else { \
        [[unroll]] for (int j = 0; j < 8; j++) x[j] = LDF(DT, e + j * stride); \
    } \
}
DEF_UNIT(unit_a, A_VEC, DTA, a4, ldf_0)
DEF_UNIT(unit_b, B_VEC, DTB, b4, ldf_1)

// where the batch entry e's A and B start
ivec2 entry_base(int e)
{
    int oa = pc.off_a, ob = pc.off_b;
    for (int d = pc.nb - 1; d >= 0; d--) {
        int c = e % pc.bshape[d];
        e /= pc.bshape[d];
        oa += c * pc.bsa[d];
        ob += c * pc.bsb[d];
    }
    return ivec2(oa, ob);
}

// GEMV_ROWS(g): the rows of row group g (gl_WorkGroupID.z), as locals:
// r0, the first (a flat row index), nr of them (<= 8); ob, where B starts
// for them; oa[8], where each row of A starts (rows past nr repeat the
// last).  A macro, as matmul_pc.glsl's: the SPIR-V is that of the code
// written out in the kernel
#define GEMV_ROWS(g) \
    int r0, nr; \
    if (pc.gpe > 0) { \
        int e_ = (g) / pc.gpe, m0_ = ((g) % pc.gpe) * 8; \
        r0 = e_ * pc.M + m0_; \
        nr = min(8, pc.M - m0_); \
    } else { \
        r0 = (g) * 8; \
        nr = min(8, pc.rows - r0); \
    } \
    int ob = entry_base(r0 / pc.M).y; \
    int oa[8]; \
    [[unroll]] for (int i_ = 0; i_ < 8; i_++) { \
        int r_ = min(r0 + i_, pc.rows - 1); \
        oa[i_] = entry_base(r_ / pc.M).x + (r_ % pc.M) * pc.sam; \
    }
