/* test_vk_replay.c - compiled calls replayed from recorded command buffers
 * (core/replay.c, backends/vulkan/replay.c).
 *
 * A small convolutional net of two outputs (convs, relu, a concat, a fused
 * chain, a reduction) is compiled on Vulkan placeholders and called again
 * and again with new inputs: the first call runs the ordinary way, the
 * second records, the later ones replay.  Every result is compared bit for
 * bit with the same net uncompiled on Vulkan and on the CPU (the values are
 * small integers, so every summation order gives the same f32 bits), and in
 * f16 with random values against the compiled function with replay switched
 * off (LUMEN_VK_REPLAY=0: the same kernels, so the same bits).  Then: new
 * shapes record again and the old ones still replay; two functions
 * interleaved; a GEMV with split-K (a scratch buffer) replayed; the memory a recording holds is counted and comes back when
 * the function is freed; replayed calls queued by lm_eval_async back to
 * back; a constant written in place; lm_sweep; calls that are not
 * recorded (an index-checking gather, an output that is a view, inputs too
 * large for their kernels, a profile open, replay off) run the ordinary way.  Under
 * LUMEN_VK_VALIDATE=1, no validation message.
 * The device: LUMEN_DEVICE when it names a Vulkan device, else the first
 * Vulkan device (lavapipe in CI); skipped when there is none. */
#include "testutil.h"
#ifdef LM_HAVE_VULKAN
#include "backends/vulkan/vulkan.h"
#include "core/compile.h"
#include "core/ops_nn.h"
#include "core/profile.h"
#include "core/random.h"
#include "core/replay.h"

static lm_device *vk, *cpu;

/* LUMEN_VK_REPLAY=0 (on = false) or unset, with the device idle first:
 * setenv while lavapipe's queue thread compiles a shader (its getenv) is a
 * data race, and under ASan it crashed that thread inside getenv, whose
 * exit then waited on the same queue for ever */
static void replay_env(bool on)
{
    if (vk) assert_int_equal(lm_device_sync(vk), LM_OK);
    if (on) unsetenv("LUMEN_VK_REPLAY");
    else setenv("LUMEN_VK_REPLAY", "0", 1);
}

/* the net's weights on one device */
typedef struct weights { lm_array *w1, *b1, *w2, *w3, *b3; } weights;

static uint64_t rng = 0x2545f4914f6cdd1dull;
static int irand(int lo, int hi)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return lo + (int)((rng >> 11) % (uint64_t)(hi - lo + 1));
}

/* integers in [lo, hi] (exact: every sum below stays far under 2^24) */
static lm_array *ints(int ndim, const int64_t *shape, int lo, int hi, lm_dtype dt, lm_device *d)
{
    int64_t n = 1;
    for (int k = 0; k < ndim; k++) n *= shape[k];
    float *v = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) v[i] = (float)irand(lo, hi);
    lm_array *a = lm_from_data(ndim, shape, LM_F32, v, d);
    free(v);
    lm_array *c = dt == LM_F32 ? lm_array_retain(a) : lm_cast(a, dt);
    lm_array_release(a);
    assert_int_equal(lm_array_eval(c), LM_OK);
    return c;
}

static lm_array *moved(lm_array *a, lm_device *d)
{
    lm_array *m = lm_array_to(a, d);
    assert_int_equal(lm_array_eval(m), LM_OK);
    return m;
}

static weights make_weights(int ch, lm_dtype dt, lm_device *d)
{
    weights w;
    w.w1 = ints(4, (int64_t[]){8, ch, 3, 3}, -1, 1, dt, d);
    w.b1 = ints(1, (int64_t[]){8}, -2, 2, dt, d);
    w.w2 = ints(4, (int64_t[]){ch, 8, 3, 3}, -1, 1, dt, d);
    w.w3 = ints(4, (int64_t[]){ch, 2 * ch, 1, 1}, -1, 1, dt, d);
    w.b3 = ints(1, (int64_t[]){ch}, -2, 2, dt, d);
    return w;
}

static weights weights_to(const weights *w, lm_device *d)
{
    return (weights){moved(w->w1, d), moved(w->b1, d), moved(w->w2, d), moved(w->w3, d), moved(w->b3, d)};
}

static void weights_free(weights *w)
{
    lm_array_release(w->w1); lm_array_release(w->b1); lm_array_release(w->w2);
    lm_array_release(w->w3); lm_array_release(w->b3);
}

