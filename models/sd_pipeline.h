/* sd_pipeline.h - Stable Diffusion text-to-image and image-to-image (SD 1.x,
 * SD 2.x, SDXL) from a diffusers folder (model_index.json and its component
 * folders) or a single-file checkpoint (models/sd_single.h), computed
 * as diffusers' StableDiffusionPipeline / StableDiffusionXLPipeline (and
 * their Img2Img twins) compute it.
 *
 * Loading reads every network once, casts its weights to the compute dtype
 * and keeps them on the device; generations reuse them.  A generation is
 * evaluated step by step (the latents are evaluated after each sampler step)
 * so the graph never grows with the number of steps.
 *
 * Noise: each image's initial latents are lm_diffusion_noise(seed, 0, ...)
 * and its k-th ancestral draw lm_diffusion_noise(seed, k, ...) (k from 1),
 * drawn per image, so an image's bytes do not depend on the batch it ran in
 * or on the thread count.  img2img encodes the init image to the MEAN of the
 * VAE's latent distribution (diffusers samples it with the generator; the
 * mean is what A1111 and ComfyUI use and needs no second noise stream).
 *
 * Ownership: lm_sd_pipeline_load returns a pipeline freed with
 * lm_sd_pipeline_free; lm_sd_generate returns a new reference the caller
 * releases. */
#ifndef LM_SD_PIPELINE_H
#define LM_SD_PIPELINE_H

#include <stdbool.h>
#include <stdint.h>
#include "array.h"
#include "models/family.h"      /* lm_sd_family, its row, the options' defaults and ranges */
#include "device.h"

typedef struct lm_sd_pipeline lm_sd_pipeline;
struct lm_clip_tokenizer;
struct lm_clip_text;
struct lm_unet;
struct lm_vae;

typedef struct lm_sd_load_opts {
    lm_dtype dtype;            /* LM_DTYPE_COUNT = f16 on a GPU, f32 on the CPU */
    lm_device *device;         /* NULL = the default device */
    const char *variant;       /* NULL (plain file, else fp16), "" or "fp16" */
    const char *tokenizer_dir; /* single files: a diffusers folder of the same model
                                  (its tokenizer[_2]/, scheduler/ and configs are
                                  used, as sd_single.h's config_dir), or one tokenizer
                                  folder (SD 1.x / 2.x) */
    const char *prediction;    /* NULL, "epsilon" or "v_prediction": overrides the
                                  scheduler config (single files have none) */
    const char *tokenizer_option; /* how the caller spells tokenizer_dir in messages
                                  ("--tokenizer DIR"); NULL = Lua's "tokenizer = DIR" */
    const char *embeddings_dir;/* textual-inversion embeddings (*.safetensors) for A1111's
                                  prompt syntax: lm_sd_pipeline_load_embeddings */
    int vae_tiling;            /* models/vae.h's lm_vae_tiling_mode: auto (0, the
                                  default; vae.h states its rule), on, or off
                                  (diffusers' default) */
    bool offload;              /* DiT families: one network resident at a time
                                  (models/dit_pipeline.h), the text encoder not
                                  read until the first prompt; SD ignores it */
    bool no_prewarm;           /* true: no dry run at load.  By default (and unless
                                  LUMEN_PREWARM=0, or offload) a pipeline on a device
                                  that can prepare kernels ahead (lm_device_plan: the
                                  Vulkan backend's compile threads) is run once at
                                  load in plan mode, a generation at the family's
                                  default size and settings (at most 3 steps) that
                                  runs no kernel but starts compiling every pipeline
                                  it meets, so the first image does not wait for them
                                  stage by stage.  Results do not change with it */
    int64_t prewarm_width, prewarm_height; /* the size the dry run plans (0: the
                                  family's default size): the first image's, where
                                  the caller knows it (lumen generate's --width) */
    const char *prewarm_sampler; /* its sampler (NULL: the family's) */
} lm_sd_load_opts;

void lm_sd_load_opts_init(lm_sd_load_opts *o);

