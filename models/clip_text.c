/* clip_text.c - CLIP text encoders as Lumen graphs (see clip_text.h).
 *
 * The network, as transformers' modeling_clip.py computes it: token +
 * position embeddings; per layer x += out_proj(causal_attention(ln1(x))),
 * x += fc2(act(fc1(ln2(x)))); last_hidden_state = final_layer_norm(x);
 * pooled = last_hidden_state at the eos position (the argmax of the ids
 * when config.eos_token_id is 2, as for configs written before
 * transformers 4.31, else the first id equal to eos_token_id);
 * text_embeds = text_projection(pooled). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "clip_text.h"
#include "diffusers_config.h"
#include "lumen.h"

#define CT_MAX_CONFIG (1u << 20)

typedef struct ct_layer {
    lm_array *ln1_w, *ln1_b, *q_w, *q_b, *k_w, *k_b, *v_w, *v_b, *o_w, *o_b;
    lm_array *ln2_w, *ln2_b, *fc1_w, *fc1_b, *fc2_w, *fc2_b;
} ct_layer;

struct lm_clip_text {
    lm_clip_text_config cfg;
    lm_dtype dt;
    lm_device *dev;
    lm_array *tok, *pos, *fin_w, *fin_b, *proj;
    ct_layer *layers;
};

/* The sizes of config j; path names it in errors. */
static lm_status parse_config(const cJSON *j, const char *path, lm_clip_text_config *c,
                              bool *arch_proj, bool *arch_known)
{
    lm_status st = LM_OK;
    const int64_t big = 1 << 20;
    if (st == LM_OK) st = lm_dfs_int(j, "hidden_size", path, true, 0, 1, big, &c->hidden_size);
    if (st == LM_OK) st = lm_dfs_int(j, "intermediate_size", path, true, 0, 1, big, &c->intermediate_size);
    if (st == LM_OK) st = lm_dfs_int(j, "num_attention_heads", path, true, 0, 1, 4096, &c->num_heads);
    if (st == LM_OK) st = lm_dfs_int(j, "num_hidden_layers", path, true, 0, 1, 1024, &c->num_layers);
    if (st == LM_OK) st = lm_dfs_int(j, "max_position_embeddings", path, false, 77, 1, big, &c->max_positions);
    if (st == LM_OK) st = lm_dfs_int(j, "vocab_size", path, false, 49408, 1, INT32_MAX, &c->vocab_size);
    if (st == LM_OK) st = lm_dfs_int(j, "projection_dim", path, false, 512, 1, big, &c->projection_dim);
    if (st == LM_OK) st = lm_dfs_int(j, "eos_token_id", path, false, 2, 0, INT32_MAX, &c->eos_token_id);
    if (st == LM_OK) st = lm_dfs_eps(j, "layer_norm_eps", path, 1e-5, &c->eps);
    const char *act = "quick_gelu";
    if (st == LM_OK) st = lm_dfs_str(j, "hidden_act", path, false, act, &act);
    if (st == LM_OK) {
        if (!strcmp(act, "quick_gelu")) c->quick_gelu = true;
        else if (!strcmp(act, "gelu")) c->quick_gelu = false;
        else st = lm_error_set(LM_ERR_UNSUPPORTED, "%s: hidden_act: \"%s\" (quick_gelu or gelu)", path, act);
    }
    if (st == LM_OK && c->hidden_size % c->num_heads)
        st = lm_error_set(LM_ERR_FORMAT, "%s: hidden_size %lld is not a multiple of "
                          "num_attention_heads %lld", path, (long long)c->hidden_size,
                          (long long)c->num_heads);
    *arch_known = false;
    *arch_proj = false;
    const cJSON *arch = st == LM_OK ? cJSON_GetObjectItemCaseSensitive(j, "architectures") : NULL;
    if (cJSON_IsArray(arch) && cJSON_IsString(arch->child)) {
        const char *a = arch->child->valuestring;
        *arch_known = !strcmp(a, "CLIPTextModel") || !strcmp(a, "CLIPTextModelWithProjection");
        *arch_proj = !strcmp(a, "CLIPTextModelWithProjection");
        if (!*arch_known)
            st = lm_error_set(LM_ERR_UNSUPPORTED, "%s: architectures: %s (CLIPTextModel or "
                              "CLIPTextModelWithProjection)", path, a);
    }
    return st;
}

/* The weight loader's state: the file's tensors and which were claimed. */
typedef struct ct_load {
    lm_tensor_set set;
    bool *used;
    const char *file;
    lm_dtype dt;
} ct_load;

