/* test_io_npy.c - .npy and .npz: numpy-written files of every dtype, byte
 * order, Fortran order and format version; round trips; PyTorch dumps. */
#include "io_test.h"
#include "core/compare.h"

/* the values of gen_io.py's VALUES table */
static const struct { const char *file; lm_dtype dt; double v[6]; } npy_cases[] = {
    {"npy_bool.npy", LM_BOOL, {0, 1, 0, 1, 1, 0}},
    {"npy_int8.npy", LM_I8, {0, 1, -2, 3, -128, 127}},
    {"npy_uint8.npy", LM_U8, {0, 1, 2, 3, 128, 255}},
    {"npy_int16.npy", LM_I16, {0, 1, -2, 3, -32768, 32767}},
    {"npy_uint16.npy", LM_I32, {0, 1, 2, 3, 32768, 65535}},
    {"npy_int32.npy", LM_I32, {0, 1, -2, 3, -2147483648.0, 2147483647.0}},
    {"npy_uint32.npy", LM_I64, {0, 1, 2, 3, 2147483648.0, 4294967295.0}},
    {"npy_int64.npy", LM_I64, {0, 1, -2, 3, -4611686018427387904.0, 4611686018427387904.0}},
    {"npy_float16.npy", LM_F16, {0, 1, -2.5, INFINITY, NAN, 65504}},
    {"npy_float32.npy", LM_F32, {0, 1, -2.5, INFINITY, NAN, (double)3.0e38f}},
    {"npy_float64.npy", LM_F64, {0, 1, -2.5, INFINITY, NAN, 1e300}},
    {"npy_be_f4.npy", LM_F32, {0, 1, -2.5, INFINITY, NAN, (double)3.0e38f}},
    {"npy_be_i8.npy", LM_I64, {0, 1, -2, 3, -4611686018427387904.0, 4611686018427387904.0}},
    {"npy_be_f2.npy", LM_F16, {0, 1, -2.5, INFINITY, NAN, 65504}},
    {"npy_be_u2.npy", LM_I32, {0, 1, 2, 3, 32768, 65535}},
    {"npy_v2.npy", LM_F64, {0, 1, -2.5, INFINITY, NAN, 1e300}},
    {"npy_v3.npy", LM_F64, {0, 1, -2.5, INFINITY, NAN, 1e300}},
};

static void test_npy_numpy_files(void **state)
{
    (void)state;
    char path[256];
    for (size_t i = 0; i < sizeof npy_cases / sizeof *npy_cases; i++) {
        snprintf(path, sizeof path, IO_FX("%s"), npy_cases[i].file);
        lm_array *a = lm_load_npy(path);
        if (!a) fprintf(stderr, "%s: %s\n", path, lm_error_message());
        assert_non_null(a);
        assert_int_equal(a->dtype, npy_cases[i].dt);
        io_expect_shape(a, 2, (int64_t[]){2, 3});
        io_expect(a, npy_cases[i].v, 6);
        lm_array_release(a);
    }
    /* uint64 beyond 2^53: check exactly as int64 */
    lm_array *u = lm_load_npy(IO_FX("npy_uint64.npy"));
    assert_non_null(u);
    assert_int_equal(u->dtype, LM_I64);
    int64_t got[6];
    assert_int_equal(lm_array_read(u, got, LM_I64), LM_OK);
    assert_true(got[4] == (int64_t)1 << 62 && got[5] == INT64_MAX);
    lm_array_release(u);
}

static void test_npy_layouts(void **state)
{
    (void)state;
    lm_array *f = lm_load_npy(IO_FX("npy_fortran_f4.npy"));
    assert_non_null(f);
    io_expect_shape(f, 3, (int64_t[]){2, 3, 4});
    double want[24];
    for (int i = 0; i < 24; i++) want[i] = i;
    io_expect(f, want, 24);
    lm_array *g = lm_load_npy(IO_FX("npy_fortran_be_i4.npy"));
    assert_non_null(g);
    io_expect(g, want, 6);
    lm_array *s = lm_load_npy(IO_FX("npy_scalar.npy"));
    assert_non_null(s);
    assert_int_equal(s->ndim, 0);
    io_expect(s, (double[]){3.5}, 1);
    lm_array *e = lm_load_npy(IO_FX("npy_empty.npy"));
    assert_non_null(e);
    io_expect_shape(e, 2, (int64_t[]){0, 3});
    lm_array *o = lm_load_npy(IO_FX("npy_1d.npy"));
    assert_non_null(o);
    io_expect_shape(o, 1, (int64_t[]){5});
    lm_array *all[] = {f, g, s, e, o};
    for (int i = 0; i < 5; i++) lm_array_release(all[i]);
}

/* An array of each Lumen dtype with awkward values. */
static lm_array *sample(lm_dtype dt)
{
    double v[6] = {0, 1, -2, 3.5, 100, -7};
    if (dt == LM_U8) v[2] = 2, v[5] = 255;
    if (lm_dtype_is_float(dt)) v[5] = NAN, v[4] = -INFINITY;
    lm_array *x = lm_from_data(2, (int64_t[]){2, 3}, LM_F64, v, NULL);
    lm_array *c = lm_cast(x, dt);
    lm_array_release(x);
    assert_int_equal(lm_array_eval(c), LM_OK);
    return c;
}

static void assert_same(lm_array *got, lm_array *want)
{
    lm_compare_opts o;
    lm_compare_opts_init(&o);
    o.rtol = 0;
    o.atol = 0;
    lm_compare_report r;
    assert_int_equal(lm_compare(got, want, &o, &r), LM_OK);
    if (!r.ok) {
        char buf[1024];
        lm_compare_format(&r, 0, buf, sizeof buf);
        fprintf(stderr, "%s\n", buf);
    }
    assert_true(r.ok);
}

