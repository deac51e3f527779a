/* test_ops_ref.c - elementwise, reduction and matmul results against the
 * PyTorch/numpy references of tests/ref/gen_core.py, for f32, f64, f16 and
 * bf16, on contiguous, transposed (strided) and broadcast inputs. */
#include "testutil.h"

#define FX(name) "core/" name ".npy"

static const lm_dtype float_types[] = {LM_F32, LM_F64, LM_F16, LM_BF16};

/* One row for every unary and binary op of the op table (core/op.h): the
 * fixture its result is checked against (tests/ref/gen_core.py writes
 * core/<file>.npy from the input core/<in>.npy), or NULL with where it is
 * checked instead.  The _Static_asserts below count the rows against the
 * table, so an op added there without a row here does not compile, and
 * test_rows names an op that has no row or two. */
#define REF_UNARY(X) \
    X(COPY, NULL, NULL)          /* exact: test_ops_all compares every backend */ \
    X(CAST, NULL, NULL)          /* test_dtype.c, parity's test_cast */ \
    X(NEG, "x", "unary_neg") X(ABS, "x", "unary_abs") X(SIGN, "x", "unary_sign") X(EXP, "x", "unary_exp") \
    X(LOG, "xp", "unaryp_log") X(LOG1P, "xp", "unary_log1p") X(EXPM1, "x", "unary_expm1") \
    X(SQRT, "xp", "unaryp_sqrt") X(RSQRT, "xp", "unaryp_rsqrt") X(SQUARE, "x", "unary_square") \
    X(RECIPROCAL, "xp", "unaryp_reciprocal") X(SIN, "x", "unary_sin") X(COS, "x", "unary_cos") \
    X(TAN, NULL, NULL)           /* test_tan: on x / 4, away from the poles */ \
    X(TANH, "x", "unary_tanh") X(SIGMOID, "x", "unary_sigmoid") X(RELU, "x", "unary_relu") \
    X(GELU, "x", "unary_gelu") X(GELU_TANH, "x", "unary_gelu_tanh") X(SILU, "x", "unary_silu") \
    X(SOFTPLUS, "x", "unary_softplus") X(ERF, "x", "unary_erf") X(ERFC, "x", "unary_erfc") \
    X(FLOOR, "x", "unary_floor") X(CEIL, "x", "unary_ceil") X(ROUND, "x", "unary_round") \
    X(ISNAN, NULL, NULL) X(ISINF, NULL, NULL) X(LOGICAL_NOT, NULL, NULL)   /* exact: test_ops_all, parity */ \
    X(CLAMP, NULL, NULL)         /* test_ops_elementwise.c */

#define REF_BINARY(X) \
    X(ADD, "a", "binary_add") X(SUB, "a", "binary_sub") X(MUL, "a", "binary_mul") X(DIV, "a", "binary_div") \
    X(POW, NULL, NULL)           /* test_binary: on |a| */ \
    X(MOD, "a", "binary_mod") X(MAXIMUM, "a", "binary_maximum") X(MINIMUM, "a", "binary_minimum") \
    X(ATAN2, "a", "binary_atan2") X(LOGADDEXP, "a", "binary_logaddexp") \
    X(FLOOR_DIVIDE, "a", "binary_floor_divide") X(HYPOT, "a", "binary_hypot") \
    X(LT, NULL, NULL)            /* test_binary: a bool result */ \
    X(EQ, NULL, NULL) X(NE, NULL, NULL) X(LE, NULL, NULL) X(GT, NULL, NULL) X(GE, NULL, NULL) \
    X(LOGICAL_AND, NULL, NULL) X(LOGICAL_OR, NULL, NULL) X(LOGICAL_XOR, NULL, NULL)   /* exact: test_ops_all */

typedef struct { lm_op op; const char *in, *file; } ref_row;
#define REF_ROW(OP, in, file) {LM_OP_##OP, in, file},
static const ref_row unary_rows[] = {REF_UNARY(REF_ROW)}, binary_rows[] = {REF_BINARY(REF_ROW)};
#undef REF_ROW

#define COUNT_ROW(OP, in, file) + 1
#define COUNT_UNARY(name, cls, ar, dt, bl, gr, vm, vk, v64) + (LM_CLASS_##cls == LM_CLASS_UNARY)
#define COUNT_BINARY(name, cls, ar, dt, bl, gr, vm, vk, v64) + (LM_CLASS_##cls == LM_CLASS_BINARY)
_Static_assert(0 LM_OPS(COUNT_UNARY) == 0 REF_UNARY(COUNT_ROW),
               "a unary op of core/op.h has no row in REF_UNARY (tests/test_ops_ref.c)");
