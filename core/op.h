/* op.h - the op vocabulary of the lazy graph and the parameters a node carries.
 *
 * A node's op, inputs and params are everything a backend needs to run it:
 * the output's dtype and shape sit on the array itself.  Each op below notes
 * how it uses lm_params (f = doubles, i = integers).  Axes in params are
 * already normalised to 0-based, non-negative values. */
#ifndef LM_OP_H
#define LM_OP_H

#include <stdint.h>
#include "dtype.h"

typedef enum lm_op_class {
    LM_CLASS_NONE,     /* evaluated leaf: data, no op */
    LM_CLASS_CREATE,   /* no inputs: full, arange, random ... */
    LM_CLASS_VIEW,     /* shares its input's buffer (core handles it) */
    LM_CLASS_UNARY,    /* elementwise, one input, output contiguous */
    LM_CLASS_BINARY,   /* elementwise with broadcasting, two inputs */
    LM_CLASS_TERNARY,  /* where */
    LM_CLASS_REDUCE,   /* reductions */
    LM_CLASS_OTHER,    /* matmul, concat, gather, ... */
    LM_CLASS_NN,       /* the neural-network set (ops_nn) */
} lm_op_class;

#define LM_OPS(X) \
    /* name          class          */ \
    X(NONE,          NONE)    /* evaluated data */ \
    /* creation: shape/dtype on the array */ \
    X(FULL,          CREATE)  /* f[0] = value */ \
    X(ARANGE,        CREATE)  /* f[0] = start, f[1] = step */ \
    X(LINSPACE,      CREATE)  /* f[0] = start, f[1] = stop; n from shape */ \
    X(EYE,           CREATE)  /* i[0] = diagonal offset k */ \
    X(RANDOM_UNIFORM,CREATE)  /* f[0]=lo f[1]=hi; i[0],i[1] = key (u64 halves as int64) */ \
    X(RANDOM_NORMAL, CREATE)  /* f[0]=mean f[1]=std; i[0],i[1] = key */ \
    /* views: strides/offset already on the output array */ \
    X(VIEW,          VIEW)    /* reshape/permute/slice/expand/squeeze... */ \
    /* unary elementwise (input broadcast-free, any strides) */ \
    X(COPY,          UNARY)   /* contiguous copy; also device transfer */ \
    X(CAST,          UNARY)   /* to the array's dtype */ \
    X(NEG, UNARY) X(ABS, UNARY) X(SIGN, UNARY) X(EXP, UNARY) X(LOG, UNARY) \
    X(LOG1P, UNARY) X(EXPM1, UNARY) X(SQRT, UNARY) X(RSQRT, UNARY) \
    X(SQUARE, UNARY) X(RECIPROCAL, UNARY) X(SIN, UNARY) X(COS, UNARY) \
    X(TAN, UNARY) X(TANH, UNARY) X(SIGMOID, UNARY) X(RELU, UNARY) \
    X(GELU, UNARY) X(GELU_TANH, UNARY) X(SILU, UNARY) X(SOFTPLUS, UNARY) \
    X(ERF, UNARY) X(FLOOR, UNARY) X(CEIL, UNARY) X(ROUND, UNARY) \
    X(ISNAN, UNARY) X(ISINF, UNARY) X(LOGICAL_NOT, UNARY) \
    X(CLAMP, UNARY)           /* f[0] = lo, f[1] = hi; i[0] bit0 has lo, bit1 has hi */ \
    /* binary elementwise with broadcasting */ \
    X(ADD, BINARY) X(SUB, BINARY) X(MUL, BINARY) X(DIV, BINARY) \
    X(POW, BINARY) X(MOD, BINARY) X(MAXIMUM, BINARY) X(MINIMUM, BINARY) \
    X(ATAN2, BINARY) \
    X(EQ, BINARY) X(NE, BINARY) X(LT, BINARY) X(LE, BINARY) X(GT, BINARY) X(GE, BINARY) \
    X(LOGICAL_AND, BINARY) X(LOGICAL_OR, BINARY) X(LOGICAL_XOR, BINARY) \
    X(WHERE,         TERNARY) /* where(cond, a, b) */ \
    /* reductions: i[0] = bitmask of reduced axes of the input, i[1] = keepdims */ \
    X(SUM, REDUCE) X(MEAN, REDUCE) X(PROD, REDUCE) X(MAX, REDUCE) X(MIN, REDUCE) \
    X(VAR, REDUCE)            /* i[2] = ddof */ \
    X(STD, REDUCE)            /* i[2] = ddof */ \
    X(LOGSUMEXP, REDUCE) X(ALL, REDUCE) X(ANY, REDUCE) \
    X(ARGMAX, REDUCE) X(ARGMIN, REDUCE) /* exactly one axis in the mask; output i64 */ \
    X(CUMSUM,        REDUCE)  /* i[0] = axis (not a mask); same shape as input */ \
    /* other */ \
    X(MATMUL,        OTHER)   /* inputs already broadcast to [..., M, K] and [..., K, N] views */ \
    X(CONCAT,        OTHER)   /* i[0] = axis; n inputs */ \
    X(PAD,           OTHER)   /* i[2d], i[2d+1] = before/after of axis d; f[0] = value */ \
    X(GATHER,        OTHER)   /* take_along_axis(a, idx): i[0] = axis */ \
    X(INDEX_SELECT,  OTHER)   /* a, idx(1-D ints): i[0] = axis */ \
    /* neural-network ops (core/ops_nn.c, backends/cpu/nn_*.c) */ \
    X(CONV,          NN)      /* conv1d/2d: x, w[, b] */ \
    X(CONV_TRANSPOSE,NN) \
    X(MAX_POOL,      NN) X(AVG_POOL, NN) X(ADAPTIVE_AVG_POOL, NN) \
    X(UPSAMPLE,      NN) X(PIXEL_SHUFFLE, NN) X(PIXEL_UNSHUFFLE, NN) \
    X(SOFTMAX, NN) X(LOG_SOFTMAX, NN) X(LAYER_NORM, NN) X(RMS_NORM, NN) \
    X(GROUP_NORM, NN) X(BATCH_NORM, NN) X(L2_NORMALIZE, NN) \
    X(ATTENTION,     NN) X(ROPE, NN) \
    X(TOPK, NN) X(SORT, NN) X(ARGSORT, NN) X(SCATTER, NN) X(SCATTER_ADD, NN) \
    X(ONE_HOT, NN) X(TRIL, NN) X(TRIU, NN) X(TIMESTEP_EMBEDDING, NN) \
    /* fused elementwise chain made by compile (core/compile.c) */ \
    X(FUSED,         OTHER)

typedef enum lm_op {
#define LM_OP_ENUM(name, cls) LM_OP_##name,
    LM_OPS(LM_OP_ENUM)
#undef LM_OP_ENUM
    LM_OP_COUNT
} lm_op;

#define LM_PARAM_INTS 32
typedef struct lm_params {
    double f[4];
    int64_t i[LM_PARAM_INTS];
    void *ext;              /* op-specific extra data owned by the node */
    void (*ext_free)(void *ext); /* called when the node drops its graph; NULL = free() */
} lm_params;

const char *lm_op_name(lm_op op);        /* "add", "matmul", ... (lower case) */
lm_op_class lm_op_class_of(lm_op op);

#endif
