/* test_cpu_layout.c - the CPU backend's layout paths, value for value:
 * elementwise ops of transposed and permuted inputs (blocked transposes
 * with the op applied per block, every element size and ragged edges),
 * binary ops with a transposed operand, and fused chains whose outputs are
 * large enough to be streamed past the caches. */
#include "testutil.h"
#include "core/dtype.h"

static lm_array *iota(int nd, const int64_t *sh, lm_dtype dt)
{
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= sh[d];
    double *v = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) v[i] = (double)((i * 7919) % 1000) / 100.0 - 5.0;
    lm_array *a = lm_from_data(nd, sh, LM_F64, v, NULL);
    free(v);
    lm_array *c = lm_cast(a, dt);
    lm_array_release(a);
    assert_int_equal(lm_array_eval(c), LM_OK);
    return c;
}

/* y = op(x^T) for [R, C] and [B, R, C] inputs of several dtypes, checked
 * against the same op on a contiguous copy of the transposed view */
static void check_transposed(int nd, const int64_t *sh, lm_dtype dt, lm_op op)
{
    lm_array *x = iota(nd, sh, dt);
    lm_array *xt = lm_transpose(x, nd - 2, nd - 1);
    lm_array *y = lm_unary(op, xt);
    /* the reference: an explicit elementwise copy through the generic gather */
    int64_t n = x->size;
    double *xv = malloc(sizeof(double) * (size_t)n), *yv = malloc(sizeof(double) * (size_t)n);
    assert_int_equal(lm_array_read(x, xv, LM_F64), LM_OK);
    assert_int_equal(lm_array_read(y, yv, LM_F64), LM_OK);
    int64_t B = nd == 3 ? sh[0] : 1, R = sh[nd - 2], C = sh[nd - 1];
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t r = 0; r < R; r++) {
                double in = xv[(b * R + r) * C + c];
                double want = op == LM_OP_NEG ? -in : op == LM_OP_EXP ? exp(in) : op == LM_OP_ABS ? fabs(in) : in;
                double got = yv[(b * C + c) * R + r];
                double tol = dt == LM_F32 ? 4e-7 * fabs(want) : dt == LM_F16 ? 1e-3 * fabs(want) : 0;
                if (op == LM_OP_COPY || op == LM_OP_NEG || op == LM_OP_ABS) tol = 0;
                if (fabs(got - want) > tol)
                    fail_msg("%s %s of transposed [%lld,%lld]: at (%lld,%lld,%lld) %.9g, want %.9g", lm_op_name(op),
                             lm_dtype_name(dt), (long long)R, (long long)C, (long long)b, (long long)c,
                             (long long)r, got, want);
            }
    free(xv);
    free(yv);
    lm_array_release(y);
    lm_array_release(xt);
    lm_array_release(x);
}

static void test_transposed_unary(void **state)
{
    (void)state;
    const int64_t s2[][2] = {{300, 517}, {64, 128}, {1000, 9}, {8, 4096}};
    const lm_dtype dts[] = {LM_F32, LM_F64, LM_F16, LM_I32};
    for (size_t i = 0; i < sizeof s2 / sizeof s2[0]; i++)
        for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++) {
            check_transposed(2, s2[i], dts[k], LM_OP_NEG);
            check_transposed(2, s2[i], dts[k], LM_OP_COPY);
            if (dts[k] != LM_I32) check_transposed(2, s2[i], dts[k], LM_OP_EXP);
        }
    /* outputs of 16 MiB and more are streamed past the caches */
    const int64_t big[2] = {2051, 2053};
    check_transposed(2, big, LM_F32, LM_OP_NEG);
    check_transposed(2, big, LM_F32, LM_OP_COPY);
    check_transposed(2, big, LM_F32, LM_OP_EXP);
    const int64_t s3[3] = {3, 129, 257};
    check_transposed(3, s3, LM_F32, LM_OP_EXP);
    check_transposed(3, s3, LM_F32, LM_OP_ABS);
    check_transposed(3, s3, LM_F64, LM_OP_NEG);
}

/* a permuted 3-d input ([C, H, W] read as [H, W, C]) and a transposed
 * operand of a binary op */
