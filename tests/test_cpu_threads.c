/* test_cpu_threads.c - the CPU backend's thread pool: every chunk of every
 * job runs exactly once and has finished when lm_cpu_parallel_for returns,
 * over many short jobs in a row (where a worker that wakes late used to take
 * a chunk of the next job: a chunk run twice, another not yet run, and the
 * caller's context gone while a worker still used it).  The race needs a
 * preemption at one instruction, so this is a stress test: it caught the old
 * pool in about one run of three at 2-3 million jobs; samples/grayscott.lua
 * crashed in 4 of 2000 runs from it (tests/samples "seed 2 twice").
 * Then determinism: matmul, conv (every path), conv gradients, reductions,
 * norms and attention give the same bits at 1, 2, 3 and 4 threads. */
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>
#include "testutil.h"
#include "backends/cpu/cpu.h"
#include "core/grad.h"

enum { SLOTS = 64 };

typedef struct {
    _Atomic int count[SLOTS];
    int64_t job;
} ctx_t;

static void task(void *p, int64_t b, int64_t e)
{
    ctx_t *c = p;
    for (int64_t i = b; i < e; i++) {
        atomic_fetch_add(&c->count[i], 1);
    }
}

static void test_many_short_jobs(void **state)
{
    (void)state;
    assert_true(lm_cpu_threads() >= 2);
    const int64_t jobs = 1000000;   /* the race is rare: about 1 in 10^6 jobs hit it here */
    int64_t bad = 0;
    for (int64_t j = 0; j < jobs; j++) {
        ctx_t *c = calloc(1, sizeof *c);   /* a fresh context per job, as on a stack */
        c->job = j;
        int64_t n = 2 + j % (SLOTS - 1);
        lm_cpu_parallel_for(n, 1, task, c);
        for (int64_t i = 0; i < SLOTS; i++)
            if (atomic_load(&c->count[i]) != (i < n)) bad++;
        /* poison it before the next job: a straggler would count here */
        for (int64_t i = 0; i < SLOTS; i++) atomic_store(&c->count[i], 1000);
        free(c);
    }
    assert_int_equal(bad, 0);
}

/* fewer threads than workers: the idle ones must not join a job */
static void test_fewer_threads(void **state)
{
    (void)state;
    int all = lm_cpu_threads();
    lm_cpu_set_threads(1);
    ctx_t c = {0};
    lm_cpu_parallel_for(SLOTS, 1, task, &c);
    for (int i = 0; i < SLOTS; i++) assert_int_equal(atomic_load(&c.count[i]), 1);
    lm_cpu_set_threads(all);
    ctx_t d = {0};
    lm_cpu_parallel_for(SLOTS, 1, task, &d);
    for (int i = 0; i < SLOTS; i++) assert_int_equal(atomic_load(&d.count[i]), 1);
}

/* ------------------------------------------------ the same bits at any count
 *
 * Every op below runs at LUMEN_THREADS = 1, 2, 3 and 4, in child processes
 * (so OpenBLAS starts with each count too) and in this process through
 * lm_cpu_set_threads, and its result must be the same bits each time.
 * Before GEMM and conv were split by problem size, matmul 3x192x192 differed
 * in 4,097 elements between 1 and 2 threads, a 16->8 3x3 conv in 20,316. */

static lm_array *randn(int nd, const int64_t *sh, uint64_t seed)
{
    lm_array *a = lm_random_normal(nd, sh, 0, 1, LM_F32, lm_random_key(seed), NULL);
    assert_non_null(a);
    assert_int_equal(lm_array_eval(a), LM_OK);
    return a;
}

#define SH(...) (int64_t[]){__VA_ARGS__}, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t))

static lm_array *rn(const int64_t *sh, int nd, uint64_t seed) { return randn(nd, sh, seed); }

/* a op b, releasing both */
static lm_array *take2(lm_array *r, lm_array *a, lm_array *b)
{
    lm_array_release(a);
    lm_array_release(b);
    return r;
}

static lm_array *mm(const int64_t *as, int an, const int64_t *bs, int bn)
{
    lm_array *a = rn(as, an, 1), *b = rn(bs, bn, 2);
    return take2(lm_matmul(a, b), a, b);
}

