/* test_vulkan_parity.c - every op on Vulkan against the CPU backend.
 *
 * In the spirit of ggml's test-backend-ops: each case builds the same graph
 * on both devices from the same input data (views included: transposes,
 * negative-step slices, broadcasts), evaluates, and compares by normalised
 * mean squared error with a threshold per dtype and op; NaN and Inf must sit
 * at the same positions, and integer results must agree exactly.  Guard
 * arrays allocated around each Vulkan result must keep their contents (the
 * allocator places them next to it).  All failures are listed before the
 * test fails.  Runs on lavapipe in `make test` (LUMEN_DEVICE is ignored:
 * the first Vulkan device is used); skipped when there is none.
 * Under LUMEN_VK_VALIDATE=1 any validation-layer message fails the run. */
#include "testutil.h"
#ifdef LM_HAVE_VULKAN

#include "parity/parity.h"

typedef struct { lm_op op; view_kind view; lm_dtype dt; } uctx;

static lm_array *b_unary(lm_array **in, const void *p)
{
    const uctx *c = p;
    lm_array *v = apply_view(in[0], c->view);
    lm_array *r = c->op == LM_OP_CAST ? lm_cast(v, c->dt)
                : c->op == LM_OP_CLAMP ? lm_clamp(v, -0.5, 1.25) : lm_unary(c->op, v);
    lm_array_release(v);
    return r;
}

/* the op table's v64 column (core/op.h): whose GLSL f64 form is exactly
 * rounded */
#define VK_V64(name, cls, ar, dt, bl, gr, vm, vk_, v64) [LM_OP_##name] = v64,
static const bool f64_exact[LM_OP_COUNT] = {LM_OPS(VK_V64)};
#undef VK_V64

/* a loose threshold: results that are not exactly rounded on one side.
 * Elementwise ops: those whose GLSL f64 form is not exact (the v64 column),
 * and f32 sqrt and rsqrt (not correctly rounded in GLSL) */
static bool transcendental(lm_op op)
{
    lm_op_class cls = lm_op_class_of(op);
    if (cls == LM_CLASS_UNARY || cls == LM_CLASS_BINARY)
        return !f64_exact[op] || op == LM_OP_SQRT || op == LM_OP_RSQRT;
    return op == LM_OP_LOGSUMEXP || op == LM_OP_STD;
}

/* the unary and binary ops of the table, in its order (cast has its own
 * test): every one, so an op added to the table is compared here too */
static lm_op float_unary[LM_OP_COUNT], all_binary[LM_OP_COUNT];
static size_t n_unary, n_binary;
static void list_ops(void)
{
    n_unary = n_binary = 0;
    for (int op = 0; op < LM_OP_COUNT; op++) {
        lm_op_class cls = lm_op_class_of((lm_op)op);
        if (cls == LM_CLASS_UNARY && op != LM_OP_CAST) float_unary[n_unary++] = (lm_op)op;
        if (cls == LM_CLASS_BINARY) all_binary[n_binary++] = (lm_op)op;
    }
}

static void test_unary(void **state)
{
    (void)state;
    const lm_dtype dts[] = {LM_F32, LM_F16, LM_BF16};
    int64_t shape[2] = {7, 33};
    list_ops();
    for (size_t t = 0; t < sizeof dts / sizeof *dts; t++) {
        lm_array *x = data(2, shape, dts[t], -4, 4, SPECIALS);
        for (size_t k = 0; k < n_unary; k++) {
            for (int v = V_NONE; v <= V_NEG; v++) {
                if (v != V_NONE && k % 3 != (size_t)v % 3) continue;   /* views on a third of the ops */
                uctx c = {float_unary[k], (view_kind)v, LM_F32};
                char what[96];
                snprintf(what, sizeof what, "%s %s[7,33]%s", lm_op_name(c.op), lm_dtype_name(dts[t]), view_name[v]);
                run_case(what, 1, &x, b_unary, &c, thr_for(dts[t], transcendental(c.op)));
            }
        }
        lm_array_release(x);
    }
}

static void test_unary_int_f64(void **state)
{
    (void)state;
    int64_t shape[2] = {5, 19};
    const lm_op iops[] = {LM_OP_NEG, LM_OP_ABS, LM_OP_SIGN, LM_OP_SQUARE, LM_OP_CLAMP, LM_OP_COPY,
                          LM_OP_LOGICAL_NOT};
    const lm_dtype its[] = {LM_I32, LM_I64, LM_I8, LM_I16, LM_U8};
    for (size_t t = 0; t < sizeof its / sizeof *its; t++) {
        lm_array *x = data(2, shape, its[t], its[t] == LM_U8 ? 0 : -100, 100, 0);
        for (size_t k = 0; k < sizeof iops / sizeof *iops; k++) {
            uctx c = {iops[k], (view_kind)(k % 4), LM_F32};
            char what[96];
            snprintf(what, sizeof what, "%s %s%s", lm_op_name(c.op), lm_dtype_name(its[t]), view_name[c.view]);
            run_case(what, 1, &x, b_unary, &c, 0);
        }
        lm_array_release(x);
    }
    /* f64: the ops that are exact in double */
    const lm_op dops[] = {LM_OP_NEG, LM_OP_ABS, LM_OP_SQRT, LM_OP_SQUARE, LM_OP_RECIPROCAL,
                          LM_OP_FLOOR, LM_OP_ROUND, LM_OP_ISNAN, LM_OP_CLAMP, LM_OP_RELU};
    lm_array *x = data(2, shape, LM_F64, -4, 4, SPECIALS);
    for (size_t k = 0; k < sizeof dops / sizeof *dops; k++) {
        uctx c = {dops[k], (view_kind)(k % 4), LM_F32};
        char what[96];
        snprintf(what, sizeof what, "%s f64%s", lm_op_name(c.op), view_name[c.view]);
        run_case(what, 1, &x, b_unary, &c, thr_for(LM_F64, false));
    }
    lm_array_release(x);
}

static void test_cast(void **state)
{
    (void)state;
    int64_t shape[2] = {3, 41};
    for (int s = 0; s < LM_DTYPE_COUNT; s++) {
        lm_array *x = data(2, shape, (lm_dtype)s, s == LM_U8 || s == LM_BOOL ? 0 : -300, 300,
                           SPECIALS);
        for (int t = 0; t < LM_DTYPE_COUNT; t++) {
            if (s == t) continue;
            uctx c = {LM_OP_CAST, (view_kind)((s + t) % 4), (lm_dtype)t};
            char what[96];
            snprintf(what, sizeof what, "cast %s->%s%s", lm_dtype_name((lm_dtype)s),
                     lm_dtype_name((lm_dtype)t), view_name[c.view]);
            run_case(what, 1, &x, b_unary, &c, thr_for((lm_dtype)t, false));
        }
        lm_array_release(x);
    }
}

/* ---- binary ---- */
typedef struct { lm_op op; int bcast; } bctx;

static lm_array *slice2(lm_array *a, int64_t r0, int64_t r1, int64_t c0, int64_t c1)
{
    lm_array *t = lm_slice(a, 0, r0, r1, 1);
    lm_array *r = lm_slice(t, 1, c0, c1, 1);
    lm_array_release(t);
    return r;
}

static lm_array *b_binary(lm_array **in, const void *p)
{
    const bctx *c = p;
    lm_array *a, *b;
    if (c->bcast == 1) {            /* [5,1] op [1,7]: both broadcast */
        a = slice2(in[0], 0, 5, 0, 1);
        b = slice2(in[1], 0, 1, 0, 7);
    } else if (c->bcast == 2) {     /* a transposed view op a row: [17,9] op [1,9] */
        a = lm_transpose(in[0], 0, 1);
        b = slice2(in[1], 0, 1, 0, 9);
    } else {
        a = lm_array_retain(in[0]);
        b = lm_array_retain(in[1]);
    }
    lm_array *r = lm_binary(c->op, a, b);
    lm_array_release(a);
    lm_array_release(b);
    return r;
}

