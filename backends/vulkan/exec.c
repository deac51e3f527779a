/* exec.c - recording kernels: one command buffer per evaluation.
 *
 * The core calls begin() before an evaluation and sync() after it; run()
 * records a dispatch instead of executing it.  A barrier is recorded only
 * when a kernel reads a range an earlier unbarriered kernel wrote, or writes
 * a range one read or wrote (the core may hand a freed buffer to a later
 * node of the same evaluation).  After LM_VK_BATCH dispatches the buffer is
 * submitted and waited for, which bounds descriptor use and keeps Ctrl-C
 * (checked by the core between nodes) responsive.  Anything that touches
 * memory from the host (upload, download) first calls lm_vk_flush(). */
#include <string.h>
#include "backends/vulkan/vk.h"

static int64_t dispatches;
int64_t lm_vulkan_dispatch_count(void) { return dispatches; }

lm_status lm_vk_exec_init(lm_vk_dev *v)
{
    VkCommandPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                  .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                  .queueFamilyIndex = v->qfam};
    lm_status st = lm_vk_check(v, vkCreateCommandPool(v->device, &pi, NULL, &v->cmdpool),
                               "vkCreateCommandPool");
    if (st != LM_OK) return st;
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                      .commandPool = v->cmdpool,
                                      .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                      .commandBufferCount = 1};
    if ((st = lm_vk_check(v, vkAllocateCommandBuffers(v->device, &ai, &v->cb),
                          "vkAllocateCommandBuffers")) != LM_OK)
        return st;
    VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if ((st = lm_vk_check(v, vkCreateFence(v->device, &fi, NULL, &v->fence), "vkCreateFence")) != LM_OK)
        return st;
    VkDescriptorSetLayoutBinding b[LM_VK_BINDINGS];
    for (int i = 0; i < LM_VK_BINDINGS; i++)
        b[i] = (VkDescriptorSetLayoutBinding){.binding = (uint32_t)i,
                                              .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                              .descriptorCount = 1,
                                              .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo li = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                          .bindingCount = LM_VK_BINDINGS, .pBindings = b};
    if ((st = lm_vk_check(v, vkCreateDescriptorSetLayout(v->device, &li, NULL, &v->dsl),
                          "vkCreateDescriptorSetLayout")) != LM_OK)
        return st;
    VkPushConstantRange pr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .size = LM_VK_PUSH_BYTES};
    VkPipelineLayoutCreateInfo pli = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                      .setLayoutCount = 1, .pSetLayouts = &v->dsl,
                                      .pushConstantRangeCount = 1, .pPushConstantRanges = &pr};
    if ((st = lm_vk_check(v, vkCreatePipelineLayout(v->device, &pli, NULL, &v->layout),
                          "vkCreatePipelineLayout")) != LM_OK)
        return st;
    VkDescriptorPoolSize ps = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                               .descriptorCount = LM_VK_BATCH * LM_VK_BINDINGS};
    VkDescriptorPoolCreateInfo dpi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                      .maxSets = LM_VK_BATCH, .poolSizeCount = 1, .pPoolSizes = &ps};
    return lm_vk_check(v, vkCreateDescriptorPool(v->device, &dpi, NULL, &v->dpool),
                       "vkCreateDescriptorPool");
}

void lm_vk_exec_shutdown(lm_vk_dev *v)
{
    if (!v->device) return;
    vkDestroyDescriptorPool(v->device, v->dpool, NULL);
    vkDestroyPipelineLayout(v->device, v->layout, NULL);
    vkDestroyDescriptorSetLayout(v->device, v->dsl, NULL);
    vkDestroyFence(v->device, v->fence, NULL);
    vkDestroyCommandPool(v->device, v->cmdpool, NULL);
}

static lm_status open_cb(lm_vk_dev *v)
{
    if (v->recording) return LM_OK;
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    lm_status st = lm_vk_check(v, vkBeginCommandBuffer(v->cb, &bi), "vkBeginCommandBuffer");
    if (st != LM_OK) return st;
    v->recording = true;
    v->ndispatch = 0;
    v->nwritten = v->nread = 0;
    return LM_OK;
}

lm_status lm_vk_flush(lm_vk_dev *v)
{
    if (!v->up) return LM_OK;
    if (!v->recording) {
        lm_vk_release_deferred(v);
        return LM_OK;
    }
    v->recording = false;
    lm_status st = lm_vk_check(v, vkEndCommandBuffer(v->cb), "vkEndCommandBuffer");
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1,
                       .pCommandBuffers = &v->cb};
    if (st == LM_OK)
        st = lm_vk_check(v, vkQueueSubmit(v->queue, 1, &si, v->fence), "vkQueueSubmit");
    if (st == LM_OK)
        st = lm_vk_check(v, vkWaitForFences(v->device, 1, &v->fence, VK_TRUE, UINT64_MAX),
                         "vkWaitForFences");
    vkResetFences(v->device, 1, &v->fence);
    vkResetCommandBuffer(v->cb, 0);
    vkResetDescriptorPool(v->device, v->dpool, 0);
    /* after a device loss nothing runs again; still free what we can */
    lm_vk_release_deferred(v);
    if (v->status_armed) {
        uint32_t *w = (uint32_t *)v->status->block->map;
        v->status_armed = false;
        if (st == LM_OK && w[0])
            st = lm_error_set(LM_ERR_ARG, "%s: index %d out of range for axis %lld of size %lld",
                              v->status_op, (int)w[1], (long long)v->status_axis,
                              (long long)v->status_len);
        w[0] = w[1] = 0;
    }
    if (v->pcache_dirty) lm_vk_pipeline_save(v);
    return st;
}

