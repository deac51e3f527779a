/* matmul.c - batched matrix products (shaders/matmul.glsl).
 *
 * The core hands inputs already broadcast to [..., M, K] and [..., K, N]
 * (views: any strides, stride 0 on broadcast batch dims).  Batch dims are
 * collapsed and walked by the workgroup's z index.  f32, f16 and bf16
 * inputs compute in f32 (as the CPU does) and round once on store.
 * Products of few rows go to the GEMV kernel first (matmul_gemv.c).
 * f16 inputs go to the cooperative-matrix-2 kernel (matmul_cm2.c), then f16 and
 * bf16 inputs to the cooperative-matrix kernel (matmul_coop.c) where the
 * device has one. */
#include <stdlib.h>
#include <string.h>
#include "backends/vulkan/vk.h"

typedef lm_vk_mm_pc mm_pc;

static bool mm_dtype(lm_dtype t) { return t == LM_F32 || t == LM_F16 || t == LM_BF16; }

/* fills pc; false when the shape is beyond what one dispatch covers */
static bool plan(lm_vk_dev *v, const lm_array *node, mm_pc *pc)
{
    if (node->ninputs != 2 || node->ndim < 2) return false;
    const lm_array *a = node->inputs[0], *b = node->inputs[1];
    if (a->ndim != node->ndim || b->ndim != node->ndim) return false;
    int nd = node->ndim, nbd = nd - 2;
    memset(pc, 0, sizeof *pc);
    pc->M = (int32_t)node->shape[nd - 2];
    pc->N = (int32_t)node->shape[nd - 1];
    pc->K = (int32_t)a->shape[nd - 1];
    pc->off_a = (int32_t)a->offset;
    pc->off_b = (int32_t)b->offset;
    pc->sam = (int32_t)a->strides[nd - 2];
    pc->sak = (int32_t)a->strides[nd - 1];
    pc->sbk = (int32_t)b->strides[nd - 2];
    pc->sbn = (int32_t)b->strides[nd - 1];
    int64_t shape[LM_MAX_DIMS], st[3][LM_MAX_DIMS], batch = 1;
    for (int d = nbd - 1; d >= 0; d--) {
        shape[d] = node->shape[d];
        st[0][d] = a->strides[d];
        st[1][d] = b->strides[d];
        st[2][d] = batch;
        batch *= node->shape[d];
    }
    int n = lm_vk_collapse(nbd, shape, 3, st);
    if (n > 4 || batch > v->feat.max_groups[2]) return false;
    pc->nb = n;
    for (int d = 0; d < n; d++) {
        pc->bshape[d] = (int32_t)shape[d];
        pc->bsa[d] = (int32_t)st[0][d];
        pc->bsb[d] = (int32_t)st[1][d];
    }
    return (pc->N + 63) / 64 <= (int64_t)v->feat.max_groups[0] &&
           (pc->M + 63) / 64 <= (int64_t)v->feat.max_groups[1];
}

static bool getenv_off(const char *name)
{
    const char *e = getenv(name);
    return e && !strcmp(e, "0");
}

/* can 4-element loads (16 bytes, 8 for 16-bit dtypes) start at every 4th element along the unit-stride dim? */
static bool vec4_ok(const lm_array *x, int64_t off, int64_t srow, int64_t scol, const mm_pc *pc,
                    const int32_t *bs)
{
    bool ok = scol == 1 && off % 4 == 0 && srow % 4 == 0 && lm_vk_mem_of(x)->off % 16 == 0;
    for (int d = 0; d < pc->nb; d++) ok &= bs[d] % 4 == 0;
    return ok;
}

/* the f32-arithmetic tiles (the matmul_f32* lines of module.mk's variant table: one
 * matmul_f32.glsl with the tile as macros); LUMEN_VK_MM_F32=<name> picks one for
 * measurement, falling back to the default where the device lacks its
 * shared memory.  conv is the matching conv_gemm shader (NULL: none). */
