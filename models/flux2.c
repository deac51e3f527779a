/* flux2.c - diffusers' Flux2Transformer2DModel as a Lumen graph (see
 * flux2.h).
 *
 * The network, as transformer_flux2.py computes it (guidance None, no KV
 * cache):
 *   temb = linear_2(silu(linear_1(sinusoid(1000 t))))   (timestep_embedder, no biases)
 *   mod_img, mod_txt = linear(silu(temb)) [B, 6D]       (shared by every double block)
 *   mod_single = linear(silu(temb)) [B, 3D]             (shared by every single block)
 *   img = x_embedder(x); txt = context_embedder(ctx)
 *   double block: per stream, n = layer_norm(h) * (1 + scale) + shift; q, k, v
 *     projections (to_* for the image, add_*_proj for the text), RMSNorm of q
 *     and k per head; joint attention over [txt, img] with RoPE; the outputs
 *     to_out.0 / to_add_out; h += gate * attn; then
 *     h += gate2 * linear_out(swiglu(linear_in(modulated layer_norm(h)))),
 *     the SwiGLU gating with the first half of linear_in's output.
 *   single block over h = [txt, img]: one projection to_qkv_mlp_proj gives
 *     q, k, v and the MLP's 2*mlp_hidden; h += gate * to_out([attn, swiglu(mlp)]).
 *   out = proj_out(layer_norm(img) * (1 + scale) + shift), (scale, shift) =
 *     norm_out.linear(silu(temb)) in that order.
 * The RoPE is Flux2PosEmbed's: per axis a of the ids, frequencies
 * 1 / theta^(2j / axes_dims[a]) in f64, pairs of adjacent features rotated
 * (repeat_interleave_real), the axes' features concatenated. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "diffusers_config.h"
#include "dit_common.h"
#include "flux2.h"
#include "lumen.h"

#define FX_MAX_CONFIG (1u << 20)

typedef struct fx_double {
    lm_array *q, *k, *v, *nq, *nk, *o;          /* the image stream */
    lm_array *aq, *ak, *av, *naq, *nak, *ao;    /* the text stream */
    lm_array *ff_in, *ff_out, *ffc_in, *ffc_out;
} fx_double;

typedef struct fx_single {
    lm_array *qkv_mlp, *nq, *nk, *out;
} fx_single;

struct lm_flux2 {
    lm_flux2_config cfg;
    lm_dtype dt;
    lm_device *dev;
    lm_array *x_emb, *ctx_emb, *t_lin1, *t_lin2, *mod_img, *mod_txt, *mod_single;
    lm_array *norm_out, *proj_out;
    fx_double *dbl;
    fx_single *sgl;
    lm_dit_slots slots;         /* every weight taken, by its diffusers key (models/lora.c) */
};

/* ---- config ---- */

static lm_status get_axes(const cJSON *o, const char *what, lm_flux2_config *c)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "axes_dims_rope");
    if (!v || cJSON_IsNull(v)) {   /* diffusers' default */
        c->naxes = 4;
        for (int a = 0; a < 4; a++) c->axes_dims_rope[a] = 32;
        return LM_OK;
    }
    int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
    if (n < 1 || n > LM_FLUX2_MAX_AXES)
        return lm_error_set(LM_ERR_FORMAT, "%s: axes_dims_rope: expected a list of 1 to %d even integers",
                            what, LM_FLUX2_MAX_AXES);
    for (int a = 0; a < n; a++) {
        const cJSON *e = cJSON_GetArrayItem(v, a);
        double d = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (d != floor(d) || d < 2 || d > 65536 || fmod(d, 2) != 0)
            return lm_error_set(LM_ERR_FORMAT, "%s: axes_dims_rope[%d]: expected an even integer in [2, 65536]",
                                what, a);
        c->axes_dims_rope[a] = (int64_t)d;
    }
    c->naxes = n;
    return LM_OK;
}

