/* test_trace.c - core/trace.c: locations, recording a graph, running it
 * again node by node under another dtype or compiled, releasing values. */
#include "testutil.h"
#include "core/trace.h"

static lm_array *randu(int64_t n, uint64_t seed)
{
    lm_array *a = lm_random_uniform(1, &n, -2, 2, LM_F32, lm_random_key(seed), NULL);
    assert_int_equal(lm_array_eval(a), LM_OK);
    return a;
}

/* tanh(x * a + b) * a - x, each op built at its own "line" */
static lm_array *chain(lm_array *x, lm_array *a, lm_array *b)
{
    lm_where_set("m.lua:1");
    lm_array *t1 = lm_binary(LM_OP_MUL, x, a);
    lm_where_set("m.lua:2");
    lm_array *t2 = lm_binary(LM_OP_ADD, t1, b);
    lm_array *t3 = lm_unary(LM_OP_TANH, t2);
    lm_where_set("m.lua:3");
    lm_array *t4 = lm_binary(LM_OP_MUL, t3, a);
    lm_array *y = lm_binary(LM_OP_SUB, t4, x);
    lm_where_set(NULL);
    lm_array_release(t1);
    lm_array_release(t2);
    lm_array_release(t3);
    lm_array_release(t4);
    return y;
}

static void test_where_is_interned_and_recorded(void **state)
{
    (void)state;
    const char *w = lm_where_set("m.lua:7");
    assert_ptr_equal(lm_where_set("m.lua:7"), w);   /* one string per place */
    lm_array *x = randu(4, 1), *y = lm_unary(LM_OP_EXP, x);
    assert_ptr_equal(lm_array_where(y), w);
    lm_where_set(NULL);
    lm_array *z = lm_unary(LM_OP_EXP, x);
    assert_null(lm_array_where(z));
    lm_array_release(x);
    lm_array_release(y);
    lm_array_release(z);
}

static void test_replay_as_built_is_bitwise_and_releases(void **state)
{
    (void)state;
    int64_t before = lm_array_live_count();
    lm_array *x = randu(1000, 1), *a = randu(1000, 2), *b = randu(1000, 3);
    lm_array *y = chain(x, a, b);
    lm_trace *t = lm_trace_capture(1, &y);
    assert_non_null(t);
    assert_int_equal(lm_trace_count(t), 5);
    assert_int_equal(lm_trace_leaves(t), 3);
    assert_string_equal(lm_trace_node_at(t, 0)->where, "m.lua:1");
    assert_int_equal(lm_trace_node_at(t, 2)->op, LM_OP_TANH);
    assert_string_equal(lm_trace_node_at(t, 4)->where, "m.lua:3");
    char name[64];
    lm_trace_name(t, 2, name, sizeof name);
    assert_string_equal(name, "0003.tanh.m.lua:2");
    lm_trace_config c;
    lm_trace_config_init(&c);
    lm_trace_run *r = lm_trace_run_start(t, &c);
    assert_non_null(r);
    lm_array *v = NULL;
    for (int k = 0; k < 5; k++) {
        int into;
        assert_int_equal(lm_trace_run_step(r, k, &v, &into), LM_OK);
        assert_non_null(v);
        assert_int_equal(into, -1);
        if (k == 4) {
            double *p = tu_read(v), *q = tu_read(y);
            assert_memory_equal(p, q, sizeof(double) * 1000);
            free(p);
            free(q);
        }
        lm_trace_run_release(r, k);
        if (k == 2) assert_null(lm_trace_run_value(r, 3 + 1));   /* add: read only by tanh */
    }
    assert_null(lm_trace_run_value(r, 3 + 4));   /* the output too: the caller keeps what it wants */
    lm_trace_run_free(r);
    lm_trace_free(t);
    lm_array_release(x);
    lm_array_release(a);
    lm_array_release(b);
    lm_array_release(y);
    assert_int_equal(lm_array_live_count(), before);
}