static lm_array *c_mm_3x192(void) { return mm(SH(3, 192), SH(192, 192)); }
static lm_array *c_mm_b3x192(void) { return mm(SH(3, 192, 192), SH(192, 192)); }
static lm_array *c_mm_square(void) { return mm(SH(256, 256), SH(256, 256)); }
static lm_array *c_mm_odd(void) { return mm(SH(517, 301), SH(301, 389)); }
static lm_array *c_mm_tall(void) { return mm(SH(8192, 16), SH(16, 64)); }
static lm_array *c_mm_long_k(void) { return mm(SH(8, 20000), SH(20000, 8)); }
static lm_array *c_mm_wide(void) { return mm(SH(4, 64), SH(64, 6000)); }
static lm_array *c_mm_batched(void) { return mm(SH(6, 70, 90), SH(6, 90, 110)); }
static lm_array *c_mm_shared_b(void) { return mm(SH(5, 120, 64), SH(64, 300)); }

static lm_array *c_mm_transposed(void)
{
    lm_array *a = rn(SH(300, 200), 1), *b = rn(SH(250, 300), 2);
    lm_array *at = lm_transpose(a, 0, 1), *bt = lm_transpose(b, 0, 1);
    lm_array *r = lm_matmul(at, bt);   /* [200, 300] x [300, 250] */
    take2(NULL, a, b);
    return take2(r, at, bt);
}

static lm_array *c_mm_f64(void)
{
    lm_array *a = rn(SH(190, 210), 1), *b = rn(SH(210, 230), 2);
    lm_array *a64 = lm_cast(a, LM_F64), *b64 = lm_cast(b, LM_F64);
    take2(NULL, a, b);
    return take2(lm_matmul(a64, b64), a64, b64);
}

static lm_array *c_mm_f16(void)
{
    lm_array *a = rn(SH(130, 300), 1), *b = rn(SH(300, 140), 2);
    lm_array *a16 = lm_cast(a, LM_F16), *b16 = lm_cast(b, LM_F16);
    take2(NULL, a, b);
    return take2(lm_matmul(a16, b16), a16, b16);
}

static lm_array *conv(const int64_t *xs, int xn, const int64_t *ws, int wn, int64_t s, int64_t p, int64_t dil,
                      int64_t g, bool bias)
{
    (void)xn;
    (void)wn;
    lm_array *x = rn(xs, 4, 3), *w = rn(ws, 4, 4), *b = bias ? rn(ws, 1, 5) : NULL;
    int64_t st[2] = {s, s}, pd[4] = {p, p, p, p}, dl[2] = {dil, dil};
    lm_array *r = lm_conv2d(x, w, b, st, pd, dl, g);
    lm_array_release(b);
    return take2(r, x, w);
}

static lm_array *c_conv_16_8(void) { return conv(SH(2, 16, 40, 40), SH(8, 16, 3, 3), 1, 1, 1, 1, true); }
static lm_array *c_conv_1x1(void) { return conv(SH(2, 64, 30, 30), SH(32, 64, 1, 1), 1, 0, 1, 1, false); }
static lm_array *c_conv_stride(void) { return conv(SH(1, 24, 45, 47), SH(40, 24, 3, 3), 2, 1, 1, 1, true); }
static lm_array *c_conv_dilated(void) { return conv(SH(1, 20, 33, 31), SH(24, 20, 3, 3), 1, 2, 2, 1, false); }
static lm_array *c_conv_grouped(void) { return conv(SH(2, 32, 28, 28), SH(48, 8, 3, 3), 1, 1, 1, 4, false); }
static lm_array *c_conv_depthwise(void) { return conv(SH(1, 48, 50, 50), SH(48, 1, 3, 3), 1, 1, 1, 48, true); }
static lm_array *c_conv_5x5(void) { return conv(SH(1, 12, 64, 64), SH(20, 12, 5, 5), 1, 2, 1, 1, false); }
static lm_array *c_conv_wino(void) { return conv(SH(2, 32, 36, 38), SH(32, 32, 3, 3), 1, 1, 1, 1, true); }
static lm_array *c_conv_wino_big(void) { return conv(SH(1, 64, 64, 64), SH(64, 64, 3, 3), 1, 1, 1, 1, false); }
/* many channels, small images: the staged paths (the GEMMs cut into tiles
 * of M and N on the pool; nn_conv_wino.c's staged(), nn_conv.c's
 * conv_staged) */
static lm_array *c_conv_wino_staged(void) { return conv(SH(2, 256, 9, 11), SH(272, 256, 3, 3), 1, 1, 1, 1, true); }
static lm_array *c_conv_staged_s2(void) { return conv(SH(2, 160, 13, 12), SH(256, 160, 3, 3), 2, 1, 1, 1, true); }
static lm_array *c_conv_staged_1x1(void) { return conv(SH(2, 512, 7, 9), SH(520, 512, 1, 1), 1, 0, 1, 1, false); }

