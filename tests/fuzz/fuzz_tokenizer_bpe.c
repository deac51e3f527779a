/* fuzz_tokenizer_bpe.c - libFuzzer harness for the CLIP tokenizer's
 * vocab.json + merges.txt readers (as SD checkpoints ship them): the input is
 * vocab.json, a NUL byte, then merges.txt.  Any input must load or fail with
 * an error, never crash, leak or read out of bounds; a tokenizer that loads
 * encodes texts and is freed. */
#include "fuzz_tokenizer.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    const unsigned char *nul = memchr(data, 0, size);
    size_t vlen = nul ? (size_t)(nul - data) : size;
    fz_put("tokenizer.json", NULL, 0);
    fz_put("vocab.json", data, vlen);
    fz_put("merges.txt", nul ? nul + 1 : data + size, nul ? size - vlen - 1 : 0);
    fz_load_and_encode(data, size);
    return 0;
}
