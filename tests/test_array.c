/* test_array.c - views, the memory rules, errors, dtypes, creation, random,
 * and the shape ops (concat/stack/split/pad/gather/index_select). */
#include "testutil.h"
#include "core/random.h"

static lm_array *iota(int ndim, const int64_t *shape, lm_dtype dt)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    lm_array *a = lm_arange(0, (double)n, 1, dt, NULL);
    lm_array *r = lm_reshape(a, ndim, shape);
    lm_array_release(a);
    return r;
}

static void expect(lm_array *a, const double *v, int64_t n)
{
    tu_assert_close_data(a, v, n, 0, 0, "expect");
}

static void test_views(void **state)
{
    (void)state;
    lm_array *a = iota(2, (int64_t[]){3, 4}, LM_F32);
    assert_int_equal(lm_array_eval(a), LM_OK);
    /* transpose is a view on the same buffer */
    lm_array *t = lm_transpose(a, 0, 1);
    assert_ptr_equal(t->buf, a->buf);
    expect(t, (double[]){0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}, 12);
    /* negative-step slice */
    lm_array *s = lm_slice(a, 1, -1, -5, -2);
    assert_int_equal(s->shape[1], 2);
    expect(s, (double[]){3, 1, 7, 5, 11, 9}, 6);
    /* numpy clipping of out-of-range bounds */
    lm_array *s2 = lm_slice(a, 0, 1, 100, 1);
    assert_int_equal(s2->shape[0], 2);
    /* reshape of a transposed view must copy and still be right */
    lm_array *r = lm_reshape(t, 2, (int64_t[]){2, -1});
    expect(r, (double[]){0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}, 12);
    /* reshape of a contiguous array is a view */
    lm_array *r2 = lm_reshape(a, 3, (int64_t[]){2, 3, 2});
    assert_ptr_equal(r2->buf, a->buf);
    /* broadcast, squeeze, unsqueeze, flatten */
    lm_array *row = lm_slice(a, 0, 1, 2, 1);
    lm_array *b = lm_broadcast_to(row, 3, (int64_t[]){2, 3, 4});
    assert_int_equal(b->strides[0], 0);
    assert_int_equal(b->strides[1], 0);
    lm_array *sum = lm_reduce(LM_OP_SUM, b, 0, NULL, false);
    expect(sum, (double[]){6 * (4 + 5 + 6 + 7)}, 1);
    lm_array *u = lm_unsqueeze(a, 1);
    assert_int_equal(u->ndim, 3);
    assert_int_equal(u->shape[1], 1);
    lm_array *q = lm_squeeze(u, 1);
    assert_int_equal(q->ndim, 2);
    lm_array *f = lm_flatten(u, 0, -1);
    assert_int_equal(f->ndim, 1);
    assert_int_equal(f->shape[0], 12);
    /* errors */
    assert_null(lm_squeeze(a, 0));
    assert_non_null(strstr(lm_error_message(), "squeeze"));
    assert_null(lm_reshape(a, 2, (int64_t[]){5, -1}));
    assert_non_null(strstr(lm_error_message(), "[3,4]"));
    assert_null(lm_slice(a, 0, 0, 1, 0));
    assert_null(lm_transpose(a, 0, 2));
    assert_null(lm_broadcast_to(a, 2, (int64_t[]){3, 5}));
    lm_array *arr[] = {a, t, s, s2, r, r2, row, b, sum, u, q, f};
    for (size_t i = 0; i < sizeof arr / sizeof arr[0]; i++) lm_array_release(arr[i]);
    assert_int_equal(lm_array_live_count(), 0);
}

