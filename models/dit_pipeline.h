/* dit_pipeline.h - the flow-matching DiT families of the family table
 * (Z-Image, FLUX.2-klein) inside an lm_sd_pipeline: their tokenizer and
 * Qwen3 text encoder, their transformer, their scheduler
 * (FlowMatchEulerDiscreteScheduler) and their generation loop, computed as
 * diffusers' ZImagePipeline and Flux2KleinPipeline compute them.  The VAE
 * stays the pipeline's (models/vae.h); models/sd_pipeline.c calls these
 * where a row's `flow` column says so, so `lumen generate`, Lua's
 * pipe:generate and `lumen batch` run every family through one entry.
 *
 * Noise: each image's initial latents are lm_diffusion_noise(seed, 0, ...)
 * in the family's latent shape ([1, 16, H/8, W/8] for Z-Image; the packed
 * [1, 128, H/16, W/16] for FLUX.2), so an image's bytes do not depend on the
 * batch it ran in; the options' noise hook (draw k = 0, the batch's shape)
 * replaces them.  Each image runs alone (its CFG pair in one transformer
 * call), as SD's lanes do.
 *
 * Z-Image img2img (ZImageImg2ImgPipeline): the init image encoded to the
 * VAE's latent MEAN (as SD's img2img; diffusers samples it), (mean - shift)
 * * scaling, noised by the scheduler's scale_noise to the first timestep
 * get_timesteps keeps: sigma * noise + (1 - sigma) * latents.  The init
 * image's size is the output's (lm_sd_generate resizes it first to a width
 * and height given).
 *
 * FLUX.2-klein reference images (Flux2KleinPipeline's image=): checked and
 * cropped as its image processor does, encoded to the VAE's mean,
 * patchified, batch-norm normalized and packed, and appended after the
 * noise tokens of every transformer call with their own position ids
 * (_prepare_image_ids: t = 10, 20, ...); the output is sliced back to the
 * noise tokens.
 *
 * Ownership: lm_dit_pipe_load returns a state freed with lm_dit_pipe_free; arrays
 * returned are new references. */
#ifndef LM_MODELS_DIT_PIPELINE_H
#define LM_MODELS_DIT_PIPELINE_H

#include <cjson/cJSON.h>
#include "array.h"
#include "device.h"
#include "models/family.h"
#include "models/flowmatch.h"
#include "models/sd_pipeline.h"

typedef struct lm_dit_pipe lm_dit_pipe;
struct lm_vae;
struct lm_qwen_tokenizer;
struct lm_qwen3;
struct lm_zimage;
struct lm_flux2;

/* The row's tokenizer, text encoder, transformer and scheduler from a
 * diffusers folder (dir; index: its model_index.json, mi its path for
 * errors).  offload: lm_dit_pipe_set_offload from the start, the text
 * encoder's folder checked but its weights not read until the first
 * prompt.  NULL + error naming the file on failure. */
lm_dit_pipe *lm_dit_pipe_load(const lm_sd_family_row *row, const char *dir, const char *mi,
                    const char *variant, lm_dtype dt, lm_device *dev, bool offload);
void lm_dit_pipe_free(lm_dit_pipe *d);   /* NULL is fine */

struct lm_qwen_tokenizer *lm_dit_pipe_tokenizer(lm_dit_pipe *d);
/* NULL while offloaded (below) */
struct lm_qwen3 *lm_dit_pipe_text_encoder(lm_dit_pipe *d);

/* Offload (as diffusers' enable_model_cpu_offload, for a GPU too small for
 * every stage at once): one large network resident at a time.  On, the
 * text encoder's weights are freed now; an encoding frees the transformer
 * first, reads the encoder from its files, evaluates the hidden states and
 * frees it; the transformer is read again before its first call.  The VAE
 * stays.  The peak is then the larger network's working set rather than
 * both networks' weights together, for the time of reading both again per
 * generate call (docs/BENCHMARKS.md has the figures). */
void lm_dit_pipe_set_offload(lm_dit_pipe *d, bool on);
bool lm_dit_pipe_offload(const lm_dit_pipe *d);
struct lm_zimage *lm_dit_pipe_zimage(lm_dit_pipe *d);      /* NULL unless Z-Image */
struct lm_flux2 *lm_dit_pipe_flux2(lm_dit_pipe *d);        /* NULL unless FLUX.2 */

