/* test_ops_all.c - walks the whole op table (core/op.h) on every backend.
 *
 * For each op: a builder below makes a small graph at odd shapes with a
 * non-contiguous (transposed) input, for every dtype the op accepts; the
 * CPU result must evaluate, each other backend present (Vulkan when built:
 * lavapipe in `make test`) must agree with it (normalised error, NaN and
 * Inf at the same places, integers exactly), and the CPU must give the same
 * bits at 1, 2, 3 and 4 threads.  Differentiable unary and binary ops are
 * checked against central differences in f64; every op marked
 * differentiable must have a rule that runs.  An op without a builder
 * entry fails the suite, so an op added to the table without kernels and a
 * test cannot pass unnoticed.  The end prints which ops lack a fixture
 * (tests/ref), a numerical gradient test, or a fused (compile) path. */
#include "testutil.h"
#include "core/compile.h"
#include "core/grad.h"
#include "core/ops_nn.h"
#include "core/random.h"
#include "core/quant.h"
#include "backends/cpu/cpu.h"

static lm_device *cpu, *vk;
static int failures, cases;
static int64_t S0 = 5, S1 = 7;
static int threads0;   /* the odd shapes; larger for the thread walk */

static void oa_fail(const char *fmt, const char *op, const char *dt, const char *more)
{
    failures++;
    fprintf(stderr, "OPS_ALL FAIL %s %s: ", op, dt);
    fprintf(stderr, fmt, more);
    fprintf(stderr, "\n");
}

/* ---- inputs ---- */

static uint64_t rng;
static double urand(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

/* an evaluated [rows, cols] array on dev, values in [lo, hi) (integers
 * floored; nonzero when nz), given back transposed: a strided view */
static lm_array *input_t(lm_device *dev, lm_dtype dt, int64_t rows, int64_t cols, double lo, double hi, bool nz,
                         uint64_t seed)
{
    rng = seed * 2654435761u + 88172645463325252ull;
    int64_t n = rows * cols, shape[2] = {cols, rows};
    double *v = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        double x = lo + (hi - lo) * urand();
        if (!lm_dtype_is_float(dt)) x = floor(x);
        if (nz && x == 0) x = 1;
        v[i] = x;
    }
    lm_array *a = lm_from_data(2, shape, LM_F64, v, dev);
    free(v);
    lm_array *c = lm_cast(a, dt);
    lm_array_release(a);
    assert_int_equal(lm_array_eval(c), LM_OK);
    lm_array *t = lm_transpose(c, 0, 1);
    lm_array_release(c);
    return t;
}

static lm_array *input_c(lm_device *dev, lm_dtype dt, int ndim, const int64_t *shape, double lo, double hi,
                         uint64_t seed)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    rng = seed * 2654435761u + 1;
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) v[i] = lm_dtype_is_float(dt) ? lo + (hi - lo) * urand() : floor(lo + (hi - lo) * urand());
    lm_array *a = lm_from_data(ndim, shape, LM_F64, v, dev);
    free(v);
    lm_array *c = lm_cast(a, dt);
    lm_array_release(a);
    assert_int_equal(lm_array_eval(c), LM_OK);
    return c;
}

/* ---- builders: one per op; NULL result = the op refuses this dtype ---- */

typedef lm_array *(*build_fn)(lm_op op, lm_dtype dt, lm_device *d);

/* set by b_create, b_other and b_nn for an op their switches have no case
 * for: walk_op then fails naming the op */
static bool no_case;

#define R(x) lm_array_release(x)

static lm_array *b_unary(lm_op op, lm_dtype dt, lm_device *d)
{
    lm_array *x = input_t(d, dt, S0, S1, -3, 3, false, 1), *r;
    if (op == LM_OP_CAST) r = lm_cast(x, dt == LM_F32 ? LM_F16 : LM_F32);
    else if (op == LM_OP_CLAMP) r = lm_clamp(x, -1.5, 2);
    else if (op == LM_OP_COPY) r = lm_contiguous(x);
    else r = lm_unary(op, x);
    R(x);
    return r;
}

static lm_array *b_binary(lm_op op, lm_dtype dt, lm_device *d)
{
    /* a strided [S0, S1] with a row [S1] broadcast; b nonzero for integers */
    int64_t row[1] = {S1};
    lm_array *a = input_t(d, dt, S0, S1, -4, 4, false, 2);
    lm_array *b = input_c(d, dt, 1, row, 1, 4, 3);
    lm_array *bs = lm_binary_scalar(LM_OP_MUL, b, 1, false);   /* keeps dt; signs below */
    lm_array *neg = lm_binary_scalar(LM_OP_SUB, bs, 5, false);
    lm_array *r = lm_binary(op, a, lm_dtype_is_float(dt) || dt == LM_BOOL ? b : neg);
    R(a), R(b), R(bs), R(neg);
    return r;
}

