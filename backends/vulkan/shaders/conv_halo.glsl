// conv_halo.glsl - f16 conv2d, stride 1, dilation 1, KH, KW <= 3, on tensor
// cores (GL_NV_cooperative_matrix) as a direct "halo tile" conv: the
// small-channel convolutions (ESRGAN's dense blocks, 16-64 output channels)
// that the implicit GEMM (conv_coop*.comp) runs at a fraction of cuDNN,
// since it fetches and decodes each input pixel again for each of the taps.
//
// A workgroup of WARPS subgroups computes TH x TW output pixels (TW = 16:
// one fragment column per output row) by MF * 16 output channels (MF <=
// MFMAX, a specialization constant) of one image.  For each chunk of CK (16 or 32) input
// channels it stages, once,
//   - the input tile with its halo, (TH + 2) x (TW + 2) pixels, as [pixel]
//     [channel] (channels contiguous, rows padded by 8 halves so that the 8
//     rows of 16 bytes one fragment load touches fall in distinct banks), and
//   - the weights of every tap for that chunk, [tap][out channel][channel]
//     (rows padded the same way), copied as 16-byte vectors from the packed
//     weights conv_halo_w.comp made (binding 0: [tap][MP][CP], zero-padded
//     to whole fragments),
// then accumulates, per tap (kh, kw) and output row y, the product
// W[tap] (MF*16 x 16) @ X(y + kh, kw .. kw + 15) (16 channels x 16 pixels):
// a shifted view of the staged tile is a column-major fragment whose
// columns (pixels) start a whole padded row apart, so every view is an
// aligned load straight from the staged tile, with no copy per tap.
// The next chunk's global loads are issued into registers before the
// current one is multiplied (one buffer, two barriers per chunk).
// The bias initialises the f32 accumulators (a staged 16-wide tile of it);
// interior fragments go straight to the output (C_DIRECT: the host's promise
// of 16-byte aligned output rows), edge ones element by element through a
// per-subgroup staging area, cut at the image's edges, rounded to nearest
// even once.
// Bindings: 0 = packed weights (f16), 1 = x (f16, unit stride along W),
// 2 = output ([N, O, OH, OW] contiguous), 3 = bias.
// With HALO_SIMT defined (conv_halo_simt.comp) the same kernel runs without
// cooperative matrices: each lane holds 8 of a fragment's 256 elements and
// the products read the staged tiles from shared memory, element by
// element.  Slow, and meant for that: a device without tensor cores
// (lavapipe) runs this file's staging, views, bias and stores through it
// (LUMEN_VK_CONV_HALO=simt), so the parity tests check them there.
#ifndef HALO_SIMT
#extension GL_NV_cooperative_matrix : require
#endif
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"

#ifndef TH
#define TH 8
#define WARPS 4
#endif
#define TW 16
#ifndef CK
#define CK 16                    // input channels per staged chunk (16 or 32)
#endif
#ifndef MFMAX
#define MFMAX 4                  // the most output-channel fragments (MF <= MFMAX)
#endif
#define CQ (CK / 8)              // uvec4s of a staged row's data
#define NT (WARPS * 32)
#define RN (TH / WARPS)          // output rows (fragments) per subgroup
#ifdef XQUAD
// the input read as runs of 4 pixels (8-byte loads): the staged tile starts
// 4 pixels left of the output tile, 6 runs wide
#define QW 6
#define SW (QW * 4)
#else
#define SW (TW + 2)              // staged tile width, pixels
#endif
#define SH (TH + 2)
#define NPX (SH * SW)
#ifdef HALO_SIMT
#define RS CQ                    // no padding: 24 KiB of shared memory in all (lavapipe has 32)
#else
#define RS (CQ + 1)              // staged row stride, uvec4s (CK halves + 8 of padding)
#endif
#define TAPS 9
#if RN * WARPS != TH
#error "conv_halo: the tile's rows must split evenly over the subgroups"
#endif

