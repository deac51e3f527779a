/* fuzz_npy.c - libFuzzer harness for the .npy and .npz (zip) readers. */
#include <stdlib.h>
#include "core/io/io.h"
#include "core/lumen.h"

static void touch(lm_array *a)
{
    double *v = malloc(sizeof(double) * (size_t)(a->size ? a->size : 1));
    if (v && lm_array_read(a, v, LM_F64) != LM_OK) lm_error_clear();
    free(v);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    lm_array *a = lm_load_npy_mem(data, size, "fuzz");
    if (a) touch(a);
    lm_array_release(a);
    lm_tensor_set s;
    if (lm_load_npz_mem(data, size, "fuzz", &s) == LM_OK) {
        for (int i = 0; i < s.count; i++) touch(s.arrays[i]);
        lm_tensor_set_free(&s);
    }
    return 0;
}
