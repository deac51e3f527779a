/* nn_norm.c - softmax, log_softmax, layer/rms/group norm, attention, RoPE,
 * tril/triu and one_hot on Vulkan (the node contract is core/ops_nn.h; the
 * CPU kernels in backends/cpu/nn_norm.c, nn_attention.c and nn_index.c
 * define the results).
 *
 * Three shaders: nn_rows (a workgroup or a thread per row: softmax and the
 * norms; few long norm rows go to nn_norm_split, several workgroups a
 * row), nn_elem (+ _f64: a thread per output element: RoPE, the zeroing
 * pass of tril/triu, one_hot) and nn_attn (blocked attention with an online
 * softmax).  Row and element kernels take contiguous inputs: other views
 * are first copied into a temporary buffer (lm_vk_move).  nn_attn reads
 * q, k, v and the mask through their strides, so a broadcast mask is never
 * materialised (nn_attn512 where D or Dv is over 256, up to 512); the
 * common case (no mask or causal, D = Dv in {64, 128, 256, 512}) goes to
 * the tiled kernel of nn_attn_fa.c instead.  Larger head dims are left to
 * the CPU.
 * f32/f16/bf16 storage, f32 arithmetic; f64 data is left to the CPU
 * fallback (GLSL has no double exp/log/sin/cos), except that f64 RoPE
 * angles are read and reduced in double where the device has it. */
#include <stdio.h>
#include <stdlib.h>
#include "backends/vulkan/vk.h"

/* must match the shaders' codes */
enum { NR_SOFTMAX, NR_LOG_SOFTMAX, NR_LAYER_NORM, NR_RMS_NORM, NR_GROUP_NORM };
enum { NE_ROPE, NE_TRIL, NE_TRIU, NE_ONE_HOT };

/* the general kernels: nn_attn (D, Dv <= 256, 16 queries per workgroup)
 * and nn_attn512 (<= 512, 8 queries); must match their BQ/DMAX in module.mk */
#define ATTN_DMAX 512     /* largest head dim of q/k and of v */
#define ATTN_BQ(dmax) ((dmax) > 256 ? 8 : 16)
/* their shared memory: q rows, scores, a K block (32 x 33), row state */
#define ATTN_SHARED(bq, dmax) (4 * ((bq) * (dmax) + (bq) * 32 + 32 * 33 + 3 * (bq)))
#define ELEM_MAXLEAD 7    /* leading dims of a RoPE input after collapsing */

typedef struct rows_pc {
    uint32_t rows, len, inner, spatial, cpg, groups;
    int32_t off_x, off_w, off_b;
    float eps;
    uint32_t has_w, has_b;
} rows_pc;

typedef struct elem_pc {
    uint32_t n;
    int32_t off_x, off_a, D, dims, trad, nlead, ast_last;
    int32_t lshape[ELEM_MAXLEAD], last[ELEM_MAXLEAD];
} elem_pc;

typedef struct attn_pc {
    int32_t Hq, Lq, Lk, D, Dv, nqb, grp;
    uint32_t items;
    float scale;
    uint32_t mask, causal;
    int32_t oq, ok, ov, om;
    int32_t sq[4], sk[4], sv[4], sm[4];
} attn_pc;

/* ------------------------------------------------------------ support */

static bool is_half_or_f32(lm_dtype t) { return t == LM_F32 || t == LM_F16 || t == LM_BF16; }

static bool inputs_fit(const lm_array *node)
{
    if (!lm_vk_fits_i32(node)) return false;
    for (int k = 0; k < node->ninputs; k++)
        if (!lm_vk_fits_i32(node->inputs[k])) return false;
    return true;
}

static bool floats_ok(const lm_array *node)
{
    if (!is_half_or_f32(node->dtype)) return false;
    for (int k = 0; k < node->ninputs; k++)
        if (!is_half_or_f32(node->inputs[k]->dtype)) return false;
    return true;
}

