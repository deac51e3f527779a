/* exec.c - recording kernels: one command buffer per evaluation.
 *
 * The core calls begin() before an evaluation and sync() after it; run()
 * records a dispatch instead of executing it.  A barrier is recorded only
 * when a kernel reads a range an earlier unbarriered kernel wrote, or writes
 * a range one read or wrote (the core may hand a freed buffer to a later
 * node of the same evaluation).
 *
 * Command buffers form a ring of LM_VK_RING slots: once one holds enough
 * dispatches it is submitted without waiting and the next slot is
 * recorded, so the GPU runs one part of an evaluation while the host
 * records the next (the first part is small, 32 dispatches, so the GPU
 * starts early; each next one twice as large, up to LM_VK_BATCH).  A slot
 * is waited for only when the ring comes round to it again, or at the
 * evaluation's end (sync), or before the host touches device memory
 * (upload, download: lm_vk_flush waits for every slot).  Each command
 * buffer after the first in flight begins with a full barrier, since its
 * hazard tracking does not see the one before; memory freed while a slot
 * was recorded is released after that slot's fence.  While profiling, or
 * when a kernel may report an index error, every submit is waited for, as
 * with LUMEN_VK_RING=0 (one slot: submit and wait, for comparisons).  The
 * slots bound descriptor use and keep Ctrl-C (checked by the core between
 * nodes) responsive.
 *
 * While the core profiles (core/profile.h) a command buffer is recorded
 * with a timestamp before and after each dispatch of a node, and a barrier
 * before each, so a dispatch's time is its own and not its neighbours';
 * the stamps are read once the fence signals.  Otherwise none of this
 * exists: no query pool, no stamps, no extra barriers.
 *
 * A capture (replay.c, for core/replay.c's recordings) records into a
 * command buffer of the recording's own instead of the open slot's, with
 * descriptor sets from the recording's pools, however many dispatches; the
 * ring's slot stays unopened meanwhile.  It begins with a full barrier (a
 * replay follows whatever ran before it).  Whatever must see the work done
 * (a flush: a download, a fallback; a host upload recorded into the stream)
 * breaks the capture first: its command buffer is submitted as the slot's
 * would be, and recording goes on in the ring.  A replay is submitted right
 * behind the open slot's command buffer (the copies in) on that slot's
 * fence, and the ring moves on. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backends/vulkan/vk.h"
#include "core/profile.h"

static int64_t dispatches, timestamps;
int64_t lm_vulkan_dispatch_count(void) { return dispatches; }
int64_t lm_vulkan_timestamp_count(void) { return timestamps; }

static lm_status make_layout(lm_vk_dev *v, int nb, VkDescriptorSetLayout *dsl, VkPipelineLayout *layout)
{
    VkDescriptorSetLayoutBinding b[LM_VK_WIDE_BINDINGS];
    for (int i = 0; i < nb; i++)
        b[i] = (VkDescriptorSetLayoutBinding){.binding = (uint32_t)i,
                                              .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                              .descriptorCount = 1,
                                              .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo li = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                          .bindingCount = (uint32_t)nb, .pBindings = b};
    lm_status st = lm_vk_check(v, vkCreateDescriptorSetLayout(v->device, &li, NULL, dsl),
                               "vkCreateDescriptorSetLayout");
    if (st != LM_OK) return st;
    VkPushConstantRange pr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .size = LM_VK_PUSH_BYTES};
    VkPipelineLayoutCreateInfo pli = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                      .setLayoutCount = 1, .pSetLayouts = dsl,
                                      .pushConstantRangeCount = 1, .pPushConstantRanges = &pr};
    return lm_vk_check(v, vkCreatePipelineLayout(v->device, &pli, NULL, layout), "vkCreatePipelineLayout");
}

/* LUMEN_VK_RING=0 or 1: one command buffer, submitted and waited for */
static int ring_size(void)
{
    const char *e = getenv("LUMEN_VK_RING");
    if (!e || !*e) return LM_VK_RING;
    int n = atoi(e);
    return n <= 1 ? 1 : n < LM_VK_RING ? n : LM_VK_RING;
}