static void test_binary(void **state)
{
    (void)state;
    const lm_dtype dts[] = {LM_F32, LM_F16, LM_BF16, LM_F64, LM_I32, LM_I64, LM_U8};
    int64_t shape[2] = {9, 17};
    list_ops();
    for (size_t t = 0; t < sizeof dts / sizeof *dts; t++) {
        lm_dtype dt = dts[t];
        lm_array *in[2] = {data(2, shape, dt, dt == LM_U8 ? 0 : -5, 5, SPECIALS),
                           data(2, shape, dt, dt == LM_U8 ? 1 : -5, 5, 0)};
        for (size_t k = 0; k < n_binary; k++) {
            lm_op op = all_binary[k];
            if (dt == LM_F64 && !f64_exact[op]) continue;   /* not exact on GPUs: the CPU runs it */
            /* an integer zero divisor is an error, so integer // and % run on the
             * CPU (test_ops_all and test_ops_added.lua check them) */
            if ((op == LM_OP_FLOOR_DIVIDE || op == LM_OP_MOD) && !lm_dtype_is_float(dt)) continue;
            for (int bc = 0; bc < 3; bc++) {
                bctx c = {op, bc};
                char what[96];
                snprintf(what, sizeof what, "%s %s%s", lm_op_name(op), lm_dtype_name(dt),
                         bc == 1 ? " [5,1]x[1,7]" : bc == 2 ? " T[17,9]x[1,9]" : " [9,17]");
                lm_op_dtype_rule rule = lm_op_dtype_rule_of(op);   /* the op table's dt column */
                lm_dtype od = rule == LM_DT_BOOL ? LM_BOOL : rule == LM_DT_FLOAT && !lm_dtype_is_float(dt) ? LM_F32 : dt;
                run_case(what, 2, in, b_binary, &c, thr_for(od, transcendental(op) || op == LM_OP_DIV || op == LM_OP_MOD));
            }
        }
        lm_array_release(in[0]);
        lm_array_release(in[1]);
    }
}

static lm_array *b_where(lm_array **in, const void *p)
{
    (void)p;
    lm_array *c = lm_binary_scalar(LM_OP_GT, in[0], 0.0, false);
    lm_array *bt = lm_transpose(in[2], 0, 1);
    lm_array *r = lm_where(c, in[1], bt);
    lm_array_release(c); lm_array_release(bt);
    return r;
}

static void test_where(void **state)
{
    (void)state;
    int64_t s[2] = {6, 6};
    const lm_dtype dts[] = {LM_F32, LM_I64, LM_F16, LM_BOOL};
    for (size_t t = 0; t < sizeof dts / sizeof *dts; t++) {
        lm_array *in[3] = {data(2, s, LM_F32, -1, 1, 0), data(2, s, dts[t], 0, 9, SPECIALS),
                           data(2, s, dts[t], -9, 0, 0)};
        char what[64];
        snprintf(what, sizeof what, "where %s", lm_dtype_name(dts[t]));
        run_case(what, 3, in, b_where, NULL, thr_for(dts[t], false));
        for (int k = 0; k < 3; k++) lm_array_release(in[k]);
    }
}

/* ---- the elementwise vector path (eltwise.glsl's VEC) ----
 * Flat ops over f16/bf16 (8 elements a 16-byte load), f32, mixes of them,
 * broadcast scalars (stride 0, read once), casts and raw 16-byte copies,
 * at lengths with and without a tail past the last whole unit, and at an
 * offset where 16-byte loads cannot start (the scalar path).  The exactly
 * rounded ops must give the CPU's bits (threshold 0: f32 arithmetic, one
 * rounding on store on both sides). */
typedef struct { int kind; lm_dtype dt; int64_t start; } vctx;

static lm_array *b_vec(lm_array **in, const void *p)
{
    const vctx *c = p;
    int64_t n = in[0]->shape[0];
    lm_array *a = lm_slice(in[0], 0, c->start, n, 1), *b = lm_slice(in[1], 0, c->start, n, 1), *r = NULL;
    switch (c->kind) {
    case 0: r = lm_binary_scalar(LM_OP_MUL, a, 2.0, false); break;          /* w * 2 */
    case 1: r = lm_binary_scalar(LM_OP_SUB, a, 0.3, true); break;           /* 0.3 - w */
    case 2: r = lm_binary(LM_OP_ADD, a, b); break;
    case 3: r = lm_unary(LM_OP_NEG, a); break;
    case 4: r = lm_cast(a, c->dt); break;
    case 5: {                                                               /* copies: concat's moves */
        lm_array *parts[3] = {a, b, a};
        r = lm_concat(3, parts, 0);
        break;
    }
    case 6: {                                                               /* f16 * an f32 scalar tensor */
        lm_array *s = lm_scalar(1.7, LM_F32, a->device);
        r = lm_binary(LM_OP_MUL, a, s);
        lm_array_release(s);
        break;
    }
    case 7: r = lm_unary(LM_OP_EXP, a); break;
    case 8: r = lm_binary(LM_OP_MAXIMUM, b, a); break;
    }
    lm_array_release(a);
    lm_array_release(b);
    return r;
}

static void test_eltwise_vec(void **state)
{
    (void)state;
    const lm_dtype dts[] = {LM_F16, LM_BF16, LM_F32};
    const char *kn[] = {"w * 2", "0.3 - w", "a + b", "-w", "cast", "concat (copies)", "w * f32 scalar", "exp", "max(b, a)"};
    const int64_t lens[] = {1011, 1032, 19};   /* from 8: tails of 3, 0 and 3 (11 elements, one unit) */
    const int64_t starts[] = {8, 1};
    for (size_t t = 0; t < sizeof dts / sizeof *dts; t++)
        for (size_t l = 0; l < sizeof lens / sizeof *lens; l++) {
            lm_array *in[2] = {data(1, &lens[l], dts[t], -4, 4, SPECIALS), data(1, &lens[l], dts[t], -4, 4, 0)};
            for (size_t s = 0; s < sizeof starts / sizeof *starts; s++)
                for (int k = 0; k < 9; k++) {
                    int ncast = k == 4 ? 3 : 1;
                    for (int ci = 0; ci < ncast; ci++) {
                        const lm_dtype to[3] = {LM_F32, LM_F16, LM_BF16};
                        lm_dtype ct = to[ci] == dts[t] ? LM_F32 : to[ci];
                        if (k == 4 && ci && to[ci] == dts[t]) continue;
                        vctx c = {k, ct, starts[s]};
                        char what[96];
                        snprintf(what, sizeof what, "vec %s %s%s%s [%lld from %lld]", kn[k], lm_dtype_name(dts[t]),
                                 k == 4 ? "->" : "", k == 4 ? lm_dtype_name(ct) : "", (long long)lens[l],
                                 (long long)starts[s]);
                        run_case(what, 2, in, b_vec, &c, k == 7 ? thr_for(dts[t], true) : 0);
                    }
                }
            lm_array_release(in[0]);
            lm_array_release(in[1]);
        }
}

/* ---- the vector path along rows (eltwise.glsl's VEC over NDIM > 1) ----
 * Ops whose operands are 16-byte units along the inner collapsed dim, with
 * any outer strides: a bias over rows ([3,5,16] + [16]), a scalar over each
 * row ([3,5,16] * [3,5,1]), a column of rows ([3,5,16] - [5,1]), the
 * product of two column halves of one [4,32] tensor (GEGLU's views), a
 * head copy ([2,8,3,16] permuted (0,2,1,3) then contiguous: raw moves of
 * the inner dim), an f16 tensor plus an f32 bias (two loads a unit), rows
 * 1..4 of each [5,n] (exp: outer stride 5n), x reversed on its first axis
 * plus a bias (a negative outer stride), and cases that must take the
 * scalar path: an inner extent that is not a multiple of the unit (12 and
 * 10: f32 takes 12) and an offset where no unit starts aligned (columns
 * 1..9 or 1..57 of each row: whole units from an odd start).  Exact ops at
 * threshold 0. */
