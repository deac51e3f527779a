/* flux2.h - diffusers' Flux2Transformer2DModel (FLUX.2's denoiser, at
 * klein's configuration: no guidance embedding) as a Lumen graph, from a
 * diffusers transformer/ folder: config.json plus
 * diffusion_pytorch_model[.variant].safetensors or the shards of its
 * .safetensors.index.json; and the latent helpers of Flux2KleinPipeline
 * (models/flux2_latents.c).
 *
 * Sizes come from config.json (patch_size, in_channels, out_channels,
 * num_layers, num_single_layers, attention_head_dim, num_attention_heads,
 * joint_attention_dim, timestep_guidance_channels, mlp_ratio,
 * axes_dims_rope, rope_theta, eps), with diffusers' defaults where a key is
 * absent; guidance_embeds true (FLUX.2 [dev]'s guidance embedder) is refused
 * by name.  The network is built from lm_* ops (linear, layer_norm,
 * rms_norm, rope, attention, silu, swiglu), so it runs on every device;
 * weights are cast to the compute dtype (f32, f16, bf16, f64), evaluated on
 * the device and kept once, at load (a quantized GGUF linear weight stays
 * quantized for lm_linear).  A missing, unexpected or wrongly shaped weight
 * is an error naming the file, the key and both shapes.
 *
 * Ownership: the loaders return a model freed with lm_flux2_free;
 * lm_flux2_forward and the array helpers return new references (lazy) or
 * NULL with the error set. */
#ifndef LM_FLUX2_H
#define LM_FLUX2_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include "array.h"
#include "core/io/io.h"
#include "device.h"

typedef struct lm_flux2 lm_flux2;

#define LM_FLUX2_MAX_AXES 8

typedef struct lm_flux2_config {
    int64_t patch_size, in_channels;
    int64_t out_channels;               /* null in config.json = in_channels */
    int64_t num_layers, num_single_layers;
    int64_t attention_head_dim, num_attention_heads;
    int64_t inner_dim;                  /* heads * head dim */
    int64_t joint_attention_dim, timestep_guidance_channels;
    double mlp_ratio;
    int64_t mlp_hidden;                 /* int(inner_dim * mlp_ratio), as Python truncates */
    int naxes;                          /* len(axes_dims_rope): the columns of the ids */
    int64_t axes_dims_rope[LM_FLUX2_MAX_AXES];   /* sum = attention_head_dim */
    double rope_theta, eps;
} lm_flux2_config;

/* dir: the transformer folder.  variant: NULL (the plain file, else its
 * .fp16 variant), "" or a variant name.  dt: the compute dtype.  dev NULL =
 * the default device. */
lm_flux2 *lm_flux2_load(const char *dir, const char *variant, lm_dtype dt, lm_device *dev);
/* config: a parsed config.json object (borrowed); weights: tensors under
 * diffusers' names, all consumed (the set is left empty, also on failure);
 * every key must be used exactly once.  file: the name errors give. */
lm_flux2 *lm_flux2_load_from(const cJSON *config, lm_tensor_set *weights, const char *file,
                             lm_dtype dt, lm_device *dev);
void lm_flux2_free(lm_flux2 *m);    /* NULL is fine */
const lm_flux2_config *lm_flux2_get_config(const lm_flux2 *m);
lm_dtype lm_flux2_dtype(const lm_flux2 *m);
lm_device *lm_flux2_device(const lm_flux2 *m);
/* Every weight the model took, under its diffusers key, with the field that
 * holds it (dit_common.h's lm_dit_slots): models/lora.c replaces weights
 * there and puts them back.  Valid until lm_flux2_free. */
struct lm_dit_slots *lm_flux2_weights(lm_flux2 *m);

/* One transformer call, as Flux2Transformer2DModel.forward with guidance
 * None and no KV cache: x [B, S, in_channels] (the packed latents);
 * ctx [B, L, joint_attention_dim] (the prompt embeddings); t [B] (or one
 * value for the batch): the timestep / 1000 the pipeline passes (the model
 * multiplies by 1000); img_ids [S, naxes] and txt_ids [L, naxes] the
 * position ids on the host (shared by the batch, as diffusers uses the
 * first row).  Returns [B, S, patch_size^2 * out_channels] in the model's
 * dtype. */
lm_array *lm_flux2_forward(lm_flux2 *m, lm_array *x, lm_array *ctx, lm_array *t,
                           const int32_t *img_ids, int64_t S, const int32_t *txt_ids, int64_t L);

/* ---- Flux2KleinPipeline's latent helpers (models/flux2_latents.c) ---- */

/* _prepare_latent_ids for an h x w grid of packed latents: ids[h*w, 4] =
 * (0, row, column, 0), rows outermost. */
void lm_flux2_latent_ids(int64_t h, int64_t w, int32_t *ids);
/* _prepare_image_ids for n reference-image latents (klein's editing), the
 * i-th of h[i] x w[i] cells: ids[sum h*w, 4] = (scale + scale*i, row,
 * column, 0), the latents one after another (the pipeline's scale is 10). */
void lm_flux2_image_ids(int n, const int64_t *h, const int64_t *w, int64_t scale, int32_t *ids);
/* _prepare_text_ids for L tokens: ids[L, 4] = (0, 0, 0, l). */
void lm_flux2_text_ids(int64_t L, int32_t *ids);
/* _patchify_latents: [B, C, H, W] -> [B, 4C, H/2, W/2] (channel c*4 + 2*dy + dx),
 * H and W even; _unpatchify_latents its inverse. */
lm_array *lm_flux2_patchify(lm_array *lat);
lm_array *lm_flux2_unpatchify(lm_array *lat);
/* _pack_latents: [B, C, h, w] -> [B, h*w, C]. */
lm_array *lm_flux2_pack(lm_array *lat);
/* _unpack_latents_with_ids: x [B, h*w, C] -> [B, C, h, w], token i going to
 * row ids[i*ncol + 1], column ids[i*ncol + 2] (ids shared by the batch);
 * ids NULL is the order lm_flux2_latent_ids gives.  The ids must cover
 * the grid exactly once. */
lm_array *lm_flux2_unpack(lm_array *x, const int32_t *ids, int ncol, int64_t h, int64_t w);
/* The VAE's batch-norm statistics (lm_vae_bn) applied to patchified
 * latents [B, 4*latent_channels, h, w]: normalize (x - mean) / sqrt(var +
 * eps), as _encode_vae_image does after encoding, and denormalize x *
 * sqrt(var + eps) + mean, as the pipeline does before unpatchify and
 * decode.  Computed in x's dtype, as diffusers casts the statistics. */
lm_array *lm_flux2_bn_normalize(lm_array *x, lm_array *mean, lm_array *var, double eps);
lm_array *lm_flux2_bn_denormalize(lm_array *x, lm_array *mean, lm_array *var, double eps);

#endif
