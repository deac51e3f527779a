#version 450
// quant_deq.glsl - a quantized tensor's values (op dequantize): invocation
// i decodes elements 8 i .. 8 i + 7 (quant.glsl) into f32.  Groups loop
// when there are more chunks than one dispatch covers.
// Bindings: 0 = the blocks (words), 1 = the output.
#extension GL_EXT_control_flow_attributes : enable

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint QT = 0u;

layout(std430, binding = 0) readonly buffer Bq { uint QW[]; };
layout(std430, binding = 1) writeonly buffer Bo { uint O[]; };

layout(push_constant) uniform PC {
    uint chunks;      // elements / 8
    uint off;         // the output's first element
} pc;

#include "quant.glsl"

void main()
{
    uint per = q_block_elems() / 8u, bytes = q_block_bytes();
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint ch = gl_GlobalInvocationID.x; ch < pc.chunks; ch += stride) {
        float v[8];
        q_decode8((ch / per) * bytes, (ch % per) * 8u, v);
        uint o = pc.off + ch * 8u;
        [[unroll]] for (uint i = 0u; i < 8u; i++) O[o + i] = floatBitsToUint(v[i]);
    }
}
