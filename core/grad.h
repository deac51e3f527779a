/* grad.h - reverse-mode differentiation over the lazy graph (MLX's vjp).
 *
 * lm_vjp walks the lazy graph from outputs back to inputs and builds NEW
 * lazy nodes for the vector-Jacobian products; nothing is evaluated.  The
 * graph must still be lazy: an intermediate that was evaluated has dropped
 * its inputs (DESIGN.md memory model) and gradients stop there.  So a host
 * language traces f on fresh leaves (lm_grad_leaf), calls lm_vjp and lets
 * the whole thing go after one eval: nothing outlives the step.
 *
 * Per-op backward rules live in core/grad_rules.c; composite ops (norms,
 * attention, RoPE, pooling, upsampling) are differentiated by rebuilding
 * them from primitive builders (grad_rules.c) and walking that (grad.c).  A cotangent that reaches a
 * non-differentiable op (argmax, comparisons, sort indices, ...) is an
 * error naming the op. */
#ifndef LM_GRAD_H
#define LM_GRAD_H

#include "array.h"

/* grads[i] (new references) receives the cotangent of inputs[i]: the sum
 * over j of cotangents[j]^T d outputs[j] / d inputs[i]; zeros when outputs
 * do not depend on inputs[i].  cotangents[j] must have outputs[j]'s shape
 * (it is cast to its dtype).  inputs are nodes of the graph, normally
 * leaves from lm_grad_leaf.  Returns LM_OK or an error (grads all NULL). */
lm_status lm_vjp(int nout, lm_array *const *outputs, lm_array *const *cotangents,
                 int nin, lm_array *const *inputs, lm_array **grads);

/* A fresh lazy leaf over x's data (an identity view node): views of it stay
 * lazy, so its uses can be found again by lm_vjp.  New reference. */
lm_array *lm_grad_leaf(lm_array *x);
/* x with no gradient flowing back through it (an identity view lm_vjp
 * does not cross).  New reference. */
lm_array *lm_stop_gradient(lm_array *x);

#endif
