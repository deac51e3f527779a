/* qwen3.h - the Qwen3 language model as a text encoder (transformers'
 * Qwen3Model and Qwen3ForCausalLM without its head), as Z-Image and
 * FLUX.2-klein condition on it: from a diffusers text_encoder/ folder
 * (config.json plus model.safetensors or the shards of
 * model.safetensors.index.json), from weights without a config
 * (lm_qwen3_config_infer) or from a GGUF in llama.cpp's layout
 * (lm_qwen3_load_gguf).  The network is built from Lumen's ops
 * (embedding, rms_norm, linear, rope, attention with a padding mask and
 * grouped key/value heads, swiglu), so it runs on every device; weights
 * are cast to the compute dtype, placed on the device and kept once, at
 * load.
 *
 * Sizes come from config.json (hidden_size, intermediate_size,
 * num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim
 * (absent: 128 as Qwen3Config; null: hidden_size / num_attention_heads),
 * rms_norm_eps, rope_theta or
 * rope_parameters.rope_theta, vocab_size, max_position_embeddings,
 * attention_bias, hidden_act silu).  RoPE scaling (rope_scaling, a
 * rope_type other than "default", partial_rotary_factor) and sliding-window
 * layers are refused, naming the key.  Weight names are Qwen3Model's
 * (embed_tokens.weight, layers.N..., norm.weight) or Qwen3ForCausalLM's
 * (the same under "model.", plus lm_head.weight, which is never read); a
 * missing key, an unexpected key or a wrong shape is an error naming the
 * file, the key and the shapes.
 *
 * Ownership: lm_qwen3_load and lm_qwen3_load_from return a model freed with
 * lm_qwen3_free; lm_qwen3_forward's arrays are new references (lazy) the
 * caller releases. */
#ifndef LM_QWEN3_H
#define LM_QWEN3_H

#include <stdbool.h>
#include <stdint.h>
#include <cjson/cJSON.h>
#include "array.h"
#include "core/io/io.h"
#include "device.h"

typedef struct lm_qwen3 lm_qwen3;

typedef struct lm_qwen3_config {
    int64_t vocab_size, hidden_size, intermediate_size, num_layers;
    int64_t num_heads, num_kv_heads, head_dim, max_positions;
    double eps, rope_theta;
    bool attention_bias;
} lm_qwen3_config;

/* dir: the component folder.  variant: NULL (model.safetensors, else
 * model.fp16.safetensors), "" or "fp16".  dt: the compute dtype (f32, f16,
 * bf16).  dev NULL = the default device. */
lm_qwen3 *lm_qwen3_load(const char *dir, const char *variant, lm_dtype dt, lm_device *dev);
/* The same network from a parsed config.json object (config, borrowed) and
 * weights under transformers' names.  The weights are consumed: *weights
 * is left empty, on success and on failure; every key must be used exactly
 * once (lm_head.weight excepted).  file names the source in errors. */
lm_qwen3 *lm_qwen3_load_from(const cJSON *config, lm_tensor_set *weights, const char *file,
                             lm_dtype dt, lm_device *dev);
/* A config.json object for weights that come without one (a single-file
 * encoder, as ComfyUI loads Qwen3-4B): vocab_size, hidden_size,
 * intermediate_size, num_hidden_layers, head_dim, num_attention_heads,
 * num_key_value_heads and attention_bias from the shapes and keys (with or
 * without "model."); what shapes cannot tell is Qwen3's released value
 * (rms_norm_eps 1e-6, rope_theta 1000000, max_position_embeddings 40960).
 * NULL with the error set (naming file and the key) when a tensor the
 * sizes come from is missing or misshaped.  Free with cJSON_Delete. */
cJSON *lm_qwen3_config_infer(const lm_tensor_set *weights, const char *file);
/* A GGUF encoder in llama.cpp's layout (general.architecture "qwen3";
 * token_embd, blk.N.attn_q / attn_k / attn_v / attn_output / attn_q_norm /
 * attn_k_norm / attn_norm / ffn_norm / ffn_gate / ffn_up / ffn_down,
 * output_norm; output, the LM head, is left unread), as ComfyUI-GGUF loads
 * Qwen3 encoders: *config gets a config.json object from the qwen3.*
 * metadata (free with cJSON_Delete) and *weights the tensors under
 * transformers' names, placed on dev, for lm_qwen3_load_from.  Quantized
 * linear weights stay quantized (lm_linear's quantized product); a
 * quantized embedding is dequantized at load.  RoPE scaling in the
 * metadata is refused. */
lm_status lm_qwen3_read_gguf(const char *path, lm_device *dev, cJSON **config,
                             lm_tensor_set *weights);
lm_qwen3 *lm_qwen3_load_gguf(const char *path, lm_dtype dt, lm_device *dev);
void lm_qwen3_free(lm_qwen3 *m);     /* NULL is fine */
const lm_qwen3_config *lm_qwen3_get_config(const lm_qwen3 *m);
lm_dtype lm_qwen3_dtype(const lm_qwen3 *m);
lm_device *lm_qwen3_device(const lm_qwen3 *m);

/* ids: batch rows of len token ids (1 <= len <= max_positions, each id in
 * [0, vocab_size)); mask: batch rows of len 1/0 (1 = a token, 0 = padding;
 * NULL = all 1), as transformers' attention_mask: a query attends to the
 * keys at or before it whose mask is 1 (padded rows too, as the sdpa mask
 * does; a row whose first key is masked has nothing to attend and is
 * refused).  Positions are 0..len-1 whatever the mask.
 * out[i] gets transformers' hidden_states[want[i]] as a lazy [B, L, hidden]
 * array in the model's dtype: index 0 the embeddings, k the output of layer
 * k, num_layers the output after the final norm; a negative index counts
 * from the end as Python does (-2 = the output of the next-to-last layer).
 * No layer past the largest wanted index is built. */
lm_status lm_qwen3_forward(lm_qwen3 *m, const int32_t *ids, const int32_t *mask, int64_t batch,
                           int64_t len, int nwant, const int *want, lm_array **out);

/* The rows of h ([L, D] or [1, L, D]) whose mask is nonzero, [n, D] (lazy,
 * a new reference): Z-Image's prompt_embeds[i][prompt_masks[i]].  mask
 * NULL keeps every row; len is the length of mask and must be h's L. */
lm_array *lm_qwen3_masked_rows(lm_array *h, const int32_t *mask, int64_t len);
/* FLUX.2-klein's prompt embeddings from n hidden states [B, L, D]:
 * torch.stack(hs, dim=1).permute(0, 2, 1, 3).reshape(B, L, n * D), i.e.
 * each token's features of hs[0], then hs[1], ... (lazy, a new
 * reference). */
lm_array *lm_qwen3_stack_layers(int n, lm_array *const *hs);

#endif
