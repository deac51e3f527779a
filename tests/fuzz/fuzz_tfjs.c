/* fuzz_tfjs.c - libFuzzer harness for the TF.js layers loader: the input is
 * a model.json text, then a NUL byte, then the bytes every shard named in
 * its manifest reads as.  Any input must load or fail with an error, never
 * crash, leak or read out of bounds; a model that loads has its graph built
 * for a small input (not evaluated) and is freed. */
#include <string.h>
#include "core/lumen.h"
#include "models/tfjs.h"

typedef struct blob {
    const unsigned char *data;
    size_t size;
} blob;

static const void *shard(void *ctx, const char *path, size_t *size)
{
    (void)path;
    blob *b = ctx;
    *size = b->size;
    return b->data;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    const unsigned char *nul = memchr(data, 0, size);
    size_t jlen = nul ? (size_t)(nul - data) : size;
    blob b = {nul ? nul + 1 : data + size, nul ? size - jlen - 1 : 0};
    lm_tfjs_model *m = lm_tfjs_load_mem((const char *)data, jlen, "fuzz", shard, &b,
                                        lm_device_cpu());
    if (m) {
        int64_t c = lm_tfjs_in_channels(m);
        int64_t s[4] = {1, c > 0 && c <= 64 ? c : 3, 4, 4};
        lm_array *x = lm_zeros(4, s, LM_F32, lm_device_cpu());
        lm_array *y = lm_tfjs_forward(m, x);
        if (!y) lm_error_clear();
        lm_array_release(y);
        lm_array_release(x);
        lm_tfjs_free(m);
    }
    return 0;
}