/* the larger of D and Dv */
static int64_t attn_dmax(const lm_array *node)
{
    int64_t d = node->inputs[0]->shape[3], dv = node->inputs[2]->shape[3];
    return d > dv ? d : dv;
}

static bool attention_ok(lm_vk_dev *v, const lm_array *node)
{
    if (node->ninputs < 3 || !is_half_or_f32(node->dtype)) return false;
    for (int k = 0; k < 3; k++)
        if (!is_half_or_f32(node->inputs[k]->dtype)) return false;
    if (node->ninputs > 3) {
        lm_dtype mt = node->inputs[3]->dtype;
        if (!(node->params.i[1] == 1 && mt == LM_F32) && !(node->params.i[1] == 2 && mt == LM_BOOL))
            return false;
    }
    if (lm_vk_attn_fast_shader(v, node)) return true;
    /* the general kernel: five buffers (the wide descriptor layout) */
    int64_t d = attn_dmax(node);
    return d <= ATTN_DMAX && v->feat.max_storage_buffers >= LM_VK_WIDE_BINDINGS &&
           v->feat.max_shared >= ATTN_SHARED(ATTN_BQ(d), d);
}

static bool rope_ok(lm_vk_dev *v, const lm_array *node)
{
    const lm_array *x = node->inputs[0], *a = node->inputs[1];
    if (!is_half_or_f32(x->dtype) || node->dtype != x->dtype) return false;
    if (!is_half_or_f32(a->dtype) && !(a->dtype == LM_F64 && v->feat.f64)) return false;
    int64_t sh[LM_MAX_DIMS], st[1][LM_MAX_DIMS];
    memcpy(sh, x->shape, sizeof sh);
    memcpy(st[0], a->strides, sizeof st[0]);
    return lm_vk_collapse(x->ndim - 1, sh, 1, st) <= ELEM_MAXLEAD;
}

bool lm_vk_supports_nn_norm(lm_vk_dev *v, const lm_array *node)
{
    if (!inputs_fit(node)) return false;
    switch (node->op) {
    case LM_OP_SOFTMAX: case LM_OP_LOG_SOFTMAX: case LM_OP_LAYER_NORM: case LM_OP_RMS_NORM:
    case LM_OP_GROUP_NORM:
        return floats_ok(node);
    case LM_OP_ATTENTION:
        return attention_ok(v, node);
    case LM_OP_ROPE:
        return node->ninputs == 2 && rope_ok(v, node);
    case LM_OP_TRIL: case LM_OP_TRIU:
        /* raw bits move: f64 too, with or without shaderFloat64 */
        return node->ninputs == 1 && node->dtype < LM_DTYPE_COUNT && node->inputs[0]->dtype == node->dtype;
    case LM_OP_ONE_HOT:
        return node->ninputs == 1 && lm_dtype_is_int(node->inputs[0]->dtype) && node->dtype == LM_I64;
    default:
        return false;
    }
}

/* ------------------------------------------------------ input staging */

/* a contiguous view of `a`: a itself, or a temporary copy (*own, see
 * lm_vk_contiguous_copy) */
static lm_status contiguous_input(lm_vk_dev *v, const lm_array *a, const lm_vk_mem **mem, int32_t *off,
                                  lm_buffer **own)
{
    *own = NULL;
    *mem = lm_vk_mem_of(a);
    *off = (int32_t)a->offset;
    if (lm_array_is_contiguous(a)) return LM_OK;
    lm_status st = lm_vk_contiguous_copy(v, a, own);
    if (st != LM_OK) return st;
    *mem = (*own)->handle;
    *off = 0;
    return LM_OK;
}

static void release(lm_buffer *b)
{
    if (b) lm_buffer_release(b);
}

/* ------------------------------------------------------------ rows */

static uint32_t rows_code(lm_op op)
{
    switch (op) {
    case LM_OP_SOFTMAX: return NR_SOFTMAX;
    case LM_OP_LOG_SOFTMAX: return NR_LOG_SOFTMAX;
    case LM_OP_LAYER_NORM: return NR_LAYER_NORM;
    case LM_OP_RMS_NORM: return NR_RMS_NORM;
    default: return NR_GROUP_NORM;
    }
}

