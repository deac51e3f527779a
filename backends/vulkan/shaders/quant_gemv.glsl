#version 450
// quant_gemv.glsl - y [M, N] = x [M, K] w [N, K]^T for a few rows of x
// (M <= 8) and a quantized w (op qlinear; quant.c picks it for M <= 8).
//
// A workgroup computes one output column n for all M rows: its 128
// invocations walk row n of w eight elements at a time (chunk t, t + 128,
// ...: neighbours read neighbouring bytes), decode them in registers
// (quant.glsl) and accumulate x . w in f32, then add their partial sums in
// shared memory in a fixed tree.  Nothing depends on timing, so the result
// is the same on every run.  Memory traffic is the weight row once; x stays
// in the caches.
// Bindings: 0 = x (f32), 1 = w's blocks (words), 2 = y (f32).
#extension GL_EXT_control_flow_attributes : enable

#define NT 128u
#define UN 4u
layout(local_size_x = 128) in;
layout(constant_id = 0) const uint QT = 0u;
layout(constant_id = 1) const uint MM = 1u;     // rows of x, 1..8

layout(std430, binding = 0) readonly buffer Bx { float X[]; };
layout(std430, binding = 0) readonly buffer Bx4 { vec4 X4[]; };
layout(std430, binding = 1) readonly buffer Bq { uint QW[]; };
layout(std430, binding = 2) writeonly buffer By { float Y[]; };

layout(push_constant) uniform PC {
    uint N, K;
    uint off_x;       // x's first element
    uint off_y;       // y's first element
    uint row_bytes;   // bytes of one row of w
    uint gx;          // workgroups along x (n = y * gx + x)
} pc;

#include "quant.glsl"

shared float red[8u * NT];

void main()
{
    uint n = gl_WorkGroupID.y * pc.gx + gl_WorkGroupID.x, t = gl_LocalInvocationID.x;
    if (n >= pc.N) return;          // the whole workgroup: no barrier is skipped by part of it
    uint per = q_block_elems() / 8u, bytes = q_block_bytes(), chunks = pc.K / 8u;
    uint row = n * pc.row_bytes;
    bool vec = (pc.off_x & 3u) == 0u;
    float acc[8];
    [[unroll]] for (uint m = 0u; m < 8u; m++) acc[m] = 0.0;
    // UN chunks an iteration, decoded before any is used, so that their
    // loads are in flight together (a GEMV is bound by memory latency)
    for (uint c0 = t; c0 < chunks; c0 += UN * NT) {
        float w[UN][8];
        [[unroll]] for (uint u = 0u; u < UN; u++) {
            uint ch = c0 + u * NT;
            if (ch < chunks) q_decode8(row + (ch / per) * bytes, (ch % per) * 8u, w[u]);
        }
        [[unroll]] for (uint u = 0u; u < UN; u++) {
            uint ch = c0 + u * NT;
            if (ch >= chunks) break;
            [[unroll]] for (uint m = 0u; m < MM; m++) {
                uint xo = pc.off_x + m * pc.K + ch * 8u;
                vec4 a, b;
                if (vec) {
                    a = X4[xo / 4u];
                    b = X4[xo / 4u + 1u];
                } else {
                    a = vec4(X[xo], X[xo + 1u], X[xo + 2u], X[xo + 3u]);
                    b = vec4(X[xo + 4u], X[xo + 5u], X[xo + 6u], X[xo + 7u]);
                }
                acc[m] += dot(a, vec4(w[u][0], w[u][1], w[u][2], w[u][3])) +
                          dot(b, vec4(w[u][4], w[u][5], w[u][6], w[u][7]));
            }
        }
    }
    [[unroll]] for (uint m = 0u; m < MM; m++) red[m * NT + t] = acc[m];
    barrier();
    [[unroll]] for (uint s = NT / 2u; s > 0u; s >>= 1) {
        if (t < s)
            [[unroll]] for (uint m = 0u; m < MM; m++) red[m * NT + t] += red[m * NT + t + s];
        barrier();
    }
    if (t < MM) Y[pc.off_y + t * pc.N + n] = red[t * NT];
}
