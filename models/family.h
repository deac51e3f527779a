/* family.h - the model families as a table: one row per family (SD 1.x,
 * SD 2.x, SDXL), holding everything the loaders and the pipeline would
 * otherwise decide with a switch on the family: its networks and their
 * diffusers folders, its text conditioning (which encoders, which hidden
 * state, pooled or not, SDXL's add_time_ids), its latents (channels,
 * scaling and shift factors), its default steps / cfg / sampler / size, its
 * single-file key prefixes and the conventions config inference needs
 * (what tensor shapes cannot tell), and its scheduler.  The code reads
 * columns; adding a family is a row here plus the code for any network,
 * encoder kind or key map it brings (docs/DEVELOPING.md, "Adding a model
 * family").
 *
 * It also holds the one source of the generation options' defaults and
 * allowed ranges (steps, cfg, sampler, strength, batch, size, clip_skip,
 * seed), which models/sd_pipeline.c, `lumen generate` (repl/cli_generate.c)
 * and Lua's pipe:generate (lua/l_diffusion.c, and so `lumen batch`) read
 * and check through lm_sd_option_check_*: one implementation, one message
 * naming the option and its range. */
#ifndef LM_MODELS_FAMILY_H
#define LM_MODELS_FAMILY_H

#include <stdbool.h>
#include <stdint.h>
#include "error.h"

typedef enum lm_sd_family {
    LM_SD_UNKNOWN = 0,
    LM_SD_1,      /* SD 1.x: CLIP ViT-L */
    LM_SD_2,      /* SD 2.x: OpenCLIP ViT-H */
    LM_SD_XL,     /* SDXL base: ViT-L + OpenCLIP bigG */
    LM_SD_ZIMAGE, /* Z-Image (-Turbo): a flow-matching DiT conditioned by Qwen3 */
    LM_SD_KLEIN,  /* FLUX.2-klein, step-distilled (model_index.json is_distilled) */
    LM_SD_KLEIN_BASE, /* FLUX.2-klein base: the same networks, not distilled (CFG) */
    LM_SD_FAMILY_COUNT
} lm_sd_family;

/* The generation defaults of a family (and, in lm_sd_defaults_generic, of a
 * run before any model is known). */
typedef struct lm_sd_defaults {
    int steps;
    double cfg;
    const char *sampler;      /* a lm_sampler_parse name */
    double strength;          /* img2img */
    int batch;
    int clip_skip;            /* diffusers' (0 = none) */
} lm_sd_defaults;

/* The networks a row names (models/unet.h, models/vae.h); a family with
 * another denoiser (a DiT) adds its value and its network's file. */
typedef enum lm_sd_net {
    LM_SD_NET_NONE = 0,
    LM_SD_NET_UNET2D,         /* diffusers' UNet2DConditionModel */
    LM_SD_NET_AUTOENCODER_KL, /* diffusers' AutoencoderKL */
    LM_SD_NET_ZIMAGE,         /* diffusers' ZImageTransformer2DModel (models/zimage.h) */
    LM_SD_NET_FLUX2,          /* diffusers' Flux2Transformer2DModel (models/flux2.h) */
    LM_SD_NET_AUTOENCODER_KL_FLUX2, /* AutoencoderKLFlux2: AutoencoderKL plus the batch-norm
                                 statistics its latents are normalized with */
} lm_sd_net;

/* How a text encoder's file keys map to transformers' CLIPTextModel */
typedef enum lm_sd_te_kind {
    LM_SD_TE_NONE = 0,
    LM_SD_TE_CLIP,            /* CLIP ViT-L in transformers' names (quick_gelu) */
    LM_SD_TE_OPENCLIP,        /* OpenCLIP's text tower (gelu, fused qkv), taken to its
                                 penultimate layer (SD 2.x: the last block is dropped) */
    LM_SD_TE_OPENCLIP_PROJ,   /* OpenCLIP whole, with its text projection (SDXL's second) */
    LM_SD_TE_QWEN3,           /* transformers' Qwen3Model / Qwen3ForCausalLM (models/qwen3.h)
                                 with Qwen2's tokenizer and the chat template */
} lm_sd_te_kind;

#define LM_SD_MAX_LAYERS 4