/* the row geometry of node: rows of len elements, inner apart */
static void rows_geometry(const lm_array *node, rows_pc *pc)
{
    const lm_array *x = node->inputs[0];
    const lm_params *p = &node->params;
    int64_t len = 1, inner = 1;
    if (node->op == LM_OP_SOFTMAX || node->op == LM_OP_LOG_SOFTMAX) {
        int axis = (int)p->i[0];
        len = x->shape[axis];
        for (int d = axis + 1; d < x->ndim; d++) inner *= x->shape[d];
    } else if (node->op == LM_OP_GROUP_NORM) {
        int64_t G = p->i[0], C = x->shape[1];
        len = x->size / x->shape[0] / G;
        pc->cpg = (uint32_t)(C / G);
        pc->spatial = (uint32_t)(len / (C / G));
        pc->groups = (uint32_t)G;
    } else {
        for (int d = x->ndim - (int)p->i[0]; d < x->ndim; d++) len *= x->shape[d];
    }
    pc->len = (uint32_t)len;
    pc->inner = (uint32_t)inner;
    pc->rows = (uint32_t)(node->size / len);
    pc->eps = (float)p->f[0];
}

/* nn_norm_split.comp: layer/rms/group norm rows of at least SPLIT_MIN_LEN
 * elements, fewer than SPLIT_MAX_ROWS of them, cut into chunks of at least
 * SPLIT_CHUNK elements (at most SPLIT_MAX_CHUNKS per row), a workgroup each */
#define SPLIT_MIN_LEN 8192
#define SPLIT_MAX_ROWS 512
#define SPLIT_CHUNK 4096
#define SPLIT_MAX_CHUNKS 32768

typedef struct split_pc {
    uint32_t rows, len, chunk, nch, spatial, cpg, groups;
    int32_t off_x, off_w, off_b;
    float eps;
    uint32_t has_w, has_b;
} split_pc;

/* a stacked call (share) counts one image's rows (choice.h) */
bool lm_vk_norm_split_rows(int64_t rows, int share)
{
    return lm_vk_share_div(rows, share) < SPLIT_MAX_ROWS;
}

/* nn_rows: a row an invocation (its sum in order) for many strided rows or
 * short ones, else a workgroup's reduction; a stacked call counts one
 * image's rows */
bool lm_vk_norm_per_thread(int64_t rows, int64_t inner, int64_t len, int share)
{
    return (inner > 1 && lm_vk_share_div(rows, share) >= 256) || len <= 16;
}

static bool use_split(lm_vk_dev *v, const lm_array *node, const rows_pc *pc)
{
    if (node->op != LM_OP_LAYER_NORM && node->op != LM_OP_RMS_NORM && node->op != LM_OP_GROUP_NORM) return false;
    const char *e = getenv("LUMEN_VK_NORM_SPLIT");
    if (e && !strcmp(e, "0")) return false;
    return pc->inner == 1 && pc->len >= SPLIT_MIN_LEN && lm_vk_norm_split_rows(pc->rows, lm_array_share(node)) &&
           v->feat.max_storage_buffers >= LM_VK_WIDE_BINDINGS;
}

