/* qwen3.c - the Qwen3 text encoder as a Lumen graph (see qwen3.h).
 *
 * The network, as transformers' modeling_qwen3.py computes it: x =
 * embed_tokens(ids); per layer
 *   h = input_layernorm(x)                         (RMSNorm)
 *   q, k, v = q_proj(h), k_proj(h), v_proj(h)      (heads, kv heads of head_dim)
 *   q, k = q_norm(q), k_norm(k)                    (RMSNorm over head_dim, per head)
 *   q, k = rope(q), rope(k)                        (rotate_half, positions 0..L-1)
 *   x += o_proj(attention(q, k, v))                (causal & padding mask, GQA)
 *   x += down_proj(silu(gate_proj(h2)) * up_proj(h2)),  h2 = post_attention_layernorm(x)
 * and norm(x) after the last layer.  hidden_states[k] is the output of
 * layer k, except the last entry, which is the normed output (transformers
 * swaps it in), so hidden_states[-2] is the next-to-last layer's raw
 * output. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dit_common.h"
#include "diffusers_config.h"
#include "lumen.h"
#include "qwen3.h"

#define Q3_MAX_CONFIG (1u << 20)

typedef struct q3_layer {
    lm_array *in_norm, *q_w, *q_b, *k_w, *k_b, *v_w, *v_b, *o_w, *o_b, *q_norm, *k_norm;
    lm_array *post_norm, *gate, *up, *down;
} q3_layer;

struct lm_qwen3 {
    lm_qwen3_config cfg;
    lm_dtype dt;
    lm_device *dev;
    lm_array *embed, *norm;
    q3_layer *layers;
};

/* A config key that must be absent, null or the default value. */
static lm_status refuse_set(const cJSON *j, const char *key, const char *path, const char *why)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || cJSON_IsNull(v)) return LM_OK;
    char *s = cJSON_PrintUnformatted(v);
    lm_status st = lm_error_set(LM_ERR_UNSUPPORTED, "%s: %s: %s (%s)", path, key, s ? s : "?", why);
    free(s);
    return st;
}

/* rope_theta at the top level (transformers 4) or in rope_parameters
 * (transformers 5), whose rope_type must be "default". */
static lm_status parse_rope(const cJSON *j, const char *path, lm_qwen3_config *c)
{
    lm_status st = refuse_set(j, "rope_scaling", path, "RoPE scaling is not supported; null or "
                              "absent is");
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(j, "rope_parameters");
    bool has_top = cJSON_GetObjectItemCaseSensitive(j, "rope_theta") != NULL;
    if (st == LM_OK) st = lm_dfs_num(j, "rope_theta", path, false, 10000.0, &c->rope_theta);
    if (st == LM_OK && rp && !cJSON_IsNull(rp)) {
        char what[600];
        snprintf(what, sizeof what, "%s: rope_parameters", path);
        if (!cJSON_IsObject(rp))
            return lm_error_set(LM_ERR_FORMAT, "%s: expected an object", what);
        const char *type = "default";
        st = lm_dfs_str(rp, "rope_type", what, false, type, &type);
        if (st == LM_OK && strcmp(type, "default"))
            return lm_error_set(LM_ERR_UNSUPPORTED, "%s: rope_type \"%s\" (only \"default\": RoPE "
                                "scaling is not supported)", what, type);
        if (st == LM_OK && !has_top)
            st = lm_dfs_num(rp, "rope_theta", what, false, 10000.0, &c->rope_theta);
        double prf = 1.0;
        if (st == LM_OK) st = lm_dfs_num(rp, "partial_rotary_factor", what, false, 1.0, &prf);
        if (st == LM_OK && prf != 1.0)
            st = lm_error_set(LM_ERR_UNSUPPORTED, "%s: partial_rotary_factor %g (only 1)", what, prf);
    }
    double prf = 1.0;
    if (st == LM_OK) st = lm_dfs_num(j, "partial_rotary_factor", path, false, 1.0, &prf);
    if (st == LM_OK && prf != 1.0)
        st = lm_error_set(LM_ERR_UNSUPPORTED, "%s: partial_rotary_factor %g (only 1)", path, prf);
    if (st == LM_OK && !(c->rope_theta > 0 && isfinite(c->rope_theta)))
        st = lm_error_set(LM_ERR_FORMAT, "%s: rope_theta %g must be positive", path, c->rope_theta);
    return st;
}