static int find_key(const ct_load *L, const char *key)
{
    char buf[256];
    int i = lm_tensor_set_find(&L->set, key);
    if (i >= 0) return i;
    snprintf(buf, sizeof buf, "text_model.%s", key);
    return lm_tensor_set_find(&L->set, buf);
}

/* Takes the weight named key (shape nd/shape), cast to the compute dtype,
 * evaluated on the device and kept. */
static lm_status take(ct_load *L, const char *key, int nd, const int64_t *shape, lm_array **out)
{
    *out = NULL;
    int i = find_key(L, key);
    char want[96], got[96];
    lm_shape_str(want, sizeof want, nd, shape);
    if (i < 0)
        return lm_error_set(LM_ERR_FORMAT, "%s: missing weight %s %s", L->file, key, want);
    lm_array *a = L->set.arrays[i];
    bool same = a->ndim == nd;
    for (int d = 0; same && d < nd; d++) same = a->shape[d] == shape[d];
    if (!same) {
        lm_shape_str(got, sizeof got, a->ndim, a->shape);
        return lm_error_set(LM_ERR_SHAPE, "%s: %s has shape %s, the config needs %s", L->file,
                            L->set.names[i], got, want);
    }
    /* a quantized linear weight (GGUF) is kept as it is for lm_linear's
     * quantized product; the embeddings are gathered, so never quantized */
    bool quant = lm_dtype_is_quant(a->dtype) && nd == 2 && !strstr(key, "embedding");
    if (!lm_dtype_is_float(a->dtype) && !quant)
        return lm_error_set(LM_ERR_DTYPE, "%s: %s is %s, expected a float dtype%s", L->file,
                            L->set.names[i], lm_dtype_name(a->dtype), lm_dtype_is_quant(a->dtype) ?
                            " (a quantized one only for a linear weight)" : "");
    L->used[i] = true;
    lm_array *c = a->dtype == L->dt || quant ? lm_array_retain(a) : lm_cast(a, L->dt);
    if (!c || lm_array_eval(c) != LM_OK) {
        lm_array_release(c);
        return lm_error_prefix("%s: %s", L->file, L->set.names[i]);
    }
    lm_array_keep(c);
    lm_array_release(c);   /* the keep holds it */
    *out = c;
    return LM_OK;
}

static void drop(lm_array **a)
{
    if (*a) lm_array_unkeep(*a);
    *a = NULL;
}

void lm_clip_text_free(lm_clip_text *m)
{
    if (!m) return;
    drop(&m->tok); drop(&m->pos); drop(&m->fin_w); drop(&m->fin_b); drop(&m->proj);
    for (int64_t l = 0; m->layers && l < m->cfg.num_layers; l++) {
        lm_array **w = (lm_array **)&m->layers[l];
        for (size_t k = 0; k < sizeof(ct_layer) / sizeof(lm_array *); k++) drop(&w[k]);
    }
    free(m->layers);
    free(m);
}

static lm_status take_layer(ct_load *L, const lm_clip_text_config *c, int64_t l, ct_layer *y)
{
    int64_t D = c->hidden_size, F = c->intermediate_size;
    int64_t dd[2] = {D, D}, fd[2] = {F, D}, df[2] = {D, F};
    struct { const char *name; int nd; const int64_t *shape; lm_array **dst; } w[] = {
        {"layer_norm1.weight", 1, &D, &y->ln1_w}, {"layer_norm1.bias", 1, &D, &y->ln1_b},
        {"self_attn.q_proj.weight", 2, dd, &y->q_w}, {"self_attn.q_proj.bias", 1, &D, &y->q_b},
        {"self_attn.k_proj.weight", 2, dd, &y->k_w}, {"self_attn.k_proj.bias", 1, &D, &y->k_b},
        {"self_attn.v_proj.weight", 2, dd, &y->v_w}, {"self_attn.v_proj.bias", 1, &D, &y->v_b},
        {"self_attn.out_proj.weight", 2, dd, &y->o_w}, {"self_attn.out_proj.bias", 1, &D, &y->o_b},
        {"layer_norm2.weight", 1, &D, &y->ln2_w}, {"layer_norm2.bias", 1, &D, &y->ln2_b},
        {"mlp.fc1.weight", 2, fd, &y->fc1_w}, {"mlp.fc1.bias", 1, &F, &y->fc1_b},
        {"mlp.fc2.weight", 2, df, &y->fc2_w}, {"mlp.fc2.bias", 1, &D, &y->fc2_b},
    };
    for (size_t k = 0; k < sizeof w / sizeof *w; k++) {
        char key[160];
        snprintf(key, sizeof key, "encoder.layers.%lld.%s", (long long)l, w[k].name);
        lm_status st = take(L, key, w[k].nd, w[k].shape, w[k].dst);
        if (st != LM_OK) return st;
    }
    return LM_OK;
}

