/* test_profile.c - core/profile.c: rows per (op, kernel, shapes, dtype,
 * device) with the right counts, times that add up to the total, nothing
 * recorded while no profile is open, nesting and its limit; on Vulkan
 * (lavapipe here) GPU times from timestamp queries with the shaders' names,
 * transfers with their bytes and CPU fallbacks as rows. */
#include "testutil.h"
#include "core/profile.h"
#ifdef LM_HAVE_VULKAN
#include "backends/vulkan/vulkan.h"
#endif

static lm_device *cpu_dev(void) { return lm_device_cpu(); }

static const lm_profile_row *find(const lm_profile *p, const char *op, const char *device)
{
    for (int i = 0; i < p->nrows; i++)
        if (!strcmp(p->rows[i].op, op) && !strcmp(p->rows[i].device, device)) return &p->rows[i];
    return NULL;
}

static int rows_of(const lm_profile *p, const char *op)
{
    int n = 0;
    for (int i = 0; i < p->nrows; i++) n += !strcmp(p->rows[i].op, op);
    return n;
}

/* every row's times are sane and the rows add up to the total */
static void check_sums(const lm_profile *p)
{
    double sum = 0;
    for (int i = 0; i < p->nrows; i++) {
        const lm_profile_row *r = &p->rows[i];
        assert_true(r->count > 0);
        assert_true(r->min_ms >= 0);
        assert_true(r->min_ms <= r->total_ms / (double)r->count + 1e-9);
        assert_true(r->total_ms / (double)r->count <= r->max_ms + 1e-9);
        if (i) assert_true(p->rows[i - 1].total_ms >= r->total_ms);   /* sorted */
        sum += r->total_ms;
    }
    assert_true(fabs(sum - p->total_ms) <= 1e-9 * (1 + sum));
}

static lm_array *filled(int64_t r, int64_t c, double v, lm_device *d)
{
    lm_array *a = lm_full(2, (int64_t[]){r, c}, v, LM_F32, d);
    assert_non_null(a);
    assert_int_equal(lm_array_eval(a), LM_OK);
    return a;
}

/* x @ w three times, then + 1: one matmul row of count 3 */
static void run_chain(lm_device *d, double *out)
{
    lm_array *x = filled(8, 8, 0.5, d), *w = filled(8, 8, 0.25, d);
    lm_array *y = lm_array_retain(x);
    for (int i = 0; i < 3; i++) {
        lm_array *n = lm_matmul(y, w);
        lm_array_release(y);
        y = n;
    }
    lm_array *one = lm_scalar(1.0, LM_F32, d);
    lm_array *z = lm_binary(LM_OP_ADD, y, one);
    assert_int_equal(lm_array_eval(z), LM_OK);
    assert_int_equal(lm_array_get(z, (int64_t[]){0, 0}, out), LM_OK);
    lm_array_release(x);
    lm_array_release(w);
    lm_array_release(y);
    lm_array_release(one);
    lm_array_release(z);
}

static void test_counts_and_sums_cpu(void **state)
{
    (void)state;
    assert_int_equal(lm_profile_begin(), LM_OK);
    double v = 0;
    run_chain(cpu_dev(), &v);
    lm_profile *p = lm_profile_end();
    assert_non_null(p);
    /* x @ w is 1 everywhere, then 2, then 4; + 1 */
    assert_true(fabs(v - 5.0) < 1e-5);
    assert_int_equal(rows_of(p, "matmul"), 1);
    const lm_profile_row *mm = find(p, "matmul", "cpu");
    assert_non_null(mm);
    assert_int_equal(mm->count, 3);
    assert_string_equal(mm->shape, "[8,8] [8,8] -> [8,8]");
    assert_string_equal(mm->dtype, "f32");
    assert_string_equal(mm->timer, "host");
    const lm_profile_row *add = find(p, "add", "cpu");
    assert_non_null(add);
    assert_int_equal(add->count, 1);
    assert_string_equal(add->shape, "[8,8] [] -> [8,8]");
    assert_int_equal(p->evals, 3);   /* x, w, then z (the read evaluates nothing) */
    check_sums(p);
    char *text = lm_profile_format(p, 0);
    assert_non_null(text);
    assert_non_null(strstr(text, "lumen profile: 3 evaluations"));
    assert_non_null(strstr(text, "matmul"));
    free(text);
    text = lm_profile_format(p, 1);   /* the longest row and a line for the others */
    assert_non_null(text);
    assert_non_null(strstr(text, p->rows[0].op));
    char more[48];
    snprintf(more, sizeof more, "... %d more rows", p->nrows - 1);
    assert_non_null(strstr(text, more));
    free(text);
    lm_profile_free(p);
    assert_int_equal(lm_profile_depth(), 0);
}

