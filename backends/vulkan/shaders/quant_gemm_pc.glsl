// quant_gemm_pc.glsl - what qlinear's GEMMs share (quant_gemm.glsl,
// quant_gemm_coop.glsl): w's blocks and y (bindings 1 and 2), the push
// constants, which must match quant.c's gemm_pc, and the block decoder
// (quant.glsl).  The includer declares x (binding 0) and QT.
layout(std430, binding = 1) readonly buffer Bq { uint QW[]; };
layout(std430, binding = 2) writeonly buffer By { float Y[]; };

layout(push_constant) uniform PC {
    uint M, N, K;
    uint off_x, off_y;
    uint row_bytes;
} pc;

#include "quant.glsl"
