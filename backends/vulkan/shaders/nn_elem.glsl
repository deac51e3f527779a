// nn_elem.glsl - the neural-network ops computed one output element per
// thread: RoPE, tril/triu (zeroing a copy already made by the host) and
// one_hot.  nn_elem.comp is the plain variant; nn_elem_f64.comp reads f64
// RoPE angles and reduces them modulo 2*pi in double (GLSL has no double
// sin/cos; an angle of position * frequency can be thousands of radians,
// which f32 cannot hold to the precision the CPU's f64 angle has).
// Bindings: 0 = x / index input (contiguous), 1 = angles, 2 = output,
// 3 = status words (one_hot's out-of-range report, as index.comp).
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint OP = 0;     // NE_* below
layout(constant_id = 1) const uint DTX = 0;
layout(constant_id = 2) const uint DTA = 0;
layout(constant_id = 3) const uint DTO = 0;

#define NE_ROPE 0
#define NE_TRIL 1
#define NE_TRIU 2
#define NE_ONE_HOT 3

layout(push_constant) uniform PC {
    uint n;
    int off_x, off_a;
    int D, dims, trad;   // rope; tril/triu: D = N, dims = M, trad = k; one_hot: D = classes
    int nlead, ast_last; // rope: leading dims of x (collapsed by the angles' strides)
    int lshape[7], last[7];
} pc;

DECL_IO(0)
DECL_IO(1)
DECL_IO(2)
DECL_BUF(3)

// cos and sin of the angle for pair j of row `row`, reduced to [-pi, pi]
// first: f32 sin/cos of large arguments are inaccurate on some drivers
vec2 cos_sin(uint row, int j)
{
    int ia = pc.off_a + j * pc.ast_last;
    uint rem = row;
    for (int d = pc.nlead - 1; d >= 0; d--) {
        uint s = uint(pc.lshape[d]);
        ia += int(rem % s) * pc.last[d];
        rem /= s;
    }
    float r;
#ifdef LM_F64
    double a = ldd_1(DTA, ia);
    double k = floor(a * 0.15915494309189535lf + 0.5lf);
    r = float(a - k * 6.283185307179586lf);
#else
    // Cody-Waite: 2*pi split into a float and its remainder
    float a = ldf_1(DTA, ia);
    float k = floor(a * 0.15915494 + 0.5);
    r = fma(-k, 6.2831854820251465, a);
    r = fma(-k, -1.7484556e-7, r);
#endif
    if (isinf(a) || isnan(a)) r = uintBitsToFloat(0x7fc00000u);
    return vec2(cos(r), sin(r));
}

void rope(uint e)
{
    uint D = uint(pc.D), row = e / D, d = e % D;
    uint base = uint(pc.off_x) + row * D;
    if (d >= uint(pc.dims)) {
        stf_2(DTO, int(e), ldf_0(DTX, int(base + d)));
        return;
    }
    uint half_ = uint(pc.dims) / 2, j, i1, i2;
    if (pc.trad != 0) { j = d / 2; i1 = 2 * j; i2 = i1 + 1; }
    else { j = d % half_; i1 = j; i2 = j + half_; }
    float x1 = ldf_0(DTX, int(base + i1)), x2 = ldf_0(DTX, int(base + i2));
    vec2 cs = cos_sin(row, int(j));
    stf_2(DTO, int(e), d == i1 ? x1 * cs.x - x2 * cs.y : x1 * cs.y + x2 * cs.x);
}

// zeroes element e of the copy where the triangle excludes it
void tri(uint e)
{
    int N = pc.D, M = pc.dims, k = pc.trad;
    int j = int(e % uint(N)), i = int((e / uint(N)) % uint(M));
    bool drop = OP == NE_TRIL ? j > i + k : j < i + k;
    if (!drop) return;
    if (DTO == DT_F64 || DTO == DT_I64) u64_2.v[e] = 0ul;
    else if (DTO == DT_F32 || DTO == DT_I32) u32_2.v[e] = 0u;
    else if (DTO == DT_F16 || DTO == DT_BF16 || DTO == DT_I16) u16_2.v[e] = uint16_t(0u);
    else u8_2.v[e] = uint8_t(0u);
}

void one_hot(uint e)
{
    uint nc = uint(pc.D), p = e / nc, c = e % nc;
    int64_t k = ldi_0(DTX, pc.off_x + int(p));
    if (k < 0l || k >= int64_t(nc)) {
        if (c == 0 && atomicOr(u32_3.v[0], 1u) == 0u) u32_3.v[1] = uint(k);
        u64_2.v[e] = 0ul;
        return;
    }
    u64_2.v[e] = k == int64_t(c) ? 1ul : 0ul;
}

void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint e = gl_GlobalInvocationID.x; e < pc.n; e += stride) {
        if (OP == NE_ROPE) rope(e);
        else if (OP == NE_ONE_HOT) one_hot(e);
        else tri(e);
    }
}
