/* bench_compile.c - compiled (fused) vs uncompiled elementwise chains over
 * 16M floats, beside a STREAM triad on the same pool.  Effective GB/s
 * counts only the bytes a chain must move: its inputs once and its output
 * once.  Peers (numpy, PyTorch eager) come from peer_compile.py. */
#include <stdlib.h>
#include "bench.h"
#include "backends/cpu/cpu.h"

static lm_array *gelu_chain(lm_array *x, lm_array *a, lm_array *b)
{
    lm_array *t1 = lm_binary(LM_OP_MUL, x, a), *t2 = lm_binary(LM_OP_ADD, t1, b);
    lm_array *t3 = lm_unary(LM_OP_GELU_TANH, t2), *y = lm_binary(LM_OP_MUL, t3, a);
    lm_array_release(t1);
    lm_array_release(t2);
    lm_array_release(t3);
    return y;
}

static lm_array *swiglu(lm_array *g, lm_array *u)
{
    lm_array *s = lm_unary(LM_OP_SILU, g), *y = lm_binary(LM_OP_MUL, s, u);
    lm_array_release(s);
    return y;
}

static lm_array *chain10(lm_array *x)
{
    lm_array *v = lm_array_retain(x);
    for (int k = 0; k < 5; k++) {
        lm_array *a = lm_binary_scalar(LM_OP_MUL, v, 1.01, false);
        lm_array *b = lm_binary_scalar(LM_OP_ADD, a, 0.5, false);
        lm_array_release(v);
        lm_array_release(a);
        v = b;
    }
    return v;
}

typedef struct { float *a; const float *b, *c; } tri;
static void triad(void *p, int64_t b, int64_t e)
{
    tri *t = p;
    for (int64_t i = b; i < e; i++) t->a[i] = t->b[i] + 3.0f * t->c[i];
}

static tri g_tri;
static int64_t g_n;

/* each form alternates with the triad, so load changes touch both */
static void run(const char *name, int nin, lm_array **ins, lm_array *(*fn)(lm_array **), double bytes)
{
    double t_plain, t_comp, tt1, tt2;
    BENCH_PAIR(5, t_plain, tt1, { lm_array *r = fn(ins); lm_array_eval(r); lm_array_release(r); },
               lm_cpu_parallel_for(g_n, 1 << 16, triad, &g_tri));
    lm_array *ph[4];
    for (int k = 0; k < nin; k++) ph[k] = lm_placeholder(ins[k]->ndim, ins[k]->shape, ins[k]->dtype, NULL);
    lm_array *tr = fn(ph);
    lm_compiled *c = lm_compile_graph(nin, ph, 1, &tr, LM_COMPILE_ON);
    BENCH_PAIR(5, t_comp, tt2, { lm_array *r; lm_compiled_call(c, nin, ins, &r); lm_array_eval(r); lm_array_release(r); },
               lm_cpu_parallel_for(g_n, 1 << 16, triad, &g_tri));
    double triad_gbs = 12.0 * (double)g_n / (tt1 < tt2 ? tt1 : tt2) * 1e-9;
    char key[64];
    snprintf(key, sizeof key, "%s_compiled", name);
    RESULT(key, bytes / t_comp * 1e-9, "GB/s");
    PEER(key, "stream-triad", triad_gbs, "GB/s");
    PEER(key, "lumen-uncompiled", bytes / t_plain * 1e-9, "GB/s");
    printf("INFO %s: %d kernels compiled\n", name, lm_compiled_kernels(c));
    lm_compiled_free(c);
    lm_array_release(tr);
    for (int k = 0; k < nin; k++) lm_array_release(ph[k]);
}

static lm_array *g_a, *g_b;
static lm_array *f_gelu(lm_array **in) { return gelu_chain(in[0], g_a, g_b); }
static lm_array *f_swiglu(lm_array **in) { return swiglu(in[0], in[1]); }
static lm_array *f_chain(lm_array **in) { return chain10(in[0]); }

int main(void)
{
    lm_init();
    const int64_t n = 16 << 20;
    lm_array *x = lm_random_uniform(1, &n, -1, 1, LM_F32, lm_random_key(1), NULL);
    lm_array *y = lm_random_uniform(1, &n, -1, 1, LM_F32, lm_random_key(2), NULL);
    g_a = lm_scalar(1.5, LM_F32, NULL);
    g_b = lm_scalar(0.25, LM_F32, NULL);
    lm_array_eval(x);
    lm_array_eval(y);
    float *dst = calloc((size_t)n, sizeof(float));
    g_tri = (tri){dst, lm_cpu_ptr(x), lm_cpu_ptr(y)};
    g_n = n;
    double b1 = 8.0 * (double)n, b2 = 12.0 * (double)n;
    lm_array *in1[1] = {x}, *in2[2] = {x, y};
    run("gelu_tanh_chain_16M", 1, in1, f_gelu, b1);
    run("swiglu_16M", 2, in2, f_swiglu, b2);
    run("chain10_16M", 1, in1, f_chain, b1);
    free(dst);
    return 0;
}
