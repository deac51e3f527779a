/* vae.c - diffusers' AutoencoderKL as Lumen graphs (see vae.h).
 *
 * The network, as diffusers' autoencoders/vae.py computes it:
 * Encoder: conv_in; per level layers_per_block ResnetBlock2D (no time
 * embedding) and, but for the last level, Downsample2D (pad right and bottom
 * by one, 3x3 conv of stride 2); mid block (resnet, single-head attention
 * over H*W, resnet); group norm, silu, conv_out to 2*latent channels;
 * quant_conv (1x1).  Decoder: post_quant_conv (1x1); conv_in; mid block; per
 * level layers_per_block+1 resnets and, but for the last, Upsample2D
 * (nearest x2, 3x3 conv); group norm, silu, conv_out.  Every group norm has
 * eps 1e-6.  The tiled paths are diffusers' tiled_decode / _tiled_encode.
 * AutoencoderKLFlux2 is this network; its bn.running_mean / running_var are
 * kept for lm_vae_bn (the pipeline applies them, not encode or decode). */
#include <math.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include "diffusers_config.h"
#include "lumen.h"
#include "vae.h"

#define VAE_MAX_CONFIG (1u << 20)
#define VAE_EPS 1e-6

typedef struct vae_resnet {
    int64_t cin, cout;
    lm_array *n1_w, *n1_b, *c1_w, *c1_b, *n2_w, *n2_b, *c2_w, *c2_b, *sc_w, *sc_b;
} vae_resnet;

typedef struct vae_attn {
    lm_array *gn_w, *gn_b, *q_w, *q_b, *k_w, *k_b, *v_w, *v_b, *o_w, *o_b;
} vae_attn;

typedef struct vae_mid {
    vae_resnet res[2];
    vae_attn attn;     /* all NULL without mid_block_add_attention */
} vae_mid;

typedef struct vae_level {
    int nres;
    vae_resnet *res;
    lm_array *samp_w, *samp_b;   /* downsampler / upsampler conv, NULL on the last level */
} vae_level;

typedef struct vae_half {
    lm_array *in_w, *in_b, *norm_w, *norm_b, *out_w, *out_b;
    vae_level level[LM_VAE_MAX_LEVELS];
    vae_mid mid;
} vae_half;

struct lm_vae {
    lm_vae_config cfg;
    lm_dtype dt;
    lm_device *dev;
    lm_vae_tiling tiling;
    vae_half enc, dec;
    lm_array *quant_w, *quant_b, *post_w, *post_b;
    lm_array *bn_mean, *bn_var;   /* AutoencoderKLFlux2's running statistics, else NULL */
    /* every kept weight, for lm_vae_free */
    lm_array **owned;
    int nowned, capowned;
};

/* ---- config ---- */

/* A list of block type names, each of which must be `want`; *n gets the
 * count (a missing key is diffusers' default: one block). */
static lm_status get_blocks(const cJSON *o, const char *key, const char *what, const char *want,
                            int *n)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        *n = 1;
        return LM_OK;
    }
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) < 1)
        return lm_error_set(LM_ERR_FORMAT, "%s: %s: expected a list of block types", what, key);
    int k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        if (!cJSON_IsString(e))
            return lm_error_set(LM_ERR_FORMAT, "%s: %s[%d]: expected a string", what, key, k);
        if (strcmp(e->valuestring, want))
            return lm_error_set(LM_ERR_UNSUPPORTED, "%s: %s[%d]: %s is not supported (only %s, "
                                "as AutoencoderKL's VAEs use)", what, key, k, e->valuestring, want);
        k++;
    }
    *n = k;
    return LM_OK;
}

/* AutoencoderKLFlux2's keys: the batch norm over the patchified latents */
static lm_status read_flux2_config(const cJSON *j, const char *what, lm_vae_config *c)
{
    c->flux2 = true;
    lm_status st = lm_dfs_eps(j, "batch_norm_eps", what, 1e-4, &c->batch_norm_eps);
    if (st == LM_OK) st = lm_dfs_num(j, "batch_norm_momentum", what, false, 0.1, &c->batch_norm_momentum);
    if (st == LM_OK && !(c->batch_norm_eps >= 0))
        st = lm_error_set(LM_ERR_FORMAT, "%s: batch_norm_eps %g: expected a number >= 0", what,
                          c->batch_norm_eps);
    const cJSON *ps = cJSON_GetObjectItemCaseSensitive(j, "patch_size");
    c->patch_size[0] = c->patch_size[1] = 2;
    if (st == LM_OK && ps && !cJSON_IsNull(ps)) {
        bool ok = cJSON_IsArray(ps) && cJSON_GetArraySize(ps) == 2;
        for (int i = 0; ok && i < 2; i++) {
            const cJSON *e = cJSON_GetArrayItem(ps, i);
            ok = cJSON_IsNumber(e) && e->valuedouble == floor(e->valuedouble) && e->valuedouble >= 1 &&
                 e->valuedouble <= 64;
            if (ok) c->patch_size[i] = (int64_t)e->valuedouble;
        }
        if (!ok)
            st = lm_error_set(LM_ERR_FORMAT, "%s: patch_size: expected a list of two integers in [1, 64]",
                              what);
    }
    return st;
}