typedef struct lm_sd_encoder {
    lm_sd_te_kind kind;
    const char *dir;          /* the diffusers folder: "text_encoder", "text_encoder_2" */
    const char *tokenizer;    /* its tokenizer's folder */
    const char *prefix;       /* its keys' prefix in a single file */
    int skip_base;            /* the hidden state taken with clip_skip 0, counted from
                                 the last: 0 = the last (last_hidden_state), 1 = the
                                 penultimate (hidden_states[-2]) */
    bool final_norm;          /* a hidden state before the last goes through the final
                                 layer norm (diffusers' SD pipelines; SDXL's do not) */
    bool pooled;              /* its projected pooled output conditions the UNet too */
    /* Qwen3 encoders (a chat-formatted prompt, padded to max_length): */
    int enable_thinking;      /* the chat template's enable_thinking: 1, 0, -1 undefined */
    int max_length;           /* the pipelines' max_sequence_length default */
    int n_layers;             /* the hidden states taken (transformers' indices, negative
                                 from the end) ... */
    int layers[LM_SD_MAX_LAYERS];
    bool masked_rows;         /* ... at the unmasked tokens only, one [L_i, D] per prompt
                                 (Z-Image), else every token, layers stacked along the
                                 features [B, L, n*D] (Klein) */
} lm_sd_encoder;

/* How a flow-matching family shifts its sigmas (the scheduler's mu) */
typedef enum lm_sd_mu {
    LM_SD_MU_NONE = 0,
    LM_SD_MU_LINEAR,          /* Z-Image: calculate_shift(image tokens) from the scheduler
                                 config's base/max shift and sequence lengths */
    LM_SD_MU_EMPIRICAL,       /* FLUX.2: compute_empirical_mu(image tokens, steps) */
} lm_sd_mu;

/* How the guided prediction is formed from the conditional c and
 * unconditional u outputs */
typedef enum lm_sd_cfg_form {
    LM_SD_CFG_U_PLUS = 0,     /* u + g (c - u), run when g > 1: diffusers' SD pipelines,
                                 FLUX.2 */
    LM_SD_CFG_C_PLUS,         /* c + g (c - u), run when g > 0: Z-Image */
} lm_sd_cfg_form;

#define LM_SD_MAX_ENCODERS 2

typedef struct lm_sd_family_row {
    lm_sd_family id;
    const char *name;         /* "sd1": Lua's pipe.family, messages */
    const char *title;        /* "SD 1.x" */
    const char *pipeline_class;   /* model_index.json's _class_name starts with it */
    /* networks: which, their diffusers folders, and the single-file key
     * prefixes of each */
    lm_sd_net denoiser, vae;
    const char *denoiser_dir, *vae_dir;
    const char *denoiser_prefix, *vae_prefix;
    /* text conditioning: the encoders, concatenated along the features */
    int n_encoders;
    lm_sd_encoder encoders[LM_SD_MAX_ENCODERS];
    bool time_ids;            /* SDXL's add_time_ids (original size, crop, target size) */
    bool force_zeros;         /* a None negative prompt is zeros unless model_index.json's
                                 force_zeros_for_empty_prompt says false */
    /* latents and the VAE */
    int latent_channels;
    double scaling_factor;    /* the VAE config's default */
    double shift_factor;      /* NAN: none */
    bool vae_upcast;          /* an f16 VAE runs in f32 when its config says force_upcast
                                 (diffusers' SDXL pipelines; its SD ones never upcast) */
    /* config inference for single files (what the shapes cannot tell) */
    int64_t sample_size;      /* the UNet's latent side (the image is 8 times it) */
    int64_t sample_size_v;    /* ... of a v-prediction checkpoint (0: the same) */
    int64_t vae_sample_size;  /* the VAE config's sample_size (its tiling reads it) */
    int unet_heads;           /* > 0: that many heads everywhere (diffusers'
                                 attention_head_dim holds it); 0: heads of 64 channels */
    bool unet_layers_list;    /* transformer_layers_per_block written as a list */
    bool upcast_attention;
    bool linear_projection;   /* the UNet's proj_in/out are linears (tells a folder's
                                 family among those with the same encoders) */
    const char *scheduler;    /* scheduler_config.json the family was trained with
                                 (prediction_type epsilon) */
    lm_sd_defaults defaults;
    /* flow-matching DiT families */
    bool flow;                /* FlowMatchEulerDiscreteScheduler (models/flowmatch.h)
                                 instead of the sampler table */
    lm_sd_mu mu;
    lm_sd_cfg_form cfg_form;
    bool packed;              /* FLUX.2: latents are patchified 2x2 and packed into tokens,
                                 normalized by the VAE's batch-norm statistics */
    int distilled;            /* -1: any; 1 / 0: the row of a model_index.json whose
                                 is_distilled says so (FLUX.2-klein) */
} lm_sd_family_row;