static void test_lazy_and_detach(void **state)
{
    (void)state;
    lm_device *dev = lm_device_default();   /* LUMEN_DEVICE picks it */
    size_t start = lm_device_memory(dev).active;
    int64_t n = 1 << 16;
    lm_array *x = lm_full(1, &n, 1.5, LM_F32, NULL);
    lm_array *y = lm_unary(LM_OP_EXP, x);
    lm_array *z = lm_binary(LM_OP_ADD, y, x);
    assert_null(z->buf);   /* nothing ran */
    assert_int_equal(lm_device_memory(dev).active, start);
    lm_array_release(y);   /* y is an intermediate nobody names now */
    assert_int_equal(lm_array_eval(z), LM_OK);
    /* z holds its buffer, x stays (named), y was freed after its consumer */
    assert_int_equal(z->ninputs, 0);
    assert_int_equal(lm_array_live_count(), 2);
    lm_memstats m = lm_device_memory(dev);
    assert_int_equal(m.active - start, 2 * (size_t)n * 4);
    assert_true(m.peak - start >= 3 * (size_t)n * 4);
    double v;
    assert_int_equal(lm_array_get(z, (int64_t[]){7}, &v), LM_OK);
    assert_float_equal(v, exp(1.5) + 1.5, 1e-5);
    lm_array_release(x);
    lm_array_release(z);
    assert_int_equal(lm_device_memory(dev).active, start);
}

static void test_eval_loop_memory_flat(void **state)
{
    (void)state;
    lm_device *dev = lm_device_default();   /* LUMEN_DEVICE picks it */
    size_t start = lm_device_memory(dev).active;
    int64_t shape[2] = {16, 16};
    lm_array *w = lm_ones(2, shape, LM_F32, NULL);
    lm_array_keep(w);
    lm_array_release(w);   /* the keep holds it */
    for (int i = 0; i < 10000; i++) {
        lm_array *x = lm_full(2, shape, (double)i, LM_F32, NULL);
        lm_array *y = lm_binary(LM_OP_MUL, x, w);
        lm_array *s = lm_reduce(LM_OP_SUM, y, 0, NULL, false);
        double v;
        assert_int_equal(lm_array_get(s, NULL, &v), LM_OK);
        if (i == 9999) assert_float_equal(v, 256.0 * 9999, 1e-3);
        lm_array_release(x);
        lm_array_release(y);
        lm_array_release(s);
    }
    assert_true(w->buf != NULL);   /* kept array survived */
    assert_int_equal(lm_device_memory(dev).active - start, lm_device_memory(dev).active - start);
    size_t with_w = lm_device_memory(dev).active;
    assert_int_equal(lm_sweep(), 0);   /* nothing unkept is live */
    lm_array_unkeep(w);
    assert_true(lm_device_memory(dev).active < with_w);
    assert_int_equal(lm_device_memory(dev).active, start);
    assert_int_equal(lm_array_live_count(), 0);
}

static void test_free_sweep_limit(void **state)
{
    (void)state;
    lm_device *dev = lm_device_default();   /* LUMEN_DEVICE picks it */
    int64_t n = 1000;
    lm_array *a = lm_ones(1, &n, LM_F32, NULL);
    assert_int_equal(lm_array_eval(a), LM_OK);
    lm_array_free(a);
    lm_array *b = lm_unary(LM_OP_NEG, a);
    assert_null(b);
    assert_non_null(strstr(lm_error_message(), "freed"));
    lm_array_release(a);
    /* sweep frees unkept arrays but leaves the structs valid */
    lm_array *k = lm_ones(1, &n, LM_F32, NULL), *d = lm_zeros(1, &n, LM_F32, NULL);
    lm_array_eval(k);
    lm_array_eval(d);
    lm_array_keep(k);
    assert_int_equal(lm_sweep(), 1);
    assert_non_null(k->buf);
    assert_null(d->buf);
    assert_int_not_equal(lm_array_eval(d), LM_OK);
    lm_array_unkeep(k);
    lm_array_release(k);
    lm_array_release(d);
    /* memory limit: an error, not a crash, and the device keeps working */
    lm_device_clear_cache(dev);
    lm_device_set_memory_limit(dev, lm_device_memory(dev).active + (1 << 20));
    int64_t big = 1 << 22;
    lm_array *x = lm_ones(1, &big, LM_F32, NULL);
    assert_int_equal(lm_array_eval(x), LM_ERR_LIMIT);
    assert_non_null(strstr(lm_error_message(), "limit"));
    lm_device_set_memory_limit(dev, 0);
    assert_int_equal(lm_array_eval(x), LM_OK);
    lm_array_release(x);
}

