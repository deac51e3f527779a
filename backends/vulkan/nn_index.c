/* nn_index.c - sort, argsort, topk, scatter and scatter_add on Vulkan
 * (the node contract is core/ops_nn.h; the CPU kernels in
 * backends/cpu/nn_index.c define the results, matched bit for bit).
 *
 * Sorting works on rows: x is viewed with the axis last and, unless it
 * already is laid out that way, moved into a contiguous [rows, len]
 * scratch buffer.  Rows that fit a workgroup (up to 2048 elements, 1024 on
 * devices with little shared memory) are bitonic-sorted in shared memory
 * by sort.comp, several short rows per workgroup, and written straight
 * into the node.  Longer rows are sorted in blocks into (key, index) runs,
 * merged pairwise by sort_merge.comp until one run spans the row, then
 * written out.  topk is a sort that writes the first k of each row.
 *
 * Scatter copies a into the node, then scatter.comp walks each fiber of
 * idx (its positions along the axis) in order in one invocation, which
 * gives the CPU's last-write-wins and summation order exactly.  Fibers of
 * SCATTER_SORT_MIN positions or more are instead argsorted by destination
 * (the sort above, stable) and each run of one destination is applied by
 * one invocation, in the same order: parallel over destinations.  Scratch
 * buffers are the backend's own allocations, freed once the batch that
 * uses them completes (lm_vk_free defers while recording). */
#include <stdio.h>
#include <string.h>
#include "backends/vulkan/vk.h"

#define SORT_LOCAL 256
#define SORT_TILE 512           /* elements per workgroup for short rows */
#define SORT_PAIR_BYTES 12      /* a u64 key and a u32 index */
/* fibers at least this long are sorted by destination rather than walked
 * by one invocation: a serial walk of a few hundred steps costs less than
 * the sort's dispatches */
#define SCATTER_SORT_MIN 256

typedef struct sort_pc {
    uint32_t nseg;
    int32_t len, off_x, olen, inner, nblocks, ngroups, n;
    uint32_t N, desc;
} sort_pc;

typedef struct merge_pc {
    uint32_t total;
    int32_t n, len, w, olen, inner, off_x;
} merge_pc;

typedef struct scatter_pc {
    uint32_t nfib;
    int32_t ndim, axis, T, len, off_i, off_s;
    int32_t ishape[8], oshape[8];
} scatter_pc;

/* a sort node's rows: the axis, its length, the rows and what is written */
typedef struct sort_geom {
    const lm_array *x;
    lm_dtype dt;                /* x's */
    int axis;
    int64_t len, rows, inner, olen;
    bool desc, indices;
    int64_t st[LM_MAX_DIMS];    /* strides of x laid out as [other dims..., axis] */
    bool in_place;              /* x already has that layout */
} sort_geom;

static bool is_sort(lm_op op)
{
    return op == LM_OP_SORT || op == LM_OP_ARGSORT || op == LM_OP_TOPK;
}

static void sort_geometry(const lm_array *node, sort_geom *g)
{
    const lm_array *x = node->inputs[0];
    const lm_params *p = &node->params;
    bool topk = node->op == LM_OP_TOPK;
    g->x = x;
    g->dt = x->dtype;
    g->axis = (int)p->i[0];
    g->len = x->shape[g->axis];
    g->rows = g->len ? x->size / g->len : 0;
    g->inner = 1;
    for (int d = g->axis + 1; d < x->ndim; d++) g->inner *= x->shape[d];
    g->olen = topk ? p->i[1] : g->len;
    g->desc = topk ? p->i[2] != 0 : p->i[1] != 0;
    g->indices = node->op == LM_OP_ARGSORT || (topk && p->i[3] == 1);
    int64_t s = g->len;
    g->st[g->axis] = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        if (d == g->axis) continue;
        g->st[d] = s;
        s *= x->shape[d];
    }
    g->in_place = true;
    for (int d = 0; d < x->ndim; d++)
        if (x->shape[d] > 1 && x->strides[d] != g->st[d]) g->in_place = false;
}

