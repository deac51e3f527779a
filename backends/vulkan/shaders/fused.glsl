// fused.glsl - what the two fused-chain kernels share (fused.comp, the
// interpreter, and fused_spec.comp, the same chain baked in by
// specialization constants): bindings, register conventions, loads and
// stores, and one step's arithmetic.
//
// A register holds its value normalised to its dtype, exactly as the unfused
// kernels would have stored and reloaded it: floats as f32 bits already
// rounded to f16/bf16 where that is the dtype, integers (up to 32 bits, and
// bool) sign- or zero-extended to 32 bits.  The op semantics are
// ewops.glsl's, the code the unfused eltwise kernels run, so a fused chain
// computes what the unfused nodes compute.
// Bindings: 0..15 inputs, 16 output (contiguous), 17 the program (vkops.h
// FZ_*: geometry, clamp bounds, and for the interpreter the steps).
#include "common.glsl"
#include "math.glsl"
#include "ewops.glsl"

#define LOCAL 128
layout(local_size_x = LOCAL) in;

layout(push_constant) uniform PC {
    uint n;
    int out_off;
} pc;

// each binding as 8/16/32-bit elements (no 64-bit values reach this kernel)
#define DECL_RAW(B) \
layout(std430, set = 0, binding = B) buffer Bu8_##B { uint8_t v[]; } u8_##B; \
layout(std430, set = 0, binding = B) buffer Bu16_##B { uint16_t v[]; } u16_##B; \
layout(std430, set = 0, binding = B) buffer Bu32_##B { uint v[]; } u32_##B;
DECL_RAW(0) DECL_RAW(1) DECL_RAW(2) DECL_RAW(3) DECL_RAW(4) DECL_RAW(5) DECL_RAW(6) DECL_RAW(7)
DECL_RAW(8) DECL_RAW(9) DECL_RAW(10) DECL_RAW(11) DECL_RAW(12) DECL_RAW(13) DECL_RAW(14) DECL_RAW(15)
DECL_RAW(16)
layout(std430, set = 0, binding = 17) readonly buffer Prog { uint w[]; } prog;


bool is_fl(uint dt) { return dt == DT_F32 || dt == DT_F16 || dt == DT_BF16; }

// a register read as the unfused kernels' ldf / ldi would read it
float as_f(uint x, uint dt) { return is_fl(dt) ? uintBitsToFloat(x) : float(sext(x, 32)); }
int64_t as_i(uint x, uint dt) { return is_fl(dt) ? f_to_i64(uintBitsToFloat(x)) : sext(x, 32); }

// an integer dtype's value after the unfused sti store and ldi load
uint norm_int(int64_t x, uint dt)
{
    uint u = uint(x & 0xffffffffl);
    if (dt == DT_I8) return uint(sext(u & 0xffu, 8) & 0xffffffffl);
    if (dt == DT_U8) return u & 0xffu;
    if (dt == DT_I16) return uint(sext(u & 0xffffu, 16) & 0xffffffffl);
    if (dt == DT_BOOL) return x != 0l ? 1u : 0u;
    return u;                                   // i32
}

// a float result stored as dtype dt (stf), then loaded back
uint from_f(float x, uint dt)
{
    if (dt == DT_F32) return floatBitsToUint(x);
    if (dt == DT_F16) return floatBitsToUint(f16_to_f32(f32_to_f16(x)));
    if (dt == DT_BF16) return floatBitsToUint(bf16_to_f32(f32_to_bf16(x)));
    if (dt == DT_BOOL) return x != 0.0 ? 1u : 0u;
    return norm_int(sat_f(x, dt), dt);
}

// an integer result stored as dtype dt (sti), then loaded back
uint from_i(int64_t x, uint dt)
{
    if (is_fl(dt)) return from_f(float(x), dt);
    return norm_int(x, dt);
}

uint dt_bytes(uint dt) { return dt == DT_I8 || dt == DT_U8 || dt == DT_BOOL ? 1u : dt == DT_F32 || dt == DT_I32 ? 4u : 2u; }

// an element's stored bits as a register: ldf / ldi of the unfused kernels
uint reg_of_raw(uint x, uint dt)
{
    if (dt == DT_F16) return floatBitsToUint(f16_to_f32(x));
    if (dt == DT_BF16) return x << 16;
    if (dt == DT_I8) return uint(sext(x, 8) & 0xffffffffl);
    if (dt == DT_I16) return uint(sext(x, 16) & 0xffffffffl);
    if (dt == DT_BOOL) return x != 0u ? 1u : 0u;
    return x;                                   // f32, i32, u8
}

