/* sd_single.h - single-file Stable Diffusion checkpoints: one .safetensors
 * or .gguf in the original (CompVis / Stability) layout, read into
 * diffusers' components.
 *
 * GGUF (stable-diffusion.cpp's layout: the single file's tensors under the
 * same names, ggml's dimension order undone by the GGUF reader) goes
 * through exactly this code; its tensors may be f32/f16/bf16 or ggml block
 * quantizations.  A quantized linear weight of the UNet or a text encoder
 * (an [out, in] matrix taken whole) stays quantized when the device runs
 * QLINEAR with it (asked of its backend's supports), for lm_linear's
 * quantized product; every other quantized tensor (conv kernels, norms,
 * biases, embeddings, fused qkv thirds, the VAE) and every linear weight on
 * a device without QLINEAR is dequantized at load, then cast to the compute
 * dtype by the model as a float tensor is.
 *
 * Keys: model.diffusion_model.* (the UNet), first_stage_model.* (the VAE),
 * cond_stage_model.transformer.* (SD 1.x: CLIP ViT-L in transformers'
 * naming), cond_stage_model.model.* (SD 2.x: OpenCLIP ViT-H, fused qkv),
 * conditioner.embedders.0.transformer.* and conditioner.embedders.1.model.*
 * (SDXL: ViT-L and OpenCLIP bigG with its text projection).  The family is
 * told from the keys; each component's diffusers config is inferred from the
 * tensor shapes plus the family's conventions for what shapes cannot tell
 * (docs/DIFFUSION.md, "Single-file checkpoints", lists them); the key map is
 * generated from that config (the architecture), so a key the map has no
 * place for, a key it needs that is absent and a shape that contradicts the
 * config are errors naming the file, the key and the shapes.  Training
 * leftovers are skipped by a stated list (model_ema.*, the DDPM schedule
 * buffers, logvar, position_ids, logit_scale).
 *
 * The file is mapped once (lm_load_file_to): the renamed tensors are the
 * file's tensors (or lazy views of them: a 1x1 conv weight reshaped to a
 * linear one, a third of a fused qkv, a transposed projection), so the
 * weights are never held twice.
 *
 * The family's conventions (prefixes, encoders, what shapes cannot tell)
 * are its row in models/family.h; the reader's parts, one concern each
 * (detection, inference, key map, configs, GGUF, the writer), are listed
 * in sd_parts.h.
 *
 * Ownership: lm_sd_single_read fills *out; lm_sd_single_free releases all of
 * it.  Each component's config and weights may be handed to the _load_from
 * entries (lm_unet_load_from, lm_vae_load_from, lm_clip_text_load_from),
 * which consume the weights (the set is left empty); the config stays owned
 * by *out. */
#ifndef LM_SD_SINGLE_H
#define LM_SD_SINGLE_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include "core/io/io.h"
#include "device.h"
#include "models/family.h"   /* lm_sd_family and its row */

typedef struct lm_sd_component {
    cJSON *config;            /* diffusers' config.json as inferred; NULL when absent */
    lm_tensor_set weights;    /* under diffusers' names */
} lm_sd_component;

typedef struct lm_sd_single_opts {
    /* "epsilon" (NULL: the default) or "v_prediction": SD 2.x 768-v
     * checkpoints need v, and nothing in the weights says so. */
    const char *prediction_type;
    /* A diffusers folder of the same model (optional): its unet/, vae/,
     * text_encoder[_2]/ config.json and scheduler/scheduler_config.json
     * override the family's conventions (norm groups, heads, sample size,
     * ...); a key the shapes decide must agree, else it is an error.  Its
     * tokenizer/ and tokenizer_2/ are the default tokenizers. */
    const char *config_dir;
    /* Folders with vocab.json + merges.txt (or tokenizer.json): a single
     * file carries no tokenizer. */
    const char *tokenizer, *tokenizer_2;
    /* SD 2.x: the text encoder is OpenCLIP's penultimate layer; a file with
     * text_projection is OpenCLIP's whole text tower and its last block is
     * dropped (as diffusers does), one without (written from diffusers) is
     * taken whole.  1 forces dropping, -1 forces keeping, 0 decides so. */
    int sd2_drop_last_layer;
    lm_device *dev;           /* NULL: the default device */
} lm_sd_single_opts;

typedef struct lm_sd_single {
    lm_sd_family family;
    char *file;
    lm_sd_component unet, vae, text_encoder, text_encoder_2;   /* text_encoder_2: SDXL only */
    cJSON *scheduler;         /* scheduler_config.json: the family's scaled_linear schedule */
    char *tokenizer, *tokenizer_2;   /* folders, or NULL when none was given */
    lm_file_format format;    /* LM_FORMAT_SAFETENSORS or LM_FORMAT_GGUF */
    int quant_kept, quant_dequantized;   /* quantized file tensors kept / dequantized */
} lm_sd_single;

lm_status lm_sd_single_read(const char *path, lm_sd_single *out);   /* default options */
lm_status lm_sd_single_read_opts(const char *path, const lm_sd_single_opts *o, lm_sd_single *out);
void lm_sd_single_free(lm_sd_single *s);   /* leaves *s empty; NULL is fine */

/* The writer's direction: a diffusers folder's UNet, VAE and text encoders
 * under the single file's original names, each renaming and transform of
 * the key map undone (OpenCLIP's q/k/v concatenated into in_proj, the VAE's
 * attention linears as 1x1 convs, text_projection transposed back; SD 2.x
 * written with the folder's layers, no text_projection), so reading *out
 * back gives the folder's tensors.  Arrays are lazy on the CPU; the family
 * goes to *family (may be NULL).  lm_tensor_set_free(out) releases it. */
lm_status lm_sd_single_from_folder(const char *dir, lm_tensor_set *out, lm_sd_family *family);

/* The tokenizer folders the pipeline needs (*tok2 NULL unless SDXL), or an
 * error saying that a single file has none and how to give them. */
lm_status lm_sd_single_tokenizers(const lm_sd_single *s, const char **tok, const char **tok2);

#endif
