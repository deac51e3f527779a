/* qwen3_files.c - where a Qwen3 encoder's config comes from when its
 * weights are not a diffusers folder (see qwen3.h): a config inferred from
 * the tensor shapes (single files), and GGUF files in llama.cpp's layout
 * (its metadata as a config, its tensor names mapped to transformers').
 * The network itself is qwen3.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/io/gguf.h"
#include "lumen.h"
#include "qwen3.h"

/* the tensor key (under "model." or bare) of ndim nd, or NULL */
static const lm_array *infer_get(const lm_tensor_set *w, const char *key, int nd)
{
    char buf[256];
    snprintf(buf, sizeof buf, "model.%s", key);
    int i = lm_tensor_set_find(w, buf);
    if (i < 0) i = lm_tensor_set_find(w, key);
    return i >= 0 && w->arrays[i]->ndim == nd ? w->arrays[i] : NULL;
}

cJSON *lm_qwen3_config_infer(const lm_tensor_set *weights, const char *file)
{
    if (!file) file = "weights";
    static const char *need[5] = {"embed_tokens.weight", "layers.0.self_attn.q_norm.weight",
                                  "layers.0.self_attn.q_proj.weight",
                                  "layers.0.self_attn.k_proj.weight", "layers.0.mlp.gate_proj.weight"};
    static const int nd[5] = {2, 1, 2, 2, 2};
    const lm_array *a[5];
    for (int i = 0; i < 5; i++)
        if (!(a[i] = infer_get(weights, need[i], nd[i]))) {
            lm_error_set(LM_ERR_FORMAT, "qwen3 text encoder %s: no %d-d weight [model.]%s to take "
                         "the sizes from", file, nd[i], need[i]);
            return NULL;
        }
    int64_t V = a[0]->shape[0], D = a[0]->shape[1], Dh = a[1]->shape[0];
    int64_t Q = a[2]->shape[0], K = a[3]->shape[0], F = a[4]->shape[0];
    if (Dh < 2 || Q % Dh || K % Dh || a[2]->shape[1] != D || a[3]->shape[1] != D ||
        a[4]->shape[1] != D) {
        lm_error_set(LM_ERR_SHAPE, "qwen3 text encoder %s: q_proj [%lld,%lld], k_proj [%lld,%lld], "
                     "gate_proj [%lld,%lld] do not fit hidden %lld and head_dim %lld (q_norm)",
                     file, (long long)Q, (long long)a[2]->shape[1], (long long)K,
                     (long long)a[3]->shape[1], (long long)F, (long long)a[4]->shape[1],
                     (long long)D, (long long)Dh);
        return NULL;
    }
    int64_t layers = 0;
    for (;; layers++) {
        char key[96];
        snprintf(key, sizeof key, "layers.%lld.input_layernorm.weight", (long long)layers);
        if (!infer_get(weights, key, 1)) break;
    }
    cJSON *c = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(c, "architectures");
    if (!c || !arch) {
        cJSON_Delete(c);
        lm_error_set(LM_ERR_NOMEM, "out of memory");
        return NULL;
    }
    cJSON_AddItemToArray(arch, cJSON_CreateString(lm_tensor_set_find(weights, "model.embed_tokens.weight")
                                                  >= 0 ? "Qwen3ForCausalLM" : "Qwen3Model"));
    cJSON_AddNumberToObject(c, "vocab_size", (double)V);
    cJSON_AddNumberToObject(c, "hidden_size", (double)D);
    cJSON_AddNumberToObject(c, "intermediate_size", (double)F);
    cJSON_AddNumberToObject(c, "num_hidden_layers", (double)layers);
    cJSON_AddNumberToObject(c, "head_dim", (double)Dh);
    cJSON_AddNumberToObject(c, "num_attention_heads", (double)(Q / Dh));
    cJSON_AddNumberToObject(c, "num_key_value_heads", (double)(K / Dh));
    bool bias = infer_get(weights, "layers.0.self_attn.q_proj.bias", 1) != NULL;
    cJSON_AddBoolToObject(c, "attention_bias", bias);
    cJSON_AddStringToObject(c, "hidden_act", "silu");
    cJSON_AddNumberToObject(c, "rms_norm_eps", 1e-6);
    cJSON_AddNumberToObject(c, "rope_theta", 1000000.0);
    cJSON_AddNumberToObject(c, "max_position_embeddings", 40960);
    return c;
}