static void test_errors(void **state)
{
    (void)state;
    lm_array *a = iota(2, (int64_t[]){2, 3}, LM_F32);
    lm_array *b = iota(2, (int64_t[]){4, 5}, LM_F32);
    assert_null(lm_matmul(a, b));
    assert_string_equal(lm_error_message(), "matmul: inner dimensions differ: [2,3] @ [4,5]");
    assert_null(lm_binary(LM_OP_ADD, a, b));
    assert_non_null(strstr(lm_error_message(), "add: shapes [2,3] and [4,5] cannot be broadcast"));
    assert_null(lm_reduce(LM_OP_SUM, a, 1, (int[]){2}, false));
    assert_non_null(strstr(lm_error_message(), "axis 2 out of range"));
    assert_null(lm_concat(2, (lm_array *[]){a, b}, 0));
    assert_non_null(strstr(lm_error_message(), "concat"));
    assert_null(lm_unary(LM_OP_EXP, NULL));   /* NULL chains fail cleanly */
    assert_null(lm_random_uniform(1, (int64_t[]){3}, 0, 1, LM_I32, lm_random_key(1), NULL));
    assert_null(lm_arange(0, 1, 0, LM_F32, NULL));
    lm_array *idx = lm_from_data(1, (int64_t[]){2}, LM_I64, (int64_t[]){0, 7}, NULL);
    lm_array *g = lm_index_select(a, 1, idx);
    assert_int_equal(lm_array_eval(g), LM_ERR_ARG);
    assert_non_null(strstr(lm_error_message(), "index 7 out of range"));
    lm_array *arr[] = {a, b, idx, g};
    for (int i = 0; i < 4; i++) lm_array_release(arr[i]);
}