/* the two dispatches of nn_norm_split over contiguous inputs mem/off */
static lm_status run_norm_split(lm_vk_dev *v, lm_array *node, const rows_pc *r, const lm_vk_mem **mem,
                                const uint32_t *dts)
{
    split_pc pc = {r->rows, r->len, SPLIT_CHUNK, 0, r->spatial, r->cpg, r->groups, r->off_x, r->off_w,
                   r->off_b, r->eps, r->has_w, r->has_b};
    if ((pc.len + pc.chunk - 1) / pc.chunk > SPLIT_MAX_CHUNKS)
        pc.chunk = (pc.len + SPLIT_MAX_CHUNKS - 1) / SPLIT_MAX_CHUNKS;
    pc.nch = (pc.len + pc.chunk - 1) / pc.chunk;
    lm_buffer *stats = lm_buffer_alloc(v->dev, (size_t)pc.rows * pc.nch * 2 * sizeof(float));
    if (!stats) return lm_error_status();
    lm_vk_arg args[5] = {{mem[0], false}, {mem[1], false}, {mem[2], false}, {lm_vk_mem_of(node), true},
                         {stats->handle, true}};
    lm_status st = LM_OK;
    for (uint32_t stage = 0; stage < 2 && st == LM_OK; stage++) {
        uint32_t spec[6] = {stage, rows_code(node->op), dts[0], dts[1], dts[2], dts[3]};
        args[3].write = stage == 1;
        args[4].write = stage == 0;
        st = lm_vk_dispatch(v, "nn_norm_split", spec, 6, args, 5, &pc, sizeof pc, pc.nch, pc.rows, 1);
    }
    lm_buffer_release(stats);
    return st;
}

/* nn_norm_vec.comp: a thread holds 4 * R elements (R <= VEC_RMAX) of a
 * tile of NT * 4 * R, so x is read from memory once per pass; rows up to
 * VEC_NT_MAX * 4 * VEC_RMAX elements are a tile each (MODE 2), longer ones
 * are split into tiles of VEC_SPLIT_NT threads x VEC_SPLIT_R vectors
 * (statistics per tile, a combine per row where x is 16-bit or the rows
 * have many tiles, then the write) */
#define VEC_RMAX 8
#define VEC_NT_MAX 512
#define VEC_SPLIT_NT 256
#define VEC_SPLIT_R 4
#define VEC_FIN_TILES 1024   /* more tiles per row: a dispatch combines them first */

typedef struct vec_pc {
    uint32_t rows, len, nch, spatial, cpg, groups;
    int32_t off_x, off_w, off_b;
    float eps;
    uint32_t has_w, has_b, rev, fin;
} vec_pc;

enum { VM_STATS, VM_NORM, VM_ROWS, VM_FINAL };

static int env_int(const char *name, int dflt)
{
    const char *e = getenv(name);
    return e && *e ? atoi(e) : dflt;
}

/* the workgroup size and vectors per thread of a row of len in one tile:
 * the fewest threads that need at most 4 vectors each, else 512 threads
 * with up to VEC_RMAX; false where the row is longer than that */
static bool vec_rows_shape(uint32_t len, uint32_t *nt, uint32_t *r)
{
    for (uint32_t t = 32; t <= VEC_NT_MAX; t *= 2) {
        uint32_t k = (len + 4 * t - 1) / (4 * t);
        if (k <= 4 || (t == VEC_NT_MAX && k <= VEC_RMAX)) {
            *nt = t;
            *r = k ? k : 1;
            return true;
        }
    }
    return false;
}

/* the vectorised kernel takes node (contiguous rows, pc filled) */
static bool use_vec(lm_vk_dev *v, const lm_array *node, const rows_pc *pc)
{
    if (env_int("LUMEN_VK_NORM_VEC", 1) == 0 || pc->inner != 1 || pc->len == 0) return false;
    if (!v->feat.subgroup_arith || v->feat.subgroup_size == 0 || v->feat.max_storage_buffers < LM_VK_WIDE_BINDINGS)
        return false;
    /* one shared slot per subgroup */
    if (VEC_NT_MAX / v->feat.subgroup_size > 128) return false;
    uint32_t nt, r;
    if (vec_rows_shape(pc->len, &nt, &r)) return true;
    if (node->op == LM_OP_SOFTMAX || node->op == LM_OP_LOG_SOFTMAX) return false;
    uint32_t tile = VEC_SPLIT_NT * 4 * VEC_SPLIT_R;
    return (pc->len + tile - 1) / tile <= 65535 && pc->rows <= 65535;
}

