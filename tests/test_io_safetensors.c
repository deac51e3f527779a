/* test_io_safetensors.c - safetensors: every dtype and the metadata of a
 * file made by a hand-written writer, mmap-backed tensors, round trips. */
#include "io_test.h"
#include "core/compare.h"

static const double F_VALUES[6] = {0, 1, -2.5, INFINITY, NAN, 0};

static void test_st_read_all_dtypes(void **state)
{
    (void)state;
    lm_tensor_set s;
    lm_status st = lm_load_safetensors(IO_FX("st_all.safetensors"), &s);
    if (st) fprintf(stderr, "%s\n", lm_error_message());
    assert_int_equal(st, LM_OK);
    assert_int_equal(s.count, 12);
    const struct { const char *name; lm_dtype dt; double v[6]; } want[] = {
        {"f64", LM_F64, {0, 1, -2.5, INFINITY, NAN, 1e300}},
        {"f32", LM_F32, {0, 1, -2.5, INFINITY, NAN, (double)3.0e38f}},
        {"f16", LM_F16, {0, 1, -2.5, INFINITY, NAN, 65504}},
        {"i64", LM_I64, {0, 1, -2, 3, -4611686018427387904.0, 4611686018427387904.0}},
        {"i32", LM_I32, {0, 1, -2, 3, -2147483648.0, 2147483647.0}},
        {"i16", LM_I16, {0, 1, -2, 3, -32768, 32767}},
        {"i8", LM_I8, {0, 1, -2, 3, -128, 127}},
        {"u8", LM_U8, {0, 1, 2, 3, 128, 255}},
        {"bool", LM_BOOL, {0, 1, 0, 1, 1, 0}},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        lm_array *a = io_get(&s, want[i].name);
        assert_int_equal(a->dtype, want[i].dt);
        io_expect_shape(a, 2, (int64_t[]){2, 3});
        io_expect(a, want[i].v, 6);
    }
    lm_array *bf = io_get(&s, "bf16");
    assert_int_equal(bf->dtype, LM_BF16);
    double bfv[6];
    memcpy(bfv, F_VALUES, sizeof bfv);
    bfv[5] = lm_bf16_to_f32(lm_f32_to_bf16(3.0e38f));
    io_expect(bf, bfv, 6);
    lm_array *sc = io_get(&s, "scalar");
    assert_int_equal(sc->ndim, 0);
    io_expect(sc, (double[]){7.25}, 1);
    io_expect_shape(io_get(&s, "empty"), 2, (int64_t[]){0, 4});
    /* metadata, JSON escapes and a surrogate pair decoded to UTF-8 */
    assert_int_equal(s.nmeta, 2);
    assert_string_equal(s.meta[0].key, "format");
    assert_string_equal(s.meta[0].value, "pt");
    assert_string_equal(s.meta[1].value,
                        "h\xc3\xa9llo \"quoted\" \\ \xe4\xb8\xad\xf0\x9f\x98\x80");
    lm_tensor_set_free(&s);
}

/* Tensors wrap the mapping: no copy, no active bytes, writes stay private. */
static void test_st_mmap(void **state)
{
    (void)state;
    lm_memstats before = lm_device_memory(lm_device_cpu());
    lm_tensor_set s;
    assert_int_equal(lm_load_safetensors(IO_FX("st_torch.safetensors"), &s), LM_OK);
    lm_array *w = io_get(&s, "w");
    assert_non_null(w->buf);
    assert_non_null(w->buf->release);
    lm_memstats after = lm_device_memory(lm_device_cpu());
    assert_int_equal(after.active, before.active);
    /* keep one tensor past the set: the mapping must outlive the others */
    lm_array *keep = lm_array_retain(w);
    lm_tensor_set_free(&s);
    tu_fixture fx;
    assert_int_equal(tu_load("io/st_torch_w.npy", &fx), 0);
    tu_assert_close(keep, &fx, 0, 0, "w");
    /* an in-place write is private to this process */
    lm_array *z = lm_zeros(2, (int64_t[]){8, 4}, LM_F32, NULL);
    assert_int_equal(lm_array_assign(keep, z), LM_OK);
    lm_array_release(z);
    lm_array_release(keep);
    lm_tensor_set s2;
    assert_int_equal(lm_load_safetensors(IO_FX("st_torch.safetensors"), &s2), LM_OK);
    tu_assert_close(io_get(&s2, "w"), &fx, 0, 0, "w reloaded");
    tu_fixture fb;
    assert_int_equal(tu_load("io/st_torch_w_bf16.npy", &fb), 0);
    tu_assert_close(io_get(&s2, "w_bf16"), &fb, 0, 0, "w_bf16");
    tu_free(&fx);
    tu_free(&fb);
    lm_tensor_set_free(&s2);
}

static void test_st_unaligned_and_empty(void **state)
{
    (void)state;
    lm_tensor_set s;
    assert_int_equal(lm_load_safetensors(IO_FX("st_unaligned.safetensors"), &s), LM_OK);
    io_expect(io_get(&s, "x"), (double[]){1, 2, 3}, 3);
    lm_tensor_set_free(&s);
    /* unsigned types Lumen lacks are widened exactly */
    assert_int_equal(lm_load_safetensors(IO_FX("st_unsigned.safetensors"), &s), LM_OK);
    assert_int_equal(io_get(&s, "u16")->dtype, LM_I32);
    io_expect(io_get(&s, "u16"), (double[]){0, 1, 2, 3, 32768, 65535}, 6);
    assert_int_equal(io_get(&s, "u32")->dtype, LM_I64);
    io_expect(io_get(&s, "u32"), (double[]){0, 1, 2, 3, 2147483648.0, 4294967295.0}, 6);
    int64_t u64[6];
    assert_int_equal(lm_array_read(io_get(&s, "u64"), u64, LM_I64), LM_OK);
    assert_true(u64[4] == (int64_t)1 << 62 && u64[5] == INT64_MAX);
    lm_tensor_set_free(&s);
    assert_int_equal(lm_load_safetensors(IO_FX("st_empty.safetensors"), &s), LM_OK);
    assert_int_equal(s.count, 0);
    lm_tensor_set_free(&s);
}