static const lm_vk_f32_tile f32_tiles[] = {
    {"128x128", "matmul_f32", "conv_gemm", "np", 128, 128, 33792, 16},
    {"np", "matmul_f32_np", "conv_gemm_np", NULL, 128, 128, 32768, 16},
    {"w", "matmul_f32_w", "conv_gemm_w", "w_np", 128, 128, 33792, 16},
    {"w_np", "matmul_f32_w_np", "conv_gemm_w_np", NULL, 128, 128, 32768, 16},
    {"wr", "matmul_f32_wr", NULL, "w_np", 128, 128, 33792, 16},
    {"k8", "matmul_f32_k8", NULL, NULL, 128, 128, 16896, 8},
    {"k8w", "matmul_f32_k8w", "conv_gemm_k8w", NULL, 128, 128, 16896, 8},
    {"128x256", "matmul_f32_128x256", "conv_gemm_128x256", NULL, 128, 256, 25088, 8},
    {"128x256r", "matmul_f32_128x256r", NULL, NULL, 128, 256, 25088, 8},
    {"256x128", "matmul_f32_256x128", "conv_gemm_256x128", NULL, 256, 128, 25088, 8},
    {"64x128", "matmul_f32_64x128", NULL, NULL, 64, 128, 25600, 16},
    {"64x128k8", "matmul_f32_64x128k8", NULL, NULL, 64, 128, 12800, 8},
    {"t128", "matmul_f32_t128", "conv_gemm_t128", NULL, 128, 128, 16896, 8},
    {"t128k16", "matmul_f32_t128k16", NULL, "t128", 128, 128, 33792, 16},
    {"t128n", "matmul_f32_t128n", NULL, NULL, 128, 128, 16896, 8},
    {"t64", "matmul_f32_t64", NULL, NULL, 64, 128, 12800, 8},
    {"128x256k16", "matmul_f32_128x256k16", NULL, "128x256", 128, 256, 49152, 16},
    {"256x128k16", "matmul_f32_256x128k16", NULL, "256x128", 256, 128, 49152, 16},
};

/* the tile of that name, or its smaller twin (`small`) where the device
 * lacks the shared memory */
static const lm_vk_f32_tile *f32_find(const lm_vk_dev *v, const char *name)
{
    for (size_t i = 0; name && i < sizeof f32_tiles / sizeof *f32_tiles; i++)
        if (!strcmp(f32_tiles[i].name, name))
            return f32_tiles[i].shared <= v->feat.max_shared ? &f32_tiles[i] : f32_find(v, f32_tiles[i].small);
    return NULL;
}

int64_t lm_vk_share_div(int64_t n, int share)
{
    return share > 1 && n % share == 0 ? n / share : n;
}

void lm_vk_share_mb(int64_t *m, int64_t *batch, int share)
{
    if (share <= 1) return;
    if (*batch % share == 0) *batch /= share;
    else *m = lm_vk_share_div(*m, share);
}

int64_t lm_vk_mm_size(int64_t m, int64_t n, int64_t batch, int share)
{
    lm_vk_share_mb(&m, &batch, share);
    return m * n;
}

bool lm_vk_f32_big(int64_t m, int64_t n, int64_t batch, int share)
{
    lm_vk_share_mb(&m, &batch, share);
    return ((m + 127) / 128) * ((n + 127) / 128) * batch >= 256;
}

const lm_vk_f32_tile *lm_vk_f32_pick(const lm_vk_dev *v, bool conv, int64_t m, int64_t n, int64_t batch,
                                     int share)
{
    const lm_vk_f32_tile *t = f32_find(v, getenv(conv ? "LUMEN_VK_CONV_F32" : "LUMEN_VK_MM_F32"));
    if (t && (!conv || t->conv)) return t;
    /* With 256 or more 128x128 tiles (two an SM of an H100 and more),
     * tiles whose workgroups fit twice an SM: matmul t128 (128 invocations
     * of 16x8: 0.73-0.78x PyTorch without TF32 at 2048-8192 on the H100
     * against 0.61-0.64x), conv k8w (256 of 8x8, depth 8, 128 registers:
     * 0.67-0.98x cuDNN against 0.59-0.86x).  Smaller grids keep the
     * 256-invocation tile (8 subgroups an SM where an SM gets one tile;
     * at 128 conv tiles it beat k8w by 25%), with padded shared rows (33
     * KiB) where the device has room, else 32 KiB.  A stacked call counts
     * one image's tiles (choice.h). */
    if (lm_vk_f32_big(m, n, batch, share)) return f32_find(v, conv ? "k8w" : "t128");
    return f32_find(v, "128x128");
}

int lm_vk_mm_splitk_env(void)
{
    const char *e = getenv("LUMEN_VK_MM_SPLITK");
    if (!e || !*e || !strcmp(e, "auto")) return 0;
    int p = atoi(e);
    return p < 1 ? 1 : p;
}

