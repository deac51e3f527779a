// nn_attn_khr.glsl - scaled dot-product attention on tensor cores through
// GL_KHR_cooperative_matrix (16x16x16 f16 fragments, f32 accumulators),
// compiled by glslang 15 (module.mk's VK_KHR_VARIANTS).  f16 q, k and v
// with a unit-stride head dim (vector-aligned rows), D = Dv <= HD (the
// including variant defines HD, a multiple of 16; D a multiple of 8: the
// dims past D are staged as zeros), no mask, an additive f32 mask or a
// bool mask (read through its strides), causal, grouped heads.  Picked
// by nn_attn_khr.c; nn_attn_coop.glsl (NV cooperative matrices) and
// nn_attn_fa.glsl (SIMT) stay as the fallbacks.
//
// FlashAttention-2 on mma, as nn_attn_coop_regs.glsl: a workgroup of NSG
// subgroups of 32 owns BQ = 16 * RT * NSG queries of one (batch, head),
// RT row tiles of 16 per subgroup, and folds in BK keys per step with an
// online softmax on the score accumulators in registers.  RT = 2 makes
// each K and V fragment loaded from shared memory feed two products.
// Per key block: the K tile is staged in shared memory (f16 rows padded by
// 8 halves), S = Q K^T (Q fragments held in registers for the whole
// pass), scale / mask / causal limit and row maxima on the components
// (their rows and columns known from tables loaded once), P = exp2(S - m),
// the V tile staged over K, O += P V.  Global loads of the next tile are
// issued before each multiply and stored to shared memory after it.
//
// KHR cooperative matrices have no conversion from an accumulator to an A
// operand, and their components are indexable but not addressable by row.
// On NVIDIA's driver the 16 x 16 A matrix and the accumulator put the same
// (row, column) in each component i of an invocation: row lane / 4 (+ 8),
// column 2 * (lane % 4) (+ 1, + 8), each "+" decided by one bit of i.
// Which bit is which comes in as specialization constants (RB, CB1, CB8),
// so the row half of every component is known when the pipeline is made
// and the softmax has no selects; the shader checks that layout against
// tables loaded once (a matrix of row * 16 + column numbers in each use)
// and writes NaN where it does not hold (the host picks these kernels only
// on NVIDIA's driver; the tests would show it).  P is then built component
// by component in registers (PMODE 1, the default).  For measurements:
// PMODE 2 passes P through shared memory (store as an f16 accumulator,
// load as A), PMODE 0 picks either at run time, PMODE 3 converts with
// GL_NV_cooperative_matrix2; NOLANEMAP keeps rows and columns in registers
// from the tables.  MASK (the _m variants) reads the mask per component.
// QSH keeps Q in shared memory (read at each step), not in registers.
// Max is NaN-propagating and a block with nothing visible yet adds
// nothing, as in the other kernels, so NaN in q or k, -inf masks and
// fully masked rows come out as on the CPU.
// BF16 (module.mk's VK_BF16_VARIANTS): bf16 q, k and v; the module's
// float16_t is made bfloat16 after compiling (tools/spvpack.c --bf16), so
// the fragments, P and the A table below hold bf16 and nothing computes
// on them but the multiplies (the softmax stays f32).
// Bindings: 0 = q, 1 = k, 2 = v, 3 = mask, 4 = output (contiguous
// [B, Hq, Lq, D]).
#extension GL_KHR_cooperative_matrix : require
#if PMODE == 3
#extension GL_NV_cooperative_matrix2 : require
#endif
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_vote : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"

