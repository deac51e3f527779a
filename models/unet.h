/* unet.h - diffusers' UNet2DConditionModel (SD 1.x, SD 2.x, SDXL) as a
 * Lumen graph, from a diffusers unet/ folder: config.json plus
 * diffusion_pytorch_model[.fp16].safetensors or the shards of its
 * .safetensors.index.json.  Every size comes from config.json; the network
 * is built from lm_* ops (conv2d, group_norm, layer_norm, linear,
 * attention, geglu, upsample, concat), so it runs on every device.  Weights
 * are cast to the compute dtype, evaluated on the device and kept once, at
 * load.
 *
 * Supported: down blocks CrossAttnDownBlock2D / DownBlock2D, mid block
 * UNetMidBlock2DCrossAttn / UNetMidBlock2D / none, up blocks UpBlock2D /
 * CrossAttnUpBlock2D; positional time embedding; addition_embed_type
 * null or "text_time" (SDXL).  Anything else in config.json that changes
 * the network (class embeddings, scale_shift resnets, encoder_hid_dim,
 * dual cross attention, ...) is an LM_ERR_UNSUPPORTED error naming the key;
 * docs/DIFFUSION.md lists them.  Weight names are diffusers'; a missing,
 * unexpected or wrongly shaped weight is an error naming the file, the key
 * and the shapes.
 *
 * Ownership: the loaders return a model freed with lm_unet_free;
 * lm_unet_forward returns a new reference (lazy). */
#ifndef LM_UNET_H
#define LM_UNET_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include "array.h"
#include "core/io/io.h"
#include "device.h"

#define LM_UNET_MAX_LEVELS 8

typedef struct lm_unet lm_unet;

typedef enum lm_unet_add_embed {
    LM_UNET_ADD_NONE = 0,
    LM_UNET_ADD_TEXT_TIME = 1,   /* SDXL: pooled text embeds + time_ids */
} lm_unet_add_embed;

typedef struct lm_unet_config {
    int64_t in_channels, out_channels;
    int64_t sample_size;                 /* latent size the model was trained at; 0 = absent */
    int64_t levels;                      /* len(block_out_channels) */
    int64_t block_out_channels[LM_UNET_MAX_LEVELS];
    int64_t layers_per_block[LM_UNET_MAX_LEVELS];
    /* per down level (up level i uses down level levels-1-i, as diffusers reverses) */
    int64_t transformer_layers[LM_UNET_MAX_LEVELS];
    int64_t heads[LM_UNET_MAX_LEVELS];   /* attention heads (diffusers' attention_head_dim quirk resolved) */
    bool only_cross_attention[LM_UNET_MAX_LEVELS];
    bool down_attn[LM_UNET_MAX_LEVELS];  /* CrossAttnDownBlock2D, else DownBlock2D */
    bool up_attn[LM_UNET_MAX_LEVELS];    /* per up block, in forward order */
    int mid;                             /* 0 none, 1 UNetMidBlock2D, 2 UNetMidBlock2DCrossAttn */
    int64_t cross_attention_dim;         /* the width of the context every attention block reads */
    int64_t norm_num_groups;
    double norm_eps;
    bool use_linear_projection, upcast_attention, center_input_sample, flip_sin_to_cos;
    double freq_shift;
    int64_t time_embed_dim;              /* time_embedding_dim or 4 * block_out_channels[0] */
    int64_t conv_in_kernel, conv_out_kernel, downsample_padding;
    double mid_block_scale_factor;
    lm_unet_add_embed addition_embed_type;
    int64_t addition_time_embed_dim;     /* 0 unless text_time */
    int64_t projection_class_embeddings_input_dim;   /* 0 unless text_time */
} lm_unet_config;

/* dir: the unet folder.  variant: NULL (diffusion_pytorch_model.safetensors,
 * else the .fp16 one), "" or "fp16".  dt: the compute dtype (f32, f16, bf16,
 * f64).  dev NULL = the default device. */
lm_unet *lm_unet_load(const char *dir, const char *variant, lm_dtype dt, lm_device *dev);
/* config: a parsed config.json object (borrowed); weights: tensors under
 * diffusers' names, all consumed: the set is emptied (freed) whether the
 * load succeeds or not, and a tensor no part of the network uses is an
 * error.  file: the name errors give for the weights (and the config). */
lm_unet *lm_unet_load_from(const cJSON *config, lm_tensor_set *weights, const char *file,
                           lm_dtype dt, lm_device *dev);
void lm_unet_free(lm_unet *m);      /* NULL is fine */
const lm_unet_config *lm_unet_get_config(const lm_unet *m);
lm_dtype lm_unet_dtype(const lm_unet *m);
lm_device *lm_unet_device(const lm_unet *m);
/* The weights by diffusers' name ("down_blocks.0.resnets.0.conv1.weight"),
 * for models/lora.c: i in [0, count).  A slot holds a kept, evaluated
 * array; whoever replaces it keeps the new one and owns the old one's keep. */
int lm_unet_weight_count(const lm_unet *m);
const char *lm_unet_weight_name(const lm_unet *m, int i);
lm_array **lm_unet_weight_slot(lm_unet *m, int i);
/* Run-time additions to a linear weight's product, for what cannot be
 * merged into it (a quantized weight): y += (x a^T) b^T, or x a^T where b
 * is NULL; a and b in the model's dtype.  A list; the caller owns it and
 * its arrays and keeps them alive while set (NULL unsets). */
typedef struct lm_unet_extra {
    lm_array *a, *b;
    struct lm_unet_extra *next;
} lm_unet_extra;
lm_status lm_unet_weight_extra(lm_unet *m, int i, lm_unet_extra *e);

/* x [B, in_channels, H, W]; t [B] timesteps (any float dtype; the
 * sinusoidal embedding is computed in f32 as diffusers does); context
 * [B, L, cross_attention_dim] (encoder_hidden_states); text_embeds
 * [B, P] and time_ids [B, n] with P + n * addition_time_embed_dim =
 * projection_class_embeddings_input_dim for text_time models, else both
 * NULL.  H and W need not be multiples of 2^(levels-1): upsampling then
 * goes to the size of the matching skip, as diffusers does.  Returns the
 * noise prediction [B, out_channels, H, W] in the model's dtype (a new
 * lazy reference) or NULL with the error set. */
lm_array *lm_unet_forward(lm_unet *m, lm_array *x, lm_array *t, lm_array *context,
                          lm_array *text_embeds, lm_array *time_ids);

#endif
