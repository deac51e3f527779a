/* sd_parts.c - what the single-file reader's parts share (sd_parts.h): the
 * components' folder names and the lookups in a file's sorted keys.  The
 * parts (sd_detect, sd_infer, sd_keymap, sd_config, sd_gguf, the writer)
 * build on it, and sd_single.c runs them in order. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "models/sd_parts.h"

const char *const lm_sds_comp_dir[C_N] = {"unet", "vae", "text_encoder", "text_encoder_2"};

int lm_sds_find(const reader *R, const char *name)
{
    int lo = 0, hi = R->set.count - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = strcmp(R->set.names[R->order[mid]], name);
        if (!c) return R->order[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

bool lm_sds_has(const reader *R, const char *fmt, ...)
{
    char k[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k, sizeof k, fmt, ap);
    va_end(ap);
    return lm_sds_find(R, k) >= 0;
}

lm_status lm_sds_probe(const reader *R, int nd, int64_t *shape, const char *fmt, ...)
{
    char k[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k, sizeof k, fmt, ap);
    va_end(ap);
    int i = lm_sds_find(R, k);
    if (i < 0) return lm_error_set(LM_ERR_FORMAT, "%s: missing key %s", R->file, k);
    const lm_array *a = R->set.arrays[i];
    if (a->ndim != nd) {
        char got[96];
        lm_shape_str(got, sizeof got, a->ndim, a->shape);
        return lm_error_set(LM_ERR_SHAPE, "%s: %s has shape %s, expected %d dimensions", R->file,
                            k, got, nd);
    }
    for (int d = 0; d < nd; d++) shape[d] = a->shape[d];
    return LM_OK;
}

int lm_sds_count(int (*find)(const void *src, const char *key), const void *src, const char *fmt,
                 const char *a)
{
    int n = 0;
    char k[256];
    for (;;) {
        snprintf(k, sizeof k, fmt, a, n);
        if (find(src, k) < 0) return n;
        n++;
    }
}

int lm_sds_find_key(const void *r, const char *key) { return lm_sds_find(r, key); }
