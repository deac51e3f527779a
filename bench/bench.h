/* bench.h - timing helpers for bench/bench_*.c.  A benchmark prints
 *   RESULT <key> <value> <unit>          Lumen's figure
 *   PEER <key> <peer-name> <value> <unit> a peer measured in the same run
 * and bench/report.py lines them up with ratios.  Units: GFLOP/s, GB/s
 * (higher is better), ms, us (lower is better), MB (reported only). */
#ifndef LM_BENCH_H
#define LM_BENCH_H
#include <stdio.h>
#include <time.h>

static inline double bench_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* best of `reps` timings of an expression (seconds) */
#define BENCH_BEST(reps, out, ...) do { \
    double best_ = 1e30; \
    for (int r_ = 0; r_ < (reps); r_++) { \
        double t0_ = bench_now(); \
        __VA_ARGS__; \
        double dt_ = bench_now() - t0_; \
        if (dt_ < best_) best_ = dt_; \
    } \
    (out) = best_; \
} while (0)

/* best of `reps` timings of A and of B, run alternately, so that the load
 * of a shared machine changing during the run touches both alike (a
 * figure and its peer) */
#define BENCH_PAIR(reps, ta, tb, A, B) do { \
    double ba_ = 1e30, bb_ = 1e30; \
    for (int r_ = 0; r_ < (reps); r_++) { \
        double t0_ = bench_now(); \
        A; \
        double t1_ = bench_now(); \
        B; \
        double t2_ = bench_now(); \
        if (t1_ - t0_ < ba_) ba_ = t1_ - t0_; \
        if (t2_ - t1_ < bb_) bb_ = t2_ - t1_; \
    } \
    (ta) = ba_; \
    (tb) = bb_; \
} while (0)

#define RESULT(key, value, unit) printf("RESULT %s %.4g %s\n", key, (double)(value), unit)
#define PEER(key, name, value, unit) printf("PEER %s %s %.4g %s\n", key, name, (double)(value), unit)
#endif
