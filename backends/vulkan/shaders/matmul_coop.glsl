// matmul_coop.glsl - batched C = A @ B for f16 A and B on tensor cores
// (GL_NV_cooperative_matrix), accumulating in f32, C stored as f16 or f32
// (rounded to nearest even once, as the CPU).
//
// A workgroup of WARPS subgroups of 32 computes a BM x BN tile of C; each
// subgroup a WM x WN part of it as FRM x FRN fragments of FM x FN.  The
// tile shape is compile-time (one .comp per shape: matmul_coop.comp is
// 128x128 with 8 subgroups of 64x32, the others say theirs).  A and B tiles
// of depth BK are staged in shared memory as raw f16 bits, STAGES buffers:
// with 2, the global loads for step k+1 are issued into registers before
// the fragments of step k are multiplied and one barrier per step
// suffices; with 1 (bigger tiles in 48 KiB) the registers are stored
// between two barriers.  Each operand is staged with its contiguous
// dimension contiguous in shared memory (A as [m][k] or [k][m], B as
// [k][n] or [n][k]) and loaded into fragments row- or column-major to
// match, so transposed views need no extra pass.  Loads are 16-byte
// vectors where the operand is contiguous and aligned (spec constants
// A_VEC/B_VEC; FULL: every tile whole, no bounds checks); other strides and
// the tile edges load element by element, padding with zeros.  Interior
// fragments are stored straight to C (C_DIRECT: the host's promise that C
// rows are 16-byte aligned); edge fragments go out through a per-subgroup
// shared buffer (aliasing the A tiles), which is where the M/N edges are
// cut off.  SWZ > 0 walks the tiles in groups of SWZ tile rows, so that
// workgroups running together share A rows and B columns in L2.
// Fragment sizes are compile-time too (16x16x16, or 16x8x16 with FN=8):
// the C side picks shaders whose shape the device lists in
// vkGetPhysicalDeviceCooperativeMatrixPropertiesNV.
// Bindings: 0 = A, 1 = B, 2 = C (contiguous [batch, M, N]).
// With MM_CONV defined (conv_coop*.comp) B is a convolution's input read
// through an im2col mapping and a bias is added on store (conv_gemm.glsl).
// With MM_SCALED (matmul_coop_bf16*.comp) A and B are f16 copies of bf16
// operands scaled by powers of two per row of A and column of B (binding 3
// holds the exponents, matmul_scale.comp) and C is unscaled on store.
// With MM_KHR (glslang 15 only: mk/glslang.mk) the fragments are
// GL_KHR_cooperative_matrix's coopmat types, with the same shapes, loads
// and stores: the CM_* macros below are the one place the two differ.
#ifdef MM_KHR
#extension GL_KHR_cooperative_matrix : require
#define CM_ACC coopmat<float, gl_ScopeSubgroup, FM, FN, gl_MatrixUseAccumulator>
#define CM_ACC16 coopmat<float16_t, gl_ScopeSubgroup, FM, FN, gl_MatrixUseAccumulator>
#define CM_A coopmat<float16_t, gl_ScopeSubgroup, FM, FK, gl_MatrixUseA>
#define CM_B coopmat<float16_t, gl_ScopeSubgroup, FK, FN, gl_MatrixUseB>
#define CM_LAYOUT(col) ((col) ? gl_CooperativeMatrixLayoutColumnMajor : gl_CooperativeMatrixLayoutRowMajor)
#define CM_LOAD(m, buf, at, stride, col) coopMatLoad(m, buf, at, stride, CM_LAYOUT(col))
#define CM_STORE(m, buf, at, stride, col) coopMatStore(m, buf, at, stride, CM_LAYOUT(col))
#define CM_MULADD(a, b, c) coopMatMulAdd(a, b, c)
#else
#extension GL_NV_cooperative_matrix : require
#define CM_ACC fcoopmatNV<32, gl_ScopeSubgroup, FM, FN>
#define CM_ACC16 fcoopmatNV<16, gl_ScopeSubgroup, FM, FN>
#define CM_A fcoopmatNV<16, gl_ScopeSubgroup, FM, FK>
#define CM_B fcoopmatNV<16, gl_ScopeSubgroup, FK, FN>
#define CM_LOAD(m, buf, at, stride, col) coopMatLoadNV(m, buf, at, stride, col)
#define CM_STORE(m, buf, at, stride, col) coopMatStoreNV(m, buf, at, stride, col)
#define CM_MULADD(a, b, c) coopMatMulAddNV(a, b, c)
#endif
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"

