/* zimage.h - Z-Image's diffusion transformer (diffusers'
 * ZImageTransformer2DModel, the standard path: one image per batch item, no
 * SigLIP features) from a diffusers transformer/ folder: config.json plus
 * diffusion_pytorch_model.safetensors (or its fp16 variant, or the shards of
 * its .safetensors.index.json).  The network is built from Lumen's ops
 * (linear, rms_norm, layer_norm, attention with a key mask, rope, swiglu),
 * so it runs on every device; weights are cast to the compute dtype, placed
 * on the device and kept once, at load.
 *
 * Sizes come from config.json (in_channels, dim, n_layers,
 * n_refiner_layers, n_heads, norm_eps, qk_norm, cap_feat_dim, rope_theta,
 * t_scale, axes_dims, axes_lens, all_patch_size, all_f_patch_size); the
 * feed-forward width is diffusers' int(dim / 3 * 8).  A config naming what
 * this file does not implement (siglip_feat_dim set: the Omni variant;
 * several patch sizes; a frame patch other than 1) is refused naming the
 * key; a missing, unexpected or misshaped weight is an error naming the
 * file, the key and the shapes.
 *
 * Ownership: lm_zimage_load and lm_zimage_load_from return a model freed
 * with lm_zimage_free; lm_zimage_forward returns a new (lazy) reference. */
#ifndef LM_ZIMAGE_H
#define LM_ZIMAGE_H

#include <stdbool.h>
#include <stdint.h>
#include <cjson/cJSON.h>
#include "array.h"
#include "core/io/io.h"
#include "device.h"

#define LM_ZIMAGE_MAX_AXES 8

typedef struct lm_zimage lm_zimage;

typedef struct lm_zimage_config {
    int64_t in_channels, dim, n_layers, n_refiner_layers, n_heads, n_kv_heads, cap_feat_dim;
    int64_t patch_size, f_patch_size;   /* all_patch_size[0], all_f_patch_size[0] (1) */
    int64_t ffn_dim;                    /* int(dim / 3 * 8) */
    int64_t adaln_dim;                  /* min(dim, 256): the timestep embedding's width */
    double norm_eps, rope_theta, t_scale;
    bool qk_norm;
    int naxes;                          /* 3: caption/frame, height, width */
    int64_t axes_dims[LM_ZIMAGE_MAX_AXES], axes_lens[LM_ZIMAGE_MAX_AXES];
} lm_zimage_config;

/* dir: the transformer folder.  variant: NULL (the plain file, else the
 * fp16 one), "" or "fp16".  dt: the compute dtype (f32, f16, bf16).  dev
 * NULL = the default device. */
lm_zimage *lm_zimage_load(const char *dir, const char *variant, lm_dtype dt, lm_device *dev);
/* The same network from a parsed config.json object (borrowed) and weights
 * under diffusers' names.  The weights are consumed (*weights is left
 * empty, on success and on failure); every key must be used exactly once.
 * file names the source in errors. */
lm_zimage *lm_zimage_load_from(const cJSON *config, lm_tensor_set *weights, const char *file,
                               lm_dtype dt, lm_device *dev);
/* Weights in the original Z-Image layout (single files as ComfyUI and
 * stable-diffusion.cpp load them, ComfyUI-GGUF's files: x_embedder,
 * final_layer, attention.qkv / out / q_norm / k_norm, an optional
 * "model.diffusion_model." prefix) are recognized by x_embedder.weight and
 * renamed in place to diffusers' names as diffusers' single-file converter
 * does (norm_final.weight dropped), with attention.qkv.weight kept fused
 * [3 dim, dim], which lm_zimage_load_from takes in place of to_q / to_k /
 * to_v.  A rename onto an existing key is an error naming both (file in
 * the message). */
bool lm_zimage_is_original(const lm_tensor_set *set);
lm_status lm_zimage_rename_original(lm_tensor_set *set, const char *file);
void lm_zimage_free(lm_zimage *m);    /* NULL is fine */
const lm_zimage_config *lm_zimage_get_config(const lm_zimage *m);
lm_dtype lm_zimage_dtype(const lm_zimage *m);
lm_device *lm_zimage_device(const lm_zimage *m);
/* Every weight the model took, under its diffusers key, with the field that
 * holds it (dit_common.h's lm_dit_slots): models/lora.c replaces weights
 * there and puts them back.  Valid until lm_zimage_free. */
struct lm_dit_slots *lm_zimage_weights(lm_zimage *m);

/* One call of the transformer.  x [B, in_channels, H, W] (H, W multiples of
 * the patch size); t [B]: what ZImagePipeline passes, (1000 - timestep) /
 * 1000; caps: ncap == B caption feature arrays [L_i, cap_feat_dim], L_i >= 1,
 * lengths may differ (each is padded to a multiple of 32 with the caption
 * pad token, the unified sequences to the longest with a key mask, as
 * diffusers does).  Returns the raw model output [B, in_channels, H, W] in
 * the model's dtype (the pipeline negates it), lazy; NULL with the error
 * set on bad shapes. */
lm_array *lm_zimage_forward(lm_zimage *m, lm_array *x, lm_array *t, int ncap, lm_array *const *caps);

#endif