static void test_st_roundtrip(void **state)
{
    (void)state;
    lm_array *arrs[LM_DTYPE_COUNT + 1];
    const char *names[LM_DTYPE_COUNT + 1];
    char nb[LM_DTYPE_COUNT][32];
    for (int dt = 0; dt < LM_DTYPE_COUNT; dt++) {
        double v[12];
        for (int i = 0; i < 12; i++) v[i] = (i * 37 % 11) - 3 + (lm_dtype_is_float(dt) ? 0.5 : 0);
        if (dt == LM_U8) v[0] = 250;
        lm_array *x = lm_from_data(3, (int64_t[]){2, 3, 2}, LM_F64, v, NULL);
        arrs[dt] = lm_cast(x, (lm_dtype)dt);   /* lazy: save evaluates */
        lm_array_release(x);
        snprintf(nb[dt], sizeof nb[dt], "layer.%d \"w\"/\xc3\xa9", dt);
        names[dt] = nb[dt];
    }
    /* a strided view is written contiguous */
    lm_array *t = lm_transpose(arrs[LM_F32], 0, 2);
    arrs[LM_DTYPE_COUNT] = t;
    names[LM_DTYPE_COUNT] = "transposed";
    lm_kv meta[] = {{"format", "pt"}, {"quote", "a\"b\\c\n"}};
    const char *p = io_tmp("rt.safetensors");
    assert_int_equal(lm_save_safetensors(p, LM_DTYPE_COUNT + 1, names, arrs, 2, meta), LM_OK);
    lm_tensor_set s;
    assert_int_equal(lm_load_file(p, &s), LM_OK);
    assert_int_equal(s.count, LM_DTYPE_COUNT + 1);
    assert_int_equal(s.nmeta, 2);
    assert_string_equal(s.meta[1].value, "a\"b\\c\n");
    for (int i = 0; i <= LM_DTYPE_COUNT; i++) {
        lm_array *b = io_get(&s, names[i]);
        assert_int_equal(b->dtype, arrs[i]->dtype);
        io_expect_shape(b, arrs[i]->ndim, arrs[i]->shape);
        double *want = tu_read(arrs[i]);
        io_expect(b, want, arrs[i]->size);
        free(want);
    }
    /* header length is a multiple of 8 so data is aligned */
    FILE *f = fopen(p, "rb");
    unsigned char len[8];
    assert_int_equal(fread(len, 1, 8, f), 8);
    fclose(f);
    assert_int_equal(len[0] % 8, 0);
    lm_tensor_set_free(&s);
    for (int i = 0; i <= LM_DTYPE_COUNT; i++) lm_array_release(arrs[i]);
}

static void test_st_save_errors(void **state)
{
    (void)state;
    lm_array *a = lm_zeros(1, (int64_t[]){2}, LM_F32, NULL);
    lm_array *arrs[2] = {a, a};
    const char *dup[2] = {"x", "x"};
    const char *p = io_tmp("bad.safetensors");
    assert_int_equal(lm_save_safetensors(p, 2, dup, arrs, 0, NULL), LM_ERR_ARG);
    assert_non_null(strstr(lm_error_message(), "given twice"));
    const char *meta[1] = {"__metadata__"};
    assert_int_equal(lm_save_safetensors(p, 1, meta, arrs, 0, NULL), LM_ERR_ARG);
    assert_int_equal(access(p, F_OK), -1);   /* nothing half-written */
    assert_int_equal(lm_save_safetensors("/nonexistent-dir/x.safetensors", 1, dup, arrs, 0, NULL),
                     LM_ERR_IO);
    assert_non_null(strstr(lm_error_message(), "/nonexistent-dir/x.safetensors"));
    lm_array_release(a);
}

/* The in-memory reader (used by the fuzzer) agrees with the mapped one. */
static void test_st_from_memory(void **state)
{
    (void)state;
    void *d = NULL;
    size_t n = 0;
    assert_int_equal(lm_io_read_all_for_test(IO_FX("st_all.safetensors"), &d, &n), 0);
    lm_tensor_set m, f;
    assert_int_equal(lm_load_safetensors_mem(d, n, "mem", &m), LM_OK);
    assert_int_equal(lm_load_safetensors(IO_FX("st_all.safetensors"), &f), LM_OK);
    assert_int_equal(m.count, f.count);
    for (int i = 0; i < m.count; i++) {
        assert_string_equal(m.names[i], f.names[i]);
        lm_compare_report r;
        assert_int_equal(lm_compare(m.arrays[i], f.arrays[i], NULL, &r), LM_OK);
        assert_true(r.ok);
    }
    lm_tensor_set_free(&m);
    lm_tensor_set_free(&f);
    free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_st_read_all_dtypes),
        cmocka_unit_test(test_st_mmap),
        cmocka_unit_test(test_st_unaligned_and_empty),
        cmocka_unit_test(test_st_roundtrip),
        cmocka_unit_test(test_st_save_errors),
        cmocka_unit_test(test_st_from_memory),
    };
    int rc = cmocka_run_group_tests_name("io_safetensors", tests, NULL, NULL);
    io_tmp_cleanup();
    return rc;
}
