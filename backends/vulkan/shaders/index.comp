#version 450
// index.comp - take_along_axis and index_select: out[i] = a[..., k, ...]
// with k read from an i64 index tensor (broadcast by strides).  Elements
// move as raw bits (DT is the unsigned type of their width).  A bad index
// writes 0 and is reported through binding 3 (flag, value), which the host
// checks when the batch completes.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint DT = 0;

layout(push_constant) uniform PC {
    uint n;
    int ndim, axis, len, off_a, off_i;
    int shape[8];
    int sa[8];
    int si[8];
} pc;

DECL_IO(0)
DECL_IO(1)
DECL_IO(2)
DECL_BUF(3)

void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride) {
        uint r = i;
        int oa = pc.off_a, oi = pc.off_i;
        for (int d = pc.ndim - 1; d >= 0; d--) {
            uint s = uint(pc.shape[d]);
            int c = int(r % s);
            r /= s;
            oi += c * pc.si[d];
            if (d != pc.axis) oa += c * pc.sa[d];
        }
        int64_t k = int64_t(u64_1.v[oi]);
        int64_t kk = k < 0l ? k + int64_t(pc.len) : k;
        if (kk < 0l || kk >= int64_t(pc.len)) {
            if (atomicOr(u32_3.v[0], 1u) == 0u) u32_3.v[1] = uint(k);
            sti_2(DT, int(i), 0l);
            continue;
        }
        oa += int(kk) * pc.sa[pc.axis];
        sti_2(DT, int(i), ldi_0(DT, oa));
    }
}
