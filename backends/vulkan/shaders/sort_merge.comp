#version 450
// sort_merge.comp - the passes after sort.comp's SORT_RUNS for rows longer
// than a workgroup sorts.  MODE SORT_MERGE merges each pair of sorted runs
// of width w (binding 1) into runs of 2w (binding 2): every element finds
// its place as its rank in its own run plus the number of elements of the
// other run below it (a binary search; (key, index) pairs are distinct, so
// no two land on the same place).  MODE SORT_VALUES / SORT_INDICES writes
// the first olen of each fully sorted row (binding 1) into the node
// (binding 2), taking values from x (binding 0).  Runs: keys u64 at [0, n),
// indices u32 at [2n, 3n).
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint DT = 0;
layout(constant_id = 1) const uint MODE = 0;

layout(push_constant) uniform PC {
    uint total;     // invocations: n to merge, rows * olen to write
    int n, len, w, olen, inner, off_x;
} pc;

DECL_IO(0)
DECL_BUF(1)
DECL_BUF(2)
#include "sort.glsl"
DEF_MOVE(2)

// elements of run [lo, hi) below (k, x)
int count_below(int lo, int hi, uint64_t k, uint x)
{
    int a = lo, b = hi;
    while (a < b) {
        int mid = (a + b) >> 1;
        if (key_less(u64_1.v[mid], u32_1.v[2 * pc.n + mid], k, x)) a = mid + 1;
        else b = mid;
    }
    return a - lo;
}

void merge(int i)
{
    int row = i / pc.len, c = i % pc.len, base = row * pc.len;
    int a0 = ((c / pc.w) & ~1) * pc.w, a1 = min(a0 + pc.w, pc.len), b1 = min(a1 + pc.w, pc.len);
    uint64_t k = u64_1.v[i];
    uint x = u32_1.v[2 * pc.n + i];
    int pos = c;                              // a run without a partner stays
    if (a1 < pc.len) {
        if (c < a1) pos = c + count_below(base + a1, base + b1, k, x);
        else pos = a0 + (c - a1) + count_below(base + a0, base + a1, k, x);
    }
    u64_2.v[base + pos] = k;
    u32_2.v[2 * pc.n + base + pos] = x;
}

void emit(int o)
{
    int row = o / pc.olen, c = o % pc.olen;
    uint x = u32_1.v[2 * pc.n + row * pc.len + c];
    int dst = (row / pc.inner) * pc.olen * pc.inner + c * pc.inner + row % pc.inner;
    if (MODE == SORT_INDICES) u64_2.v[dst] = uint64_t(x);
    else move_elem(pc.off_x + row * pc.len + int(x), dst);
}

void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < pc.total; i += stride) {
        if (MODE == SORT_MERGE) merge(int(i));
        else emit(int(i));
    }
}
