/* replay.c - recordings: command buffers kept and submitted again
 * (core/replay.h's device side; exec.c's capture mode records them).
 *
 * A recording is one primary command buffer begun with
 * SIMULTANEOUS_USE (a replay may be queued while the last one runs), its
 * own descriptor pools (a set per dispatch, written once: the buffers it
 * binds never change, since the core gives the recording memory no one
 * else uses), the memory its kernels freed while it was made (sort
 * scratch), and its constant data: fused programs live in slots of a cache
 * that later evaluations overwrite (fused.c), so a captured kernel reads
 * its program from memory of the recording's own, written by the
 * recording's first commands.
 *
 * Each replay is submitted behind the ring's open command buffer (which
 * holds the copies of the inputs) on that slot's fence; the recording
 * begins with a full barrier, and the next slot's command buffer (the
 * copies out) does too, so replays order like any other work.
 * LUMEN_VK_REPLAY=0 switches recording and replay off (read at each call,
 * for comparisons). */
#include <stdlib.h>
#include <string.h>
#include "backends/vulkan/vk.h"

#define CONST_SLOT 4096u               /* a fused program's slot, as fused.c's */
#define CONST_CHUNK (16u * CONST_SLOT)

typedef struct rec_const {
    lm_vk_mem mem;
    size_t n;
    uint32_t data[CONST_SLOT / 4];
} rec_const;

struct lm_vk_rec {
    VkCommandBuffer cb;
    VkDescriptorPool *pools;
    int npools, sets;                  /* sets taken from the last pool */
    lm_vk_mem **chunks;                /* constant data, CONST_CHUNK each */
    int nchunks;
    VkDeviceSize chunk_used;
    rec_const **consts;
    int nconsts;
    lm_vk_mem *owned;                  /* freed while it was recorded: its memory now */
};

/* the recording being made: v->capture until a break clears it */
static lm_vk_rec *making;

static bool enabled(void)
{
    const char *e = getenv("LUMEN_VK_REPLAY");
    return !(e && !strcmp(e, "0"));
}

/* frees r; nothing may still run it (the caller has flushed) */
static void rec_destroy(lm_vk_dev *v, lm_vk_rec *r)
{
    if (r->cb) vkFreeCommandBuffers(v->device, v->cmdpool, 1, &r->cb);
    for (int i = 0; i < r->npools; i++) vkDestroyDescriptorPool(v->device, r->pools[i], NULL);
    free(r->pools);
    for (int i = 0; i < r->nchunks; i++) lm_vk_free(v->dev, r->chunks[i]);
    free(r->chunks);
    for (int i = 0; i < r->nconsts; i++) free(r->consts[i]);
    free(r->consts);
    while (r->owned) {   /* released as memory freed meanwhile is */
        lm_vk_mem *m = r->owned;
        r->owned = m->next_deferred;
        lm_vk_free(v->dev, m);
    }
    free(r);
}

lm_status lm_vk_record_begin(lm_device *d)
{
    lm_vk_dev *v = lm_vk_of(d);
    if (!enabled()) return lm_error_set(LM_ERR_UNSUPPORTED, "vulkan: replay is switched off (LUMEN_VK_REPLAY=0)");
    lm_status st = lm_vk_ensure_up(v);
    if (st != LM_OK) return st;
    if (v->capture || making)
        return lm_error_set(LM_ERR_STATE, "vulkan: a recording is being made on %s already", d->spec);
    if (v->plan)   /* its kernels would not be in it */
        return lm_error_set(LM_ERR_STATE, "vulkan: %s is in plan mode (lm_device_plan): nothing to record",
                            d->spec);
    lm_vk_rec *r = calloc(1, sizeof *r);
    if (!r) return lm_error_set(LM_ERR_NOMEM, "vulkan: out of host memory");
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                      .commandPool = v->cmdpool,
                                      .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
    st = lm_vk_check(v, vkAllocateCommandBuffers(v->device, &ai, &r->cb), "vkAllocateCommandBuffers");
    if (st == LM_OK) st = lm_vk_capture_start(v, r, r->cb);
    if (st != LM_OK) {
        rec_destroy(v, r);
        return st;
    }
    making = r;
    return LM_OK;
}

lm_status lm_vk_record_end(lm_device *d, void **out)
{
    lm_vk_dev *v = lm_vk_of(d);
    lm_vk_rec *r = making;
    *out = NULL;
    if (!r) return lm_error_set(LM_ERR_STATE, "vulkan: no recording is being made on %s", d->spec);
    making = NULL;
    bool whole = false;
    lm_status st = lm_vk_capture_stop(v, &whole);
    if (st == LM_OK && whole) {
        r->owned = v->deferred;   /* capture_start left nothing else there */
        v->deferred = NULL;
        *out = r;
        return LM_OK;
    }
    /* broken: its command buffer went as ordinary work; what followed is
     * still open.  Both complete here (an index error a kernel found is
     * reported now), and then the recording can go. */
    lm_status sf = lm_vk_flush(v);
    rec_destroy(v, r);
    if (st != LM_OK) return st;
    if (sf != LM_OK) return sf;
    return lm_error_set(LM_ERR_UNSUPPORTED, "vulkan: the call could not be recorded on %s", d->spec);
}