/* The sizes of config j; path names it in errors. */
static lm_status parse_config(const cJSON *j, const char *path, lm_qwen3_config *c)
{
    lm_status st = LM_OK;
    const int64_t big = 1 << 20;
    if (!cJSON_IsObject(j)) return lm_error_set(LM_ERR_FORMAT, "%s: expected a JSON object", path);
    if (st == LM_OK) st = lm_dfs_int(j, "hidden_size", path, true, 0, 1, big, &c->hidden_size);
    if (st == LM_OK) st = lm_dfs_int(j, "intermediate_size", path, true, 0, 1, big, &c->intermediate_size);
    if (st == LM_OK) st = lm_dfs_int(j, "num_hidden_layers", path, true, 0, 1, 1024, &c->num_layers);
    if (st == LM_OK) st = lm_dfs_int(j, "num_attention_heads", path, true, 0, 1, 4096, &c->num_heads);
    if (st == LM_OK) st = lm_dfs_int(j, "num_key_value_heads", path, false, c->num_heads, 1, 4096,
                                     &c->num_kv_heads);
    /* absent: Qwen3Config's default 128; null: hidden / heads, as the
     * attention falls back to */
    const cJSON *hd = cJSON_GetObjectItemCaseSensitive(j, "head_dim");
    if (st == LM_OK && !cJSON_IsNull(hd))
        st = lm_dfs_int(j, "head_dim", path, false, 128, 2, 65536, &c->head_dim);
    else if (st == LM_OK) {
        if (c->hidden_size % c->num_heads)
            st = lm_error_set(LM_ERR_FORMAT, "%s: head_dim is null, and hidden_size %lld is not a "
                              "multiple of num_attention_heads %lld", path,
                              (long long)c->hidden_size, (long long)c->num_heads);
        c->head_dim = c->hidden_size / c->num_heads;
    }
    if (st == LM_OK && c->head_dim % 2)
        st = lm_error_set(LM_ERR_FORMAT, "%s: head_dim %lld must be even for RoPE", path,
                          (long long)c->head_dim);
    if (st == LM_OK && c->num_heads % c->num_kv_heads)
        st = lm_error_set(LM_ERR_FORMAT, "%s: num_attention_heads %lld is not a multiple of "
                          "num_key_value_heads %lld", path, (long long)c->num_heads,
                          (long long)c->num_kv_heads);
    if (st == LM_OK) st = lm_dfs_int(j, "max_position_embeddings", path, false, 32768, 1, INT32_MAX,
                                     &c->max_positions);
    if (st == LM_OK) st = lm_dfs_int(j, "vocab_size", path, true, 0, 1, INT32_MAX, &c->vocab_size);
    if (st == LM_OK) st = lm_dfs_eps(j, "rms_norm_eps", path, 1e-6, &c->eps);
    if (st == LM_OK && !(c->eps >= 0 && isfinite(c->eps)))
        st = lm_error_set(LM_ERR_FORMAT, "%s: rms_norm_eps %g", path, c->eps);
    const cJSON *ab = cJSON_GetObjectItemCaseSensitive(j, "attention_bias");
    if (st == LM_OK && ab && !cJSON_IsNull(ab) && !cJSON_IsBool(ab))
        st = lm_error_set(LM_ERR_FORMAT, "%s: attention_bias: expected true or false", path);
    c->attention_bias = cJSON_IsTrue(ab);
    const char *act = "silu";
    if (st == LM_OK) st = lm_dfs_str(j, "hidden_act", path, false, act, &act);
    if (st == LM_OK && strcmp(act, "silu"))
        st = lm_error_set(LM_ERR_UNSUPPORTED, "%s: hidden_act: \"%s\" (only silu)", path, act);
    if (st == LM_OK) st = parse_rope(j, path, c);
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(j, "use_sliding_window");
    if (st == LM_OK && cJSON_IsTrue(sw))
        st = lm_error_set(LM_ERR_UNSUPPORTED, "%s: use_sliding_window: true (sliding-window "
                          "attention is not supported)", path);
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(j, "layer_types"), *e;
    if (st == LM_OK && cJSON_IsArray(lt)) {
        int i = 0;
        cJSON_ArrayForEach(e, lt) {
            if (!cJSON_IsString(e) || strcmp(e->valuestring, "full_attention")) {
                char *s = cJSON_PrintUnformatted(e);
                st = lm_error_set(LM_ERR_UNSUPPORTED, "%s: layer_types[%d]: %s (only "
                                  "\"full_attention\")", path, i, s ? s : "?");
                free(s);
                break;
            }
            i++;
        }
    }
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(j, "architectures");
    if (st == LM_OK && cJSON_IsArray(arch) && cJSON_IsString(arch->child)) {
        const char *a = arch->child->valuestring;
        if (strcmp(a, "Qwen3Model") && strcmp(a, "Qwen3ForCausalLM"))
            st = lm_error_set(LM_ERR_UNSUPPORTED, "%s: architectures: %s (Qwen3Model or "
                              "Qwen3ForCausalLM)", path, a);
    }
    return st;
}

