#version 450
// quant_deq.glsl - a quantized tensor's values: invocation i decodes
// elements 8 i .. 8 i + 7 (quant.glsl) into f32 (DTO 0: op dequantize) or
// f16 (DTO 1: qlinear's transient f16 copy of its weight for the f16 GEMM,
// quant.c; rounded to nearest even as the CPU's lm_f32_to_f16, one uvec4
// store a chunk).  Groups loop when there are more chunks than one
// dispatch covers.
// Bindings: 0 = the blocks (words), 1 = the output.
#extension GL_EXT_control_flow_attributes : enable

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint QT = 0u;
layout(constant_id = 1) const uint DTO = 0u;

layout(std430, binding = 0) readonly buffer Bq { uint QW[]; };
layout(std430, binding = 1) writeonly buffer Bo { uint O[]; };
layout(std430, binding = 1) writeonly buffer Bo4 { uvec4 O4[]; };

layout(push_constant) uniform PC {
    uint chunks;      // elements / 8
    uint off;         // the output's first element (DTO 1: a multiple of 8)
} pc;

#include "quant.glsl"

uint half_bits(float f)
{
    uint x = floatBitsToUint(f);
    uint sign = (x >> 16) & 0x8000u;
    uint ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7e00u;
    if (ax >= 0x477ff000u) return sign | 0x7c00u;
    if (ax < 0x38800000u) return sign | uint(roundEven(uintBitsToFloat(ax) * 16777216.0));
    uint r = ax + 0xfffu + ((ax >> 13) & 1u);
    return sign | ((r >> 13) - (112u << 10));
}

void main()
{
    uint per = q_block_elems() / 8u, bytes = q_block_bytes();
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint ch = gl_GlobalInvocationID.x; ch < pc.chunks; ch += stride) {
        float v[8];
        q_decode8((ch / per) * bytes, (ch % per) * 8u, v);
        if (DTO == 0u) {
            uint o = pc.off + ch * 8u;
            [[unroll]] for (uint i = 0u; i < 8u; i++) O[o + i] = floatBitsToUint(v[i]);
        } else {
            uvec4 h;
            [[unroll]] for (uint i = 0u; i < 4u; i++) h[i] = half_bits(v[2u * i]) | half_bits(v[2u * i + 1u]) << 16;
            O4[pc.off / 8u + ch] = h;
        }
    }
}
