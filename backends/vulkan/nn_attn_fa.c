/* nn_attn_fa.c - the fast attention kernel on Vulkan (shaders/nn_attn_fa.glsl,
 * FlashAttention-2 style tiles: 64 queries x 64 keys per step, 256 threads)
 * for the common case: no mask or causal only, D = Dv in {64, 128, 256,
 * 512}, f32/f16/bf16 storage.  nn_norm.c asks lm_vk_attn_fast_shader first
 * and keeps nn_attn for everything else (masks, other head dims).
 * D = 512 has two kernels: nn_attn_fa512 (a workgroup per block of 64
 * queries) and nn_attn_fa512s (two per block, 256 output columns each,
 * the scores computed by both): the second where there are few query
 * blocks to spread over the GPU (a VAE's single-head attention);
 * LUMEN_VK_ATTN_SPLIT=0/1 forces either.
 * Where the device has tensor cores, f16 / bf16 attention with D over 256
 * and no mask runs instead as two matrix products around a softmax
 * (run_gemm below; LUMEN_VK_ATTN512=gemm|simt forces either way).
 *
 * The kernel reads rows of 8 elements as vectors, so q, k and v must have a
 * unit-stride head dim and offsets and other strides that keep each row
 * vector-aligned; a transposed [B, L, H, D] view qualifies as it is.  Other
 * views are first copied into a contiguous temporary (lm_vk_move), which
 * is released once the kernel is recorded (the core orders its reuse).
 * LUMEN_VK_ATTN_FAST=0 turns the path off (for comparisons).
 *
 * Where the device has NV cooperative matrices with 16x16x16 f16 fragments
 * (and subgroups of 32), f16 q, k and v with D = Dv = 64 or 128 take the
 * tensor-core kernel instead (shaders/nn_attn_coop.glsl: the same push
 * constants, block of 64 queries and input handling, 128 threads; the
 * variants are described in nn_attn_coop.glsl and nn_attn_coop_regs.glsl);
 * LUMEN_VK_ATTN_COOP=0 keeps them on the SIMT kernel.  bf16 stays there:
 * NV cooperative matrices have no bf16 type, and f16 would change values
 * outside its range (see matmul_coop.c).
 *
 * Before both, on NVIDIA's driver with VK_KHR_cooperative_matrix (16x16x16
 * f16 fragments, subgroups of 32) and a SPIR-V file built with glslang 15,
 * f16 q, k and v with D = Dv a multiple of 8 up to 256, no mask or an
 * additive f32 / bool mask, take shaders/nn_attn_khr.glsl (khr_shader,
 * run_khr below).  LUMEN_VK_ATTN_KHR=0 keeps the kernels above (for
 * comparisons), =<tile> (n4, n8, ps, tab, cv) forces a tile where it is built;
 * LUMEN_VK_ATTN_COOP=0 turns every tensor-core kernel off.
 *
 * bf16 q, k and v take the same kernel built with bf16 fragments
 * (nn_attn_khr*_bf, khr_bf16_shader) where the device offers
 * VK_KHR_shader_bfloat16 with bf16 cooperative matrices of 16x16x16
 * (device.c: feat.coop_bf16; LUMEN_VK_BF16=0 turns it off): D a multiple
 * of 8 up to 256, masks and output dtypes as f16's (bf16 or f32).
 * Elsewhere bf16 stays on the SIMT kernel.
 *
 * Before all of them, where LUMEN_VK_ATTN_CM2=1 (or =<tile>) asks for it
 * when the device is opened and the device has VK_NV_cooperative_matrix2
 * with row reductions and conversions (device.c: feat.cm2_attn), f16 (and,
 * with bf16 workgroup shapes and
 * VK_KHR_shader_bfloat16, bf16) q, k and v with D = Dv a multiple of 8 up
 * to 128, no mask, a positive scale and an output as q's or f32 take
 * shaders/nn_attn_cm2.glsl (cm2_shader: workgroup-scope flash attention,
 * the same push constants and bindings as the KHR kernel).  It is opt-in:
 * on driver 580 (H200) it measured 4-5x slower than the KHR kernel at every
 * tile (docs/BENCHMARKS.md, 2026-11-29).  LUMEN_VK_ATTN_CM2=0 turns it off,
 * =<tile> (module.mk's: q128, c32, c128, q128c128, q32, nw, ...) forces a
 * tile where it is built;
 * LUMEN_VK_ATTN_KHR=0 and LUMEN_VK_ATTN_COOP=0 turn it off too. */
#include <stdio.h>
#include <stdlib.h>
#include "backends/vulkan/vk.h"
#include "backends/vulkan/shaders.h"

#define FA_SHARED (32 * 1024)   /* the kernel's shared memory */
#define COOP_SHARED (35 * 1024) /* nn_attn_coop128's */
#define LOG2E 1.4426950408889634

typedef struct fa_pc {
    int32_t Hq, Lq, Lk, nqb, grp;
    uint32_t items, causal;
    float scale;
    int32_t oq, ok, ov;
    int32_t sq[3], sk[3], sv[3];
} fa_pc;

static bool fast_off(void)
{
    const char *e = getenv("LUMEN_VK_ATTN_FAST");
    return e && !strcmp(e, "0");
}

