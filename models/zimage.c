/* zimage.c - Z-Image's transformer as a Lumen graph (see zimage.h).
 *
 * The network, as diffusers' transformer_z_image.py computes it on its
 * standard path:
 *   adaln = t_embedder(t * t_scale)  (sinusoid [cos | sin] of 256, MLP)
 *   image: patchify [f h w] tokens of (pf ph pw c) features, x_embedder,
 *          padded to a multiple of 32 with x_pad_token; noise_refiner blocks
 *          (modulated by adaln)
 *   caption: padded to a multiple of 32, cap_embedder (RMSNorm + linear),
 *          the padded rows replaced by cap_pad_token; context_refiner
 *          blocks (not modulated), batch rows padded to the longest with a
 *          key mask
 *   unified = [image tokens, caption tokens] per item, padded to the
 *          longest with a key mask; the main layers; the final layer
 *          (LayerNorm without affine, scale 1 + linear(silu(adaln))); the
 *          image tokens unpatchified.
 * A block: scale, gate (tanh) for attention and FFN from one linear of
 * adaln; x += gate * norm2(attn(norm1(x) * scale)); the same with the
 * SwiGLU FFN.  Attention: q, k RMS-normed per head, 3-axis RoPE on
 * (2j, 2j+1) pairs (diffusers' complex product), positions
 * (cap_len + 1, h, w) for image tokens, (1 + j, 0, 0) for caption tokens,
 * (0, 0, 0) for image pad tokens.  The angles are made on the host as
 * diffusers makes its table: f64 frequencies and products rounded to f32. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "zimage.h"
#include "diffusers_config.h"
#include "dit_common.h"
#include "lumen.h"

#define ZI_MAX_CONFIG (1u << 20)
#define ZI_SEQ_MULTI_OF 32      /* diffusers' SEQ_MULTI_OF */
#define ZI_ADALN_MAX 256        /* diffusers' ADALN_EMBED_DIM */
#define ZI_FREQ_DIM 256         /* TimestepEmbedder's frequency_embedding_size */
#define ZI_T_MID 1024           /* TimestepEmbedder's mid_size */

typedef struct zi_block {
    lm_array *mod_w, *mod_b;    /* adaLN_modulation.0; NULL in the context refiner */
    lm_array *q, *k, *v, *o, *nq, *nk;
    lm_array *qkv;              /* the original layout's fused [3 dim, dim] (then q, k, v are NULL) */
    lm_array *an1, *an2, *fn1, *fn2, *w1, *w2, *w3;
} zi_block;

struct lm_zimage {
    lm_zimage_config cfg;
    lm_dtype dt;
    lm_device *dev;
    lm_array *x_w, *x_b, *fin_w, *fin_b, *fin_mod_w, *fin_mod_b;
    lm_array *t0_w, *t0_b, *t2_w, *t2_b, *cap_norm, *cap_w, *cap_b, *x_pad, *cap_pad;
    zi_block *noise, *context, *layers;
    double *freqs;              /* [head_dim / 2]: each axis's RoPE frequencies, in axis order */
    lm_dit_slots slots;         /* every weight taken, by its diffusers key (models/lora.c) */
};

/* ---- config ---- */

/* an integer array key of 1..max entries into out[] */
static lm_status int_list(const cJSON *j, const char *key, const char *path, int max, int64_t *out,
                          int *n)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    *n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
    if (*n < 1 || *n > max)
        return lm_error_set(LM_ERR_FORMAT, "%s: %s: expected a list of 1 to %d integers", path, key, max);
    for (int i = 0; i < *n; i++) {
        const cJSON *e = cJSON_GetArrayItem(v, i);
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 1 ||
            e->valuedouble > (double)(1 << 20))
            return lm_error_set(LM_ERR_FORMAT, "%s: %s[%d]: expected a positive integer", path, key, i);
        out[i] = (int64_t)e->valuedouble;
    }
    return LM_OK;
}

