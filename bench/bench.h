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

#define RESULT(key, value, unit) printf("RESULT %s %.4g %s\n", key, (double)(value), unit)
#define PEER(key, name, value, unit) printf("PEER %s %s %.4g %s\n", key, name, (double)(value), unit)
#endif
