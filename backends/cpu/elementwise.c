/* elementwise.c - unary, binary, where and creation kernels.
 *
 * Work goes block by block (BLOCK elements of the contiguous output).  Each
 * input block is either read in place (contiguous, already the compute
 * type) or gathered through its strides and converted to the compute type:
 * f32 for f32/f16/bf16, f64 for f64, i64 for integers and bool.  Blocks run
 * in parallel on the pool. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cpu.h"
#include "core/random.h"
#include "vmath.h"

#define BLOCK 2048

lm_dtype lm_cpu_compute_type(lm_dtype t)
{
    if (t == LM_F64) return LM_F64;
    if (lm_dtype_is_float(t)) return LM_F32;
    return LM_I64;
}

void lm_cpu_bcast_strides(const lm_array *in, const lm_array *out, int64_t *strides)
{
    int lead = out->ndim - in->ndim;
    for (int d = 0; d < out->ndim; d++) {
        int s = d - lead;
        strides[d] = s < 0 || in->shape[s] == 1 ? 0 : in->strides[s];
    }
}

typedef struct {
    lm_array *out;
    const lm_array *in[3];
    lm_array staged[3];      /* tiled copies of transposed inputs */
    lm_buffer staged_buf[3];
    void *owned[3];
    int64_t st[3][LM_MAX_DIMS];
    int direct[3];   /* 1: read in place (contiguous, compute dtype), 2: scalar */
    lm_dtype ct;     /* compute dtype */
} ew_ctx;

static void ew_release(ew_ctx *c)
{
    for (int k = 0; k < 3; k++) free(c->owned[k]);
}

static void ew_setup(ew_ctx *c, lm_array *node, lm_dtype ct)
{
    memset(c, 0, sizeof *c);
    c->out = node;
    c->ct = ct;
    for (int k = 0; k < node->ninputs && k < 3; k++) {
        const lm_array *a = node->inputs[k];
        c->in[k] = a;
        lm_cpu_bcast_strides(a, node, c->st[k]);
        bool same = a->ndim == node->ndim && a->size == node->size && lm_array_is_contiguous(a);
        if (!same && a->ndim == node->ndim && a->size == node->size && a->size >= (1 << 15) &&
            (c->owned[k] = malloc(lm_array_nbytes(a)))) {
            /* a transposed input: stage it through tiles once, then stream it */
            if (lm_cpu_transpose_copy(c->owned[k], a)) {
                c->staged[k] = *a;
                c->staged_buf[k].host = c->owned[k];
                c->staged[k].buf = &c->staged_buf[k];
                c->staged[k].offset = 0;
                for (int d = a->ndim - 1, acc = 1; d >= 0; d--) {
                    c->staged[k].strides[d] = acc;
                    acc *= (int)a->shape[d];
                }
                c->in[k] = a = &c->staged[k];
                lm_cpu_bcast_strides(a, node, c->st[k]);
                same = true;
            } else {
                free(c->owned[k]);
                c->owned[k] = NULL;
            }
        }
        if (a->size == 1 && a->dtype == ct) c->direct[k] = 2;
        else if (same && a->dtype == ct) c->direct[k] = 1;
    }
}

/* pointer to block [b, b+n) of input k in the compute dtype (or in `as`) */
static const void *ew_load(const ew_ctx *c, int k, int64_t b, int64_t n, void *buf, lm_dtype as, int *step)
{
    const lm_array *a = c->in[k];
    *step = 1;
    if (a->dtype == as && c->direct[k] == 1)
        return (const char *)lm_cpu_ptr(a) + b * (int64_t)lm_dtype_size(as);
    if (a->dtype == as && c->direct[k] == 2) {
        *step = 0;
        return lm_cpu_ptr(a);
    }
    lm_cpu_gather(buf, as, lm_cpu_ptr(a), a->dtype, c->out->ndim, c->out->shape, c->st[k], b, n);
    return buf;
}

/* ---------------------------------------------------------------- unary */