static lm_array *b_where(lm_op op, lm_dtype dt, lm_device *d)
{
    (void)op;
    lm_array *a = input_t(d, dt, S0, S1, -3, 3, false, 4), *b = input_t(d, dt, S0, S1, -3, 3, false, 5);
    lm_array *c = input_t(d, LM_F32, S0, S1, -1, 1, false, 6);
    lm_array *m = lm_binary_scalar(LM_OP_GT, c, 0, false);
    lm_array *r = lm_where(m, a, b);
    R(a), R(b), R(c), R(m);
    return r;
}

static lm_array *b_reduce(lm_op op, lm_dtype dt, lm_device *d)
{
    lm_array *x = input_t(d, dt, S0, S1, -2, 2, false, 7), *r;
    int ax = 1;
    if (op == LM_OP_ARGMAX || op == LM_OP_ARGMIN) r = lm_argreduce(op, x, 1, false);
    else if (op == LM_OP_CUMSUM) r = lm_cumsum(x, 1);
    else if (op == LM_OP_VAR) r = lm_var(x, 1, &ax, 1, false);
    else if (op == LM_OP_STD) r = lm_std(x, 1, &ax, 1, false);
    else r = lm_reduce(op, x, 1, &ax, false);
    R(x);
    return r;
}

static lm_array *b_create(lm_op op, lm_dtype dt, lm_device *d)
{
    int64_t sh[2] = {S0, S1};
    lm_key key = {{12, 34}};
    switch (op) {
    case LM_OP_FULL: return lm_full(2, sh, 2.5, dt, d);
    case LM_OP_ARANGE: return lm_arange(-3, 3 + S0, 0.5, dt, d);
    case LM_OP_LINSPACE: return lm_linspace(-1, 2, S1, dt, d);
    case LM_OP_EYE: return lm_eye(S0, S1, 1, dt, d);
    case LM_OP_RANDOM_UNIFORM: return lm_random_uniform(2, sh, -1, 1, dt, key, d);
    case LM_OP_RANDOM_NORMAL: return lm_random_normal(2, sh, 0, 1, dt, key, d);
    default: no_case = true; return NULL;
    }
}

static lm_array *b_leaf(lm_op op, lm_dtype dt, lm_device *d)
{
    (void)op;
    return input_t(d, dt, S0, S1, -3, 3, false, 8);   /* NONE: data; VIEW: its transpose */
}

static lm_array *b_other(lm_op op, lm_dtype dt, lm_device *d)
{
    lm_array *x = input_t(d, dt, S0, S1, -2, 2, false, 9), *r = NULL;
    switch (op) {
    case LM_OP_MATMUL: {
        lm_array *w = input_t(d, dt, S1, 3, -1, 1, false, 10);
        r = lm_matmul(x, w);
        R(w);
        break;
    }
    case LM_OP_CONCAT: {
        lm_array *y = input_t(d, dt, S0, 3, -1, 1, false, 11), *in[2] = {x, y};
        r = lm_concat(2, in, 1);
        R(y);
        break;
    }
    case LM_OP_PAD: {
        int64_t pads[4] = {1, 0, 2, 3};
        r = lm_pad(x, pads, 0.5);
        break;
    }
    case LM_OP_GATHER: case LM_OP_INDEX_SELECT: {
        int64_t sh[2] = {S0, 3}, n1[1] = {3};
        lm_array *idx = op == LM_OP_GATHER ? input_c(d, LM_I64, 2, sh, 0, (double)S1, 12)
                                           : input_c(d, LM_I64, 1, n1, 0, (double)S1, 13);
        r = op == LM_OP_GATHER ? lm_take_along_axis(x, idx, 1) : lm_index_select(x, 1, idx);
        R(idx);
        break;
    }
    default: no_case = true; break;
    }
    R(x);
    return r;
}

