// common.glsl - dtype-generic loads and stores over aliased storage buffers.
//
// Every binding is declared four times (8/16/32/64-bit element views of the
// same memory), so one kernel reads and writes any dtype; the dtype codes
// are specialization constants, so a driver compiles only the branch used.
// Define LM_F64 before including for the variant that may touch doubles
// (devices without shaderFloat64 never load it).
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : enable
#ifdef LM_F64
#extension GL_EXT_shader_explicit_arithmetic_types_float64 : require
#endif

#include "vkops.h"

#define DECL_BUF(B) \
layout(std430, set = 0, binding = B) buffer Bu8_##B { uint8_t v[]; } u8_##B; \
layout(std430, set = 0, binding = B) buffer Bu16_##B { uint16_t v[]; } u16_##B; \
layout(std430, set = 0, binding = B) buffer Bu32_##B { uint v[]; } u32_##B; \
layout(std430, set = 0, binding = B) buffer Bu64_##B { uint64_t v[]; } u64_##B;

// Sign extension by shifts: converting int to int64_t was seen to
// zero-extend on lavapipe (glslang 11.13), so no kernel relies on it.
int64_t sext(uint x, int bits)
{
    return int64_t(uint64_t(x) << (64 - bits)) >> (64 - bits);
}

float f16_to_f32(uint h) { return unpackHalf2x16(h).x; }
float bf16_to_f32(uint h) { return uintBitsToFloat(h << 16); }

// Round to nearest even in software: the rounding of packHalf2x16 and of
// OpFConvert is left to the implementation, and the CPU rounds to even.
uint f32_to_f16(float f)
{
    uint x = floatBitsToUint(f);
    uint sign = (x >> 16) & 0x8000u;
    uint ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7e00u;                 // NaN
    if (ax >= 0x477ff000u) return sign | 0x7c00u;                // Inf or rounds to it
    if (ax < 0x38800000u)                                        // subnormal half
        return sign | uint(roundEven(uintBitsToFloat(ax) * 16777216.0));
    uint r = ax + 0xfffu + ((ax >> 13) & 1u);
    return sign | ((r >> 13) - (112u << 10));
}

