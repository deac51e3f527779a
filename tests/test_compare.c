/* test_compare.c - comparison reports: metrics against hand-computed
 * values, NaN/Inf rules, tolerances, shapes, sets of named tensors. */
#include "io_test.h"
#include "core/io/compare_sets.h"

static lm_array *vec(int n, const double *v, lm_dtype dt)
{
    lm_array *x = lm_from_data(1, (int64_t[]){n}, LM_F64, v, NULL);
    lm_array *c = lm_cast(x, dt);
    lm_array_release(x);
    return c;
}

static void test_metrics(void **state)
{
    (void)state;
    lm_array *a = vec(4, (double[]){1, 2, 3, 4}, LM_F64);
    lm_array *b = vec(4, (double[]){1, 2, 3.5, 4}, LM_F64);
    lm_compare_report r;
    assert_int_equal(lm_compare(a, b, NULL, &r), LM_OK);
    assert_false(r.ok);
    assert_true(r.shape_equal && r.dtype_equal);
    assert_int_equal(r.count, 4);
    assert_int_equal(r.n_bad, 1);
    assert_true(r.frac_bad == 0.25);
    assert_true(r.max_abs == 0.5);
    assert_true(fabs(r.max_rel - 0.5 / 3.5) < 1e-15);
    assert_true(r.mae == 0.125);
    assert_true(r.rmse == 0.25);
    assert_true(fabs(r.nmse - 0.25 / 33.25) < 1e-15);
    double dot = 1 + 4 + 10.5 + 16, na = sqrt(30), nb = sqrt(33.25);
    assert_true(fabs(r.cosine - dot / na / nb) < 1e-15);
    assert_true(fabs(r.psnr - 10 * log10(16 / 0.0625)) < 1e-12);   /* peak = max|b| = 4 */
    assert_true(r.has_worst);
    assert_int_equal(r.worst_index[0], 2);
    assert_true(r.worst_a == 3 && r.worst_b == 3.5);
    assert_true(r.rtol == 1e-7 && r.atol == 1e-7);   /* f64 defaults */
    char buf[1024];
    lm_compare_format(&r, 1, buf, sizeof buf);
    assert_non_null(strstr(buf, "MISMATCH"));
    assert_non_null(strstr(buf, "worst    [3]: 3 vs 3.5"));
    /* identical */
    assert_int_equal(lm_compare(a, a, NULL, &r), LM_OK);
    assert_true(r.ok && r.max_abs == 0 && r.cosine == 1 && isinf(r.psnr));
    lm_array_release(a);
    lm_array_release(b);
}

static void test_nan_inf(void **state)
{
    (void)state;
    lm_array *a = vec(5, (double[]){NAN, INFINITY, -INFINITY, 1, NAN}, LM_F32);
    lm_array *b = vec(5, (double[]){NAN, INFINITY, INFINITY, NAN, 2}, LM_F32);
    lm_compare_report r;
    assert_int_equal(lm_compare(a, b, NULL, &r), LM_OK);
    assert_false(r.ok);
    assert_int_equal(r.nan_mismatch, 2);
    assert_int_equal(r.inf_mismatch, 1);
    assert_int_equal(r.n_bad, 3);
    assert_int_equal(r.worst_index[0], 2);   /* the first NaN/Inf mismatch */
    assert_true(isnan(r.max_abs));            /* no finite pair */
    lm_compare_opts o;
    lm_compare_opts_init(&o);
    o.equal_nan = false;
    assert_int_equal(lm_compare(a, b, &o, &r), LM_OK);
    assert_int_equal(r.nan_mismatch, 3);
    lm_array_release(a);
    lm_array_release(b);
}

static void test_tolerances(void **state)
{
    (void)state;
    lm_array *a = vec(3, (double[]){1, 2, 3}, LM_F32);
    lm_array *b = vec(3, (double[]){1.0005, 2, 3}, LM_F16);
    lm_compare_report r;
    /* f16 on one side: torch's f16 tolerances (rtol 1e-3) apply */
    assert_int_equal(lm_compare(a, b, NULL, &r), LM_OK);
    assert_true(r.rtol == 1e-3 && r.atol == 1e-5);
    assert_true(r.ok);
    assert_false(r.dtype_equal);
    lm_compare_opts o;
    lm_compare_opts_init(&o);
    o.check_dtype = true;
    assert_int_equal(lm_compare(a, b, &o, &r), LM_OK);
    assert_false(r.ok);
    o.check_dtype = false;
    o.rtol = 0;
    o.atol = 0;
    assert_int_equal(lm_compare(a, b, &o, &r), LM_OK);
    /* 1.0005 is not representable in f16: it still differs from 1 */
    assert_false(r.ok);
    /* shapes differ: a report, not an error */
    lm_array *c = lm_zeros(2, (int64_t[]){3, 1}, LM_F32, NULL);
    assert_int_equal(lm_compare(a, c, NULL, &r), LM_OK);
    assert_false(r.ok || r.shape_equal);
    char row[512];
    lm_compare_row("c", &r, row, sizeof row);
    assert_non_null(strstr(row, "[3] vs [3,1]"));
    /* allclose broadcasts as numpy does */
    bool ok;
    lm_array *one = vec(1, (double[]){2}, LM_F32);
    lm_array *twos = lm_full(2, (int64_t[]){2, 3}, 2.000001, LM_F32, NULL);
    assert_int_equal(lm_allclose(twos, one, 1e-5, 1e-8, false, &ok), LM_OK);
    assert_true(ok);
    assert_int_equal(lm_allclose(a, one, 1e-5, 1e-8, false, &ok), LM_OK);
    assert_false(ok);
    lm_array *all[] = {a, b, c, one, twos};
    for (int i = 0; i < 5; i++) lm_array_release(all[i]);
}

