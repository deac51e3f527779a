#version 450
// pool.comp - max/avg/adaptive-avg pooling and nearest/bilinear upsampling
// of x[N,C,H,W] (any strides) into a contiguous [N,C,OH,OW], one output
// element per invocation; the op is a push constant (uniform branch), so
// each dtype needs one pipeline for all five.  Windows, taps and rounding
// follow backends/cpu/nn_pool.c (PyTorch's CPU kernels): f32 arithmetic for
// f32/f16/bf16 where the CPU uses double, which stays well inside the
// parity thresholds; nearest moves raw bits (DT is then the unsigned type
// of the element's width), so it takes every dtype and is exact.
// Bindings: 0 = x, 1 = out.
#include "common.glsl"

#define P_MAX 0
#define P_AVG 1
#define P_ADAPTIVE 2
#define P_NEAREST 3
#define P_BILINEAR 4

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint DT = 0;

layout(push_constant) uniform PC {
    uint n;
    int op;
    int C, OH, OW, H, W;
    int off, sxn, sxc, sxh, sxw;
    int kh, kw, sh, sw, ph, pw, dh, dw;
    int count_pad, divisor;     // avg: count_include_pad, divisor override (0 none)
    int align;                  // bilinear: align_corners
    float fh, fw;               // upsample: source/destination scale per axis
} pc;

DECL_IO(0)
DECL_IO(1)

int xb;                         // this plane's first element

float at(int iy, int ix) { return ldf_0(DT, xb + iy * pc.sxh + ix * pc.sxw); }

// padding counts as -inf; the first NaN wins
float max_window(int oy, int ox)
{
    int y0 = oy * pc.sh - pc.ph, x0 = ox * pc.sw - pc.pw;
    float m = uintBitsToFloat(0xff800000u);
    for (int a = 0; a < pc.kh; a++) {
        int iy = y0 + a * pc.dh;
        if (iy < 0 || iy >= pc.H) continue;
        for (int b = 0; b < pc.kw; b++) {
            int ix = x0 + b * pc.dw;
            if (ix < 0 || ix >= pc.W) continue;
            float v = at(iy, ix);
            if (v > m || isnan(v)) m = v;
            if (isnan(m)) return m;
        }
    }
    return m;
}

// windows clipped to the padded input, then to the input
float avg_window(int oy, int ox)
{
    int hs = oy * pc.sh - pc.ph, ws = ox * pc.sw - pc.pw;
    int he = min(hs + pc.kh, pc.H + pc.ph), we = min(ws + pc.kw, pc.W + pc.pw);
    int pool = (he - hs) * (we - ws);
    hs = max(hs, 0); ws = max(ws, 0);
    he = min(he, pc.H); we = min(we, pc.W);
    if (hs >= he || ws >= we) return 0.0;
    float s = 0.0;
    for (int iy = hs; iy < he; iy++)
        for (int ix = ws; ix < we; ix++) s += at(iy, ix);
    int div = pc.divisor != 0 ? pc.divisor : pc.count_pad != 0 ? pool : (he - hs) * (we - ws);
    return s / float(div);
}

// output i of OH covers [floor(i*H/OH), ceil((i+1)*H/OH))
float adaptive_window(int oy, int ox)
{
    int hs = oy * pc.H / pc.OH, he = ((oy + 1) * pc.H + pc.OH - 1) / pc.OH;
    int ws = ox * pc.W / pc.OW, we = ((ox + 1) * pc.W + pc.OW - 1) / pc.OW;
    float s = 0.0;
    for (int iy = hs; iy < he; iy++)
        for (int ix = ws; ix < we; ix++) s += at(iy, ix);
    return s / float((he - hs) * (we - ws));
}

// the source index (f32 product, as PyTorch's nearest kernel)
int nearest_src(int o, float scale, int len) { return min(int(floor(float(o) * scale)), len - 1); }

// the two taps along an axis and the weight of the second
void bilinear_taps(int o, float s, int len, out int i0, out int i1, out float w1)
{
    float f = pc.align != 0 ? s * float(o) : max(s * (float(o) + 0.5) - 0.5, 0.0);
    i0 = int(f);
    i1 = i0 + (i0 < len - 1 ? 1 : 0);
    w1 = f - float(i0);
}

float bilinear(int oy, int ox)
{
    int y0, y1, x0, x1;
    float ly, lx;
    bilinear_taps(oy, pc.fh, pc.H, y0, y1, ly);
    bilinear_taps(ox, pc.fw, pc.W, x0, x1, lx);
    return (1.0 - ly) * ((1.0 - lx) * at(y0, x0) + lx * at(y0, x1)) +
           ly * ((1.0 - lx) * at(y1, x0) + lx * at(y1, x1));
}

void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride) {
        int r = int(i);
        int ox = r % pc.OW; r /= pc.OW;
        int oy = r % pc.OH; r /= pc.OH;
        xb = pc.off + (r / pc.C) * pc.sxn + (r % pc.C) * pc.sxc;
        if (pc.op == P_NEAREST) {
            int iy = nearest_src(oy, pc.fh, pc.H), ix = nearest_src(ox, pc.fw, pc.W);
            sti_1(DT, int(i), ldi_0(DT, xb + iy * pc.sxh + ix * pc.sxw));
            continue;
        }
        float v = pc.op == P_MAX ? max_window(oy, ox) : pc.op == P_AVG ? avg_window(oy, ox)
                : pc.op == P_ADAPTIVE ? adaptive_window(oy, ox) : bilinear(oy, ox);
        stf_1(DT, int(i), v);
    }
}
