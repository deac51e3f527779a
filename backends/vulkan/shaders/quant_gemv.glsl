#version 450
// quant_gemv.glsl - y [M, N] = x [M, K] w [N, K]^T for a few rows of x
// (M <= 8) and a quantized w (op qlinear; quant.c picks it for M <= 8).
//
// A workgroup of 256 computes RW = 8 output columns (rows of w) for all M
// rows of x, 32 invocations a row of w (the "lanes" of that row).  A GEMV
// is bound by memory: each lane walks its row in units interleaved with
// its neighbours' (lane l takes units l, l + 32, ...: neighbours read
// neighbouring bytes), issues the loads of UN units before it uses any,
// and keeps M running sums in f32.  The 32 partial sums of a row are then
// added in shared memory in lane order by one invocation, so the order of
// every addition is fixed by the shapes alone and the result is the same
// on every run.
// Units: Q4_K, a 16-byte load of codes (32 elements of two sub-blocks) and
// the block's 16-byte head (d, dmin, the 12 bytes of scales); Q8_0, one
// block of 34 bytes as nine aligned words; every other type eight elements
// decoded by quant.glsl.  Every element's value is the CPU's (d * scale) *
// code - dmin * min, rounded as there (`precise`), as in quant.glsl.
// Bindings: 0 = x (f32), 1 = w's blocks (words), 2 = y (f32).
#extension GL_EXT_control_flow_attributes : enable

#define LANES 32u
#define RW 8u
#define NT (LANES * RW)
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint QT = 0u;
layout(constant_id = 1) const uint MM = 1u;     // rows of x, 1..8

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

shared float red[RW * 8u * LANES];

bool xvec;

vec4 x4(uint o)
{
    if (xvec) return X4[o / 4u];
    return vec4(X[o], X[o + 1u], X[o + 2u], X[o + 3u]);
}

// one byte of a Q4_K block's 12 scale bytes (head words y, z, w)
uint k_sb(uvec4 hd, uint i) { return (hd[1u + i / 4u] >> (8u * (i % 4u))) & 0xffu; }

// Q4_K: sub-block s's d * scale and dmin * min, as quant.glsl's q_codes8
void k_scale(uvec4 hd, uint s, out float ds, out float ms)
{
    uint sc, mn;
    if (s < 4u) {
        sc = k_sb(hd, s) & 63u;
        mn = k_sb(hd, s + 4u) & 63u;
    } else {
        uint b8 = k_sb(hd, s + 4u);
        sc = (b8 & 15u) | (k_sb(hd, s - 4u) >> 6) << 4;
        mn = (b8 >> 4) | (k_sb(hd, s) >> 6) << 4;
    }
    vec2 dm = unpackHalf2x16(hd.x);
    precise float pds = dm.x * float(sc), pms = dm.y * float(mn);
    ds = pds;
    ms = pms;
}

// 16 values from nibbles (shift sh) of four code words: ds * code - ms
void k_vals(uvec4 q, uint sh, float ds, float ms, out vec4 v[4])
{
    [[unroll]] for (uint i = 0u; i < 4u; i++)
        [[unroll]] for (uint j = 0u; j < 4u; j++) {
            precise float y = ds * float((q[i] >> (8u * j + sh)) & 15u) - ms;
            v[i][j] = y;
        }
}

#define UN 4u

void main()
{
    uint t = gl_LocalInvocationID.x, lane = t % LANES, r = t / LANES;
    uint n = (gl_WorkGroupID.y * pc.gx + gl_WorkGroupID.x) * RW + r;
    xvec = (pc.off_x & 3u) == 0u && (pc.K & 3u) == 0u;
    float acc[8];
    [[unroll]] for (uint m = 0u; m < 8u; m++) acc[m] = 0.0;
    if (n < pc.N) {
        uint row = n * pc.row_bytes;
        if (QT == QT_Q4_K) {
            // unit u: block u / 8, code bytes 16 (u % 8) .. (j = u % 8:
            // group g = j / 2 of 32 bytes, half h = j % 2)
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
                    uint j = u % 8u, g = j / 2u, h = j % 2u;
                    float ds0, ms0, ds1, ms1;
                    k_scale(hd[i], 2u * g, ds0, ms0);
                    k_scale(hd[i], 2u * g + 1u, ds1, ms1);
                    vec4 lo[4], hi[4];
                    k_vals(qs[i], 0u, ds0, ms0, lo);
                    k_vals(qs[i], 4u, ds1, ms1, hi);
                    uint e = (u / 8u) * 256u + 64u * g + 16u * h;
                    [[unroll]] for (uint m = 0u; m < MM; m++) {
                        uint xo = pc.off_x + m * pc.K + e;
                        float s = 0.0;
                        [[unroll]] for (uint q = 0u; q < 4u; q++) s += dot(x4(xo + 4u * q), lo[q]);
                        [[unroll]] for (uint q = 0u; q < 4u; q++) s += dot(x4(xo + 32u + 4u * q), hi[q]);
                        acc[m] += s;
                    }
                }
            }
        } else if (QT == QT_Q8_0) {
            // unit: one block, from the nine words that hold its 34 bytes
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
                    bool odd = ((row + u * 34u) & 2u) != 0u;     // the block starts 2 bytes into a word
                    float d = unpackHalf2x16(odd ? wd[i][0] >> 16 : wd[i][0]).x;
                    vec4 v[8];
                    [[unroll]] for (uint k = 0u; k < 8u; k++) {
                        uint q = odd ? wd[i][k + 1u] : (wd[i][k] >> 16) | (wd[i][k + 1u] << 16);
                        [[unroll]] for (uint j = 0u; j < 4u; j++) {
                            precise float y = d * float(q_sbyte(q, j));
                            v[k][j] = y;
                        }
                    }
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
    [[unroll]] for (uint m = 0u; m < MM; m++) red[(r * 8u + m) * LANES + lane] = acc[m];
    barrier();
    if (t < RW * MM) {
        uint rr = t / MM, m = t % MM, nn = (gl_WorkGroupID.y * pc.gx + gl_WorkGroupID.x) * RW + rr;
        float s = 0.0;
        for (uint l = 0u; l < LANES; l++) s += red[(rr * 8u + m) * LANES + l];
        if (nn < pc.N) Y[pc.off_y + m * pc.N + nn] = s;
    }
}