/* A large lazy tensor is read in chunks and still gets every metric. */
static void test_chunks(void **state)
{
    (void)state;
    int64_t n = 1000003;
    lm_array *a = lm_arange(0, (double)n, 1, LM_F64, NULL);
    lm_array *b = lm_binary_scalar(LM_OP_ADD, a, 0, false);
    lm_array *bump = lm_binary_scalar(LM_OP_MUL, a, 1 + 1e-9, false);
    lm_compare_report r;
    assert_int_equal(lm_compare(a, b, NULL, &r), LM_OK);
    assert_true(r.ok && r.count == n);
    lm_compare_opts o;
    lm_compare_opts_init(&o);
    o.rtol = 0;
    o.atol = 1e-4;   /* |a * 1e-9| > 1e-4 from a = 1e5 on */
    assert_int_equal(lm_compare(bump, a, &o, &r), LM_OK);
    assert_int_equal(r.worst_index[0], n - 1);
    assert_true(r.n_bad > 900000 - 10 && r.n_bad < 900003 + 10);
    lm_array_release(a);
    lm_array_release(b);
    lm_array_release(bump);
}

static void test_sets_and_files(void **state)
{
    (void)state;
    lm_tensor_set ref;
    assert_int_equal(lm_load_file(IO_FX("torch_dump.npz"), &ref), LM_OK);
    /* what a Lumen computation would produce: y exact, x off, z extra */
    lm_tensor_set got = {0};
    got.count = 3;
    char *names[3] = {"y", "x", "z"};
    lm_array *x = lm_binary_scalar(LM_OP_ADD, io_get(&ref, "x"), 1e-3, false);
    lm_array *arrs[3] = {lm_array_retain(io_get(&ref, "y")), x, lm_zeros(1, (int64_t[]){1}, LM_F32, NULL)};
    got.names = names;
    got.arrays = arrs;
    lm_compare_set cs;
    assert_int_equal(lm_compare_file(IO_FX("torch_dump.npz"), &got, NULL, NULL, false, &cs), LM_OK);
    assert_false(cs.ok);
    assert_int_equal(cs.count, 2);
    assert_true(cs.entries[0].r.ok);      /* y */
    assert_false(cs.entries[1].r.ok);     /* x */
    assert_int_equal(cs.nextra, 1);
    assert_string_equal(cs.extra[0], "z");
    assert_int_equal(cs.nmissing, 1);
    assert_string_equal(cs.missing[0], "w");
    char *txt = lm_compare_set_format(&cs, 0);
    assert_non_null(strstr(txt, "MISMATCH: 2 compared, 1 mismatched, 1 missing, 1 extra"));
    free(txt);
    lm_compare_set_free(&cs);
    /* only: a substring or a glob selects names on both sides */
    assert_int_equal(lm_compare_sets(&got, &ref, NULL, "y", false, &cs), LM_OK);
    assert_true(cs.ok && cs.count == 1 && cs.nmissing == 0);
    lm_compare_set_free(&cs);
    assert_int_equal(lm_compare_sets(&got, &ref, NULL, "[wy]", true, &cs), LM_OK);
    assert_true(cs.ok && cs.count == 1 && cs.nmissing == 1);
    lm_compare_set_free(&cs);
    /* nothing compared is no success, and says why (lumen compare, lm.compare_file) */
    assert_int_equal(lm_compare_sets(&got, &ref, NULL, "nomatch", true, &cs), LM_OK);
    assert_false(cs.ok);
    assert_string_equal(cs.reason, "only \"nomatch\" selects no name on either side");
    txt = lm_compare_set_format(&cs, 1);
    assert_non_null(strstr(txt, "nothing compared: only \"nomatch\""));
    free(txt);
    lm_compare_set_free(&cs);
    lm_tensor_set none = {0};
    assert_int_equal(lm_compare_sets(&none, &none, NULL, NULL, false, &cs), LM_OK);
    assert_false(cs.ok);
    assert_string_equal(cs.reason, "neither side holds a tensor");
    lm_compare_set_free(&cs);
    assert_int_equal(lm_compare_sets(&none, &ref, NULL, NULL, true, &cs), LM_OK);   /* all missing, allowed */
    assert_false(cs.ok);
    assert_non_null(strstr(cs.reason, "no tensor to hold against the reference's"));
    lm_compare_set_free(&cs);
    /* one tensor on each side (a .npy file): paired whatever the names */
    lm_tensor_set y;
    assert_int_equal(lm_load_file(IO_FX("torch_y.npy"), &y), LM_OK);
    assert_int_equal(lm_compare_sets(&y, &ref, NULL, "y", false, &cs), LM_OK);
    assert_true(cs.ok && cs.count == 1 && cs.nextra == 0 && cs.nmissing == 0);
    assert_string_equal(cs.entries[0].name, "torch_y");
    lm_compare_set_free(&cs);
    lm_tensor_set_free(&y);
    assert_true(lm_compare_name_matches("layer.*.weight", "layer.3.weight"));
    assert_false(lm_compare_name_matches("layer.*.weight", "layer.3.bias"));
    for (int i = 0; i < 3; i++) lm_array_release(arrs[i]);
    lm_tensor_set_free(&ref);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_nan_inf),
        cmocka_unit_test(test_tolerances),
        cmocka_unit_test(test_chunks),
        cmocka_unit_test(test_sets_and_files),
    };
    return cmocka_run_group_tests_name("compare", tests, NULL, NULL);
}