#ifndef NSG
#define NSG 4                  // subgroups
#endif
#ifndef PMODE
#define PMODE 1                // P: 0 registers where the layouts agree, else shared memory;
#endif                         // 1 registers; 2 shared memory; 3 converted (cooperative matrix 2)
#ifndef RT
#define RT 1                   // row tiles of 16 queries per subgroup
#endif
#ifndef BK
#define BK 64                  // keys per step
#endif
#define BQ (16 * RT * NSG)
#define NT (32 * NSG)
#define KS (HD / 8 + 1)        // K/V row stride in uvec4 (HD + 8 halves)
#define CPR (HD / 8)           // uvec4 per row of a tile
#define NL (BK * CPR / NT)     // uvec4 per invocation and tile
#define NF (HD / 16)           // fragments along the head dim
#define NJ (BK / 16)           // fragments along the keys
#define PS (BK / 8 + 1)        // P row stride in uvec4 (the shared-memory route)
#define PAREA (16 * RT * PS)   // a subgroup's P area
#if (BK * CPR) % NT != 0 || BQ % BK != 0 && BK % BQ != 0
#error "tile sizes"
#endif

layout(local_size_x = NT) in;
layout(constant_id = 0) const uint DTQ = 0;
layout(constant_id = 1) const uint DTK = 0;
layout(constant_id = 2) const uint DTV = 0;
layout(constant_id = 3) const uint DTO = 0;
// the accumulator layout (without NOLANEMAP): which bit of a component's
// index adds 8 to its row (lane / 4), 1 to its column (2 * (lane % 4)) and
// 8 to its column; the host passes the driver's (nn_attn_fa.c)
layout(constant_id = 4) const int RB = 1;
layout(constant_id = 5) const int CB1 = 0;
layout(constant_id = 6) const int CB8 = 2;

// must match nn_attn_khr.c's struct
layout(push_constant) uniform PC {
    int Hq, Lq, Lk, nqb, grp;          // grp = Hq / Hk
    uint items, causal, mask;          // items = B * Hq * nqb; mask 0 none, 1 additive f32, 2 bool
    float scale;                       // scale * log2(e)
    int D;                             // head dim (<= HD, a multiple of 8)
    int oq, ok, ov, om;                // element offsets
    int sq[3], sk[3], sv[3];           // batch, head and row strides
    int sm[4];                         // the mask's strides (0: broadcast)
} pc;

layout(std430, set = 0, binding = 0) readonly buffer Q8 { uvec4 v[]; } q8;
layout(std430, set = 0, binding = 1) readonly buffer K8 { uvec4 v[]; } k8;
layout(std430, set = 0, binding = 2) readonly buffer V8 { uvec4 v[]; } v8;
DECL_IO(3)
DECL_IO(4)

#define LOG2E 1.4426950408889634

#define F16A coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define F16B coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define F32C coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define F16C coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define ROWM gl_CooperativeMatrixLayoutRowMajor
#define COLM gl_CooperativeMatrixLayoutColumnMajor

shared uvec4 KV[BK * KS];              // K or V (also Q at the start, O and the tables)
#ifdef QSH
shared uvec4 QS[BQ * KS];              // Q, read at each step instead of held in registers
#endif
#if PMODE == 0 || PMODE == 2
shared uvec4 PSH[NSG * PAREA];         // P, where it cannot stay in registers
#endif

// the tiles' dims past D are zeros
#define FETCH_COLS && c * 8 < pc.D
#include "nn_attn_tc.glsl"

#ifdef MASK
#define MASK_ADD \
    if (key < nk && qi < pc.Lq) { \
        int e = mb0 + qi * pc.sm[2] + (j0 + key) * pc.sm[3]; \
        if (pc.mask == 1u) x += ldf_3(DT_F32, e) * float(LOG2E); \
        else if (uint(u8_3.v[e]) == 0u) x = M_NINF; \
    }
#else
#define MASK_ADD
#endif
// the scores of row tile rt scaled, masked (where EDGE: keys past nk and,
// causal, after the query hidden) and their row maxima in mx
#define SCORES(EDGE) \
    [[unroll]] for (int j = 0; j < NJ; j++) \
        [[unroll]] for (int i = 0; i < NC; i++) { \
            int key = j * 16 + cols[i], qi = r0 + rows[i]; \
            float x = s[rt][j][i] * pc.scale; \
            MASK_ADD \
            if (EDGE && (key >= nk || (pc.causal != 0u && j0 + key > qi))) x = M_NINF; \
            s[rt][j][i] = x; \
            if (hi[i]) mx.y = nmax(mx.y, x); \
            else mx.x = nmax(mx.x, x); \
        }

