/* nn.c - the neural-network ops on Vulkan: each op goes to its family file.
 * nn_norm.c: softmax, log_softmax, layer/rms/group norm, attention, rope,
 * tril/triu, one_hot.  nn_conv.c: conv, conv_transpose, pooling, upsample.
 * nn_index.c: sort/argsort/topk, scatter/scatter_add.  An op no family
 * takes is unsupported here; eval then runs it on the CPU (core/eval.c). */
#include "backends/vulkan/vk.h"

static bool is_conv_family(lm_op op)
{
    switch (op) {
    case LM_OP_CONV: case LM_OP_CONV_TRANSPOSE: case LM_OP_MAX_POOL: case LM_OP_AVG_POOL:
    case LM_OP_ADAPTIVE_AVG_POOL: case LM_OP_UPSAMPLE:
        return true;
    default:
        return false;
    }
}

static bool is_index_family(lm_op op)
{
    switch (op) {
    case LM_OP_TOPK: case LM_OP_SORT: case LM_OP_ARGSORT: case LM_OP_SCATTER:
    case LM_OP_SCATTER_ADD:
        return true;
    default:
        return false;
    }
}

bool lm_vk_supports_nn(lm_vk_dev *v, const lm_array *node)
{
    if (is_index_family(node->op)) return lm_vk_supports_nn_index(v, node);
    return is_conv_family(node->op) ? lm_vk_supports_nn_conv(v, node)
                                    : lm_vk_supports_nn_norm(v, node);
}

lm_status lm_vk_run_nn(lm_vk_dev *v, lm_array *node)
{
    if (is_index_family(node->op)) return lm_vk_run_nn_index(v, node);
    return is_conv_family(node->op) ? lm_vk_run_nn_conv(v, node) : lm_vk_run_nn_norm(v, node);
}
