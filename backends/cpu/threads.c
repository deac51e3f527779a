/* threads.c - a small pool for the CPU kernels.
 *
 * One job at a time: the caller publishes (fn, ctx, n, chunk), workers and
 * the caller take chunks with an atomic counter, and the caller waits until
 * every chunk is done.  Nested calls from inside a task run inline.
 *
 * A worker joins a job under the lock (job.active) and leaves it under the
 * lock; the next job is published only when no worker is inside the last
 * one.  Without that, a worker woken for one job but slow to start could
 * take a chunk from the job's counter after the caller had published the
 * next: it then ran the next job's function with a stale chunk, counted it
 * as finished, and the caller returned (its ctx gone from the stack) while
 * chunks still ran. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#include "cpu.h"

#define MAX_THREADS 256

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER, done_cv = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t job_mu = PTHREAD_MUTEX_INITIALIZER;   /* one job at a time */
static int nthreads = 1, nworkers, started;
static pthread_t workers[MAX_THREADS];
static _Thread_local int in_task;

static struct {
    lm_cpu_task fn;
    void *ctx;
    int64_t n, chunk, nchunks;
    int64_t next;       /* atomic: next chunk */
    int64_t finished;   /* chunks done, under mu */
    int active;         /* workers inside run_chunks, under mu */
    uint64_t generation;
} job;

static void run_chunks(void)
{
    for (;;) {
        int64_t c = __atomic_fetch_add(&job.next, 1, __ATOMIC_ACQ_REL);
        if (c >= job.nchunks) break;
        int64_t b = c * job.chunk, e = b + job.chunk < job.n ? b + job.chunk : job.n;
        job.fn(job.ctx, b, e);
        pthread_mutex_lock(&mu);
        if (++job.finished == job.nchunks) pthread_cond_signal(&done_cv);
        pthread_mutex_unlock(&mu);
    }
}

static void *worker(void *arg)
{
    int index = (int)(intptr_t)arg;
    uint64_t seen = 0;
    in_task = 1;
    pthread_mutex_lock(&mu);
    for (;;) {
        while (job.generation == seen) pthread_cond_wait(&wake, &mu);
        seen = job.generation;
        if (index >= nthreads - 1) continue;   /* lm_cpu_set_threads idles us */
        job.active++;
        pthread_mutex_unlock(&mu);
        run_chunks();
        pthread_mutex_lock(&mu);
        if (--job.active == 0) pthread_cond_signal(&done_cv);
    }
    return NULL;
}

static void start_pool(void)
{
    if (started) return;
    started = 1;
    const char *env = getenv("LUMEN_THREADS");
    long n = env ? strtol(env, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    if (n > MAX_THREADS) n = MAX_THREADS;
    nthreads = (int)n;
    for (int i = 0; i < nthreads - 1; i++) {
        if (pthread_create(&workers[i], NULL, worker, (void *)(intptr_t)i) != 0) break;
        pthread_detach(workers[i]);
        nworkers++;
    }
    nthreads = nworkers + 1;   /* what we really got */
}

int lm_cpu_threads(void)
{
    start_pool();
    return nthreads;
}

void lm_cpu_set_threads(int n)
{
    start_pool();
    /* workers stay; fewer threads simply means smaller splits */
    if (n < 1) n = 1;
    if (n > nworkers + 1) n = nworkers + 1;
    nthreads = n;
}

void lm_cpu_parallel_for(int64_t n, int64_t grain, lm_cpu_task fn, void *ctx)
{
    if (n <= 0) return;
    start_pool();
    if (grain < 1) grain = 1;
    if (in_task || nthreads == 1 || n <= grain) {
        fn(ctx, 0, n);
        return;
    }
    /* a few chunks per thread balance uneven work without much overhead */
    int64_t chunks = (int64_t)nthreads * 4;
    int64_t chunk = (n + chunks - 1) / chunks;
    if (chunk < grain) chunk = grain;
    pthread_mutex_lock(&job_mu);
    pthread_mutex_lock(&mu);
    while (job.active) pthread_cond_wait(&done_cv, &mu);   /* stragglers of the last job */
    job.fn = fn;
    job.ctx = ctx;
    job.n = n;
    job.chunk = chunk;
    job.nchunks = (n + chunk - 1) / chunk;
    job.next = 0;
    job.finished = 0;
    if (nthreads > 1) {
        job.generation++;
        pthread_cond_broadcast(&wake);
    }
    pthread_mutex_unlock(&mu);
    in_task = 1;
    run_chunks();
    in_task = 0;
    pthread_mutex_lock(&mu);
    while (job.finished < job.nchunks) pthread_cond_wait(&done_cv, &mu);
    pthread_mutex_unlock(&mu);
    pthread_mutex_unlock(&job_mu);
}
