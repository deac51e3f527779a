/* vulkan.h - the Vulkan backend's public face (for the core's registry and
 * for tests).  Everything else is internal (vk.h). */
#ifndef LM_VULKAN_H
#define LM_VULKAN_H

#include "core/device.h"

/* Creates the Vulkan devices present and registers them (lm_device_register).
 * A missing loader, driver or device is not a failure: there are then simply
 * no Vulkan devices (lm_vulkan_status() says why).  Called by lm_init(). */
lm_status lm_vulkan_register(void);
/* A line saying what registration found ("2 devices", "no Vulkan loader"). */
const char *lm_vulkan_status(void);
/* Messages the Khronos validation layer reported (LUMEN_VK_VALIDATE=1);
 * tests fail on any. */
int64_t lm_vulkan_validation_messages(void);
/* Bytes of device memory the backend holds from the driver (all blocks), for
 * leak checks; d must be a Vulkan device. */
size_t lm_vulkan_reserved_bytes(lm_device *d);
/* Dispatches recorded since start (for tests of batching). */
int64_t lm_vulkan_dispatch_count(void);
/* Attention kernels recorded on tensor cores since start (nn_attn_coop*),
 * for tests that must see that path taken. */
int64_t lm_vulkan_attn_coop_count(void);
/* Those of them on the cooperative-matrix-2 kernel (nn_attn_cm2*), for tests. */
int64_t lm_vulkan_attn_cm2_count(void);
/* Attention calls run as two matrix products around a softmax (nn_attn_fa.c's
 * D > 256 path, LUMEN_VK_ATTN512) since start, for tests. */
int64_t lm_vulkan_attn_gemm_count(void);
/* Attention and matmul kernels recorded on bf16 cooperative matrices
 * (VK_KHR_shader_bfloat16: the _bf kernels) since start, for tests. */
int64_t lm_vulkan_bf16_coop_count(void);
/* GEMMs recorded with split-K (matmul.c: LUMEN_VK_MM_SPLITK, or the
 * tensor cores' rule) since start, for tests. */
int64_t lm_vulkan_mm_split_count(void);
/* GEMV products recorded on the B [n][k] kernel that adds a column's lanes
 * by subgroup shuffles (matmul_gemv.c, the default where it fits) since start,
 * for tests that must see it taken. */
int64_t lm_vulkan_gemv_shuf_count(void);
/* Timestamps written since start: only while a profile is open (tests). */
int64_t lm_vulkan_timestamp_count(void);
/* Uploads recorded as a copy from the staging block instead of waiting for
 * the GPU (memory.c), since start (tests). */
int64_t lm_vulkan_recorded_upload_count(void);

/* Pipelines new to this process since start (made, or started on a compile
 * thread), and those of them started in plan mode (lm_device_plan: a
 * model's prewarm at load); the difference is the pipelines evaluations
 * had to start themselves, on their critical path (tests). */
int64_t lm_vulkan_pipelines_started(void);
int64_t lm_vulkan_pipelines_planned(void);

#endif
