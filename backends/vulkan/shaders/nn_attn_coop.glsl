// nn_attn_coop.glsl - scaled dot-product attention on tensor cores
// (GL_NV_cooperative_matrix, 16x16x16 f16 fragments, f32 accumulators) for
// f16 q, k and v with a unit-stride head dim (vector-aligned rows), D = Dv
// = HD (64 or 128: the including .comp defines HD), no mask or causal
// only.  FlashAttention-2 on mma: nn_attn_fa.c picks it where the device
// has the fragments, and nn_attn_fa.glsl (the SIMT kernel) otherwise.
//
// A workgroup of 4 subgroups of 32 owns a block of 64 queries of one
// (batch, head), 16 rows per subgroup, and folds in blocks of 64 keys with
// an online softmax.  Per key block:
//  1. K (64 x HD) is staged in shared memory as f16 rows padded by 8
//     halves (the 8 rows a fragment load reads at once fall in distinct
//     banks).  Each subgroup computes its 16 x 64 scores S = Q K^T as 4
//     accumulators over HD/16 steps; its Q fragments were loaded once.
//  2. S goes to the subgroup's part of shared memory (f32); each row is
//     read by two invocations (32 keys each): scale (scale * log2 e), the
//     causal/length mask, the row maximum (NaN-propagating, the pair
//     combined by a shuffle), m' = max(m, max), f = exp2(m - m'),
//     P = exp2(S - m') written back as f16 over S, f to a per-row slot.
//     The running sum l stays a per-invocation partial (summed at the end).
//  3. The output accumulators O (16 x HD per subgroup, in registers) are
//     scaled row by row: NV cooperative matrices have no row access, but
//     their components are indexable, and a matrix loaded once from a
//     16 x 16 table of row numbers tells each invocation which row each
//     of its components belongs to (the layout is the same for every
//     matrix of one type).  Then V (64 x HD, staged like K) and
//     O += P V on the tensor cores.
// Global loads of the next tile (V during the scores, the next K during
// P V) are issued into registers before the multiply and stored to shared
// memory after it: K and V share one buffer.
// Max is NaN-propagating and a block with nothing visible yet adds nothing
// (as nn_attn_fa.glsl and the CPU kernel), so NaN in q or k and fully
// masked rows come out as there.  Like the SIMT kernel, a NaN in v at a
// key that the causal mask hides from a row still reaches that row
// (0 * NaN) when the key is in the row's last key block.
// Shared memory (HD = 128): K/V 17 KiB, S/P 17 KiB, factors 256 bytes.
// That is the portable kernel (nn_attn_coop64/128.comp, "smem"); with REGS
// defined the softmax runs on the accumulators in registers instead
// (nn_attn_coop_regs.glsl: NVIDIA's layout, the default there).
// Bindings: 0 = q, 1 = k, 2 = v, 3 = output (contiguous [B, Hq, Lq, HD]).
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_vote : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"

#ifndef NSG
#define NSG 4                  // subgroups (of 16 query rows each)
#endif
#define BQ (16 * NSG)
#define BK 64
#define NT (32 * NSG)
#define KS (HD / 8 + 1)        // K/V row stride in uvec4 (HD + 8 halves)
#define SS 17                  // S row stride in uvec4 (68 floats)
#define PS 9                   // P row stride in uvec4 (72 halves)
#define SG_AREA (16 * SS)      // a subgroup's S/P area, uvec4
#define CPR (HD / 8)           // uvec4 per row of a tile
#define NL (BK * CPR / NT)     // uvec4 per invocation and tile
#define NF (HD / 16)           // fragments along the head dim

#include "nn_attn_pc.glsl"

layout(std430, set = 0, binding = 0) readonly buffer Q8 { uvec4 v[]; } q8;
layout(std430, set = 0, binding = 1) readonly buffer K8 { uvec4 v[]; } k8;
layout(std430, set = 0, binding = 2) readonly buffer V8 { uvec4 v[]; } v8;
DECL_IO(3)