layout(local_size_x = NT) in;
layout(constant_id = 0) const uint DTO = 1;
layout(constant_id = 1) const uint DTBIAS = 1;
layout(constant_id = 2) const int KH = 3;
layout(constant_id = 3) const int KW = 3;
layout(constant_id = 4) const int MF = 4;           // output-channel fragments (1..4)
layout(constant_id = 5) const bool C_DIRECT = false;

layout(push_constant) uniform PC {
    int C, O, H, W, OH, OW;     // C input, O output channels
    int pt, pl;
    int off_x, sxn, sxc, sxh;   // x's offset and strides in elements (unit stride along W)
    int CP, MP;                 // the packed weights' padded channel counts
    int OB;                     // blocks of MF*16 output channels
    int off_bias, s_bias;       // off_bias < 0: no bias
} pc;

DECL_BUF(0)
DECL_BUF(1)
DECL_IO(2)
DECL_IO(3)
layout(std430, set = 0, binding = 0) buffer Wv4 { uvec4 v[]; } w4;
layout(std430, set = 0, binding = 2) buffer Of32 { float v[]; } o32;
layout(std430, set = 0, binding = 2) buffer Of16 { float16_t v[]; } o16;

#ifdef WGLOBAL
#define XST 2                    // input tile buffers
layout(std430, set = 0, binding = 0) buffer Wh { float16_t v[]; } wh;
#else
#define XST 1
shared uvec4 Ws[TAPS * MFMAX * 16 * RS];
#endif
shared uvec4 Xs[XST * NPX * RS];

#ifdef HALO_SIMT
// a fragment: element e = lane + 32 * j is (row e / 16, column e % 16)
struct frag { float v[8]; };
#define ACC_T frag
// a staged f16 element: uvec4 index q, half h (0..7)
#ifdef WGLOBAL
float hs_w(int q, int h) { return unpackHalf2x16(uint(u16_0.v[q * 8 + h])).x; }   // q: global
#else
float hs_w(int q, int h) { return unpackHalf2x16(Ws[q][h >> 1] >> ((h & 1) * 16)).x; }
#endif
float hs_x(int q, int h) { return unpackHalf2x16(Xs[q][h >> 1] >> ((h & 1) * 16)).x; }
#else
#define ACC_T fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
#endif

#if WARPS * 64 > NPX * RS || MFMAX * 16 * 4 > NPX * RS
#error "conv_halo: the bias tile or the store staging does not fit in the input tile"
#endif

#ifdef XQUAD
#define XI (SH * QW * CQ)                       // input items: 4 pixels x 8 channels
#else
#define XI (NPX * CQ)                           // input items: 1 pixel x 8 channels
#endif
#define XPT ((XI + NT - 1) / NT)
#ifdef WGLOBAL
#define WPT 1                                   // unused: fragments come from the buffer
#else
#define WIMAX (TAPS * MFMAX * 16 * (CK / 8))    // weight chunks
#define WPT ((WIMAX + NT - 1) / NT)
#endif

uint pack2(uint lo, uint hi) { return lo | (hi << 16); }

int n_img, ob, oy0, ox0;

// the input tile's first column: XQUAD 4 pixels left of the output tile
// (aligned runs), else the left padding
int x_org() {
#ifdef XQUAD
    return 4;
#else
    return pc.pl;
#endif
}

// Item i of the input chunk at channel c0: channels c0 + g * 8 .. + 7 of
// one pixel (px = i % NPX, g = i / NPX), or with XQUAD of the 4 pixels of
// run q of staged row rr (i = (g * SH + rr) * QW + q), read as 8-byte runs
// (the host's promise: W, x's offset and strides multiples of 4, so a run
// is all in or all out).  fetch_x only loads, each load unconditional (the
// address clamped into the image and to channel C - 1), so that all of a
// thread's loads are in flight while the current chunk is multiplied;
// store_x zeroes what lies outside the image or past C, packs 8 channels
// per pixel and writes them to the staged tile.
#ifdef XQUAD
#define RAW uvec2                // a run of 4 pixels of one channel
#else
#define RAW uint                 // one pixel of one channel
#endif

