// conv_gemm.glsl - the convolution hooks of matmul_f32.glsl and
// matmul_coop.glsl (included by them when MM_CONV is defined: conv_gemm.comp,
// and conv_coop.comp with MM_COOP for f16 on tensor cores): conv2d as an
// implicit GEMM.
//
// Per batch entry z = (image n, group g):  C[o][p] = sum_k A[o][k] * B[k][p]
// with A = the group's weights [O/g, C/g*KH*KW] (k-contiguous, so the
// shared A path of the GEMM reads them as they are), p = oy*OW + ox an
// output pixel and B[k = (c, kh, kw)][p] = x[n, g*C/g + c, oy*sh - pt +
// kh*dh, ox*sw - pl + kw*dw], zero outside the input - the im2col matrix,
// computed from its address as each tile is staged instead of being
// written out.  The output [N, O, OH*OW] is exactly the GEMM's contiguous
// [batch, M, N] result.  The bias (binding 3) is added on store.
// The batch walk of main() uses bshape = {N, G}, bsa = {0, weights of one
// group}, bsb = {x's image stride, x's stride of one group}.
//
// transpose != 0 (f32 kernel only): conv_transpose2d in gather form, A =
// w[g*C/g + c, o, kh, kw] (weights [Cin, O/g, KH, KW], read through
// conv_fetch_a since c is not contiguous with (kh, kw)), B[k][p] = x[n,
// g*C/g + c, iy, ix] where oy = iy*sh - pt + kh*dh, i.e. iy = (oy + pt -
// kh*dh) / sh when that divides, zero otherwise.  A stride-s conv_transpose
// thus multiplies 1/(sh*sw) of B's entries by zeros, which the tiling still
// makes cheaper than conv_direct.comp's per-output loop.

layout(constant_id = 8) const uint DTBIAS = 0;

layout(push_constant) uniform PC {
    int M, N, K, nb;            // M = O/g, N = OH*OW, K = C/g*KH*KW, nb = 2
    int off_a, off_b;
    int sam, sak;               // weights: o stride, k stride (1)
    int off_bias, s_bias;       // off_bias < 0: no bias
    int bshape[2], bsa[2], bsb[2];
    int H, W, OW, KW, KHW;
    int sh, sw, pt, pl, dh, dw;
    int sxc, sxh, sxw;          // x's strides in elements
    int transpose, swc;         // conv_transpose; its weights' input-channel stride
} pc;

DECL_IO(3)

// split-K (nn_conv.c's lm_vk_splitk_parts; matmul_pc.glsl's SPLITK,
// MM_STEPS and MM_SLAB): a conv with few output tiles (1280 channels at
// 8x8) would leave most SMs idle; each part stores its f32 sums without
// bias, and conv_splitk.comp adds the bias with the slabs.
// matmul_pc.glsl's split count where SPLITK = 0: the grid's z over the
// batch entries (bshape = {N, G})
int mm_nparts() { return SPLITK > 0 ? SPLITK : max(1, int(gl_NumWorkGroups.z) / (pc.bshape[0] * pc.bshape[1])); }
int conv_batch() { return MM_BATCH; }

#ifdef MM_COOP
// the kernel's width and taps as specialization constants (the divisions
// below become multiplications; the host passes them), 0: push constants
layout(constant_id = 9) const int CKW = 0;
layout(constant_id = 10) const int CKHW = 0;
#define KW_ (CKW > 0 ? CKW : pc.KW)
#define KHW_ (CKHW > 0 ? CKHW : pc.KHW)
#else
#define KW_ pc.KW
#define KHW_ pc.KHW
#endif

// where row k = (c, kh, kw) of B reads: channel c's plane (base) and the
// offsets of tap (kh, kw) from an output pixel's scaled position
void conv_row(int k, out int base, out int dy, out int dx)
{
    int ch = k / KHW_, kk = k - ch * KHW_;
    int kh = kk / KW_, kw = kk - kh * KW_;
    base = ob + ch * pc.sxc;
    dy = kh * pc.dh - pc.pt;
    dx = kw * pc.dw - pc.pl;
}

#ifdef MM_COOP
// conv_coop.comp: chunk c of the B tile at depth k0 as 8 raw f16 values,
// row k0 + c / (BN/8), pixels n0 + (c % (BN/8)) * 8.. (matmul_coop.glsl's
// B_NCONTIG staging).  With B_VEC (the host's promise: stride and dilation
// 1 along x, unit x stride, OW % 8 == 0, even offsets and strides) the 8
// pixels lie in one output row and read 8 consecutive inputs: 5 words
// (clamped to the binding), shifted by half a word where the run starts on
// an odd element, the halves outside the input row zeroed.  No branch
// depends on the tap or the pixel's place in its row, so a subgroup with
// chunks at the row's edges and in its middle stays converged (with a
// separate path for the edges, as first written, every subgroup paid for
// it and the runs gained nothing).
// Every chunk of a thread starts at the same pixel (c % (BN/8) = tid %
// (BN/8)): conv_init() finds it once, before the first fetch.
#if (NT % (BN / 8)) != 0
#error "conv_coop: a thread's chunks must share their pixels"
#endif
int g_oy, g_ox;