static lm_status parse_config(const cJSON *j, const char *path, lm_zimage_config *c)
{
    lm_status st = LM_OK;
    const int64_t big = 1 << 20;
    const cJSON *sig = cJSON_GetObjectItemCaseSensitive(j, "siglip_feat_dim");
    if (sig && !cJSON_IsNull(sig))
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: siglip_feat_dim is set: the Omni variant (SigLIP "
                            "features) is not implemented, only the standard Z-Image transformer", path);
    if (st == LM_OK) st = lm_dfs_int(j, "in_channels", path, false, 16, 1, 4096, &c->in_channels);
    if (st == LM_OK) st = lm_dfs_int(j, "dim", path, true, 0, 1, big, &c->dim);
    if (st == LM_OK) st = lm_dfs_int(j, "n_layers", path, true, 0, 0, 1024, &c->n_layers);
    if (st == LM_OK) st = lm_dfs_int(j, "n_refiner_layers", path, false, 2, 0, 1024, &c->n_refiner_layers);
    if (st == LM_OK) st = lm_dfs_int(j, "n_heads", path, true, 0, 1, 4096, &c->n_heads);
    if (st == LM_OK) st = lm_dfs_int(j, "n_kv_heads", path, false, c->n_heads, 1, 4096, &c->n_kv_heads);
    if (st == LM_OK) st = lm_dfs_int(j, "cap_feat_dim", path, true, 0, 1, big, &c->cap_feat_dim);
    if (st == LM_OK) st = lm_dfs_eps(j, "norm_eps", path, 1e-5, &c->norm_eps);
    if (st == LM_OK) st = lm_dfs_num(j, "rope_theta", path, false, 256.0, &c->rope_theta);
    if (st == LM_OK) st = lm_dfs_num(j, "t_scale", path, false, 1000.0, &c->t_scale);
    if (st != LM_OK) return st;
    const cJSON *qk = cJSON_GetObjectItemCaseSensitive(j, "qk_norm");
    if (qk && !cJSON_IsBool(qk))
        return lm_error_set(LM_ERR_FORMAT, "%s: qk_norm: expected true or false", path);
    c->qk_norm = !qk || cJSON_IsTrue(qk);
    int64_t ps[4], fs[4];
    int np = 1, nf = 1, nl = 0;
    ps[0] = 2;
    fs[0] = 1;
    if (cJSON_GetObjectItemCaseSensitive(j, "all_patch_size")) st = int_list(j, "all_patch_size", path, 4, ps, &np);
    if (st == LM_OK && cJSON_GetObjectItemCaseSensitive(j, "all_f_patch_size"))
        st = int_list(j, "all_f_patch_size", path, 4, fs, &nf);
    if (st != LM_OK) return st;
    if (np != 1 || nf != 1)
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: all_patch_size / all_f_patch_size: %d / %d entries; "
                            "one patch size is implemented (the pipeline's 2 and 1)", path, np, nf);
    if (fs[0] != 1)
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: all_f_patch_size [%lld]: only 1 is implemented "
                            "(images, one frame)", path, (long long)fs[0]);
    c->patch_size = ps[0];
    c->f_patch_size = fs[0];
    st = int_list(j, "axes_dims", path, LM_ZIMAGE_MAX_AXES, c->axes_dims, &c->naxes);
    if (st == LM_OK) st = int_list(j, "axes_lens", path, LM_ZIMAGE_MAX_AXES, c->axes_lens, &nl);
    if (st != LM_OK) return st;
    if (c->naxes != 3 || nl != 3)
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: axes_dims / axes_lens: %d / %d axes; Z-Image's "
                            "positions have 3 (caption/frame, height, width)", path, c->naxes, nl);
    if (c->dim % c->n_heads)
        return lm_error_set(LM_ERR_FORMAT, "%s: dim %lld is not a multiple of n_heads %lld", path,
                            (long long)c->dim, (long long)c->n_heads);
    int64_t hd = c->dim / c->n_heads, sum = 0;
    for (int a = 0; a < 3; a++) {
        if (c->axes_dims[a] % 2)
            return lm_error_set(LM_ERR_FORMAT, "%s: axes_dims[%d] = %lld is odd", path, a,
                                (long long)c->axes_dims[a]);
        sum += c->axes_dims[a];
    }
    if (sum != hd)
        return lm_error_set(LM_ERR_FORMAT, "%s: axes_dims sum to %lld, the head size dim / n_heads is %lld",
                            path, (long long)sum, (long long)hd);
    c->ffn_dim = (int64_t)((double)c->dim / 3.0 * 8.0);
    c->adaln_dim = c->dim < ZI_ADALN_MAX ? c->dim : ZI_ADALN_MAX;
    return LM_OK;
}

/* ---- weights ---- */

static void blocks_free(zi_block *b, int64_t n)
{
    for (int64_t l = 0; b && l < n; l++) {
        lm_array **w = (lm_array **)&b[l];
        for (size_t k = 0; k < sizeof(zi_block) / sizeof(lm_array *); k++) lm_dit_drop(&w[k]);
    }
    free(b);
}

void lm_zimage_free(lm_zimage *m)
{
    if (!m) return;
    lm_array **w[] = {&m->x_w, &m->x_b, &m->fin_w, &m->fin_b, &m->fin_mod_w, &m->fin_mod_b, &m->t0_w,
                      &m->t0_b, &m->t2_w, &m->t2_b, &m->cap_norm, &m->cap_w, &m->cap_b, &m->x_pad,
                      &m->cap_pad};
    for (size_t k = 0; k < sizeof w / sizeof *w; k++) lm_dit_drop(w[k]);
    blocks_free(m->noise, m->cfg.n_refiner_layers);
    blocks_free(m->context, m->cfg.n_refiner_layers);
    blocks_free(m->layers, m->cfg.n_layers);
    free(m->freqs);
    lm_dit_slots_free(&m->slots);
    free(m);
}