void item_pos(int i, out int g, out int px, out int iy, out int ix)
{
#ifdef XQUAD
    g = i / (SH * QW);
    int rq = i - g * (SH * QW), rr = rq / QW, q = rq - rr * QW;
    px = rq * 4;           // (rr * QW + q) * 4 = rr * SW + q * 4
    iy = oy0 - pc.pt + rr;
    ix = ox0 - 4 + q * 4;
#else
    g = i / NPX;
    px = i - g * NPX;
    iy = oy0 - pc.pt + px / SW;
    ix = ox0 - pc.pl + px % SW;
#endif
}

void fetch_x(int i, int c0, out RAW r[8])
{
    int g, px, iy, ix;
    item_pos(min(i, XI - 1), g, px, iy, ix);
    int c = c0 + g * 8;
    int at = pc.off_x + n_img * pc.sxn + clamp(iy, 0, pc.H - 1) * pc.sxh;
#ifdef XQUAD
    at += clamp(ix, 0, pc.W - 4);
    [[unroll]] for (int j = 0; j < 8; j++) r[j] = unpackUint2x32(u64_1.v[(at + min(c + j, pc.C - 1) * pc.sxc) >> 2]);
#else
    at += clamp(ix, 0, pc.W - 1);
    [[unroll]] for (int j = 0; j < 8; j++) r[j] = uint(u16_1.v[at + min(c + j, pc.C - 1) * pc.sxc]);
#endif
}

void store_x(int i, int c0, RAW r[8], int base)
{
    if (i >= XI) return;
    int g, px, iy, ix;
    item_pos(i, g, px, iy, ix);
    int c = c0 + g * 8;
    bool inside = iy >= 0 && iy < pc.H && ix >= 0 && ix < pc.W;
    [[unroll]] for (int j = 0; j < 8; j++)
        if (!inside || c + j >= pc.C) r[j] = RAW(0u);
#ifdef XQUAD
    // pixel p of channel j: half p of the run; a uvec4 holds 8 channels
    uvec4 v[4];
    [[unroll]] for (int k = 0; k < 4; k++) {
        uvec2 a = r[2 * k], b = r[2 * k + 1];
        v[0][k] = (a.x & 0xffffu) | (b.x << 16);
        v[1][k] = (a.x >> 16) | (b.x & 0xffff0000u);
        v[2][k] = (a.y & 0xffffu) | (b.y << 16);
        v[3][k] = (a.y >> 16) | (b.y & 0xffff0000u);
    }
    [[unroll]] for (int p = 0; p < 4; p++) Xs[base + (px + p) * RS + g] = v[p];
#else
    Xs[base + px * RS + g] = uvec4(pack2(r[0], r[1]), pack2(r[2], r[3]), pack2(r[4], r[5]), pack2(r[6], r[7]));
#endif
}

// item i of the weight chunk at channel c0: row i / 2 = (tap, out channel)
// of this workgroup's block, 8 channels c0 + (i % 2) * 8..
uvec4 fetch_w(int i, int c0)
{
    if (i >= KH * KW * MF * 16 * CQ) return uvec4(0u);
    int r = i / CQ, t = r / (MF * 16), m = r - t * (MF * 16);
    return w4.v[((t * pc.MP + ob * MF * 16 + m) * pc.CP + c0) / 8 + i % CQ];
}

int slot_w(int i) { return (i / CQ) * RS + i % CQ; }

