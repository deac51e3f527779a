#version 450
// matmul_gemv.comp - C = A @ B for few rows of A (matmul.c's GEMV path:
// at most 8 rows a workgroup, choice.h's lm_vk_gemv_takes), f32, f16 and
// bf16 in any mix, f32 sums, each result rounded once on store.  A product
// of one or a few rows reads all of B once and does two flops a load: it is
// bound by memory, so the workgroups stream B and keep every row's sums
// in registers.
//
// Two layouts of B (B_T, matmul.c picks by the strides):
// - B_T, B stored [n][k] (a linear layer's weight, read transposed: sbk ==
//   1): LANES invocations a column (8, 16 or 32), RW = 256 / LANES columns
//   a workgroup; lane l takes the 8-element units l, l + LANES, ... of the
//   column's K range (UN of them loaded before any is used: 4 or 8), then
//   the LANES sums of a column are added in shared memory in a fixed tree
//   (matmul_gemv_shuf.comp: the same sums by subgroup shuffles, the same
//   bits; what the two share is matmul_gemv.glsl).
//   ASH > 1: A's units of the part (16-byte aligned, A_VEC) are first
//   copied into shared memory (ASH 16-byte words), once for the workgroup,
//   and read from there.  UN and ASH do not change any sum's order, LANES
//   does (it is a device-wide knob, matmul_gemv.c: the same for every call,
//   so the rule below holds);
// - else B stored [k][n]: NX invocations along n, 8 columns each (a
//   16-byte load of a row of B for 16-bit dtypes, coalesced across the
//   invocations), KS slices of K; slice s takes k = s, s + KS, ..., and the
//   KS sums of a column are added in slice order.
// A workgroup's K range is one part of pc.kc elements (gl_WorkGroupID.y):
// with more than one part (split-K, choice.h's lm_vk_gemv_part_k) the
// results are f32 partial sums, slab `part` of [part][rows][N], that
// conv_splitk.comp adds in part order.
//
// Bits: every output's order of additions is fixed by N, K, the layout and
// the part size alone - not by M, the rows grouped in a workgroup, the
// batch, or whether a load is a vector one (a unit is 8 elements in both
// paths, the tail past the last whole unit goes to lanes 0..7 in both) - so
// a stacked call's rows (choice.h) give the single runs' bytes.
// Rows: the z index is a group of up to 8 rows.  pc.gpe > 0: groups within
// one batch entry (gpe groups an entry, B read once an entry); pc.gpe == 0:
// B is the same for every entry (broadcast) and a group takes 8 rows of
// the flattened [batch * M] rows.
// Bindings: 0 = A, 1 = B, 2 = C (contiguous [batch, M, N], or the f32
// partial sums).
layout(local_size_x = 256) in;
#include "matmul_gemv.glsl"
layout(constant_id = 8) const int ASH = 1;          // B_T: > 1: A staged in shared memory, 16-byte words

const int RW = 256 / LANES;
#define NX 32
#define KS (256 / NX)

shared float red[8 * 256];
shared uvec4 ash[ASH];

// unit u of row i of the part as staged (ASH): f32 two words a unit
void unit_ash(int i, int u, int nu, inout float x[8])
{
    if (DTA == DT_F32) {
        int w = (i * nu + u) * 2;
        uvec4 w0 = ash[w], w1 = ash[w + 1];
        [[unroll]] for (int j = 0; j < 4; j++) {
            x[j] = uintBitsToFloat(w0[j]);
            x[j + 4] = uintBitsToFloat(w1[j]);
        }
    } else {
        unit16(DTA, ash[i * nu + u], x);
    }
}

