#version 450
// nn_attn_sm.comp - the softmax between the two GEMMs of the D > 256
// attention on matrix products (nn_attn_fa.c, run_gemm): binding 0 holds
// `rows` rows of `len` f32 scores (Q K^T, unscaled, contiguous), binding 1
// gets P = softmax(scale * S) row by row in dtype DTP (f16 / bf16 as the
// inputs, or f32).  Row r is query q0 + r % m of its (batch, head): under
// causal, keys past it get P = 0 (the CPU's -inf).
//
// One workgroup a row (looping where there are more rows than workgroups):
// each invocation folds its strided elements into a running maximum and
// sum (the online softmax), the pairs are combined in a fixed tree through
// shared memory, and the row is read once more to write P.  The order of
// every sum depends on the row's length only, never on the grid.  As the
// CPU: max-subtracted exp in f32, a NaN anywhere in the row makes the row
// NaN, a row with nothing visible (max -inf) gives NaN.
#include "common.glsl"

#define NT 256
layout(local_size_x = NT) in;
layout(constant_id = 0) const uint DTP = 0;
layout(push_constant) uniform PC {
    uint rows, len, m, q0;
    float scale;
    uint causal;
} pc;
DECL_BUF(0)
DECL_IO(1)

shared float sm_m[NT], sm_s[NT];

#define NEG_INF uintBitsToFloat(0xff800000u)

// (m, s) folded with (mb, sb): the larger maximum, the sums rescaled to it
void fold(inout float m, inout float s, float mb, float sb)
{
    if (isnan(mb) || isnan(m)) { m = m + mb; s = m; return; }
    float mn = max(m, mb);
    if (mn == NEG_INF) return;
    s = (m == mn ? s : s * exp(m - mn)) + (mb == mn ? sb : sb * exp(mb - mn));
    m = mn;
}

void main()
{
    uint t = gl_LocalInvocationID.x;
    for (uint r = gl_WorkGroupID.x; r < pc.rows; r += gl_NumWorkGroups.x) {
        uint base = r * pc.len;
        // keys visible to this row: all, or up to its query under causal
        uint vis = pc.len;
        if (pc.causal != 0u) vis = min(pc.len, pc.q0 + r % pc.m + 1u);
        float m = NEG_INF, s = 0.0;
        for (uint j = t; j < vis; j += NT)
            fold(m, s, pc.scale * uintBitsToFloat(u32_0.v[base + j]), 1.0);
        sm_m[t] = m;
        sm_s[t] = s;
        barrier();
        for (uint h = NT / 2; h > 0u; h >>= 1) {
            if (t < h) {
                float a = sm_m[t], b = sm_s[t];
                fold(a, b, sm_m[t + h], sm_s[t + h]);
                sm_m[t] = a;
                sm_s[t] = b;
            }
            barrier();
        }
        float mx = sm_m[0], inv = 1.0 / sm_s[0];
        barrier();
        for (uint j = t; j < pc.len; j += NT) {
            float x = pc.scale * uintBitsToFloat(u32_0.v[base + j]);
            float p = j < vis ? exp(x - mx) * inv : 0.0;
            if (mx == NEG_INF || isnan(mx)) p = uintBitsToFloat(0x7fc00000u);
            stf_1(DTP, int(base + j), p);
        }
    }
}
