/* array.h - the array: a shape, strides and a buffer, or a lazy node.
 *
 * Ownership: every function that returns an lm_array* returns a NEW
 * reference the caller must lm_array_release(); NULL means failure with the
 * message in lm_error_message().  Functions taking arrays borrow them
 * (they retain what they keep).  Passing NULL as an input array is allowed
 * and fails cleanly, so calls can be chained without checks in between.
 *
 * Strides and offsets are in elements.  Every computed (non-view) node
 * produces a contiguous row-major array; views inherit and rearrange the
 * strides of their input, so strides are known when a node is built. */
#ifndef LM_ARRAY_H
#define LM_ARRAY_H

#include <stdbool.h>
#include <stdint.h>
#include "dtype.h"
#include "error.h"
#include "op.h"

#define LM_MAX_DIMS 8

typedef struct lm_device lm_device;
typedef struct lm_buffer lm_buffer;
typedef struct lm_array lm_array;

enum {
    LM_ARRAY_KEPT = 1u << 0,   /* survives lm_sweep(); holds one extra reference */
    LM_ARRAY_WEAK = 1u << 1,   /* a scalar from the host language: weak promotion */
    LM_ARRAY_FREED = 1u << 2,  /* buffer released by lm_array_free/lm_sweep */
    LM_ARRAY_TRACER = 1u << 3, /* a compile placeholder: cannot be evaluated */
};

/* Fields are readable by backends and bindings; only the core writes them. */
struct lm_array {
    int refcount;
    uint32_t flags;
    lm_dtype dtype;
    int ndim;
    int64_t shape[LM_MAX_DIMS];
    int64_t strides[LM_MAX_DIMS];
    int64_t offset;
    int64_t size;              /* product of shape */
    lm_device *device;
    lm_buffer *buf;            /* NULL while lazy */
    /* graph: dropped (released) once the node is evaluated */
    lm_op op;
    int ninputs;
    lm_array **inputs;
    lm_params params;
    uint64_t id;               /* unique, increasing */
    /* the core's own bookkeeping follows in memory (lm_node, core/internal.h):
       arrays are made only by the core */
};

lm_array *lm_array_retain(lm_array *a);
void lm_array_release(lm_array *a);          /* NULL is fine */

static inline bool lm_array_is_evaluated(const lm_array *a) { return a->buf != 0; }
bool lm_array_is_contiguous(const lm_array *a);
size_t lm_array_nbytes(const lm_array *a);     /* size * dtype size */

/* The most elements (counting a zero dimension as 1, as strides do) an
 * array may span, so that byte counts, strides and offsets of any array
 * fit in int64_t with room for the widest dtype. */
#define LM_MAX_SPAN (INT64_MAX / 16)
/* Checks a shape before anything multiplies over it: no negative
 * dimension, and the product of its dimensions, zeros counted as 1, at most
 * LM_MAX_SPAN.  Sets "<what>: ..." naming the shape and returns
 * LM_ERR_SHAPE otherwise; *numel (may be NULL) gets the element count. */
lm_status lm_shape_check(const char *what, int ndim, const int64_t *shape, int64_t *numel);
/* The same test without a message (for readers that report their own). */
bool lm_shape_fits(int ndim, const int64_t *shape, int64_t *numel);

/* keep: the array survives lm_sweep() and holds a reference of its own
 * until lm_array_unkeep() (MLX Keep, ollama Pin). */
void lm_array_keep(lm_array *a);
void lm_array_unkeep(lm_array *a);
/* Releases the buffer and graph of a now; later use is an LM_ERR_STATE
 * error ("tensor was freed"). */
void lm_array_free(lm_array *a);
/* Frees the buffers and graphs of every live array not kept, as
 * lm_array_free does; returns how many were freed.  For batch loops whose
 * host language collects garbage late. */
int lm_sweep(void);
/* The number of live arrays (a leak check for tests). */
int64_t lm_array_live_count(void);

/* The share: how many images a stacked call stacks along its leading axis
 * (a UNet call for 4 images and their CFG pairs: batch 8, share 4).  Every
 * array made while it is set carries it, so a backend can make a kernel
 * choice that depends on the problem's size (tiles, split-K parts, a
 * reduction split) from the size of one image's part (batch / share) and
 * give the stacked images the bytes of single runs.  Set around the graph
 * building of a stacked call and put back after it:
 *     int was = lm_share_set(per); ... build ...; lm_share_set(was);
 * Returns the share before; values below 1 are 1 (the default).
 * Per host thread, as graph building is. */
int lm_share_set(int images);
int lm_share_get(void);
/* The share a was made with (1 where none was set). */
int lm_array_share(const lm_array *a);

/* ---- evaluation (core/eval.c) ---- */
/* Evaluates the arrays (NULL entries skipped).  Runs every pending node they
 * depend on, frees intermediates after their last consumer, and drops the
 * inputs of evaluated nodes. */
lm_status lm_eval(lm_array *const *arrays, int n);
/* As lm_eval, but returns once the work is queued on devices that run
 * asynchronously (Vulkan): the host may build the next graph meanwhile.
 * Reading a result (download, lm_array_get), lm_device_sync or an
 * evaluation that uses it waits for it; errors a kernel reports (an index
 * out of range) appear at that wait.  Same as lm_eval on the CPU, inside
 * another evaluation and while profiling. */
lm_status lm_eval_async(lm_array *const *arrays, int n);
static inline lm_status lm_array_eval(lm_array *a) { return lm_eval(&a, 1); }
/* Statistics of the most recent lm_eval on this thread. */
typedef struct lm_eval_stats {
    int64_t nodes;       /* nodes run (views included) */
    int64_t kernels;     /* backend kernel launches (run + run_fused) */
    int64_t fallbacks;   /* nodes its device could not run, run on the CPU */
    int64_t cpu_nodes;   /* kernels the CPU ran: CPU-device nodes and fallbacks */
    int64_t transfers;   /* copies between devices (uploads of loaded tensors) */
    int64_t placed;      /* concat inputs written in place by their producer */
} lm_eval_stats;
lm_eval_stats lm_eval_last_stats(void);
/* Counts of kernel launches since start (for fusion tests). */
int64_t lm_eval_kernel_count(void);

/* ---- host data (core/array.c) ---- */
/* A new evaluated array holding a copy of data (row-major, dtype dt) on dev
 * (NULL = default device). */
lm_array *lm_from_data(int ndim, const int64_t *shape, lm_dtype dt,
                       const void *data, lm_device *dev);
/* A new evaluated contiguous array over the first size*dtype-size bytes of
 * b (retained; the caller keeps its own reference), on b's device. */
lm_array *lm_array_from_buffer(lm_buffer *b, lm_dtype dt, int ndim, const int64_t *shape);
/* A 0-d weak scalar (see dtype.h) of dtype dt. */
lm_array *lm_scalar(double v, lm_dtype dt, lm_device *dev);
/* Evaluates a and copies its elements, row-major, converted to dtype `as`,
 * into dst, which must hold a->size elements of `as`. */
lm_status lm_array_read(lm_array *a, void *dst, lm_dtype as);
/* Element at a 0-based multi-index (ndim entries) as a double; evaluates. */
lm_status lm_array_get(lm_array *a, const int64_t *index, double *out);
/* Writes src (broadcast to dst's shape, cast to its dtype) into the memory
 * of dst, which must be evaluated (a view writes through to its base).
 * This is the one in-place operation. */
lm_status lm_array_assign(lm_array *dst, lm_array *src);
/* Copies a to another device (lazy). */
lm_array *lm_array_to(lm_array *a, lm_device *dev);

#endif
