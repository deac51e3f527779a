#version 450
// quant_deq.glsl - a quantized tensor's values: invocation i decodes
// elements 8 i .. 8 i + 7 (quant.glsl) into f32 (DTO 0: op dequantize) or
// f16 (DTO 1: qlinear's transient f16 copy of its weight for the f16 GEMM,
// quant.c; rounded to nearest even as the CPU's lm_f32_to_f16, one uvec4
// store a chunk).  For that copy, Q4_K and Q8_0 are decoded a unit of 32
// elements an invocation from 16-byte loads (quant.glsl's q4k_unit,
// q80_unit: the same values), and SRC 1 makes the kernel round an f32
// tensor (qlinear's x, at element src_off of binding 0) to f16 instead.
// Groups loop when there are more chunks than one dispatch covers.
// Bindings: 0 = the blocks (words) or the f32 source, 1 = the output.
#extension GL_EXT_control_flow_attributes : enable

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint QT = 0u;
layout(constant_id = 1) const uint DTO = 0u;
layout(constant_id = 2) const uint SRC = 0u;

layout(std430, binding = 0) readonly buffer Bq { uint QW[]; };
layout(std430, binding = 0) readonly buffer Bq4 { uvec4 QW4[]; };
layout(std430, binding = 1) writeonly buffer Bo { uint O[]; };
layout(std430, binding = 1) writeonly buffer Bo4 { uvec4 O4[]; };

layout(push_constant) uniform PC {
    uint chunks;      // elements / 8
    uint off;         // the output's first element (DTO 1: a multiple of 8)
    uint src_off;     // SRC 1: the source's first element
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

uvec4 halves(vec4 a, vec4 b)
{
    return uvec4(half_bits(a.x) | half_bits(a.y) << 16, half_bits(a.z) | half_bits(a.w) << 16,
                 half_bits(b.x) | half_bits(b.y) << 16, half_bits(b.z) | half_bits(b.w) << 16);
}

void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint o8 = pc.off / 8u;
    if (SRC == 1u) {
        bool vec = (pc.src_off & 3u) == 0u;
        for (uint ch = gl_GlobalInvocationID.x; ch < pc.chunks; ch += stride) {
            uint s = pc.src_off + ch * 8u;
            uvec4 a, b;
            if (vec) {
                a = QW4[s / 4u];
                b = QW4[s / 4u + 1u];
            } else {
                a = uvec4(QW[s], QW[s + 1u], QW[s + 2u], QW[s + 3u]);
                b = uvec4(QW[s + 4u], QW[s + 5u], QW[s + 6u], QW[s + 7u]);
            }
            O4[o8 + ch] = halves(uintBitsToFloat(a), uintBitsToFloat(b));
        }
        return;
    }
    if (DTO == 1u && QT == QT_Q4_K) {
        for (uint u = gl_GlobalInvocationID.x; u < pc.chunks / 4u; u += stride) {
            uint b16 = (u / 8u) * 9u, j = u % 8u;
            vec4 lo[4], hi[4];
            q4k_unit(QW4[b16], QW4[b16 + 1u + j], j, lo, hi);
            uint e8 = o8 + (u / 8u) * 32u + 8u * (j / 2u) + 2u * (j % 2u);   // in chunks of 8
            O4[e8] = halves(lo[0], lo[1]);
            O4[e8 + 1u] = halves(lo[2], lo[3]);
            O4[e8 + 4u] = halves(hi[0], hi[1]);
            O4[e8 + 5u] = halves(hi[2], hi[3]);
        }
        return;
    }
    if (DTO == 1u && QT == QT_Q8_0) {
        for (uint u = gl_GlobalInvocationID.x; u < pc.chunks / 4u; u += stride) {
            uint a = u * 34u, wd[9];
            [[unroll]] for (uint k = 0u; k < 9u; k++) wd[k] = QW[a / 4u + k];
            vec4 v[8];
            q80_unit(a, wd, v);
            [[unroll]] for (uint k = 0u; k < 4u; k++) O4[o8 + 4u * u + k] = halves(v[2u * k], v[2u * k + 1u]);
        }
        return;
    }
    uint per = q_block_elems() / 8u, bytes = q_block_bytes();
    for (uint ch = gl_GlobalInvocationID.x; ch < pc.chunks; ch += stride) {
        float v[8];
        q_decode8((ch / per) * bytes, (ch % per) * 8u, v);
        if (DTO == 0u) {
            uint o = pc.off + ch * 8u;
            [[unroll]] for (uint i = 0u; i < 8u; i++) O[o + i] = floatBitsToUint(v[i]);
        } else {
            O4[o8 + ch] = halves(vec4(v[0], v[1], v[2], v[3]), vec4(v[4], v[5], v[6], v[7]));
        }
    }
}
