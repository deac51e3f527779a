// matmul_f32.glsl - batched C = A @ B in f32 arithmetic for f32, f16 and
// bf16 operands (any mix; 16-bit inputs are widened as they are staged, a
// 16-bit result rounded to nearest even once, as the CPU): the kernel for
// big products that do not go to tensor cores.  matmul.glsl stays for small
// ones.
//
// By default 256 invocations compute a 128x128 tile of C, each an 8x8
// block of it: rows ty*4+{0..3} and 64+ty*4+{0..3}, columns tx*4+{0..3}
// and 64+tx*4+{0..3}, so every operand read from shared memory is a vec4
// (4 loads feed 64 FMAs) and those reads are broadcasts or consecutive
// (other tiles: the macros below).
// A and B tiles of depth BK = 16 are staged k-major (As[k][m], Bs[k][n]),
// double buffered: the global loads for step k+1 go to registers before the
// FMAs of step k, so one barrier per step suffices.  Global loads are vec4
// along whichever dim of an operand has stride 1 (spec constants A_KCONTIG,
// B_NCONTIG say which; A_VEC/B_VEC that the vectors are 16-byte aligned),
// element by element at the edges and for other strides.
// Tile sizes are compile-time: as specialization constants the NVIDIA
// compiler kept the accumulators in local memory.
// Bindings: 0 = A, 1 = B, 2 = C (contiguous [batch, M, N]).
// With MM_CONV defined (conv_gemm.comp) B is a convolution's input read
// through an im2col mapping and a bias is added on store (conv_gemm.glsl).
#include "common.glsl"

// Tile variants (matmul_f32_*.comp define these before including; the
// host's table in matmul.c gives each its name for LUMEN_VK_MM_F32):
// BM x BN outputs per workgroup, depth BK, TM x TN per invocation (both
// multiples of 4: TM/4 row groups of 4 rows TY*4 apart, TN/4 column groups
// TX*4 apart, TX = BN/TN, TY = BM/TM, TX*TY = NT invocations, 256 unless
// defined).  WT = 1 lays each
// subgroup of 32 out as 8 x 4 invocations (a 32 x 32 warp tile per row and
// column group), so a k step's A reads are 4 distinct vec4 and its B reads
// 8 (one 128-byte shared wavefront each) instead of 2 and 16 (two).
// RDB = 1 double-buffers the fragments in registers.
#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 16
#endif
#ifndef TM
#define TM 8
#endif
#ifndef TN
#define TN 8
#endif
#ifndef WT
#define WT 0
#endif
#ifndef RDB
#define RDB 0
#endif
#ifndef NT
#define NT 256
#endif
#define TX (BN / TN)
#define TY (BM / TM)
#if TX * TY != NT
#error "matmul_f32: TX * TY must be NT"
#endif
// 4-element chunks of the A and B tiles per invocation
#define CA (BM * BK / (4 * NT))
#define CB (BN * BK / (4 * NT))
// Shared row stride in floats: padded by a vec4 so the transposing stores
// spread over the banks (33 KiB); matmul_f32_np.comp leaves it out
// for devices with 32 KiB of shared memory (lavapipe).
#ifndef PAD
#define PAD 4
#endif
#define SA (BM + PAD)
#define SB (BN + PAD)

layout(local_size_x = NT) in;
layout(constant_id = 0) const uint DTA = 0;
layout(constant_id = 1) const uint DTB = 0;
layout(constant_id = 2) const uint DTO = 0;
layout(constant_id = 3) const bool A_KCONTIG = true;   // A's k stride is 1
layout(constant_id = 4) const bool B_NCONTIG = true;   // B's n stride is 1
layout(constant_id = 5) const bool A_VEC = false;
layout(constant_id = 6) const bool B_VEC = false;
layout(constant_id = 7) const bool C_VEC = false;      // N % 4 == 0
// 10: whole tiles with 16-byte aligned operands (no bounds checks on
// loads); 11: > 0 walks the tiles in groups of SWZ tile rows (L2 reuse)
layout(constant_id = 10) const bool FULL = false;
layout(constant_id = 11) const int SWZ = 0;

#include "matmul_pc.glsl"