/* matmuls of two shapes: two rows, one when grouped by kernel or op */
static void test_group(void **state)
{
    (void)state;
    lm_array *a = filled(4, 8, 1, cpu_dev()), *b = filled(8, 2, 1, cpu_dev()), *c = filled(8, 8, 1, cpu_dev());
    assert_int_equal(lm_profile_begin(), LM_OK);
    lm_array *x = lm_matmul(a, b), *y = lm_matmul(c, c), *z = lm_matmul(c, c);
    lm_array *all[3] = {x, y, z};
    assert_int_equal(lm_eval(all, 3), LM_OK);
    lm_profile *p = lm_profile_end();
    assert_non_null(p);
    assert_int_equal(rows_of(p, "matmul"), 2);
    double total = 0;   /* the matmuls' (the outputs' allocations are rows too) */
    for (int i = 0; i < p->nrows; i++)
        if (!strcmp(p->rows[i].op, "matmul")) total += p->rows[i].total_ms;
    lm_profile_group(p, LM_PROFILE_BY_KERNEL);
    assert_int_equal(rows_of(p, "matmul"), 1);
    const lm_profile_row *r = find(p, "matmul", "cpu");
    assert_int_equal(r->count, 3);
    assert_string_equal(r->kernel, "sgemm");
    assert_string_equal(r->shape, "");
    assert_true(fabs(r->total_ms - total) < 1e-9);
    lm_profile_group(p, LM_PROFILE_BY_OP);
    assert_int_equal(rows_of(p, "matmul"), 1);
    r = find(p, "matmul", "cpu");
    assert_string_equal(r->kernel, "");
    assert_int_equal(r->count, 3);
    check_sums(p);
    lm_profile_free(p);
    lm_array *mine[] = {a, b, c, x, y, z};
    for (int i = 0; i < 6; i++) lm_array_release(mine[i]);
}

/* a buffer the cache cannot give is an "alloc" row; the second time it can */
static void test_alloc_rows(void **state)
{
    (void)state;
    for (int round = 0; round < 2; round++) {
        assert_int_equal(lm_profile_begin(), LM_OK);
        lm_array *a = lm_full(1, (int64_t[]){777777}, 2.0, LM_F32, cpu_dev());
        assert_int_equal(lm_array_eval(a), LM_OK);
        lm_array_release(a);
        lm_profile *p = lm_profile_end();
        assert_non_null(p);
        const lm_profile_row *r = find(p, "alloc", "cpu");
        if (round == 0) {
            assert_non_null(r);
            assert_true(r->bytes >= 777777 * 4);
            assert_string_equal(r->timer, "host");
        } else {
            assert_null(r);
        }
        check_sums(p);
        lm_profile_free(p);
    }
}

static void test_off_records_nothing(void **state)
{
    (void)state;
    double v;
    run_chain(cpu_dev(), &v);   /* no profile open: nothing kept for later */
    assert_int_equal(lm_profile_depth(), 0);
    assert_int_equal(lm_profile_begin(), LM_OK);
    lm_profile *p = lm_profile_end();
    assert_non_null(p);
    assert_int_equal(p->nrows, 0);
    assert_int_equal(p->evals, 0);
    assert_true(p->total_ms == 0);
    lm_profile_free(p);
    /* closing what is not open is an error, not a crash */
    assert_null(lm_profile_end());
    assert_int_equal(lm_error_status(), LM_ERR_STATE);
    lm_error_clear();
}