/* path: a diffusers folder (model_index.json) or a .safetensors single file.
 * o may be NULL.  NULL + error naming the file on failure. */
lm_sd_pipeline *lm_sd_pipeline_load(const char *path, const lm_sd_load_opts *o);
void lm_sd_pipeline_free(lm_sd_pipeline *p);   /* NULL is fine */

lm_sd_family lm_sd_pipeline_family(const lm_sd_pipeline *p);
const lm_sd_family_row *lm_sd_pipeline_row(const lm_sd_pipeline *p);
const lm_sd_defaults *lm_sd_pipeline_defaults(const lm_sd_pipeline *p);   /* its row's */
lm_dtype lm_sd_pipeline_dtype(const lm_sd_pipeline *p);
lm_device *lm_sd_pipeline_device(const lm_sd_pipeline *p);
const char *lm_sd_pipeline_name(const lm_sd_pipeline *p);  /* the folder or file stem */
int64_t lm_sd_pipeline_latent_channels(const lm_sd_pipeline *p);
int64_t lm_sd_pipeline_vae_scale(const lm_sd_pipeline *p);   /* 8 for SD */
int64_t lm_sd_pipeline_default_size(const lm_sd_pipeline *p); /* unet sample_size * vae scale */

/* Reads the textual-inversion embeddings of dir (models/prompt.h's
 * lm_prompt_embeddings_load: A1111's *.safetensors forms, one-encoder or
 * SDXL's clip_l + clip_g), replacing any read before.  With the prompt
 * syntax on, a file's name in a prompt stands for its vectors (where its
 * width fits the encoder; others are skipped as A1111 skips them). */
lm_status lm_sd_pipeline_load_embeddings(lm_sd_pipeline *p, const char *dir);
/* how many embeddings are loaded */
int lm_sd_pipeline_embeddings(const lm_sd_pipeline *p);

/* The stages, borrowed (the pipeline owns them).  tokenizer(p, 1) / text
 * encoder(p, 1) are SDXL's second ones (NULL elsewhere). */
struct lm_clip_tokenizer *lm_sd_pipeline_tokenizer(lm_sd_pipeline *p, int which);
struct lm_clip_text *lm_sd_pipeline_text_encoder(lm_sd_pipeline *p, int which);
struct lm_unet *lm_sd_pipeline_unet(lm_sd_pipeline *p);
struct lm_vae *lm_sd_pipeline_vae(lm_sd_pipeline *p);
/* A DiT family's tokenizer, encoder, transformer and scheduler
 * (models/dit_pipeline.h); NULL for SD (whose stages are those above). */
struct lm_dit_pipe *lm_sd_pipeline_dit(lm_sd_pipeline *p);
/* The LoRA adapters merged into its weights (models/lora.h owns the type;
 * lm_sd_pipeline_free frees them first). */
struct lm_lora_stack;
struct lm_lora_stack **lm_sd_pipeline_loras(lm_sd_pipeline *p);

/* The conditioning of n prompts as diffusers' encode_prompt gives it for one
 * prompt each: *embeds [n,77,D] in the UNet's dtype; SDXL also *pooled
 * [n,P] (text_embeds of text_encoder_2; pooled may be NULL elsewhere).
 * A NULL prompt is diffusers' negative_prompt=None: the empty prompt, or
 * zeros on SDXL when model_index.json says force_zeros_for_empty_prompt. */
lm_status lm_sd_encode_prompt(lm_sd_pipeline *p, int n, const char *const *prompts,
                              lm_array **embeds, lm_array **pooled);
/* ... with diffusers' clip_skip (0 = none; 1 = the penultimate layer, which
 * A1111 calls "Clip skip: 2"): SD 1.x/2.x hidden_states[-(clip_skip+1)]
 * through the final layer norm, SDXL hidden_states[-(clip_skip+2)]. */
lm_status lm_sd_encode_prompt_skip(lm_sd_pipeline *p, int n, const char *const *prompts,
                                   int clip_skip, lm_array **embeds, lm_array **pooled);