/* x[N,ch,H,W] -> y[N,ch,H,W] (conv, relu, conv, concat with x, 1x1 conv,
 * y = c3 * 0.5 + x: a fused chain) and s = sum of y over W */
static void net(const weights *w, lm_array *x, lm_array **y, lm_array **s)
{
    const int64_t st[2] = {1, 1}, dil[2] = {1, 1}, p1[4] = {1, 1, 1, 1}, p0[4] = {0, 0, 0, 0};
    lm_array *c1 = lm_conv2d(x, w->w1, w->b1, st, p1, dil, 1);
    lm_array *a = lm_unary(LM_OP_RELU, c1);
    lm_array *c2 = lm_conv2d(a, w->w2, NULL, st, p1, dil, 1);
    lm_array *cat = lm_concat(2, (lm_array *[]){x, c2}, 1);
    lm_array *c3 = lm_conv2d(cat, w->w3, w->b3, st, p0, dil, 1);
    lm_array *h = lm_binary_scalar(LM_OP_MUL, c3, 0.5, false);
    *y = lm_binary(LM_OP_ADD, h, x);
    *s = lm_reduce(LM_OP_SUM, *y, 1, (int[]){3}, false);
    assert_non_null(*y);
    assert_non_null(*s);
    lm_array_release(c1); lm_array_release(a); lm_array_release(c2);
    lm_array_release(cat); lm_array_release(c3); lm_array_release(h);
}

static lm_compiled *compile_net(const weights *w, int ndim, const int64_t *shape, lm_dtype dt)
{
    lm_array *ph = lm_placeholder(ndim, shape, dt, vk), *o[2];
    net(w, ph, &o[0], &o[1]);
    lm_compiled *c = lm_compile_graph(1, &ph, 2, o, LM_COMPILE_ON);
    assert_non_null(c);
    lm_array_release(ph); lm_array_release(o[0]); lm_array_release(o[1]);
    return c;
}

/* a's bits (as stored) */
static void *bits(lm_array *a, size_t *n)
{
    *n = (size_t)a->size * lm_dtype_size(a->dtype);
    void *p = malloc(*n ? *n : 1);
    assert_int_equal(lm_array_read(a, p, a->dtype), LM_OK);
    return p;
}

static int failures;

static void expect_same(const char *what, int call, lm_array *got, lm_array *want)
{
    size_t ng, nw;
    void *g = bits(got, &ng), *w = bits(want, &nw);
    if (ng != nw || memcmp(g, w, ng)) {
        size_t first = 0;
        while (first < ng && first < nw && ((char *)g)[first] == ((char *)w)[first]) first++;
        printf("FAIL %s, call %d: results differ (first at byte %zu of %zu)\n", what, call, first, ng);
        failures++;
    }
    free(g);
    free(w);
}

/* one call of c on x; both outputs, checked against net on Vulkan
 * uncompiled and on the CPU (wc: the same weights there) */
static void call_and_check(lm_compiled *c, const weights *w, const weights *wc, lm_array *x, const char *what,
                           int call)
{
    lm_array *o[2] = {NULL, NULL}, *ry, *rs, *cy, *cs;
    int r_ = lm_compiled_call(c, 1, &x, o);
    if (r_ != 2) printf("call: %s\n", lm_error_message());
    assert_int_equal(r_, 2);
    net(w, x, &ry, &rs);
    lm_array *xc = moved(x, cpu);
    net(wc, xc, &cy, &cs);
    expect_same(what, call, o[0], ry);
    expect_same(what, call, o[1], rs);
    expect_same(what, call, o[0], cy);
    expect_same(what, call, o[1], cs);
    lm_array *all[] = {o[0], o[1], ry, rs, xc, cy, cs};
    for (int k = 0; k < 7; k++) lm_array_release(all[k]);
}

static void test_calls_bit_equal(void **state)
{
    (void)state;
    failures = 0;
    weights w = make_weights(4, LM_F32, vk), wc = weights_to(&w, cpu);
    int64_t shape[4] = {2, 4, 12, 10};
    lm_compiled *c = compile_net(&w, 4, shape, LM_F32);
    int64_t rec0 = lm_replay_recorded_count(), rep0 = lm_replay_replayed_count();
    for (int i = 0; i < 6; i++) {
        lm_array *x = ints(4, shape, -2, 2, LM_F32, vk);
        call_and_check(c, &w, &wc, x, "f32 net", i + 1);
        lm_array_release(x);
    }
    /* the first call ran the ordinary way, the second recorded, all but
     * the first went through the recording */
    assert_int_equal(lm_replay_recorded_count() - rec0, 1);
    assert_int_equal(lm_replay_replayed_count() - rep0, 5);
    lm_compiled_free(c);
    weights_free(&w);
    weights_free(&wc);
    assert_int_equal(failures, 0);
}

