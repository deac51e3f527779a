/* test_concat_inplace.c - producers writing straight into their concat's
 * output (core/eval.c): on the CPU and on the Vulkan device (lavapipe here),
 * every graph gives the same bytes as with LUMEN_CONCAT_INPLACE=0 (the
 * copying path), and lm_eval_last_stats().placed says where the producers
 * wrote in place: a dense block's chain of concats, a kept input and an
 * output (copied), an input used twice, one read again after the concat's
 * last consumer (a long skip: copied), a part that is not one block (a
 * non-leading axis, batch 2) or not aligned, f16, a gradient, a compiled
 * function, an input moved from the CPU (Vulkan: the transfer writes in
 * place), and a failing evaluation (the concat stays pending). */
#include "testutil.h"
#include "core/compile.h"
#include "core/grad.h"
#include "core/random.h"
#ifdef LM_HAVE_VULKAN
#include "backends/vulkan/vulkan.h"
#endif

static lm_device *dev;       /* the device of the running group */
static size_t active0;       /* its active bytes when the group began */

static lm_array *rnd(int ndim, const int64_t *shape, lm_dtype dt, uint64_t seed)
{
    lm_array *r = lm_random_normal(ndim, shape, 0, 0.5, dt, lm_random_key(seed), dev);
    assert_non_null(r);
    assert_int_equal(lm_array_eval(r), LM_OK);
    return r;
}

static void *bytes_of(lm_array *a)
{
    void *p = malloc(lm_array_nbytes(a) + 1);
    lm_status st = lm_array_read(a, p, a->dtype);
    if (st != LM_OK) fprintf(stderr, "read: %s\n", lm_error_message());
    assert_int_equal(st, LM_OK);
    return p;
}

/* A graph under test: builds its outputs (at most 4) from the arrays in
 * ctx, which it does not consume.  Returns how many. */
typedef int (*build_fn)(void *ctx, lm_array **outs);

/* Builds and evaluates the graph with placement on and off; asserts equal
 * bytes in every output; returns the placements of the run with it on. */
static int64_t both_ways(build_fn build, void *ctx)
{
    lm_array *on[4] = {0}, *off[4] = {0};
    unsetenv("LUMEN_CONCAT_INPLACE");
    int n = build(ctx, on);
    lm_status st = lm_eval(on, n);
    if (st != LM_OK) fprintf(stderr, "eval: %s\n", lm_error_message());
    assert_int_equal(st, LM_OK);
    int64_t placed = lm_eval_last_stats().placed;
    setenv("LUMEN_CONCAT_INPLACE", "0", 1);
    assert_int_equal(build(ctx, off), n);
    assert_int_equal(lm_eval(off, n), LM_OK);
    assert_int_equal(lm_eval_last_stats().placed, 0);
    unsetenv("LUMEN_CONCAT_INPLACE");
    for (int i = 0; i < n; i++) {
        assert_int_equal(on[i]->size, off[i]->size);
        void *a = bytes_of(on[i]), *b = bytes_of(off[i]);
        assert_memory_equal(a, b, lm_array_nbytes(on[i]));
        free(a);
        free(b);
        lm_array_release(on[i]);
        lm_array_release(off[i]);
    }
    return placed;
}

/* ---- an ESRGAN dense block: five 3x3 convs, each fed the concat of the
 * block's input and every conv before it, a 1x1 conv and the residual ---- */
typedef struct { lm_array *x, *w[5], *b[5], *lff; } block_ctx;

static void block_make(block_ctx *c, int64_t batch, int64_t ch, int64_t hw, lm_dtype dt)
{
    int64_t xs[4] = {batch, ch, hw, hw};
    c->x = rnd(4, xs, dt, 1);
    for (int k = 0; k < 5; k++) {
        int64_t ws[4] = {ch, ch * (k + 1), 3, 3}, bs[1] = {ch};
        c->w[k] = rnd(4, ws, dt, 10 + (uint64_t)k);
        c->b[k] = rnd(1, bs, dt, 20 + (uint64_t)k);
    }
    int64_t ls[4] = {ch, ch * 6, 1, 1};
    c->lff = rnd(4, ls, dt, 30);
}

