// eltwise.glsl - every unary, binary and where op, copy and cast, over
// strided (and broadcast: stride 0) inputs.  The op, dtypes, arithmetic kind
// and dimension count are specialization constants; shapes, strides and
// offsets are push constants (dims collapsed on the host to EW_MAXDIM).
// Bindings: 0 = a (cond for where), 1 = b (a), 2 = c (b), 3 = out.
#include "common.glsl"
#include "math.glsl"
#include "ewops.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint OP = 0;
layout(constant_id = 1) const uint DTA = 0;
layout(constant_id = 2) const uint DTB = 0;
layout(constant_id = 3) const uint DTC = 0;
layout(constant_id = 4) const uint DTO = 0;
layout(constant_id = 5) const uint KIND = 0;
layout(constant_id = 6) const int NDIM = 1;
layout(constant_id = 7) const uint MODE = 0;
layout(constant_id = 8) const bool OUT_STRIDED = false;
// VEC: elements a unit of the vector path (0: none), checked on the host
// (elementwise.c's vec_unit), along the innermost collapsed dim:
// - 4: f32 arithmetic with every operand f32, or a same-dtype copy of
//   4-byte elements (one 16-byte move a unit);
// - 8: f32/f16/bf16 arithmetic with a 16-bit operand or result: a 16-bit
//   operand is one 16-byte load a unit, an f32 one two; each result rounded
//   once on store as stf does, so the bits are the scalar path's;
// - 16 / 16 / 2: same-dtype copies of 1-, 2- and 8-byte elements as raw
//   16-byte moves.
// Vector operands have stride 1 along the inner dim and every unit starts
// at a 16-byte boundary; an operand whose bit is set in SCAL has stride 0
// there (a scalar over the row: a broadcast scalar when NDIM is 1), read
// once a unit.  Outer dims take any stride (0: a bias over rows).  Where
// NDIM > 1 the inner extent is a multiple of VEC; a flat op's n % VEC
// elements past the last whole unit (the tail) take the scalar path.  The
// form that moves memory at full speed on large GPUs.
layout(constant_id = 9) const uint VEC = 0;
layout(constant_id = 10) const uint SCAL = 0;

layout(push_constant) uniform PC {
    uint n;
    uint flags;              // clamp: bit0 has lo, bit1 has hi
    int off[4];              // element offsets of bindings 0..3
    int shape[EW_MAXDIM];
    int st[3 * EW_MAXDIM];   // strides of binding 0, 1, and 2 (or out)
} pc;

DECL_IO(0)
DECL_IO(1)
DECL_IO(2)
DECL_IO(3)
layout(std430, set = 0, binding = 0) buffer Bv4_0 { uvec4 v[]; } v4_0;
layout(std430, set = 0, binding = 1) buffer Bv4_1 { uvec4 v[]; } v4_1;
layout(std430, set = 0, binding = 3) buffer Bv4_3 { uvec4 v[]; } v4_3;

// clamp bounds ride in the stride slots a unary op leaves free
float clamp_lo_f() { return intBitsToFloat(pc.st[6]); }
float clamp_hi_f() { return intBitsToFloat(pc.st[7]); }
int64_t clamp_i(int k) { return int64_t(uint(pc.st[k])) | (int64_t(pc.st[k + 1]) << 32); }

float un_f(float x)
{
    if (OP == U_CLAMP) return ew_clamp_f(x, pc.flags, clamp_lo_f(), clamp_hi_f());
    return ew_un_f(OP, x);
}

float bin_f(float a, float b) { return ew_bin_f(OP, a, b); }

int64_t un_i(int64_t x)
{
    if (OP == U_CLAMP) return ew_clamp_i(x, pc.flags, clamp_i(8), clamp_i(10));
    return ew_un_i(OP, x);
}

int64_t bin_i(int64_t a, int64_t b) { return ew_bin_i(OP, a, b); }

#ifdef LM_F64
double clamp_d(int k) { return packDouble2x32(uvec2(uint(pc.st[k]), uint(pc.st[k + 1]))); }
#define D_NAN uint64BitsToDouble(0x7ff8000000000000ul)

// Round half to even by hand: Mesa's lavapipe rounds f64 halves toward zero
// in roundEven.  Large values (already integers) and NaN/Inf pass through.
double round_even_d(double x)
{
    double f = floor(x), d = x - f;
    if (d > 0.5lf || (d == 0.5lf && fract(f * 0.5lf) != 0.0lf)) f += 1.0lf;
    return f == 0.0lf ? x * 0.0lf : f;   // keeps the sign of -0.3 -> -0.0
}

