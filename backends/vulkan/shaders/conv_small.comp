#version 450
// conv_small.comp - conv2d with few output channels per group (up to 16):
// each invocation computes ALL the group's output channels of PX pixels, so
// every input value it loads serves OG outputs, where conv_direct.comp
// (one output element per invocation) reads the input once per output
// channel.  The SD VAE's conv_out (128 -> 3 channels at 512x512) and
// ESRGAN's last conv (64 -> 12) are the shapes it is for; nn_conv.c's
// small_fits says which convs come here (the GEMM kernels take 16 and more
// channels where they can).
//
// The sums are conv_direct's: out[n,o,oy,ox] = b[o] + sum over c, then kh,
// then kw, of x * w, one f32 accumulator per output taken in that order from
// 0 by one invocation, positions in the padding contributing 0 * w, rounded
// once on store.  So the answer does not depend on PX, the workgroup size
// or the chunking of the weights, and is conv_direct's bit for bit (glslc
// contracts both loops' multiply-add into the same fma).
//
// Layout: a workgroup of WG invocations takes WG * PX consecutive output
// pixels (oy*OW + ox) of one (image, group), z = n * G + g; lane l's pixels
// are l, l + WG, ..., so each load of a subgroup reads consecutive x
// (coalesced along W).  The group's weights, converted to f32, are staged
// in shared memory as [k = (c,kh,kw)][OG rounded up to 4] (one vec4 load
// per 4 outputs, the same address across the subgroup: a broadcast), CC
// input channels at a time (all of them where they fit).  The accumulators
// are compile-time arrays of PXMAX x OGMAX indexed by unrolled constant
// loops, cut down to PX x OG by the specialization constants, so they live
// in registers.
// Bindings: 0 = x, 1 = w, 2 = out (contiguous [N,O,OH,OW]), 3 = bias.
#include "common.glsl"

#define OGMAX 16
#define PXMAX 4
#define WG int(gl_WorkGroupSize.x)

layout(local_size_x_id = 9) in;                  // 64, 128 or 256 invocations
layout(constant_id = 0) const uint DTX = 0;
layout(constant_id = 1) const uint DTW = 0;
layout(constant_id = 2) const uint DTO = 0;
layout(constant_id = 3) const uint DTBIAS = 0;
layout(constant_id = 4) const int OG = 1;        // output channels per group, 1..OGMAX
layout(constant_id = 5) const int KH = 1;
layout(constant_id = 6) const int KW = 1;
layout(constant_id = 7) const int PX = 1;        // pixels per invocation, 1..PXMAX
layout(constant_id = 8) const int WSV = 1;       // vec4 slots of shared memory (>= CC*KH*KW*O4)

const int O4 = (OG + 3) / 4;                     // vec4s of weights per k

layout(push_constant) uniform PC {
    int npix, OW, O, G;
    int off_x, sxn, sxc, sxh, sxw, H, W;
    int off_w, sw0, sw1, sw2, sw3;
    int Cg, CC;                 // input channels per group, per staged chunk
    int sh, sw, pt, pl, dh, dw;
    int off_b, s_b;             // off_b < 0: no bias
} pc;

DECL_IO(0)
DECL_IO(1)
DECL_IO(2)
DECL_IO(3)

shared vec4 ws[WSV];

// the weights of outputs 4j..4j+3 of the group at (c, kh, kw), 0 past OG
vec4 weights_at(int wb, int c, int kh, int kw, int j)
{
    vec4 r = vec4(0.0);
    [[unroll]] for (int i = 0; i < 4; i++)
        if (4 * j + i < OG)
            r[i] = ldf_1(DTW, wb + (4 * j + i) * pc.sw0 + c * pc.sw1 + kh * pc.sw2 + kw * pc.sw3);
    return r;
}

void main()
{
    int lid = int(gl_LocalInvocationID.x);
    int nz = int(gl_WorkGroupID.z), n = nz / pc.G, g = nz - n * pc.G;
    int wb = pc.off_w + g * OG * pc.sw0;

    // this invocation's pixels; a pixel past the image computes on pixel 0
    // (in bounds) and is not stored
    int q0 = int(gl_WorkGroupID.x) * WG * PX + lid;
    int oys[PXMAX], oxs[PXMAX];
    [[unroll]] for (int p = 0; p < PXMAX; p++) {
        int q = q0 + p * WG;
        if (q >= pc.npix) q = 0;
        oys[p] = q / pc.OW;
        oxs[p] = q - oys[p] * pc.OW;
    }

    float acc[PXMAX][OGMAX];
    [[unroll]] for (int p = 0; p < PXMAX; p++)
        [[unroll]] for (int o = 0; o < OGMAX; o++) acc[p][o] = 0.0;

    int xb = pc.off_x + n * pc.sxn + g * pc.Cg * pc.sxc;
    for (int c0 = 0; c0 < pc.Cg; c0 += pc.CC) {
        int cn = min(pc.CC, pc.Cg - c0);
        if (c0 > 0) barrier();          // the previous chunk's weights are used up
        for (int s = lid; s < cn * KH * KW * O4; s += WG) {
            int j = s % O4, k = s / O4;
            int kw = k % KW, t = k / KW;
            ws[s] = weights_at(wb, c0 + t / KH, t % KH, kw, j);
        }
        barrier();
        for (int c = 0; c < cn; c++) {
            int xc = xb + (c0 + c) * pc.sxc;
            for (int kh = 0; kh < KH; kh++)
                for (int kw = 0; kw < KW; kw++) {
                    float xv[PXMAX];
                    [[unroll]] for (int p = 0; p < PXMAX; p++) {
                        int iy = oys[p] * pc.sh - pc.pt + kh * pc.dh, ix = oxs[p] * pc.sw - pc.pl + kw * pc.dw;
                        bool in_x = p < PX && iy >= 0 && iy < pc.H && ix >= 0 && ix < pc.W;
                        xv[p] = in_x ? ldf_0(DTX, xc + iy * pc.sxh + ix * pc.sxw) : 0.0;
                    }
                    int k = ((c * KH + kh) * KW + kw) * O4;
                    [[unroll]] for (int j = 0; j < OGMAX / 4; j++) {
                        vec4 wv = vec4(0.0);
                        if (j < O4) wv = ws[k + j];
                        [[unroll]] for (int i = 0; i < 4; i++)
                            [[unroll]] for (int p = 0; p < PXMAX; p++)
                                acc[p][4 * j + i] += xv[p] * wv[i];
                    }
                }
        }
    }

    [[unroll]] for (int p = 0; p < PXMAX; p++) {
        int q = q0 + p * WG;
        if (p < PX && q < pc.npix)
            [[unroll]] for (int o = 0; o < OGMAX; o++)
                if (o < OG) {
                    int oc = g * OG + o;
                    float v = acc[p][o];
                    if (pc.off_b >= 0) v += ldf_3(DTBIAS, pc.off_b + oc * pc.s_b);
                    stf_2(DTO, (n * pc.O + oc) * pc.npix + q, v);
                }
    }
}