static double sigmoid_d(double x)
{
    if (x >= 0) return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

#define UNARY_FLOAT(T, SUF, o, x, n, op, p, ok) do { \
    switch (op) { \
    case LM_OP_NEG: for (int64_t i = 0; i < n; i++) o[i] = -x[i]; break; \
    case LM_OP_ABS: for (int64_t i = 0; i < n; i++) o[i] = fabs##SUF(x[i]); break; \
    case LM_OP_SIGN: for (int64_t i = 0; i < n; i++) o[i] = x[i] != x[i] ? x[i] : (T)((x[i] > 0) - (x[i] < 0)); break; \
    case LM_OP_EXP: for (int64_t i = 0; i < n; i++) o[i] = exp##SUF(x[i]); break; \
    case LM_OP_LOG: for (int64_t i = 0; i < n; i++) o[i] = log##SUF(x[i]); break; \
    case LM_OP_LOG1P: for (int64_t i = 0; i < n; i++) o[i] = log1p##SUF(x[i]); break; \
    case LM_OP_EXPM1: for (int64_t i = 0; i < n; i++) o[i] = expm1##SUF(x[i]); break; \
    case LM_OP_SQRT: for (int64_t i = 0; i < n; i++) o[i] = sqrt##SUF(x[i]); break; \
    case LM_OP_RSQRT: for (int64_t i = 0; i < n; i++) o[i] = (T)1 / sqrt##SUF(x[i]); break; \
    case LM_OP_SQUARE: for (int64_t i = 0; i < n; i++) o[i] = x[i] * x[i]; break; \
    case LM_OP_RECIPROCAL: for (int64_t i = 0; i < n; i++) o[i] = (T)1 / x[i]; break; \
    case LM_OP_SIN: for (int64_t i = 0; i < n; i++) o[i] = sin##SUF(x[i]); break; \
    case LM_OP_COS: for (int64_t i = 0; i < n; i++) o[i] = cos##SUF(x[i]); break; \
    case LM_OP_TAN: for (int64_t i = 0; i < n; i++) o[i] = tan##SUF(x[i]); break; \
    case LM_OP_TANH: for (int64_t i = 0; i < n; i++) o[i] = tanh##SUF(x[i]); break; \
    case LM_OP_ERF: for (int64_t i = 0; i < n; i++) o[i] = erf##SUF(x[i]); break; \
    case LM_OP_ERFC: for (int64_t i = 0; i < n; i++) o[i] = erfc##SUF(x[i]); break; \
    case LM_OP_FLOOR: for (int64_t i = 0; i < n; i++) o[i] = floor##SUF(x[i]); break; \
    case LM_OP_CEIL: for (int64_t i = 0; i < n; i++) o[i] = ceil##SUF(x[i]); break; \
    case LM_OP_ROUND: for (int64_t i = 0; i < n; i++) o[i] = nearbyint##SUF(x[i]); break; \
    case LM_OP_RELU: for (int64_t i = 0; i < n; i++) o[i] = x[i] > 0 ? x[i] : (x[i] != x[i] ? x[i] : 0); break; \
    case LM_OP_SOFTPLUS: for (int64_t i = 0; i < n; i++) o[i] = x[i] > 20 ? x[i] : log1p##SUF(exp##SUF(x[i])); break; \
    case LM_OP_CLAMP: { T lo = (T)p->f[0], hi = (T)p->f[1]; int has = (int)p->i[0]; \
        for (int64_t i = 0; i < n; i++) { T v = x[i]; \
            if ((has & 1) && v < lo) v = lo; \
            if ((has & 2) && v > hi) v = hi; \
            o[i] = v; } break; } \
    default: ok = false; break;   /* no kernel: never the identity */ \
    } } while (0)

/* f32 ops with a vector form go through the vmath table (SLEEF at the
 * CPU's width); the rest are loops the compiler vectorises, or libm */
