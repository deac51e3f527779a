#version 450
// conv_halo_w.comp - conv_halo.glsl's packed weights: w [O, C, KH, KW] (any
// strides, raw 16-bit elements) as [tap][MP][CP], zero past O and C, so
// that the conv stages each (tap, channel chunk) as whole 16-byte rows.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform PC {
    uint n;                     // KH*KW*MP*CP
    int O, C, KW, KHW, MP, CP;
    int off_w, sw0, sw1, sw2, sw3;
} pc;
DECL_BUF(0)
DECL_BUF(1)

void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride) {
    int e = int(i), c = e % pc.CP, r = e / pc.CP, o = r % pc.MP, t = r / pc.MP;
    int kh = t / pc.KW, kw = t - kh * pc.KW;
    uint h = 0u;
    if (o < pc.O && c < pc.C)
        h = uint(u16_0.v[pc.off_w + o * pc.sw0 + c * pc.sw1 + kh * pc.sw2 + kw * pc.sw3]);
    u16_1.v[e] = uint16_t(h);
    }
}
