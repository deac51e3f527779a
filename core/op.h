/* op.h - the op vocabulary of the lazy graph and the parameters a node carries.
 *
 * A node's op, inputs and params are everything a backend needs to run it:
 * the output's dtype and shape sit on the array itself.  Each op below notes
 * how it uses lm_params (f = doubles, i = integers).  Axes in params are
 * already normalised to 0-based, non-negative values. */
#ifndef LM_OP_H
#define LM_OP_H

#include <stdbool.h>
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

/* One row per op; every per-op property lives here, and every other list
 * (kernel switches, shader codes, vmath rows, Lua names, grad rules, the
 * tests' per-op tables) is generated from it or checked against it
 * (docs/DEVELOPING.md, "Adding an op").  Code asks the table
 * (lm_op_dtype_rule_of(op) == LM_DT_BOOL ...), never the enum's order: where
 * a row sits decides nothing (HYPOT sits among the comparisons to prove it).
 *   name   LM_OP_<name>; lower case it is the op's name (lm_op_name)
 *   cls    LM_CLASS_<cls>
 *   ar     inputs: 0..3, or -1 when the builder decides (concat, conv ...)
 *   dt     the result's dtype (LM_DT_<dt>): SAME as the inputs' compute
 *          dtype, BOOL, I64, FLOAT (an integer input gives f32: float-only
 *          math), OWN (the builder decides: cast, creation, nn ops)
 *   bl     what a bool input gives an op whose dt is SAME: SAME (bool, as
 *          abs, floor, add = or, mul = and, maximum), I64 (computed in i64,
 *          as PyTorch: square, sign, relu, sub, pow, mod), ERR (an error
 *          naming the op: neg).  Other dt rules decide it themselves.
 *   gr     1: differentiable, a rule in core/grad_rules.c must exist (a
 *          missing one is an error, never a zero gradient); 0: grad says
 *          the op is not differentiable
 *   vm     the CPU's f32 vector-math function (LM_VM_<vm>, vmath.h), NONE
 *          when the kernel's own loop computes it
 *   vk     the Vulkan elementwise code (U_<vk> unary, B_<vk> binary in
 *          shaders/vkops.h), NONE: no Vulkan kernel (runs on the CPU)
 *   v64    1: the Vulkan f64 form is exactly rounded (no f64
 *          transcendentals exist in GLSL); 0: f64 runs on the CPU */
