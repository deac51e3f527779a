/* sd_hires.c - A1111's hires fix: base generation, upscale, img2img at the
 * target size (sd_hires.h). */
#include "models/sd_hires.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "error.h"
#include "ops.h"
#include "ops_nn.h"
#include "models/tfjs.h"

void lm_sd_hires_opts_init(lm_sd_hires_opts *h)
{
    memset(h, 0, sizeof *h);
    h->scale = 2;
    h->denoise = 0.7;
    h->upscaler = "latent";
}

int lm_sd_hires_latent_mode(const char *name)
{
    if (!name || !strcmp(name, "latent") || !strcmp(name, "latent-bilinear")) return 2;
    if (!strcmp(name, "latent-nearest")) return 1;
    return 0;
}

const char *lm_sd_hires_upscaler_a1111(const char *name)
{
    switch (lm_sd_hires_latent_mode(name)) {
    case 2: return "Latent";
    case 1: return "Latent (nearest)";
    default: return name;
    }
}

lm_status lm_sd_hires_target(const lm_sd_hires_opts *h, int64_t base_w, int64_t base_h,
                             int64_t vae_scale, int64_t *w, int64_t *hgt)
{
    if (h->steps && lm_sd_option_check_int(LM_SD_OPT_STEPS, "hires fix", "steps", h->steps))
        return lm_error_status();
    if (lm_sd_option_check_num(LM_SD_OPT_STRENGTH, "hires fix", "denoise", h->denoise))
        return lm_error_status();
    int64_t W, H;
    if (h->width > 0 || h->height > 0) {
        /* A1111's "Resize width/height to": one of them 0 keeps the aspect */
        W = h->width > 0 ? h->width : (int64_t)((double)h->height * (double)base_w / (double)base_h);
        H = h->height > 0 ? h->height : (int64_t)((double)h->width * (double)base_h / (double)base_w);
    } else {
        if (!(h->scale > 0 && h->scale <= 16))
            return lm_error_set(LM_ERR_ARG, "hires fix: scale %g: expected a number in (0, 16]", h->scale);
        W = (int64_t)((double)base_w * h->scale);
        H = (int64_t)((double)base_h * h->scale);
    }
    /* A1111's latent modes work at target // 8 latents: the size rounds down */
    W -= W % vae_scale;
    H -= H % vae_scale;
    if (W < vae_scale || H < vae_scale || W > (1 << 16) || H > (1 << 16))
        return lm_error_set(LM_ERR_ARG, "hires fix: target size %lldx%lld (from a base of %lldx%lld): "
                            "expected %lld to 65536 pixels each way", (long long)W, (long long)H,
                            (long long)base_w, (long long)base_h, (long long)vae_scale);
    *w = W;
    *hgt = H;
    return LM_OK;
}

/* The model for a base of bw x bh to W x H: the smallest of the package's
 * scales (2, 3, 4, 8) that reaches the target, else the first it has */
static lm_status model_find(const char *name, int64_t bw, int64_t bh, int64_t W, int64_t H,
                            lm_tfjs_found *f)
{
    double need = (double)W / (double)bw;
    if ((double)H / (double)bh > need) need = (double)H / (double)bh;
    static const int tries[] = {2, 3, 4, 8};
    for (int i = 0; i < 4; i++) {
        if (tries[i] < need && i < 3) continue;
        if (lm_tfjs_find(name, tries[i], f) == LM_OK) return LM_OK;
        lm_error_clear();
    }
    for (int i = 0; i < 4; i++) {
        if (lm_tfjs_find(name, tries[i], f) == LM_OK) return LM_OK;
        if (i < 3) lm_error_clear();
    }
    return lm_error_prefix("hires fix: upscaler %s", name);
}

/* the base images [B,3,h,w] through the model f, resized to W x H:
 * [B,3,H,W] f32 on dev, in 0..1 */