static void use_slot(lm_vk_dev *v, int i)
{
    v->slot = i;
    v->cb = v->slots[i].cb;
    v->fence = v->slots[i].fence;
    v->dpool = v->slots[i].dpool;
}

enum { FIRST_BATCH = 32 };

lm_status lm_vk_exec_init(lm_vk_dev *v)
{
    VkCommandPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                  .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                  .queueFamilyIndex = v->qfam};
    lm_status st = lm_vk_check(v, vkCreateCommandPool(v->device, &pi, NULL, &v->cmdpool),
                               "vkCreateCommandPool");
    if (st != LM_OK) return st;
    v->ring = ring_size();
    v->batch_limit = v->ring > 1 ? FIRST_BATCH : LM_VK_BATCH;
    VkCommandBuffer cbs[LM_VK_RING];
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                      .commandPool = v->cmdpool,
                                      .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                      .commandBufferCount = (uint32_t)v->ring};
    if ((st = lm_vk_check(v, vkAllocateCommandBuffers(v->device, &ai, cbs),
                          "vkAllocateCommandBuffers")) != LM_OK)
        return st;
    VkDescriptorPoolSize ps = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                               .descriptorCount = LM_VK_BATCH * LM_VK_WIDE_BINDINGS};
    VkDescriptorPoolCreateInfo dpi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                      .maxSets = LM_VK_BATCH, .poolSizeCount = 1, .pPoolSizes = &ps};
    VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    for (int i = 0; i < v->ring; i++) {
        v->slots[i].cb = cbs[i];
        if ((st = lm_vk_check(v, vkCreateFence(v->device, &fi, NULL, &v->slots[i].fence),
                              "vkCreateFence")) != LM_OK ||
            (st = lm_vk_check(v, vkCreateDescriptorPool(v->device, &dpi, NULL, &v->slots[i].dpool),
                              "vkCreateDescriptorPool")) != LM_OK)
            return st;
    }
    use_slot(v, 0);
    if ((st = make_layout(v, LM_VK_BINDINGS, &v->dsl, &v->layout)) != LM_OK) return st;
    /* the fused kernels' layout, where the device allows that many buffers */
    if (v->feat.max_storage_buffers >= LM_VK_WIDE_BINDINGS &&
        (st = make_layout(v, LM_VK_WIDE_BINDINGS, &v->dsl_wide, &v->layout_wide)) != LM_OK)
        return st;
    return LM_OK;
}

void lm_vk_exec_shutdown(lm_vk_dev *v)
{
    if (!v->device) return;
    for (int i = 0; i < LM_VK_RING; i++) {
        if (v->slots[i].dpool) vkDestroyDescriptorPool(v->device, v->slots[i].dpool, NULL);
        if (v->slots[i].fence) vkDestroyFence(v->device, v->slots[i].fence, NULL);
    }
    vkDestroyPipelineLayout(v->device, v->layout, NULL);
    vkDestroyDescriptorSetLayout(v->device, v->dsl, NULL);
    if (v->layout_wide) vkDestroyPipelineLayout(v->device, v->layout_wide, NULL);
    if (v->dsl_wide) vkDestroyDescriptorSetLayout(v->device, v->dsl_wide, NULL);
    vkDestroyCommandPool(v->device, v->cmdpool, NULL);
    if (v->qpool) vkDestroyQueryPool(v->device, v->qpool, NULL);
}

/* ---- profiling ---- */

/* Whether this command buffer's dispatches get timestamps: the queue must
 * have valid timestamp bits (LUMEN_VK_NO_TIMESTAMPS=1 acts as if it had
 * none, to try the host-time path) and the pool must exist. */