static void block_free(block_ctx *c)
{
    lm_array_release(c->x);
    lm_array_release(c->lff);
    for (int k = 0; k < 5; k++) {
        lm_array_release(c->w[k]);
        lm_array_release(c->b[k]);
    }
}

static int block_build(void *p, lm_array **outs)
{
    block_ctx *c = p;
    const int64_t one[2] = {1, 1}, pad1[4] = {1, 1, 1, 1}, pad0[4] = {0, 0, 0, 0};
    lm_array *cur = lm_array_retain(c->x);
    for (int k = 0; k < 5; k++) {
        lm_array *y = lm_conv2d(cur, c->w[k], c->b[k], one, pad1, one, 1);
        lm_array *r = lm_unary(LM_OP_RELU, y);
        lm_array *cat = lm_concat(2, (lm_array *[]){cur, r}, 1);
        lm_array_release(y);
        lm_array_release(r);
        lm_array_release(cur);
        cur = cat;
    }
    lm_array *l = lm_conv2d(cur, c->lff, NULL, one, pad0, one, 1);
    lm_array *s = lm_binary_scalar(LM_OP_MUL, l, 0.2, false);
    outs[0] = lm_binary(LM_OP_ADD, c->x, s);
    assert_non_null(outs[0]);
    lm_array_release(cur);
    lm_array_release(l);
    lm_array_release(s);
    return 1;
}

static void dense_block(lm_dtype dt, int64_t batch, int64_t expect)
{
    block_ctx c;
    block_make(&c, batch, 8, 8, dt);
    /* batch 1: the five relus and the first four concats go into the last
     * concat (the block's input is a leaf: copied); batch 2: none */
    assert_int_equal(both_ways(block_build, &c), expect);
    block_free(&c);
}

static void test_dense_block(void **state) { (void)state; dense_block(LM_F32, 1, 9); }
static void test_dense_block_f16(void **state) { (void)state; dense_block(LM_F16, 1, 9); }
static void test_dense_block_batch2(void **state) { (void)state; dense_block(LM_F32, 2, 0); }

/* ---- small graphs over two vectors ---- */
typedef struct { lm_array *a, *b; int64_t n; } vec_ctx;

static vec_ctx vec_make(int64_t n)
{
    vec_ctx c = {rnd(1, &n, LM_F32, 1), rnd(1, &n, LM_F32, 2), n};
    return c;
}

static void vec_free(vec_ctx *c)
{
    lm_array_release(c->a);
    lm_array_release(c->b);
}

static lm_array *cat2(lm_array *x, lm_array *y, int axis)
{
    lm_array *r = lm_concat(2, (lm_array *[]){x, y}, axis);
    assert_non_null(r);
    lm_array_release(x);
    lm_array_release(y);
    return r;
}

/* a kept input keeps a buffer of its own (copied); the other is placed */
static lm_array *kept_in;
static int kept_build(void *p, lm_array **outs)
{
    vec_ctx *c = p;
    kept_in = lm_unary(LM_OP_EXP, c->a);
    lm_array_keep(kept_in);
    outs[0] = cat2(lm_array_retain(kept_in), lm_unary(LM_OP_SIN, c->b), 0);
    return 1;
}

static void test_kept_input_copied(void **state)
{
    (void)state;
    vec_ctx c = vec_make(16);
    /* on, then off: each run's kept input is checked before the next */
    lm_array *outs[1];
    kept_build(&c, outs);
    assert_int_equal(lm_array_eval(outs[0]), LM_OK);
    assert_int_equal(lm_eval_last_stats().placed, 1);
    assert_non_null(kept_in->buf);
    assert_null(kept_in->buf->parent);
    double *e = tu_read(kept_in), *a = tu_read(c.a), *r = tu_read(outs[0]);
    for (int i = 0; i < 16; i++) {
        assert_true(e[i] == r[i]);
        assert_true(fabs(e[i] - exp(a[i])) <= 1e-5 * exp(a[i]));
    }
    free(e);
    free(a);
    free(r);
    lm_array_release(outs[0]);
    lm_array_unkeep(kept_in);
    lm_array_release(kept_in);
    vec_free(&c);
}