/* the longest row one workgroup sorts: S keys and indices in shared memory */
static int64_t sort_cap(lm_vk_dev *v)
{
    return v->feat.max_shared >= 2048 * SORT_PAIR_BYTES ? 2048 : 1024;
}

static int64_t pow2_at_least(int64_t n)
{
    int64_t p = 1;
    while (p < n) p <<= 1;
    return p;
}

/* lm_vk_move(a -> strides st) runs on the elementwise kernel, which keeps
 * at most EW_MAXDIM dims after merging */
static bool move_ok(const lm_array *a, const int64_t *st)
{
    int64_t shape[LM_MAX_DIMS], s[2][LM_MAX_DIMS];
    memcpy(shape, a->shape, sizeof shape);
    memcpy(s[0], a->strides, sizeof s[0]);
    memcpy(s[1], st, sizeof s[1]);
    return lm_vk_collapse(a->ndim, shape, 2, s) <= EW_MAXDIM;
}


/* rows x len of (key, index) fit the multi-pass sort's scratch and its
 * 32-bit word addressing (keys and indices up to 3n words) */
static bool rows_ok(lm_vk_dev *v, int64_t rows, int64_t len)
{
    int64_t n = rows * len;
    return len <= sort_cap(v) || ((uint64_t)n * SORT_PAIR_BYTES <= v->feat.max_range && 3 * n < INT32_MAX);
}

static bool supports_sort(lm_vk_dev *v, const lm_array *node)
{
    if (node->ninputs != 1 || node->params.i[0] < 0 || node->params.i[0] >= node->inputs[0]->ndim)
        return false;
    sort_geom g;
    sort_geometry(node, &g);
    int64_t n = g.rows * g.len;
    uint64_t xbytes = (uint64_t)n * lm_dtype_size(g.x->dtype);
    if (!g.in_place && (!move_ok(g.x, g.st) || xbytes > v->feat.max_range)) return false;
    return rows_ok(v, g.rows, g.len);
}

static bool supports_scatter(lm_vk_dev *v, const lm_array *node)
{
    if (node->ninputs != 3) return false;
    const lm_array *a = node->inputs[0], *ix = node->inputs[1], *src = node->inputs[2];
    if (ix->dtype != LM_I64 || src->dtype != node->dtype || a->dtype != node->dtype) return false;
    if (ix->ndim != node->ndim || src->ndim != node->ndim) return false;
    if (node->params.i[0] < 0 || node->params.i[0] >= node->ndim) return false;
    /* f64 sums would need double arithmetic in the shader: the CPU's */
    if (node->op == LM_OP_SCATTER_ADD && node->dtype == LM_F64) return false;
    int64_t st[LM_MAX_DIMS];
    lm_vk_contiguous_strides(node->ndim, node->shape, st);
    if (!move_ok(a, st)) return false;
    lm_vk_contiguous_strides(ix->ndim, ix->shape, st);
    uint64_t n = (uint64_t)ix->size;
    if (!lm_array_is_contiguous(ix) && (!move_ok(ix, st) || n * 8 > v->feat.max_range)) return false;
    if (!lm_array_is_contiguous(src) && (!move_ok(src, st) || n * lm_dtype_size(src->dtype) > v->feat.max_range))
        return false;
    int64_t T = ix->shape[node->params.i[0]];
    if (T >= SCATTER_SORT_MIN)     /* normalised indices and their order: i64 each */
        return n * 8 <= v->feat.max_range && rows_ok(v, (int64_t)n / T, T);
    return true;
}

bool lm_vk_supports_nn_index(lm_vk_dev *v, const lm_array *node)
{
    if (is_sort(node->op)) return supports_sort(v, node);
    if (node->op == LM_OP_SCATTER || node->op == LM_OP_SCATTER_ADD) return supports_scatter(v, node);
    return false;
}