/* The conditioning of n prompts (NULL = ""), as the family's pipeline's
 * encode_prompt gives it, in the compute dtype: Z-Image n arrays [L_i, D]
 * (the prompt's tokens only); FLUX.2 one array per prompt [1, L, n_layers*D]
 * (every token of max_length).  max_length 0 = the family's; n_layers 0 /
 * layers NULL = the family's hidden states. */
lm_status lm_dit_pipe_encode_prompt(lm_dit_pipe *d, int n, const char *const *prompts, int max_length,
                                    int n_layers, const int *layers, lm_array **out);

/* The schedule (models/flowmatch.h: sigmas and timesteps) the family's
 * pipeline runs for an image of (h, w) latents (the VAE's, before any
 * packing): its default sigmas and its mu. */
lm_status lm_dit_pipe_schedule(lm_dit_pipe *d, int steps, int64_t h, int64_t w, lm_flowmatch_schedule *out);

/* latents [B, C, h, w] (the VAE's) to an image [B, 3, H, W] in 0..1, f32:
 * Z-Image latents / scaling + shift; FLUX.2 the batch-norm statistics and
 * the 2x2 unpatchify of its packed channels first (latents then are
 * [B, 4C, h/2, w/2]). */
/* ... as the VAE's raw output, f32, before the postprocess
 * (lm_sd_postprocess: x / 2 + 0.5, clamped) */
lm_array *lm_dit_pipe_decode_raw(struct lm_vae *vae, lm_dtype vae_dt, const lm_sd_family_row *row,
                                 double scaling, double shift, lm_array *latents);

/* Klein's reference images refs[n] (each [3,H,W] in 0..1) as
 * Flux2KleinPipeline prepares them (the image processor's checks: sides of
 * 64 or more, aspect ratio at most 8:1; its crop: the largest multiples of
 * 2 * vae_scale, centred; an image over 1024x1024 pixels, which diffusers
 * resizes with Lanczos, is refused), encoded by vae to its latent mean,
 * patchified, normalized with its batch-norm statistics and packed:
 * *tokens [1, S, 4 * latent_channels] f32 (lazy; a new reference), *ids
 * [S, 4] (malloc'd, the caller frees), *S the token count; h0 / w0 (may be
 * NULL) the first image's size after the crop (the default output size). */
lm_status lm_dit_pipe_ref_latents(struct lm_vae *vae, int64_t vae_scale, int n, lm_array *const *refs,
                                  lm_array **tokens, int32_t **ids, int64_t *S, int64_t *h0, int64_t *w0);

/* The whole generation (o checked by the caller's ranges): [B, 3, H, W] in
 * 0..1, evaluated, or NULL with the error set. */
lm_array *lm_dit_pipe_generate(lm_dit_pipe *d, lm_sd_pipeline *p, const lm_sd_gen_opts *o);

/* How a transformer is read (again, after an offload): from path (a
 * diffusers transformer folder, or a single file with folder its
 * tokenizer's diffusers folder), the row's network into *z or *x. */
typedef lm_status (*lm_dit_transformer_reader)(const lm_sd_family_row *row, const char *path,
                                               const char *folder, const char *variant, lm_dtype dt,
                                               lm_device *dev, struct lm_zimage **z, struct lm_flux2 **x);

/* The same state with its transformer given (models/dit_files.c: a
 * transformer single file): the tokenizer, text encoder and scheduler from
 * the diffusers folder dir as lm_dit_pipe_load reads them; zimage or flux2
 * (the row's network, the other NULL) is owned by the result from here on,
 * freed on failure too; read(row, path, dir, ...) reads it again after an
 * offload. */
lm_dit_pipe *lm_dit_pipe_load_parts(const lm_sd_family_row *row, const char *dir, const char *mi,
                                    const char *variant, lm_dtype dt, lm_device *dev,
                                    struct lm_zimage *zimage, struct lm_flux2 *flux2,
                                    lm_dit_transformer_reader read, const char *path, bool offload);

/* The transformer resident again after an offload (a no-op otherwise);
 * LM_OK or the reader's error. */
lm_status lm_dit_pipe_transformer_ready(lm_dit_pipe *d);

/* The LoRA stack (models/lora.h) of the pipeline this state belongs to:
 * before an offload frees the transformer the stack's merged weights are
 * put back (lm_lora_detach), after it is read again they are merged anew
 * (lm_lora_attach).  s is the lm_sd_pipeline's own field (borrowed). */
void lm_dit_pipe_set_loras(lm_dit_pipe *d, struct lm_lora_stack **s);

#endif