/* an input that is also an output of the evaluation keeps its own buffer */
static int output_build(void *p, lm_array **outs)
{
    vec_ctx *c = p;
    outs[1] = lm_unary(LM_OP_EXP, c->a);
    outs[0] = cat2(lm_array_retain(outs[1]), lm_unary(LM_OP_SIN, c->b), 0);
    return 2;
}

static void test_output_input_copied(void **state)
{
    (void)state;
    vec_ctx c = vec_make(16);
    assert_int_equal(both_ways(output_build, &c), 1);
    vec_free(&c);
}

/* one input twice: placed in its first part, copied into the second */
static int twice_build(void *p, lm_array **outs)
{
    vec_ctx *c = p;
    lm_array *y = lm_unary(LM_OP_EXP, c->a);
    outs[0] = cat2(lm_array_retain(y), y, 0);
    return 1;
}

/* placed, and read by another consumer too */
static int shared_build(void *p, lm_array **outs)
{
    vec_ctx *c = p;
    lm_array *y = lm_unary(LM_OP_EXP, c->a);
    outs[1] = lm_binary_scalar(LM_OP_MUL, y, 2, false);
    outs[0] = cat2(y, lm_unary(LM_OP_SIN, c->b), 0);
    return 2;
}

static void test_input_used_twice(void **state)
{
    (void)state;
    vec_ctx c = vec_make(16);
    assert_int_equal(both_ways(twice_build, &c), 1);
    assert_int_equal(both_ways(shared_build, &c), 2);
    vec_free(&c);
}

/* x read again after the concat's last consumer (a long skip): placed, it
 * would hold the concat's whole buffer that long, so it is copied; with
 * the concat itself an output (alive anyway) it is placed */
static int skip_build_n(void *p, lm_array **outs, bool hold)
{
    vec_ctx *c = p;
    lm_array *x = lm_unary(LM_OP_EXP, c->a);
    lm_array *cat = cat2(lm_array_retain(x), lm_unary(LM_OP_SIN, c->b), 0);
    lm_array *twice = lm_binary_scalar(LM_OP_MUL, cat, 2, false);
    lm_array *half = lm_slice(twice, 0, 0, c->n, 1);
    outs[0] = lm_binary(LM_OP_ADD, half, x);
    lm_array_release(x);
    lm_array_release(twice);
    lm_array_release(half);
    if (hold) outs[1] = cat;
    else lm_array_release(cat);
    return hold ? 2 : 1;
}
static int skip_build(void *p, lm_array **outs) { return skip_build_n(p, outs, false); }
static int skip_held_build(void *p, lm_array **outs) { return skip_build_n(p, outs, true); }

static void test_long_skip_copied(void **state)
{
    (void)state;
    vec_ctx c = vec_make(16);
    assert_int_equal(both_ways(skip_build, &c), 1);
    assert_int_equal(both_ways(skip_held_build, &c), 2);
    vec_free(&c);
}

/* concat along a non-leading axis: no part is one block */
static int axis_build(void *p, lm_array **outs)
{
    vec_ctx *c = p;
    int64_t s[3] = {1, 4, 4};
    lm_array *x = lm_reshape(c->a, 3, s), *y = lm_reshape(c->b, 3, s);
    outs[0] = cat2(lm_unary(LM_OP_EXP, x), lm_unary(LM_OP_SIN, y), 2);
    lm_array_release(x);
    lm_array_release(y);
    return 1;
}

static void test_non_leading_axis_copies(void **state)
{
    (void)state;
    vec_ctx c = vec_make(16);
    assert_int_equal(both_ways(axis_build, &c), 0);
    vec_free(&c);
}

/* three floats, then five: the second part starts 12 bytes in, which no
 * backend accepts as a window (the CPU wants 64, Vulkan 16) */
static int misaligned_build(void *p, lm_array **outs)
{
    vec_ctx *c = p;
    lm_array *x = lm_slice(c->a, 0, 0, 3, 1), *y = lm_slice(c->b, 0, 0, 5, 1);
    outs[0] = cat2(lm_unary(LM_OP_EXP, x), lm_unary(LM_OP_SIN, y), 0);
    lm_array_release(x);
    lm_array_release(y);
    return 1;
}