/* f16, values that round: replayed against not replayed, bit for bit */
static void test_f16_against_no_replay(void **state)
{
    (void)state;
    failures = 0;
    weights w = make_weights(4, LM_F16, vk);
    int64_t shape[4] = {1, 4, 16, 16};
    lm_compiled *c = compile_net(&w, 4, shape, LM_F16);
    for (int i = 0; i < 5; i++) {
        lm_array *x = lm_random_uniform(4, shape, -1.5, 1.5, LM_F16, lm_random_key(70 + (uint64_t)i), vk);
        assert_int_equal(lm_array_eval(x), LM_OK);
        lm_array *a[2], *b[2];
        assert_int_equal(lm_compiled_call(c, 1, &x, a), 2);
        replay_env(false);
        assert_int_equal(lm_compiled_call(c, 1, &x, b), 2);
        replay_env(true);
        expect_same("f16 net against LUMEN_VK_REPLAY=0", i + 1, a[0], b[0]);
        expect_same("f16 net against LUMEN_VK_REPLAY=0", i + 1, a[1], b[1]);
        lm_array *all[] = {x, a[0], a[1], b[0], b[1]};
        for (int k = 0; k < 5; k++) lm_array_release(all[k]);
    }
    lm_compiled_free(c);
    weights_free(&w);
    assert_int_equal(failures, 0);
}

/* a linear of 2 rows on the GEMV kernel with split-K (x [2, 1100] @ w^T,
 * w [37, 1100]: 2 parts into a scratch buffer freed while the recording is
 * made, then conv_splitk), times 0.5: replayed against not replayed and
 * against the product uncompiled, bit for bit, and the calls after the
 * second replayed */
static void test_gemv_split_replayed(void **state)
{
    (void)state;
    failures = 0;
    int64_t sx[2] = {2, 1100}, sw[2] = {37, 1100};
    lm_array *w = lm_random_normal(2, sw, 0, 1, LM_F16, lm_random_key(80), vk);
    assert_int_equal(lm_array_eval(w), LM_OK);
    lm_array *ph = lm_placeholder(2, sx, LM_F16, vk), *wt = lm_transpose(w, 0, 1), *o;
    lm_array *mm = lm_matmul(ph, wt);
    o = lm_binary_scalar(LM_OP_MUL, mm, 0.5, false);   /* a second kernel: a call of one is not recorded */
    lm_compiled *c = lm_compile_graph(1, &ph, 1, &o, LM_COMPILE_ON);
    assert_non_null(c);
    lm_array_release(ph); lm_array_release(mm); lm_array_release(o);
    int64_t rep0 = lm_replay_replayed_count(), rec0 = lm_replay_recorded_count();
    for (int i = 0; i < 5; i++) {
        lm_array *x = lm_random_normal(2, sx, 0, 1, LM_F16, lm_random_key(81 + (uint64_t)i), vk);
        assert_int_equal(lm_array_eval(x), LM_OK);
        lm_array *a, *b, *dm = lm_matmul(x, wt), *d = lm_binary_scalar(LM_OP_MUL, dm, 0.5, false);
        lm_array_release(dm);
        assert_int_equal(lm_compiled_call(c, 1, &x, &a), 1);
        replay_env(false);
        assert_int_equal(lm_compiled_call(c, 1, &x, &b), 1);
        replay_env(true);
        expect_same("gemv split-K against LUMEN_VK_REPLAY=0", i + 1, a, b);
        expect_same("gemv split-K against the product uncompiled", i + 1, a, d);
        lm_array *all[] = {x, a, b, d};
        for (int k = 0; k < 4; k++) lm_array_release(all[k]);
    }
    printf("  gemv: recorded %lld, replayed %lld\n", (long long)(lm_replay_recorded_count() - rec0),
           (long long)(lm_replay_replayed_count() - rep0));
    assert_true(lm_replay_replayed_count() - rep0 >= 3);
    lm_compiled_free(c);
    lm_array_release(wt);
    lm_array_release(w);
    assert_int_equal(failures, 0);
}