void conv_init()
{
    int p = n0 + (int(gl_LocalInvocationID.x) % (BN / 8)) * 8;
    g_oy = p / pc.OW;
    g_ox = p - g_oy * pc.OW;
}

// B_FLAT (the host's promise: 1x1, stride 1, no padding, OW = W, x rows
// contiguous, offsets, channel stride and N multiples of 8): B is a plain
// [K][N] matrix, channel k's pixels from ob + k * sxc, read as 16-byte
// vectors - the 1x1 conv is then exactly the GEMM of matmul_coop.glsl.
layout(constant_id = 15) const bool B_FLAT = false;

uvec4 conv_fetch_b(int c, int k0)
{
    uint h[8] = uint[8](0u, 0u, 0u, 0u, 0u, 0u, 0u, 0u);
    int k = k0 + c / (BN / 8), p = n0 + (c % (BN / 8)) * 8;
    if (B_FLAT) return k < pc.K && p < pc.N ? b4.v[(ob + k * pc.sxc + p) >> 3] : uvec4(0u);
    if (k < pc.K) {
        int base, dy, dx;
        conv_row(k, base, dy, dx);
        int oy = g_oy, ox = g_ox;
        if (B_VEC) {
            int iy = oy * pc.sh + dy, ix = ox + dx;
            if (p >= pc.N || iy < 0 || iy >= pc.H || ix >= pc.W || ix + 8 <= 0) return uvec4(0u);
            int at = base + iy * pc.sxh + ix, w = at >> 1, last = int(u32_1.v.length()) - 1;
            uint u[5];
            [[unroll]] for (int i = 0; i < 5; i++) u[i] = u32_1.v[clamp(w + i, 0, last)];
            bool odd = (at & 1) != 0;
            uvec4 r;
            [[unroll]] for (int i = 0; i < 4; i++) {
                uint x = odd ? (u[i] >> 16) | (u[i + 1] << 16) : u[i];
                int e = ix + 2 * i;
                uint keep = (e >= 0 && e < pc.W ? 0xffffu : 0u) | (e + 1 >= 0 && e + 1 < pc.W ? 0xffff0000u : 0u);
                r[i] = x & keep;
            }
            return r;
        }
        [[unroll]] for (int j = 0; j < 8; j++) {
            int iy = oy * pc.sh + dy, ix = ox * pc.sw + dx;
            if (p + j < pc.N && iy >= 0 && iy < pc.H && ix >= 0 && ix < pc.W)
                h[j] = uint(u16_1.v[base + iy * pc.sxh + ix * pc.sxw]);
            if (++ox == pc.OW) { ox = 0; oy++; }
        }
    }
    return uvec4(pack2(h[0], h[1]), pack2(h[2], h[3]), pack2(h[4], h[5]), pack2(h[6], h[7]));
}
#else
// chunk c of the B tile at depth k0: row k = k0 + c / (BN/4), the 4 output
// pixels from n0 + (c % (BN/4)) * 4 (matmul_f32.glsl's B_NCONTIG layout)
vec4 conv_fetch_b(int c, int k0)
{
    vec4 r = vec4(0.0);
    int k = k0 + c / (BN / 4), p = n0 + (c % (BN / 4)) * 4;
    if (k >= pc.K) return r;
    int base, dy, dx;
    conv_row(k, base, dy, dx);
    int oy = p / pc.OW, ox = p - oy * pc.OW;
    [[unroll]] for (int j = 0; j < 4; j++) {
        int iy = oy * pc.sh + dy, ix = ox * pc.sw + dx;
        bool inside = iy >= 0 && ix >= 0;
        if (pc.transpose != 0) {     // the input pixel whose tap (kh, kw) lands here
            int ty = oy - dy, tx = ox - dx;
            iy = ty / pc.sh;
            ix = tx / pc.sw;
            inside = ty >= 0 && tx >= 0 && iy * pc.sh == ty && ix * pc.sw == tx;
        }
        if (p + j < pc.N && inside && iy < pc.H && ix < pc.W)
            r[j] = ldf_1(DTB, base + iy * pc.sxh + ix * pc.sxw);
        if (++ox == pc.OW) { ox = 0; oy++; }
    }
    return r;
}

// conv_transpose: chunk c of the A tile, row m = m0 + c / (BK/4), the 4
// weights k0 + (c % (BK/4)) * 4.. of output channel m (A_KCONTIG layout)
vec4 conv_fetch_a(int c, int k0)
{
    vec4 r = vec4(0.0);
    int m = m0 + c / (BK / 4), k = k0 + (c % (BK / 4)) * 4;
    if (m >= pc.M) return r;
    [[unroll]] for (int j = 0; j < 4; j++) {
        int ch = (k + j) / pc.KHW;
        if (k + j < pc.K) r[j] = ldf_0(DTA, oa + ch * pc.swc + m * pc.sam + (k + j - ch * pc.KHW));
    }
    return r;
}
#endif

// the bias of row gm (output channel g*M + gm) of this workgroup's batch entry
float conv_bias(int gm)
{
    if (pc.off_bias < 0) return 0.0;
    int g = conv_batch() % pc.bshape[1];
    return ldf_3(DTBIAS, pc.off_bias + (g * pc.M + gm) * pc.s_bias);
}