static lm_status take_block(lm_dit_weights *W, const lm_zimage_config *c, const char *prefix, bool modulated,
                            zi_block *y)
{
    int64_t D = c->dim, F = c->ffn_dim, hd = c->dim / c->n_heads;
    char fk[192], p[192];
    snprintf(fk, sizeof fk, "%s.attention.qkv.weight", prefix);
    snprintf(p, sizeof p, "%s.", prefix);
    bool fused = lm_dit_weights_find(W, fk) >= 0;   /* lm_zimage_rename_single keeps it fused */
    const lm_dit_want w[] = {
        {"adaLN_modulation.0.weight", 2, {4 * D, c->adaln_dim}, &y->mod_w, modulated},
        {"adaLN_modulation.0.bias", 1, {4 * D}, &y->mod_b, modulated},
        {"attention.qkv.weight", 2, {3 * D, D}, &y->qkv, fused},
        {"attention.to_q.weight", 2, {D, D}, &y->q, !fused},
        {"attention.to_k.weight", 2, {D, D}, &y->k, !fused},
        {"attention.to_v.weight", 2, {D, D}, &y->v, !fused},
        {"attention.to_out.0.weight", 2, {D, D}, &y->o, true},
        {"attention.norm_q.weight", 1, {hd}, &y->nq, c->qk_norm},
        {"attention.norm_k.weight", 1, {hd}, &y->nk, c->qk_norm},
        {"attention_norm1.weight", 1, {D}, &y->an1, true}, {"attention_norm2.weight", 1, {D}, &y->an2, true},
        {"ffn_norm1.weight", 1, {D}, &y->fn1, true}, {"ffn_norm2.weight", 1, {D}, &y->fn2, true},
        {"feed_forward.w1.weight", 2, {F, D}, &y->w1, true},
        {"feed_forward.w2.weight", 2, {D, F}, &y->w2, true},
        {"feed_forward.w3.weight", 2, {F, D}, &y->w3, true},
    };
    return lm_dit_take_list(W, p, w, sizeof w / sizeof *w);
}

static lm_status take_blocks(lm_dit_weights *W, const lm_zimage_config *c, const char *name, int64_t n,
                             bool modulated, zi_block **out)
{
    *out = calloc((size_t)(n > 0 ? n : 1), sizeof **out);
    if (!*out) return lm_error_set(LM_ERR_NOMEM, "out of memory");
    for (int64_t l = 0; l < n; l++) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "%s.%lld", name, (long long)l);
        lm_status st = take_block(W, c, prefix, modulated, &(*out)[l]);
        if (st != LM_OK) return st;
    }
    return LM_OK;
}

static lm_status take_all(lm_dit_weights *W, lm_zimage *m)
{
    const lm_zimage_config *c = &m->cfg;
    int64_t D = c->dim, p = c->patch_size, pd = c->f_patch_size * p * p * c->in_channels, A = c->adaln_dim;
    char xe[64], fl[64];
    snprintf(xe, sizeof xe, "all_x_embedder.%lld-%lld.", (long long)p, (long long)c->f_patch_size);
    snprintf(fl, sizeof fl, "all_final_layer.%lld-%lld.", (long long)p, (long long)c->f_patch_size);
    const lm_dit_want w[] = {
        {"t_embedder.mlp.0.weight", 2, {ZI_T_MID, ZI_FREQ_DIM}, &m->t0_w, true},
        {"t_embedder.mlp.0.bias", 1, {ZI_T_MID}, &m->t0_b, true},
        {"t_embedder.mlp.2.weight", 2, {A, ZI_T_MID}, &m->t2_w, true},
        {"t_embedder.mlp.2.bias", 1, {A}, &m->t2_b, true},
        {"cap_embedder.0.weight", 1, {c->cap_feat_dim}, &m->cap_norm, true},
        {"cap_embedder.1.weight", 2, {D, c->cap_feat_dim}, &m->cap_w, true},
        {"cap_embedder.1.bias", 1, {D}, &m->cap_b, true},
    };
    const lm_dit_want xw[] = {{"weight", 2, {D, pd}, &m->x_w, true}, {"bias", 1, {D}, &m->x_b, true}};
    const lm_dit_want fw[] = {
        {"linear.weight", 2, {pd, D}, &m->fin_w, true}, {"linear.bias", 1, {pd}, &m->fin_b, true},
        {"adaLN_modulation.1.weight", 2, {D, A}, &m->fin_mod_w, true},
        {"adaLN_modulation.1.bias", 1, {D}, &m->fin_mod_b, true},
    };
    int64_t pad[2] = {1, D};
    lm_status st = lm_dit_take_list(W, "", w, sizeof w / sizeof *w);
    /* the pad tokens are rows of data: never kept quantized */
    if (st == LM_OK) st = lm_dit_take_as(W, "x_pad_token", 2, pad, false, &m->x_pad);
    if (st == LM_OK) st = lm_dit_take_as(W, "cap_pad_token", 2, pad, false, &m->cap_pad);
    if (st == LM_OK) st = lm_dit_take_list(W, xe, xw, sizeof xw / sizeof *xw);
    if (st == LM_OK) st = lm_dit_take_list(W, fl, fw, sizeof fw / sizeof *fw);
    if (st == LM_OK) st = take_blocks(W, c, "noise_refiner", c->n_refiner_layers, true, &m->noise);
    if (st == LM_OK) st = take_blocks(W, c, "context_refiner", c->n_refiner_layers, false, &m->context);
    if (st == LM_OK) st = take_blocks(W, c, "layers", c->n_layers, true, &m->layers);
    char ctx[128];
    snprintf(ctx, sizeof ctx, "config: %lld layers, %lld refiner layers%s", (long long)c->n_layers,
             (long long)c->n_refiner_layers, c->qk_norm ? "" : ", no qk_norm");
    return st == LM_OK ? lm_dit_weights_finish(W, ctx) : st;
}

