/* test_vulkan_nn_index.c - sort, argsort, topk, scatter and scatter_add on
 * Vulkan against the CPU backend (backends/vulkan/nn_index.c).
 *
 * Every result here is a permutation, a selection or an exact sum, so the
 * comparison is exact for every dtype (threshold 0: floats must agree
 * value for value, NaN at the same places): sort order with ties (values
 * drawn from a few integers), NaN, +-inf and -0; stability shows in the
 * indices.  Rows of 1, 7, 100, 1024, 2048, 2049, 3000 and 5000 elements
 * (past 2048, or 1024 on devices with little shared memory, rows take the
 * multi-pass path: sorted blocks merged), along the first, middle and last
 * axis, on transposed, sliced, reversed and broadcast views.  Every node
 * built on the GPU must be supported there (no silent CPU fallback).
 * Scatter with duplicate and negative indices (last write wins; sums in
 * order), on short fibers and on long ones (sorted by destination),
 * broadcast sources, out-of-range indices (an error from eval),
 * and f64 scatter_add, which runs on the CPU through the fallback. */
#include "testutil.h"
#ifdef LM_HAVE_VULKAN

#include "core/backend.h"
#include "parity/parity.h"

static const lm_dtype all_dts[] = {LM_F32, LM_F16, LM_BF16, LM_F64, LM_I32, LM_I64,
                                   LM_I8, LM_U8, LM_I16, LM_BOOL};
#define NDTS (sizeof all_dts / sizeof *all_dts)

/* values from a few integers, so most of a row ties; floats also get NaN
 * (several, to tie too), +-inf and -0 */
static lm_array *tie_data(int ndim, const int64_t *shape, lm_dtype dt)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    double lo = dt == LM_U8 || dt == LM_BOOL ? 0 : -3, hi = dt == LM_BOOL ? 2 : 4;
    for (int64_t i = 0; i < n; i++) v[i] = floor(lo + (hi - lo) * urand());
    if (lm_dtype_is_float(dt))
        for (int64_t i = 0; i < n; i++) {
            double u = urand();
            if (u < 0.04) v[i] = NAN;
            else if (u < 0.07) v[i] = INFINITY;
            else if (u < 0.10) v[i] = -INFINITY;
            else if (u < 0.15) v[i] = -0.0;
        }
    return from_doubles(ndim, shape, dt, v);
}

/* every GPU node here must run on the GPU (no silent CPU fallback), except
 * f64 sums; checked as the node is built */
static lm_array *on_gpu(lm_array *r)
{
    bool f64_sum = r && r->op == LM_OP_SCATTER_ADD && r->dtype == LM_F64;
    if (r && r->device == vk && !f64_sum && !vk->backend->supports(vk, r)) {
        fprintf(stderr, "PARITY FAIL %s %s: not supported on %s\n", lm_op_name(r->op),
                lm_dtype_name(r->dtype), vk->name);
        failures++;
    }
    return r;
}

/* ---- sort, argsort, topk ---- */
typedef struct { lm_op op; int axis; bool flag; int64_t k; int which; view_kind view; } sctx;

static lm_array *b_sort(lm_array **in, const void *p)
{
    const sctx *c = p;
    lm_array *x = apply_view(in[0], c->view), *r = NULL;
    if (c->op == LM_OP_SORT) r = lm_sort(x, c->axis, c->flag);
    else if (c->op == LM_OP_ARGSORT) r = lm_argsort(x, c->axis, c->flag);
    else if (lm_topk(x, c->k, c->axis, c->flag, c->which ? NULL : &r, c->which ? &r : NULL) != LM_OK) r = NULL;
    lm_array_release(x);
    return on_gpu(r);
}

static void sort_cases(lm_array *x, const char *shape_s, int axis, view_kind view)
{
    char what[128];
    for (int op = 0; op < 2; op++)
        for (int desc = 0; desc < 2; desc++) {
            sctx c = {op ? LM_OP_ARGSORT : LM_OP_SORT, axis, desc, 0, 0, view};
            snprintf(what, sizeof what, "%s%s %s%s axis %d%s", lm_op_name(c.op), desc ? " desc" : "",
                     lm_dtype_name(x->dtype), shape_s, axis, view_name[view]);
            run_case(what, 1, &x, b_sort, &c, 0);
        }
}

static lm_array *b_sort_bcast(lm_array **in, const void *p)
{
    const sctx *c = p;
    int64_t shape[3] = {4, in[0]->shape[0], in[0]->shape[1]};
    lm_array *b = lm_broadcast_to(in[0], 3, shape);
    lm_array *r = c->op == LM_OP_SORT ? lm_sort(b, c->axis, c->flag) : lm_argsort(b, c->axis, c->flag);
    lm_array_release(b);
    return on_gpu(r);
}