static void test_new_shapes_record_again(void **state)
{
    (void)state;
    failures = 0;
    weights w = make_weights(4, LM_F32, vk), wc = weights_to(&w, cpu);
    int64_t a[4] = {1, 4, 8, 8}, b[4] = {3, 4, 6, 9};
    lm_compiled *c = compile_net(&w, 4, a, LM_F32);
    int64_t rec0 = lm_replay_recorded_count();
    const int64_t *order[] = {a, a, a, b, b, b, a, b, a};
    for (int i = 0; i < 9; i++) {
        lm_array *x = ints(4, order[i], -2, 2, LM_F32, vk);
        call_and_check(c, &w, &wc, x, "shapes a, b, a", i + 1);
        lm_array_release(x);
    }
    assert_int_equal(lm_replay_recorded_count() - rec0, 2);   /* one per shape */
    lm_compiled_free(c);
    weights_free(&w);
    weights_free(&wc);
    assert_int_equal(failures, 0);
}

static void test_two_functions_interleaved(void **state)
{
    (void)state;
    failures = 0;
    weights w1 = make_weights(4, LM_F32, vk), w1c = weights_to(&w1, cpu);
    weights w2 = make_weights(4, LM_F32, vk), w2c = weights_to(&w2, cpu);
    int64_t shape[4] = {1, 4, 10, 10};
    lm_compiled *f = compile_net(&w1, 4, shape, LM_F32), *g = compile_net(&w2, 4, shape, LM_F32);
    int64_t rep0 = lm_replay_replayed_count();
    for (int i = 0; i < 5; i++) {
        lm_array *x = ints(4, shape, -2, 2, LM_F32, vk);
        call_and_check(f, &w1, &w1c, x, "f of f, g", i + 1);
        call_and_check(g, &w2, &w2c, x, "g of f, g", i + 1);
        lm_array_release(x);
    }
    assert_int_equal(lm_replay_replayed_count() - rep0, 8);
    lm_compiled_free(f);
    lm_compiled_free(g);
    weights_free(&w1); weights_free(&w1c); weights_free(&w2); weights_free(&w2c);
    assert_int_equal(failures, 0);
}

/* fused programs live in a cache of 64 slots on the device (fused.c):
 * 70 other programs between two calls evict every one the recording saw */
static void test_fused_slots_reused(void **state)
{
    (void)state;
    failures = 0;
    weights w = make_weights(4, LM_F32, vk), wc = weights_to(&w, cpu);
    int64_t shape[4] = {1, 4, 8, 8};
    lm_compiled *c = compile_net(&w, 4, shape, LM_F32);
    lm_array *x = ints(4, shape, -2, 2, LM_F32, vk);
    for (int i = 0; i < 3; i++) call_and_check(c, &w, &wc, x, "before other programs", i + 1);
    for (int k = 1; k <= 70; k++) {   /* a new geometry each: a new program */
        int64_t s2[2] = {k, 3};
        lm_array *ph = lm_placeholder(2, s2, LM_F32, vk);
        lm_array *m = lm_binary_scalar(LM_OP_MUL, ph, 2, false), *y = lm_binary_scalar(LM_OP_ADD, m, 1, false);
        lm_compiled *g = lm_compile_graph(1, &ph, 1, &y, LM_COMPILE_ON);
        assert_non_null(g);
        lm_array *in = ints(2, s2, -3, 3, LM_F32, vk), *o;
        assert_int_equal(lm_compiled_call(g, 1, &in, &o), 1);
        assert_int_equal(lm_array_eval(o), LM_OK);
        lm_array *all[] = {ph, m, y, in, o};
        for (int j = 0; j < 5; j++) lm_array_release(all[j]);
        lm_compiled_free(g);
    }
    for (int i = 0; i < 3; i++) call_and_check(c, &w, &wc, x, "after 70 other programs", i + 1);
    lm_array_release(x);
    lm_compiled_free(c);
    weights_free(&w);
    weights_free(&wc);
    assert_int_equal(failures, 0);
}

/* the recording's memory is active while it lives and is given back when
 * the function goes: after the same calls and the free, as much is active
 * as with replay switched off */
static size_t calls_then_free(const weights *w, lm_array *x, bool replay, size_t *held)
{
    if (!replay) replay_env(false);
    lm_compiled *c = compile_net(w, x->ndim, x->shape, LM_F32);
    for (int i = 0; i < 4; i++) {
        lm_array *o[2];
        assert_int_equal(lm_compiled_call(c, 1, &x, o), 2);
        assert_int_equal(lm_array_eval(o[0]), LM_OK);
        lm_array_release(o[0]);
        lm_array_release(o[1]);
    }
    assert_int_equal(lm_device_sync(vk), LM_OK);
    *held = lm_device_memory(vk).active;
    lm_compiled_free(c);
    replay_env(true);
    return lm_device_memory(vk).active;
}

