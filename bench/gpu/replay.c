/* replay.c - the host cost of a compiled model call with its recorded
 * command buffer replayed (core/replay.c) beside the same call recorded
 * afresh (LUMEN_VK_REPLAY=0), on the default device.
 *   build/bench/vkreplay MODEL [RUNS [SIZE [DTYPE]]]
 * MODEL: an esrgan model.json (lm_tfjs_load); RUNS per mode (9), SIZE the
 * input side (128), DTYPE f16 (default) or f32.  The model's forward pass
 * is compiled once (lm_compile_graph on a placeholder); calls alternate
 * between the modes so a shared machine's load touches both alike.  Per
 * call: "host" is the wall time until the call and lm_eval_async return
 * (the work queued, not waited for), "cpu" the calling thread's CPU time in
 * that span (on lavapipe the kernels run on the driver's threads, so this
 * is the host's own cost), "wall" the time until the device is idle.
 * Medians [min-max] after 2 warm-up calls per mode (the first call of a
 * signature runs the ordinary way, the second records); the outputs of the
 * two modes must agree byte for byte (a difference fails the run). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/lumen.h"
#include "core/compile.h"
#include "core/random.h"
#include "core/replay.h"
#include "models/tfjs.h"

static double now(clockid_t c)
{
    struct timespec t;
    clock_gettime(c, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int die(const char *what)
{
    fprintf(stderr, "vkreplay: %s: %s\n", what, lm_error_message());
    return 1;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct { double host, cpu, wall; } sample;

/* one call in the given mode; the output's bytes into *out when asked */
static int one_call(lm_compiled *c, lm_array *x, lm_device *d, bool replay, sample *s, void **out, size_t *nout)
{
    if (replay) unsetenv("LUMEN_VK_REPLAY");
    else setenv("LUMEN_VK_REPLAY", "0", 1);
    if (lm_device_sync(d) != LM_OK) return die("sync");
    double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID);
    lm_array *y = NULL;
    if (lm_compiled_call(c, 1, &x, &y) != 1 || lm_eval_async(&y, 1) != LM_OK) return die("call");
    s->host = now(CLOCK_MONOTONIC) - w0;
    s->cpu = now(CLOCK_THREAD_CPUTIME_ID) - c0;
    if (lm_device_sync(d) != LM_OK) return die("sync");
    s->wall = now(CLOCK_MONOTONIC) - w0;
    if (out) {
        *nout = lm_array_nbytes(y);
        *out = malloc(*nout);
        if (!*out || lm_array_read(y, *out, y->dtype) != LM_OK) return die("read");
    }
    lm_array_release(y);
    return 0;
}

static void report(const char *key, const char *mode, sample *s, int n)
{
    double h[100], c[100], w[100];
    for (int i = 0; i < n; i++) { h[i] = s[i].host; c[i] = s[i].cpu; w[i] = s[i].wall; }
    qsort(h, (size_t)n, sizeof *h, cmp);
    qsort(c, (size_t)n, sizeof *c, cmp);
    qsort(w, (size_t)n, sizeof *w, cmp);
    printf("RESULT %s %s host %.3f [%.3f-%.3f] ms cpu %.3f [%.3f-%.3f] ms wall %.3f [%.3f-%.3f] ms\n", key, mode,
           h[n / 2], h[0], h[n - 1], c[n / 2], c[0], c[n - 1], w[n / 2], w[0], w[n - 1]);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: vkreplay MODEL [RUNS [SIZE [DTYPE]]]\n");
        return 2;
    }
    int runs = argc > 2 ? atoi(argv[2]) : 9;
    int64_t size = argc > 3 ? atoll(argv[3]) : 128;
    const char *dts = argc > 4 ? argv[4] : "f16";
    if (runs < 1 || runs > 100 || size < 4) return 2;
    if (lm_init() != LM_OK) return die("init");
    lm_tfjs_model *m = lm_tfjs_load(argv[1], NULL);
    if (!m) return die("load");
    lm_dtype dt = strcmp(dts, "f32") ? LM_F16 : LM_F32;
    if (lm_tfjs_set_dtype(m, dt) != LM_OK) return die("dtype");
    lm_device *d = lm_tfjs_device(m);
    int64_t shape[4] = {1, 3, size, size};
    lm_array *x = lm_random_uniform(4, shape, 0, 1, dt, lm_random_key(1), d);
    lm_array *ph = lm_placeholder(4, shape, dt, d);
    lm_array *traced = lm_tfjs_forward(m, ph);
    if (!x || lm_array_eval(x) != LM_OK || !traced) return die("input");
    lm_compiled *c = lm_compile_graph(1, &ph, 1, &traced, LM_COMPILE_ON);
    if (!c) return die("compile");
    sample s_on[100], s_off[100], warm;
    void *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    /* warm-up: the ordinary first call and the recording call of each mode */
    for (int i = 0; i < 2; i++)
        if (one_call(c, x, d, false, &warm, i ? &b : NULL, &nb) || one_call(c, x, d, true, &warm, i ? &a : NULL, &na))
            return 1;
    int64_t rep0 = lm_replay_replayed_count();
    for (int i = 0; i < runs; i++) {
        bool first_on = i % 2 == 0;
        if (one_call(c, x, d, first_on, first_on ? &s_on[i] : &s_off[i], NULL, NULL) ||
            one_call(c, x, d, !first_on, first_on ? &s_off[i] : &s_on[i], NULL, NULL))
            return 1;
    }
    size_t ndiff = na == nb ? 0 : na + nb;
    for (size_t i = 0; na == nb && i < na; i++) ndiff += ((char *)a)[i] != ((char *)b)[i];
    char key[96];
    snprintf(key, sizeof key, "esrgan_%s_%lldpx_%s_%s", lm_tfjs_name(m), (long long)size, dts, d->spec);
    printf("INFO %s on %s: %d kernels per call, %d runs per mode; replayed %lld timed calls, %lld recorded "
           "(in the warm-up); outputs %s\n",
           key, d->name, lm_compiled_kernels(c), runs, (long long)(lm_replay_replayed_count() - rep0),
           (long long)lm_replay_recorded_count(), ndiff ? "DIFFER" : "identical");
    report(key, "replay", s_on, runs);
    report(key, "no-replay", s_off, runs);
    free(a);
    free(b);
    lm_compiled_free(c);
    lm_array_release(traced);
    lm_array_release(ph);
    lm_array_release(x);
    lm_tfjs_free(m);
    return ndiff ? 1 : 0;
}