/* workgroups per query block of D = 512: 2 below FA_SPLIT_BELOW query
 * blocks in all (or as LUMEN_VK_ATTN_SPLIT says) */
#define FA_SPLIT_BELOW 256

int lm_vk_fa512_parts(int64_t bh, int64_t lq, int share)
{
    return lm_vk_share_div(bh, share) * ((lq + 63) / 64) < FA_SPLIT_BELOW ? 2 : 1;
}

/* a stacked call (share) counts one image's query blocks (choice.h) */
static int fa512_split(const lm_array *node)
{
    const char *e = getenv("LUMEN_VK_ATTN_SPLIT");
    if (e && *e) return strcmp(e, "0") ? 2 : 1;
    const lm_array *q = node->inputs[0];
    return lm_vk_fa512_parts(q->shape[0] * q->shape[1], q->shape[2], lm_array_share(node));
}

static int64_t coop_runs;

/* nn_attn_khr.glsl's push constants */
typedef struct khr_pc {
    int32_t Hq, Lq, Lk, nqb, grp;
    uint32_t items, causal, mask;
    float scale;
    int32_t D;
    int32_t oq, ok, ov, om;
    int32_t sq[3], sk[3], sv[3];
    int32_t sm[4];
} khr_pc;

/* the head dims built (module.mk: nn_attn_khrHD, with a mask _m), smallest
 * first, and the tiles built for measurements (LUMEN_VK_ATTN_KHR=<tile>;
 * _cv needs cooperative matrix 2) */
#define KHR_NDIMS 8
static const int khr_dims[KHR_NDIMS] = {32, 48, 64, 80, 96, 128, 160, 256};
static const char *const khr_names[KHR_NDIMS][2] = {
    {"nn_attn_khr32", "nn_attn_khr32_m"},    {"nn_attn_khr48", "nn_attn_khr48_m"},
    {"nn_attn_khr64_n8", "nn_attn_khr64_m"}, {"nn_attn_khr80", "nn_attn_khr80_m"},
    {"nn_attn_khr96", "nn_attn_khr96_m"},    {"nn_attn_khr128", "nn_attn_khr128_m"},
    {"nn_attn_khr160", "nn_attn_khr160_m"},  {"nn_attn_khr256", "nn_attn_khr256_m"},
};
static const char *const khr_tiles[] = {
    "nn_attn_khr64_n4",  "nn_attn_khr64_ps",  "nn_attn_khr64_tab",  "nn_attn_khr64_n8tab",  "nn_attn_khr128_n8",
    "nn_attn_khr128_ps", "nn_attn_khr128_tab", "nn_attn_khr128_n8tab", "nn_attn_khr64_cv",  "nn_attn_khr128_cv",
    "nn_attn_khr128_n8cv", "nn_attn_khr128_k32", "nn_attn_khr128_n8k32", "nn_attn_khr128_qs",
    "nn_attn_khr128_qsk32", "nn_attn_khr64_n8qs", "nn_attn_khr128_ea", "nn_attn_khr64_n8ea",
};

/* which bit of a component's index adds 8 to its row, 1 to its column and
 * 8 to its column (nn_attn_khr.glsl's RB, CB1, CB8): the permutations, and
 * the one NVIDIA's driver uses (580.159, H100: found by running each;
 * LUMEN_VK_ATTN_LMAP=0..5 forces one) */
static const uint32_t khr_lmaps[6][3] = {{1, 0, 2}, {2, 0, 1}, {0, 1, 2}, {0, 2, 1}, {1, 2, 0}, {2, 1, 0}};
#define KHR_LMAP 1
#define KHR_SHARED (40 * 1024)   /* the largest variant's shared memory, rounded up */

int64_t lm_vulkan_attn_coop_count(void)
{
    return coop_runs;
}

static int64_t cm2_runs;

int64_t lm_vulkan_attn_cm2_count(void)
{
    return cm2_runs;
}

/* the tensor-core kernel for node, or NULL where it does not apply */
static const char *coop_shader(const lm_vk_dev *v, const lm_array *node, int64_t D)
{
    const char *e = getenv("LUMEN_VK_ATTN_COOP");
    if (e && !strcmp(e, "0")) return NULL;
    const lm_vk_features *ft = &v->feat;
    if (!ft->coopmat_nv || ft->subgroup_size != 32 || ft->max_shared < COOP_SHARED) return NULL;
    bool f16x16 = false;
    for (int i = 0; i < ft->ncoop; i++)
        f16x16 |= ft->coop_mnk[i][0] == 16 && ft->coop_mnk[i][1] == 16 && ft->coop_mnk[i][2] == 16;
    if (!f16x16) return NULL;
    for (int i = 0; i < 3; i++)
        if (node->inputs[i]->dtype != LM_F16) return NULL;
    if (node->dtype != LM_F16 && node->dtype != LM_F32) return NULL;
    if (D != 64 && D != 128) return NULL;
    /* the softmax in registers (r4) relies on NVIDIA's layout of
     * accumulators (the shader checks it); elsewhere S and P go through
     * shared memory (smem).  LUMEN_VK_ATTN_COOP=smem or r4 forces one. */
    static const char *const names[2][2] = {{"nn_attn_coop64", "nn_attn_coop64_r4"},
                                            {"nn_attn_coop128", "nn_attn_coop128_r4"}};
    bool regs = v->props.vendorID == 0x10de;
    if (e && !strcmp(e, "smem")) regs = false;
    if (e && !strcmp(e, "r4")) regs = true;
    return names[D == 128][regs];
}

