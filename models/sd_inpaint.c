/* sd_inpaint.c - the mask's preparation, PIL's Gaussian blur, the latents'
 * blend and the masked image for inpainting (sd_inpaint.h). */
#include "models/sd_inpaint.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "error.h"
#include "ops.h"

void lm_sd_mask_free(lm_sd_mask *m)
{
    if (!m) return;
    free(m->soft);
    free(m->bin);
    memset(m, 0, sizeof *m);
}

/* A float in 0..1 as the 8-bit value a PNG of it holds */
static uint8_t to_u8(float v)
{
    if (!(v > 0)) return 0;
    if (v >= 1) return 255;
    return (uint8_t)lrintf(v * 255.0f);
}

/* The box radius whose three passes give a Gaussian of standard deviation
 * radius: the extended box of Gwosdek et al. (integer part l, fractional
 * part a), in single precision as PIL computes it. */
static float box_radius(float radius, int passes)
{
    float sigma2 = radius * radius / (float)passes;
    float L = (float)sqrt(12.0 * sigma2 + 1.0);
    float l = (float)floor((L - 1.0) / 2.0);
    float a = (2 * l + 1) * (l * (l + 1) - 3 * sigma2);
    a /= 6 * (sigma2 - (l + 1) * (l + 1));
    return l + a;
}

/* One extended box blur of n pixels at stride st, from in to out (distinct):
 * the 2r+1 pixels around each weighted ww / 2^24, the two beyond them fw / 2^24
 * (the fractional part), the edges repeated, rounded to 8 bits. */
static void box_line(const uint8_t *in, uint8_t *out, int64_t n, float R)
{
    int64_t r = (int64_t)R;
    uint32_t ww = (uint32_t)((float)(1 << 24) / (R * 2 + 1));
    uint32_t fw = (uint32_t)(((1u << 24) - (uint32_t)(r * 2 + 1) * ww) / 2);
    for (int64_t x = 0; x < n; x++) {
        uint64_t acc = 0;
        for (int64_t k = x - r; k <= x + r; k++) acc += in[k < 0 ? 0 : k >= n ? n - 1 : k];
        int64_t a = x - r - 1, b = x + r + 1;
        uint64_t far = (uint64_t)in[a < 0 ? 0 : a] + in[b >= n ? n - 1 : b];
        uint64_t bulk = acc * ww + far * fw;
        out[x] = (uint8_t)((bulk + (1u << 23)) >> 24);
    }
}

void lm_sd_mask_blur_u8(uint8_t *px, int64_t H, int64_t W, double radius)
{
    if (!(radius > 0) || H < 1 || W < 1) return;
    float R = box_radius((float)radius, 3);
    int64_t n = H > W ? H : W;
    uint8_t *a = malloc((size_t)n), *b = malloc((size_t)n);
    if (!a || !b) {
        free(a);
        free(b);
        return;
    }
    for (int64_t y = 0; y < H; y++) {   /* the rows' three passes */
        memcpy(a, px + y * W, (size_t)W);
        for (int p = 0; p < 3; p++) {
            box_line(a, b, W, R);
            memcpy(a, b, (size_t)W);
        }
        memcpy(px + y * W, a, (size_t)W);
    }
    for (int64_t x = 0; x < W; x++) {   /* then the columns' */
        for (int64_t y = 0; y < H; y++) a[y] = px[y * W + x];
        for (int p = 0; p < 3; p++) {
            box_line(a, b, H, R);
            memcpy(a, b, (size_t)H);
        }
        for (int64_t y = 0; y < H; y++) px[y * W + x] = a[y];
    }
    free(a);
    free(b);
}

