#version 450
// quant_gemm.glsl - y [M, N] = x [M, K] w [N, K]^T for many rows of x and
// a quantized w (op qlinear; quant.c picks it for M > 8 where the device's
// GEMMs have no tensor cores), with w dequantized where its tile is loaded.
//
// A workgroup of 256 computes a BM x BN tile of y, TM x TN outputs an
// invocation, stepping through K BK (32 or 16) at a time (BK divides both
// block sizes and is a multiple of 8, so a tile's row never splits a chunk): the x tile is copied to
// shared memory as f32, the w tile is decoded from its blocks eight
// elements an invocation (quant.glsl) into shared memory as f32, and each
// invocation accumulates its outputs in f32 registers.  The sum over K runs
// in one fixed order, so the result does not depend on timing.
// Tiles: BM, BN, TM, TN, BK (module.mk's variant table); (BM / TM) (BN / TN)
// must be 256.
// Bindings: 0 = x (f32), 1 = w's blocks (words), 2 = y (f32).
#extension GL_EXT_control_flow_attributes : enable

#ifndef BM
#define BM 64
#endif
#ifndef BN
#define BN 64
#endif
#ifndef TM
#define TM 4
#endif
#ifndef TN
#define TN 4
#endif
#ifndef BK
#define BK 32
#endif
#define NT 256
#define LDS_M (BM + 4)
#define LDS_N (BN + 4)

layout(local_size_x = NT) in;
layout(constant_id = 0) const uint QT = 0u;

layout(std430, binding = 0) readonly buffer Bx { float X[]; };
#include "quant_gemm_pc.glsl"

shared float xs[BK * LDS_M];
shared float ws[BK * LDS_N];

void main()
{
    uint t = gl_LocalInvocationID.x;
    uint m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN;
    uint tx = t % (BN / TN), ty = t / (BN / TN);
    uint per = q_block_elems() / 8u, bytes = q_block_bytes();
    float acc[TM][TN];
    [[unroll]] for (uint i = 0u; i < TM; i++)
        [[unroll]] for (uint j = 0u; j < TN; j++) acc[i][j] = 0.0;
    for (uint k0 = 0u; k0 < pc.K; k0 += BK) {
        // x: BM rows of BK, eight consecutive elements an invocation a step
        [[unroll]] for (uint c = t; c < BM * BK / 8; c += NT) {
            uint r = c / (BK / 8u), kk = (c % (BK / 8u)) * 8u, gm = m0 + r;
            uint xo = pc.off_x + gm * pc.K + k0 + kk;
            float v[8];
            if (gm < pc.M) [[unroll]] for (uint i = 0u; i < 8u; i++) v[i] = X[xo + i];
            else [[unroll]] for (uint i = 0u; i < 8u; i++) v[i] = 0.0;
            [[unroll]] for (uint i = 0u; i < 8u; i++) xs[(kk + i) * LDS_M + r] = v[i];
        }
        // w: BN rows of BK, decoded
        [[unroll]] for (uint c = t; c < BN * BK / 8; c += NT) {
            uint r = c / (BK / 8u), kk = (c % (BK / 8u)) * 8u, gn = n0 + r, k = k0 + kk;
            float v[8];
            if (gn < pc.N) q_decode8(gn * pc.row_bytes + (k / 8u / per) * bytes, (k / 8u % per) * 8u, v);
            else [[unroll]] for (uint i = 0u; i < 8u; i++) v[i] = 0.0;
            [[unroll]] for (uint i = 0u; i < 8u; i++) ws[(kk + i) * LDS_N + r] = v[i];
        }
        barrier();
        [[unroll]] for (uint k = 0u; k < BK; k++) {
            float a[TM], b[TN];
            [[unroll]] for (uint i = 0u; i < TM; i++) a[i] = xs[k * LDS_M + ty * TM + i];
            [[unroll]] for (uint j = 0u; j < TN; j++) b[j] = ws[k * LDS_N + tx * TN + j];
            [[unroll]] for (uint i = 0u; i < TM; i++)
                [[unroll]] for (uint j = 0u; j < TN; j++) acc[i][j] += a[i] * b[j];
        }
        barrier();
    }
    [[unroll]] for (uint i = 0u; i < TM; i++) {
        uint gm = m0 + ty * TM + i;
        if (gm >= pc.M) break;
        [[unroll]] for (uint j = 0u; j < TN; j++) {
            uint gn = n0 + tx * TN + j;
            if (gn < pc.N) Y[pc.off_y + gm * pc.N + gn] = acc[i][j];
        }
    }
}
