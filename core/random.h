/* random.h - counter-based random numbers (Philox-4x32-10).
 *
 * Element i of a random tensor is a pure function of (key, i), so the same
 * key gives the same tensor on every backend and every thread count.  Keys
 * are explicit values; lm_random_split derives independent keys as JAX does.
 * lm_random_next_key draws from a process-wide generator that lm_random_seed
 * resets (what lm.seed and unkeyed lm.rand use). */
#ifndef LM_RANDOM_H
#define LM_RANDOM_H

#include <stdint.h>
#include "array.h"
#include "device.h"

typedef struct lm_key { uint32_t k[2]; } lm_key;

lm_key lm_random_key(uint64_t seed);
void lm_random_split(lm_key key, int n, lm_key *out);
void lm_random_seed(uint64_t seed);
lm_key lm_random_next_key(void);

/* uniform in [lo, hi) and normal(mean, std); float dtypes only */
lm_array *lm_random_uniform(int ndim, const int64_t *shape, double lo, double hi,
                            lm_dtype dt, lm_key key, lm_device *dev);
lm_array *lm_random_normal(int ndim, const int64_t *shape, double mean, double std,
                           lm_dtype dt, lm_key key, lm_device *dev);

/* The generator itself, for backends: 4 words from (key, counter). */
void lm_philox4x32(const lm_key *key, uint64_t counter, uint32_t out[4]);
/* Element i as the kernels compute it: uniform in [0,1) from word (i%4) of
 * block i/4, and a standard normal by Box-Muller on the block's word pairs. */
float lm_random_uniform01(const lm_key *key, uint64_t i);
float lm_random_normal01(const lm_key *key, uint64_t i);

#endif