// Only exactly rounded operations: the host sends transcendental f64 ops
// to no GPU kernel (supports() says no) rather than lose precision.
double un_d(double x)
{
    switch (OP) {
    case U_COPY: return x;   // a cast into f64
    case U_NEG: return -x;
    case U_ABS: return abs(x);
    case U_SIGN: return x > 0.0lf ? 1.0lf : (x < 0.0lf ? -1.0lf : x);
    case U_SQRT: return sqrt(x);
    case U_RSQRT: return 1.0lf / sqrt(x);
    case U_SQUARE: return x * x;
    case U_RECIP: return 1.0lf / x;
    case U_RELU: return x > 0.0lf ? x : (isnan(x) ? x : 0.0lf);
    case U_FLOOR: return floor(x);
    case U_CEIL: return ceil(x);
    case U_ROUND: return round_even_d(x);
    case U_ISNAN: return isnan(x) ? 1.0lf : 0.0lf;
    case U_ISINF: return isinf(x) ? 1.0lf : 0.0lf;
    case U_NOT: return x == 0.0lf ? 1.0lf : 0.0lf;
    case U_CLAMP: {
        double r = x;
        if ((pc.flags & 1u) != 0u && r < clamp_d(12)) r = clamp_d(12);
        if ((pc.flags & 2u) != 0u && r > clamp_d(14)) r = clamp_d(14);
        return r;
    }
    }
    return D_NAN;   // unreachable: the host sends exact f64 ops only
}

double bin_d(double a, double b)
{
    switch (OP) {
    case B_ADD: return a + b;
    case B_SUB: return a - b;
    case B_MUL: return a * b;
    case B_DIV: return a / b;
    case B_MOD: {
        if (b == 0.0lf || isinf(a) || isnan(a) || isnan(b)) return D_NAN;
        double r = a - b * trunc(a / b);
        if (abs(r) >= abs(b)) r = 0.0lf;
        if (r != 0.0lf && ((r < 0.0lf) != (b < 0.0lf))) r += b;
        return r;
    }
    case B_MAX: return isnan(a) || isnan(b) ? D_NAN : max(a, b);
    case B_MIN: return isnan(a) || isnan(b) ? D_NAN : min(a, b);
    case B_EQ: return a == b ? 1.0lf : 0.0lf;
    case B_NE: return a != b ? 1.0lf : 0.0lf;
    case B_LT: return a < b ? 1.0lf : 0.0lf;
    case B_LE: return a <= b ? 1.0lf : 0.0lf;
    case B_GT: return a > b ? 1.0lf : 0.0lf;
    case B_GE: return a >= b ? 1.0lf : 0.0lf;
    case B_AND: return (a != 0.0lf && b != 0.0lf) ? 1.0lf : 0.0lf;
    case B_OR: return (a != 0.0lf || b != 0.0lf) ? 1.0lf : 0.0lf;
    case B_XOR: return ((a != 0.0lf) != (b != 0.0lf)) ? 1.0lf : 0.0lf;
    }
    return D_NAN;   // unreachable: the host sends exact f64 ops only
}
#endif

// the element offsets in bindings 0, 1 and 2 (a copy's output) of element
// i in the output's row-major order
void offsets(uint i, out int ia, out int ib, out int ic)
{
    ia = pc.off[0];
    ib = pc.off[1];
    ic = pc.off[2];
    if (NDIM == 1) {
        ia += int(i) * pc.st[0];
        ib += int(i) * pc.st[EW_MAXDIM];
        ic += int(i) * pc.st[2 * EW_MAXDIM];
    } else {
        uint r = i;
        [[unroll]] for (int d = NDIM - 1; d >= 0; d--) {
            uint s = uint(pc.shape[d]);
            int c = d == 0 ? int(r) : int(r % s);   // r < shape[0] by now
            r /= s;
            ia += c * pc.st[d];
            ib += c * pc.st[EW_MAXDIM + d];
            ic += c * pc.st[2 * EW_MAXDIM + d];
        }
    }
}

void element(uint i)
{
    int ia, ib, ic;
    offsets(i, ia, ib, ic);
    int io = OUT_STRIDED ? ic : pc.off[3] + int(i);
    if (MODE == EW_WHERE) {
        bool cond = ldi_0(DTA, ia) != 0l;
#ifdef LM_F64
        if (KIND == KIND_D) { std_3(DTO, io, cond ? ldd_1(DTB, ib) : ldd_2(DTC, ic)); return; }
#endif
        if (KIND == KIND_I) sti_3(DTO, io, cond ? ldi_1(DTB, ib) : ldi_2(DTC, ic));
        else stf_3(DTO, io, cond ? ldf_1(DTB, ib) : ldf_2(DTC, ic));
        return;
    }
#ifdef LM_F64
    if (KIND == KIND_D) {
        double a = ldd_0(DTA, ia);
        std_3(DTO, io, MODE == EW_BINARY ? bin_d(a, ldd_1(DTB, ib)) : un_d(a));
        return;
    }
#endif
    if (KIND == KIND_I) {
        int64_t a = ldi_0(DTA, ia);
        sti_3(DTO, io, MODE == EW_BINARY ? bin_i(a, ldi_1(DTB, ib)) : un_i(a));
    } else {
        float a = ldf_0(DTA, ia);
        stf_3(DTO, io, MODE == EW_BINARY ? bin_f(a, ldf_1(DTB, ib)) : un_f(a));
    }
}

