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
#include "common.glsl"

layout(local_size_x = 64) in;
layout(constant_id = 0) const uint DT = 0;
layout(constant_id = 1) const uint ADD = 0;

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

void fiber(uint f)
{
    // offsets of the fiber's first position in idx/src and in the node
    int bi = 0, bo = 0, si = 1, so = 1, sia = 1, soa = 1;
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
    for (int t = 0; t < pc.T; t++) {
        int p = bi + t * sia;
        int64_t k = int64_t(u64_0.v[pc.off_i + p]);
        int64_t kk = k < 0l ? k + int64_t(pc.len) : k;
        if (kk < 0l || kk >= int64_t(pc.len)) {
            if (atomicOr(u32_3.v[0], 1u) == 0u) u32_3.v[1] = uint(k);
            continue;
        }
        int dst = bo + int(kk) * soa;
        if (ADD != 0u) add_elem(dst, pc.off_s + p);
        else move_elem(dst, pc.off_s + p);
    }
}

void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint f = gl_GlobalInvocationID.x; f < pc.nfib; f += stride) fiber(f);
}
