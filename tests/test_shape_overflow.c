/* test_shape_overflow.c - checked arithmetic over shapes: a zero dimension
 * never hides an overflow of sizes, strides or offsets (core/node.c,
 * core/ops_view.c, core/ops_other.c, core/ops_nn.c, the file readers), and
 * the readers' size checks for the inputs make fuzz found (tests/fuzz/regress/).
 * Run under UBSan by make check; a signed overflow there aborts the suite. */
#include "testutil.h"
#include "core/io/image.h"
#include "core/io/io.h"
#include "io_test.h"

#define HUGE_SHAPE {18888888888888, 71, 0, 79, 2, 1, 79, 2}
#define HUGE_STR "[18888888888888,71,0,79,2,1,79,2]"

static void expect_error(lm_array *a, const char *text)
{
    if (a || !strstr(lm_error_message(), text)) {
        fprintf(stderr, "expected an error with \"%s\", got %s \"%s\"\n", text,
                a ? "an array" : "NULL and", lm_error_message());
        lm_array_release(a);
        fail();
    }
}

static void test_shape_check(void **state)
{
    (void)state;
    int64_t n = -1;
    assert_int_equal(lm_shape_check("t", 3, (int64_t[]){0, 0, 0}, &n), LM_OK);
    assert_int_equal(n, 0);
    assert_int_equal(lm_shape_check("t", 2, (int64_t[]){(int64_t)1 << 29, ((int64_t)1 << 30) - 1}, &n),
                     LM_OK);
    assert_int_equal(n, ((int64_t)1 << 59) - ((int64_t)1 << 29));
    /* 2^59 elements: one past LM_MAX_SPAN */
    assert_int_equal(lm_shape_check("t", 2, (int64_t[]){(int64_t)1 << 29, (int64_t)1 << 30}, NULL),
                     LM_ERR_SHAPE);
    assert_non_null(strstr(lm_error_message(), "t: shape [536870912,1073741824] is too large"));
    /* the zero does not hide the product of the others */
    assert_int_equal(lm_shape_check("t", 3, (int64_t[]){INT64_MAX, 0, 3}, NULL), LM_ERR_SHAPE);
    assert_int_equal(lm_shape_check("t", 8, (int64_t[])HUGE_SHAPE, NULL), LM_ERR_SHAPE);
    assert_int_equal(lm_shape_check("t", 2, (int64_t[]){2, -1}, NULL), LM_ERR_SHAPE);
    assert_non_null(strstr(lm_error_message(), "t: negative dimension in shape [2,-1]"));
    assert_false(lm_shape_fits(8, (int64_t[])HUGE_SHAPE, NULL));
}

static void test_creation(void **state)
{
    (void)state;
    int64_t sh[] = HUGE_SHAPE;
    expect_error(lm_zeros(8, sh, LM_I8, NULL), "full: shape " HUGE_STR " is too large");
    expect_error(lm_from_data(8, sh, LM_F32, NULL, NULL), "shape " HUGE_STR " is too large");
    expect_error(lm_full(2, (int64_t[]){0, INT64_MAX}, 1, LM_F32, NULL), "too large");
    /* an empty array with a sane shape still works */
    lm_array *z = lm_zeros(3, (int64_t[]){4, 0, 5}, LM_F32, NULL);
    assert_non_null(z);
    assert_int_equal(lm_array_eval(z), LM_OK);
    assert_int_equal(z->size, 0);
    assert_int_equal(z->strides[0], 5);
    lm_array_release(z);
}

