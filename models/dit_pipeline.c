/* dit_pipeline.c - Z-Image and FLUX.2-klein generation (see dit_pipeline.h). */
#include "dit_pipeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "models/diffusers_config.h"
#include "models/flowmatch.h"
#include "models/flux2.h"
#include "models/qwen3.h"
#include "models/qwen_tokenizer.h"
#include "models/sampler.h"
#include "models/vae.h"
#include "models/zimage.h"
#include "ops.h"

#define CONFIG_MAX (1u << 20)

struct lm_dit_pipe {
    const lm_sd_family_row *row;
    lm_dtype dt;
    lm_device *dev;
    lm_qwen_tokenizer *tok;
    lm_qwen3 *te;
    lm_zimage *zimage;
    lm_flux2 *flux2;
    lm_flowmatch_config sched;
};

lm_qwen_tokenizer *lm_dit_pipe_tokenizer(lm_dit_pipe *d) { return d->tok; }
lm_qwen3 *lm_dit_pipe_text_encoder(lm_dit_pipe *d) { return d->te; }
lm_zimage *lm_dit_pipe_zimage(lm_dit_pipe *d) { return d->zimage; }
lm_flux2 *lm_dit_pipe_flux2(lm_dit_pipe *d) { return d->flux2; }

void lm_dit_pipe_free(lm_dit_pipe *d)
{
    if (!d) return;
    lm_qwen_tokenizer_free(d->tok);
    lm_qwen3_free(d->te);
    lm_zimage_free(d->zimage);
    lm_flux2_free(d->flux2);
    free(d);
}

/* ---- temporaries: every intermediate of a formula, released together ---- */

#define TMP_ARRAYS 64
typedef struct tmp { lm_array *a[TMP_ARRAYS]; int n; bool full; } tmp;

static lm_array *T(tmp *t, lm_array *a)
{
    if (!a) return NULL;
    if (t->n == TMP_ARRAYS) {
        t->full = true;
        lm_array_release(a);
        lm_error_set(LM_ERR_NOMEM, "generate: too many temporaries");
        return NULL;
    }
    return t->a[t->n++] = a;
}

static void tmp_free(tmp *t)
{
    for (int i = 0; i < t->n; i++) lm_array_release(t->a[i]);
    t->n = 0;
}

/* a kept result: a new reference to a, whatever tmp frees */
static lm_array *keep(lm_array *a) { return a ? lm_array_retain(a) : NULL; }

/* ---- loading ---- */

lm_dit_pipe *lm_dit_pipe_load(const lm_sd_family_row *row, const char *dir, const char *mi,
                    const char *variant, lm_dtype dt, lm_device *dev)
{
    lm_dit_pipe *d = calloc(1, sizeof *d);
    char *path = NULL;
    if (!d) {
        lm_error_set(LM_ERR_NOMEM, "%s: out of memory", mi);
        return NULL;
    }
    d->row = row;
    d->dt = dt;
    d->dev = dev;
    const lm_sd_encoder *E = &row->encoders[0];
    if (row->n_encoders != 1 || E->kind != LM_SD_TE_QWEN3) {
        lm_error_set(LM_ERR_UNSUPPORTED, "%s: %s: only one Qwen3 text encoder is read", mi, row->title);
        goto fail;
    }
    if (!(path = lm_dfs_path(dir, E->tokenizer)) || !(d->tok = lm_qwen_tokenizer_load(path))) goto fail;
    free(path);
    if (!(path = lm_dfs_path(dir, E->dir)) || !(d->te = lm_qwen3_load(path, variant, dt, dev))) goto fail;
    free(path);
    if (!(path = lm_dfs_path(dir, row->denoiser_dir))) goto fail;
    if (row->denoiser == LM_SD_NET_ZIMAGE) d->zimage = lm_zimage_load(path, variant, dt, dev);
    else if (row->denoiser == LM_SD_NET_FLUX2) d->flux2 = lm_flux2_load(path, variant, dt, dev);
    else lm_error_set(LM_ERR_UNSUPPORTED, "%s: %s: its transformer is not in this build", mi, row->title);
    if (!d->zimage && !d->flux2) goto fail;
    free(path);
    if (!(path = lm_dfs_path(dir, "scheduler"))) goto fail;
    if (lm_flowmatch_config_load(path, &d->sched) != LM_OK) goto fail;
    free(path);
    return d;
fail:
    free(path);
    lm_dit_pipe_free(d);
    return NULL;
}

