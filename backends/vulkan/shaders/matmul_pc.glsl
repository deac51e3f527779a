// matmul_pc.glsl - what the batched GEMMs share: the push constants
// (matmul.glsl, matmul_f32.glsl, matmul_coop.glsl, matmul_cm2.glsl), which
// must match the host's lm_vk_mm_pc (vk.h), and for the two with a conv
// build (matmul_f32.glsl, matmul_coop.glsl) the start of main(): the batch
// entry, where its A and B start and the workgroup's tile, and the K steps
// the workgroup takes.  Macros, not functions: each expands in place, so
// the SPIR-V is what the code written out in each kernel gave.
// Split-K (spec constant 14, SPLITK, both builds: nn_conv.c's and
// matmul.c's / matmul_coop.c's): P > 1 parts divide the K steps over P
// workgroups along z (z = batch entry * P + part), each storing its f32
// sums to slab `part` of binding 2 ([part][batch][M][N]);
// conv_splitk.comp adds the slabs in the order 0..P-1 and rounds once, so
// the result does not depend on which part ran first.  The host makes
// every part non-empty.  SPLITK = P as a constant, or 0: P read off the
// grid, gl_NumWorkGroups.z over the batch entries (pc.bshape's product;
// the host passes 0 only where that is its batch), so every count shares
// one pipeline (lm_vk_splitk_spec): a model's products split 2, 3, 4 or 6
// ways would each start their own on a new install.
// MM_PC_MORE, where the includer defines it, adds fields at the end
// (matmul_coop's MM_SCALED exponents); a conv build (MM_CONV) declares its
// own push constants in conv_gemm.glsl.
#ifndef MM_CONV
#ifndef MM_PC_MORE
#define MM_PC_MORE
#endif
layout(push_constant) uniform PC {
    int M, N, K, nb;
    int off_a, off_b;
    int sam, sak, sbk, sbn;
    int bshape[4], bsa[4], bsb[4];
    MM_PC_MORE
} pc;
#endif

// MM_BATCH, MM_PART: the batch entry and split-K part of this workgroup
// (a conv build's mm_nparts() is conv_gemm.glsl's, after its push constants)
layout(constant_id = 14) const int SPLITK = 1;
#ifndef MM_CONV
int mm_nparts()
{
    if (SPLITK > 0) return SPLITK;
    int e = 1;
    for (int d = 0; d < pc.nb; d++) e *= pc.bshape[d];
    return max(1, int(gl_NumWorkGroups.z) / e);
}
#endif
#define MM_BATCH (int(gl_WorkGroupID.z) / mm_nparts())
#define MM_PART (int(gl_WorkGroupID.z) % mm_nparts())

// MM_START: int batch, the batch entry (its split-K parts share one); the
// globals oa and ob, where its A and B start (the batch dims walked from
// the last: bshape, bsa, bsb), and m0, n0, the workgroup's tile (SWZ: tile
// rows per L2 group)
#define MM_START \
    int batch = MM_BATCH; \
    oa = pc.off_a; ob = pc.off_b; \
    int r = batch; \
    for (int d = pc.nb - 1; d >= 0; d--) { \
        int c = r % pc.bshape[d]; \
        r /= pc.bshape[d]; \
        oa += c * pc.bsa[d]; \
        ob += c * pc.bsb[d]; \
    } \
    ivec2 t = tile_of_workgroup(SWZ); \
    m0 = t.x * BM; \
    n0 = t.y * BN

// MM_STEPS: the K steps of this workgroup, [kt0, nk) (all of them
// without split-K); KT_REL(kt): steps since the workgroup's first.
// MM_SLAB: where this workgroup's part starts in binding 2 (0 without)
#define MM_STEPS \
    int nk = (pc.K + BK - 1) / BK, kt0; \
    { \
        int np_ = mm_nparts(), per_ = (nk + np_ - 1) / np_; \
        kt0 = min(nk, MM_PART * per_); \
        nk = min(nk, kt0 + per_); \
    }
#define KT_REL(kt) ((kt) - kt0)
#define MM_SLAB (MM_PART * (int(gl_NumWorkGroups.z) / mm_nparts()) * pc.M * pc.N)
