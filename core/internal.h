/* internal.h - core-private helpers shared by the core files (not public API). */
#ifndef LM_INTERNAL_H
#define LM_INTERNAL_H
#include <stdlib.h>
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
    int share;                       /* lm_share_get() at creation (1: not stacked) */
} lm_node;
static inline lm_node *lm_node_of(const lm_array *a) { return (lm_node *)(uintptr_t)a; }

lm_array *lm_array_alloc(lm_dtype dt, int ndim, const int64_t *shape, lm_device *dev);
void lm_array_detach(lm_array *a);
/* A view of base with the given geometry (shares base's buffer once base is
 * evaluated). */
lm_array *lm_view_new(lm_array *base, int ndim, const int64_t *shape,
                      const int64_t *strides, int64_t offset);
/* A stop_gradient view (core/grad.c) is an identity view whose last int
 * parameter holds this mark: the grad walk does not cross it, and the rules
 * that rebuild a composite's forward take it as a constant. */
#define LM_GRAD_STOP_MARK 0x5354304750ll
static inline bool lm_grad_is_stop(const lm_array *a)
{
    return a->op == LM_OP_VIEW && a->params.i[LM_PARAM_INTS - 1] == LM_GRAD_STOP_MARK;
}
/* Checked int64 arithmetic for sizes, strides and offsets: false on
 * overflow (then *out is unspecified). */
static inline bool lm_mul64(int64_t a, int64_t b, int64_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline bool lm_add64(int64_t a, int64_t b, int64_t *out) { return !__builtin_add_overflow(a, b, out); }
/* Lending the buffers of one device on this thread to someone else for a
 * while (core/buffer_pool.c, a recording's memory): an unreferenced buffer
 * of h->device goes to hold (still counted active) instead of the cache,
 * and an allocation of that device asks take (a held buffer of that
 * capacity, or NULL) first.  NULL stops (core/memory.c). */
typedef struct lm_buffer_hook {
    lm_device *device;
    lm_buffer *(*take)(void *ctx, size_t capacity);
    void (*hold)(void *ctx, lm_buffer *b);
    void *ctx;
} lm_buffer_hook;
void lm_buffer_hook_set(const lm_buffer_hook *h);
/* A held buffer (refcount 0, counted active) back to its device's cache. */
void lm_buffer_recycle(lm_buffer *b);
/* The device a node with these inputs runs on (the placement rule), or
 * NULL with an error naming op and the devices. */
lm_device *lm_node_place(const char *op, int n, lm_array *const *inputs);
/* formats "f32[2,3]" for messages */
const char *lm_desc(char *buf, size_t n, const lm_array *a);
/* Runs one node whose buffer the caller set (lm_array_assign, core/eval.c). */
lm_status lm_eval_into(lm_array *node);
/* lm_eval that leaves the work with the backend instead of ending it
 * (core/eval.c): the evaluation a recording (core/replay.c) is made of; on
 * failure it waits as lm_eval does. */
lm_status lm_eval_recorded(lm_array *const *arrays, int n);
/* snprintf at buf+*len that never runs *len past cap-1 (core/compare.c). */
void lm_str_append(char *buf, size_t *len, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A growable list of array pointers (the graph walks' stacks and orders). */
typedef struct { lm_array **v; int64_t n, cap; } lm_vec;

static inline bool lm_vec_push(lm_vec *s, lm_array *a)
{
    if (s->n == s->cap) {
        int64_t nc = s->cap ? s->cap * 2 : 256;
        lm_array **nv = realloc(s->v, (size_t)nc * sizeof *nv);
        if (!nv) return false;
        s->v = nv;
        s->cap = nc;
    }
    s->v[s->n++] = a;
    return true;
}

/* A map from array pointers to ints, for the graph walks that number nodes
 * (core/compile.c, core/trace.c): open addressing, grown at half full. */
typedef struct { lm_array **key; int *val; int64_t cap, used; } lm_pmap;

static inline void lm_pmap_free(lm_pmap *m)
{
    free(m->key);
    free(m->val);
    m->key = NULL;
    m->val = NULL;
}

/* Room for n keys before the map grows; false (nothing held) when out of memory. */
static inline bool lm_pmap_init(lm_pmap *m, int64_t n)
{
    m->cap = 64;
    m->used = 0;
    while (m->cap < 2 * n) m->cap *= 2;
    m->key = calloc((size_t)m->cap, sizeof *m->key);
    m->val = calloc((size_t)m->cap, sizeof *m->val);
    if (m->key && m->val) return true;
    lm_pmap_free(m);
    return false;
}

static inline int64_t lm_pmap_slot(const lm_pmap *m, const lm_array *a)
{
    uint64_t h = (uint64_t)(uintptr_t)a * 0x9E3779B97F4A7C15ull;
    int64_t i = (int64_t)(h >> 20) & (m->cap - 1);
    while (m->key[i] && m->key[i] != a) i = (i + 1) & (m->cap - 1);
    return i;
}

/* a's value, or -1 when a is not in the map */
static inline int lm_pmap_get(const lm_pmap *m, const lm_array *a)
{
    int64_t i = lm_pmap_slot(m, a);
    return m->key[i] ? m->val[i] : -1;
}

/* false when the map had to grow and could not (then the map is unchanged) */
static inline bool lm_pmap_put(lm_pmap *m, lm_array *a, int v)
{
    if (2 * (m->used + 1) > m->cap) {
        lm_pmap b;
        if (!lm_pmap_init(&b, m->cap)) return false;
        for (int64_t j = 0; j < m->cap; j++)
            if (m->key[j]) lm_pmap_put(&b, m->key[j], m->val[j]);
        lm_pmap_free(m);
        *m = b;
    }
    int64_t i = lm_pmap_slot(m, a);
    if (!m->key[i]) m->used++;
    m->key[i] = a;
    m->val[i] = v;
    return true;
}

/* core/trace.c: the location new nodes record, and what runs after each
 * node an evaluation ran (the test fault, the LUMEN_DUMP watcher). */
extern _Thread_local const char *lm_where_now;
void lm_trace_after_node(lm_array *a);
#endif