static void test_memory_released(void **state)
{
    (void)state;
    failures = 0;
    weights w = make_weights(4, LM_F32, vk);
    int64_t shape[4] = {2, 4, 16, 16};
    lm_array *x = ints(4, shape, -2, 2, LM_F32, vk);
    size_t held_off, held_on;
    size_t off = calls_then_free(&w, x, false, &held_off);
    size_t on = calls_then_free(&w, x, true, &held_on);
    /* at least its input, its two outputs and the conv outputs */
    size_t img = (size_t)2 * 4 * 16 * 16 * 4;
    if (held_on < held_off + 3 * img) {
        printf("FAIL the recording holds %zd bytes, expected at least %zu\n", (ssize_t)(held_on - held_off), 3 * img);
        failures++;
    }
    if (on != off) {
        printf("FAIL %zu bytes active after the function was freed, %zu without replay\n", on, off);
        failures++;
    }
    lm_array_release(x);
    weights_free(&w);
    assert_int_equal(failures, 0);
}

/* replayed calls queued back to back, each output used by a later lazy
 * op, everything evaluated without waiting; read at the end */
static void test_async_calls(void **state)
{
    (void)state;
    failures = 0;
    weights w = make_weights(4, LM_F32, vk), wc = weights_to(&w, cpu);
    int64_t shape[4] = {1, 4, 12, 12};
    lm_compiled *c = compile_net(&w, 4, shape, LM_F32);
    enum { N = 6 };
    lm_array *x[N], *o[N][2], *z[N];
    for (int i = 0; i < N; i++) {
        x[i] = ints(4, shape, -2, 2, LM_F32, vk);
        assert_int_equal(lm_compiled_call(c, 1, &x[i], o[i]), 2);
        z[i] = lm_binary_scalar(LM_OP_ADD, o[i][1], 1, false);
        assert_int_equal(lm_eval_async(o[i], 2), LM_OK);
        assert_int_equal(lm_eval_async(&z[i], 1), LM_OK);
    }
    for (int i = 0; i < N; i++) {
        lm_array *xc = moved(x[i], cpu), *cy, *cs;
        net(&wc, xc, &cy, &cs);
        lm_array *cz = lm_binary_scalar(LM_OP_ADD, cs, 1, false);
        expect_same("async calls", i + 1, o[i][0], cy);
        expect_same("async calls", i + 1, z[i], cz);
        lm_array *all[] = {xc, cy, cs, cz, x[i], o[i][0], o[i][1], z[i]};
        for (int k = 0; k < 8; k++) lm_array_release(all[k]);
    }
    lm_compiled_free(c);
    weights_free(&w);
    weights_free(&wc);
    assert_int_equal(failures, 0);
}

/* a constant written in place after the recording: seen by the next calls,
 * as without replay */
static void test_constant_written(void **state)
{
    (void)state;
    failures = 0;
    weights w = make_weights(4, LM_F32, vk);
    int64_t shape[4] = {1, 4, 8, 8};
    lm_compiled *c = compile_net(&w, 4, shape, LM_F32);
    lm_array *x = ints(4, shape, -2, 2, LM_F32, vk);
    for (int i = 0; i < 3; i++) {
        lm_array *o[2];
        assert_int_equal(lm_compiled_call(c, 1, &x, o), 2);
        lm_array_release(o[0]);
        lm_array_release(o[1]);
    }
    lm_array *nw = ints(4, (int64_t[]){4, 8, 3, 3}, -1, 1, LM_F32, vk);
    assert_int_equal(lm_array_assign(w.w2, nw), LM_OK);
    weights wc = weights_to(&w, cpu);
    for (int i = 0; i < 3; i++) call_and_check(c, &w, &wc, x, "after a constant was written", i + 1);
    lm_array_release(nw);
    lm_array_release(x);
    lm_compiled_free(c);
    weights_free(&w);
    weights_free(&wc);
    assert_int_equal(failures, 0);
}

/* lm_sweep frees every array not kept: not the recording's own (a net
 * whose constants are all kept weights: no scalar constants, which a sweep
 * frees with or without replay) */
