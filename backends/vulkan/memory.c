/* memory.c - device memory: large blocks, sub-allocated ranges, staging.
 *
 * vkAllocateMemory is slow and drivers cap the number of allocations, so
 * tensors are ranges inside blocks of block_size bytes (first fit over a
 * sorted free list, neighbours merged on free).  A tensor larger than half a
 * block gets a block of its own, returned to the driver when freed.  The
 * core's buffer cache sits above this and makes most frees cheap.
 *
 * Transfers: on devices whose device-local memory is host-visible (lavapipe,
 * integrated GPUs) blocks stay mapped and transfers are memcpy; elsewhere
 * they go through a host-visible staging block in chunks.  A download first
 * completes recorded GPU work, so it never races a kernel.  An upload never
 * waits: a small one (SMALL_UPLOAD bytes at most, whole words: a scalar, a
 * shape table) to an unmapped block is recorded into the open command
 * buffer as vkCmdUpdateBuffer (the data is copied when recorded), a larger
 * one to an unmapped block, or any upload while kernels are recorded or
 * running, is copied into a range of the staging block and recorded as a
 * copy from there (upload_recorded); both are ordered against the kernels
 * around them like a dispatch.  A model that makes its constants per call
 * then costs no submit and wait per constant, loading weights costs one
 * submit, and `lumen upscale` uploads an image while the last one computes.
 * Only an upload that finds no room in the staging block waits (for the
 * recorded copies to finish, which frees the block) and goes in chunks, and
 * every upload waits while a profile is open (its row is the copy's time).
 * LUMEN_VK_NO_MAP=1 leaves device blocks unmapped on any device (lavapipe
 * included), so the staging and recorded paths can be tested there. */
#include <stdlib.h>
#include <string.h>
#include "backends/vulkan/vk.h"
#include "backends/vulkan/vulkan.h"
#include "core/profile.h"

#define ALIGN 256u
#define SMALL_UPLOAD 4096u

static int64_t recorded_uploads;
int64_t lm_vulkan_recorded_upload_count(void) { return recorded_uploads; }

static int find_type(lm_vk_dev *v, uint32_t bits, VkMemoryPropertyFlags want,
                     VkMemoryPropertyFlags avoid)
{
    for (uint32_t i = 0; i < v->memprops.memoryTypeCount; i++) {
        VkMemoryPropertyFlags f = v->memprops.memoryTypes[i].propertyFlags;
        if ((bits & (1u << i)) && (f & want) == want && !(f & avoid)) return (int)i;
    }
    return -1;
}

static VkResult make_buffer(lm_vk_dev *v, VkDeviceSize size, VkBuffer *buf)
{
    VkBufferCreateInfo bi = {
        .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size,
        .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                 VK_BUFFER_USAGE_TRANSFER_DST_BIT,
        .sharingMode = VK_SHARING_MODE_EXCLUSIVE,
    };
    return vkCreateBuffer(v->device, &bi, NULL, buf);
}

static void block_destroy(lm_vk_dev *v, lm_vk_block *b)
{
    if (!b) return;
    if (b->map) vkUnmapMemory(v->device, b->mem);
    if (b->buf) vkDestroyBuffer(v->device, b->buf, NULL);
    if (b->mem) {
        vkFreeMemory(v->device, b->mem, NULL);
        v->reserved -= b->size;
    }
    free(b->free);
    free(b);
}

/* tensors: a block for tensors (left unmapped under LUMEN_VK_NO_MAP=1),
 * not the staging or status block */
static lm_vk_block *block_new(lm_vk_dev *v, VkDeviceSize size, uint32_t mt, bool tensors, lm_status *st)
{
    lm_vk_block *b = calloc(1, sizeof *b);
    if (!b) { *st = lm_error_set(LM_ERR_NOMEM, "vulkan: out of host memory"); return NULL; }
    b->size = size;
    if ((*st = lm_vk_check(v, make_buffer(v, size, &b->buf), "vkCreateBuffer")) != LM_OK) goto fail;
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(v->device, b->buf, &req);
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                               .allocationSize = req.size, .memoryTypeIndex = mt};
    if ((*st = lm_vk_check(v, vkAllocateMemory(v->device, &ai, NULL, &b->mem),
                           "vkAllocateMemory")) != LM_OK)
        goto fail;
    b->size = req.size;
    v->reserved += b->size;
    if ((*st = lm_vk_check(v, vkBindBufferMemory(v->device, b->buf, b->mem, 0),
                           "vkBindBufferMemory")) != LM_OK)
        goto fail;
    if ((v->memprops.memoryTypes[mt].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) &&
        !(v->no_map && tensors))
        if ((*st = lm_vk_check(v, vkMapMemory(v->device, b->mem, 0, VK_WHOLE_SIZE, 0, &b->map),
                               "vkMapMemory")) != LM_OK)
            goto fail;
    b->free = malloc(4 * sizeof *b->free);
    if (!b->free) { *st = lm_error_set(LM_ERR_NOMEM, "vulkan: out of host memory"); goto fail; }
    b->capfree = 4;
    b->nfree = 1;
    b->free[0] = (lm_vk_range){0, size};
    return b;
