#version 450
// scatter.comp - scatter and scatter_add along one axis, after the node
// was filled with a.  One invocation per fiber of idx (a line of idx along
// the axis: every other coordinate fixed) walks its T positions in order.
// Two positions can only hit the same element of the node when they share
// every coordinate but the axis, i.e. sit in one fiber, so fibers never
// collide and each destination sees its writes in row-major order: the
// last write wins (SCATTER) and sums are taken in the CPU's order
// (SCATTER_ADD), deterministic and bit-equal to it.  idx (i64) and src
// (the node's dtype) are contiguous with idx's shape; the node is
// contiguous.  A bad index is skipped and reported through binding 3.
//
// Long fibers would leave one invocation walking thousands of positions, so
// for those (MODE SC_NORM, then a sort, then SC_APPLY) the indices are first
// normalised into rows [fiber, T] (bad ones reported and set to len), each
// row is stably argsorted by destination (sort.comp, into binding 3), and
// one invocation per run of equal destinations applies the run's positions
// in their original order: the same writes, in the same order per element.
#include "common.glsl"

layout(local_size_x = 64) in;
layout(constant_id = 0) const uint DT = 0;
layout(constant_id = 1) const uint ADD = 0;
layout(constant_id = 2) const uint MODE = 0;

layout(push_constant) uniform PC {
    uint nfib;
    int ndim, axis, T, len, off_i, off_s;
    int ishape[8];
    int oshape[8];
} pc;

DECL_IO(0)
DECL_IO(1)
DECL_IO(2)
DECL_BUF(3)

// dst += src in DT, as the CPU's add_elem: floats add once in f32 (the
// exact sum of two f16/bf16/f32 rounded to f32, as the CPU's double sum
// converted through float) then round to DT; integers wrap; bool is OR
void add_elem(int dst, int src)
{
    if (DT == DT_F32 || DT == DT_F16 || DT == DT_BF16) {
        precise float s = ldf_2(DT, dst) + ldf_1(DT, src);
        stf_2(DT, dst, s);
    } else if (DT == DT_BOOL) {
        sti_2(DT, dst, (ldi_2(DT, dst) | ldi_1(DT, src)) != 0l ? 1l : 0l);
    } else {
        sti_2(DT, dst, ldi_2(DT, dst) + ldi_1(DT, src));
    }
}

void move_elem(int dst, int src)
{
    if (DT == DT_F64 || DT == DT_I64) u64_2.v[dst] = u64_1.v[src];
    else if (DT == DT_F32 || DT == DT_I32) u32_2.v[dst] = u32_1.v[src];
    else if (DT == DT_F16 || DT == DT_BF16 || DT == DT_I16) u16_2.v[dst] = u16_1.v[src];
    else u8_2.v[dst] = u8_1.v[src];
}

// offsets of fiber f's first position in idx/src (bi) and in the node
// (bo), and the strides along the axis in both (sia, soa)
void fiber_base(uint f, out int bi, out int bo, out int sia, out int soa)
{
    int si = 1, so = 1;
    bi = 0; bo = 0; sia = 1; soa = 1;
    uint r = f;
    for (int d = pc.ndim - 1; d >= 0; d--) {
        if (d == pc.axis) {
            sia = si;
            soa = so;
        } else {
            uint s = uint(pc.ishape[d]);
            int c = int(r % s);
            r /= s;
            bi += c * si;
            bo += c * so;
        }
        si *= pc.ishape[d];
        so *= pc.oshape[d];
    }
}

// the node's element for index k (already read), or -1 (reported) if bad
int64_t checked(int64_t k)
{
    int64_t kk = k < 0l ? k + int64_t(pc.len) : k;
    if (kk < 0l || kk >= int64_t(pc.len)) {
        if (atomicOr(u32_3.v[0], 1u) == 0u) u32_3.v[1] = uint(k);
        return -1l;
    }
    return kk;
}

void fiber(uint f)
{
    int bi, bo, sia, soa;
    fiber_base(f, bi, bo, sia, soa);
    for (int t = 0; t < pc.T; t++) {
        int p = bi + t * sia;
        int64_t kk = checked(int64_t(u64_0.v[pc.off_i + p]));
        if (kk < 0l) continue;
        int dst = bo + int(kk) * soa;
        if (ADD != 0u) add_elem(dst, pc.off_s + p);
        else move_elem(dst, pc.off_s + p);
    }
}

// SC_NORM: idx position i (row-major over idx) to row [fiber, T] of binding 2
void normalise(uint i)
{
    uint r = i, f = 0u, fs = 1u;
    int t = 0;
    for (int d = pc.ndim - 1; d >= 0; d--) {
        uint s = uint(pc.ishape[d]), c = r % s;
        r /= s;
        if (d == pc.axis) { t = int(c); continue; }
        f += c * fs;
        fs *= s;
    }
    int64_t kk = checked(int64_t(u64_0.v[pc.off_i + int(i)]));
    u64_2.v[int(f) * pc.T + t] = uint64_t(kk < 0l ? int64_t(pc.len) : kk);
}

// SC_APPLY: slot j of fiber f's sorted row (binding 3 holds each row's
// positions by destination, binding 0 the normalised indices); the first
// slot of each run of one destination applies the whole run
void apply(uint i)
{
    int f = int(i) / pc.T, j = int(i) % pc.T, row = f * pc.T;
    int t = int(u64_3.v[row + j]);
    int64_t k = int64_t(u64_0.v[row + t]);
    if (k == int64_t(pc.len)) return;                            // a bad index
    if (j > 0 && int64_t(u64_0.v[row + int(u64_3.v[row + j - 1])]) == k) return;
    int bi, bo, sia, soa;
    fiber_base(uint(f), bi, bo, sia, soa);
    int dst = bo + int(k) * soa;
    for (; j < pc.T; j++) {
        t = int(u64_3.v[row + j]);
        if (int64_t(u64_0.v[row + t]) != k) break;
        if (ADD != 0u) add_elem(dst, pc.off_s + bi + t * sia);
        else move_elem(dst, pc.off_s + bi + t * sia);
    }
}

void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (MODE == SC_DIRECT) {
        for (uint f = gl_GlobalInvocationID.x; f < pc.nfib; f += stride) fiber(f);
        return;
    }
    uint n = pc.nfib * uint(pc.T);
    for (uint i = gl_GlobalInvocationID.x; i < n; i += stride) {
        if (MODE == SC_NORM) normalise(i);
        else apply(i);
    }
}