static lm_status read_config(const cJSON *j, const char *what, lm_vae_config *c)
{
    const int64_t big = 1 << 16;
    lm_status st = LM_OK;
    const char *cls = NULL;
    st = lm_dfs_str(j, "_class_name", what, false, "AutoencoderKL", &cls);
    if (st == LM_OK && strcmp(cls, "AutoencoderKL") && strcmp(cls, "AutoencoderKLFlux2"))
        st = lm_error_set(LM_ERR_UNSUPPORTED, "%s: _class_name: %s is not supported "
                          "(AutoencoderKL, AutoencoderKLFlux2)", what, cls);
    if (st == LM_OK && !strcmp(cls, "AutoencoderKLFlux2")) st = read_flux2_config(j, what, c);
    if (st == LM_OK) st = lm_dfs_int(j, "in_channels", what, false, 3, 1, big, &c->in_channels);
    if (st == LM_OK) st = lm_dfs_int(j, "out_channels", what, false, 3, 1, big, &c->out_channels);
    if (st == LM_OK) st = lm_dfs_int(j, "latent_channels", what, false, 4, 1, big, &c->latent_channels);
    if (st == LM_OK) st = lm_dfs_int(j, "layers_per_block", what, false, 1, 1, 64, &c->layers_per_block);
    if (st == LM_OK) st = lm_dfs_int(j, "norm_num_groups", what, false, 32, 1, big, &c->norm_num_groups);
    const char *act = "silu";
    if (st == LM_OK) st = lm_dfs_str(j, "act_fn", what, false, act, &act);
    if (st == LM_OK && strcmp(act, "silu") && strcmp(act, "swish"))
        st = lm_error_set(LM_ERR_UNSUPPORTED, "%s: act_fn: \"%s\" is not supported (silu)", what, act);
    /* block_out_channels */
    const cJSON *boc = st == LM_OK ? cJSON_GetObjectItemCaseSensitive(j, "block_out_channels") : NULL;
    if (st == LM_OK && (!boc || cJSON_IsNull(boc))) {
        c->nlevels = 1;
        c->block_out_channels[0] = 64;
    } else if (st == LM_OK) {
        int n = cJSON_IsArray(boc) ? cJSON_GetArraySize(boc) : 0;
        if (n < 1 || n > LM_VAE_MAX_LEVELS)
            st = lm_error_set(LM_ERR_FORMAT, "%s: block_out_channels: expected a list of 1 to %d "
                              "integers", what, LM_VAE_MAX_LEVELS);
        for (int i = 0; st == LM_OK && i < n; i++) {
            const cJSON *e = cJSON_GetArrayItem(boc, i);
            if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) ||
                e->valuedouble < 1 || e->valuedouble > big)
                st = lm_error_set(LM_ERR_FORMAT, "%s: block_out_channels[%d]: expected an integer "
                                  "in [1, %lld]", what, i, (long long)big);
            else c->block_out_channels[i] = (int64_t)e->valuedouble;
        }
        c->nlevels = n;
    }
    int ndown = 0, nup = 0;
    if (st == LM_OK) st = get_blocks(j, "down_block_types", what, "DownEncoderBlock2D", &ndown);
    if (st == LM_OK) st = get_blocks(j, "up_block_types", what, "UpDecoderBlock2D", &nup);
    if (st == LM_OK && (ndown != c->nlevels || nup != c->nlevels))
        st = lm_error_set(LM_ERR_FORMAT, "%s: %d down and %d up block types for %d "
                          "block_out_channels (they must agree)", what, ndown, nup, c->nlevels);
    /* sample_size: an integer or a list (diffusers then tiles by its first entry) */
    const cJSON *ss = st == LM_OK ? cJSON_GetObjectItemCaseSensitive(j, "sample_size") : NULL;
    if (st == LM_OK) {
        const cJSON *e = cJSON_IsArray(ss) ? cJSON_GetArrayItem(ss, 0) : ss;
        if (!e || cJSON_IsNull(e)) c->sample_size = 32;
        else if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) ||
                 e->valuedouble < 1 || e->valuedouble > (1 << 20))
            st = lm_error_set(LM_ERR_FORMAT, "%s: sample_size: expected an integer in [1, %d] "
                              "(or a list of them)", what, 1 << 20);
        else c->sample_size = (int64_t)e->valuedouble;
    }
    if (st == LM_OK) st = lm_dfs_num(j, "scaling_factor", what, false, 0.18215, &c->scaling_factor);
    if (st == LM_OK) st = lm_dfs_num(j, "shift_factor", what, false, NAN, &c->shift_factor);
    if (st == LM_OK) st = lm_dfs_bool(j, "use_quant_conv", what, false, true, &c->use_quant_conv);
    if (st == LM_OK) st = lm_dfs_bool(j, "use_post_quant_conv", what, false, true, &c->use_post_quant_conv);
    if (st == LM_OK)
        st = lm_dfs_bool(j, "mid_block_add_attention", what, false, true, &c->mid_block_add_attention);
    if (st == LM_OK) st = lm_dfs_bool(j, "force_upcast", what, false, true, &c->force_upcast);
    for (int i = 0; st == LM_OK && i < c->nlevels; i++)
        if (c->block_out_channels[i] % c->norm_num_groups)
            st = lm_error_set(LM_ERR_FORMAT, "%s: block_out_channels[%d] = %lld is not a multiple "
                              "of norm_num_groups %lld", what, i, (long long)c->block_out_channels[i],
                              (long long)c->norm_num_groups);
    if (st == LM_OK) c->downscale = (int64_t)1 << (c->nlevels - 1);
    return st;
}

/* ---- weights ---- */

/* The weight loader's state: the tensors and which were claimed. */
typedef struct vae_load {
    lm_tensor_set *set;
    bool *used;
    const char *file;
    lm_vae *m;
} vae_load;

static lm_status own(lm_vae *m, lm_array *a)
{
    if (m->nowned == m->capowned) {
        int cap = m->capowned ? 2 * m->capowned : 64;
        lm_array **g = realloc(m->owned, sizeof *g * (size_t)cap);
        if (!g) return lm_error_set(LM_ERR_NOMEM, "out of memory");
        m->owned = g;
        m->capowned = cap;
    }
    m->owned[m->nowned++] = a;
    return LM_OK;
}

/* Takes the weight named key (shape nd/shape), cast to the compute dtype,
 * evaluated on the device and kept.  A linear weight [C, C] may come as a
 * 1x1 conv [C, C, 1, 1] (older checkpoints saved the attention so). */
