// reduce.glsl - every reduction and cumsum over strided input.
//
// The host splits the input's dims into kept dims (one output element per
// combination, output row-major) and reduced dims, each collapsed to at most
// RED_MAXDIM.  MODE 0: a workgroup per output element, threads stride over
// the reduced elements and combine through shared memory (long rows);
// MODE 1: a thread per output element (short rows).  Two-pass ops (var,
// std: mean first; logsumexp: max first) read the row twice.  Float input
// accumulates in float (double in the f64 variant), integers in int64.
// Bindings: 0 = input, 1 = output.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint OP = 0;
layout(constant_id = 1) const uint DTI = 0;
layout(constant_id = 2) const uint DTO = 0;
layout(constant_id = 3) const uint KIND = 0;
layout(constant_id = 4) const int KND = 1;
layout(constant_id = 5) const int RND = 1;
layout(constant_id = 6) const uint MODE = 0;

#define R_CUMSUM 12

layout(push_constant) uniform PC {
    uint O, R;
    int off_in, ddof;
    int ks[RED_MAXDIM], kst[RED_MAXDIM], rs[RED_MAXDIM], rst[RED_MAXDIM];
    int kost[RED_MAXDIM];   // cumsum: output strides of the kept dims
    int rost;               // cumsum: output stride of the axis
} pc;

DECL_IO(0)
DECL_IO(1)

#ifdef LM_F64
#define REAL double
#define LD(i) ldd_0(DTI, i)
#define ST(i, x) std_1(DTO, i, x)
#define REAL_INF uint64BitsToDouble(0x7ff0000000000000ul)
#define REAL_NAN uint64BitsToDouble(0x7ff8000000000000ul)
#else
#define REAL float
#define LD(i) ldf_0(DTI, i)
#define ST(i, x) stf_1(DTO, i, x)
#define REAL_INF uintBitsToFloat(0x7f800000u)
#define REAL_NAN uintBitsToFloat(0x7fc00000u)
#endif

struct St { REAL v; int64_t i; uint nan; };

shared REAL shv[256];
shared int64_t shi[256];
shared uint shn[256];

int kept_off(uint o, bool to_out)
{
    int off = 0;
    [[unroll]] for (int d = KND - 1; d >= 0; d--) {
        uint s = uint(pc.ks[d]);
        int c = int(o % s);
        o /= s;
        off += c * (to_out ? pc.kost[d] : pc.kst[d]);
    }
    return off;
}

int red_off(uint r)
{
    if (RND == 1) return int(r) * pc.rst[0];
    int off = 0;
    [[unroll]] for (int d = RND - 1; d >= 0; d--) {
        uint s = uint(pc.rs[d]);
        int c = int(r % s);
        r /= s;
        off += c * pc.rst[d];
    }
    return off;
}

bool int_path() { return KIND == KIND_I && (OP == R_SUM || OP == R_PROD || OP == R_MAX || OP == R_MIN); }

St st_init(uint phase)
{
    St s;
    s.v = REAL(0); s.i = 0l; s.nan = 0u;
    if (int_path()) {
        if (OP == R_PROD) s.i = 1l;
        if (OP == R_MAX) s.i = -0x7fffffffffffffffl - 1l;
        if (OP == R_MIN) s.i = 0x7fffffffffffffffl;
        return s;
    }
    if (OP == R_PROD) s.v = REAL(1);
    if (OP == R_MAX || (OP == R_LSE && phase == 0u)) s.v = -REAL_INF;
    if (OP == R_MIN) s.v = REAL_INF;
    if (OP == R_ALL) s.i = 1l;
    if (OP == R_ARGMAX || OP == R_ARGMIN) s.i = -1l;
    return s;
}

void st_add(inout St s, int off, uint r, uint phase, REAL center)
{
    if (int_path()) {
        int64_t x = ldi_0(DTI, off);
        if (OP == R_SUM) s.i += x;
        else if (OP == R_PROD) s.i *= x;
        else if (OP == R_MAX) s.i = max(s.i, x);
        else s.i = min(s.i, x);
        return;
    }
    if (OP == R_ALL || OP == R_ANY) {
        bool nz = KIND == KIND_I ? ldi_0(DTI, off) != 0l : LD(off) != REAL(0);
        if (OP == R_ALL && !nz) s.i = 0l;
        if (OP == R_ANY && nz) s.i = 1l;
        return;
    }
    REAL x = LD(off);
    if (OP == R_SUM || OP == R_MEAN) s.v += x;
    else if (OP == R_PROD) s.v *= x;
    else if (OP == R_MAX || (OP == R_LSE && phase == 0u)) {
        if (isnan(x)) s.nan = 1u; else s.v = max(s.v, x);
    } else if (OP == R_MIN) {
        if (isnan(x)) s.nan = 1u; else s.v = min(s.v, x);
    } else if (OP == R_VAR || OP == R_STD) {
        if (phase == 0u) s.v += x; else s.v += (x - center) * (x - center);
    } else if (OP == R_LSE) {
        s.v += REAL(exp(float(x - center)));
    } else if (OP == R_ARGMAX || OP == R_ARGMIN) {
        if (s.nan != 0u) return;                      // the first NaN wins
        bool better = s.i < 0l || isnan(x) || (OP == R_ARGMAX ? x > s.v : x < s.v);
        if (better) { s.v = x; s.i = int64_t(r); if (isnan(x)) s.nan = 1u; }
    }
}