/* ---- the prompt ---- */

/* One prompt's Qwen3 hidden states: the chat-formatted text padded to L */
static lm_status encode_one(lm_dit_pipe *d, const char *prompt, int L, int nl, const int *layers,
                            lm_array **out)
{
    const lm_sd_encoder *E = &d->row->encoders[0];
    if (nl <= 0 || !layers) {
        nl = E->n_layers;
        layers = E->layers;
    }
    *out = NULL;
    char *chat = lm_qwen_tokenizer_chat(d->tok, prompt ? prompt : "", E->enable_thinking);
    if (!chat) return lm_error_status();
    int32_t *ids = malloc(sizeof *ids * (size_t)L), *mask = malloc(sizeof *mask * (size_t)L);
    int64_t real = 0;
    lm_status st = ids && mask ? lm_qwen_tokenizer_encode_padded(d->tok, chat, L, ids, mask, &real)
                               : lm_error_set(LM_ERR_NOMEM, "encode_prompt: out of memory");
    free(chat);
    lm_array *h[LM_SD_MAX_LAYERS] = {NULL};
    if (st == LM_OK) st = lm_qwen3_forward(d->te, ids, mask, 1, L, nl, layers, h);
    free(ids);
    if (st != LM_OK) {
        free(mask);
        return st;
    }
    tmp t = {0};
    lm_array *r = NULL;
    /* Z-Image: prompt_embeds[i][mask[i]], [L_i, D]; FLUX.2-klein: the
     * layers stacked along the features, [1, L, n*D] */
    lm_array *e = E->masked_rows ? T(&t, lm_qwen3_masked_rows(h[0], mask, L))
                                 : T(&t, lm_qwen3_stack_layers(nl, h));
    r = e ? keep(T(&t, lm_cast(e, d->dt))) : NULL;
    st = r ? LM_OK : lm_error_status();
    tmp_free(&t);
    free(mask);
    for (int k = 0; k < nl; k++) lm_array_release(h[k]);
    *out = r;
    return st;
}

lm_status lm_dit_pipe_encode_prompt(lm_dit_pipe *d, int n, const char *const *prompts, int max_length,
                                    int n_layers, const int *layers, lm_array **out)
{
    int L = max_length > 0 ? max_length : d->row->encoders[0].max_length;
    for (int i = 0; i < n; i++) out[i] = NULL;
    for (int i = 0; i < n; i++)
        if (encode_one(d, prompts[i], L, n_layers, layers, &out[i]) != LM_OK) {
            for (int j = 0; j < i; j++) {
                lm_array_release(out[j]);
                out[j] = NULL;
            }
            return lm_error_status();
        }
    return LM_OK;
}

/* ---- the schedule ---- */

lm_status lm_dit_pipe_schedule(lm_dit_pipe *d, int steps, int64_t h, int64_t w, lm_flowmatch_schedule *out)
{
    const lm_flowmatch_config *c = &d->sched;
    double seq = (double)((h / 2) * (w / 2));    /* image tokens: 2x2 patches of the VAE's latents */
    float *sig = malloc(sizeof *sig * (size_t)steps);
    if (!sig) return lm_error_set(LM_ERR_NOMEM, "generate: out of memory");
    double mu;
    if (d->row->mu == LM_SD_MU_EMPIRICAL) {
        lm_flowmatch_klein_sigmas(steps, sig);
        mu = lm_flowmatch_klein_mu(seq, steps);
    } else {
        lm_flowmatch_zimage_sigmas(steps, sig);
        mu = lm_flowmatch_zimage_mu(seq, (double)c->base_image_seq_len, (double)c->max_image_seq_len,
                                    c->base_shift, c->max_shift);
    }
    lm_status st = lm_flowmatch_set_timesteps(c, steps, sig, true, mu, out);
    free(sig);
    return st;
}

