// matmul_cm2.glsl - batched C = A @ B for f16 A and B on tensor cores through
// GL_NV_cooperative_matrix2 (glslang 15 only: mk/glslang.mk), accumulating in
// f32, C stored as f16 (rounded to nearest even, as the CPU) or f32.
//
// Unlike matmul_coop.glsl, nothing here is staged by hand: each workgroup
// holds its whole BM x BN tile of C as one workgroup-scope accumulator, and
// each step loads a BM x BK slice of A and a BK x BN slice of B as
// workgroup-scope matrices straight from memory through tensor layouts; the
// driver stages them through shared memory and splits the product over the
// subgroups (as it sees fit for the GPU: that is the point of the extension,
// where the subgroup-scope kernels keep 168-255 registers a thread and one
// workgroup an SM).
//
// Edges without bounds branches: a tensor layout with the clamp mode
// Constant returns 0 for coordinates outside the matrix (so a K tail or an
// M/N edge adds nothing) and drops stores outside C.  Workgroups wholly
// inside M and N run their whole BK steps through unclamped layouts (the
// driver's fast path), and only the K tail and edge workgroups pay for the
// clamping.  Transposed operands (A stored [k][m], B stored [n][k]) are read
// through a tensor view that swaps the two coordinates, so they need no
// extra pass.  Each load's base (elementOffset) must be 16-byte aligned: the
// host sends only products whose bases and batch strides are (matmul_cm2.c),
// the rest go to matmul_coop.
// Bindings: 0 = A, 1 = B, 2 = C (contiguous [batch, M, N]); push constants
// as matmul_coop.glsl's (lm_vk_mm_pc).
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int32 : require
#include "common.glsl"

#ifndef BM
#define BM 128
#define BN 128
#endif
#ifndef BK
#define BK 64
#endif
#ifndef NT
#define NT 256          // invocations (a shape the device lists for this many)
#endif
#ifndef UNROLL
#define UNROLL 4        // whole BK steps per loop trip in the unclamped part
#endif

layout(local_size_x = NT) in;
layout(constant_id = 0) const uint DTO = DT_F32;
layout(constant_id = 1) const bool A_T = false;      // A stored [k][m] (sam == 1)
layout(constant_id = 2) const bool B_T = false;      // B stored [n][k] (sbk == 1)
layout(constant_id = 3) const bool ALIGNED = false;  // A's and B's row strides are multiples of 8
layout(constant_id = 4) const int SWZ = 0;           // tile rows per L2 group (0: row by row)

#include "matmul_pc.glsl"

layout(std430, set = 0, binding = 0) readonly buffer A16 { float16_t v[]; } a16;
layout(std430, set = 0, binding = 1) readonly buffer B16 { float16_t v[]; } b16;
layout(std430, set = 0, binding = 2) writeonly buffer C32 { float v[]; } c32;
layout(std430, set = 0, binding = 2) writeonly buffer C16 { float16_t v[]; } c16;

#define CLAMP0 gl_CooperativeMatrixClampModeConstantNV
#define ACC coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>
#define ACC16 coopmat<float16_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>
#define MAT_A coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA>
#define MAT_B coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB>

// one BK step at depth k through layouts LA, LB (clamped or not): A's rows
// m0.., B's columns n0..; TV swaps a transposed operand's coordinates
#define STEP(LA, LB, k) { \
    MAT_A ma; MAT_B mb; \
    if (A_T) coopMatLoadTensorNV(ma, a16.v, oa, sliceTensorLayoutNV(LA, k, BK, m0, BM), tv); \
    else coopMatLoadTensorNV(ma, a16.v, oa, sliceTensorLayoutNV(LA, m0, BM, k, BK)); \
    if (B_T) coopMatLoadTensorNV(mb, b16.v, ob, sliceTensorLayoutNV(LB, n0, BN, k, BK), tv); \
    else coopMatLoadTensorNV(mb, b16.v, ob, sliceTensorLayoutNV(LB, k, BK, n0, BN)); \
    acc = coopMatMulAdd(ma, mb, acc); \
}