static lm_status parse_config(const cJSON *j, const char *what, lm_flux2_config *c)
{
    const int64_t big = 1 << 20;
    const char *cls = NULL;
    lm_status st = lm_dfs_str(j, "_class_name", what, false, "Flux2Transformer2DModel", &cls);
    if (st == LM_OK && strcmp(cls, "Flux2Transformer2DModel"))
        st = lm_error_set(LM_ERR_UNSUPPORTED, "%s: _class_name: %s is not supported "
                          "(Flux2Transformer2DModel)", what, cls);
    if (st == LM_OK) st = lm_dfs_int(j, "patch_size", what, false, 1, 1, 64, &c->patch_size);
    if (st == LM_OK) st = lm_dfs_int(j, "in_channels", what, false, 128, 1, big, &c->in_channels);
    if (st == LM_OK) st = lm_dfs_int(j, "out_channels", what, false, c->in_channels, 1, big, &c->out_channels);
    if (st == LM_OK) st = lm_dfs_int(j, "num_layers", what, false, 8, 0, 4096, &c->num_layers);
    if (st == LM_OK) st = lm_dfs_int(j, "num_single_layers", what, false, 48, 0, 4096, &c->num_single_layers);
    if (st == LM_OK) st = lm_dfs_int(j, "attention_head_dim", what, false, 128, 2, 65536, &c->attention_head_dim);
    if (st == LM_OK) st = lm_dfs_int(j, "num_attention_heads", what, false, 48, 1, 4096, &c->num_attention_heads);
    if (st == LM_OK) st = lm_dfs_int(j, "joint_attention_dim", what, false, 15360, 1, big, &c->joint_attention_dim);
    if (st == LM_OK)
        st = lm_dfs_int(j, "timestep_guidance_channels", what, false, 256, 2, big, &c->timestep_guidance_channels);
    if (st == LM_OK) st = lm_dfs_num(j, "mlp_ratio", what, false, 3.0, &c->mlp_ratio);
    if (st == LM_OK) st = lm_dfs_num(j, "rope_theta", what, false, 2000, &c->rope_theta);
    if (st == LM_OK) st = lm_dfs_eps(j, "eps", what, 1e-6, &c->eps);
    if (st == LM_OK) st = get_axes(j, what, c);
    bool guidance = true;
    if (st == LM_OK) st = lm_dfs_bool(j, "guidance_embeds", what, false, true, &guidance);
    if (st == LM_OK && guidance)
        st = lm_error_set(LM_ERR_UNSUPPORTED, "%s: guidance_embeds: true (FLUX.2 [dev]'s guidance "
                          "embedder) is not supported: only klein's configuration, guidance_embeds false",
                          what);
    if (st != LM_OK) return st;
    c->inner_dim = c->num_attention_heads * c->attention_head_dim;
    if (c->inner_dim > big)
        return lm_error_set(LM_ERR_FORMAT, "%s: num_attention_heads %lld x attention_head_dim %lld is too large",
                            what, (long long)c->num_attention_heads, (long long)c->attention_head_dim);
    if (!(c->mlp_ratio > 0 && c->mlp_ratio * (double)c->inner_dim <= (double)big))
        return lm_error_set(LM_ERR_FORMAT, "%s: mlp_ratio %g: expected a positive ratio", what, c->mlp_ratio);
    c->mlp_hidden = (int64_t)((double)c->inner_dim * c->mlp_ratio);
    if (c->mlp_hidden < 1)
        return lm_error_set(LM_ERR_FORMAT, "%s: mlp_ratio %g gives no MLP features", what, c->mlp_ratio);
    if (!(c->rope_theta > 0) || !(c->eps >= 0))
        return lm_error_set(LM_ERR_FORMAT, "%s: rope_theta %g and eps %g: expected a positive theta and eps >= 0",
                            what, c->rope_theta, c->eps);
    int64_t sum = 0;
    for (int a = 0; a < c->naxes; a++) sum += c->axes_dims_rope[a];
    if (sum != c->attention_head_dim)
        return lm_error_set(LM_ERR_FORMAT, "%s: axes_dims_rope add up to %lld, attention_head_dim is %lld "
                            "(they must agree)", what, (long long)sum, (long long)c->attention_head_dim);
    return LM_OK;
}

/* ---- weights ---- */