DECL_IO(0)
DECL_IO(1)
DECL_IO(2)
// 4 elements at once: vec4 for f32, uvec2 for 16-bit dtypes
layout(std430, set = 0, binding = 0) buffer Bf4_0 { vec4 v[]; } a4;
layout(std430, set = 0, binding = 1) buffer Bf4_1 { vec4 v[]; } b4;
layout(std430, set = 0, binding = 2) buffer Bf4_2 { vec4 v[]; } c4;
layout(std430, set = 0, binding = 0) buffer Bh4_0 { uvec2 v[]; } ah4;
layout(std430, set = 0, binding = 1) buffer Bh4_1 { uvec2 v[]; } bh4;
layout(std430, set = 0, binding = 2) buffer Bh4_2 { uvec2 v[]; } ch4;

vec4 widen(uint dt, uvec2 h)
{
    if (dt == DT_F16) return vec4(unpackHalf2x16(h.x), unpackHalf2x16(h.y));
    return vec4(uintBitsToFloat(h.x << 16), uintBitsToFloat(h.x & 0xffff0000u),
                uintBitsToFloat(h.y << 16), uintBitsToFloat(h.y & 0xffff0000u));
}

shared vec4 As[2 * BK * SA / 4];
shared vec4 Bs[2 * BK * SB / 4];

// 4 consecutive elements along the unit-stride dim (gcol..gcol+3, limit
// clim, stride scol) of row grow (limit rlim, stride srow)
#define FETCH(NAME, B, DT, V4, H4, VEC) \
vec4 NAME(int base, int grow, int rlim, int srow, int gcol, int clim, int scol) { \
    int at = base + grow * srow + gcol * scol; \
    if (VEC && (FULL || (grow < rlim && gcol + 4 <= clim))) \
        return DT == DT_F32 ? V4.v[at >> 2] : widen(DT, H4.v[at >> 2]); \
    vec4 r; \
    [[unroll]] for (int j = 0; j < 4; j++) \
        r[j] = grow < rlim && gcol + j < clim ? ldf_##B(DT, at + j * scol) : 0.0; \
    return r; \
}
FETCH(fetch0, 0, DTA, a4, ah4, A_VEC)
FETCH(fetch1, 1, DTB, b4, bh4, B_VEC)

int oa, ob, m0, n0;

#ifdef MM_CONV
#include "conv_gemm.glsl"
#endif

// chunk c (0..BM*BK/4-1) of the A tile: k-contiguous: m = c / (BK/4),
// k = (c % (BK/4)) * 4..; m-contiguous: k = c / (BM/4), m = (c % (BM/4)) * 4..
vec4 fetch_a(int c, int k0)
{
#ifdef MM_CONV
    if (pc.transpose != 0) return conv_fetch_a(c, k0);   // conv_transpose's weights
#endif
    if (A_KCONTIG)
        return fetch0(oa, m0 + c / (BK / 4), pc.M, pc.sam, k0 + (c % (BK / 4)) * 4, pc.K, pc.sak);
    return fetch0(oa, k0 + c / (BM / 4), pc.K, pc.sak, m0 + (c % (BM / 4)) * 4, pc.M, pc.sam);
}

vec4 fetch_b(int c, int k0)
{
#ifdef MM_CONV
    return conv_fetch_b(c, k0);      // B is the input, unfolded as it is read
#else
    if (B_NCONTIG)
        return fetch1(ob, k0 + c / (BN / 4), pc.K, pc.sbk, n0 + (c % (BN / 4)) * 4, pc.N, pc.sbn);
    return fetch1(ob, n0 + c / (BK / 4), pc.N, pc.sbn, k0 + (c % (BK / 4)) * 4, pc.K, pc.sbk);
#endif
}

// writes chunk c of A into buffer `buf` (As[k][m])
void put_a(int buf, int c, vec4 x)
{
    int base = buf * (BK * SA / 4);
    if (A_KCONTIG) {
        int m = c / (BK / 4), k = (c % (BK / 4)) * 4;
        [[unroll]] for (int j = 0; j < 4; j++) {
            int e = (k + j) * SA + m;
            As[base + e / 4][e % 4] = x[j];
        }
    } else {
        As[base + (c / (BM / 4)) * (SA / 4) + c % (BM / 4)] = x;
    }
}

void put_b(int buf, int c, vec4 x)
{
    int base = buf * (BK * SB / 4);
    if (B_NCONTIG) {
        Bs[base + (c / (BN / 4)) * (SB / 4) + c % (BN / 4)] = x;
    } else {
        int n = c / (BK / 4), k = (c % (BK / 4)) * 4;
        [[unroll]] for (int j = 0; j < 4; j++) {
            int e = (k + j) * SB + n;
            Bs[base + e / 4][e % 4] = x[j];
        }
    }
}

