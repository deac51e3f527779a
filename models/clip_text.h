/* clip_text.h - CLIP text encoders (transformers' CLIPTextModel and
 * CLIPTextModelWithProjection) from a diffusers text_encoder/ folder:
 * config.json plus model.safetensors, model.fp16.safetensors or the shards
 * of model[.fp16].safetensors.index.json.  The network is built from
 * Lumen's ops (embedding, layer_norm, linear, causal attention, gelu), so it
 * runs on every device; weights are cast to the compute dtype, placed on the
 * device and kept (lm_array_keep) once, at load.
 *
 * Sizes come from config.json (hidden_size, intermediate_size,
 * num_attention_heads, num_hidden_layers, max_position_embeddings,
 * vocab_size, layer_norm_eps, hidden_act quick_gelu | gelu, projection_dim,
 * eos_token_id, architectures).  Weight names may carry transformers'
 * "text_model." prefix or not (transformers 5 saves CLIPTextModel without
 * it); a missing key, an unexpected key or a wrong shape is an error naming
 * the file, the key and the shapes.
 *
 * Ownership: lm_clip_text_load and lm_clip_text_load_from return a model freed with lm_clip_text_free;
 * lm_clip_text_forward fills an lm_clip_text_out whose arrays (new
 * references, lazy) the caller releases with lm_clip_text_out_free. */
#ifndef LM_CLIP_TEXT_H
#define LM_CLIP_TEXT_H

#include <stdbool.h>
#include <stdint.h>
#include <cjson/cJSON.h>
#include "array.h"
#include "core/io/io.h"
#include "device.h"

typedef struct lm_clip_text lm_clip_text;

typedef struct lm_clip_text_config {
    int64_t vocab_size, hidden_size, intermediate_size, num_heads, num_layers, max_positions;
    int64_t projection_dim;     /* 0 = no text_projection (CLIPTextModel) */
    int64_t eos_token_id;       /* 2 = pool at argmax(ids), as transformers does for old configs */
    double eps;
    bool quick_gelu;            /* hidden_act quick_gelu, else gelu (erf) */
} lm_clip_text_config;

/* dir: the component folder.  variant: NULL (model.safetensors, else
 * model.fp16.safetensors), "" or "fp16".  dt: the compute dtype (f32, f16,
 * bf16).  dev NULL = the default device. */
lm_clip_text *lm_clip_text_load(const char *dir, const char *variant, lm_dtype dt, lm_device *dev);
/* The same network from a parsed config.json object (config, borrowed) and
 * weights under transformers' names (with or without "text_model."), as
 * models/sd_single.c makes them from a single-file checkpoint.  The
 * weights are consumed: every array is moved out and *weights is left
 * empty, on success and on failure; every key must be used exactly once
 * (embeddings.position_ids excepted).  file names the source in errors. */
lm_clip_text *lm_clip_text_load_from(const cJSON *config, lm_tensor_set *weights, const char *file,
                                     lm_dtype dt, lm_device *dev);
void lm_clip_text_free(lm_clip_text *m);    /* NULL is fine */
const lm_clip_text_config *lm_clip_text_get_config(const lm_clip_text *m);
lm_dtype lm_clip_text_dtype(const lm_clip_text *m);
lm_device *lm_clip_text_device(const lm_clip_text *m);
/* The weights by transformers' name with "text_model." ("text_model.encoder.
 * layers.0.self_attn.q_proj.weight", "text_projection.weight"), for
 * models/lora.c: slot i in [0, count) (NULL outside; *slot NULL where the
 * model has no such weight, as text_projection without a projection), its
 * name written to name.  A slot holds a kept, evaluated array; whoever
 * replaces it keeps the new one and owns the old one's keep. */
int lm_clip_text_weight_count(const lm_clip_text *m);
lm_array **lm_clip_text_weight_slot(lm_clip_text *m, int i, char *name, size_t cap);

typedef struct lm_clip_text_out {
    lm_array *last_hidden_state;   /* [B, L, D], after the final layer norm */
    int nhidden;                   /* num_layers + 1 */
    lm_array **hidden_states;      /* [B, L, D] each: the embeddings, then every layer's
                                      output (before the final norm), as transformers'
                                      output_hidden_states; [nhidden-2] is the
                                      penultimate layer SDXL uses */
    lm_array *pooled;              /* [B, D]: last_hidden_state at each row's eos */
    lm_array *text_embeds;         /* [B, projection_dim] or NULL */
} lm_clip_text_out;

/* ids: batch rows of len token ids (len <= max_positions, each id in
 * [0, vocab_size)).  Fills *out with lazy arrays in the model's dtype. */
lm_status lm_clip_text_forward(lm_clip_text *m, const int32_t *ids, int64_t batch, int64_t len,
                               lm_clip_text_out *out);
/* ... with textual-inversion vectors: where extra[i] >= 0 (extra: batch *
 * len entries, or NULL) the token embedding of ids[i] is replaced by row
 * extra[i] of table [rows, hidden_size] (any float dtype and device), before
 * the position embeddings are added, as A1111's EmbeddingsWithFixes does. */
lm_status lm_clip_text_forward_ex(lm_clip_text *m, const int32_t *ids, int64_t batch, int64_t len,
                                  const int32_t *extra, lm_array *table, lm_clip_text_out *out);
void lm_clip_text_out_free(lm_clip_text_out *o);
/* final_layer_norm(x) (lazy, new reference): what diffusers applies to an
 * earlier hidden state for clip_skip on SD 1.x / 2.x. */
lm_array *lm_clip_text_final_norm(lm_clip_text *m, lm_array *x);

#endif