shared uvec4 KV[BK * KS];         // K or V (REGS: also Q at the start and O at the end)
#ifndef REGS
shared uvec4 SP[NSG * SG_AREA];   // per subgroup: its Q rows, S (f32), then P (f16) over S
shared float FS[BQ];              // per row: the factor f, at the end 1 / l
#endif

#include "nn_attn_tc.glsl"

#define F16M fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define F32M fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>

// the 16 x 64 scores S = Q K^T of a subgroup's queries (Q fragments qf)
// and the key block staged in KV, and O += P V with the V block staged
// there: the products both main()s share (macros, not functions, so each
// expands in place with constant fragment indices)
#define QK_SCORES(s, qf) \
    [[unroll]] for (int j = 0; j < 4; j++) s[j] = F32M(0.0); \
    [[unroll]] for (int c = 0; c < NF; c++) \
        [[unroll]] for (int j = 0; j < 4; j++) { \
            F16M kf; \
            coopMatLoadNV(kf, KV, j * 16 * KS + c * 2, KS, true); \
            s[j] = coopMatMulAddNV(qf[c], kf, s[j]); \
        }
#define ADD_PV(o, pf) \
    [[unroll]] for (int j = 0; j < 4; j++) \
        [[unroll]] for (int c = 0; c < NF; c++) { \
            F16M vf; \
            coopMatLoadNV(vf, KV, j * 16 * KS + c * 2, KS, false); \
            o[c] = coopMatMulAddNV(pf[j], vf, o[c]); \
        }

#ifdef REGS
#include "nn_attn_coop_regs.glsl"
#else

// O[c] *= FS[row] for each component (rows: the row of each component).
// The trip count is a constant (NC), so every component index is one
// (a loop up to rm.length() measured the same on the H100).
void scale_rows(int rows[NC], inout F32M o[NF])
{
    [[unroll]] for (int i = 0; i < NC; i++) {
        float f = FS[rows[i]];
        [[unroll]] for (int c = 0; c < NF; c++) o[c][i] *= f;
    }
}