static lm_status take(vae_load *L, const char *key, int nd, const int64_t *shape, lm_array **out)
{
    *out = NULL;
    int i = lm_tensor_set_find(L->set, key);
    char want[96], got[96];
    lm_shape_str(want, sizeof want, nd, shape);
    if (i < 0)
        return lm_error_set(LM_ERR_FORMAT, "%s: missing weight %s %s", L->file, key, want);
    if (L->used[i])
        return lm_error_set(LM_ERR_FORMAT, "%s: weight %s used twice", L->file, key);
    lm_array *a = L->set->arrays[i];
    bool same = a->ndim == nd, conv1x1 = false;
    for (int d = 0; same && d < nd; d++) same = a->shape[d] == shape[d];
    if (!same && nd == 2 && a->ndim == 4 && a->shape[0] == shape[0] && a->shape[1] == shape[1] &&
        a->shape[2] == 1 && a->shape[3] == 1)
        same = conv1x1 = true;
    if (!same) {
        lm_shape_str(got, sizeof got, a->ndim, a->shape);
        return lm_error_set(LM_ERR_SHAPE, "%s: %s has shape %s, the config needs %s", L->file, key,
                            got, want);
    }
    if (!lm_dtype_is_float(a->dtype))
        return lm_error_set(LM_ERR_DTYPE, "%s: %s is %s, expected a float dtype", L->file, key,
                            lm_dtype_name(a->dtype));
    L->used[i] = true;
    lm_array *c = a->device == L->m->dev ? lm_array_retain(a) : lm_array_to(a, L->m->dev);
    if (c && conv1x1) {
        lm_array *r = lm_reshape(c, nd, shape);
        lm_array_release(c);
        c = r;
    }
    if (c && c->dtype != L->m->dt) {
        lm_array *r = lm_cast(c, L->m->dt);
        lm_array_release(c);
        c = r;
    }
    if (c && !lm_array_is_contiguous(c)) {
        lm_array *r = lm_contiguous(c);
        lm_array_release(c);
        c = r;
    }
    if (!c || lm_array_eval(c) != LM_OK || own(L->m, c) != LM_OK) {
        lm_array_release(c);
        return lm_error_prefix("%s: %s", L->file, key);
    }
    lm_array_keep(c);
    lm_array_release(c);   /* the keep holds it */
    *out = c;
    return LM_OK;
}

/* prefix.weight [O, I, k, k] and prefix.bias [O] */
static lm_status take_conv(vae_load *L, const char *prefix, int64_t o, int64_t i, int64_t k,
                           lm_array **w, lm_array **b)
{
    char key[192];
    int64_t ws[4] = {o, i, k, k};
    snprintf(key, sizeof key, "%s.weight", prefix);
    lm_status st = take(L, key, 4, ws, w);
    snprintf(key, sizeof key, "%s.bias", prefix);
    if (st == LM_OK) st = take(L, key, 1, &o, b);
    return st;
}

/* prefix.weight and prefix.bias of a norm or a linear layer over c */
static lm_status take_vec(vae_load *L, const char *prefix, int64_t c, bool square,
                          lm_array **w, lm_array **b)
{
    char key[192];
    int64_t ws[2] = {c, c};
    snprintf(key, sizeof key, "%s.weight", prefix);
    lm_status st = square ? take(L, key, 2, ws, w) : take(L, key, 1, &c, w);
    snprintf(key, sizeof key, "%s.bias", prefix);
    if (st == LM_OK) st = take(L, key, 1, &c, b);
    return st;
}

static lm_status take_resnet(vae_load *L, const char *p, int64_t cin, int64_t cout, vae_resnet *r)
{
    char k[192];
    r->cin = cin;
    r->cout = cout;
    snprintf(k, sizeof k, "%s.norm1", p);
    lm_status st = take_vec(L, k, cin, false, &r->n1_w, &r->n1_b);
    snprintf(k, sizeof k, "%s.conv1", p);
    if (st == LM_OK) st = take_conv(L, k, cout, cin, 3, &r->c1_w, &r->c1_b);
    snprintf(k, sizeof k, "%s.norm2", p);
    if (st == LM_OK) st = take_vec(L, k, cout, false, &r->n2_w, &r->n2_b);
    snprintf(k, sizeof k, "%s.conv2", p);
    if (st == LM_OK) st = take_conv(L, k, cout, cout, 3, &r->c2_w, &r->c2_b);
    snprintf(k, sizeof k, "%s.conv_shortcut", p);
    if (st == LM_OK && cin != cout) st = take_conv(L, k, cout, cin, 1, &r->sc_w, &r->sc_b);
    return st;
}

static lm_status take_mid(vae_load *L, const char *half, int64_t c, vae_mid *mid)
{
    char p[160];
    lm_status st = LM_OK;
    for (int r = 0; st == LM_OK && r < 2; r++) {
        snprintf(p, sizeof p, "%s.mid_block.resnets.%d", half, r);
        st = take_resnet(L, p, c, c, &mid->res[r]);
    }
    if (st != LM_OK || !L->m->cfg.mid_block_add_attention) return st;
    vae_attn *a = &mid->attn;
    struct { const char *name; bool square; lm_array **w, **b; } w[] = {
        {"group_norm", false, &a->gn_w, &a->gn_b}, {"to_q", true, &a->q_w, &a->q_b},
        {"to_k", true, &a->k_w, &a->k_b}, {"to_v", true, &a->v_w, &a->v_b},
        {"to_out.0", true, &a->o_w, &a->o_b},
    };
    for (size_t k = 0; st == LM_OK && k < sizeof w / sizeof *w; k++) {
        snprintf(p, sizeof p, "%s.mid_block.attentions.0.%s", half, w[k].name);
        st = take_vec(L, p, c, w[k].square, w[k].w, w[k].b);
    }
    return st;
}

static lm_status take_encoder(vae_load *L)
{
    lm_vae *m = L->m;
    const lm_vae_config *c = &m->cfg;
    vae_half *e = &m->enc;
    const int64_t *boc = c->block_out_channels;
    int64_t last = boc[c->nlevels - 1];
    char p[160];
    lm_status st = take_conv(L, "encoder.conv_in", boc[0], c->in_channels, 3, &e->in_w, &e->in_b);
    for (int l = 0; st == LM_OK && l < c->nlevels; l++) {
        vae_level *v = &e->level[l];
        int64_t cin = l ? boc[l - 1] : boc[0], cout = boc[l];
        v->nres = (int)c->layers_per_block;
        v->res = calloc((size_t)v->nres, sizeof *v->res);
        if (!v->res) return lm_error_set(LM_ERR_NOMEM, "out of memory");
        for (int r = 0; st == LM_OK && r < v->nres; r++) {
            snprintf(p, sizeof p, "encoder.down_blocks.%d.resnets.%d", l, r);
            st = take_resnet(L, p, r ? cout : cin, cout, &v->res[r]);
        }
        snprintf(p, sizeof p, "encoder.down_blocks.%d.downsamplers.0.conv", l);
        if (st == LM_OK && l < c->nlevels - 1) st = take_conv(L, p, cout, cout, 3, &v->samp_w, &v->samp_b);
    }
    if (st == LM_OK) st = take_mid(L, "encoder", last, &e->mid);
    if (st == LM_OK) st = take_vec(L, "encoder.conv_norm_out", last, false, &e->norm_w, &e->norm_b);
    if (st == LM_OK)
        st = take_conv(L, "encoder.conv_out", 2 * c->latent_channels, last, 3, &e->out_w, &e->out_b);
    if (st == LM_OK && c->use_quant_conv)
        st = take_conv(L, "quant_conv", 2 * c->latent_channels, 2 * c->latent_channels, 1,
                       &m->quant_w, &m->quant_b);
    return st;
}