// the value f16 holds nearest x (ties to even), as an f32: converting it to
// f16 is then exact whatever rounding the driver's conversion uses
float f16_round(const in uint32_t r, const in uint32_t c, const in float x)
{
    return f16_to_f32(f32_to_f16(x));
}

void main()
{
    int batch = int(gl_WorkGroupID.z);
    uint oa = uint(pc.off_a), ob = uint(pc.off_b);
    int r = batch;
    for (int d = pc.nb - 1; d >= 0; d--) {
        int c = r % pc.bshape[d];
        r /= pc.bshape[d];
        oa += uint(c * pc.bsa[d]);
        ob += uint(c * pc.bsb[d]);
    }
    ivec2 t = tile_of_workgroup(SWZ);
    int m0 = t.x * BM, n0 = t.y * BN;

    // the outer stride of each operand as stored (the inner one is 1); a
    // multiple of 8 said so lets the driver use 16-byte accesses
    uint sa = uint(A_T ? pc.sak : pc.sam), sb = uint(B_T ? pc.sbn : pc.sbk);
    if (ALIGNED) { sa &= ~7u; sb &= ~7u; }
    uint ra = uint(A_T ? pc.K : pc.M), ca = uint(A_T ? pc.M : pc.K);
    uint rb = uint(B_T ? pc.N : pc.K), cb = uint(B_T ? pc.K : pc.N);
    tensorLayoutNV<2> la = createTensorLayoutNV(2);
    tensorLayoutNV<2> lb = createTensorLayoutNV(2);
    tensorLayoutNV<2, CLAMP0> lac = createTensorLayoutNV(2, CLAMP0);
    tensorLayoutNV<2, CLAMP0> lbc = createTensorLayoutNV(2, CLAMP0);
    la = setTensorLayoutStrideNV(setTensorLayoutDimensionNV(la, ra, ca), sa, 1);
    lb = setTensorLayoutStrideNV(setTensorLayoutDimensionNV(lb, rb, cb), sb, 1);
    lac = setTensorLayoutStrideNV(setTensorLayoutDimensionNV(lac, ra, ca), sa, 1);
    lbc = setTensorLayoutStrideNV(setTensorLayoutDimensionNV(lbc, rb, cb), sb, 1);
    tensorViewNV<2, false, 1, 0> tv = createTensorViewNV(2, false, 1, 0);

    ACC acc = ACC(0.0);
    // whole steps of an interior tile unclamped, UNROLL at a time, then the
    // rest (and every step of an edge tile) clamped to zeros
    bool inside = m0 + BM <= pc.M && n0 + BN <= pc.N;
    int kfull = inside ? pc.K / BK * BK : 0;
    int k = 0;
    for (; k + UNROLL * BK <= kfull; k += UNROLL * BK)
        [[unroll]] for (int u = 0; u < UNROLL; u++)
            STEP(la, lb, k + u * BK)
    for (; k < kfull; k += BK)
        STEP(la, lb, k)
    for (; k < pc.K; k += BK)
        STEP(lac, lbc, k)

    tensorLayoutNV<2, CLAMP0> lc = createTensorLayoutNV(2, CLAMP0);
    lc = setTensorLayoutDimensionNV(lc, uint(pc.M), uint(pc.N));
    uint oc = uint(batch) * uint(pc.M) * uint(pc.N);
    if (DTO == DT_F16) {
        ACC rounded;
        coopMatPerElementNV(rounded, acc, f16_round);
        ACC16 h = ACC16(rounded);
        coopMatStoreTensorNV(h, c16.v, oc, sliceTensorLayoutNV(lc, m0, BM, n0, BN));
    } else {
        coopMatStoreTensorNV(acc, c32.v, oc, sliceTensorLayoutNV(lc, m0, BM, n0, BN));
    }
}