static void test_views(void **state)
{
    (void)state;
    lm_array *e = lm_zeros(1, (int64_t[]){0}, LM_F32, NULL);
    /* an empty array fits any shape containing a zero, but not a huge one */
    expect_error(lm_reshape(e, 3, (int64_t[]){(int64_t)1 << 40, (int64_t)1 << 40, 0}), "reshape: shape");
    expect_error(lm_reshape(e, 3, (int64_t[]){(int64_t)1 << 62, 4, 0}), "reshape: shape");
    lm_array *ok = lm_reshape(e, 3, (int64_t[]){7, 0, 3});
    assert_non_null(ok);
    lm_array_release(ok);
    lm_array *x = lm_arange(0, 6, 1, LM_F32, NULL);
    expect_error(lm_reshape(x, 3, (int64_t[]){(int64_t)1 << 62, 4, 2}), "reshape: shape");
    expect_error(lm_reshape(x, 3, (int64_t[]){-1, (int64_t)1 << 62, 4}), "reshape");
    /* steps near the int64 limits leave one element and no overflow */
    double v;
    lm_array *s = lm_slice(x, 0, 2, INT64_MAX, INT64_MAX);
    assert_non_null(s);
    assert_int_equal(s->shape[0], 1);
    assert_int_equal(lm_array_get(s, (int64_t[]){0}, &v), LM_OK);
    assert_true(v == 2);
    lm_array_release(s);
    s = lm_slice(x, 0, INT64_MAX, INT64_MIN, INT64_MIN);
    assert_non_null(s);
    assert_int_equal(s->shape[0], 1);
    assert_int_equal(lm_array_get(s, (int64_t[]){0}, &v), LM_OK);
    assert_true(v == 5);
    lm_array_release(s);
    s = lm_slice(x, 0, -1, INT64_MIN, -2);   /* 5, 3, 1 */
    assert_non_null(s);
    assert_int_equal(s->shape[0], 3);
    assert_int_equal(lm_array_get(s, (int64_t[]){2}, &v), LM_OK);
    assert_true(v == 1);
    lm_array_release(s);
    lm_array_release(x);
    lm_array_release(e);
}

static void test_shape_ops(void **state)
{
    (void)state;
    lm_array *x = lm_zeros(2, (int64_t[]){2, 3}, LM_F32, NULL);
    expect_error(lm_pad(x, (int64_t[]){0, INT64_MAX, 0, 1}, 0), "pad: padding 0, 9223372036854775807");
    lm_array *big = lm_zeros(1, (int64_t[]){(int64_t)1 << 58}, LM_F32, NULL);   /* lazy: no memory */
    assert_non_null(big);
    lm_array *parts[40];
    for (int i = 0; i < 40; i++) parts[i] = big;
    expect_error(lm_concat(2, parts, 0), "concat: shape [576460752303423488] is too large");
    expect_error(lm_concat(40, parts, 0), "concat: axis 0 sums past 64 bits");
    lm_array_release(big);
    lm_array *img = lm_zeros(4, (int64_t[]){1, 2, 8, 8}, LM_F32, NULL);
    lm_array *w = lm_zeros(4, (int64_t[]){2, 2, 3, 3}, LM_F32, NULL);
    int64_t one[2] = {1, 1}, zero4[4] = {0};
    expect_error(lm_conv2d(img, w, NULL, one, zero4, (int64_t[]){(int64_t)1 << 40, 1}, 1),
                 "conv2d: dilation must be at most 2147483648");
    lm_array *wk = lm_zeros(4, (int64_t[]){2, 2, (int64_t)1 << 40, 1}, LM_F32, NULL);
    expect_error(lm_conv2d(img, wk, NULL, one, zero4, (int64_t[]){(int64_t)1 << 30, 1}, 1),
                 "conv2d: kernel 1099511627776 with dilation 1073741824 is too large");
    lm_array *wg = lm_zeros(4, (int64_t[]){2, (int64_t)1 << 40, 1, 1}, LM_F32, NULL);
    expect_error(lm_conv2d(img, wg, NULL, one, zero4, one, (int64_t)1 << 30), "conv2d: groups=");
    expect_error(lm_conv_transpose2d(img, wk, NULL, one, NULL, NULL, (int64_t[]){(int64_t)1 << 30, 1}, 1),
                 "conv_transpose2d: kernel 1099511627776 with dilation 1073741824 is too large");
    lm_array *arr[] = {x, img, w, wk, wg};
    for (int i = 0; i < 5; i++) lm_array_release(arr[i]);
}

static void test_image_grid(void **state)
{
    (void)state;
    lm_array *img = lm_zeros(3, (int64_t[]){1, (int64_t)1 << 29, (int64_t)1 << 29}, LM_F32, NULL);
    lm_array *two[2] = {img, img};   /* lazy: never allocated */
    expect_error(lm_image_grid(2, two, 1, 2, 0, LM_LAYOUT_CHW),
                 "grid: 2 images of 536870912x536870912 with pad 2 make a sheet too large");
    expect_error(lm_image_grid(2, two, 1, INT32_MAX, 0, LM_LAYOUT_CHW), "make a sheet too large");
    lm_array_release(img);
}