static void test_dtypes(void **state)
{
    (void)state;
    /* exact half conversions: every f16 value round-trips, ties go to even */
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;   /* NaNs */
        assert_int_equal(lm_f32_to_f16(lm_f16_to_f32((uint16_t)h)), h);
    }
    assert_int_equal(lm_f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);          /* tie -> even */
    assert_int_equal(lm_f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);          /* tie -> even (up) */
    assert_int_equal(lm_f32_to_f16(65520.0f), 0x7c00);                    /* rounds to inf */
    assert_int_equal(lm_f32_to_f16(5.9604645e-08f), 0x0001);              /* smallest subnormal */
    assert_int_equal(lm_f32_to_bf16(1.0f + 1.0f / 256), 0x3f80);          /* tie -> even */
    assert_int_equal(lm_f32_to_bf16(1.0f + 3.0f / 256), 0x3f82);
    assert_true(isnan(lm_bf16_to_f32(lm_f32_to_bf16(NAN))));
    /* the vectorised (F16C) bulk conversion agrees with the scalar one */
    static uint16_t all[65536], back[65536];
    static float f32[65536];
    for (uint32_t h = 0; h < 65536; h++) all[h] = (uint16_t)h;
    lm_convert(f32, LM_F32, all, LM_F16, 65536);
    for (uint32_t h = 0; h < 65536; h++) {
        float want = lm_f16_to_f32((uint16_t)h);
        if (!(isnan(want) ? isnan(f32[h]) : memcmp(&want, &f32[h], 4) == 0)) fail();
    }
    for (uint32_t i = 0; i < 65536; i++) f32[i] = (float)((double)i * 1.37e-3 - 40) * (i & 1 ? 1e-4f : 1.0f);
    lm_convert(back, LM_F16, f32, LM_F32, 65536);
    for (uint32_t i = 0; i < 65536; i++) assert_int_equal(back[i], lm_f32_to_f16(f32[i]));
    /* promotion table */
    assert_int_equal(lm_dtype_promote(LM_U8, LM_I8), LM_I16);
    assert_int_equal(lm_dtype_promote(LM_I32, LM_F16), LM_F16);
    assert_int_equal(lm_dtype_promote(LM_F16, LM_BF16), LM_F32);
    assert_int_equal(lm_dtype_promote(LM_BOOL, LM_I8), LM_I8);
    assert_int_equal(lm_dtype_promote(LM_I64, LM_F64), LM_F64);
    lm_array *h = lm_ones(1, (int64_t[]){3}, LM_F16, NULL);
    lm_array *s = lm_binary_scalar(LM_OP_ADD, h, 2.5, false);
    assert_int_equal(s->dtype, LM_F16);   /* weak scalar */
    lm_array *i = lm_ones(1, (int64_t[]){3}, LM_I32, NULL);
    lm_array *fi = lm_binary_scalar(LM_OP_MUL, i, 2.5, false);
    assert_int_equal(fi->dtype, LM_F32);
    lm_array *ii = lm_binary_scalar(LM_OP_MUL, i, 2, false);
    assert_int_equal(ii->dtype, LM_I32);
    lm_array *dv = lm_binary(LM_OP_DIV, i, i);
    assert_int_equal(dv->dtype, LM_F32);
    /* casts saturate and truncate toward zero; NaN -> 0 */
    lm_array *f = lm_from_data(1, (int64_t[]){5}, LM_F32, (float[]){-1.7f, 300.5f, NAN, 1e20f, -129.0f}, NULL);
    lm_array *c = lm_cast(f, LM_I8);
    expect(c, (double[]){-1, 127, 0, 127, -128}, 5);
    lm_array *u = lm_cast(f, LM_U8);
    expect(u, (double[]){0, 255, 0, 255, 0}, 5);
    /* integer mod follows Python; integer overflow wraps */
    lm_array *m = lm_from_data(1, (int64_t[]){4}, LM_I32, (int32_t[]){-7, 7, -7, 7}, NULL);
    lm_array *md = lm_from_data(1, (int64_t[]){4}, LM_I32, (int32_t[]){3, -3, -3, 3}, NULL);
    lm_array *r = lm_binary(LM_OP_MOD, m, md);
    expect(r, (double[]){2, -2, -1, 1}, 4);
    lm_array *arr[] = {h, s, i, fi, ii, dv, f, c, u, m, md, r};
    for (size_t k = 0; k < sizeof arr / sizeof arr[0]; k++) lm_array_release(arr[k]);
}

static void test_creation_and_random(void **state)
{
    (void)state;
    lm_array *a = lm_arange(1, 2, 0.25, LM_F32, NULL);
    expect(a, (double[]){1, 1.25, 1.5, 1.75}, 4);
    lm_array *l = lm_linspace(0, 1, 5, LM_F64, NULL);
    expect(l, (double[]){0, 0.25, 0.5, 0.75, 1}, 5);
    lm_array *e = lm_eye(2, 3, 1, LM_I32, NULL);
    expect(e, (double[]){0, 1, 0, 0, 0, 1}, 6);
    lm_array *f = lm_full(2, (int64_t[]){2, 2}, 7, LM_BF16, NULL);
    expect(f, (double[]){7, 7, 7, 7}, 4);
    /* same key -> same numbers whatever the thread count */
    int64_t n = 100003;
    lm_key key = lm_random_key(42);
    lm_array *r1 = lm_random_normal(1, &n, 0, 1, LM_F32, key, NULL);
    double *v1 = tu_read(r1);
    extern void lm_cpu_set_threads(int);
    lm_cpu_set_threads(1);
    lm_array *r2 = lm_random_normal(1, &n, 0, 1, LM_F32, key, NULL);
    double *v2 = tu_read(r2);
    lm_cpu_set_threads(64);
    assert_memory_equal(v1, v2, sizeof(double) * (size_t)n);
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; i++) mean += v1[i];
    mean /= (double)n;
    for (int64_t i = 0; i < n; i++) var += (v1[i] - mean) * (v1[i] - mean);
    var /= (double)n;
    assert_true(fabs(mean) < 0.02);
    assert_true(fabs(var - 1) < 0.02);
    /* element i depends only on (key, i): the first element of a shorter tensor agrees */
    lm_array *r3 = lm_random_normal(1, (int64_t[]){5}, 0, 1, LM_F32, key, NULL);
    double *v3 = tu_read(r3);
    assert_memory_equal(v1, v3, 5 * sizeof(double));
    /* different split keys differ */
    lm_key ks[2];
    lm_random_split(key, 2, ks);
    assert_true(ks[0].k[0] != ks[1].k[0] || ks[0].k[1] != ks[1].k[1]);
    lm_array *u = lm_random_uniform(1, &n, -2, 3, LM_F64, ks[0], NULL);
    lm_array *mx = lm_reduce(LM_OP_MAX, u, 0, NULL, false), *mn = lm_reduce(LM_OP_MIN, u, 0, NULL, false);
    double hi, lo;
    lm_array_get(mx, NULL, &hi);
    lm_array_get(mn, NULL, &lo);
    assert_true(hi < 3 && hi > 2.99 && lo >= -2 && lo < -1.99);
    free(v1);
    free(v2);
    free(v3);
    lm_array *arr[] = {a, l, e, f, r1, r2, r3, u, mx, mn};
    for (size_t k = 0; k < sizeof arr / sizeof arr[0]; k++) lm_array_release(arr[k]);
}