/* (the vm column of core/op.h; 0 = none, else the function + 1) */
#define VM_OF_UNARY(name, cls, ar, dt, bl, gr, vm, vk, v64) \
    [LM_OP_##name] = LM_CLASS_##cls == LM_CLASS_UNARY ? LM_VM_##vm + 1 : 0,
#define VM_OF_BINARY(name, cls, ar, dt, bl, gr, vm, vk, v64) \
    [LM_OP_##name] = LM_CLASS_##cls == LM_CLASS_BINARY ? LM_VM_##vm + 1 : 0,
static const signed char vm_of_op[LM_OP_COUNT] = {LM_OPS(VM_OF_UNARY)};
static const signed char vm2_of_op[LM_OP_COUNT] = {LM_OPS(VM_OF_BINARY)};
#undef VM_OF_UNARY
#undef VM_OF_BINARY
/* a vm row named by an op of another class is a typo in the table */
#define VM_CLASS_CHECK(name, cls, ar, dt, bl, gr, vm, vk, v64) \
    _Static_assert(LM_VM_##vm < 0 || LM_CLASS_##cls == LM_CLASS_UNARY || LM_CLASS_##cls == LM_CLASS_BINARY, \
                   "op " #name ": a vm function on a non-elementwise op");
LM_OPS(VM_CLASS_CHECK)
#undef VM_CLASS_CHECK

int lm_cpu_vm_unary_of(lm_op op)
{
    return (unsigned)op < LM_OP_COUNT ? vm_of_op[op] - 1 : -1;
}

/* The kernels return false for an op they have no case for (n = 0 asks
 * without computing: lm_cpu_ew_has). */
static bool unary_f32(lm_op op, const lm_params *p, float *o, const float *x, int64_t n)
{
    if ((unsigned)op < LM_OP_COUNT && vm_of_op[op]) {
        lm_vm->unary[vm_of_op[op] - 1](o, x, n);
        return true;
    }
    bool ok = true;
    UNARY_FLOAT(float, f, o, x, n, op, p, ok);
    return ok;
}

static bool unary_f64(lm_op op, const lm_params *p, double *o, const double *x, int64_t n)
{
    bool ok = true;
    switch (op) {
    case LM_OP_SIGMOID: for (int64_t i = 0; i < n; i++) o[i] = sigmoid_d(x[i]); return true;
    case LM_OP_SILU: for (int64_t i = 0; i < n; i++) o[i] = x[i] * sigmoid_d(x[i]); return true;
    case LM_OP_GELU: for (int64_t i = 0; i < n; i++) o[i] = 0.5 * x[i] * (1 + erf(x[i] * 0.70710678118654752)); return true;
    case LM_OP_GELU_TANH:
        for (int64_t i = 0; i < n; i++)
            o[i] = 0.5 * x[i] * (1 + tanh(0.79788456080286536 * (x[i] + 0.044715 * x[i] * x[i] * x[i])));
        return true;
    default: UNARY_FLOAT(double, , o, x, n, op, p, ok);
    }
    return ok;
}

static bool unary_i64(lm_op op, const lm_params *p, int64_t *o, const int64_t *x, int64_t n)
{
    switch (op) {
    case LM_OP_NEG: for (int64_t i = 0; i < n; i++) o[i] = (int64_t)(0 - (uint64_t)x[i]); break;
    case LM_OP_ABS: for (int64_t i = 0; i < n; i++) o[i] = x[i] < 0 ? (int64_t)(0 - (uint64_t)x[i]) : x[i]; break;
    case LM_OP_SIGN: for (int64_t i = 0; i < n; i++) o[i] = (x[i] > 0) - (x[i] < 0); break;
    case LM_OP_SQUARE: for (int64_t i = 0; i < n; i++) o[i] = (int64_t)((uint64_t)x[i] * (uint64_t)x[i]); break;
    case LM_OP_RELU: for (int64_t i = 0; i < n; i++) o[i] = x[i] > 0 ? x[i] : 0; break;
    case LM_OP_CLAMP: {
        int has = (int)p->i[0];
        int64_t lo = (has & 1) ? (int64_t)p->f[0] : 0, hi = (has & 2) ? (int64_t)p->f[1] : 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t v = x[i];
            if ((has & 1) && v < lo) v = lo;
            if ((has & 2) && v > hi) v = hi;
            o[i] = v;
        }
        break;
    }
    case LM_OP_FLOOR: case LM_OP_CEIL: case LM_OP_ROUND:   /* an integer is its own rounding */
        if (o != x) memcpy(o, x, (size_t)n * sizeof *o);
        break;
    default: return false;
    }
    return true;
}

/* the unary ops whose dt column is BOOL: computed in the input's type,
 * written as u8; false for an op without a case here */
#define TO_BOOL_FLOAT(T, o, x, n, op) do { \
    const T *X_ = (x); \
    switch (op) { \
    case LM_OP_ISNAN: for (int64_t i = 0; i < n; i++) o[i] = isnan(X_[i]); return true; \
    case LM_OP_ISINF: for (int64_t i = 0; i < n; i++) o[i] = isinf(X_[i]) != 0; return true; \
    case LM_OP_LOGICAL_NOT: for (int64_t i = 0; i < n; i++) o[i] = X_[i] == 0; return true; \
    default: return false; \
    } } while (0)

static bool unary_to_bool(lm_op op, lm_dtype ct, uint8_t *o, const void *xv, int64_t n)
{
    if (ct == LM_F32) TO_BOOL_FLOAT(float, o, xv, n, op);
    if (ct == LM_F64) TO_BOOL_FLOAT(double, o, xv, n, op);
    const int64_t *x = xv;
    switch (op) {
    case LM_OP_ISNAN: case LM_OP_ISINF: memset(o, 0, (size_t)n); return true;   /* an integer is neither */
    case LM_OP_LOGICAL_NOT: for (int64_t i = 0; i < n; i++) o[i] = x[i] == 0; return true;
    default: return false;
    }
}

bool lm_cpu_ew_unary(lm_op op, const lm_params *p, lm_dtype ct, void *o, const void *x, int64_t n)
{
    if (lm_op_dtype_rule_of(op) == LM_DT_BOOL) return unary_to_bool(op, ct, o, x, n);
    if (ct == LM_F32) return unary_f32(op, p, o, x, n);
    if (ct == LM_F64) return unary_f64(op, p, o, x, n);
    return unary_i64(op, p, o, x, n);
}

static bool binary_kernel(lm_op op, lm_dtype ct, void *o, const void *a, int sa, const void *b, int sb,
                          int64_t n);

/* Whether the kernels have a case for op computed in ct (F32, F64 or
 * I64): asked with n = 0, so the switches themselves answer and no
 * second list can disagree with them. */
bool lm_cpu_ew_has(lm_op op, lm_dtype ct)
{
    static const _Alignas(64) char zero[64];
    _Alignas(64) char sink[64];
    lm_params p = {0};
    switch (lm_op_class_of(op)) {
    case LM_CLASS_UNARY:
        if (op == LM_OP_COPY || op == LM_OP_CAST) return true;
        return lm_cpu_ew_unary(op, &p, ct, sink, zero, 0);
    case LM_CLASS_BINARY: return binary_kernel(op, ct, sink, zero, 1, zero, 1, 0);
    case LM_CLASS_TERNARY: return true;
    default: return false;
    }
}

/* the error of an elementwise node the kernels have no case for */
static lm_status no_kernel(const lm_array *node, lm_dtype ct)
{
    return lm_error_set(LM_ERR_UNSUPPORTED, "cpu: %s has no kernel for %s (computed in %s; result %s)",
                        lm_op_name(node->op), lm_dtype_name(node->inputs[0]->dtype), lm_dtype_name(ct),
                        lm_dtype_name(node->dtype));
}

static void unary_task(void *p, int64_t b0, int64_t e0)
{
    ew_ctx *c = p;
    lm_array *node = c->out;
    size_t osz = lm_dtype_size(node->dtype);
    _Alignas(64) char xb[BLOCK * 8], ob[BLOCK * 8];
    for (int64_t blk = b0; blk < e0; blk++) {
        int64_t b = blk * BLOCK, n = node->size - b < BLOCK ? node->size - b : BLOCK;
        char *out = (char *)lm_cpu_ptr(node) + b * (int64_t)osz;
        lm_op op = node->op;
        if (op == LM_OP_COPY || op == LM_OP_CAST) {
            const lm_array *a = c->in[0];
            lm_cpu_gather(out, node->dtype, lm_cpu_ptr(a), a->dtype, node->ndim, node->shape, c->st[0], b, n);
            continue;
        }
        int step;
        const void *x = ew_load(c, 0, b, n, xb, c->ct, &step);
        if (step == 0) {   /* a 1-element input broadcast: widen once */
            memcpy(xb, x, lm_dtype_size(c->ct));
            for (int64_t i = 1; i < n; i++) memcpy(xb + i * (int64_t)lm_dtype_size(c->ct), xb, lm_dtype_size(c->ct));
            x = xb;
        }
        if (lm_op_dtype_rule_of(op) == LM_DT_BOOL) {   /* the op table's dt column */
            (void)unary_to_bool(op, c->ct, (uint8_t *)out, x, n);   /* checked before */
            continue;
        }
        void *o = node->dtype == c->ct ? (void *)out : (void *)ob;
        (void)lm_cpu_ew_unary(op, &node->params, c->ct, o, x, n);   /* checked before */
        if (o == ob) lm_cpu_convert(out, node->dtype, ob, c->ct, (size_t)n);
    }
}

/* COPY into a strided destination (lm_array_assign): gather, then scatter. */
static void assign_task(void *p, int64_t b0, int64_t e0)
{
    ew_ctx *c = p;
    lm_array *node = c->out;
    _Alignas(64) char buf[BLOCK * 8];
    const lm_array *a = c->in[0];
    for (int64_t blk = b0; blk < e0; blk++) {
        int64_t b = blk * BLOCK, n = node->size - b < BLOCK ? node->size - b : BLOCK;
        lm_cpu_gather(buf, node->dtype, lm_cpu_ptr(a), a->dtype, node->ndim, node->shape, c->st[0], b, n);
        lm_cpu_scatter(lm_cpu_ptr(node), node->dtype, node->ndim, node->shape, node->strides, b, n, buf);
    }
}

/* an f32 or f64 op applied in place to a stretch of the output: f32 ops
 * with a register program at the table's width */
typedef struct {
    const lm_array *node;
    bool vc;
    lm_vc_prog prog;
} seg_ctx;

static void unary_seg(void *ctx, void *seg, int64_t n)
{
    const seg_ctx *c = ctx;
    if (c->vc) {
        const void *in[1] = {seg};
        lm_vm->chain(&c->prog, seg, in, n, false);
        return;
    }
    (void)lm_cpu_ew_unary(c->node->op, &c->node->params, c->node->dtype, seg, seg, n);   /* checked before */
}

/* An f16 or bf16 result of contiguous (or broadcast) float inputs runs as
 * a one-step fused group, whose register path converts in registers (F16C,
 * bf16 by shifts) and makes one pass instead of convert, op, convert. */
static bool half_via_chain(lm_device *d, lm_array *node, lm_status *st)
{
    if ((node->dtype != LM_F16 && node->dtype != LM_BF16) || node->ninputs > 3 || !lm_cpu_vc_supported(node->op))
        return false;
    for (int k = 0; k < node->ninputs; k++) {
        const lm_array *in = node->inputs[k];
        if ((in->dtype != LM_F32 && in->dtype != LM_F16 && in->dtype != LM_BF16) || !lm_array_is_contiguous(in))
            return false;
    }
    lm_fused_step step = {.op = node->op, .dtype = node->dtype, .nin = node->ninputs, .in = {0, 1, 2},
                          .params = node->params};
    lm_fused g = {.ninputs = node->ninputs, .nsteps = 1, .steps = &step};
    *st = lm_cpu_run_fused(d, &g, node);
    return true;
}

lm_status lm_cpu_run_unary(lm_device *d, lm_array *node)
{
    lm_status st;
    lm_op op = node->op;
    lm_dtype ct0 = lm_cpu_compute_type(lm_op_dtype_rule_of(op) == LM_DT_BOOL ? node->inputs[0]->dtype : node->dtype);
    if (!lm_cpu_ew_has(op, ct0)) return no_kernel(node, ct0);
    if (half_via_chain(d, node, &st)) return st;
    ew_ctx c;
    const lm_array *in = node->inputs[0];
    bool same_layout = in->dtype == node->dtype && node->offset == 0 && in->ndim == node->ndim &&
                       in->size == node->size && lm_array_is_contiguous(node);
    if ((op == LM_OP_COPY || op == LM_OP_CAST) && same_layout && lm_cpu_transpose_copy(lm_cpu_ptr(node), in))
        return LM_OK;
    /* a transposed input: transpose block by block into the output and
     * apply the op to each block while it is in cache */
    bool to_bool = lm_op_dtype_rule_of(op) == LM_DT_BOOL;   /* computes in its input's type, writes u8 */
    bool float_op = (node->dtype == LM_F32 || node->dtype == LM_F64) && !to_bool;
    if (float_op && same_layout && in->size >= 4096) {
        seg_ctx sc = {.node = node};
        sc.vc = node->dtype == LM_F32 && lm_cpu_vc_unary(&sc.prog, op, &node->params);
        if (lm_cpu_transpose_map(lm_cpu_ptr(node), in, unary_seg, &sc)) return LM_OK;
    }
    ew_setup(&c, node, lm_cpu_compute_type(to_bool ? node->inputs[0]->dtype : node->dtype));
    int64_t nblocks = (node->size + BLOCK - 1) / BLOCK;
    bool strided_out = op == LM_OP_COPY && (node->offset != 0 || !lm_array_is_contiguous(node));
    lm_cpu_parallel_for(nblocks, 8, strided_out ? assign_task : unary_task, &c);
    ew_release(&c);
    return LM_OK;
}

/* --------------------------------------------------------------- binary */

/* one loop per broadcast case so the common ones vectorize */
#define BIN(T, OT, EXPR) do { \
    const T *A = a; const T *B = bb; OT *O = o; \
    if (sa && sb) for (int64_t i = 0; i < n; i++) { T x = A[i], y = B[i]; O[i] = (EXPR); } \
    else if (sa) { T y = B[0]; for (int64_t i = 0; i < n; i++) { T x = A[i]; O[i] = (EXPR); } } \
    else if (sb) { T x = A[0]; for (int64_t i = 0; i < n; i++) { T y = B[i]; O[i] = (EXPR); } } \
    else { T x = A[0], y = B[0]; for (int64_t i = 0; i < n; i++) O[i] = (EXPR); } \
} while (0)

