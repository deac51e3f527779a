#version 450
// matmul_gemv_shuf.comp - matmul_gemv.comp's B_T kernel (B stored [n][k],
// a linear's weight read transposed) without shared memory or barriers,
// for measurements behind LUMEN_VK_GEMV_SHUF=1 (matmul_gemv.c).
//
// A column's LANES invocations lie in one subgroup (the host asks for
// LANES <= the subgroup size and WG a multiple of it): lane l of a column
// is invocation l % LANES of its LANES-aligned block of the subgroup.  Each
// lane adds the same units in the same order as matmul_gemv.comp (units
// l, l + LANES, ... of the part, UN loaded ahead, then the tail's elements
// on lanes 0..7), and the LANES sums of a column are added by
// subgroupShuffleXor in matmul_gemv.comp's tree: at step s = LANES/2 ... 1
// lane l < s adds lane l + s's sum to its own.  xor gives l the sum
// (l, l ^ s) = (l, l + s) for l < s, and l + s the same two (IEEE addition
// commutes), so every output has the old kernel's bits.  The first three
// steps also halve the rows each lane carries (8 -> 4 -> 2 -> 1): at step
// s a lane keeps the half of the rows its bit s selects and receives its
// partner's values of those rows, so the 8 rows cost 9 shuffles at 32
// lanes instead of 40; row r then sits in the lanes l with l / (LANES / 8)
// == r, each holding the old tree's value for it.
//
// Persistent columns: the grid holds fewer workgroups than columns (the
// host caps it), and each subgroup walks the columns base, base + stride,
// ... (stride: all the grid's subgroups' columns); the loads of a column's
// next UN units, or the next column's first ones, are issued before the
// current units are used, so loads stay in flight across columns.  A
// column's sums do not depend on which subgroup adds them.
//
// Parts (gl_WorkGroupID.y), rows (z) and the output as matmul_gemv.comp.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require

#include "matmul_gemv.glsl"
layout(local_size_x_id = 8) in;   // WG: 64, 128 or 256 invocations

// a unit of B as loaded: 16-bit dtypes with vector loads one 16-byte word
// (w0), f32 two (w0, w1), scalar loads the 8 values' f32 bits (w0, w1);
// decoded when used (unit_b_use): the values unit_b gives
void unit_b_load(int e, out uvec4 w0, out uvec4 w1)
{
    w1 = uvec4(0);
    if (B_VEC) {
        if (DTB == DT_F32) {
            w0 = b4.v[e / 4];
            w1 = b4.v[e / 4 + 1];
        } else {
            w0 = b4.v[e / 8];
        }
    } else {
        [[unroll]] for (int j = 0; j < 4; j++) {
            w0[j] = floatBitsToUint(ldf_1(DTB, e + j));
            w1[j] = floatBitsToUint(ldf_1(DTB, e + 4 + j));
        }
    }
}

void unit_b_use(uvec4 w0, uvec4 w1, inout float x[8])
{
    if (B_VEC && DTB != DT_F32) {
        unit16(DTB, w0, x);
    } else {
        [[unroll]] for (int j = 0; j < 4; j++) {
            x[j] = uintBitsToFloat(w0[j]);
            x[j + 4] = uintBitsToFloat(w1[j]);
        }
    }
}

// a step of the tree that halves the rows (h of 2h left, partner lane ^ s):
// a lane with bit s set keeps rows h .. 2h-1 (as acc[0 .. h-1]), one
// without keeps rows 0 .. h-1, and each gives its partner the others
#define SPLIT(h, s) \
    { \
        bool up = (lane & (s)) != 0; \
        [[unroll]] for (int j = 0; j < (h); j++) { \
            float give = up ? acc[j] : acc[j + (h)], keep = up ? acc[j + (h)] : acc[j]; \
            acc[j] = keep + subgroupShuffleXor(give, uint(s)); \
        } \
    }