static lm_array *c_conv1d(void)
{
    lm_array *x = rn(SH(3, 24, 700), 3), *w = rn(SH(40, 24, 7), 4);
    int64_t pd[2] = {3, 3};
    return take2(lm_conv1d(x, w, NULL, 2, pd, 1, 1), x, w);
}

static lm_array *c_conv_transpose(void)
{
    lm_array *x = rn(SH(2, 32, 24, 24), 3), *w = rn(SH(32, 16, 4, 4), 4), *b = rn(SH(16), 5);
    int64_t st[2] = {2, 2}, pd[2] = {1, 1}, op[2] = {0, 0}, dl[2] = {1, 1};
    lm_array *r = lm_conv_transpose2d(x, w, b, st, pd, op, dl, 1);
    lm_array_release(b);
    return take2(r, x, w);
}

/* d loss / d w or d x of a conv (the weight gradient is a conv whose kernel
 * is the whole output: nn_conv_wgrad.c) */
static lm_array *conv_grad(int which)
{
    lm_array *x0 = rn(SH(4, 16, 34, 34), 3), *w0 = rn(SH(24, 16, 3, 3), 4);
    lm_array *x = lm_grad_leaf(x0), *w = lm_grad_leaf(w0);
    int64_t st[2] = {1, 1}, pd[4] = {1, 1, 1, 1}, dl[2] = {1, 1};
    lm_array *y = lm_conv2d(x, w, NULL, st, pd, dl, 1);
    lm_array *cot = rn(y->shape, y->ndim, 6);
    lm_array *in[2] = {x, w}, *g[2] = {NULL, NULL};
    assert_int_equal(lm_vjp(1, &y, &cot, 2, in, g), LM_OK);
    lm_array *keep = g[which];
    lm_array_release(g[1 - which]);
    lm_array *all[] = {cot, y, x, w, x0, w0};
    for (int i = 0; i < 6; i++) lm_array_release(all[i]);
    return keep;
}

static lm_array *c_conv_wgrad(void) { return conv_grad(1); }
static lm_array *c_conv_xgrad(void) { return conv_grad(0); }

static lm_array *red(lm_op op, const int64_t *sh, int nd, int naxes, const int *axes)
{
    lm_array *x = rn(sh, nd, 7);
    lm_array *r = lm_reduce(op, x, naxes, axes, false);
    lm_array_release(x);
    return r;
}

static lm_array *c_sum_all(void) { return red(LM_OP_SUM, SH(300007), 0, NULL); }
static lm_array *c_sum_rows(void) { return red(LM_OP_SUM, SH(3, 100003), 1, (int[]){1}); }
static lm_array *c_mean_cols(void) { return red(LM_OP_MEAN, SH(40000, 7), 1, (int[]){0}); }
static lm_array *c_lse(void) { return red(LM_OP_LOGSUMEXP, SH(2, 70001), 1, (int[]){1}); }

static lm_array *c_var(void)
{
    lm_array *x = rn(SH(3, 90001), 7);
    lm_array *r = lm_var(x, 1, (int[]){1}, 1, false);
    lm_array_release(x);
    return r;
}

static lm_array *c_argmax(void)
{
    lm_array *x = rn(SH(2, 80001), 7);
    lm_array *r = lm_argreduce(LM_OP_ARGMAX, x, 1, false);
    lm_array_release(x);
    return r;
}

static lm_array *c_cumsum(void)
{
    lm_array *x = rn(SH(64, 3000), 7);
    lm_array *r = lm_cumsum(x, 1);
    lm_array_release(x);
    return r;
}

static lm_array *c_softmax(void)
{
    lm_array *x = rn(SH(64, 5000), 8);
    lm_array *r = lm_softmax(x, 1);
    lm_array_release(x);
    return r;
}

static lm_array *c_layer_norm(void)
{
    lm_array *x = rn(SH(256, 768), 8), *w = rn(SH(768), 9);
    lm_array *r = lm_layer_norm(x, 1, w, NULL, 1e-5);
    return take2(r, x, w);
}

static lm_array *c_group_norm(void)
{
    lm_array *x = rn(SH(2, 32, 40, 40), 8);
    lm_array *r = lm_group_norm(x, 8, NULL, NULL, 1e-5);
    lm_array_release(x);
    return r;
}