typedef struct { int kind; lm_dtype dt; } rowctx;

static lm_array *b_rows(lm_array **in, const void *p)
{
    const rowctx *c = p;
    lm_array *x = in[0], *r = NULL;
    switch (c->kind) {
    case 0: {                                                               /* x + bias [16] */
        lm_array *b = lm_slice(in[1], 0, 0, 1, 1), *b1 = lm_slice(b, 1, 0, 1, 1);
        lm_array *bias = lm_reshape(b1, 1, &x->shape[2]);
        r = lm_binary(LM_OP_ADD, x, bias);
        lm_array_release(b); lm_array_release(b1); lm_array_release(bias);
        break;
    }
    case 1: {                                                               /* x * [3,5,1] */
        lm_array *s = lm_slice(in[1], 2, 3, 4, 1);
        r = lm_binary(LM_OP_MUL, x, s);
        lm_array_release(s);
        break;
    }
    case 2: {                                                               /* x - [5,1] */
        lm_array *b = lm_slice(in[1], 0, 1, 2, 1), *s = lm_slice(b, 2, 5, 6, 1);
        int64_t sh[2] = {x->shape[1], 1};
        lm_array *col = lm_reshape(s, 2, sh);
        r = lm_binary(LM_OP_SUB, x, col);
        lm_array_release(b); lm_array_release(s); lm_array_release(col);
        break;
    }
    case 3: {                                                               /* halves of [4,32] */
        int64_t sh[2] = {4, 32};
        lm_array *f = lm_flatten(in[0], 0, 2);
        lm_array *f128 = lm_slice(f, 0, 0, 128, 1);
        lm_array *m = lm_reshape(f128, 2, sh);
        lm_array *h0 = lm_slice(m, 1, 0, 16, 1), *h1 = lm_slice(m, 1, 16, 32, 1);
        r = lm_binary(LM_OP_MUL, h0, h1);
        lm_array_release(f); lm_array_release(f128); lm_array_release(m);
        lm_array_release(h0); lm_array_release(h1);
        break;
    }
    case 4: {                                                               /* head copy */
        int64_t sh[4] = {2, 8, 3, 16};
        lm_array *f = lm_flatten(in[0], 0, 2);
        lm_array *f768 = lm_slice(f, 0, 0, 768, 1);
        lm_array *m = lm_reshape(f768, 4, sh);
        const int perm[4] = {0, 2, 1, 3};
        lm_array *t = lm_permute(m, perm);
        r = lm_contiguous(t);
        lm_array_release(f); lm_array_release(f768); lm_array_release(m); lm_array_release(t);
        break;
    }
    case 5: {                                                               /* x + an f32 bias */
        lm_array *b = lm_slice(in[1], 0, 0, 1, 1), *b1 = lm_slice(b, 1, 0, 1, 1);
        lm_array *bias = lm_reshape(b1, 1, &x->shape[2]), *bf = lm_cast(bias, LM_F32);
        r = lm_binary(LM_OP_ADD, x, bf);
        lm_array_release(b); lm_array_release(b1); lm_array_release(bias); lm_array_release(bf);
        break;
    }
    case 6: {                                                               /* columns 1..9 or 1..57 */
        int64_t e = 1 + (x->shape[2] - 1) / 8 * 8;
        lm_array *a = lm_slice(x, 2, 1, e, 1), *b = lm_slice(in[1], 2, 1, e, 1);
        r = lm_binary(LM_OP_ADD, a, b);
        lm_array_release(a); lm_array_release(b);
        break;
    }
    case 8: {                                                               /* x reversed on axis 0 + bias */
        lm_array *v = lm_slice(x, 0, x->shape[0] - 1, -x->shape[0] - 1, -1);
        lm_array *b = lm_slice(in[1], 0, 0, 1, 1), *b1 = lm_slice(b, 1, 0, 1, 1);
        lm_array *bias = lm_reshape(b1, 1, &x->shape[2]);
        r = lm_binary(LM_OP_ADD, v, bias);
        lm_array_release(v); lm_array_release(b); lm_array_release(b1); lm_array_release(bias);
        break;
    }
    case 7: {                                                               /* exp of rows: a unary op */
        lm_array *a = lm_slice(x, 1, 1, 4, 1);
        r = lm_unary(LM_OP_EXP, a);
        lm_array_release(a);
        break;
    }
    }
    return r;
}

static void test_eltwise_rows(void **state)
{
    (void)state;
    const lm_dtype dts[] = {LM_F16, LM_BF16, LM_F32};
    const char *kn[] = {"x + bias", "x * [3,5,1]", "x - [5,1]", "halves of [4,32]", "head copy", "x + f32 bias",
                        "cols 1.. (unaligned)", "exp of rows 1..4", "reversed x + bias"};
    const int64_t inner[] = {16, 12, 10, 64};   /* 64: 960 elements, room for kinds 3 and 4's views */
    for (size_t t = 0; t < sizeof dts / sizeof *dts; t++)
        for (size_t l = 0; l < sizeof inner / sizeof *inner; l++) {
            int64_t sh[3] = {3, 5, inner[l]};
            lm_array *in[2] = {data(3, sh, dts[t], -4, 4, SPECIALS), data(3, sh, dts[t], -4, 4, 0)};
            for (int k = 0; k < 9; k++) {
                if ((k == 3 || k == 4) && inner[l] != 64) continue;
                if (k == 5 && dts[t] == LM_F32) continue;
                rowctx c = {k, dts[t]};
                char what[96];
                snprintf(what, sizeof what, "rows %s %s [3,5,%lld]", kn[k], lm_dtype_name(dts[t]),
                         (long long)in[0]->shape[2]);
                run_case(what, 2, in, b_rows, &c, k == 7 ? thr_for(dts[t], true) : 0);
            }
            lm_array_release(in[0]);
            lm_array_release(in[1]);
        }
}

/* ---- reductions ---- */
typedef struct { lm_op op; int naxes; int axes[3]; bool keep; bool view; } rctx;

static lm_array *b_reduce(lm_array **in, const void *p)
{
    const rctx *c = p;
    lm_array *x = c->view ? lm_transpose(in[0], 0, 2) : lm_array_retain(in[0]);
    lm_array *r;
    if (c->op == LM_OP_VAR || c->op == LM_OP_STD)
        r = c->op == LM_OP_VAR ? lm_var(x, c->naxes, c->axes, 1, c->keep) : lm_std(x, c->naxes, c->axes, 0, c->keep);
    else if (c->op == LM_OP_ARGMAX || c->op == LM_OP_ARGMIN)
        r = lm_argreduce(c->op, x, c->naxes ? c->axes[0] : LM_AXIS_ALL, c->keep);
    else if (c->op == LM_OP_CUMSUM)
        r = lm_cumsum(x, c->axes[0]);
    else
        r = lm_reduce(c->op, x, c->naxes, c->axes, c->keep);
    lm_array_release(x);
    return r;
}