static void test_npy_roundtrip(void **state)
{
    (void)state;
    for (int dt = 0; dt < LM_DTYPE_COUNT; dt++) {
        lm_array *a = sample((lm_dtype)dt);
        const char *p = io_tmp("rt.npy");
        assert_int_equal(lm_save_npy(p, a), LM_OK);
        lm_array *b = lm_load_npy(p);
        assert_non_null(b);
        /* bf16 has no numpy type: written as exact f4 */
        assert_int_equal(b->dtype, dt == LM_BF16 ? LM_F32 : (lm_dtype)dt);
        assert_same(b, a);
        lm_array_release(a);
        lm_array_release(b);
    }
}

static void test_npz_numpy_files(void **state)
{
    (void)state;
    const char *files[] = {IO_FX("npz_stored.npz"), IO_FX("npz_deflated.npz")};
    for (int k = 0; k < 2; k++) {
        lm_tensor_set s;
        lm_status st = lm_load_npz(files[k], &s);
        if (st) fprintf(stderr, "%s\n", lm_error_message());
        assert_int_equal(st, LM_OK);
        assert_int_equal(s.count, 3);
        assert_int_equal(s.format, LM_FORMAT_NPZ);
        io_expect(io_get(&s, "a"), (double[]){0, .25, .5, .75, 1, 1.25}, 6);
        io_expect(io_get(&s, "b"), (double[]){1, -2, 3, -4}, 4);
        io_expect(io_get(&s, "c"), (double[]){1, 0, 1}, 3);
        assert_int_equal(io_get(&s, "c")->dtype, LM_BOOL);
        lm_tensor_set_free(&s);
    }
}

static void test_npz_roundtrip(void **state)
{
    (void)state;
    lm_array *arrs[LM_DTYPE_COUNT];
    char names[LM_DTYPE_COUNT][16];
    const char *np[LM_DTYPE_COUNT];
    for (int dt = 0; dt < LM_DTYPE_COUNT; dt++) {
        arrs[dt] = sample((lm_dtype)dt);
        snprintf(names[dt], sizeof names[dt], "t_%s", lm_dtype_name((lm_dtype)dt));
        np[dt] = names[dt];
    }
    for (int compress = 0; compress < 2; compress++) {
        const char *p = io_tmp(compress ? "rt_c.npz" : "rt.npz");
        assert_int_equal(lm_save_npz(p, LM_DTYPE_COUNT, np, arrs, compress), LM_OK);
        lm_tensor_set s;
        assert_int_equal(lm_load_file(p, &s), LM_OK);
        assert_int_equal(s.format, LM_FORMAT_NPZ);
        assert_int_equal(s.count, LM_DTYPE_COUNT);
        for (int dt = 0; dt < LM_DTYPE_COUNT; dt++) assert_same(io_get(&s, np[dt]), arrs[dt]);
        lm_tensor_set_free(&s);
    }
    for (int dt = 0; dt < LM_DTYPE_COUNT; dt++) lm_array_release(arrs[dt]);
}

/* A PyTorch computation dumped through numpy; the two files agree. */
static void test_torch_dump(void **state)
{
    (void)state;
    lm_tensor_set s;
    assert_int_equal(lm_load_file(IO_FX("torch_dump.npz"), &s), LM_OK);
    lm_tensor_set y;
    assert_int_equal(lm_load_file(IO_FX("torch_y.npy"), &y), LM_OK);
    assert_int_equal(y.count, 1);
    assert_string_equal(y.names[0], "torch_y");
    io_expect_shape(io_get(&s, "y"), 2, (int64_t[]){4, 3});
    assert_same(io_get(&s, "y"), y.arrays[0]);
    lm_tensor_set_free(&s);
    lm_tensor_set_free(&y);
}

/* Content decides, not the extension. */
static void test_detect_by_content(void **state)
{
    (void)state;
    const char *pairs[][2] = {{IO_FX("npz_stored.npz"), "x.bin"},
                              {IO_FX("npy_int8.npy"), "y.safetensors"},
                              {IO_FX("st_all.safetensors"), "z.npy"}};
    lm_file_format want[] = {LM_FORMAT_NPZ, LM_FORMAT_NPY, LM_FORMAT_SAFETENSORS};
    for (int i = 0; i < 3; i++) {
        void *d = NULL;
        size_t n = 0;
        assert_int_equal(lm_io_read_all_for_test(pairs[i][0], &d, &n), 0);
        const char *p = io_tmp(pairs[i][1]);
        FILE *f = fopen(p, "wb");
        fwrite(d, 1, n, f);
        fclose(f);
        free(d);
        assert_int_equal(lm_file_detect(p), want[i]);
        lm_tensor_set s;
        assert_int_equal(lm_load_file(p, &s), LM_OK);
        assert_int_equal(s.format, want[i]);
        lm_tensor_set_free(&s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_npy_numpy_files),
        cmocka_unit_test(test_npy_layouts),
        cmocka_unit_test(test_npy_roundtrip),
        cmocka_unit_test(test_npz_numpy_files),
        cmocka_unit_test(test_npz_roundtrip),
        cmocka_unit_test(test_torch_dump),
        cmocka_unit_test(test_detect_by_content),
    };
    int rc = cmocka_run_group_tests_name("io_npy", tests, NULL, NULL);
    io_tmp_cleanup();
    return rc;
}