/* ---- decoding ---- */

lm_array *lm_dit_pipe_decode(lm_dit_pipe *d, lm_vae *vae, lm_dtype vae_dt, const lm_sd_family_row *row,
                        double scaling, double shift, lm_array *latents)
{
    (void)d;
    tmp t = {0};
    lm_array *z = T(&t, lm_cast(latents, LM_F32));
    if (z && row->packed) {
        /* latents * sqrt(running_var + eps) + running_mean, per packed
         * channel, then the 2x2 patches back to the VAE's latents */
        lm_array *mean = NULL, *var = NULL;
        double eps = 0;
        if (lm_vae_bn(vae, &mean, &var, &eps) != LM_OK) goto fail;
        z = T(&t, lm_flux2_bn_denormalize(z, mean, var, eps));
        z = z ? T(&t, lm_flux2_unpatchify(z)) : NULL;
    } else if (z) {
        z = T(&t, lm_binary_scalar(LM_OP_DIV, z, scaling, false));
        if (z && isfinite(shift)) z = T(&t, lm_binary_scalar(LM_OP_ADD, z, shift, false));
    }
    lm_array *c = z ? T(&t, lm_cast(z, vae_dt)) : NULL;
    lm_array *img = c ? T(&t, lm_vae_decode(vae, c)) : NULL;
    lm_array *f = img ? T(&t, lm_cast(img, LM_F32)) : NULL;
    /* diffusers' postprocess: (x / 2 + 0.5).clamp(0, 1) */
    lm_array *g = f ? T(&t, lm_binary_scalar(LM_OP_MUL, f, 0.5, false)) : NULL;
    lm_array *h = g ? T(&t, lm_binary_scalar(LM_OP_ADD, g, 0.5, false)) : NULL;
    lm_array *r = keep(h ? T(&t, lm_clamp(h, 0, 1)) : NULL);
    tmp_free(&t);
    return r;
fail:
    tmp_free(&t);
    return NULL;
}

/* ---- generation ---- */

typedef struct dgen {
    lm_dit_pipe *d;
    lm_sd_pipeline *p;
    const lm_sd_gen_opts *o;
    int B;
    bool cfg;
    int64_t C, h, w;          /* the VAE's latents */
    int steps;
    lm_flowmatch_schedule sched;
    int32_t *img_ids, *txt_ids;   /* FLUX.2: [h/2*w/2, 4], [L, 4] */
    int64_t L;
} dgen;

/* prompt i's positive and negative texts (the negative NULL = None) */
static const char *pos_text(const lm_sd_gen_opts *o, int i)
{
    return o->nprompts > 1 ? o->prompts[i] : o->nprompts == 1 ? o->prompts[0] : "";
}

static const char *neg_text(const lm_sd_gen_opts *o, int i)
{
    return o->nnegatives > 1 ? o->negatives[i] : o->nnegatives == 1 ? o->negatives[0] : NULL;
}

/* ||x|| over all elements, f32, lazy */
static lm_array *norm2(tmp *t, lm_array *x)
{
    lm_array *sq = T(t, lm_unary(LM_OP_SQUARE, x));
    lm_array *s = sq ? T(t, lm_reduce(LM_OP_SUM, sq, 0, NULL, false)) : NULL;
    return s ? T(t, lm_unary(LM_OP_SQRT, s)) : NULL;
}

/* The guided prediction of the row's form from c and u (f32); Z-Image's
 * renormalization: scaled by max_norm / ||pred|| when ||pred|| is above
 * max_norm = renorm * ||c||, i.e. by min(1, max_norm / ||pred||) */