/* ... with AUTOMATIC1111's prompt handling when a1111 is true
 * (models/prompt.h; false is lm_sd_encode_prompt_skip): <lora:...> and other
 * extra-network tags removed, the emphasis syntax parsed, each prompt in
 * chunks of 75 tokens (BOS + 75 + EOS; BREAK and the comma backtrack as
 * A1111's tokenize_line) encoded separately and joined along the sequence,
 * so *embeds is [n, 77*K, D] with K the most chunks of any of the n prompts
 * (the others padded with empty chunks, as A1111 pads a batch); each chunk's
 * hidden states multiplied by its tokens' weights and scaled back to their
 * mean (A1111's "Original" emphasis; the mean is per prompt and chunk, which
 * is A1111's for a batch of one); SDXL's pooled output is the first
 * chunk's.  A prompt of at most 75 tokens with no syntax gives the bytes of
 * lm_sd_encode_prompt_skip. */
lm_status lm_sd_encode_prompt_syntax(lm_sd_pipeline *p, int n, const char *const *prompts,
                                     int clip_skip, bool a1111, lm_array **embeds, lm_array **pooled);

/* Per-step report: step i (from 1) of n for the whole batch. */
typedef void (*lm_sd_progress_fn)(void *ctx, int step, int steps);
/* Test hook: the noise of the batch [B,C,h,w] for draw k (0 = initial
 * latents / img2img's add_noise noise, k >= 1 = the k-th ancestral draw,
 * -1 = img2img's sample of the VAE's latent distribution, which is the mean
 * when the hook gives none; -2 = inpainting's sample for the masked image,
 * likewise).  *out gets a new reference, or NULL to use the
 * seeds; a status other than LM_OK (error set) stops the generation. */
typedef lm_status (*lm_sd_noise_fn)(void *ctx, int k, int ndim, const int64_t *shape,
                                    lm_array **out);