static lm_array *c_attention(void)
{
    lm_array *q = rn(SH(2, 4, 128, 64), 10), *k = rn(SH(2, 4, 128, 64), 11), *v = rn(SH(2, 4, 128, 64), 12);
    lm_array *r = lm_attention(q, k, v, NULL, true, 0);
    lm_array_release(v);
    return take2(r, q, k);
}

static lm_array *c_linear(void)
{
    lm_array *x = rn(SH(3, 50, 384), 13), *w = rn(SH(512, 384), 14);
    return take2(lm_linear(x, w, NULL), x, w);
}

typedef struct { const char *name; lm_array *(*fn)(void); } det_case;

static const det_case cases[] = {
    {"matmul 3x192x192", c_mm_3x192}, {"matmul [3,192,192]x[192,192]", c_mm_b3x192}, {"matmul 256^3", c_mm_square}, {"matmul 517x301x389", c_mm_odd},
    {"matmul tall 8192x16x64", c_mm_tall}, {"matmul long K 8x20000x8", c_mm_long_k},
    {"matmul wide 4x64x6000", c_mm_wide}, {"matmul batched 6x70x90x110", c_mm_batched},
    {"matmul shared B 5x120x64x300", c_mm_shared_b}, {"matmul transposed views", c_mm_transposed},
    {"matmul f64", c_mm_f64}, {"matmul f16", c_mm_f16}, {"linear 3x50x384->512", c_linear},
    {"conv2d 16->8 3x3", c_conv_16_8}, {"conv2d 1x1", c_conv_1x1}, {"conv2d stride 2", c_conv_stride},
    {"conv2d dilated", c_conv_dilated}, {"conv2d groups 4", c_conv_grouped},
    {"conv2d depthwise", c_conv_depthwise}, {"conv2d 5x5", c_conv_5x5}, {"conv2d winograd", c_conv_wino},
    {"conv2d winograd 64ch", c_conv_wino_big}, {"conv2d winograd staged", c_conv_wino_staged},
    {"conv2d stride 2 staged", c_conv_staged_s2}, {"conv2d 1x1 staged", c_conv_staged_1x1}, {"conv1d stride 2", c_conv1d},
    {"conv_transpose2d", c_conv_transpose}, {"conv2d weight grad", c_conv_wgrad},
    {"conv2d input grad", c_conv_xgrad}, {"sum all", c_sum_all}, {"sum rows", c_sum_rows},
    {"mean cols", c_mean_cols}, {"logsumexp", c_lse}, {"var", c_var}, {"argmax", c_argmax},
    {"cumsum", c_cumsum}, {"softmax", c_softmax}, {"layer_norm", c_layer_norm},
    {"group_norm", c_group_norm}, {"attention causal 128x64", c_attention},
};
enum { NCASES = sizeof cases / sizeof cases[0] };

/* every case's result as doubles (f32/f16/i64 convert exactly) */
typedef struct { int64_t n[NCASES]; double *v[NCASES]; } det_run;

static void det_compute(det_run *r)
{
    for (int i = 0; i < NCASES; i++) {
        lm_array *a = cases[i].fn();
        assert_non_null(a);
        assert_int_equal(lm_array_eval(a), LM_OK);
        r->n[i] = a->size;
        r->v[i] = malloc(sizeof(double) * (size_t)(a->size ? a->size : 1));
        assert_int_equal(lm_array_read(a, r->v[i], LM_F64), LM_OK);
        lm_array_release(a);
    }
}

static void det_free(det_run *r)
{
    for (int i = 0; i < NCASES; i++) free(r->v[i]);
}

/* how many cases differ from the reference run, each named on stderr */
static int det_compare(const det_run *ref, const det_run *r, const char *what)
{
    int bad = 0;
    for (int i = 0; i < NCASES; i++) {
        if (r->n[i] != ref->n[i]) {
            fprintf(stderr, "%s: %s: %lld elements, %lld at 1 thread\n", what, cases[i].name,
                    (long long)r->n[i], (long long)ref->n[i]);
            bad++;
            continue;
        }
        int64_t diff = 0;
        double worst = 0;
        for (int64_t k = 0; k < r->n[i]; k++)
            if (memcmp(&r->v[i][k], &ref->v[i][k], sizeof(double))) {
                diff++;
                double d = fabs(r->v[i][k] - ref->v[i][k]);
                if (d > worst || d != d) worst = d;
            }
        if (diff) {
            fprintf(stderr, "%s: %s: %lld of %lld elements differ from 1 thread (max %.3g)\n", what,
                    cases[i].name, (long long)diff, (long long)r->n[i], worst);
            bad++;
        }
    }
    return bad;
}

