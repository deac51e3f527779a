/* test_compile.c - tracing, optimisation passes, fusion and replay. */
#include "testutil.h"
#include "core/ops_nn.h"

static lm_array *ph(int64_t n, lm_dtype dt) { return lm_placeholder(1, &n, dt, NULL); }

static lm_array *randu(int64_t n, uint64_t seed)
{
    lm_array *a = lm_random_uniform(1, &n, -2, 2, LM_F32, lm_random_key(seed), NULL);
    assert_int_equal(lm_array_eval(a), LM_OK);
    return a;
}

/* gelu_tanh(x * a + b) * a with a, b captured */
static lm_array *gelu_chain(lm_array *x, lm_array *a, lm_array *b)
{
    lm_array *t1 = lm_binary(LM_OP_MUL, x, a), *t2 = lm_binary(LM_OP_ADD, t1, b);
    lm_array *t3 = lm_unary(LM_OP_GELU_TANH, t2), *y = lm_binary(LM_OP_MUL, t3, a);
    lm_array_release(t1);
    lm_array_release(t2);
    lm_array_release(t3);
    return y;
}

static void assert_same(lm_array *x, lm_array *y)
{
    double *a = tu_read(x), *b = tu_read(y);
    assert_int_equal(x->size, y->size);
    assert_memory_equal(a, b, sizeof(double) * (size_t)x->size);
    free(a);
    free(b);
}

static void test_fuse_gelu_bitwise(void **state)
{
    (void)state;
    int64_t n = 100001;
    lm_array *a = randu(n, 1), *b = randu(n, 2), *x = randu(n, 3);
    lm_array *p = ph(n, LM_F32);
    lm_array *traced = gelu_chain(p, a, b);
    lm_compiled *c = lm_compile_graph(1, &p, 1, &traced, LM_COMPILE_ON);
    assert_non_null(c);
    assert_int_equal(lm_compiled_kernels(c), 1);
    char *desc = lm_compiled_describe(c);
    assert_non_null(strstr(desc, "fused(mul,add,gelu_tanh,mul)"));
    free(desc);
    lm_array *out;
    assert_int_equal(lm_compiled_call(c, 1, &x, &out), 1);
    int64_t k0 = lm_eval_kernel_count();
    assert_int_equal(lm_array_eval(out), LM_OK);
    assert_int_equal(lm_eval_kernel_count() - k0, 1);
    lm_array *ref = gelu_chain(x, a, b);
    k0 = lm_eval_kernel_count();
    assert_int_equal(lm_array_eval(ref), LM_OK);
    assert_int_equal(lm_eval_kernel_count() - k0, 4);
    assert_same(out, ref);
    /* no_fuse mode: same numbers, four kernels */
    lm_compiled *c2 = lm_compile_graph(1, &p, 1, &traced, LM_COMPILE_NO_FUSE);
    assert_int_equal(lm_compiled_kernels(c2), 4);
    lm_array *out2;
    assert_int_equal(lm_compiled_call(c2, 1, &x, &out2), 1);
    assert_same(out2, ref);
    lm_compiled_free(c);
    lm_compiled_free(c2);
    lm_array *arr[] = {a, b, x, p, traced, out, ref, out2};
    for (int i = 0; i < 8; i++) lm_array_release(arr[i]);
    assert_int_equal(lm_array_live_count(), 0);
}

static void test_chain_of_ten_and_mixed_dtypes(void **state)
{
    (void)state;
    static const lm_dtype types[] = {LM_F32, LM_F16, LM_BF16, LM_F64};
    for (int t = 0; t < 4; t++) {
        int64_t n = 5000;
        lm_array *x0 = randu(n, 7), *x = lm_cast(x0, types[t]);
        lm_array *p = ph(n, types[t]);
        lm_array *in[2] = {p, x};
        lm_array *res[2];
        for (int pass = 0; pass < 2; pass++) {
            lm_array *v = lm_array_retain(in[pass]);
            static const lm_op ops[] = {LM_OP_SIN, LM_OP_EXP, LM_OP_NEG, LM_OP_TANH, LM_OP_ABS,
                                        LM_OP_SQRT, LM_OP_SIGMOID, LM_OP_SQUARE, LM_OP_SILU, LM_OP_COS};
            for (int k = 0; k < 10; k++) {
                lm_array *w = lm_unary(ops[k], v);
                lm_array_release(v);
                v = w;
            }
            res[pass] = v;
        }
        lm_compiled *c = lm_compile_graph(1, &p, 1, &res[0], LM_COMPILE_ON);
        assert_int_equal(lm_compiled_kernels(c), 1);
        lm_array *out;
        assert_int_equal(lm_compiled_call(c, 1, &x, &out), 1);
        assert_same(out, res[1]);   /* registers keep each step's dtype: bitwise equal */
        lm_compiled_free(c);
        lm_array *arr[] = {x0, x, p, res[0], res[1], out};
        for (int i = 0; i < 6; i++) lm_array_release(arr[i]);
    }
}