static lm_array *guide(tmp *t, const lm_sd_family_row *row, lm_array *c, lm_array *u, double g, double renorm)
{
    lm_array *d = T(t, lm_binary(LM_OP_SUB, c, u));
    lm_array *gd = d ? T(t, lm_binary_scalar(LM_OP_MUL, d, g, false)) : NULL;
    lm_array *pred = gd ? T(t, lm_binary(LM_OP_ADD, row->cfg_form == LM_SD_CFG_C_PLUS ? c : u, gd)) : NULL;
    if (!pred || !(renorm > 0)) return pred;
    lm_array *nc = norm2(t, c), *np = nc ? norm2(t, pred) : NULL;
    lm_array *mx = np ? T(t, lm_binary_scalar(LM_OP_MUL, nc, renorm, false)) : NULL;
    lm_array *q = mx ? T(t, lm_binary(LM_OP_DIV, mx, np)) : NULL;
    lm_array *f = q ? T(t, lm_binary_scalar(LM_OP_MINIMUM, q, 1.0, false)) : NULL;
    return f ? T(t, lm_binary(LM_OP_MUL, pred, f)) : NULL;
}

/* One step of image i: x [1, C, h, w] (Z-Image) or [1, S, C'] (FLUX.2) f32;
 * ctx[0] the prompt's conditioning, ctx[1] the negative's (cfg) */
static lm_array *step(dgen *g, int i, lm_array *x, lm_array *const *ctx)
{
    const lm_sd_family_row *row = g->d->row;
    tmp t = {0};
    float tv = g->sched.timesteps[i];
    /* Z-Image's cfg_truncation: no guidance once (1000 - t) / 1000 is past it */
    bool guided = g->cfg && !(g->o->cfg_truncation > 0 && (1000.0f - tv) / 1000.0f > g->o->cfg_truncation);
    int n = guided ? 2 : 1;
    lm_array *two[2] = {x, x};
    lm_array *xx = T(&t, n == 2 ? lm_concat(2, two, 0) : lm_array_retain(x));
    lm_array *xin = xx ? T(&t, lm_cast(xx, g->d->dt)) : NULL, *out = NULL;
    int64_t tn = n;
    if (g->d->zimage) {
        /* ZImagePipeline: timestep (1000 - t) / 1000, in f32 */
        float tz = (1000.0f - tv) / 1000.0f;
        lm_array *tt = xin ? T(&t, lm_full(1, &tn, tz, LM_F32, g->d->dev)) : NULL;
        lm_array *caps[2] = {ctx[0], n == 2 ? ctx[1] : NULL};
        out = tt ? T(&t, lm_zimage_forward(g->d->zimage, xin, tt, n, caps)) : NULL;
    } else {
        /* Flux2KleinPipeline: timestep / 1000; the negative's context in
         * its own call (its own text ids), stacked here: same length L */
        lm_array *tt = xin ? T(&t, lm_full(1, &tn, tv / 1000.0f, LM_F32, g->d->dev)) : NULL;
        lm_array *cc = n == 2 ? T(&t, lm_concat(2, ctx, 0)) : ctx[0];
        out = tt && cc ? T(&t, lm_flux2_forward(g->d->flux2, xin, cc, tt, g->img_ids, g->h / 2 * (g->w / 2),
                                                g->txt_ids, g->L))
                       : NULL;
    }
    lm_array *o32 = out ? T(&t, lm_cast(out, LM_F32)) : NULL, *pred = NULL;
    if (o32 && n == 2) {
        lm_array *c = T(&t, lm_slice(o32, 0, 0, 1, 1)), *u = c ? T(&t, lm_slice(o32, 0, 1, 2, 1)) : NULL;
        pred = u ? guide(&t, row, c, u, g->o->cfg, g->o->cfg_normalization) : NULL;
    } else {
        pred = o32;
    }
    /* Z-Image's model predicts the negated velocity */
    if (pred && g->d->zimage) pred = T(&t, lm_unary(LM_OP_NEG, pred));
    /* FlowMatchEulerDiscreteScheduler.step: x + (sigma_next - sigma) * v */
    lm_array *r = keep(pred ? T(&t, lm_flowmatch_step(&g->sched, i, x, pred)) : NULL);
    tmp_free(&t);
    return r;
}