void main()
{
    int sg = int(gl_SubgroupID), lane = int(gl_SubgroupInvocationID);
    int r = lane & 15, h = lane >> 4;       // the softmax pass: row r, keys h*32..h*32+31
    int sb = sg * SG_AREA;

    // the row of each accumulator component
    [[unroll]] for (int k = 0; k < 2; k++) {
        int x = lane + 32 * k;              // 64 uvec4: 16 rows of 4
        SP[sb + x] = uvec4(floatBitsToUint(float(x >> 2)));
    }
    sg_barrier();
    F32M rm;
    coopMatLoadNV(rm, SP, sb, 4, false);
    int rows[NC];
    [[unroll]] for (int i = 0; i < NC; i++) rows[i] = sg * 16 + int(rm[i]);

    uint bhn = pc.items / uint(pc.nqb);
    for (uint w = gl_WorkGroupID.x; w < pc.items; w += gl_NumWorkGroups.x) {
        ATTN_ITEM(w);
        int qi = i0 + sg * 16 + r;          // this invocation's query (softmax pass)

        // this subgroup's 16 rows of Q through its area (rows past bq zero)
        [[unroll]] for (int u = 0; u < CPR / 2; u++) {
            int x = lane + 32 * u, row = x / CPR, c = x % CPR, qr = sg * 16 + row;
            SP[sb + row * KS + c] = qr < bq ? q8.v[(qb + qr * pc.sq[2] + c * 8) >> 3] : uvec4(0u);
        }
        sg_barrier();
        F16M qf[NF];
        [[unroll]] for (int c = 0; c < NF; c++) coopMatLoadNV(qf[c], SP, sb + c * 2, KS, false);
        sg_barrier();
        uvec4 g[NL];
        if (kend > 0) fetch_k(kb, pc.sk[2], min(BK, kend), g);

        F32M o[NF];
        [[unroll]] for (int c = 0; c < NF; c++) o[c] = F32M(0.0);
        float m = M_NINF, l = 0.0;
        for (int j0 = 0; j0 < kend; j0 += BK) {
            int nk = min(BK, kend - j0);
            barrier();   // the last V's readers are done
            put(g);
            barrier();
            fetch_v(vb + j0 * pc.sv[2], pc.sv[2], nk, g);

            F32M s[4];
            QK_SCORES(s, qf);
            [[unroll]] for (int j = 0; j < 4; j++) coopMatStoreNV(s[j], SP, sb + j * 4, SS, false);
            sg_barrier();

            // the softmax pass over this invocation's 32 scores
            vec4 x[8];
            float mb = M_NINF;
            [[unroll]] for (int k = 0; k < 8; k++) {
                x[k] = uintBitsToFloat(SP[sb + r * SS + h * 8 + k]) * pc.scale;
                [[unroll]] for (int e = 0; e < 4; e++) {
                    int j = h * 32 + k * 4 + e;
                    if (j >= nk || (pc.causal != 0u && j0 + j > qi)) x[k][e] = M_NINF;
                    mb = nmax(mb, x[k][e]);
                }
            }
            mb = nmax(mb, subgroupShuffleXor(mb, 16));
            float mn = nmax(m, mb), f = 1.0;
            bool any = mn != M_NINF;       // else nothing visible yet: the block adds nothing
            if (any) f = m == M_NINF ? 0.0 : exp2(m - mn);
            float ps = 0.0;
            uvec4 pw[4];
            [[unroll]] for (int k = 0; k < 4; k++) {
                vec4 p0 = any ? exp2(x[2 * k] - mn) : vec4(0.0);
                vec4 p1 = any ? exp2(x[2 * k + 1] - mn) : vec4(0.0);
                ps += (p0.x + p0.y) + (p0.z + p0.w) + (p1.x + p1.y) + (p1.z + p1.w);
                pw[k] = uvec4(packHalf2x16(p0.xy), packHalf2x16(p0.zw), packHalf2x16(p1.xy), packHalf2x16(p1.zw));
            }
            l = l * f + ps;
            m = mn;
            sg_barrier();   // every row's S is read
            [[unroll]] for (int k = 0; k < 4; k++) SP[sb + r * PS + h * 4 + k] = pw[k];
            if (h == 0) FS[sg * 16 + r] = f;
            sg_barrier();
            scale_rows(rows, o);
            F16M pf[4];
            [[unroll]] for (int j = 0; j < 4; j++) coopMatLoadNV(pf[j], SP, sb + j * 2, PS, false);

            barrier();   // K's readers are done
            put(g);
            barrier();
            if (j0 + BK < kend) fetch_k(kb + (j0 + BK) * pc.sk[2], pc.sk[2], min(BK, kend - j0 - BK), g);
            ADD_PV(o, pf);
        }

        // O / l (l: the pair's partials; 0 where no key was visible, which
        // gives NaN as on the CPU), out through the subgroup's area
        l += subgroupShuffleXor(l, 16);
        sg_barrier();
        if (h == 0) FS[sg * 16 + r] = l > 0.0 ? 1.0 / l : M_NAN;
        sg_barrier();
        scale_rows(rows, o);
        int ob = (bh * pc.Lq + i0 + sg * 16) * HD;
        int nrow = min(16, bq - sg * 16);
        [[unroll]] for (int c = 0; c < NF; c++) {
            coopMatStoreNV(o[c], SP, sb, 4, false);
            sg_barrier();
            [[unroll]] for (int k = 0; k < 8; k++) {
                int e = lane + 32 * k, row = e >> 4, col = e & 15;
                if (row < nrow) stf_3(DTO, ob + row * HD + c * 16 + col, uintBitsToFloat(SP[sb + (e >> 2)][e & 3]));
            }
            sg_barrier();
        }
    }
}
#endif
