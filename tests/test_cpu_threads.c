/* test_cpu_threads.c - the CPU backend's thread pool: every chunk of every
 * job runs exactly once and has finished when lm_cpu_parallel_for returns,
 * over many short jobs in a row (where a worker that wakes late used to take
 * a chunk of the next job: a chunk run twice, another not yet run, and the
 * caller's context gone while a worker still used it).  The race needs a
 * preemption at one instruction, so this is a stress test: it caught the old
 * pool in about one run of three at 2-3 million jobs; samples/grayscott.lua
 * crashed in 4 of 2000 runs from it (tests/samples "seed 2 twice"). */
#include <stdatomic.h>
#include "testutil.h"
#include "backends/cpu/cpu.h"

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

static int setup(void **state)
{
    (void)state;
    setenv("LUMEN_THREADS", "4", 0);   /* more threads than this machine's cores widens the window */
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many_short_jobs),
        cmocka_unit_test(test_fewer_threads),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