/* ------------------------------------------------------------------ sort */

static lm_status scratch(lm_vk_dev *v, uint64_t bytes, lm_vk_mem **out)
{
    void *h = NULL, *host = NULL;
    lm_status st = lm_vk_alloc(v->dev, (size_t)bytes, &h, &host);
    *out = h;
    return st;
}

static void scratch_free(lm_vk_dev *v, lm_vk_mem *m)
{
    if (m) lm_vk_free(v->dev, m);
}

/* rows that fit one workgroup: sorted and written in one dispatch */
static lm_status sort_short(lm_vk_dev *v, const sort_geom *g, const lm_vk_mem *xm, int64_t off_x,
                            const lm_vk_mem *out)
{
    int64_t N = pow2_at_least(g->len), S = N > SORT_TILE ? N : SORT_TILE;
    int64_t per = S / N, ngroups = (g->rows + per - 1) / per;
    sort_pc pc = {(uint32_t)g->rows, (int32_t)g->len, (int32_t)off_x, (int32_t)g->olen,
                  (int32_t)g->inner, 1, (int32_t)ngroups, (int32_t)(g->rows * g->len), (uint32_t)N, g->desc};
    uint32_t spec[3] = {g->dt, g->indices ? SORT_INDICES : SORT_VALUES, (uint32_t)S};
    lm_vk_arg args[2] = {{xm, false}, {out, true}};
    return lm_vk_dispatch(v, "sort", spec, 3, args, 2, &pc, sizeof pc,
                          lm_vk_groups(v, (uint64_t)ngroups, 1), 1, 1);
}

/* longer rows: blocks of S sorted into runs, merged pairwise, written out */
static lm_status sort_long(lm_vk_dev *v, const sort_geom *g, const lm_vk_mem *xm, int64_t off_x,
                           const lm_vk_mem *out)
{
    int64_t S = sort_cap(v), n = g->rows * g->len, nblocks = (g->len + S - 1) / S;
    lm_vk_mem *run[2] = {NULL, NULL};
    lm_status st = scratch(v, (uint64_t)n * SORT_PAIR_BYTES, &run[0]);
    if (st == LM_OK) st = scratch(v, (uint64_t)n * SORT_PAIR_BYTES, &run[1]);
    if (st != LM_OK) goto done;
    sort_pc pc = {(uint32_t)(g->rows * nblocks), (int32_t)g->len, (int32_t)off_x, (int32_t)g->olen,
                  (int32_t)g->inner, (int32_t)nblocks, (int32_t)(g->rows * nblocks), (int32_t)n,
                  (uint32_t)S, g->desc};
    uint32_t spec[3] = {g->dt, SORT_RUNS, (uint32_t)S};
    lm_vk_arg args[2] = {{xm, false}, {run[0], true}};
    st = lm_vk_dispatch(v, "sort", spec, 3, args, 2, &pc, sizeof pc,
                        lm_vk_groups(v, (uint64_t)pc.ngroups, 1), 1, 1);
    int cur = 0;
    merge_pc mp = {(uint32_t)n, (int32_t)n, (int32_t)g->len, 0, (int32_t)g->olen, (int32_t)g->inner,
                   (int32_t)off_x};
    uint32_t mspec[2] = {g->dt, SORT_MERGE};
    for (int64_t w = S; st == LM_OK && w < g->len; w *= 2, cur ^= 1) {
        mp.w = (int32_t)w;
        lm_vk_arg margs[3] = {{xm, false}, {run[cur], false}, {run[cur ^ 1], true}};
        st = lm_vk_dispatch(v, "sort_merge", mspec, 2, margs, 3, &mp, sizeof mp,
                            lm_vk_groups(v, (uint64_t)n, 256), 1, 1);
    }
    if (st == LM_OK) {
        mp.total = (uint32_t)(g->rows * g->olen);
        mspec[1] = g->indices ? SORT_INDICES : SORT_VALUES;
        lm_vk_arg eargs[3] = {{xm, false}, {run[cur], false}, {out, true}};
        st = lm_vk_dispatch(v, "sort_merge", mspec, 2, eargs, 3, &mp, sizeof mp,
                            lm_vk_groups(v, mp.total, 256), 1, 1);
    }
done:
    scratch_free(v, run[0]);
    scratch_free(v, run[1]);
    return st;
}