static lm_status take_decoder(vae_load *L)
{
    lm_vae *m = L->m;
    const lm_vae_config *c = &m->cfg;
    vae_half *d = &m->dec;
    int n = c->nlevels;
    const int64_t *boc = c->block_out_channels;
    char p[160];
    lm_status st = LM_OK;
    if (c->use_post_quant_conv)
        st = take_conv(L, "post_quant_conv", c->latent_channels, c->latent_channels, 1, &m->post_w,
                       &m->post_b);
    if (st == LM_OK)
        st = take_conv(L, "decoder.conv_in", boc[n - 1], c->latent_channels, 3, &d->in_w, &d->in_b);
    if (st == LM_OK) st = take_mid(L, "decoder", boc[n - 1], &d->mid);
    for (int l = 0; st == LM_OK && l < n; l++) {
        vae_level *v = &d->level[l];
        int64_t cin = boc[n - 1 - (l ? l - 1 : 0)], cout = boc[n - 1 - l];
        v->nres = (int)c->layers_per_block + 1;
        v->res = calloc((size_t)v->nres, sizeof *v->res);
        if (!v->res) return lm_error_set(LM_ERR_NOMEM, "out of memory");
        for (int r = 0; st == LM_OK && r < v->nres; r++) {
            snprintf(p, sizeof p, "decoder.up_blocks.%d.resnets.%d", l, r);
            st = take_resnet(L, p, r ? cout : cin, cout, &v->res[r]);
        }
        snprintf(p, sizeof p, "decoder.up_blocks.%d.upsamplers.0.conv", l);
        if (st == LM_OK && l < n - 1) st = take_conv(L, p, cout, cout, 3, &v->samp_w, &v->samp_b);
    }
    if (st == LM_OK) st = take_vec(L, "decoder.conv_norm_out", boc[0], false, &d->norm_w, &d->norm_b);
    if (st == LM_OK)
        st = take_conv(L, "decoder.conv_out", c->out_channels, boc[0], 3, &d->out_w, &d->out_b);
    return st;
}

/* AutoencoderKLFlux2's bn.running_mean and bn.running_var; the counter
 * bn.num_batches_tracked (training state) is taken and ignored */
static lm_status take_bn(vae_load *L)
{
    const lm_vae_config *c = &L->m->cfg;
    int64_t n = c->patch_size[0] * c->patch_size[1] * c->latent_channels;
    lm_status st = take(L, "bn.running_mean", 1, &n, &L->m->bn_mean);
    if (st == LM_OK) st = take(L, "bn.running_var", 1, &n, &L->m->bn_var);
    int i = lm_tensor_set_find(L->set, "bn.num_batches_tracked");
    if (st == LM_OK && i >= 0) {
        if (L->set->arrays[i]->size != 1)
            return lm_error_set(LM_ERR_SHAPE, "%s: bn.num_batches_tracked has %lld elements, expected one",
                                L->file, (long long)L->set->arrays[i]->size);
        L->used[i] = true;
    }
    return st;
}

lm_status lm_vae_bn(const lm_vae *m, lm_array **mean, lm_array **var, double *eps)
{
    if (mean) *mean = NULL;
    if (var) *var = NULL;
    if (!m) return lm_error_set(LM_ERR_ARG, "vae: no model");
    if (!m->cfg.flux2 || !m->bn_mean || !m->bn_var)
        return lm_error_set(LM_ERR_ARG, "vae: no batch-norm statistics: only AutoencoderKLFlux2 has them "
                            "(this is an AutoencoderKL)");
    if (mean) *mean = lm_array_retain(m->bn_mean);
    if (var) *var = lm_array_retain(m->bn_var);
    if (eps) *eps = m->cfg.batch_norm_eps;
    return LM_OK;
}

void lm_vae_free(lm_vae *m)
{
    if (!m) return;
    for (int i = 0; i < m->nowned; i++) lm_array_unkeep(m->owned[i]);
    free(m->owned);
    for (int l = 0; l < LM_VAE_MAX_LEVELS; l++) {
        free(m->enc.level[l].res);
        free(m->dec.level[l].res);
    }
    free(m);
}

lm_vae *lm_vae_load_from(const cJSON *config, lm_tensor_set *weights, const char *file,
                         lm_dtype dt, lm_device *dev)
{
    lm_vae *m = NULL;
    vae_load L = {.set = weights, .file = file ? file : "vae"};
    lm_status st = LM_OK;
    if (!config || !weights) {
        lm_error_set(LM_ERR_ARG, "vae %s: no config or no weights", L.file);
        lm_tensor_set_free(weights);
        return NULL;
    }
    if (dt != LM_F32 && dt != LM_F16 && dt != LM_BF16 && dt != LM_F64)
        st = lm_error_set(LM_ERR_DTYPE, "vae %s: compute dtype %s (f32, f16, bf16, f64)", L.file,
                          lm_dtype_name(dt));
    if (st == LM_OK) st = lm_init();
    if (st == LM_OK && !dev) dev = lm_device_default();
    if (st == LM_OK && !(m = calloc(1, sizeof *m))) st = lm_error_set(LM_ERR_NOMEM, "out of memory");
    if (st == LM_OK) st = read_config(config, L.file, &m->cfg);
    if (st == LM_OK) {
        m->dt = dt;
        m->dev = dev;
        L.m = m;
        L.used = calloc((size_t)weights->count + 1, sizeof *L.used);
        if (!L.used) st = lm_error_set(LM_ERR_NOMEM, "out of memory");
    }
    if (st == LM_OK) st = take_encoder(&L);
    int dec0 = m ? m->nowned : 0;   /* the decoder's weights (and after) from here */
    if (st == LM_OK) st = take_decoder(&L);
    if (st == LM_OK && m->cfg.flux2) st = take_bn(&L);
    for (int i = 0; st == LM_OK && i < weights->count; i++) {
        if (L.used[i]) continue;
        char sh[96];
        lm_shape_str(sh, sizeof sh, weights->arrays[i]->ndim, weights->arrays[i]->shape);
        st = lm_error_set(LM_ERR_FORMAT, "%s: unexpected weight %s %s (config: %d levels, %lld "
                          "layers per block%s%s%s)", L.file, weights->names[i], sh, m->cfg.nlevels,
                          (long long)m->cfg.layers_per_block,
                          m->cfg.mid_block_add_attention ? "" : ", no mid-block attention",
                          m->cfg.use_quant_conv ? "" : ", no quant_conv",
                          m->cfg.use_post_quant_conv ? "" : ", no post_quant_conv");
    }
    free(L.used);
    lm_tensor_set_free(weights);
    /* the CPU's Winograd filters made now, not in the first decode; the
     * decoder's only (every generation decodes; the encoder's wait for an
     * init image rather than fill the prepared-weight cache) */
    if (st == LM_OK) st = lm_dfs_prime_convs(m->owned + dec0, m->nowned - dec0, m->dev);
    if (st != LM_OK) {
        if (strncmp(lm_error_message(), "vae", 3)) lm_error_prefix("vae");
        lm_vae_free(m);
        return NULL;
    }
    return m;
}