#define LM_OPS(X) \
    /* name         cls      ar  dt     bl    gr  vm         vk         v64 */ \
    X(NONE,          NONE,    0,  OWN,   SAME, 0,  NONE,      NONE,      0)  /* evaluated data */ \
    /* creation: shape/dtype on the array */ \
    X(FULL,          CREATE,  0,  OWN,   SAME, 0,  NONE,      NONE,      0)  /* f[0] = value */ \
    X(ARANGE,        CREATE,  0,  OWN,   SAME, 0,  NONE,      NONE,      0)  /* f[0] = start, f[1] = step */ \
    X(LINSPACE,      CREATE,  0,  OWN,   SAME, 0,  NONE,      NONE,      0)  /* f[0] = start, f[1] = stop; n from shape */ \
    X(EYE,           CREATE,  0,  OWN,   SAME, 0,  NONE,      NONE,      0)  /* i[0] = diagonal offset k */ \
    X(RANDOM_UNIFORM,CREATE,  0,  OWN,   SAME, 0,  NONE,      NONE,      0)  /* f[0]=lo f[1]=hi; i[0],i[1] = key (u64 halves as int64) */ \
    X(RANDOM_NORMAL, CREATE,  0,  OWN,   SAME, 0,  NONE,      NONE,      0)  /* f[0]=mean f[1]=std; i[0],i[1] = key */ \
    /* views: strides/offset already on the output array */ \
    X(VIEW,          VIEW,    1,  SAME,  SAME, 1,  NONE,      NONE,      0)  /* reshape/permute/slice/expand/squeeze... */ \
    /* unary elementwise (input broadcast-free, any strides) */ \
    X(COPY,          UNARY,   1,  SAME,  SAME, 1,  NONE,      COPY,      1)  /* contiguous copy; also device transfer */ \
    X(CAST,          UNARY,   1,  OWN,   SAME, 1,  NONE,      COPY,      1)  /* to the array's dtype */ \
    X(NEG,           UNARY,   1,  SAME,  ERR,  1,  NONE,      NEG,       1) \
    X(ABS,           UNARY,   1,  SAME,  SAME, 1,  NONE,      ABS,       1) \
    X(SIGN,          UNARY,   1,  SAME,  I64,  1,  NONE,      SIGN,      1) \
    X(EXP,           UNARY,   1,  FLOAT, SAME, 1,  EXP,       EXP,       0) \
    X(LOG,           UNARY,   1,  FLOAT, SAME, 1,  LOG,       LOG,       0) \
    X(LOG1P,         UNARY,   1,  FLOAT, SAME, 1,  LOG1P,     LOG1P,     0) \
    X(EXPM1,         UNARY,   1,  FLOAT, SAME, 1,  EXPM1,     EXPM1,     0) \
    X(SQRT,          UNARY,   1,  FLOAT, SAME, 1,  SQRT,      SQRT,      1) \
    X(RSQRT,         UNARY,   1,  FLOAT, SAME, 1,  RSQRT,     RSQRT,     1) \
    X(SQUARE,        UNARY,   1,  SAME,  I64,  1,  NONE,      SQUARE,    1) \
    X(RECIPROCAL,    UNARY,   1,  FLOAT, SAME, 1,  NONE,      RECIP,     1) \
    X(SIN,           UNARY,   1,  FLOAT, SAME, 1,  SIN,       SIN,       0) \
    X(COS,           UNARY,   1,  FLOAT, SAME, 1,  COS,       COS,       0) \
    X(TAN,           UNARY,   1,  FLOAT, SAME, 1,  TAN,       TAN,       0) \
    X(TANH,          UNARY,   1,  FLOAT, SAME, 1,  TANH,      TANH,      0) \
    X(SIGMOID,       UNARY,   1,  FLOAT, SAME, 1,  SIGMOID,   SIGMOID,   0) \
    X(RELU,          UNARY,   1,  SAME,  I64,  1,  NONE,      RELU,      1) \
    X(GELU,          UNARY,   1,  FLOAT, SAME, 1,  GELU,      GELU,      0) \
    X(GELU_TANH,     UNARY,   1,  FLOAT, SAME, 1,  GELU_TANH, GELU_TANH, 0) \
    X(SILU,          UNARY,   1,  FLOAT, SAME, 1,  SILU,      SILU,      0) \
    X(SOFTPLUS,      UNARY,   1,  FLOAT, SAME, 1,  SOFTPLUS,  SOFTPLUS,  0) \
    X(ERF,           UNARY,   1,  FLOAT, SAME, 1,  ERF,       ERF,       0) \
    X(ERFC,          UNARY,   1,  FLOAT, SAME, 1,  ERFC,      ERFC,      0) \
    X(FLOOR,         UNARY,   1,  SAME,  SAME, 1,  NONE,      FLOOR,     1) \
    X(CEIL,          UNARY,   1,  SAME,  SAME, 1,  NONE,      CEIL,      1) \
    X(ROUND,         UNARY,   1,  SAME,  SAME, 1,  NONE,      ROUND,     1) \
    X(ISNAN,         UNARY,   1,  BOOL,  SAME, 0,  NONE,      ISNAN,     1) \
    X(ISINF,         UNARY,   1,  BOOL,  SAME, 0,  NONE,      ISINF,     1) \
    X(LOGICAL_NOT,   UNARY,   1,  BOOL,  SAME, 0,  NONE,      NOT,       1) \
    X(CLAMP,         UNARY,   1,  OWN,   SAME, 1,  NONE,      CLAMP,     1)  /* f[0] = lo, f[1] = hi; i[0] bit0 has lo, bit1 has hi */ \
    /* binary elementwise with broadcasting */ \
    X(ADD,           BINARY,  2,  SAME,  SAME, 1,  ADD,       ADD,       1) \
    X(SUB,           BINARY,  2,  SAME,  I64,  1,  SUB,       SUB,       1) \
    X(MUL,           BINARY,  2,  SAME,  SAME, 1,  MUL,       MUL,       1) \
    X(DIV,           BINARY,  2,  FLOAT, SAME, 1,  DIV,       DIV,       1) \
    X(POW,           BINARY,  2,  SAME,  I64,  1,  POW,       POW,       0) \
    X(MOD,           BINARY,  2,  SAME,  I64,  1,  NONE,      MOD,       1) \
    X(MAXIMUM,       BINARY,  2,  SAME,  SAME, 1,  MAXIMUM,   MAX,       1) \
    X(MINIMUM,       BINARY,  2,  SAME,  SAME, 1,  MINIMUM,   MIN,       1) \
    X(ATAN2,         BINARY,  2,  FLOAT, SAME, 1,  ATAN2,     ATAN2,     0) \
    X(LOGADDEXP,     BINARY,  2,  FLOAT, SAME, 1,  LOGADDEXP, LOGADDEXP, 0)  /* log(e^a + e^b) */ \
    X(FLOOR_DIVIDE,  BINARY,  2,  SAME,  SAME, 0,  NONE,      FLOORDIV,  0)  /* floor(a / b); integers exact */ \
    X(EQ,            BINARY,  2,  BOOL,  SAME, 0,  NONE,      EQ,        1) \
    X(NE,            BINARY,  2,  BOOL,  SAME, 0,  NONE,      NE,        1) \
    X(HYPOT,         BINARY,  2,  FLOAT, SAME, 1,  HYPOT,     HYPOT,     0)  /* sqrt(a^2 + b^2) without overflow; its row sits among the comparisons on purpose: nothing may decide a property by where a row sits */ \
    X(LT,            BINARY,  2,  BOOL,  SAME, 0,  NONE,      LT,        1) \
    X(LE,            BINARY,  2,  BOOL,  SAME, 0,  NONE,      LE,        1) \
    X(GT,            BINARY,  2,  BOOL,  SAME, 0,  NONE,      GT,        1) \
    X(GE,            BINARY,  2,  BOOL,  SAME, 0,  NONE,      GE,        1) \
    X(LOGICAL_AND,   BINARY,  2,  BOOL,  SAME, 0,  NONE,      AND,       1) \
    X(LOGICAL_OR,    BINARY,  2,  BOOL,  SAME, 0,  NONE,      OR,        1) \
    X(LOGICAL_XOR,   BINARY,  2,  BOOL,  SAME, 0,  NONE,      XOR,       1) \
    X(WHERE,         TERNARY, 3,  SAME,  SAME, 1,  NONE,      NONE,      1)  /* where(cond, a, b) */ \
    /* reductions: i[0] = bitmask of reduced axes of the input, i[1] = keepdims */ \
    X(SUM,           REDUCE,  1,  OWN,   SAME, 1,  NONE,      NONE,      0) \
    X(MEAN,          REDUCE,  1,  OWN,   SAME, 1,  NONE,      NONE,      0) \
    X(PROD,          REDUCE,  1,  OWN,   SAME, 1,  NONE,      NONE,      0) \
    X(MAX,           REDUCE,  1,  SAME,  SAME, 1,  NONE,      NONE,      0) \
    X(MIN,           REDUCE,  1,  SAME,  SAME, 1,  NONE,      NONE,      0) \
    X(VAR,           REDUCE,  1,  OWN,   SAME, 1,  NONE,      NONE,      0)  /* i[2] = ddof */ \
    X(STD,           REDUCE,  1,  OWN,   SAME, 1,  NONE,      NONE,      0)  /* i[2] = ddof */ \
    X(LOGSUMEXP,     REDUCE,  1,  OWN,   SAME, 1,  NONE,      NONE,      0) \
    X(ALL,           REDUCE,  1,  BOOL,  SAME, 0,  NONE,      NONE,      0) \
    X(ANY,           REDUCE,  1,  BOOL,  SAME, 0,  NONE,      NONE,      0) \
    X(ARGMAX,        REDUCE,  1,  I64,   SAME, 0,  NONE,      NONE,      0)  /* exactly one axis in the mask; output i64 */ \
    X(ARGMIN,        REDUCE,  1,  I64,   SAME, 0,  NONE,      NONE,      0) \
    X(CUMSUM,        REDUCE,  1,  OWN,   SAME, 1,  NONE,      NONE,      0)  /* i[0] = axis (not a mask); same shape as input */ \
    /* other */ \
    X(MATMUL,        OTHER,   2,  OWN,   SAME, 1,  NONE,      NONE,      0)  /* inputs already broadcast to [..., M, K] and [..., K, N] views */ \
    X(CONCAT,        OTHER,   -1, SAME,  SAME, 1,  NONE,      NONE,      0)  /* i[0] = axis; n inputs */ \
    X(PAD,           OTHER,   1,  SAME,  SAME, 1,  NONE,      NONE,      0)  /* i[2d], i[2d+1] = before/after of axis d; f[0] = value */ \
    X(GATHER,        OTHER,   2,  OWN,   SAME, 1,  NONE,      NONE,      0)  /* take_along_axis(a, idx): i[0] = axis */ \
    X(INDEX_SELECT,  OTHER,   2,  OWN,   SAME, 1,  NONE,      NONE,      0)  /* a, idx(1-D ints): i[0] = axis */ \
    /* neural-network ops (core/ops_nn.c, backends/cpu/nn_*.c) */ \
    X(CONV,          NN,      -1, OWN,   SAME, 1,  NONE,      NONE,      0)  /* conv1d/2d: x, w[, b] */ \
    X(CONV_TRANSPOSE,NN,      -1, OWN,   SAME, 1,  NONE,      NONE,      0) \
    X(MAX_POOL,      NN,      1,  SAME,  SAME, 1,  NONE,      NONE,      0) \
    X(AVG_POOL,      NN,      1,  OWN,   SAME, 1,  NONE,      NONE,      0) \
    X(ADAPTIVE_AVG_POOL,NN,      1,  OWN,   SAME, 1,  NONE,      NONE,      0) \
    X(UPSAMPLE,      NN,      1,  SAME,  SAME, 1,  NONE,      NONE,      0) \
    X(PIXEL_SHUFFLE, NN,      1,  SAME,  SAME, 0,  NONE,      NONE,      0) \
    X(PIXEL_UNSHUFFLE,NN,      1,  SAME,  SAME, 0,  NONE,      NONE,      0) \
    X(SOFTMAX,       NN,      1,  OWN,   SAME, 1,  NONE,      NONE,      0) \
    X(LOG_SOFTMAX,   NN,      1,  OWN,   SAME, 1,  NONE,      NONE,      0) \
    X(LAYER_NORM,    NN,      -1, OWN,   SAME, 1,  NONE,      NONE,      0) \
    X(RMS_NORM,      NN,      -1, OWN,   SAME, 1,  NONE,      NONE,      0) \
    X(GROUP_NORM,    NN,      -1, OWN,   SAME, 1,  NONE,      NONE,      0) \
    X(BATCH_NORM,    NN,      -1, OWN,   SAME, 0,  NONE,      NONE,      0) \
    X(L2_NORMALIZE,  NN,      1,  OWN,   SAME, 0,  NONE,      NONE,      0) \
    X(ATTENTION,     NN,      -1, OWN,   SAME, 1,  NONE,      NONE,      0) \
    X(ROPE,          NN,      -1, OWN,   SAME, 1,  NONE,      NONE,      0) \
    X(TOPK,          NN,      1,  OWN,   SAME, 0,  NONE,      NONE,      0) \
    X(SORT,          NN,      1,  SAME,  SAME, 0,  NONE,      NONE,      0) \
    X(ARGSORT,       NN,      1,  I64,   SAME, 0,  NONE,      NONE,      0) \
    X(SCATTER,       NN,      -1, SAME,  SAME, 0,  NONE,      NONE,      0) \
    X(SCATTER_ADD,   NN,      -1, SAME,  SAME, 0,  NONE,      NONE,      0) \
    X(ONE_HOT,       NN,      1,  OWN,   SAME, 0,  NONE,      NONE,      0) \
    X(TRIL,          NN,      1,  SAME,  SAME, 1,  NONE,      NONE,      0) \
    X(TRIU,          NN,      1,  SAME,  SAME, 1,  NONE,      NONE,      0) \
    X(TIMESTEP_EMBEDDING,NN,      1,  OWN,   SAME, 0,  NONE,      NONE,      0) \
    X(QLINEAR,       NN,      2,  OWN,   SAME, 0,  NONE,      NONE,      0)  /* x [..., K] f32 @ w [N, K]^T, w quantized (core/quant.h) */ \
    X(DEQUANTIZE,    NN,      1,  OWN,   SAME, 0,  NONE,      NONE,      0)  /* a quantized tensor's values as f32 (core/quant.h) */ \
    /* fused elementwise chain made by compile (core/compile.c) */ \
    X(FUSED,         OTHER,   -1, OWN,   SAME, 1,  NONE,      NONE,      0)

typedef enum lm_op {
#define LM_OP_ENUM(name, cls, ar, dt, bl, gr, vm, vk, v64) LM_OP_##name,
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

/* the result dtype rule of an op (the dt column of LM_OPS) */
typedef enum lm_op_dtype_rule { LM_DT_SAME, LM_DT_BOOL, LM_DT_I64, LM_DT_FLOAT, LM_DT_OWN } lm_op_dtype_rule;
/* what a bool input gives an op whose dt rule is SAME (the bl column) */
typedef enum lm_op_bool_rule { LM_BOOL_SAME, LM_BOOL_I64, LM_BOOL_ERR } lm_op_bool_rule;

const char *lm_op_name(lm_op op);        /* "add", "matmul", ... (lower case) */
lm_op_class lm_op_class_of(lm_op op);
int lm_op_arity(lm_op op);               /* inputs, or -1 when the builder decides */
lm_op_dtype_rule lm_op_dtype_rule_of(lm_op op);
lm_op_bool_rule lm_op_bool_rule_of(lm_op op);
bool lm_op_differentiable(lm_op op);     /* grad must have a rule for it */
lm_op lm_op_by_name(const char *name);   /* LM_OP_COUNT when none has that name */

#endif