static lm_clip_text *load_from(const cJSON *config, const char *cfg_name, lm_tensor_set *weights,
                               const char *file, lm_dtype dt, lm_device *dev);

lm_clip_text *lm_clip_text_load(const char *dir, const char *variant, lm_dtype dt, lm_device *dev)
{
    char *path = lm_dfs_path(dir, "config.json");
    if (!path) return NULL;
    cJSON *j = NULL;
    lm_tensor_set set = {0};
    char *file = NULL;
    lm_clip_text *m = NULL;
    if (lm_init() == LM_OK && lm_dfs_json(path, CT_MAX_CONFIG, false, &j) == LM_OK &&
        lm_dfs_load_weights(dir, variant, dev ? dev : lm_device_default(), &set, &file) == LM_OK)
        m = load_from(j, path, &set, file, dt, dev);
    /* a config error names config.json, a weight error the weight file */
    if (!m && strncmp(lm_error_message(), "clip", 4)) lm_error_prefix("clip text encoder %s", dir);
    lm_tensor_set_free(&set);
    cJSON_Delete(j);
    free(file);
    free(path);
    return m;
}

/* cfg_name names the config in errors (config.json, or the single file it
 * was inferred from), file the weights. */
static lm_clip_text *load_from(const cJSON *config, const char *cfg_name, lm_tensor_set *weights,
                               const char *file, lm_dtype dt, lm_device *dev)
{
    if (dt != LM_F32 && dt != LM_F16 && dt != LM_BF16 && dt != LM_F64) {
        lm_error_set(LM_ERR_DTYPE, "clip text encoder %s: compute dtype %s (f32, f16, bf16, f64)",
                     file, lm_dtype_name(dt));
        lm_tensor_set_free(weights);
        return NULL;
    }
    if (lm_init() != LM_OK) {
        lm_tensor_set_free(weights);
        return NULL;
    }
    if (!dev) dev = lm_device_default();
    lm_clip_text *m = calloc(1, sizeof *m);
    ct_load L = {.dt = dt, .file = file};
    /* the weights are ours from here on: the caller's set is left empty */
    L.set = *weights;
    memset(weights, 0, sizeof *weights);
    bool arch_proj = false, arch_known = false;
    lm_status st = m ? LM_OK : lm_error_set(LM_ERR_NOMEM, "out of memory");
    if (st == LM_OK) st = parse_config(config, cfg_name, &m->cfg, &arch_proj, &arch_known);
    if (st == LM_OK) st = lm_tensor_set_place(&L.set, dev);
    if (st == LM_OK) {
        L.used = calloc((size_t)L.set.count + 1, sizeof *L.used);
        m->layers = calloc((size_t)m->cfg.num_layers, sizeof *m->layers);
        if (!L.used || !m->layers) st = lm_error_set(LM_ERR_NOMEM, "out of memory");
    }
    if (st == LM_OK) {
        m->dt = dt;
        m->dev = dev;
        lm_clip_text_config *c = &m->cfg;
        bool proj = arch_known ? arch_proj : lm_tensor_set_find(&L.set, "text_projection.weight") >= 0;
        if (!proj) c->projection_dim = 0;
        int64_t D = c->hidden_size, tok[2] = {c->vocab_size, D}, pos[2] = {c->max_positions, D};
        int64_t pj[2] = {c->projection_dim, D};
        st = take(&L, "embeddings.token_embedding.weight", 2, tok, &m->tok);
        if (st == LM_OK) st = take(&L, "embeddings.position_embedding.weight", 2, pos, &m->pos);
        for (int64_t l = 0; st == LM_OK && l < c->num_layers; l++) st = take_layer(&L, c, l, &m->layers[l]);
        if (st == LM_OK) st = take(&L, "final_layer_norm.weight", 1, &D, &m->fin_w);
        if (st == LM_OK) st = take(&L, "final_layer_norm.bias", 1, &D, &m->fin_b);
        if (st == LM_OK && proj) {
            int i = lm_tensor_set_find(&L.set, "text_projection.weight");
            if (i < 0) st = lm_error_set(LM_ERR_FORMAT, "%s: missing weight text_projection.weight "
                                         "(config.json names CLIPTextModelWithProjection)", file);
            else st = take(&L, "text_projection.weight", 2, pj, &m->proj);
        }
        /* position_ids is a buffer older checkpoints carry: not a weight */
        for (int i = 0; st == LM_OK && i < L.set.count; i++) {
            const char *n = L.set.names[i];
            if (L.used[i] || !strcmp(n, "text_model.embeddings.position_ids") ||
                !strcmp(n, "embeddings.position_ids"))
                continue;
            char sh[96];
            lm_shape_str(sh, sizeof sh, L.set.arrays[i]->ndim, L.set.arrays[i]->shape);
            st = lm_error_set(LM_ERR_FORMAT, "%s: unexpected weight %s %s (config: %lld layers%s)",
                              file, n, sh, (long long)c->num_layers,
                              proj ? ", with projection" : ", no projection");
        }
    }
    lm_tensor_set_free(&L.set);
    free(L.used);
    if (st != LM_OK) {
        lm_clip_text_free(m);
        return NULL;
    }
    return m;
}