int lm_vk_mm_parts_fit(const lm_vk_dev *v, int parts, int64_t steps, const lm_vk_mm_pc *pc, int64_t batch)
{
    int64_t s = parts, slab = batch * pc->M * pc->N;
    if (s > steps) s = steps;
    if (s > 64) s = 64;
    /* no empty part: as many parts as ceil(steps / parts) steps a part make
     * (matmul_pc.glsl's MM_STEPS gives each that many, the last the rest) */
    if (s > 1) {
        int64_t per = (steps + s - 1) / s;
        s = (steps + per - 1) / per;
    }
    while (s > 1 && (s * slab >= INT32_MAX || batch * s > (int64_t)v->feat.max_groups[2])) s--;
    return s < 1 ? 1 : (int)s;
}

lm_status lm_vk_mm_split_begin(lm_vk_dev *v, lm_array *node, int parts, const lm_vk_mm_pc *pc, int64_t batch,
                               lm_buffer **scratch, const lm_vk_mem **out)
{
    *scratch = NULL;
    *out = parts > 1 ? NULL : lm_vk_mem_of(node);
    if (parts <= 1 || v->plan) return LM_OK;
    *scratch = lm_buffer_alloc(v->dev, (size_t)4 * (size_t)parts * (size_t)batch * (size_t)pc->M * (size_t)pc->N);
    if (!*scratch)
        return lm_error_prefix("matmul split-K: %d parts of %lld x %d x %d f32 sums", parts, (long long)batch,
                               pc->M, pc->N);
    *out = (const lm_vk_mem *)(*scratch)->handle;
    return LM_OK;
}

lm_status lm_vk_splitk_run(lm_vk_dev *v, lm_array *node, lm_buffer *scratch, const lm_vk_splitk_pc *sp,
                           const lm_array *bias)
{
    uint32_t spec[2] = {node->dtype, bias ? bias->dtype : node->dtype};
    lm_vk_arg args[3] = {{scratch ? (const lm_vk_mem *)scratch->handle : NULL, false}, {lm_vk_mem_of(node), true},
                         {bias ? lm_vk_mem_of(bias) : NULL, false}};
    return lm_vk_dispatch(v, "conv_splitk", spec, 2, args, 3, sp, sizeof *sp, lm_vk_groups(v, sp->n, 256), 1, 1);
}

lm_status lm_vk_mm_split_sum(lm_vk_dev *v, lm_array *node, lm_buffer *scratch, int parts, int64_t n)
{
    lm_vk_splitk_pc sp = {(uint32_t)n, 1, 1, 1, -1, 0, parts};   /* M, N, G place a bias: none here */
    return lm_vk_splitk_run(v, node, scratch, &sp, NULL);
}

uint32_t lm_vk_splitk_spec(int parts, const int32_t *bshape, int nb, int64_t entries)
{
    if (parts <= 1) return 1;
    int64_t e = 1;
    for (int d = 0; d < nb; d++) e *= bshape[d];
    return e == entries ? 0 : (uint32_t)parts;
}

static int64_t split_runs;

int64_t lm_vulkan_mm_split_count(void)
{
    return split_runs;
}

lm_status lm_vk_mm_split_end(lm_vk_dev *v, lm_array *node, lm_buffer *scratch, int parts, const lm_vk_mm_pc *pc,
                             int64_t batch, lm_status st)
{
    if (st == LM_OK && parts > 1) {
        st = lm_vk_mm_split_sum(v, node, scratch, parts, batch * pc->M * pc->N);
        if (st == LM_OK && !v->plan) split_runs++;
    }
    if (scratch) lm_buffer_release(scratch);
    return st;
}

/* the f32 tiles: split-K only where LUMEN_VK_MM_SPLITK forces it (the
 * rule is the tensor cores', measured there) */
