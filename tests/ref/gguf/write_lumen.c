/* write_lumen.c - Lumen's side of the ggml round trip, run by hand:
 *   make build/liblumen.a
 *   cc -std=c11 -D_GNU_SOURCE -I. -Icore -o /tmp/write_lumen tests/ref/gguf/write_lumen.c \
 *      build/liblumen.a -lm -lpthread -ldl -lsleef -lvulkan -lpng16 -lz -lcjson -licuuc -licudata
 *   /tmp/write_lumen tests/ref/gguf/types.gguf /tmp/lumen.gguf
 *   /tmp/check_gguf /tmp/lumen.gguf tests/ref/gguf/types.gguf   (check_gguf.c: ggml's reader)
 * Lumen reads ggml's file, quantizes its "src" to every quantized type as
 * "lumen.<type>" and writes it all with its metadata; check_gguf then
 * compares keys and tensors with ggml's file, and its hash of each
 * lumen.<type> must equal that of ggml's q.<type>. */
#include "core/lumen.h"
#include "core/io/gguf.h"
#include "core/quant.h"
#include <stdio.h>
#include <stdlib.h>
/* Lumen reads types.gguf, requantizes src to every quantized type, writes it all */
int main(int c, char **v)
{
    (void)c;
    lm_init();
    lm_tensor_set s; lm_gguf_meta m;
    if (lm_load_gguf(v[1], &s, &m)) { printf("%s\n", lm_error_message()); return 1; }
    const char *names[64]; lm_array *arr[64]; int n = 0;
    for (int i = 0; i < s.count; i++) { names[n] = s.names[i]; arr[n++] = s.arrays[i]; }
    lm_array *src = s.arrays[lm_tensor_set_find(&s, "src")];
    static char nm[16][32];
    for (int t = LM_Q4_0; t < LM_DTYPE_END; t++) {
        snprintf(nm[t - LM_Q4_0], 32, "lumen.%s", lm_dtype_name(t));
        names[n] = nm[t - LM_Q4_0];
        arr[n++] = lm_quantize(src, t);
    }
    if (lm_save_gguf(v[2], n, names, arr, m.n, m.kv)) { printf("%s\n", lm_error_message()); return 1; }
    printf("wrote %s: %d tensors, %d keys\n", v[2], n, m.n);
    return 0;
}
