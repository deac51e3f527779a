#version 450
// nn_norm_vec.comp - softmax, log_softmax, layer/rms/group norm that read
// their input once from memory: each thread holds its elements in
// registers between the reductions and the write.  A workgroup of NT
// threads takes a "tile" of NT * 4 * R elements (R <= 8 vectors of 4 per
// thread): thread t's k-th vector is elements (k * NT + t) * 4 .. + 3 of
// the tile, so a subgroup's loads are consecutive 16-byte (f32) or 8-byte
// (f16/bf16) vectors.  VEC = 0 (rows or offsets not multiples of 4) loads
// the same elements one by one.  Statistics in f32, reductions through
// subgroupAdd/Max and one shared slot per subgroup.
//  MODE 2 (ROWS): a tile holds a whole row (len <= NT * 4 * R): max and
//          sum of exp (softmax), or mean and centred sum of squares (the
//          norms) from the registers, then the write.  Workgroups loop over
//          rows.
//  MODE 0 (STATS): rows too long for a tile (few groups of a GroupNorm
//          over millions of elements) are cut into tiles, a workgroup each
//          (x = tile, y = row); each writes its tile's mean and centred sum
//          of squares (two passes over registers) to the stats buffer.
//  MODE 3 (FINAL): one workgroup per row combines the row's tile
//          statistics (Chan et al.: mean = sum n_c m_c / n, M2 = sum M2_c +
//          n_c (m_c - mean)^2) into mean and 1/std at stats[2 * (rows *
//          nch + r)]; only used where rows have many tiles (pc.fin).
//  MODE 1 (NORM): each workgroup loads its tile, then combines its row's
//          tile statistics itself (or reads MODE 3's), and writes the tile.
//          With pc.rev the tiles go in the reverse order of MODE 0, so the
//          first ones read what MODE 0 left in L2 last.
// RMS norm keeps mean 0 (M2 is then the sum of squares).  NaN and
// infinities spread through the statistics as in nn_rows.comp.
// Contiguous input (the host copies other views first), rows of `len`
// elements at r * len.  Bindings: 0 = x, 1 = weight, 2 = bias,
// 3 = output, 4 = stats (f32).
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint MODE = 0;
layout(constant_id = 2) const uint OP = 0;      // nn_rows.comp's NR_* codes
layout(constant_id = 3) const uint DTX = 0;
layout(constant_id = 4) const uint DTW = 0;
layout(constant_id = 5) const uint DTB = 0;
layout(constant_id = 6) const uint DTO = 0;
layout(constant_id = 7) const uint R = 1;       // vectors per thread, 1..RMAX
layout(constant_id = 8) const bool VEC = true;
// 16-bit x and output, R even, rows and offset multiples of 8: a thread's
// vectors 2p and 2p + 1 are 8 consecutive elements, one 16-byte access
layout(constant_id = 9) const bool W8 = false;
// f16 stores through packHalf2x16 (the host sets it only where the driver
// is known to round it to nearest even); otherwise f32_to_f16's integer
// rounding, whose ~20 integer operations an element made the f16 write
// pass ALU-bound on the H100
layout(constant_id = 10) const bool HWCVT = false;

#define RMAX 8
#define NR_SOFTMAX 0
#define NR_LOG_SOFTMAX 1
#define NR_LAYER_NORM 2
#define NR_RMS_NORM 3
#define NR_GROUP_NORM 4
#define M_ROWS 2
#define M_STATS 0
#define M_NORM 1
#define M_FINAL 3
#define M_NAN uintBitsToFloat(0x7fc00000u)
#define M_NINF uintBitsToFloat(0xff800000u)

layout(push_constant) uniform PC {
    uint rows, len, nch;             // nch = tiles per row (split modes)
    uint spatial, cpg, groups;       // group norm: elements per channel, channels per group
    int off_x, off_w, off_b;
    float eps;
    uint has_w, has_b, rev, fin;
} pc;

