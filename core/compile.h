/* compile.h - traced graphs optimised once and replayed (MLX compile).
 *
 * A host language traces a function by calling it on placeholders
 * (lm_placeholder); lm_compile_graph takes the resulting graph from the
 * placeholders to the outputs and optimises it: tensors captured from
 * outside become constants, subgraphs without placeholders are folded
 * (evaluated once), common subexpressions merge, no-op casts and views
 * vanish, and chains of elementwise ops (unary, binary, where, clamp, cast,
 * with broadcasting) become single LM_OP_FUSED nodes that a backend runs
 * block by block.  lm_compiled_call replays the optimised graph on real
 * inputs through the op builders (so shapes are re-inferred: the same trace
 * serves new shapes when the caller allows it, except through views, whose
 * geometry is recorded) and returns lazy outputs.
 *
 * Ownership: lm_compile_graph borrows its arguments and keeps references to
 * the constants it captures; lm_compiled_free releases them.  Outputs of
 * lm_compiled_call are new references. */
#ifndef LM_COMPILE_H
#define LM_COMPILE_H

#include "array.h"
#include "device.h"
#include "fused.h"   /* the program of an LM_OP_FUSED node */

typedef enum lm_compile_mode { LM_COMPILE_OFF, LM_COMPILE_NO_FUSE, LM_COMPILE_ON } lm_compile_mode;
/* LUMEN_COMPILE=0 starts in OFF (functions run uncompiled), else ON. */
lm_compile_mode lm_compile_get_mode(void);
void lm_compile_set_mode(lm_compile_mode m);

/* A tracing input: an unevaluated array that can never be evaluated. */
lm_array *lm_placeholder(int ndim, const int64_t *shape, lm_dtype dt, lm_device *dev);

typedef struct lm_compiled lm_compiled;
/* NULL + error if an output does not depend only on the placeholders and
 * captured tensors, or if the graph holds an op that cannot be replayed. */
lm_compiled *lm_compile_graph(int nin, lm_array *const *placeholders, int nout,
                              lm_array *const *outputs, lm_compile_mode mode);
/* Replays on inputs (count and dtypes as traced); outs receives nout new
 * lazy arrays.  Returns the output count, or -1 with the error set. */
int lm_compiled_call(lm_compiled *c, int nin, lm_array *const *inputs, lm_array **outs);
/* lm_compiled_call for comparison sessions (core/trace.c): each[i] (ninstr
 * entries, which must be the traced graph's node count) gets a new reference
 * to what the traced node i became, NULL where it was fused into a later
 * node (into[i] = that node's index); a node merged with an equal one
 * shares its value (into[i] = that one), else into[i] = -1. */
int lm_compiled_call_each(lm_compiled *c, int nin, lm_array *const *inputs, int ninstr,
                          lm_array **each, int *into);
int lm_compiled_outputs(const lm_compiled *c);
/* Kernels one call launches (fused groups count one), for tests and f:graph(). */
int lm_compiled_kernels(const lm_compiled *c);
/* A printable description of the optimised graph; caller frees. */
char *lm_compiled_describe(const lm_compiled *c);
void lm_compiled_free(lm_compiled *c);

/* Writes the graph behind a (lazy or not) as Graphviz DOT. */
lm_status lm_export_dot(lm_array *a, const char *path);

#endif