typedef struct lm_sd_gen_opts {
    /* defaults: lm_sd_gen_opts_init's are models/family.h's generic ones,
     * lm_sd_gen_opts_init_for's the pipeline family's; ranges: family.h's
     * options table, checked here by lm_sd_option_check_* (the CLI and Lua
     * check with the same functions before narrowing to int) */
    int batch;                   /* images in this call (default 1) */
    const char *const *prompts;  /* batch prompts (or one, used for all) */
    const char *const *negatives;/* batch negatives, one for all, or NULL (= None) */
    int nprompts, nnegatives;
    const uint64_t *seeds;       /* batch seeds; NULL = seed, seed+1, ... */
    uint64_t seed;
    int steps;                   /* default 20 */
    double cfg;                  /* default 7; <= 1 runs the cond branch only */
    const char *sampler;         /* lm_sampler_parse's names; default "dpm++2m_karras";
                                    NULL = the family's */
    int64_t width, height;       /* 0 = the init image's, else the default size (an
                                    init image of another size is resized to them:
                                    diffusers' preprocess(image, height, width));
                                    else 8 to 65536, multiples of the VAE's scale */
    lm_array *latents;           /* [B,C,h,w] initial latents (diffusers' latents=),
                                    multiplied by init_noise_sigma as diffusers does */
    lm_array *init;              /* img2img: [3,H,W] or [B,3,H,W] in 0..1 (SD, Z-Image) */
    double strength;             /* img2img, default the family's (SD 0.8, Z-Image 0.6,
                                    as diffusers) */
    lm_array *const *refs;       /* FLUX.2-klein's reference images (its pipeline's
                                    image=, for editing), each [3,H,W] in 0..1, shared
                                    by the batch; borrowed.  Other families refuse them */
    int nrefs;
    int clip_skip;               /* diffusers' clip_skip (0 = none, 1 = penultimate layer) */
    bool plain_prompt;           /* SD families: true = the prompts are tokenized literally
                                    and cut at 77 tokens (diffusers' encode_prompt); false
                                    (default) = A1111's syntax, weights, BREAK and long
                                    prompts (lm_sd_encode_prompt_syntax); where the
                                    negatives and the prompts have different chunk
                                    counts the UNet runs on each apart, as A1111.  DiT
                                    families: false removes <lora:...> (extra-network)
                                    tags, the rest read literally; true keeps them */
    lm_sd_progress_fn progress;
    void *progress_ctx;
    /* after progress, the latents [B,C,h,w] after that step, borrowed for
     * the call (queued on the device; decode them there for a preview,
     * keep nothing); SD 1.x/2.x/SDXL only, NULL = none (lumen serve's
     * /progress preview).  Results do not change with it. */
    void (*step_latents)(void *ctx, int step, int steps, lm_array *latents);
    lm_sd_noise_fn noise;        /* tests: diffusers' draws */
    void *noise_ctx;
    double cfg_normalization;    /* Z-Image: 0 = off, else the guided prediction's norm is
                                    kept at most this times the conditional one's */
    double cfg_truncation;       /* Z-Image: 0 = off (diffusers' 1.0), else guidance stops
                                    once (1000 - t) / 1000 exceeds it */
    const int *text_layers;      /* DiT families: the text encoder's hidden states taken
                                    (transformers' indices; NULL / 0 = the family's, as
                                    FLUX.2-klein's text_encoder_out_layers) */
    int n_text_layers;
    int max_sequence_length;     /* DiT families: the prompt's padded length (0 = the
                                    family's, 512; diffusers' max_sequence_length) */
    lm_array *init_latents;      /* img2img from latents [B,C,h,w] (already times
                                    scaling_factor, as diffusers' img2img takes a
                                    4-channel image): noised to the first kept
                                    timestep with strength, no VAE encode; the hires
                                    fix's second pass.  Exclusive with init / latents */
    /* A1111's variation seed: image i's initial noise (draw 0) is
     * lm_sd_noise_slerp(subseed_strength, its seed's, subseed's), subseed
     * subseeds[i] or subseed + i; later draws stay the seed's.  0 = off. */
    double subseed_strength;     /* 0 to 1 */
    uint64_t subseed;
    const uint64_t *subseeds;    /* NULL = subseed, subseed+1, ... */
    /* A1111's seed_resize_from: the start noise (and its variation) drawn
     * at this size's latents and pasted centred into the image's own
     * (lm_sd_noise_paste); 0 = off, as is the image's own size */
    int64_t seed_resize_w, seed_resize_h;
    bool stacked;                /* the whole batch in one UNet call (faster where the
                                    device is underused) instead of one graph per image
                                    evaluated together; the CPU's GEMM then rounds by the
                                    batch's size, so images differ from single runs in
                                    the last bits (default false: same bytes) */
    /* inpainting (models/sd_inpaint.h, SD families): with init, the part to
     * repaint (white), [H,W] or [C,H,W] in 0..1, one for the batch (at another
     * size than the init image's, resized to it after the blur); NULL = plain img2img.  A 9-channel (inpainting) UNet
     * needs it; a 4-channel one runs masked img2img. */
    lm_array *mask;
    double mask_blur;            /* PIL's GaussianBlur radius in pixels, as diffusers'
                                    mask_processor.blur (0 = none, the default) */
    bool mask_overlay;           /* after the decode, the init image pasted back outside
                                    the (blurred) mask, A1111's overlay (default false, as
                                    diffusers' pipelines) */
    bool inpaint_crop;           /* A1111's "Only masked" (inpaint_full_res): only the
                                    mask's box, padded by inpaint_padding pixels, is
                                    inpainted at the image's size and pasted back
                                    (lm_sd_inpaint_crop; the overlay implied) */
    int64_t inpaint_padding;
} lm_sd_gen_opts;

void lm_sd_gen_opts_init(lm_sd_gen_opts *o);
void lm_sd_gen_opts_init_for(lm_sd_gen_opts *o, const lm_sd_pipeline *p);

