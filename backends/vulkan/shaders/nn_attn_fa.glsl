// nn_attn_fa.glsl - scaled dot-product attention for the common case,
// FlashAttention-2 style on SIMT cores: q, k, v with a unit-stride head
// dim (vector-aligned rows), D = Dv = HD (64, 128, 256 or 512: the
// including .comp file defines HD, so every loop bound is a compile-time
// constant), no mask or causal only.  nn_attn.comp stays the general kernel.
// A .comp may also define HV < HD: each workgroup then computes the scores
// over all HD dims but only HV output columns (a slice of V), HD / HV
// workgroups per query block: more workgroups and fewer registers each,
// for the price of recomputing Q K^T per slice (head dim 512, few heads).
//
// 256 invocations own a block of 64 queries of one (batch, head) and fold
// in blocks of 64 keys with an online softmax (no L x L matrix anywhere).
// Thread (ty, tx) = (t / 16, t % 16) holds the scores of query rows
// ty*4+{0..3} against keys tx*4+{0..3} and the output of the same rows at
// columns c*64 + tx*4+{0..3}: every shared-memory read of the inner loops
// is a vec4, a broadcast or 16 consecutive vec4s (no bank conflicts).
//
// Per key block:
//  1. S = Q K^T: Q and K pass through shared memory DC head dims at a time,
//     stored dim-major (Qc[d][i], Kc[d][j]).  Each thread loads 8
//     consecutive elements of one row (one 32-byte sector; f16/bf16 widened
//     once, q pre-multiplied by scale*log2(e) so the softmax runs in base 2),
//     neighbouring threads on neighbouring rows, so the transposing stores
//     hit 32 different banks.  Q is re-staged every key block: a resident
//     64 x HD block would not fit the 32 KiB that lavapipe has beside P.
//  2. Causal limit, then the row maximum: each thread's partial over its 4
//     keys goes to shared memory and each thread reads the row's 16
//     partials (one barrier; no subgroup operations, so any subgroup size
//     works).  The running sum stays a per-thread partial, rescaled with
//     the same factor, and is summed once at the end.
//  3. P (64 x 64) to shared memory key-major, its vec4 columns swizzled by
//     key so the transposing stores spread over the banks; then O = O * f +
//     P V with V staged row-major, VC keys at a time.
// Max is NaN-propagating and a block with nothing visible yet adds nothing,
// as in the CPU kernel (backends/cpu/nn_attention.c), so NaN and fully
// masked rows come out as there.
// Global loads for the next chunk (Q/K, V, or the next key block's first
// Q/K chunk) are issued before the arithmetic on the current one.
// Shared memory: a 16 KiB region (the Q and K chunks, or the V chunk, or
// the row partials) and 16 KiB of P: 32 KiB in all.
// Bindings: 0 = q, 1 = k, 2 = v, 3 = output (contiguous [B, Hq, Lq, HD]).
#include "common.glsl"

#define BQ 64
#define BK 64
#define NT 256
#define DC 32                 // head dims of a Q/K chunk
#ifndef HV
#define HV HD                 // output columns (of V) per workgroup
#endif
#define NSPLIT (HD / HV)      // workgroups per query block
#define CW (HV / 64)          // vec4 output columns per thread
#define VC (4096 / HV)        // keys of a V chunk (fills the region)
#define KOFF (DC * BQ / 4)    // the K chunk's start in the region (vec4s)

#include "nn_attn_pc.glsl"

// 4 or 8 elements at once: vec4 for f32, uvec4 = 8 halves for 16-bit dtypes
layout(std430, set = 0, binding = 0) readonly buffer Q4 { vec4 v[]; } q4;
layout(std430, set = 0, binding = 0) readonly buffer Q8 { uvec4 v[]; } q8;
layout(std430, set = 0, binding = 1) readonly buffer K4 { vec4 v[]; } k4;
layout(std430, set = 0, binding = 1) readonly buffer K8 { uvec4 v[]; } k8;
layout(std430, set = 0, binding = 2) readonly buffer V4 { vec4 v[]; } v4;
layout(std430, set = 0, binding = 2) readonly buffer V8 { uvec4 v[]; } v8;
DECL_IO(3)
layout(std430, set = 0, binding = 3) writeonly buffer O4 { vec4 v[]; } o4;

#define M_NAN uintBitsToFloat(0x7fc00000u)
#define M_NINF uintBitsToFloat(0xff800000u)

