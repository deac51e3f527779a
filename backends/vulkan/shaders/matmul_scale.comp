#version 450
// matmul_scale.comp - bf16 operands of a matmul brought to f16 for the
// tensor cores (matmul_coop_bf16*.comp), exactly: each row of A and each
// column of B is scaled by a power of two 2^e that puts its largest finite
// magnitude in [2^14, 2^15).  f16 then holds every bf16 value of that row
// or column that is at least 2^-17 of its maximum exactly (8 significant
// bits); smaller ones round to f16's subnormals (to even), which is far
// below what an f32 sum of the products could resolve next to the largest
// one.  Infinities and NaNs pass through.  C is unscaled by 2^-(e_A + e_B)
// on store.
//
// An operand is viewed as [batch][R][L]: R the scaled dim (A's rows M, B's
// columns N), L the reduced one (K); element (b, i, j) at
// off + batch offset(b) + i * s_i + j * s_j.
// PASS 0: ex[e_base + b * R + i] = e for every (b, i).  With s_j == 1
//   (ROWS) a subgroup reduces one i; otherwise the 32 lanes of a subgroup
//   take 32 consecutive i (coalesced when s_i == 1) and the 8 subgroups
//   split L, combined in shared memory.
// PASS 1: the scaled f16 copy, contiguous: [b][i][j] (A: [M][K]), or
//   with OUT_T [b][j][i] (B: [K][N]); one invocation per element.
// Bindings: 0 = the bf16 operand, 1 = the exponents (int), 2 = the f16 copy.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const int PASS = 0;
layout(constant_id = 1) const bool ROWS = true;
layout(constant_id = 2) const bool OUT_T = false;

layout(push_constant) uniform PC {
    int R, L, nbatch, off;
    int s_i, s_j, nb, e_base;
    int bshape[4], bs[4];
} pc;

DECL_BUF(0)
layout(std430, set = 0, binding = 1) buffer Ex { int v[]; } ex;
DECL_BUF(2)

int batch_off(int b)
{
    int o = 0;
    for (int d = pc.nb - 1; d >= 0; d--) {
        o += (b % pc.bshape[d]) * pc.bs[d];
        b /= pc.bshape[d];
    }
    return o;
}

// |x| as bits (bf16 magnitudes order as integers); 0 for Inf and NaN
uint mag(uint h)
{
    uint m = h & 0x7fffu;
    return m >= 0x7f80u ? 0u : m;
}

// e with 2^e * (largest magnitude) in [2^14, 2^15); 0 for an all-zero row
int scale_of(uint mb)
{
    if (mb == 0u) return 0;
    uint E = mb >> 7;
    int fl = E == 0u ? findMSB(mb & 0x7fu) - 133 : int(E) - 127;
    return 14 - fl;
}

// bf16 bits h times 2^e as f16 bits, exact where f16 has the bits, else
// rounded to nearest even (subnormals)
uint to_f16(uint h, int e)
{
    uint s = (h >> 15) << 15, E = (h >> 7) & 0xffu, m = h & 0x7fu;
    if (E == 0xffu) return s | 0x7c00u | (m != 0u ? 0x200u : 0u);
    int ue;
    uint sig;
    if (E == 0u) {
        if (m == 0u) return s;
        int p = findMSB(m);
        ue = p - 133;
        sig = m << (7 - p);
    } else {
        ue = int(E) - 127;
        sig = m | 0x80u;
    }
    int t = ue + e;
    if (t > 15) return s | 0x7c00u;          // not reached: rows scale below 2^15
    if (t >= -14) return s | (uint(t + 15) << 10) | ((sig & 0x7fu) << 3);
    int sh = t + 17;                        // f16 subnormals count 2^-24
    if (sh >= 0) return s | (sig << sh);
    int r = -sh;
    if (r > 9) return s;
    uint q = sig >> r, rem = sig & ((1u << r) - 1u), hw = 1u << (r - 1);
    if (rem > hw || (rem == hw && (q & 1u) != 0u)) q++;
    return s | q;
}

shared uint part[8][32];

void main()
{
    int lane = int(gl_SubgroupInvocationID), sg = int(gl_SubgroupID);
    int nout = pc.nbatch * pc.R;
    if (PASS == 0 && ROWS) {
        // a subgroup per (b, i), its lanes along j
        int nsg = int(gl_NumWorkGroups.x) * 8;
        for (int q = int(gl_WorkGroupID.x) * 8 + sg; q < nout; q += nsg) {
            int b = q / pc.R, i = q - b * pc.R;
            int base = pc.off + batch_off(b) + i * pc.s_i;
            uint mx = 0u;
            for (int j = lane; j < pc.L; j += 32) mx = max(mx, mag(uint(u16_0.v[base + j * pc.s_j])));
            mx = subgroupMax(mx);
            if (lane == 0) ex.v[pc.e_base + q] = scale_of(mx);
        }
        return;
    }
    if (PASS == 0) {
        // 32 consecutive (b, i) per workgroup, the subgroups splitting j
        for (int q0 = int(gl_WorkGroupID.x) * 32; q0 < nout; q0 += int(gl_NumWorkGroups.x) * 32) {
            int q = q0 + lane;
            uint mx = 0u;
            if (q < nout) {
                int b = q / pc.R, i = q - b * pc.R;
                int base = pc.off + batch_off(b) + i * pc.s_i;
                for (int j = sg; j < pc.L; j += 8) mx = max(mx, mag(uint(u16_0.v[base + j * pc.s_j])));
            }
            part[sg][lane] = mx;
            barrier();
            if (sg == 0 && q < nout) {
                for (int k = 1; k < 8; k++) mx = max(mx, part[k][lane]);
                ex.v[pc.e_base + q] = scale_of(mx);
            }
            barrier();
        }
        return;
    }
    // PASS 1: the scaled copy
    int per = pc.R * pc.L, total = pc.nbatch * per;
    int nthr = int(gl_NumWorkGroups.x) * 256;
    for (int o = int(gl_GlobalInvocationID.x); o < total; o += nthr) {
        int b = o / per, rem = o - b * per, i, j;
        if (OUT_T) { j = rem / pc.R; i = rem - j * pc.R; }
        else { i = rem / pc.L; j = rem - i * pc.L; }
        uint h = uint(u16_0.v[pc.off + batch_off(b) + i * pc.s_i + j * pc.s_j]);
        u16_2.v[o] = uint16_t(to_f16(h, ex.v[pc.e_base + b * pc.R + i]));
    }
}