/* Generates batch images: [B,3,H,W] f32 in 0..1 (evaluated), or NULL with
 * the error set (an unknown sampler, a size not divisible by the VAE's
 * scale, a cancelled evaluation...).  A NaN or infinity in a stage's output
 * is an error naming the first stage that gave one (the text encoder, the
 * initial latents, the UNet at step k, the VAE decoder) and the images: each
 * stage's output is summed per image in the evaluation that computes it
 * anyway, and the sums are read once, after the decode. */
lm_array *lm_sd_generate(lm_sd_pipeline *p, const lm_sd_gen_opts *o);
/* ... stopping before the VAE decoder: the final latents [B,C,h,w] f32
 * (evaluated), as diffusers' output_type="latent" (not divided by
 * scaling_factor).  SD families only (a DiT family is LM_ERR_UNSUPPORTED). */
lm_array *lm_sd_generate_latents(lm_sd_pipeline *p, const lm_sd_gen_opts *o);

/* A1111's slerp (modules/processing.py) of two noises of one image, each
 * [C,H,W] row-major, as it calls it on [C,H,W] tensors: the norms and dot
 * products run over dim 1 (H), per (c, w) column; when the dots' mean
 * exceeds 0.9995 it returns low * val + high * (1 - val), as A1111 does.
 * val = 0 gives low, 1 high.  out may alias neither input. */
void lm_sd_noise_slerp(double val, const float *low, const float *high, int64_t C, int64_t H,
                       int64_t W, float *out);
/* A1111's seed_resize_from paste (ImageRNG.first): small [C,sh,sw] written
 * centred into full [C,H,W] (dx = (W - sw) // 2 and dy with Python's floor
 * division; a small larger than full is cropped centred), the rest of full
 * kept. */
void lm_sd_noise_paste(const float *small, int64_t sh, int64_t sw, float *full, int64_t C, int64_t H,
                       int64_t W);

/* Whether img2img with strength runs a step of steps (diffusers'
 * get_timesteps keeps int(steps * strength) of them): LM_OK, or LM_ERR_ARG
 * "WHO: strength S of N steps leaves no step to run" with the fewest steps
 * and the least strength that would.  Needs no model: callers check it
 * before loading one or encoding an image; lm_sd_generate checks it before
 * any network runs. */
/* The checks every family's generation makes first (lm_sd_generate and the
 * DiT families' loop): the options' ranges of models/family.h but
 * clip_skip's (each family checks its own), the seeds, the prompt counts.
 * LM_OK or LM_ERR_ARG naming the option. */
lm_status lm_sd_gen_opts_check(const lm_sd_gen_opts *o);
/* diffusers' postprocess of a VAE's raw output: (x / 2 + 0.5).clamp(0, 1),
 * a new lazy array */
lm_array *lm_sd_postprocess(lm_array *raw);

lm_status lm_sd_img2img_check(const char *who, int64_t steps, double strength);
/* ... for the family row (NULL: SD's rule): a flow-matching family's
 * img2img runs steps - int(steps - steps * strength) steps, never none */
lm_status lm_sd_img2img_check_for(const char *who, const lm_sd_family_row *row, int64_t steps,
                                  double strength);
/* The DiT family row a diffusers folder's model_index.json names (read
 * alone, before any model loads), or NULL: not a folder, an SD class, or
 * unreadable (the load reports that). */
const lm_sd_family_row *lm_sd_family_peek(const char *path);

/* The VAE halves as the pipeline applies them: latents [B,C,h,w] divided by
 * scaling_factor (and shift_factor added) and decoded to [B,3,H,W] in 0..1;
 * an image [B,3,H,W] in 0..1 to the latent mean times scaling_factor.  Lazy. */
lm_array *lm_sd_decode_latents(lm_sd_pipeline *p, lm_array *latents);
lm_array *lm_sd_encode_image(lm_sd_pipeline *p, lm_array *image);

/* A1111's sampler name for a lm_sampler_find name ("DPM++ 2M"), and its
 * schedule type ("Karras", "Normal"), from its row; NULL for an unknown name. */
const char *lm_sd_sampler_a1111(const char *name, const char **schedule);

#endif