#define BIN_COMPARE(T) \
    case LM_OP_EQ: BIN(T, uint8_t, x == y); return true; \
    case LM_OP_NE: BIN(T, uint8_t, x != y); return true; \
    case LM_OP_LT: BIN(T, uint8_t, x < y); return true; \
    case LM_OP_LE: BIN(T, uint8_t, x <= y); return true; \
    case LM_OP_GT: BIN(T, uint8_t, x > y); return true; \
    case LM_OP_GE: BIN(T, uint8_t, x >= y); return true; \
    case LM_OP_LOGICAL_AND: BIN(T, uint8_t, x != 0 && y != 0); return true; \
    case LM_OP_LOGICAL_OR: BIN(T, uint8_t, x != 0 || y != 0); return true; \
    case LM_OP_LOGICAL_XOR: BIN(T, uint8_t, (x != 0) != (y != 0)); return true;

static inline float fmod_py_f(float x, float y)
{
    float r = fmodf(x, y);
    return r != 0 && ((r < 0) != (y < 0)) ? r + y : r;
}
static inline double fmod_py_d(double x, double y)
{
    double r = fmod(x, y);
    return r != 0 && ((r < 0) != (y < 0)) ? r + y : r;
}
/* floor(x / y) as PyTorch's div_floor: from fmod, so the quotient of
 * exactly representable operands is not rounded up across an integer */