lm_status lm_vk_begin(lm_device *d)
{
    return lm_vk_ensure_up(lm_vk_of(d));
}

lm_status lm_vk_sync(lm_device *d)
{
    return lm_vk_flush(lm_vk_of(d));
}

static bool overlaps(const lm_vk_mem *a, const lm_vk_mem *b)
{
    return a->block == b->block && a->off < b->off + b->size && b->off < a->off + a->size;
}

static bool touched(const lm_vk_mem *set, int n, const lm_vk_mem *m)
{
    for (int i = 0; i < n; i++)
        if (overlaps(&set[i], m)) return true;
    return false;
}

/* records a barrier if this kernel depends on an unbarriered one */
static void order(lm_vk_dev *v, const lm_vk_arg *args, int nargs)
{
    bool need = false;
    for (int i = 0; i < nargs; i++) {
        if (!args[i].mem) continue;
        need |= touched(v->written, v->nwritten, args[i].mem);
        if (args[i].write) need |= touched(v->read, v->nread, args[i].mem);
    }
    if (need || v->nwritten + nargs > 64 || v->nread + nargs > 64) {
        VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                              .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                              .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                               VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT};
        VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
        vkCmdPipelineBarrier(v->cb, stages, stages, 0, 1, &mb, 0, NULL, 0, NULL);
        v->nwritten = v->nread = 0;
    }
    for (int i = 0; i < nargs; i++) {
        if (!args[i].mem) continue;
        if (args[i].write) v->written[v->nwritten++] = *args[i].mem;
        else v->read[v->nread++] = *args[i].mem;
    }
}

static lm_status make_room(lm_vk_dev *v)
{
    if (v->lost) return lm_error_set(LM_ERR_DEVICE, "vulkan: device %s was lost", v->dev->name);
    if (v->recording && v->ndispatch >= LM_VK_BATCH) {
        lm_status st = lm_vk_flush(v);
        if (st != LM_OK) return st;
    }
    return open_cb(v);
}

lm_status lm_vk_dispatch(lm_vk_dev *v, const char *shader, const uint32_t *spec,
                         int nspec, const lm_vk_arg *args, int nargs, const void *pc,
                         size_t pcsize, uint32_t gx, uint32_t gy, uint32_t gz)
{
    VkPipeline pipe;
    lm_status st = lm_vk_pipeline_get(v, shader, spec, nspec, &pipe);
    if (st != LM_OK) return st;
    if ((st = make_room(v)) != LM_OK) return st;
    VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                      .descriptorPool = v->dpool, .descriptorSetCount = 1,
                                      .pSetLayouts = &v->dsl};
    VkDescriptorSet set;
    if ((st = lm_vk_check(v, vkAllocateDescriptorSets(v->device, &ai, &set),
                          "vkAllocateDescriptorSets")) != LM_OK)
        return st;
    VkDescriptorBufferInfo bi[LM_VK_BINDINGS];
    VkWriteDescriptorSet w[LM_VK_BINDINGS];
    for (int i = 0; i < LM_VK_BINDINGS; i++) {
        const lm_vk_mem *m = i < nargs && args[i].mem ? args[i].mem : v->dummy;
        bi[i] = (VkDescriptorBufferInfo){m->block->buf, m->off, m->size};
        w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                      .dstSet = set, .dstBinding = (uint32_t)i,
                                      .descriptorCount = 1,
                                      .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                      .pBufferInfo = &bi[i]};
    }
    vkUpdateDescriptorSets(v->device, LM_VK_BINDINGS, w, 0, NULL);
    order(v, args, nargs);
    vkCmdBindPipeline(v->cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
    vkCmdBindDescriptorSets(v->cb, VK_PIPELINE_BIND_POINT_COMPUTE, v->layout, 0, 1, &set, 0, NULL);
    if (pcsize) vkCmdPushConstants(v->cb, v->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, (uint32_t)pcsize, pc);
    vkCmdDispatch(v->cb, gx, gy, gz);
    v->ndispatch++;
    dispatches++;
    return LM_OK;
}

lm_status lm_vk_copy_buffer(lm_vk_dev *v, const lm_vk_mem *src, VkDeviceSize soff,
                            const lm_vk_mem *dst, VkDeviceSize doff, VkDeviceSize n)
{
    lm_status st = make_room(v);
    if (st != LM_OK) return st;
    lm_vk_arg args[2] = {{src, false}, {dst, true}};
    order(v, args, 2);
    VkBufferCopy r = {.srcOffset = src->off + soff, .dstOffset = dst->off + doff, .size = n};
    vkCmdCopyBuffer(v->cb, src->block->buf, dst->block->buf, 1, &r);
    v->ndispatch++;
    return LM_OK;
}

uint32_t lm_vk_groups(lm_vk_dev *v, uint64_t n, uint32_t local)
{
    uint64_t g = (n + local - 1) / local;
    uint64_t cap = v->feat.max_groups[0] < 65535 ? v->feat.max_groups[0] : 65535;
    if (g > cap) g = cap;
    return g ? (uint32_t)g : 1;
}