void lm_qwen3_free(lm_qwen3 *m)
{
    if (!m) return;
    lm_dit_drop(&m->embed);
    lm_dit_drop(&m->norm);
    for (int64_t l = 0; m->layers && l < m->cfg.num_layers; l++) {
        lm_array **w = (lm_array **)&m->layers[l];
        for (size_t k = 0; k < sizeof(q3_layer) / sizeof(lm_array *); k++) lm_dit_drop(&w[k]);
    }
    free(m->layers);
    free(m);
}

static lm_status take_layer(lm_dit_weights *W, const lm_qwen3_config *c, int64_t l, q3_layer *y)
{
    int64_t D = c->hidden_size, F = c->intermediate_size, Dh = c->head_dim;
    int64_t Q = c->num_heads * Dh, K = c->num_kv_heads * Dh;
    int64_t qd[2] = {Q, D}, kd[2] = {K, D}, dq[2] = {D, Q}, fd[2] = {F, D}, df[2] = {D, F};
    bool b = c->attention_bias;
    struct { const char *name; int nd; const int64_t *shape; lm_array **dst; bool on; } w[] = {
        {"input_layernorm.weight", 1, &D, &y->in_norm, true},
        {"self_attn.q_proj.weight", 2, qd, &y->q_w, true}, {"self_attn.q_proj.bias", 1, &Q, &y->q_b, b},
        {"self_attn.k_proj.weight", 2, kd, &y->k_w, true}, {"self_attn.k_proj.bias", 1, &K, &y->k_b, b},
        {"self_attn.v_proj.weight", 2, kd, &y->v_w, true}, {"self_attn.v_proj.bias", 1, &K, &y->v_b, b},
        {"self_attn.o_proj.weight", 2, dq, &y->o_w, true}, {"self_attn.o_proj.bias", 1, &D, &y->o_b, b},
        {"self_attn.q_norm.weight", 1, &Dh, &y->q_norm, true},
        {"self_attn.k_norm.weight", 1, &Dh, &y->k_norm, true},
        {"post_attention_layernorm.weight", 1, &D, &y->post_norm, true},
        {"mlp.gate_proj.weight", 2, fd, &y->gate, true}, {"mlp.up_proj.weight", 2, fd, &y->up, true},
        {"mlp.down_proj.weight", 2, df, &y->down, true},
    };
    for (size_t k = 0; k < sizeof w / sizeof *w; k++) {
        if (!w[k].on) continue;
        char key[160];
        snprintf(key, sizeof key, "layers.%lld.%s", (long long)l, w[k].name);
        lm_status st = lm_dit_take(W, key, w[k].nd, w[k].shape, w[k].dst);
        if (st != LM_OK) return st;
    }
    return LM_OK;
}

/* an lm_dit_build_fn: the encoder (an lm_qwen3) or NULL; cfg_name names the
 * config in errors, file the weights. */