/* a one-step FUSED node (compile's kind) for the op named by fused_op */
static lm_op fused_op = LM_OP_EXP;
static lm_array *b_fused(lm_op op, lm_dtype dt, lm_device *d)
{
    (void)op;
    lm_array *a = input_t(d, dt, S0, S1, -3, 3, false, 14), *b = input_t(d, dt, S0, S1, 1, 3, true, 15);
    lm_array *ca = lm_contiguous(a), *cb = lm_contiguous(b);
    assert_int_equal(lm_array_eval(ca), LM_OK);
    assert_int_equal(lm_array_eval(cb), LM_OK);
    lm_array *probe = lm_op_class_of(fused_op) == LM_CLASS_UNARY ? lm_unary(fused_op, ca) : lm_binary(fused_op, ca, cb);
    lm_array *r = NULL;
    if (probe) {
        struct { lm_fused g; lm_fused_step st; } *f = calloc(1, sizeof *f);
        f->g.ninputs = 2;
        f->g.nsteps = 1;
        f->g.steps = &f->st;
        f->st = (lm_fused_step){.op = fused_op, .dtype = probe->dtype, .nin = lm_op_arity(fused_op), .in = {0, 1, 0}};
        lm_params p = {0};
        p.ext = f;
        lm_array *in[2] = {ca, cb};
        r = lm_node_new(LM_OP_FUSED, probe->dtype, 2, probe->shape, 2, in, &p, NULL);
        R(probe);
    }
    R(a), R(b), R(ca), R(cb);
    return r;
}

static lm_array *nchw(lm_device *d, lm_dtype dt, int64_t n, int64_t c, int64_t h, int64_t w, uint64_t seed)
{
    int64_t sh[4] = {n, c, h, w};
    return input_c(d, dt, 4, sh, -2, 2, seed);
}

static lm_array *b_nn(lm_op op, lm_dtype dt, lm_device *d)
{
    lm_array *x = nchw(d, dt, 1, 4, S0, S1, 16), *r = NULL, *t = NULL, *u = NULL, *w = NULL;
    int64_t one[2] = {1, 1}, two[2] = {2, 2}, pad1[4] = {1, 1, 1, 1}, k3[2] = {3, 3};
    switch (op) {
    case LM_OP_CONV:
        w = nchw(d, dt, 3, 4, 3, 3, 17);
        r = lm_conv2d(x, w, NULL, one, pad1, one, 1);
        break;
    case LM_OP_CONV_TRANSPOSE:
        w = nchw(d, dt, 4, 2, 3, 3, 18);
        r = lm_conv_transpose2d(x, w, NULL, two, one, one, one, 1);
        break;
    case LM_OP_MAX_POOL: r = lm_max_pool2d(x, k3, two, one, one, false); break;
    case LM_OP_AVG_POOL: r = lm_avg_pool2d(x, k3, two, one, false, true, 0); break;
    case LM_OP_ADAPTIVE_AVG_POOL: { int64_t o[2] = {2, 3}; r = lm_adaptive_avg_pool2d(x, o); break; }
    case LM_OP_UPSAMPLE: { double sc[2] = {2, 2}; r = lm_upsample(x, NULL, sc, LM_UPSAMPLE_BILINEAR, false); break; }
    case LM_OP_PIXEL_SHUFFLE: r = lm_pixel_shuffle(x, 2); break;
    case LM_OP_PIXEL_UNSHUFFLE: R(x); x = nchw(d, dt, 1, 2, 4, 6, 19); r = lm_pixel_unshuffle(x, 2); break;
    case LM_OP_SOFTMAX: r = lm_softmax(x, 3); break;
    case LM_OP_LOG_SOFTMAX: r = lm_log_softmax(x, 3); break;
    case LM_OP_LAYER_NORM: r = lm_layer_norm(x, 1, NULL, NULL, 1e-5); break;
    case LM_OP_RMS_NORM: r = lm_rms_norm(x, 1, NULL, 1e-5); break;
    case LM_OP_GROUP_NORM: r = lm_group_norm(x, 2, NULL, NULL, 1e-5); break;
    case LM_OP_BATCH_NORM: {
        int64_t c4[1] = {4};
        t = input_c(d, dt, 1, c4, -1, 1, 20);
        u = input_c(d, dt, 1, c4, 0.5, 2, 21);
        r = lm_batch_norm(x, t, u, NULL, NULL, 1e-5);
        break;
    }
    case LM_OP_L2_NORMALIZE: r = lm_l2_normalize(x, 3, 1e-12); break;
    case LM_OP_ATTENTION: {
        int64_t sh[4] = {1, 2, S1, 8};
        t = input_c(d, dt, 4, sh, -1, 1, 22);
        u = input_c(d, dt, 4, sh, -1, 1, 23);
        w = input_c(d, dt, 4, sh, -1, 1, 24);
        r = lm_attention(t, u, w, NULL, true, 0);
        break;
    }
    case LM_OP_ROPE: {
        int64_t sh[4] = {1, 2, S1, 8};
        t = input_c(d, dt, 4, sh, -1, 1, 25);
        r = lm_rope(t, 8, false, 10000, 1, 0);
        break;
    }
    case LM_OP_TOPK: {
        lm_array *idx = NULL;
        if (lm_topk(x, 3, 3, true, &r, &idx) == LM_OK) R(idx);
        break;
    }
    case LM_OP_SORT: r = lm_sort(x, 3, false); break;
    case LM_OP_ARGSORT: r = lm_argsort(x, 3, true); break;
    case LM_OP_SCATTER: case LM_OP_SCATTER_ADD: {
        int64_t sh[4] = {1, 4, S0, 2};
        t = input_c(d, LM_I64, 4, sh, 0, (double)S1, 26);
        u = input_c(d, dt, 4, sh, -1, 1, 27);
        r = op == LM_OP_SCATTER ? lm_scatter(x, 3, t, u) : lm_scatter_add(x, 3, t, u);
        break;
    }
    case LM_OP_ONE_HOT: { int64_t n[1] = {S1}; t = input_c(d, dt, 1, n, 0, 5, 28); r = lm_one_hot(t, 6); break; }
    case LM_OP_TRIL: r = lm_tril(x, 1); break;
    case LM_OP_TRIU: r = lm_triu(x, -1); break;
    case LM_OP_TIMESTEP_EMBEDDING: { int64_t n[1] = {3}; t = input_c(d, dt, 1, n, 0, 900, 29);
        r = lm_timestep_embedding(t, 16, 10000, true, 1, 1); break; }
    case LM_OP_QLINEAR: {   /* a float input by a Q8_0 and a Q4_K weight; other dtypes refuse */
        if (!lm_dtype_is_float(dt)) break;
        int64_t ws[2] = {S1, 256}, xs[2] = {S0, 256};
        u = input_c(d, LM_F32, 2, ws, -1, 1, 30);
        t = input_c(d, dt, 2, xs, -1, 1, 31);
        lm_array *q8 = lm_quantize(u, LM_Q8_0), *q4 = lm_quantize(u, LM_Q4_K);
        lm_array *y8 = lm_linear(t, q8, NULL), *y4 = lm_linear(t, q4, NULL);
        r = y8 && y4 ? lm_binary(LM_OP_ADD, y8, y4) : NULL;
        R(q8), R(q4), R(y8), R(y4);
        break;
    }
    case LM_OP_DEQUANTIZE: {   /* a Q4_K tensor's values; other dtypes refuse */
        if (!lm_dtype_is_float(dt)) break;
        int64_t ws[2] = {S1, 256};
        u = input_c(d, LM_F32, 2, ws, -1, 1, 32);
        lm_array *q4 = lm_quantize(u, LM_Q4_K);
        r = lm_dequantize(q4);
        R(q4);
        break;
    }
    default: no_case = true; break;
    }
    R(x), R(t), R(u), R(w);
    return r;
}