lm_status lm_vk_replay(lm_device *d, void *rec)
{
    lm_vk_dev *v = lm_vk_of(d);
    if (!enabled()) return lm_error_set(LM_ERR_UNSUPPORTED, "vulkan: replay is switched off (LUMEN_VK_REPLAY=0)");
    if (!rec) return LM_OK;
    if (v->capture) return lm_error_set(LM_ERR_STATE, "vulkan: replay while recording on %s", d->spec);
    lm_vk_rec *r = rec;
    return lm_vk_submit_after(v, r->cb);
}

void lm_vk_record_free(lm_device *d, void *rec)
{
    lm_vk_dev *v = lm_vk_of(d);
    if (!rec) return;
    lm_vk_flush(v);   /* its runs end first; a failure here was or will be someone else's to report */
    rec_destroy(v, rec);
}

lm_status lm_vk_copy(lm_device *d, int n, void *const *src, const size_t *src_off, void *const *dst,
                     const size_t *bytes)
{
    lm_vk_dev *v = lm_vk_of(d);
    lm_status st = lm_vk_ensure_up(v);
    for (int i = 0; i < n && st == LM_OK; i++)
        if (bytes[i]) st = lm_vk_copy_buffer(v, src[i], src_off[i], dst[i], 0, bytes[i]);
    return st;
}

lm_status lm_vk_capture_pool(lm_vk_dev *v, VkDescriptorPool *pool)
{
    lm_vk_rec *r = v->capture;
    if (!r->npools || r->sets == LM_VK_BATCH) {
        VkDescriptorPool *np = realloc(r->pools, sizeof *np * (size_t)(r->npools + 1));
        if (!np) return lm_error_set(LM_ERR_NOMEM, "vulkan: out of host memory");
        r->pools = np;
        VkDescriptorPoolSize ps = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                   .descriptorCount = LM_VK_BATCH * LM_VK_WIDE_BINDINGS};
        VkDescriptorPoolCreateInfo dpi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                          .maxSets = LM_VK_BATCH, .poolSizeCount = 1, .pPoolSizes = &ps};
        lm_status st = lm_vk_check(v, vkCreateDescriptorPool(v->device, &dpi, NULL, &r->pools[r->npools]),
                                   "vkCreateDescriptorPool");
        if (st != LM_OK) return st;
        r->npools++;
        r->sets = 0;
    }
    r->sets++;
    *pool = r->pools[r->npools - 1];
    return LM_OK;
}

lm_status lm_vk_capture_const(lm_vk_dev *v, const void *data, size_t n, const lm_vk_mem **out)
{
    lm_vk_rec *r = v->capture;
    if (n > CONST_SLOT || n % 4)
        return lm_error_set(LM_ERR_ARG, "vulkan: %zu bytes of recorded constants do not fit a slot", n);
    for (int i = 0; i < r->nconsts; i++)   /* the same program again: one copy */
        if (r->consts[i]->n == n && !memcmp(r->consts[i]->data, data, n)) {
            *out = &r->consts[i]->mem;
            return LM_OK;
        }
    lm_status st;
    if (!r->nchunks || r->chunk_used + CONST_SLOT > CONST_CHUNK) {
        lm_vk_mem **nc = realloc(r->chunks, sizeof *nc * (size_t)(r->nchunks + 1));
        if (!nc) return lm_error_set(LM_ERR_NOMEM, "vulkan: out of host memory");
        r->chunks = nc;
        void *h = NULL, *host = NULL;
        if ((st = lm_vk_alloc(v->dev, CONST_CHUNK, &h, &host)) != LM_OK) return st;
        r->chunks[r->nchunks++] = h;
        r->chunk_used = 0;
    }
    rec_const **ncs = realloc(r->consts, sizeof *ncs * (size_t)(r->nconsts + 1));
    rec_const *c = calloc(1, sizeof *c);
    if (ncs) r->consts = ncs;
    if (!ncs || !c) {
        free(c);
        return lm_error_set(LM_ERR_NOMEM, "vulkan: out of host memory");
    }
    const lm_vk_mem *chunk = r->chunks[r->nchunks - 1];
    c->mem = (lm_vk_mem){chunk->block, chunk->off + r->chunk_used, CONST_SLOT, NULL};
    c->n = n;
    memcpy(c->data, data, n);
    r->chunk_used += CONST_SLOT;
    r->consts[r->nconsts++] = c;
    *out = &c->mem;
    /* in the recording itself: written again on each run, before its readers */
    return lm_vk_update_buffer(v, &c->mem, c->data, n);
}
