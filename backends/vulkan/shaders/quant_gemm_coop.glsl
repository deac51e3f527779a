#version 450
// quant_gemm_coop.glsl - y [M, N] = x [M, K] w [N, K]^T with a quantized w
// on tensor cores (GL_NV_cooperative_matrix, f16 x f16 + f32), for many
// rows of x (op qlinear; quant.c picks it for Q8_0 under 64 rows where the
// device has 16x16x16 f16 fragments: above, and for the other types, the
// f16 copy of w into the f16 GEMM is faster).
//
// The tiling is matmul_coop.glsl's (128x128 tiles of depth 32, 8 subgroups
// of 64x32, two shared buffers: the next step's operands are fetched into
// registers while this step's fragments multiply), with the loads made for
// this op: x is read as f32 and rounded to f16 (packHalf2x16) as it is
// staged [m][k]; w is decoded eight elements at a time from its blocks
// (quant.glsl) and staged [n][k] as f16, which the fragments load column-
// major as B = w^T.  The decode runs in the shadow of the multiplies.
// Accumulation is f32; the f16 rounding of x and of the decoded weights is
// the difference from the f32 kernel (quant_gemm.glsl): relative 2^-11 per
// operand, and a weight beyond f16's range (65504) would become infinite.
// Bindings: 0 = x (f32), 1 = w's blocks (words), 2 = y (f32).
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : enable

#define FM 16
#define FN 16
#define FK 16
#define BM 128
#define BN 128
#define BK 32
#define WM 64
#define WN 32
#define FRM (WM / FM)
#define FRN (WN / FN)
#define WARPS ((BM / WM) * (BN / WN))
#define NT (WARPS * 32)
#define CPT_A (BM * BK / 8 / NT)    // chunks of 8 halves an invocation stages a step
#define CPT_B (BN * BK / 8 / NT)
#define CM_ACC fcoopmatNV<32, gl_ScopeSubgroup, FM, FN>
#define CM_A fcoopmatNV<16, gl_ScopeSubgroup, FM, FK>
#define CM_B fcoopmatNV<16, gl_ScopeSubgroup, FK, FN>

layout(local_size_x = NT) in;
layout(constant_id = 0) const uint QT = 0u;
layout(constant_id = 1) const bool X_VEC = false;     // x's rows start on 16 bytes
layout(constant_id = 2) const bool C_DIRECT = false;  // y's rows start on 16 bytes: interior fragments stored directly

layout(std430, binding = 0) readonly buffer Bx { float X[]; };
layout(std430, binding = 0) readonly buffer Bx4 { vec4 X4[]; };
#include "quant_gemm_pc.glsl"

// rows of BK halves padded by 8 (one uvec4) so a fragment's rows fall in
// distinct banks; strides in uvec4 units
#define SK ((BK + 8) / 8)
#define TILE (BM * SK)
shared uvec4 As[2 * TILE];
shared uvec4 Bs[2 * TILE];

uint m0, n0;

uvec4 pack8(vec4 a, vec4 b)
{
    return uvec4(packHalf2x16(a.xy), packHalf2x16(a.zw), packHalf2x16(b.xy), packHalf2x16(b.zw));
}

// chunk c of the x tile at depth k0: row c / 4, halves 8 (c % 4) ..
uvec4 fetch_x(uint c, uint k0)
{
    uint gm = m0 + c / (BK / 8u), k = k0 + (c % (BK / 8u)) * 8u;
    if (gm >= pc.M) return uvec4(0u);
    uint xo = pc.off_x + gm * pc.K + k;
    if (X_VEC) return pack8(X4[xo / 4u], X4[xo / 4u + 1u]);
    return pack8(vec4(X[xo], X[xo + 1u], X[xo + 2u], X[xo + 3u]),
                 vec4(X[xo + 4u], X[xo + 5u], X[xo + 6u], X[xo + 7u]));
}

// chunk c of the w tile: row n0 + c / 4 of w, elements k0 + 8 (c % 4) ..
uvec4 fetch_w(uint c, uint k0)
{
    uint gn = n0 + c / (BK / 8u), k = k0 + (c % (BK / 8u)) * 8u;
    if (gn >= pc.N) return uvec4(0u);
    uint per = q_block_elems() / 8u;
    float v[8];
    q_decode8(gn * pc.row_bytes + (k / 8u / per) * q_block_bytes(), (k / 8u % per) * 8u, v);
    return pack8(vec4(v[0], v[1], v[2], v[3]), vec4(v[4], v[5], v[6], v[7]));
}