DECL_IO(0)
DECL_IO(1)
DECL_IO(2)
DECL_IO(3)
DECL_IO(4)
// vector views of x and of the output
layout(std430, set = 0, binding = 0) readonly buffer Xv4 { uvec4 v[]; } x4;
layout(std430, set = 0, binding = 0) readonly buffer Xv2 { uvec2 v[]; } x2;
layout(std430, set = 0, binding = 3) writeonly buffer Ov4 { uvec4 v[]; } o4;
layout(std430, set = 0, binding = 3) writeonly buffer Ov2 { uvec2 v[]; } o2;

const uint NT = gl_WorkGroupSize.x;
shared float red[128];   // one slot per subgroup

bool is_norm() { return OP != NR_SOFTMAX && OP != NR_LOG_SOFTMAX; }

float comb_max(float a, float b) { return isnan(a) || isnan(b) ? M_NAN : max(a, b); }

float wg_sum(float v)
{
    v = subgroupAdd(v);
    if (subgroupElect()) red[gl_SubgroupID] = v;
    barrier();
    float r = 0.0;
    for (uint s = 0; s < gl_NumSubgroups; s++) r += red[s];
    barrier();   // red is reused by the next reduction
    return r;
}

float wg_max(float v)
{
    // subgroupMax drops NaN on some drivers: flag it beside
    float m = subgroupMax(isnan(v) ? M_NINF : v);
    bool nan = subgroupMax(isnan(v) ? 1.0 : 0.0) != 0.0;
    if (subgroupElect()) red[gl_SubgroupID] = nan ? M_NAN : m;
    barrier();
    float r = M_NINF;
    for (uint s = 0; s < gl_NumSubgroups; s++) r = comb_max(r, red[s]);
    barrier();
    return r;
}

uint f2h(float f) { return DTO == DT_BF16 ? f32_to_bf16(f) : f32_to_f16(f); }

vec4 h4(uvec2 h)
{
    if (DTX == DT_BF16)
        return uintBitsToFloat(uvec4(h.x << 16, h.x & 0xffff0000u, h.y << 16, h.y & 0xffff0000u));
    return vec4(unpackHalf2x16(h.x), unpackHalf2x16(h.y));
}

uvec2 f4(vec4 y)
{
    if (HWCVT && DTO == DT_F16) return uvec2(packHalf2x16(y.xy), packHalf2x16(y.zw));
    return uvec2(f2h(y.x) | (f2h(y.y) << 16), f2h(y.z) | (f2h(y.w) << 16));
}

// elements e .. e + 3 of x (e a multiple of 4 with VEC), those at or past
// `end` as `pad`
vec4 ld4(uint e, uint end, float pad)
{
    if (VEC && e + 3u < end) {
        uint q = (uint(pc.off_x) + e) >> 2;
        if (DTX == DT_F32) return uintBitsToFloat(x4.v[q]);
        return h4(x2.v[q]);
    }
    vec4 r;
    [[unroll]] for (uint j = 0; j < 4; j++)
        r[j] = e + j < end ? ldf_0(DTX, pc.off_x + int(e + j)) : pad;
    return r;
}

void st4(uint e, uint end, vec4 y)
{
    if (VEC && e + 3u < end) {
        uint q = e >> 2;
        if (DTO == DT_F32) o4.v[q] = floatBitsToUint(y);
        else o2.v[q] = f4(y);
        return;
    }
    [[unroll]] for (uint j = 0; j < 4; j++)
        if (e + j < end) stf_3(DTO, int(e + j), y[j]);
}

vec4 v[RMAX];   // the tile's elements held by this thread

// element index (in the row) of this thread's vector k, tile start t0
uint el(uint t0, uint k)
{
    if (W8) return t0 + ((k >> 1) * NT + gl_LocalInvocationID.x) * 8u + (k & 1u) * 4u;
    return t0 + (k * NT + gl_LocalInvocationID.x) * 4u;
}


