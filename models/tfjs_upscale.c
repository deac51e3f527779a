/* tfjs_upscale.c - images of any size through a TF.js upscaler: tiling
 * with context around each tile, alpha, value ranges (finding the model
 * and its range: tfjs_find.c).
 *
 * Each tile is cut with `overlap` pixels of real image around it (fewer at
 * the image's edges, where TF's zero padding is what the untiled run sees
 * too), run through the model alone, and only its centre kept, so the
 * model's working memory is that of one tile and seams stay below what an
 * 8-bit pixel can show (tests/models/upscale.sh holds tiled against
 * untiled). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lumen.h"
#include "tfjs.h"

#define DEFAULT_OVERLAP 16

void lm_upscale_opts_init(lm_upscale_opts *o)
{
    memset(o, 0, sizeof *o);
    o->overlap = -1;
    o->range = 1;
}

/* One tile: rows [y0, y1) x cols [x0, x1) of the input, cut with its
 * context (rows [cy0, cy1) x cols [cx0, cx1)). */
typedef struct tile {
    int64_t y0, y1, x0, x1, cy0, cy1, cx0, cx1;
} tile;

static tile tile_at(int64_t H, int64_t W, int64_t y0, int64_t y1, int64_t x0, int64_t x1,
                    int64_t ov)
{
    tile t = {y0, y1, x0, x1, y0 - ov < 0 ? 0 : y0 - ov, y1 + ov > H ? H : y1 + ov,
              x0 - ov < 0 ? 0 : x0 - ov, x1 + ov > W ? W : x1 + ov};
    return t;
}

/* Cuts tile t with its context, uploads it and queues the model over it
 * (lm_eval_async): the result, still running on an asynchronous device,
 * or NULL with the error set. */
static lm_array *tile_submit(lm_tfjs_model *m, const float *rgb, int64_t H, int64_t W,
                             const tile *t, double range)
{
    int64_t h = t->cy1 - t->cy0, w = t->cx1 - t->cx0;
    float *crop = malloc((size_t)(3 * h * w) * sizeof *crop);
    if (!crop) {
        lm_error_set(LM_ERR_NOMEM, "upscale: out of memory for a %lldx%lld tile", (long long)h,
                     (long long)w);
        return NULL;
    }
    for (int c = 0; c < 3; c++)
        for (int64_t y = 0; y < h; y++)
            for (int64_t x = 0; x < w; x++)
                crop[(c * h + y) * w + x] =
                    (float)(rgb[(c * H + t->cy0 + y) * W + t->cx0 + x] * range);
    int64_t shape[4] = {1, 3, h, w};
    lm_array *xin = lm_from_data(4, shape, LM_F32, crop, lm_tfjs_device(m));
    free(crop);
    lm_array *y = xin ? lm_tfjs_forward(m, xin) : NULL;
    lm_array_release(xin);
    if (y && lm_eval_async(&y, 1) != LM_OK) {
        lm_array_release(y);
        y = NULL;
    }
    if (!y && !lm_error_status()) lm_error_set(LM_ERR_DEVICE, "upscale: the model failed");
    return y;
}

/* Reads tile t's result y (waiting for it) and writes its centre into out
 * (3 planes of H*s x W*s). */
static lm_status tile_finish(lm_array *y, int64_t H, int64_t W, const tile *t, double range,
                             int64_t s, float *out)
{
    int64_t rh = (t->cy1 - t->cy0) * s, rw = (t->cx1 - t->cx0) * s;
    float *res = malloc((size_t)(3 * rh * rw) * sizeof *res);
    if (!res)
        return lm_error_set(LM_ERR_NOMEM, "upscale: out of memory for a %lldx%lld tile",
                            (long long)rh, (long long)rw);
    lm_status st = lm_array_read(y, res, LM_F32);
    if (st != LM_OK) {
        free(res);
        return lm_error_status() ? lm_error_status() : LM_ERR_DEVICE;
    }
    int64_t OH = H * s, OW = W * s;
    float inv = (float)(1.0 / range);
    for (int c = 0; c < 3; c++)
        for (int64_t oy = t->y0 * s; oy < t->y1 * s; oy++) {
            const float *src = res + (c * rh + oy - t->cy0 * s) * rw + (t->x0 - t->cx0) * s;
            float *dst = out + (c * OH + oy) * OW + t->x0 * s;
            for (int64_t k = 0; k < (t->x1 - t->x0) * s; k++) dst[k] = src[k] * inv;
        }
    free(res);
    return LM_OK;
}

