/* memory.c - buffers, accounting, the bounded reuse cache and the limit.
 *
 * Sizes are rounded up to a size class (four steps per power of two, so at
 * most 25% is wasted) and a freed buffer serves later requests of the same
 * class.  The cache is bounded by cache_limit; past it the largest cached
 * buffers go back to the backend first.  Accounting counts capacities. */
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "profile.h"

static lm_oom_hook oom_hook;
static void *oom_ctx;

void lm_set_oom_hook(lm_oom_hook hook, void *ctx)
{
    oom_hook = hook;
    oom_ctx = ctx;
}

/* class c holds capacities in (cap(c-1), cap(c)]; cap grows by 2^(1/4)-ish
 * steps: 4 classes per power of two, from 64 bytes. */
static int size_class(size_t size, size_t *cap)
{
    size_t c = 64;
    int k = 0;
    if (size <= 64) { *cap = 64; return 0; }
    while (c < size) {
        size_t pow2 = (size_t)1 << (63 - __builtin_clzll(c));
        size_t step = pow2 / 4;
        c += step;
        k++;
    }
    *cap = c;
    return k;
}

#define NCLASSES 64
/* classes map to cache slots by hashing into 64 lists (collisions are
 * fine: a list holds buffers of different capacity, checked on reuse) */
static int slot_of(int cls) { return cls % NCLASSES; }

static void cache_trim(lm_device *d, size_t keep)
{
    for (int s = NCLASSES - 1; s >= 0 && d->mem.cached > keep; s--) {
        while (d->cache[s] && d->mem.cached > keep) {
            lm_buffer *b = d->cache[s];
            d->cache[s] = b->next_free;
            d->mem.cached -= b->capacity;
            d->backend->free(d, b->handle);
            free(b);
        }
    }
}

void lm_device_clear_cache(lm_device *d)
{
    if (d) cache_trim(d, 0);
}

static lm_buffer *cache_take(lm_device *d, int cls, size_t cap)
{
    lm_buffer **pp = &d->cache[slot_of(cls)];
    for (; *pp; pp = &(*pp)->next_free) {
        if ((*pp)->capacity == cap) {
            lm_buffer *b = *pp;
            *pp = b->next_free;
            b->next_free = NULL;
            d->mem.cached -= cap;
            return b;
        }
    }
    return NULL;
}

static lm_status try_alloc(lm_device *d, size_t cap, void **handle, void **host)
{
    if (d->mem.limit && d->mem.active + cap > d->mem.limit)
        return lm_error_set(LM_ERR_LIMIT,
                            "memory limit of %zu bytes on %s reached (%zu active, %zu requested)",
                            d->mem.limit, d->spec, d->mem.active, cap);
    return d->backend->alloc(d, cap, handle, host);
}

/* A thread's hook (lm_buffer_hook_set): buffers of its device go to it
 * instead of the cache, and allocations ask it first. */
static _Thread_local lm_buffer_hook hook;
static void to_cache(lm_device *d, lm_buffer *b);

void lm_buffer_hook_set(const lm_buffer_hook *h)
{
    if (h) hook = *h;
    else memset(&hook, 0, sizeof hook);
}

lm_buffer *lm_buffer_alloc(lm_device *d, size_t size)
{
    size_t cap;
    int cls = size_class(size ? size : 1, &cap);
    lm_buffer *b = hook.device == d ? hook.take(hook.ctx, cap) : NULL;
    if (b) {   /* counted as active all along */
        b->size = size;
        b->refcount = 1;
        return b;
    }
    b = cache_take(d, cls, cap);
    if (!b) {
        void *handle = NULL, *host = NULL;
        double t0 = lm_profile_depth() ? lm_profile_now_ms() : 0;
        lm_status st = try_alloc(d, cap, &handle, &host);
        if (st != LM_OK) {
            /* free what we hold, ask the host language to collect, retry once */
            cache_trim(d, 0);
            if (oom_hook) oom_hook(oom_ctx);
            st = try_alloc(d, cap, &handle, &host);
            if (st != LM_OK) return NULL;
        }
        b = calloc(1, sizeof *b);
        if (!b) {
            d->backend->free(d, handle);
            lm_error_set(LM_ERR_NOMEM, "out of host memory");
            return NULL;
        }
        b->handle = handle;
        b->host = host;
        b->capacity = cap;
        b->device = d;
        d->mem.allocs++;
        /* a cache miss: a cost the profile shows as a row of its own */
        if (lm_profile_depth()) lm_profile_host("alloc", "", d, lm_profile_now_ms() - t0, (int64_t)cap);
    }
    b->size = size;
    b->refcount = 1;
    d->mem.active += cap;
    if (d->mem.active > d->mem.peak) d->mem.peak = d->mem.active;
    return b;
}

