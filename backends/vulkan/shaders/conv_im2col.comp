#version 450
// conv_im2col.comp - the unfolded input of an f16 conv written out (nn_conv.c,
// LUMEN_VK_CONV_IM2COL): B[b][k][p] = x[n, g*Cg + c, oy*sh - pt + kh*dh,
// ox*sw - pl + kw*dw] (zero outside x) for batch entry b = n*G + g, row k =
// (c, kh, kw), output pixel p = oy*OW + ox, contiguous, so that conv_coop
// reads it as a plain matrix (B_FLAT) at the GEMM's speed instead of
// gathering through the im2col mapping in its inner loop.  One invocation
// writes 8 consecutive pixels of a row (NP % 8 == 0: the host's promise).
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform PC {
    uint n;                     // 16-byte chunks: entries * K * NP / 8
    int K, NP, G, Cg, KW, KHW, OW;
    int H, W, sh, sw, pt, pl, dh, dw;
    int off_x, sxn, sxc, sxh, sxw;
} pc;
DECL_BUF(0)
layout(std430, set = 0, binding = 1) writeonly buffer Out4 { uvec4 v[]; } o4;

void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint e = gl_GlobalInvocationID.x; e < pc.n; e += stride) {
        int per = pc.NP / 8, r = int(e) / per, p = (int(e) - r * per) * 8;
        int k = r % pc.K, b = r / pc.K, n = b / pc.G, g = b - n * pc.G;
        int c = k / pc.KHW, kk = k - c * pc.KHW, kh = kk / pc.KW, kw = kk - kh * pc.KW;
        int base = pc.off_x + n * pc.sxn + (g * pc.Cg + c) * pc.sxc;
        int oy = p / pc.OW, ox = p - oy * pc.OW;
        uint h[8];
        [[unroll]] for (int j = 0; j < 8; j++) {
            int iy = oy * pc.sh - pc.pt + kh * pc.dh, ix = ox * pc.sw - pc.pl + kw * pc.dw;
            h[j] = iy >= 0 && iy < pc.H && ix >= 0 && ix < pc.W ? uint(u16_0.v[base + iy * pc.sxh + ix * pc.sxw]) : 0u;
            if (++ox == pc.OW) { ox = 0; oy++; }
        }
        o4.v[e] = uvec4(h[0] | (h[1] << 16), h[2] | (h[3] << 16), h[4] | (h[5] << 16), h[6] | (h[7] << 16));
    }
}