fail:
    block_destroy(v, b);
    return NULL;
}

lm_status lm_vk_mem_init(lm_vk_dev *v)
{
    VkBuffer probe_buf;
    lm_status st = lm_vk_check(v, make_buffer(v, 4096, &probe_buf), "vkCreateBuffer");
    if (st != LM_OK) return st;
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(v->device, probe_buf, &req);
    vkDestroyBuffer(v->device, probe_buf, NULL);
    const VkMemoryPropertyFlags DL = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT,
        HV = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    bool discrete = v->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU;
    int unified = discrete ? -1 : find_type(v, req.memoryTypeBits, DL | HV, 0);
    int dev = unified >= 0 ? unified : find_type(v, req.memoryTypeBits, DL, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT);
    if (dev < 0) dev = find_type(v, req.memoryTypeBits, DL, 0);
    int host = find_type(v, req.memoryTypeBits, HV | VK_MEMORY_PROPERTY_HOST_CACHED_BIT, 0);
    if (host < 0) host = find_type(v, req.memoryTypeBits, HV, 0);
    if (dev < 0) dev = host;
    if (dev < 0 || host < 0)
        return lm_error_set(LM_ERR_DEVICE, "vulkan: %s has no usable memory type", v->dev->name);
    const char *nm = getenv("LUMEN_VK_NO_MAP");
    v->no_map = nm && !strcmp(nm, "1");
    v->mt_device = (uint32_t)dev;
    v->mt_host = (uint32_t)host;
    v->unified = unified >= 0 || dev == host;
    VkDeviceSize total = v->dev->mem.device_total;
    v->block_size = total >= ((VkDeviceSize)8 << 30) ? (256u << 20) : (64u << 20);
    if (v->feat.max_alloc && v->block_size > v->feat.max_alloc) v->block_size = v->feat.max_alloc;
    v->dummy = NULL;
    void *h, *hp;
    if ((st = lm_vk_alloc(v->dev, 256, &h, &hp)) != LM_OK) return st;
    v->dummy = h;
    return LM_OK;
}

void lm_vk_mem_shutdown(lm_vk_dev *v)
{
    while (v->blocks) {
        lm_vk_block *n = v->blocks->next;
        block_destroy(v, v->blocks);
        v->blocks = n;
    }
    block_destroy(v, v->staging);
    v->staging = NULL;
    if (v->status) block_destroy(v, v->status->block);
    free(v->status);
    v->status = NULL;
}

static bool range_take(lm_vk_block *b, VkDeviceSize size, VkDeviceSize *off)
{
    for (int i = 0; i < b->nfree; i++) {
        if (b->free[i].size < size) continue;
        *off = b->free[i].off;
        b->free[i].off += size;
        b->free[i].size -= size;
        if (!b->free[i].size) {
            memmove(&b->free[i], &b->free[i + 1], (size_t)(b->nfree - i - 1) * sizeof *b->free);
            b->nfree--;
        }
        b->used += size;
        return true;
    }
    return false;
}

static bool range_give(lm_vk_block *b, VkDeviceSize off, VkDeviceSize size)
{
    int i = 0;
    while (i < b->nfree && b->free[i].off < off) i++;
    bool left = i > 0 && b->free[i - 1].off + b->free[i - 1].size == off;
    bool right = i < b->nfree && off + size == b->free[i].off;
    b->used -= size;
    if (left && right) {
        b->free[i - 1].size += size + b->free[i].size;
        memmove(&b->free[i], &b->free[i + 1], (size_t)(b->nfree - i - 1) * sizeof *b->free);
        b->nfree--;
    } else if (left) {
        b->free[i - 1].size += size;
    } else if (right) {
        b->free[i].off = off;
        b->free[i].size += size;
    } else {
        if (b->nfree == b->capfree) {
            lm_vk_range *n = realloc(b->free, 2 * (size_t)b->capfree * sizeof *n);
            if (!n) return false;     /* the range leaks inside the block; harmless */
            b->free = n;
            b->capfree *= 2;
        }
        memmove(&b->free[i + 1], &b->free[i], (size_t)(b->nfree - i) * sizeof *b->free);
        b->free[i] = (lm_vk_range){off, size};
        b->nfree++;
    }
    return true;
}