St st_comb(St a, St b, uint phase)
{
    if (int_path()) {
        if (OP == R_SUM) a.i += b.i;
        else if (OP == R_PROD) a.i *= b.i;
        else if (OP == R_MAX) a.i = max(a.i, b.i);
        else a.i = min(a.i, b.i);
        return a;
    }
    if (OP == R_ALL) { a.i = min(a.i, b.i); return a; }
    if (OP == R_ANY) { a.i = max(a.i, b.i); return a; }
    if (OP == R_ARGMAX || OP == R_ARGMIN) {
        if (b.i < 0l) return a;
        if (a.i < 0l) return b;
        if (a.nan != 0u || b.nan != 0u) return (b.nan != 0u && (a.nan == 0u || b.i < a.i)) ? b : a;
        bool better = OP == R_ARGMAX ? b.v > a.v : b.v < a.v;
        return (better || (b.v == a.v && b.i < a.i)) ? b : a;
    }
    if (OP == R_PROD) a.v *= b.v;
    else if (OP == R_MAX || (OP == R_LSE && phase == 0u)) a.v = max(a.v, b.v);
    else if (OP == R_MIN) a.v = min(a.v, b.v);
    else a.v += b.v;
    a.nan |= b.nan;
    return a;
}

St group_reduce(St s, uint phase)
{
    uint t = gl_LocalInvocationID.x;
    shv[t] = s.v; shi[t] = s.i; shn[t] = s.nan;
    barrier();
    for (uint k = 128u; k > 0u; k >>= 1) {
        if (t < k) {
            St a, b;
            a.v = shv[t]; a.i = shi[t]; a.nan = shn[t];
            b.v = shv[t + k]; b.i = shi[t + k]; b.nan = shn[t + k];
            a = st_comb(a, b, phase);
            shv[t] = a.v; shi[t] = a.i; shn[t] = a.nan;
        }
        barrier();
    }
    St r;
    r.v = shv[0]; r.i = shi[0]; r.nan = shn[0];
    barrier();
    return r;
}

St row(int base, uint first, uint step, uint phase, REAL center)
{
    St s = st_init(phase);
    for (uint r = first; r < pc.R; r += step) st_add(s, base + red_off(r), r, phase, center);
    return MODE == 0u ? group_reduce(s, phase) : s;
}

bool two_pass() { return OP == R_VAR || OP == R_STD || OP == R_LSE; }

void finish(uint o, St s, REAL first)
{
    if (int_path() || OP == R_ALL || OP == R_ANY) { sti_1(DTO, int(o), s.i); return; }
    if (OP == R_ARGMAX || OP == R_ARGMIN) { sti_1(DTO, int(o), max(s.i, 0l)); return; }
    REAL v = s.v;
    if (OP == R_MEAN) v = pc.R > 0u ? v / REAL(pc.R) : REAL_NAN;
    if ((OP == R_MAX || OP == R_MIN) && s.nan != 0u) v = REAL_NAN;
    if (OP == R_VAR || OP == R_STD) {
        int dof = int(pc.R) - pc.ddof;
        v = dof > 0 ? v / REAL(dof) : REAL_NAN;
        if (OP == R_STD) v = sqrt(v);
    }
    if (OP == R_LSE) v = isinf(first) || isnan(first) ? first : first + REAL(log(float(v)));
    ST(int(o), v);
}

void reduce_one(uint o, uint first, uint step)
{
    int base = pc.off_in + kept_off(o, false);
    St s = row(base, first, step, 0u, REAL(0));
    REAL center = REAL(0);
    if (two_pass()) {
        if (OP == R_LSE) {
            center = s.nan != 0u ? REAL_NAN : s.v;
            if (!isinf(center) && !isnan(center)) s = row(base, first, step, 1u, center);
        } else {
            center = s.v / REAL(max(pc.R, 1u));
            s = row(base, first, step, 1u, center);
        }
    }
    if (first == 0u) finish(o, s, center);
}

void cumsum_line(uint o)
{
    int ib = pc.off_in + kept_off(o, false), ob = kept_off(o, true);
    if (KIND == KIND_I) {
        int64_t acc = 0l;
        for (uint r = 0u; r < pc.R; r++) {
            acc += ldi_0(DTI, ib + int(r) * pc.rst[0]);
            sti_1(DTO, ob + int(r) * pc.rost, acc);
        }
    } else {
        REAL acc = REAL(0);
        for (uint r = 0u; r < pc.R; r++) {
            acc += LD(ib + int(r) * pc.rst[0]);
            ST(ob + int(r) * pc.rost, acc);
        }
    }
}

void main()
{
    if (OP == R_CUMSUM) {
        uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
        for (uint o = gl_GlobalInvocationID.x; o < pc.O; o += stride) cumsum_line(o);
    } else if (MODE == 0u) {
        for (uint o = gl_WorkGroupID.x; o < pc.O; o += gl_NumWorkGroups.x)
            reduce_one(o, gl_LocalInvocationID.x, gl_WorkGroupSize.x);
    } else {
        uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
        for (uint o = gl_GlobalInvocationID.x; o < pc.O; o += stride) reduce_one(o, 0u, 1u);
    }
}