uint slot(uint c) { return (c / (BK / 8u)) * SK + c % (BK / 8u); }

void main()
{
    uint tid = gl_LocalInvocationID.x, sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    m0 = gl_WorkGroupID.y * BM;
    n0 = gl_WorkGroupID.x * BN;
    uint wm = (sg / (BN / WN)) * WM, wn = (sg % (BN / WN)) * WN;

    CM_ACC acc[FRM * FRN];
    [[unroll]] for (int i = 0; i < FRM * FRN; i++) acc[i] = CM_ACC(0.0);

    uvec4 ra[CPT_A], rb[CPT_B];
    [[unroll]] for (uint i = 0u; i < CPT_A; i++) ra[i] = fetch_x(tid + i * NT, 0u);
    [[unroll]] for (uint i = 0u; i < CPT_B; i++) rb[i] = fetch_w(tid + i * NT, 0u);
    [[unroll]] for (uint i = 0u; i < CPT_A; i++) As[slot(tid + i * NT)] = ra[i];
    [[unroll]] for (uint i = 0u; i < CPT_B; i++) Bs[slot(tid + i * NT)] = rb[i];
    barrier();

    uint nk = pc.K / BK;   // K is whole blocks: a multiple of 32
    for (uint kt = 0u; kt < nk; kt++) {
        uint cur = (kt & 1u) * TILE;
        bool more = kt + 1u < nk;
        if (more) {
            [[unroll]] for (uint i = 0u; i < CPT_A; i++) ra[i] = fetch_x(tid + i * NT, (kt + 1u) * BK);
            [[unroll]] for (uint i = 0u; i < CPT_B; i++) rb[i] = fetch_w(tid + i * NT, (kt + 1u) * BK);
        }
        [[unroll]] for (uint kk = 0u; kk < BK; kk += FK) {
            CM_A fa[FRM];
            CM_B fb[FRN];
            [[unroll]] for (uint i = 0u; i < FRM; i++)
                coopMatLoadNV(fa[i], As, cur + (wm + i * FM) * SK + kk / 8u, SK, false);
            [[unroll]] for (uint j = 0u; j < FRN; j++)
                coopMatLoadNV(fb[j], Bs, cur + (wn + j * FN) * SK + kk / 8u, SK, true);
            [[unroll]] for (uint i = 0u; i < FRM; i++)
                [[unroll]] for (uint j = 0u; j < FRN; j++)
                    acc[i * FRN + j] = coopMatMulAddNV(fa[i], fb[j], acc[i * FRN + j]);
        }
        if (more) {
            uint nxt = TILE - cur;
            [[unroll]] for (uint i = 0u; i < CPT_A; i++) As[nxt + slot(tid + i * NT)] = ra[i];
            [[unroll]] for (uint i = 0u; i < CPT_B; i++) Bs[nxt + slot(tid + i * NT)] = rb[i];
        }
        barrier();
    }

    // interior fragments straight to y; edge ones through this subgroup's
    // FM x FN f32 area in As (free after the loop's last barrier), cut at M, N
    uint cs = sg * (FM * FN / 4u);
    [[unroll]] for (uint i = 0u; i < FRM; i++)
        [[unroll]] for (uint j = 0u; j < FRN; j++) {
            uint gm0 = m0 + wm + i * FM, gn0 = n0 + wn + j * FN;
            if (gm0 >= pc.M || gn0 >= pc.N) continue;      // uniform in the subgroup
            if (C_DIRECT && gm0 + FM <= pc.M && gn0 + FN <= pc.N) {
                coopMatStoreNV(acc[i * FRN + j], Y, pc.off_y + gm0 * pc.N + gn0, pc.N, false);
                continue;
            }
            coopMatStoreNV(acc[i * FRN + j], As, cs, FN / 4u, false);
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            for (uint e = lane; e < FM * FN; e += gl_SubgroupSize) {
                uint gm = gm0 + e / FN, gn = gn0 + e % FN;
                if (gm < pc.M && gn < pc.N) Y[pc.off_y + gm * pc.N + gn] = uintBitsToFloat(As[cs + e / 4u][e % 4u]);
            }
            subgroupMemoryBarrierShared();
            subgroupBarrier();
        }
}
