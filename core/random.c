/* random.c - Philox-4x32-10 (Salmon et al., "Parallel random numbers: as
 * easy as 1, 2, 3") keyed, counter-based generation. */
#include <math.h>
#include "internal.h"
#include "random.h"

static lm_key global_key = {{0x2545f491u, 0x4f6cdd1du}};
static uint64_t global_counter;

static inline uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t *hi)
{
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

void lm_philox4x32(const lm_key *key, uint64_t counter, uint32_t out[4])
{
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = key->k[0], k1 = key->k[1];
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = mulhilo(0xD2511F53u, c0, &hi0);
        uint32_t lo1 = mulhilo(0xCD9E8D57u, c2, &hi1);
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

lm_key lm_random_key(uint64_t seed)
{
    lm_key k = {{(uint32_t)seed, (uint32_t)(seed >> 32)}};
    return k;
}

void lm_random_split(lm_key key, int n, lm_key *out)
{
    for (int i = 0; i < n; i++) {
        uint32_t w[4];
        lm_philox4x32(&key, ((uint64_t)1 << 63) | (uint64_t)i, w);
        out[i].k[0] = w[0];
        out[i].k[1] = w[1];
    }
}

void lm_random_seed(uint64_t seed)
{
    global_key = lm_random_key(seed);
    global_counter = 0;
}

lm_key lm_random_next_key(void)
{
    uint32_t w[4];
    lm_key k;
    lm_philox4x32(&global_key, ((uint64_t)1 << 62) | global_counter++, w);
    k.k[0] = w[0];
    k.k[1] = w[1];
    return k;
}

float lm_random_uniform01(const lm_key *key, uint64_t i)
{
    uint32_t w[4];
    lm_philox4x32(key, i >> 2, w);
    return (float)(w[i & 3] >> 8) * (1.0f / 16777216.0f);
}

float lm_random_normal01(const lm_key *key, uint64_t i)
{
    uint32_t w[4];
    lm_philox4x32(key, i >> 2, w);
    int p = (int)(i & 2);
    float u1 = ((float)(w[p] >> 8) + 1.0f) * (1.0f / 16777216.0f);   /* (0, 1] */
    float u2 = (float)(w[p + 1] >> 8) * (1.0f / 16777216.0f);
    float r = sqrtf(-2.0f * logf(u1));
    float t = 6.2831853071795864f * u2;
    return (i & 1) ? r * sinf(t) : r * cosf(t);
}

static lm_array *random_node(lm_op op, int ndim, const int64_t *shape, double a, double b,
                             lm_dtype dt, lm_key key, lm_device *dev)
{
    if (!lm_dtype_is_float(dt)) {
        lm_error_set(LM_ERR_DTYPE, "%s: dtype must be a float type, got %s", lm_op_name(op), lm_dtype_name(dt));
        return NULL;
    }
    lm_params p = {0};
    p.f[0] = a;
    p.f[1] = b;
    p.i[0] = key.k[0];
    p.i[1] = key.k[1];
    return lm_node_new(op, dt, ndim, shape, 0, NULL, &p, dev);
}

lm_array *lm_random_uniform(int ndim, const int64_t *shape, double lo, double hi,
                            lm_dtype dt, lm_key key, lm_device *dev)
{
    if (!(lo <= hi)) {
        lm_error_set(LM_ERR_ARG, "uniform: low %g is above high %g", lo, hi);
        return NULL;
    }
    return random_node(LM_OP_RANDOM_UNIFORM, ndim, shape, lo, hi, dt, key, dev);
}

lm_array *lm_random_normal(int ndim, const int64_t *shape, double mean, double std,
                           lm_dtype dt, lm_key key, lm_device *dev)
{
    if (!(std >= 0)) {
        lm_error_set(LM_ERR_ARG, "normal: std must be >= 0, got %g", std);
        return NULL;
    }
    return random_node(LM_OP_RANDOM_NORMAL, ndim, shape, mean, std, dt, key, dev);
}
