/* backend.c - the lm_backend table of the Vulkan backend: which nodes it
 * can run and where each op family goes. */
#include "backends/vulkan/vk.h"
#include "backends/vulkan/quant.h"

static bool operand_ok(lm_vk_dev *v, const lm_array *a)
{
    if (!lm_vk_dtype_ok(v, a->dtype) || !lm_vk_fits_i32(a)) return false;
    /* a kernel binds the whole buffer: it must fit one descriptor range */
    if (a->buf && a->buf->handle && lm_vk_mem_of(a)->size > v->feat.max_range) return false;
    if (!a->buf && lm_array_nbytes(a) > v->feat.max_range) return false;
    return true;
}

static bool vk_supports(lm_device *d, const lm_array *node)
{
    lm_vk_dev *v = lm_vk_of(d);
    /* quantized operands: quant.c checks them (lm_vk_dtype_ok knows element dtypes only) */
    if (node->op == LM_OP_QLINEAR || node->op == LM_OP_DEQUANTIZE) return lm_vk_supports_quant(v, node);
    if (v->lost || !operand_ok(v, node)) return false;
    for (int i = 0; i < node->ninputs; i++)
        if (!operand_ok(v, node->inputs[i])) return false;
    if (node->op == LM_OP_FUSED) return lm_vk_supports_fused(v, node);
    switch (lm_op_class_of(node->op)) {
    case LM_CLASS_CREATE: return lm_vk_supports_create(v, node);
    case LM_CLASS_UNARY:
    case LM_CLASS_BINARY:
    case LM_CLASS_TERNARY: return lm_vk_supports_elementwise(v, node);
    case LM_CLASS_REDUCE: return lm_vk_supports_reduce(v, node);
    case LM_CLASS_OTHER:
        return node->op == LM_OP_MATMUL ? lm_vk_supports_matmul(v, node)
                                        : lm_vk_supports_other(v, node);
    case LM_CLASS_NN: return lm_vk_supports_nn(v, node);
    default: return false;
    }
}

static lm_status vk_run(lm_device *d, lm_array *node)
{
    lm_vk_dev *v = lm_vk_of(d);
    lm_status st = lm_vk_ensure_up(v);
    if (st != LM_OK) return st;
    if (node->size == 0) return LM_OK;
    if (node->op == LM_OP_FUSED) return lm_vk_run_fused(d, node->params.ext, node);
    if (node->op == LM_OP_QLINEAR || node->op == LM_OP_DEQUANTIZE) return lm_vk_run_quant(v, node);
    switch (lm_op_class_of(node->op)) {
    case LM_CLASS_CREATE: return lm_vk_run_create(v, node);
    case LM_CLASS_UNARY:
    case LM_CLASS_BINARY:
    case LM_CLASS_TERNARY: return lm_vk_run_elementwise(v, node);
    case LM_CLASS_REDUCE: return lm_vk_run_reduce(v, node);
    case LM_CLASS_OTHER:
        if (node->op == LM_OP_MATMUL) return lm_vk_run_matmul(v, node);
        return lm_vk_run_other(v, node);
    case LM_CLASS_NN: return lm_vk_run_nn(v, node);
    default:
        return lm_error_set(LM_ERR_UNSUPPORTED, "vulkan: op %s is not implemented on %s",
                            lm_op_name(node->op), d->name);
    }
}

const lm_backend lm_vk_backend = {
    .name = "vulkan",
    .alloc = lm_vk_alloc,
    .free = lm_vk_free,
    .window = lm_vk_window,
    .window_free = lm_vk_window_free,
    .upload = lm_vk_upload,
    .download = lm_vk_download,
    .supports = vk_supports,
    .run = vk_run,
    .run_fused = lm_vk_run_fused,
    .begin = lm_vk_begin,
    .sync = lm_vk_sync,
    .submit = lm_vk_submit,
    .record_begin = lm_vk_record_begin,
    .record_end = lm_vk_record_end,
    .replay = lm_vk_replay,
    .record_free = lm_vk_record_free,
    .copy = lm_vk_copy,
    .plan = lm_vk_plan,
};

size_t lm_vulkan_reserved_bytes(lm_device *d)
{
    if (!d || d->backend != &lm_vk_backend) return 0;
    return lm_vk_of(d)->reserved;
}
