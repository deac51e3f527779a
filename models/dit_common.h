/* dit_common.h - the pieces the Qwen3 text encoder and the flow-matching
 * DiTs (Z-Image, FLUX.2) share: a folder loader (config.json, the weight
 * files, the compute dtype checked, errors named after the component), a
 * weight loader that claims each tensor once (cast to the compute dtype,
 * evaluated on the device and kept; a quantized linear weight kept as it
 * is), by key or by a table of keys under a prefix, the leftover check that
 * makes an unexpected tensor an error, and small graph
 * helpers over Lumen's ops (RMSNorm over the last axis, rotary embeddings
 * on [B, H, L, D] or [B, L, H, D], multi-axis RoPE angle tables, the
 * quantized-aware linear, head split and merge).
 *
 * RMSNorm and RoPE are Lumen ops (lm_rms_norm, lm_rope_angles in
 * core/ops_nn.h, CPU and Vulkan kernels); these helpers only fix the
 * conventions the models use, so they run on every device.
 *
 * Ownership: an lm_dit_weights owns the tensor set it was given (the
 * caller's is left empty) until lm_dit_weights_free; lm_dit_take hands out
 * kept arrays (lm_array_keep) that the model frees with lm_dit_drop.  The
 * graph helpers return new references (release them) or NULL with the
 * error set; their inputs are borrowed. */
#ifndef LM_DIT_COMMON_H
#define LM_DIT_COMMON_H

#include <stdbool.h>
#include <stdint.h>
#include <cjson/cJSON.h>
#include "array.h"
#include "core/io/io.h"
#include "device.h"

/* ---- weights ---- */
/* What a model took, by key: the kept array lives at *slot (a field of the
 * model, stable for its lifetime), for adapters that replace weights in
 * place (models/lora.c).  name is the key taken (malloc'd). */
/* A run-time addition to a linear weight's product (models/lora.c's
 * adapters on quantized weights): y += (x a^T) b^T, or x a^T where b is
 * NULL; the arrays are the setter's. */
typedef struct lm_dit_extra {
    lm_array *a, *b;
    struct lm_dit_extra *next;
} lm_dit_extra;

typedef struct lm_dit_slot {
    char *name;
    lm_array **slot;
    const lm_dit_extra *extra;   /* NULL, or the terms lm_dit_linear_in adds (the setter's) */
} lm_dit_slot;

typedef struct lm_dit_slots {
    int n, cap;
    lm_dit_slot *s;
    int nextra;          /* slots with terms: none, and lm_dit_linear_in looks nothing up */
} lm_dit_slots;

/* Sets (e NULL: clears) slot i's run-time terms. */
void lm_dit_slots_set_extra(lm_dit_slots *s, int i, const lm_dit_extra *e);

/* Frees the names and the list (not the arrays); leaves *s empty. */
void lm_dit_slots_free(lm_dit_slots *s);

typedef struct lm_dit_weights {
    lm_tensor_set set;
    bool *used;          /* [set.count]: claimed (or skipped) */
    const char *file;    /* names the source in errors (borrowed) */
    const char *prefix;  /* tried before the bare key, e.g. "model." (borrowed, may be NULL) */
    lm_dtype dt;         /* the compute dtype weights are cast to */
    lm_dit_slots *record;   /* NULL, or where lm_dit_take_as lists every key taken and its slot */
} lm_dit_weights;

/* Takes *weights (left empty, on success and on failure) and gives every
 * tensor to dev.  file names the source in errors. */
lm_status lm_dit_weights_init(lm_dit_weights *w, lm_tensor_set *weights, const char *file,
                              lm_dtype dt, lm_device *dev);
void lm_dit_weights_free(lm_dit_weights *w);     /* leaves *w empty; NULL is fine */
/* The index of key (prefix + key first, then key), or -1. */
int lm_dit_weights_find(const lm_dit_weights *w, const char *key);
/* Claims the tensor key of shape nd/shape: cast to w->dt (a quantized 2-D
 * weight other than an embedding stays as it is, for lm_linear's quantized
 * product), evaluated and kept.  A missing key, another shape or a
 * non-float dtype is an error naming w->file, the key and the shapes. */
lm_status lm_dit_take(lm_dit_weights *w, const char *key, int nd, const int64_t *shape,
                      lm_array **out);
/* lm_dit_take with the quantized rule said: linear true lets a quantized
 * 2-D weight stay quantized (a linear layer's matrix); false casts nothing
 * quantized (an embedding, a pad token: read as data), a quantized tensor
 * then being an error.  lm_dit_take is linear unless key names an embedding. */
lm_status lm_dit_take_as(lm_dit_weights *w, const char *key, int nd, const int64_t *shape, bool linear,
                         lm_array **out);

/* One row of a weight table for lm_dit_take_list. */
typedef struct lm_dit_want {
    const char *name;    /* the key after the table's prefix */
    int nd;              /* 1 to 4 */
    int64_t shape[4];
    lm_array **dst;
    bool on;             /* false: not in this configuration, left alone */
} lm_dit_want;

/* Takes every row of want[n] that is on, prefix + name as the key
 * (a quantized 2-D weight stays quantized: lm_dit_take_as, linear); the
 * first error stops. */
lm_status lm_dit_take_list(lm_dit_weights *w, const char *prefix, const lm_dit_want *want, size_t n);
/* Marks key as used without reading it (e.g. an LM head the encoder does
 * not need): a mapped tensor is never read.  Nothing happens if absent. */