static lm_status take_double(lm_dit_weights *W, const lm_flux2_config *c, int64_t l, fx_double *b)
{
    int64_t D = c->inner_dim, Dh = c->attention_head_dim, M = c->mlp_hidden;
    const lm_dit_want w[] = {
        {"attn.to_q.weight", 2, {D, D}, &b->q, true}, {"attn.to_k.weight", 2, {D, D}, &b->k, true},
        {"attn.to_v.weight", 2, {D, D}, &b->v, true}, {"attn.norm_q.weight", 1, {Dh}, &b->nq, true},
        {"attn.norm_k.weight", 1, {Dh}, &b->nk, true}, {"attn.to_out.0.weight", 2, {D, D}, &b->o, true},
        {"attn.add_q_proj.weight", 2, {D, D}, &b->aq, true},
        {"attn.add_k_proj.weight", 2, {D, D}, &b->ak, true},
        {"attn.add_v_proj.weight", 2, {D, D}, &b->av, true},
        {"attn.norm_added_q.weight", 1, {Dh}, &b->naq, true},
        {"attn.norm_added_k.weight", 1, {Dh}, &b->nak, true},
        {"attn.to_add_out.weight", 2, {D, D}, &b->ao, true},
        {"ff.linear_in.weight", 2, {2 * M, D}, &b->ff_in, true},
        {"ff.linear_out.weight", 2, {D, M}, &b->ff_out, true},
        {"ff_context.linear_in.weight", 2, {2 * M, D}, &b->ffc_in, true},
        {"ff_context.linear_out.weight", 2, {D, M}, &b->ffc_out, true},
    };
    char p[64];
    snprintf(p, sizeof p, "transformer_blocks.%lld.", (long long)l);
    return lm_dit_take_list(W, p, w, sizeof w / sizeof *w);
}

static lm_status take_single(lm_dit_weights *W, const lm_flux2_config *c, int64_t l, fx_single *b)
{
    int64_t D = c->inner_dim, Dh = c->attention_head_dim, M = c->mlp_hidden;
    const lm_dit_want w[] = {
        {"attn.to_qkv_mlp_proj.weight", 2, {3 * D + 2 * M, D}, &b->qkv_mlp, true},
        {"attn.norm_q.weight", 1, {Dh}, &b->nq, true}, {"attn.norm_k.weight", 1, {Dh}, &b->nk, true},
        {"attn.to_out.weight", 2, {D, D + M}, &b->out, true},
    };
    char p[64];
    snprintf(p, sizeof p, "single_transformer_blocks.%lld.", (long long)l);
    return lm_dit_take_list(W, p, w, sizeof w / sizeof *w);
}

static lm_status take_model(lm_dit_weights *W, lm_flux2 *m)
{
    const lm_flux2_config *c = &m->cfg;
    int64_t D = c->inner_dim, P = c->patch_size;
    const lm_dit_want w[] = {
        {"x_embedder.weight", 2, {D, c->in_channels}, &m->x_emb, true},
        {"context_embedder.weight", 2, {D, c->joint_attention_dim}, &m->ctx_emb, true},
        {"time_guidance_embed.timestep_embedder.linear_1.weight", 2, {D, c->timestep_guidance_channels},
         &m->t_lin1, true},
        {"time_guidance_embed.timestep_embedder.linear_2.weight", 2, {D, D}, &m->t_lin2, true},
        {"double_stream_modulation_img.linear.weight", 2, {6 * D, D}, &m->mod_img, true},
        {"double_stream_modulation_txt.linear.weight", 2, {6 * D, D}, &m->mod_txt, true},
        {"single_stream_modulation.linear.weight", 2, {3 * D, D}, &m->mod_single, true},
        {"norm_out.linear.weight", 2, {2 * D, D}, &m->norm_out, true},
        {"proj_out.weight", 2, {P * P * c->out_channels, D}, &m->proj_out, true},
    };
    lm_status st = lm_dit_take_list(W, "", w, sizeof w / sizeof *w);
    for (int64_t l = 0; st == LM_OK && l < c->num_layers; l++) st = take_double(W, c, l, &m->dbl[l]);
    for (int64_t l = 0; st == LM_OK && l < c->num_single_layers; l++) st = take_single(W, c, l, &m->sgl[l]);
    return st;
}