/* an lm_dit_build_fn: the model (an lm_zimage) or NULL */
static void *load_from(const cJSON *config, const char *cfg_name, lm_dit_weights *W, lm_dtype dt,
                       lm_device *dev)
{
    lm_zimage *m = calloc(1, sizeof *m);
    lm_status st = m ? LM_OK : lm_error_set(LM_ERR_NOMEM, "out of memory");
    if (st == LM_OK) st = parse_config(config, cfg_name, &m->cfg);
    if (st == LM_OK) {
        m->dt = dt;
        m->dev = dev;
        W->record = &m->slots;
        st = take_all(W, m);
        W->record = NULL;
    }
    if (st == LM_OK) {
        /* RopeEmbedder's 1 / theta^(arange(0, d, 2) / d), in f64 */
        const lm_zimage_config *c = &m->cfg;
        m->freqs = malloc(sizeof *m->freqs * (size_t)(c->dim / c->n_heads / 2));
        if (!m->freqs) st = lm_error_set(LM_ERR_NOMEM, "out of memory");
        for (int a = 0, k = 0; st == LM_OK && a < c->naxes; a++)
            for (int64_t j = 0; j < c->axes_dims[a] / 2; j++)
                m->freqs[k++] = 1.0 / pow(c->rope_theta, (double)(2 * j) / (double)c->axes_dims[a]);
    }
    if (st != LM_OK) {
        lm_zimage_free(m);
        return NULL;
    }
    return m;
}

static const lm_dit_component ZI_COMPONENT = {
    .what = "zimage transformer", .stem = "diffusion_pytorch_model", .max_config = ZI_MAX_CONFIG,
    .build = load_from,
};

lm_zimage *lm_zimage_load(const char *dir, const char *variant, lm_dtype dt, lm_device *dev)
{
    return lm_dit_load_dir(&ZI_COMPONENT, dir, variant, dt, dev);
}

lm_zimage *lm_zimage_load_from(const cJSON *config, lm_tensor_set *weights, const char *file, lm_dtype dt,
                               lm_device *dev)
{
    return lm_dit_load_parts(&ZI_COMPONENT, config, file, weights, file, dt, dev);
}

const lm_zimage_config *lm_zimage_get_config(const lm_zimage *m) { return &m->cfg; }
lm_dtype lm_zimage_dtype(const lm_zimage *m) { return m->dt; }
lm_device *lm_zimage_device(const lm_zimage *m) { return m->dev; }
struct lm_dit_slots *lm_zimage_weights(lm_zimage *m) { return &m->slots; }

/* ---- the network ---- */

static lm_array *mul(lm_array *a, lm_array *b) { return lm_binary(LM_OP_MUL, a, b); }

/* a linear layer, with the run-time terms models/lora.c set on w */
static lm_array *lin(const lm_zimage *m, lm_array *x, lm_array *w, lm_array *b)
{
    return lm_dit_linear_in(&m->slots, x, w, b);
}

/* [B, L, D] -> [B, H, L, D/H], q/k RMS-normed per head when norm is set,
 * rotated by ang [B or 1, L, D/H/2] when set */
static lm_array *heads(lm_array *x, int64_t H, lm_array *norm, lm_array *ang)
{
    if (!x) return NULL;
    lm_array *r = lm_dit_split_heads(x, H, x->shape[2] / H);
    /* diffusers' Attention builds the q/k norms with eps 1e-5 */
    if (norm) lm_dit_swap(&r, lm_dit_rms_norm(r, norm, 1e-5));
    lm_dit_swap(&r, lm_transpose(r, 1, 2));
    if (ang) lm_dit_swap(&r, lm_dit_rope(r, ang, LM_DIT_BHLD, true));
    return r;
}