lm_clip_text *lm_clip_text_load_from(const cJSON *config, lm_tensor_set *weights, const char *file,
                                     lm_dtype dt, lm_device *dev)
{
    lm_clip_text *m = load_from(config, file, weights, file, dt, dev);
    if (!m && strncmp(lm_error_message(), "clip", 4)) lm_error_prefix("clip text encoder");
    return m;
}

const lm_clip_text_config *lm_clip_text_get_config(const lm_clip_text *m) { return &m->cfg; }
lm_dtype lm_clip_text_dtype(const lm_clip_text *m) { return m->dt; }
lm_device *lm_clip_text_device(const lm_clip_text *m) { return m->dev; }

int lm_clip_text_weight_count(const lm_clip_text *m)
{
    return 5 + (int)m->cfg.num_layers * (int)(sizeof(ct_layer) / sizeof(lm_array *));
}

lm_array **lm_clip_text_weight_slot(lm_clip_text *m, int i, char *name, size_t cap)
{
    /* ct_layer's fields, in order */
    static const char *const layer[] = {
        "layer_norm1.weight", "layer_norm1.bias", "self_attn.q_proj.weight", "self_attn.q_proj.bias",
        "self_attn.k_proj.weight", "self_attn.k_proj.bias", "self_attn.v_proj.weight",
        "self_attn.v_proj.bias", "self_attn.out_proj.weight", "self_attn.out_proj.bias",
        "layer_norm2.weight", "layer_norm2.bias", "mlp.fc1.weight", "mlp.fc1.bias",
        "mlp.fc2.weight", "mlp.fc2.bias",
    };
    _Static_assert(sizeof layer / sizeof *layer == sizeof(ct_layer) / sizeof(lm_array *),
                   "one name per ct_layer field");
    static const char *const top[] = {
        "text_model.embeddings.token_embedding.weight", "text_model.embeddings.position_embedding.weight",
        "text_model.final_layer_norm.weight", "text_model.final_layer_norm.bias", "text_projection.weight",
    };
    lm_array **slots[] = {&m->tok, &m->pos, &m->fin_w, &m->fin_b, &m->proj};
    if (i < 0 || i >= lm_clip_text_weight_count(m)) return NULL;
    if (i < 5) {
        snprintf(name, cap, "%s", top[i]);
        return slots[i];
    }
    int per = (int)(sizeof layer / sizeof *layer), l = (i - 5) / per, k = (i - 5) % per;
    snprintf(name, cap, "text_model.encoder.layers.%d.%s", l, layer[k]);
    return &((lm_array **)&m->layers[l])[k];
}

static lm_array *retain(lm_array *a) { return a ? lm_array_retain(a) : NULL; }

/* Releases *a and replaces it with r (which may be NULL). */
static lm_array *swap(lm_array **a, lm_array *r)
{
    lm_array_release(*a);
    *a = r;
    return r;
}

/* lm_linear, with a quantized weight's f32 product (QLINEAR) cast back to
 * the model's dtype before the bias */
static lm_array *linear(lm_array *x, lm_array *w, lm_array *b)
{
    if (!x || !w || !lm_dtype_is_quant(w->dtype)) return lm_linear(x, w, b);
    lm_array *y = lm_linear(x, w, NULL);
    if (y && y->dtype != x->dtype) swap(&y, lm_cast(y, x->dtype));
    if (y && b) swap(&y, lm_binary(LM_OP_ADD, y, b));
    return y;
}