// a register as the bits stored for dtype dt (its value is already rounded)
uint raw_of_reg(uint x, uint dt)
{
    if (dt == DT_F16) return f32_to_f16(uintBitsToFloat(x));
    if (dt == DT_BF16) return f32_to_bf16(uintBitsToFloat(x));
    if (dt == DT_I8 || dt == DT_U8) return x & 0xffu;
    if (dt == DT_I16) return x & 0xffffu;
    return x;                                   // f32, i32, bool
}

// input binding k's element idx: one small switch, so the kernel holds a
// single copy of the conversions (lavapipe compiles it in a fraction)
#define RAW_CASE(K) case K: return w == 1u ? uint(u8_##K.v[idx]) : w == 2u ? uint(u16_##K.v[idx]) : u32_##K.v[idx];
uint load_raw(uint k, uint w, int idx)
{
    switch (k) {
    RAW_CASE(0) RAW_CASE(1) RAW_CASE(2) RAW_CASE(3) RAW_CASE(4) RAW_CASE(5) RAW_CASE(6) RAW_CASE(7)
    RAW_CASE(8) RAW_CASE(9) RAW_CASE(10) RAW_CASE(11) RAW_CASE(12) RAW_CASE(13) RAW_CASE(14) RAW_CASE(15)
    }
    return 0u;
}

void store_out(int io, uint dt, uint x)
{
    uint r = raw_of_reg(x, dt), w = dt_bytes(dt);
    if (w == 4u) u32_16.v[io] = r;
    else if (w == 2u) u16_16.v[io] = uint16_t(r);
    else u8_16.v[io] = uint8_t(r);
}

int64_t word64(uint b) { return int64_t(uint64_t(prog.w[b]) | (uint64_t(prog.w[b + 1]) << 32)); }

// one step on register values x0..x2 (of dtypes d0..d2); b: the step's
// words in the program (clamp bounds)
uint fz_apply(uint mode, uint code, uint kind, uint dto, uint d0, uint d1, uint d2,
              uint x0, uint x1, uint x2, uint b)
{
    bool ints = kind == KIND_I;
    if (mode == EW_WHERE) {
        bool cond = as_i(x0, d0) != 0l;
        if (ints) return from_i(cond ? as_i(x1, d1) : as_i(x2, d2), dto);
        return from_f(cond ? as_f(x1, d1) : as_f(x2, d2), dto);
    }
    uint flags = prog.w[b + FS_FLAGS];
    if (ints) {
        int64_t a = as_i(x0, d0), r;
        if (mode == EW_BINARY) r = ew_bin_i(code, a, as_i(x1, d1));
        else if (code == U_CLAMP) r = ew_clamp_i(a, flags, word64(b + FS_LOI), word64(b + FS_HII));
        else r = ew_un_i(code, a);
        return from_i(r, dto);
    }
    float a = as_f(x0, d0), r;
    if (mode == EW_BINARY) r = ew_bin_f(code, a, as_f(x1, d1));
    else if (code == U_CLAMP)
        r = ew_clamp_f(a, flags, uintBitsToFloat(prog.w[b + FS_LOF]), uintBitsToFloat(prog.w[b + FS_HIF]));
    else r = ew_un_f(code, a);
    return from_f(r, dto);
}

// input k's element index: i flat when NDIM == 1, else coordinates c
int fz_index(uint k, uint i, int c[EW_MAXDIM], int ndim)
{
    uint b = FZ_IN + k * FZ_IN_WORDS;
    int idx = int(prog.w[b + FI_OFF]);
    if (ndim == 1) return idx + int(i) * int(prog.w[b + FI_ST]);
    for (int d = 0; d < ndim; d++) idx += c[d] * int(prog.w[b + FI_ST + d]);
    return idx;
}

void fz_coords(uint i, int ndim, out int c[EW_MAXDIM])
{
    uint r = i;
    for (int d = ndim - 1; d >= 0; d--) {
        uint s = prog.w[FZ_SHAPE + d];
        c[d] = int(r % s);
        r /= s;
    }
}
