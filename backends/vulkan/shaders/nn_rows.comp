#version 450
// nn_rows.comp - softmax, log_softmax, layer_norm, rms_norm, group_norm:
// every op that reduces a row and then rewrites it.
//
// The input is contiguous (the host copies other views first).  Row r has
// `len` elements; element i of it sits at ((r / inner) * len + i) * inner +
// r % inner in both input and output (inner > 1 only for softmax over a
// non-last axis).  MODE 0: one workgroup per row, threads stride over the
// row and combine through shared memory (long rows); MODE 1: one thread
// per row, adjacent threads on adjacent rows so loads coalesce when
// inner > 1.  Statistics accumulate in f32; the row is read again for each
// pass instead of being held, so any length fits.
// Bindings: 0 = x, 1 = weight, 2 = bias, 3 = output.
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint OP = 0;      // NR_* below
layout(constant_id = 2) const uint DTX = 0;
layout(constant_id = 3) const uint DTW = 0;
layout(constant_id = 4) const uint DTB = 0;
layout(constant_id = 5) const uint DTO = 0;
layout(constant_id = 6) const uint MODE = 0;

#define NR_SOFTMAX 0
#define NR_LOG_SOFTMAX 1
#define NR_LAYER_NORM 2
#define NR_RMS_NORM 3
#define NR_GROUP_NORM 4

layout(push_constant) uniform PC {
    uint rows, len, inner;
    uint spatial, cpg, groups;   // group norm: elements per channel, channels per group
    int off_x, off_w, off_b;
    float eps;
    uint has_w, has_b;           // push constants, not variants: one test per element
} pc;

DECL_IO(0)
DECL_IO(1)
DECL_IO(2)
DECL_IO(3)

#define M_NAN uintBitsToFloat(0x7fc00000u)
#define M_NINF uintBitsToFloat(0xff800000u)

shared float red[256];

float comb(float a, float b, bool is_max)
{
    if (!is_max) return a + b;
    return isnan(a) || isnan(b) ? M_NAN : max(a, b);
}

// combines one value per thread (MODE 0) into the row's; MODE 1 has it already
float row_reduce(float v, bool is_max)
{
    if (MODE == 1) return v;
    uint t = gl_LocalInvocationID.x, n = gl_WorkGroupSize.x;
    red[t] = v;
    barrier();
    for (uint s = n / 2; s > 0; s >>= 1) {
        if (t < s) red[t] = comb(red[t], red[t + s], is_max);
        barrier();
    }
    float r = red[0];
    barrier();   // red is reused by the next reduction
    return r;
}

int at(uint r, uint i)
{
    return int(((r / pc.inner) * pc.len + i) * pc.inner + r % pc.inner);
}

float ld(uint r, uint i) { return ldf_0(DTX, pc.off_x + at(r, i)); }

// the affine parameters' index for element i of row r
uint param_at(uint r, uint i)
{
    if (OP != NR_GROUP_NORM) return i;
    return (r % pc.groups) * pc.cpg + i / pc.spatial;
}

void softmax_row(uint r, uint lane, uint lanes)
{
    float m = M_NINF;
    for (uint i = lane; i < pc.len; i += lanes) m = comb(m, ld(r, i), true);
    m = row_reduce(m, true);
    float s = 0.0;
    for (uint i = lane; i < pc.len; i += lanes) s += exp(ld(r, i) - m);
    s = row_reduce(s, false);
    if (OP == NR_SOFTMAX) {
        float inv = 1.0 / s;
        for (uint i = lane; i < pc.len; i += lanes) stf_3(DTO, at(r, i), exp(ld(r, i) - m) * inv);
    } else {
        float sub = m + log(s);
        for (uint i = lane; i < pc.len; i += lanes) stf_3(DTO, at(r, i), ld(r, i) - sub);
    }
}

void norm_row(uint r, uint lane, uint lanes)
{
    float mean = 0.0;
    if (OP != NR_RMS_NORM) {
        float s = 0.0;
        for (uint i = lane; i < pc.len; i += lanes) s += ld(r, i);
        mean = row_reduce(s, false) / float(pc.len);
    }
    float q = 0.0;
    for (uint i = lane; i < pc.len; i += lanes) {
        float d = ld(r, i) - mean;
        q += d * d;
    }
    float rstd = 1.0 / sqrt(row_reduce(q, false) / float(pc.len) + pc.eps);
    for (uint i = lane; i < pc.len; i += lanes) {
        uint p = param_at(r, i);
        float y = (ld(r, i) - mean) * rstd;
        if (pc.has_w != 0u) y *= ldf_1(DTW, pc.off_w + int(p));
        if (pc.has_b != 0u) y += ldf_2(DTB, pc.off_b + int(p));
        stf_3(DTO, at(r, i), y);
    }
}

void do_row(uint r, uint lane, uint lanes)
{
    if (OP == NR_SOFTMAX || OP == NR_LOG_SOFTMAX) softmax_row(r, lane, lanes);
    else norm_row(r, lane, lanes);
}

void main()
{
    if (MODE == 1) {
        uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
        for (uint r = gl_GlobalInvocationID.x; r < pc.rows; r += stride) do_row(r, 0, 1);
        return;
    }
    for (uint r = gl_WorkGroupID.x; r < pc.rows; r += gl_NumWorkGroups.x)
        do_row(r, gl_LocalInvocationID.x, gl_WorkGroupSize.x);
}
