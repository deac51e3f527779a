#version 450
// quant_gemv.glsl - y [M, N] = x [M, K] w [N, K]^T for a few rows of x
// (M <= 8) and a quantized w (op qlinear; quant.c picks it for M <= 8).
//
// A workgroup computes RW output columns (rows of w) for all M rows of x,
// LANES invocations a row of w (specialization constants: quant.c's
// table of shapes).  A GEMV is bound by memory: each lane walks its row in
// units interleaved with its neighbours' (lane l takes units l, l + LANES,
// ...: neighbours read neighbouring bytes), issues the loads of UN units
// before it uses any, and keeps M running sums in f32.  The LANES partial
// sums of a row are then added in shared memory in a fixed tree, so the
// order of every addition is fixed by the shapes and the kernel's shape
// alone and the result is the same on every run.
// Units (FAST): Q4_K, a 16-byte load of codes (32 elements of two
// sub-blocks) and the block's 16-byte head; Q8_0, one block of 34 bytes as
// nine aligned words (quant.glsl's q4k_unit, q80_unit); every other type,
// or FAST off, eight elements decoded by q_decode8.  Every element's
// value is the CPU's, rounded as there (`precise`).
// Bindings: 0 = x (f32), 1 = w's blocks (words), 2 = y (f32).
#extension GL_EXT_control_flow_attributes : enable

layout(local_size_x_id = 5) in;
layout(constant_id = 0) const uint QT = 0u;
layout(constant_id = 1) const uint MM = 1u;       // rows of x, 1..8
layout(constant_id = 2) const uint LANES = 128u;  // invocations a row of w (a power of two)
layout(constant_id = 3) const uint RW = 1u;       // rows of w a workgroup
layout(constant_id = 4) const bool FAST = false;  // Q4_K / Q8_0 in whole units
layout(constant_id = 5) const uint NT = 128u;     // LANES * RW

layout(std430, binding = 0) readonly buffer Bx { float X[]; };
layout(std430, binding = 0) readonly buffer Bx4 { vec4 X4[]; };
layout(std430, binding = 1) readonly buffer Bq { uint QW[]; };
layout(std430, binding = 1) readonly buffer Bq4 { uvec4 QW4[]; };
layout(std430, binding = 2) writeonly buffer By { float Y[]; };

layout(push_constant) uniform PC {
    uint N, K;
    uint off_x;       // x's first element
    uint off_y;       // y's first element
    uint row_bytes;   // bytes of one row of w
    uint gx;          // workgroups along x (workgroup y * gx + x)
} pc;

#include "quant.glsl"

shared float red[NT * 8u];

bool xvec;

vec4 x4(uint o)
{
    if (xvec) return X4[o / 4u];
    return vec4(X[o], X[o + 1u], X[o + 2u], X[o + 3u]);
}

#define UN 4u

void main()
{
    uint t = gl_LocalInvocationID.x, lane = t % LANES, r = t / LANES;
    uint n = (gl_WorkGroupID.y * pc.gx + gl_WorkGroupID.x) * RW + r;
    xvec = (pc.off_x & 3u) == 0u;
    float acc[8];
    [[unroll]] for (uint m = 0u; m < 8u; m++) acc[m] = 0.0;
    if (n < pc.N) {
        uint row = n * pc.row_bytes;
        if (FAST && QT == QT_Q4_K) {
            uint units = pc.K / 32u;
            for (uint u0 = lane; u0 < units; u0 += UN * LANES) {
                uvec4 hd[UN], qs[UN];
                [[unroll]] for (uint i = 0u; i < UN; i++) {
                    uint u = u0 + i * LANES;
                    if (u < units) {
                        uint b16 = (row + (u / 8u) * 144u) / 16u;
                        hd[i] = QW4[b16];
                        qs[i] = QW4[b16 + 1u + u % 8u];
                    }
                }
                [[unroll]] for (uint i = 0u; i < UN; i++) {
                    uint u = u0 + i * LANES;
                    if (u >= units) break;
                    uint j = u % 8u;
                    vec4 lo[4], hi[4];
                    q4k_unit(hd[i], qs[i], j, lo, hi);
                    uint e = (u / 8u) * 256u + 64u * (j / 2u) + 16u * (j % 2u);
                    [[unroll]] for (uint m = 0u; m < MM; m++) {
                        uint xo = pc.off_x + m * pc.K + e;
                        float s = 0.0;
                        [[unroll]] for (uint q = 0u; q < 4u; q++) s += dot(x4(xo + 4u * q), lo[q]);
                        [[unroll]] for (uint q = 0u; q < 4u; q++) s += dot(x4(xo + 32u + 4u * q), hi[q]);
                        acc[m] += s;
                    }
                }
            }
        } else if (FAST && QT == QT_Q8_0) {
            uint units = pc.K / 32u;
            for (uint u0 = lane; u0 < units; u0 += UN * LANES) {
                uint wd[UN][9];
                [[unroll]] for (uint i = 0u; i < UN; i++) {
                    uint u = u0 + i * LANES;
                    if (u < units) {
                        uint a = (row + u * 34u) / 4u;
                        [[unroll]] for (uint k = 0u; k < 9u; k++) wd[i][k] = QW[a + k];
                    }
                }
                [[unroll]] for (uint i = 0u; i < UN; i++) {
                    uint u = u0 + i * LANES;
                    if (u >= units) break;
                    vec4 v[8];
                    q80_unit(row + u * 34u, wd[i], v);
                    [[unroll]] for (uint m = 0u; m < MM; m++) {
                        uint xo = pc.off_x + m * pc.K + u * 32u;
                        float s = 0.0;
                        [[unroll]] for (uint k = 0u; k < 8u; k++) s += dot(x4(xo + 4u * k), v[k]);
                        acc[m] += s;
                    }
                }
            }
        } else {
            uint per = q_block_elems() / 8u, bytes = q_block_bytes(), chunks = pc.K / 8u;
            for (uint c0 = lane; c0 < chunks; c0 += UN * LANES) {
                float w[UN][8];
                [[unroll]] for (uint i = 0u; i < UN; i++) {
                    uint ch = c0 + i * LANES;
                    if (ch < chunks) q_decode8(row + (ch / per) * bytes, (ch % per) * 8u, w[i]);
                }
                [[unroll]] for (uint i = 0u; i < UN; i++) {
                    uint ch = c0 + i * LANES;
                    if (ch >= chunks) break;
                    [[unroll]] for (uint m = 0u; m < MM; m++) {
                        uint xo = pc.off_x + m * pc.K + ch * 8u;
                        acc[m] += dot(x4(xo), vec4(w[i][0], w[i][1], w[i][2], w[i][3])) +
                                  dot(x4(xo + 4u), vec4(w[i][4], w[i][5], w[i][6], w[i][7]));
                    }
                }
            }
        }
    }
    // the lanes' sums: a fixed tree over each row's LANES slots
    [[unroll]] for (uint m = 0u; m < MM; m++) red[(r * 8u + m) * LANES + lane] = acc[m];
    barrier();
    for (uint s = LANES / 2u; s > 0u; s >>= 1) {
        if (lane < s)
            [[unroll]] for (uint m = 0u; m < MM; m++) red[(r * 8u + m) * LANES + lane] += red[(r * 8u + m) * LANES + lane + s];
        barrier();
    }
    if (lane < MM && n < pc.N) Y[pc.off_y + lane * pc.N + n] = red[(r * 8u + lane) * LANES];
}
