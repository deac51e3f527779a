/* test_io_malformed.c - hand-made malformed files each give their own clear
 * error naming the file; every prefix of a good file fails cleanly; inputs
 * that once crashed the fuzzers (tests/fuzz/regress/) stay harmless. */
#include <dirent.h>
#include "io_test.h"

static const struct { const char *file, *expect; } cases[] = {
    {"bad_st_truncated.safetensors", "outside the 192 data bytes"},
    {"bad_st_short.safetensors", "not even the 8-byte header length"},
    {"bad_st_huge_header.safetensors", "exceeds the 100000000 byte limit"},
    {"bad_st_header_past_end.safetensors", "header length 1000 but only 7 bytes follow"},
    {"bad_st_offsets_past_end.safetensors", "data_offsets [0, 16] outside the 8 data bytes"},
    {"bad_st_dtype.safetensors", "dtype \"F8_E4M3\" is not supported"},
    {"bad_st_negative_shape.safetensors", "negative number"},
    {"bad_st_overlap.safetensors", "tensors 'x' and 'y' overlap"},
    {"bad_st_size_mismatch.safetensors", "span 16 bytes but F32[3] needs 12"},
    {"bad_st_json.safetensors", "expected ',' or '}'"},
    {"bad_st_duplicate.safetensors", "tensor name 'x' appears twice"},
    {"bad_st_metadata.safetensors", "__metadata__ values must be strings"},
    {"bad_st_missing_key.safetensors", "lacks data_offsets"},
    {"bad_st_u64_overflow.safetensors", "tensor 'x': U64 value does not fit in int64"},
    {"bad_st_too_many_dims.safetensors", "more than 8 dimensions"},
    {"bad_npy_truncated.npy", "needs 24 data bytes, the file has 19"},
    {"bad_npy_magic.npy", "unknown magic bytes"},
    {"bad_npy_header_past_end.npy", "header length 60000 but 142 bytes follow"},
    {"bad_npy_huge_header.npy", "exceeds the 1048576 byte limit"},
    {"bad_npy_descr.npy", "dtype '<c8' is not supported"},
    {"bad_npy_negative_shape.npy", "shape entries must be non-negative"},
    {"bad_npy_structured.npy", "structured dtypes"},
    {"bad_npy_version.npy", "version 9.0 is not supported"},
    {"bad_npy_u8_overflow.npy", "does not fit in int64"},
    {"bad_npz_truncated.npz", "no end of central directory"},
    {"bad_npz_crc.npz", "a.npy: CRC mismatch"},
    {"bad_npz_bomb.npz", "impossible size"},
    {"bad_npz_overlap.npz", "members overlap"},
    {"bad_npz_empty.npz", "too short for a zip archive"},
    {"bad_png_truncated.png", "chunk IDAT claims 26 bytes, the file has 8 left"},
    {"bad_png_crc.png", "IDAT: incorrect data check"},
    {"bad_png_huge.png", "impossible for the file's length"},
    {"bad_png_signature.png", "unknown magic bytes"},
    {"bad_png_ihdr.png", "Invalid IHDR"},
    {"bad_unknown.bin", "not a safetensors, npy, npz, PNG or GGUF file"},
};

static void test_malformed_files(void **state)
{
    (void)state;
    char path[256];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(path, sizeof path, IO_FX("%s"), cases[i].file);
        lm_tensor_set s;
        lm_status st = lm_load_file(path, &s);
        const char *msg = lm_error_message();
        if (st == LM_OK || !strstr(msg, cases[i].expect) || !strstr(msg, cases[i].file)) {
            fprintf(stderr, "%s: status %d, message \"%s\", expected \"%s\"\n", cases[i].file,
                    st, st ? msg : "", cases[i].expect);
            fail();
        }
        assert_int_equal(st, LM_ERR_FORMAT);
        assert_int_equal(s.count, 0);
    }
}

static void test_missing_file(void **state)
{
    (void)state;
    lm_tensor_set s;
    assert_int_equal(lm_load_file("/nonexistent/w.safetensors", &s), LM_ERR_IO);
    assert_non_null(strstr(lm_error_message(), "/nonexistent/w.safetensors: cannot open"));
    assert_null(lm_load_npy("/nonexistent/x.npy"));
    assert_null(lm_png_read("/nonexistent/x.png", NULL, NULL));
}

/* Every prefix of a good file is an error or a valid load, never a crash
 * (run under ASan by make check). */