#define FLOORDIV_FLOAT(T, SUF) \
    static inline T floordiv_##SUF(T x, T y) \
    { \
        if (y == 0) return x / y; \
        T m = fmod##SUF(x, y), q = (x - m) / y; \
        if (m != 0 && ((y < 0) != (m < 0))) q -= 1; \
        if (q == 0) return copysign##SUF(0, x / y); \
        T f = floor##SUF(q); \
        return q - f > (T)0.5 ? f + 1 : f; \
    }
FLOORDIV_FLOAT(float, f)
FLOORDIV_FLOAT(double, )

/* integer floor division, exact (Python's //); a zero divisor gives 0 and
 * raises the flag the runner turns into an error */
static _Atomic int zero_divisor;
static inline int64_t floordiv_i(int64_t x, int64_t y)
{
    if (y == 0) {
        zero_divisor = 1;
        return 0;
    }
    if (y == -1) return (int64_t)(0 - (uint64_t)x);   /* INT64_MIN // -1 wraps, as torch */
    int64_t q = x / y;
    return (x % y != 0 && ((x < 0) != (y < 0))) ? q - 1 : q;
}

static inline double logaddexp_d(double a, double b)
{
    if (a == b) return a + M_LN2;   /* equal infinities stay that infinity */
    if (a != a || b != b) return a + b;
    double m = a > b ? a : b;
    return m + log1p(exp(-fabs(a - b)));
}

