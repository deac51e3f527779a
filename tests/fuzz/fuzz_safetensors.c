/* fuzz_safetensors.c - libFuzzer harness for the safetensors reader: any
 * input must load or fail with an error, never crash, leak or read out of
 * bounds; loaded tensors are read back so every byte they claim is touched. */
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
    lm_tensor_set s;
    if (lm_load_safetensors_mem(data, size, "fuzz", &s) == LM_OK) {
        for (int i = 0; i < s.count; i++) touch(s.arrays[i]);
        lm_tensor_set_free(&s);
    }
    return 0;
}
