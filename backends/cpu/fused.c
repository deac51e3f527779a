/* fused.c - fused elementwise groups made by compile (not yet built). */
#include "cpu.h"

lm_status lm_cpu_run_fused(lm_device *d, lm_fused *group, lm_array *out)
{
    (void)d;
    (void)group;
    (void)out;
    return lm_error_set(LM_ERR_UNSUPPORTED, "cpu: fused kernels are not available yet");
}