static void test_reduce(void **state)
{
    (void)state;
    const lm_op ops[] = {LM_OP_SUM, LM_OP_MEAN, LM_OP_PROD, LM_OP_MAX, LM_OP_MIN, LM_OP_VAR,
                         LM_OP_STD, LM_OP_LOGSUMEXP, LM_OP_ALL, LM_OP_ANY, LM_OP_ARGMAX,
                         LM_OP_ARGMIN, LM_OP_CUMSUM};
    const rctx shapes[] = {
        {0, 1, {2}, false, false}, {0, 1, {0}, true, false}, {0, 2, {0, 2}, false, true},
        {0, 0, {0}, false, false}, {0, 1, {1}, false, true},
    };
    const lm_dtype dts[] = {LM_F32, LM_F16, LM_F64, LM_I32};
    int64_t shape[3] = {5, 6, 130};   /* 130: a long row for the workgroup path */
    for (size_t t = 0; t < sizeof dts / sizeof *dts; t++) {
        lm_array *x = data(3, shape, dts[t], dts[t] == LM_I32 ? -3 : 0.5, dts[t] == LM_I32 ? 4 : 1.5, 0);
        for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
            for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
                rctx c = shapes[s];
                c.op = ops[k];
                if ((c.op == LM_OP_ARGMAX || c.op == LM_OP_ARGMIN || c.op == LM_OP_CUMSUM) && c.naxes > 1) continue;
                if (c.op == LM_OP_CUMSUM && c.naxes == 0) continue;
                if (dts[t] == LM_F64 && c.op == LM_OP_LOGSUMEXP) continue;
                char what[96];
                snprintf(what, sizeof what, "%s %s axes#%zu%s", lm_op_name(c.op), lm_dtype_name(dts[t]), s,
                         c.view ? " transposed" : "");
                lm_dtype od = dts[t] == LM_I32 && c.op != LM_OP_MAX && c.op != LM_OP_MIN ? LM_F32 : dts[t];
                double thr = c.op == LM_OP_PROD ? 1e-8 : thr_for(od, true) * 10;
                if (dts[t] == LM_F16) thr = 1e-5;
                run_case(what, 1, &x, b_reduce, &c, thr);
            }
        }
        lm_array_release(x);
    }
    /* NaN handling: max/min/argmax propagate NaN as the CPU does */
    lm_array *y = data(3, shape, LM_F32, -1, 1, SPECIALS);
    const lm_op nops[] = {LM_OP_MAX, LM_OP_MIN, LM_OP_ARGMAX, LM_OP_ARGMIN, LM_OP_SUM, LM_OP_LOGSUMEXP};
    for (size_t k = 0; k < sizeof nops / sizeof *nops; k++) {
        rctx c = {nops[k], 1, {2}, false, false};
        char what[96];
        snprintf(what, sizeof what, "%s f32 with NaN/Inf", lm_op_name(c.op));
        run_case(what, 1, &y, b_reduce, &c, 1e-9);
    }
    lm_array_release(y);
}

/* ---- matmul ---- */
typedef struct { int64_t m, k, n, batch; bool ta, tb; } mctx;

/* a case's two operands in dt: A [batch,] M x K (stored K x M where ta),
 * B [1,] K x N (stored N x K where tb; batched: broadcast over A's batch) */
static void mm_inputs(const mctx *c, lm_dtype dt, lm_array *in[2])
{
    int64_t sa[3] = {c->batch, c->ta ? c->k : c->m, c->ta ? c->m : c->k};
    int64_t sb[3] = {c->batch ? 1 : 0, c->tb ? c->n : c->k, c->tb ? c->k : c->n};
    int na = c->batch ? 3 : 2;
    in[0] = data(na, c->batch ? sa : sa + 1, dt, -1, 1, 0);
    in[1] = data(na, c->batch ? sb : sb + 1, dt, -1, 1, 0);
}

static lm_array *b_matmul(lm_array **in, const void *p)
{
    const mctx *c = p;
    lm_array *a = c->ta ? lm_transpose(in[0], -1, -2) : lm_array_retain(in[0]);
    lm_array *b = c->tb ? lm_transpose(in[1], -1, -2) : lm_array_retain(in[1]);
    lm_array *r = lm_matmul(a, b);
    lm_array_release(a); lm_array_release(b);
    return r;
}

static void test_matmul(void **state)
{
    (void)state;
    const mctx cs[] = {
        {1, 1, 1, 0, false, false}, {7, 5, 3, 0, false, false}, {33, 17, 65, 0, true, false},
        {64, 64, 64, 0, false, true}, {130, 70, 129, 0, true, true}, {5, 9, 4, 3, false, false},
        {1, 300, 1, 0, false, false},
        /* past one 128x128x32 tile of the cooperative-matrix kernel, with
         * edges in every dim; K a multiple of 8 (16-byte loads) or not */
        {129, 77, 65, 0, false, false}, {129, 77, 65, 2, false, false},
        {129, 72, 136, 0, false, false}, {96, 136, 80, 0, true, true},
        {257, 40, 130, 0, false, true}, {200, 264, 72, 3, false, false},
        /* the 128x256 / 256x128 tiles (depth 16): edges past a second
         * tile, whole tiles (no bounds checks), transposed, batched */
        {300, 48, 520, 0, false, false}, {256, 64, 256, 0, false, false},
        {264, 40, 272, 2, true, true}, {136, 24, 260, 0, true, false},
        /* the f32-arithmetic tiles (LUMEN_VK_MM_F32: 128x128 to 256x128,
         * depth 8 or 16): K odd (element loads), whole tiles of every
         * shape (no bounds checks), batched */
        {260, 77, 264, 2, false, true}, {512, 32, 512, 2, false, false},
        /* 256 tiles of 128x128: the default tile for big grids (t128) */
        {256, 8, 256, 64, false, false},
        /* the cooperative-matrix-2 kernel (matmul_cm2.c, 16-byte aligned
         * bases): K = 1, batched; whole BK steps unrolled, then single
         * steps, then a clamped tail, in interior and edge tiles */
        {77, 1, 51, 0, false, false}, {40, 1, 24, 3, false, true},
        {264, 328, 136, 0, true, true}, {256, 328, 256, 2, false, false},
    };
    const lm_dtype dts[] = {LM_F32, LM_F16, LM_BF16};
    for (size_t t = 0; t < sizeof dts / sizeof *dts; t++)
        for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
            const mctx *c = &cs[i];
            lm_array *in[2];
            mm_inputs(c, dts[t], in);
            char what[96];
            snprintf(what, sizeof what, "matmul %s %lldx%lldx%lld%s%s%s", lm_dtype_name(dts[t]),
                     (long long)c->m, (long long)c->k, (long long)c->n, c->ta ? " A^T" : "",
                     c->tb ? " B^T" : "", c->batch ? " batched+broadcast" : "");
            double thr = dts[t] == LM_F32 ? 1e-10 : dts[t] == LM_F16 ? 1e-6 : 1e-4;
            run_case(what, 2, in, b_matmul, c, thr);
            lm_array_release(in[0]);
            lm_array_release(in[1]);
        }
}

/* few rows (matmul_gemv.c: at most 8 rows of one image's part): M 1, 2, 3
 * and 8; K and N odd and not multiples of 8; B stored [k][n] and [n][k] (a
 * linear's weight, B^T); A transposed; odd offsets (no vector loads);
 * batched with B broadcast (8 rows a workgroup across the entries) or
 * batched too; K long enough for split-K parts in both layouts
 * (lm_vk_gemv_part_k: [k][n] from 128; [n][k] takes one part, so its
 * split is the forced pass's); then under
 * LUMEN_VK_GEMV=1 rows past 8 (several row groups an entry) and 3 forced
 * parts.  f32, f16 and bf16. */
typedef struct { int64_t m, k, n, batch; bool ta, tb, bb, sl; } gctx;

/* bb: B batched too (else broadcast over the batch); sl: both inputs
 * stored one element wider along their last axis and sliced from 1 (odd
 * offsets: no vector loads) */
