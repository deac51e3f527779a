// nn_attn.glsl - scaled dot-product attention, FlashAttention style: one
// workgroup per (batch, head, block of BQ queries) folds in blocks of BK
// keys with an online softmax, so no L x L score matrix exists anywhere.
//
// Per key block: the BQ x BK scores (scale * q.k, then mask and causal
// limit) go to shared memory; one thread per query row turns them into
// probabilities P = exp(S - m'), with m' the running maximum, and keeps
// the running sum l and the factor exp(m - m') that rescales the row's
// output so far; then every thread updates its part of the BQ x Dv output
// held in registers (O = O * factor + P V).  At the end O /= l.  The same
// recurrence as the CPU kernel (backends/cpu/nn_attention.c), in f32.
// Q rows sit in shared memory and K blocks pass through it (loaded along
// rows, so reads coalesce); V is read from global memory, neighbouring
// threads on neighbouring columns.  Each thread owns RPT query rows x CPT
// output columns (lane, lane + 32, ...).  q, k, v and the mask may have
// any strides (broadcast masks have stride 0).  D and Dv up to DMAX:
// nn_attn.comp (256, 16 queries a workgroup) and nn_attn512.comp (512, 8
// queries) define it and BQ.  Dtypes are specialization
// constants (loads fold to one path); the mask kind and causal flag are
// push constants, read once per score, so one pipeline per dtype set.
// Bindings: 0 = q, 1 = k, 2 = v, 3 = mask, 4 = output (contiguous).
#include "common.glsl"

#define BK 32
#define LANES 32
#define RG 4                  // row groups: 128 threads = 4 x 32 lanes
#define RPT (BQ / RG)         // rows per thread
#define CPT (DMAX / LANES)    // output columns per thread
#define KC 32                 // dims of a K block staged at a time

layout(local_size_x = 128) in;
layout(constant_id = 0) const uint DTQ = 0;
layout(constant_id = 1) const uint DTK = 0;
layout(constant_id = 2) const uint DTV = 0;
layout(constant_id = 3) const uint DTO = 0;

layout(push_constant) uniform PC {
    int Hq, Lq, Lk, D, Dv, nqb, grp;   // grp = Hq / Hk
    uint items;                         // B * Hq * nqb
    float scale;
    uint mask, causal;                  // mask 0 none, 1 additive f32, 2 bool
    int oq, ok, ov, om;
    int sq[4], sk[4], sv[4], sm[4];
} pc;

DECL_IO(0)
DECL_IO(1)
DECL_IO(2)
DECL_IO(3)
DECL_IO(4)

#define M_NAN uintBitsToFloat(0x7fc00000u)
#define M_NINF uintBitsToFloat(0xff800000u)

shared float qs[BQ * DMAX];
shared float ss[BQ * BK];
shared float ks[BK * (KC + 1)];   // padded: lane c reads row c without bank conflicts
shared float fac[BQ], ms[BQ], ls[BQ];

float score(int b, int h, int i, int j, float s)
{
    if (pc.mask == 1u) s += ldf_3(DT_F32, pc.om + b * pc.sm[0] + h * pc.sm[1] + i * pc.sm[2] + j * pc.sm[3]);
    if (pc.mask == 2u && uint(u8_3.v[pc.om + b * pc.sm[0] + h * pc.sm[1] + i * pc.sm[2] + j * pc.sm[3]]) == 0u)
        s = M_NINF;
    if (pc.causal != 0u && j > i) s = M_NINF;
    return s;
}

// scores of this thread's RPT rows against key j0 + lane (-inf past kend
// and for rows past the last query, whose mask must not be read).  K comes
// through shared memory KC dims at a time, loaded along its rows, so the
// global reads coalesce where K's last dim is contiguous.
void block_scores(int b, int h, int kh, int i0, int bq, int j0, int kend)
{
    uint t = gl_LocalInvocationID.x, lane = t % LANES, rg = t / LANES;
    int kb = pc.ok + b * pc.sk[0] + kh * pc.sk[1];
    float s[RPT];
    [[unroll]] for (int r = 0; r < RPT; r++) s[r] = 0.0;
    for (int e0 = 0; e0 < pc.D; e0 += KC) {
        for (uint x = t; x < BK * KC; x += gl_WorkGroupSize.x) {
            int c = int(x) / KC, e = e0 + int(x) % KC, j = j0 + c;
            ks[c * (KC + 1) + int(x) % KC] = j < kend && e < pc.D ? ldf_1(DTK, kb + j * pc.sk[2] + e * pc.sk[3]) : 0.0;
        }
        barrier();
        int ne = min(KC, pc.D - e0);
        for (int e = 0; e < ne; e++) {
            float kv = ks[int(lane) * (KC + 1) + e];
            [[unroll]] for (int r = 0; r < RPT; r++) s[r] += qs[(rg + r * RG) * DMAX + e0 + e] * kv;
        }
        barrier();
    }
    int j = j0 + int(lane);
    [[unroll]] for (int r = 0; r < RPT; r++) {
        int row = int(rg) + r * RG;
        float v = j < kend && row < bq ? score(b, h, i0 + row, j, s[r] * pc.scale) : M_NINF;
        ss[row * BK + int(lane)] = v;
    }
}

