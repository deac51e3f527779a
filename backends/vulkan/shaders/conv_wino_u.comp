#version 450
// conv_wino_u.comp - the filter transform of the Winograd F(2x2, 3x3)
// convolution (nn_conv.c's run_wino): for each 3x3 filter g = w[o, c]
// (any strides, any float dtype), U[k][o][c] = (G g G^T)[k] in f32, k =
// 4 * row + column of the 4x4 result, with G = [1 0 0; 1/2 1/2 1/2;
// 1/2 -1/2 1/2; 0 0 1] (the CPU's nn_conv_wino.c takes the same steps).
#include "common.glsl"
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint DTW = 0;
layout(push_constant) uniform PC {
    uint n;                     // O * C filters
    int O, C;
    int off_w, sw0, sw1, sw2, sw3;
} pc;
DECL_IO(0)
DECL_BUF(1)

void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride) {
        int e = int(i), o = e / pc.C, c = e - o * pc.C, base = pc.off_w + o * pc.sw0 + c * pc.sw1;
        float g[3][3];
        [[unroll]] for (int a = 0; a < 3; a++)
            [[unroll]] for (int b = 0; b < 3; b++) g[a][b] = ldf_0(DTW, base + a * pc.sw2 + b * pc.sw3);
        float t[4][3];          // G g: rows
        [[unroll]] for (int b = 0; b < 3; b++) {
            t[0][b] = g[0][b];
            t[1][b] = 0.5 * (g[0][b] + g[1][b] + g[2][b]);
            t[2][b] = 0.5 * (g[0][b] - g[1][b] + g[2][b]);
            t[3][b] = g[2][b];
        }
        int step = pc.O * pc.C;
        [[unroll]] for (int a = 0; a < 4; a++) {     // (G g) G^T: columns
            float r[4] = {t[a][0], 0.5 * (t[a][0] + t[a][1] + t[a][2]), 0.5 * (t[a][0] - t[a][1] + t[a][2]), t[a][2]};
            [[unroll]] for (int b = 0; b < 4; b++) u32_1.v[(a * 4 + b) * step + e] = floatBitsToUint(r[b]);
        }
    }
}