/* a broadcast input (stride 0 on the new axis); empty results */
static void test_sort_odd_inputs(void **state)
{
    (void)state;
    int64_t shape[2] = {3, 9};
    lm_array *x = tie_data(2, shape, LM_F32);
    for (int axis = 0; axis < 3; axis++) {
        sctx c = {axis == 1 ? LM_OP_ARGSORT : LM_OP_SORT, axis, axis == 2, 0, 0, V_NONE};
        char what[96];
        snprintf(what, sizeof what, "%s f32 broadcast [4,3,9] axis %d", lm_op_name(c.op), axis);
        run_case(what, 1, &x, b_sort_bcast, &c, 0);
    }
    lm_array_release(x);
    int64_t eshape[2] = {3, 0};
    lm_array *e = tie_data(2, eshape, LM_F32);
    sctx c0 = {LM_OP_SORT, 1, false, 0, 0, V_NONE}, c1 = {LM_OP_TOPK, 0, true, 0, 1, V_NONE};
    run_case("sort f32 [3,0]", 1, &e, b_sort, &c0, 0);
    run_case("topk k=0 f32 [3,0] axis 0", 1, &e, b_sort, &c1, 0);
    lm_array_release(e);
}

/* every dtype along every axis of a [5, 7, 6] tensor, and each view */
static void test_sort_axes(void **state)
{
    (void)state;
    int64_t shape[3] = {5, 7, 6};
    for (size_t t = 0; t < NDTS; t++) {
        lm_array *x = tie_data(3, shape, all_dts[t]);
        for (int axis = 0; axis < 3; axis++) sort_cases(x, "[5,7,6]", axis, V_NONE);
        for (int v = V_T; v <= V_NEG; v++) sort_cases(x, "[5,7,6]", (int)(t + (size_t)v) % 3, (view_kind)v);
        lm_array_release(x);
    }
}

/* rows of 1, 7, 100, 1024 and 5000 elements along the last and first axis */
static void test_sort_lengths(void **state)
{
    (void)state;
    const int64_t lens[] = {1, 7, 100, 1024, 5000};
    const lm_dtype dts[] = {LM_F32, LM_F16, LM_BF16, LM_I32, LM_I64, LM_F64, LM_U8};
    for (size_t l = 0; l < sizeof lens / sizeof *lens; l++)
        for (size_t t = 0; t < sizeof dts / sizeof *dts; t++) {
            if (lens[l] >= 1024 && t % 2 && t != 5) continue;   /* long rows: four dtypes */
            int64_t rows = lens[l] >= 1024 ? 2 : 3, shape[2] = {rows, lens[l]};
            char s[48];
            snprintf(s, sizeof s, "[%lld,%lld]", (long long)rows, (long long)lens[l]);
            lm_array *x = tie_data(2, shape, dts[t]);
            sort_cases(x, s, 1, V_NONE);
            if (lens[l] == 5000 || lens[l] == 100) sort_cases(x, s, 0, V_T);
            lm_array_release(x);
        }
    /* both sides of the one-workgroup limit (2048 on lavapipe), i16 keys */
    const int64_t edges[] = {2048, 2049};
    for (int e = 0; e < 2; e++) {
        int64_t shape2[2] = {2, edges[e]};
        char s[48];
        snprintf(s, sizeof s, "[2,%lld]", (long long)edges[e]);
        lm_array *x = tie_data(2, shape2, e ? LM_I16 : LM_BF16);
        sort_cases(x, s, 1, V_NONE);
        lm_array_release(x);
    }
    /* distinct values (a random permutation of many), long rows merged */
    int64_t shape[2] = {3, 3000};
    lm_array *x = data(2, shape, LM_F32, -1000, 1000, SPECIALS);
    sort_cases(x, "[3,3000] distinct", 1, V_NONE);
    lm_array_release(x);
}

static void topk_cases(lm_array *x, const char *shape_s, int axis, view_kind view)
{
    lm_array *xv = apply_view(x, view);
    int64_t n = xv->shape[axis];
    lm_array_release(xv);
    const int64_t ks[] = {1, 5, n};
    char what[128];
    for (size_t i = 0; i < 3; i++)
        for (int largest = 0; largest < 2; largest++)
            for (int which = 0; which < 2; which++) {
                if (ks[i] > n) continue;
                sctx c = {LM_OP_TOPK, axis, largest, ks[i], which, view};
                snprintf(what, sizeof what, "topk k=%lld %s %s %s%s axis %d%s", (long long)ks[i],
                         largest ? "largest" : "smallest", which ? "indices" : "values",
                         lm_dtype_name(x->dtype), shape_s, axis, view_name[view]);
                run_case(what, 1, &x, b_sort, &c, 0);
            }
}

