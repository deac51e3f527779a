/* backend.h - the seam every backend implements.
 *
 * The core plans evaluation; a backend runs kernels.  For each node the core
 * guarantees: every input is evaluated and lives on the node's device; the
 * node's output buffer is allocated (node->buf, contiguous, node->size
 * elements of node->dtype at node->offset == 0).  Views never reach a
 * backend.  One exception: for LM_OP_COPY the output may be strided (used by
 * lm_array_assign), so copy kernels honour node->strides/offset.
 *
 * That buffer may be a window of a concat's output (lm_buffer_window): for
 * each concat the core plans which inputs their producer writes straight
 * into its part of the output (core/eval.c); the concat's kernel skips
 * those (lm_concat_placed) and is not run when all are.
 *
 * Buffers handed back to the core's cache may be given to a later node of
 * the same evaluation; a backend that runs asynchronously orders such reuse
 * (a barrier between dispatches is enough).  Backends include core/ headers
 * only, never each other. */
#ifndef LM_BACKEND_H
#define LM_BACKEND_H

#include "array.h"
#include "device.h"
#include "fused.h"

struct lm_backend {
    const char *name;                    /* "cpu", "vulkan" */
    /* raw memory; host is set when the memory is CPU-addressable */
    lm_status (*alloc)(lm_device *d, size_t bytes, void **handle, void **host);
    void (*free)(lm_device *d, void *handle);
    lm_status (*upload)(lm_device *d, void *handle, size_t off, const void *src, size_t n);
    lm_status (*download)(lm_device *d, void *handle, size_t off, void *dst, size_t n);
    /* can run(node) handle this node (op, dtypes, params)? */
    bool (*supports)(lm_device *d, const lm_array *node);
    lm_status (*run)(lm_device *d, lm_array *node);
    /* optional: a fused elementwise group (compile); NULL if unsupported */
    lm_status (*run_fused)(lm_device *d, lm_fused *group, lm_array *out);
    /* optional: a window of `bytes` at byte `off` of an allocation's handle
     * (itself maybe a window) as a handle of its own, for lm_buffer_window;
     * LM_ERR_UNSUPPORTED where off breaks the backend's alignment.
     * window_free (optional) frees such a handle (not the memory). */
    lm_status (*window)(lm_device *d, void *handle, size_t off, size_t bytes, void **sub, void **host);
    void (*window_free)(lm_device *d, void *sub);
    /* optional: begin/end of one lm_eval; end waits for completion */
    lm_status (*begin)(lm_device *d);
    lm_status (*sync)(lm_device *d);
    /* optional: the end of an lm_eval_async: the work is queued and may
     * still run; a later download, sync or evaluation orders after it */
    lm_status (*submit)(lm_device *d);
    /* optional, all five or none: replayed command streams (core/replay.c).
     * record_begin: what run() records from now on is kept in a recording
     * of its own, not submitted.  record_end: closes it; LM_OK and *rec
     * when all of it can be replayed, else *rec = NULL and
     * LM_ERR_UNSUPPORTED with the work recorded so far queued as usual (a
     * host transfer, a fallback, a kernel that reports index errors ...).
     * replay: queues the recording again without waiting, ordered after
     * the work queued before it and before the work queued after it
     * (LM_ERR_UNSUPPORTED: replay is switched off, nothing queued);
     * replay(d, NULL) only says whether it is on (LM_OK) or off.
     * record_free: waits for the recording's runs, frees it and the memory
     * the backend gave it.  copy: queues n byte copies src -> dst between
     * buffer handles of d, ordered like kernels. */
    lm_status (*record_begin)(lm_device *d);
    lm_status (*record_end)(lm_device *d, void **rec);
    lm_status (*replay)(lm_device *d, void *rec);
    void (*record_free)(lm_device *d, void *rec);
    lm_status (*copy)(lm_device *d, int n, void *const *src, const size_t *src_off,
                      void *const *dst, const size_t *bytes);
    /* optional: plan mode (lm_device_plan).  While on, run() and
     * run_fused() start preparing what each node's kernels need (compiling
     * their pipelines, in the background where the backend can) and run
     * none of them: outputs hold undefined bytes, and nothing a later
     * evaluation reads (derived data, recordings) is made from them.
     * Transfers still happen.  LM_ERR_UNSUPPORTED where the backend has
     * nothing to prepare ahead, or cannot now. */
    lm_status (*plan)(lm_device *d, bool on);
};

/* The backend registry: one row per backend the build compiled in, written
 * by the build (mk/backends.sh into $(BUILD)/gen/backends.c), so the core
 * names no backend.  lm_init calls each register function in order; each
 * registers its devices with lm_device_register, and finding no device is
 * not an error.  A required backend (the CPU) that fails makes lm_init fail;
 * an optional one is left out.  The table ends with a NULL name. */
typedef struct lm_backend_entry {
    const char *name;
    lm_status (*register_devices)(void);
    bool required;
} lm_backend_entry;
extern const lm_backend_entry lm_backend_registry[];

/* Whether input k of concat node already sits in its part of node's output
 * (its producer wrote there), so the kernel must not copy it (core/eval.c). */
bool lm_concat_placed(const lm_array *node, int k);

#endif