lm_status lm_vk_alloc(lm_device *d, size_t bytes, void **handle, void **host)
{
    lm_vk_dev *v = lm_vk_of(d);
    lm_status st = lm_vk_ensure_up(v);
    if (st != LM_OK) return st;
    *host = NULL;
    lm_vk_mem *m = calloc(1, sizeof *m);
    if (!m) return lm_error_set(LM_ERR_NOMEM, "vulkan: out of host memory");
    VkDeviceSize size = ((VkDeviceSize)(bytes ? bytes : 1) + ALIGN - 1) & ~(VkDeviceSize)(ALIGN - 1);
    m->size = size;
    if (size > v->block_size / 2) {
        lm_vk_block *b = block_new(v, size, v->mt_device, true, &st);
        if (!b) { free(m); return st; }
        b->dedicated = true;
        range_take(b, size, &m->off);
        b->next = v->blocks;
        v->blocks = b;
        m->block = b;
    } else {
        for (lm_vk_block *b = v->blocks; b && !m->block; b = b->next)
            if (!b->dedicated && range_take(b, size, &m->off)) m->block = b;
        if (!m->block) {
            lm_vk_block *b = block_new(v, v->block_size, v->mt_device, true, &st);
            if (!b) { free(m); return st; }
            range_take(b, size, &m->off);
            b->next = v->blocks;
            v->blocks = b;
            m->block = b;
        }
    }
    *handle = m;
    return LM_OK;
}

/* A window is a range of the same block: kernels bind it at its own
 * offset, and ordering (exec.c) sees it overlap its parent.  The offset
 * meets minStorageBufferOffsetAlignment and 16 bytes (so the kernels that
 * vectorise on aligned operands choose as they would for a buffer of its
 * own), and the size whole words. */
lm_status lm_vk_window(lm_device *d, void *handle, size_t off, size_t bytes, void **sub, void **host)
{
    lm_vk_dev *v = lm_vk_of(d);
    const lm_vk_mem *p = handle;
    VkDeviceSize align = v->feat.align > 16 ? v->feat.align : 16;
    if ((p->off + off) % align || bytes % 4 || !bytes || off + bytes > p->size)
        return lm_error_set(LM_ERR_UNSUPPORTED, "vulkan: no window of %zu bytes at byte %zu (alignment %llu)",
                            bytes, off, (unsigned long long)align);
    lm_vk_mem *m = calloc(1, sizeof *m);
    if (!m) return lm_error_set(LM_ERR_NOMEM, "vulkan: out of host memory");
    *m = (lm_vk_mem){.block = p->block, .off = p->off + off, .size = bytes};
    *sub = m;
    *host = NULL;
    return LM_OK;
}

/* recorded dispatches copied the range they bind, so the struct may go at
 * once; the memory stays with the parent */
void lm_vk_window_free(lm_device *d, void *sub)
{
    (void)d;
    free(sub);
}

static void release_now(lm_vk_dev *v, lm_vk_mem *m)
{
    lm_vk_block *b = m->block;
    range_give(b, m->off, m->size);
    free(m);
    if (b->used || b == v->staging) return;   /* staging: a recorded upload's range */
    /* keep one empty shared block for the next allocation; return the rest */
    int empty_shared = 0;
    for (lm_vk_block *x = v->blocks; x; x = x->next)
        empty_shared += !x->dedicated && !x->used;
    if (!b->dedicated && empty_shared <= 1) return;
    for (lm_vk_block **p = &v->blocks; *p; p = &(*p)->next)
        if (*p == b) { *p = b->next; break; }
    block_destroy(v, b);
}

void lm_vk_free(lm_device *d, void *handle)
{
    lm_vk_dev *v = lm_vk_of(d);
    lm_vk_mem *m = handle;
    if (!m) return;
    if (v->down) {   /* after the teardown at exit (device.c): its block is gone */
        free(m);
        return;
    }
    if (v->recording || v->inflight) {   /* recorded or running kernels may still use it */
        m->next_deferred = v->deferred;
        v->deferred = m;
        return;
    }
    release_now(v, m);
}

void lm_vk_release_deferred(lm_vk_dev *v)
{
    while (v->deferred) {
        lm_vk_mem *m = v->deferred;
        v->deferred = m->next_deferred;
        release_now(v, m);
    }
}

static lm_status ensure_staging(lm_vk_dev *v)
{
    if (v->staging) return LM_OK;
    lm_status st;
    VkDeviceSize size = v->block_size < (64u << 20) ? v->block_size : (64u << 20);
    v->staging = block_new(v, size, v->mt_host, false, &st);
    return v->staging ? LM_OK : st;
}

/* one chunk through staging: upload (host -> staging -> m) or download */
static lm_status staged(lm_vk_dev *v, lm_vk_mem *m, size_t off, void *host, size_t n, bool up)
{
    lm_status st = ensure_staging(v);
    if (st != LM_OK) return st;
    if (up) memcpy(v->staging->map, host, n);
    lm_vk_mem s = {.block = v->staging, .off = 0, .size = v->staging->size};
    st = up ? lm_vk_copy_buffer(v, &s, 0, m, off, n) : lm_vk_copy_buffer(v, m, off, &s, 0, n);
    if (st == LM_OK) st = lm_vk_flush(v);
    if (st == LM_OK && !up) memcpy(host, v->staging->map, n);
    return st;
}