static void test_topk(void **state)
{
    (void)state;
    int64_t shape[3] = {4, 9, 5};
    const lm_dtype dts[] = {LM_F32, LM_F16, LM_BF16, LM_I32, LM_I64, LM_I8};
    for (size_t t = 0; t < sizeof dts / sizeof *dts; t++) {
        lm_array *x = tie_data(3, shape, dts[t]);
        topk_cases(x, "[4,9,5]", (int)t % 3, V_NONE);
        if (t < 2) topk_cases(x, "[4,9,5]", 0, V_T);
        lm_array_release(x);
    }
    int64_t lshape[2] = {2, 5000};
    lm_array *x = tie_data(2, lshape, LM_F32);
    topk_cases(x, "[2,5000]", 1, V_NONE);
    lm_array_release(x);
}

/* ---- scatter, scatter_add ---- */
typedef struct { lm_op op; int axis; } scctx;

static lm_array *b_scatter(lm_array **in, const void *p)
{
    const scctx *c = p;
    return on_gpu(c->op == LM_OP_SCATTER ? lm_scatter(in[0], c->axis, in[1], in[2])
                                         : lm_scatter_add(in[0], c->axis, in[1], in[2]));
}

/* a [6,9,5] target; idx smaller on the other axes and long on the axis
 * (many duplicates, negative indices); src larger than idx, so its view
 * is not contiguous */
static void scatter_cases(lm_dtype dt, int axis)
{
    int64_t ash[3] = {6, 9, 5}, ish[3] = {4, 7, 3}, ssh[3] = {5, 8, 4};
    ish[axis] = 2 * ash[axis];
    ssh[axis] = ish[axis] + 1;
    lm_array *in[3];
    in[0] = data(3, ash, dt, -50, 50, 0);
    in[1] = data(3, ish, LM_I64, (double)-ash[axis], (double)ash[axis], 0);
    in[2] = lm_dtype_is_float(dt) ? data(3, ssh, dt, -4, 4, SPECIALS) : data(3, ssh, dt, -100, 100, 0);
    for (int op = 0; op < 2; op++) {
        scctx c = {op ? LM_OP_SCATTER_ADD : LM_OP_SCATTER, axis};
        char what[96];
        snprintf(what, sizeof what, "%s %s axis %d", lm_op_name(c.op), lm_dtype_name(dt), axis);
        run_case(what, 3, in, b_scatter, &c, 0);
    }
    for (int k = 0; k < 3; k++) lm_array_release(in[k]);
}

static void test_scatter(void **state)
{
    (void)state;
    for (size_t t = 0; t < NDTS; t++) scatter_cases(all_dts[t], (int)t % 3);   /* f64 sums: CPU */
    scatter_cases(LM_F32, 0);
    scatter_cases(LM_F32, 2);
    scatter_cases(LM_I32, 1);
    /* a scalar source (broadcast, stride 0) and a transposed index */
    int64_t ash[2] = {5, 6}, ish[2] = {6, 4};
    lm_array *a = data(2, ash, LM_F32, -1, 1, 0), *ix = data(2, ish, LM_I64, 0, 5, 0);
    lm_array *in[3] = {a, NULL, NULL};
    for (int k = 0; k < 2; k++) {
        lm_device *d = k ? vk : cpu;
        lm_array *ad = lm_array_to(a, d), *id = lm_array_to(ix, d);
        lm_array *it = lm_transpose(id, 0, 1);                 /* [4,6] */
        lm_array *s = lm_full(0, NULL, 2.5, LM_F32, d);
        in[1 + k] = on_gpu(lm_scatter_add(ad, 0, it, s));
        lm_array_release(ad); lm_array_release(id); lm_array_release(it); lm_array_release(s);
    }
    if (!skip_case()) compare("scatter_add scalar src, transposed index", in[1], in[2], 0);
    lm_array_release(in[1]); lm_array_release(in[2]);
    lm_array_release(a); lm_array_release(ix);
}

/* fibers of 256 positions or more take the sorted path: 1-D, and along
 * the last and first axis, with heavy duplication and negative indices */
static void test_scatter_long(void **state)
{
    (void)state;
    const struct { int nd, axis; int64_t ash[2], ish[2]; lm_dtype dt; } cs[] = {
        {1, 0, {50}, {3000}, LM_F32}, {2, 1, {3, 40}, {3, 700}, LM_F16}, {2, 0, {30, 5}, {600, 4}, LM_BF16},
        {2, 1, {4, 300}, {4, 2500}, LM_I32}, {1, 0, {7}, {256}, LM_I64}, {2, 1, {2, 9}, {2, 255}, LM_F32},
    };
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
        int64_t len = cs[i].ash[cs[i].axis];
        lm_array *in[3] = {data(cs[i].nd, cs[i].ash, cs[i].dt, -50, 50, 0),
                           data(cs[i].nd, cs[i].ish, LM_I64, (double)-len, (double)len, 0),
                           data(cs[i].nd, cs[i].ish, cs[i].dt, -4, 4, 0)};
        for (int op = 0; op < 2; op++) {
            scctx c = {op ? LM_OP_SCATTER_ADD : LM_OP_SCATTER, cs[i].axis};
            char what[96];
            snprintf(what, sizeof what, "%s %s long fibers of %lld, axis %d", lm_op_name(c.op),
                     lm_dtype_name(cs[i].dt), (long long)cs[i].ish[cs[i].axis], cs[i].axis);
            run_case(what, 3, in, b_scatter, &c, 0);
        }
        for (int k = 0; k < 3; k++) lm_array_release(in[k]);
    }
}