static lm_status run_vec(lm_vk_dev *v, lm_array *node, const rows_pc *r, const lm_vk_mem **mem,
                         const uint32_t *dts)
{
    vec_pc pc = {r->rows, r->len, 1, r->spatial, r->cpg, r->groups, r->off_x, r->off_w, r->off_b, r->eps,
                 r->has_w, r->has_b, 0, 0};
    uint32_t vec = r->off_x % 4 == 0 && r->len % 4 == 0;
    if (env_int("LUMEN_VK_NORM_VEC", 1) == 2) vec = 0;   /* the element-wise loads, for measurement */
    uint32_t nt, rr;
    lm_vk_arg args[5] = {{mem[0], false}, {mem[1], false}, {mem[2], false}, {lm_vk_mem_of(node), true},
                         {NULL, false}};
    /* 16-byte accesses of 16-bit data: pairs of vectors (LUMEN_VK_NORM_W8) */
    bool w8 = vec && dts[0] != LM_F32 && dts[3] != LM_F32 && r->off_x % 8 == 0 && r->len % 8 == 0 &&
              env_int("LUMEN_VK_NORM_W8", 1) != 0;
    /* f16 stores by packHalf2x16 where its rounding is known to be to
     * nearest even, as f32_to_f16 (NVIDIA's cvt.rn; LLVM's fptrunc in
     * lavapipe): other drivers may truncate (AMD's pkrtz) */
    bool rne = v->props.vendorID == 0x10de || v->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    uint32_t hw = env_int("LUMEN_VK_NORM_F16HW", rne) != 0;
    if (vec_rows_shape(r->len, &nt, &rr)) {
        uint32_t spec[11] = {nt, VM_ROWS, rows_code(node->op), dts[0], dts[1], dts[2], dts[3], rr, vec,
                             w8 && rr % 2 == 0, hw};
        return lm_vk_dispatch(v, "nn_norm_vec", spec, 11, args, 5, &pc, sizeof pc,
                              pc.rows < 65535 ? pc.rows : 65535, 1, 1);
    }
    nt = VEC_SPLIT_NT;
    rr = (uint32_t)env_int("LUMEN_VK_NORM_R", VEC_SPLIT_R);
    /* use_vec checked the tile count (a dispatch's x extent, 65535) at
     * VEC_SPLIT_R vectors a thread */
    if (rr < 1 || rr > VEC_RMAX || (pc.len + nt * 4 * rr - 1) / (nt * 4 * rr) > 65535) rr = VEC_SPLIT_R;
    uint32_t tile = nt * 4 * rr;
    pc.nch = (pc.len + tile - 1) / tile;
    pc.rev = env_int("LUMEN_VK_NORM_REV", 1) != 0;
    /* the combining dispatch: 5% faster on f16 at 128 ch 512^2 (0.092 ms
     * against 0.097 on the H100), 1% slower on f32 */
    pc.fin = pc.nch > VEC_FIN_TILES || env_int("LUMEN_VK_NORM_FIN", dts[0] != LM_F32) != 0;
    lm_buffer *stats = lm_buffer_alloc(v->dev, ((size_t)pc.rows * pc.nch + pc.rows) * 2 * sizeof(float));
    if (!stats) return lm_error_status();
    args[4].mem = stats->handle;
    lm_status st = LM_OK;
    uint32_t modes[3] = {VM_STATS, VM_FINAL, VM_NORM};
    /* LUMEN_VK_NORM_ONLY=stats or =norm runs one pass alone (a wrong
     * result: only to time the passes apart) */
    const char *only = getenv("LUMEN_VK_NORM_ONLY");
    for (int s = 0; s < 3 && st == LM_OK; s++) {
        if (modes[s] == VM_FINAL && !pc.fin) continue;
        if (only && ((!strcmp(only, "stats") && modes[s] != VM_STATS) || (!strcmp(only, "norm") && modes[s] == VM_STATS)))
            continue;
        uint32_t spec[11] = {nt, modes[s], rows_code(node->op), dts[0], dts[1], dts[2], dts[3], rr, vec,
                             w8 && rr % 2 == 0, hw};
        args[3].write = modes[s] == VM_NORM;
        args[4].write = modes[s] != VM_NORM;
        if (modes[s] == VM_FINAL)
            st = lm_vk_dispatch(v, "nn_norm_vec", spec, 11, args, 5, &pc, sizeof pc, pc.rows, 1, 1);
        else
            st = lm_vk_dispatch(v, "nn_norm_vec", spec, 11, args, 5, &pc, sizeof pc, pc.nch, pc.rows, 1);
    }
    lm_buffer_release(stats);
    return st;
}