lm_status lm_sd_mask_prepare(lm_array *mask, double blur, const char *who, lm_sd_mask *m)
{
    memset(m, 0, sizeof *m);
    if (!mask || (mask->ndim != 2 && mask->ndim != 3) || (mask->ndim == 3 && (mask->shape[0] < 1 ||
                                                                             mask->shape[0] > 4)))
        return lm_error_set(LM_ERR_SHAPE, "%s: mask: expected [H,W] or [C,H,W] with C 1 to 4 (gray, "
                            "gray+alpha, RGB, RGBA)%s", who, mask ? "" : ", got none");
    if (!(blur >= 0 && blur <= 256))
        return lm_error_set(LM_ERR_ARG, "%s: mask blur %g: expected 0 (none) to 256 pixels", who, blur);
    int64_t C = mask->ndim == 3 ? mask->shape[0] : 1, H = mask->shape[mask->ndim - 2],
            W = mask->shape[mask->ndim - 1], n = H * W;
    if (H < 1 || W < 1) return lm_error_set(LM_ERR_SHAPE, "%s: mask: empty (%lldx%lld)", who,
                                            (long long)W, (long long)H);
    float *v = malloc(sizeof *v * (size_t)(C * n));
    uint8_t *g = malloc((size_t)n);
    m->soft = malloc(sizeof *m->soft * (size_t)n);
    m->bin = malloc(sizeof *m->bin * (size_t)n);
    lm_status st = LM_OK;
    if (!v || !g || !m->soft || !m->bin) {
        st = lm_error_set(LM_ERR_NOMEM, "%s: mask: out of memory", who);
        goto done;
    }
    if ((st = lm_array_read(mask, v, LM_F32)) != LM_OK) {
        lm_error_prefix("%s: mask", who);
        goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        if (C < 3) {
            g[i] = to_u8(v[i]);
        } else {   /* PIL's L = R * 299/1000 + G * 587/1000 + B * 114/1000 in 16-bit fixed point */
            uint32_t r = to_u8(v[i]), gr = to_u8(v[n + i]), b = to_u8(v[2 * n + i]);
            g[i] = (uint8_t)((r * 19595 + gr * 38470 + b * 7471 + 0x8000) >> 16);
        }
    }
    lm_sd_mask_blur_u8(g, H, W, blur);
    for (int64_t i = 0; i < n; i++) {
        m->soft[i] = (float)g[i] / 255.0f;
        m->bin[i] = m->soft[i] >= 0.5f ? 1.0f : 0.0f;
    }
    m->H = H, m->W = W;
done:
    free(v);
    free(g);
    if (st != LM_OK) lm_sd_mask_free(m);
    return st;
}

lm_array *lm_sd_mask_latents(const lm_sd_mask *m, int64_t h, int64_t w, lm_device *dev)
{
    float *v = malloc(sizeof *v * (size_t)(h * w));
    if (!v) {
        lm_error_set(LM_ERR_NOMEM, "inpaint: out of memory");
        return NULL;
    }
    /* torch's nearest: src = min(floor(dst * (in / out)), in - 1), the scale in f32 */
    float sy = (float)m->H / (float)h, sx = (float)m->W / (float)w;
    for (int64_t y = 0; y < h; y++) {
        int64_t iy = (int64_t)floorf((float)y * sy);
        if (iy > m->H - 1) iy = m->H - 1;
        for (int64_t x = 0; x < w; x++) {
            int64_t ix = (int64_t)floorf((float)x * sx);
            if (ix > m->W - 1) ix = m->W - 1;
            v[y * w + x] = m->bin[iy * m->W + ix];
        }
    }
    int64_t shape[4] = {1, 1, h, w};
    lm_array *r = lm_from_data(4, shape, LM_F32, v, dev);
    free(v);
    return r;
}

lm_array *lm_sd_mask_pixels(const lm_sd_mask *m, bool soft, lm_device *dev)
{
    int64_t shape[4] = {1, 1, m->H, m->W};
    return lm_from_data(4, shape, LM_F32, soft ? m->soft : m->bin, dev);
}

lm_array *lm_sd_inpaint_blend(lm_array *x, lm_array *keep, lm_array *m)
{
    /* diffusers: (1 - init_mask) * init_latents_proper + init_mask * latents */
    lm_array *inv = lm_binary_scalar(LM_OP_SUB, m, 1, true);
    lm_array *a = inv ? lm_binary(LM_OP_MUL, inv, keep) : NULL;
    lm_array *b = a ? lm_binary(LM_OP_MUL, m, x) : NULL;
    lm_array *r = b ? lm_binary(LM_OP_ADD, a, b) : NULL;
    lm_array_release(inv);
    lm_array_release(a);
    lm_array_release(b);
    return r;
}

lm_array *lm_sd_inpaint_masked_image(lm_array *init, lm_array *bin)
{
    /* diffusers: (2 x - 1) * (mask < 0.5); in 0..1 that is x where kept, 0.5 where repainted */
    lm_array *inv = lm_binary_scalar(LM_OP_SUB, bin, 1, true);
    lm_array *a = inv ? lm_binary(LM_OP_MUL, init, inv) : NULL;
    lm_array *h = a ? lm_binary_scalar(LM_OP_MUL, bin, 0.5, false) : NULL;
    lm_array *r = h ? lm_binary(LM_OP_ADD, a, h) : NULL;
    lm_array_release(inv);
    lm_array_release(a);
    lm_array_release(h);
    return r;
}