static inline int64_t mod_py_i(int64_t x, int64_t y)
{
    if (y == 0) {   /* an error, as Lua's and Python's n % 0 */
        zero_divisor = 1;
        return 0;
    }
    if (y == -1) return 0;   /* avoids INT64_MIN % -1 */
    int64_t r = x % y;
    return r != 0 && ((r < 0) != (y < 0)) ? r + y : r;
}
static inline int64_t ipow(int64_t x, int64_t y)
{
    if (y < 0) return x == 1 ? 1 : x == -1 ? (y & 1 ? -1 : 1) : 0;
    uint64_t r = 1, b = (uint64_t)x;
    while (y) {
        if (y & 1) r *= b;
        b *= b;
        y >>= 1;
    }
    return (int64_t)r;
}

static bool binary_f32(lm_op op, void *o, const void *a, int sa, const void *bb, int sb, int64_t n)
{
    /* at the CPU's vector width (vmath.h), as the op table's vm column says */
    if ((unsigned)op < LM_OP_COUNT && vm2_of_op[op]) {
        lm_vm->binary[vm2_of_op[op] - 1](o, a, sa, bb, sb, n);
        return true;
    }
    switch (op) {
    case LM_OP_MOD: BIN(float, float, fmod_py_f(x, y)); return true;
    case LM_OP_FLOOR_DIVIDE: BIN(float, float, floordiv_f(x, y)); return true;
    BIN_COMPARE(float)
    default: return false;
    }
}

static bool binary_f64(lm_op op, void *o, const void *a, int sa, const void *bb, int sb, int64_t n)
{
    switch (op) {
    case LM_OP_ADD: BIN(double, double, x + y); return true;
    case LM_OP_SUB: BIN(double, double, x - y); return true;
    case LM_OP_MUL: BIN(double, double, x * y); return true;
    case LM_OP_DIV: BIN(double, double, x / y); return true;
    case LM_OP_POW: BIN(double, double, pow(x, y)); return true;
    case LM_OP_MOD: BIN(double, double, fmod_py_d(x, y)); return true;
    case LM_OP_MAXIMUM: BIN(double, double, (x > y || x != x) ? x : y); return true;
    case LM_OP_MINIMUM: BIN(double, double, (x < y || x != x) ? x : y); return true;
    case LM_OP_ATAN2: BIN(double, double, atan2(x, y)); return true;
    case LM_OP_LOGADDEXP: BIN(double, double, logaddexp_d(x, y)); return true;
    case LM_OP_HYPOT: BIN(double, double, hypot(x, y)); return true;
    case LM_OP_FLOOR_DIVIDE: BIN(double, double, floordiv_(x, y)); return true;
    BIN_COMPARE(double)
    default: return false;
    }
}