static bool in_file(const char *shader)
{
    return lm_vk_spirv_load() == LM_OK && lm_vk_shader_find(shader);
}

/* the queries a workgroup of a KHR tile takes (16 x RT x NSG) */
static int khr_bq(const char *shader)
{
    if (!strncmp(shader, "nn_attn_cm2", 11))   /* module.mk's BQ */
        return strstr(shader, "_q128") ? 128 : strstr(shader, "_q32") ? 32 : 64;
    return strstr(shader, "_n8") ? 128 : 64;
}

/* the bf16 builds (module.mk's VK_BF16_VARIANTS: f16's kernels with bf16
 * fragments), head dims up to 64, 128 and 256; LUMEN_VK_ATTN_KHR=n8 takes
 * nn_attn_khr128_n8_bf at D 128 */
#define KHR_BF_NDIMS 3
static const int khr_bf_dims[KHR_BF_NDIMS] = {64, 128, 256};
static const char *const khr_bf_names[KHR_BF_NDIMS][2] = {
    {"nn_attn_khr64_n8_bf", "nn_attn_khr64_m_bf"},
    {"nn_attn_khr128_bf", "nn_attn_khr128_m_bf"},
    {"nn_attn_khr256_bf", "nn_attn_khr256_m_bf"},
};

static const char *khr_bf16_shader(const lm_array *node, int64_t D, const char *e)
{
    int hd = -1;
    for (int i = 0; i < KHR_BF_NDIMS && hd < 0; i++)
        if (khr_bf_dims[i] >= D) hd = i;
    const char *name = khr_bf_names[hd][node->ninputs == 4];
    if (e && !strcmp(e, "n8") && hd == 1 && node->ninputs == 3 && in_file("nn_attn_khr128_n8_bf"))
        name = "nn_attn_khr128_n8_bf";
    return in_file(name) ? name : NULL;
}

/* the KHR tensor-core kernel for node, or NULL where it does not apply */
static const char *khr_shader(const lm_vk_dev *v, const lm_array *node)
{
    const char *e = getenv("LUMEN_VK_ATTN_KHR"), *c = getenv("LUMEN_VK_ATTN_COOP");
    if ((e && !strcmp(e, "0")) || (c && !strcmp(c, "0"))) return NULL;
    const lm_vk_features *ft = &v->feat;
    /* row reductions assume NVIDIA's accumulator layout (the shader checks) */
    if (!ft->coopmat_khr || ft->subgroup_size != 32 || ft->max_shared < KHR_SHARED || v->props.vendorID != 0x10de ||
        ft->max_storage_buffers < LM_VK_WIDE_BINDINGS)
        return NULL;
    lm_dtype dt = node->ninputs >= 3 ? node->inputs[0]->dtype : LM_F32;
    bool bf = dt == LM_BF16;
    /* f16 or bf16 q, k and v only: f32 ones stay on the SIMT kernel */
    if (dt != LM_F16 && !bf) return NULL;
    int nshapes = bf ? (ft->coop_bf16 ? ft->ncoop_bf16 : 0) : ft->ncoop_khr;
    const uint8_t(*mnk)[3] = bf ? ft->coop_bf16_mnk : ft->coop_khr_mnk;
    bool x16 = false;
    for (int i = 0; i < nshapes; i++) x16 |= mnk[i][0] == 16 && mnk[i][1] == 16 && mnk[i][2] == 16;
    if (!x16 || node->ninputs < 3 || node->ninputs > 4 || !lm_vk_fits_i32(node)) return NULL;
    for (int i = 0; i < 3; i++)
        if (node->inputs[i]->dtype != dt || node->inputs[i]->ndim != 4 || !lm_vk_fits_i32(node->inputs[i]))
            return NULL;
    if (node->dtype != dt && node->dtype != LM_F32) return NULL;
    if (node->ninputs == 4) {
        const lm_array *m = node->inputs[3];
        bool add = node->params.i[1] == 1 && m->dtype == LM_F32, keep = node->params.i[1] == 2 && m->dtype == LM_BOOL;
        if (!(add || keep) || m->ndim != 4 || !lm_vk_fits_i32(m)) return NULL;
    }
    int64_t D = node->inputs[0]->shape[3];
    if (node->inputs[2]->shape[3] != D || D % 8 || D <= 0 || D > 256) return NULL;
    if (bf) return khr_bf16_shader(node, D, e);
    int hd = -1;
    for (int i = 0; i < KHR_NDIMS && hd < 0; i++)
        if (khr_dims[i] >= D) hd = i;
    const char *name = khr_names[hd][node->ninputs == 4];
    if (e && *e && strcmp(e, "1") && node->ninputs == 3) {
        char want[48];
        snprintf(want, sizeof want, "nn_attn_khr%d_%s", khr_dims[hd], e);
        for (size_t i = 0; i < sizeof khr_tiles / sizeof *khr_tiles; i++)
            if (!strcmp(khr_tiles[i], want) && in_file(khr_tiles[i]) && (!strstr(want, "cv") || ft->coopmat2))
                name = khr_tiles[i];
    }
    return in_file(name) ? name : NULL;
}