static lm_status run_rows(lm_vk_dev *v, lm_array *node)
{
    rows_pc pc;
    memset(&pc, 0, sizeof pc);
    rows_geometry(node, &pc);
    bool norm = node->op != LM_OP_SOFTMAX && node->op != LM_OP_LOG_SOFTMAX;
    bool has_w = norm && node->params.i[1], has_b = norm && node->op != LM_OP_RMS_NORM && node->params.i[2];
    const lm_array *in[3] = {node->inputs[0], NULL, NULL};
    int k = 1;
    if (has_w) in[1] = node->inputs[k++];
    if (has_b) in[2] = node->inputs[k++];
    const lm_vk_mem *mem[3] = {NULL, NULL, NULL};
    lm_buffer *own[3] = {NULL, NULL, NULL};
    int32_t off[3] = {0, 0, 0};
    lm_status st = LM_OK;
    for (int i = 0; i < 3 && st == LM_OK; i++)
        if (in[i]) st = contiguous_input(v, in[i], &mem[i], &off[i], &own[i]);
    if (st == LM_OK) {
        pc.off_x = off[0];
        pc.off_w = off[1];
        pc.off_b = off[2];
        /* a thread per row where rows interleave (softmax over a non-last
         * axis: neighbouring threads read neighbouring elements) or are tiny */
        bool per_thread = lm_vk_norm_per_thread(pc.rows, pc.inner, pc.len, lm_array_share(node));
        uint32_t local = per_thread ? 64 : pc.len <= 512 ? 64 : 256;
        pc.has_w = has_w;
        pc.has_b = has_b;
        if (use_vec(v, node, &pc)) {
            uint32_t dts[4] = {in[0]->dtype, in[1] ? in[1]->dtype : LM_F32, in[2] ? in[2]->dtype : LM_F32,
                               node->dtype};
            st = run_vec(v, node, &pc, mem, dts);
            for (int i = 0; i < 3; i++) release(own[i]);
            return st;
        }
        if (use_split(v, node, &pc)) {
            uint32_t dts[4] = {in[0]->dtype, in[1] ? in[1]->dtype : LM_F32, in[2] ? in[2]->dtype : LM_F32,
                               node->dtype};
            st = run_norm_split(v, node, &pc, mem, dts);
            for (int i = 0; i < 3; i++) release(own[i]);
            return st;
        }
        uint32_t spec[7] = {local, rows_code(node->op), in[0]->dtype, in[1] ? in[1]->dtype : LM_F32,
                            in[2] ? in[2]->dtype : LM_F32, node->dtype, per_thread};
        uint32_t groups = per_thread ? lm_vk_groups(v, pc.rows, local) : (pc.rows < 65535 ? pc.rows : 65535);
        lm_vk_arg args[4] = {{mem[0], false}, {mem[1], false}, {mem[2], false}, {lm_vk_mem_of(node), true}};
        st = lm_vk_dispatch(v, "nn_rows", spec, 7, args, 4, &pc, sizeof pc, groups, 1, 1);
    }
    for (int i = 0; i < 3; i++) release(own[i]);
    return st;
}

/* ---------------------------------------------------- element kernels */