#ifndef FN
#define FM 16
#define FN 16
#define FK 16
#endif
#ifndef BM
#define BM 128
#define BN 128
#define BK 32
#define WM 64
#define WN 32
#endif
#ifndef STAGES
#define STAGES 2
#endif
#define FRM (WM / FM)
#define FRN (WN / FN)
#define WARPS ((BM / WM) * (BN / WN))
#define NT (WARPS * 32)          // invocations
#define CPT_A (BM * BK / 8 / NT)  // 16-byte chunks per invocation of a staged A tile
#define CPT_B (BN * BK / 8 / NT)
#if CPT_A * NT * 8 != BM * BK || CPT_B * NT * 8 != BN * BK
#error "matmul_coop: a staged tile must split evenly over the invocations"
#endif

layout(local_size_x = NT) in;
layout(constant_id = 0) const uint DTA = 1;
layout(constant_id = 1) const uint DTB = 1;
layout(constant_id = 2) const uint DTO = 1;
layout(constant_id = 3) const bool A_KCONTIG = true;   // stage A as [m][k]
layout(constant_id = 4) const bool B_NCONTIG = true;   // stage B as [k][n]
layout(constant_id = 5) const bool A_VEC = false;      // 16-byte loads along the staged rows
layout(constant_id = 6) const bool B_VEC = false;
// 7-10: conv_gemm.glsl's
layout(constant_id = 11) const bool C_DIRECT = false;  // interior fragments stored straight to C
layout(constant_id = 12) const int SWZ = 0;            // tile rows per L2 group (0: row by row)
layout(constant_id = 13) const bool FULL = false;      // M, N, K multiples of the tile, vector loads

#ifdef MM_SCALED
#define MM_PC_MORE int e_off;   // where B's exponents start in binding 3
#endif
#include "matmul_pc.glsl"

DECL_BUF(0)
DECL_BUF(1)
DECL_IO(2)
layout(std430, set = 0, binding = 0) buffer Bv4_0 { uvec4 v[]; } a4;
layout(std430, set = 0, binding = 1) buffer Bv4_1 { uvec4 v[]; } b4;
layout(std430, set = 0, binding = 2) buffer Cf32_2 { float v[]; } c32;
layout(std430, set = 0, binding = 2) buffer Cf16_2 { float16_t v[]; } c16;
#ifdef MM_SCALED
// the power-of-two exponents the operands were scaled by: per (batch, row
// of A) from 0, per (batch, column of B) from pc.e_off
layout(std430, set = 0, binding = 3) readonly buffer Ex { int v[]; } ex;
#endif

// Shared rows are padded by 8 halves (16 bytes) so that the 8 rows one
// fragment load touches at a time fall in distinct banks.  Strides are in
// uvec4 units (8 halves): [m][k] / [n][k] rows are BK + 8 halves, [k][m]
// rows BM + 8, [k][n] rows BN + 8.  A buffer holds either layout.
#define SK ((BK + 8) / 8)
#define SMA ((BM + 8) / 8)
#define SNB ((BN + 8) / 8)
#if BM * SK > BK * SMA
#define TILE_A (BM * SK)
#else
#define TILE_A (BK * SMA)
#endif
#if BN * SK > BK * SNB
#define TILE_B (BN * SK)
#else
#define TILE_B (BK * SNB)
#endif
shared uvec4 As[STAGES * TILE_A];
shared uvec4 Bs[STAGES * TILE_B];
// the store's staging areas (FM x FN f32 per subgroup) reuse the A tiles
#if WARPS * FM * FN / 4 > STAGES * TILE_A
#error "matmul_coop: the store staging does not fit in the A tiles"
#endif

int oa, ob, m0, n0;

uint pack2(uint lo, uint hi) { return lo | (hi << 16); }

#ifdef MM_CONV
#include "conv_gemm.glsl"
#endif