/* the cooperative-matrix-2 kernel for node (shaders/nn_attn_cm2.glsl), or
 * NULL where it does not apply; module.mk's nn_attn_cm2_HD[_tile][_bf] */
static const char *cm2_shader(const lm_vk_dev *v, const lm_array *node)
{
    const char *e = getenv("LUMEN_VK_ATTN_CM2"), *k = getenv("LUMEN_VK_ATTN_KHR"), *c = getenv("LUMEN_VK_ATTN_COOP");
    if ((e && !strcmp(e, "0")) || (k && !strcmp(k, "0")) || (c && !strcmp(c, "0"))) return NULL;
    const lm_vk_features *ft = &v->feat;
    if (!ft->cm2_attn || v->props.vendorID != 0x10de || node->ninputs != 3 || !lm_vk_fits_i32(node) ||
        ft->max_storage_buffers < LM_VK_WIDE_BINDINGS)
        return NULL;
    lm_dtype dt = node->inputs[0]->dtype;
    if (dt != LM_F16 && !(dt == LM_BF16 && ft->coop_bf16 && ft->cm2_bf16)) return NULL;
    if (ft->cm2_max_invocations < 256 || ft->cm2_max_dim < 128) return NULL;
    for (int i = 0; i < 3; i++)
        if (node->inputs[i]->dtype != dt || node->inputs[i]->ndim != 4 || !lm_vk_fits_i32(node->inputs[i]))
            return NULL;
    if (node->dtype != dt && node->dtype != LM_F32) return NULL;
    if (!(node->params.f[0] > 0)) return NULL;
    int64_t D = node->inputs[0]->shape[3];
    if (node->inputs[2]->shape[3] != D || D % 8 || D <= 0 || D > 128) return NULL;
    char name[64];
    snprintf(name, sizeof name, "nn_attn_cm2_%d", D <= 64 ? 64 : 128);
    if (e && *e && strcmp(e, "1")) {
        char want[64];
        snprintf(want, sizeof want, "%.16s_%.16s%s", name, e, dt == LM_BF16 ? "_bf" : "");
        if (in_file(want)) memcpy(name, want, sizeof name);
        else if (dt == LM_BF16) strcat(name, "_bf");
    } else if (dt == LM_BF16) {
        strcat(name, "_bf");
    }
    /* an f16 x f16 + f32 workgroup shape for the tile's invocations (module.mk's
     * NT) whose granularity divides its 32-row and 32-column blocks */
    int nt = strstr(name, "_q128") ? 256 : strstr(name, "t64") ? 64 : 128;
    bool shape = false;
    for (int i = 0; i < ft->ncm2; i++)
        shape |= !ft->cm2[i].f16_acc && ft->cm2[i].invocations == nt && 32 % ft->cm2[i].m == 0 &&
                 32 % ft->cm2[i].n == 0 && 32 % ft->cm2[i].k == 0;
    const lm_vk_shader *found = shape && in_file(name) ? lm_vk_shader_find(name) : NULL;
    return found ? found->name : NULL;
}

/* the element offset and batch, head, row strides of a 4-D view */
static void khr_strides(const lm_array *a, int32_t *off, int32_t *st, int n)
{
    *off = (int32_t)a->offset;
    for (int d = 0; d < n; d++) st[d] = (int32_t)a->strides[d];
}

/* ---- D > 256 as two matrix products around a softmax (run_gemm) ----
 * For each piece of queries: S = Q_piece K^T (f32, the matmul kernels:
 * cm2 / KHR / NV tensor cores where the device has them, the f32-arithmetic
 * tiles elsewhere), P = softmax(scale * S) row by row (nn_attn_sm.comp: f32,
 * max-subtracted, stored in the inputs' dtype as SDPA's math path does, so
 * the second product runs on the tensor cores too; LUMEN_VK_ATTN512_P=f32
 * keeps P in f32), O_piece = P V straight into the output.  A piece is
 * every query of one image's batch entries (all heads) where their scores
 * fit GEMM_SCORES bytes, else GEMM rows of queries of one (batch, head):
 * the output's batch stride is Lq rows, so a piece of fewer rows takes one
 * head.  The piece is chosen from one image's part (choice.h,
 * lm_vk_attn_gemm_rows) and every product of a piece counts as one
 * image's, so stacked images keep single runs' bytes.  Causal masks keys
 * in the softmax (the products still cover them); other masks stay on the
 * SIMT kernels. */
#define GEMM_SCORES ((int64_t)256 << 20)

static int64_t gemm_runs;

int64_t lm_vulkan_attn_gemm_count(void)
{
    return gemm_runs;
}

int64_t lm_vk_attn_gemm_rows(int64_t b, int64_t h, int64_t lq, int64_t lk, int share)
{
    int64_t b1 = lm_vk_share_div(b, share), row = 4 * (lk > 0 ? lk : 1);
    if (b1 * h * lq <= GEMM_SCORES / row) return 0;
    int64_t r = GEMM_SCORES / row / 64 * 64;
    r = r < 64 ? 64 : r;
    return r < lq ? r : lq;
}

