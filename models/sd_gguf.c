/* sd_gguf.c - quantized file tensors (GGUF, stable-diffusion.cpp's layout):
 * a linear weight the device multiplies quantized (QLINEAR, asked of its
 * backend) stays quantized; every other one is dequantized once here and
 * cast to the compute dtype by the model, as a float file tensor is.  The
 * key map and the rest of the reader are those of safetensors files. */
#include <string.h>
#include "backend.h"
#include "lumen.h"
#include "models/sd_parts.h"

static bool linear_weight(const entry *e);
static bool qlinear_supported(lm_device *dev, lm_array *w);

/* A quantized file tensor (GGUF): a linear weight the device multiplies
 * quantized stays so (*keep); anything else is dequantized to f32 here and
 * cast to the compute dtype by the model, as a float file tensor is. */
lm_array *lm_sds_unquantize(reader *R, const entry *e, int k, bool *keep)
{
    lm_array *a = R->set.arrays[k];
    *keep = linear_weight(e) && qlinear_supported(R->dev, a);
    if (*keep) {
        R->nkept++;
        return lm_array_retain(a);
    }
    /* once per file tensor: a fused qkv gives three entries */
    if (!R->deq[k]) {
        if (!(R->deq[k] = lm_dequantize(a))) {
            lm_error_prefix("%s: %s (%s)", R->file, e->ldm, lm_dtype_name(a->dtype));
            return NULL;
        }
        R->ndequant++;
    }
    return lm_array_retain(R->deq[k]);
}

/* Whether the model runs this table entry through lm_linear as it is (a
 * UNet or text-encoder weight [out, in] taken whole; embeddings are
 * gathered, not multiplied, and the VAE's attention is squeezed from 1x1
 * convs) */
static bool linear_weight(const entry *e)
{
    size_t n = strlen(e->dfs);
    return e->comp != C_VAE && e->xf == XF_COPY && e->nd == 2 && n > 7 &&
           !strcmp(e->dfs + n - 7, ".weight") && !strstr(e->dfs, "embedding");
}

/* Whether dev runs QLINEAR with a weight like w: asked of the backend with a
 * node of the real shapes, so a backend that learns the op (or a dtype)
 * needs no change here. */
static bool qlinear_supported(lm_device *dev, lm_array *w)
{
    int64_t xs[2] = {1, w->shape[1]};
    lm_array *x = lm_zeros(2, xs, LM_F32, w->device);
    lm_array *y = x ? lm_linear(x, w, NULL) : NULL;
    bool ok = y && y->op == LM_OP_QLINEAR && dev->backend->supports(dev, y);
    lm_array_release(y);
    lm_array_release(x);
    lm_error_clear();
    return ok;
}