static lm_status check(dgen *g)
{
    const lm_sd_gen_opts *o = g->o;
    lm_sd_pipeline *p = g->p;
    const lm_sd_family_row *row = g->d->row;
    if (lm_sd_option_check_int(LM_SD_OPT_BATCH, "generate", NULL, o->batch) ||
        lm_sd_option_check_int(LM_SD_OPT_STEPS, "generate", NULL, o->steps) ||
        lm_sd_option_check_num(LM_SD_OPT_CFG, "generate", NULL, o->cfg) ||
        (o->width && lm_sd_option_check_int(LM_SD_OPT_SIZE, "generate", "width", o->width)) ||
        (o->height && lm_sd_option_check_int(LM_SD_OPT_SIZE, "generate", "height", o->height)))
        return lm_error_status();
    if (o->nprompts > 1 && o->nprompts != o->batch)
        return lm_error_set(LM_ERR_ARG, "generate: %d prompts for a batch of %d", o->nprompts, o->batch);
    if (o->nnegatives > 1 && o->nnegatives != o->batch)
        return lm_error_set(LM_ERR_ARG, "generate: %d negative prompts for a batch of %d",
                            o->nnegatives, o->batch);
    if (!(o->cfg_normalization >= 0 && o->cfg_normalization <= 1000) ||
        !(o->cfg_truncation >= 0 && o->cfg_truncation <= 1))
        return lm_error_set(LM_ERR_ARG, "generate: cfg_normalization %g / cfg_truncation %g: expected "
                            "0 to 1000 and 0 to 1 (0 = off)", o->cfg_normalization, o->cfg_truncation);
    if (o->max_sequence_length < 0 || o->max_sequence_length > 1 << 16)
        return lm_error_set(LM_ERR_ARG, "generate: max_sequence_length %d: expected 1 to 65536 "
                            "(0 = the family's, %d)", o->max_sequence_length, row->encoders[0].max_length);
    if (o->n_text_layers < 0 || o->n_text_layers > LM_SD_MAX_LAYERS ||
        (o->n_text_layers > 1 && row->encoders[0].masked_rows))
        return lm_error_set(LM_ERR_ARG, "generate: text_layers: %d layers: %s takes %s", o->n_text_layers,
                            row->title, row->encoders[0].masked_rows ? "one" : "1 to 4");
    if (o->clip_skip)
        return lm_error_set(LM_ERR_ARG, "generate: clip_skip: %s has no CLIP encoder to skip layers of",
                            row->title);
    if (o->init)
        return lm_error_set(LM_ERR_UNSUPPORTED, "generate: an init image (img2img) is not read for %s yet",
                            row->title);
    const char *sn = o->sampler ? o->sampler : row->defaults.sampler;
    if (strcmp(sn, "euler") != 0)
        return lm_error_set(LM_ERR_ARG, "generate: sampler \"%s\": %s runs the flow-matching Euler "
                            "scheduler of its release only (sampler \"euler\")", sn, row->title);
    g->B = o->batch;
    g->steps = o->steps;
    g->cfg = row->cfg_form == LM_SD_CFG_C_PLUS ? o->cfg > 0 : o->cfg > 1;
    int64_t scale = lm_sd_pipeline_vae_scale(p), mult = 2 * scale;
    int64_t H = o->height > 0 ? o->height : lm_sd_pipeline_default_size(p);
    int64_t W = o->width > 0 ? o->width : lm_sd_pipeline_default_size(p);
    g->C = lm_sd_pipeline_latent_channels(p);
    if (o->latents) {
        lm_array *l = o->latents;
        int64_t c = row->packed ? 4 * g->C : g->C, f = row->packed ? 2 : 1;
        if (l->ndim != 4 || l->shape[0] != g->B || l->shape[1] != c)
            return lm_error_set(LM_ERR_SHAPE, "generate: latents: expected [%d,%lld,h,w]", g->B,
                                (long long)c);
        H = l->shape[2] * scale * f;
        W = l->shape[3] * scale * f;
    }
    if (H % mult || W % mult)
        return lm_error_set(LM_ERR_ARG, "generate: size %lldx%lld: %s needs width and height "
                            "multiples of %lld (the VAE's scale times its 2x2 patches)",
                            (long long)W, (long long)H, row->title, (long long)mult);
    g->h = H / scale;
    g->w = W / scale;
    if (lm_dit_pipe_schedule(g->d, g->steps, g->h, g->w, &g->sched) != LM_OK) {
        lm_error_prefix("generate: ");
        return lm_error_status();
    }
    if (row->packed) {
        /* _prepare_latent_ids, _prepare_text_ids */
        int64_t hh = g->h / 2, ww = g->w / 2;
        g->L = o->max_sequence_length > 0 ? o->max_sequence_length : row->encoders[0].max_length;
        g->img_ids = calloc((size_t)(hh * ww * 4), sizeof *g->img_ids);
        g->txt_ids = calloc((size_t)(g->L * 4), sizeof *g->txt_ids);
        if (!g->img_ids || !g->txt_ids) return lm_error_set(LM_ERR_NOMEM, "generate: out of memory");
        lm_flux2_latent_ids(hh, ww, g->img_ids);
        lm_flux2_text_ids(g->L, g->txt_ids);
    }
    return LM_OK;
}