/* LUMEN_VK_ATTN512: "gemm" (or 1) or "simt" (or 0) forces either, unset
 * (or anything else) chooses */
static int gemm_wanted(void)
{
    const char *e = getenv("LUMEN_VK_ATTN512");
    if (!e || !*e) return -1;
    return !strcmp(e, "gemm") || !strcmp(e, "1") ? 1 : !strcmp(e, "simt") || !strcmp(e, "0") ? 0 : -1;
}

/* rows a piece: LUMEN_VK_ATTN512_ROWS=<n> (pieces of n queries of one
 * head), else the choice */
static int64_t gemm_rows(const lm_array *node)
{
    const lm_array *q = node->inputs[0];
    const char *e = getenv("LUMEN_VK_ATTN512_ROWS");
    if (e && atoll(e) > 0) return atoll(e);
    return lm_vk_attn_gemm_rows(q->shape[0], q->shape[1], q->shape[2], node->inputs[1]->shape[2],
                                lm_array_share(node));
}

static lm_dtype gemm_pdt(const lm_array *node)
{
    const char *e = getenv("LUMEN_VK_ATTN512_P");
    return e && !strcmp(e, "f32") ? LM_F32 : node->inputs[0]->dtype;
}

/* the batch dims of a piece of n batch entries (all heads: hk key heads of
 * grp query heads), or one head (n 0): shape and the strides of operand a
 * (query-head dims sa0, sa1 per query head) and b (key heads) */
static void gemm_batch(lm_vk_mm_pc *pc, int64_t n, int64_t hk, int64_t grp, const int64_t sa[2], const int64_t sb[2])
{
    int64_t sh[3] = {n, hk, grp}, st_a[3] = {sa[0], grp * sa[1], sa[1]}, st_b[3] = {sb[0], sb[1], 0};
    pc->nb = 0;
    for (int d = 0; d < 3 && n > 0; d++) {
        if (sh[d] == 1) continue;
        pc->bshape[pc->nb] = (int32_t)sh[d];
        pc->bsa[pc->nb] = (int32_t)st_a[d];
        pc->bsb[pc->nb] = (int32_t)st_b[d];
        pc->nb++;
    }
    if (pc->nb == 0) {
        pc->nb = 1;
        pc->bshape[0] = 1;
        pc->bsa[0] = pc->bsb[0] = 0;
    }
}

typedef struct gemm_piece {
    int64_t b, n, h, q0, m;   /* batch entry b (n of them, all heads) or head h of it (n 0); queries q0.. q0+m */
} gemm_piece;

/* the two products of a piece; the second writes into the output (where
 * out is NULL: into the device's dummy buffer, in plan mode) */
static void gemm_products(const lm_array *node, const gemm_piece *p, const lm_vk_mem *S, const lm_vk_mem *P,
                          const lm_vk_mem *out, lm_dtype pdt, lm_vk_gemm *g1, lm_vk_gemm *g2)
{
    const lm_array *q = node->inputs[0], *k = node->inputs[1], *val = node->inputs[2];
    int64_t Hq = q->shape[1], Hk = k->shape[1], grp = Hq / Hk, Lk = k->shape[2];
    int64_t kh = p->n ? 0 : p->h / grp, qh = p->n ? 0 : p->h;
    int64_t batch = p->n ? p->n * Hq : 1;
    memset(g1, 0, sizeof *g1);
    memset(g2, 0, sizeof *g2);
    /* S = Q K^T: K's rows are B's columns */
    g1->a = lm_vk_mem_of(q);
    g1->b = lm_vk_mem_of(k);
    g1->c = S;
    g1->ta = q->dtype;
    g1->tb = k->dtype;
    g1->tc = LM_F32;
    g1->pc.M = (int32_t)p->m;
    g1->pc.N = (int32_t)Lk;
    g1->pc.K = (int32_t)q->shape[3];
    g1->pc.off_a = (int32_t)(q->offset + p->b * q->strides[0] + qh * q->strides[1] + p->q0 * q->strides[2]);
    g1->pc.off_b = (int32_t)(k->offset + p->b * k->strides[0] + kh * k->strides[1]);
    g1->pc.sam = (int32_t)q->strides[2];
    g1->pc.sak = (int32_t)q->strides[3];
    g1->pc.sbk = (int32_t)k->strides[3];
    g1->pc.sbn = (int32_t)k->strides[2];
    int64_t qa[2] = {q->strides[0], q->strides[1]}, kb[2] = {k->strides[0], k->strides[1]};
    gemm_batch(&g1->pc, p->n, Hk, grp, qa, kb);
    g1->batch = batch;
    g1->share = 1;
    /* O = P V, P contiguous [batch][m][Lk] */
    g2->a = P;
    g2->b = lm_vk_mem_of(val);
    g2->c = out;
    g2->ta = pdt;
    g2->tb = val->dtype;
    g2->tc = node->dtype;
    g2->pc.M = (int32_t)p->m;
    g2->pc.N = (int32_t)val->shape[3];
    g2->pc.K = (int32_t)Lk;
    g2->pc.off_b = (int32_t)(val->offset + p->b * val->strides[0] + kh * val->strides[1]);
    g2->pc.sam = (int32_t)Lk;
    g2->pc.sak = 1;
    g2->pc.sbk = (int32_t)val->strides[2];
    g2->pc.sbn = (int32_t)val->strides[3];
    int64_t pa[2] = {Hq * p->m * Lk, p->m * Lk}, vb[2] = {val->strides[0], val->strides[1]};
    gemm_batch(&g2->pc, p->n, Hk, grp, pa, vb);
    g2->batch = batch;
    g2->share = 1;
}