static void test_nesting(void **state)
{
    (void)state;
    double v;
    assert_int_equal(lm_profile_begin(), LM_OK);
    run_chain(cpu_dev(), &v);
    assert_int_equal(lm_profile_begin(), LM_OK);
    run_chain(cpu_dev(), &v);
    lm_profile *inner = lm_profile_end();
    lm_profile *outer = lm_profile_end();
    assert_non_null(inner);
    assert_non_null(outer);
    assert_int_equal(find(inner, "matmul", "cpu")->count, 3);
    assert_int_equal(find(outer, "matmul", "cpu")->count, 6);
    assert_true(outer->total_ms >= inner->total_ms);
    lm_profile_free(inner);
    lm_profile_free(outer);
    /* a limit, and an error naming it past it */
    for (int i = 0; i < LM_PROFILE_DEPTH; i++) assert_int_equal(lm_profile_begin(), LM_OK);
    assert_int_equal(lm_profile_begin(), LM_ERR_STATE);
    assert_non_null(strstr(lm_error_message(), "profile"));
    lm_error_clear();
    for (int i = 0; i < LM_PROFILE_DEPTH; i++) lm_profile_free(lm_profile_end());
    assert_int_equal(lm_profile_depth(), 0);
}

static void test_fused_names_its_steps(void **state)
{
    (void)state;
    int64_t shape[1] = {16};
    lm_array *ph = lm_placeholder(1, shape, LM_F32, cpu_dev());
    lm_array *two = lm_scalar(2.0, LM_F32, cpu_dev());
    lm_array *t = lm_binary(LM_OP_MUL, ph, two);
    lm_array *o = lm_unary(LM_OP_EXP, t);
    lm_compiled *c = lm_compile_graph(1, &ph, 1, &o, LM_COMPILE_ON);
    assert_non_null(c);
    lm_array *x = filled(1, 16, 0.5, cpu_dev());
    lm_array *xr = lm_reshape(x, 1, shape);
    lm_array *out = NULL;
    assert_int_equal(lm_profile_begin(), LM_OK);
    assert_int_equal(lm_compiled_call(c, 1, &xr, &out), 1);
    assert_int_equal(lm_array_eval(out), LM_OK);
    lm_profile *p = lm_profile_end();
    assert_non_null(p);
    const lm_profile_row *f = find(p, "fused", "cpu");
    assert_non_null(f);
    assert_non_null(strstr(f ? f->kernel : "", "fused(mul,exp)"));
    assert_int_equal(f->count, 1);
    lm_profile_free(p);
    lm_array_release(out);
    lm_array_release(xr);
    lm_array_release(x);
    lm_compiled_free(c);
    lm_array_release(o);
    lm_array_release(t);
    lm_array_release(two);
    lm_array_release(ph);
}

#ifdef LM_HAVE_VULKAN
static lm_device *vk;

static void test_vulkan_gpu_times(void **state)
{
    (void)state;
    /* no profile open: no timestamps recorded */
    double v = 0;
    int64_t t0 = lm_vulkan_timestamp_count(), d0 = lm_vulkan_dispatch_count();
    run_chain(vk, &v);
    int64_t plain = lm_vulkan_dispatch_count() - d0;
    assert_int_equal(lm_vulkan_timestamp_count(), t0);
    assert_true(plain >= 4);
    /* profiled: two per dispatch, and no dispatch more */
    assert_int_equal(lm_profile_begin(), LM_OK);
    d0 = lm_vulkan_dispatch_count();
    run_chain(vk, &v);
    lm_profile *p = lm_profile_end();
    assert_int_equal(lm_vulkan_dispatch_count() - d0, plain);
    assert_true(lm_vulkan_timestamp_count() - t0 >= 2 * plain);
    assert_non_null(p);
    assert_true(fabs(v - 5.0) < 1e-4);
    const lm_profile_row *mm = find(p, "matmul", vk->spec);
    assert_non_null(mm);
    assert_int_equal(mm->count, 3);
    assert_string_equal(mm->timer, "gpu");
    assert_true(mm->total_ms > 0);
    assert_true(mm->min_ms > 0);
    assert_true(strlen(mm->kernel) > 0);   /* the shader's name */
    assert_non_null(strstr(mm ? mm->kernel : "", "matmul"));
    /* the scalar and the value read back are transfers, with their bytes */
    const lm_profile_row *up = find(p, "upload", vk->spec), *down = find(p, "download", vk->spec);
    assert_non_null(up);
    assert_non_null(down);
    assert_int_equal(down->bytes, 4);
    assert_int_equal(down->count, 1);
    assert_string_equal(down->timer, "host");
    check_sums(p);
    lm_profile_free(p);
}

