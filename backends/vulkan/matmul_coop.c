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
 * LUMEN_VK_COOP=n8 prefers 16x8x16 fragments, =s stages tiles as f16
 * scalars in shared memory (a debugging variant), =0 turns the path off.
 * Measured on an H100: 8 subgroups of 64x32 (the default) 136 TFLOP/s at
 * 8192; 4 subgroups of 64x64 (WARPS=4 in matmul_coop.glsl) only 64, so
 * that variant is not built. */
#include <stdlib.h>
#include <string.h>
#include "backends/vulkan/vk.h"

/* the shaders built, by fragment shape */
static const struct { uint8_t m, n, k; const char *shader; } variants[] = {
    {16, 16, 16, "matmul_coop"},
    {16, 8, 16, "matmul_coop_n8"},
};

static const char *pick(const lm_vk_features *ft, const char *env)
{
    bool n8 = env && !strcmp(env, "n8");
    const char *first = NULL;
    for (int i = 0; i < ft->ncoop; i++)
        for (size_t j = 0; j < sizeof variants / sizeof *variants; j++) {
            if (ft->coop_mnk[i][0] != variants[j].m || ft->coop_mnk[i][1] != variants[j].n ||
                ft->coop_mnk[i][2] != variants[j].k)
                continue;
            if (!first) first = variants[j].shader;
            if (n8 && variants[j].n == 8) return variants[j].shader;
        }
    if (first && env && !strcmp(env, "s") && !strcmp(first, "matmul_coop")) return "matmul_coop_s";
    return first;
}

const char *lm_vk_coop_shader(lm_vk_dev *v, const lm_array *node)
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
    return pick(ft, env);
}

/* can a 16-byte load start at every chunk of 8 along the contiguous dim? */
static bool vec_ok(const lm_array *x, int64_t off, int64_t srow, int64_t scol)
{
    return scol == 1 && off % 8 == 0 && srow % 8 == 0 && lm_vk_mem_of(x)->off % 16 == 0;
}

lm_status lm_vk_run_matmul_coop(lm_vk_dev *v, lm_array *node, const char *shader,
                                const lm_vk_mm_pc *pc, int64_t batch)
{
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
    uint32_t spec[7] = {a->dtype, b->dtype, node->dtype, a_k, b_n, a_vec, b_vec};
    lm_vk_arg args[3] = {{lm_vk_mem_of(a), false}, {lm_vk_mem_of(b), false},
                         {lm_vk_mem_of(node), true}};
    return lm_vk_dispatch(v, shader, spec, 7, args, 3, pc, sizeof *pc,
                          (uint32_t)((pc->N + 127) / 128), (uint32_t)((pc->M + 127) / 128),
                          (uint32_t)batch);
}