/* Random elementwise graphs (many values live at once, both operand
 * orders, constants, a broadcast row, casts through half types, clamp)
 * compiled into one kernel give the unfused graph's values bit for bit, in
 * f32, f16 and bf16, with NaN, infinities, -0 and subnormals among the
 * inputs and a length that leaves a ragged tail.  (A NaN is any NaN: which
 * operand's payload x + y or x * y keeps when both are NaN is the
 * compiler's choice of operand order.) */
static uint32_t rg_next(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static lm_array *rgraph(lm_array *x, lm_array *y, lm_array *row, uint32_t seed, lm_dtype dt)
{
    static const lm_op un[] = {LM_OP_NEG, LM_OP_ABS, LM_OP_SQUARE, LM_OP_RECIPROCAL, LM_OP_RELU, LM_OP_SIGN,
                               LM_OP_EXP, LM_OP_TANH, LM_OP_SIGMOID, LM_OP_SILU, LM_OP_SQRT, LM_OP_LOG,
                               LM_OP_SIN, LM_OP_GELU_TANH, LM_OP_SOFTPLUS, LM_OP_ERF, LM_OP_RSQRT, LM_OP_GELU};
    static const lm_op bin[] = {LM_OP_ADD, LM_OP_SUB, LM_OP_MUL, LM_OP_DIV, LM_OP_MAXIMUM, LM_OP_MINIMUM,
                                LM_OP_POW, LM_OP_ATAN2};
    lm_array *v[64];
    int n = 0;
    v[n++] = lm_array_retain(x);
    v[n++] = lm_array_retain(y);
    v[n++] = lm_array_retain(row);
    uint32_t s = seed;
    for (int k = 0; k < 40; k++) {
        uint32_t r = rg_next(&s) % 100;
        lm_array *a = v[rg_next(&s) % (uint32_t)n], *b = v[rg_next(&s) % (uint32_t)n], *w;
        if (a == row && b == row) a = x;
        if (r < 35) w = lm_unary(un[rg_next(&s) % (sizeof un / sizeof un[0])], a == row ? x : a);
        else if (r < 80) w = lm_binary(bin[rg_next(&s) % (sizeof bin / sizeof bin[0])], a, b);
        else if (r < 90)
            w = lm_binary_scalar(bin[rg_next(&s) % 4], a == row ? x : a, 0.75 - (double)(rg_next(&s) % 5),
                                 rg_next(&s) & 1);
        else if (r < 95) w = lm_clamp(a == row ? x : a, rg_next(&s) & 1 ? -0.5 : NAN, rg_next(&s) & 1 ? 1.5 : NAN);
        else {
            lm_array *h = lm_cast(a == row ? x : a, dt == LM_F16 ? LM_BF16 : LM_F16);
            w = lm_cast(h, dt);
            lm_array_release(h);
        }
        v[n++] = w;
    }
    /* the result reads several values, so many stay live to the end */
    lm_array *out = lm_array_retain(v[n - 1]);
    for (int k = 0; k < 6; k++) {
        lm_array *t = lm_binary(k & 1 ? LM_OP_SUB : LM_OP_ADD, out, v[3 + (int)(rg_next(&s) % (uint32_t)(n - 3))]);
        lm_array_release(out);
        out = t;
    }
    for (int k = 0; k < n; k++) lm_array_release(v[k]);
    return out;
}

static lm_array *rg_input(int64_t r, int64_t c, uint64_t seed, lm_dtype dt)
{
    int64_t sh[2] = {r, c};
    lm_array *u = lm_random_uniform(2, sh, -3, 3, LM_F32, lm_random_key(seed), NULL);
    double *v = tu_read(u);
    static const double special[] = {NAN, INFINITY, -INFINITY, -0.0, 0.0, 1e-40, -3e-39, 70000.0, 1e-6};
    for (size_t k = 0; k < sizeof special / sizeof special[0]; k++) v[(k * 97 + seed) % (uint64_t)(r * c)] = special[k];
    lm_array *a = lm_from_data(2, sh, LM_F64, v, NULL), *b = lm_cast(a, dt);
    assert_int_equal(lm_array_eval(b), LM_OK);
    free(v);
    lm_array_release(u);
    lm_array_release(a);
    return b;
}

static void test_random_graphs_bitwise(void **state)
{
    (void)state;
    static const lm_dtype types[] = {LM_F32, LM_F16, LM_BF16};
    const int64_t R = 37, C = 131, sh[2] = {R, C};
    for (int t = 0; t < 3; t++)
        for (uint32_t seed = 1; seed <= 12; seed++) {
            lm_array *x = rg_input(R, C, seed, types[t]), *y = rg_input(R, C, seed + 100, types[t]);
            lm_array *row0 = rg_input(1, C, seed + 200, types[t]);
            lm_array *row = lm_reshape(row0, 1, &sh[1]);
            lm_array *px = lm_placeholder(2, sh, types[t], NULL), *py = lm_placeholder(2, sh, types[t], NULL);
            lm_array *prow = lm_placeholder(1, &sh[1], types[t], NULL);
            lm_array *phs[3] = {px, py, prow}, *ins[3] = {x, y, row};
            lm_array *traced = rgraph(px, py, prow, seed, types[t]);
            lm_compiled *c = lm_compile_graph(3, phs, 1, &traced, LM_COMPILE_ON);
            assert_non_null(c);
            lm_array *out;
            assert_int_equal(lm_compiled_call(c, 3, ins, &out), 1);
            lm_array *ref = rgraph(x, y, row, seed, types[t]);
            assert_int_equal(lm_array_eval(ref), LM_OK);
            double *o = tu_read(out), *e = tu_read(ref);
            for (int64_t i = 0; i < R * C; i++)
                if (memcmp(&o[i], &e[i], sizeof(double)) && !(isnan(o[i]) && isnan(e[i])))
                    fail_msg("%s graph %u: [%lld] compiled %.9g, unfused %.9g", lm_dtype_name(types[t]), seed,
                             (long long)i, o[i], e[i]);
            free(o);
            free(e);
            lm_compiled_free(c);
            lm_array *arr[] = {x, y, row0, row, px, py, prow, traced, out, ref};
            for (size_t i = 0; i < sizeof arr / sizeof arr[0]; i++) lm_array_release(arr[i]);
        }
    assert_int_equal(lm_array_live_count(), 0);
}

static lm_array *diamond(lm_array *a, lm_array *b)
{
    lm_array *m = lm_binary(LM_OP_MUL, a, b), *s = lm_binary(LM_OP_ADD, a, b);
    lm_array *r = lm_binary(LM_OP_MUL, m, s);
    lm_array_release(m);
    lm_array_release(s);
    return r;
}

static void test_diamond_peak_memory(void **state)
{
    (void)state;
    int64_t n = 1 << 20;
    lm_device *dev = lm_device_default();   /* LUMEN_DEVICE picks it */
    lm_array *a = randu(n, 11), *b = randu(n, 12);
    lm_array *pa = ph(n, LM_F32), *pb = ph(n, LM_F32);
    lm_array *tr = diamond(pa, pb);
    lm_array *phs[2] = {pa, pb}, *ins[2] = {a, b};
    lm_compiled *c = lm_compile_graph(2, phs, 1, &tr, LM_COMPILE_ON);
    assert_int_equal(lm_compiled_kernels(c), 1);
    lm_device_clear_cache(dev);
    lm_device_reset_peak(dev);
    size_t base = lm_device_memory(dev).active;
    lm_array *u = diamond(a, b);
    assert_int_equal(lm_array_eval(u), LM_OK);
    size_t peak_plain = lm_device_memory(dev).peak - base;
    lm_device_clear_cache(dev);
    lm_device_reset_peak(dev);
    base = lm_device_memory(dev).active;
    lm_array *out;
    assert_int_equal(lm_compiled_call(c, 2, ins, &out), 1);
    assert_int_equal(lm_array_eval(out), LM_OK);
    size_t peak_fused = lm_device_memory(dev).peak - base;
    assert_true(peak_fused < peak_plain);
    assert_true(peak_fused <= (size_t)n * 4 * 5 / 4);    /* just the output */
    assert_true(peak_plain >= (size_t)n * 4 * 3);        /* a*b and a+b lived beside the output */
    assert_same(out, u);
    lm_compiled_free(c);
    lm_array *arr[] = {a, b, pa, pb, tr, u, out};
    for (int i = 0; i < 7; i++) lm_array_release(arr[i]);
}

static void test_cse_fold_layernorm_tail(void **state)
{
    (void)state;
    int64_t sh[2] = {8, 64};
    lm_array *p = lm_placeholder(2, sh, LM_F32, NULL);
    /* exp(p) + exp(p): CSE leaves one exp, fused with the add */
    lm_array *e1 = lm_unary(LM_OP_EXP, p), *e2 = lm_unary(LM_OP_EXP, p), *s = lm_binary(LM_OP_ADD, e1, e2);
    lm_compiled *c = lm_compile_graph(1, &p, 1, &s, LM_COMPILE_ON);
    assert_int_equal(lm_compiled_kernels(c), 1);
    lm_compiled_free(c);
    /* a lazy captured constant (ones * 3) is folded once */
    lm_array *w0 = lm_ones(2, sh, LM_F32, NULL), *w = lm_binary_scalar(LM_OP_MUL, w0, 3, false);
    lm_array *y = lm_binary(LM_OP_MUL, p, w);
    c = lm_compile_graph(1, &p, 1, &y, LM_COMPILE_ON);
    assert_non_null(c);
    assert_int_equal(lm_compiled_kernels(c), 1);
    assert_non_null(w->buf);   /* folded: evaluated at compile time */
    lm_compiled_free(c);
    /* layer norm: two reductions and one fused elementwise tail */
    int ax = -1;
    lm_array *mu = lm_reduce(LM_OP_MEAN, p, 1, &ax, true);
    lm_array *xc = lm_binary(LM_OP_SUB, p, mu);
    lm_array *var = lm_reduce(LM_OP_MEAN, lm_binary(LM_OP_MUL, xc, xc), 1, &ax, true);
    lm_array *ve = lm_binary_scalar(LM_OP_ADD, var, 1e-5, false);
    lm_array *rs = lm_unary(LM_OP_RSQRT, ve);
    lm_array *nrm = lm_binary(LM_OP_MUL, xc, rs);
    lm_array *ln = lm_binary(LM_OP_ADD, lm_binary(LM_OP_MUL, nrm, w), w);
    c = lm_compile_graph(1, &p, 1, &ln, LM_COMPILE_ON);
    char *d = lm_compiled_describe(c);
    int fused = 0;
    for (char *q = d; (q = strstr(q, "fused(")); q++) fused++;
    free(d);
    /* mean, sub, square-mean, (add eps, rsqrt), (mul, mul, add): the tail is one kernel */
    assert_true(lm_compiled_kernels(c) <= 6);
    assert_true(fused >= 2);
    lm_array *x = lm_random_normal(2, sh, 0, 1, LM_F32, lm_random_key(5), NULL), *out;
    assert_int_equal(lm_compiled_call(c, 1, &x, &out), 1);
    /* rows of the result have mean 3 (the bias) */
    lm_array *m = lm_reduce(LM_OP_MEAN, out, 0, NULL, false);
    double v;
    assert_int_equal(lm_array_get(m, NULL, &v), LM_OK);
    assert_float_equal(v, 3.0, 1e-4);
    lm_compiled_free(c);
    lm_array *arr[] = {p, e1, e2, s, w0, w, y, mu, xc, var, ve, rs, nrm, ln, x, out, m};
    for (int i = 0; i < 17; i++) lm_array_release(arr[i]);
    lm_sweep();
}

static void test_shapeless_and_views(void **state)
{
    (void)state;
    int64_t live0 = lm_array_live_count();
    lm_array *p = ph(4, LM_F32);
    lm_array *y = lm_binary_scalar(LM_OP_MUL, p, 2, false), *z = lm_unary(LM_OP_EXP, y);
    lm_compiled *c = lm_compile_graph(1, &p, 1, &z, LM_COMPILE_ON);
    lm_array *x = lm_arange(0, 7, 1, LM_F32, NULL), *out;
    assert_int_equal(lm_compiled_call(c, 1, &x, &out), 1);   /* a new length replays */
    assert_int_equal(out->shape[0], 7);
    double v;
    assert_int_equal(lm_array_get(out, (int64_t[]){6}, &v), LM_OK);
    assert_float_equal(v, exp(12.0), 1e-1);
    lm_compiled_free(c);
    /* a trace with a view needs a retrace for a new shape */
    lm_array *t = lm_slice(p, 0, 1, 3, 1), *u = lm_unary(LM_OP_NEG, t), *o2 = NULL;
    c = lm_compile_graph(1, &p, 1, &u, LM_COMPILE_ON);
    assert_int_equal(lm_compiled_call(c, 1, &x, &o2), -2);
    lm_array *x4 = lm_arange(0, 4, 1, LM_F32, NULL), *o3;
    assert_int_equal(lm_compiled_call(c, 1, &x4, &o3), 1);
    tu_assert_close_data(o3, (double[]){-1, -2}, 2, 0, 0, "slice replay");
    /* errors: wrong dtype, evaluating a placeholder */
    lm_array *xi = lm_arange(0, 4, 1, LM_I32, NULL), *o4;
    assert_int_equal(lm_compiled_call(c, 1, &xi, &o4), -1);
    assert_non_null(strstr(lm_error_message(), "traced as f32"));
    assert_int_equal(lm_array_eval(y), LM_ERR_STATE);
    assert_non_null(strstr(lm_error_message(), "placeholder"));
    assert_int_equal(lm_export_dot(z, "/tmp/lumen_test.dot"), LM_OK);
    FILE *f = fopen("/tmp/lumen_test.dot", "r");
    char buf[256] = {0};
    assert_non_null(f);
    assert_true(fread(buf, 1, sizeof buf - 1, f) > 0);
    fclose(f);
    assert_non_null(strstr(buf, "digraph"));
    lm_compiled_free(c);
    lm_array *arr[] = {p, y, z, x, out, t, u, x4, o3, xi};
    for (int i = 0; i < 10; i++) lm_array_release(arr[i]);
    assert_int_equal(lm_array_live_count(), live0);
}

/* softmax(x * 2) and rms_norm traced on [4, 8] replay on [3, 5] like the
 * builders called directly (NN nodes rebuilt for the new shapes) */
static void test_nn_shapeless(void **state)
{
    (void)state;
    int64_t live0 = lm_array_live_count();
    int64_t s0[2] = {4, 8}, s1[2] = {3, 5};
    lm_array *p = lm_placeholder(2, s0, LM_F32, lm_device_cpu());
    lm_array *y = lm_binary_scalar(LM_OP_MUL, p, 2, false), *z = lm_softmax(y, 1);
    lm_array *w = lm_rms_norm(z, 1, NULL, 1e-6);
    lm_compiled *c = lm_compile_graph(1, &p, 1, &w, LM_COMPILE_ON);
    assert_non_null(c);
    lm_array *x = lm_random_uniform(2, s1, -2, 2, LM_F32, lm_random_key(3), lm_device_cpu()), *out;
    assert_int_equal(lm_compiled_call(c, 1, &x, &out), 1);
    assert_int_equal(out->shape[0], 3);
    assert_int_equal(out->shape[1], 5);
    lm_array *y2 = lm_binary_scalar(LM_OP_MUL, x, 2, false), *z2 = lm_softmax(y2, 1);
    lm_array *w2 = lm_rms_norm(z2, 1, NULL, 1e-6);
    assert_same(out, w2);
    lm_compiled_free(c);
    lm_array *arr[] = {p, y, z, w, x, out, y2, z2, w2};
    for (int i = 0; i < 9; i++) lm_array_release(arr[i]);
    assert_int_equal(lm_array_live_count(), live0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fuse_gelu_bitwise),
        cmocka_unit_test(test_chain_of_ten_and_mixed_dtypes),
        cmocka_unit_test(test_random_graphs_bitwise),
        cmocka_unit_test(test_diamond_peak_memory),
        cmocka_unit_test(test_cse_fold_layernorm_tail),
        cmocka_unit_test(test_shapeless_and_views),
        cmocka_unit_test(test_nn_shapeless),
    };
    return cmocka_run_group_tests_name("compile", tests, NULL, NULL);
}