static void drop_struct(void *s, size_t bytes)
{
    lm_array **w = s;
    for (size_t k = 0; k < bytes / sizeof(lm_array *); k++) lm_dit_drop(&w[k]);
}

void lm_flux2_free(lm_flux2 *m)
{
    if (!m) return;
    lm_array **w[] = {&m->x_emb, &m->ctx_emb, &m->t_lin1, &m->t_lin2, &m->mod_img, &m->mod_txt, &m->mod_single,
                      &m->norm_out, &m->proj_out};
    for (size_t k = 0; k < sizeof w / sizeof *w; k++) lm_dit_drop(w[k]);
    for (int64_t l = 0; m->dbl && l < m->cfg.num_layers; l++) drop_struct(&m->dbl[l], sizeof *m->dbl);
    for (int64_t l = 0; m->sgl && l < m->cfg.num_single_layers; l++) drop_struct(&m->sgl[l], sizeof *m->sgl);
    free(m->dbl);
    free(m->sgl);
    lm_dit_slots_free(&m->slots);
    free(m);
}

/* an lm_dit_build_fn: the model (an lm_flux2) or NULL; cfg_name names the
 * config in errors, file the weights */
static void *load_from(const cJSON *config, const char *cfg_name, lm_dit_weights *W, lm_dtype dt,
                       lm_device *dev)
{
    lm_flux2 *m = calloc(1, sizeof *m);
    lm_status st = m ? LM_OK : lm_error_set(LM_ERR_NOMEM, "out of memory");
    if (st == LM_OK) st = parse_config(config, cfg_name, &m->cfg);
    if (st == LM_OK) {
        m->dt = dt;
        m->dev = dev;
        m->dbl = calloc((size_t)m->cfg.num_layers + 1, sizeof *m->dbl);
        m->sgl = calloc((size_t)m->cfg.num_single_layers + 1, sizeof *m->sgl);
        if (!m->dbl || !m->sgl) st = lm_error_set(LM_ERR_NOMEM, "out of memory");
    }
    W->record = m ? &m->slots : NULL;
    if (st == LM_OK) st = take_model(W, m);
    W->record = NULL;
    if (st == LM_OK) {
        char ctx[128];
        snprintf(ctx, sizeof ctx, "config: %lld double and %lld single blocks, no guidance embedder, "
                 "no biases", (long long)m->cfg.num_layers, (long long)m->cfg.num_single_layers);
        st = lm_dit_weights_finish(W, ctx);
    }
    if (st != LM_OK) {
        lm_flux2_free(m);
        return NULL;
    }
    return m;
}

/* an lm_dit_check_fn: config errors name config.json before any weight is read */
static lm_status check_config(const cJSON *config, const char *cfg_name)
{
    lm_flux2_config probe = {0};
    return parse_config(config, cfg_name, &probe);
}

static const lm_dit_component FX_COMPONENT = {
    .what = "flux2 transformer", .stem = "diffusion_pytorch_model", .max_config = FX_MAX_CONFIG, .f64 = true,
    .check = check_config, .build = load_from,
};

lm_flux2 *lm_flux2_load(const char *dir, const char *variant, lm_dtype dt, lm_device *dev)
{
    return lm_dit_load_dir(&FX_COMPONENT, dir, variant, dt, dev);
}

lm_flux2 *lm_flux2_load_from(const cJSON *config, lm_tensor_set *weights, const char *file, lm_dtype dt,
                             lm_device *dev)
{
    const char *name = file ? file : "transformer";
    return lm_dit_load_parts(&FX_COMPONENT, config, name, weights, name, dt, dev);
}

const lm_flux2_config *lm_flux2_get_config(const lm_flux2 *m) { return &m->cfg; }
lm_dtype lm_flux2_dtype(const lm_flux2 *m) { return m->dt; }
lm_device *lm_flux2_device(const lm_flux2 *m) { return m->dev; }
struct lm_dit_slots *lm_flux2_weights(lm_flux2 *m) { return &m->slots; }

/* ---- forward ---- */

