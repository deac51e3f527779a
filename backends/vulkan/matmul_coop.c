/* matmul_coop.c - matmul on tensor cores through VK_NV_cooperative_matrix
 * (shaders/matmul_coop.glsl): f16 x f16 inputs, f32 accumulation, f16 or f32
 * results.  Used by matmul.c where the device lists an f16 shape this build
 * has a shader for; everything else (f32, bf16, mixed dtypes, devices
 * without cooperative matrices such as lavapipe) keeps the tiled kernel.
 *
 * bf16 stays on the tiled f32 kernel: VK_NV_cooperative_matrix has no bf16
 * component type, and converting bf16 to f16 would lose its exponent range
 * (values past 65504 or below 2^-24 change), so results would differ from
 * the CPU's f32 arithmetic.  A KHR variant with bf16 needs a glslc that
 * knows GL_EXT_bfloat16, which Debian 12's does not.
 *
 * Block tiles (one shader each, see the table): the default is chosen by
 * shape (pick_tile); LUMEN_VK_COOP=<variant> forces one (w4, 128x256, ...,
 * n8 for 16x8x16 fragments), =0 turns the path off.  LUMEN_VK_COOP_DIRECT=0
 * stages every result through shared memory, LUMEN_VK_COOP_SWZ=<rows> sets
 * the L2 grouping of the tile order (0: row by row). */
#include <stdlib.h>
#include <string.h>
#include "backends/vulkan/vk.h"

/* the shaders built: fragment shape and block tile */
typedef struct coop_variant {
    const char *name;        /* LUMEN_VK_COOP value */
    const char *shader;
    uint8_t fm, fn, fk;
    uint16_t bm, bn;
} coop_variant;

static const coop_variant variants[] = {
    {"128x128", "matmul_coop", 16, 16, 16, 128, 128},            /* 8 subgroups of 64x32 */
    {"w4", "matmul_coop_w4", 16, 16, 16, 128, 128},              /* 4 of 64x64 */
    {"128x128w32", "matmul_coop_128x128w32", 16, 16, 16, 128, 128}, /* 8 of 32x64 */
    {"128x256", "matmul_coop_128x256", 16, 16, 16, 128, 256},    /* 8 of 64x64, BK 16 */
    {"256x128", "matmul_coop_256x128", 16, 16, 16, 256, 128},    /* 8 of 64x64, BK 16 */
    {"128x256s1", "matmul_coop_128x256s1", 16, 16, 16, 128, 256}, /* BK 32, one stage */
    {"256x128s1", "matmul_coop_256x128s1", 16, 16, 16, 256, 128}, /* BK 32, one stage */
    {"k64s1", "matmul_coop_k64s1", 16, 16, 16, 128, 128},        /* 8 of 64x32, BK 64, one stage */
    {"w4k64s1", "matmul_coop_w4k64s1", 16, 16, 16, 128, 128},    /* 4 of 64x64, BK 64, one stage */
    {"n8", "matmul_coop_n8", 16, 8, 16, 128, 128},
    {"128x256n8", "matmul_coop_128x256n8", 16, 8, 16, 128, 256},
};
#define NVARIANTS (int)(sizeof variants / sizeof *variants)

static bool listed(const lm_vk_features *ft, const coop_variant *c)
{
    for (int i = 0; i < ft->ncoop; i++)
        if (ft->coop_mnk[i][0] == c->fm && ft->coop_mnk[i][1] == c->fn && ft->coop_mnk[i][2] == c->fk)
            return true;
    return false;
}

static const coop_variant *find(const lm_vk_features *ft, const char *name)
{
    for (int j = 0; j < NVARIANTS; j++)
        if (!strcmp(variants[j].name, name) && listed(ft, &variants[j])) return &variants[j];
    return NULL;
}

/* the default tile for an M x N (x batch) product */
static const coop_variant *pick_tile(const lm_vk_features *ft, const lm_vk_mm_pc *pc)
{
    (void)pc;
    const coop_variant *c = find(ft, "128x128");
    return c ? c : find(ft, "n8");
}