static void test_shape_ops(void **state)
{
    (void)state;
    lm_array *a = iota(2, (int64_t[]){2, 3}, LM_F32);
    lm_array *b = iota(2, (int64_t[]){2, 2}, LM_I32);
    lm_array *c = lm_concat(2, (lm_array *[]){a, b}, 1);
    assert_int_equal(c->dtype, LM_F32);
    expect(c, (double[]){0, 1, 2, 0, 1, 3, 4, 5, 2, 3}, 10);
    lm_array *st = lm_stack(2, (lm_array *[]){a, a}, -1);
    assert_int_equal(st->ndim, 3);
    assert_int_equal(st->shape[2], 2);
    expect(st, (double[]){0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5}, 12);
    lm_array *parts[3];
    assert_int_equal(lm_split(a, 3, NULL, 0, 1, parts, 3), 3);
    expect(parts[2], (double[]){2, 5}, 2);
    for (int i = 0; i < 3; i++) lm_array_release(parts[i]);
    assert_int_equal(lm_split(a, 0, (int64_t[]){1, 2}, 2, 1, parts, 3), 2);
    expect(parts[1], (double[]){1, 2, 4, 5}, 4);
    for (int i = 0; i < 2; i++) lm_array_release(parts[i]);
    lm_array *p = lm_pad(a, (int64_t[]){1, 0, 0, 2}, -1);
    expect(p, (double[]){-1, -1, -1, -1, -1, 0, 1, 2, -1, -1, 3, 4, 5, -1, -1}, 15);
    lm_array *idx = lm_from_data(2, (int64_t[]){2, 2}, LM_I64, (int64_t[]){2, 0, -1, 1}, NULL);
    lm_array *g = lm_take_along_axis(a, idx, 1);
    expect(g, (double[]){2, 0, 5, 4}, 4);
    lm_array *i1 = lm_from_data(1, (int64_t[]){3}, LM_I32, (int32_t[]){1, 1, 0}, NULL);
    lm_array *sel = lm_index_select(a, 0, i1);
    expect(sel, (double[]){3, 4, 5, 3, 4, 5, 0, 1, 2}, 9);
    lm_array *cond = lm_binary_scalar(LM_OP_GT, a, 2, false);
    lm_array *w = lm_where(cond, a, b ? lm_scalar(-1, LM_F32, NULL) : NULL);
    expect(w, (double[]){-1, -1, -1, 3, 4, 5}, 6);
    lm_array *cl = lm_clamp(a, 1, 3.5);
    expect(cl, (double[]){1, 1, 2, 3, 3.5, 3.5}, 6);
    /* in-place assignment through a strided view */
    assert_int_equal(lm_array_eval(a), LM_OK);
    lm_array *col = lm_slice(a, 1, 1, 2, 1);
    lm_array *v = lm_scalar(9, LM_F32, NULL);
    assert_int_equal(lm_array_assign(col, v), LM_OK);
    expect(a, (double[]){0, 9, 2, 3, 9, 5}, 6);
    lm_array *arr[] = {a, b, c, st, p, idx, g, i1, sel, cond, w, cl, col, v};
    for (size_t k = 0; k < sizeof arr / sizeof arr[0]; k++) lm_array_release(arr[k]);
    lm_sweep();   /* the scalar made inline above */
}