static void test_misaligned_part_copies(void **state)
{
    (void)state;
    vec_ctx c = vec_make(16);
    assert_int_equal(both_ways(misaligned_build, &c), 1);
    vec_free(&c);
}

/* the gradient of sum(cat(exp(x), x*x)^2) */
static int grad_build(void *p, lm_array **outs)
{
    vec_ctx *c = p;
    lm_array *x = lm_grad_leaf(c->a);
    lm_array *h = cat2(lm_unary(LM_OP_EXP, x), lm_binary(LM_OP_MUL, x, x), 0);
    lm_array *sq = lm_binary(LM_OP_MUL, h, h);
    lm_array *l = lm_reduce(LM_OP_SUM, sq, 0, NULL, false);
    lm_array *one = lm_full(0, NULL, 1, LM_F32, dev);
    assert_int_equal(lm_vjp(1, &l, &one, 1, &x, &outs[0]), LM_OK);
    outs[1] = l;
    lm_array *arr[] = {x, h, sq, one};
    for (int i = 0; i < 4; i++) lm_array_release(arr[i]);
    return 2;
}

static void test_grad_through_concat(void **state)
{
    (void)state;
    vec_ctx c = vec_make(16);
    assert_true(both_ways(grad_build, &c) >= 1);
    /* and the gradient is right: 2 e^2x + 4 x^3 */
    lm_array *outs[2];
    grad_build(&c, outs);
    double *g = tu_read(outs[0]), *a = tu_read(c.a);
    for (int i = 0; i < 16; i++) {
        double want = 2 * exp(2 * a[i]) + 4 * a[i] * a[i] * a[i];
        assert_true(fabs(g[i] - want) <= 1e-4 * (1 + fabs(want)));
    }
    free(g);
    free(a);
    lm_array_release(outs[0]);
    lm_array_release(outs[1]);
    vec_free(&c);
}

/* a compiled function whose fused chains feed a concat */
static lm_compiled *compiled;
static int compiled_build(void *p, lm_array **outs)
{
    vec_ctx *c = p;
    assert_int_equal(lm_compiled_call(compiled, 2, (lm_array *[]){c->a, c->b}, outs), 1);
    return 1;
}

static void test_compiled_concat(void **state)
{
    (void)state;
    vec_ctx c = vec_make(64);
    lm_array *pa = lm_placeholder(1, &c.n, LM_F32, dev), *pb = lm_placeholder(1, &c.n, LM_F32, dev);
    lm_array *t1 = lm_binary_scalar(LM_OP_MUL, pa, 3, false);
    lm_array *t2 = lm_unary(LM_OP_TANH, t1);
    lm_array *u = lm_binary(LM_OP_ADD, pb, pa);
    lm_array *out = cat2(t2, lm_unary(LM_OP_EXP, u), 0);
    compiled = lm_compile_graph(2, (lm_array *[]){pa, pb}, 1, &out, LM_COMPILE_ON);
    assert_non_null(compiled);
    assert_int_equal(both_ways(compiled_build, &c), 2);
    lm_compiled_free(compiled);
    lm_array *arr[] = {pa, pb, t1, u, out};
    for (int i = 0; i < 5; i++) lm_array_release(arr[i]);
    vec_free(&c);
}

/* an evaluation failing after a producer wrote into the concat's buffer
 * leaves the concat pending and frees what it made (CPU: the index error
 * surfaces at once) */
static void test_failure_leaves_concat_pending(void **state)
{
    (void)state;
    vec_ctx c = vec_make(16);
    int64_t bad[16], n = 16;
    for (int i = 0; i < 16; i++) bad[i] = i == 7 ? 99 : i;
    lm_array *idx = lm_from_data(1, &n, LM_I64, bad, dev);
    lm_array *cat = cat2(lm_unary(LM_OP_EXP, c.a), lm_take_along_axis(c.b, idx, 0), 0);
    assert_int_not_equal(lm_array_eval(cat), LM_OK);
    assert_false(lm_array_is_evaluated(cat));
    assert_int_not_equal(lm_array_eval(cat), LM_OK);
    lm_array_release(cat);
    lm_array_release(idx);
    vec_free(&c);
}

