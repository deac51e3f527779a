/* sd_inpaint.h - inpainting over models/sd_pipeline.h, as diffusers'
 * StableDiffusionInpaintPipeline / StableDiffusionXLInpaintPipeline compute
 * it (lm_sd_gen_opts' mask, mask_blur and mask_overlay; the loop's hooks are
 * in sd_pipeline.c):
 *
 *  - the mask (white = repaint) is read as 8-bit gray (PIL's "L": an RGB mask
 *    by ITU-R 601-2 luma in PIL's integer form), blurred when asked as
 *    diffusers' mask_processor.blur does (PIL's GaussianBlur: lm_sd_mask_blur_u8),
 *    then binarized (>= 0.5 repaints) as mask_processor.preprocess does;
 *  - the masked image is the init image with the repainted pixels set to
 *    0.5 (diffusers' 0 after 2x - 1), encoded by the VAE;
 *  - the latent mask is the binary mask resized to the latents with
 *    torch's nearest interpolation;
 *  - a 9-channel UNet (inpainting checkpoints: latents 4 + mask 1 + masked
 *    image latents 4) gets [scaled latents, mask, masked latents] on the
 *    channel axis each step, for both halves of CFG;
 *  - a 4-channel UNet runs masked img2img: after each step the latents
 *    outside the mask are the init latents noised to the next timestep (the
 *    init latents themselves after the last);
 *  - strength 1 starts from pure noise (diffusers' is_strength_max), below 1
 *    from the init latents noised to the first kept timestep;
 *  - mask_overlay pastes the init image back outside the (blurred) mask
 *    (A1111's overlay, diffusers' apply_overlay) in f32: out = gen * m +
 *    init * (1 - m). */
#ifndef LM_SD_INPAINT_H
#define LM_SD_INPAINT_H

#include <stdbool.h>
#include <stdint.h>
#include "array.h"
#include "device.h"

/* A mask prepared on the host: H x W pixels, row-major. */
typedef struct lm_sd_mask {
    int64_t H, W;
    float *soft;   /* the 8-bit gray value / 255 after the blur: the overlay's alpha */
    float *bin;    /* 1 where soft >= 0.5 (repainted), else 0 */
} lm_sd_mask;

/* mask: [H,W] or [C,H,W] (C 1 or 2: the first channel is the gray; 3 or 4:
 * RGB to gray as PIL's convert("L")) in 0..1, one for the whole batch.
 * blur: PIL's GaussianBlur radius in pixels (0 = none, at most 256).
 * th, tw: the image's size; a mask of another size is resized to it after
 * the blur, before the binarization (diffusers' mask_processor.blur, then
 * preprocess(mask, height, width): PIL's Lanczos on the 8-bit gray); 0, 0
 * keeps the mask's size.
 * LM_OK, or LM_ERR_ARG/SHAPE naming who and the shape or value. */
lm_status lm_sd_mask_prepare(lm_array *mask, double blur, int64_t th, int64_t tw, const char *who,
                             lm_sd_mask *m);
void lm_sd_mask_free(lm_sd_mask *m);

/* PIL's ImageFilter.GaussianBlur(radius) on 8-bit gray pixels, in place:
 * per axis (rows first, then columns) three extended box blurs whose
 * fractional radius gives the Gaussian's variance (Gwosdek et al., "Theoretical
 * foundations of Gaussian convolution by extended box filtering"), edges
 * repeated, each pass rounded to 8 bits in 24-bit fixed point. */
void lm_sd_mask_blur_u8(uint8_t *px, int64_t H, int64_t W, double radius);

/* The binary mask [1,1,h,w] f32 at the latents' size (torch's nearest:
 * source index floor(i * H / h)), or the pixels [1,1,H,W] (soft: the
 * overlay's alpha, else the binary mask).  New evaluated arrays on dev. */