static void test_vulkan_fallback_row(void **state)
{
    (void)state;
    setenv("LUMEN_FALLBACK", "quiet", 1);
    double x[4] = {0, 1, 2, 3};
    lm_array *a = lm_from_data(1, (int64_t[]){4}, LM_F64, x, vk);
    assert_int_equal(lm_profile_begin(), LM_OK);
    lm_array *e = lm_unary(LM_OP_EXP, a);   /* no exact f64 exp on the GPU */
    assert_int_equal(lm_array_eval(e), LM_OK);
    lm_profile *p = lm_profile_end();
    unsetenv("LUMEN_FALLBACK");
    assert_non_null(p);
    const lm_profile_row *r = find(p, "exp", "cpu");
    assert_non_null(r);
    char want[64];
    snprintf(want, sizeof want, "fallback from %s", vk->spec);
    assert_string_equal(r->kernel, want);
    assert_string_equal(r->timer, "host");
    /* its input came down and its result went up: 32 bytes each */
    assert_int_equal(find(p, "download", vk->spec)->bytes, 32);
    assert_int_equal(find(p, "upload", vk->spec)->bytes, 32);
    check_sums(p);
    lm_profile_free(p);
    lm_array_release(e);
    lm_array_release(a);
}

/* a pipeline created on first use is a row of its own; the second use has none */
static void test_vulkan_pipeline_rows(void **state)
{
    (void)state;
    for (int round = 0; round < 2; round++) {
        lm_array *a = lm_full(1, (int64_t[]){5}, 4.0, LM_F16, vk);
        assert_int_equal(lm_array_eval(a), LM_OK);
        assert_int_equal(lm_profile_begin(), LM_OK);
        lm_array *r = lm_unary(LM_OP_SQRT, a);   /* used nowhere else in this program */
        assert_int_equal(lm_array_eval(r), LM_OK);
        lm_profile *p = lm_profile_end();
        assert_non_null(p);
        const lm_profile_row *pl = find(p, "pipeline", vk->spec);
        if (round == 0) {
            assert_non_null(pl);
            assert_true(pl->total_ms > 0);
            assert_true(strlen(pl->kernel) > 0);
            /* the node's own host time leaves the creation out */
            const lm_profile_row *sq = find(p, "sqrt", vk->spec);
            assert_non_null(sq);
            assert_true(sq->host_ms < pl->total_ms);
        } else {
            assert_null(pl);
        }
        check_sums(p);
        lm_profile_free(p);
        lm_array_release(r);
        lm_array_release(a);
    }
}

/* An upload to unmapped memory is queued as a recorded copy when no
 * profile is open (backends/vulkan/memory.c); while one is open the copy
 * must be done when the upload returns, or its GPU time would be in no row
 * (the upload row is timed on the host).  Mapped memory (lavapipe as is)
 * never queues an idle device's upload: validate.sh runs this suite again
 * with LUMEN_VK_NO_MAP=1, where the first half shows the copy queued. */
