/* capture.h - the graph-capture walk that compile, trace and replay share.
 *
 * Capturing a lazy graph is the same steps wherever it is done (compile.c
 * traces a function once, trace.c records a program for a comparison,
 * replay.c keys recorded device work by its inputs):
 *  1. lm_capture_order: every array between the outputs and the leaves, each
 *     after its inputs, in the post order lm_eval runs them (first unseen
 *     input first).  Leaves are evaluated arrays and the stop arrays
 *     (placeholders).
 *  2. lm_capture_graph: a private copy of that graph, numbered by value
 *     index: [0, nph) the placeholders, [nph, nph + nleaf) the evaluated
 *     arrays it reads, then the pending nodes, each with its op, dtype,
 *     geometry, parameters and its inputs as value indices.  Node k of a
 *     capture is instruction k of lm_compile_graph over the same graph.
 *  3. lm_capture_sig: the dtypes, ranks and shapes of the inputs, as a
 *     compiled function was traced with them and as replay keys its
 *     recordings.
 *
 * The functions are core/'s (compile.c, trace.c, replay.c); the host
 * languages read captured nodes through trace.h (lm_trace_node).
 *
 * Ownership: a capture holds a reference to each of its leaves and owns its
 * nodes' input lists; lm_capture_free drops them.  A captured node's
 * params.ext is NULL (a node with extra data is refused by the caller's
 * check); one a caller sets later is the caller's to free. */
#ifndef LM_CAPTURE_H
#define LM_CAPTURE_H

#include "array.h"

typedef struct lm_capture_node {
    lm_op op;
    lm_dtype dtype;
    int ndim;
    int64_t shape[LM_MAX_DIMS], strides[LM_MAX_DIMS], offset;
    int nin;
    int *in;             /* value indices */
    lm_params params;
    const char *where;   /* the location the array recorded (trace.h), or NULL */
    int uses;            /* later nodes reading it (each input slot counts) */
    bool output;
} lm_capture_node;

typedef struct lm_capture {
    int nph, nleaf, n, nout;
    lm_array **leaves;        /* nleaf evaluated arrays, held */
    lm_capture_node *nodes;   /* n nodes, value nph + nleaf + k */
    int *out;                 /* nout value indices */
} lm_capture;

/* Sets *order to a new array of the *n arrays between outs and the leaves,
 * in post order (the outputs, placeholders and leaves among them).  A NULL
 * output returns the error already set; who names the caller in the
 * out-of-memory message ("compile: out of host memory"). */
lm_status lm_capture_order(const char *who, int nout, lm_array *const *outs, int nstop, lm_array *const *stop,
                           lm_array ***order, int64_t *n);

/* A pending node the caller cannot take: its error, else LM_OK. */
typedef lm_status (*lm_capture_check_fn)(const lm_array *a);

/* Copies the graph order[0..n) (from lm_capture_order over the same outs
 * and placeholders) into g: placeholders first, then the evaluated arrays
 * in order (held), then the other arrays in order, each passed to check
 * first.  On failure g holds nothing and the error is check's or "who: out
 * of host memory". */
lm_status lm_capture_graph(lm_capture *g, const char *who, int nph, lm_array *const *ph, int nout,
                           lm_array *const *outs, lm_array *const *order, int64_t n, lm_capture_check_fn check);
/* Drops the leaves, frees the nodes' inputs and the arrays; g is zeroed. */
void lm_capture_free(lm_capture *g);

/* ---- signatures ---- */
typedef struct lm_capture_sig {
    int n;
    lm_dtype *dtype;
    int *ndim;
    int64_t (*shape)[LM_MAX_DIMS];
} lm_capture_sig;

/* The signature of a[0..n); false when out of memory (then s holds nothing). */
bool lm_capture_sig_init(lm_capture_sig *s, int n, lm_array *const *a);
void lm_capture_sig_free(lm_capture_sig *s);
/* Whether a has the dtype and rank of entry k; with its shape too. */
bool lm_capture_sig_kind(const lm_capture_sig *s, int k, const lm_array *a);
bool lm_capture_sig_shape(const lm_capture_sig *s, int k, const lm_array *a);

#endif