/* nn_attn_sm.comp's push constants */
typedef struct sm_pc {
    uint32_t rows, len, m, q0;
    float scale;
    uint32_t causal;
} sm_pc;

static lm_status gemm_piece_run(lm_vk_dev *v, lm_array *node, const gemm_piece *p, const lm_vk_mem *S,
                                const lm_vk_mem *P, lm_dtype pdt)
{
    const lm_array *q = node->inputs[0];
    int64_t Lq = q->shape[2], Dv = node->inputs[2]->shape[3];
    /* the output rows of the piece, as a window of the output's memory */
    lm_vk_mem out = *lm_vk_mem_of(node);
    int64_t first = p->n ? p->b * q->shape[1] * Lq : (p->b * q->shape[1] + p->h) * Lq + p->q0;
    VkDeviceSize skip = (VkDeviceSize)(first * Dv * (int64_t)lm_dtype_size(node->dtype));
    out.off += skip;
    out.size -= skip;
    out.next_deferred = NULL;
    lm_vk_gemm g1, g2;
    gemm_products(node, p, S, P, &out, pdt, &g1, &g2);
    lm_status st = lm_vk_gemm_run(v, &g1);
    if (st == LM_OK) {
        sm_pc pc = {(uint32_t)(g1.batch * p->m), (uint32_t)g1.pc.N, (uint32_t)p->m, (uint32_t)p->q0,
                    (float)node->params.f[0], node->params.i[0] != 0};
        uint32_t spec[1] = {pdt};
        lm_vk_arg args[2] = {{S, false}, {P, true}};
        st = lm_vk_dispatch(v, "nn_attn_sm", spec, 1, args, 2, &pc, sizeof pc, lm_vk_groups(v, pc.rows, 1), 1, 1);
    }
    if (st == LM_OK) st = lm_vk_gemm_run(v, &g2);
    return st;
}

/* the pieces in order: the first piece of each kind is the largest */
static bool gemm_next(const lm_array *node, int64_t rows, gemm_piece *p, bool first)
{
    const lm_array *q = node->inputs[0];
    int64_t B = q->shape[0], H = q->shape[1], Lq = q->shape[2];
    if (rows == 0) {   /* one image's batch entries at a time */
        int64_t b1 = lm_vk_share_div(B, lm_array_share(node));
        if (first) *p = (gemm_piece){0, b1, 0, 0, Lq};
        else if ((p->b += b1) >= B) return false;
        return true;
    }
    if (first) p->b = p->h = p->q0 = 0;
    else if ((p->q0 += rows) >= Lq) {
        p->q0 = 0;
        if (++p->h == H) p->h = 0, p->b++;
        if (p->b == B) return false;
    }
    p->n = 0;
    p->m = Lq - p->q0 < rows ? Lq - p->q0 : rows;
    return true;
}

/* does the GEMM path take node (forced: LUMEN_VK_ATTN512=gemm)?  D or Dv
 * over 256, no mask, f16/bf16 q, k and v of one dtype (f32 too where
 * forced), an output as theirs or f32, rows of the output on the device's
 * binding alignment, 32-bit indices, a piece's scores within one binding;
 * by default only where the first product runs on tensor cores, and f32 on
 * GPUs (not CPU devices) */
static bool gemm_takes(lm_vk_dev *v, const lm_array *node)
{
    int want = gemm_wanted();
    if (want == 0 || node->ninputs != 3 || !lm_vk_fits_i32(node)) return false;
    const lm_array *q = node->inputs[0];
    lm_dtype dt = q->dtype;
    /* f32 by default on GPUs: on the H200 its products on the f32 tiles
     * took half the SIMT kernel's time (docs/BENCHMARKS.md#issue36-table) */
    bool f32 = dt == LM_F32 && (want == 1 || !lm_vk_cpu_device(v));
    if (dt != LM_F16 && dt != LM_BF16 && !f32) return false;
    for (int i = 0; i < 3; i++)
        if (node->inputs[i]->dtype != dt || node->inputs[i]->ndim != 4 || !lm_vk_fits_i32(node->inputs[i]))
            return false;
    if (node->dtype != dt && node->dtype != LM_F32) return false;
    int64_t D = q->shape[3], Dv = node->inputs[2]->shape[3], Lq = q->shape[2], Lk = node->inputs[1]->shape[2];
    if ((D <= 256 && Dv <= 256) || Lq < 1 || Lk < 1 || node->size < 1) return false;
    int64_t esize = (int64_t)lm_dtype_size(node->dtype);
    if (v->feat.align && (Dv * esize) % (int64_t)v->feat.align) return false;
    int64_t rows = gemm_rows(node);
    int64_t batch = rows ? 1 : lm_vk_share_div(q->shape[0], lm_array_share(node)) * q->shape[1];
    int64_t m = rows ? (rows < Lq ? rows : Lq) : Lq;
    /* the scores of a piece in one binding (maxStorageBufferRange) and 32-bit indices */
    if (batch * m * Lk >= INT32_MAX || (VkDeviceSize)(4 * batch * m * Lk) > v->feat.max_range) return false;
    gemm_piece p;
    gemm_next(node, rows, &p, true);
    lm_vk_gemm g1, g2;
    gemm_products(node, &p, v->dummy, v->dummy, v->dummy, gemm_pdt(node), &g1, &g2);
    bool tc = false;
    if (!lm_vk_gemm_fits(v, &g1, &tc) || !lm_vk_gemm_fits(v, &g2, NULL)) return false;
    return want == 1 || tc || f32;
}

