// matmul_coop.glsl - batched C = A @ B for f16 A and B on tensor cores
// (GL_NV_cooperative_matrix), accumulating in f32, C stored as f16 or f32
// (rounded to nearest even once, as the CPU).
//
// A workgroup of WARPS subgroups of 32 computes a 128x128 tile of C; each
// subgroup a WM x WN part of it as FRM x FRN fragments of FM x FN: 8
// subgroups of 64x32.  (WARPS=4, 64x64 each, halves the shared-memory reads
// per multiply but ran at half the speed on an H100, likely from register
// pressure with 16 accumulators, so no shader uses it.)  A and B tiles of depth BK = 32 are staged in shared memory as
// raw f16 bits, double buffered: the global loads for step k+1 are issued
// into registers before the fragments of step k are multiplied, so one
// barrier per step suffices.  Each operand is staged with its contiguous
// dimension contiguous in shared memory (A as [m][k] or [k][m], B as
// [k][n] or [n][k]) and loaded into fragments row- or column-major to
// match, so transposed views need no extra pass.  Loads are 16-byte
// vectors where the operand is contiguous and aligned (spec constants
// A_VEC/B_VEC); other strides and the tile edges load element by element,
// padding with zeros.  The accumulators go out through a small per-subgroup
// shared buffer, which is where the M/N edges are cut off.
// Fragment sizes are compile-time (matmul_coop.comp 16x16x16,
// matmul_coop_n8.comp 16x8x16): the C side picks one that the device
// lists in vkGetPhysicalDeviceCooperativeMatrixPropertiesNV.
// Bindings: 0 = A, 1 = B, 2 = C (contiguous [batch, M, N]).
// With MM_CONV defined (conv_coop.comp) B is a convolution's input read
// through an im2col mapping and a bias is added on store (conv_gemm.glsl).
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"

#ifndef FN
#define FM 16
#define FN 16
#define FK 16
#endif
#ifndef WARPS
#define WARPS 8
#endif
#define BM 128
#define BN 128
#define BK 32
#define WM 64                  // a subgroup's part: 2 x (WARPS / 2) subgroups
#define WN (BN / (WARPS / 2))
#define FRM (WM / FM)
#define FRN (WN / FN)
#define NT (WARPS * 32)        // invocations
#define CHUNKS (BM * BK / 8)   // 16-byte chunks per staged tile (= BN*BK/8)
#define CPT (CHUNKS / NT)      // chunks per invocation and operand

layout(local_size_x = NT) in;
layout(constant_id = 0) const uint DTA = 1;
layout(constant_id = 1) const uint DTB = 1;
layout(constant_id = 2) const uint DTO = 1;
layout(constant_id = 3) const bool A_KCONTIG = true;   // stage A as [m][k]
layout(constant_id = 4) const bool B_NCONTIG = true;   // stage B as [k][n]
layout(constant_id = 5) const bool A_VEC = false;      // 16-byte loads along the staged rows
layout(constant_id = 6) const bool B_VEC = false;

// conv_coop.comp (MM_CONV) declares its own push constants in conv_gemm.glsl
#ifndef MM_CONV
layout(push_constant) uniform PC {
    int M, N, K, nb;
    int off_a, off_b;
    int sam, sak, sbk, sbn;
    int bshape[4], bsa[4], bsb[4];
} pc;
#endif

DECL_BUF(0)
DECL_BUF(1)
DECL_IO(2)
layout(std430, set = 0, binding = 0) buffer Bv4_0 { uvec4 v[]; } a4;
layout(std430, set = 0, binding = 1) buffer Bv4_1 { uvec4 v[]; } b4;

// Shared rows are padded by 8 halves (16 bytes) so that the 8 rows one
// fragment load touches at a time fall in distinct banks.  Strides are in
// uvec4 units (8 halves): [m][k] / [n][k] rows are BK + 8 halves, [k][m] /
// [k][n] rows BM + 8.  One buffer holds either layout (128 x 40 >= 32 x 136).
#define SK ((BK + 8) / 8)
#define SMN ((BM + 8) / 8)
#define TILE (BM * SK)
#ifdef SH_SCALAR
// debugging variant: shared memory as f16 scalars, strides in halves
shared float16_t As[2 * TILE * 8];
shared float16_t Bs[2 * TILE * 8];
#define SH_UNIT 8
#else
shared uvec4 As[2 * TILE];
shared uvec4 Bs[2 * TILE];
#define SH_UNIT 1
#endif
shared float Cs[WARPS * FM * FN];

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
    if (VEC && grow < rlim && gcol + 8 <= clim) return V4.v[at >> 3]; \
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

// where chunk c lands in its buffer, in uvec4 units
int slot(int c, bool rows_are_k, int rowlen)
{
    int per = rowlen / 8;
    return (c / per) * (rows_are_k ? SMN : SK) + c % per;
}

#ifdef SH_SCALAR
#define PUT(S, at, V) { \
    f16vec2 p0 = unpackFloat2x16((V).x), p1 = unpackFloat2x16((V).y), \
            p2 = unpackFloat2x16((V).z), p3 = unpackFloat2x16((V).w); \
    int e = (at) * 8; \
    S[e] = p0.x; S[e + 1] = p0.y; S[e + 2] = p1.x; S[e + 3] = p1.y; \
    S[e + 4] = p2.x; S[e + 5] = p2.y; S[e + 6] = p3.x; S[e + 7] = p3.y; }
#else
#define PUT(S, at, V) S[at] = V;
#endif