static bool binary_i64(lm_op op, void *o, const void *a, int sa, const void *bb, int sb, int64_t n)
{
    switch (op) {
    case LM_OP_ADD: BIN(int64_t, int64_t, (int64_t)((uint64_t)x + (uint64_t)y)); return true;
    case LM_OP_SUB: BIN(int64_t, int64_t, (int64_t)((uint64_t)x - (uint64_t)y)); return true;
    case LM_OP_MUL: BIN(int64_t, int64_t, (int64_t)((uint64_t)x * (uint64_t)y)); return true;
    case LM_OP_POW: BIN(int64_t, int64_t, ipow(x, y)); return true;
    case LM_OP_MOD: BIN(int64_t, int64_t, mod_py_i(x, y)); return true;
    case LM_OP_FLOOR_DIVIDE: BIN(int64_t, int64_t, floordiv_i(x, y)); return true;
    case LM_OP_MAXIMUM: BIN(int64_t, int64_t, x > y ? x : y); return true;
    case LM_OP_MINIMUM: BIN(int64_t, int64_t, x < y ? x : y); return true;
    BIN_COMPARE(int64_t)
    default: return false;
    }
}

static bool binary_kernel(lm_op op, lm_dtype ct, void *o, const void *a, int sa, const void *b, int sb,
                          int64_t n)
{
    if (ct == LM_F32) return binary_f32(op, o, a, sa, b, sb, n);
    if (ct == LM_F64) return binary_f64(op, o, a, sa, b, sb, n);
    return binary_i64(op, o, a, sa, b, sb, n);
}

bool lm_cpu_ew_binary(lm_op op, lm_dtype ct, void *o, const void *a, int sa, const void *b, int sb, int64_t n)
{
    return binary_kernel(op, ct, o, a, sa, b, sb, n);
}

static void binary_task(void *p, int64_t b0, int64_t e0)
{
    ew_ctx *c = p;
    lm_array *node = c->out;
    size_t osz = lm_dtype_size(node->dtype);
    bool to_bool = lm_op_dtype_rule_of(node->op) == LM_DT_BOOL;   /* write u8 directly */
    _Alignas(64) char ab[BLOCK * 8], bb[BLOCK * 8], ob[BLOCK * 8];
    for (int64_t blk = b0; blk < e0; blk++) {
        int64_t b = blk * BLOCK, n = node->size - b < BLOCK ? node->size - b : BLOCK;
        char *out = (char *)lm_cpu_ptr(node) + b * (int64_t)osz;
        int sa, sb;
        const void *x = ew_load(c, 0, b, n, ab, c->ct, &sa);
        const void *y = ew_load(c, 1, b, n, bb, c->ct, &sb);
        void *o = to_bool || node->dtype == c->ct ? (void *)out : (void *)ob;
        (void)binary_kernel(node->op, c->ct, o, x, sa, y, sb, n);   /* checked before */
        if (o == ob) lm_cpu_convert(out, node->dtype, ob, c->ct, (size_t)n);
    }
}

typedef struct {
    lm_op op;
    bool swap;   /* the transposed operand is the second */
} pair_ctx;

static void binary_pair(void *ctx, void *o, const void *x, const void *y, int64_t n)
{
    const pair_ctx *c = ctx;
    if (c->swap) (void)binary_f32(c->op, o, y, 1, x, 1, n);
    else (void)binary_f32(c->op, o, x, 1, y, 1, n);
}