// chunk c (8 consecutive halves along the contiguous dim) of a staged tile
// with rows along `r` (limit rlim, stride srow) and the contiguous dim
// along `cl` (limit clim, stride scol)
#define FETCH(NAME, U16, V4, VEC) \
uvec4 NAME(int base, int grow, int rlim, int srow, int gcol, int clim, int scol) { \
    int at = base + grow * srow + gcol * scol; \
    if (VEC && (FULL || (grow < rlim && gcol + 8 <= clim))) return V4.v[at >> 3]; \
    uint h[8]; \
    [[unroll]] for (int j = 0; j < 8; j++) \
        h[j] = grow < rlim && gcol + j < clim ? uint(U16.v[at + j * scol]) : 0u; \
    return uvec4(pack2(h[0], h[1]), pack2(h[2], h[3]), pack2(h[4], h[5]), pack2(h[6], h[7])); \
}
FETCH(fetch0, u16_0, a4, A_VEC)
FETCH(fetch1, u16_1, b4, B_VEC)

uvec4 fetch_a(int c, int k0)
{
    if (A_KCONTIG) {
        int r = c / (BK / 8), cc = (c % (BK / 8)) * 8;
        return fetch0(oa, m0 + r, pc.M, pc.sam, k0 + cc, pc.K, pc.sak);
    }
    int r = c / (BM / 8), cc = (c % (BM / 8)) * 8;
    return fetch0(oa, k0 + r, pc.K, pc.sak, m0 + cc, pc.M, pc.sam);
}

uvec4 fetch_b(int c, int k0)
{
#ifdef MM_CONV
    return conv_fetch_b(c, k0);      // B is the input, unfolded as it is read
#else
    if (B_NCONTIG) {
        int r = c / (BN / 8), cc = (c % (BN / 8)) * 8;
        return fetch1(ob, k0 + r, pc.K, pc.sbk, n0 + cc, pc.N, pc.sbn);
    }
    int r = c / (BK / 8), cc = (c % (BK / 8)) * 8;
    return fetch1(ob, n0 + r, pc.N, pc.sbn, k0 + cc, pc.K, pc.sbk);
#endif
}

// where chunk c lands in its buffer, in uvec4 units, for rows of rowlen
// halves (row stride rs uvec4s)
int slot(int c, int rowlen, int rs)
{
    int per = rowlen / 8;
    return (c / per) * rs + c % per;
}

