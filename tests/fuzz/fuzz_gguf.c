/* fuzz_gguf.c - libFuzzer harness for the GGUF reader: any input must load
 * or fail with an error, never crash, leak or read out of bounds; loaded
 * tensors are read back (quantized ones dequantized) so every byte they
 * claim is touched, and the typed metadata is walked. */
#include <stdlib.h>
#include "core/io/gguf.h"
#include "core/lumen.h"
#include "core/quant.h"

static void touch(lm_array *a)
{
    if (a->size > (1 << 22)) return;   /* a claim the file backs, but slow to read */
    lm_array *f = lm_dequantize(a);
    float *v = malloc(sizeof(float) * (size_t)(a->size ? a->size : 1));
    if (!f || !v || lm_array_read(f, v, LM_F32) != LM_OK) lm_error_clear();
    free(v);
    lm_array_release(f);
}

static uint64_t walk(const lm_gguf_value *v)
{
    uint64_t h = v->type;
    if (v->type == LM_GGUF_STRING) for (uint64_t i = 0; i < v->str.len; i++) h += (unsigned char)v->str.s[i];
    if (v->type == LM_GGUF_ARRAY) for (uint64_t i = 0; i < v->arr.n; i++) h += walk(&v->arr.items[i]);
    return h;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    static int inited;
    if (!inited) { lm_init(); inited = 1; }
    lm_tensor_set s;
    lm_gguf_meta m;
    if (lm_load_gguf_mem(data, size, "fuzz", &s, &m) == LM_OK) {
        volatile uint64_t h = 0;
        for (int i = 0; i < m.n; i++) h += walk(&m.kv[i].v);
        for (int i = 0; i < s.count; i++) touch(s.arrays[i]);
        lm_gguf_meta_free(&m);
        lm_tensor_set_free(&s);
    }
    return 0;
}