static lm_status run_gemm(lm_vk_dev *v, lm_array *node)
{
    const lm_array *q = node->inputs[0];
    int64_t Lq = q->shape[2], Lk = node->inputs[1]->shape[2];
    int64_t rows = gemm_rows(node);
    lm_dtype pdt = gemm_pdt(node);
    int64_t n = rows ? (rows < Lq ? rows : Lq) * Lk : lm_vk_share_div(q->shape[0], lm_array_share(node)) * q->shape[1] * Lq * Lk;
    lm_buffer *S = NULL, *P = NULL;
    const lm_vk_mem *sm = v->dummy, *pm = v->dummy;
    lm_status st = LM_OK;
    /* plan mode records nothing: the kernels' pipelines start on the
     * device's dummy buffer, no scratch is made */
    if (!v->plan) {
        S = lm_buffer_alloc(v->dev, (size_t)(4 * n));
        P = S ? lm_buffer_alloc(v->dev, (size_t)(n * (int64_t)lm_dtype_size(pdt))) : NULL;
        if (!P) st = lm_error_status();
        else sm = S->handle, pm = P->handle;
    }
    gemm_piece p;
    for (bool more = gemm_next(node, rows, &p, true); st == LM_OK && more; more = gemm_next(node, rows, &p, false))
        st = gemm_piece_run(v, node, &p, sm, pm, pdt);
    if (st == LM_OK && !v->plan) gemm_runs++;
    if (S) lm_buffer_release(S);
    if (P) lm_buffer_release(P);
    return st == LM_OK ? st : lm_error_prefix("attention (two products, D %lld)", (long long)q->shape[3]);
}

const char *lm_vk_attn_fast_shader(lm_vk_dev *v, const lm_array *node)
{
    if (fast_off()) return NULL;
    const char *cm2 = cm2_shader(v, node);
    if (cm2) return cm2;
    const char *khr = khr_shader(v, node);
    if (khr) return khr;
    if (gemm_takes(v, node)) return "nn_attn_gemm";
    if (node->ninputs != 3 || v->feat.max_shared < FA_SHARED) return NULL;
    int64_t D = node->inputs[0]->shape[3];
    if (node->inputs[2]->shape[3] != D) return NULL;
    const char *coop = coop_shader(v, node, D);
    if (coop) return coop;
    if (D == 512) return fa512_split(node) == 2 ? "nn_attn_fa512s" : "nn_attn_fa512";
    return D == 64 ? "nn_attn_fa64" : D == 128 ? "nn_attn_fa128" : D == 256 ? "nn_attn_fa256" : NULL;
}

/* can the kernel read a's rows as it is (unit-stride head dim, every row
 * starting on a 16-byte vector: 4 f32 or 8 16-bit elements)? */
static bool rows_aligned(const lm_array *a)
{
    int64_t w = a->dtype == LM_F32 ? 4 : 8;
    if (a->strides[3] != 1 || a->offset % w) return false;
    for (int d = 0; d < 3; d++)
        if (a->strides[d] % w) return false;
    return true;
}

/* a itself where its rows are aligned, else a contiguous copy in *own;
 * *off and st[3] are the element offset and batch/head/row strides to use */
static lm_status fa_input(lm_vk_dev *v, const lm_array *a, const lm_vk_mem **mem, int32_t *off, int32_t *st,
                          lm_buffer **own)
{
    *own = NULL;
    if (rows_aligned(a)) {
        *mem = lm_vk_mem_of(a);
        *off = (int32_t)a->offset;
        for (int d = 0; d < 3; d++) st[d] = (int32_t)a->strides[d];
        return LM_OK;
    }
    lm_status s = lm_vk_contiguous_copy(v, a, own);
    if (s != LM_OK) return s;
    int64_t cs[LM_MAX_DIMS];
    lm_vk_contiguous_strides(a->ndim, a->shape, cs);
    *mem = (*own)->handle;
    *off = 0;
    for (int d = 0; d < 3; d++) st[d] = (int32_t)cs[d];
    return LM_OK;
}