static unsigned char *read_file(const char *path, size_t *n)
{
    unsigned char *d = NULL;
    assert_int_equal(lm_io_read_all_for_test(path, (void **)&d, n), 0);
    return d;
}

/* The inputs make fuzz found: an npy header whose shape has a zero among
 * dimensions that multiply past int64 (C and Fortran order). */
static void test_npy_regressions(void **state)
{
    (void)state;
    const char *files[] = {"tests/fuzz/regress/npy/zero-dim-stride-overflow",
                           "tests/fuzz/regress/npy/zero-dim-stride-overflow-fortran"};
    for (int i = 0; i < 2; i++) {
        size_t n;
        unsigned char *d = read_file(files[i], &n);
        expect_error(lm_load_npy_mem(d, n, files[i]), "npy shape " HUGE_STR " too large");
        assert_int_equal(lm_error_status(), LM_ERR_FORMAT);
        free(d);
    }
}

static void test_safetensors_shape(void **state)
{
    (void)state;
    const char *hdr = "{\"t\":{\"dtype\":\"F32\",\"shape\":[18888888888888,71,0,79,2,1,79,2],"
                      "\"data_offsets\":[0,0]}}";
    size_t hl = strlen(hdr), n = 8 + hl;
    unsigned char *d = malloc(n);
    for (int i = 0; i < 8; i++) d[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(d + 8, hdr, hl);
    lm_tensor_set s;
    assert_int_equal(lm_load_safetensors_mem(d, n, "x.safetensors", &s), LM_ERR_FORMAT);
    assert_non_null(strstr(lm_error_message(), "x.safetensors: tensor 't': shape " HUGE_STR " too large"));
    free(d);
}

/* A 128-byte PNG whose fourth tEXt chunk claims 1,696,621,075 bytes fails
 * at the chunk walk, before libpng allocates anything for it. */
static void test_png_chunk_claim(void **state)
{
    (void)state;
    const char *path = "tests/fuzz/regress/png/text-chunk-claims-1.7gb";
    size_t n;
    unsigned char *d = read_file(path, &n);
    assert_int_equal(n, 128);
    lm_tensor_set text = {0};
    expect_error(lm_png_read_mem(d, n, path, NULL, &text),
                 "bad PNG: chunk tEXt claims 1696621075 bytes, the file has");
    assert_int_equal(lm_error_status(), LM_ERR_FORMAT);
    lm_tensor_set_free(&text);
    free(d);
}

/* fuzz_png: a 71-byte PNG whose last chunk header (no room for its CRC)
 * claims 1.2 GB; libpng allocated and cleared that much (seconds, 1.1 GB
 * of RSS) before the chunk walk also covered such headers. */
static void test_png_cut_chunk_header(void **state)
{
    (void)state;
    const char *path = "tests/fuzz/regress/png/last-chunk-header-claims-1.2gb";
    size_t n;
    unsigned char *d = read_file(path, &n);
    assert_int_equal(n, 71);
    lm_tensor_set text = {0};
    expect_error(lm_png_read_mem(d, n, path, NULL, &text),
                 "bad PNG: chunk tEXt claims 1207959571 bytes, the file has 0 left");
    lm_tensor_set_free(&text);
    /* every cut of a chunk header near the end: an error, never a read past it */
    for (size_t len = 8; len < n; len++) {
        unsigned char *cut = malloc(len);
        memcpy(cut, d, len);
        lm_array *a = lm_png_read_mem(cut, len, path, NULL, NULL);
        assert_null(a);
        free(cut);
    }
    free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shape_check),
        cmocka_unit_test(test_creation),
        cmocka_unit_test(test_views),
        cmocka_unit_test(test_shape_ops),
        cmocka_unit_test(test_image_grid),
        cmocka_unit_test(test_npy_regressions),
        cmocka_unit_test(test_safetensors_shape),
        cmocka_unit_test(test_png_chunk_claim),
        cmocka_unit_test(test_png_cut_chunk_header),
    };
    int r = cmocka_run_group_tests(tests, NULL, NULL);
    if (lm_array_live_count() != 0) {
        printf("test_shape_overflow: %lld arrays left alive\n", (long long)lm_array_live_count());
        return 1;
    }
    return r;
}