static void test_every_prefix(void **state)
{
    (void)state;
    const char *files[] = {"st_all.safetensors", "npy_fortran_f4.npy", "npz_deflated.npz",
                           "npz_stored.npz", "pil_palette_trns.png", "enc_rgb16.png"};
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        char path[256];
        snprintf(path, sizeof path, IO_FX("%s"), files[f]);
        unsigned char *d = NULL;
        size_t n = 0;
        assert_int_equal(lm_io_read_all_for_test(path, (void **)&d, &n), 0);
        lm_file_format fmt = lm_detect_mem(d, n);
        for (size_t len = 0; len < n; len++) {
            unsigned char *cut = malloc(len + 1);   /* exact size: ASan sees overreads */
            memcpy(cut, d, len);
            lm_tensor_set s;
            lm_array *a = NULL;
            lm_status st = LM_OK;
            if (fmt == LM_FORMAT_SAFETENSORS) st = lm_load_safetensors_mem(cut, len, "cut", &s);
            else if (fmt == LM_FORMAT_NPZ) st = lm_load_npz_mem(cut, len, "cut", &s);
            else if (fmt == LM_FORMAT_NPY) a = lm_load_npy_mem(cut, len, "cut");
            else a = lm_png_read_mem(cut, len, "cut", NULL, NULL);
            if (fmt == LM_FORMAT_SAFETENSORS || fmt == LM_FORMAT_NPZ) {
                if (st == LM_OK) lm_tensor_set_free(&s);
            } else {
                lm_array_release(a);
            }
            free(cut);
        }
        free(d);
    }
}

static void run_regress(const char *dir, int kind)
{
    DIR *dd = opendir(dir);
    if (!dd) return;
    struct dirent *e;
    while ((e = readdir(dd))) {
        if (e->d_name[0] == '.') continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unsigned char *d = NULL;
        size_t n = 0;
        if (lm_io_read_all_for_test(path, (void **)&d, &n) != 0) { free(d); continue; }
        lm_tensor_set s;
        if (kind == 0 && lm_load_safetensors_mem(d, n, path, &s) == LM_OK) lm_tensor_set_free(&s);
        if (kind == 1) {
            lm_array_release(lm_load_npy_mem(d, n, path));
            if (lm_load_npz_mem(d, n, path, &s) == LM_OK) lm_tensor_set_free(&s);
        }
        if (kind == 2) {
            lm_tensor_set text = {0};
            lm_array_release(lm_png_read_mem(d, n, path, NULL, &text));
            lm_tensor_set_free(&text);
        }
        free(d);
    }
    closedir(dd);
}

static void test_fuzz_regressions(void **state)
{
    (void)state;
    run_regress("tests/fuzz/regress/safetensors", 0);
    run_regress("tests/fuzz/regress/npy", 1);
    run_regress("tests/fuzz/regress/png", 2);
}

/* A header larger than the limit is reported as such, whatever the name
 * (it was "unknown magic bytes" for any file of 16 bytes or more). */
static void test_header_over_limit(void **state)
{
    (void)state;
    const char *json = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}    ";
    const char *names[] = {"big.safetensors", "big.bin"};
    for (int i = 0; i < 2; i++) {
        const char *p = io_tmp(names[i]);
        FILE *f = fopen(p, "wb");
        assert_non_null(f);
        unsigned char len[8] = {0};
        uint64_t n = 200000000;
        for (int b = 0; b < 8; b++) len[b] = (unsigned char)(n >> (8 * b));
        fwrite(len, 1, 8, f);
        fputs(json, f);
        fclose(f);
        lm_tensor_set s;
        assert_int_equal(lm_load_file(p, &s), LM_ERR_FORMAT);
        const char *m = lm_error_message();
        if (!strstr(m, p) || !strstr(m, "header length 200000000 exceeds the 100000000 byte limit")) {
            fprintf(stderr, "%s: %s\n", names[i], m);
            fail();
        }
    }
    /* text with a '{' at byte 8 is still not a safetensors file */
    const char *t = io_tmp("notes.txt");
    FILE *f = fopen(t, "wb");
    assert_non_null(f);
    fputs("abcdefgh{x} and more text", f);
    fclose(f);
    lm_tensor_set s;
    assert_int_equal(lm_load_file(t, &s), LM_ERR_FORMAT);
    assert_non_null(strstr(lm_error_message(), "unknown magic bytes"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_malformed_files),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_every_prefix),
        cmocka_unit_test(test_fuzz_regressions),
        cmocka_unit_test(test_header_over_limit),
    };
    return cmocka_run_group_tests_name("io_malformed", tests, NULL, NULL);
}