/* An upload recorded instead of waiting: the bytes go to a range of the
 * staging block and a copy from there is recorded into the open command
 * buffer, ordered against the kernels around it like a dispatch; the range
 * is given back after that command buffer's fence (lm_vk_free defers it).
 * false when the staging block has no room (the caller then waits, which
 * frees every such range). */
static bool upload_recorded(lm_vk_dev *v, lm_vk_mem *m, size_t off, const void *host, size_t n,
                            lm_status *st)
{
    VkDeviceSize size = ((VkDeviceSize)n + ALIGN - 1) & ~(VkDeviceSize)(ALIGN - 1);
    if (ensure_staging(v) != LM_OK || size > v->staging->size / 2) return false;
    lm_vk_mem *s = calloc(1, sizeof *s);
    if (!s) return false;
    if (!range_take(v->staging, size, &s->off)) {
        free(s);
        return false;
    }
    s->block = v->staging;
    s->size = size;
    memcpy((char *)v->staging->map + s->off, host, n);
    *st = lm_vk_copy_buffer(v, s, 0, m, off, n);
    recorded_uploads += *st == LM_OK;
    lm_vk_free(v->dev, s);   /* given back after the fence of the copy's command buffer */
    return true;
}

static lm_status copy(lm_vk_dev *v, lm_vk_mem *m, size_t off, void *host, size_t n, bool up)
{
    /* while a profile is open an upload is a transfer row timed on the host
     * (core/device.c), so it must not leave its copy queued for the GPU to
     * run later, in no row: it takes the waiting path below, and the row
     * holds the copy */
    bool queue = up && lm_profile_depth() == 0;
    if (queue && !m->block->map && n && n <= SMALL_UPLOAD && n % 4 == 0 && (m->off + off) % 4 == 0) {
        lm_vk_mem part = {.block = m->block, .off = m->off + off, .size = n};
        return lm_vk_update_buffer(v, &part, host, n);
    }
    /* an upload does not wait for the GPU: to an unmapped block it is
     * always recorded (a model's weights, uploaded one after another, then
     * cost one submit, not one submit and wait each); to a mapped block
     * only while kernels are recorded or running (an image's input is
     * uploaded while the previous one computes), else it is a memcpy */
    lm_status st = LM_OK;
    if (queue && n && (!m->block->map || v->recording || v->inflight) &&
        upload_recorded(v, m, off, host, n, &st))
        return st;
    st = lm_vk_flush(v);
    if (st != LM_OK) return st;
    if (m->block->map) {
        char *p = (char *)m->block->map + m->off + off;
        if (up) memcpy(p, host, n); else memcpy(host, p, n);
        return LM_OK;
    }
    while (n && st == LM_OK) {
        if ((st = ensure_staging(v)) != LM_OK) return st;
        size_t chunk = n < v->staging->size ? n : (size_t)v->staging->size;
        st = staged(v, m, off, host, chunk, up);
        off += chunk;
        host = (char *)host + chunk;
        n -= chunk;
    }
    return st;
}

static lm_status transfer(lm_device *d, void *handle, size_t off, void *host, size_t n, bool up)
{
    lm_vk_dev *v = lm_vk_of(d);
    lm_vk_mem *m = handle;
    if (off + n > m->size)
        return lm_error_set(LM_ERR_ARG, "vulkan: transfer of %zu bytes at %zu past a %zu-byte buffer",
                            n, off, (size_t)m->size);
    /* the copies it records are the core's upload/download rows in a
     * profile, not kernels of the node being run */
    v->in_transfer = true;
    lm_status st = copy(v, m, off, host, n, up);
    v->in_transfer = false;
    return st;
}

lm_status lm_vk_upload(lm_device *d, void *handle, size_t off, const void *src, size_t n)
{
    return transfer(d, handle, off, (void *)src, n, true);
}

lm_status lm_vk_download(lm_device *d, void *handle, size_t off, void *dst, size_t n)
{
    return transfer(d, handle, off, dst, n, false);
}

lm_status lm_vk_status_init(lm_vk_dev *v)
{
    if (v->status) return LM_OK;
    lm_status st;
    lm_vk_mem *m = calloc(1, sizeof *m);
    if (!m) return lm_error_set(LM_ERR_NOMEM, "vulkan: out of host memory");
    m->block = block_new(v, ALIGN, v->mt_host, false, &st);
    if (!m->block) { free(m); return st; }
    m->size = ALIGN;
    memset(m->block->map, 0, 8);
    v->status = m;
    return LM_OK;
}