/* ---- GGUF (llama.cpp's names) ---- */

/* llama.cpp's tensor name suffix -> transformers' */
static const char *const gguf_names[][2] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"}, {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.weight", "self_attn.k_proj.weight"}, {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.weight", "self_attn.v_proj.weight"}, {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.weight", "self_attn.o_proj.weight"}, {"attn_output.bias", "self_attn.o_proj.bias"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"}, {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"}, {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"}, {"ffn_down.weight", "mlp.down_proj.weight"},
};

/* transformers' name of GGUF tensor n (malloc'd), or NULL to keep n */
static char *gguf_rename(const char *n)
{
    char buf[256];
    if (!strcmp(n, "token_embd.weight")) return strdup("embed_tokens.weight");
    if (!strcmp(n, "output_norm.weight")) return strdup("norm.weight");
    if (!strcmp(n, "output.weight")) return strdup("lm_head.weight");
    long long l;
    int at = 0;
    if (sscanf(n, "blk.%lld.%n", &l, &at) != 1 || at == 0 || l < 0) return NULL;
    for (size_t k = 0; k < sizeof gguf_names / sizeof *gguf_names; k++)
        if (!strcmp(n + at, gguf_names[k][0])) {
            snprintf(buf, sizeof buf, "layers.%lld.%s", l, gguf_names[k][1]);
            return strdup(buf);
        }
    return NULL;
}

/* the number at key (an unsigned, signed or float GGUF value) */
static lm_status gguf_num(const lm_gguf_meta *g, const char *key, const char *path, bool required,
                          double def, double *out)
{
    int i = lm_gguf_meta_find(g, key);
    *out = def;
    if (i < 0)
        return required ? lm_error_set(LM_ERR_FORMAT, "%s: no %s in the GGUF metadata", path, key)
                        : LM_OK;
    const lm_gguf_value *v = &g->kv[i].v;
    switch (v->type) {
    case LM_GGUF_U8: case LM_GGUF_U16: case LM_GGUF_U32: case LM_GGUF_U64: *out = (double)v->u; break;
    case LM_GGUF_I8: case LM_GGUF_I16: case LM_GGUF_I32: case LM_GGUF_I64: *out = (double)v->i; break;
    case LM_GGUF_F32: case LM_GGUF_F64: *out = v->f; break;
    default:
        return lm_error_set(LM_ERR_FORMAT, "%s: %s is a GGUF %s, expected a number", path, key,
                            lm_gguf_type_name(v->type));
    }
    return LM_OK;
}