static void test_f16_and_compiled_runs(void **state)
{
    (void)state;
    lm_array *x = randu(500, 4), *a = randu(500, 5), *b = randu(500, 6);
    lm_array *y = chain(x, a, b);
    lm_trace *t = lm_trace_capture(1, &y);
    lm_trace_config h;
    lm_trace_config_init(&h);
    h.dtype = LM_F16;
    lm_trace_run *r = lm_trace_run_start(t, &h);
    lm_array *v;
    for (int k = 0; k < 5; k++) {
        assert_int_equal(lm_trace_run_step(r, k, &v, NULL), LM_OK);
        assert_int_equal(v->dtype, LM_F16);
        lm_trace_run_release(r, k);
    }
    lm_trace_run_free(r);
    /* compiled: the whole chain is one fused kernel, its value the last op's */
    lm_trace_config c;
    lm_trace_config_init(&c);
    c.compile = true;
    r = lm_trace_run_start(t, &c);
    assert_non_null(r);
    for (int k = 0; k < 5; k++) {
        int into;
        assert_int_equal(lm_trace_run_step(r, k, &v, &into), LM_OK);
        if (k < 4) {
            assert_null(v);
            assert_int_equal(into, 4);
        } else {
            assert_non_null(v);
            assert_int_equal(v->op == LM_OP_NONE || v->buf != NULL, 1);
            double *p = tu_read(v), *q = tu_read(y);
            for (int i = 0; i < 500; i++) assert_true(fabs(p[i] - q[i]) <= 1e-6 * (1 + fabs(q[i])));
            free(p);
            free(q);
        }
        lm_trace_run_release(r, k);
    }
    lm_trace_run_free(r);
    /* a node alone on given inputs (attribution) */
    lm_array *ins[2] = {x, a};
    lm_array *again = lm_trace_rerun(t, 0, &h, ins);
    assert_non_null(again);
    assert_int_equal(again->dtype, LM_F16);
    lm_array_release(again);
    lm_trace_free(t);
    lm_array_release(x);
    lm_array_release(a);
    lm_array_release(b);
    lm_array_release(y);
}

static void test_nonfinite_and_fault(void **state)
{
    (void)state;
    double d[5] = {1, NAN, INFINITY, -INFINITY, 2};
    int64_t n = 5, nan, inf;
    lm_array *a = lm_from_data(1, &n, LM_F64, d, NULL);
    lm_array *h = lm_cast(a, LM_F16);
    assert_int_equal(lm_count_nonfinite(a, &nan, &inf), LM_OK);
    assert_int_equal(nan, 1);
    assert_int_equal(inf, 2);
    assert_int_equal(lm_array_eval(h), LM_OK);
    assert_int_equal(lm_count_nonfinite(h, &nan, &inf), LM_OK);
    assert_int_equal(nan, 1);
    assert_int_equal(inf, 2);
    /* the test fault flips the signs of one op's results on one device */
    lm_test_fault_set("exp:cpu:f64");
    lm_array *e = lm_unary(LM_OP_EXP, a), *e32 = lm_unary(LM_OP_EXP, h);
    assert_int_equal(lm_array_eval(e), LM_OK);
    assert_int_equal(lm_array_eval(e32), LM_OK);
    lm_test_fault_set(NULL);
    double *q = tu_read(e32);
    assert_true(q[0] > 0);   /* another dtype: untouched */
    free(q);
    double *p = tu_read(e);
    assert_true(p[0] < 0);
    free(p);
    lm_array *e2 = lm_unary(LM_OP_EXP, a);
    p = tu_read(e2);
    assert_true(p[0] > 0);
    free(p);
    lm_array_release(a);
    lm_array_release(h);
    lm_array_release(e);
    lm_array_release(e32);
    lm_array_release(e2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_where_is_interned_and_recorded),
        cmocka_unit_test(test_replay_as_built_is_bitwise_and_releases),
        cmocka_unit_test(test_f16_and_compiled_runs),
        cmocka_unit_test(test_nonfinite_and_fault),
    };
    return cmocka_run_group_tests_name("trace", tests, tu_setup_cpu, NULL);
}