void store_row(int oc, int gm, int gn, vec4 x)
{
    if (gm >= pc.M) return;
#ifdef MM_CONV
    x += vec4(conv_bias(gm));
#endif
    int at = oc + gm * pc.N + gn;
    if (C_VEC && gn + 4 <= pc.N) {
        if (DTO == DT_F32) { c4.v[at >> 2] = x; return; }
        uvec4 h = DTO == DT_F16 ? uvec4(f32_to_f16(x.x), f32_to_f16(x.y), f32_to_f16(x.z), f32_to_f16(x.w))
                                : uvec4(f32_to_bf16(x.x), f32_to_bf16(x.y), f32_to_bf16(x.z), f32_to_bf16(x.w));
        ch4.v[at >> 2] = uvec2(h.x | (h.y << 16), h.z | (h.w << 16));
        return;
    }
    [[unroll]] for (int j = 0; j < 4; j++)
        if (gn + j < pc.N) stf_2(DTO, at + j, x[j]);
}

void main()
{
    int tid = int(gl_LocalInvocationID.x);
    MM_START;
#if WT
    int lane = tid % 32, sg = tid / 32;
    int tx = (sg % (TX / 8)) * 8 + lane % 8, ty = (sg / (TX / 8)) * 4 + lane / 8;
#else
    int tx = tid % TX, ty = tid / TX;
#endif

    vec4 acc[TM][TN / 4];
    [[unroll]] for (int i = 0; i < TM; i++)
        [[unroll]] for (int j = 0; j < TN / 4; j++) acc[i][j] = vec4(0.0);

    MM_STEPS;
    vec4 ra[CA], rb[CB];
    [[unroll]] for (int i = 0; i < CA; i++) ra[i] = fetch_a(tid + i * NT, kt0 * BK);
    [[unroll]] for (int i = 0; i < CB; i++) rb[i] = fetch_b(tid + i * NT, kt0 * BK);
    [[unroll]] for (int i = 0; i < CA; i++) put_a(0, tid + i * NT, ra[i]);
    [[unroll]] for (int i = 0; i < CB; i++) put_b(0, tid + i * NT, rb[i]);
    barrier();

    for (int kt = kt0; kt < nk; kt++) {
        int cur = KT_REL(kt) & 1;
        bool more = kt + 1 < nk;
        if (more) {
            [[unroll]] for (int i = 0; i < CA; i++) ra[i] = fetch_a(tid + i * NT, (kt + 1) * BK);
            [[unroll]] for (int i = 0; i < CB; i++) rb[i] = fetch_b(tid + i * NT, (kt + 1) * BK);
        }
        int ab = cur * (BK * SA / 4), bb = cur * (BK * SB / 4);
        // RDB: step kk + 1's fragments are read before step kk's FMAs
        vec4 a[2][TM / 4], b[2][TN / 4];
#define FRAGS(S, KK) \
        [[unroll]] for (int g = 0; g < TM / 4; g++) a[S][g] = As[ab + (KK) * (SA / 4) + g * TY + ty]; \
        [[unroll]] for (int h = 0; h < TN / 4; h++) b[S][h] = Bs[bb + (KK) * (SB / 4) + h * TX + tx];
        if (RDB != 0) { FRAGS(0, 0) }
        [[unroll]] for (int kk = 0; kk < BK; kk++) {
            int s = RDB != 0 ? kk & 1 : 0;
            if (RDB == 0) { FRAGS(0, kk) }
            else if (kk + 1 < BK) { FRAGS(s ^ 1, kk + 1) }
            [[unroll]] for (int g = 0; g < TM / 4; g++)
                [[unroll]] for (int i = 0; i < 4; i++)
                    [[unroll]] for (int h = 0; h < TN / 4; h++)
                        acc[g * 4 + i][h] = fma(vec4(a[s][g][i]), b[s][h], acc[g * 4 + i][h]);
        }
        if (more) {
            [[unroll]] for (int i = 0; i < CA; i++) put_a(cur ^ 1, tid + i * NT, ra[i]);
            [[unroll]] for (int i = 0; i < CB; i++) put_b(cur ^ 1, tid + i * NT, rb[i]);
        }
        barrier();
    }

    int oc = batch * pc.M * pc.N + MM_SLAB;
    [[unroll]] for (int g = 0; g < TM / 4; g++)
        [[unroll]] for (int i = 0; i < 4; i++) {
            int gm = m0 + g * 4 * TY + ty * 4 + i;
            [[unroll]] for (int h = 0; h < TN / 4; h++)
                store_row(oc, gm, n0 + h * 4 * TX + tx * 4, acc[g * 4 + i][h]);
        }
}
