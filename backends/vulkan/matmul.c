#include "backends/vulkan/vk.h"
bool lm_vk_supports_matmul(lm_vk_dev *v, const lm_array *node) { (void)v; (void)node; return false; }
lm_status lm_vk_run_matmul(lm_vk_dev *v, lm_array *node) { (void)v; (void)node; return LM_ERR_UNSUPPORTED; }
