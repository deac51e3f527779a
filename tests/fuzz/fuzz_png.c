/* fuzz_png.c - libFuzzer harness for the PNG reader (libpng underneath):
 * decoding, the size plausibility guard, text chunks and conversions. */
#include "core/io/io.h"
#include "core/lumen.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    lm_png_opts o;
    lm_png_opts_init(&o);
    lm_tensor_set text = {0};
    lm_array_release(lm_png_read_mem(data, size, "fuzz", &o, &text));
    lm_tensor_set_free(&text);
    if (size > 0 && data[size - 1] & 1) {   /* the other layout and a float dtype */
        o.layout = LM_LAYOUT_HWC;
        o.dtype = LM_F16;
        o.has_dtype = true;
        lm_array_release(lm_png_read_mem(data, size, "fuzz", &o, NULL));
    }
    return 0;
}
