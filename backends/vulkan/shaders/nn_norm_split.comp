#version 450
// nn_norm_split.comp - layer_norm, rms_norm and group_norm of few long rows
// (a VAE's GroupNorm(32) over 128 channels x 512 x 512: 32 rows of a
// million elements), where nn_rows.comp's workgroup per row would leave
// most of the GPU idle.  Each row is cut into chunks of `chunk` elements,
// one workgroup per (chunk, row), in two dispatches:
//  STAGE 0: each chunk's count, mean and sum of squared deviations from
//           that mean (two passes over the chunk, the second from cache),
//           to the stats buffer (binding 4: 2 floats per chunk);
//  STAGE 1: each workgroup combines its row's chunk statistics (Chan et
//           al.'s parallel formula: mean = sum n_c m_c / n, M2 = sum M2_c +
//           n_c (m_c - mean)^2), then normalises its chunk with the affine
//           parameters.
// So x is read twice from memory and the output written once, by the whole
// GPU.  RMS norm keeps mean 0 (M2 is then the sum of squares).  NaN and
// infinities spread through the statistics as in nn_rows.comp's passes.
// Contiguous input (the host copies other views first), rows of `len`
// elements at r * len.  Bindings: 0 = x, 1 = weight, 2 = bias,
// 3 = output, 4 = stats (f32).
#include "common.glsl"

#define NT 256
layout(local_size_x = NT) in;
layout(constant_id = 0) const uint STAGE = 0;
layout(constant_id = 1) const uint OP = 0;      // nn_rows.comp's NR_* codes
layout(constant_id = 2) const uint DTX = 0;
layout(constant_id = 3) const uint DTW = 0;
layout(constant_id = 4) const uint DTB = 0;
layout(constant_id = 5) const uint DTO = 0;

#define NR_RMS_NORM 3
#define NR_GROUP_NORM 4

layout(push_constant) uniform PC {
    uint rows, len, chunk, nch;      // nch = chunks per row
    uint spatial, cpg, groups;       // group norm: elements per channel, channels per group
    int off_x, off_w, off_b;
    float eps;
    uint has_w, has_b;
} pc;

DECL_IO(0)
DECL_IO(1)
DECL_IO(2)
DECL_IO(3)
DECL_IO(4)

shared float red[NT];

float wg_sum(float v)
{
    uint t = gl_LocalInvocationID.x;
    red[t] = v;
    barrier();
    for (uint s = NT / 2; s > 0; s >>= 1) {
        if (t < s) red[t] += red[t + s];
        barrier();
    }
    float r = red[0];
    barrier();   // red is reused by the next sum
    return r;
}

float ld(uint r, uint i) { return ldf_0(DTX, pc.off_x + int(r * pc.len + i)); }

// elements in chunk c
uint count(uint c) { return min(pc.chunk, pc.len - c * pc.chunk); }

void chunk_stats(uint r, uint c)
{
    uint t = gl_LocalInvocationID.x, i0 = c * pc.chunk, i1 = i0 + count(c);
    float mean = 0.0;
    if (OP != NR_RMS_NORM) {
        float s = 0.0;
        for (uint i = i0 + t; i < i1; i += NT) s += ld(r, i);
        mean = wg_sum(s) / float(count(c));
    }
    float q = 0.0;
    for (uint i = i0 + t; i < i1; i += NT) {
        float d = ld(r, i) - mean;
        q += d * d;
    }
    q = wg_sum(q);
    if (t == 0u) {
        int at = int((r * pc.nch + c) * 2u);
        stf_4(DT_F32, at, mean);
        stf_4(DT_F32, at + 1, q);
    }
}

void normalize_chunk(uint r, uint c)
{
    uint t = gl_LocalInvocationID.x;
    int base = int(r * pc.nch * 2u);
    float s = 0.0;
    for (uint k = t; k < pc.nch; k += NT) s += float(count(k)) * ldf_4(DT_F32, base + int(2u * k));
    float mean = wg_sum(s) / float(pc.len);
    float q = 0.0;
    for (uint k = t; k < pc.nch; k += NT) {
        float d = ldf_4(DT_F32, base + int(2u * k)) - mean;
        q += ldf_4(DT_F32, base + int(2u * k) + 1) + (OP == NR_RMS_NORM ? 0.0 : float(count(k)) * d * d);
    }
    float rstd = 1.0 / sqrt(wg_sum(q) / float(pc.len) + pc.eps);
    uint i0 = c * pc.chunk, i1 = i0 + count(c);
    for (uint i = i0 + t; i < i1; i += NT) {
        uint p = OP == NR_GROUP_NORM ? (r % pc.groups) * pc.cpg + i / pc.spatial : i;
        float y = (ld(r, i) - mean) * rstd;
        if (pc.has_w != 0u) y *= ldf_1(DTW, pc.off_w + int(p));
        if (pc.has_b != 0u) y += ldf_2(DTB, pc.off_b + int(p));
        stf_3(DTO, int(r * pc.len + i), y);
    }
}

void main()
{
    uint c = gl_WorkGroupID.x, r = gl_WorkGroupID.y;
    if (STAGE == 0u) chunk_stats(r, c);
    else normalize_chunk(r, c);
}
