/* nn.c - placeholder dispatch for the neural-network ops (issue 3 fills
 * the kernels in backends/cpu/nn_*.c and replaces this file). */
#include "cpu.h"

bool lm_cpu_supports_nn(const lm_array *node)
{
    (void)node;
    return false;
}

lm_status lm_cpu_run_nn(lm_device *d, lm_array *node)
{
    (void)d;
    return lm_error_set(LM_ERR_UNSUPPORTED, "cpu: %s is not implemented", lm_op_name(node->op));
}