/* the vectorised exp (and sigmoid/silu built on it) over its whole range */
static void test_exp_range(void **state)
{
    (void)state;
    int64_t n = 200003;
    lm_array *x = lm_linspace(-104, 89, n, LM_F32, lm_device_cpu());   /* the CPU's exp */
    lm_array *e = lm_unary(LM_OP_EXP, x), *sg = lm_unary(LM_OP_SIGMOID, x);
    double *vx = tu_read(x), *ve = tu_read(e), *vs = tu_read(sg);
    for (int64_t i = 0; i < n; i++) {
        double want = exp(vx[i]), sw = 1 / (1 + exp(-vx[i]));
        if (want > 1.2e-38 && want < 3.4e38 && fabs(ve[i] - want) > 2.5e-7 * want) fail_msg("exp(%g)", vx[i]);
        if (want >= 3.5e38 && !isinf(ve[i])) fail_msg("exp(%g) should overflow", vx[i]);
        if (fabs(vs[i] - sw) > 3e-7 * sw + 1e-38) fail_msg("sigmoid(%g)", vx[i]);
    }
    lm_array *sp = lm_from_data(1, (int64_t[]){3}, LM_F32, (float[]){NAN, INFINITY, -INFINITY}, NULL);
    lm_array *es = lm_unary(LM_OP_EXP, sp);
    double *v = tu_read(es);
    assert_true(isnan(v[0]) && isinf(v[1]) && v[2] == 0);
    free(v);
    free(vx);
    free(ve);
    free(vs);
    lm_array *arr[] = {x, e, sg, sp, es};
    for (int i = 0; i < 5; i++) lm_array_release(arr[i]);
}

/* large transposed inputs take the tiled staging path */
static void test_large_transposed(void **state)
{
    (void)state;
    int64_t sh[3] = {3, 300, 257};
    lm_array *a = iota(3, sh, LM_F32);
    lm_array *t = lm_transpose(a, 1, 2);
    lm_array *n = lm_unary(LM_OP_NEG, t);
    lm_array *c = lm_contiguous(t);
    lm_array *s = lm_binary(LM_OP_ADD, t, t);
    double *vn = tu_read(n), *vc = tu_read(c), *vs = tu_read(s);
    for (int64_t b = 0; b < 3; b++)
        for (int64_t i = 0; i < 257; i++)
            for (int64_t j = 0; j < 300; j++) {
                double want = (double)(b * 300 * 257 + j * 257 + i);
                int64_t k = (b * 257 + i) * 300 + j;
                if (vn[k] != -want || vc[k] != want || vs[k] != 2 * want) fail();
            }
    free(vn);
    free(vc);
    free(vs);
    lm_array *arr[] = {a, t, n, c, s};
    for (int i = 0; i < 5; i++) lm_array_release(arr[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_views),
        cmocka_unit_test(test_lazy_and_detach),
        cmocka_unit_test(test_eval_loop_memory_flat),
        cmocka_unit_test(test_free_sweep_limit),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_creation_and_random),
        cmocka_unit_test(test_shape_ops),
        cmocka_unit_test(test_large_transposed),
        cmocka_unit_test(test_exp_range),
    };
    return cmocka_run_group_tests_name("array", tests, NULL, NULL);
}