/* image i's starting latents, f32: the given ones or its seed's noise, in
 * the transformer's layout ([1, C, h, w]; FLUX.2 packed [1, S, 4C]) */
static lm_array *start(dgen *g, int i)
{
    const lm_sd_gen_opts *o = g->o;
    tmp t = {0};
    bool pk = g->d->row->packed;
    int64_t shape[4] = {1, pk ? 4 * g->C : g->C, pk ? g->h / 2 : g->h, pk ? g->w / 2 : g->w};
    lm_array *x;
    if (o->latents) x = T(&t, lm_slice(o->latents, 0, i, i + 1, 1));
    else {
        uint64_t seed = o->seeds ? o->seeds[i] : o->seed + (uint64_t)i;
        x = T(&t, lm_diffusion_noise(seed, 0, 4, shape, LM_F32, g->d->dev));
    }
    lm_array *f = x ? T(&t, lm_cast(x, LM_F32)) : NULL;
    lm_array *r = keep(f && pk ? T(&t, lm_flux2_pack(f)) : f);
    tmp_free(&t);
    return r;
}

lm_array *lm_dit_pipe_generate(lm_dit_pipe *d, lm_sd_pipeline *p, const lm_sd_gen_opts *o)
{
    dgen g = {.d = d, .p = p, .o = o};
    lm_array **xs = NULL, **ctx = NULL, *img = NULL;
    int n = 1;
    lm_status st = check(&g);
    if (st != LM_OK) goto done;
    n = g.cfg ? 2 : 1;
    xs = calloc((size_t)g.B, sizeof *xs);
    ctx = calloc((size_t)(g.B * n), sizeof *ctx);
    if (!xs || !ctx) {
        st = lm_error_set(LM_ERR_NOMEM, "generate: out of memory");
        goto done;
    }
    /* the conditioning, once: per image, the prompt then (cfg) its negative
     * (Z-Image: "" for None; FLUX.2-klein always "") */
    for (int i = 0; i < g.B; i++) {
        const char *texts[2] = {pos_text(o, i), ""};
        if (g.cfg && d->row->cfg_form == LM_SD_CFG_C_PLUS && neg_text(o, i)) texts[1] = neg_text(o, i);
        if ((st = lm_dit_pipe_encode_prompt(d, n, texts, o->max_sequence_length, o->n_text_layers,
                                            o->text_layers, ctx + i * n)) != LM_OK)
            goto done;
    }
    if ((st = lm_eval(ctx, g.B * n)) != LM_OK) goto done;
    for (int i = 0; i < g.B; i++)
        if (!(xs[i] = start(&g, i))) {
            st = lm_error_status();
            goto done;
        }
    if ((st = lm_eval(xs, g.B)) != LM_OK) goto done;
    for (int s = 0; s < g.steps; s++) {
        for (int i = 0; i < g.B; i++) {
            lm_array *next = step(&g, s, xs[i], ctx + i * n);
            if (!next) {
                st = lm_error_status();
                goto done;
            }
            lm_array_release(xs[i]);
            xs[i] = next;
        }
        /* evaluated every step: the graph stays one step long */
        if ((st = lm_eval_async(xs, g.B)) != LM_OK) goto done;
        if (o->progress) o->progress(o->progress_ctx, s + 1, g.steps);
    }
    lm_array **imgs = calloc((size_t)g.B, sizeof *imgs);
    if (!imgs) {
        st = lm_error_set(LM_ERR_NOMEM, "generate: out of memory");
        goto done;
    }
    const lm_vae_config *vc = lm_vae_get_config(lm_sd_pipeline_vae(p));
    int made = 0;
    for (; made < g.B; made++) {
        lm_array *z = d->row->packed ? lm_flux2_unpack(xs[made], g.img_ids, 4, g.h / 2, g.w / 2)
                                     : lm_array_retain(xs[made]);
        imgs[made] = z ? lm_dit_pipe_decode(d, lm_sd_pipeline_vae(p), lm_vae_dtype(lm_sd_pipeline_vae(p)), d->row,
                                       vc->scaling_factor, vc->shift_factor, z)
                       : NULL;
        lm_array_release(z);
        if (!imgs[made]) break;
    }
    if (made == g.B) img = g.B == 1 ? lm_array_retain(imgs[0]) : lm_concat(g.B, imgs, 0);
    for (int i = 0; i < made; i++) lm_array_release(imgs[i]);
    free(imgs);
    st = img ? lm_eval(&img, 1) : lm_error_status();
done:
    for (int i = 0; xs && i < g.B; i++) lm_array_release(xs[i]);
    for (int i = 0; ctx && i < g.B * n; i++) lm_array_release(ctx[i]);
    free(xs);
    free(ctx);
    lm_flowmatch_schedule_free(&g.sched);
    free(g.img_ids);
    free(g.txt_ids);
    if (st != LM_OK) {
        lm_array_release(img);
        return NULL;
    }
    return img;
}