static lm_status run_f32(lm_vk_dev *v, lm_array *node, const mm_pc *pc, int64_t batch, int share)
{
    const lm_array *a = node->inputs[0], *b = node->inputs[1];
    const lm_vk_f32_tile *t = lm_vk_f32_pick(v, false, pc->M, pc->N, batch, share);
    bool a_k = pc->sak == 1 || pc->sam != 1, b_n = pc->sbn == 1 || pc->sbk != 1;
    bool a_vec = a_k ? vec4_ok(a, pc->off_a, pc->sam, pc->sak, pc, pc->bsa)
                     : vec4_ok(a, pc->off_a, pc->sak, pc->sam, pc, pc->bsa);
    bool b_vec = b_n ? vec4_ok(b, pc->off_b, pc->sbk, pc->sbn, pc, pc->bsb)
                     : vec4_ok(b, pc->off_b, pc->sbn, pc->sbk, pc, pc->bsb);
    int parts = lm_vk_mm_parts_fit(v, lm_vk_mm_splitk_env(), (pc->K + t->bk - 1) / t->bk, pc, batch);
    lm_buffer *scratch;
    const lm_vk_mem *out;
    lm_status st = lm_vk_mm_split_begin(v, node, parts, pc, batch, &scratch, &out);
    if (st != LM_OK) return st;
    bool c_vec = pc->N % 4 == 0 && (!out || out->off % 16 == 0);
    uint32_t gx = (uint32_t)((pc->N + t->bn - 1) / t->bn), gy = (uint32_t)((pc->M + t->bm - 1) / t->bm);
    /* whole tiles of 16-byte loads: no bounds checks (the depth of every
     * tile divides 16) */
    bool full = a_vec && b_vec && pc->M % t->bm == 0 && pc->N % t->bn == 0 && pc->K % 16 == 0 &&
                !getenv_off("LUMEN_VK_MM_F32_FULL");
    const char *e = getenv("LUMEN_VK_MM_F32_SWZ");
    int swz = e ? atoi(e) : 0;
    if (swz < 0 || (uint32_t)swz >= gy) swz = 0;
    uint32_t spec[15] = {a->dtype, b->dtype, parts > 1 ? (uint32_t)LM_F32 : node->dtype, a_k, b_n, a_vec, b_vec,
                         c_vec, 0, 0, full, (uint32_t)swz, 0, 0, (uint32_t)parts};
    lm_vk_arg args[3] = {{lm_vk_mem_of(a), false}, {lm_vk_mem_of(b), false}, {out, true}};
    /* one part: the 12 constants of before, so the pipeline is the same */
    st = lm_vk_dispatch(v, t->shader, spec, parts > 1 ? 15 : 12, args, 3, pc, sizeof *pc, gx, gy,
                        (uint32_t)(batch * parts));
    return lm_vk_mm_split_end(v, node, scratch, parts, pc, batch, st);
}

bool lm_vk_supports_matmul(lm_vk_dev *v, const lm_array *node)
{
    mm_pc pc;
    if (!mm_dtype(node->dtype) || node->ninputs != 2) return false;
    if (!mm_dtype(node->inputs[0]->dtype) || !mm_dtype(node->inputs[1]->dtype)) return false;
    return plan(v, node, &pc);
}

/* the product pc describes into node (inputs and output as node's), its
 * size-dependent choices made as `share` says (choice.h) */
static lm_status mm_dispatch(lm_vk_dev *v, lm_array *node, const mm_pc *pc, int64_t batch, int share)
{
    const lm_array *a = node->inputs[0], *b = node->inputs[1];
    /* few rows (at most 8 in one image's part: choice.h) on the GEMV
     * kernel (matmul_gemv.c): bound by memory, not by the tensor cores */
    if (lm_vk_gemv_fits(v, pc, batch, share)) {
        lm_status gst = lm_vk_run_matmul_gemv(v, node, pc, batch);
        return gst == LM_OK ? gst : lm_error_prefix("matmul");
    }
    /* f16 on VK_NV_cooperative_matrix2 (matmul_cm2.c), then f16 and bf16 on
     * subgroup-scope tensor cores where the device has them (matmul_coop.c) */
    if (lm_vk_cm2_fits(v, node, pc, batch, share)) {
        lm_status cst = lm_vk_run_matmul_cm2(v, node, pc, batch, share);
        return cst == LM_OK ? cst : lm_error_prefix("matmul");
    }
    if (lm_vk_coop_fits(v, node, pc, batch, share)) {
        lm_status cst = lm_vk_run_matmul_coop(v, node, pc, batch, share);
        return cst == LM_OK ? cst : lm_error_prefix("matmul");
    }
    /* big products: vec4 loads, double-buffered tiles (matmul_f32);
     * below 128x128 outputs its tiles would leave most of a GPU idle.  A
     * stacked call decides by one image's rows (choice.h) */
    if (lm_vk_mm_size(pc->M, pc->N, batch, share) >= 128 * 128 && v->feat.max_shared >= 32768 &&
        !getenv_off("LUMEN_VK_MM_F32")) {
        lm_status fst = run_f32(v, node, pc, batch, share);
        return fst == LM_OK ? fst : lm_error_prefix("matmul");
    }
    /* big tiles (8x8 per thread) for big products, 4x4 otherwise */
    bool big = lm_vk_mm_size(pc->M, pc->N, batch, share) >= 512 * 512;
    uint32_t bm = big ? 128 : 64;
    uint32_t spec[10] = {a->dtype, b->dtype, node->dtype, 0, 0, 0, 0, 0,
                         pc->sak == 1 || pc->sam != 1, pc->sbn == 1 || pc->sbk != 1};
    lm_vk_arg args[3] = {{lm_vk_mem_of(a), false}, {lm_vk_mem_of(b), false},
                         {lm_vk_mem_of(node), true}};
    lm_status st = lm_vk_dispatch(v, big ? "matmul_big" : "matmul", spec, 10, args, 3, pc, sizeof *pc,
                                  (uint32_t)((pc->N + bm - 1) / bm), (uint32_t)((pc->M + bm - 1) / bm),
                                  (uint32_t)batch);
    return st == LM_OK ? st : lm_error_prefix("matmul");
}