static void test_vulkan_upload_rows_hold_the_copy(void **state)
{
    (void)state;
    int64_t n = 1 << 18;
    float *host = malloc((size_t)n * sizeof *host);
    assert_non_null(host);
    for (int64_t i = 0; i < n; i++) host[i] = (float)(i % 1000) * 0.5f;
    int64_t before = lm_vulkan_recorded_upload_count();
    lm_array *a = lm_from_data(1, &n, LM_F32, host, vk);
    assert_non_null(a);
    int64_t queued = lm_vulkan_recorded_upload_count() - before;
    print_message("  without a profile: %lld upload(s) queued\n", (long long)queued);
    assert_int_equal(lm_profile_begin(), LM_OK);
    before = lm_vulkan_recorded_upload_count();
    lm_array *b = lm_from_data(1, &n, LM_F32, host, vk);
    assert_non_null(b);
    assert_int_equal(lm_vulkan_recorded_upload_count(), before);   /* nothing left queued */
    lm_profile *p = lm_profile_end();
    assert_non_null(p);
    const lm_profile_row *up = find(p, "upload", vk->spec);
    assert_non_null(up);
    assert_int_equal(up->bytes, n * 4);
    assert_int_equal(up->count, 1);
    assert_string_equal(up->timer, "host");
    check_sums(p);
    lm_profile_free(p);
    /* the bytes arrived, both ways */
    float *back = malloc((size_t)n * sizeof *back);
    assert_non_null(back);
    lm_array *both[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        assert_int_equal(lm_array_read(both[k], back, LM_F32), LM_OK);
        assert_memory_equal(back, host, (size_t)n * sizeof *back);
    }
    free(back);
    free(host);
    lm_array_release(a);
    lm_array_release(b);
}

static void test_vulkan_without_timestamps(void **state)
{
    (void)state;
    setenv("LUMEN_VK_NO_TIMESTAMPS", "1", 1);
    assert_int_equal(lm_profile_begin(), LM_OK);
    double v = 0;
    run_chain(vk, &v);
    lm_profile *p = lm_profile_end();
    unsetenv("LUMEN_VK_NO_TIMESTAMPS");
    assert_non_null(p);
    const lm_profile_row *mm = find(p, "matmul", vk->spec), *sub = find(p, "submit", vk->spec);
    assert_non_null(mm);
    assert_string_equal(mm->timer, "none");
    assert_true(mm->total_ms == 0);
    assert_non_null(sub);
    assert_true(sub->total_ms > 0);
    assert_non_null(strstr(p->notes, "cannot time kernels"));
    check_sums(p);
    lm_profile_free(p);
}
#endif

int main(void)
{
    const struct CMUnitTest cpu_tests[] = {
        cmocka_unit_test(test_counts_and_sums_cpu),
        cmocka_unit_test(test_group),
        cmocka_unit_test(test_alloc_rows),
        cmocka_unit_test(test_off_records_nothing),
        cmocka_unit_test(test_nesting),
        cmocka_unit_test(test_fused_names_its_steps),
    };
    int failed = cmocka_run_group_tests_name("profile (cpu)", cpu_tests, NULL, NULL);
#ifdef LM_HAVE_VULKAN
    for (int i = 0; i < lm_device_count(); i++)
        if (!strncmp(lm_device_at(i)->spec, "vulkan", 6)) { vk = lm_device_at(i); break; }
    if (!vk) {
        printf("test_profile: no Vulkan device; its Vulkan tests did not run\n");
        return failed;
    }
    /* LUMEN_VK_VALIDATE=1 runs these under the validation layer: none may complain */
    const struct CMUnitTest vk_tests[] = {
        cmocka_unit_test(test_vulkan_gpu_times),
        cmocka_unit_test(test_vulkan_fallback_row),
        cmocka_unit_test(test_vulkan_pipeline_rows),
        cmocka_unit_test(test_vulkan_without_timestamps),
        cmocka_unit_test(test_vulkan_upload_rows_hold_the_copy),
    };
    failed += cmocka_run_group_tests_name("profile (vulkan)", vk_tests, NULL, NULL);
    if (lm_vulkan_validation_messages()) {
        printf("test_profile: %lld validation messages\n", (long long)lm_vulkan_validation_messages());
        failed++;
    }
#endif
    return failed;
}