/* the forward's shared state: the model, sizes, the rotary angles */
typedef struct fx_fwd {
    const lm_flux2 *m;
    int64_t B, S, L, N;   /* batch, image tokens, text tokens, N = L + S */
    lm_array *ang;        /* [N, head_dim/2] f64, text tokens first */
    lm_array *temb_act;   /* silu(temb) [B, D] */
} fx_fwd;

/* Flux2PosEmbed's angles for the ids of N tokens (text first): [N, head_dim/2]
 * f64, axis a's pairs after those of the axes before it. */
static lm_array *rope_angles(const lm_flux2 *m, const int32_t *txt_ids, int64_t L, const int32_t *img_ids,
                             int64_t S)
{
    const lm_flux2_config *c = &m->cfg;
    int64_t half = c->attention_head_dim / 2, N = L + S, na = c->naxes;
    double *a = malloc(sizeof *a * (size_t)(N * half + 1));
    if (!a) {
        lm_error_set(LM_ERR_NOMEM, "flux2 transformer: out of host memory for %lld rotary angles",
                     (long long)(N * half));
        return NULL;
    }
    for (int64_t n = 0; n < N; n++) {
        const int32_t *id = n < L ? txt_ids + n * na : img_ids + (n - L) * na;
        double *row = a + n * half;
        for (int ax = 0; ax < na; ax++) {
            int64_t dims = c->axes_dims_rope[ax];
            double pos = (double)(float)id[ax];   /* ids.float(), as diffusers */
            for (int64_t j = 0; j < dims / 2; j++)
                *row++ = pos * (1.0 / pow(c->rope_theta, (double)(2 * j) / (double)dims));
        }
    }
    int64_t shape[2] = {N, half};
    lm_array *t = lm_from_data(2, shape, LM_F64, a, m->dev);
    free(a);
    return t;
}

/* the i-th of n chunks of the last axis of mod [B, n*D], as [B, 1, D] */
static lm_array *chunk(const fx_fwd *f, lm_array *mod, int i)
{
    int64_t D = f->m->cfg.inner_dim, s[3] = {f->B, 1, mod ? mod->shape[1] : 0};
    lm_array *r = lm_reshape(mod, 3, s);
    return lm_dit_swap(&r, lm_slice(r, 2, i * D, (i + 1) * D, 1));
}

/* layer_norm(x) (no affine) * (1 + scale) + shift */
static lm_array *modulate(const fx_fwd *f, lm_array *x, lm_array *shift, lm_array *scale)
{
    lm_array *n = lm_layer_norm(x, 1, NULL, NULL, f->m->cfg.eps);
    lm_array *s1 = lm_binary_scalar(LM_OP_ADD, scale, 1, false);
    lm_dit_swap(&n, lm_binary(LM_OP_MUL, s1, n));
    lm_array_release(s1);
    return lm_dit_swap(&n, lm_binary(LM_OP_ADD, n, shift));
}

/* x + gate * y; an f16 result clipped to f16's range as diffusers does */
static lm_array *gated_add(const lm_flux2 *m, lm_array *x, lm_array *gate, lm_array *y)
{
    lm_array *g = lm_binary(LM_OP_MUL, gate, y);
    lm_array *r = lm_binary(LM_OP_ADD, x, g);
    lm_array_release(g);
    if (r && m->dt == LM_F16) lm_dit_swap(&r, lm_clamp(r, -65504, 65504));
    return r;
}

/* columns [from, from + D) of x [B, n, *] as heads [B, n, H, Dh], RMS-normed by w */
static lm_array *heads(const fx_fwd *f, lm_array *x, int64_t from, lm_array *w)
{
    const lm_flux2_config *c = &f->m->cfg;
    lm_array *h = lm_slice(x, 2, from, from + c->inner_dim, 1);
    lm_dit_swap(&h, lm_dit_split_heads(h, c->num_attention_heads, c->attention_head_dim));
    return w ? lm_dit_swap(&h, lm_dit_rms_norm(h, w, c->eps)) : h;
}

/* attention over the N tokens: q, k, v [B, N, H, Dh] (q and k normed),
 * RoPE on q and k -> [B, N, D] */