// the online-softmax step for query row `row` (one thread each)
void row_update(int row)
{
    float mx = M_NINF;
    bool nan = false;
    for (int c = 0; c < BK; c++) {
        float v = ss[row * BK + c];
        if (isnan(v)) nan = true;
        else mx = max(mx, v);
    }
    if (nan) mx = M_NAN;
    float mold = ms[row];
    float mnew = mx > mold || isnan(mx) ? mx : mold;
    if (mnew == M_NINF) {   // nothing visible yet: this block adds nothing
        for (int c = 0; c < BK; c++) ss[row * BK + c] = 0.0;
        fac[row] = 1.0;
        return;
    }
    float sum = 0.0;
    for (int c = 0; c < BK; c++) {
        float p = exp(ss[row * BK + c] - mnew);
        ss[row * BK + c] = p;
        sum += p;
    }
    float f = mold == M_NINF ? 0.0 : exp(mold - mnew);
    fac[row] = f;
    ls[row] = ls[row] * f + sum;
    ms[row] = mnew;
}

void main()
{
    uint t = gl_LocalInvocationID.x, lane = t % LANES, rg = t / LANES;
    for (uint w = gl_WorkGroupID.x; w < pc.items; w += gl_NumWorkGroups.x) {
        int qb = int(w % uint(pc.nqb)), bh = int(w / uint(pc.nqb));
        int b = bh / pc.Hq, h = bh % pc.Hq, kh = h / pc.grp, i0 = qb * BQ;
        int bq = min(BQ, pc.Lq - i0);
        int kend = pc.causal != 0u ? min(pc.Lk, i0 + bq) : pc.Lk;
        for (uint x = t; x < BQ * DMAX; x += gl_WorkGroupSize.x) {
            int row = int(x) / DMAX, e = int(x) % DMAX;
            float q = 0.0;
            if (row < bq && e < pc.D)
                q = ldf_0(DTQ, pc.oq + b * pc.sq[0] + h * pc.sq[1] + (i0 + row) * pc.sq[2] + e * pc.sq[3]);
            qs[x] = q;
        }
        if (t < BQ) { ms[t] = M_NINF; ls[t] = 0.0; }
        float acc[RPT][CPT];
        [[unroll]] for (int r = 0; r < RPT; r++)
            [[unroll]] for (int c = 0; c < CPT; c++) acc[r][c] = 0.0;
        barrier();
        for (int j0 = 0; j0 < kend; j0 += BK) {
            block_scores(b, h, kh, i0, bq, j0, kend);
            barrier();
            if (t < BQ) row_update(int(t));
            barrier();
            int nk = min(BK, kend - j0);
            [[unroll]] for (int r = 0; r < RPT; r++) {
                float f = fac[rg + r * RG];
                [[unroll]] for (int c = 0; c < CPT; c++) acc[r][c] *= f;
            }
            for (int c = 0; c < nk; c++) {
                int vb = pc.ov + b * pc.sv[0] + kh * pc.sv[1] + (j0 + c) * pc.sv[2];
                [[unroll]] for (int k = 0; k < CPT; k++) {
                    int d = int(lane) + k * LANES;
                    if (d >= pc.Dv) break;
                    float vv = ldf_2(DTV, vb + d * pc.sv[3]);
                    [[unroll]] for (int r = 0; r < RPT; r++) acc[r][k] += ss[(rg + r * RG) * BK + c] * vv;
                }
            }
            barrier();   // ss and fac are rewritten by the next block
        }
        [[unroll]] for (int r = 0; r < RPT; r++) {
            int row = int(rg) + r * RG;
            if (row >= bq) continue;
            float l = ls[row], inv = l > 0.0 ? 1.0 / l : M_NAN;
            int ob = ((bh * pc.Lq) + i0 + row) * pc.Dv;
            [[unroll]] for (int k = 0; k < CPT; k++) {
                int d = int(lane) + k * LANES;
                if (d < pc.Dv) stf_4(DTO, ob + d, acc[r][k] * inv);
            }
        }
        barrier();   // qs, ms, ls are rewritten for the next item
    }
}