_Static_assert(0 LM_OPS(COUNT_BINARY) == 0 REF_BINARY(COUNT_ROW),
               "a binary op of core/op.h has no row in REF_BINARY (tests/test_ops_ref.c)");

/* the rows name each unary and binary op once (the counts alone would let
 * a duplicate stand in for a missing one) */
static void test_rows(void **state)
{
    (void)state;
    int seen[LM_OP_COUNT] = {0}, bad = 0;
    for (size_t i = 0; i < sizeof unary_rows / sizeof *unary_rows; i++) seen[unary_rows[i].op]++;
    for (size_t i = 0; i < sizeof binary_rows / sizeof *binary_rows; i++) seen[binary_rows[i].op]++;
    for (int op = 0; op < LM_OP_COUNT; op++) {
        lm_op_class cls = lm_op_class_of((lm_op)op);
        int want = cls == LM_CLASS_UNARY || cls == LM_CLASS_BINARY;
        if (seen[op] != want) {
            fprintf(stderr, "OPS_REF FAIL %s: %d rows in REF_UNARY/REF_BINARY of tests/test_ops_ref.c, want %d\n",
                    lm_op_name((lm_op)op), seen[op], want);
            bad++;
        }
    }
    assert_int_equal(bad, 0);
}


static void check_unary(const char *in_name, const char *file, const char *op_name, lm_op op)
{
    tu_fixture in, exp;
    char path[128];
    assert_int_equal(tu_load(in_name, &in), 0);
    snprintf(path, sizeof path, "core/%s.npy", file);
    assert_int_equal(tu_load(path, &exp), 0);
    for (size_t k = 0; k < sizeof float_types / sizeof float_types[0]; k++) {
        lm_dtype dt = float_types[k];
        lm_array *x = tu_array(&in, dt);
        /* contiguous */
        lm_array *y = lm_unary(op, x);
        assert_int_equal(y->dtype, dt);
        char what[64];
        snprintf(what, sizeof what, "%s %s", op_name, lm_dtype_name(dt));
        double rt = tu_rtol(dt) * 4, at = tu_rtol(dt) * 4;
        tu_assert_close(y, &exp, rt, at, what);
        /* strided: transpose a transposed copy */
        lm_array *t1 = lm_transpose(x, 0, 1);
        lm_array *tc = lm_contiguous(t1);
        lm_array *back = lm_transpose(tc, 0, 1);
        assert_false(lm_array_is_contiguous(back));
        lm_array *y2 = lm_unary(op, back);
        tu_assert_close(y2, &exp, rt, at, what);
        lm_array_release(t1);
        lm_array_release(tc);
        lm_array_release(back);
        lm_array_release(y2);
        lm_array_release(y);
        lm_array_release(x);
    }
    tu_free(&in);
    tu_free(&exp);
}

static void test_unary(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof unary_rows / sizeof *unary_rows; i++) {
        const ref_row *r = &unary_rows[i];
        if (!r->file) continue;
        char in[32];
        snprintf(in, sizeof in, "core/%s.npy", r->in);
        check_unary(in, r->file, lm_op_name(r->op), r->op);
    }
}

static void test_tan(void **state)
{
    (void)state;
    tu_fixture in, exp;
    assert_int_equal(tu_load(FX("x"), &in), 0);
    assert_int_equal(tu_load(FX("unary_tan"), &exp), 0);
    lm_array *x = tu_array(&in, LM_F64);
    lm_array *q = lm_binary_scalar(LM_OP_DIV, x, 4, false);
    lm_array *y = lm_unary(LM_OP_TAN, q);
    tu_assert_close(y, &exp, 1e-12, 1e-12, "tan");
    lm_array_release(x);
    lm_array_release(q);
    lm_array_release(y);
    tu_free(&in);
    tu_free(&exp);
}