static lm_array *attend(const fx_fwd *f, lm_array *q, lm_array *k, lm_array *v)
{
    int64_t Dh = f->m->cfg.attention_head_dim;
    lm_array *qt = lm_transpose(q, 1, 2), *kt = lm_transpose(k, 1, 2), *vt = lm_transpose(v, 1, 2);
    lm_dit_swap(&qt, lm_dit_rope(qt, f->ang, LM_DIT_BHLD, true));
    lm_dit_swap(&kt, lm_dit_rope(kt, f->ang, LM_DIT_BHLD, true));
    lm_array *a = qt && kt && vt ? lm_attention(qt, kt, vt, NULL, false, 1.0 / sqrt((double)Dh)) : NULL;
    lm_array_release(qt);
    lm_array_release(kt);
    lm_array_release(vt);
    return lm_dit_swap(&a, lm_dit_merge_heads(a));
}

/* a linear layer, with the run-time terms models/lora.c set on w */
static lm_array *lin(const lm_flux2 *m, lm_array *x, lm_array *w, lm_array *b)
{
    return lm_dit_linear_in(&m->slots, x, w, b);
}

/* linear_out(swiglu(linear_in(x))) */
static lm_array *feed_forward(const lm_flux2 *m, lm_array *x, lm_array *w_in, lm_array *w_out)
{
    lm_array *h = lin(m, x, w_in, NULL);
    lm_dit_swap(&h, lm_swiglu(h, NULL));
    return lm_dit_swap(&h, lin(m, h, w_out, NULL));
}

static void release_n(lm_array **v, int n)
{
    for (int i = 0; i < n; i++) lm_array_release(v[i]);
}

/* One double-stream block: *img [B, S, D] and *txt [B, L, D] replaced. */
static void double_block(const fx_fwd *f, const fx_double *b, lm_array *const mi[6], lm_array *const mt[6],
                         lm_array **img, lm_array **txt)
{
    lm_array *ni = modulate(f, *img, mi[0], mi[1]), *nt = modulate(f, *txt, mt[0], mt[1]);
    lm_array *p[6] = {lin(f->m, ni, b->q, NULL), lin(f->m, ni, b->k, NULL),
                      lin(f->m, ni, b->v, NULL), lin(f->m, nt, b->aq, NULL),
                      lin(f->m, nt, b->ak, NULL), lin(f->m, nt, b->av, NULL)};
    lm_array_release(ni);
    lm_array_release(nt);
    lm_array *w[6] = {b->nq, b->nk, NULL, b->naq, b->nak, NULL}, *h[6];
    for (int i = 0; i < 6; i++) h[i] = heads(f, p[i], 0, w[i]);
    release_n(p, 6);
    lm_array *q2[2] = {h[3], h[0]}, *k2[2] = {h[4], h[1]}, *v2[2] = {h[5], h[2]};
    lm_array *q = lm_concat(2, q2, 1), *k = lm_concat(2, k2, 1), *v = lm_concat(2, v2, 1);
    release_n(h, 6);
    lm_array *a = attend(f, q, k, v);
    lm_array_release(q);
    lm_array_release(k);
    lm_array_release(v);
    lm_array *at = lm_slice(a, 1, 0, f->L, 1), *ai = lm_slice(a, 1, f->L, f->N, 1);
    lm_array_release(a);
    lm_dit_swap(&ai, lin(f->m, ai, b->o, NULL));
    lm_dit_swap(&at, lin(f->m, at, b->ao, NULL));
    lm_dit_swap(img, gated_add(f->m, *img, mi[2], ai));
    lm_dit_swap(txt, gated_add(f->m, *txt, mt[2], at));
    lm_array_release(ai);
    lm_array_release(at);
    lm_array *fi = modulate(f, *img, mi[3], mi[4]);
    lm_dit_swap(&fi, feed_forward(f->m, fi, b->ff_in, b->ff_out));
    lm_dit_swap(img, gated_add(f->m, *img, mi[5], fi));
    lm_array_release(fi);
    lm_array *ft = modulate(f, *txt, mt[3], mt[4]);
    lm_dit_swap(&ft, feed_forward(f->m, ft, b->ffc_in, b->ffc_out));
    lm_dit_swap(txt, gated_add(f->m, *txt, mt[5], ft));
    lm_array_release(ft);
}