// loads this thread's part of the tile at row r, elements t0 .. t1 - 1
void load_tile(uint r, uint t0, uint t1, float pad)
{
    uint rb = r * pc.len;
    [[unroll]] for (uint k = 0; k < RMAX; k++)
        if (k < R) {
            uint e = rb + el(t0, k);
            if (W8 && (k & 1u) == 0u && e + 7u < rb + t1) {
                uvec4 h = x4.v[(uint(pc.off_x) + e) >> 3];
                v[k] = h4(h.xy);
                v[k + 1] = h4(h.zw);
            } else if (!W8 || (k & 1u) == 0u || e + 3u >= rb + t1) {
                v[k] = ld4(e, rb + t1, pad);
            }
        }
}

// writes this thread's part of the tile from v (row r, elements t0 .. t1)
void store_tile(uint r, uint t0, uint t1)
{
    uint rb = r * pc.len;
    [[unroll]] for (uint k = 0; k < RMAX; k++) {
        if (k >= R) continue;
        uint e = rb + el(t0, k);
        if (W8 && (k & 1u) == 0u && e + 7u < rb + t1) o4.v[e >> 3] = uvec4(f4(v[k]), f4(v[k + 1]));
        else if (!W8 || (k & 1u) == 0u || e + 3u >= rb + t1) st4(e, rb + t1, v[k]);
    }
}

// the tile's mean (n elements; 0 for RMS norm) and centred sum of squares
vec2 tile_stats(uint t0, uint t1)
{
    float mean = 0.0;
    if (OP != NR_RMS_NORM) {
        float s = 0.0;
        [[unroll]] for (uint k = 0; k < RMAX; k++)
            if (k < R) s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
        mean = wg_sum(s) / float(t1 - t0);
    }
    float q = 0.0;
    [[unroll]] for (uint k = 0; k < RMAX; k++) {
        if (k < R) {
            uint e = el(t0, k);
            [[unroll]] for (uint j = 0; j < 4; j++) {
                float d = e + j < t1 ? v[k][j] - mean : 0.0;
                q += d * d;
            }
        }
    }
    return vec2(mean, wg_sum(q));
}

// normalises and writes this thread's part of the tile (row r, t0 .. t1)
void write_norm(uint r, uint t0, uint t1, float mean, float rstd)
{
    [[unroll]] for (uint k = 0; k < RMAX; k++) {
        if (k >= R) continue;
        uint e = el(t0, k);
        if (e >= t1) continue;
        vec4 y = (v[k] - mean) * rstd;
        if (OP == NR_GROUP_NORM && (pc.has_w != 0u || pc.has_b != 0u)) {
            uint c0 = (r % pc.groups) * pc.cpg;
            if (pc.spatial % 4u == 0u && e + 3u < t1) {
                // the 4 elements are of one channel
                uint p = c0 + e / pc.spatial;
                if (pc.has_w != 0u) y *= ldf_1(DTW, pc.off_w + int(p));
                if (pc.has_b != 0u) y += ldf_2(DTB, pc.off_b + int(p));
            } else [[unroll]] for (uint j = 0; j < 4; j++) {
                uint p = c0 + min(e + j, t1 - 1u) / pc.spatial;
                if (pc.has_w != 0u) y[j] *= ldf_1(DTW, pc.off_w + int(p));
                if (pc.has_b != 0u) y[j] += ldf_2(DTB, pc.off_b + int(p));
            }
        } else if (OP != NR_GROUP_NORM) {
            [[unroll]] for (uint j = 0; j < 4; j++) {
                uint p = min(e + j, t1 - 1u);
                if (pc.has_w != 0u) y[j] *= ldf_1(DTW, pc.off_w + int(p));
                if (pc.has_b != 0u) y[j] += ldf_2(DTB, pc.off_b + int(p));
            }
        }
        v[k] = y;
    }
    store_tile(r, t0, t1);
}

