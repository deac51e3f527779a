/* device.h - devices, buffers and memory accounting.
 *
 * A device belongs to a backend.  The core owns buffers and their
 * accounting: active bytes (held by arrays), peak bytes, cached bytes (freed
 * buffers kept for reuse, bounded by the cache limit) and a memory limit
 * past which an allocation fails with LM_ERR_LIMIT instead of crashing.
 * Devices live for the whole process. */
#ifndef LM_DEVICE_H
#define LM_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "error.h"

typedef struct lm_device lm_device;
typedef struct lm_backend lm_backend;

/* A block of device memory.  Reference counted: views share it. */
/* Data a backend derived from a buffer's contents (transformed conv
 * weights, say), hung on the buffer so that it lives no longer than the
 * contents it was computed from.  The owner embeds this link in its own
 * struct; the core calls drop() (which frees that struct) when the buffer
 * is written in place or released.  Like the rest of the core's memory
 * bookkeeping, used from the evaluating thread only. */
typedef struct lm_derived {
    struct lm_derived *next;
    void (*drop)(struct lm_derived *d);
} lm_derived;

typedef struct lm_buffer {
    lm_device *device;
    void *handle;      /* the backend's object */
    void *host;        /* CPU-addressable pointer, or NULL */
    size_t size;       /* bytes requested */
    size_t capacity;   /* bytes allocated (size class) */
    int refcount;
    struct lm_buffer *next_free; /* cache list */
    /* set by lm_buffer_wrap: memory the core does not own (a file mapping) */
    void (*release)(void *ctx);
    void *release_ctx;
    lm_derived *derived;         /* backends' data derived from the contents */
    /* set by lm_buffer_window: a byte range of parent, which it holds (the
     * handle is the backend's window; never cached, not counted) */
    struct lm_buffer *parent;
    size_t parent_off;
} lm_buffer;

typedef struct lm_memstats {
    size_t active;     /* bytes in buffers held by arrays */
    size_t peak;       /* highest active since start or lm_device_reset_peak */
    size_t cached;     /* bytes in the reuse cache */
    size_t limit;      /* allocation past active+limit fails; 0 = none */
    size_t cache_limit;
    size_t device_total; /* the device's memory, 0 if unknown */
    int64_t allocs;    /* backend allocations made (cache misses) */
} lm_memstats;

struct lm_device {
    const lm_backend *backend;
    void *impl;                /* the backend's per-device state */
    char name[128];            /* "cpu", "NVIDIA H100 80GB HBM3" */
    char spec[32];             /* "cpu", "vulkan:0" */
    char kind[24];             /* "cpu", "discrete-gpu", "integrated-gpu", "virtual-gpu", "cpu-gpu" */
    char info[256];            /* backend details: BLAS core, features */
    int index;                 /* in the registry */
    lm_memstats mem;
    lm_buffer *cache[64];      /* free lists by power-of-two size class */
};

/* ---- registry (core/device.c) ---- */
/* Initialises the registry once (CPU always, others as built and present,
 * LUMEN_DEVICE honoured).  Safe to call repeatedly.  Fails only if the CPU
 * backend cannot start. */
lm_status lm_init(void);
int lm_device_count(void);
lm_device *lm_device_at(int i);
/* "cpu", "vulkan", "vulkan:N", or a registry index as text.  NULL + error if
 * no such device. */
lm_device *lm_device_find(const char *spec);
lm_device *lm_device_default(void);
void lm_device_set_default(lm_device *d);
lm_device *lm_device_cpu(void);
/* Waits until d has finished the work handed to it (the backend's sync
 * entry; a no-op where evaluation is synchronous, as on the CPU). */
lm_status lm_device_sync(lm_device *d);
/* Copies between host memory and a buffer's handle on d (the backend's
 * upload/download, counted by the profiler); the core's only way across. */
lm_status lm_device_upload(lm_device *d, void *handle, size_t off, const void *src, size_t n);
lm_status lm_device_download(lm_device *d, void *handle, size_t off, void *dst, size_t n);
/* Plan mode (the backend's plan entry): while on, evaluations on d only
 * start preparing the kernels their nodes need (the Vulkan backend starts
 * their pipelines on its compile threads) and run none, so that a dry run
 * of a model's first call at load has its kernels ready, or in flight,
 * when the real call comes (models/sd_pipeline.c's prewarm).  What those
 * evaluations output is undefined: the caller throws it away.
 * LM_ERR_UNSUPPORTED where d has nothing to prepare (the CPU). */
lm_status lm_device_plan(lm_device *d, bool on);
/* Called by backends at init to add their devices; the registry keeps d. */
lm_status lm_device_register(lm_device *d);

/* ---- memory (core/memory.c) ---- */
/* A buffer of at least `size` bytes (reused from the cache when possible);
 * retries after emptying the cache when the backend is out of memory. */
lm_buffer *lm_buffer_alloc(lm_device *d, size_t size);
/* A buffer over host memory the core does not own (e.g. an mmapped file):
 * never cached, not counted as active bytes; when its last reference goes,
 * release(ctx) is called and the struct freed.  d must be CPU-addressable
 * (the CPU device).  NULL + error if out of memory (release not called). */
lm_buffer *lm_buffer_wrap(lm_device *d, void *host, size_t size,
                          void (*release)(void *ctx), void *ctx);
/* A window: `size` bytes at byte `off` of parent, as a buffer of its own
 * (a kernel writing it at offset 0 writes parent's range), holding a
 * reference to parent.  Only where the backend can (its window entry) and
 * off meets its alignment; otherwise NULL + LM_ERR_UNSUPPORTED, and the
 * caller allocates a buffer of its own instead.  Used by the evaluator to
 * let a producer write straight into its concat's output (core/eval.c). */
lm_buffer *lm_buffer_window(lm_buffer *parent, size_t off, size_t size);
lm_buffer *lm_buffer_retain(lm_buffer *b);
void lm_buffer_release(lm_buffer *b);        /* back to the cache (or freed) */
/* Derived data (see lm_derived): attach hangs d on b; detach unlinks d
 * without dropping it (an owner evicting its own entry); lm_buffer_written
 * drops everything hung on b, and must be called by whoever writes into a
 * buffer that already holds contents (lm_array_assign does); a node's
 * fresh output needs nothing, as release dropped its old data. */
void lm_buffer_attach(lm_buffer *b, lm_derived *d);
void lm_buffer_detach(lm_buffer *b, lm_derived *d);
void lm_buffer_written(lm_buffer *b);
lm_memstats lm_device_memory(lm_device *d);
void lm_device_reset_peak(lm_device *d);
void lm_device_set_memory_limit(lm_device *d, size_t bytes);   /* 0 = none */
void lm_device_set_cache_limit(lm_device *d, size_t bytes);
void lm_device_clear_cache(lm_device *d);
/* An out-of-memory hook: called once before an allocation fails with
 * LM_ERR_NOMEM/LM_ERR_LIMIT so a host language can collect garbage; the
 * allocation is retried if the hook returns true. */
typedef bool (*lm_oom_hook)(void *ctx);
void lm_set_oom_hook(lm_oom_hook hook, void *ctx);

#endif