static void *load_from(const cJSON *config, const char *cfg_name, lm_dit_weights *W, lm_dtype dt,
                       lm_device *dev)
{
    lm_qwen3 *m = calloc(1, sizeof *m);
    lm_status st = m ? LM_OK : lm_error_set(LM_ERR_NOMEM, "out of memory");
    if (st == LM_OK) st = parse_config(config, cfg_name, &m->cfg);
    if (st == LM_OK) {
        m->layers = calloc((size_t)m->cfg.num_layers, sizeof *m->layers);
        if (!m->layers) st = lm_error_set(LM_ERR_NOMEM, "out of memory");
    }
    if (st == LM_OK) {
        m->dt = dt;
        m->dev = dev;
        const lm_qwen3_config *c = &m->cfg;
        /* Qwen3ForCausalLM keeps the model under "model." beside its head */
        bool causal_lm = lm_tensor_set_find(&W->set, "model.embed_tokens.weight") >= 0;
        W->prefix = causal_lm ? "model." : NULL;
        lm_dit_weights_skip(W, "lm_head.weight");
        int64_t D = c->hidden_size, emb[2] = {c->vocab_size, D};
        st = lm_dit_take(W, "embed_tokens.weight", 2, emb, &m->embed);
        for (int64_t l = 0; st == LM_OK && l < c->num_layers; l++)
            st = take_layer(W, c, l, &m->layers[l]);
        if (st == LM_OK) st = lm_dit_take(W, "norm.weight", 1, &D, &m->norm);
        char ctx[96];
        snprintf(ctx, sizeof ctx, "config: %lld layers%s%s", (long long)c->num_layers,
                 c->attention_bias ? ", attention_bias" : "", causal_lm ? ", keys under model." : "");
        if (st == LM_OK) st = lm_dit_weights_finish(W, ctx);
    }
    if (st != LM_OK) {
        lm_qwen3_free(m);
        return NULL;
    }
    return m;
}

static const lm_dit_component Q3_COMPONENT = {
    .what = "qwen3 text encoder", .max_config = Q3_MAX_CONFIG, .build = load_from,
};

lm_qwen3 *lm_qwen3_load(const char *dir, const char *variant, lm_dtype dt, lm_device *dev)
{
    return lm_dit_load_dir(&Q3_COMPONENT, dir, variant, dt, dev);
}

lm_qwen3 *lm_qwen3_load_from(const cJSON *config, lm_tensor_set *weights, const char *file,
                             lm_dtype dt, lm_device *dev)
{
    return lm_dit_load_parts(&Q3_COMPONENT, config, file ? file : "config", weights, file ? file : "weights",
                             dt, dev);
}

const lm_qwen3_config *lm_qwen3_get_config(const lm_qwen3 *m) { return &m->cfg; }
lm_dtype lm_qwen3_dtype(const lm_qwen3 *m) { return m->dt; }
lm_device *lm_qwen3_device(const lm_qwen3 *m) { return m->dev; }

/* [B, L, H*Dh] -> q_norm per head -> [B, H, L, Dh] -> rope */
static lm_array *heads_normed(lm_array *x, int64_t H, int64_t Dh, lm_array *norm, double eps,
                              lm_array *angles)
{
    lm_array *h = lm_dit_split_heads(x, H, Dh);
    if (norm) lm_dit_swap(&h, lm_dit_rms_norm(h, norm, eps));
    lm_dit_swap(&h, lm_transpose(h, 1, 2));
    if (angles) lm_dit_swap(&h, lm_dit_rope(h, angles, LM_DIT_BHLD, false));
    return h;
}

static lm_array *layer_forward(const lm_qwen3 *m, const q3_layer *y, lm_array *x, lm_array *amask,
                               lm_array *angles)
{
    const lm_qwen3_config *c = &m->cfg;
    int64_t Dh = c->head_dim;
    lm_array *h = lm_dit_rms_norm(x, y->in_norm, c->eps);
    lm_array *q = lm_dit_linear(h, y->q_w, y->q_b), *k = lm_dit_linear(h, y->k_w, y->k_b);
    lm_array *v = lm_dit_linear(h, y->v_w, y->v_b);
    lm_dit_swap(&q, heads_normed(q, c->num_heads, Dh, y->q_norm, c->eps, angles));
    lm_dit_swap(&k, heads_normed(k, c->num_kv_heads, Dh, y->k_norm, c->eps, angles));
    lm_dit_swap(&v, heads_normed(v, c->num_kv_heads, Dh, NULL, c->eps, NULL));
    lm_array *a = lm_attention(q, k, v, amask, true, 1.0 / sqrt((double)Dh));
    lm_array_release(q);
    lm_array_release(k);
    lm_array_release(v);
    lm_dit_swap(&a, lm_dit_merge_heads(a));
    lm_dit_swap(&a, lm_dit_linear(a, y->o_w, y->o_b));
    lm_array *x1 = lm_binary(LM_OP_ADD, x, a);
    lm_array_release(a);
    lm_dit_swap(&h, lm_dit_rms_norm(x1, y->post_norm, c->eps));
    lm_array *g = lm_dit_linear(h, y->gate, NULL), *u = lm_dit_linear(h, y->up, NULL);
    lm_dit_swap(&h, lm_swiglu(g, u));
    lm_array_release(g);
    lm_array_release(u);
    lm_dit_swap(&h, lm_dit_linear(h, y->down, NULL));
    lm_array *out = lm_binary(LM_OP_ADD, x1, h);
    lm_array_release(x1);
    lm_array_release(h);
    return out;
}

