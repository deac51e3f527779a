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

lm_status lm_sd_mask_prepare(lm_array *mask, double blur, int64_t th, int64_t tw, const char *who,
                             lm_sd_mask *m)
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
    lm_status st = LM_OK;
    if (!v || !g) {
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
    if (th > 0 && tw > 0 && (th != H || tw != W)) {   /* then resized to the image's size */
        uint8_t *r = malloc((size_t)(th * tw));
        if (!r) {
            st = lm_error_set(LM_ERR_NOMEM, "%s: mask: out of memory", who);
            goto done;
        }
        if ((st = lm_sd_resize_lanczos_u8(g, 1, H, W, r, th, tw)) != LM_OK) {
            free(r);
            lm_error_prefix("%s: mask", who);
            goto done;
        }
        free(g);
        g = r;
        H = th, W = tw, n = th * tw;
    }
    m->soft = malloc(sizeof *m->soft * (size_t)n);
    m->bin = malloc(sizeof *m->bin * (size_t)n);
    if (!m->soft || !m->bin) {
        st = lm_error_set(LM_ERR_NOMEM, "%s: mask: out of memory", who);
        goto done;
    }
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

/* ---- A1111's "Only masked" ---- */

#define RS_BITS 22   /* PIL's fixed point: 8 bits of result, 2 of headroom */

static double sinc(double x)
{
    if (x == 0.0) return 1.0;
    x *= M_PI;
    return sin(x) / x;
}

static double lanczos(double x) { return -3.0 <= x && x < 3.0 ? sinc(x) * sinc(x / 3) : 0.0; }

/* PIL's coefficients for in -> out samples: per output, the first input and
 * the count (bounds), and ksize fixed-point weights (k) */
static int rs_coeffs(int64_t in, double in0, double in1, int64_t out, int64_t **bounds, int32_t **k)
{
    double scale = (in1 - in0) / (double)out, fs = scale < 1.0 ? 1.0 : scale, support = 3.0 * fs;
    int ksize = (int)ceil(support) * 2 + 1;
    double *w = malloc(sizeof *w * (size_t)ksize);
    *bounds = malloc(sizeof **bounds * 2 * (size_t)out);
    *k = calloc((size_t)(out * ksize), sizeof **k);
    if (!w || !*bounds || !*k) {
        free(w);
        return 0;
    }
    for (int64_t o = 0; o < out; o++) {
        double center = in0 + ((double)o + 0.5) * scale, sum = 0.0;
        int64_t lo = (int64_t)(center - support + 0.5), hi = (int64_t)(center + support + 0.5);
        if (lo < 0) lo = 0;
        if (hi > in) hi = in;
        int64_t n = hi - lo;
        for (int64_t x = 0; x < n; x++) sum += (w[x] = lanczos(((double)(x + lo) - center + 0.5) / fs));
        for (int64_t x = 0; x < n; x++) {
            double v = sum != 0.0 ? w[x] / sum : w[x];
            (*k)[o * ksize + x] = (int32_t)(v < 0 ? -0.5 + v * (1 << RS_BITS) : 0.5 + v * (1 << RS_BITS));
        }
        (*bounds)[2 * o] = lo;
        (*bounds)[2 * o + 1] = n;
    }
    free(w);
    return ksize;
}

static uint8_t rs_clip(int32_t ss)
{
    int32_t v = ss >> RS_BITS;   /* arithmetic: a negative sum is 0 */
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* one axis: n lines of in samples (the box [in0, in1) of them) at stride
 * `step` between samples and `line` between lines, to out samples */
static lm_status rs_pass(const uint8_t *src, uint8_t *dst, int64_t n, int64_t in, double in0, double in1,
                         int64_t out, int64_t sstep, int64_t sline, int64_t dstep, int64_t dline)
{
    int64_t *b = NULL;
    int32_t *k = NULL;
    int ks = rs_coeffs(in, in0, in1, out, &b, &k);
    if (!ks) {
        free(b);
        free(k);
        return lm_error_set(LM_ERR_NOMEM, "resize: out of memory");
    }
    for (int64_t l = 0; l < n; l++)
        for (int64_t o = 0; o < out; o++) {
            int32_t ss = 1 << (RS_BITS - 1);
            const int32_t *kk = k + o * ks;
            for (int64_t x = 0; x < b[2 * o + 1]; x++) ss += (int32_t)src[l * sline + (b[2 * o] + x) * sstep] * kk[x];
            dst[l * dline + o * dstep] = rs_clip(ss);
        }
    free(b);
    free(k);
    return LM_OK;
}

lm_status lm_sd_resize_lanczos_u8(const uint8_t *in, int64_t C, int64_t ih, int64_t iw, uint8_t *out,
                                  int64_t oh, int64_t ow)
{
    if (C < 1 || ih < 1 || iw < 1 || oh < 1 || ow < 1)
        return lm_error_set(LM_ERR_ARG, "resize: %lldx%lld to %lldx%lld: empty", (long long)iw, (long long)ih,
                            (long long)ow, (long long)oh);
    uint8_t *t = malloc((size_t)(C * ih * ow));
    if (!t) return lm_error_set(LM_ERR_NOMEM, "resize: out of memory");
    lm_status st = LM_OK;
    for (int64_t c = 0; c < C && st == LM_OK; c++) {
        const uint8_t *s = in + c * ih * iw;
        uint8_t *h = t + c * ih * ow, *d = out + c * oh * ow;
        /* PIL skips an axis whose size does not change */
        if (ow != iw) st = rs_pass(s, h, ih, iw, 0, (double)iw, ow, 1, iw, 1, ow);
        else memcpy(h, s, (size_t)(ih * iw));
        if (st != LM_OK) break;
        if (oh != ih) st = rs_pass(h, d, ow, ih, 0, (double)ih, oh, ow, 1, ow, 1);
        else memcpy(d, h, (size_t)(ih * ow));
    }
    free(t);
    return st;
}

bool lm_sd_mask_crop_region(const uint8_t *g, int64_t H, int64_t W, int64_t ph, int64_t pw, int64_t pad,
                            int64_t box[4])
{
    int64_t left = W, right = -1, top = H, bottom = -1;
    for (int64_t y = 0; y < H; y++)
        for (int64_t x = 0; x < W; x++)
            if (g[y * W + x]) {
                if (x < left) left = x;
                if (x > right) right = x;
                if (y < top) top = y;
                if (y > bottom) bottom = y;
            }
    if (right < 0) return false;
    /* padded, within the image */
    int64_t x1 = left - pad > 0 ? left - pad : 0, y1 = top - pad > 0 ? top - pad : 0;
    int64_t x2 = right + 1 + pad < W ? right + 1 + pad : W, y2 = bottom + 1 + pad < H ? bottom + 1 + pad : H;
    /* grown to the processing size's aspect (pw:ph): the short side by
     * int(the missing length), half before (floor), the rest after, pushed
     * back inside the image */
    double ratio_crop = (double)(x2 - x1) / (double)(y2 - y1), ratio = (double)pw / (double)ph;
    if (ratio_crop > ratio) {
        int64_t diff = (int64_t)((double)(x2 - x1) / ratio - (double)(y2 - y1));
        y1 -= diff >= 0 ? diff / 2 : -((-diff + 1) / 2);
        y2 += diff - (diff >= 0 ? diff / 2 : -((-diff + 1) / 2));
        if (y2 >= H) {
            int64_t d = y2 - H;
            y2 -= d;
            y1 -= d;
        }
        if (y1 < 0) {
            y2 -= y1;
            y1 = 0;
        }
        if (y2 >= H) y2 = H;
    } else {
        int64_t diff = (int64_t)((double)(y2 - y1) * ratio - (double)(x2 - x1));
        x1 -= diff >= 0 ? diff / 2 : -((-diff + 1) / 2);
        x2 += diff - (diff >= 0 ? diff / 2 : -((-diff + 1) / 2));
        if (x2 >= W) {
            int64_t d = x2 - W;
            x2 -= d;
            x1 -= d;
        }
        if (x1 < 0) {
            x2 -= x1;
            x1 = 0;
        }
        if (x2 >= W) x2 = W;
    }
    box[0] = x1, box[1] = y1, box[2] = x2, box[3] = y2;
    return true;
}

/* src [C][sh][sw] pasted into dst [C][H][W] at (ox, oy), clipped */
static void paste(const uint8_t *src, int64_t C, int64_t sh, int64_t sw, uint8_t *dst, int64_t H, int64_t W,
                  int64_t ox, int64_t oy)
{
    for (int64_t c = 0; c < C; c++)
        for (int64_t y = 0; y < sh; y++) {
            if (y + oy < 0 || y + oy >= H) continue;
            for (int64_t x = 0; x < sw; x++)
                if (x + ox >= 0 && x + ox < W) dst[(c * H + y + oy) * W + x + ox] = src[(c * sh + y) * sw + x];
        }
}

/* a band of n lines resampled from the zero-length box at `at` of r's
 * [C][h][w] along one axis (PIL's resize with an empty box: the lines
 * nearest it, Lanczos-weighted), pasted into dst at (ox, oy) */
static lm_status band(const uint8_t *r, int64_t C, int64_t h, int64_t w, bool rows, int64_t at, int64_t n,
                      uint8_t *dst, int64_t H, int64_t W, int64_t ox, int64_t oy)
{
    int64_t bh = rows ? n : h, bw = rows ? w : n;
    uint8_t *b = malloc((size_t)(C * bh * bw));
    if (!b) return lm_error_set(LM_ERR_NOMEM, "inpaint: out of memory");
    lm_status st = LM_OK;
    for (int64_t c = 0; c < C && st == LM_OK; c++)
        st = rows ? rs_pass(r + c * h * w, b + c * bh * bw, w, h, (double)at, (double)at, n, w, 1, w, 1)
                  : rs_pass(r + c * h * w, b + c * bh * bw, h, w, (double)at, (double)at, n, 1, w, 1, n);
    if (st == LM_OK) paste(b, C, bh, bw, dst, H, W, ox, oy);
    free(b);
    return st;
}

/* diffusers' resize_mode "fill" (crop) of [C][ih][iw] to [C][H][W] */
static lm_status resize_mode(const uint8_t *in, int64_t C, int64_t ih, int64_t iw, uint8_t *out, int64_t H,
                             int64_t W, bool fill)
{
    double ratio = (double)W / (double)H, src = (double)iw / (double)ih;
    int64_t sw = (fill ? ratio < src : ratio > src) ? W : iw * H / ih;
    int64_t sh = (fill ? ratio >= src : ratio <= src) ? H : ih * W / iw;
    uint8_t *r = malloc((size_t)(C * sh * sw));
    if (!r) return lm_error_set(LM_ERR_NOMEM, "inpaint: out of memory");
    lm_status st = lm_sd_resize_lanczos_u8(in, C, ih, iw, r, sh, sw);
    memset(out, 0, (size_t)(C * H * W));
    if (st == LM_OK) paste(r, C, sh, sw, out, H, W, W / 2 - sw / 2, H / 2 - sh / 2);
    if (st == LM_OK && fill && ratio < src && H / 2 - sh / 2 > 0) {
        int64_t f = H / 2 - sh / 2;
        st = band(r, C, sh, sw, true, 0, f, out, H, W, 0, 0);
        if (st == LM_OK) st = band(r, C, sh, sw, true, sh, f, out, H, W, 0, f + sh);
    } else if (st == LM_OK && fill && ratio > src && W / 2 - sw / 2 > 0) {
        int64_t f = W / 2 - sw / 2;
        st = band(r, C, sh, sw, false, 0, f, out, H, W, 0, 0);
        if (st == LM_OK) st = band(r, C, sh, sw, false, sw, f, out, H, W, f + sw, 0);
    }
    free(r);
    return st;
}

/* a's values in 0..1 as the 8-bit values a PNG of them holds (malloc'd),
 * or NULL with the error set */
static uint8_t *read_u8(lm_array *a)
{
    float *v = malloc(sizeof *v * (size_t)a->size);
    uint8_t *r = malloc((size_t)a->size);
    if (!v || !r) lm_error_set(LM_ERR_NOMEM, "inpaint: out of memory");
    else if (lm_array_read(a, v, LM_F32) == LM_OK) {
        for (int64_t i = 0; i < a->size; i++) r[i] = to_u8(v[i]);
        free(v);
        return r;
    }
    free(v);
    free(r);
    return NULL;
}

/* f32 [C,H,W] in 0..1 of 8-bit planes */
static lm_array *u8_array(const uint8_t *v, int64_t B, int64_t C, int64_t H, int64_t W, lm_device *dev)
{
    int64_t n = (B ? B : 1) * C * H * W;   /* B 0: one image [C,H,W] */
    float *f = malloc(sizeof *f * (size_t)n);
    if (!f) {
        lm_error_set(LM_ERR_NOMEM, "inpaint: out of memory");
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) f[i] = (float)v[i] / 255.0f;
    int64_t s4[4] = {B, C, H, W};
    lm_array *a = lm_from_data(B ? 4 : 3, B ? s4 : s4 + 1, LM_F32, f, dev);
    free(f);
    return a;
}

lm_array *lm_sd_image_resize(lm_array *img, int64_t h, int64_t w, lm_device *dev)
{
    if (!img || (img->ndim != 3 && img->ndim != 4) || img->shape[img->ndim - 3] != 3) {
        lm_error_set(LM_ERR_SHAPE, "resize: expected an image [3,H,W] or [B,3,H,W]");
        return NULL;
    }
    if (h < 1 || w < 1 || h > (1 << 16) || w > (1 << 16)) {
        lm_error_set(LM_ERR_ARG, "resize: %lldx%lld: expected 1 to 65536 pixels a side", (long long)w,
                     (long long)h);
        return NULL;
    }
    int64_t B = img->ndim == 4 ? img->shape[0] : 1, H = img->shape[img->ndim - 2],
            W = img->shape[img->ndim - 1];
    uint8_t *in = read_u8(img), *out = in ? malloc((size_t)(B * 3 * h * w)) : NULL;
    lm_array *r = NULL;
    if (in && !out) lm_error_set(LM_ERR_NOMEM, "resize: out of memory");
    else if (in) {
        lm_status st = LM_OK;
        for (int64_t b = 0; b < B && st == LM_OK; b++)
            st = lm_sd_resize_lanczos_u8(in + b * 3 * H * W, 3, H, W, out + b * 3 * h * w, h, w);
        if (st == LM_OK) r = u8_array(out, img->ndim == 4 ? B : 0, 3, h, w, dev);
    }
    free(in), free(out);
    return r;
}

lm_array *lm_sd_inpaint_crop(const lm_sd_inpaint_crop_args *a, lm_sd_inpaint_gen_fn gen, void *ctx)
{
    lm_sd_mask m = {0};
    uint8_t *im = NULL, *g = NULL, *ci = NULL, *cg = NULL, *ri = NULL, *rg = NULL, *gen8 = NULL, *back = NULL,
            *canvas = NULL;
    float *gv = NULL;
    lm_array *init2 = NULL, *mask2 = NULL, *img = NULL, *pasted = NULL, *init = NULL, *soft = NULL, *r = NULL;
    if (!a || !a->init || !a->mask || a->init->ndim != 3 || a->init->shape[0] != 3) {
        lm_error_set(LM_ERR_ARG, "generate: inpainting only the masked area needs an init image [3,H,W] and "
                     "a mask (--init, --mask; Lua init=, mask=)");
        return NULL;
    }
    int64_t pad = a->pad;
    if (pad < 0 || pad > 65536) {
        lm_error_set(LM_ERR_ARG, "generate: inpaint padding %lld: expected 0 to 65536 pixels", (long long)pad);
        return NULL;
    }
    /* H x W the init's (and the result's), PH x PW the processing size */
    int64_t H = a->init->shape[1], W = a->init->shape[2], box[4];
    int64_t PH = a->ph > 0 ? a->ph : H, PW = a->pw > 0 ? a->pw : W;
    if (lm_sd_mask_prepare(a->mask, a->blur, H, W, "generate", &m) != LM_OK) return NULL;
    if (!(im = read_u8(a->init))) goto done;
    if (!(g = malloc((size_t)(H * W)))) {
        lm_error_set(LM_ERR_NOMEM, "generate: out of memory");
        goto done;
    }
    for (int64_t i = 0; i < H * W; i++) g[i] = to_u8(m.soft[i]);
    if (!lm_sd_mask_crop_region(g, H, W, PH, PW, pad, box)) {
        lm_error_set(LM_ERR_ARG, "generate: the mask has no white pixel: nothing to inpaint");
        goto done;
    }
    int64_t cw = box[2] - box[0], ch = box[3] - box[1];
    ci = malloc((size_t)(3 * ch * cw));
    cg = malloc((size_t)(ch * cw));
    ri = malloc((size_t)(3 * PH * PW));
    rg = malloc((size_t)(PH * PW));
    if (!ci || !cg || !ri || !rg) {
        lm_error_set(LM_ERR_NOMEM, "generate: out of memory");
        goto done;
    }
    for (int64_t c = 0; c < 3; c++)
        for (int64_t y = 0; y < ch; y++)
            memcpy(ci + (c * ch + y) * cw, im + (c * H + y + box[1]) * W + box[0], (size_t)cw);
    for (int64_t y = 0; y < ch; y++) memcpy(cg + y * cw, g + (y + box[1]) * W + box[0], (size_t)cw);
    if (resize_mode(ci, 3, ch, cw, ri, PH, PW, true) != LM_OK ||
        resize_mode(cg, 1, ch, cw, rg, PH, PW, true) != LM_OK)
        goto done;
    lm_device *dev = a->dev;
    if (!(init2 = u8_array(ri, 0, 3, PH, PW, dev)) || !(mask2 = u8_array(rg, 0, 1, PH, PW, dev))) goto done;
    if (!(img = gen(ctx, init2, mask2))) goto done;
    /* each image as diffusers' 8-bit PIL image, resized into the box ("crop"
     * mode) on black, then the overlay */
    int64_t B = img->shape[0];
    gv = malloc(sizeof *gv * (size_t)(B * 3 * PH * PW));
    gen8 = malloc((size_t)(3 * PH * PW));
    back = malloc((size_t)(3 * ch * cw));
    canvas = calloc((size_t)(B * 3 * H * W), 1);
    if (!gv || !gen8 || !back || !canvas) {
        lm_error_set(LM_ERR_NOMEM, "generate: out of memory");
        goto done;
    }
    if (lm_array_read(img, gv, LM_F32) != LM_OK) goto done;
    for (int64_t b = 0; b < B; b++) {
        for (int64_t i = 0; i < 3 * PH * PW; i++) gen8[i] = (uint8_t)lrintf(gv[b * 3 * PH * PW + i] * 255.0f);
        if (resize_mode(gen8, 3, PH, PW, back, ch, cw, false) != LM_OK) goto done;
        paste(back, 3, ch, cw, canvas + b * 3 * H * W, H, W, box[0], box[1]);
    }
    if (!(pasted = u8_array(canvas, B, 3, H, W, dev)) || !(init = lm_cast(a->init, LM_F32)) ||
        !(soft = lm_sd_mask_pixels(&m, true, dev)))
        goto done;
    r = lm_sd_inpaint_blend(pasted, init, soft);
    if (r && lm_eval(&r, 1) != LM_OK) {
        lm_array_release(r);
        r = NULL;
    }
done:
    lm_sd_mask_free(&m);
    free(im), free(g), free(ci), free(cg), free(ri), free(rg), free(gen8), free(back), free(canvas);
    free(gv);
    lm_array_release(init2), lm_array_release(mask2), lm_array_release(img), lm_array_release(pasted);
    lm_array_release(init), lm_array_release(soft);
    return r;
}