static lm_array *attention(const lm_zimage *m, const zi_block *b, lm_array *h, lm_array *ang, lm_array *mask)
{
    int64_t H = m->cfg.n_heads;
    lm_array *q = NULL, *k = NULL, *v = NULL;
    if (b->qkv) {
        lm_array *y = lin(m, h, b->qkv, NULL), *part[3] = {0};
        if (y && lm_split(y, 3, NULL, 0, -1, part, 3) == 3) {
            q = part[0];
            k = part[1];
            v = part[2];
        }
        lm_array_release(y);
    } else {
        q = lin(m, h, b->q, NULL);
        k = lin(m, h, b->k, NULL);
        v = lin(m, h, b->v, NULL);
    }
    lm_dit_swap(&q, heads(q, H, b->nq, ang));
    lm_dit_swap(&k, heads(k, H, b->nk, ang));
    lm_dit_swap(&v, heads(v, H, NULL, NULL));
    int64_t hd = m->cfg.dim / H;
    lm_array *a = lm_attention(q, k, v, mask, false, 1.0 / sqrt((double)hd));
    lm_array_release(q);
    lm_array_release(k);
    lm_array_release(v);
    lm_dit_swap(&a, lm_dit_merge_heads(a));
    return lm_dit_swap(&a, lin(m, a, b->o, NULL));
}

/* One ZImageTransformerBlock on x [B, L, D]; adaln [B, A] (NULL for the
 * context refiner), ang the RoPE angles, mask [B, 1, 1, L] bool or NULL. */
static lm_array *block(const lm_zimage *m, const zi_block *b, lm_array *x, lm_array *adaln, lm_array *ang,
                       lm_array *mask)
{
    double eps = m->cfg.norm_eps;
    lm_array *mod[4] = {0};
    if (b->mod_w) {
        int64_t s[3] = {adaln ? adaln->shape[0] : 0, 1, 4 * m->cfg.dim};
        lm_array *y = lin(m, adaln, b->mod_w, b->mod_b);
        lm_dit_swap(&y, lm_reshape(y, 3, s));
        /* scale_msa, gate_msa, scale_mlp, gate_mlp */
        if (!y || lm_split(y, 4, NULL, 0, -1, mod, 4) != 4) {
            lm_array_release(y);
            return NULL;
        }
        lm_array_release(y);
        lm_dit_swap(&mod[0], lm_binary_scalar(LM_OP_ADD, mod[0], 1.0, false));
        lm_dit_swap(&mod[1], lm_unary(LM_OP_TANH, mod[1]));
        lm_dit_swap(&mod[2], lm_binary_scalar(LM_OP_ADD, mod[2], 1.0, false));
        lm_dit_swap(&mod[3], lm_unary(LM_OP_TANH, mod[3]));
    }
    lm_array *h = lm_dit_rms_norm(x, b->an1, eps);
    if (b->mod_w) lm_dit_swap(&h, mul(h, mod[0]));
    lm_dit_swap(&h, attention(m, b, h, ang, mask));
    lm_dit_swap(&h, lm_dit_rms_norm(h, b->an2, eps));
    if (b->mod_w) lm_dit_swap(&h, mul(h, mod[1]));
    lm_array *x1 = lm_binary(LM_OP_ADD, x, h);
    lm_dit_swap(&h, lm_dit_rms_norm(x1, b->fn1, eps));
    if (b->mod_w) lm_dit_swap(&h, mul(h, mod[2]));
    lm_array *g = lin(m, h, b->w1, NULL), *u = lin(m, h, b->w3, NULL);
    lm_dit_swap(&h, lm_swiglu(g, u));
    lm_array_release(g);
    lm_array_release(u);
    lm_dit_swap(&h, lin(m, h, b->w2, NULL));
    lm_dit_swap(&h, lm_dit_rms_norm(h, b->fn2, eps));
    if (b->mod_w) lm_dit_swap(&h, mul(h, mod[3]));
    lm_array *out = lm_binary(LM_OP_ADD, x1, h);
    lm_array_release(x1);
    lm_array_release(h);
    for (int i = 0; i < 4; i++) lm_array_release(mod[i]);
    return out;
}

/* The RoPE angles of a head's pairs for position pos[3]: axis a owns
 * axes_dims[a] / 2 pairs (m->freqs), products in f64 rounded to f32, as
 * diffusers' RopeEmbedder tables. */
static void rope_row(const lm_zimage *m, const int64_t pos[3], float *out)
{
    int k = 0;
    for (int a = 0; a < 3; a++)
        for (int64_t j = 0; j < m->cfg.axes_dims[a] / 2; j++, k++) out[k] = (float)((double)pos[a] * m->freqs[k]);
}

/* an [n, L, hd/2] f32 table (zeros where no row is written) */
static float *table(int64_t n, int64_t L, int64_t half)
{
    return calloc((size_t)(n * L * half > 0 ? n * L * half : 1), sizeof(float));
}

static lm_array *to_dev(const lm_zimage *m, int nd, const int64_t *shape, lm_dtype dt, void *data)
{
    lm_array *a = data ? lm_from_data(nd, shape, dt, data, m->dev) : NULL;
    if (!data) lm_error_set(LM_ERR_NOMEM, "zimage transformer: out of host memory");
    free(data);
    return a;
}