static bool prof_stamps(lm_vk_dev *v)
{
    const char *e = getenv("LUMEN_VK_NO_TIMESTAMPS");
    if (!v->ts_bits || (e && !strcmp(e, "1"))) {
        char note[160];
        snprintf(note, sizeof note, "%s cannot time kernels: its rows hold no time, 'submit' rows the host time "
                 "around each submit", v->dev->spec);
        lm_profile_note(note);
        return false;
    }
    if (v->qpool) return true;
    VkQueryPoolCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                .queryType = VK_QUERY_TYPE_TIMESTAMP, .queryCount = 2 * LM_VK_BATCH};
    if (vkCreateQueryPool(v->device, &qi, NULL, &v->qpool) == VK_SUCCESS) return true;
    v->qpool = VK_NULL_HANDLE;
    lm_profile_note("vkCreateQueryPool failed: Vulkan rows hold no time");
    return false;
}

/* the profiler's entry for a dispatch about to be recorded, or -1 */
static int64_t prof_entry(lm_vk_dev *v, const char *kernel)
{
    /* a transfer's copies are the core's upload/download rows, not the node's */
    if (!v->prof || v->in_transfer) return -1;
    lm_profile_kernel_name(kernel);
    return lm_profile_device_entry();
}

static void prof_stamp(lm_vk_dev *v, int64_t entry, bool after)
{
    if (entry < 0 || !v->stamping) return;
    vkCmdWriteTimestamp(v->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, v->qpool, (uint32_t)(2 * v->nstamps + after));
    timestamps++;
    if (!after) return;
    v->stamp_entry[v->nstamps++] = entry;
}

/* after the fence: each timed dispatch's ticks, in ms, to its node */
static void prof_read(lm_vk_dev *v)
{
    static uint64_t ticks[2 * LM_VK_BATCH];
    int n = v->nstamps;
    v->nstamps = 0;
    if (!n || vkGetQueryPoolResults(v->device, v->qpool, 0, (uint32_t)(2 * n), sizeof ticks, ticks,
                                    sizeof *ticks, VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) != VK_SUCCESS)
        return;
    uint64_t mask = v->ts_bits >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << v->ts_bits) - 1);
    double ns_per_tick = v->props.limits.timestampPeriod;
    for (int i = 0; i < n; i++)
        lm_profile_device_time(v->stamp_entry[i], (double)((ticks[2 * i + 1] - ticks[2 * i]) & mask) * ns_per_tick / 1e6);
}

static void full_barrier(lm_vk_dev *v)
{
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                           VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT};
    VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    vkCmdPipelineBarrier(v->cb, stages, stages, 0, 1, &mb, 0, NULL, 0, NULL);
}

static lm_status open_cb(lm_vk_dev *v)
{
    if (v->recording) return LM_OK;
    /* a recording is submitted again, maybe while a run of it is pending */
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = v->capture ? VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT
                                                       : VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    v->prof = !v->capture && lm_profile_depth() > 0;
    v->stamping = v->prof && prof_stamps(v);
    lm_status st = lm_vk_check(v, vkBeginCommandBuffer(v->cb, &bi), "vkBeginCommandBuffer");
    if (st != LM_OK) return st;
    v->recording = true;
    v->ndispatch = 0;
    v->nwritten = v->nread = 0;
    v->nstamps = 0;
    if (v->stamping) vkCmdResetQueryPool(v->cb, v->qpool, 0, 2 * LM_VK_BATCH);
    /* after the slots still running; a recording after whatever runs
     * before each of its replays */
    if (v->inflight || v->capture) full_barrier(v);
    return LM_OK;
}

static lm_status drain(lm_vk_dev *v);

/* ends and submits the open command buffer without waiting, then `after`
 * (a recording) if given; what was freed while it was recorded goes with it */
static lm_status submit_open(lm_vk_dev *v, VkCommandBuffer after)
{
    struct lm_vk_slot *s = &v->slots[v->slot];
    lm_status sd = drain(v);   /* the kept dispatches first */
    v->recording = false;
    while (v->deferred) {
        lm_vk_mem *m = v->deferred;
        v->deferred = m->next_deferred;
        m->next_deferred = s->deferred;
        s->deferred = m;
    }
    lm_status st = lm_vk_check(v, vkEndCommandBuffer(v->cb), "vkEndCommandBuffer");
    if (st == LM_OK) st = sd;
    VkCommandBuffer cbs[2] = {v->cb, after};
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = after ? 2 : 1,
                       .pCommandBuffers = cbs};
    if (st == LM_OK)
        st = lm_vk_check(v, vkQueueSubmit(v->queue, 1, &si, v->fence), "vkQueueSubmit");
    if (st == LM_OK) {
        s->pending = true;
        v->inflight++;
    }
    return st;
}