static build_fn builder_of(lm_op op)
{
    switch (lm_op_class_of(op)) {
    case LM_CLASS_NONE: return b_leaf;
    case LM_CLASS_CREATE: return b_create;
    case LM_CLASS_VIEW: return b_leaf;
    case LM_CLASS_UNARY: return b_unary;
    case LM_CLASS_BINARY: return b_binary;
    case LM_CLASS_TERNARY: return op == LM_OP_WHERE ? b_where : NULL;
    case LM_CLASS_REDUCE: return b_reduce;
    case LM_CLASS_OTHER: return op == LM_OP_FUSED ? b_fused : b_other;
    case LM_CLASS_NN: return b_nn;
    }
    return NULL;
}

/* ---- comparison ---- */

/* the values of an evaluated array as f64 on the host (malloc'd) */
static double *host_f64(lm_array *a)
{
    double *v = malloc(sizeof(double) * (size_t)(a->size ? a->size : 1));
    if (lm_array_read(a, v, LM_F64) != LM_OK) {
        free(v);
        return NULL;
    }
    return v;
}

static double nmse_thr(lm_dtype dt)
{
    return dt == LM_F16 || dt == LM_BF16 ? 1e-4 : dt == LM_F64 ? 1e-12 : lm_dtype_is_float(dt) ? 1e-8 : 0;
}

/* ref against got: NaN/Inf at the same places, normalised error under thr */
static bool agree(const double *ref, const double *got, int64_t n, double thr, char *why, size_t wn)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        bool rn = isnan(ref[i]), gn = isnan(got[i]);
        if (rn != gn || (isinf(ref[i]) && ref[i] != got[i]) || (!isinf(ref[i]) && isinf(got[i]) && !rn)) {
            snprintf(why, wn, "element %lld: %g vs %g (NaN/Inf disagree)", (long long)i, ref[i], got[i]);
            return false;
        }
        if (rn || isinf(ref[i])) continue;
        num += (ref[i] - got[i]) * (ref[i] - got[i]);
        den += ref[i] * ref[i];
    }
    double e = num / (den > 0 ? den : 1);
    if (e > thr) {
        snprintf(why, wn, "normalised error %.3g over %.3g", e, thr);
        return false;
    }
    return true;
}

