#version 450
// sort.comp - bitonic sort of rows (or blocks of long rows) in shared
// memory.  Rows of x are contiguous (len elements from off_x); each is a
// segment of N (a power of two >= len) padded with keys above every real
// one, S/N segments per workgroup.  Only S (the shared arrays' size) and
// the dtype and mode are specialised; N and the direction are push
// constants, so few pipelines serve every row length.  Sorted by (key, index): see sort.glsl.
// MODE SORT_VALUES / SORT_INDICES writes the first olen of each sorted row
// into the node (axis back in place: row r = outer * inner + j goes to
// outer * olen * inner + c * inner + j); SORT_RUNS writes each sorted block
// of N as (key, index) for sort_merge.comp (keys as u64 at [0, n), indices
// as u32 at [2n, 3n) of binding 1).
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint DT = 0;
layout(constant_id = 1) const uint MODE = 0;
layout(constant_id = 2) const uint S = 512;     // a power of two >= 512

layout(push_constant) uniform PC {
    uint nseg;      // rows * nblocks
    int len, off_x, olen, inner, nblocks, ngroups, n;
    uint N;         // a power of two <= S
    uint desc;
} pc;

DECL_IO(0)
DECL_BUF(1)
#include "sort.glsl"
DEF_MOVE(1)

shared uint64_t sk[S];
shared uint si[S];

// segment and column of shared slot e in workgroup tile g
void place(uint g, uint e, out uint seg, out uint col)
{
    seg = g * (S / pc.N) + e / pc.N;
    col = (seg % uint(pc.nblocks)) * pc.N + e % pc.N;
}

void load(uint g)
{
    for (uint e = gl_LocalInvocationID.x; e < S; e += 256u) {
        uint seg, col;
        place(g, e, seg, col);
        int row = int(seg / uint(pc.nblocks));
        bool real = seg < pc.nseg && col < uint(pc.len);
        sk[e] = real ? sort_key(pc.off_x + row * pc.len + int(col), pc.desc != 0u) : ~uint64_t(0);
        si[e] = col;    // pads get columns >= len: after every real key, even an equal one
    }
}

void bitonic()
{
    for (uint k = 2u; k <= pc.N; k <<= 1)
        for (uint j = k >> 1; j > 0u; j >>= 1) {
            for (uint p = gl_LocalInvocationID.x; p < S / 2u; p += 256u) {
                uint l = ((p & ~(j - 1u)) << 1) | (p & (j - 1u)), m = l + j;
                // the last merge of a segment is ascending, whatever its place
                bool up = k == pc.N || (l & k) == 0u;
                uint64_t ka = sk[l], kb = sk[m];
                uint ia = si[l], ib = si[m];
                if (key_less(kb, ib, ka, ia) == up) {
                    sk[l] = kb; sk[m] = ka;
                    si[l] = ib; si[m] = ia;
                }
            }
            barrier();
        }
}

void store(uint g)
{
    for (uint e = gl_LocalInvocationID.x; e < S; e += 256u) {
        uint seg, col;
        place(g, e, seg, col);
        if (seg >= pc.nseg) continue;
        int row = int(seg / uint(pc.nblocks)), c = int(col);
        if (MODE == SORT_RUNS) {
            if (c >= pc.len) continue;
            int at = row * pc.len + c;
            u64_1.v[at] = sk[e];
            u32_1.v[2 * pc.n + at] = si[e];
            continue;
        }
        if (c >= pc.olen) continue;
        int dst = (row / pc.inner) * pc.olen * pc.inner + c * pc.inner + row % pc.inner;
        if (MODE == SORT_INDICES) u64_1.v[dst] = uint64_t(si[e]);
        else move_elem(pc.off_x + row * pc.len + int(si[e]), dst);
    }
}

void main()
{
    for (uint g = gl_WorkGroupID.x; g < uint(pc.ngroups); g += gl_NumWorkGroups.x) {
        load(g);
        barrier();
        bitonic();
        store(g);
        barrier();      // the next tile's loads overwrite shared memory
    }
}