static lm_array *net_nc(const weights *w, lm_array *x)
{
    const int64_t st[2] = {1, 1}, dil[2] = {1, 1}, p1[4] = {1, 1, 1, 1};
    lm_array *c1 = lm_conv2d(x, w->w1, w->b1, st, p1, dil, 1), *a = lm_unary(LM_OP_RELU, c1);
    lm_array *c2 = lm_conv2d(a, w->w2, NULL, st, p1, dil, 1), *y = lm_binary(LM_OP_ADD, c2, x);
    lm_array_release(c1); lm_array_release(a); lm_array_release(c2);
    return y;
}

static void test_sweep(void **state)
{
    (void)state;
    failures = 0;
    weights w = make_weights(4, LM_F32, vk), wc = weights_to(&w, cpu);
    lm_array *keep[] = {w.w1, w.b1, w.w2, wc.w1, wc.b1, wc.w2};
    for (int k = 0; k < 6; k++) lm_array_keep(keep[k]);
    int64_t shape[4] = {1, 4, 8, 8};
    lm_array *ph = lm_placeholder(4, shape, LM_F32, vk), *tr = net_nc(&w, ph);
    lm_compiled *c = lm_compile_graph(1, &ph, 1, &tr, LM_COMPILE_ON);
    assert_non_null(c);
    lm_array_release(ph);
    lm_array_release(tr);
    lm_array *x = ints(4, shape, -2, 2, LM_F32, vk), *xc = moved(x, cpu);
    lm_array_keep(x);
    lm_array_keep(xc);
    int64_t rep0 = lm_replay_replayed_count();
    for (int i = 0; i < 6; i++) {
        if (i == 3) lm_sweep();
        lm_array *o = NULL, *ref = net_nc(&wc, xc);
        assert_int_equal(lm_compiled_call(c, 1, &x, &o), 1);
        expect_same(i < 3 ? "before a sweep" : "after a sweep", i + 1, o, ref);
        lm_array_release(o);
        lm_array_release(ref);
    }
    assert_int_equal(lm_replay_replayed_count() - rep0, 5);
    lm_compiled_free(c);
    lm_array *un[] = {x, xc, w.w1, w.b1, w.w2, wc.w1, wc.b1, wc.w2};
    for (int k = 0; k < 8; k++) lm_array_unkeep(un[k]);
    lm_array_release(x);
    lm_array_release(xc);
    weights_free(&w);
    weights_free(&wc);
    assert_int_equal(failures, 0);
}

/* a gather that reports bad indices cannot be recorded; a profile open
 * times nodes a replay would not run: both the ordinary way */