void main()
{
    int tid = int(gl_LocalInvocationID.x);
    int sg = int(gl_SubgroupID), lane = int(gl_SubgroupInvocationID);
    MM_START;
#ifdef MM_CONV
    conv_init();
#endif
    int wm = (sg / (BN / WN)) * WM, wn = (sg % (BN / WN)) * WN;

    CM_ACC acc[FRM * FRN];
    [[unroll]] for (int i = 0; i < FRM * FRN; i++)
        acc[i] = CM_ACC(0.0);

    // slots of this thread's chunks (the same every step), computed where
    // they are used: a local int[CPT] array would share its SPIR-V type with
    // the push constants' int[4] (or conv's int[2]), whose ArrayStride a
    // Function variable may not carry (glslang 15.1 reuses the type; the
    // validation layer's spirv-val rejects the module)
#define SA(i) (A_KCONTIG ? slot(tid + (i) * NT, BK, SK) : slot(tid + (i) * NT, BM, SMA))
#define SB(i) (B_NCONTIG ? slot(tid + (i) * NT, BN, SNB) : slot(tid + (i) * NT, BK, SK))
    MM_STEPS;
    uvec4 ra[CPT_A], rb[CPT_B];
    [[unroll]] for (int i = 0; i < CPT_A; i++) ra[i] = fetch_a(tid + i * NT, kt0 * BK);
    [[unroll]] for (int i = 0; i < CPT_B; i++) rb[i] = fetch_b(tid + i * NT, kt0 * BK);
    [[unroll]] for (int i = 0; i < CPT_A; i++) As[SA(i)] = ra[i];
    [[unroll]] for (int i = 0; i < CPT_B; i++) Bs[SB(i)] = rb[i];
    barrier();

    for (int kt = kt0; kt < nk; kt++) {
        int ca = STAGES == 2 ? (KT_REL(kt) & 1) * TILE_A : 0, cb = STAGES == 2 ? (KT_REL(kt) & 1) * TILE_B : 0;
        bool more = kt + 1 < nk;
        if (more) {
            [[unroll]] for (int i = 0; i < CPT_A; i++) ra[i] = fetch_a(tid + i * NT, (kt + 1) * BK);
            [[unroll]] for (int i = 0; i < CPT_B; i++) rb[i] = fetch_b(tid + i * NT, (kt + 1) * BK);
        }
        [[unroll]] for (int kk = 0; kk < BK; kk += FK) {
            CM_A fa[FRM];
            CM_B fb[FRN];
            [[unroll]] for (int i = 0; i < FRM; i++) {
                int m = wm + i * FM;
                if (A_KCONTIG)
                    CM_LOAD(fa[i], As, ca + m * SK + kk / 8, SK, false);
                else
                    CM_LOAD(fa[i], As, ca + kk * SMA + m / 8, SMA, true);
            }
            [[unroll]] for (int j = 0; j < FRN; j++) {
                int n = wn + j * FN;
                if (B_NCONTIG)
                    CM_LOAD(fb[j], Bs, cb + kk * SNB + n / 8, SNB, false);
                else
                    CM_LOAD(fb[j], Bs, cb + n * SK + kk / 8, SK, true);
            }
            [[unroll]] for (int i = 0; i < FRM; i++)
                [[unroll]] for (int j = 0; j < FRN; j++)
                    acc[i * FRN + j] = CM_MULADD(fa[i], fb[j], acc[i * FRN + j]);
        }
        if (more) {
            if (STAGES == 1) barrier();     // every subgroup is done with the tiles
            int na = STAGES == 2 ? TILE_A - ca : 0, nb = STAGES == 2 ? TILE_B - cb : 0;
            [[unroll]] for (int i = 0; i < CPT_A; i++) As[na + SA(i)] = ra[i];
            [[unroll]] for (int i = 0; i < CPT_B; i++) Bs[nb + SB(i)] = rb[i];
        }
        barrier();
    }

    // interior fragments straight to C; the others through this subgroup's
    // FM x FN f32 staging area in As (free after the loop's last barrier),
    // cut at the edges
    int oc = batch * pc.M * pc.N + MM_SLAB;
    int cs = sg * (FM * FN / 4);
    [[unroll]] for (int i = 0; i < FRM; i++)
        [[unroll]] for (int j = 0; j < FRN; j++) {
            int gm0 = m0 + wm + i * FM, gn0 = n0 + wn + j * FN;
            if (gm0 >= pc.M || gn0 >= pc.N) continue;     // uniform in the subgroup
#if !defined(MM_SCALED)
            // conv: the host asks for C_DIRECT only where there is no bias to add
            if (C_DIRECT && gm0 + FM <= pc.M && gn0 + FN <= pc.N) {
                if (DTO == DT_F32) {
                    CM_STORE(acc[i * FRN + j], c32.v, oc + gm0 * pc.N + gn0, pc.N, false);
                } else {
#ifndef BF16
                    CM_ACC16 h = CM_ACC16(acc[i * FRN + j]);
                    CM_STORE(h, c16.v, oc + gm0 * pc.N + gn0, pc.N, false);
#endif
                    // BF16 (spvpack --bf16): no 16-bit accumulator type at all -
                    // the device lists bf16 only as A and B beside f32 C, and
                    // the host sends bf16 results through the staging below
                }
                continue;
            }
#endif
            CM_STORE(acc[i * FRN + j], As, cs, FN / 4, false);
            controlBarrier(gl_ScopeSubgroup, gl_ScopeSubgroup, gl_StorageSemanticsShared,
                           gl_SemanticsAcquireRelease);
            for (int e = lane; e < FM * FN; e += 32) {
                int gm = gm0 + e / FN, gn = gn0 + e % FN;
                if (gm >= pc.M || gn >= pc.N) continue;
                float x = uintBitsToFloat(As[cs + e / 4][e % 4]);
#ifdef MM_CONV
                x += conv_bias(gm);
#endif
#ifdef MM_SCALED
                // in three steps: each factor stays a normal float, and each
                // partial result lies between x and the final one
                int sc = -(ex.v[batch * pc.M + gm] + ex.v[pc.e_off + batch * pc.N + gn]), s3 = sc / 3;
                x = ldexp(ldexp(ldexp(x, s3), s3), sc - 2 * s3);
#endif
                stf_2(DTO, oc + gm * pc.N + gn, x);
            }
            controlBarrier(gl_ScopeSubgroup, gl_ScopeSubgroup, gl_StorageSemanticsShared,
                           gl_SemanticsAcquireRelease);
        }
}
