/* nn_index.c - neural-network kernels on Vulkan (see nn.c for the family).
 * None yet: every op of the family is reported unsupported. */
#include "backends/vulkan/vk.h"

bool lm_vk_supports_nn_index(lm_vk_dev *v, const lm_array *node)
{
    (void)v;
    (void)node;
    return false;
}

lm_status lm_vk_run_nn_index(lm_vk_dev *v, lm_array *node)
{
    (void)v;
    return lm_error_set(LM_ERR_UNSUPPORTED, "vulkan: op %s is not implemented", lm_op_name(node->op));
}
