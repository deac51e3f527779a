/* fused.h - the program of an LM_OP_FUSED node (its params.ext): a chain of
 * elementwise steps over registers, which core/compile.c builds, a backend
 * runs block by block (run_fused), and the profiler and the grad rules read.
 * The node owns the program; everyone else only reads it. */
#ifndef LM_FUSED_H
#define LM_FUSED_H

#include "op.h"

typedef struct lm_fused_step {
    lm_op op;              /* UNARY/BINARY/TERNARY-class op, CAST or CLAMP */
    lm_dtype dtype;        /* this step's output dtype */
    int nin;
    int in[3];             /* registers read */
    lm_params params;      /* as the unfused node's (ext is NULL) */
} lm_fused_step;

typedef struct lm_fused {
    int ninputs;           /* registers 0..ninputs-1: the node's inputs, broadcast to its shape */
    int nsteps;            /* step k writes register ninputs + k; the last is the output */
    lm_fused_step *steps;
} lm_fused;

#endif