static void test_permuted_and_binary(void **state)
{
    (void)state;
    const int64_t sh[3] = {5, 67, 131};
    lm_array *x = iota(3, sh, LM_F32);
    lm_array *p = lm_permute(x, (int[]){1, 2, 0});
    lm_array *y = lm_unary(LM_OP_NEG, p);
    float *xv = malloc(sizeof(float) * (size_t)x->size), *yv = malloc(sizeof(float) * (size_t)x->size);
    assert_int_equal(lm_array_read(x, xv, LM_F32), LM_OK);
    assert_int_equal(lm_array_read(y, yv, LM_F32), LM_OK);
    for (int64_t c = 0; c < 5; c++)
        for (int64_t h = 0; h < 67; h++)
            for (int64_t w = 0; w < 131; w++)
                assert_true(yv[(h * 131 + w) * 5 + c] == -xv[(c * 67 + h) * 131 + w]);
    lm_array_release(y);
    lm_array_release(p);

    const int64_t s2[2] = {211, 389}, s2t[2] = {389, 211};
    lm_array *a = iota(2, s2, LM_F32), *b = iota(2, s2t, LM_F32);
    lm_array *at = lm_transpose(a, 0, 1);
    lm_array *sum = lm_binary(LM_OP_ADD, at, b);
    float *av = malloc(sizeof(float) * (size_t)a->size), *bv = malloc(sizeof(float) * (size_t)b->size),
          *sv = malloc(sizeof(float) * (size_t)b->size);
    assert_int_equal(lm_array_read(a, av, LM_F32), LM_OK);
    assert_int_equal(lm_array_read(b, bv, LM_F32), LM_OK);
    assert_int_equal(lm_array_read(sum, sv, LM_F32), LM_OK);
    for (int64_t i = 0; i < 389; i++)
        for (int64_t j = 0; j < 211; j++) assert_true(sv[i * 211 + j] == av[j * 389 + i] + bv[i * 211 + j]);
    lm_array_release(sum);
    lm_array_release(at);
    lm_array_release(a);
    lm_array_release(b);
    lm_array_release(x);
    free(xv);
    free(yv);
    free(av);
    free(bv);
    free(sv);
}

/* a compiled chain whose 5M-element output (20 MB) is streamed past the
 * caches: the same values as the uncompiled graph, ragged end included */
static lm_array *chain(lm_array *x)
{
    lm_array *a = lm_binary_scalar(LM_OP_MUL, x, 1.5, false);
    lm_array *b = lm_unary(LM_OP_TANH, a);
    lm_array *c = lm_binary_scalar(LM_OP_ADD, b, 0.25, false);
    lm_array_release(a);
    lm_array_release(b);
    return c;
}

static void test_fused_streamed_output(void **state)
{
    (void)state;
    int64_t n = 5 * 1000 * 1000 + 13;
    lm_array *x = lm_random_uniform(1, &n, -3, 3, LM_F32, lm_random_key(7), NULL);
    assert_int_equal(lm_array_eval(x), LM_OK);
    lm_array *ph = lm_placeholder(1, &n, LM_F32, NULL);
    lm_array *tr = chain(ph);
    lm_compiled *c = lm_compile_graph(1, &ph, 1, &tr, LM_COMPILE_ON);
    assert_non_null(c);
    lm_array *y;
    assert_int_equal(lm_compiled_call(c, 1, &x, &y), 1);
    lm_array *ref = chain(x);
    float *yv = malloc(sizeof(float) * (size_t)n), *rv = malloc(sizeof(float) * (size_t)n);
    assert_int_equal(lm_array_read(y, yv, LM_F32), LM_OK);
    assert_int_equal(lm_array_read(ref, rv, LM_F32), LM_OK);
    assert_int_equal(lm_compiled_kernels(c), 1);
    for (int64_t i = 0; i < n; i++)
        if (yv[i] != rv[i]) fail_msg("fused[%lld] = %.9g, unfused %.9g", (long long)i, yv[i], rv[i]);
    free(yv);
    free(rv);
    lm_array_release(y);
    lm_array_release(ref);
    lm_compiled_free(c);
    lm_array_release(tr);
    lm_array_release(ph);
    lm_array_release(x);
}