/* One single-stream block over *x [B, N, D] (text first), replaced. */
static void single_block(const fx_fwd *f, const fx_single *b, lm_array *const ms[3], lm_array **x)
{
    const lm_flux2_config *c = &f->m->cfg;
    int64_t D = c->inner_dim, M = c->mlp_hidden;
    lm_array *n = modulate(f, *x, ms[0], ms[1]);
    lm_array *p = lin(f->m, n, b->qkv_mlp, NULL);
    lm_array_release(n);
    lm_array *q = heads(f, p, 0, b->nq), *k = heads(f, p, D, b->nk), *v = heads(f, p, 2 * D, NULL);
    lm_array *mlp = lm_slice(p, 2, 3 * D, 3 * D + 2 * M, 1);
    lm_array_release(p);
    lm_dit_swap(&mlp, lm_swiglu(mlp, NULL));
    lm_array *a = attend(f, q, k, v);
    lm_array_release(q);
    lm_array_release(k);
    lm_array_release(v);
    lm_array *cat[2] = {a, mlp};
    lm_array *h = lm_concat(2, cat, 2);
    lm_array_release(a);
    lm_array_release(mlp);
    lm_dit_swap(&h, lin(f->m, h, b->out, NULL));
    lm_dit_swap(x, gated_add(f->m, *x, ms[2], h));
    lm_array_release(h);
}

static lm_status check_inputs(const lm_flux2 *m, lm_array *x, lm_array *ctx, lm_array *t, const int32_t *img_ids,
                              int64_t S, const int32_t *txt_ids, int64_t L)
{
    const lm_flux2_config *c = &m->cfg;
    if (!x || !ctx || !t || !img_ids || !txt_ids)
        return lm_error_set(LM_ERR_ARG, "flux2 transformer: x, ctx, t, img_ids and txt_ids are required");
    char a[96], b[96], d[96];
    lm_shape_str(a, sizeof a, x->ndim, x->shape);
    lm_shape_str(b, sizeof b, ctx->ndim, ctx->shape);
    lm_shape_str(d, sizeof d, t->ndim, t->shape);
    if (x->ndim != 3 || x->shape[0] < 1 || x->shape[1] != S || S < 1 || x->shape[2] != c->in_channels)
        return lm_error_set(LM_ERR_SHAPE, "flux2 transformer: x %s: expected [B, %lld, %lld] (S = %lld img_ids)",
                            a, (long long)S, (long long)c->in_channels, (long long)S);
    int64_t B = x->shape[0];
    if (ctx->ndim != 3 || ctx->shape[0] != B || ctx->shape[1] != L || L < 1 ||
        ctx->shape[2] != c->joint_attention_dim)
        return lm_error_set(LM_ERR_SHAPE, "flux2 transformer: ctx %s: expected [%lld, %lld, %lld] "
                            "(L = %lld txt_ids)", b, (long long)B, (long long)L,
                            (long long)c->joint_attention_dim, (long long)L);
    if (!(t->ndim == 0 || (t->ndim == 1 && (t->shape[0] == B || t->shape[0] == 1))))
        return lm_error_set(LM_ERR_SHAPE, "flux2 transformer: t %s: expected [%lld] (or one timestep) for x %s",
                            d, (long long)B, a);
    if (!lm_dtype_is_float(x->dtype) || !lm_dtype_is_float(ctx->dtype) || !lm_dtype_is_float(t->dtype))
        return lm_error_set(LM_ERR_DTYPE, "flux2 transformer: x %s, ctx %s and t %s must be float",
                            lm_dtype_name(x->dtype), lm_dtype_name(ctx->dtype), lm_dtype_name(t->dtype));
    return LM_OK;
}

