/* esrgan_concat.c - esrgan-thick x4 on one tile with its dense blocks'
 * concats written in place by their producers (the default) beside the
 * copying path (LUMEN_CONCAT_INPLACE=0), on the default device
 * (LUMEN_DEVICE): runs alternate between the two so that a shared
 * machine's load touches both alike; medians, spread, peak memory, and the
 * outputs checked equal byte for byte (a difference fails the run).
 *   build/bench/esrgan_concat MODEL [RUNS [TILE [DTYPE]]]
 * MODEL: a model.json or a safetensors file written by lm_tfjs_save;
 * RUNS per mode (5), TILE the input side (64), DTYPE f32 or f16. */
#include <stdlib.h>
#include <string.h>
#include "bench.h"
#include "core/lumen.h"
#include "core/random.h"
#include "models/tfjs.h"

static int fail(const char *what)
{
    fprintf(stderr, "esrgan_concat: %s: %s\n", what, lm_error_message());
    return 1;
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void set_mode(int inplace)
{
    if (inplace) unsetenv("LUMEN_CONCAT_INPLACE");
    else setenv("LUMEN_CONCAT_INPLACE", "0", 1);
}

/* one forward pass in the given mode: seconds (evaluation syncs the
 * device); the output's bytes into *out (*nout of them) when asked (caller
 * frees), the peak bytes above what was active before into *peak */
static double run(lm_tfjs_model *m, lm_array *x, int inplace, void **out, size_t *nout,
                  size_t *peak, lm_eval_stats *stats)
{
    set_mode(inplace);
    lm_device *d = lm_tfjs_device(m);
    size_t base = lm_device_memory(d).active;
    lm_device_reset_peak(d);
    double t0 = bench_now();
    lm_array *y = lm_tfjs_forward(m, x);
    if (!y || lm_array_eval(y) != LM_OK) {
        fail("forward");
        exit(1);
    }
    double t = bench_now() - t0;
    if (stats) *stats = lm_eval_last_stats();
    if (peak) *peak = lm_device_memory(d).peak - base;
    if (out) {
        *out = malloc(lm_array_nbytes(y));
        if (!*out || lm_array_read(y, *out, y->dtype) != LM_OK) {
            fail("read");
            exit(1);
        }
        *nout = lm_array_nbytes(y);
    }
    lm_array_release(y);
    return t;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: esrgan_concat MODEL [RUNS [TILE [DTYPE]]]\n");
        return 2;
    }
    int runs = argc > 2 ? atoi(argv[2]) : 5;
    int64_t tile = argc > 3 ? atoll(argv[3]) : 64;
    const char *dts = argc > 4 ? argv[4] : "f32";
    if (runs < 1 || runs > 100 || tile < 8) return 2;
    if (lm_init() != LM_OK) return fail("init");
    lm_tfjs_model *m = lm_tfjs_load(argv[1], NULL);
    if (!m) return fail("load");
    lm_dtype dt = strcmp(dts, "f16") ? LM_F32 : LM_F16;
    if (lm_tfjs_set_dtype(m, dt) != LM_OK) return fail("dtype");
    int64_t shape[4] = {1, 3, tile, tile};
    lm_array *x = lm_random_uniform(4, shape, 0, 1, dt, lm_random_key(1), lm_tfjs_device(m));
    if (!x || lm_array_eval(x) != LM_OK) return fail("input");

    /* warm-up of each mode; the outputs must agree bit for bit */
    void *a = NULL, *b = NULL;
    size_t na = 0, nb = 0, peak_on = 0, peak_off = 0;
    lm_eval_stats s_on, s_off;
    run(m, x, 1, &a, &na, &peak_on, NULL);
    run(m, x, 0, &b, &nb, &peak_off, NULL);
    /* a difference is reported, and fails the run, after the timing (a
     * device whose kernels were not deterministic would show it here) */
    size_t ndiff = na == nb ? 0 : na + nb;
    for (size_t i = 0; na == nb && i < na; i++) ndiff += ((char *)a)[i] != ((char *)b)[i];
    char same[64];
    snprintf(same, sizeof same, ndiff ? "outputs DIFFER in %zu of %zu bytes" : "outputs identical",
             ndiff, na);
    printf("INFO warm-up: %s\n", same);
    fflush(stdout);
    free(a);
    free(b);
    double on[100], off[100];
    for (int i = 0; i < runs; i++) {
        /* alternate which mode goes first */
        if (i % 2) {
            off[i] = run(m, x, 0, NULL, NULL, &peak_off, &s_off);
            on[i] = run(m, x, 1, NULL, NULL, &peak_on, &s_on);
        } else {
            on[i] = run(m, x, 1, NULL, NULL, &peak_on, &s_on);
            off[i] = run(m, x, 0, NULL, NULL, &peak_off, &s_off);
        }
    }
    qsort(on, (size_t)runs, sizeof *on, cmp_dbl);
    qsort(off, (size_t)runs, sizeof *off, cmp_dbl);
    char key[96];
    snprintf(key, sizeof key, "esrgan_thick_x4_%lldpx_%s_%s", (long long)tile, dts,
             lm_tfjs_device(m)->spec);
    printf("INFO %s: in place %.2f ms median (%.2f-%.2f), copying %.2f ms (%.2f-%.2f), %d runs "
           "each; kernels %lld vs %lld, %lld concat inputs placed; %s\n",
           key, on[runs / 2] * 1e3, on[0] * 1e3, on[runs - 1] * 1e3, off[runs / 2] * 1e3,
           off[0] * 1e3, off[runs - 1] * 1e3, runs, (long long)s_on.kernels,
           (long long)s_off.kernels, (long long)s_on.placed, same);
    RESULT(key, on[runs / 2] * 1e3, "ms");
    PEER(key, "concat-copy", off[runs / 2] * 1e3, "ms");
    snprintf(key + strlen(key), sizeof key - strlen(key), "_peak");
    RESULT(key, (double)peak_on / 1048576.0, "MB");
    PEER(key, "concat-copy", (double)peak_off / 1048576.0, "MB");
    set_mode(1);
    lm_array_release(x);
    lm_tfjs_free(m);
    return ndiff ? 1 : 0;
}
