/* fuzz_tokenizer_json.c - libFuzzer harness for the CLIP tokenizer's
 * tokenizer.json reader (transformers' save_pretrained form): the input is
 * the file.  Any input must load or fail with an error, never crash, leak or
 * read out of bounds; a tokenizer that loads encodes texts and is freed. */
#include "fuzz_tokenizer.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    fz_put("vocab.json", NULL, 0);
    fz_put("merges.txt", NULL, 0);
    fz_put("tokenizer.json", data, size);
    fz_load_and_encode(data, size);
    return 0;
}
