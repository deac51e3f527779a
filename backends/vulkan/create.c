/* create.c - full, arange, linspace, eye, uniform and normal on the GPU
 * (shaders/create.glsl).  Random numbers are the CPU's, element for
 * element: the same Philox block and the same conversion to floats. */
#include <string.h>
#include "backends/vulkan/vk.h"

typedef struct create_pc {
    uint32_t n, m, key0, key1;
    uint32_t f0[2], f1[2];
    float f0f, f1f;
    int32_t k;
    uint32_t raw[2];
} create_pc;

static int create_code(lm_op op)
{
    switch (op) {
    case LM_OP_FULL: return C_FULL;
    case LM_OP_ARANGE: return C_ARANGE;
    case LM_OP_LINSPACE: return C_LINSPACE;
    case LM_OP_EYE: return C_EYE;
    case LM_OP_RANDOM_UNIFORM: return C_UNIFORM;
    case LM_OP_RANDOM_NORMAL: return C_NORMAL;
    default: return -1;
    }
}

bool lm_vk_supports_create(lm_vk_dev *v, const lm_array *node)
{
    (void)v;
    int c = create_code(node->op);
    if (c < 0) return false;
    if (c == C_EYE && (node->ndim != 2 || node->shape[1] == 0)) return false;
    return c != C_EYE || (node->params.i[0] > INT32_MIN && node->params.i[0] < INT32_MAX);
}

static lm_status launch(lm_vk_dev *v, const lm_vk_mem *dst, lm_dtype dt, int code,
                        create_pc *pc)
{
    /* double arithmetic where the device has it, as the CPU computes */
    const char *shader = v->feat.f64 ? "create_f64" : "create";
    uint32_t spec[2] = {(uint32_t)code, dt};
    lm_vk_arg args[1] = {{dst, true}};
    return lm_vk_dispatch(v, shader, spec, 2, args, 1, pc, sizeof *pc,
                          lm_vk_groups(v, pc->n, 256), 1, 1);
}

lm_status lm_vk_fill(lm_vk_dev *v, const lm_vk_mem *dst, lm_dtype dt, int64_t n, double value)
{
    create_pc pc;
    memset(&pc, 0, sizeof pc);
    pc.n = (uint32_t)n;
    unsigned char raw[8] = {0};
    lm_convert(raw, dt, &value, LM_F64, 1);
    memcpy(pc.raw, raw, 8);
    return n ? launch(v, dst, dt, C_FULL, &pc) : LM_OK;
}

lm_status lm_vk_run_create(lm_vk_dev *v, lm_array *node)
{
    int code = create_code(node->op);
    const lm_params *p = &node->params;
    if (code == C_FULL) return lm_vk_fill(v, lm_vk_mem_of(node), node->dtype, node->size, p->f[0]);
    create_pc pc;
    memset(&pc, 0, sizeof pc);
    pc.n = (uint32_t)node->size;
    pc.m = code == C_EYE ? (uint32_t)node->shape[1] : (uint32_t)node->size;
    pc.key0 = (uint32_t)p->i[0];
    pc.key1 = (uint32_t)p->i[1];
    memcpy(pc.f0, &p->f[0], 8);
    memcpy(pc.f1, &p->f[1], 8);
    pc.f0f = (float)p->f[0];
    pc.f1f = (float)p->f[1];
    pc.k = (int32_t)p->i[0];
    lm_status st = launch(v, lm_vk_mem_of(node), node->dtype, code, &pc);
    return st == LM_OK ? st : lm_error_prefix("%s", lm_op_name(node->op));
}