#ifdef LM_HAVE_VULKAN
/* an input computed on the CPU and moved to the device: the transfer
 * writes into the concat's buffer on the device (a Vulkan build only: on
 * the CPU there is no move to make) */
static int moved_build(void *p, lm_array **outs)
{
    vec_ctx *c = p;
    lm_array *ac = lm_array_to(c->a, lm_device_cpu());
    lm_array *e = lm_unary(LM_OP_EXP, ac);
    outs[0] = cat2(lm_array_to(e, dev), lm_unary(LM_OP_SIN, c->b), 0);
    lm_array_release(ac);
    lm_array_release(e);
    return 1;
}

static void test_moved_input_placed(void **state)
{
    (void)state;
    vec_ctx c = vec_make(64);
    assert_int_equal(both_ways(moved_build, &c), 2);
    vec_free(&c);
}
#endif

static int group_setup(lm_device *d)
{
    dev = d;
    lm_device_set_default(d);
    active0 = lm_device_memory(d).active;
    return 0;
}

/* nothing left alive: no array, and no buffer a window held */
static int group_teardown(void **state)
{
    (void)state;
    unsetenv("LUMEN_CONCAT_INPLACE");
    if (lm_array_live_count() != 0) {
        printf("test_concat_inplace: %lld arrays left alive\n", (long long)lm_array_live_count());
        return -1;
    }
    if (lm_device_memory(dev).active != active0) {
        printf("test_concat_inplace: %zu bytes active on %s, %zu before\n",
               lm_device_memory(dev).active, dev->spec, active0);
        return -1;
    }
    return 0;
}

static int cpu_setup(void **state)
{
    (void)state;
    return group_setup(lm_device_cpu());
}

#ifdef LM_HAVE_VULKAN
static lm_device *vk;
static int vk_setup(void **state)
{
    (void)state;
    return group_setup(vk);
}
#endif

#define BOTH_TESTS \
    cmocka_unit_test(test_dense_block), \
    cmocka_unit_test(test_dense_block_f16), \
    cmocka_unit_test(test_dense_block_batch2), \
    cmocka_unit_test(test_kept_input_copied), \
    cmocka_unit_test(test_output_input_copied), \
    cmocka_unit_test(test_input_used_twice), \
    cmocka_unit_test(test_long_skip_copied), \
    cmocka_unit_test(test_non_leading_axis_copies), \
    cmocka_unit_test(test_misaligned_part_copies), \
    cmocka_unit_test(test_grad_through_concat), \
    cmocka_unit_test(test_compiled_concat)

int main(void)
{
#ifdef LM_HAVE_VULKAN
    setenv("LUMEN_DEVICE", "vulkan", 1);   /* lavapipe is registered only when asked */
#endif
    if (lm_init() != LM_OK) return 1;
    const struct CMUnitTest cpu_tests[] = {
        BOTH_TESTS,
        cmocka_unit_test(test_failure_leaves_concat_pending),
    };
    int r = cmocka_run_group_tests_name("cpu", cpu_tests, cpu_setup, group_teardown);
#ifdef LM_HAVE_VULKAN
    for (int i = 0; i < lm_device_count() && !vk; i++)
        if (!strncmp(lm_device_at(i)->spec, "vulkan", 6)) vk = lm_device_at(i);
    if (!vk) {
        printf("test_concat_inplace: no Vulkan device (%s); its group not run\n", lm_vulkan_status());
        return r ? r : LM_TEST_SKIP;
    }
    const struct CMUnitTest vk_tests[] = {BOTH_TESTS, cmocka_unit_test(test_moved_input_placed)};
    r |= cmocka_run_group_tests_name("vulkan", vk_tests, vk_setup, group_teardown);
    if (lm_vulkan_validation_messages() != 0) {
        printf("test_concat_inplace: %lld validation messages\n", (long long)lm_vulkan_validation_messages());
        r |= 1;
    }
#endif
    return r;
}