static lm_array *b_gemv(lm_array **in, const void *p)
{
    const gctx *c = p;
    lm_array *sl[2];
    for (int i = 0; i < 2; i++)
        sl[i] = c->sl ? lm_slice(in[i], -1, 1, in[i]->shape[in[i]->ndim - 1], 1) : lm_array_retain(in[i]);
    mctx mc = {c->m, c->k, c->n, c->batch, c->ta, c->tb};
    lm_array *r = b_matmul(sl, &mc);
    lm_array_release(sl[0]);
    lm_array_release(sl[1]);
    return r;
}

static void test_matmul_gemv(void **state)
{
    (void)state;
    const gctx cs[] = {
        {1, 77, 51, 0, false, false, false, false}, {1, 77, 51, 0, false, true, false, false}, {2, 301, 33, 0, false, false, false, false},
        {2, 301, 33, 0, false, true, false, false}, {3, 64, 40, 0, false, true, false, false}, {3, 129, 257, 0, true, false, false, false},
        {8, 200, 67, 0, false, true, false, false}, {8, 33, 300, 0, false, false, false, false}, {1, 1, 9, 0, false, false, false, false},
        {1, 9, 1, 0, false, true, false, false}, {1, 77, 51, 0, false, true, false, true},
        {3, 130, 21, 0, false, false, false, true}, {1, 64, 40, 3, false, true, false, false},
        {1, 67, 40, 5, false, false, false, false}, {2, 50, 19, 3, false, true, true, false}, {3, 41, 70, 2, true, false, true, false},
        {1, 1100, 37, 0, false, true, false, false}, {2, 1100, 37, 0, false, false, false, false}, {3, 2051, 13, 2, false, true, false, false},
        {1, 515, 300, 0, false, false, false, true}, {5, 1543, 9, 0, false, true, false, true},
    };
    const gctx forced[] = {
        {20, 37, 19, 3, false, false, false, false}, {17, 300, 33, 2, false, true, true, false}, {9, 1100, 5, 0, true, true, false, false},
    };
    /* the B [n][k] kernel's variants (matmul_gemv.c's knobs: lanes a
     * column, units loaded ahead, A staged in shared memory), on the B^T
     * cases of both sets, the forced ones with 3 parts, in f32 and f16:
     * two variants cover 8 and 16 lanes, 8 units ahead and the staged A
     * (each variant is its own pipelines: the suite's time on lavapipe,
     * and again under the validation layer); on that kernel, not the
     * subgroup-shuffle one the default sends them to where it fits
     * (test_matmul_gemv_shuf's) */
    const char *variants[][3] = {{"8", "8", "1"}, {"16", "4", "1"}};
    const int nvar = (int)(sizeof variants / sizeof *variants);
    const lm_dtype dts[] = {LM_F32, LM_F16, LM_BF16};
    for (int pass = 0; pass < 3 + 2 * nvar; pass++) {
        int var = pass >= 3 ? (pass - 3) / 2 : -1;
        /* PARITY_QUICK (validate.sh): the kernel's measurement variants are
         * left to the full run (their pipelines are the pass's time there) */
        if (quick && var >= 0) continue;
        bool fset = pass >= 3 ? (pass - 3) % 2 : pass > 0;
        const gctx *set = fset ? forced : cs;
        size_t nset = fset ? sizeof forced / sizeof *forced : sizeof cs / sizeof *cs;
        /* the knobs change only with the device idle (a driver thread may
         * read the environment: test_vk_replay's note) */
        assert_int_equal(lm_device_sync(vk), LM_OK);
        if (fset) setenv("LUMEN_VK_GEMV", "1", 1);
        else unsetenv("LUMEN_VK_GEMV");
        if (pass == 2 || (var >= 0 && fset)) setenv("LUMEN_VK_GEMV_PARTS", "3", 1);
        else unsetenv("LUMEN_VK_GEMV_PARTS");
        if (var >= 0) {
            setenv("LUMEN_VK_GEMV_LANES", variants[var][0], 1);
            setenv("LUMEN_VK_GEMV_UN", variants[var][1], 1);
            setenv("LUMEN_VK_GEMV_ASH", variants[var][2], 1);
            setenv("LUMEN_VK_GEMV_SHUF", "0", 1);
        }
        for (size_t t = 0; t < (var >= 0 ? 2 : sizeof dts / sizeof *dts); t++)
            for (size_t i = 0; i < nset; i++) {
                const gctx *c = &set[i];
                /* variants: B^T cases of 8 outputs or more (an NMSE over
                 * one dot product of 9 terms measures its cancellation more
                 * than the kernel: a variant's draw of 1x9x1 in f32 gave
                 * 1.15e-10 against 1e-10) */
                if (var >= 0 && (!c->tb || c->m * c->n < 8)) continue;
                int64_t w = c->sl ? 1 : 0;
                int64_t sa[3] = {c->batch, c->ta ? c->k : c->m, (c->ta ? c->m : c->k) + w};
                int64_t sb[3] = {c->bb ? c->batch : 1, c->tb ? c->n : c->k, (c->tb ? c->k : c->n) + w};
                int na = c->batch ? 3 : 2;
                lm_array *in[2] = {data(na, c->batch ? sa : sa + 1, dts[t], -1, 1, 0),
                                   data(na, c->batch ? sb : sb + 1, dts[t], -1, 1, 0)};
                char what[128];
                char vname[48] = "";
                if (var >= 0)
                    snprintf(vname, sizeof vname, " lanes %s un %s ash %s", variants[var][0], variants[var][1],
                             variants[var][2]);
                snprintf(what, sizeof what, "gemv%s%s %s %lldx%lldx%lld%s%s%s%s", fset ? " (forced)" : "", vname,
                         lm_dtype_name(dts[t]), (long long)c->m, (long long)c->k, (long long)c->n,
                         c->ta ? " A^T" : "", c->tb ? " B^T" : "",
                         c->batch ? (c->bb ? " batched" : " batched+broadcast") : "", c->sl ? " offset" : "");
                double thr = dts[t] == LM_F32 ? 1e-10 : dts[t] == LM_F16 ? 1e-6 : 1e-4;
                run_case(what, 2, in, b_gemv, c, thr);
                lm_array_release(in[0]);
                lm_array_release(in[1]);
            }
    }
    unsetenv("LUMEN_VK_GEMV");
    unsetenv("LUMEN_VK_GEMV_PARTS");
    unsetenv("LUMEN_VK_GEMV_LANES");
    unsetenv("LUMEN_VK_GEMV_UN");
    unsetenv("LUMEN_VK_GEMV_ASH");
    unsetenv("LUMEN_VK_GEMV_SHUF");
}

/* the B [n][k] GEMV kernel on subgroup shuffles (matmul_gemv.c's
 * LUMEN_VK_GEMV_SHUF=1, shaders/matmul_gemv_shuf.comp): at the same lanes a
 * column its results are the shared-memory kernel's, byte for byte, and
 * within the thresholds of the CPU's; f32, f16 and bf16, M 1 to 8, K odd
 * (scalar loads, the tail past the last unit) and multiples of 8 (vector
 * loads), N not a multiple of a workgroup's columns, odd offsets, a batch
 * with B broadcast.  Each dtype takes one workgroup size and some of the
 * load paths (each path, dtype and size is a pipeline of each kernel, a
 * second or more to make cold on lavapipe): f32 A's vector loads with B's
 * scalar (M = 1, K odd) or vector ones, f16 both scalar (M > 1, K odd or
 * odd offsets), bf16 both vector (K = 77 among them with B one row);
 * then runs its cases at the default grid and at 1 to 3 workgroups along
 * the columns (each subgroup walking many columns, the next column's loads
 * issued early), f32 also with 3 forced parts (f32 sums either way: no new
 * pipeline).  Lanes 8 (lavapipe's subgroups are 8 wide; 16 under
 * LP_NATIVE_VECTOR_WIDTH=512, two columns a subgroup); 16 and 32 where the
 * subgroups hold them.  The kernel's dispatch count must grow by one a
 * case, so it did run. */
