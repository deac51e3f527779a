// create.glsl - full, arange, linspace, eye and the counter-based random
// generators (Philox-4x32-10, element i a function of (key, i) exactly as
// core/random.c computes it).  Values are computed in double where the
// device has it (as the CPU does) and converted on store.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint OP = 0;
layout(constant_id = 1) const uint DT = 0;

layout(push_constant) uniform PC {
    uint n;
    uint m;            // eye: columns; linspace: count
    uint key0, key1;
    uint f0lo, f0hi, f1lo, f1hi;   // f[0], f[1] as double bits
    float f0f, f1f;                // the same as floats (devices without f64)
    int k;                         // eye diagonal
    uint raw0, raw1;               // full: the value already in DT's bits
} pc;

DECL_IO(0)

uvec4 philox(uint c0, uint c1)
{
    uint c2 = 0u, c3 = 0u, k0 = pc.key0, k1 = pc.key1;
    [[unroll]] for (int r = 0; r < 10; r++) {
        uint hi0, lo0, hi1, lo1;
        umulExtended(0xD2511F53u, c0, hi0, lo0);
        umulExtended(0xCD9E8D57u, c2, hi1, lo1);
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return uvec4(c0, c1, c2, c3);
}

float uniform01(uint i)
{
    uvec4 w = philox(i >> 2, 0u);
    return float(w[i & 3u] >> 8) * (1.0 / 16777216.0);
}

float normal01(uint i)
{
    uvec4 w = philox(i >> 2, 0u);
    uint p = i & 2u;
    float u1 = (float(w[p] >> 8) + 1.0) * (1.0 / 16777216.0);
    float u2 = float(w[p + 1u] >> 8) * (1.0 / 16777216.0);
    float r = sqrt(-2.0 * log(u1));
    float t = 6.2831853071795864 * u2;
    if (t > 3.14159265358979) t -= 6.2831853071795864;   // keep sin/cos in [-pi, pi]
    return (i & 1u) != 0u ? r * sin(t) : r * cos(t);
}

#ifdef LM_F64
#define REAL double
#define F0 packDouble2x32(uvec2(pc.f0lo, pc.f0hi))
#define F1 packDouble2x32(uvec2(pc.f1lo, pc.f1hi))
#define STORE(i, x) std_0(DT, int(i), x)
#else
#define REAL float
#define F0 pc.f0f
#define F1 pc.f1f
#define STORE(i, x) stf_0(DT, int(i), x)
#endif

void element(uint i)
{
    if (OP == C_FULL) {
        if (DT == DT_F64 || DT == DT_I64) u64_0.v[i] = uint64_t(pc.raw0) | (uint64_t(pc.raw1) << 32);
        else if (DT == DT_F32 || DT == DT_I32) u32_0.v[i] = pc.raw0;
        else if (DT == DT_F16 || DT == DT_BF16 || DT == DT_I16) u16_0.v[i] = uint16_t(pc.raw0);
        else u8_0.v[i] = uint8_t(pc.raw0);
        return;
    }
    // precise: no fused multiply-add, so each value rounds as the CPU's
    // (double) expression does; a contracted linspace put an integer
    // linspace one below the CPU's at 2/3 on the H100
    precise REAL v = REAL(0);
    if (OP == C_ARANGE) v = F0 + REAL(i) * F1;
    else if (OP == C_LINSPACE)
        v = pc.m == 1u ? F0 : i == pc.m - 1u ? F1 : F0 + (F1 - F0) * (REAL(i) / REAL(pc.m - 1u));
    else if (OP == C_EYE) v = int(i % pc.m) - int(i / pc.m) == pc.k ? REAL(1) : REAL(0);
    else if (OP == C_UNIFORM) v = F0 + (F1 - F0) * REAL(uniform01(i));
    else if (OP == C_NORMAL) v = F0 + F1 * REAL(normal01(i));
    STORE(i, v);
}

void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride)
        element(i);
}