/* Reads dir/diffusion_pytorch_model[.variant].safetensors.  TO BE REPLACED
 * at integration by h-unet's lm_dfs_load_weights_stem(dir,
 * "diffusion_pytorch_model", variant, dev, out, file) of diffusers_config.c
 * (not on main when this was written; it also reads sharded indexes). */
static lm_status load_vae_weights(const char *dir, const char *variant, lm_device *dev,
                                  lm_tensor_set *out, char **file)
{
    memset(out, 0, sizeof *out);
    *file = NULL;
    const char *tries[2] = {variant ? variant : "", variant ? NULL : "fp16"};
    for (int t = 0; t < 2 && tries[t]; t++) {
        char name[128];
        const char *v = tries[t];
        if (strlen(v) > 32) return lm_error_set(LM_ERR_ARG, "variant %s: too long", v);
        snprintf(name, sizeof name, "diffusion_pytorch_model%s%s.safetensors", *v ? "." : "", v);
        char *p = lm_dfs_path(dir, name);
        if (!p) return LM_ERR_NOMEM;
        struct stat sb;
        if (stat(p, &sb) == 0) {
            /* any file of that name (a FIFO too: the loader refuses it) */
            lm_status st = lm_load_file_to(p, dev, out);
            if (st != LM_OK) {
                lm_tensor_set_free(out);
                free(p);
                return st;
            }
            *file = p;
            return LM_OK;
        }
        free(p);
    }
    return lm_error_set(LM_ERR_IO, "%s: no diffusion_pytorch_model%s%s.safetensors%s", dir,
                        variant && *variant ? "." : "", variant ? variant : "",
                        variant ? "" : " and no fp16 variant");
}

lm_vae *lm_vae_load(const char *dir, const char *variant, lm_dtype dt, lm_device *dev)
{
    if (lm_init() != LM_OK) return NULL;
    if (!dev) dev = lm_device_default();
    char *path = lm_dfs_path(dir, "config.json");
    if (!path) return NULL;
    cJSON *j = NULL;
    lm_tensor_set set = {0};
    char *file = NULL;
    lm_vae *m = NULL;
    lm_status st = lm_dfs_json(path, VAE_MAX_CONFIG, false, &j);
    if (st == LM_OK) {
        /* config errors name config.json; weight errors the weights file */
        lm_vae_config probe = {0};
        st = read_config(j, path, &probe);
    }
    if (st == LM_OK) st = load_vae_weights(dir, variant, dev, &set, &file);
    if (st == LM_OK) m = lm_vae_load_from(j, &set, file, dt, dev);
    if (st != LM_OK && strncmp(lm_error_message(), "vae", 3)) lm_error_prefix("vae %s", dir);
    lm_tensor_set_free(&set);
    cJSON_Delete(j);
    free(file);
    free(path);
    return m;
}

const lm_vae_config *lm_vae_get_config(const lm_vae *m) { return &m->cfg; }
lm_dtype lm_vae_dtype(const lm_vae *m) { return m->dt; }
lm_device *lm_vae_device(const lm_vae *m) { return m->dev; }
lm_vae_tiling lm_vae_get_tiling(const lm_vae *m) { return m->tiling; }

lm_status lm_vae_set_tiling(lm_vae *m, const lm_vae_tiling *t)
{
    lm_vae_tiling d = {LM_VAE_TILING_AUTO, 0, 0, 0};
    if (!t) t = &d;
    if (t->mode != LM_VAE_TILING_AUTO && t->mode != LM_VAE_TILING_ON && t->mode != LM_VAE_TILING_OFF)
        return lm_error_set(LM_ERR_ARG, "vae tiling: mode %d (auto, on or off)", (int)t->mode);
    if (t->tile < 0 || (t->tile > 0 && (t->tile % m->cfg.downscale || t->tile > (1 << 20))))
        return lm_error_set(LM_ERR_ARG, "vae tiling: tile %lld pixels: expected a positive "
                            "multiple of the downscale factor %lld", (long long)t->tile,
                            (long long)m->cfg.downscale);
    if (t->overlap != 0 && !(t->overlap > 0 && t->overlap < 1))
        return lm_error_set(LM_ERR_ARG, "vae tiling: overlap %g: expected a factor in (0, 1)",
                            t->overlap);
    m->tiling = *t;
    return LM_OK;
}

/* ---- the network ---- */

/* Releases *a and replaces it with r (which may be NULL). */
static lm_array *swap(lm_array **a, lm_array *r)
{
    lm_array_release(*a);
    *a = r;
    return r;
}

static lm_array *conv(lm_array *x, lm_array *w, lm_array *b, int64_t stride, const int64_t pad[4])
{
    const int64_t s[2] = {stride, stride}, dil[2] = {1, 1};
    return lm_conv2d(x, w, b, s, pad, dil, 1);
}

static const int64_t PAD0[4] = {0, 0, 0, 0}, PAD1[4] = {1, 1, 1, 1};

static lm_array *norm_silu(const lm_vae *m, lm_array *x, lm_array *w, lm_array *b)
{
    lm_array *h = lm_group_norm(x, m->cfg.norm_num_groups, w, b, VAE_EPS);
    return swap(&h, lm_unary(LM_OP_SILU, h));
}

