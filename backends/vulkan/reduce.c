/* reduce.c - reductions and cumsum (shaders/reduce.glsl).
 *
 * The input's dims split into kept dims (one output element each, output
 * row-major) and reduced dims; each group is collapsed where strides allow.
 * Long rows get a workgroup each, short rows a thread each. */
#include <string.h>
#include "backends/vulkan/vk.h"

#define R_CUMSUM 12

typedef struct red_pc {
    uint32_t O, R;
    int32_t off_in, ddof;
    int32_t ks[RED_MAXDIM], kst[RED_MAXDIM], rs[RED_MAXDIM], rst[RED_MAXDIM];
    int32_t kost[RED_MAXDIM];
    int32_t rost;
} red_pc;

static int red_code(lm_op op)
{
    switch (op) {
    case LM_OP_SUM: return R_SUM;       case LM_OP_MEAN: return R_MEAN;
    case LM_OP_PROD: return R_PROD;     case LM_OP_MAX: return R_MAX;
    case LM_OP_MIN: return R_MIN;       case LM_OP_VAR: return R_VAR;
    case LM_OP_STD: return R_STD;       case LM_OP_LOGSUMEXP: return R_LSE;
    case LM_OP_ALL: return R_ALL;       case LM_OP_ANY: return R_ANY;
    case LM_OP_ARGMAX: return R_ARGMAX; case LM_OP_ARGMIN: return R_ARGMIN;
    case LM_OP_CUMSUM: return R_CUMSUM;
    default: return -1;
    }
}

typedef struct red_plan {
    red_pc pc;
    int knd, rnd, code, kind;
} red_plan;

static bool plan(const lm_array *node, red_plan *p)
{
    const lm_array *in = node->inputs[0];
    memset(p, 0, sizeof *p);
    p->code = red_code(node->op);
    if (p->code < 0 || node->ninputs != 1) return false;
    int64_t mask = p->code == R_CUMSUM ? (int64_t)1 << node->params.i[0] : node->params.i[0];
    int64_t kshape[LM_MAX_DIMS], kst[2][LM_MAX_DIMS], rshape[LM_MAX_DIMS], rst[1][LM_MAX_DIMS];
    int nk = 0, nr = 0;
    int64_t outer = 1, cum_axis_stride = 1;
    for (int d = in->ndim - 1; d >= 0; d--) {      /* output strides, innermost first */
        if (mask & ((int64_t)1 << d)) {
            if (p->code == R_CUMSUM) { cum_axis_stride = outer; outer *= in->shape[d]; }
            continue;
        }
        outer *= in->shape[d];
    }
    int64_t ostride = 1, ost[LM_MAX_DIMS];
    for (int d = in->ndim - 1; d >= 0; d--) {
        if (mask & ((int64_t)1 << d)) { if (p->code == R_CUMSUM) ostride *= in->shape[d]; continue; }
        ost[d] = ostride;
        ostride *= in->shape[d];
    }
    for (int d = 0; d < in->ndim; d++) {
        if (mask & ((int64_t)1 << d)) {
            rshape[nr] = in->shape[d];
            rst[0][nr++] = in->strides[d];
        } else {
            kshape[nk] = in->shape[d];
            kst[0][nk] = in->strides[d];
            kst[1][nk++] = ost[d];
        }
    }
    int64_t O = 1, R = 1;
    for (int d = 0; d < nk; d++) O *= kshape[d];
    for (int d = 0; d < nr; d++) R *= rshape[d];
    p->knd = lm_vk_collapse(nk, kshape, 2, kst);
    p->rnd = lm_vk_collapse(nr, rshape, 1, rst);
    if (p->knd > RED_MAXDIM || p->rnd > RED_MAXDIM || O > UINT32_MAX || R > UINT32_MAX) return false;
    if (p->code == R_CUMSUM && p->rnd != 1) return false;
    red_pc *pc = &p->pc;
    pc->O = (uint32_t)O;
    pc->R = (uint32_t)R;
    pc->off_in = (int32_t)in->offset;
    pc->ddof = (int32_t)node->params.i[2];
    for (int d = 0; d < p->knd; d++) {
        pc->ks[d] = (int32_t)kshape[d];
        pc->kst[d] = (int32_t)kst[0][d];
        pc->kost[d] = (int32_t)kst[1][d];
    }
    for (int d = 0; d < p->rnd; d++) {
        pc->rs[d] = (int32_t)rshape[d];
        pc->rst[d] = (int32_t)rst[0][d];
    }
    pc->rost = (int32_t)cum_axis_stride;
    bool fin = lm_dtype_is_float(in->dtype);
    p->kind = in->dtype == LM_F64 ? KIND_D : fin ? KIND_F : KIND_I;
    if (p->code == R_CUMSUM && lm_dtype_is_float(node->dtype) && !fin)
        p->kind = KIND_F;
    return true;
}

bool lm_vk_supports_reduce(lm_vk_dev *v, const lm_array *node)
{
    red_plan p;
    if (!plan(node, &p)) return false;
    /* GLSL has no double exp/log: an f64 logsumexp would lose precision */
    if (p.kind == KIND_D && (!v->feat.f64 || p.code == R_LSE)) return false;
    return true;
}

lm_status lm_vk_run_reduce(lm_vk_dev *v, lm_array *node)
{
    red_plan p;
    if (!plan(node, &p))
        return lm_error_set(LM_ERR_UNSUPPORTED, "vulkan: cannot plan %s", lm_op_name(node->op));
    const lm_array *in = node->inputs[0];
    bool group = p.code != R_CUMSUM && !(p.pc.R <= 64 && p.pc.O >= 128);
    uint32_t spec[7] = {(uint32_t)p.code, in->dtype, node->dtype, (uint32_t)p.kind,
                        (uint32_t)p.knd, (uint32_t)p.rnd, group ? 0u : 1u};
    uint32_t groups = group ? (p.pc.O < 65535 ? (p.pc.O ? p.pc.O : 1) : 65535)
                            : lm_vk_groups(v, p.pc.O, 256);
    if (in->size == 0 && p.code == R_CUMSUM) return LM_OK;
    lm_vk_arg args[2] = {{lm_vk_mem_of(in), false}, {lm_vk_mem_of(node), true}};
    lm_status st = lm_vk_dispatch(v, p.kind == KIND_D ? "reduce_f64" : "reduce", spec, 7,
                                  args, 2, &p.pc, sizeof p.pc, groups, 1, 1);
    return st == LM_OK ? st : lm_error_prefix("%s", lm_op_name(node->op));
}