static lm_status elem_dispatch(lm_vk_dev *v, const char *shader, uint32_t op, const uint32_t *dts,
                               const lm_vk_arg *args, int nargs, const elem_pc *pc)
{
    uint32_t spec[4] = {op, dts[0], dts[1], dts[2]};
    return lm_vk_dispatch(v, shader, spec, 4, args, nargs, pc, sizeof *pc, lm_vk_groups(v, pc->n, 256), 1, 1);
}

static lm_status run_rope(lm_vk_dev *v, lm_array *node)
{
    const lm_array *x = node->inputs[0], *a = node->inputs[1];
    elem_pc pc;
    memset(&pc, 0, sizeof pc);
    int64_t sh[LM_MAX_DIMS], st[1][LM_MAX_DIMS];
    memcpy(sh, x->shape, sizeof sh);
    memcpy(st[0], a->strides, sizeof st[0]);
    pc.nlead = lm_vk_collapse(x->ndim - 1, sh, 1, st);
    for (int d = 0; d < pc.nlead; d++) {
        pc.lshape[d] = (int32_t)sh[d];
        pc.last[d] = (int32_t)st[0][d];
    }
    pc.n = (uint32_t)node->size;
    pc.off_a = (int32_t)a->offset;
    pc.ast_last = (int32_t)a->strides[x->ndim - 1];
    pc.D = (int32_t)x->shape[x->ndim - 1];
    pc.dims = (int32_t)node->params.i[0];
    pc.trad = node->params.i[1] != 0;
    const lm_vk_mem *xm;
    lm_buffer *own;
    lm_status s = contiguous_input(v, x, &xm, &pc.off_x, &own);
    if (s != LM_OK) return s;
    uint32_t dts[3] = {x->dtype, a->dtype, node->dtype};
    lm_vk_arg args[3] = {{xm, false}, {lm_vk_mem_of(a), false}, {lm_vk_mem_of(node), true}};
    s = elem_dispatch(v, a->dtype == LM_F64 ? "nn_elem_f64" : "nn_elem", NE_ROPE, dts, args, 3, &pc);
    release(own);
    return s;
}

/* a copy of x, then the excluded triangle zeroed in place */
static lm_status run_tri(lm_vk_dev *v, lm_array *node)
{
    const lm_array *x = node->inputs[0];
    int64_t cs[LM_MAX_DIMS];
    lm_vk_contiguous_strides(node->ndim, node->shape, cs);
    lm_status s = lm_vk_move(v, x, lm_vk_mem_of(node), node->dtype, 0, cs);
    if (s != LM_OK) return s;
    int64_t M = node->shape[node->ndim - 2], N = node->shape[node->ndim - 1], k = node->params.i[0];
    /* past either edge every row keeps all or nothing: clamp into int32 */
    int64_t lim = M + N + 1;
    k = k < -lim ? -lim : k > lim ? lim : k;
    elem_pc pc;
    memset(&pc, 0, sizeof pc);
    pc.n = (uint32_t)node->size;
    pc.D = (int32_t)N;
    pc.dims = (int32_t)M;
    pc.trad = (int32_t)k;
    uint32_t dts[3] = {node->dtype, LM_F32, node->dtype};
    lm_vk_arg args[3] = {{NULL, false}, {NULL, false}, {lm_vk_mem_of(node), true}};
    return elem_dispatch(v, "nn_elem", node->op == LM_OP_TRIL ? NE_TRIL : NE_TRIU, dts, args, 3, &pc);
}