static lm_array *resnet(const lm_vae *m, const vae_resnet *r, lm_array *x)
{
    lm_array *h = norm_silu(m, x, r->n1_w, r->n1_b);
    swap(&h, conv(h, r->c1_w, r->c1_b, 1, PAD1));
    swap(&h, norm_silu(m, h, r->n2_w, r->n2_b));
    swap(&h, conv(h, r->c2_w, r->c2_b, 1, PAD1));
    lm_array *s = r->sc_w ? conv(x, r->sc_w, r->sc_b, 1, PAD0) : lm_array_retain(x);
    lm_array *out = lm_binary(LM_OP_ADD, s, h);
    lm_array_release(s);
    lm_array_release(h);
    return out;
}

/* diffusers' Attention with one head over the H*W positions, residual added */
static lm_array *attention(const lm_vae *m, const vae_attn *a, lm_array *x)
{
    int64_t B = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3], L = H * W;
    int64_t bcl[3] = {B, C, L}, b1lc[4] = {B, 1, L, C}, blc[3] = {B, L, C}, bchw[4] = {B, C, H, W};
    lm_array *h = lm_group_norm(x, m->cfg.norm_num_groups, a->gn_w, a->gn_b, VAE_EPS);
    swap(&h, lm_reshape(h, 3, bcl));
    swap(&h, lm_transpose(h, 1, 2));
    lm_array *q = lm_linear(h, a->q_w, a->q_b), *k = lm_linear(h, a->k_w, a->k_b);
    lm_array *v = lm_linear(h, a->v_w, a->v_b);
    swap(&q, lm_reshape(q, 4, b1lc));
    swap(&k, lm_reshape(k, 4, b1lc));
    swap(&v, lm_reshape(v, 4, b1lc));
    swap(&h, lm_attention(q, k, v, NULL, false, 1.0 / sqrt((double)C)));
    lm_array_release(q);
    lm_array_release(k);
    lm_array_release(v);
    swap(&h, lm_reshape(h, 3, blc));
    swap(&h, lm_linear(h, a->o_w, a->o_b));
    swap(&h, lm_transpose(h, 1, 2));
    swap(&h, lm_contiguous(h));
    swap(&h, lm_reshape(h, 4, bchw));
    lm_array *out = lm_binary(LM_OP_ADD, h, x);
    lm_array_release(h);
    return out;
}

static lm_array *mid_block(const lm_vae *m, const vae_mid *mid, lm_array *x)
{
    lm_array *h = resnet(m, &mid->res[0], x);
    if (h && mid->attn.q_w) swap(&h, attention(m, &mid->attn, h));
    if (h) swap(&h, resnet(m, &mid->res[1], h));
    return h;
}

/* img [B, Cin, H, W] -> the moments [B, 2*latent, h, w] (lazy) */
static lm_array *encode_moments(const lm_vae *m, lm_array *x)
{
    const vae_half *e = &m->enc;
    /* Downsample2D's asymmetric padding: right and bottom by one */
    static const int64_t pad_down[4] = {0, 1, 0, 1};
    lm_array *h = conv(x, e->in_w, e->in_b, 1, PAD1);
    for (int l = 0; h && l < m->cfg.nlevels; l++) {
        const vae_level *v = &e->level[l];
        for (int r = 0; h && r < v->nres; r++) swap(&h, resnet(m, &v->res[r], h));
        if (h && v->samp_w) swap(&h, conv(h, v->samp_w, v->samp_b, 2, pad_down));
    }
    if (h) swap(&h, mid_block(m, &e->mid, h));
    if (h) swap(&h, norm_silu(m, h, e->norm_w, e->norm_b));
    if (h) swap(&h, conv(h, e->out_w, e->out_b, 1, PAD1));
    if (h && m->quant_w) swap(&h, conv(h, m->quant_w, m->quant_b, 1, PAD0));
    return h;
}

/* z [B, latent, h, w] -> image [B, Cout, H, W] (lazy) */
static lm_array *decode_lazy(const lm_vae *m, lm_array *z)
{
    const vae_half *d = &m->dec;
    const double two[2] = {2, 2};
    lm_array *h = m->post_w ? conv(z, m->post_w, m->post_b, 1, PAD0) : lm_array_retain(z);
    if (h) swap(&h, conv(h, d->in_w, d->in_b, 1, PAD1));
    if (h) swap(&h, mid_block(m, &d->mid, h));
    for (int l = 0; h && l < m->cfg.nlevels; l++) {
        const vae_level *v = &d->level[l];
        for (int r = 0; h && r < v->nres; r++) swap(&h, resnet(m, &v->res[r], h));
        if (h && v->samp_w) {
            swap(&h, lm_upsample(h, NULL, two, LM_UPSAMPLE_NEAREST, false));
            swap(&h, conv(h, v->samp_w, v->samp_b, 1, PAD1));
        }
    }
    if (h) swap(&h, norm_silu(m, h, d->norm_w, d->norm_b));
    if (h) swap(&h, conv(h, d->out_w, d->out_b, 1, PAD1));
    return h;
}

/* ---- tiling (diffusers' tiled_decode / _tiled_encode) ---- */

typedef lm_array *(*vae_tile_fn)(const lm_vae *m, lm_array *x);

/* The side of an encoded tile of side n: conv_in keeps it, each
 * Downsample2D makes (n + 1 - 3) / 2 + 1. */
static int64_t encoded_side(const lm_vae *m, int64_t n)
{
    for (int l = 0; l < m->cfg.nlevels - 1; l++) {
        if (n < 2) return 0;
        n = (n - 2) / 2 + 1;
    }
    return n;
}

/* The linear ramps of diffusers' blend_v / blend_h: (1 - k/e) on the
 * previous tile's last e rows (or columns) and k/e on the new tile's first
 * e, each rounded to f32 as torch multiplies an f32 tensor by a Python
 * float.  axis 2 = rows (blend_v), 3 = columns (blend_h).  prev holds the
 * last min(its side, blend) rows/columns of the previous tile, after its
 * own blending (diffusers blends in place, in this order). */
