/* lora.h - LoRA and LyCORIS adapters merged into a loaded SD pipeline's
 * UNet and text encoders, or into a DiT pipeline's transformer (Z-Image,
 * FLUX.2-klein: transformer.<diffusers name>, diffusion_model.<diffusers or
 * original name>, lora_unet_<either with _>; an original fused qkv adapts
 * diffusers' to_q / to_k / to_v by thirds of its up factor, and diffusers'
 * to_q a third of a fused qkv Lumen keeps; see docs/DIFFUSION.md) (issue 37).
 *
 * Files (safetensors), every layout keyed per module:
 *   kohya / A1111   lora_unet_<module with _>, lora_te_ (SD 1.x/2.x) or
 *                   lora_te1_ / lora_te2_ (SDXL): .lora_down.weight,
 *                   .lora_up.weight, .alpha, optional .lora_mid.weight (LoCon's
 *                   3x3 middle) and .dora_scale
 *   PEFT/diffusers  unet. / text_encoder. / text_encoder_2. + the module's
 *                   dotted name: .lora_A.weight, .lora_B.weight, optional
 *                   .lora_magnitude_vector (DoRA); diffusers' older
 *                   .lora.down/.up.weight and .lora_linear_layer.down/.up.weight
 *   LyCORIS LoHa    .hada_w1_a/_b, .hada_w2_a/_b, optional .hada_t1/_t2 (CP)
 *   LyCORIS LoKr    .lokr_w1 or .lokr_w1_a/_b, .lokr_w2 or .lokr_w2_a/_b,
 *                   optional .lokr_t2 (CP)
 * Module names are diffusers' (the UNet) and transformers' (CLIP); kohya's
 * underscored names are matched against the model's own names with '.' as
 * '_' (diffusers-named kohya files, as sd-scripts writes for SD 1.x/2.x).
 *
 * Merging: every adapted weight W becomes, in f32 and cast back to the
 * compute dtype, f_n(...f_1(W)) over the loaded adapters in load order, with
 *   LoRA  f(W) = W + s * (alpha / rank) * up @ down   (reshaped for convs)
 *   DoRA  f(W) = m * V / ||V||_row, V = W + s * (alpha / rank) * up @ down
 *         (PEFT's definition: the norm per output row; s scales the delta)
 *   LoHa  f(W) = W + s * (alpha / rank) * (w1a @ w1b) * (w2a @ w2b)
 *   LoKr  f(W) = W + s * scale * kron(w1, w2), scale = alpha / rank where
 *         w1 or w2 is factorized (the last factor's rank), else 1 (LyCORIS)
 * where s is the adapter's weight, rank is the factor's first dimension and
 * a missing alpha means alpha = rank.  The original weights are kept:
 * unloading puts them back, bit for bit.
 *
 * Quantized (GGUF) weights are not merged: on the UNet's (and a DiT
 * transformer's) linear weights the
 * adapters apply at run time, y += (x down^T) (s alpha/rank up)^T for a
 * LoRA and y += x (s scale delta)^T for LoHa / LoKr (a dense delta in the
 * compute dtype), after the quantized product; DoRA there, and any adapter
 * on a quantized text-encoder weight, is refused naming the weight.
 *
 * An unmatched module (no such weight, or a key of no known layout) is an
 * error naming the key; with strict false the adapter loads without them
 * and lm_lora_info lists them.
 *
 * Ownership: the pipeline owns its adapters (lm_sd_pipeline_free unloads
 * them); strings returned are the pipeline's, valid until the next load or
 * unload. */
#ifndef LM_LORA_H
#define LM_LORA_H

#include <stdbool.h>
#include "models/sd_pipeline.h"

typedef struct lm_lora_stack lm_lora_stack;



typedef struct lm_lora_opts {
    double scale;         /* the adapter's weight, default 1 */
    bool strict;          /* default true: an unmatched key is an error */
    const char *name;     /* for the infotext; NULL = the file's stem */
    bool runtime;         /* apply to the UNet's linear weights at run time even where
                             they could be merged (tests; slower) */
} lm_lora_opts;

void lm_lora_opts_init(lm_lora_opts *o);

typedef struct lm_lora_info {
    const char *path, *name;
    double scale;
    const char *format;   /* "lora", "dora", "loha", "lokr" or a mix "lora+loha" */
    char hash[13];        /* A1111's short hash: the first 12 hex digits of kohya's
                             sshs_model_hash metadata, else of the sha256 of the bytes
                             after the safetensors header ("addnet hash") */
    int modules;          /* weights it changes */
    int unmatched;        /* keys skipped (strict false) */
    const char *unmatched_keys;   /* the first of them, ", "-separated ("" if none) */
} lm_lora_info;

/* Loads the adapter at path and merges it.  LM_OK, or an error naming the
 * file and the key (the pipeline is then as it was). */
lm_status lm_lora_load(lm_sd_pipeline *p, const char *path, const lm_lora_opts *o);
/* Unloads every adapter: the original weights back, bit for bit. */
void lm_lora_unload_all(lm_sd_pipeline *p);
int lm_lora_count(const lm_sd_pipeline *p);
/* The i-th loaded adapter (0 = the first loaded), or NULL. */
const lm_lora_info *lm_lora_get(const lm_sd_pipeline *p, int i);
/* A1111's infotext value for the loaded adapters, "name: hash, name2: hash"
 * (names without ':' and ',', as A1111 writes them; the caller quotes it),
 * into buf; "" when none. */
const char *lm_lora_hashes(const lm_sd_pipeline *p, char *buf, size_t cap);
/* A1111's addnet hash (12 hex digits) of a safetensors file into hash. */
lm_status lm_lora_file_hash(const char *path, char hash[13]);

/* --lora's "FILE[:WEIGHT]" (a trailing ":number" is the weight, default 1;
 * the infotext name is the file's stem).  LM_OK or an error naming it. */
lm_status lm_lora_load_spec(lm_sd_pipeline *p, const char *spec, bool strict);
/* The <lora:NAME:WEIGHT> tags of prompt loaded from dir/NAME.safetensors,
 * and the prompt without them in *clean (malloc'd; the caller frees it).
 * who spells the folder's option in errors ("--lora-dir DIR"); a tag with
 * dir NULL is an error saying so. */
lm_status lm_lora_load_tags(lm_sd_pipeline *p, const char *prompt, const char *dir, const char *who,
                            bool strict, char **clean);

/* For models/sd_pipeline.c: the pipeline's stack (freed, weights restored). */
void lm_lora_stack_free(lm_lora_stack *s);

/* For models/dit_pipeline.c's offload: detach puts the transformer's
 * original weights back (before it is freed) and forgets where they were;
 * attach finds them again in the transformer read anew and merges every
 * loaded adapter (LM_OK, or an error naming a weight it lacks; detached
 * then).  Both are no-ops on an SD pipeline's stack or NULL. */
struct lm_dit_pipe;
void lm_lora_detach(lm_lora_stack *s);
lm_status lm_lora_attach(lm_lora_stack *s, struct lm_dit_pipe *d);

/* <lora:NAME:WEIGHT> tags: removes them from prompt (a new string the caller
 * frees, in *clean) and returns their count (names and weights in the
 * arrays, up to max; names are new strings the caller frees), or -1 with
 * the error set (a malformed weight, no name).  The tags are found by
 * lm_prompt_extra_networks (models/prompt.h, A1111's extra_networks), the
 * only tag parser: every <kind:args> tag leaves the text, the <lora:...>
 * ones are counted; "<lora:name>" is weight 1. */
int lm_lora_tags(const char *prompt, char **clean, char **names, double *weights, int max);

#endif