lm_status lm_qwen3_forward(lm_qwen3 *m, const int32_t *ids, const int32_t *mask, int64_t batch,
                           int64_t len, int nwant, const int *want, lm_array **out)
{
    const lm_qwen3_config *c = &m->cfg;
    int64_t n = c->num_layers;
    for (int i = 0; out && i < nwant; i++) out[i] = NULL;
    if (!ids || !out || !want || nwant < 1)
        return lm_error_set(LM_ERR_ARG, "qwen3 text encoder: forward needs ids, at least one wanted "
                            "hidden state and room for it");
    if (batch < 1 || len < 1 || len > c->max_positions)
        return lm_error_set(LM_ERR_SHAPE, "qwen3 text encoder: ids [%lld,%lld]: need at least one "
                            "row of 1..%lld tokens (max_position_embeddings)", (long long)batch,
                            (long long)len, (long long)c->max_positions);
    int top = -1;
    for (int i = 0; i < nwant; i++) {
        int64_t k = want[i] < 0 ? want[i] + n + 1 : want[i];
        if (k < 0 || k > n)
            return lm_error_set(LM_ERR_ARG, "qwen3 text encoder: hidden state %d does not exist "
                                "(%lld layers: 0..%lld, or -%lld..-1)", want[i], (long long)n,
                                (long long)n, (long long)(n + 1));
        if (k > top) top = (int)k;
    }
    for (int64_t i = 0; i < batch * len; i++)
        if (ids[i] < 0 || ids[i] >= c->vocab_size)
            return lm_error_set(LM_ERR_ARG, "qwen3 text encoder: token id %d at [%lld,%lld] is "
                                "outside the vocabulary [0,%lld)", ids[i], (long long)(i / len),
                                (long long)(i % len), (long long)c->vocab_size);
    bool all = true;
    for (int64_t i = 0; mask && i < batch * len; i++) {
        if (mask[i] != 0 && mask[i] != 1)
            return lm_error_set(LM_ERR_ARG, "qwen3 text encoder: attention mask value %d at "
                                "[%lld,%lld] (1 = token, 0 = padding)", mask[i],
                                (long long)(i / len), (long long)(i % len));
        if (i % len == 0 && !mask[i])
            return lm_error_set(LM_ERR_ARG, "qwen3 text encoder: attention mask row %lld starts "
                                "with padding: its first token would attend to nothing (pad on "
                                "the right)", (long long)(i / len));
        all = all && mask[i];
    }
    lm_array *amask = NULL;
    if (mask && !all) {
        /* [B, 1, 1, L]: key j visible where mask 1 (the causal part is the op's) */
        bool *mb = malloc(sizeof *mb * (size_t)(batch * len));
        if (!mb) return lm_error_set(LM_ERR_NOMEM, "out of memory");
        for (int64_t i = 0; i < batch * len; i++) mb[i] = mask[i] != 0;
        int64_t ms[4] = {batch, 1, 1, len};
        amask = lm_from_data(4, ms, LM_BOOL, mb, m->dev);
        free(mb);
        if (!amask) return lm_error_prefix("qwen3 text encoder: mask");
    }
    /* the RoPE angles of positions 0..L-1, [L, head_dim/2], shared by every
     * layer, rounded as transformers computes them: inv_freq = 1 /
     * theta^(2j/head_dim) and p * inv_freq, each in f32 */
    int64_t half = c->head_dim / 2, as[2] = {len, half}, shape[2] = {batch, len};
    float *av = malloc(sizeof *av * (size_t)(len * half + 1)), *inv = malloc(sizeof *inv * (size_t)half);
    if (!av || !inv) {
        free(av);
        free(inv);
        lm_array_release(amask);
        return lm_error_set(LM_ERR_NOMEM, "out of memory");
    }
    for (int64_t j = 0; j < half; j++)
        inv[j] = 1.0f / powf((float)c->rope_theta, (float)(2 * j) / (float)c->head_dim);
    for (int64_t p = 0; p < len; p++)
        for (int64_t j = 0; j < half; j++) av[p * half + j] = (float)p * inv[j];
    lm_array *angles = lm_from_data(2, as, LM_F32, av, m->dev);
    free(av);
    free(inv);
    lm_array *idx = lm_from_data(2, shape, LM_I32, ids, m->dev);
    lm_array *x = angles && idx ? lm_embedding(m->embed, idx) : NULL;
    lm_array_release(idx);
    lm_array **hs = calloc((size_t)top + 1, sizeof *hs);
    bool ok = x && hs;
    if (ok && top >= 0) hs[0] = lm_array_retain(x);
    for (int64_t l = 0; ok && l < top && l < n; l++) {
        lm_dit_swap(&x, layer_forward(m, &m->layers[l], x, amask, angles));
        ok = x != NULL;
        if (ok) hs[l + 1] = l + 1 == n ? lm_dit_rms_norm(x, m->norm, c->eps) : lm_array_retain(x);
        ok = ok && hs[l + 1];
    }
    lm_array_release(x);
    lm_array_release(amask);
    lm_array_release(angles);
    lm_status st = LM_OK;
    if (!ok) st = hs ? lm_error_prefix("qwen3 text encoder") : lm_error_set(LM_ERR_NOMEM, "out of memory");
    for (int i = 0; st == LM_OK && i < nwant; i++)
        out[i] = lm_array_retain(hs[want[i] < 0 ? want[i] + n + 1 : want[i]]);
    for (int i = 0; hs && i <= top; i++) lm_array_release(hs[i]);
    free(hs);
    return st;
}