static void fa_geometry(const lm_array *node, const char *shader, fa_pc *pc)
{
    const lm_array *q = node->inputs[0], *k = node->inputs[1];
    pc->Hq = (int32_t)q->shape[1];
    pc->Lq = (int32_t)q->shape[2];
    pc->Lk = (int32_t)k->shape[2];
    pc->nqb = (pc->Lq + 63) / 64;
    pc->grp = (int32_t)(q->shape[1] / k->shape[1]);
    /* items: workgroups' worth of work, the slices of a query block too */
    int split = strcmp(shader, "nn_attn_fa512s") ? 1 : 2;
    pc->items = (uint32_t)(q->shape[0] * q->shape[1] * pc->nqb * split);
    pc->causal = node->params.i[0] != 0;
    /* scores in base 2: exp(x) = exp2(x * log2 e), folded into q */
    pc->scale = (float)(node->params.f[0] * LOG2E);
}

static lm_status run_khr(lm_vk_dev *v, lm_array *node, const char *shader)
{
    const lm_array *q = node->inputs[0], *k = node->inputs[1], *mask = node->ninputs > 3 ? node->inputs[3] : NULL;
    khr_pc pc;
    memset(&pc, 0, sizeof pc);
    int bq = khr_bq(shader);
    pc.Hq = (int32_t)q->shape[1];
    pc.Lq = (int32_t)q->shape[2];
    pc.Lk = (int32_t)k->shape[2];
    pc.nqb = (pc.Lq + bq - 1) / bq;
    pc.grp = (int32_t)(q->shape[1] / k->shape[1]);
    pc.items = (uint32_t)(q->shape[0] * q->shape[1] * pc.nqb);
    pc.causal = node->params.i[0] != 0;
    pc.mask = mask ? (uint32_t)node->params.i[1] : 0u;
    pc.scale = (float)(node->params.f[0] * LOG2E);
    pc.D = (int32_t)q->shape[3];
    if (mask) khr_strides(mask, &pc.om, pc.sm, 4);
    const lm_vk_mem *mem[3] = {NULL, NULL, NULL};
    lm_buffer *own[3] = {NULL, NULL, NULL};
    int32_t *off[3] = {&pc.oq, &pc.ok, &pc.ov}, *st[3] = {pc.sq, pc.sk, pc.sv};
    lm_status s = LM_OK;
    for (int i = 0; i < 3 && s == LM_OK; i++) s = fa_input(v, node->inputs[i], &mem[i], off[i], st[i], &own[i]);
    if (s == LM_OK) {
        const char *e = getenv("LUMEN_VK_ATTN_LMAP");
        int lm = e && *e ? atoi(e) : KHR_LMAP;
        if (lm < 0 || lm > 5) lm = KHR_LMAP;
        uint32_t spec[7] = {q->dtype, k->dtype, node->inputs[2]->dtype, node->dtype, khr_lmaps[lm][0], khr_lmaps[lm][1],
                            khr_lmaps[lm][2]};
        lm_vk_arg args[5] = {{mem[0], false}, {mem[1], false}, {mem[2], false},
                             {mask ? lm_vk_mem_of(mask) : NULL, false}, {lm_vk_mem_of(node), true}};
        s = lm_vk_dispatch(v, shader, spec, 7, args, 5, &pc, sizeof pc, lm_vk_groups(v, pc.items, 1), 1, 1);
        if (s == LM_OK) coop_runs++;
        if (s == LM_OK && !strncmp(shader, "nn_attn_cm2", 11)) cm2_runs++;
        if (s == LM_OK && q->dtype == LM_BF16) lm_vk_bf16_runs++;
    }
    for (int i = 0; i < 3; i++)
        if (own[i]) lm_buffer_release(own[i]);
    return s;
}

lm_status lm_vk_run_attn_fast(lm_vk_dev *v, lm_array *node, const char *shader)
{
    if (!strncmp(shader, "nn_attn_khr", 11) || !strncmp(shader, "nn_attn_cm2", 11)) return run_khr(v, node, shader);
    if (!strcmp(shader, "nn_attn_gemm")) return run_gemm(v, node);
    fa_pc pc;
    memset(&pc, 0, sizeof pc);
    fa_geometry(node, shader, &pc);
    const lm_vk_mem *mem[3] = {NULL, NULL, NULL};
    lm_buffer *own[3] = {NULL, NULL, NULL};
    int32_t *off[3] = {&pc.oq, &pc.ok, &pc.ov}, *st[3] = {pc.sq, pc.sk, pc.sv};
    lm_status s = LM_OK;
    for (int i = 0; i < 3 && s == LM_OK; i++) s = fa_input(v, node->inputs[i], &mem[i], off[i], st[i], &own[i]);
    if (s == LM_OK) {
        uint32_t spec[4] = {node->inputs[0]->dtype, node->inputs[1]->dtype, node->inputs[2]->dtype, node->dtype};
        lm_vk_arg args[4] = {{mem[0], false}, {mem[1], false}, {mem[2], false}, {lm_vk_mem_of(node), true}};
        s = lm_vk_dispatch(v, shader, spec, 4, args, 4, &pc, sizeof pc, lm_vk_groups(v, pc.items, 1), 1, 1);
        if (s == LM_OK && !strncmp(shader, "nn_attn_coop", 12)) coop_runs++;
    }
    for (int i = 0; i < 3; i++)
        if (own[i]) lm_buffer_release(own[i]);
    return s;
}