/* rows of xm (contiguous from off_x) sorted into out as g says */
static lm_status sort_rows(lm_vk_dev *v, const sort_geom *g, const lm_vk_mem *xm, int64_t off_x,
                           const lm_vk_mem *out)
{
    return g->len <= sort_cap(v) ? sort_short(v, g, xm, off_x, out) : sort_long(v, g, xm, off_x, out);
}

static lm_status run_sort(lm_vk_dev *v, lm_array *node)
{
    sort_geom g;
    sort_geometry(node, &g);
    if (g.rows == 0 || g.len == 0 || g.olen == 0) return LM_OK;
    const lm_vk_mem *xm = lm_vk_mem_of(g.x);
    int64_t off_x = g.x->offset;
    lm_vk_mem *tmp = NULL;
    lm_status st = LM_OK;
    if (!g.in_place) {      /* one strided move puts every row in place */
        st = scratch(v, (uint64_t)(g.rows * g.len) * lm_dtype_size(g.dt), &tmp);
        if (st == LM_OK) st = lm_vk_move(v, g.x, tmp, g.dt, 0, g.st);
        xm = tmp;
        off_x = 0;
    }
    if (st == LM_OK) st = sort_rows(v, &g, xm, off_x, lm_vk_mem_of(node));
    scratch_free(v, tmp);
    return st;
}

/* --------------------------------------------------------------- scatter */

/* a contiguous version of a with idx's shape: a itself, or a scratch copy */
static lm_status dense(lm_vk_dev *v, const lm_array *a, const lm_vk_mem **m, int64_t *off, lm_vk_mem **own)
{
    *own = NULL;
    *m = lm_vk_mem_of(a);
    *off = a->offset;
    if (lm_array_is_contiguous(a)) return LM_OK;
    int64_t st[LM_MAX_DIMS];
    lm_vk_contiguous_strides(a->ndim, a->shape, st);
    lm_status s = scratch(v, (uint64_t)a->size * lm_dtype_size(a->dtype), own);
    if (s != LM_OK) return s;
    *m = *own;
    *off = 0;
    return lm_vk_move(v, a, *own, a->dtype, 0, st);
}

static void scatter_geometry(const lm_array *node, int64_t off_i, int64_t off_s, scatter_pc *pc)
{
    const lm_array *ix = node->inputs[1];
    int axis = (int)node->params.i[0];
    memset(pc, 0, sizeof *pc);
    pc->T = (int32_t)ix->shape[axis];
    pc->nfib = (uint32_t)(ix->size / pc->T);
    pc->ndim = node->ndim;
    pc->axis = axis;
    pc->len = (int32_t)node->shape[axis];
    pc->off_i = (int32_t)off_i;
    pc->off_s = (int32_t)off_s;
    for (int d = 0; d < node->ndim; d++) {
        pc->ishape[d] = (int32_t)ix->shape[d];
        pc->oshape[d] = (int32_t)node->shape[d];
    }
}

/* long fibers: indices normalised into rows, argsorted by destination,
 * then one invocation per run of a destination (scatter.comp) */