static const lm_dtype dtypes[] = {LM_F32, LM_F16, LM_BF16, LM_F64, LM_I32, LM_I64, LM_U8, LM_BOOL};

/* coverage, printed at the end */
static bool has_fixture[LM_OP_COUNT], grad_checked[LM_OP_COUNT], fused_cpu[LM_OP_COUNT], fused_vk[LM_OP_COUNT];
static bool ran[LM_OP_COUNT], rule_ran[LM_OP_COUNT];

static void walk_op(lm_op op)
{
    const char *name = lm_op_name(op);
    build_fn b = builder_of(op);
    if (!b) {
        oa_fail("%s", name, "-", "no builder entry in tests/test_ops_all.c (add one with the op's kernels)");
        return;
    }
    int built = 0;
    char refusal[160] = "";
    for (size_t t = 0; t < sizeof dtypes / sizeof *dtypes; t++) {
        lm_dtype dt = dtypes[t];
        const char *dn = lm_dtype_name(dt);
        if (op == LM_OP_FUSED) fused_op = LM_OP_EXP;
        no_case = false;
        lm_array *c = b(op, dt, cpu);
        if (no_case) {
            oa_fail("%s", name, "-", "no case in b_create, b_other or b_nn of tests/test_ops_all.c (add one with the op's kernels)");
            R(c);
            return;
        }
        if (!c) {   /* the op refuses this dtype */
            snprintf(refusal, sizeof refusal, "%s", lm_error_message());
            lm_error_clear();
            continue;
        }
        built++;
        cases++;
        if (lm_array_eval(c) != LM_OK) {
            oa_fail("cpu: %s", name, dn, lm_error_message());
            R(c);
            continue;
        }
        ran[op] = true;
        double *ref = host_f64(c);
        /* the same bits at 1..4 threads, on larger shapes */
        if (lm_op_class_of(op) != LM_CLASS_NONE) {
            int64_t s0 = S0, s1 = S1;
            S0 = 37, S1 = 301;
            double *base = NULL;
            int64_t n = 0;
            for (int th = 1; th <= 4; th++) {
                lm_cpu_set_threads(th);
                lm_array *x = b(op, dt, cpu);
                if (!x || lm_array_eval(x) != LM_OK) { oa_fail("at %s threads: build or eval failed", name, dn, "n"); R(x); break; }
                double *v = host_f64(x);
                if (!base) { base = v; n = x->size; }
                else {
                    if (memcmp(base, v, sizeof(double) * (size_t)n)) {
                        char th_s[8];
                        snprintf(th_s, sizeof th_s, "%d", th);
                        oa_fail("bits differ between 1 and %s threads", name, dn, th_s);
                    }
                    free(v);
                }
                R(x);
            }
            free(base);
            lm_cpu_set_threads(threads0);
            S0 = s0, S1 = s1;
        }
        if (vk) {
            lm_array *g = b(op, dt, vk);
            /* compile makes a fused group only for a device that runs it */
            if (g && op == LM_OP_FUSED && !vk->backend->supports(vk, g)) {
                R(g);
                free(ref);
                R(c);
                continue;
            }
            char why[160] = "";
            if (!g || lm_array_eval(g) != LM_OK) {
                oa_fail("vulkan: %s", name, dn, lm_error_message());
            } else {
                double *got = host_f64(g);
                if (g->size != c->size || g->dtype != c->dtype) oa_fail("vulkan: %s", name, dn, "shape or dtype differs");
                /* qlinear: the CPU quantizes x to 8 bits, Vulkan keeps it f32 (docs/VULKAN.md) */
                else if (!agree(ref, got, c->size, op == LM_OP_QLINEAR ? 1e-4 : nmse_thr(c->dtype), why, sizeof why))
                    oa_fail("vulkan against cpu: %s", name, dn, why);
                free(got);
            }
            R(g);
        }
        free(ref);
        R(c);
    }
    /* a builder that makes a graph for no dtype tests nothing */
    if (!built) oa_fail("its builder made no graph for any dtype (last refusal: %s)", name, "-", refusal);
}

/* a unary op the way its builder applies it (cast to f64 keeps the values) */
static lm_array *apply1(lm_op op, lm_array *a)
{
    if (op == LM_OP_CLAMP) return lm_clamp(a, 0.5, 1.5);
    if (op == LM_OP_CAST) return lm_node_new(LM_OP_CAST, LM_F64, a->ndim, a->shape, 1, &a, NULL, NULL);
    if (op == LM_OP_COPY) return lm_node_new(LM_OP_COPY, a->dtype, a->ndim, a->shape, 1, &a, NULL, NULL);
    return lm_unary(op, a);
}