static void test_not_recorded(void **state)
{
    (void)state;
    failures = 0;
    int64_t shape[2] = {6, 5};
    lm_array *ph = lm_placeholder(2, shape, LM_F32, vk);
    lm_array *idx = lm_from_data(1, (int64_t[]){3}, LM_I32, (int32_t[]){4, 0, 2}, vk);
    assert_int_equal(lm_array_eval(idx), LM_OK);
    lm_array *t = lm_binary_scalar(LM_OP_MUL, ph, 3, false), *g = lm_index_select(t, 0, idx);
    lm_compiled *c = lm_compile_graph(1, &ph, 1, &g, LM_COMPILE_ON);
    assert_non_null(c);
    int64_t rec0 = lm_replay_recorded_count(), rep0 = lm_replay_replayed_count();
    for (int i = 0; i < 4; i++) {
        lm_array *x = ints(2, shape, -9, 9, LM_F32, vk), *o, *xc = moved(x, cpu);
        lm_array *idc = moved(idx, cpu), *tc = lm_binary_scalar(LM_OP_MUL, xc, 3, false);
        lm_array *gc = lm_index_select(tc, 0, idc);
        assert_int_equal(lm_compiled_call(c, 1, &x, &o), 1);
        expect_same("index_select", i + 1, o, gc);
        lm_array *all[] = {x, o, xc, idc, tc, gc};
        for (int k = 0; k < 6; k++) lm_array_release(all[k]);
    }
    assert_int_equal(lm_replay_recorded_count(), rec0);
    assert_int_equal(lm_replay_replayed_count(), rep0);
    lm_compiled_free(c);
    lm_array *all[] = {ph, idx, t, g};
    for (int k = 0; k < 4; k++) lm_array_release(all[k]);

    /* the index as an input, out of range on the call that would record:
     * the error is reported (by the call or by the evaluation), not lost */
    lm_array *px = lm_placeholder(2, shape, LM_F32, vk), *pi = lm_placeholder(1, (int64_t[]){3}, LM_I32, vk);
    lm_array *gi = lm_index_select(px, 0, pi);
    lm_compiled *ci = lm_compile_graph(2, (lm_array *[]){px, pi}, 1, &gi, LM_COMPILE_ON);
    assert_non_null(ci);
    for (int i = 0; i < 3; i++) {
        lm_array *x = ints(2, shape, -9, 9, LM_F32, vk), *o = NULL;
        lm_array *bad = lm_from_data(1, (int64_t[]){3}, LM_I32, (int32_t[]){1, i ? 60 : 2, 0}, vk);
        assert_int_equal(lm_array_eval(bad), LM_OK);
        int r = lm_compiled_call(ci, 2, (lm_array *[]){x, bad}, &o);
        lm_status st = r == 1 ? lm_array_eval(o) : lm_error_status();
        if (i == 0) assert_int_equal(st, LM_OK);
        else if (st == LM_OK || !strstr(lm_error_message(), "out of range")) {
            printf("FAIL index 60 of 6, call %d: %s\n", i + 1, st == LM_OK ? "no error" : lm_error_message());
            failures++;
        }
        lm_array_release(x); lm_array_release(o); lm_array_release(bad);
    }
    lm_compiled_free(ci);
    lm_array_release(px); lm_array_release(pi); lm_array_release(gi);

    /* an output that is a view of the evaluation's buffer cannot be copied
     * out: recorded, run once, and the ordinary way after that */
    lm_array *pv = lm_placeholder(2, shape, LM_F32, vk), *w5 = ints(2, (int64_t[]){5, 5}, -1, 1, LM_F32, vk);
    lm_array *m3 = lm_binary_scalar(LM_OP_MUL, pv, 3, false), *mm = lm_matmul(m3, w5), *tv = lm_transpose(mm, 0, 1);
    lm_compiled *cv = lm_compile_graph(1, &pv, 1, &tv, LM_COMPILE_ON);
    assert_non_null(cv);
    rec0 = lm_replay_recorded_count();
    lm_array *w5c = moved(w5, cpu);
    for (int i = 0; i < 4; i++) {
        lm_array *x = ints(2, shape, -9, 9, LM_F32, vk), *o = NULL, *xc = moved(x, cpu);
        lm_array *mc = lm_binary_scalar(LM_OP_MUL, xc, 3, false), *mmc = lm_matmul(mc, w5c);
        lm_array *tc = lm_transpose(mmc, 0, 1);
        assert_int_equal(lm_compiled_call(cv, 1, &x, &o), 1);
        expect_same("a transposed output", i + 1, o, tc);
        lm_array *all3[] = {x, o, xc, mc, mmc, tc};
        for (int k = 0; k < 6; k++) lm_array_release(all3[k]);
    }
    assert_int_equal(lm_replay_recorded_count(), rec0);
    lm_compiled_free(cv);
    lm_array *all4[] = {pv, w5, m3, mm, tv, w5c};
    for (int k = 0; k < 6; k++) lm_array_release(all4[k]);

    /* a kept constant passed through as an output: not recorded, and
     * still kept by its owner afterwards */
    lm_array *pk = lm_placeholder(2, shape, LM_F32, vk), *wk = ints(2, (int64_t[]){5, 5}, -1, 1, LM_F32, vk);
    lm_array_keep(wk);
    lm_array *k3 = lm_binary_scalar(LM_OP_MUL, pk, 3, false), *km = lm_matmul(k3, wk);
    lm_compiled *ck = lm_compile_graph(1, &pk, 2, (lm_array *[]){km, wk}, LM_COMPILE_ON);
    assert_non_null(ck);
    for (int i = 0; i < 3; i++) {
        lm_array *x = ints(2, shape, -9, 9, LM_F32, vk), *o[2] = {NULL, NULL};
        assert_int_equal(lm_compiled_call(ck, 1, &x, o), 2);
        assert_ptr_equal(o[1], wk);
        lm_array_release(x); lm_array_release(o[0]); lm_array_release(o[1]);
    }
    lm_compiled_free(ck);
    if (!(wk->flags & LM_ARRAY_KEPT)) {
        printf("FAIL a kept constant returned by a compiled function lost its keep\n");
        failures++;
    }
    lm_array_release(pk); lm_array_release(k3); lm_array_release(km);
    lm_array_unkeep(wk);
    lm_array_release(wk);

    /* two kernels over 8 MiB: copying it in would cost more than the
     * host time replay saves */
    int64_t big[2] = {2048, 1024};
    lm_array *pb = lm_placeholder(2, big, LM_F32, vk);
    lm_array *b2 = lm_binary_scalar(LM_OP_MUL, pb, 2, false), *bs = lm_reduce(LM_OP_SUM, b2, 1, (int[]){1}, false);
    lm_compiled *cb = lm_compile_graph(1, &pb, 1, &bs, LM_COMPILE_ON);
    assert_non_null(cb);
    assert_int_equal(lm_compiled_kernels(cb), 2);
    lm_array *xb = ints(2, big, -3, 3, LM_F32, vk), *xbc = moved(xb, cpu);
    lm_array *rb2 = lm_binary_scalar(LM_OP_MUL, xbc, 2, false), *rbs = lm_reduce(LM_OP_SUM, rb2, 1, (int[]){1}, false);
    for (int i = 0; i < 3; i++) {
        lm_array *o = NULL;
        assert_int_equal(lm_compiled_call(cb, 1, &xb, &o), 1);
        expect_same("8 MiB in", i + 1, o, rbs);
        lm_array_release(o);
    }
    assert_int_equal(lm_replay_recorded_count(), rec0);
    lm_compiled_free(cb);
    lm_array *all5[] = {pb, b2, bs, xb, xbc, rb2, rbs};
    for (int k = 0; k < 7; k++) lm_array_release(all5[k]);

    /* a profile open: the ordinary way, every node timed */
    weights w = make_weights(4, LM_F32, vk), wc = weights_to(&w, cpu);
    int64_t s4[4] = {1, 4, 8, 8};
    lm_compiled *f = compile_net(&w, 4, s4, LM_F32);
    lm_array *x = ints(4, s4, -2, 2, LM_F32, vk);
    assert_int_equal(lm_profile_begin(), LM_OK);
    for (int i = 0; i < 3; i++) call_and_check(f, &w, &wc, x, "profiled", i + 1);
    lm_profile *p = lm_profile_end();
    assert_non_null(p);
    lm_profile_free(p);
    assert_int_equal(lm_replay_replayed_count(), rep0);
    /* and replay switched off */
    replay_env(false);
    for (int i = 0; i < 3; i++) call_and_check(f, &w, &wc, x, "LUMEN_VK_REPLAY=0", i + 1);
    replay_env(true);
    assert_int_equal(lm_replay_replayed_count(), rep0);
    assert_int_equal(lm_replay_recorded_count(), rec0);
    lm_array_release(x);
    lm_compiled_free(f);
    weights_free(&w);
    weights_free(&wc);
    assert_int_equal(failures, 0);
}