/* waits for slot i (if it was submitted), makes it ready to record again
 * and releases what was freed while it was recorded (after a device loss
 * nothing runs again; still free what we can) */
static lm_status slot_wait(lm_vk_dev *v, int i)
{
    struct lm_vk_slot *s = &v->slots[i];
    lm_status st = LM_OK;
    if (s->pending) {
        st = lm_vk_check(v, vkWaitForFences(v->device, 1, &s->fence, VK_TRUE, UINT64_MAX),
                         "vkWaitForFences");
        s->pending = false;
        v->inflight--;
    }
    vkResetFences(v->device, 1, &s->fence);
    vkResetCommandBuffer(s->cb, 0);
    vkResetDescriptorPool(v->device, s->dpool, 0);
    lm_vk_mem *keep = v->deferred;
    v->deferred = s->deferred;
    s->deferred = NULL;
    lm_vk_release_deferred(v);
    v->deferred = keep;
    return st;
}

/* submits the open slot and moves to the next, waiting for that one only
 * if it is still running */
static lm_status rotate_after(lm_vk_dev *v, VkCommandBuffer after)
{
    lm_status st = submit_open(v, after);
    if (st != LM_OK) return st;
    int next = (v->slot + 1) % v->ring;
    st = slot_wait(v, next);
    use_slot(v, next);
    if (v->batch_limit < LM_VK_BATCH) v->batch_limit *= 2;
    return st;
}

static lm_status rotate(lm_vk_dev *v) { return rotate_after(v, VK_NULL_HANDLE); }

/* ---- capture (replay.c) ----
 * A capture records into the recording's command buffer in place of the
 * open slot's; the slot's own stays unopened until the capture ends. */

lm_status lm_vk_capture_start(lm_vk_dev *v, lm_vk_rec *r, VkCommandBuffer cb)
{
    if (v->lost) return lm_error_set(LM_ERR_DEVICE, "vulkan: device %s was lost", v->dev->name);
    /* what came before is submitted first, with what was freed meanwhile:
     * what is freed from here on is the recording's (replay.c) */
    lm_status st = v->recording || v->deferred ? open_cb(v) : LM_OK;
    if (st == LM_OK && v->recording) st = rotate(v);
    if (st != LM_OK) return st;
    v->capture = r;
    v->cb = cb;
    st = open_cb(v);   /* open now, so frees from here on are deferred to the recording */
    if (st != LM_OK) {
        v->capture = NULL;
        use_slot(v, v->slot);
    }
    return st;
}

/* The capture cannot go on (the host waits for the work, or copies host
 * data into it): what it recorded is submitted as the open slot's work
 * would be, and recording goes on in the ring. */
static lm_status capture_break(lm_vk_dev *v)
{
    v->capture = NULL;
    return rotate(v);
}

lm_status lm_vk_capture_stop(lm_vk_dev *v, bool *whole)
{
    *whole = false;
    if (!v->capture) return LM_OK;   /* broken: its work went the ordinary way */
    if (v->status_armed) return lm_vk_flush(v);   /* its index errors are read once, now */
    v->capture = NULL;
    v->recording = false;
    lm_status st = lm_vk_check(v, vkEndCommandBuffer(v->cb), "vkEndCommandBuffer");
    use_slot(v, v->slot);
    *whole = st == LM_OK;
    return st;
}

lm_status lm_vk_submit_after(lm_vk_dev *v, VkCommandBuffer cb)
{
    if (v->lost) return lm_error_set(LM_ERR_DEVICE, "vulkan: device %s was lost", v->dev->name);
    lm_status st = open_cb(v);   /* the copies in, if any; else an empty one, for the fence */
    return st == LM_OK ? rotate_after(v, cb) : st;
}