/* paths: bit 2 a_vec + b_vec set for the load paths (matmul_gemv.c's
 * vec_ok) whose cases run */
typedef struct { lm_dtype dt; int paths; const char *lanes, *wg, *un, *groups, *parts; } shuf_setting;

static void set_knob(const char *name, const char *v)
{
    if (v) setenv(name, v, 1);
    else unsetenv(name);
}

/* the GPU product's bytes, in its dtype, under LUMEN_VK_GEMV_SHUF=shuf
 * (set with the device idle); *ran: the shuffle kernel's dispatches */
static void *gemv_bytes(lm_array **gin, const gctx *c, const char *shuf, int64_t *ran, lm_array **out)
{
    assert_int_equal(lm_device_sync(vk), LM_OK);
    setenv("LUMEN_VK_GEMV_SHUF", shuf, 1);
    int64_t n0 = lm_vulkan_gemv_shuf_count();
    lm_array *r = b_gemv(gin, c);
    assert_non_null(r);
    assert_int_equal(lm_array_eval(r), LM_OK);
    *ran = lm_vulkan_gemv_shuf_count() - n0;
    void *h = malloc((size_t)r->size * lm_dtype_size(r->dtype));
    assert_int_equal(lm_array_read(r, h, r->dtype), LM_OK);
    *out = r;
    return h;
}

static void test_matmul_gemv_shuf(void **state)
{
    (void)state;
    const gctx cs[] = {
        {1, 77, 51, 0, false, true, false, false},  {2, 301, 33, 0, false, true, false, false},
        {3, 64, 40, 0, false, true, false, false},  {4, 1100, 37, 0, false, true, false, false},
        {5, 1543, 9, 0, false, true, false, true},  {6, 96, 130, 0, false, true, false, false},
        {7, 1104, 300, 0, false, true, false, false}, {8, 203, 67, 0, false, true, false, false},
        {1, 64, 40, 3, false, true, false, false}, {1, 77, 1, 0, false, true, false, false},
    };
    const shuf_setting sets[] = {
        {LM_F32, 0xc, "8", NULL, NULL, NULL, NULL},  {LM_F32, 0xc, "8", NULL, NULL, "1", NULL},
        {LM_F32, 0xc, "8", NULL, NULL, "3", "3"},    {LM_F16, 0x1, "8", "64", NULL, NULL, NULL},
        {LM_F16, 0x1, "8", "64", NULL, "1", NULL},   {LM_BF16, 0x8, "8", "128", NULL, NULL, NULL},
        {LM_BF16, 0x8, "8", "128", NULL, "2", NULL}, {LM_F32, 0xc, "16", NULL, NULL, "1", NULL},
        {LM_F16, 0x9, "32", NULL, NULL, "1", NULL},
    };
    const char *info = strstr(vk->info, "subgroup ");
    int sg = info ? atoi(info + 9) : 0;
    printf("  subgroup size %d\n", sg);
    int64_t shuf_ran = 0;
    for (size_t v = 0; v < sizeof sets / sizeof *sets; v++) {
        /* PARITY_QUICK (validate.sh): one setting a dtype (each is its own
         * pipelines, the pass's time under the layer) */
        if (quick && v % 3 != 0) continue;
        const shuf_setting *st = &sets[v];
        bool fits = atoi(st->lanes) <= sg;
        assert_int_equal(lm_device_sync(vk), LM_OK);
        setenv("LUMEN_VK_GEMV_LANES", st->lanes, 1);
        set_knob("LUMEN_VK_GEMV_SHUF_WG", st->wg);
        set_knob("LUMEN_VK_GEMV_SHUF_GROUPS", st->groups);
        set_knob("LUMEN_VK_GEMV_PARTS", st->parts);
        set_knob("LUMEN_VK_GEMV_UN", st->un);
        if (!fits) {
            printf("  %s at lanes %s: wider than the subgroups, left out\n", lm_dtype_name(st->dt), st->lanes);
            continue;
        }
        lm_dtype dt = st->dt;
        for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
            const gctx *c = &cs[i];
            int64_t step = dt == LM_F32 ? 4 : 8;
            bool a_vec = !c->sl && (c->m == 1 || c->k % step == 0), b_vec = !c->sl && (c->n == 1 || c->k % step == 0);
            if (!(st->paths >> (a_vec * 2 + b_vec) & 1) || skip_case()) continue;
            int64_t w = c->sl ? 1 : 0;
            int64_t sa[3] = {c->batch, c->m, c->k + w}, sb[2] = {c->n, c->k + w};
            lm_array *in[2] = {data(c->batch ? 3 : 2, c->batch ? sa : sa + 1, dt, -1, 1, 0),
                               data(2, sb, dt, -1, 1, 0)};
            lm_array *gin[2];
            for (int k = 0; k < 2; k++) {
                gin[k] = lm_array_to(in[k], vk);
                assert_int_equal(lm_array_eval(gin[k]), LM_OK);
            }
            char what[128];
            snprintf(what, sizeof what, "gemv shuf lanes %s wg %s groups %s parts %s un %s %s %lldx%lldx%lld%s%s",
                     st->lanes, st->wg ? st->wg : "-", st->groups ? st->groups : "-", st->parts ? st->parts : "-",
                     st->un ? st->un : "-", lm_dtype_name(dt), (long long)c->m, (long long)c->k,
                     (long long)c->n, c->batch ? " batched+broadcast" : "", c->sl ? " offset" : "");
            if (verbose) fprintf(stderr, "case %s\n", what);
            int64_t ran_old, ran_new;
            lm_array *r_old, *r_new;
            void *h_old = gemv_bytes(gin, c, "0", &ran_old, &r_old);
            void *h_new = gemv_bytes(gin, c, "1", &ran_new, &r_new);
            if (ran_old != 0 || ran_new != 1) report(what, "shuffle kernel dispatches %g (expected 0, then 1)",
                                                     (double)(ran_old * 100 + ran_new));
            if (memcmp(h_old, h_new, (size_t)r_new->size * lm_dtype_size(r_new->dtype)))
                report(what, "bytes differ from the shared-memory kernel's (%g)", 0);
            lm_array *ref = b_gemv(in, c);
            compare(what, ref, r_new, dt == LM_F32 ? 1e-10 : dt == LM_F16 ? 1e-6 : 1e-4);
            shuf_ran += ran_new;
            free(h_old);
            free(h_new);
            lm_array_release(ref);
            lm_array_release(r_old);
            lm_array_release(r_new);
            for (int k = 0; k < 2; k++) {
                lm_array_release(in[k]);
                lm_array_release(gin[k]);
            }
        }
    }
    printf("  shuffle kernel: %lld dispatches\n", (long long)shuf_ran);
    if (sg >= 8 && !quick) assert_true(shuf_ran > 0);
    assert_int_equal(lm_device_sync(vk), LM_OK);
    const char *knobs[] = {"LUMEN_VK_GEMV_SHUF", "LUMEN_VK_GEMV_LANES", "LUMEN_VK_GEMV_SHUF_WG",
                           "LUMEN_VK_GEMV_SHUF_GROUPS", "LUMEN_VK_GEMV_PARTS", "LUMEN_VK_GEMV_UN"};
    for (size_t k = 0; k < sizeof knobs / sizeof *knobs; k++) unsetenv(knobs[k]);
}

/* bf16 near its range limits: the tensor-core path scales each row of A
 * and column of B by a power of two into f16's range (matmul_coop.c), so
 * magnitudes f16 cannot hold (2^126, 2^-130 subnormals) must come out as the
 * CPU's f32 arithmetic gives them, without overflow.  ea/eb: the operands'
 * binary exponents; spread > 0 gives every element its own exponent in
 * [e - spread, e] (dynamic range within a row); rows: A's rows cycle
 * through exponents ea, ea - 100, ea - 200 (each row its own scale). */