void lm_dit_weights_skip(lm_dit_weights *w, const char *key);
/* LM_OK when every tensor was claimed, else an error naming w->file and
 * the first unclaimed tensor with its shape; context (may be NULL) is
 * appended in parentheses, e.g. "config: 2 layers". */
lm_status lm_dit_weights_finish(const lm_dit_weights *w, const char *context);
/* Unkeeps *a (a weight from lm_dit_take) and sets it to NULL. */
void lm_dit_drop(lm_array **a);

/* ---- a component's folder ---- */
/* A component's load_from: the network from its config (cfg_name names it
 * in errors) and weights w (borrowed: it takes what it needs, then
 * lm_dit_weights_finish), or NULL with the error set.  lm_dit_load_dir /
 * _parts call it with Lumen initialized, dt checked, the weights on dev. */
typedef void *(*lm_dit_build_fn)(const cJSON *config, const char *cfg_name, lm_dit_weights *w, lm_dtype dt,
                                 lm_device *dev);
/* Checks a config before any weight is read, so its errors come first. */
typedef lm_status (*lm_dit_check_fn)(const cJSON *config, const char *cfg_name);

typedef struct lm_dit_component {
    const char *what;         /* e.g. "zimage transformer": errors start with it */
    const char *stem;         /* the weight files' stem, e.g. "diffusion_pytorch_model"; NULL: "model" */
    size_t max_config;        /* config.json's size limit in bytes */
    bool f64;                 /* f64 is a compute dtype too, beside f32, f16 and bf16 */
    lm_dit_check_fn check;    /* NULL: the config is read by build alone */
    lm_dit_build_fn build;
} lm_dit_component;

/* Loads a diffusers / transformers folder: dir/config.json (c->check runs on
 * it first), the weights dir/stem[.variant].safetensors or its sharded index
 * (lm_dfs_load_weights_stem), then c->build.  On failure (NULL) an error
 * that does not already start with c->what's first word (e.g. "zimage") is
 * prefixed "what dir: ". */
void *lm_dit_load_dir(const lm_dit_component *c, const char *dir, const char *variant, lm_dtype dt,
                      lm_device *dev);
/* c->build on a config and weights from elsewhere (*weights is taken and
 * left empty); errors prefixed with c->what as lm_dit_load_dir does. */
void *lm_dit_load_parts(const lm_dit_component *c, const cJSON *config, const char *cfg_name,
                        lm_tensor_set *weights, const char *file, lm_dtype dt, lm_device *dev);

/* ---- graph helpers ---- */
/* Releases *a and stores r (which may be NULL); returns r. */
lm_array *lm_dit_swap(lm_array **a, lm_array *r);
/* lm_linear; with a quantized weight the f32 product is cast back to x's
 * dtype before the bias. */
lm_array *lm_dit_linear(lm_array *x, lm_array *w, lm_array *b);
/* lm_dit_linear plus the run-time terms s holds for the weight w (found by
 * the array in its slot; s NULL or without terms: lm_dit_linear). */
lm_array *lm_dit_linear_in(const lm_dit_slots *s, lm_array *x, lm_array *w, lm_array *b);
/* x * rsqrt(mean(x^2 over the last axis) + eps) * w (w [D] or NULL),
 * computed in f32, in x's dtype. */
lm_array *lm_dit_rms_norm(lm_array *x, lm_array *w, double eps);
/* [B, L, H*Dh] -> [B, L, H, Dh] (a view where x's strides allow one, e.g.
 * columns sliced from a wider projection; else a copy) */
lm_array *lm_dit_split_heads(lm_array *x, int64_t H, int64_t Dh);
/* [B, H, L, Dh] -> [B, L, H*Dh] (contiguous) */
lm_array *lm_dit_merge_heads(lm_array *x);

typedef enum lm_dit_layout {
    LM_DIT_BHLD,   /* x[B, H, L, D]: heads before positions */
    LM_DIT_BLHD    /* x[B, L, H, D]: positions before heads */
} lm_dit_layout;

/* Rotates the first 2 * angles.shape[-1] features of every head of x by
 * angles (radians, any float dtype) of shape [L, D/2] or [B, L, D/2]: pairs
 * (2j, 2j+1) when interleaved (FLUX, Z-Image's complex product), else
 * (j, j + D/2) (transformers' rotate_half, Qwen3).  Computed in f32, x's
 * dtype out. */
lm_array *lm_dit_rope(lm_array *x, lm_array *angles, lm_dit_layout layout, bool interleaved);
/* Multi-axis angle table: pos[..., L, naxes] (any numeric dtype) ->
 * f64 [..., L, sum(axes_dims)/2], axis a contributing pos[..., a] *
 * theta^(-2j/axes_dims[a]) for j < axes_dims[a]/2, the axes in order.  With
 * naxes 1 and axes_dims[0] = D this is the plain RoPE table. */
lm_array *lm_dit_rope_angles(lm_array *pos, int naxes, const int64_t *axes_dims, double theta);

/* The DiTs' timestep sinusoid: t [B] (already scaled) -> [B, dim] f32,
 * [cos | sin] of t * exp(-log(10000) j / (dim/2)), computed in f32 as
 * diffusers' get_timestep_embedding (FLUX.2) and Z-Image's TimestepEmbedder
 * compute it; an odd dim gets a zero column.  Runs on every device. */
lm_array *lm_dit_sinusoid(lm_array *t, int64_t dim, lm_device *dev);

#endif