/* submits what is recorded and waits for every slot */
lm_status lm_vk_flush(lm_vk_dev *v)
{
    if (!v->up) return LM_OK;
    if (v->capture) {
        lm_status sb = capture_break(v);
        if (sb != LM_OK) return sb;
    }
    /* (a broken capture may have waited for an armed kernel already: its
     * status is still to be read) */
    if (!v->recording && !v->inflight && !v->status_armed) {
        lm_vk_release_deferred(v);
        return LM_OK;
    }
    double t0 = v->prof && !v->stamping ? lm_profile_now_ms() : 0;
    lm_status st = v->recording ? submit_open(v, VK_NULL_HANDLE) : LM_OK;
    for (int k = 1; k <= v->ring; k++) {   /* oldest first; the open slot last */
        lm_status sw = slot_wait(v, (v->slot + k) % v->ring);
        if (st == LM_OK) st = sw;
    }
    lm_vk_release_deferred(v);   /* freed between slots */
    if (st == LM_OK && v->stamping) prof_read(v);
    else if (st == LM_OK && v->prof) lm_profile_host("submit", "queue without timestamps", v->dev, lm_profile_now_ms() - t0, 0);
    v->nstamps = 0;
    v->batch_limit = v->ring > 1 ? FIRST_BATCH : LM_VK_BATCH;
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
    lm_vk_dev *v = lm_vk_of(d);
    /* a command buffer opened outside the evaluation (small uploads, see
     * memory.c) was opened with the profile as it was then: submit it, so
     * the evaluation's kernels are timed (or not) as the profile is now */
    if (v->up && v->recording && v->prof != (lm_profile_depth() > 0)) {
        lm_status st = lm_vk_flush(v);
        if (st != LM_OK) return st;
    }
    return lm_vk_ensure_up(v);
}

lm_status lm_vk_sync(lm_device *d)
{
    return lm_vk_flush(lm_vk_of(d));
}

/* the end of an evaluation that does not wait (lm_eval_async): the open
 * command buffer is submitted and the next slot made ready; a kernel that
 * may report an index error, or one slot only, waits as sync does */