/* [B, 1, 1, L] bool: key j of item i visible when j < len[i]; NULL (no
 * mask, as diffusers) when every item has length L */
static lm_array *key_mask(const lm_zimage *m, int64_t B, int64_t L, const int64_t *len, bool *failed)
{
    *failed = false;
    bool all = true;
    for (int64_t i = 0; i < B; i++) all = all && len[i] == L;
    if (all) return NULL;
    uint8_t *v = calloc((size_t)(B * L), 1);
    for (int64_t i = 0; v && i < B; i++)
        for (int64_t j = 0; j < len[i]; j++) v[i * L + j] = 1;
    int64_t s[4] = {B, 1, 1, L};
    lm_array *r = to_dev(m, 4, s, LM_BOOL, v);
    *failed = !r;
    return r;
}

/* the padded caption of item i, [1, Lc, D]: cap_embedder rows, cap_pad_token
 * up to lpad, zeros up to Lc */
static lm_array *caption(const lm_zimage *m, lm_array *cap, int64_t lpad, int64_t Lc)
{
    int64_t D = m->cfg.dim, L = cap->shape[0];
    lm_array *c = cap->dtype == m->dt ? lm_array_retain(cap) : lm_cast(cap, m->dt);
    lm_dit_swap(&c, lm_dit_rms_norm(c, m->cap_norm, m->cfg.norm_eps));
    lm_dit_swap(&c, lin(m, c, m->cap_w, m->cap_b));
    if (lpad > L) {
        int64_t s[2] = {lpad - L, D};
        lm_array *p = lm_broadcast_to(m->cap_pad, 2, s);
        lm_array *two[2] = {c, p};
        lm_array *r = c && p ? lm_concat(2, two, 0) : NULL;
        lm_array_release(p);
        lm_dit_swap(&c, r);
    }
    if (Lc > lpad) {
        int64_t pads[4] = {0, Lc - lpad, 0, 0};
        lm_dit_swap(&c, lm_pad(c, pads, 0.0));
    }
    return lm_dit_swap(&c, lm_unsqueeze(c, 0));
}

static int64_t round_up(int64_t n) { return n + (ZI_SEQ_MULTI_OF - n % ZI_SEQ_MULTI_OF) % ZI_SEQ_MULTI_OF; }

static lm_status check_inputs(const lm_zimage *m, lm_array *x, lm_array *t, int ncap, lm_array *const *caps)
{
    const lm_zimage_config *c = &m->cfg;
    char s1[96], s2[96];
    if (!x || !t || !caps) return lm_error_set(LM_ERR_ARG, "zimage transformer: x, t and caps are required");
    lm_shape_str(s1, sizeof s1, x->ndim, x->shape);
    if (x->ndim != 4 || x->shape[1] != c->in_channels || x->shape[2] % c->patch_size ||
        x->shape[3] % c->patch_size || x->shape[0] < 1)
        return lm_error_set(LM_ERR_SHAPE, "zimage transformer: x %s: expected [B, %lld, H, W] with H and W "
                            "multiples of %lld", s1, (long long)c->in_channels, (long long)c->patch_size);
    int64_t B = x->shape[0];
    lm_shape_str(s2, sizeof s2, t->ndim, t->shape);
    if (t->ndim != 1 || t->shape[0] != B)
        return lm_error_set(LM_ERR_SHAPE, "zimage transformer: t %s: expected [%lld] for x %s", s2,
                            (long long)B, s1);
    if (ncap != B)
        return lm_error_set(LM_ERR_SHAPE, "zimage transformer: %d captions for a batch of %lld", ncap,
                            (long long)B);
    for (int i = 0; i < ncap; i++) {
        if (!caps[i]) return lm_error_set(LM_ERR_ARG, "zimage transformer: caption %d is NULL", i);
        lm_shape_str(s2, sizeof s2, caps[i]->ndim, caps[i]->shape);
        if (caps[i]->ndim != 2 || caps[i]->shape[0] < 1 || caps[i]->shape[1] != c->cap_feat_dim)
            return lm_error_set(LM_ERR_SHAPE, "zimage transformer: caption %d %s: expected [L >= 1, %lld]", i,
                                s2, (long long)c->cap_feat_dim);
        /* diffusers indexes its RoPE tables: the image's first axis sits at
         * the padded caption length + 1 */
        int64_t lpad = round_up(caps[i]->shape[0]);
        if (lpad + 1 >= c->axes_lens[0])
            return lm_error_set(LM_ERR_SHAPE, "zimage transformer: caption %d of %lld tokens (padded %lld) "
                                "needs position %lld, beyond axes_lens[0] %lld", i,
                                (long long)caps[i]->shape[0], (long long)lpad, (long long)(lpad + 1),
                                (long long)c->axes_lens[0]);
    }
    int64_t ht = x->shape[2] / c->patch_size, wt = x->shape[3] / c->patch_size;
    if (ht > c->axes_lens[1] || wt > c->axes_lens[2])
        return lm_error_set(LM_ERR_SHAPE, "zimage transformer: x %s is %lldx%lld patches, beyond axes_lens "
                            "%lldx%lld", s1, (long long)ht, (long long)wt, (long long)c->axes_lens[1],
                            (long long)c->axes_lens[2]);
    return LM_OK;
}