void softmax_row(uint r)
{
    float m = M_NINF;
    [[unroll]] for (uint k = 0; k < RMAX; k++)
        if (k < R) m = comb_max(comb_max(m, comb_max(v[k].x, v[k].y)), comb_max(v[k].z, v[k].w));
    m = wg_max(m);
    // softmax keeps exp(x - m) in place of x (the padding's is 0)
    float s = 0.0;
    [[unroll]] for (uint k = 0; k < RMAX; k++)
        if (k < R) {
            uint e = el(0u, k);
            vec4 ex;
            [[unroll]] for (uint j = 0; j < 4; j++) ex[j] = e + j < pc.len ? exp(v[k][j] - m) : 0.0;
            s += (ex.x + ex.y) + (ex.z + ex.w);
            if (OP == NR_SOFTMAX) v[k] = ex;
        }
    s = wg_sum(s);
    float inv = 1.0 / s, sub = m + log(s);
    [[unroll]] for (uint k = 0; k < RMAX; k++)
        if (k < R) v[k] = OP == NR_SOFTMAX ? v[k] * inv : v[k] - sub;
    store_tile(r, 0u, pc.len);
}

uint tile_len() { return NT * 4u * R; }
uint tile_n(uint c) { return min(tile_len(), pc.len - c * tile_len()); }
int stat_at(uint r, uint c) { return int((r * pc.nch + c) * 2u); }

// the row's mean and 1/std from its tiles' statistics (every thread)
vec2 combine(uint r)
{
    float s = 0.0;
    for (uint c = gl_LocalInvocationID.x; c < pc.nch; c += NT)
        s += float(tile_n(c)) * ldf_4(DT_F32, stat_at(r, c));
    float mean = OP == NR_RMS_NORM ? 0.0 : wg_sum(s) / float(pc.len);
    float q = 0.0;
    for (uint c = gl_LocalInvocationID.x; c < pc.nch; c += NT) {
        float d = ldf_4(DT_F32, stat_at(r, c)) - mean;
        q += ldf_4(DT_F32, stat_at(r, c) + 1) + (OP == NR_RMS_NORM ? 0.0 : float(tile_n(c)) * d * d);
    }
    return vec2(mean, 1.0 / sqrt(wg_sum(q) / float(pc.len) + pc.eps));
}

void main()
{
    if (MODE == M_ROWS) {
        for (uint r = gl_WorkGroupID.x; r < pc.rows; r += gl_NumWorkGroups.x) {
            float pad = is_norm() ? 0.0 : M_NINF;
            load_tile(r, 0u, pc.len, pad);
            if (!is_norm()) {
                softmax_row(r);
            } else {
                vec2 st = tile_stats(0u, pc.len);
                write_norm(r, 0u, pc.len, st.x, 1.0 / sqrt(st.y / float(pc.len) + pc.eps));
            }
        }
        return;
    }
    uint c = gl_WorkGroupID.x, r = gl_WorkGroupID.y;
    if (MODE == M_FINAL) {
        vec2 f = combine(c);
        if (gl_LocalInvocationID.x == 0u) {
            stf_4(DT_F32, int((pc.rows * pc.nch + c) * 2u), f.x);
            stf_4(DT_F32, int((pc.rows * pc.nch + c) * 2u) + 1, f.y);
        }
        return;
    }
    if (MODE == M_NORM && pc.rev != 0u) {
        c = pc.nch - 1u - c;
        r = pc.rows - 1u - r;
    }
    uint t0 = c * tile_len(), t1 = t0 + tile_n(c);
    load_tile(r, t0, t1, 0.0);
    if (MODE == M_STATS) {
        vec2 st = tile_stats(t0, t1);
        if (gl_LocalInvocationID.x == 0u) {
            stf_4(DT_F32, stat_at(r, c), st.x);
            stf_4(DT_F32, stat_at(r, c) + 1, st.y);
        }
        return;
    }
    vec2 f;
    if (pc.fin != 0u) {
        int at = int((pc.rows * pc.nch + r) * 2u);
        f = vec2(ldf_4(DT_F32, at), ldf_4(DT_F32, at + 1));
    } else {
        f = combine(r);
    }
    write_norm(r, t0, t1, f.x, f.y);
}