static lm_array *blend(lm_array *prev, lm_array *b, int axis, int64_t blend_extent, lm_device *dev)
{
    int64_t e = prev->shape[axis];
    if (b->shape[axis] < e) e = b->shape[axis];
    if (blend_extent < e) e = blend_extent;
    if (e <= 0) return lm_array_retain(b);
    float *wa = malloc(sizeof *wa * (size_t)e * 2);
    if (!wa) {
        lm_error_set(LM_ERR_NOMEM, "out of memory");
        return NULL;
    }
    float *wb = wa + e;
    for (int64_t k = 0; k < e; k++) {
        wa[k] = (float)(1.0 - (double)k / (double)e);
        wb[k] = (float)((double)k / (double)e);
    }
    int64_t ws[4] = {1, 1, 1, 1};
    ws[axis] = e;
    lm_array *A = lm_from_data(4, ws, LM_F32, wa, dev), *Bw = lm_from_data(4, ws, LM_F32, wb, dev);
    free(wa);
    lm_array *pa = lm_slice(prev, axis, prev->shape[axis] - e, prev->shape[axis], 1);
    lm_array *pb = lm_slice(b, axis, 0, e, 1);
    swap(&pa, lm_binary(LM_OP_MUL, pa, A));
    swap(&pb, lm_binary(LM_OP_MUL, pb, Bw));
    lm_array *top = lm_binary(LM_OP_ADD, pa, pb);
    lm_array_release(pa);
    lm_array_release(pb);
    lm_array_release(A);
    lm_array_release(Bw);
    if (top && top->dtype != b->dtype) swap(&top, lm_cast(top, b->dtype));
    if (!top || e == b->shape[axis]) return top;
    lm_array *rest = lm_slice(b, axis, e, b->shape[axis], 1);
    lm_array *parts[2] = {top, rest};
    lm_array *out = lm_concat(2, parts, axis);
    lm_array_release(top);
    lm_array_release(rest);
    return out;
}

/* A contiguous copy of the last n rows (axis 2) or columns (axis 3) of t,
 * evaluated, so the tile itself can go. */
static lm_array *tail_copy(lm_array *t, int axis, int64_t n)
{
    int64_t s = t->shape[axis];
    lm_array *v = lm_slice(t, axis, s > n ? s - n : 0, s, 1);
    lm_array *c = lm_unary(LM_OP_COPY, v);
    lm_array_release(v);
    if (c && lm_array_eval(c) != LM_OK) swap(&c, NULL);
    return c;
}

typedef struct vae_tiles {
    int64_t tile_in, step;        /* input tile side and stride */
    int64_t blend, limit;         /* output blend extent and row_limit */
    int64_t cout;                 /* output channels */
    int64_t (*side)(const lm_vae *m, int64_t n);   /* output side of an input side */
    vae_tile_fn fn;
    const char *what;
} vae_tiles;

/* diffusers' tiled loop: tiles of tile_in every step along rows then
 * columns, each blended with the tile above and the tile to its left (as
 * they stand after their own blending), cropped to limit and written into
 * the output.  One tile is evaluated at a time; what is kept between tiles
 * is the output, the last `blend` rows of the previous row of tiles and
 * the last `blend` columns of the tile to the left. */
static lm_array *tiled(const lm_vae *m, lm_array *x, const vae_tiles *T)
{
    int64_t B = x->shape[0], H = x->shape[2], W = x->shape[3];
    int64_t nr = (H + T->step - 1) / T->step, nc = (W + T->step - 1) / T->step;
    int64_t Ho = 0, Wo = 0;
    for (int64_t i = 0; i < nr; i++) {
        int64_t n = T->side(m, H - i * T->step < T->tile_in ? H - i * T->step : T->tile_in);
        Ho += n < T->limit ? n : T->limit;
    }
    for (int64_t j = 0; j < nc; j++) {
        int64_t n = T->side(m, W - j * T->step < T->tile_in ? W - j * T->step : T->tile_in);
        Wo += n < T->limit ? n : T->limit;
    }
    int64_t oshape[4] = {B, T->cout, Ho, Wo};
    lm_array *out = lm_zeros(4, oshape, m->dt, m->dev);
    lm_array **above = calloc((size_t)nc * 2, sizeof *above), **below = above + nc;
    lm_array *left = NULL;
    lm_status st = !out ? lm_error_status()
                 : !above ? lm_error_set(LM_ERR_NOMEM, "out of memory") : lm_array_eval(out);
    int64_t oy = 0;
    for (int64_t i = 0; st == LM_OK && i < nr; i++) {
        int64_t ox = 0, ch = 0;
        for (int64_t j = 0; st == LM_OK && j < nc; j++) {
            int64_t y0 = i * T->step, x0 = j * T->step;
            int64_t y1 = y0 + T->tile_in < H ? y0 + T->tile_in : H;
            int64_t x1 = x0 + T->tile_in < W ? x0 + T->tile_in : W;
            int64_t ho = T->side(m, y1 - y0), wo = T->side(m, x1 - x0);
            lm_array *t = lm_slice(x, 2, y0, y1, 1);
            swap(&t, lm_slice(t, 3, x0, x1, 1));
            swap(&t, T->fn(m, t));
            if (t && i > 0) swap(&t, blend(above[j], t, 2, T->blend, m->dev));
            if (t && j > 0) swap(&t, blend(left, t, 3, T->blend, m->dev));
            if (!t || lm_array_eval(t) != LM_OK) {
                st = lm_error_prefix("%s: tile at [%lld:%lld, %lld:%lld]", T->what, (long long)y0,
                                     (long long)y1, (long long)x0, (long long)x1);
                lm_array_release(t);
                break;
            }
            if (t->shape[2] != ho || t->shape[3] != wo) {
                st = lm_error_set(LM_ERR_STATE, "%s: tile at [%lld, %lld] came out %lldx%lld, "
                                  "expected %lldx%lld", T->what, (long long)y0, (long long)x0,
                                  (long long)t->shape[2], (long long)t->shape[3], (long long)ho,
                                  (long long)wo);
                lm_array_release(t);
                break;
            }
            swap(&below[j], tail_copy(t, 2, T->blend));
            swap(&left, tail_copy(t, 3, T->blend));
            ch = ho < T->limit ? ho : T->limit;
            int64_t cw = wo < T->limit ? wo : T->limit;
            lm_array *src = lm_slice(t, 2, 0, ch, 1);
            swap(&src, lm_slice(src, 3, 0, cw, 1));
            lm_array *dst = lm_slice(out, 2, oy, oy + ch, 1);
            swap(&dst, lm_slice(dst, 3, ox, ox + cw, 1));
            st = below[j] && left && src && dst ? lm_array_assign(dst, src) : lm_error_status();
            lm_array_release(src);
            lm_array_release(dst);
            lm_array_release(t);
            ox += cw;
        }
        for (int64_t j = 0; j < nc; j++) {
            swap(&above[j], below[j]);
            below[j] = NULL;
        }
        swap(&left, NULL);
        oy += ch;
    }
    for (int64_t j = 0; above && j < 2 * nc; j++) lm_array_release(above[j]);
    free(above);
    lm_array_release(left);
    if (st != LM_OK) swap(&out, NULL);
    return out;
}