// a unit of 8 values from binding B at element offset e: dt f32 (two
// 16-byte loads, e a multiple of 4) or f16/bf16 (one, e a multiple of 8)
#define DEF_LD8(B) \
void ld8_##B(uint dt, int e, inout float x[8]) { \
    if (dt == DT_F32) { \
        uint b = uint(e) / 4u; \
        uvec4 w0 = v4_##B.v[b], w1 = v4_##B.v[b + 1u]; \
        [[unroll]] for (int j = 0; j < 4; j++) { \
            x[j] = uintBitsToFloat(w0[j]); \
            x[j + 4] = uintBitsToFloat(w1[j]); \
        } \
    } else { \
        uvec4 w = v4_##B.v[uint(e) / 8u]; \
        [[unroll]] for (int j = 0; j < 4; j++) { \
            x[2 * j] = dt == DT_BF16 ? bf16_to_f32(w[j] & 0xffffu) : f16_to_f32(w[j] & 0xffffu); \
            x[2 * j + 1] = dt == DT_BF16 ? bf16_to_f32(w[j] >> 16) : f16_to_f32(w[j] >> 16); \
        } \
    } \
}
DEF_LD8(0)
DEF_LD8(1)

// binding B's value (dtype DT, SCAL bit BIT) for every element of a unit
// starting at element offset e: its scalar over the row (SCAL: stride 0
// along the inner dim) or the unit's 8 values
#define DEF_VALS8(B, DT, BIT) \
void vals8_##B(int e, inout float x[8]) { \
    if ((SCAL & BIT) != 0u) { \
        float s = ldf_##B(DT, e); \
        [[unroll]] for (int j = 0; j < 8; j++) x[j] = s; \
    } else { \
        ld8_##B(DT, e, x); \
    } \
}
DEF_VALS8(0, DTA, 1u)
DEF_VALS8(1, DTB, 2u)

uint st16(uint dt, float x) { return dt == DT_BF16 ? f32_to_bf16(x) : f32_to_f16(x); }

// ia, ib, io: the unit's first element offsets in bindings 0, 1 and out
void unit8(int ia, int ib, int io)
{
    float a[8], r[8];
    vals8_0(ia, a);
    if (MODE == EW_BINARY) {
        float b[8];
        vals8_1(ib, b);
        [[unroll]] for (int j = 0; j < 8; j++) r[j] = bin_f(a[j], b[j]);
    } else {
        [[unroll]] for (int j = 0; j < 8; j++) r[j] = un_f(a[j]);
    }
    if (DTO == DT_F32) {
        uint o = uint(io) / 4u;
        v4_3.v[o] = floatBitsToUint(vec4(r[0], r[1], r[2], r[3]));
        v4_3.v[o + 1u] = floatBitsToUint(vec4(r[4], r[5], r[6], r[7]));
    } else {
        uvec4 w;
        [[unroll]] for (int j = 0; j < 4; j++) w[j] = st16(DTO, r[2 * j]) | (st16(DTO, r[2 * j + 1]) << 16);
        v4_3.v[uint(io) / 8u] = w;
    }
}

void unit4(int ia, int ib, int io)
{
    if (KIND == KIND_I) {   // a same-dtype copy: the bits, 16 bytes a unit
        v4_3.v[uint(io) / VEC] = v4_0.v[uint(ia) / VEC];
        return;
    }
    vec4 a = (SCAL & 1u) != 0u ? vec4(ldf_0(DTA, ia)) : uintBitsToFloat(v4_0.v[uint(ia) / 4u]), r;
    if (MODE == EW_BINARY) {
        vec4 b = (SCAL & 2u) != 0u ? vec4(ldf_1(DTB, ib)) : uintBitsToFloat(v4_1.v[uint(ib) / 4u]);
        r = vec4(bin_f(a.x, b.x), bin_f(a.y, b.y), bin_f(a.z, b.z), bin_f(a.w, b.w));
    } else {
        r = vec4(un_f(a.x), un_f(a.y), un_f(a.z), un_f(a.w));
    }
    v4_3.v[uint(io) / 4u] = floatBitsToUint(r);
}

void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (VEC != 0u) {
        uint units = pc.n / VEC;
        for (uint u = gl_GlobalInvocationID.x; u < units; u += stride) {
            // the unit's first element: its row's coordinates once a unit
            // (the inner extent is a multiple of VEC where NDIM > 1)
            int ia, ib, ic;
            offsets(u * VEC, ia, ib, ic);
            int io = OUT_STRIDED ? ic : pc.off[3] + int(u * VEC);
            if (VEC == 8u && KIND != KIND_I) unit8(ia, ib, io);
            else unit4(ia, ib, io);
        }
        uint t = units * VEC + gl_GlobalInvocationID.x;   // the tail (NDIM 1 only): fewer than VEC <= 16 elements
        if (t < pc.n) element(t);
        return;
    }
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride)
        element(i);
}