lm_array *lm_qwen3_masked_rows(lm_array *h, const int32_t *mask, int64_t len)
{
    if (!h) return NULL;
    char s[96];
    lm_shape_str(s, sizeof s, h->ndim, h->shape);
    bool shaped = h->ndim == 2 || (h->ndim == 3 && h->shape[0] == 1);
    if (!shaped || h->shape[h->ndim - 2] != len) {
        lm_error_set(LM_ERR_SHAPE, "qwen3 masked rows: hidden state %s is not [%lld, D] or "
                     "[1, %lld, D]", s, (long long)len, (long long)len);
        return NULL;
    }
    int64_t *rows = malloc(sizeof *rows * (size_t)(len + 1)), n = 0;
    if (!rows) {
        lm_error_set(LM_ERR_NOMEM, "out of memory");
        return NULL;
    }
    for (int64_t i = 0; i < len; i++)
        if (!mask || mask[i]) rows[n++] = i;
    lm_array *flat = h->ndim == 3 ? lm_squeeze(h, 0) : lm_array_retain(h);
    lm_array *r = NULL;
    if (n == 0) {
        lm_error_set(LM_ERR_ARG, "qwen3 masked rows: the mask of %lld tokens keeps none",
                     (long long)len);
    } else if (flat) {
        lm_array *idx = lm_from_data(1, &n, LM_I64, rows, h->device);
        r = idx ? lm_index_select(flat, 0, idx) : NULL;
        lm_array_release(idx);
    }
    free(rows);
    lm_array_release(flat);
    return r;
}

lm_array *lm_qwen3_stack_layers(int n, lm_array *const *hs)
{
    if (n < 1 || !hs) {
        lm_error_set(LM_ERR_ARG, "qwen3 stack layers: no hidden states");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        if (!hs[i]) return NULL;
        if (hs[i]->ndim != 3) {
            char s[96];
            lm_shape_str(s, sizeof s, hs[i]->ndim, hs[i]->shape);
            lm_error_set(LM_ERR_SHAPE, "qwen3 stack layers: hidden state %d is %s, not [B, L, D]", i, s);
            return NULL;
        }
    }
    /* stack(dim=1).permute(0, 2, 1, 3).reshape(B, L, n*D) puts each
     * token's layers side by side: the concatenation along the last axis */
    return lm_concat(n, hs, -1);
}