void main()
{
    int tid = int(gl_LocalInvocationID.x);
#ifdef HALO_SIMT
    int sg = tid / 32, lane = tid % 32;
#else
    int sg = int(gl_SubgroupID), lane = int(gl_SubgroupInvocationID);
#endif
    ox0 = int(gl_WorkGroupID.x) * TW;
    oy0 = int(gl_WorkGroupID.y) * TH;
    n_img = int(gl_WorkGroupID.z) / pc.OB;
    ob = int(gl_WorkGroupID.z) - n_img * pc.OB;
    int o0 = ob * MF * 16;          // first output channel of the block

    // the bias as a 16-wide f32 tile in Xs (row m: bias of channel o0 + m)
    for (int e = tid; e < MF * 16 * 16; e += NT) {
        int m = e / 16, o = o0 + m;
        float b = pc.off_bias >= 0 && o < pc.O ? ldf_3(DTBIAS, pc.off_bias + o * pc.s_bias) : 0.0;
        Xs[e / 4][e % 4] = floatBitsToUint(b);
    }
    barrier();
    ACC_T acc[MFMAX * RN];
    [[unroll]] for (int i = 0; i < MFMAX; i++) {
        if (i >= MF) break;
        ACC_T b;
#ifdef HALO_SIMT
        for (int j = 0; j < 8; j++) {
            int e = lane + 32 * j;
            b.v[j] = uintBitsToFloat(Xs[i * 64 + e / 4][e % 4]);
        }
#else
        coopMatLoadNV(b, Xs, i * 64, 4, false);
#endif
        [[unroll]] for (int r = 0; r < RN; r++) acc[i * RN + r] = b;
    }
    barrier();

    RAW rx[XPT][8];
    uvec4 rw[WPT];
    [[unroll]] for (int j = 0; j < XPT; j++) fetch_x(tid + j * NT, 0, rx[j]);
#ifndef WGLOBAL
    [[unroll]] for (int j = 0; j < WPT; j++) rw[j] = fetch_w(tid + j * NT, 0);
#endif
    int nk = (pc.C + CK - 1) / CK;
    // WGLOBAL: two input buffers, the next chunk stored into the other one
    // after the products, one barrier a chunk; else one buffer for each
    // operand, stored between two barriers
    [[unroll]] for (int j = 0; j < XPT; j++) store_x(tid + j * NT, 0, rx[j], 0);
    int xsh = x_org() - pc.pl;      // the views' shift: staged column of output x, tap 0
    for (int kt = 0; kt < nk; kt++) {
        int xb = XST == 2 ? (kt & 1) * NPX * RS : 0;
        bool more = kt + 1 < nk;
#ifndef WGLOBAL
        if (kt > 0) {
            [[unroll]] for (int j = 0; j < XPT; j++) store_x(tid + j * NT, kt * CK, rx[j], 0);
        }
        [[unroll]] for (int j = 0; j < WPT; j++) {
            int i = tid + j * NT;
            if (i < KH * KW * MF * 16 * CQ) Ws[slot_w(i)] = rw[j];
        }
#endif
        barrier();
        if (more) {
            [[unroll]] for (int j = 0; j < XPT; j++) fetch_x(tid + j * NT, (kt + 1) * CK, rx[j]);
#ifndef WGLOBAL
            [[unroll]] for (int j = 0; j < WPT; j++) rw[j] = fetch_w(tid + j * NT, (kt + 1) * CK);
#endif
        }
        [[unroll]] for (int t = 0; t < TAPS; t++) {
            if (t >= KH * KW) break;
            int kh = t / KW, kw = t - kh * KW;
#ifdef HALO_SIMT
            // A: row-major rows of RS uvec4s from (t * MF + i) * 16; B:
            // column n (pixel) of output row y at ((y + kh) * SW + kw + xsh + n) * RS
            for (int r = 0; r < RN; r++) {
                int y = sg * RN + r;
                for (int i = 0; i < MF; i++)
                    for (int j = 0; j < 8; j++) {
                        int e = lane + 32 * j, m = e / 16, n = e % 16;
#ifdef WGLOBAL
                        int qa = ((t * pc.MP + o0 + i * 16 + m) * pc.CP + kt * CK) / 8;
#else
                        int qa = ((t * MF + i) * 16 + m) * RS;
#endif
                        int qb = xb + ((y + kh) * SW + kw + xsh + n) * RS;
                        float sum = acc[i * RN + r].v[j];
                        for (int k = 0; k < CK; k++) sum += hs_w(qa + k / 8, k % 8) * hs_x(qb + k / 8, k % 8);
                        acc[i * RN + r].v[j] = sum;
                    }
            }
#else
            [[unroll]] for (int kq = 0; kq < CQ; kq += 2) {       // 16 channels a step
                fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> fa[MFMAX];
                [[unroll]] for (int i = 0; i < MFMAX; i++) {
#ifdef WGLOBAL
                    if (i < MF)
                        coopMatLoadNV(fa[i], wh.v, (t * pc.MP + o0 + i * 16) * pc.CP + kt * CK + kq * 8, pc.CP, false);
#else
                    if (i < MF) coopMatLoadNV(fa[i], Ws, ((t * MF + i) * 16) * RS + kq, RS, false);
#endif
                }
                [[unroll]] for (int r = 0; r < RN; r++) {
                    int y = sg * RN + r;
                    fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> fb;
                    coopMatLoadNV(fb, Xs, xb + ((y + kh) * SW + kw + xsh) * RS + kq, RS, true);
                    [[unroll]] for (int i = 0; i < MFMAX; i++)
                        if (i < MF) acc[i * RN + r] = coopMatMulAddNV(fa[i], fb, acc[i * RN + r]);
                }
            }
#endif
        }
#ifdef WGLOBAL
        if (more) {
            [[unroll]] for (int j = 0; j < XPT; j++) store_x(tid + j * NT, (kt + 1) * CK, rx[j], NPX * RS - xb);
        }
#else
        barrier();
#endif
    }
    barrier();

    // store: interior fragments straight to the output, the others through
    // this subgroup's 16 x 16 f32 area in Xs (free after the last barrier)
    int plane = pc.OH * pc.OW;
    int cs = sg * 64;
    [[unroll]] for (int i = 0; i < MFMAX; i++) {
        if (i >= MF) break;
        [[unroll]] for (int r = 0; r < RN; r++) {
            int oy = oy0 + sg * RN + r, oc = o0 + i * 16;
            if (oy >= pc.OH || oc >= pc.O) continue;       // uniform in the subgroup
            int base = (n_img * pc.O + oc) * plane + oy * pc.OW + ox0;
#ifdef HALO_SIMT
            for (int j = 0; j < 8; j++) {
                int e = lane + 32 * j, m = e / 16, x = e % 16;
                if (oc + m < pc.O && ox0 + x < pc.OW) stf_2(DTO, base + m * plane + x, acc[i * RN + r].v[j]);
            }
#else
            if (C_DIRECT && ox0 + TW <= pc.OW && oc + 16 <= pc.O) {
                if (DTO == DT_F32) {
                    coopMatStoreNV(acc[i * RN + r], o32.v, base, plane, false);
                } else {
                    fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> h = fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>(acc[i * RN + r]);
                    coopMatStoreNV(h, o16.v, base, plane, false);
                }
                continue;
            }
            coopMatStoreNV(acc[i * RN + r], Xs, cs, 4, false);
            controlBarrier(gl_ScopeSubgroup, gl_ScopeSubgroup, gl_StorageSemanticsShared,
                           gl_SemanticsAcquireRelease);
            for (int e = lane; e < 256; e += 32) {
                int m = e / 16, x = e % 16;
                if (oc + m < pc.O && ox0 + x < pc.OW)
                    stf_2(DTO, base + m * plane + x, uintBitsToFloat(Xs[cs + e / 4][e % 4]));
            }
            controlBarrier(gl_ScopeSubgroup, gl_ScopeSubgroup, gl_StorageSemanticsShared,
                           gl_SemanticsAcquireRelease);
#endif
        }
    }
}