lm_array *lm_flux2_forward(lm_flux2 *m, lm_array *x, lm_array *ctx, lm_array *t, const int32_t *img_ids,
                           int64_t S, const int32_t *txt_ids, int64_t L)
{
    if (!m) {
        lm_error_set(LM_ERR_ARG, "flux2 transformer: no model");
        return NULL;
    }
    if (check_inputs(m, x, ctx, t, img_ids, S, txt_ids, L) != LM_OK) return NULL;
    const lm_flux2_config *c = &m->cfg;
    fx_fwd f = {.m = m, .B = x->shape[0], .S = S, .L = L, .N = S + L};
    /* timestep.to(dtype) * 1000, broadcast to the batch */
    int64_t b1 = 1;
    lm_array *tt = lm_cast(t, m->dt);
    if (tt && tt->ndim == 0) lm_dit_swap(&tt, lm_reshape(tt, 1, &b1));
    if (tt && tt->shape[0] != f.B) lm_dit_swap(&tt, lm_broadcast_to(tt, 1, &f.B));
    lm_dit_swap(&tt, lm_binary_scalar(LM_OP_MUL, tt, 1000, false));
    lm_array *temb = tt ? lm_dit_sinusoid(tt, m->cfg.timestep_guidance_channels, m->dev) : NULL;
    if (temb) lm_dit_swap(&temb, lm_cast(temb, m->dt));
    lm_array_release(tt);
    lm_dit_swap(&temb, lin(m, temb, m->t_lin1, NULL));
    lm_dit_swap(&temb, lm_unary(LM_OP_SILU, temb));
    lm_dit_swap(&temb, lin(m, temb, m->t_lin2, NULL));
    f.temb_act = lm_unary(LM_OP_SILU, temb);
    lm_array_release(temb);
    lm_array *mod_i = lin(m, f.temb_act, m->mod_img, NULL);
    lm_array *mod_t = lin(m, f.temb_act, m->mod_txt, NULL);
    lm_array *mod_s = lin(m, f.temb_act, m->mod_single, NULL);
    lm_array *mi[6], *mt[6], *ms[3];
    for (int i = 0; i < 6; i++) {
        mi[i] = chunk(&f, mod_i, i);
        mt[i] = chunk(&f, mod_t, i);
    }
    for (int i = 0; i < 3; i++) ms[i] = chunk(&f, mod_s, i);
    lm_array_release(mod_i);
    lm_array_release(mod_t);
    lm_array_release(mod_s);
    f.ang = rope_angles(m, txt_ids, L, img_ids, S);
    lm_array *img = lm_cast(x, m->dt), *txt = lm_cast(ctx, m->dt);
    lm_dit_swap(&img, lin(m, img, m->x_emb, NULL));
    lm_dit_swap(&txt, lin(m, txt, m->ctx_emb, NULL));
    bool ok = f.temb_act && f.ang && img && txt;
    for (int i = 0; i < 6; i++) ok = ok && mi[i] && mt[i];
    for (int i = 0; i < 3; i++) ok = ok && ms[i];
    /* a failure so far keeps its message: nothing more is built */
    for (int64_t l = 0; ok && l < c->num_layers; l++) {
        double_block(&f, &m->dbl[l], mi, mt, &img, &txt);
        ok = img && txt;
    }
    lm_array *cat[2] = {txt, img};
    lm_array *h = ok ? lm_concat(2, cat, 1) : NULL;
    for (int64_t l = 0; h && l < c->num_single_layers; l++) single_block(&f, &m->sgl[l], ms, &h);
    lm_dit_swap(&h, lm_slice(h, 1, L, f.N, 1));
    /* norm_out: (scale, shift) in that order */
    lm_array *emb = h ? lin(m, f.temb_act, m->norm_out, NULL) : NULL;
    lm_array *scale = emb ? chunk(&f, emb, 0) : NULL, *shift = emb ? chunk(&f, emb, 1) : NULL;
    lm_dit_swap(&h, emb && scale && shift ? modulate(&f, h, shift, scale) : NULL);
    lm_dit_swap(&h, lin(m, h, m->proj_out, NULL));
    release_n(mi, 6);
    release_n(mt, 6);
    release_n(ms, 3);
    lm_array_release(emb);
    lm_array_release(scale);
    lm_array_release(shift);
    lm_array_release(img);
    lm_array_release(txt);
    lm_array_release(f.ang);
    lm_array_release(f.temb_act);
    if (!h) lm_error_prefix("flux2 transformer");
    return h;
}
