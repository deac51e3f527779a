/* other.c - concat, pad, take_along_axis (GATHER) and index_select.
 *
 * Concat and pad are strided moves into parts of the output (the elementwise
 * copy kernel); the index ops use shaders/index.comp, whose out-of-range
 * report is checked when the batch completes (exec.c), so the error
 * surfaces from the same lm_eval. */
#include <stdio.h>
#include <string.h>
#include "backends/vulkan/vk.h"

typedef struct index_pc {
    uint32_t n;
    int32_t ndim, axis, len, off_a, off_i;
    int32_t shape[8], sa[8], si[8];
} index_pc;

bool lm_vk_supports_other(lm_vk_dev *v, const lm_array *node)
{
    (void)v;
    switch (node->op) {
    case LM_OP_CONCAT:
    case LM_OP_PAD:
        return true;
    case LM_OP_GATHER:
    case LM_OP_INDEX_SELECT:
        return node->ninputs == 2 && node->inputs[1]->dtype == LM_I64 &&
               node->params.i[0] >= 0 && node->params.i[0] < node->ndim;
    default:
        return false;
    }
}

static void contiguous(const lm_array *a, int64_t *st)
{
    int64_t s = 1;
    for (int d = a->ndim - 1; d >= 0; d--) { st[d] = s; s *= a->shape[d]; }
}

static lm_status run_concat(lm_vk_dev *v, lm_array *node)
{
    int axis = (int)node->params.i[0];
    int64_t st[LM_MAX_DIMS];
    contiguous(node, st);
    int64_t at = 0;
    for (int k = 0; k < node->ninputs; k++) {
        const lm_array *in = node->inputs[k];
        if (lm_concat_placed(node, k)) {   /* its producer wrote it there */
            at += in->shape[axis];
            continue;
        }
        lm_status s = lm_vk_move(v, in, lm_vk_mem_of(node), node->dtype, at * st[axis], st);
        if (s != LM_OK) return s;
        at += in->shape[axis];
    }
    return LM_OK;
}

static lm_status run_pad(lm_vk_dev *v, lm_array *node)
{
    const lm_array *in = node->inputs[0];
    lm_status s = lm_vk_fill(v, lm_vk_mem_of(node), node->dtype, node->size, node->params.f[0]);
    if (s != LM_OK || in->size == 0) return s;
    int64_t st[LM_MAX_DIMS], off = 0;
    contiguous(node, st);
    for (int d = 0; d < node->ndim; d++) off += node->params.i[2 * d] * st[d];
    return lm_vk_move(v, in, lm_vk_mem_of(node), node->dtype, off, st);
}

static lm_status run_index(lm_vk_dev *v, lm_array *node)
{
    const lm_array *a = node->inputs[0], *idx = node->inputs[1];
    int axis = (int)node->params.i[0];
    lm_status st = lm_vk_status_init(v);
    if (st != LM_OK) return st;
    index_pc pc;
    memset(&pc, 0, sizeof pc);
    pc.n = (uint32_t)node->size;
    pc.ndim = node->ndim;
    pc.axis = axis;
    pc.len = (int32_t)a->shape[axis];
    pc.off_a = (int32_t)a->offset;
    pc.off_i = (int32_t)idx->offset;
    for (int d = 0; d < node->ndim; d++) {
        pc.shape[d] = (int32_t)node->shape[d];
        pc.sa[d] = (int32_t)a->strides[d];
        if (node->op == LM_OP_GATHER) pc.si[d] = (int32_t)idx->strides[d];
        else pc.si[d] = d == axis && idx->ndim ? (int32_t)idx->strides[0] : 0;
    }
    v->status_armed = true;
    snprintf(v->status_op, sizeof v->status_op, "%s", lm_op_name(node->op));
    v->status_axis = axis;
    v->status_len = a->shape[axis];
    uint32_t spec[1] = {lm_vk_raw_dtype(node->dtype)};
    lm_vk_arg args[4] = {{lm_vk_mem_of(a), false}, {lm_vk_mem_of(idx), false},
                         {lm_vk_mem_of(node), true}, {v->status, true}};
    return lm_vk_dispatch(v, "index", spec, 1, args, 4, &pc, sizeof pc,
                          lm_vk_groups(v, pc.n, 256), 1, 1);
}

lm_status lm_vk_run_other(lm_vk_dev *v, lm_array *node)
{
    lm_status st;
    switch (node->op) {
    case LM_OP_CONCAT: st = run_concat(v, node); break;
    case LM_OP_PAD: st = run_pad(v, node); break;
    case LM_OP_GATHER:
    case LM_OP_INDEX_SELECT: st = run_index(v, node); break;
    default:
        return lm_error_set(LM_ERR_UNSUPPORTED, "vulkan: %s is not implemented", lm_op_name(node->op));
    }
    return st == LM_OK ? st : lm_error_prefix("%s", lm_op_name(node->op));
}