lm_status lm_cpu_run_binary(lm_device *d, lm_array *node)
{
    lm_status st;
    lm_dtype ct0 = lm_cpu_compute_type(node->inputs[0]->dtype);
    if (!lm_cpu_ew_has(node->op, ct0)) return no_kernel(node, ct0);
    if (half_via_chain(d, node, &st)) return st;
    /* a transposed operand, the other transposed alike or row-major: by
     * tiles in cache (no staged copies) */
    const lm_array *a = node->inputs[0], *b = node->inputs[1];
    if (node->dtype == LM_F32 && a->dtype == LM_F32 && b->dtype == LM_F32 && a->ndim == node->ndim &&
        a->size == node->size && node->size >= 4096) {
        pair_ctx pc = {node->op, lm_array_is_contiguous(a)};
        if (pc.swap && lm_cpu_transpose_map2(lm_cpu_ptr(node), b, a, binary_pair, &pc)) return LM_OK;
        if (!pc.swap && lm_cpu_transpose_map2(lm_cpu_ptr(node), a, b, binary_pair, &pc)) return LM_OK;
    }
    ew_ctx c;
    ew_setup(&c, node, lm_cpu_compute_type(node->inputs[0]->dtype));
    zero_divisor = 0;
    lm_cpu_parallel_for((node->size + BLOCK - 1) / BLOCK, 8, binary_task, &c);
    ew_release(&c);
    if (zero_divisor && node->op == LM_OP_FLOOR_DIVIDE)   /* PyTorch: ZeroDivisionError */
        return lm_error_set(LM_ERR_ARG, "floor_divide: integer division by zero (%s)",
                            lm_dtype_name(node->inputs[0]->dtype));
    if (zero_divisor && node->op == LM_OP_MOD)            /* Python: integer modulo by zero */
        return lm_error_set(LM_ERR_ARG, "mod: integer modulo by zero (%s)",
                            lm_dtype_name(node->inputs[0]->dtype));
    return LM_OK;
}

/* ---------------------------------------------------------------- where */

static void where_task(void *p, int64_t b0, int64_t e0)
{
    ew_ctx *c = p;
    lm_array *node = c->out;
    size_t esz = lm_dtype_size(node->dtype);
    _Alignas(64) char cb[BLOCK], ab[BLOCK * 8], bb[BLOCK * 8];
    for (int64_t blk = b0; blk < e0; blk++) {
        int64_t b = blk * BLOCK, n = node->size - b < BLOCK ? node->size - b : BLOCK;
        char *out = (char *)lm_cpu_ptr(node) + b * (int64_t)esz;
        int s0, s1, s2;
        const uint8_t *cond = ew_load(c, 0, b, n, cb, LM_BOOL, &s0);
        const char *x = ew_load(c, 1, b, n, ab, node->dtype, &s1);
        const char *y = ew_load(c, 2, b, n, bb, node->dtype, &s2);
        for (int64_t i = 0; i < n; i++) {
            const char *src = cond[i * s0] ? x + i * s1 * (int64_t)esz : y + i * s2 * (int64_t)esz;
            memcpy(out + i * (int64_t)esz, src, esz);
        }
    }
}

lm_status lm_cpu_run_where(lm_device *d, lm_array *node)
{
    (void)d;
    ew_ctx c;
    ew_setup(&c, node, node->dtype);
    lm_cpu_parallel_for((node->size + BLOCK - 1) / BLOCK, 8, where_task, &c);
    ew_release(&c);
    return LM_OK;
}

/* ------------------------------------------------------------- creation */

static void create_task(void *p, int64_t b0, int64_t e0)
{
    lm_array *node = p;
    const lm_params *pr = &node->params;
    size_t esz = lm_dtype_size(node->dtype);
    lm_key key = {{(uint32_t)pr->i[0], (uint32_t)pr->i[1]}};
    double vals[BLOCK];
    for (int64_t blk = b0; blk < e0; blk++) {
        int64_t b = blk * BLOCK, n = node->size - b < BLOCK ? node->size - b : BLOCK;
        for (int64_t i = 0; i < n; i++) {
            int64_t k = b + i;
            switch (node->op) {
            case LM_OP_FULL: vals[i] = pr->f[0]; break;
            case LM_OP_ARANGE: vals[i] = pr->f[0] + (double)k * pr->f[1]; break;
            case LM_OP_LINSPACE: {
                int64_t cnt = node->size;
                vals[i] = cnt == 1 ? pr->f[0]
                        : k == cnt - 1 ? pr->f[1]
                        : pr->f[0] + (pr->f[1] - pr->f[0]) * ((double)k / (double)(cnt - 1));
                break;
            }
            case LM_OP_EYE: {
                int64_t m = node->shape[1];
                vals[i] = (k % m) - (k / m) == pr->i[0];
                break;
            }
            case LM_OP_RANDOM_UNIFORM:
                vals[i] = pr->f[0] + (pr->f[1] - pr->f[0]) * (double)lm_random_uniform01(&key, (uint64_t)k);
                break;
            case LM_OP_RANDOM_NORMAL:
                vals[i] = pr->f[0] + pr->f[1] * (double)lm_random_normal01(&key, (uint64_t)k);
                break;
            default: vals[i] = 0; break;
            }
        }
        lm_convert((char *)lm_cpu_ptr(node) + b * (int64_t)esz, node->dtype, vals, LM_F64, (size_t)n);
    }
}

lm_status lm_cpu_run_create(lm_device *d, lm_array *node)
{
    (void)d;
    lm_cpu_parallel_for((node->size + BLOCK - 1) / BLOCK, 4, create_task, node);
    return LM_OK;
}