static lm_array *ranged(int64_t r, int64_t c, int e, int spread, bool rows)
{
    double *v = malloc(sizeof(double) * (size_t)(r * c));
    for (int64_t i = 0; i < r; i++)
        for (int64_t j = 0; j < c; j++) {
            int x = e - (spread ? (int)(urand() * spread) : 0) - (rows ? (int)(i % 3) * 100 : 0);
            v[i * c + j] = ldexp(urand() * 2 - 1, x);
        }
    int64_t s[2] = {r, c};
    return from_doubles(2, s, LM_BF16, v);
}

static void test_matmul_bf16_range(void **state)
{
    (void)state;
    const struct { int ea, eb, spread; bool rows; const char *what; } cs[] = {
        {126, -100, 0, false, "bf16 matmul, A near bf16's max (2^126), B 2^-100"},
        {-120, 100, 0, false, "bf16 matmul, A 2^-120, B 2^100"},
        {-128, 110, 0, false, "bf16 matmul, A bf16 subnormals (2^-128..2^-135), B 2^110"},
        {100, -60, 0, true, "bf16 matmul, A rows at 2^100, 2^0, 2^-100, B 2^-60"},
        {20, 0, 40, false, "bf16 matmul, 2^40 of range within each row of A"},
    };
    const int64_t m = 130, k = 72, n = 264;
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
        lm_array *in[2] = {ranged(m, k, cs[i].ea, cs[i].spread, cs[i].rows), ranged(k, n, cs[i].eb, 0, false)};
        mctx c = {m, k, n, 0, false, false};
        run_case(cs[i].what, 2, in, b_matmul, &c, 1e-4);
        lm_array_release(in[0]);
        lm_array_release(in[1]);
    }
}

/* bf16 on bf16 cooperative matrices (matmul_coop.c's native path, where
 * the device has VK_KHR_shader_bfloat16; elsewhere the scaled f16 copies
 * or the f32-arithmetic kernels): the tiles' edges, whole tiles,
 * transposed and batched operands, 16x8 fragments' small grids, and the
 * range cases above, within bf16's tolerance of the CPU.  Says how many
 * ran on bf16 tensor cores, or why none did; LUMEN_TEST_MM_BF16=1 (set on
 * such a device) requires all. */
static void test_matmul_bf16_coop(void **state)
{
    (void)state;
    const mctx cs[] = {
        {129, 77, 65, 0, false, false}, {129, 72, 136, 0, false, false}, {96, 136, 80, 0, true, true},
        {257, 40, 130, 0, false, true}, {200, 264, 72, 3, false, false}, {300, 48, 520, 0, false, false},
        {256, 64, 256, 0, false, false}, {264, 40, 272, 2, true, true}, {512, 256, 1024, 0, false, false},
        {1024, 384, 2048, 0, false, true}, {64, 64, 64, 0, false, true}, {17, 1, 33, 0, false, false},
    };
    int64_t before = lm_vulkan_bf16_coop_count(), c0 = cases;
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
        const mctx *c = &cs[i];
        int64_t sa[3] = {c->batch, c->ta ? c->k : c->m, c->ta ? c->m : c->k};
        int64_t sb[3] = {c->batch ? 1 : 0, c->tb ? c->n : c->k, c->tb ? c->k : c->n};
        int na = c->batch ? 3 : 2;
        lm_array *in[2] = {data(na, c->batch ? sa : sa + 1, LM_BF16, -1, 1, 0),
                           data(na, c->batch ? sb : sb + 1, LM_BF16, -1, 1, 0)};
        char what[96];
        snprintf(what, sizeof what, "matmul bf16 (tensor cores) %lldx%lldx%lld%s%s%s", (long long)c->m,
                 (long long)c->k, (long long)c->n, c->ta ? " A^T" : "", c->tb ? " B^T" : "",
                 c->batch ? " batched+broadcast" : "");
        run_case(what, 2, in, b_matmul, c, 1e-4);
        lm_array_release(in[0]);
        lm_array_release(in[1]);
    }
    test_matmul_bf16_range(state);
    int64_t ran = lm_vulkan_bf16_coop_count() - before, run = cases - c0;
    if (ran)
        printf("test_matmul_bf16_coop: %lld of %lld bf16 cases on bf16 tensor cores\n", (long long)ran,
               (long long)run);
    else
        printf("test_matmul_bf16_coop: the bf16 tensor-core kernels skipped (the device has no "
               "VK_KHR_shader_bfloat16 cooperative matrices, or LUMEN_VK_BF16=0): %lld cases on the other "
               "kernels\n", (long long)run);
    const char *req = getenv("LUMEN_TEST_MM_BF16");
    if (req && !strcmp(req, "1")) assert_int_equal(ran, run);
}

/* split-K of the GEMM tiles (LUMEN_VK_MM_SPLITK: matmul.c, matmul_coop.c;
 * conv_splitk.comp adds the parts): 2 and 7 parts forced, K not a
 * multiple of the tiles' depth (300, 77: 19 and 5 steps of 16, so 7 parts
 * of 3 steps with a last of 1, and 5 parts of one step where 7 are asked
 * for), M and N past a tile's edge and whole tiles (no bounds checks),
 * A transposed (a view whose K stride is not 1), B^T, batched
 * with B broadcast; f32 at both counts, f16 and bf16 at 2 (lavapipe: the
 * f32-arithmetic tiles; the tensor-core tiles on a GPU).  Every case must have run split
 * (lm_vulkan_mm_split_count), so a knob that stopped reaching the kernels
 * fails here, as does a part dropped or added twice (the sums are off by a
 * part's share, far past the threshold). */
static void test_matmul_splitk(void **state)
{
    (void)state;
    const mctx cs[] = {
        {130, 300, 200, 0, false, false}, {256, 300, 256, 0, false, false}, {129, 77, 136, 0, true, false},
        {200, 300, 130, 3, false, true},  {136, 264, 260, 2, true, true},   {256, 512, 256, 2, false, false},
    };
    const int parts[] = {2, 7};
    const lm_dtype dts[] = {LM_F32, LM_F16, LM_BF16};
    int64_t before = lm_vulkan_mm_split_count(), c0 = cases;
    for (size_t p = 0; p < sizeof parts / sizeof *parts; p++) {
        if (quick && parts[p] != 2) continue;   /* PARITY_QUICK: one count */
        char pv[8];
        snprintf(pv, sizeof pv, "%d", parts[p]);
        /* the device idle first: a driver thread may read the environment */
        assert_int_equal(lm_device_sync(vk), LM_OK);
        setenv("LUMEN_VK_MM_SPLITK", pv, 1);
        /* f16 and bf16 at 2 parts (each case a pipeline on lavapipe) */
        for (size_t t = 0; t < (parts[p] == 2 ? sizeof dts / sizeof *dts : 1); t++)
            for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
                const mctx *c = &cs[i];
                lm_array *in[2];
                mm_inputs(c, dts[t], in);
                char what[112];
                snprintf(what, sizeof what, "matmul split-K %d %s %lldx%lldx%lld%s%s%s", parts[p],
                         lm_dtype_name(dts[t]), (long long)c->m, (long long)c->k, (long long)c->n,
                         c->ta ? " A^T" : "", c->tb ? " B^T" : "", c->batch ? " batched+broadcast" : "");
                double thr = dts[t] == LM_F32 ? 1e-10 : dts[t] == LM_F16 ? 1e-6 : 1e-4;
                run_case(what, 2, in, b_matmul, c, thr);
                lm_array_release(in[0]);
                lm_array_release(in[1]);
            }
    }
    assert_int_equal(lm_device_sync(vk), LM_OK);
    unsetenv("LUMEN_VK_MM_SPLITK");
    int64_t split = lm_vulkan_mm_split_count() - before, run = cases - c0;
    printf("test_matmul_splitk: %lld of %lld cases split\n", (long long)split, (long long)run);
    assert_int_equal(split, run);
}