/* an index past the axis fails evaluation with an error naming the op */
static void test_scatter_out_of_range(void **state)
{
    (void)state;
    int64_t ash[2] = {3, 4}, ish[2] = {2, 4};
    int64_t bad[8] = {0, 1, 2, 3, 1, 7, 0, 0};
    lm_array *a = lm_zeros(2, ash, LM_F32, vk), *ix = lm_from_data(2, ish, LM_I64, bad, vk);
    lm_array *s = lm_full(0, NULL, 1.0, LM_F32, vk);
    lm_array *r = lm_scatter(a, 0, ix, s);
    assert_non_null(r);
    assert_int_equal(lm_array_eval(r), LM_ERR_ARG);
    assert_non_null(strstr(lm_error_message(), "scatter"));
    assert_non_null(strstr(lm_error_message(), "out of range"));
    lm_array_release(r);
    lm_array_release(a); lm_array_release(ix); lm_array_release(s);
    /* the same on the sorted path (a fiber of 300) */
    int64_t n = 300, m = 10;
    int64_t *id = malloc(sizeof(int64_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) id[i] = i % 10 - 5;
    id[123] = -11;
    a = lm_zeros(1, &m, LM_F32, vk);
    ix = lm_from_data(1, &n, LM_I64, id, vk);
    s = lm_full(0, NULL, 1.0, LM_F32, vk);
    r = lm_scatter_add(a, 0, ix, s);
    assert_int_equal(lm_array_eval(r), LM_ERR_ARG);
    assert_non_null(strstr(lm_error_message(), "index -11 out of range"));
    lm_array_release(r);
    lm_array_release(a); lm_array_release(ix); lm_array_release(s);
    free(id);
}

/* f64 sums take double arithmetic: the node runs on the CPU (one fallback)
 * and the result, back on the GPU, is the CPU's */
static void test_f64_fallback(void **state)
{
    (void)state;
    int64_t ash[2] = {4, 6}, ish[2] = {8, 6};
    lm_array *a = data(2, ash, LM_F64, -1, 1, 0), *ix = data(2, ish, LM_I64, -4, 4, 0);
    lm_array *s = data(2, ish, LM_F64, -1, 1, 0);
    lm_array *rc = lm_scatter_add(a, 0, ix, s);
    lm_array *ag = lm_array_to(a, vk), *ig = lm_array_to(ix, vk), *sg = lm_array_to(s, vk);
    assert_int_equal(lm_array_eval(ag), LM_OK);
    assert_int_equal(lm_array_eval(ig), LM_OK);
    assert_int_equal(lm_array_eval(sg), LM_OK);
    lm_array *rg = lm_scatter_add(ag, 0, ig, sg);
    assert_int_equal(lm_array_eval(rg), LM_OK);
    assert_int_equal(lm_eval_last_stats().fallbacks, 1);
    assert_ptr_equal(rg->device, vk);
    compare("scatter_add f64 (CPU fallback)", rc, rg, 0);
    lm_array *objs[] = {a, ix, s, rc, ag, ig, sg, rg};
    for (size_t k = 0; k < sizeof objs / sizeof *objs; k++) lm_array_release(objs[k]);
}

#define VK_TEST(f) cmocka_unit_test(f)

int main(void)
{
    parity_setup(NULL);
    if (!vk) {
        printf("test_vulkan_nn_index: no Vulkan device (%s); skipped\n", lm_vulkan_status());
        return LM_TEST_SKIP;
    }
    const struct CMUnitTest tests[] = {
        VK_TEST(test_sort_axes), VK_TEST(test_sort_lengths), VK_TEST(test_sort_odd_inputs), VK_TEST(test_topk), VK_TEST(test_scatter), VK_TEST(test_scatter_long),
        VK_TEST(test_scatter_out_of_range), VK_TEST(test_f64_fallback), VK_TEST(test_summary),
    };
    return PARITY_RUN(tests);
}

#else
int main(void)
{
    printf("test_vulkan_nn_index: built without Vulkan; skipped\n");
    return LM_TEST_SKIP;
}
#endif