void main()
{
    int tid = int(gl_LocalInvocationID.x);
    int sg = int(gl_SubgroupID), lane = int(gl_SubgroupInvocationID);
    int batch = int(gl_WorkGroupID.z);
    oa = pc.off_a; ob = pc.off_b;
    int r = batch;
    for (int d = pc.nb - 1; d >= 0; d--) {
        int c = r % pc.bshape[d];
        r /= pc.bshape[d];
        oa += c * pc.bsa[d];
        ob += c * pc.bsb[d];
    }
    m0 = int(gl_WorkGroupID.y) * BM;
    n0 = int(gl_WorkGroupID.x) * BN;
#ifdef MM_CONV
    conv_init();
#endif
    int wm = (sg / (BN / WN)) * WM, wn = (sg % (BN / WN)) * WN;

    fcoopmatNV<32, gl_ScopeSubgroup, FM, FN> acc[FRM * FRN];
    [[unroll]] for (int i = 0; i < FRM * FRN; i++)
        acc[i] = fcoopmatNV<32, gl_ScopeSubgroup, FM, FN>(0.0);

    // slots of this thread's two chunks (same every step)
    int sa[CPT], sb[CPT];
    [[unroll]] for (int i = 0; i < CPT; i++) {
        int c = tid + i * NT;
        sa[i] = A_KCONTIG ? slot(c, false, BK) : slot(c, true, BM);
        sb[i] = B_NCONTIG ? slot(c, true, BN) : slot(c, false, BK);
    }
    uvec4 ra[CPT], rb[CPT];
    [[unroll]] for (int i = 0; i < CPT; i++) {
        ra[i] = fetch_a(tid + i * NT, 0);
        rb[i] = fetch_b(tid + i * NT, 0);
    }
    [[unroll]] for (int i = 0; i < CPT; i++) {
        PUT(As, sa[i], ra[i]);
        PUT(Bs, sb[i], rb[i]);
    }
    barrier();

    int nk = (pc.K + BK - 1) / BK;
    for (int kt = 0; kt < nk; kt++) {
        int cur = (kt & 1) * TILE;
        bool more = kt + 1 < nk;
        if (more) {
            [[unroll]] for (int i = 0; i < CPT; i++) {
                ra[i] = fetch_a(tid + i * NT, (kt + 1) * BK);
                rb[i] = fetch_b(tid + i * NT, (kt + 1) * BK);
            }
        }
        [[unroll]] for (int kk = 0; kk < BK; kk += FK) {
            fcoopmatNV<16, gl_ScopeSubgroup, FM, FK> fa[FRM];
            fcoopmatNV<16, gl_ScopeSubgroup, FK, FN> fb[FRN];
            [[unroll]] for (int i = 0; i < FRM; i++) {
                int m = wm + i * FM;
                if (A_KCONTIG)
                    coopMatLoadNV(fa[i], As, (cur + m * SK + kk / 8) * SH_UNIT, SK * SH_UNIT, false);
                else
                    coopMatLoadNV(fa[i], As, (cur + kk * SMN + m / 8) * SH_UNIT, SMN * SH_UNIT, true);
            }
            [[unroll]] for (int j = 0; j < FRN; j++) {
                int n = wn + j * FN;
                if (B_NCONTIG)
                    coopMatLoadNV(fb[j], Bs, (cur + kk * SMN + n / 8) * SH_UNIT, SMN * SH_UNIT, false);
                else
                    coopMatLoadNV(fb[j], Bs, (cur + n * SK + kk / 8) * SH_UNIT, SK * SH_UNIT, true);
            }
            [[unroll]] for (int i = 0; i < FRM; i++)
                [[unroll]] for (int j = 0; j < FRN; j++)
                    acc[i * FRN + j] = coopMatMulAddNV(fa[i], fb[j], acc[i * FRN + j]);
        }
        if (more) {
            int nxt = TILE - cur;
            [[unroll]] for (int i = 0; i < CPT; i++) {
                PUT(As, nxt + sa[i], ra[i]);
                PUT(Bs, nxt + sb[i], rb[i]);
            }
        }
        barrier();
    }

    // out through this subgroup's FM x FN staging area, cut at the edges
    int oc = batch * pc.M * pc.N;
    int cs = sg * FM * FN;
    [[unroll]] for (int i = 0; i < FRM; i++)
        [[unroll]] for (int j = 0; j < FRN; j++) {
            int gm0 = m0 + wm + i * FM, gn0 = n0 + wn + j * FN;
            if (gm0 >= pc.M || gn0 >= pc.N) continue;     // uniform in the subgroup
            coopMatStoreNV(acc[i * FRN + j], Cs, cs, FN, false);
            controlBarrier(gl_ScopeSubgroup, gl_ScopeSubgroup, gl_StorageSemanticsShared,
                           gl_SemanticsAcquireRelease);
            for (int e = lane; e < FM * FN; e += 32) {
                int gm = gm0 + e / FN, gn = gn0 + e % FN;
#ifdef MM_CONV
                if (gm < pc.M && gn < pc.N) stf_2(DTO, oc + gm * pc.N + gn, Cs[cs + e] + conv_bias(gm));
#else
                if (gm < pc.M && gn < pc.N) stf_2(DTO, oc + gm * pc.N + gn, Cs[cs + e]);
#endif
            }
            controlBarrier(gl_ScopeSubgroup, gl_ScopeSubgroup, gl_StorageSemanticsShared,
                           gl_SemanticsAcquireRelease);
        }
}