static lm_status scatter_sorted(lm_vk_dev *v, lm_array *node, const scatter_pc *pc, const lm_vk_mem *im,
                                const lm_vk_mem *sm)
{
    uint64_t n = (uint64_t)pc->nfib * (uint64_t)pc->T;
    uint32_t add = node->op == LM_OP_SCATTER_ADD;
    lm_vk_mem *norm = NULL, *order = NULL;
    lm_status st = scratch(v, n * 8, &norm);
    if (st == LM_OK) st = scratch(v, n * 8, &order);
    uint32_t spec[3] = {node->dtype, add, SC_NORM};
    lm_vk_arg nargs[4] = {{im, false}, {NULL, false}, {norm, true}, {v->status, true}};
    if (st == LM_OK)
        st = lm_vk_dispatch(v, "scatter", spec, 3, nargs, 4, pc, sizeof *pc, lm_vk_groups(v, n, 64), 1, 1);
    sort_geom g = {.dt = LM_I64, .rows = pc->nfib, .len = pc->T, .inner = 1, .olen = pc->T, .indices = true};
    if (st == LM_OK) st = sort_rows(v, &g, norm, 0, order);
    spec[2] = SC_APPLY;
    lm_vk_arg aargs[4] = {{norm, false}, {sm, false}, {lm_vk_mem_of(node), true}, {order, false}};
    if (st == LM_OK)
        st = lm_vk_dispatch(v, "scatter", spec, 3, aargs, 4, pc, sizeof *pc, lm_vk_groups(v, n, 64), 1, 1);
    scratch_free(v, norm);
    scratch_free(v, order);
    return st;
}

static lm_status scatter_dispatch(lm_vk_dev *v, lm_array *node, const lm_vk_mem *im, int64_t off_i,
                                  const lm_vk_mem *sm, int64_t off_s)
{
    scatter_pc pc;
    scatter_geometry(node, off_i, off_s, &pc);
    v->status_armed = true;
    snprintf(v->status_op, sizeof v->status_op, "%s", lm_op_name(node->op));
    v->status_axis = pc.axis;
    v->status_len = pc.len;
    if (pc.T >= SCATTER_SORT_MIN) return scatter_sorted(v, node, &pc, im, sm);
    uint32_t spec[3] = {node->dtype, node->op == LM_OP_SCATTER_ADD, SC_DIRECT};
    lm_vk_arg args[4] = {{im, false}, {sm, false}, {lm_vk_mem_of(node), true}, {v->status, true}};
    return lm_vk_dispatch(v, "scatter", spec, 3, args, 4, &pc, sizeof pc,
                          lm_vk_groups(v, pc.nfib, 64), 1, 1);
}

static lm_status run_scatter(lm_vk_dev *v, lm_array *node)
{
    const lm_array *a = node->inputs[0], *ix = node->inputs[1], *src = node->inputs[2];
    int64_t st[LM_MAX_DIMS];
    lm_vk_contiguous_strides(node->ndim, node->shape, st);
    lm_status s = lm_vk_move(v, a, lm_vk_mem_of(node), node->dtype, 0, st);
    if (s != LM_OK || ix->size == 0) return s;
    if ((s = lm_vk_status_init(v)) != LM_OK) return s;
    const lm_vk_mem *im, *sm;
    int64_t off_i, off_s;
    lm_vk_mem *own_i = NULL, *own_s = NULL;
    s = dense(v, ix, &im, &off_i, &own_i);
    if (s == LM_OK) s = dense(v, src, &sm, &off_s, &own_s);
    if (s == LM_OK) s = scatter_dispatch(v, node, im, off_i, sm, off_s);
    scratch_free(v, own_i);
    scratch_free(v, own_s);
    return s;
}

lm_status lm_vk_run_nn_index(lm_vk_dev *v, lm_array *node)
{
    lm_status st;
    if (is_sort(node->op)) st = run_sort(v, node);
    else if (node->op == LM_OP_SCATTER || node->op == LM_OP_SCATTER_ADD) st = run_scatter(v, node);
    else return lm_error_set(LM_ERR_UNSUPPORTED, "vulkan: op %s is not implemented", lm_op_name(node->op));
    return st == LM_OK ? st : lm_error_prefix("%s", lm_op_name(node->op));
}