static lm_status run_one_hot(lm_vk_dev *v, lm_array *node)
{
    const lm_array *ix = node->inputs[0];
    lm_status s = lm_vk_status_init(v);
    if (s != LM_OK) return s;
    elem_pc pc;
    memset(&pc, 0, sizeof pc);
    pc.n = (uint32_t)node->size;
    pc.D = (int32_t)node->params.i[0];
    const lm_vk_mem *im;
    lm_buffer *own;
    if ((s = contiguous_input(v, ix, &im, &pc.off_x, &own)) != LM_OK) return s;
    /* the report is checked when the batch completes (exec.c) */
    v->status_armed = true;
    snprintf(v->status_op, sizeof v->status_op, "one_hot");
    v->status_axis = node->ndim - 1;
    v->status_len = node->params.i[0];
    uint32_t dts[3] = {ix->dtype, LM_F32, LM_I64};
    lm_vk_arg args[4] = {{im, false}, {NULL, false}, {lm_vk_mem_of(node), true}, {v->status, true}};
    s = elem_dispatch(v, "nn_elem", NE_ONE_HOT, dts, args, 4, &pc);
    release(own);
    return s;
}

/* ---------------------------------------------------------- attention */

static void attn_strides(const lm_array *a, int32_t *off, int32_t *st)
{
    *off = (int32_t)a->offset;
    for (int d = 0; d < 4; d++) st[d] = (int32_t)a->strides[d];
}

static lm_status run_attention(lm_vk_dev *v, lm_array *node)
{
    const lm_array *q = node->inputs[0], *k = node->inputs[1], *val = node->inputs[2];
    const lm_array *mask = node->ninputs > 3 ? node->inputs[3] : NULL;
    const char *fast = lm_vk_attn_fast_shader(v, node);
    if (fast) return lm_vk_run_attn_fast(v, node, fast);
    attn_pc pc;
    memset(&pc, 0, sizeof pc);
    pc.Hq = (int32_t)q->shape[1];
    pc.Lq = (int32_t)q->shape[2];
    pc.Lk = (int32_t)k->shape[2];
    pc.D = (int32_t)q->shape[3];
    pc.Dv = (int32_t)val->shape[3];
    int64_t dmax = attn_dmax(node);
    int bq = ATTN_BQ(dmax);
    pc.nqb = (pc.Lq + bq - 1) / bq;
    pc.grp = (int32_t)(q->shape[1] / k->shape[1]);
    pc.items = (uint32_t)(q->shape[0] * q->shape[1] * pc.nqb);
    pc.scale = (float)node->params.f[0];
    attn_strides(q, &pc.oq, pc.sq);
    attn_strides(k, &pc.ok, pc.sk);
    attn_strides(val, &pc.ov, pc.sv);
    if (mask) attn_strides(mask, &pc.om, pc.sm);
    pc.mask = mask ? (uint32_t)node->params.i[1] : 0u;
    pc.causal = node->params.i[0] != 0;
    uint32_t spec[4] = {q->dtype, k->dtype, val->dtype, node->dtype};
    lm_vk_arg args[5] = {{lm_vk_mem_of(q), false}, {lm_vk_mem_of(k), false}, {lm_vk_mem_of(val), false},
                         {mask ? lm_vk_mem_of(mask) : NULL, false}, {lm_vk_mem_of(node), true}};
    uint32_t groups = pc.items < 65535 ? pc.items : 65535;
    return lm_vk_dispatch(v, dmax > 256 ? "nn_attn512" : "nn_attn", spec, 4, args, 5, &pc, sizeof pc,
                          groups ? groups : 1, 1, 1);
}

/* ------------------------------------------------------------- entry */

lm_status lm_vk_run_nn_norm(lm_vk_dev *v, lm_array *node)
{
    if (!lm_vk_supports_nn_norm(v, node))
        return lm_error_set(LM_ERR_UNSUPPORTED, "vulkan: %s of %s is not implemented", lm_op_name(node->op),
                            lm_dtype_name(node->dtype));
    lm_status st;
    switch (node->op) {
    case LM_OP_ATTENTION: st = run_attention(v, node); break;
    case LM_OP_ROPE: st = run_rope(v, node); break;
    case LM_OP_TRIL: case LM_OP_TRIU: st = run_tri(v, node); break;
    case LM_OP_ONE_HOT: st = run_one_hot(v, node); break;
    default: st = run_rows(v, node); break;
    }
    return st == LM_OK ? st : lm_error_prefix("%s", lm_op_name(node->op));
}
