// matmul_pc.glsl - what the batched GEMMs share: the push constants
// (matmul.glsl, matmul_f32.glsl, matmul_coop.glsl, matmul_cm2.glsl), which
// must match the host's lm_vk_mm_pc (vk.h), and for the two with a conv
// build (matmul_f32.glsl, matmul_coop.glsl) the start of main(): the batch
// entry, where its A and B start and the workgroup's tile, and the K steps
// the workgroup takes.  Macros, not functions: each expands in place, so
// the SPIR-V is what the code written out in each kernel gave.
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

// MM_START: int batch, the batch entry (a conv's split-K parts share one:
// conv_gemm.glsl); the globals oa and ob, where its A and B start (the
// batch dims walked from the last: bshape, bsa, bsb), and m0, n0, the
// workgroup's tile (SWZ: tile rows per L2 group)
#ifdef MM_CONV
#define MM_BATCH conv_batch()
#else
#define MM_BATCH int(gl_WorkGroupID.z)
#endif
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

// MM_STEPS: the K steps of this workgroup start at kt0 (all of them but
// with split-K, where the conv build also declares their end, nk);
// KT_REL(kt): steps since the workgroup's first
#ifdef MM_CONV
#define MM_STEPS \
    int kt0 = 0, nk = (pc.K + BK - 1) / BK; \
    conv_steps(kt0, nk)
#define KT_REL(kt) ((kt) - kt0)
#else
#define MM_STEPS const int kt0 = 0
#define KT_REL(kt) (kt)
#endif