static lm_array *model_upscale(const lm_sd_hires_opts *h, const lm_tfjs_found *fp, lm_array *img,
                               int64_t W, int64_t H, lm_device *dev)
{
    lm_tfjs_found f = *fp;
    lm_tfjs_model *m = lm_tfjs_load(f.path, dev);
    if (!m) {
        lm_error_prefix("hires fix: upscaler");
        return NULL;
    }
    double range = f.range;
    const char *r = lm_tfjs_meta(m, "lumen.range");
    if (r) range = atof(r);
    lm_upscale_opts uo;
    lm_upscale_opts_init(&uo);
    uo.tile = h->tile;
    uo.range = range;
    int64_t B = img->shape[0];
    lm_array **parts = calloc((size_t)B, sizeof *parts), *res = NULL;
    int64_t made = 0;
    if (!parts) {
        lm_error_set(LM_ERR_NOMEM, "hires fix: out of memory");
        goto done;
    }
    for (; made < B; made++) {
        lm_array *one = lm_slice(img, 0, made, made + 1, 1), *sq = one ? lm_squeeze(one, 0) : NULL;
        lm_array *up = sq ? lm_tfjs_upscale(m, sq, &uo) : NULL;
        lm_array *on = up ? lm_array_to(up, dev) : NULL, *u4 = on ? lm_unsqueeze(on, 0) : NULL;
        int64_t size[2] = {H, W};
        parts[made] = u4 ? lm_upsample(u4, size, NULL, LM_UPSAMPLE_BILINEAR, false) : NULL;
        lm_array_release(one);
        lm_array_release(sq);
        lm_array_release(up);
        lm_array_release(on);
        lm_array_release(u4);
        if (!parts[made]) {
            lm_error_prefix("hires fix: upscaler %s", f.path);
            goto done;
        }
    }
    {
        lm_array *cat = B == 1 ? lm_array_retain(parts[0]) : lm_concat((int)B, parts, 0);
        /* the models do not clamp: the encoder sees 0..1 as after a PNG */
        res = cat ? lm_clamp(cat, 0, 1) : NULL;
        lm_array_release(cat);
        if (res && lm_eval(&res, 1) != LM_OK) {
            lm_array_release(res);
            res = NULL;
        }
    }
done:
    for (int64_t i = 0; i < made && parts; i++) lm_array_release(parts[i]);
    free(parts);
    lm_tfjs_free(m);
    return res;
}

lm_array *lm_sd_generate_hires(lm_sd_pipeline *p, const lm_sd_gen_opts *o, const lm_sd_hires_opts *h)
{
    lm_sd_hires_opts dh;
    lm_sd_hires_opts_init(&dh);
    if (!h) h = &dh;
    if (o->init || o->init_latents) {
        lm_error_set(LM_ERR_ARG, "hires fix: an init image: the hires fix follows a text-to-image "
                     "generation (img2img at a larger size is --init with --size)");
        return NULL;
    }
    if (lm_sd_pipeline_dit(p)) {
        lm_error_set(LM_ERR_UNSUPPORTED, "hires fix: %s: for the SD families (SD 1.x, 2.x, SDXL) so far",
                     lm_sd_pipeline_row(p)->title);
        return NULL;
    }
    int64_t vs = lm_sd_pipeline_vae_scale(p), d = lm_sd_pipeline_default_size(p);
    /* the first pass's size: the latents' when given (they decide it), else width/height */
    int64_t bw = o->latents ? o->latents->shape[3] * vs : o->width > 0 ? o->width : d;
    int64_t bh = o->latents ? o->latents->shape[2] * vs : o->height > 0 ? o->height : d;
    int64_t W, H;
    if (lm_sd_hires_target(h, bw, bh, vs, &W, &H) != LM_OK) return NULL;
    int mode = lm_sd_hires_latent_mode(h->upscaler);
    lm_tfjs_found f;
    if (!mode && model_find(h->upscaler, bw, bh, W, H, &f) != LM_OK) return NULL;
    lm_sd_gen_opts two = *o;
    two.latents = NULL;
    two.width = two.height = 0;
    two.steps = h->steps ? h->steps : o->steps;
    two.strength = h->denoise;
    /* the second pass's schedule first: a denoise leaving no step fails before any network runs */
    if (lm_sd_img2img_check("hires fix", two.steps, two.strength) != LM_OK) return NULL;
    lm_array *res = NULL, *up = NULL;
    if (mode) {
        lm_array *lat = lm_sd_generate_latents(p, o);
        int64_t size[2] = {H / vs, W / vs};
        up = lat ? lm_upsample(lat, size, NULL, mode == 1 ? LM_UPSAMPLE_NEAREST : LM_UPSAMPLE_BILINEAR,
                               false) : NULL;
        lm_array_release(lat);
        if (up && lm_eval(&up, 1) != LM_OK) goto done;
        two.init_latents = up;
    } else {
        lm_array *img = lm_sd_generate(p, o);
        up = img ? model_upscale(h, &f, img, W, H, lm_sd_pipeline_device(p)) : NULL;
        lm_array_release(img);
        two.init = up;
    }
    if (up) res = lm_sd_generate(p, &two);
done:
    lm_array_release(up);
    return res;
}
