/* trace.h - a lazy graph recorded node by node and run again under another
 * configuration (device, floating dtype, compiled or not), one node at a
 * time, for comparison sessions (lm.diff, lm.trace, docs/COMPARE.md).
 *
 * Where: every array remembers the "current location" at its creation: an
 * interned string ("model.lua:12", or a layer name a loader sets) that the
 * host language sets while it runs user code.  Interned strings live until
 * exit; the table only grows with the distinct places of a program.
 *
 * Ownership: lm_trace_capture borrows the outputs and keeps references to
 * the evaluated tensors (leaves) the graph reads; lm_trace_free drops them.
 * A run holds the values of its nodes until lm_trace_run_release says no
 * later node needs them; values it hands out are borrowed from it. */
#ifndef LM_TRACE_H
#define LM_TRACE_H

#include "array.h"
#include "capture.h"
#include "device.h"

/* ---- where ---- */
/* Sets the location new arrays record (interned; NULL: none).  Returns the
 * interned string, NULL when s is NULL or out of memory. */
const char *lm_where_set(const char *s);
const char *lm_where_get(void);
/* The location recorded when a was made, NULL if none was set then. */
const char *lm_array_where(const lm_array *a);

/* ---- the recorded graph ---- */
/* A node as captured (capture.h): op, dtype, geometry, params (ext NULL:
 * ops with extra data are not recorded), inputs as value indices (< the
 * leaf count a leaf, else node in - leaves), where, uses and output. */
typedef lm_capture_node lm_trace_node;
typedef struct lm_trace lm_trace;

/* Records the pending graph behind outs in execution order (the order
 * lm_eval and lm_compile_graph walk it).  Lazy nodes without inputs (random,
 * arange, full) are evaluated first and recorded as leaves, so both runs of
 * a comparison read the same values.  NULL + error for compile placeholders
 * or fused nodes. */
lm_trace *lm_trace_capture(int nout, lm_array *const *outs);
void lm_trace_free(lm_trace *t);
int lm_trace_count(const lm_trace *t);            /* nodes */
int lm_trace_leaves(const lm_trace *t);
const lm_trace_node *lm_trace_node_at(const lm_trace *t, int k);
lm_array *lm_trace_leaf(const lm_trace *t, int j);   /* borrowed */
/* The stable name of node k in dumps: "0007.add.model.lua:12" (index from 1,
 * "-" when there is no location). */
void lm_trace_name(const lm_trace *t, int k, char *buf, size_t n);

/* ---- runs ---- */
typedef struct lm_trace_config {
    lm_device *device;   /* NULL: where the graph was built */
    lm_dtype dtype;      /* LM_DTYPE_COUNT: as built; else every floating dtype becomes it */
    bool compile;        /* fuse as lm.compile does */
} lm_trace_config;

void lm_trace_config_init(lm_trace_config *c);
/* The dtype node or leaf dtype dt has under c. */
lm_dtype lm_trace_config_dtype(const lm_trace_config *c, lm_dtype dt);

typedef struct lm_trace_run lm_trace_run;
/* Builds the graph again under cfg (leaves cast and moved; nothing runs). */
lm_trace_run *lm_trace_run_start(const lm_trace *t, const lm_trace_config *cfg);
/* Evaluates node k (nodes run in order) and sets *value to it, borrowed;
 * NULL where compile fused it into a later node (*into = that node). */
lm_status lm_trace_run_step(lm_trace_run *r, int k, lm_array **value, int *into);
/* The value the run gave value index v (a leaf as cast and moved, or an
 * evaluated node), borrowed; NULL when released or fused. */
lm_array *lm_trace_run_value(const lm_trace_run *r, int v);
/* Node k and everything before it are done with: drops the values no
 * later node reads (outputs too: the caller keeps what it wants). */
void lm_trace_run_release(lm_trace_run *r, int k);
void lm_trace_run_free(lm_trace_run *r);

/* Node k alone under cfg, its inputs given (cast and moved as cfg says),
 * evaluated: a new reference, NULL + error on failure. */
lm_array *lm_trace_rerun(const lm_trace *t, int k, const lm_trace_config *cfg, lm_array *const *inputs);

/* The chain members[0..n) (node indices, ascending; the inputs from
 * outside it read from run `from`, which must still hold them) alone,
 * compiled under cfg (cfg->compile must be set): the value of its last
 * node, evaluated (new reference), for shrinking a failing fused group. */
lm_array *lm_trace_rerun_chain(const lm_trace *t, const int *members, int n, const lm_trace_config *cfg,
                               const lm_trace_run *from);
/* Keeps every value of r from being released (a run the caller reads
 * back later). */
void lm_trace_run_keep_all(lm_trace_run *r);

/* Called with every node an evaluation ran, while it still has its inputs
 * (LUMEN_DUMP); NULL stops it.  One watcher at a time. */
typedef void (*lm_eval_watch_fn)(lm_array *a, void *ctx);
void lm_eval_watch(lm_eval_watch_fn fn, void *ctx);
/* Test-only: spec "op[:device[:dtype]]" makes that op's results wrong
 * (every sign flipped) where it runs on that device (spec prefix) and
 * dtype; NULL or "" clears it.  Starts from env LUMEN_TEST_FAULT. */
void lm_test_fault_set(const char *spec);

/* Elements of a (evaluated) that are NaN / infinite. */
lm_status lm_count_nonfinite(lm_array *a, int64_t *nan, int64_t *inf);

#endif