static void test_binary(void **state)
{
    (void)state;
    tu_fixture fa, fb, fc, exp;
    assert_int_equal(tu_load(FX("a"), &fa), 0);
    assert_int_equal(tu_load(FX("b"), &fb), 0);
    assert_int_equal(tu_load(FX("c"), &fc), 0);
    for (size_t k = 0; k < 4; k++) {
        lm_dtype dt = float_types[k];
        lm_array *a = tu_array(&fa, dt), *b = tu_array(&fb, dt), *c = tu_array(&fc, dt);
        double rt = tu_rtol(dt) * 4;
        for (size_t i = 0; i < sizeof binary_rows / sizeof *binary_rows; i++) {
            const ref_row *row = &binary_rows[i];
            if (!row->file) continue;
            char path[64], what[64];
            snprintf(path, sizeof path, "core/%s.npy", row->file);
            assert_int_equal(tu_load(path, &exp), 0);
            snprintf(what, sizeof what, "%s %s", lm_op_name(row->op), lm_dtype_name(dt));
            lm_array *y = lm_binary(row->op, a, b);
            assert_int_equal(y->dtype, dt);
            tu_assert_close(y, &exp, rt, rt, what);
            lm_array_release(y);
            tu_free(&exp);
        }
        /* pow on |a| */
        lm_array *aa = lm_unary(LM_OP_ABS, a), *p = lm_binary(LM_OP_POW, aa, b);
        assert_int_equal(tu_load(FX("binary_pow"), &exp), 0);
        tu_assert_close(p, &exp, rt * 4, rt, "pow");
        tu_free(&exp);
        lm_array_release(aa);
        lm_array_release(p);
        /* column broadcast, and the broadcast operand first */
        lm_array *y = lm_binary(LM_OP_ADD, c, a);
        assert_int_equal(tu_load(FX("binary_add_col"), &exp), 0);
        tu_assert_close(y, &exp, rt, rt, "add col");
        tu_free(&exp);
        lm_array_release(y);
        y = lm_binary(LM_OP_LT, a, b);
        assert_int_equal(y->dtype, LM_BOOL);
        assert_int_equal(tu_load(FX("binary_lt"), &exp), 0);
        tu_assert_close(y, &exp, 0, 0, "lt");
        tu_free(&exp);
        lm_array_release(y);
        lm_array_release(a);
        lm_array_release(b);
        lm_array_release(c);
    }
    tu_free(&fa);
    tu_free(&fb);
    tu_free(&fc);
}

static void check_reduce(lm_array *y, const char *name, double tol)
{
    tu_fixture exp;
    char path[64];
    snprintf(path, sizeof path, "core/%s.npy", name);
    assert_int_equal(tu_load(path, &exp), 0);
    assert_non_null(y);
    tu_assert_close_data(y, exp.data, exp.size, tol, tol, name);
    for (int d = 0; d < exp.ndim; d++) assert_int_equal(y->shape[d], exp.shape[d]);
    tu_free(&exp);
    lm_array_release(y);
}

static void test_reductions(void **state)
{
    (void)state;
    tu_fixture fr;
    assert_int_equal(tu_load(FX("r"), &fr), 0);
    for (size_t k = 0; k < 4; k++) {
        lm_dtype dt = float_types[k];
        double tol = tu_rtol(dt) * 8;
        lm_array *r = tu_array(&fr, dt);
        check_reduce(lm_reduce(LM_OP_SUM, r, 0, NULL, false), "red_sum_all", tol);
        check_reduce(lm_reduce(LM_OP_SUM, r, 1, (int[]){1}, false), "red_sum_1", tol);
        check_reduce(lm_reduce(LM_OP_SUM, r, 2, (int[]){0, -1}, true), "red_sum_02_keep", tol);
        check_reduce(lm_reduce(LM_OP_MEAN, r, 1, (int[]){2}, false), "red_mean_2", tol);
        check_reduce(lm_reduce(LM_OP_PROD, r, 1, (int[]){0}, false), "red_prod_0", tol);
        check_reduce(lm_reduce(LM_OP_MAX, r, 1, (int[]){1}, false), "red_max_1", tol);
        check_reduce(lm_reduce(LM_OP_MIN, r, 0, NULL, false), "red_min_all", tol);
        check_reduce(lm_var(r, 1, (int[]){2}, 0, false), "red_var_2", tol);
        check_reduce(lm_var(r, 1, (int[]){2}, 1, false), "red_var_2_ddof1", tol);
        check_reduce(lm_std(r, 2, (int[]){0, 1}, 1, false), "red_std_01", tol);
        check_reduce(lm_reduce(LM_OP_LOGSUMEXP, r, 1, (int[]){2}, false), "red_lse_2", tol);
        check_reduce(lm_argreduce(LM_OP_ARGMAX, r, 1, false), "red_argmax_1", 0);
        check_reduce(lm_argreduce(LM_OP_ARGMIN, r, -1, false), "red_argmin_2", 0);
        check_reduce(lm_cumsum(r, 1), "red_cumsum_1", tol);
        /* the same over a permuted (strided) view: sum over axis 1 of r == sum over axis 2 of r^(0,2,1) */
        lm_array *p = lm_permute(r, (int[]){0, 2, 1});
        check_reduce(lm_reduce(LM_OP_SUM, p, 1, (int[]){2}, false), "red_sum_1", tol);
        lm_array_release(p);
        lm_array_release(r);
    }
    tu_free(&fr);
}