lm_status lm_vk_run_matmul(lm_vk_dev *v, lm_array *node)
{
    mm_pc pc;
    if (!plan(v, node, &pc))
        return lm_error_set(LM_ERR_UNSUPPORTED, "vulkan: matmul shape beyond one dispatch");
    int64_t mn = (int64_t)pc.M * pc.N;
    int64_t batch = mn > 0 ? node->size / mn : 1;
    if (pc.K == 0)     /* an empty sum: zeros */
        return lm_vk_fill(v, lm_vk_mem_of(node), node->dtype, node->size, 0.0);
    return mm_dispatch(v, node, &pc, batch, lm_array_share(node));
}

/* A stand-in for a matmul node over g's buffers: the kernels read only the
 * dtypes, the inputs and the buffers' handles of what they are given. */
typedef struct gemm_node {
    lm_array a, b, c;
    lm_array *in[2];
    lm_buffer ba, bb, bc;
} gemm_node;

static void gemm_node_init(gemm_node *n, const lm_vk_gemm *g)
{
    memset(n, 0, sizeof *n);
    n->ba.handle = (void *)(uintptr_t)g->a;
    n->bb.handle = (void *)(uintptr_t)g->b;
    n->bc.handle = (void *)(uintptr_t)g->c;
    n->a.dtype = g->ta;
    n->b.dtype = g->tb;
    n->c.dtype = g->tc;
    n->a.buf = &n->ba;
    n->b.buf = &n->bb;
    n->c.buf = &n->bc;
    n->in[0] = &n->a;
    n->in[1] = &n->b;
    n->c.ninputs = 2;
    n->c.inputs = n->in;
}

bool lm_vk_gemm_fits(lm_vk_dev *v, const lm_vk_gemm *g, bool *tensor_cores)
{
    if (!mm_dtype(g->ta) || !mm_dtype(g->tb) || !mm_dtype(g->tc) || g->pc.nb < 0 || g->pc.nb > 4 ||
        g->batch < 1 || g->batch > v->feat.max_groups[2] || (g->pc.N + 63) / 64 > (int64_t)v->feat.max_groups[0] ||
        (g->pc.M + 63) / 64 > (int64_t)v->feat.max_groups[1] || g->pc.K < 1)
        return false;
    gemm_node n;
    gemm_node_init(&n, g);
    if (tensor_cores)
        *tensor_cores = lm_vk_cm2_fits(v, &n.c, &g->pc, g->batch, g->share) ||
                        lm_vk_coop_fits(v, &n.c, &g->pc, g->batch, g->share);
    return true;
}

lm_status lm_vk_gemm_run(lm_vk_dev *v, const lm_vk_gemm *g)
{
    if (!lm_vk_gemm_fits(v, g, NULL))
        return lm_error_set(LM_ERR_UNSUPPORTED, "vulkan: matmul on buffers: %d x %d x %d, batch %lld beyond one "
                            "dispatch", g->pc.M, g->pc.N, g->pc.K, (long long)g->batch);
    gemm_node n;
    gemm_node_init(&n, g);
    return mm_dispatch(v, &n.c, &g->pc, g->batch, g->share);
}
