#version 450
// conv_direct.comp - conv2d and conv_transpose2d one output element per
// invocation, summing over the group's input channels and the kernel
// window in f32: the kernel for what the implicit GEMM (conv_gemm.comp)
// tiles badly - depthwise and other small groups, few output channels,
// weights that are not k-contiguous - and for every conv_transpose2d.
//
// conv: out[n,o,oy,ox] = b[o] + sum_{c,kh,kw} x[n, g*Cg+c, oy*sh-pt+kh*dh,
// ox*sw-pl+kw*dw] * w[o,c,kh,kw], g = o / Og.  Positions in the padding
// contribute 0 * w (not nothing), as the CPU's im2col + GEMM does, so an
// infinite weight gives NaN on both.
// conv_transpose (gather form of the CPU's col2im scatter): input pixel iy
// feeds output row iy*sh - pt + kh*dh, so output row oy gathers the kh
// with (oy + pt - kh*dh) a non-negative multiple of sh below H*sh; likewise
// for columns; w is [Cin, Og, KH, KW].  Only positions inside the output
// contribute there, as in col2im.
// Bindings: 0 = x, 1 = w, 2 = out (contiguous [N,O,OH,OW]), 3 = bias.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint DTX = 0;
layout(constant_id = 1) const uint DTW = 0;
layout(constant_id = 2) const uint DTO = 0;
layout(constant_id = 3) const uint DTBIAS = 0;

layout(push_constant) uniform PC {
    uint n;
    int transpose;
    int O, OH, OW;
    int off_x, sxn, sxc, sxh, sxw, H, W;
    int off_w, sw0, sw1, sw2, sw3, KH, KW;
    int Cg, Og;                 // input and output channels per group
    int sh, sw, pt, pl, dh, dw;
    int off_b, s_b;             // off_b < 0: no bias
} pc;

DECL_IO(0)
DECL_IO(1)
DECL_IO(2)
DECL_IO(3)

float conv_at(int n, int o, int oy, int ox)
{
    int g = o / pc.Og;
    int xb = pc.off_x + n * pc.sxn + g * pc.Cg * pc.sxc, wb = pc.off_w + o * pc.sw0;
    float acc = 0.0;
    for (int c = 0; c < pc.Cg; c++)
        for (int kh = 0; kh < pc.KH; kh++) {
            int iy = oy * pc.sh - pc.pt + kh * pc.dh;
            bool yin = iy >= 0 && iy < pc.H;
            for (int kw = 0; kw < pc.KW; kw++) {
                int ix = ox * pc.sw - pc.pl + kw * pc.dw;
                float xv = yin && ix >= 0 && ix < pc.W
                         ? ldf_0(DTX, xb + c * pc.sxc + iy * pc.sxh + ix * pc.sxw) : 0.0;
                acc += xv * ldf_1(DTW, wb + c * pc.sw1 + kh * pc.sw2 + kw * pc.sw3);
            }
        }
    return acc;
}

float conv_transpose_at(int n, int o, int oy, int ox)
{
    int g = o / pc.Og, col = o - g * pc.Og;
    float acc = 0.0;
    for (int c = 0; c < pc.Cg; c++) {
        int ci = g * pc.Cg + c;
        int xb = pc.off_x + n * pc.sxn + ci * pc.sxc, wb = pc.off_w + ci * pc.sw0 + col * pc.sw1;
        for (int kh = 0; kh < pc.KH; kh++) {
            int ty = oy + pc.pt - kh * pc.dh, iy = ty / pc.sh;
            if (ty < 0 || iy * pc.sh != ty || iy >= pc.H) continue;
            for (int kw = 0; kw < pc.KW; kw++) {
                int tx = ox + pc.pl - kw * pc.dw, ix = tx / pc.sw;
                if (tx < 0 || ix * pc.sw != tx || ix >= pc.W) continue;
                acc += ldf_0(DTX, xb + iy * pc.sxh + ix * pc.sxw) *
                       ldf_1(DTW, wb + kh * pc.sw2 + kw * pc.sw3);
            }
        }
    }
    return acc;
}

void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride) {
        int r = int(i);
        int ox = r % pc.OW; r /= pc.OW;
        int oy = r % pc.OH; r /= pc.OH;
        int o = r % pc.O, n = r / pc.O;
        float v = pc.transpose != 0 ? conv_transpose_at(n, o, oy, ox) : conv_at(n, o, oy, ox);
        if (pc.off_b >= 0) v += ldf_3(DTBIAS, pc.off_b + o * pc.s_b);
        stf_2(DTO, int(i), v);
    }
}