/* A buffer record of exactly `size` bytes over memory the caller has (a
 * window of a parent, or host memory it wraps): not from the cache, one
 * reference. */
static lm_buffer *buffer_of(lm_device *d, void *handle, void *host, size_t size)
{
    lm_buffer *b = calloc(1, sizeof *b);
    if (!b) {
        lm_error_set(LM_ERR_NOMEM, "out of host memory");
        return NULL;
    }
    b->device = d;
    b->handle = handle;
    b->host = host;
    b->size = size;
    b->capacity = size;
    b->refcount = 1;
    return b;
}

lm_buffer *lm_buffer_window(lm_buffer *parent, size_t off, size_t size)
{
    lm_device *d = parent->device;
    if (!d->backend->window || off > parent->size || size > parent->size - off) {
        lm_error_set(LM_ERR_UNSUPPORTED, "%s: no window of %zu bytes at %zu in a %zu-byte buffer",
                     d->spec, size, off, parent->size);
        return NULL;
    }
    void *handle = NULL, *host = NULL;
    if (d->backend->window(d, parent->handle, off, size, &handle, &host) != LM_OK) return NULL;
    lm_buffer *b = buffer_of(d, handle, host, size);
    if (!b) {
        if (d->backend->window_free) d->backend->window_free(d, handle);
        return NULL;
    }
    b->parent = lm_buffer_retain(parent);
    b->parent_off = off;
    return b;
}

lm_buffer *lm_buffer_retain(lm_buffer *b)
{
    if (b) __atomic_add_fetch(&b->refcount, 1, __ATOMIC_RELAXED);
    return b;
}

lm_buffer *lm_buffer_wrap(lm_device *d, void *host, size_t size,
                          void (*release)(void *ctx), void *ctx)
{
    lm_buffer *b = buffer_of(d, host, host, size);   /* the CPU backend's handle is its host pointer */
    if (!b) return NULL;
    b->release = release;
    b->release_ctx = ctx;
    return b;
}

void lm_buffer_attach(lm_buffer *b, lm_derived *d)
{
    d->next = b->derived;
    b->derived = d;
}

void lm_buffer_detach(lm_buffer *b, lm_derived *d)
{
    for (lm_derived **pp = &b->derived; *pp; pp = &(*pp)->next)
        if (*pp == d) {
            *pp = d->next;
            d->next = NULL;
            return;
        }
}

void lm_buffer_written(lm_buffer *b)
{
    lm_derived *d;
    /* unlink before each drop: a drop may look at the list */
    while (b && (d = b->derived)) {
        b->derived = d->next;
        d->next = NULL;
        d->drop(d);
    }
}

void lm_buffer_release(lm_buffer *b)
{
    if (!b || __atomic_sub_fetch(&b->refcount, 1, __ATOMIC_ACQ_REL) > 0) return;
    /* data derived from these contents dies with them (a cached buffer
     * comes back to a later array as fresh memory) */
    lm_buffer_written(b);
    if (b->parent) {
        /* a window: the memory is its parent's */
        lm_device *d = b->device;
        if (d->backend->window_free) d->backend->window_free(d, b->handle);
        lm_buffer_release(b->parent);
        free(b);
        return;
    }
    if (b->release) {
        /* foreign memory: not counted, never cached */
        b->release(b->release_ctx);
        free(b);
        return;
    }
    lm_device *d = b->device;
    if (hook.device == d) {
        hook.hold(hook.ctx, b);
        return;
    }
    to_cache(d, b);
}

void lm_buffer_recycle(lm_buffer *b)
{
    to_cache(b->device, b);
}

/* an unreferenced buffer of the core's own: to the cache, or freed */
static void to_cache(lm_device *d, lm_buffer *b)
{
    d->mem.active -= b->capacity;
    if (b->capacity > d->mem.cache_limit) {
        d->backend->free(d, b->handle);
        free(b);
        return;
    }
    if (d->mem.cached + b->capacity > d->mem.cache_limit)
        cache_trim(d, d->mem.cache_limit - b->capacity);
    size_t cap;
    int cls = size_class(b->capacity, &cap);
    b->next_free = d->cache[slot_of(cls)];
    d->cache[slot_of(cls)] = b;
    d->mem.cached += b->capacity;
}

lm_memstats lm_device_memory(lm_device *d)
{
    lm_memstats z;
    memset(&z, 0, sizeof z);
    return d ? d->mem : z;
}

void lm_device_reset_peak(lm_device *d)
{
    if (d) d->mem.peak = d->mem.active;
}

void lm_device_set_memory_limit(lm_device *d, size_t bytes)
{
    if (d) d->mem.limit = bytes;
}

void lm_device_set_cache_limit(lm_device *d, size_t bytes)
{
    if (!d) return;
    d->mem.cache_limit = bytes;
    cache_trim(d, bytes);
}
