/* dit_files.h - a Z-Image or FLUX.2 transformer as one file: the
 * .safetensors files of ComfyUI's diffusion_models folder, the same tensors under
 * model.diffusion_model. (a checkpoint's prefix, as stable-diffusion.cpp
 * names them), a diffusers-named transformer saved as one file, and the
 * GGUF files ComfyUI-GGUF writes (its "lumina2" and "flux" architectures).
 * In a ComfyUI all-in-one checkpoint (the transformer under the prefix,
 * text_encoders.* and vae.* beside it) the transformer is read and the
 * other two are left to the folder the rest of the pipeline comes from.
 *
 * The family is told from the keys, as ComfyUI's model detection does:
 * Z-Image by cap_embedder.1.weight with noise_refiner.* and
 * context_refiner.*; FLUX.2 by double_stream_modulation_img.lin.weight
 * (diffusers: .linear.weight).  A FLUX.1 file (double_blocks without the
 * shared modulation) is refused by name.  Keys are renamed to diffusers'
 * (Z-Image: models/zimage_keys.c, its fused attention.qkv kept; FLUX.2: the
 * table in dit_files.c, generated from the file's block counts, with the
 * double blocks' fused qkv split into thirds by rows and the final
 * modulation's shift/scale halves swapped, as diffusers'
 * convert_flux2_transformer_checkpoint_to_diffusers does); a key the table
 * needs and the file lacks, or one the table has no place for, is an error
 * naming the file and the key.
 *
 * The config is inferred from shapes (dim, layers, heads from the q-norm's
 * width, in_channels, cap_feat_dim / joint_attention_dim, the timestep
 * width, the MLP ratio); what shapes cannot tell (patch size, RoPE axes and
 * theta, eps, t_scale) is the released models' (Z-Image-Turbo,
 * FLUX.2-klein), and a diffusers folder's transformer/config.json, when
 * given, overrides those and must agree with the shapes on the rest.
 *
 * GGUF: block-quantized 2-D linear weights stay quantized where the device
 * multiplies them so (QLINEAR, asked of its backend), for lm_linear's
 * quantized product; a split qkv third keeps its blocks (ggml rows are whole
 * blocks).  Any other quantized tensor (the pad tokens, norms) is
 * dequantized at load; pad tokens stored as [dim] become [1, dim].
 *
 * Ownership: lm_dit_file_read fills *out, released with lm_dit_file_free;
 * its weights are host arrays the _load_from entries consume. */
#ifndef LM_MODELS_DIT_FILES_H
#define LM_MODELS_DIT_FILES_H

#include <cjson/cJSON.h>
#include "core/io/io.h"
#include "device.h"
#include "models/dit_pipeline.h"
#include "models/family.h"

typedef struct lm_dit_file {
    lm_sd_family family;      /* LM_SD_ZIMAGE or LM_SD_KLEIN (the network; a folder's
                                 is_distilled picks Klein's row) */
    cJSON *config;            /* the transformer's config.json, as inferred */
    lm_tensor_set weights;    /* under diffusers' names, on the host */
    lm_file_format format;    /* LM_FORMAT_SAFETENSORS or LM_FORMAT_GGUF */
    int quant_kept, quant_dequantized;   /* quantized file tensors kept / dequantized */
} lm_dit_file;

/* The DiT family a file's keys (names, with or without the
 * model.diffusion_model. prefix) say: LM_SD_ZIMAGE, LM_SD_KLEIN, or
 * LM_SD_UNKNOWN when they are not a Z-Image or FLUX.2 transformer's. */
lm_sd_family lm_dit_file_family(const lm_tensor_set *set);

/* Reads the transformer file at path.  config_dir (may be NULL): a
 * diffusers folder whose transformer/config.json, when present, gives what
 * the shapes cannot tell.  dev: the device the weights will run on (NULL:
 * the default), asked which quantized products it runs. */
lm_status lm_dit_file_read(const char *path, const char *config_dir, lm_device *dev, lm_dit_file *out);
void lm_dit_file_free(lm_dit_file *f);   /* leaves *f empty; NULL is fine */

/* For lm_sd_pipeline_load's single files: *row NULL when path is not a DiT
 * transformer (an SD checkpoint); else the row of the diffusers folder
 * `folder` (its model_index.json's class, and is_distilled), which must be
 * given and name the file's network, with *mi that model_index.json's path
 * (malloc'd).  A file that is neither a DiT transformer nor an SD
 * checkpoint is an error listing the keys each would have. */
lm_status lm_dit_file_row(const char *path, const char *folder, const lm_sd_family_row **row, char **mi);

/* The row's pipeline state with its transformer read from path and the
 * rest (tokenizer, text encoder, scheduler) from the folder; offload as
 * lm_dit_pipe_load's. */
lm_dit_pipe *lm_dit_file_load(const lm_sd_family_row *row, const char *path, const char *folder,
                              const char *mi, const char *variant, lm_dtype dt, lm_device *dev,
                              bool offload);

/* How a transformer weight is held in the family's original (single-file)
 * layout, for adapters written under the original names (models/lora.c). */
typedef enum lm_dit_orig {
    LM_DIT_ORIG_SAME,     /* no other name: orig = the diffusers key */
    LM_DIT_ORIG_COPY,     /* the original's weight under another name, the same rows */
    LM_DIT_ORIG_SWAP,     /* its rows [h, 2h) then [0, h) (FLUX.2's final modulation) */
    LM_DIT_ORIG_THIRD0,   /* the first third of the original's fused qkv rows */
    LM_DIT_ORIG_THIRD1,
    LM_DIT_ORIG_THIRD2
} lm_dit_orig;

/* The original name of the diffusers key dfs (".weight" included) of a
 * net's (LM_SD_NET_ZIMAGE or LM_SD_NET_FLUX2) transformer, into orig (cap
 * bytes), as dit_files.c and zimage_keys.c map them (Z-Image: attention.qkv,
 * attention.out, x_embedder, final_layer; FLUX.2: the double and single
 * blocks' names, img_in, txt_in, time_in, final_layer). */
lm_dit_orig lm_dit_original_name(lm_sd_net net, const char *dfs, char *orig, size_t cap);

#endif