void main()
{
    int t = int(gl_LocalInvocationID.x);
    int sg = int(gl_SubgroupID), lane = int(gl_SubgroupInvocationID), g4 = lane >> 2;

    // the (row, column) of each component: row * 16 + column in an f32
    // table (for accumulators) and an f16 one (for A operands)
    if (t < 64) {
        int c4 = (t & 3) * 4, r16 = (t >> 2) * 16;
        KV[t] = floatBitsToUint(vec4(r16 + c4, r16 + c4 + 1, r16 + c4 + 2, r16 + c4 + 3));
    } else if (t < 96) {
        int x = t - 64, c8 = (x & 1) * 8, r16 = (x >> 1) * 16;
        uint w[4];
        [[unroll]] for (int k = 0; k < 4; k++)
#ifdef BF16
            // bfloat16 bits (exact: the numbers are below 256)
            w[k] = (floatBitsToUint(float(r16 + c8 + 2 * k)) >> 16) |
                   (floatBitsToUint(float(r16 + c8 + 2 * k + 1)) & 0xffff0000u);
#else
            w[k] = packHalf2x16(vec2(r16 + c8 + 2 * k, r16 + c8 + 2 * k + 1));
#endif
        KV[t] = uvec4(w[0], w[1], w[2], w[3]);
    }
    barrier();
    F32C tc;
    F16A ta;
    coopMatLoad(tc, KV, 0, 4, ROWM);
    coopMatLoad(ta, KV, 64, 2, ROWM);
    int rows[NC], cols[NC];
    bool hi[NC];                            // on row g4 + 8 (else g4)
    bool ok = tc.length() == NC, same = ta.length() == NC;
    [[unroll]] for (int i = 0; i < NC; i++) {
        int rc = int(tc[i]);
#ifndef NOLANEMAP
        // the layout as constants (the row half of each component known
        // when the pipeline is made: no selects in the softmax), checked
        // against the table
        rows[i] = g4 + 8 * ((i >> RB) & 1);
        cols[i] = 2 * (lane & 3) + ((i >> CB1) & 1) + 8 * ((i >> CB8) & 1);
        hi[i] = ((i >> RB) & 1) != 0;
        ok = ok && rc == rows[i] * 16 + cols[i];
#else
        rows[i] = rc >> 4;
        cols[i] = rc & 15;
        hi[i] = rows[i] == g4 + 8;
        ok = ok && (rows[i] == g4 || hi[i]);
#endif
        same = same && float(ta[i]) == tc[i];
    }
    ok = subgroupAll(ok);
#if PMODE == 0
    same = subgroupAll(same);
#elif PMODE == 1
    ok = ok && subgroupAll(same);   // else NaN
    same = true;
#else
    same = false;
#endif
    int pb = sg * PAREA;

    uint bhn = pc.items / uint(pc.nqb);
    for (uint w = gl_WorkGroupID.x; w < pc.items; w += gl_NumWorkGroups.x) {
        ATTN_ITEM(w);
#ifdef MASK
        int mb0 = pc.om + b * pc.sm[0] + hq * pc.sm[1];
#endif
        int q0 = i0 + sg * 16 * RT;         // this subgroup's first query

        // Q, BK rows at a time through KV (rows past bq and dims past D zero)
#ifndef QSH
        F16A qf[RT][NF];
#endif
        uvec4 g[NL];
        [[unroll]] for (int p = 0; p < (BQ + BK - 1) / BK; p++) {
            [[unroll]] for (int u = 0; u < NL; u++) {
                int x = t + u * NT, row = p * BK + x / CPR, c = x % CPR;
                g[u] = row < bq && c * 8 < pc.D ? q8.v[(qb + row * pc.sq[2] + c * 8) >> 3] : uvec4(0u);
            }
            barrier();   // KV's last readers are done
            put(g);
            barrier();
            [[unroll]] for (int rt = 0; rt < RT; rt++) {
                int r0 = (sg * RT + rt) * 16;
                if (r0 / BK == p)
                    [[unroll]] for (int c = 0; c < NF; c++) {
#ifdef QSH
                        F16A qa;
                        coopMatLoad(qa, KV, (r0 - p * BK) * KS + c * 2, KS, ROWM);
                        coopMatStore(qa, QS, r0 * KS + c * 2, KS, ROWM);
#else
                        coopMatLoad(qf[rt][c], KV, (r0 - p * BK) * KS + c * 2, KS, ROWM);
#endif
                    }
            }
        }
        if (kend > 0) fetch_k(kb, pc.sk[2], min(BK, kend), g);

        F32C o[RT][NF];
        [[unroll]] for (int rt = 0; rt < RT; rt++)
            [[unroll]] for (int c = 0; c < NF; c++) o[rt][c] = F32C(0.0);
        vec2 m[RT], l[RT];                  // rows g4 and g4 + 8 (l: this invocation's part)
        [[unroll]] for (int rt = 0; rt < RT; rt++) {
            m[rt] = vec2(M_NINF);
            l[rt] = vec2(0.0);
        }
        for (int j0 = 0; j0 < kend; j0 += BK) {
            int nk = min(BK, kend - j0);
            bool more = j0 + BK < kend;
            barrier();   // Q's or the last V's readers are done
            put(g);
            barrier();
            fetch_v(vb + j0 * pc.sv[2], pc.sv[2], nk, g);

            F32C s[RT][NJ];
            [[unroll]] for (int rt = 0; rt < RT; rt++)
                [[unroll]] for (int j = 0; j < NJ; j++) s[rt][j] = F32C(0.0);
            [[unroll]] for (int c = 0; c < NF; c++) {
#ifdef QSH
                F16A qc[RT];
                [[unroll]] for (int rt = 0; rt < RT; rt++)
                    coopMatLoad(qc[rt], QS, ((sg * RT + rt) * 16) * KS + c * 2, KS, ROWM);
#define QF(rt, c) qc[rt]
#else
#define QF(rt, c) qf[rt][c]
#endif
                [[unroll]] for (int j = 0; j < NJ; j++) {
                    F16B kf;
                    coopMatLoad(kf, KV, j * 16 * KS + c * 2, KS, COLM);
                    [[unroll]] for (int rt = 0; rt < RT; rt++) s[rt][j] = coopMatMulAdd(QF(rt, c), kf, s[rt][j]);
                }
            }

            F16A pf[RT][NJ];
            [[unroll]] for (int rt = 0; rt < RT; rt++) {
                int r0 = q0 + rt * 16;
                // scale, mask, row maxima over the quad; a block whose keys
                // are all below nk and (causal) at or before the tile's first
                // query hides nothing: it skips the tests (EDGEALL: never)
                vec2 mx = vec2(M_NINF);
#ifdef EDGEALL
                bool edge = true;
#else
                bool edge = nk < BK || (pc.causal != 0u && j0 + BK - 1 > r0);
#endif
                if (edge) {
                    SCORES(true)
                } else {
                    SCORES(false)
                }
                [[unroll]] for (int d = 1; d <= 2; d *= 2) {
                    mx.x = nmax(mx.x, subgroupShuffleXor(mx.x, d));
                    mx.y = nmax(mx.y, subgroupShuffleXor(mx.y, d));
                }
                vec2 mn = vec2(nmax(m[rt].x, mx.x), nmax(m[rt].y, mx.y)), f = vec2(1.0);
                bvec2 any = notEqual(mn, vec2(M_NINF));   // else nothing visible yet: the block adds nothing
                if (any.x) f.x = m[rt].x == M_NINF ? 0.0 : exp2(m[rt].x - mn.x);
                if (any.y) f.y = m[rt].y == M_NINF ? 0.0 : exp2(m[rt].y - mn.y);
                vec2 ps = vec2(0.0);
                [[unroll]] for (int j = 0; j < NJ; j++) {
                    [[unroll]] for (int i = 0; i < NC; i++) {
                        float p = 0.0;
                        if (hi[i]) {
                            if (any.y) p = exp2(s[rt][j][i] - mn.y);
                            ps.y += p;
                        } else {
                            if (any.x) p = exp2(s[rt][j][i] - mn.x);
                            ps.x += p;
                        }
                        s[rt][j][i] = p;
                    }
#if PMODE == 3
                    pf[rt][j] = F16A(s[rt][j]);
#else
                    if (same) {
                        pf[rt][j] = F16A(float16_t(0.0));
                        [[unroll]] for (int i = 0; i < NC; i++) pf[rt][j][i] = float16_t(s[rt][j][i]);
                    }
#if PMODE != 1
                    else {
                        F16C h = F16C(s[rt][j]);
                        coopMatStore(h, PSH, pb + rt * 16 * PS + j * 2, PS, ROWM);
                    }
#endif
#endif
                }
                l[rt] = l[rt] * f + ps;
                m[rt] = mn;
                [[unroll]] for (int i = 0; i < NC; i++) {
                    float fi = hi[i] ? f.y : f.x;
                    [[unroll]] for (int c = 0; c < NF; c++) o[rt][c][i] *= fi;
                }
            }
#if PMODE == 0 || PMODE == 2
            if (!same) {
                sg_barrier();
                [[unroll]] for (int rt = 0; rt < RT; rt++)
                    [[unroll]] for (int j = 0; j < NJ; j++)
                        coopMatLoad(pf[rt][j], PSH, pb + rt * 16 * PS + j * 2, PS, ROWM);
            }
#endif

            barrier();   // K's readers are done
            put(g);
            barrier();
            if (more) fetch_k(kb + (j0 + BK) * pc.sk[2], pc.sk[2], min(BK, kend - j0 - BK), g);
            [[unroll]] for (int j = 0; j < NJ; j++)
                [[unroll]] for (int c = 0; c < NF; c++) {
                    F16B vf;
                    coopMatLoad(vf, KV, j * 16 * KS + c * 2, KS, ROWM);
                    [[unroll]] for (int rt = 0; rt < RT; rt++) o[rt][c] = coopMatMulAdd(pf[rt][j], vf, o[rt][c]);
                }
#if PMODE == 0 || PMODE == 2
            if (!same) sg_barrier();   // P's readers are done before the next block's stores
#endif
        }

        // O / l (l summed over the quad; 0 where no key was visible, which
        // gives NaN as on the CPU), out through KV (64 uvec4 a subgroup)
        barrier();   // the last V's readers are done
        int sb = sg * 64;
        [[unroll]] for (int rt = 0; rt < RT; rt++) {
            [[unroll]] for (int d = 1; d <= 2; d *= 2) {
                l[rt].x += subgroupShuffleXor(l[rt].x, d);
                l[rt].y += subgroupShuffleXor(l[rt].y, d);
            }
            vec2 inv = vec2(l[rt].x > 0.0 && ok ? 1.0 / l[rt].x : M_NAN, l[rt].y > 0.0 && ok ? 1.0 / l[rt].y : M_NAN);
            [[unroll]] for (int i = 0; i < NC; i++) {
                float fi = hi[i] ? inv.y : inv.x;
                [[unroll]] for (int c = 0; c < NF; c++) o[rt][c][i] *= fi;
            }
            int r0 = sg * 16 * RT + rt * 16;
            int ob = (bh * pc.Lq + i0 + r0) * pc.D, nrow = min(16, bq - r0);
            [[unroll]] for (int c = 0; c < NF; c++) {
                coopMatStore(o[rt][c], KV, sb, 4, ROWM);
                sg_barrier();
                [[unroll]] for (int k = 0; k < 8; k++) {
                    int e = lane + 32 * k, row = e >> 4, col = c * 16 + (e & 15);
                    if (row < nrow && col < pc.D)
                        stf_4(DTO, ob + row * pc.D + col, uintBitsToFloat(KV[sb + (e >> 2)][e & 3]));
                }
                sg_barrier();
            }
        }
    }
}