shared vec4 R[1024];      // Qc[DC][BQ] + Kc[DC][BK], or Vc[VC][HV], or partials[BQ][16]
shared vec4 P4[1024];     // P[BK][BQ], vec4 columns swizzled by key

vec4 widen(uint dt, uvec2 h)
{
    if (dt == DT_F16) return vec4(unpackHalf2x16(h.x), unpackHalf2x16(h.y));
    return vec4(uintBitsToFloat(h.x << 16), uintBitsToFloat(h.x & 0xffff0000u),
                uintBitsToFloat(h.y << 16), uintBitsToFloat(h.y & 0xffff0000u));
}

// 8 consecutive elements from element e (the host checked the alignment)
#define LOAD8(NAME, B4, B8) \
void NAME(uint dt, int e, out vec4 a, out vec4 b) { \
    if (dt == DT_F32) { a = B4.v[e >> 2]; b = B4.v[(e >> 2) + 1]; } \
    else { uvec4 h = B8.v[e >> 3]; a = widen(dt, h.xy); b = widen(dt, h.zw); } \
}
LOAD8(load_q, q4, q8)
LOAD8(load_k, k4, k8)
LOAD8(load_v, v4, v8)

// max that keeps a NaN, as the CPU's row maximum does
float nmax(float a, float b) { return b > a || isnan(b) ? b : a; }

// 8 dims (d0..d0+7) of one row into a dim-major chunk at vec4 `base`
void put_dim_major(int base, int d0, int row, vec4 a, vec4 b)
{
    int c = row & 3, i = base + (row >> 2);
    [[unroll]] for (int k = 0; k < 4; k++) {
        R[i + (d0 + k) * (BQ / 4)][c] = a[k];
        R[i + (d0 + 4 + k) * (BQ / 4)][c] = b[k];
    }
}

// Staging is split into a fetch (global loads into f[4], 16 floats per
// thread) and a put (f to shared memory after a barrier): each fetch is
// issued before the arithmetic on the chunk already in shared memory, so
// the loads' latency hides behind it, with one chunk of registers.

// chunk e0 of the Q block (rows past bq zero, pre-scaled) and of the key
// block (rows past nk zero): thread t takes 8 dims of one row
void fetch_qk(int qb, int kb, int bq, int nk, int e0, out vec4 f[4])
{
    int t = int(gl_LocalInvocationID.x), row = t % BQ, d0 = (t / BQ) * 8;
    [[unroll]] for (int k = 0; k < 4; k++) f[k] = vec4(0.0);
    if (row < bq) load_q(DTQ, qb + row * pc.sq[2] + e0 + d0, f[0], f[1]);
    if (row < nk) load_k(DTK, kb + row * pc.sk[2] + e0 + d0, f[2], f[3]);
    f[0] *= pc.scale;
    f[1] *= pc.scale;
}

void put_qk(vec4 f[4])
{
    int t = int(gl_LocalInvocationID.x), row = t % BQ, d0 = (t / BQ) * 8;
    put_dim_major(0, d0, row, f[0], f[1]);
    put_dim_major(KOFF, d0, row, f[2], f[3]);
}

// VC rows of V from vb (rows past nk zero: their P is 0, and 0 * a stale
// NaN would not be), row-major; thread t takes 8 dims of two rows
void fetch_v(int vb, int nk, out vec4 f[4])
{
    int t = int(gl_LocalInvocationID.x);
    [[unroll]] for (int u = 0; u < 2; u++) {
        int x = t + u * NT, row = x / (HV / 8), d0 = (x % (HV / 8)) * 8;
        f[2 * u] = vec4(0.0);
        f[2 * u + 1] = vec4(0.0);
        if (row < nk) load_v(DTV, vb + row * pc.sv[2] + d0, f[2 * u], f[2 * u + 1]);
    }
}

void put_v(vec4 f[4])
{
    int t = int(gl_LocalInvocationID.x);
    [[unroll]] for (int u = 0; u < 2; u++) {
        int x = t + u * NT, i = (x / (HV / 8)) * (HV / 4) + (x % (HV / 8)) * 2;
        R[i] = f[2 * u];
        R[i + 1] = f[2 * u + 1];
    }
}