static const coop_variant *variant_for(lm_vk_dev *v, const lm_array *node, const lm_vk_mm_pc *pc)
{
    const lm_vk_features *ft = &v->feat;
    /* the shaders' tiling assumes subgroups of 32 and up to 48 KiB of
     * shared memory */
    if (!ft->coopmat_nv || ft->subgroup_size != 32 || ft->max_shared < 48 * 1024) return NULL;
    if (node->ninputs != 2 || node->inputs[0]->dtype != LM_F16 || node->inputs[1]->dtype != LM_F16)
        return NULL;
    if (node->dtype != LM_F16 && node->dtype != LM_F32) return NULL;
    const char *env = getenv("LUMEN_VK_COOP");
    if (env && !strcmp(env, "0")) return NULL;
    const coop_variant *c = env && *env ? find(ft, env) : NULL;
    return c ? c : pick_tile(ft, pc);
}

bool lm_vk_coop_fits(lm_vk_dev *v, const lm_array *node, const lm_vk_mm_pc *pc)
{
    return variant_for(v, node, pc) != NULL;
}

/* can a 16-byte load start at every chunk of 8 along the contiguous dim? */
static bool vec_ok(const lm_array *x, int64_t off, int64_t srow, int64_t scol)
{
    return scol == 1 && off % 8 == 0 && srow % 8 == 0 && lm_vk_mem_of(x)->off % 16 == 0;
}

static int env_int(const char *name, int dflt)
{
    const char *e = getenv(name);
    return e && *e ? atoi(e) : dflt;
}

lm_status lm_vk_run_matmul_coop(lm_vk_dev *v, lm_array *node, const lm_vk_mm_pc *pc, int64_t batch)
{
    const coop_variant *c = variant_for(v, node, pc);
    if (!c) return lm_error_set(LM_ERR_UNSUPPORTED, "vulkan: no cooperative-matrix kernel for this matmul");
    const lm_array *a = node->inputs[0], *b = node->inputs[1];
    /* stage each operand with its unit-stride dim contiguous in shared memory;
     * with neither stride 1 the layout does not matter (element loads) */
    bool a_k = pc->sak == 1 || pc->sam != 1, b_n = pc->sbn == 1 || pc->sbk != 1;
    bool a_vec = a_k ? vec_ok(a, pc->off_a, pc->sam, pc->sak) : vec_ok(a, pc->off_a, pc->sak, pc->sam);
    bool b_vec = b_n ? vec_ok(b, pc->off_b, pc->sbk, pc->sbn) : vec_ok(b, pc->off_b, pc->sbn, pc->sbk);
    /* the batch offsets must keep the alignment too */
    for (int d = 0; d < pc->nb; d++) {
        a_vec &= pc->bsa[d] % 8 == 0;
        b_vec &= pc->bsb[d] % 8 == 0;
    }
    /* straight coopMatStore of interior fragments: C rows 16-byte aligned */
    bool direct = pc->N % 8 == 0 && lm_vk_mem_of(node)->off % 16 == 0 && node->offset % 8 == 0 &&
                  env_int("LUMEN_VK_COOP_DIRECT", 1) != 0;
    /* whole tiles only: no bounds checks in the loads */
    bool full = a_vec && b_vec && pc->M % c->bm == 0 && pc->N % c->bn == 0 && pc->K % 32 == 0;
    uint32_t gx = (uint32_t)((pc->N + c->bn - 1) / c->bn), gy = (uint32_t)((pc->M + c->bm - 1) / c->bm);
    int swz = env_int("LUMEN_VK_COOP_SWZ", 0);
    if (swz < 0 || (uint32_t)swz >= gy) swz = 0;
    uint32_t spec[14] = {a->dtype, b->dtype, node->dtype, a_k, b_n, a_vec, b_vec, 0, 0, 0, 0,
                         direct, (uint32_t)swz, full};
    lm_vk_arg args[3] = {{lm_vk_mem_of(a), false}, {lm_vk_mem_of(b), false},
                         {lm_vk_mem_of(node), true}};
    return lm_vk_dispatch(v, c->shader, spec, 14, args, 3, pc, sizeof *pc, gx, gy, (uint32_t)batch);
}