/* The row of f; NULL for LM_SD_UNKNOWN or out of range. */
const lm_sd_family_row *lm_sd_family_get(lm_sd_family f);
const char *lm_sd_family_name(lm_sd_family f);   /* "sd1", "sd2", "sdxl", "unknown" */

/* Detection.  From a single file's keys (n names): the one row whose every
 * encoder prefix, and no other row's, occurs; LM_SD_UNKNOWN when none or
 * several do.  From a diffusers folder: the row with n_encoders encoders whose
 * UNet has linear projections (linear_projection 1 / 0) and whose first
 * encoder is OpenCLIP (openclip_first 1 / 0), -1 meaning either; the first
 * row with that count of encoders when none matches. */
lm_sd_family lm_sd_family_from_keys(const char *const *names, int n);
lm_sd_family lm_sd_family_match(int n_encoders, int linear_projection, int openclip_first);
/* A DiT family's folder: the row whose pipeline_class starts model_index.json's
 * _class_name and, where the row says, whose is_distilled agrees (distilled:
 * 1 true, 0 false or absent); LM_SD_UNKNOWN when none.  SD rows are matched
 * by the functions above. */
lm_sd_family lm_sd_family_from_class(const char *cls, int distilled);

/* ---- generation options: defaults and ranges, one source ---- */

extern const lm_sd_defaults lm_sd_defaults_generic;

typedef enum lm_sd_opt {
    LM_SD_OPT_STEPS,
    LM_SD_OPT_CFG,
    LM_SD_OPT_STRENGTH,
    LM_SD_OPT_BATCH,
    LM_SD_OPT_SIZE,           /* each of width and height, in pixels */
    LM_SD_OPT_CLIP_SKIP,      /* diffusers' (A1111's Clip skip is one more) */
    LM_SD_OPT_SEED,
    LM_SD_OPT_COUNT
} lm_sd_opt;

typedef struct lm_sd_option {
    const char *name;         /* "steps": the Lua option */
    bool integer;
    int64_t ilo, ihi;         /* integers: lo..hi */
    double lo, hi;            /* numbers: lo..hi, or (lo, hi] when lo_open */
    bool lo_open;
} lm_sd_option;

const lm_sd_option *lm_sd_option_get(lm_sd_opt id);

/* The range as words: "a whole number from 1 to 10000", "a number in (0, 1]";
 * offset is added to integer bounds (the CLI's A1111 Clip skip: 1). */
const char *lm_sd_option_range(lm_sd_opt id, int64_t offset, char *buf, size_t n);

/* LM_OK, or LM_ERR_ARG with "WHO: NAME VALUE: expected RANGE" (who may be
 * NULL; name NULL = the option's) */
lm_status lm_sd_option_check_int(lm_sd_opt id, const char *who, const char *name, int64_t v);
lm_status lm_sd_option_check_num(lm_sd_opt id, const char *who, const char *name, double v);

/* A batch's seeds seed, seed+1, ..., seed+batch-1 each in LM_SD_OPT_SEED's
 * range (a seed past it could not be given back): LM_OK, or LM_ERR_ARG
 * naming the last seed and the largest first seed that fits.  seed_name and
 * batch_name: how the caller spells the options ("--seed", "seed"). */
lm_status lm_sd_seeds_check(const char *who, const char *seed_name, const char *batch_name,
                            int64_t seed, int64_t batch);

/* "WxH" or "N" (a square), whole numbers in LM_SD_OPT_SIZE's range, nothing
 * else; an error naming who, name and the text otherwise. */
lm_status lm_sd_size_parse(const char *who, const char *name, const char *s, int64_t *w, int64_t *h);

#endif