/* d/dx sum(w * op(x)) against central differences, f64, away from kinks */
static void grad_check(lm_op op)
{
    lm_op_class cls = lm_op_class_of(op);
    if (!lm_op_differentiable(op) || (cls != LM_CLASS_UNARY && cls != LM_CLASS_BINARY)) return;
    const char *name = lm_op_name(op);
    int64_t sh[1] = {6};
    double xs[6] = {0.31, 0.77, 1.23, 1.71, 0.52, 2.13}, ys[6] = {1.37, 0.61, 1.93, 0.83, 1.11, 0.47};
    lm_array *x = lm_from_data(1, sh, LM_F64, xs, cpu), *y = lm_from_data(1, sh, LM_F64, ys, cpu);
    lm_array *lx = lm_grad_leaf(x), *ly = lm_grad_leaf(y);
    lm_array *out = cls == LM_CLASS_UNARY ? apply1(op, lx) : lm_binary(op, lx, ly);
    lm_array *one = lm_full(1, sh, 1, LM_F64, cpu);
    lm_array *ins[2] = {lx, ly}, *g[2] = {NULL, NULL};
    int nin = cls == LM_CLASS_UNARY ? 1 : 2;
    cases++;
    if (!out || lm_vjp(1, &out, &one, nin, ins, g) != LM_OK) {
        oa_fail("grad: %s", name, "f64", lm_error_message());
    } else {
        for (int k = 0; k < nin; k++) {
            double *gv = host_f64(g[k]);
            for (int i = 0; i < 6 && gv; i++) {
                double h = 1e-6, p[6], m[6];
                memcpy(p, k ? ys : xs, sizeof p);
                memcpy(m, k ? ys : xs, sizeof m);
                p[i] += h, m[i] -= h;
                lm_array *ap = lm_from_data(1, sh, LM_F64, p, cpu), *am = lm_from_data(1, sh, LM_F64, m, cpu);
                lm_array *fp = cls == LM_CLASS_UNARY ? apply1(op, ap) : k ? lm_binary(op, x, ap) : lm_binary(op, ap, y);
                lm_array *fm = cls == LM_CLASS_UNARY ? apply1(op, am) : k ? lm_binary(op, x, am) : lm_binary(op, am, y);
                double *vp = host_f64(fp), *vm = host_f64(fm);
                double num = (vp[i] - vm[i]) / (2 * h);
                if (fabs(num - gv[i]) > 1e-5 * (1 + fabs(num))) {
                    char s[96];
                    snprintf(s, sizeof s, "input %d element %d: rule %.9g, differences %.9g", k + 1, i, gv[i], num);
                    oa_fail("grad: %s", name, "f64", s);
                }
                free(vp), free(vm);
                R(ap), R(am), R(fp), R(fm);
            }
            free(gv);
        }
        grad_checked[op] = true;
    }
    R(x), R(y), R(lx), R(ly), R(out), R(one), R(g[0]), R(g[1]);
}

/* a one-step fused group of op on CPU (and Vulkan): supported, and equal
 * to the unfused op */
static void fused_check(lm_op op)
{
    lm_op_class cls = lm_op_class_of(op);
    if (cls != LM_CLASS_UNARY && cls != LM_CLASS_BINARY) return;
    fused_op = op;
    /* Vulkan: the interpreter (LUMEN_VK_FUSED=interp, backends/vulkan/
     * fused.c), which reads the same program as the specialised kernel
     * with one pipeline for every op; a specialised pipeline per op took
     * lavapipe about a second each, 60 s of this suite on a loaded 2-core
     * machine (test_vulkan_fused checks that kernel) */
    char *was = getenv("LUMEN_VK_FUSED") ? strdup(getenv("LUMEN_VK_FUSED")) : NULL;
    if (vk) {
        assert_int_equal(lm_device_sync(vk), LM_OK);   /* the knob changes with the device idle */
        setenv("LUMEN_VK_FUSED", "interp", 1);
    }
    lm_device *devs[2] = {cpu, vk};
    for (int k = 0; k < 2 && devs[k]; k++) {
        lm_array *f = b_fused(LM_OP_FUSED, LM_F32, devs[k]);
        if (!f) { lm_error_clear(); break; }   /* copy, cast, clamp: not lm_unary's */
        bool ok = devs[k]->backend->supports(devs[k], f);
        if (ok) {
            cases++;
            lm_array *a = input_t(devs[k], LM_F32, S0, S1, -3, 3, false, 14), *b = input_t(devs[k], LM_F32, S0, S1, 1, 3, true, 15);
            lm_array *ca = lm_contiguous(a), *cb = lm_contiguous(b);
            lm_array *plain = cls == LM_CLASS_UNARY ? lm_unary(op, ca) : lm_binary(op, ca, cb);
            char why[160] = "";
            if (lm_array_eval(f) != LM_OK || lm_array_eval(plain) != LM_OK) {
                oa_fail("fused: %s", lm_op_name(op), devs[k]->spec, lm_error_message());
            } else {
                double *x = host_f64(plain), *y = host_f64(f);
                if (!agree(x, y, plain->size, nmse_thr(LM_F32), why, sizeof why))
                    oa_fail("fused against unfused: %s", lm_op_name(op), devs[k]->spec, why);
                free(x), free(y);
            }
            R(a), R(b), R(ca), R(cb), R(plain);
        }
        if (k == 0) fused_cpu[op] = ok;
        else fused_vk[op] = ok;
        R(f);
    }
    if (vk) {
        assert_int_equal(lm_device_sync(vk), LM_OK);
        if (was) setenv("LUMEN_VK_FUSED", was, 1);
        else unsetenv("LUMEN_VK_FUSED");
    }
    free(was);
}