lm_array *lm_sd_mask_latents(const lm_sd_mask *m, int64_t h, int64_t w, lm_device *dev);
lm_array *lm_sd_mask_pixels(const lm_sd_mask *m, bool soft, lm_device *dev);

/* (1 - m) * keep + m * x: the latents blend (keep = the noised init latents)
 * and the overlay (x = the generated image, keep = the init image, m the
 * soft mask).  m broadcasts over the batch and channels.  Lazy. */
lm_array *lm_sd_inpaint_blend(lm_array *x, lm_array *keep, lm_array *m);
/* The masked image in 0..1: init [B,3,H,W] where bin is 0, 0.5 where it is 1.
 * Lazy. */
lm_array *lm_sd_inpaint_masked_image(lm_array *init, lm_array *bin);


/* ---- A1111's "Only masked" (inpaint_full_res; diffusers' padding_mask_crop) ---- */

/* PIL's Image.resize(..., LANCZOS) of 8-bit pixels [C][ih][iw] (planar) to
 * [C][oh][ow]: a horizontal pass, then a vertical one, each rounded to 8
 * bits with 22-bit fixed-point weights, as PIL computes it. */
lm_status lm_sd_resize_lanczos_u8(const uint8_t *in, int64_t C, int64_t ih, int64_t iw, uint8_t *out,
                                  int64_t oh, int64_t ow);
/* An image [3,H,W] or [B,3,H,W] in 0..1 resized to h x w as diffusers'
 * image_processor.preprocess(image, height, width) does (resize_mode
 * "default", A1111's "Just resize": PIL's Lanczos on the 8-bit planes, the
 * aspect not kept).  A new evaluated f32 array on dev, or NULL with the
 * error set. */
lm_array *lm_sd_image_resize(lm_array *img, int64_t h, int64_t w, lm_device *dev);
/* diffusers' get_crop_region (A1111's masking.get_crop_region and
 * expand_crop_region): the box [x1, x2) x [y1, y2) around the mask's nonzero
 * 8-bit pixels g [H*W], padded by pad and grown to pw:ph's aspect (the
 * processing size) within the image.  false when the mask is empty. */
bool lm_sd_mask_crop_region(const uint8_t *g, int64_t H, int64_t W, int64_t ph, int64_t pw, int64_t pad,
                            int64_t box[4]);
/* The pipeline's generation for lm_sd_inpaint_crop: from the cropped init
 * image [3,ph,pw] and mask [1,ph,pw] (8-bit values, blurred already: no
 * blur, no overlay), [B,3,ph,pw] f32 in 0..1, or NULL with the error set. */
typedef lm_array *(*lm_sd_inpaint_gen_fn)(void *ctx, lm_array *init, lm_array *mask);
/* What lm_sd_inpaint_crop is given: the init image [3,H,W] and the mask (as
 * lm_sd_mask_prepare takes it, resized to the init's size), the blur, the
 * processing size (0: the init's), the padding and the device. */
typedef struct lm_sd_inpaint_crop_args {
    lm_array *init, *mask;
    double blur;
    int64_t ph, pw, pad;
    lm_device *dev;
} lm_sd_inpaint_crop_args;
/* Inpainting of only the mask's box, as diffusers' inpaint pipelines with
 * padding_mask_crop=pad (A1111's "Only masked" with that padding): the init
 * image and the (blurred) mask cropped to lm_sd_mask_crop_region's box,
 * resized to the processing size with PIL's Lanczos (8-bit), generated
 * there by gen(ctx, ...), the result (8-bit) resized back into the box and
 * pasted over the init image outside the mask (the overlay).  [B,3,H,W] f32
 * in 0..1, or NULL with the error set.  lm_sd_generate calls it with the
 * pipeline's own generation (sd_pipeline.c). */
lm_array *lm_sd_inpaint_crop(const lm_sd_inpaint_crop_args *a, lm_sd_inpaint_gen_fn gen, void *ctx);

#endif
