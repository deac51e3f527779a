/* quant.h - quantized tensors on Vulkan (quant.c): op dequantize and op
 * qlinear (y = x w^T with a quantized w) for every block type of
 * core/quant.h.  backend.c routes both ops here before its dtype checks,
 * which know only element dtypes. */
#ifndef LM_VK_QUANT_H
#define LM_VK_QUANT_H

#include "backends/vulkan/vk.h"

bool lm_vk_supports_quant(lm_vk_dev *v, const lm_array *node);
lm_status lm_vk_run_quant(lm_vk_dev *v, lm_array *node);

#endif
