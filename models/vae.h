/* vae.h - diffusers' AutoencoderKL (the VAE of Stable Diffusion 1.x, 2.x
 * and SDXL) from a diffusers vae/ folder: config.json plus
 * diffusion_pytorch_model[.fp16].safetensors.  Encoder and decoder are
 * built from Lumen's ops (conv2d, group_norm, silu, linear, attention,
 * nearest upsampling), so they run on every device; weights are cast to the
 * compute dtype, placed on the device and kept (lm_array_keep) once, at load.
 *
 * AutoencoderKLFlux2 (FLUX.2's VAE) is the same network plus the running
 * statistics of a BatchNorm over the patchified latents (lm_vae_bn); its
 * config adds batch_norm_eps, batch_norm_momentum and patch_size.
 *
 * Sizes come from config.json (in_channels, out_channels, latent_channels,
 * block_out_channels, layers_per_block, norm_num_groups, sample_size,
 * mid_block_add_attention, use_quant_conv, use_post_quant_conv), never
 * constants; down_block_types must all be DownEncoderBlock2D, up_block_types
 * UpDecoderBlock2D and act_fn silu, else the config is refused naming the
 * key.  A missing, unexpected or wrongly shaped weight is an error naming the
 * file, the key and both shapes.
 *
 * Outputs are raw, as diffusers' vae.encode / vae.decode: the caller applies
 * scaling_factor and shift_factor.
 *
 * Tiling (as diffusers' enable_tiling): an input larger than the tile is
 * cut into overlapping tiles evaluated one at a time and blended with
 * diffusers' linear ramps (blend_v / blend_h, applied in the same order and
 * in place), so the result equals diffusers' tiled_decode / _tiled_encode
 * and peak memory is one tile's work plus the output.  The default mode,
 * auto, does so only when the untiled pass would not fit a memory budget:
 * what fits is diffusers' untiled result, what does not still decodes.
 *
 * Ownership: lm_vae_load* return a model freed with lm_vae_free; encode and
 * decode return new references (release them). */
#ifndef LM_VAE_H
#define LM_VAE_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include "array.h"
#include "core/io/io.h"
#include "device.h"

typedef struct lm_vae lm_vae;

#define LM_VAE_MAX_LEVELS 8

typedef struct lm_vae_config {
    int64_t in_channels, out_channels, latent_channels;
    int nlevels;                                /* len(block_out_channels) */
    int64_t block_out_channels[LM_VAE_MAX_LEVELS];
    int64_t layers_per_block, norm_num_groups;
    int64_t sample_size;                        /* pixels; the first entry of a list */
    int64_t downscale;                          /* 2^(nlevels-1): pixels per latent */
    double scaling_factor;                      /* 0.18215 when absent (diffusers' default) */
    double shift_factor;                        /* NAN when absent or null */
    bool use_quant_conv, use_post_quant_conv, mid_block_add_attention, force_upcast;
    /* AutoencoderKLFlux2 (FLUX.2): AutoencoderKL plus a BatchNorm "bn" over the
     * patchified latents (patch_size[0]*patch_size[1]*latent_channels) whose
     * running statistics the pipeline (de)normalizes with (lm_vae_bn) */
    bool flux2;
    double batch_norm_eps, batch_norm_momentum;   /* 1e-4 and 0.1 when absent */
    int64_t patch_size[2];                        /* [2, 2] when absent; 0 unless flux2 */
} lm_vae_config;

typedef enum lm_vae_tiling_mode {
    LM_VAE_TILING_AUTO = 0,   /* the default: as ON, but only when the untiled pass would
                                 need more than the budget (see lm_vae_untiled_bytes) */
    LM_VAE_TILING_ON,         /* diffusers after enable_tiling(): tile an input with a side
                                 larger than the tile */
    LM_VAE_TILING_OFF,        /* never tile (diffusers' default) */
} lm_vae_tiling_mode;

typedef struct lm_vae_tiling {
    lm_vae_tiling_mode mode;
    int64_t tile;       /* tile side in image pixels; 0 = config sample_size (diffusers) */
    double overlap;     /* tile_overlap_factor in (0, 1); 0 = 0.25 (diffusers) */
    size_t budget;      /* AUTO's bound in bytes; 0 = the device's memory limit less what
                           is active when a limit is set, else a quarter of the device's
                           memory when known, else 4 GiB */
} lm_vae_tiling;

/* dir: the component folder.  variant: NULL (diffusion_pytorch_model.safetensors,
 * else its .fp16 variant), "" or "fp16".  dt: the compute dtype (f32, f16,
 * bf16, f64).  dev NULL = the default device. */
lm_vae *lm_vae_load(const char *dir, const char *variant, lm_dtype dt, lm_device *dev);
/* config: a parsed config.json object (borrowed); weights: tensors under
 * diffusers' names, all consumed (the set is left empty, also on failure);
 * every key must be used exactly once.  file: the name errors give. */
lm_vae *lm_vae_load_from(const cJSON *config, lm_tensor_set *weights, const char *file,
                         lm_dtype dt, lm_device *dev);
void lm_vae_free(lm_vae *m);     /* NULL is fine */
const lm_vae_config *lm_vae_get_config(const lm_vae *m);
lm_dtype lm_vae_dtype(const lm_vae *m);
lm_device *lm_vae_device(const lm_vae *m);

/* The estimated peak of an untiled encode or decode of a batch of b
 * images of h x w pixels: five activations of the first level's width at
 * full resolution (what a decode measured: 2560 MiB for SD's VAE at 1024^2
 * in f32). */
size_t lm_vae_untiled_bytes(const lm_vae *m, int64_t b, int64_t h, int64_t w);

/* t NULL restores the default (auto, sample_size, 0.25, default budget).  Refuses a tile
 * that is not a positive multiple of the downscale factor, or an overlap
 * outside (0, 1). */
lm_status lm_vae_set_tiling(lm_vae *m, const lm_vae_tiling *t);
lm_vae_tiling lm_vae_get_tiling(const lm_vae *m);

/* img [B, in_channels, H, W] in -1..1 (any float dtype; cast to the model's
 * dtype and moved to its device).  *mean and *logvar get [B,
 * latent_channels, h, w] (logvar clamped to [-30, 20] as diffusers'
 * DiagonalGaussianDistribution), lazy unless tiling evaluated them. */
lm_status lm_vae_encode(lm_vae *m, lm_array *img, lm_array **mean, lm_array **logvar);
/* AutoencoderKLFlux2's batch-norm running statistics: *mean and *var get
 * new references to bn.running_mean and bn.running_var ([patch_size[0] *
 * patch_size[1] * latent_channels], in the model's dtype), *eps
 * batch_norm_eps (any out pointer may be NULL).  An error naming the class
 * for any other VAE. */
lm_status lm_vae_bn(const lm_vae *m, lm_array **mean, lm_array **var, double *eps);
/* z [B, latent_channels, h, w], already divided by scaling_factor (and
 * shift added back) -> [B, out_channels, H, W] about -1..1, in the model's
 * dtype; NULL with the error set. */
lm_array *lm_vae_decode(lm_vae *m, lm_array *z);

#endif