/* [B, L, D] -> [B, H, L, D/H] */
static lm_array *heads(lm_array *x, int64_t B, int64_t L, int64_t H, int64_t Dh)
{
    int64_t s[4] = {B, L, H, Dh};
    lm_array *r = lm_reshape(x, 4, s);
    lm_array *t = lm_transpose(r, 1, 2);
    lm_array_release(r);
    return t;
}

static lm_array *layer_forward(const lm_clip_text *m, const ct_layer *y, lm_array *x, int64_t B,
                               int64_t L)
{
    const lm_clip_text_config *c = &m->cfg;
    int64_t D = c->hidden_size, H = c->num_heads, Dh = D / H;
    lm_array *h = lm_layer_norm(x, 1, y->ln1_w, y->ln1_b, c->eps);
    lm_array *q = linear(h, y->q_w, y->q_b), *k = linear(h, y->k_w, y->k_b);
    lm_array *v = linear(h, y->v_w, y->v_b);
    lm_array *qh = heads(q, B, L, H, Dh), *kh = heads(k, B, L, H, Dh), *vh = heads(v, B, L, H, Dh);
    lm_array *a = lm_attention(qh, kh, vh, NULL, true, 1.0 / sqrt((double)Dh));
    lm_array_release(q); lm_array_release(k); lm_array_release(v);
    lm_array_release(qh); lm_array_release(kh); lm_array_release(vh);
    int64_t bld[3] = {B, L, D};
    swap(&a, lm_transpose(a, 1, 2));
    swap(&a, lm_contiguous(a));
    swap(&a, lm_reshape(a, 3, bld));
    swap(&a, linear(a, y->o_w, y->o_b));
    lm_array *x1 = lm_binary(LM_OP_ADD, x, a);
    lm_array_release(a);
    swap(&h, lm_layer_norm(x1, 1, y->ln2_w, y->ln2_b, c->eps));
    swap(&h, linear(h, y->fc1_w, y->fc1_b));
    if (c->quick_gelu) {
        /* x * sigmoid(1.702 x) */
        lm_array *s = lm_binary_scalar(LM_OP_MUL, h, 1.702, false);
        swap(&s, lm_unary(LM_OP_SIGMOID, s));
        swap(&h, lm_binary(LM_OP_MUL, h, s));
        lm_array_release(s);
    } else {
        swap(&h, lm_unary(LM_OP_GELU, h));
    }
    swap(&h, linear(h, y->fc2_w, y->fc2_b));
    lm_array *out = lm_binary(LM_OP_ADD, x1, h);
    lm_array_release(x1);
    lm_array_release(h);
    return out;
}

void lm_clip_text_out_free(lm_clip_text_out *o)
{
    if (!o) return;
    lm_array_release(o->last_hidden_state);
    for (int i = 0; o->hidden_states && i < o->nhidden; i++) lm_array_release(o->hidden_states[i]);
    free(o->hidden_states);
    lm_array_release(o->pooled);
    lm_array_release(o->text_embeds);
    memset(o, 0, sizeof *o);
}

lm_status lm_clip_text_forward(lm_clip_text *m, const int32_t *ids, int64_t batch, int64_t len,
                               lm_clip_text_out *out)
{
    return lm_clip_text_forward_ex(m, ids, batch, len, NULL, NULL, out);
}

/* x with the rows of table at the positions extra names (>= 0) */
static lm_array *with_extra(lm_clip_text *m, lm_array *x, const int32_t *extra, lm_array *table,
                            int64_t batch, int64_t len)
{
    int64_t n = batch * len, shape[3] = {batch, len, 1};
    int32_t *at = malloc(sizeof *at * (size_t)n);
    uint8_t *mask = malloc((size_t)n);
    if (!at || !mask) {
        free(at);
        free(mask);
        lm_error_set(LM_ERR_NOMEM, "clip text encoder: out of memory");
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) {
        at[i] = extra[i] >= 0 ? extra[i] : 0;
        mask[i] = extra[i] >= 0;
    }
    lm_array *idx = lm_from_data(2, shape, LM_I32, at, m->dev);
    lm_array *mk = lm_from_data(3, shape, LM_BOOL, mask, m->dev);
    free(at);
    free(mask);
    lm_array *tc = lm_cast(table, m->dt), *tt = tc ? lm_array_to(tc, m->dev) : NULL;
    lm_array *rows = tt && idx ? lm_embedding(tt, idx) : NULL;
    lm_array *r = rows && mk ? lm_where(mk, rows, x) : NULL;
    lm_array_release(idx);
    lm_array_release(mk);
    lm_array_release(tc);
    lm_array_release(tt);
    lm_array_release(rows);
    return r;
}