void main()
{
    int part = int(gl_WorkGroupID.y);
    int kbeg = part * pc.kc, kend = min(pc.K, kbeg + pc.kc);
    GEMV_ROWS(int(gl_WorkGroupID.z))
    int slab = part * pc.rows;
    int nu = (kend - kbeg) / 8;

    int sl = int(gl_SubgroupInvocationID), lane = sl % LANES;
    int cps = int(gl_SubgroupSize) / LANES;   // columns a subgroup takes at once
    if (cps == 0) return;   // the host's check failed: no endless loop
    int base = int(gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID) * cps;
    int stride = int(gl_NumWorkGroups.x * gl_NumSubgroups) * cps;
    int n = base + sl / LANES;   // this lane's column

    uvec4 w0[UNMAX], w1[UNMAX];
    // the first column's first units
    if (n < pc.N) {
        int bo = ob + n * pc.sbn + kbeg;
        [[unroll]] for (int q = 0; q < UNMAX; q++)
            if (q < UN && lane + q * LANES < nu) unit_b_load(bo + (lane + q * LANES) * 8, w0[q], w1[q]);
    }
    // base is the same across the subgroup: every lane takes every trip
    // (the shuffles below need the whole column's lanes)
    for (; base < pc.N; base += stride, n += stride) {
        float acc[8];
        [[unroll]] for (int i = 0; i < 8; i++) acc[i] = 0.0;
        if (n < pc.N) {
            int bo = ob + n * pc.sbn;
            for (int u0 = lane; u0 < nu; u0 += UN * LANES) {
                uvec4 c0[UNMAX] = w0, c1[UNMAX] = w1;
                // the next loads: this column's next units, else the next
                // column's first
                int u1 = u0 + UN * LANES, nb = bo + kbeg;
                if (u1 >= nu) {
                    u1 = n + stride < pc.N ? lane : nu;
                    nb = ob + (n + stride) * pc.sbn + kbeg;
                }
                [[unroll]] for (int q = 0; q < UNMAX; q++)
                    if (q < UN && u1 + q * LANES < nu) unit_b_load(nb + (u1 + q * LANES) * 8, w0[q], w1[q]);
                [[unroll]] for (int q = 0; q < UNMAX; q++) {
                    int k = kbeg + (u0 + q * LANES) * 8;
                    if (q < UN && u0 + q * LANES < nu) {
                        float b[8];
                        unit_b_use(c0[q], c1[q], b);
                        [[unroll]] for (int i = 0; i < 8; i++) {
                            if (i < nr) {
                                float a[8];
                                unit_a(oa[i] + k * pc.sak, pc.sak, a);
                                [[unroll]] for (int j = 0; j < 8; j++) acc[i] = fma(a[j], b[j], acc[i]);
                            }
                        }
                    }
                }
            }
            int kt = kbeg + nu * 8 + lane;
            if (lane < 8 && kt < kend) {
                float b = ldf_1(DTB, bo + kt);
                [[unroll]] for (int i = 0; i < 8; i++)
                    if (i < nr) acc[i] = fma(ldf_0(DTA, oa[i] + kt * pc.sak), b, acc[i]);
            }
        }
        // the tree: the rows halved at s = LANES/2, LANES/4, LANES/8, then
        // each row's sums added at s = LANES/16 ... 1 (no loop over s:
        // LANES is a specialization constant, and a loop the driver does
        // not unroll would index acc[] at run time)
        SPLIT(4, LANES / 2)
        SPLIT(2, LANES / 4)
        SPLIT(1, LANES / 8)
        if (LANES >= 16) acc[0] += subgroupShuffleXor(acc[0], uint(LANES / 16));
        if (LANES >= 32) acc[0] += subgroupShuffleXor(acc[0], uint(LANES / 32));
        int r = lane / (LANES / 8);
        if (lane % (LANES / 8) == 0 && r < nr && n < pc.N) stf_2(DTO, (slab + r0 + r) * pc.N + n, acc[0]);
    }
}
