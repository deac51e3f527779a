#version 450
// conv_wino_v.comp - the input transform of the Winograd F(2x2, 3x3)
// convolution (nn_conv.c's run_wino): for each input channel c and 2x2
// output tile j of a chunk (T tiles: tile rows r0.. of all images' rows
// (image, tile row), tw tiles a row), the 4x4 block d of x under it
// (starting at 2*ty - pt, 2*tx - pl; zero outside the image), V[k][c][j] =
// (B^T d B)[k] in f32, B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1].
#include "common.glsl"
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint DTX = 0;
layout(push_constant) uniform PC {
    uint n;                     // C * T
    int T, C, tw, th, r0;       // chunk tiles, channels, tiles a row, tile rows an image, first row
    int H, W, pt, pl;
    int off_x, sxn, sxc, sxh, sxw;
} pc;
DECL_IO(0)
DECL_BUF(1)

void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride) {
        int e = int(i), c = e / pc.T, j = e - c * pc.T;
        int q = j / pc.tw, tx = j - q * pc.tw, row = pc.r0 + q, img = row / pc.th, ty = row - img * pc.th;
        int y0 = 2 * ty - pc.pt, x0 = 2 * tx - pc.pl, base = pc.off_x + img * pc.sxn + c * pc.sxc;
        float d[4][4];
        [[unroll]] for (int a = 0; a < 4; a++)
            [[unroll]] for (int b = 0; b < 4; b++) {
                int y = y0 + a, x = x0 + b;
                d[a][b] = y >= 0 && y < pc.H && x >= 0 && x < pc.W ? ldf_0(DTX, base + y * pc.sxh + x * pc.sxw) : 0.0;
            }
        float t[4][4];          // B^T d: rows
        [[unroll]] for (int b = 0; b < 4; b++) {
            t[0][b] = d[0][b] - d[2][b];
            t[1][b] = d[1][b] + d[2][b];
            t[2][b] = d[2][b] - d[1][b];
            t[3][b] = d[1][b] - d[3][b];
        }
        int step = pc.C * pc.T;
        [[unroll]] for (int a = 0; a < 4; a++) {     // (B^T d) B: columns
            u32_1.v[(a * 4) * step + e] = floatBitsToUint(t[a][0] - t[a][2]);
            u32_1.v[(a * 4 + 1) * step + e] = floatBitsToUint(t[a][1] + t[a][2]);
            u32_1.v[(a * 4 + 2) * step + e] = floatBitsToUint(t[a][2] - t[a][1]);
            u32_1.v[(a * 4 + 3) * step + e] = floatBitsToUint(t[a][1] - t[a][3]);
        }
    }
}