/* ---- a transformer loaded elsewhere (models/dit_files.c) ---- */

lm_dit_pipe *lm_dit_pipe_load_parts(const lm_sd_family_row *row, const char *dir, const char *mi,
                                    const char *variant, lm_dtype dt, lm_device *dev,
                                    lm_zimage *zimage, lm_flux2 *flux2)
{
    lm_dit_pipe *d = calloc(1, sizeof *d);
    char *path = NULL;
    if (!d) {
        lm_zimage_free(zimage);
        lm_flux2_free(flux2);
        lm_error_set(LM_ERR_NOMEM, "%s: out of memory", mi);
        return NULL;
    }
    d->row = row;
    d->dt = dt;
    d->dev = dev;
    d->zimage = zimage;
    d->flux2 = flux2;
    const lm_sd_encoder *E = &row->encoders[0];
    bool z = row->denoiser == LM_SD_NET_ZIMAGE;
    if ((z && (!zimage || flux2)) || (!z && (!flux2 || zimage))) {
        lm_error_set(LM_ERR_ARG, "%s: %s: the transformer given is not its network", mi, row->title);
        goto fail;
    }
    if (row->n_encoders != 1 || E->kind != LM_SD_TE_QWEN3) {
        lm_error_set(LM_ERR_UNSUPPORTED, "%s: %s: only one Qwen3 text encoder is read", mi, row->title);
        goto fail;
    }
    if (!(path = lm_dfs_path(dir, E->tokenizer)) || !(d->tok = lm_qwen_tokenizer_load(path))) goto fail;
    free(path);
    if (!(path = lm_dfs_path(dir, E->dir)) || !(d->te = lm_qwen3_load(path, variant, dt, dev))) goto fail;
    free(path);
    if (!(path = lm_dfs_path(dir, "scheduler"))) goto fail;
    if (lm_flowmatch_config_load(path, &d->sched) != LM_OK) goto fail;
    free(path);
    return d;
fail:
    free(path);
    lm_dit_pipe_free(d);
    return NULL;
}