/* t [B] -> adaln [B, A]: t_embedder(t * t_scale) in the model's dtype */
static lm_array *t_embed(const lm_zimage *m, lm_array *t)
{
    lm_array *e = lm_cast(t, LM_F32);
    lm_dit_swap(&e, lm_binary_scalar(LM_OP_MUL, e, m->cfg.t_scale, false));
    lm_dit_swap(&e, lm_dit_sinusoid(e, ZI_FREQ_DIM, m->dev));   /* f32, as its TimestepEmbedder */
    if (e && e->dtype != m->dt) lm_dit_swap(&e, lm_cast(e, m->dt));
    lm_dit_swap(&e, lin(m, e, m->t0_w, m->t0_b));
    lm_dit_swap(&e, lm_unary(LM_OP_SILU, e));
    return lm_dit_swap(&e, lin(m, e, m->t2_w, m->t2_b));
}

/* x [B, C, H, W] -> [B, Npad, D]: patch tokens embedded, x_pad_token rows
 * up to npad */
static lm_array *patchify(const lm_zimage *m, lm_array *x, int64_t npad)
{
    const lm_zimage_config *c = &m->cfg;
    int64_t B = x->shape[0], C = c->in_channels, p = c->patch_size, ht = x->shape[2] / p, wt = x->shape[3] / p;
    int64_t s6[6] = {B, C, ht, p, wt, p}, s3[3] = {B, ht * wt, p * p * C};
    int perm[6] = {0, 2, 4, 3, 5, 1};
    lm_array *h = x->dtype == m->dt ? lm_array_retain(x) : lm_cast(x, m->dt);
    lm_dit_swap(&h, lm_reshape(h, 6, s6));
    lm_dit_swap(&h, lm_permute(h, perm));
    lm_dit_swap(&h, lm_contiguous(h));
    lm_dit_swap(&h, lm_reshape(h, 3, s3));
    lm_dit_swap(&h, lin(m, h, m->x_w, m->x_b));
    if (npad > ht * wt) {
        int64_t s[3] = {B, npad - ht * wt, c->dim};
        lm_array *pad = lm_broadcast_to(m->x_pad, 3, s);
        lm_array *two[2] = {h, pad};
        lm_array *r = h && pad ? lm_concat(2, two, 1) : NULL;
        lm_array_release(pad);
        lm_dit_swap(&h, r);
    }
    return h;
}

/* the final layer and unpatchify: u [B, U, D] -> [B, C, H, W] */
static lm_array *final_layer(const lm_zimage *m, lm_array *u, lm_array *adaln, int64_t ht, int64_t wt)
{
    const lm_zimage_config *c = &m->cfg;
    int64_t B = u->shape[0], C = c->in_channels, p = c->patch_size;
    int64_t sc3[3] = {B, 1, c->dim}, s6[6] = {B, ht, wt, p, p, C}, s4[4] = {B, C, ht * p, wt * p};
    int perm[6] = {0, 5, 1, 3, 2, 4};
    lm_array *s = lm_unary(LM_OP_SILU, adaln);
    lm_dit_swap(&s, lin(m, s, m->fin_mod_w, m->fin_mod_b));
    lm_dit_swap(&s, lm_binary_scalar(LM_OP_ADD, s, 1.0, false));
    lm_dit_swap(&s, lm_reshape(s, 3, sc3));
    lm_array *h = lm_layer_norm(u, 1, NULL, NULL, 1e-6);
    lm_dit_swap(&h, mul(h, s));
    lm_array_release(s);
    lm_dit_swap(&h, lin(m, h, m->fin_w, m->fin_b));
    lm_dit_swap(&h, lm_slice(h, 1, 0, ht * wt, 1));
    lm_dit_swap(&h, lm_contiguous(h));
    lm_dit_swap(&h, lm_reshape(h, 6, s6));
    lm_dit_swap(&h, lm_permute(h, perm));
    lm_dit_swap(&h, lm_contiguous(h));
    return lm_dit_swap(&h, lm_reshape(h, 4, s4));
}

