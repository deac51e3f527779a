#version 450
// conv_splitk.comp - the second pass of a split-K convolution (nn_conv.c,
// conv_gemm.glsl's SPLITK): binding 0 holds S slabs of n f32 partial sums
// ([batch entry][M][N] each, batch entry = image * G + group); output i is
// slab 0 + slab 1 + ... + slab S-1 at i, always added in that order (so
// the result is the same on every run), plus the bias of its output
// channel, rounded once to the output dtype.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint DTO = 0;
layout(constant_id = 1) const uint DTBIAS = 0;
layout(push_constant) uniform PC {
    uint n;                     // one slab: batch entries * M * N
    int M, N, G;                // output channels of a group, pixels, groups
    int off_bias, s_bias;       // off_bias < 0: no bias
    int S;                      // the slabs (a push constant: one pipeline for every count)
} pc;
DECL_BUF(0)
DECL_IO(1)
DECL_IO(2)

void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride) {
        float x = uintBitsToFloat(u32_0.v[i]);
        for (int s = 1; s < pc.S; s++) x += uintBitsToFloat(u32_0.v[uint(s) * pc.n + i]);
        if (pc.off_bias >= 0) {
            int e = int(i), m = (e / pc.N) % pc.M, g = (e / (pc.N * pc.M)) % pc.G;
            x += ldf_2(DTBIAS, pc.off_bias + (g * pc.M + m) * pc.s_bias);
        }
        stf_1(DTO, int(i), x);
    }
}
