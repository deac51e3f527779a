/* internal.h - core-private helpers shared by the core files (not public API). */
#ifndef LM_INTERNAL_H
#define LM_INTERNAL_H
#include "lumen.h"
#include "backend.h"

/* What the core keeps beside each array and no one else reads: the registry
 * of live arrays (lm_sweep) and the evaluator's scratch (core/eval.c).
 * lm_array_alloc makes every array as an lm_node, so lm_node_of(a) is valid for any
 * array the core handed out (never for one a caller built itself). */
typedef struct lm_node {
    lm_array a;                      /* first: an lm_array * is an lm_node * */
    lm_array *live_prev, *live_next;
    int64_t eval_mark;               /* the evaluation that last ordered it */
    int64_t eval_uses;               /* references from that evaluation's pending nodes */
    int64_t eval_last;               /* the order of the last of them */
    lm_array *place_in;              /* a concat whose output will hold this node's */
    int64_t place_at;                /* ... at this byte offset */
    const char *where;               /* lm_where_now at creation (core/trace.c) */
} lm_node;
static inline lm_node *lm_node_of(const lm_array *a) { return (lm_node *)(uintptr_t)a; }

lm_array *lm_array_alloc(lm_dtype dt, int ndim, const int64_t *shape, lm_device *dev);
void lm_array_detach(lm_array *a);
/* A view of base with the given geometry (shares base's buffer once base is
 * evaluated). */
lm_array *lm_view_new(lm_array *base, int ndim, const int64_t *shape,
                      const int64_t *strides, int64_t offset);
/* Checked int64 arithmetic for sizes, strides and offsets: false on
 * overflow (then *out is unspecified). */
static inline bool lm_mul64(int64_t a, int64_t b, int64_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline bool lm_add64(int64_t a, int64_t b, int64_t *out) { return !__builtin_add_overflow(a, b, out); }
/* The device a node with these inputs runs on (the placement rule), or
 * NULL with an error naming op and the devices. */
lm_device *lm_node_place(const char *op, int n, lm_array *const *inputs);
/* formats "f32[2,3]" for messages */
const char *lm_desc(char *buf, size_t n, const lm_array *a);
/* Runs one node whose buffer the caller set (lm_array_assign, core/eval.c). */
lm_status lm_eval_into(lm_array *node);
/* snprintf at buf+*len that never runs *len past cap-1 (core/compare.c). */
void lm_str_append(char *buf, size_t *len, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* core/trace.c: the location new nodes record, and what runs after each
 * node an evaluation ran (the test fault, the LUMEN_DUMP watcher). */
extern _Thread_local const char *lm_where_now;
void lm_trace_after_node(lm_array *a);
#endif