// S = (scale * log2 e) Q K^T for this thread's 4 x 4 tile, from f holding
// the first chunk; f is left holding the first V chunk (vb)
void block_scores(int qb, int kb, int vb, int bq, int nk, inout vec4 f[4], out vec4 s[4])
{
    int t = int(gl_LocalInvocationID.x), ty = t / 16, tx = t % 16;
    [[unroll]] for (int r = 0; r < 4; r++) s[r] = vec4(0.0);
    for (int e0 = 0; e0 < HD; e0 += DC) {
        barrier();   // the region's last readers are done
        put_qk(f);
        barrier();
        if (e0 + DC < HD) fetch_qk(qb, kb, bq, nk, e0 + DC, f);
        else fetch_v(vb, nk, f);
        // not unrolled here: unrolled (fully or by 4), lavapipe took 3x as
        // long to compile it and ran it at half the speed; the trip count
        // is a constant, so a GPU driver's compiler unrolls as suits it
        for (int d = 0; d < DC; d++) {
            vec4 a = R[d * (BQ / 4) + ty], k = R[KOFF + d * (BK / 4) + tx];
            s[0] += a.x * k;
            s[1] += a.y * k;
            s[2] += a.z * k;
            s[3] += a.w * k;
        }
    }
}

// the maximum of each of this thread's rows over the whole key block
vec4 block_max(vec4 s[4])
{
    int t = int(gl_LocalInvocationID.x), ty = t / 16, tx = t % 16;
    barrier();   // the K chunk's readers are done
    [[unroll]] for (int r = 0; r < 4; r++) {
        int row = ty * 4 + r;
        R[row * 4 + tx / 4][tx & 3] = nmax(nmax(s[r].x, s[r].y), nmax(s[r].z, s[r].w));
    }
    barrier();
    vec4 mb;
    [[unroll]] for (int r = 0; r < 4; r++) {
        float m = M_NINF;
        [[unroll]] for (int q = 0; q < 4; q++) {
            vec4 p = R[(ty * 4 + r) * 4 + q];
            m = nmax(m, nmax(nmax(p.x, p.y), nmax(p.z, p.w)));
        }
        mb[r] = m;
    }
    return mb;
}

// -inf past the block's nk keys and, under causal, above the diagonal
void mask_scores(int i0, int j0, int nk, inout vec4 s[4])
{
    int t = int(gl_LocalInvocationID.x), ty = t / 16, tx = t % 16;
    [[unroll]] for (int r = 0; r < 4; r++)
        [[unroll]] for (int c = 0; c < 4; c++) {
            int j = tx * 4 + c;
            if (j >= nk || (pc.causal != 0u && j0 + j > i0 + ty * 4 + r)) s[r][c] = M_NINF;
        }
}

// the online-softmax step for this thread's rows, given the block maxima
// mb: m' = max(m, mb), P = exp2(S - m') to shared memory, and the factor
// f = exp2(m - m') applied to the partial sums l and the output so far
void online_softmax(vec4 mb, vec4 s[4], inout vec4 m, inout vec4 l, inout vec4 acc[4][CW])
{
    int t = int(gl_LocalInvocationID.x), ty = t / 16, tx = t % 16;
    vec4 p[4];
    [[unroll]] for (int r = 0; r < 4; r++) {
        float mn = nmax(m[r], mb[r]), f = 1.0;
        p[r] = vec4(0.0);
        if (mn != M_NINF) {   // else nothing visible yet: the block adds nothing
            f = m[r] == M_NINF ? 0.0 : exp2(m[r] - mn);
            p[r] = exp2(s[r] - mn);
        }
        l[r] = l[r] * f + (p[r].x + p[r].y + p[r].z + p[r].w);
        m[r] = mn;
        [[unroll]] for (int c = 0; c < CW; c++) acc[r][c] *= f;
    }
    [[unroll]] for (int c = 0; c < 4; c++)
        P4[(tx * 4 + c) * (BQ / 4) + (ty ^ (tx & 7))] = vec4(p[0][c], p[1][c], p[2][c], p[3][c]);
}