/* f16 and bf16 compute in f32 registers: a + b rounds the f32 sum once */
static void test_half_elementwise(void **state)
{
    (void)state;
    const lm_dtype dts[] = {LM_F16, LM_BF16};
    const int64_t n = 10007;
    for (int k = 0; k < 2; k++) {
        lm_array *a = lm_random_uniform(1, &n, -4, 4, dts[k], lm_random_key(11), NULL);
        lm_array *b = lm_random_uniform(1, &n, -4, 4, dts[k], lm_random_key(12), NULL);
        lm_array *y = lm_binary(LM_OP_ADD, a, b), *e = lm_unary(LM_OP_EXP, a);
        float *av = malloc(4 * n), *bv = malloc(4 * n), *yv = malloc(4 * n), *ev = malloc(4 * n);
        uint16_t *h = malloc(2 * n);
        assert_int_equal(lm_array_read(a, av, LM_F32), LM_OK);
        assert_int_equal(lm_array_read(b, bv, LM_F32), LM_OK);
        assert_int_equal(lm_array_read(y, yv, LM_F32), LM_OK);
        assert_int_equal(lm_array_read(e, ev, LM_F32), LM_OK);
        assert_int_equal(lm_array_read(y, h, dts[k]), LM_OK);
        for (int64_t i = 0; i < n; i++) {
            float s = av[i] + bv[i];
            float want = dts[k] == LM_F16 ? lm_f16_to_f32(lm_f32_to_f16(s)) : lm_bf16_to_f32(lm_f32_to_bf16(s));
            if (yv[i] != want) fail_msg("%s add[%lld] = %g, want %g", lm_dtype_name(dts[k]), (long long)i, yv[i], want);
            float ex = expf(av[i]);
            assert_true(fabsf(ev[i] - ex) <= (dts[k] == LM_F16 ? 1e-3f : 8e-3f) * ex);
        }
        free(av);
        free(bv);
        free(yv);
        free(ev);
        free(h);
        lm_array_release(a);
        lm_array_release(b);
        lm_array_release(y);
        lm_array_release(e);
    }
}

/* f16 and bf16 binary ops (one pass through registers): each result is
 * the f32 result rounded once to the dtype, bit for bit, with NaN, ±inf,
 * ±0, subnormal and overflowing operands, a broadcast row and a scalar */
static float round_to(lm_dtype dt, float v)
{
    return dt == LM_F16 ? lm_f16_to_f32(lm_f32_to_f16(v)) : lm_bf16_to_f32(lm_f32_to_bf16(v));
}

static void test_half_binary_specials(void **state)
{
    (void)state;
    const lm_dtype dts[] = {LM_F16, LM_BF16};
    const lm_op ops[] = {LM_OP_ADD, LM_OP_SUB, LM_OP_MUL, LM_OP_DIV, LM_OP_MAXIMUM, LM_OP_MINIMUM};
    const int64_t R = 19, C = 263, n = R * C, sh[2] = {R, C};
    const float special[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 6e-8f, -3e-5f, 65504.0f, 3e38f, 1e-40f, 1.0f};
    float *av = malloc(sizeof(float) * n), *bv = malloc(sizeof(float) * n), *yv = malloc(sizeof(float) * n);
    for (int k = 0; k < 2; k++) {
        lm_dtype dt = dts[k];
        for (int64_t i = 0; i < n; i++) {
            av[i] = (float)((i * 7919) % 2001) / 250.0f - 4.0f;
            bv[i] = (float)((i * 104729) % 1999) / 300.0f - 3.0f;
            if (i % 7 == 0) av[i] = special[(i / 7) % 12];
            if (i % 5 == 0) bv[i] = special[(i / 5) % 12];
            av[i] = round_to(dt, av[i]);
            bv[i] = round_to(dt, bv[i]);
        }
        lm_array *a0 = lm_from_data(2, sh, LM_F32, av, NULL), *b0 = lm_from_data(2, sh, LM_F32, bv, NULL);
        lm_array *a = lm_cast(a0, dt), *b = lm_cast(b0, dt);
        lm_array *row = lm_slice(b, 0, 3, 4, 1);   /* [1, C], broadcast over rows */
        for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
            for (int form = 0; form < 3; form++) {
                lm_array *y = form == 0   ? lm_binary(ops[o], a, b)
                              : form == 1 ? lm_binary(ops[o], a, row)
                                          : lm_binary_scalar(ops[o], a, -1.5, false);
                assert_int_equal(y->dtype, dt);
                assert_int_equal(lm_array_read(y, yv, LM_F32), LM_OK);
                for (int64_t i = 0; i < n; i++) {
                    float x = av[i], z = form == 0 ? bv[i] : form == 1 ? bv[3 * C + i % C] : -1.5f, r;
                    switch (ops[o]) {
                    case LM_OP_ADD: r = x + z; break;
                    case LM_OP_SUB: r = x - z; break;
                    case LM_OP_MUL: r = x * z; break;
                    case LM_OP_DIV: r = x / z; break;
                    case LM_OP_MAXIMUM: r = x > z || x != x ? x : z; break;
                    default: r = x < z || x != x ? x : z; break;
                    }
                    float want = round_to(dt, r);
                    if (memcmp(&yv[i], &want, 4) && !(isnan(yv[i]) && isnan(want)))
                        fail_msg("%s %s form %d [%lld]: %g op %g = %g, want %g", lm_dtype_name(dt), lm_op_name(ops[o]),
                                 form, (long long)i, x, z, yv[i], want);
                }
                lm_array_release(y);
            }
        lm_array *arr[] = {a0, b0, a, b, row};
        for (size_t i = 0; i < sizeof arr / sizeof arr[0]; i++) lm_array_release(arr[i]);
    }
    free(av);
    free(bv);
    free(yv);
}

