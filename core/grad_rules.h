/* grad_rules.h - the backward rules (core/grad_rules.c) that the walk of
 * core/grad.c applies node by node.  The rules only build nodes from the op
 * builders; they never walk a graph themselves. */
#ifndef LM_GRAD_RULES_H
#define LM_GRAD_RULES_H

#include "array.h"

/* Fills gin[i] (new references, NULL = no gradient) for the inputs with
 * need[i] set, given the cotangent g of node n.  Returns LM_OK, or an error
 * (LM_ERR_UNSUPPORTED naming the op when it has no rule). */
lm_status lm_grad_rule(lm_array *n, lm_array *g, const bool *need, lm_array **gin);

/* Whether n is differentiated through its forward rebuilt from primitives
 * (lm_grad_rebuild) instead of a rule of its own: the norms but group_norm,
 * attention, RoPE, pooling, upsampling and fused chains. */
bool lm_grad_is_composite(const lm_array *n);
/* The forward of composite node n rebuilt from primitive builders over lv
 * (one per input of n, standing for it), as a new reference in the
 * dtype the primitives give; NULL with the error set when it cannot be. */
lm_array *lm_grad_rebuild(lm_array *n, lm_array **lv);

#endif