lm_array *lm_zimage_forward(lm_zimage *m, lm_array *x, lm_array *t, int ncap, lm_array *const *caps)
{
    if (!m) {
        lm_error_set(LM_ERR_ARG, "zimage transformer: no model");
        return NULL;
    }
    if (check_inputs(m, x, t, ncap, caps) != LM_OK) return NULL;
    const lm_zimage_config *c = &m->cfg;
    int64_t B = x->shape[0], p = c->patch_size, ht = x->shape[2] / p, wt = x->shape[3] / p;
    int64_t N = ht * wt, npad = round_up(N), half = c->dim / c->n_heads / 2, Lc = 0, U = 0;
    int64_t *lpad = calloc((size_t)B, sizeof *lpad), *ulen = calloc((size_t)B, sizeof *ulen);
    lm_array **items = calloc((size_t)B, sizeof *items);
    if (!lpad || !ulen || !items) {
        free(lpad);
        free(ulen);
        free(items);
        lm_error_set(LM_ERR_NOMEM, "zimage transformer: out of host memory");
        return NULL;
    }
    for (int64_t i = 0; i < B; i++) {
        lpad[i] = round_up(caps[i]->shape[0]);
        ulen[i] = npad + lpad[i];
        if (lpad[i] > Lc) Lc = lpad[i];
        if (ulen[i] > U) U = ulen[i];
    }
    /* RoPE angles: image rows, caption rows (shared: rows past an item's
     * length are masked), the unified rows */
    float *xa = table(B, npad, half), *ca = table(1, Lc, half), *ua = table(B, U, half);
    for (int64_t i = 0; xa && ua && i < B; i++) {
        for (int64_t n = 0; n < N; n++) {
            int64_t pos[3] = {lpad[i] + 1, n / wt, n % wt};
            rope_row(m, pos, xa + (i * npad + n) * half);
        }
        memcpy(ua + i * U * half, xa + i * npad * half, sizeof(float) * (size_t)(npad * half));
        for (int64_t j = 0; j < lpad[i]; j++) {
            int64_t pos[3] = {1 + j, 0, 0};
            rope_row(m, pos, ua + (i * U + npad + j) * half);
        }
    }
    for (int64_t j = 0; ca && j < Lc; j++) {
        int64_t pos[3] = {1 + j, 0, 0};
        rope_row(m, pos, ca + j * half);
    }
    int64_t xs[3] = {B, npad, half}, cs[3] = {1, Lc, half}, us[3] = {B, U, half};
    lm_array *x_ang = to_dev(m, 3, xs, LM_F32, xa), *c_ang = to_dev(m, 3, cs, LM_F32, ca);
    lm_array *u_ang = to_dev(m, 3, us, LM_F32, ua);
    bool f1, f2;
    lm_array *c_mask = key_mask(m, B, Lc, lpad, &f1), *u_mask = key_mask(m, B, U, ulen, &f2);

    lm_array *adaln = t_embed(m, t);
    lm_array *h = f1 || f2 || !x_ang || !c_ang || !u_ang ? NULL : patchify(m, x, npad);
    for (int64_t l = 0; h && l < c->n_refiner_layers; l++)
        lm_dit_swap(&h, block(m, &m->noise[l], h, adaln, x_ang, NULL));

    for (int64_t i = 0; h && i < B; i++) items[i] = caption(m, caps[i], lpad[i], Lc);
    lm_array *cap = h ? lm_concat((int)B, items, 0) : NULL;
    for (int64_t l = 0; cap && l < c->n_refiner_layers; l++)
        lm_dit_swap(&cap, block(m, &m->context[l], cap, NULL, c_ang, c_mask));

    /* unified [image, caption] per item, zeros up to U */
    for (int64_t i = 0; i < B; i++) {
        lm_array *xi = lm_slice(h, 0, i, i + 1, 1), *ci = lm_slice(cap, 0, i, i + 1, 1);
        lm_dit_swap(&ci, lm_slice(ci, 1, 0, lpad[i], 1));
        lm_array *two[2] = {xi, ci};
        lm_dit_swap(&items[i], xi && ci ? lm_concat(2, two, 1) : NULL);
        lm_array_release(xi);
        lm_array_release(ci);
        if (items[i] && U > ulen[i]) {
            int64_t pads[6] = {0, 0, 0, U - ulen[i], 0, 0};
            lm_dit_swap(&items[i], lm_pad(items[i], pads, 0.0));
        }
    }
    bool all = true;
    for (int64_t i = 0; i < B; i++) all = all && items[i];
    lm_array *u = all ? lm_concat((int)B, items, 0) : NULL;
    for (int64_t l = 0; u && l < c->n_layers; l++)
        lm_dit_swap(&u, block(m, &m->layers[l], u, adaln, u_ang, u_mask));
    lm_array *out = u ? final_layer(m, u, adaln, ht, wt) : NULL;

    for (int64_t i = 0; i < B; i++) lm_array_release(items[i]);
    lm_array *rel[] = {x_ang, c_ang, u_ang, c_mask, u_mask, adaln, h, cap, u};
    for (size_t k = 0; k < sizeof rel / sizeof *rel; k++) lm_array_release(rel[k]);
    free(items);
    free(lpad);
    free(ulen);
    if (!out) lm_error_prefix("zimage transformer");
    return out;
}