/* a binary op of a transposed operand ([R, C] and batched [B, R, C]
 * views, one large enough to be streamed) with an operand transposed alike
 * (mode 0: the op on the rows as stored, then transposed out) or
 * row-major, first or second (modes 1, 2: the transposed tile in cache,
 * then the op by rows); value for value */
static void check_pair(int nd, const int64_t *sh, lm_op op, int mode)
{
    lm_array *x = iota(nd, sh, LM_F32), *y0 = iota(nd, sh, LM_F32);
    lm_array *y = lm_unary(LM_OP_SIN, y0);
    lm_array *xt = lm_transpose(x, nd - 2, nd - 1), *yt = lm_transpose(y, nd - 2, nd - 1);
    lm_array *yc = lm_contiguous(yt);   /* row-major, xt's shape */
    lm_array *z = mode == 0 ? lm_binary(op, xt, yt) : mode == 1 ? lm_binary(op, xt, yc) : lm_binary(op, yc, xt);
    int64_t n = x->size, B = nd == 3 ? sh[0] : 1, R = sh[nd - 2], C = sh[nd - 1];
    float *xv = malloc(sizeof(float) * (size_t)n), *yv = malloc(sizeof(float) * (size_t)n),
          *zv = malloc(sizeof(float) * (size_t)n);
    assert_int_equal(lm_array_read(x, xv, LM_F32), LM_OK);
    assert_int_equal(lm_array_read(y, yv, LM_F32), LM_OK);
    assert_int_equal(lm_array_read(z, zv, LM_F32), LM_OK);
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t r = 0; r < R; r++) {
                float p = xv[(b * R + r) * C + c], q = yv[(b * R + r) * C + c];
                if (mode == 2) {
                    float t = p;
                    p = q;
                    q = t;
                }
                float want = op == LM_OP_ADD ? p + q : op == LM_OP_DIV ? p / q : (p > q || p != p ? p : q);
                float got = zv[(b * C + c) * R + r];
                if (memcmp(&got, &want, 4))
                    fail_msg("%s of transposed pair (mode %d) at (%lld,%lld,%lld): %g, want %g", lm_op_name(op), mode,
                             (long long)b, (long long)c, (long long)r, got, want);
            }
    free(xv);
    free(yv);
    free(zv);
    lm_array *arr[] = {x, y0, y, xt, yt, yc, z};
    for (size_t i = 0; i < sizeof arr / sizeof arr[0]; i++) lm_array_release(arr[i]);
}

static void test_transposed_pair(void **state)
{
    (void)state;
    const int64_t s2[2] = {300, 517}, s3[3] = {3, 129, 257}, big[2] = {2051, 2053};
    for (int mode = 0; mode < 3; mode++) {
        check_pair(2, s2, LM_OP_ADD, mode);
        check_pair(2, s2, LM_OP_DIV, mode);
        check_pair(3, s3, LM_OP_MAXIMUM, mode);
        check_pair(2, big, LM_OP_ADD, mode);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_transposed_unary),
        cmocka_unit_test(test_permuted_and_binary),
        cmocka_unit_test(test_fused_streamed_output),
        cmocka_unit_test(test_half_elementwise),
        cmocka_unit_test(test_half_binary_specials),
        cmocka_unit_test(test_transposed_pair),
    };
    return cmocka_run_group_tests(tests, tu_setup_cpu, NULL);
}