static lm_status upscale_alpha(const float *alpha, int64_t H, int64_t W, int64_t s, float *out)
{
    int64_t shape[4] = {1, 1, H, W};
    double sc[2] = {(double)s, (double)s};
    lm_array *a = lm_from_data(4, shape, LM_F32, alpha, lm_device_cpu());
    lm_array *u = lm_upsample(a, NULL, sc, LM_UPSAMPLE_BILINEAR, false);
    lm_status st = u ? lm_array_read(u, out, LM_F32) : lm_error_status();
    lm_array_release(a);
    lm_array_release(u);
    return st;
}

lm_array *lm_tfjs_upscale(lm_tfjs_model *m, lm_array *img, const lm_upscale_opts *opts)
{
    lm_upscale_opts o;
    if (opts) o = *opts;
    else lm_upscale_opts_init(&o);
    char sh[96];
    if (!m || !img) {
        lm_error_set(LM_ERR_ARG, "upscale: NULL model or image");
        return NULL;
    }
    int64_t s = lm_tfjs_scale(m);
    if (img->ndim != 3 || img->shape[0] < 1 || img->shape[0] > 4) {
        lm_error_set(LM_ERR_SHAPE, "upscale: image %s, expected [C, H, W] with C 1..4",
                     lm_shape_str(sh, sizeof sh, img->ndim, img->shape));
        return NULL;
    }
    if (s < 1 || lm_tfjs_in_channels(m) != 3 || lm_tfjs_out_channels(m) != 3) {
        lm_error_set(LM_ERR_UNSUPPORTED, "upscale: model '%s' is not an RGB upscaler (%lld -> %lld "
                     "channels, scale %lld)", lm_tfjs_name(m), (long long)lm_tfjs_in_channels(m),
                     (long long)lm_tfjs_out_channels(m), (long long)s);
        return NULL;
    }
    int64_t C = img->shape[0], H = img->shape[1], W = img->shape[2];
    int64_t ov = o.overlap < 0 ? DEFAULT_OVERLAP : o.overlap;
    int64_t T = o.tile > 0 ? o.tile : (H > W ? H : W);
    double range = o.range > 0 ? o.range : 1;
    bool alpha = C == 2 || C == 4;
    float *pix = malloc((size_t)(C * H * W + 3 * H * W) * sizeof *pix + 1);
    if (!pix) {
        lm_error_set(LM_ERR_NOMEM, "upscale: out of memory for a %lldx%lld image", (long long)H,
                     (long long)W);
        return NULL;
    }
    lm_array *out = NULL;
    if (lm_array_read(img, pix, LM_F32) != LM_OK) goto fail;
    /* the colour planes; gray is repeated into RGB */
    float *rgb = pix;
    if (C <= 2) {
        rgb = pix + C * H * W;
        for (int c = 0; c < 3; c++) memcpy(rgb + c * H * W, pix, (size_t)(H * W) * sizeof *pix);
    }
    int64_t oshape[3] = {alpha ? 4 : 3, H * s, W * s};
    out = lm_zeros(3, oshape, LM_F32, lm_device_cpu());
    if (!out || lm_array_eval(out) != LM_OK) goto fail;
    float *dst = (float *)out->buf->host + out->offset;
    /* Tile k+1 is cut, uploaded and queued before tile k is read back, so
     * on an asynchronous device (Vulkan) the host's part of one tile runs
     * while the GPU computes the previous one.  The same graphs run on the
     * same inputs: the pixels are those of one tile after the other. */
    int64_t ny = (H + T - 1) / T, nx = (W + T - 1) / T, done = 0;
    lm_array *prev = NULL;
    tile pt = {0};
    for (int64_t k = 0; k <= ny * nx; k++) {
        lm_array *y = NULL;
        tile t = {0};
        if (k < ny * nx) {
            int64_t y0 = k / nx * T, x0 = k % nx * T;
            t = tile_at(H, W, y0, y0 + T > H ? H : y0 + T, x0, x0 + T > W ? W : x0 + T, ov);
            if (!(y = tile_submit(m, rgb, H, W, &t, range))) {
                lm_error_prefix("upscale: tile at (%lld, %lld)", (long long)t.y0, (long long)t.x0);
                lm_array_release(prev);
                goto fail;
            }
        }
        if (prev) {
            lm_status st = tile_finish(prev, H, W, &pt, range, s, dst);
            lm_array_release(prev);
            if (st != LM_OK) {
                lm_error_prefix("upscale: tile at (%lld, %lld)", (long long)pt.y0, (long long)pt.x0);
                lm_array_release(y);
                goto fail;
            }
            if (o.progress) o.progress(o.progress_ctx, ++done, ny * nx);
        }
        prev = y;
        pt = t;
    }
    if (alpha && upscale_alpha(pix + (C - 1) * H * W, H, W, s, dst + 3 * H * s * W * s) != LM_OK)
        goto fail;
    free(pix);
    return out;
fail:
    free(pix);
    lm_array_release(out);
    return NULL;
}