static void test_matmul(void **state)
{
    (void)state;
    tu_fixture f1, f2, f3, f4;
    assert_int_equal(tu_load(FX("m1"), &f1), 0);
    assert_int_equal(tu_load(FX("m2"), &f2), 0);
    assert_int_equal(tu_load(FX("m3"), &f3), 0);
    assert_int_equal(tu_load(FX("v4"), &f4), 0);
    for (size_t k = 0; k < 4; k++) {
        lm_dtype dt = float_types[k];
        double tol = tu_rtol(dt) * 8;
        lm_array *m1 = tu_array(&f1, dt), *m2 = tu_array(&f2, dt), *m3 = tu_array(&f3, dt), *v4 = tu_array(&f4, dt);
        check_reduce(lm_matmul(m1, m2), "mm_batch_shared", tol);
        check_reduce(lm_matmul(m1, m3), "mm_batch", tol);
        check_reduce(lm_matmul(m1, v4), "mm_mat_vec", tol);
        check_reduce(lm_matmul(v4, m2), "mm_vec_mat", tol);
        check_reduce(lm_matmul(v4, v4), "mm_vec_vec", tol);
        lm_array *t3 = lm_transpose(m3, 1, 2), *t1 = lm_transpose(m1, 1, 2);
        check_reduce(lm_matmul(t3, t1), "mm_transposed", tol);
        lm_array_release(t3);
        lm_array_release(t1);
        lm_array *arr[] = {m1, m2, m3, v4};
        for (int i = 0; i < 4; i++) lm_array_release(arr[i]);
    }
    /* integer matmul is exact */
    lm_array *i1 = tu_array(&f1, LM_F64), *i2 = tu_array(&f2, LM_F64);
    lm_array *s1 = lm_binary_scalar(LM_OP_MUL, i1, 8, false), *s2 = lm_binary_scalar(LM_OP_MUL, i2, 8, false);
    lm_array *c1 = lm_cast(s1, LM_I32), *c2 = lm_cast(s2, LM_I32);
    lm_array *im = lm_matmul(c1, c2);
    assert_int_equal(im->dtype, LM_I32);
    tu_fixture e;
    assert_int_equal(tu_load(FX("mm_batch_shared"), &e), 0);
    for (int64_t i = 0; i < e.size; i++) e.data[i] *= 64;
    tu_assert_close_data(im, e.data, e.size, 0, 0, "int matmul");
    tu_free(&e);
    lm_array *arr[] = {i1, i2, s1, s2, c1, c2, im};
    for (int i = 0; i < 7; i++) lm_array_release(arr[i]);
    tu_free(&f1);
    tu_free(&f2);
    tu_free(&f3);
    tu_free(&f4);
}

int main(void)
{
    setenv("LUMEN_FALLBACK", "quiet", 0);   /* f64 transcendentals: Vulkan leaves them to the CPU */
    if (lm_init() != LM_OK) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows),
        cmocka_unit_test(test_unary),
        cmocka_unit_test(test_tan),
        cmocka_unit_test(test_binary),
        cmocka_unit_test(test_reductions),
        cmocka_unit_test(test_matmul),
    };
    int rc = cmocka_run_group_tests_name("ops_ref", tests, NULL, NULL);
    /* the elementwise references again on each Vulkan device (lavapipe in
     * make test): every backend against the same fixtures.  LUMEN_DEVICE=cpu
     * asks for the CPU alone (tests/cpu_isa.sh runs this suite at each
     * instruction-set level) */
    const char *only = getenv("LUMEN_DEVICE");
    for (int i = 0; i < lm_device_count() && !(only && !strcmp(only, "cpu")); i++) {
        lm_device *d = lm_device_at(i);
        if (strncmp(d->spec, "vulkan", 6)) continue;
        printf("ops_ref on %s\n", d->spec);
        lm_device_set_default(d);
        const struct CMUnitTest vk_tests[] = {
            cmocka_unit_test(test_unary),
            cmocka_unit_test(test_binary),
        };
        rc |= cmocka_run_group_tests_name("ops_ref_vulkan", vk_tests, NULL, NULL);
        lm_device_set_default(lm_device_cpu());
    }
    return rc;
}