// O += P V over the block's nk keys (V from vb, its first chunk in f);
// the last chunk's fetch is the next key block's first Q/K chunk (K from
// kbn, nkn keys; none where nkn is 0)
void block_pv(int vb, int nk, int qb, int bq, int kbn, int nkn, inout vec4 f[4], inout vec4 acc[4][CW])
{
    int t = int(gl_LocalInvocationID.x), ty = t / 16, tx = t % 16;
    for (int v0 = 0; v0 < nk; v0 += VC) {
        barrier();   // the partials' and the last chunk's readers are done; P is written
        put_v(f);
        barrier();
        if (v0 + VC < nk) fetch_v(vb + (v0 + VC) * pc.sv[2], nk - v0 - VC, f);
        else if (nkn > 0) fetch_qk(qb, kbn, bq, nkn, 0, f);
        for (int jj = 0; jj < VC; jj++) {   // not unrolled, as the scores
            int j = v0 + jj;
            vec4 pj = P4[j * (BQ / 4) + (ty ^ ((j >> 2) & 7))];
            [[unroll]] for (int c = 0; c < CW; c++) {
                vec4 vv = R[jj * (HV / 4) + c * 16 + tx];
                acc[0][c] += pj.x * vv;
                acc[1][c] += pj.y * vv;
                acc[2][c] += pj.z * vv;
                acc[3][c] += pj.w * vv;
            }
        }
    }
}

// O / l for the block's bq rows (l: the sum of each row's 16 partials;
// 0 where no key was visible, which gives NaN as on the CPU)
void store_rows(int bh, int i0, int bq, int col0, vec4 l, vec4 acc[4][CW])
{
    int t = int(gl_LocalInvocationID.x), ty = t / 16, tx = t % 16;
    barrier();   // the last chunk's readers are done
    [[unroll]] for (int r = 0; r < 4; r++) R[(ty * 4 + r) * 4 + tx / 4][tx & 3] = l[r];
    barrier();
    [[unroll]] for (int r = 0; r < 4; r++) {
        int row = ty * 4 + r;
        vec4 x = R[row * 4] + R[row * 4 + 1] + R[row * 4 + 2] + R[row * 4 + 3];
        float sum = (x.x + x.y) + (x.z + x.w), inv = sum > 0.0 ? 1.0 / sum : M_NAN;
        int ob = (bh * pc.Lq + i0 + row) * HD + col0;
        // an if, not a continue: spirv-opt does not unroll a loop with a
        // continue, and acc indexed by a loop variable would go to memory
        [[unroll]] for (int c = 0; c < CW; c++) {
            int col = c * 64 + tx * 4;
            vec4 o = acc[r][c] * inv;
            if (row < bq) {
                if (DTO == DT_F32) {
                    o4.v[(ob + col) >> 2] = o;
                } else {
                    [[unroll]] for (int k = 0; k < 4; k++) stf_3(DTO, ob + col + k, o[k]);
                }
            }
        }
    }
}

void main()
{
    uint bhn = pc.items / uint(pc.nqb * NSPLIT);
    for (uint w = gl_WorkGroupID.x; w < pc.items; w += gl_NumWorkGroups.x) {
        // the last query blocks (the longest under causal) go first; the
        // slices of one query block are neighbours (they share Q and K)
        uint wb = w / uint(NSPLIT);
        int col0 = int(w % uint(NSPLIT)) * HV;
        int bh = int(wb % bhn), qblk = pc.nqb - 1 - int(wb / bhn);
        int b = bh / pc.Hq, h = bh % pc.Hq, kh = h / pc.grp, i0 = qblk * BQ;
        int bq = min(BQ, pc.Lq - i0);
        int kend = pc.causal != 0u ? min(pc.Lk, i0 + bq) : pc.Lk;
        int qb = pc.oq + b * pc.sq[0] + h * pc.sq[1] + i0 * pc.sq[2];
        int kb = pc.ok + b * pc.sk[0] + kh * pc.sk[1], vb = pc.ov + b * pc.sv[0] + kh * pc.sv[1] + col0;
        vec4 acc[4][CW], m = vec4(M_NINF), l = vec4(0.0), f[4];
        [[unroll]] for (int r = 0; r < 4; r++)
            [[unroll]] for (int c = 0; c < CW; c++) acc[r][c] = vec4(0.0);
        if (kend > 0) fetch_qk(qb, kb, bq, min(BK, kend), 0, f);
        for (int j0 = 0; j0 < kend; j0 += BK) {
            int nk = min(BK, kend - j0), nkn = max(0, min(BK, kend - j0 - BK));
            vec4 s[4];
            block_scores(qb, kb + j0 * pc.sk[2], vb + j0 * pc.sv[2], bq, nk, f, s);
            mask_scores(i0, j0, nk, s);
            online_softmax(block_max(s), s, m, l, acc);
            block_pv(vb + j0 * pc.sv[2], nk, qb, bq, kb + (j0 + BK) * pc.sk[2], nkn, f, acc);
        }
        store_rows(bh, i0, bq, col0, l, acc);
    }
}