void main()
{
    int tid = int(gl_LocalInvocationID.x);
    int part = int(gl_WorkGroupID.y), g = int(gl_WorkGroupID.z);
    int kbeg = part * pc.kc, kend = min(pc.K, kbeg + pc.kc);
    GEMV_ROWS(g)
    int slab = part * pc.rows;

    if (B_T) {
        int lane = tid % LANES, col = tid / LANES;
        int n = int(gl_WorkGroupID.x) * RW + col;
        float acc[8];
        [[unroll]] for (int i = 0; i < 8; i++) acc[i] = 0.0;
        int nu = (kend - kbeg) / 8;
        if (ASH > 1) {
            // the rows' whole units of this part, 16-byte words from A
            // (A_VEC: aligned), once for the workgroup (the host checks
            // that nr * nu units fit)
            int wpu = DTA == DT_F32 ? 2 : 1;
            for (int w = tid; w < nr * nu * wpu; w += 256) {
                int i = w / (nu * wpu), r = w % (nu * wpu);
                int e = oa[i] + kbeg * pc.sak;
                ash[w] = a4.v[DTA == DT_F32 ? e / 4 + r : e / 8 + r];
            }
            barrier();
        }
        if (n < pc.N) {
            int bo = ob + n * pc.sbn;
            // UN units' loads issued before any is used (latency), then
            // added in unit order: the order of the loop without it
            for (int u0 = lane; u0 < nu; u0 += UN * LANES) {
                float b[UNMAX][8];
                [[unroll]] for (int q = 0; q < UNMAX; q++)
                    if (q < UN && u0 + q * LANES < nu) unit_b(bo + kbeg + (u0 + q * LANES) * 8, 1, b[q]);
                [[unroll]] for (int q = 0; q < UNMAX; q++) {
                    int k = kbeg + (u0 + q * LANES) * 8;
                    if (q < UN && u0 + q * LANES < nu) {
                        [[unroll]] for (int i = 0; i < 8; i++) {
                            if (i < nr) {
                                float a[8];
                                if (ASH > 1) unit_ash(i, u0 + q * LANES, nu, a);
                                else unit_a(oa[i] + k * pc.sak, pc.sak, a);
                                [[unroll]] for (int j = 0; j < 8; j++) acc[i] = fma(a[j], b[q][j], acc[i]);
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
        [[unroll]] for (int i = 0; i < 8; i++)
            if (i < nr) red[i * 256 + tid] = acc[i];
        barrier();
        [[unroll]] for (int s = LANES / 2; s > 0; s >>= 1) {
            if (lane < s)
                [[unroll]] for (int i = 0; i < 8; i++)
                    if (i < nr) red[i * 256 + tid] += red[i * 256 + tid + s];
            barrier();
        }
        if (lane < nr && n < pc.N)
            stf_2(DTO, (slab + r0 + lane) * pc.N + n, red[lane * 256 + col * LANES]);
    } else {
        int tx = tid % NX, s = tid / NX;
        int n0 = int(gl_WorkGroupID.x) * (NX * 8) + tx * 8;
        float acc[8][8];
        [[unroll]] for (int i = 0; i < 8; i++)
            [[unroll]] for (int j = 0; j < 8; j++) acc[i][j] = 0.0;
        bool whole = n0 + 8 <= pc.N;
        if (n0 < pc.N) {
            for (int k0 = kbeg + s; k0 < kend; k0 += UN * KS) {
                float b[UNMAX][8];
                [[unroll]] for (int q = 0; q < UNMAX; q++) {
                    int k = k0 + q * KS, bo = ob + k * pc.sbk + n0 * pc.sbn;
                    if (q < UN && k < kend) {
                        if (whole) {
                            unit_b(bo, pc.sbn, b[q]);
                        } else {
                            [[unroll]] for (int j = 0; j < 8; j++)
                                b[q][j] = n0 + j < pc.N ? ldf_1(DTB, bo + j * pc.sbn) : 0.0;
                        }
                    }
                }
                [[unroll]] for (int q = 0; q < UNMAX; q++) {
                    int k = k0 + q * KS;
                    if (q < UN && k < kend) {
                        [[unroll]] for (int i = 0; i < 8; i++) {
                            if (i < nr) {
                                float a = ldf_0(DTA, oa[i] + k * pc.sak);
                                [[unroll]] for (int j = 0; j < 8; j++) acc[i][j] = fma(a, b[q][j], acc[i][j]);
                            }
                        }
                    }
                }
            }
        }
        int nw = int(gl_WorkGroupID.x) * (NX * 8) + tid;   // the column this invocation adds up
        [[unroll]] for (int i = 0; i < 8; i++) {
            if (i < nr) {
                [[unroll]] for (int j = 0; j < 8; j++) red[s * 256 + tx * 8 + j] = acc[i][j];
                barrier();
                if (nw < pc.N) {
                    float x = red[tid];
                    [[unroll]] for (int q = 1; q < KS; q++) x += red[q * 256 + tid];
                    stf_2(DTO, (slab + r0 + i) * pc.N + nw, x);
                }
                barrier();
            }
        }
    }
}