static void test_no_validation_messages(void **state)
{
    (void)state;
    failures = 0;
    assert_int_equal(lm_device_sync(vk), LM_OK);
    if (lm_vulkan_validation_messages())
        printf("FAIL %lld validation messages\n", (long long)lm_vulkan_validation_messages());
    assert_int_equal(lm_vulkan_validation_messages(), 0);
}

int main(void)
{
    lm_init();
    cpu = lm_device_cpu();
    const char *spec = getenv("LUMEN_DEVICE");
    vk = spec && !strncmp(spec, "vulkan", 6) ? lm_device_find(spec) : NULL;
    for (int i = 0; !vk && i < lm_device_count(); i++)
        if (!strncmp(lm_device_at(i)->spec, "vulkan", 6)) vk = lm_device_at(i);
    if (!vk) {
        printf("test_vk_replay: no Vulkan device (%s); skipped\n", lm_vulkan_status());
        return LM_TEST_SKIP;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_calls_bit_equal),        cmocka_unit_test(test_f16_against_no_replay),
        cmocka_unit_test(test_new_shapes_record_again), cmocka_unit_test(test_two_functions_interleaved),
        cmocka_unit_test(test_fused_slots_reused),     cmocka_unit_test(test_gemv_split_replayed),
        cmocka_unit_test(test_memory_released),        cmocka_unit_test(test_async_calls),
        cmocka_unit_test(test_constant_written),       cmocka_unit_test(test_sweep),
        cmocka_unit_test(test_not_recorded),
        cmocka_unit_test(test_no_validation_messages),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else
int main(void)
{
    printf("test_vk_replay: built without Vulkan; skipped\n");
    return LM_TEST_SKIP;
}
#endif