lm_status lm_qwen3_read_gguf(const char *path, lm_device *dev, cJSON **config,
                             lm_tensor_set *weights)
{
    *config = NULL;
    memset(weights, 0, sizeof *weights);
    lm_gguf_meta g = {0};
    lm_tensor_set s = {0};
    lm_status st = lm_init();
    if (st == LM_OK) st = lm_load_gguf(path, &s, &g);
    int ai = st == LM_OK ? lm_gguf_meta_find(&g, "general.architecture") : -1;
    if (st == LM_OK && (ai < 0 || g.kv[ai].v.type != LM_GGUF_STRING ||
                        strcmp(g.kv[ai].v.str.s, "qwen3")))
        st = lm_error_set(LM_ERR_UNSUPPORTED, "%s: general.architecture is %s%s%s, not \"qwen3\" "
                          "(a Qwen3 encoder in llama.cpp's layout)", path,
                          ai < 0 ? "absent" : "\"", ai < 0 || g.kv[ai].v.type != LM_GGUF_STRING ? "" :
                          g.kv[ai].v.str.s, ai < 0 ? "" : "\"");
    int rs = st == LM_OK ? lm_gguf_meta_find(&g, "qwen3.rope.scaling.type") : -1;
    if (rs >= 0 && (g.kv[rs].v.type != LM_GGUF_STRING || strcmp(g.kv[rs].v.str.s, "none")))
        st = lm_error_set(LM_ERR_UNSUPPORTED, "%s: qwen3.rope.scaling.type %s (RoPE scaling is not "
                          "supported)", path, g.kv[rs].v.type == LM_GGUF_STRING ?
                          g.kv[rs].v.str.s : "?");
    /* the names first: the embedding's shape gives the vocabulary */
    for (int i = 0; st == LM_OK && i < s.count; i++) {
        char *r = gguf_rename(s.names[i]);
        if (r) {
            free(s.names[i]);
            s.names[i] = r;
        }
        lm_array *a = s.arrays[i];
        if (r && !strcmp(r, "embed_tokens.weight") && lm_dtype_is_quant(a->dtype)) {
            lm_array *d = lm_dequantize(a);
            if (!d) st = lm_error_prefix("%s: token_embd.weight", path);
            else {
                lm_array_release(a);
                s.arrays[i] = d;
            }
        }
    }
    int e = st == LM_OK ? lm_tensor_set_find(&s, "embed_tokens.weight") : -1;
    if (st == LM_OK && (e < 0 || s.arrays[e]->ndim != 2))
        st = lm_error_set(LM_ERR_FORMAT, "%s: no 2-d token_embd.weight", path);
    static const char *ikeys[][2] = {
        {"qwen3.embedding_length", "hidden_size"}, {"qwen3.feed_forward_length", "intermediate_size"},
        {"qwen3.block_count", "num_hidden_layers"}, {"qwen3.attention.head_count", "num_attention_heads"},
        {"qwen3.attention.head_count_kv", "num_key_value_heads"},
        {"qwen3.attention.key_length", "head_dim"}, {"qwen3.context_length", "max_position_embeddings"},
    };
    cJSON *c = st == LM_OK ? cJSON_CreateObject() : NULL;
    if (st == LM_OK && !c) st = lm_error_set(LM_ERR_NOMEM, "out of memory");
    for (size_t k = 0; st == LM_OK && k < sizeof ikeys / sizeof *ikeys; k++) {
        double v;
        bool req = k < 4;
        st = gguf_num(&g, ikeys[k][0], path, req, -1, &v);
        if (st == LM_OK && v >= 0) cJSON_AddNumberToObject(c, ikeys[k][1], v);
    }
    double eps = 1e-6, theta = 1000000.0;
    if (st == LM_OK) st = gguf_num(&g, "qwen3.attention.layer_norm_rms_epsilon", path, false, 1e-6, &eps);
    if (st == LM_OK) st = gguf_num(&g, "qwen3.rope.freq_base", path, false, 1000000.0, &theta);
    if (st == LM_OK) {
        cJSON *arch = cJSON_AddArrayToObject(c, "architectures");
        cJSON_AddItemToArray(arch, cJSON_CreateString("Qwen3ForCausalLM"));
        cJSON_AddNumberToObject(c, "vocab_size", (double)s.arrays[e]->shape[0]);
        cJSON_AddNumberToObject(c, "rms_norm_eps", eps);
        cJSON_AddNumberToObject(c, "rope_theta", theta);
        bool bias = lm_tensor_set_find(&s, "layers.0.self_attn.q_proj.bias") >= 0;
        cJSON_AddBoolToObject(c, "attention_bias", bias);
        cJSON_AddStringToObject(c, "hidden_act", "silu");
        st = lm_tensor_set_place(&s, dev ? dev : lm_device_default());
    }
    lm_gguf_meta_free(&g);
    if (st != LM_OK) {
        cJSON_Delete(c);
        lm_tensor_set_free(&s);
        return st;
    }
    *config = c;
    *weights = s;
    return LM_OK;
}

lm_qwen3 *lm_qwen3_load_gguf(const char *path, lm_dtype dt, lm_device *dev)
{
    cJSON *c = NULL;
    lm_tensor_set w = {0};
    if (lm_qwen3_read_gguf(path, dev, &c, &w) != LM_OK) {
        lm_error_prefix("qwen3 text encoder");
        return NULL;
    }
    lm_qwen3 *m = lm_qwen3_load_from(c, &w, path, dt, dev);
    lm_tensor_set_free(&w);
    cJSON_Delete(c);
    return m;
}