/* --dump FILE: the child's side, every result in case order */
static int det_dump(const char *path)
{
    if (lm_init() != LM_OK) return 1;
    lm_device_set_default(lm_device_cpu());
    det_run r = {0};
    det_compute(&r);
    FILE *f = fopen(path, "wb");
    if (!f) return 1;
    for (int i = 0; i < NCASES; i++) {
        fwrite(&r.n[i], sizeof r.n[i], 1, f);
        fwrite(r.v[i], sizeof(double), (size_t)r.n[i], f);
    }
    det_free(&r);
    return fclose(f) == 0 ? 0 : 1;
}

static void det_load(const char *path, det_run *r)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    for (int i = 0; i < NCASES; i++) {
        assert_int_equal(fread(&r->n[i], sizeof r->n[i], 1, f), 1);
        r->v[i] = malloc(sizeof(double) * (size_t)(r->n[i] ? r->n[i] : 1));
        assert_int_equal(fread(r->v[i], sizeof(double), (size_t)r->n[i], f), (size_t)r->n[i]);
    }
    fclose(f);
}

extern char **environ;

/* this program again with LUMEN_THREADS=threads, writing its results to path */
static void det_child(int threads, const char *path)
{
    int n = 0;
    while (environ[n]) n++;
    char **env = calloc((size_t)n + 2, sizeof *env);
    char var[32];
    snprintf(var, sizeof var, "LUMEN_THREADS=%d", threads);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (strncmp(environ[i], "LUMEN_THREADS=", 14) && strncmp(environ[i], "OPENBLAS_NUM_THREADS=", 21))
            env[k++] = environ[i];
    env[k++] = var;
    char exe[] = "/proc/self/exe", flag[] = "--dump";
    char *argv[] = {exe, flag, (char *)path, NULL};
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execve(exe, argv, env);
        _exit(127);
    }
    free(env);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* LUMEN_THREADS=1..4, each a fresh process: GEMM, conv and reductions give
 * the same bits (OpenBLAS is loaded with each count as well) */
static void test_same_bits_child_processes(void **state)
{
    (void)state;
    char dir[] = "/tmp/lumen-threads.XXXXXX";
    assert_non_null(mkdtemp(dir));
    det_run runs[4];
    memset(runs, 0, sizeof runs);
    char path[4][64];
    for (int t = 1; t <= 4; t++) {
        snprintf(path[t - 1], sizeof path[t - 1], "%s/t%d", dir, t);
        det_child(t, path[t - 1]);
        det_load(path[t - 1], &runs[t - 1]);
        unlink(path[t - 1]);
    }
    rmdir(dir);
    int bad = 0;
    for (int t = 2; t <= 4; t++) {
        char what[32];
        snprintf(what, sizeof what, "LUMEN_THREADS=%d", t);
        bad += det_compare(&runs[0], &runs[t - 1], what);
    }
    for (int t = 0; t < 4; t++) det_free(&runs[t]);
    assert_int_equal(bad, 0);
}

/* the same in this process, the pool resized between runs */
static void test_same_bits_resized_pool(void **state)
{
    (void)state;
    int all = lm_cpu_threads();
    lm_cpu_set_threads(1);
    det_run ref = {0};
    det_compute(&ref);
    int bad = 0;
    for (int t = 2; t <= (all < 4 ? all : 4); t++) {
        lm_cpu_set_threads(t);
        det_run r = {0};
        det_compute(&r);
        char what[48];
        snprintf(what, sizeof what, "lm_cpu_set_threads(%d)", t);
        bad += det_compare(&ref, &r, what);
        det_free(&r);
    }
    lm_cpu_set_threads(all);
    det_free(&ref);
    assert_int_equal(bad, 0);
}

static int setup(void **state)
{
    (void)state;
    setenv("LUMEN_THREADS", "4", 0);   /* more threads than this machine's cores widens the window */
    if (lm_init() != LM_OK) return -1;
    lm_device_set_default(lm_device_cpu());
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--dump")) return det_dump(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many_short_jobs),
        cmocka_unit_test(test_fewer_threads),
        cmocka_unit_test(test_same_bits_child_processes),
        cmocka_unit_test(test_same_bits_resized_pool),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