lm_status lm_clip_text_forward_ex(lm_clip_text *m, const int32_t *ids, int64_t batch, int64_t len,
                                  const int32_t *extra, lm_array *table, lm_clip_text_out *out)
{
    memset(out, 0, sizeof *out);
    const lm_clip_text_config *c = &m->cfg;
    if (batch < 1 || len < 1 || len > c->max_positions)
        return lm_error_set(LM_ERR_SHAPE, "clip text encoder: ids [%lld,%lld]: need at least one "
                            "row of 1..%lld tokens", (long long)batch, (long long)len,
                            (long long)c->max_positions);
    for (int64_t i = 0; i < batch * len; i++)
        if (ids[i] < 0 || ids[i] >= c->vocab_size)
            return lm_error_set(LM_ERR_ARG, "clip text encoder: token id %d at [%lld,%lld] is "
                                "outside the vocabulary [0,%lld)", ids[i], (long long)(i / len),
                                (long long)(i % len), (long long)c->vocab_size);
    int64_t *rows = malloc(sizeof *rows * (size_t)batch);
    out->nhidden = (int)c->num_layers + 1;
    out->hidden_states = calloc((size_t)out->nhidden, sizeof *out->hidden_states);
    if (!rows || !out->hidden_states) {
        free(rows);
        free(out->hidden_states);
        out->hidden_states = NULL;
        return lm_error_set(LM_ERR_NOMEM, "out of memory");
    }
    /* the pooled row of each sequence, on the host: ids are host data */
    for (int64_t b = 0; b < batch; b++) {
        const int32_t *r = ids + b * len;
        int64_t at = 0;
        for (int64_t i = 1; i < len; i++) {
            if (c->eos_token_id == 2 ? r[i] > r[at] : (r[at] != c->eos_token_id && r[i] == c->eos_token_id))
                at = i;
        }
        rows[b] = b * len + at;
    }
    int64_t shape[2] = {batch, len}, nb = batch, BLD[2] = {batch * len, c->hidden_size};
    lm_array *idx = lm_from_data(2, shape, LM_I32, ids, m->dev);
    lm_array *ridx = lm_from_data(1, &nb, LM_I64, rows, m->dev);
    free(rows);
    lm_array *x = lm_embedding(m->tok, idx);
    if (x && extra && table) {
        if (table->ndim != 2 || table->shape[1] != c->hidden_size) {
            lm_array_release(x);
            lm_array_release(idx);
            lm_array_release(ridx);
            lm_clip_text_out_free(out);
            return lm_error_set(LM_ERR_SHAPE, "clip text encoder: embedding vectors of width %lld for "
                                "a hidden size of %lld", (long long)table->shape[table->ndim - 1],
                                (long long)c->hidden_size);
        }
        swap(&x, with_extra(m, x, extra, table, batch, len));
    }
    lm_array *p = lm_slice(m->pos, 0, 0, len, 1);
    swap(&x, lm_binary(LM_OP_ADD, x, p));
    lm_array_release(p);
    lm_array_release(idx);
    out->hidden_states[0] = retain(x);
    for (int64_t l = 0; x && l < c->num_layers; l++) {
        swap(&x, layer_forward(m, &m->layers[l], x, batch, len));
        out->hidden_states[l + 1] = retain(x);
    }
    out->last_hidden_state = lm_layer_norm(x, 1, m->fin_w, m->fin_b, c->eps);
    lm_array_release(x);
    lm_array *flat = lm_reshape(out->last_hidden_state, 2, BLD);
    out->pooled = lm_index_select(flat, 0, ridx);
    lm_array_release(flat);
    lm_array_release(ridx);
    if (m->proj) out->text_embeds = linear(out->pooled, m->proj, NULL);
    bool ok = out->last_hidden_state && out->pooled && (!m->proj || out->text_embeds);
    for (int i = 0; i < out->nhidden; i++) ok = ok && out->hidden_states[i];
    if (!ok) {
        lm_status st = lm_error_prefix("clip text encoder");
        lm_clip_text_out_free(out);
        return st ? st : LM_ERR_STATE;
    }
    return LM_OK;
}

lm_array *lm_clip_text_final_norm(lm_clip_text *m, lm_array *x)
{
    return lm_layer_norm(x, 1, m->fin_w, m->fin_b, m->cfg.eps);
}