uint f32_to_bf16(float f)
{
    uint u = floatBitsToUint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

// Float to integer as the CPU's lm_convert: truncate, saturate to the
// target type's range, NaN -> 0.
int64_t sat_lo(uint dt)
{
    if (dt == DT_I8) return -128l;
    if (dt == DT_U8) return 0l;
    if (dt == DT_I16) return -32768l;
    if (dt == DT_I32) return -2147483648l;
    return -0x7fffffffffffffffl - 1l;
}

int64_t sat_hi(uint dt)
{
    if (dt == DT_I8) return 127l;
    if (dt == DT_U8) return 255l;
    if (dt == DT_I16) return 32767l;
    if (dt == DT_I32) return 2147483647l;
    return 9223372036854774784l;    // the largest double below 2^63
}

int64_t sat_f(float x, uint dt)
{
    if (isnan(x)) return 0l;
    if (x <= float(sat_lo(dt))) return sat_lo(dt);
    if (x >= float(sat_hi(dt))) return sat_hi(dt);
    return int64_t(x);
}

int64_t f_to_i64(float x) { return sat_f(x, DT_I64); }

#ifdef LM_F64
int64_t sat_d(double x, uint dt)
{
    if (isnan(x)) return 0l;
    if (x <= double(sat_lo(dt))) return sat_lo(dt);
    if (x >= double(sat_hi(dt))) return sat_hi(dt);
    return int64_t(x);
}
int64_t d_to_i64(double x) { return sat_d(x, DT_I64); }
#endif

#ifdef LM_F64
#define F64_LOADI(buf, i) d_to_i64(uint64BitsToDouble(buf.v[i]))
#define F64_LOADF(buf, i) float(uint64BitsToDouble(buf.v[i]))
#define F64_STORE(buf, i, x) buf.v[i] = doubleBitsToUint64(double(x))
#else
#define F64_LOADI(buf, i) 0l
#define F64_LOADF(buf, i) 0.0
#define F64_STORE(buf, i, x)
#endif

// Loads and stores for binding B, with `dt` a dtype code.
#define DEF_INT_IO(B) \
int64_t ldi_##B(uint dt, int i) { \
    if (dt == DT_I32) return sext(u32_##B.v[i], 32); \
    if (dt == DT_I64) return int64_t(u64_##B.v[i]); \
    if (dt == DT_U8) return int64_t(uint(u8_##B.v[i])); \
    if (dt == DT_BOOL) return uint(u8_##B.v[i]) != 0u ? 1l : 0l; \
    if (dt == DT_I8) return sext(uint(u8_##B.v[i]), 8); \
    if (dt == DT_I16) return sext(uint(u16_##B.v[i]), 16); \
    if (dt == DT_F32) return f_to_i64(uintBitsToFloat(u32_##B.v[i])); \
    if (dt == DT_F16) return f_to_i64(f16_to_f32(uint(u16_##B.v[i]))); \
    if (dt == DT_BF16) return f_to_i64(bf16_to_f32(uint(u16_##B.v[i]))); \
    return F64_LOADI(u64_##B, i); \
} \
void sti_##B(uint dt, int i, int64_t x) { \
    if (dt == DT_I32) u32_##B.v[i] = uint(x); \
    else if (dt == DT_I64) u64_##B.v[i] = uint64_t(x); \
    else if (dt == DT_U8 || dt == DT_I8) u8_##B.v[i] = uint8_t(uint(x) & 0xffu); \
    else if (dt == DT_I16) u16_##B.v[i] = uint16_t(uint(x) & 0xffffu); \
    else if (dt == DT_BOOL) u8_##B.v[i] = uint8_t(x != 0l ? 1u : 0u); \
    else if (dt == DT_F32) u32_##B.v[i] = floatBitsToUint(float(x)); \
    else if (dt == DT_F16) u16_##B.v[i] = uint16_t(f32_to_f16(float(x))); \
    else if (dt == DT_BF16) u16_##B.v[i] = uint16_t(f32_to_bf16(float(x))); \
    else { F64_STORE(u64_##B, i, x); } \
} \
float ldf_##B(uint dt, int i) { \
    if (dt == DT_F32) return uintBitsToFloat(u32_##B.v[i]); \
    if (dt == DT_F16) return f16_to_f32(uint(u16_##B.v[i])); \
    if (dt == DT_BF16) return bf16_to_f32(uint(u16_##B.v[i])); \
    if (dt == DT_F64) return F64_LOADF(u64_##B, i); \
    return float(ldi_##B(dt, i)); \
} \
void stf_##B(uint dt, int i, float x) { \
    if (dt == DT_F32) u32_##B.v[i] = floatBitsToUint(x); \
    else if (dt == DT_F16) u16_##B.v[i] = uint16_t(f32_to_f16(x)); \
    else if (dt == DT_BF16) u16_##B.v[i] = uint16_t(f32_to_bf16(x)); \
    else if (dt == DT_BOOL) u8_##B.v[i] = uint8_t(x != 0.0 ? 1u : 0u); \
    else if (dt == DT_F64) { F64_STORE(u64_##B, i, x); } \
    else sti_##B(dt, i, sat_f(x, dt)); \
}

#ifdef LM_F64
#define DEF_F64_IO(B) \
double ldd_##B(uint dt, int i) { \
    if (dt == DT_F64) return uint64BitsToDouble(u64_##B.v[i]); \
    if (dt == DT_F32 || dt == DT_F16 || dt == DT_BF16) return double(ldf_##B(dt, i)); \
    return double(ldi_##B(dt, i)); \
} \
void std_##B(uint dt, int i, double x) { \
    if (dt == DT_F64) u64_##B.v[i] = doubleBitsToUint64(x); \
    else if (dt == DT_BOOL) u8_##B.v[i] = uint8_t(x != 0.0lf ? 1u : 0u); \
    else if (dt == DT_F32 || dt == DT_F16 || dt == DT_BF16) stf_##B(dt, i, float(x)); \
    else sti_##B(dt, i, sat_d(x, dt)); \
}
#else
#define DEF_F64_IO(B)
#endif

#define DECL_IO(B) DECL_BUF(B) DEF_INT_IO(B) DEF_F64_IO(B)

// The (row, column) output tile of this workgroup in a 2-D grid of tiles
// (x: columns, y: rows).  swz > 0 walks the tiles in groups of swz tile
// rows, column by column within a group, so that concurrent workgroups share
// operand tiles in L2 (the matmul kernels' SWZ constant).
ivec2 tile_of_workgroup(int swz)
{
    int tm = int(gl_WorkGroupID.y), tn = int(gl_WorkGroupID.x);
    if (swz > 0) {
        int gx = int(gl_NumWorkGroups.x), gy = int(gl_NumWorkGroups.y);
        int pid = tn + tm * gx, width = swz * gx, grp = pid / width;
        int first = grp * swz, gsz = min(gy - first, swz), w = pid - grp * width;
        tm = first + w % gsz;
        tn = w / gsz;
    }
    return ivec2(tm, tn);
}