/* ---- shape ops and creation ---- */
static lm_array *b_concat(lm_array **in, const void *p)
{
    (void)p;
    lm_array *t = lm_transpose(in[1], 0, 1);
    lm_array *parts[3] = {in[0], t, in[0]};
    lm_array *r = lm_concat(3, parts, 1);
    lm_array_release(t);
    return r;
}

static lm_array *b_pad(lm_array **in, const void *p)
{
    (void)p;
    int64_t pads[4] = {1, 2, 0, 3};
    lm_array *s = lm_slice(in[0], 1, 0, 5, 2);
    lm_array *r = lm_pad(s, pads, -7.5);
    lm_array_release(s);
    return r;
}

static lm_array *b_take(lm_array **in, const void *p)
{
    (void)p;
    return lm_take_along_axis(in[0], in[1], 1);
}

static lm_array *b_select(lm_array **in, const void *p)
{
    (void)p;
    lm_array *t = lm_transpose(in[0], 0, 1);
    lm_array *r = lm_index_select(t, 0, in[1]);
    lm_array_release(t);
    return r;
}

static void test_shape_ops(void **state)
{
    (void)state;
    const lm_dtype dts[] = {LM_F32, LM_F16, LM_I64, LM_U8, LM_F64};
    for (size_t t = 0; t < sizeof dts / sizeof *dts; t++) {
        lm_dtype dt = dts[t];
        int64_t s1[2] = {4, 5}, s2[2] = {3, 4}, si[2] = {4, 7}, sv[1] = {6};
        lm_array *a = data(2, s1, dt, 0, 50, SPECIALS), *b = data(2, s2, dt, 0, 50, 0);
        lm_array *idx = data(2, si, LM_I64, -5, 5, 0), *iv = data(1, sv, LM_I64, -5, 5, 0);
        char what[64];
        lm_array *cin[2] = {a, b};
        snprintf(what, sizeof what, "concat %s", lm_dtype_name(dt));
        run_case(what, 2, cin, b_concat, NULL, thr_for(dt, false));
        snprintf(what, sizeof what, "pad %s", lm_dtype_name(dt));
        run_case(what, 1, &a, b_pad, NULL, thr_for(dt, false));
        lm_array *tin[2] = {a, idx};
        snprintf(what, sizeof what, "take_along_axis %s", lm_dtype_name(dt));
        run_case(what, 2, tin, b_take, NULL, thr_for(dt, false));
        lm_array *sin_[2] = {a, iv};
        snprintf(what, sizeof what, "index_select %s", lm_dtype_name(dt));
        run_case(what, 2, sin_, b_select, NULL, thr_for(dt, false));
        lm_array_release(a); lm_array_release(b); lm_array_release(idx); lm_array_release(iv);
    }
}

static void test_create(void **state)
{
    (void)state;
    const lm_dtype dts[] = {LM_F32, LM_F16, LM_BF16, LM_F64, LM_I32, LM_I64, LM_U8, LM_BOOL};
    int64_t s[2] = {13, 11};
    for (size_t t = 0; t < sizeof dts / sizeof *dts; t++) {
        lm_dtype dt = dts[t];
        lm_array *pairs[6][2] = {
            {lm_full(2, s, 3.75, dt, cpu), lm_full(2, s, 3.75, dt, vk)},
            {lm_arange(-3, 40, 0.75, dt, cpu), lm_arange(-3, 40, 0.75, dt, vk)},
            {lm_linspace(-2, 5, 37, dt, cpu), lm_linspace(-2, 5, 37, dt, vk)},
            {lm_eye(5, 7, 1, dt, cpu), lm_eye(5, 7, 1, dt, vk)},
            {NULL, NULL}, {NULL, NULL},
        };
        if (lm_dtype_is_float(dt)) {
            lm_key key = lm_random_key(1234 + t);
            pairs[4][0] = lm_random_uniform(2, s, -2, 3, dt, key, cpu);
            pairs[4][1] = lm_random_uniform(2, s, -2, 3, dt, key, vk);
            pairs[5][0] = lm_random_normal(2, s, 1, 2, dt, key, cpu);
            pairs[5][1] = lm_random_normal(2, s, 1, 2, dt, key, vk);
        }
        const char *names[6] = {"full", "arange", "linspace", "eye", "uniform", "normal"};
        for (int k = 0; k < 6; k++) {
            if (!pairs[k][0] || skip_case()) {
                lm_array_release(pairs[k][0]);
                lm_array_release(pairs[k][1]);
                continue;
            }
            char what[64];
            snprintf(what, sizeof what, "%s %s", names[k], lm_dtype_name(dt));
            compare(what, pairs[k][0], pairs[k][1], k == 5 ? thr_for(dt, true) : thr_for(dt, false));
            lm_array_release(pairs[k][0]);
            lm_array_release(pairs[k][1]);
        }
    }
}

/* in-place assignment: a COPY with a strided output must touch only the view */
static void test_assign_strided(void **state)
{
    (void)state;
    int64_t s[2] = {6, 8};
    for (int dev = 0; dev < 2; dev++) {
        lm_device *d = dev ? vk : cpu;
        (void)d;
    }
    lm_array *base_c = data(2, s, LM_F32, 0, 1, 0);
    lm_array *base_g = lm_array_to(base_c, vk);
    assert_int_equal(lm_array_eval(base_g), LM_OK);
    int64_t s2[2] = {3, 4};
    lm_array *src = data(2, s2, LM_F16, -5, 5, 0);
    lm_array *bases[2] = {base_c, base_g};
    for (int k = 0; k < 2; k++) {
        lm_array *v1 = lm_slice(bases[k], 0, 1, 6, 2);
        lm_array *v2 = lm_slice(v1, 1, 7, -100, -2);   /* rows 1,3,5; columns 7,5,3,1 */
        lm_array *sv = k ? lm_array_to(src, vk) : lm_array_retain(src);
        lm_status st = lm_array_assign(v2, sv);
        if (st != LM_OK) fprintf(stderr, "assign: %s\n", lm_error_message());
        assert_int_equal(st, LM_OK);
        lm_array_release(v1); lm_array_release(v2); lm_array_release(sv);
    }
    compare("assign into a strided view", base_c, base_g, 0);
    lm_array_release(base_c); lm_array_release(base_g); lm_array_release(src);
}

#define VK_TEST(f) cmocka_unit_test(f)

int main(void)
{
    parity_setup(NULL);
    if (!vk) {
        printf("test_vulkan_parity: no Vulkan device (%s); skipped\n", lm_vulkan_status());
        return LM_TEST_SKIP;
    }
    const struct CMUnitTest tests[] = {
        VK_TEST(test_unary), VK_TEST(test_unary_int_f64), VK_TEST(test_cast), VK_TEST(test_binary),
        VK_TEST(test_where), VK_TEST(test_eltwise_vec), VK_TEST(test_eltwise_rows), VK_TEST(test_reduce), VK_TEST(test_matmul), VK_TEST(test_matmul_gemv), VK_TEST(test_matmul_gemv_shuf), VK_TEST(test_matmul_bf16_range), VK_TEST(test_matmul_bf16_coop),
        VK_TEST(test_matmul_splitk),
        VK_TEST(test_shape_ops),
        VK_TEST(test_create), VK_TEST(test_assign_strided), VK_TEST(test_summary),
    };
    return PARITY_RUN(tests);   /* PARITY_ONLY=test_matmul runs one group */
}

#else
int main(void)
{
    printf("test_vulkan_parity: built without Vulkan; skipped\n");
    return LM_TEST_SKIP;
}
#endif