static int64_t decoded_side(const lm_vae *m, int64_t n) { return n * m->cfg.downscale; }

size_t lm_vae_untiled_bytes(const lm_vae *m, int64_t b, int64_t h, int64_t w)
{
    double n = 5.0 * (double)m->cfg.block_out_channels[0] * (double)b * (double)h * (double)w *
               (double)lm_dtype_size(m->dt);
    return n >= (double)SIZE_MAX ? SIZE_MAX : (size_t)n;
}

/* Whether an input of b images of h x w pixels goes through the tiled
 * path: never when off; with a side larger than the tile when on (as
 * diffusers); in auto also only when the untiled pass would not fit the
 * budget, so every size that fits is diffusers' untiled result. */
static bool use_tiles(const lm_vae *m, int64_t b, int64_t h, int64_t w, int64_t tile_px)
{
    if (m->tiling.mode == LM_VAE_TILING_OFF || (h <= tile_px && w <= tile_px)) return false;
    if (m->tiling.mode == LM_VAE_TILING_ON) return true;
    size_t budget = m->tiling.budget;
    if (!budget) {
        lm_memstats s = lm_device_memory(m->dev);
        if (s.limit) budget = s.limit > s.active ? s.limit - s.active : 1;
        else if (s.device_total) budget = s.device_total / 4;
        else budget = (size_t)4 << 30;
    }
    return lm_vae_untiled_bytes(m, b, h, w) > budget;
}

/* The tile side in pixels and the overlap factor in force. */
static void tile_params(const lm_vae *m, int64_t *tile_px, double *overlap)
{
    *tile_px = m->tiling.tile > 0 ? m->tiling.tile : m->cfg.sample_size;
    *overlap = m->tiling.overlap > 0 ? m->tiling.overlap : 0.25;
}

/* Puts x on the model's device in its dtype, checking the channel count. */
static lm_array *vae_input(const lm_vae *m, lm_array *x, int64_t channels, const char *what)
{
    char sh[96];
    if (!x) return NULL;
    if (x->ndim != 4 || x->shape[1] != channels || x->shape[0] < 1 || x->shape[2] < 1 ||
        x->shape[3] < 1) {
        lm_shape_str(sh, sizeof sh, x->ndim, x->shape);
        lm_error_set(LM_ERR_SHAPE, "%s: input %s: expected [B, %lld, H, W]", what, sh,
                     (long long)channels);
        return NULL;
    }
    if (!lm_dtype_is_float(x->dtype)) {
        lm_error_set(LM_ERR_DTYPE, "%s: input is %s, expected a float dtype", what,
                     lm_dtype_name(x->dtype));
        return NULL;
    }
    lm_array *r = x->device == m->dev ? lm_array_retain(x) : lm_array_to(x, m->dev);
    if (r && r->dtype != m->dt) swap(&r, lm_cast(r, m->dt));
    return r;
}

lm_array *lm_vae_decode(lm_vae *m, lm_array *z)
{
    lm_array *x = vae_input(m, z, m->cfg.latent_channels, "vae decode");
    if (!x) return NULL;
    int64_t tile_px;
    double f;
    tile_params(m, &tile_px, &f);
    int64_t tile_lat = tile_px / m->cfg.downscale;
    lm_array *out;
    int64_t ds = m->cfg.downscale;
    if (use_tiles(m, x->shape[0], x->shape[2] * ds, x->shape[3] * ds, tile_lat * ds)) {
        vae_tiles T = {.tile_in = tile_lat, .step = (int64_t)((double)tile_lat * (1 - f)),
                       .blend = (int64_t)((double)tile_px * f), .cout = m->cfg.out_channels,
                       .side = decoded_side, .fn = decode_lazy, .what = "vae tiled decode"};
        T.limit = tile_px - T.blend;
        if (T.step < 1 || tile_lat < 1) {
            lm_error_set(LM_ERR_ARG, "vae tiled decode: tile %lld pixels is too small",
                         (long long)tile_px);
            out = NULL;
        } else if (lm_array_eval(x) != LM_OK) {
            out = NULL;
        } else {
            out = tiled(m, x, &T);
        }
    } else {
        out = decode_lazy(m, x);
    }
    lm_array_release(x);
    if (!out && strncmp(lm_error_message(), "vae", 3)) lm_error_prefix("vae decode");
    return out;
}

lm_status lm_vae_encode(lm_vae *m, lm_array *img, lm_array **mean, lm_array **logvar)
{
    *mean = *logvar = NULL;
    lm_array *x = vae_input(m, img, m->cfg.in_channels, "vae encode");
    if (!x) return lm_error_status();
    int64_t tile_px;
    double f;
    tile_params(m, &tile_px, &f);
    int64_t tile_lat = tile_px / m->cfg.downscale;
    lm_array *mom;
    if (use_tiles(m, x->shape[0], x->shape[2], x->shape[3], tile_px)) {
        vae_tiles T = {.tile_in = tile_px, .step = (int64_t)((double)tile_px * (1 - f)),
                       .blend = (int64_t)((double)tile_lat * f), .cout = 2 * m->cfg.latent_channels,
                       .side = encoded_side, .fn = encode_moments, .what = "vae tiled encode"};
        T.limit = tile_lat - T.blend;
        if (T.step < 1 || T.limit < 1) {
            lm_error_set(LM_ERR_ARG, "vae tiled encode: tile %lld pixels is too small",
                         (long long)tile_px);
            mom = NULL;
        } else if (lm_array_eval(x) != LM_OK) {
            mom = NULL;
        } else {
            mom = tiled(m, x, &T);
        }
    } else {
        mom = encode_moments(m, x);
    }
    lm_array_release(x);
    int64_t lc = m->cfg.latent_channels;
    *mean = lm_slice(mom, 1, 0, lc, 1);
    lm_array *lv = lm_slice(mom, 1, lc, 2 * lc, 1);
    *logvar = lm_clamp(lv, -30.0, 20.0);
    lm_array_release(lv);
    lm_array_release(mom);
    if (!*mean || !*logvar) {
        lm_status st = strncmp(lm_error_message(), "vae", 3) ? lm_error_prefix("vae encode")
                                                             : lm_error_status();
        swap(mean, NULL);
        swap(logvar, NULL);
        return st ? st : LM_ERR_STATE;
    }
    return LM_OK;
}
