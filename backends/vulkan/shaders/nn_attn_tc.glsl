// nn_attn_tc.glsl - what the tensor-core attention kernels share
// (nn_attn_coop.glsl with nn_attn_coop_regs.glsl, nn_attn_khr.glsl): the
// NaN-propagating max, the K and V tiles from global memory into registers
// and from there into shared memory, the subgroup barrier, and the work
// item a workgroup takes.  The includer declares the k8 and v8 buffers, the
// shared tile KV (BK rows of KS uvec4) and NT, NL, CPR, KS, BQ; FETCH_COLS,
// where it defines it, is a further condition on a tile's chunk c (zeros
// where it fails: nn_attn_khr's head dims past D).  The work item is a
// macro, so the SPIR-V is what the code written out in each main() gave.
#define M_NAN uintBitsToFloat(0x7fc00000u)
#define M_NINF uintBitsToFloat(0xff800000u)

float nmax(float a, float b) { return b > a || isnan(b) ? b : a; }

#ifndef FETCH_COLS
#define FETCH_COLS
#endif
// the tile of up to nrows rows from element e0 (row stride rs) into g;
// rows past nrows are zeros
#define FETCH(NAME, BUF) \
void NAME(int e0, int rs, int nrows, out uvec4 g[NL]) { \
    int t = int(gl_LocalInvocationID.x); \
    [[unroll]] for (int u = 0; u < NL; u++) { \
        int x = t + u * NT, row = x / CPR, c = x % CPR; \
        g[u] = row < nrows FETCH_COLS ? BUF.v[(e0 + row * rs + c * 8) >> 3] : uvec4(0u); \
    } \
}
FETCH(fetch_k, k8)
FETCH(fetch_v, v8)

// a tile from registers to shared memory
void put(uvec4 g[NL])
{
    int t = int(gl_LocalInvocationID.x);
    [[unroll]] for (int u = 0; u < NL; u++) {
        int x = t + u * NT;
        KV[(x / CPR) * KS + x % CPR] = g[u];
    }
}

void sg_barrier()
{
    controlBarrier(gl_ScopeSubgroup, gl_ScopeSubgroup, gl_StorageSemanticsShared, gl_SemanticsAcquireRelease);
}

// the components of a 16 x 16 f32 matrix per invocation (subgroups of 32)
#define NC 8

// ATTN_ITEM(w): work item w of pc.items (bhn = pc.items / pc.nqb), the
// last query blocks (the longest under causal) first: bh = batch * Hq +
// query head hq, b, kh the key/value head, the block's first query i0 and
// its bq rows, kend the keys visible to it, and where its q (qb), k (kb)
// and v (vb) start
#define ATTN_ITEM(w) \
    int bh = int(w % bhn), qblk = pc.nqb - 1 - int(w / bhn); \
    int b = bh / pc.Hq, hq = bh % pc.Hq, kh = hq / pc.grp, i0 = qblk * BQ; \
    int bq = min(BQ, pc.Lq - i0); \
    int kend = pc.causal != 0u ? min(pc.Lk, i0 + bq) : pc.Lk; \
    int qb = pc.oq + b * pc.sq[0] + hq * pc.sq[1] + i0 * pc.sq[2]; \
    int kb = pc.ok + b * pc.sk[0] + kh * pc.sk[1], vb = pc.ov + b * pc.sv[0] + kh * pc.sv[1]