lm_status lm_vk_submit(lm_device *d)
{
    lm_vk_dev *v = lm_vk_of(d);
    if (!v->up || !v->recording) return LM_OK;
    if (v->ring == 1 || v->prof || v->status_armed || v->capture) return lm_vk_flush(v);
    return rotate(v);
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

/* records a barrier if this kernel depends on an unbarriered one (always
 * when it is timed: then it runs alone) */
static void order(lm_vk_dev *v, const lm_vk_arg *args, int nargs, bool timed)
{
    bool need = timed && v->stamping;
    for (int i = 0; i < nargs; i++) {
        if (!args[i].mem) continue;
        need |= touched(v->written, v->nwritten, args[i].mem);
        if (args[i].write) need |= touched(v->read, v->nread, args[i].mem);
    }
    if (need || v->nwritten + nargs > 64 || v->nread + nargs > 64) {
        full_barrier(v);
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
    /* a capture is one command buffer, however long */
    /* while dispatches wait for pipelines, the command buffer takes a whole
     * batch: more of them compile side by side before the first submit */
    if (v->recording && !v->capture && v->ndispatch >= (v->prof || v->npend ? LM_VK_BATCH : v->batch_limit)) {
        /* a kernel that may report an index error is read back at once */
        bool wait = v->ring == 1 || v->prof || v->status_armed;
        lm_status st = wait ? lm_vk_flush(v) : rotate(v);
        if (st != LM_OK) return st;
    }
    return open_cb(v);
}

/* records one dispatch of a ready pipeline into the open command buffer */
static lm_status record(lm_vk_dev *v, VkPipeline pipe, const char *shader, const lm_vk_arg *args, int nargs,
                        const void *pc, size_t pcsize, uint32_t gx, uint32_t gy, uint32_t gz)
{
    lm_status st;
    bool wide = lm_vk_wide(shader);
    int nb = wide ? LM_VK_WIDE_BINDINGS : LM_VK_BINDINGS;
    VkPipelineLayout layout = wide ? v->layout_wide : v->layout;
    VkDescriptorPool dpool = v->dpool;
    if (v->capture && (st = lm_vk_capture_pool(v, &dpool)) != LM_OK) return st;
    VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                      .descriptorPool = dpool, .descriptorSetCount = 1,
                                      .pSetLayouts = wide ? &v->dsl_wide : &v->dsl};
    VkDescriptorSet set;
    if ((st = lm_vk_check(v, vkAllocateDescriptorSets(v->device, &ai, &set),
                          "vkAllocateDescriptorSets")) != LM_OK)
        return st;
    VkDescriptorBufferInfo bi[LM_VK_WIDE_BINDINGS];
    VkWriteDescriptorSet w[LM_VK_WIDE_BINDINGS];
    for (int i = 0; i < nb; i++) {
        const lm_vk_mem *m = i < nargs && args[i].mem ? args[i].mem : v->dummy;
        bi[i] = (VkDescriptorBufferInfo){m->block->buf, m->off, m->size};
        w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                      .dstSet = set, .dstBinding = (uint32_t)i,
                                      .descriptorCount = 1,
                                      .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                      .pBufferInfo = &bi[i]};
    }
    vkUpdateDescriptorSets(v->device, (uint32_t)nb, w, 0, NULL);
    int64_t entry = prof_entry(v, shader);
    order(v, args, nargs, entry >= 0);
    vkCmdBindPipeline(v->cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
    vkCmdBindDescriptorSets(v->cb, VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1, &set, 0, NULL);
    if (pcsize) vkCmdPushConstants(v->cb, layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, (uint32_t)pcsize, pc);
    prof_stamp(v, entry, false);
    vkCmdDispatch(v->cb, gx, gy, gz);
    prof_stamp(v, entry, true);
    return LM_OK;
}

/* ---- dispatches waiting for their pipelines ----
 * A dispatch whose pipeline is still being made on a compile thread
 * (pipeline.c) is kept, with copies of its buffer ranges and push
 * constants, and so is every dispatch after it, so that they are recorded
 * in the order they came; a kept dispatch counts in ndispatch as recorded
 * ones do.  They are recorded (drain) before anything else goes into the
 * command buffer (a copy, an update) and before it is submitted.  Buffers
 * freed meanwhile stay valid: the command buffer is open, so a free is
 * deferred to its fence (memory.c). */
struct lm_vk_pend {
    lm_vk_pipeline *p;
    lm_vk_mem mem[LM_VK_WIDE_BINDINGS];
    lm_vk_arg args[LM_VK_WIDE_BINDINGS];
    int nargs;
    uint32_t pcsize, g[3];
    unsigned char pc[LM_VK_PUSH_BYTES];
};

static lm_status drain(lm_vk_dev *v)
{
    lm_status st = LM_OK;
    int n = v->npend;
    v->npend = 0;
    for (int i = 0; i < n && st == LM_OK; i++) {
        struct lm_vk_pend *q = &v->pend[i];
        VkPipeline pipe;
        st = lm_vk_pipeline_wait(v, q->p, &pipe);
        if (st == LM_OK)
            st = record(v, pipe, q->p->shader, q->args, q->nargs, q->pc, q->pcsize, q->g[0], q->g[1], q->g[2]);
    }
    return st;
}

static lm_status keep(lm_vk_dev *v, lm_vk_pipeline *p, const lm_vk_arg *args, int nargs, const void *pc,
                      size_t pcsize, uint32_t gx, uint32_t gy, uint32_t gz)
{
    if (!v->pend && !(v->pend = malloc(LM_VK_BATCH * sizeof *v->pend)))
        return lm_error_set(LM_ERR_NOMEM, "vulkan: out of host memory for %d kept dispatches", LM_VK_BATCH);
    if (v->npend >= LM_VK_BATCH) {   /* (make_room submits before this) */
        lm_status st = drain(v);
        if (st != LM_OK) return st;
    }
    struct lm_vk_pend *q = &v->pend[v->npend++];
    q->p = p;
    q->nargs = nargs;
    for (int i = 0; i < nargs; i++) {
        q->args[i].write = args[i].write;
        q->args[i].mem = NULL;
        if (args[i].mem) {
            q->mem[i] = *args[i].mem;
            q->args[i].mem = &q->mem[i];
        }
    }
    q->pcsize = (uint32_t)pcsize;
    if (pcsize) memcpy(q->pc, pc, pcsize);
    q->g[0] = gx, q->g[1] = gy, q->g[2] = gz;
    return LM_OK;
}

lm_status lm_vk_dispatch(lm_vk_dev *v, const char *shader, const uint32_t *spec,
                         int nspec, const lm_vk_arg *args, int nargs, const void *pc,
                         size_t pcsize, uint32_t gx, uint32_t gy, uint32_t gz)
{
    lm_vk_pipeline *p;
    bool ready;
    lm_status st = lm_vk_pipeline_start(v, shader, spec, nspec, &p, &ready);
    if (st != LM_OK || v->plan) return st;   /* plan mode: the pipeline started, nothing recorded */
    if ((st = make_room(v)) != LM_OK) return st;
    bool wide = lm_vk_wide(shader);
    int nb = wide ? LM_VK_WIDE_BINDINGS : LM_VK_BINDINGS;
    if (nargs > nb || (wide && !v->layout_wide))
        return lm_error_set(LM_ERR_UNSUPPORTED, "vulkan: %s: %d buffers do not fit its layout", shader, nargs);
    if (pcsize > LM_VK_PUSH_BYTES)
        return lm_error_set(LM_ERR_ARG, "vulkan: %s: %zu bytes of push constants (at most %d)", shader, pcsize,
                            LM_VK_PUSH_BYTES);
    if ((!ready || v->npend) && lm_vk_pipeline_async(v))
        st = keep(v, p, args, nargs, pc, pcsize, gx, gy, gz);
    else {
        VkPipeline pipe;
        if ((st = drain(v)) == LM_OK && (st = lm_vk_pipeline_wait(v, p, &pipe)) == LM_OK)
            st = record(v, pipe, shader, args, nargs, pc, pcsize, gx, gy, gz);
    }
    if (st != LM_OK) return st;
    v->ndispatch++;
    dispatches++;
    return LM_OK;
}

lm_status lm_vk_copy_buffer(lm_vk_dev *v, const lm_vk_mem *src, VkDeviceSize soff,
                            const lm_vk_mem *dst, VkDeviceSize doff, VkDeviceSize n)
{
    /* an upload or download through the staging block (memory.c): a
     * recording would copy that range again on every run, long after the
     * staging bytes were reused; so it breaks the capture as
     * lm_vk_update_buffer does.  Copies between tensors stay captured. */
    lm_status st = v->capture && v->in_transfer ? capture_break(v) : LM_OK;
    if (st == LM_OK) st = make_room(v);
    if (st != LM_OK) return st;
    if ((st = drain(v)) != LM_OK) return st;
    lm_vk_arg args[2] = {{src, false}, {dst, true}};
    int64_t entry = prof_entry(v, "copy_buffer");
    order(v, args, 2, entry >= 0);
    VkBufferCopy r = {.srcOffset = src->off + soff, .dstOffset = dst->off + doff, .size = n};
    prof_stamp(v, entry, false);
    vkCmdCopyBuffer(v->cb, src->block->buf, dst->block->buf, 1, &r);
    prof_stamp(v, entry, true);
    v->ndispatch++;
    return LM_OK;
}

lm_status lm_vk_update_buffer(lm_vk_dev *v, const lm_vk_mem *dst, const void *data, size_t n)
{
    /* host data into a tensor: a recording would write it again on every run */
    lm_status st = v->capture && v->in_transfer ? capture_break(v) : LM_OK;
    if (st == LM_OK) st = make_room(v);
    if (st != LM_OK) return st;
    if ((st = drain(v)) != LM_OK) return st;
    lm_vk_arg args[1] = {{dst, true}};
    int64_t entry = prof_entry(v, "update_buffer");
    order(v, args, 1, entry >= 0);
    prof_stamp(v, entry, false);
    vkCmdUpdateBuffer(v->cb, dst->block->buf, dst->off, (VkDeviceSize)n, data);
    prof_stamp(v, entry, true);
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
