#version 450
// conv_wino_y.comp - the output transform of the Winograd F(2x2, 3x3)
// convolution (nn_conv.c's run_wino): for each output channel o and tile j
// of the chunk (as conv_wino_v.comp), the 2x2 outputs A^T m A of the 16
// products m[k] = M[k][o][j] (the GEMMs' [16][O][T] result), A^T = [1 1 1 0;
// 0 1 -1 -1], plus the bias of o, rounded once to the output dtype; rows and
// columns past OH, OW (a partial tile) are not stored.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint DTO = 0;
layout(constant_id = 1) const uint DTBIAS = 0;
layout(push_constant) uniform PC {
    uint n;                     // O * T
    int T, O, tw, th, r0;
    int OH, OW;
    int off_bias, s_bias;       // off_bias < 0: no bias
} pc;
DECL_BUF(0)
DECL_IO(1)
DECL_IO(2)

void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride) {
        int e = int(i), o = e / pc.T, j = e - o * pc.T;
        int q = j / pc.tw, tx = j - q * pc.tw, row = pc.r0 + q, img = row / pc.th, ty = row - img * pc.th;
        int step = pc.O * pc.T;
        float m[4][4];
        [[unroll]] for (int a = 0; a < 4; a++)
            [[unroll]] for (int b = 0; b < 4; b++) m[a][b] = uintBitsToFloat(u32_0.v[(a * 4 + b) * step + e]);
        float s[2][4];          // A^T m: rows
        [[unroll]] for (int b = 0; b < 4; b++) {
            s[0][b] = m[0][b] + m[1][b] + m[2][b];
            s[1][b] = m[1][b] - m[2][b] - m[3][b];
        }
        float bias = pc.off_bias >= 0 ? ldf_2(DTBIAS, pc.off_bias + o * pc.s_bias) : 0.0;
        int oy = 2 * ty, ox = 2 * tx, out0 = ((img * pc.O + o) * pc.OH + oy) * pc.OW + ox;
        [[unroll]] for (int a = 0; a < 2; a++) {     // (A^T m) A: columns
            if (oy + a >= pc.OH) break;
            float y0 = s[a][0] + s[a][1] + s[a][2], y1 = s[a][1] - s[a][2] - s[a][3];
            if (pc.off_bias >= 0) {
                y0 += bias;
                y1 += bias;
            }
            stf_1(DTO, out0 + a * pc.OW, y0);
            if (ox + 1 < pc.OW) stf_1(DTO, out0 + a * pc.OW + 1, y1);
        }
    }
}