/* a reference fixture (tests/ref/fixtures) named after the op */
static void find_fixture(lm_op op)
{
    static const char *const pat[] = {"core/unary_%s.npy", "core/unaryp_%s.npy", "core/binary_%s.npy",
                                      "core/red_%s.npy", "nn/%s.npy", "nn/%s_y.npy", "nn/%s_out.npy"};
    for (size_t i = 0; i < sizeof pat / sizeof *pat; i++) {
        char rel[128], path[256];
        snprintf(rel, sizeof rel, pat[i], lm_op_name(op));
        snprintf(path, sizeof path, "%s%s", LM_FIXTURES, rel);
        FILE *f = fopen(path, "rb");
        if (f) {
            fclose(f);
            has_fixture[op] = true;
            return;
        }
    }
}

static void test_walk(void **state)
{
    (void)state;
    for (int op = 0; op < LM_OP_COUNT; op++) {
        walk_op((lm_op)op);
        grad_check((lm_op)op);
        fused_check((lm_op)op);
        find_fixture((lm_op)op);
    }
}

/* every op marked differentiable has a rule that runs (f32 inputs) */
static void test_grad_rules(void **state)
{
    (void)state;
    for (int op = 0; op < LM_OP_COUNT; op++) {
        if (!lm_op_differentiable((lm_op)op) || op == LM_OP_VIEW) continue;
        build_fn b = builder_of((lm_op)op);
        lm_op_class cls = lm_op_class_of((lm_op)op);
        if (!b || cls == LM_CLASS_UNARY || cls == LM_CLASS_BINARY) continue;   /* checked numerically */
        /* differentiate through the node: its float inputs as leaves */
        fused_op = LM_OP_EXP;
        lm_array *y = b((lm_op)op, LM_F32, cpu);
        if (!y) { oa_fail("grad: %s", lm_op_name((lm_op)op), "f32", "no f32 graph"); continue; }
        lm_array *ins[8], *g[8] = {0};
        int n = 0;
        for (int i = 0; i < y->ninputs && n < 8; i++)
            if (lm_dtype_is_float(y->inputs[i]->dtype)) ins[n++] = y->inputs[i];
        lm_array *one = lm_full(y->ndim, y->shape, 1, y->dtype, cpu);
        cases++;
        if (lm_vjp(1, &y, &one, n, ins, g) != LM_OK) oa_fail("grad: %s", lm_op_name((lm_op)op), "f32", lm_error_message());
        else rule_ran[op] = true;
        for (int i = 0; i < n; i++) R(g[i]);
        R(one), R(y);
    }
}

/* the op table's dt column decides what the kernels see: a FLOAT op
 * computes integers in f32 (lm_unary/lm_binary cast them first), so an i64
 * case of its CPU kernel could never run; a BOOL op writes u8, and its
 * kernel answers for the compute types of its inputs */
