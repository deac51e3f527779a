/* sd_hires.h - A1111's hires fix over models/sd_pipeline.h: a generation
 * at the base size, its result upscaled to the target size, then img2img
 * there with its own steps and denoising strength (the same seeds, prompts
 * and sampler).
 *
 * Upscalers: "latent" / "latent-bilinear" (A1111's "Latent": the final
 * latents resized bilinearly, align_corners false, no antialias, as
 * torch.nn.functional.interpolate), "latent-nearest" (A1111's "Latent
 * (nearest)"), and otherwise a Lumen upscaler (models/tfjs.h's
 * lm_tfjs_find names: "esrgan-thick", a package folder, a model.json): the
 * base images decoded, upscaled by the model, resized bilinearly to the
 * target size, then encoded by img2img (A1111 resizes with Lanczos there).
 * The latent modes give the second pass the latents themselves (diffusers'
 * img2img with a 4-channel image), skipping a VAE round trip.
 *
 * The second pass runs as diffusers' img2img: num_inference_steps = steps,
 * int(steps * denoise) of them run (A1111 runs exactly "Hires steps";
 * docs/DIFFUSION.md says how to get that). */
#ifndef LM_SD_HIRES_H
#define LM_SD_HIRES_H

#include <stdint.h>
#include "array.h"
#include "models/sd_pipeline.h"

typedef struct lm_sd_hires_opts {
    double scale;            /* target = int(base * scale), down to a multiple of
                                the VAE's scale (default 2); ignored when width or
                                height is given */
    int64_t width, height;   /* the target size (0 = from scale; one of them 0:
                                the other keeps the base's aspect) */
    int steps;               /* the second pass's steps; 0 = the base's */
    double denoise;          /* its strength (default 0.7, A1111's) */
    const char *upscaler;    /* NULL = "latent" */
    int64_t tile;            /* model upscalers: input tile side (0 = whole image) */
} lm_sd_hires_opts;

void lm_sd_hires_opts_init(lm_sd_hires_opts *h);

/* The target size for a base of base_w x base_h: LM_OK, or LM_ERR_ARG
 * naming the option (a scale not in (0, 16], a size out of family.h's
 * range, steps or denoise out of theirs). */
lm_status lm_sd_hires_target(const lm_sd_hires_opts *h, int64_t base_w, int64_t base_h,
                             int64_t vae_scale, int64_t *w, int64_t *hgt);

/* Whether name is a latent mode (1: nearest, 2: bilinear) or a model (0). */
int lm_sd_hires_latent_mode(const char *name);
/* A1111's name for the upscaler in the infotext ("Latent", "Latent
 * (nearest)", else the name as given) */
const char *lm_sd_hires_upscaler_a1111(const char *name);

/* The whole hires fix: [B,3,H,W] f32 in 0..1 at the target size, or NULL
 * with the error set.  o is the base generation (text-to-image: no init
 * image or init latents); its width/height are the base size.  o's
 * progress hook sees the base pass's steps, then the second pass's. */
lm_array *lm_sd_generate_hires(lm_sd_pipeline *p, const lm_sd_gen_opts *o, const lm_sd_hires_opts *h);

#endif