static void test_dtype_rules(void **state)
{
    (void)state;
    for (int op = 0; op < LM_OP_COUNT; op++) {
        lm_op_class cls = lm_op_class_of((lm_op)op);
        if (cls != LM_CLASS_UNARY && cls != LM_CLASS_BINARY) continue;
        lm_op_dtype_rule rule = lm_op_dtype_rule_of((lm_op)op);
        cases++;
        if (rule == LM_DT_FLOAT && lm_cpu_ew_has((lm_op)op, LM_I64))
            oa_fail("%s", lm_op_name((lm_op)op), "i64",
                    "the CPU kernel has an i64 case, but core/op.h makes the op float-only (dt FLOAT): dead code");
        if (rule == LM_DT_FLOAT && !lm_cpu_ew_has((lm_op)op, LM_F32))
            oa_fail("%s", lm_op_name((lm_op)op), "f32", "a float-only op (dt FLOAT) without an f32 CPU kernel");
        if (rule == LM_DT_BOOL && !lm_cpu_ew_has((lm_op)op, LM_F32))
            oa_fail("%s", lm_op_name((lm_op)op), "f32", "a bool-valued op (dt BOOL) without an f32 CPU kernel");
        /* the bl column: what bool inputs give an op whose dt is SAME */
        if (rule != LM_DT_SAME || op == LM_OP_CLAMP) continue;
        int64_t n = 3;
        lm_array *x = lm_full(1, &n, 1, LM_BOOL, cpu), *y = NULL;
        if (cls == LM_CLASS_UNARY) y = op == LM_OP_COPY ? lm_contiguous(x) : lm_unary((lm_op)op, x);
        else y = lm_binary((lm_op)op, x, x);
        lm_op_bool_rule bl = lm_op_bool_rule_of((lm_op)op);
        lm_dtype want = bl == LM_BOOL_I64 ? LM_I64 : LM_BOOL;
        if (bl == LM_BOOL_ERR ? y != NULL : !y || y->dtype != want || lm_array_eval(y) != LM_OK) {
            char s[96];
            snprintf(s, sizeof s, "bool inputs gave %s, the bl column says %s", y ? lm_dtype_name(y->dtype) : "an error",
                     bl == LM_BOOL_ERR ? "an error" : lm_dtype_name(want));
            oa_fail("%s", lm_op_name((lm_op)op), "bool", s);
        }
        lm_error_clear();
        R(x), R(y);
    }
}

static void test_summary(void **state)
{
    (void)state;
    printf("\nop coverage (%d ops, %d cases, backends: cpu%s)\n", LM_OP_COUNT, cases, vk ? " vulkan" : "");
    printf("  %-20s %-8s %-8s %-10s %-10s\n", "op", "fixture", "grad", "fused cpu", "fused vk");
    int nofx = 0, nogr = 0, nofu = 0;
    for (int op = 1; op < LM_OP_COUNT; op++) {
        lm_op_class cls = lm_op_class_of((lm_op)op);
        bool ew = cls == LM_CLASS_UNARY || cls == LM_CLASS_BINARY;
        const char *gr = !lm_op_differentiable((lm_op)op) ? "n/a" : grad_checked[op] ? "checked"
                       : rule_ran[op] ? "rule ran" : "-";
        bool show = !has_fixture[op] || (ew && (!fused_cpu[op] || (vk && !fused_vk[op]))) ||
                    (lm_op_differentiable((lm_op)op) && !grad_checked[op] && !rule_ran[op]);
        nofx += !has_fixture[op];
        nogr += lm_op_differentiable((lm_op)op) && !grad_checked[op];
        nofu += ew && !fused_cpu[op];
        if (show)
            printf("  %-20s %-8s %-8s %-10s %-10s\n", lm_op_name((lm_op)op), has_fixture[op] ? "yes" : "-", gr,
                   !ew ? "n/a" : fused_cpu[op] ? "yes" : "-", !ew || !vk ? "n/a" : fused_vk[op] ? "yes" : "-");
    }
    printf("  without a fixture: %d; differentiable without a numerical gradient test: %d; "
           "elementwise without a fused cpu path: %d\n", nofx, nogr, nofu);
    if (failures) fprintf(stderr, "test_ops_all: %d failure(s) in %d cases\n", failures, cases);
    assert_int_equal(failures, 0);
}

int main(void)
{
    setenv("LUMEN_THREADS", "4", 0);   /* 4 workers even on a 2-core machine */
    setenv("LUMEN_FALLBACK", "quiet", 0);   /* ops Vulkan leaves to the CPU are expected here */
    if (lm_init() != LM_OK) return 1;
    threads0 = lm_cpu_threads();
    cpu = lm_device_cpu();
    lm_device_set_default(cpu);
    for (int i = 0; i < lm_device_count(); i++)
        if (!strncmp(lm_device_at(i)->spec, "vulkan", 6)) { vk = lm_device_at(i); break; }
    const char *nv = getenv("OPS_ALL_NO_VULKAN");   /* the CPU walk alone */
    if (nv && *nv && strcmp(nv, "0")) vk = NULL;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_walk), cmocka_unit_test(test_grad_rules), cmocka_unit_test(test_dtype_rules),
        cmocka_unit_test(test_summary),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
