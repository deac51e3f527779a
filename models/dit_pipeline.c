/* dit_pipeline.c - Z-Image and FLUX.2-klein generation (see dit_pipeline.h). */
#include "dit_pipeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "models/diffusers_config.h"
#include "models/flowmatch.h"
#include "models/flux2.h"
#include "models/lora.h"
#include "models/prompt.h"
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
    char *te_path;            /* the text encoder's folder and variant, to read it again */
    char *te_variant;
    char *tr_path, *tr_folder;   /* the transformer's, and its reader */
    lm_dit_transformer_reader read;
    bool offload;             /* one of the two networks resident at a time */
    struct lm_lora_stack **loras;   /* the pipeline's adapters (models/lora.h), or NULL */
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
    free(d->te_path);
    free(d->te_variant);
    free(d->tr_path);
    free(d->tr_folder);
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

static lm_status read_folder(const lm_sd_family_row *row, const char *path, const char *folder,
                             const char *variant, lm_dtype dt, lm_device *dev, lm_zimage **z, lm_flux2 **x)
{
    (void)folder;
    if (row->denoiser == LM_SD_NET_ZIMAGE) *z = lm_zimage_load(path, variant, dt, dev);
    else if (row->denoiser == LM_SD_NET_FLUX2) *x = lm_flux2_load(path, variant, dt, dev);
    else lm_error_set(LM_ERR_UNSUPPORTED, "%s: %s: its transformer is not in this build", path, row->title);
    return *z || *x ? LM_OK : lm_error_status();
}

lm_dit_pipe *lm_dit_pipe_load(const lm_sd_family_row *row, const char *dir, const char *mi,
                    const char *variant, lm_dtype dt, lm_device *dev, bool offload)
{
    char *path = lm_dfs_path(dir, row->denoiser_dir);
    lm_zimage *z = NULL;
    lm_flux2 *x = NULL;
    lm_dit_pipe *d = NULL;
    if (path && read_folder(row, path, dir, variant, dt, dev, &z, &x) == LM_OK)
        d = lm_dit_pipe_load_parts(row, dir, mi, variant, dt, dev, z, x, read_folder, path, offload);
    free(path);
    return d;
}

lm_status lm_dit_pipe_transformer_ready(lm_dit_pipe *d)
{
    if (d->zimage || d->flux2) return LM_OK;
    if (d->read(d->row, d->tr_path, d->tr_folder, d->te_variant, d->dt, d->dev, &d->zimage, &d->flux2) != LM_OK)
        return lm_error_prefix("offload: reading the transformer again");
    if (d->loras && *d->loras && lm_lora_attach(*d->loras, d) != LM_OK) {
        /* freed again, so that no call runs it without its adapters */
        lm_lora_detach(*d->loras);
        lm_zimage_free(d->zimage);
        lm_flux2_free(d->flux2);
        d->zimage = NULL;
        d->flux2 = NULL;
        return lm_error_prefix("offload: the LoRAs on the transformer read again");
    }
    return LM_OK;
}

void lm_dit_pipe_set_loras(lm_dit_pipe *d, struct lm_lora_stack **s) { d->loras = s; }

/* offload: the text encoder resident, the transformer not */
static lm_status te_acquire(lm_dit_pipe *d)
{
    if (d->offload) {
        if (d->loras && *d->loras) lm_lora_detach(*d->loras);
        lm_zimage_free(d->zimage);
        lm_flux2_free(d->flux2);
        d->zimage = NULL;
        d->flux2 = NULL;
    }
    if (!d->te && !(d->te = lm_qwen3_load(d->te_path, d->te_variant, d->dt, d->dev)))
        return lm_error_prefix("offload: reading the text encoder again");
    return LM_OK;
}

/* offload: out computed, then the text encoder freed */
static lm_status te_release(lm_dit_pipe *d, lm_array *const *out, int n)
{
    if (!d->offload) return LM_OK;
    lm_status st = lm_eval(out, n);
    lm_qwen3_free(d->te);
    d->te = NULL;
    return st;
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

void lm_dit_pipe_set_offload(lm_dit_pipe *d, bool on)
{
    d->offload = on;
    if (on) {
        lm_qwen3_free(d->te);
        d->te = NULL;
    }
}

bool lm_dit_pipe_offload(const lm_dit_pipe *d) { return d->offload; }

static lm_status encode_all(lm_dit_pipe *d, int n, const char *const *prompts, int max_length, int n_layers,
                            const int *layers, lm_array **out)
{
    int L = max_length > 0 ? max_length : d->row->encoders[0].max_length;
    lm_status st = LM_OK;
    for (int i = 0; i < n && st == LM_OK; i++) st = encode_one(d, prompts[i], L, n_layers, layers, &out[i]);
    return st;
}

static void release_all(lm_array **out, int n)
{
    for (int j = 0; j < n; j++) {
        lm_array_release(out[j]);
        out[j] = NULL;
    }
}

lm_status lm_dit_pipe_encode_prompt(lm_dit_pipe *d, int n, const char *const *prompts, int max_length,
                                    int n_layers, const int *layers, lm_array **out)
{
    for (int i = 0; i < n; i++) out[i] = NULL;
    lm_status st = te_acquire(d);
    if (st == LM_OK) st = encode_all(d, n, prompts, max_length, n_layers, layers, out);
    if (st == LM_OK) st = te_release(d, out, n);
    else te_release(d, NULL, 0);
    if (st != LM_OK) release_all(out, n);
    return st;
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

lm_array *lm_dit_pipe_decode_raw(lm_vae *vae, lm_dtype vae_dt, const lm_sd_family_row *row, double scaling,
                                 double shift, lm_array *latents)
{
    tmp t = {0};
    lm_array *z = T(&t, lm_cast(latents, LM_F32));
    if (z && row->packed) {
        /* latents * sqrt(running_var + eps) + running_mean, per packed
         * channel, then the 2x2 patches back to the VAE's latents */
        lm_array *mean = NULL, *var = NULL;
        double eps = 0;
        if (lm_vae_bn(vae, &mean, &var, &eps) != LM_OK) {
            tmp_free(&t);
            return NULL;
        }
        T(&t, mean);
        T(&t, var);
        z = T(&t, lm_flux2_bn_denormalize(z, mean, var, eps));
        z = z ? T(&t, lm_flux2_unpatchify(z)) : NULL;
    } else if (z) {
        z = T(&t, lm_binary_scalar(LM_OP_DIV, z, scaling, false));
        if (z && isfinite(shift)) z = T(&t, lm_binary_scalar(LM_OP_ADD, z, shift, false));
    }
    lm_array *c = z ? T(&t, lm_cast(z, vae_dt)) : NULL;
    lm_array *img = c ? T(&t, lm_vae_decode(vae, c)) : NULL;
    lm_array *r = keep(img ? T(&t, lm_cast(img, LM_F32)) : NULL);
    tmp_free(&t);
    return r;
}

/* ---- FLUX.2-klein's reference images ---- */

/* Flux2ImageProcessor.check_image_input's limits, Flux2KleinPipeline's area */
#define REF_MIN_SIDE 64
#define REF_MAX_ASPECT 8.0
#define REF_MAX_AREA (1024 * 1024)
#define REF_ID_SCALE 10     /* _prepare_image_ids' scale: t = 10 + 10 i */

/* Reference image k's checks (check_image_input) and the window the
 * pipeline keeps of it: the largest multiples of mult, centred (its
 * preprocess with resize_mode "crop", which Flux2ImageProcessor makes a
 * crop without resizing).  win: top, left, height, width. */
static lm_status ref_window(int k, const lm_array *r, int64_t mult, int64_t win[4])
{
    char s[96] = "NULL";
    if (!r || r->ndim != 3 || r->shape[0] != 3) {
        if (r) lm_shape_str(s, sizeof s, r->ndim, r->shape);
        return lm_error_set(LM_ERR_SHAPE, "generate: reference image %d: %s: expected [3,H,W] in 0..1", k + 1,
                            s);
    }
    int64_t H = r->shape[1], W = r->shape[2];
    if (W < REF_MIN_SIDE || H < REF_MIN_SIDE)
        return lm_error_set(LM_ERR_ARG, "generate: reference image %d is %lldx%lld: FLUX.2-klein's image "
                            "processor takes sides of %d pixels or more", k + 1, (long long)W, (long long)H,
                            REF_MIN_SIDE);
    double ar = fmax((double)W / (double)H, (double)H / (double)W);
    if (ar > REF_MAX_ASPECT)
        return lm_error_set(LM_ERR_ARG, "generate: reference image %d is %lldx%lld, an aspect ratio of %.1f:1: "
                            "FLUX.2-klein's image processor takes at most %g:1", k + 1, (long long)W,
                            (long long)H, ar, REF_MAX_ASPECT);
    if (W * H > REF_MAX_AREA) {
        double sc = sqrt((double)REF_MAX_AREA / (double)(W * H));
        return lm_error_set(LM_ERR_ARG, "generate: reference image %d is %lldx%lld, over %d pixels: "
                            "Flux2KleinPipeline resizes such an image (Lanczos) to %lldx%lld, which Lumen "
                            "does not do; give it resized", k + 1, (long long)W, (long long)H, REF_MAX_AREA,
                            (long long)((double)W * sc), (long long)((double)H * sc));
    }
    win[2] = H / mult * mult;
    win[3] = W / mult * mult;
    win[0] = (H - win[2]) / 2;
    win[1] = (W - win[3]) / 2;
    return LM_OK;
}

/* one reference image's packed tokens [1, h*w, 4C] f32 (its window
 * encoded, patchified, normalized); *h, *w its grid */
static lm_array *ref_tokens(lm_vae *vae, lm_array *r, const int64_t win[4], lm_array *mean, lm_array *var,
                            double eps, int64_t *h, int64_t *w)
{
    tmp t = {0};
    lm_array *a = T(&t, lm_slice(r, 1, win[0], win[0] + win[2], 1));
    lm_array *b = a ? T(&t, lm_slice(a, 2, win[1], win[1] + win[3], 1)) : NULL;
    lm_array *f = b ? T(&t, lm_cast(b, LM_F32)) : NULL;
    /* VaeImageProcessor.normalize: 2x - 1 */
    lm_array *f2 = f ? T(&t, lm_binary_scalar(LM_OP_MUL, f, 2, false)) : NULL;
    lm_array *f1 = f2 ? T(&t, lm_binary_scalar(LM_OP_SUB, f2, 1, false)) : NULL;
    lm_array *u = f1 ? T(&t, lm_unsqueeze(f1, 0)) : NULL;
    lm_array *c = u ? T(&t, lm_cast(u, lm_vae_dtype(vae))) : NULL, *mu = NULL, *lv = NULL, *r32 = NULL;
    /* _encode_vae_image: the mode (sample_mode "argmax"), patchified, then
     * (x - running_mean) / sqrt(running_var + eps) */
    if (c && lm_vae_encode(vae, c, &mu, &lv) == LM_OK) {
        T(&t, mu);
        T(&t, lv);
        lm_array *pt = T(&t, lm_flux2_patchify(mu));
        lm_array *nm = pt ? T(&t, lm_flux2_bn_normalize(pt, mean, var, eps)) : NULL;
        lm_array *pk = nm ? T(&t, lm_flux2_pack(nm)) : NULL;
        if (pk) {
            *h = pt->shape[2];
            *w = pt->shape[3];
            r32 = keep(T(&t, lm_cast(pk, LM_F32)));
        }
    }
    tmp_free(&t);
    return r32;
}

lm_status lm_dit_pipe_ref_latents(lm_vae *vae, int64_t vae_scale, int n, lm_array *const *refs,
                                  lm_array **tokens, int32_t **ids, int64_t *S, int64_t *h0, int64_t *w0)
{
    *tokens = NULL;
    *ids = NULL;
    *S = 0;
    if (n < 1 || !refs) return lm_error_set(LM_ERR_ARG, "generate: %d reference images", n);
    int64_t *hh = calloc((size_t)n, sizeof *hh), *ww = calloc((size_t)n, sizeof *ww), win[4];
    lm_array **parts = calloc((size_t)n, sizeof *parts), *mean = NULL, *var = NULL;
    double eps = 0;
    lm_status st = hh && ww && parts ? LM_OK : lm_error_set(LM_ERR_NOMEM, "generate: out of memory");
    /* every image checked before any is encoded */
    for (int k = 0; st == LM_OK && k < n; k++) {
        st = ref_window(k, refs[k], 2 * vae_scale, win);
        if (st == LM_OK && k == 0 && h0) *h0 = win[2];
        if (st == LM_OK && k == 0 && w0) *w0 = win[3];
    }
    if (st == LM_OK) st = lm_vae_bn(vae, &mean, &var, &eps);
    int64_t total = 0;
    for (int k = 0; st == LM_OK && k < n; k++) {
        ref_window(k, refs[k], 2 * vae_scale, win);
        if (!(parts[k] = ref_tokens(vae, refs[k], win, mean, var, eps, &hh[k], &ww[k]))) {
            st = lm_error_status();
            lm_error_prefix("generate: reference image %d: ", k + 1);
        }
        total += hh[k] * ww[k];
    }
    if (st == LM_OK) {
        *ids = malloc(sizeof **ids * 4 * (size_t)total);
        *tokens = n == 1 ? lm_array_retain(parts[0]) : lm_concat(n, parts, 1);
        if (!*ids) st = lm_error_set(LM_ERR_NOMEM, "generate: out of memory");
        else if (!*tokens) st = lm_error_status();
        else {
            lm_flux2_image_ids(n, hh, ww, REF_ID_SCALE, *ids);
            *S = total;
        }
    }
    for (int k = 0; parts && k < n; k++) lm_array_release(parts[k]);
    lm_array_release(mean);
    lm_array_release(var);
    free(parts);
    free(hh);
    free(ww);
    if (st != LM_OK) {
        lm_array_release(*tokens);
        free(*ids);
        *tokens = NULL;
        *ids = NULL;
    }
    return st;
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
    int t0;                   /* the first step run: img2img's t_start, else 0 */
    lm_flowmatch_schedule sched;
    int32_t *img_ids, *txt_ids;   /* FLUX.2: [S + Sr, 4] (the noise tokens', then the
                                     reference images'), [L, 4] */
    int64_t L;
    int64_t Sr;               /* FLUX.2: the reference images' tokens */
    lm_array *refs;           /* FLUX.2: [1, Sr, 4C] f32, or NULL */
    lm_array *noise;          /* the noise hook's draw 0, [B, ...] f32, or NULL */
    lm_array *x0;             /* Z-Image img2img: a [3,H,W] init image's latents, shared */
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
    /* Flux2KleinPipeline: the reference images' tokens after the noise's */
    lm_array *xr[2] = {x, g->refs};
    lm_array *xe = g->refs ? T(&t, lm_concat(2, xr, 1)) : x;
    lm_array *two[2] = {xe, xe};
    lm_array *xx = xe ? T(&t, n == 2 ? lm_concat(2, two, 0) : lm_array_retain(xe)) : NULL;
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
        int64_t S = g->h / 2 * (g->w / 2);
        out = tt && cc ? T(&t, lm_flux2_forward(g->d->flux2, xin, cc, tt, g->img_ids, S + g->Sr, g->txt_ids,
                                                g->L))
                       : NULL;
        /* noise_pred[:, :latents.size(1)] */
        if (out && g->Sr) out = T(&t, lm_slice(out, 1, 0, S, 1));
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
    if (lm_sd_gen_opts_check(o) != LM_OK) return lm_error_status();
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
    if (o->init && row->packed)
        return lm_error_set(LM_ERR_ARG, "generate: an init image (img2img): %s's pipeline has none; give "
                            "the image as a reference image (refs) to edit it", row->title);
    if (o->nrefs < 0 || (o->nrefs && !o->refs))
        return lm_error_set(LM_ERR_ARG, "generate: %d reference images%s", o->nrefs, o->refs ? "" : " (NULL)");
    if (o->nrefs && !row->packed)
        return lm_error_set(LM_ERR_ARG, "generate: %d reference image%s: %s takes none (they are "
                            "FLUX.2-klein's editing); an init image (img2img) starts from one", o->nrefs,
                            o->nrefs == 1 ? "" : "s", row->title);
    if (o->init && o->latents)
        return lm_error_set(LM_ERR_ARG, "generate: an init image and latents together: give one (latents "
                            "start a text-to-image run, an init image an img2img one)");
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
    if (o->init) {
        lm_array *im = o->init;
        if ((im->ndim != 3 && im->ndim != 4) || im->shape[im->ndim - 3] != 3 ||
            (im->ndim == 4 && im->shape[0] != g->B)) {
            char sh[96];
            lm_shape_str(sh, sizeof sh, im->ndim, im->shape);
            return lm_error_set(LM_ERR_SHAPE, "generate: init image %s: expected [3,H,W] or [%d,3,H,W]", sh,
                                g->B);
        }
        if (lm_sd_option_check_num(LM_SD_OPT_STRENGTH, "generate", NULL, o->strength)) return lm_error_status();
        /* ZImageImg2ImgPipeline.get_timesteps, in Python's floats: steps
         * from t_start = int(max(steps - min(steps * strength, steps), 0)) run */
        double kept = fmin((double)o->steps * o->strength, (double)o->steps);
        double t0 = fmax((double)o->steps - kept, 0);
        if (t0 >= (double)o->steps)
            return lm_error_set(LM_ERR_ARG, "generate: strength %g of %d steps leaves no step to run (%s's "
                                "img2img runs steps - int(steps - steps * strength) of them): give a larger "
                                "strength", o->strength, o->steps, row->title);
        g->t0 = (int)t0;
        H = im->shape[im->ndim - 2];   /* the init image's size is the output's */
        W = im->shape[im->ndim - 1];
    }
    if (o->nrefs) {
        /* every reference image checked before anything runs; the first
         * one's size the default (Flux2KleinPipeline: height or image_height) */
        int64_t win[4];
        for (int k = 0; k < o->nrefs; k++)
            if (ref_window(k, o->refs[k], mult, win) != LM_OK) return lm_error_status();
        ref_window(0, o->refs[0], mult, win);
        if (o->height <= 0) H = win[2];
        if (o->width <= 0) W = win[3];
    }
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
        return lm_error_set(LM_ERR_ARG, "generate: %s %lldx%lld: %s needs width and height "
                            "multiples of %lld (the VAE's scale times its 2x2 patches)%s",
                            o->init ? "init image" : "size", (long long)W, (long long)H, row->title,
                            (long long)mult, o->init ? "; diffusers resizes the image down to them" : "");
    g->h = H / scale;
    g->w = W / scale;
    if (lm_dit_pipe_schedule(g->d, g->steps, g->h, g->w, &g->sched) != LM_OK) {
        lm_error_prefix("generate");
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
static void noise_shape(const dgen *g, int64_t b, int64_t shape[4])
{
    bool pk = g->d->row->packed;
    shape[0] = b;
    shape[1] = pk ? 4 * g->C : g->C;
    shape[2] = pk ? g->h / 2 : g->h;
    shape[3] = pk ? g->w / 2 : g->w;
}

/* the noise hook's draw 0 for the batch (g->noise; NULL = the seeds') */
static lm_status hook_noise(dgen *g)
{
    const lm_sd_gen_opts *o = g->o;
    int64_t shape[4];
    lm_array *n = NULL;
    noise_shape(g, g->B, shape);
    if (!o->noise || o->latents) return LM_OK;
    if (o->noise(o->noise_ctx, 0, 4, shape, &n) != LM_OK) return lm_error_status();
    if (!n) return LM_OK;
    if (n->ndim != 4 || memcmp(n->shape, shape, sizeof shape) != 0) {
        char a[96], b[96];
        lm_shape_str(a, sizeof a, n->ndim, n->shape);
        lm_shape_str(b, sizeof b, 4, shape);
        lm_array_release(n);
        return lm_error_set(LM_ERR_SHAPE, "generate: the noise hook gave %s for %s", a, b);
    }
    g->noise = lm_cast(n, LM_F32);
    lm_array_release(n);
    return g->noise ? LM_OK : lm_error_status();
}

/* image i's init image latents (Z-Image img2img), f32 [1, C, h, w]:
 * (mean - shift_factor) * scaling_factor of the VAE's encoding */
static lm_array *init_latents(dgen *g, int i)
{
    lm_array *im = g->o->init;
    if (im->ndim == 3 && g->x0) return lm_array_retain(g->x0);
    lm_array *one = im->ndim == 3 ? lm_unsqueeze(im, 0) : lm_slice(im, 0, i, i + 1, 1);
    lm_array *f = one ? lm_cast(one, LM_F32) : NULL;
    lm_array *r = f ? lm_sd_encode_image(g->p, f) : NULL;
    lm_array_release(one);
    lm_array_release(f);
    return r;
}

/* image i's starting latents, f32: the given ones or its seed's noise, in
 * the transformer's layout ([1, C, h, w]; FLUX.2 packed [1, S, 4C]);
 * img2img: the init image's latents noised to the first step's sigma */
static lm_array *start(dgen *g, int i)
{
    const lm_sd_gen_opts *o = g->o;
    tmp t = {0};
    bool pk = g->d->row->packed;
    int64_t shape[4];
    noise_shape(g, 1, shape);
    lm_array *x;
    if (o->latents) x = T(&t, lm_slice(o->latents, 0, i, i + 1, 1));
    else if (g->noise) x = T(&t, lm_slice(g->noise, 0, i, i + 1, 1));
    else {
        uint64_t seed = o->seeds ? o->seeds[i] : o->seed + (uint64_t)i;
        x = T(&t, lm_diffusion_noise(seed, 0, 4, shape, LM_F32, g->d->dev));
    }
    lm_array *f = x ? T(&t, lm_cast(x, LM_F32)) : NULL;
    if (f && o->init) {
        /* FlowMatchEulerDiscreteScheduler.scale_noise at begin_index:
         * sigma * noise + (1 - sigma) * latents, in f32 */
        float sig = g->sched.sigmas[g->t0];
        lm_array *x0 = T(&t, init_latents(g, i));
        lm_array *a = x0 ? T(&t, lm_binary_scalar(LM_OP_MUL, f, sig, false)) : NULL;
        lm_array *b = a ? T(&t, lm_binary_scalar(LM_OP_MUL, x0, 1.0f - sig, false)) : NULL;
        f = b ? T(&t, lm_binary(LM_OP_ADD, a, b)) : NULL;
    }
    lm_array *r = keep(f && pk ? T(&t, lm_flux2_pack(f)) : f);
    tmp_free(&t);
    return r;
}

/* ---- NaN: which stage gave it ---- */

/* x's sum over everything, f32, lazy: not finite when x holds a NaN or an
 * infinity (latents and images are far from overflowing a sum) */
static lm_array *sum_all(lm_array *x)
{
    lm_array *f = x->dtype == LM_F32 ? lm_array_retain(x) : lm_cast(x, LM_F32);
    lm_array *r = f ? lm_reduce(LM_OP_SUM, f, 0, NULL, false) : NULL;
    lm_array_release(f);
    return r;
}

/* 1 when one of the n evaluated sums is not finite (*nan: one is NaN), 0
 * when none is, -1 with the error set; *first gets the first bad index */
static int sums_bad(lm_array *const *sums, int n, bool *nan, int *first)
{
    int bad = 0;
    for (int i = 0; i < n; i++) {
        float v;
        if (!sums[i]) continue;   /* a step img2img skips */
        if (lm_array_read(sums[i], &v, LM_F32) != LM_OK) return -1;
        if (isfinite(v)) continue;
        if (!bad && first) *first = i;
        bad = 1;
        *nan |= isnan(v);
    }
    return bad;
}

/* The error for images that decoded to a NaN or an infinity: the first
 * stage whose kept sums show one (read only now: a run that goes well
 * never waits for them).  tsum [B*n] the conditioning's, ssum [(steps+1)*B]
 * the latents' from the start, dsum [B] the decoded images'. */
static lm_status stage_error(const dgen *g, int n, lm_array *const *tsum, lm_array *const *ssum,
                             lm_array *const *dsum)
{
    const lm_sd_family_row *row = g->d->row;
    char stage[160];
    bool nan = false;
    int first = 0, rc, k = 0;
    lm_dtype dt = g->d->dt;
    if ((rc = sums_bad(tsum, g->B * n, &nan, &first)) != 0) {
        if (rc < 0) return lm_error_status();
        snprintf(stage, sizeof stage, "the text encoder (image %d's %s prompt)", first / n + 1,
                 first % n ? "negative" : "");
        first /= n;
    } else {
        for (k = g->t0; k <= g->steps && (rc = sums_bad(ssum + k * g->B, g->B, &nan, &first)) == 0; k++) {}
        if (rc < 0) return lm_error_status();
        if (k == g->t0) {
            snprintf(stage, sizeof stage, "%s", g->o->init ? "the VAE encoder (the init image's latents)"
                     : g->o->latents ? "the latents given" : "the initial noise");
            dt = g->o->init ? lm_vae_dtype(lm_sd_pipeline_vae(g->p)) : LM_F32;
        } else if (k <= g->steps) {
            snprintf(stage, sizeof stage, "the transformer at step %d of %d", k - g->t0, g->steps - g->t0);
        } else {
            if ((rc = sums_bad(dsum, g->B, &nan, &first)) < 0) return lm_error_status();
            snprintf(stage, sizeof stage, "the VAE decoder");
            dt = lm_vae_dtype(lm_sd_pipeline_vae(g->p));
        }
    }
    uint64_t seed = g->o->seeds ? g->o->seeds[first] : g->o->seed + (uint64_t)first;
    char which[64] = "";
    if (g->B > 1) snprintf(which, sizeof which, " in image %d (seed %llu)", first + 1, (unsigned long long)seed);
    char why[96];
    if (dt == LM_F32) snprintf(why, sizeof why, "a weight of it may be NaN or infinite");
    else snprintf(why, sizeof why, "a weight of it may be NaN, or %s overflowed there (dtype f32 avoids "
                  "that)", lm_dtype_name(dt));
    return lm_error_set(LM_ERR_STATE, "generate: %s: %s produced %s%s; no image is given: %s", row->title,
                        stage, nan ? "NaN" : "an infinity", which, why);
}

/* the reference images' tokens (g->refs) and their ids after the noise's */
static lm_status prepare_refs(dgen *g)
{
    lm_sd_pipeline *p = g->p;
    int32_t *rids = NULL;
    int64_t S = g->h / 2 * (g->w / 2);
    if (!g->o->nrefs) return LM_OK;
    if (lm_dit_pipe_ref_latents(lm_sd_pipeline_vae(p), lm_sd_pipeline_vae_scale(p), g->o->nrefs, g->o->refs,
                                &g->refs, &rids, &g->Sr, NULL, NULL) != LM_OK)
        return lm_error_status();
    int32_t *ids = realloc(g->img_ids, sizeof *ids * 4 * (size_t)(S + g->Sr));
    if (!ids) {
        free(rids);
        return lm_error_set(LM_ERR_NOMEM, "generate: out of memory");
    }
    g->img_ids = ids;
    memcpy(ids + 4 * S, rids, sizeof *ids * 4 * (size_t)g->Sr);
    free(rids);
    return lm_eval(&g->refs, 1);
}

lm_array *lm_dit_pipe_generate(lm_dit_pipe *d, lm_sd_pipeline *p, const lm_sd_gen_opts *o)
{
    dgen g = {.d = d, .p = p, .o = o};
    lm_array **xs = NULL, **ctx = NULL, **tsum = NULL, **ssum = NULL, **raw = NULL, **dsum = NULL, *img = NULL;
    int n = 1;
    lm_status st = check(&g);
    if (st != LM_OK) goto done;
    n = g.cfg ? 2 : 1;
    int B = g.B;
    xs = calloc((size_t)B, sizeof *xs);
    ctx = calloc((size_t)(B * n), sizeof *ctx);
    tsum = calloc((size_t)(B * n), sizeof *tsum);
    ssum = calloc((size_t)((g.steps + 1) * B), sizeof *ssum);
    raw = calloc((size_t)B, sizeof *raw);
    dsum = calloc((size_t)B, sizeof *dsum);
    lm_array **ev = calloc((size_t)(2 * B * n + 2 * B + 1), sizeof *ev);   /* the largest eval: the start */
    if (!xs || !ctx || !tsum || !ssum || !raw || !dsum || !ev) {
        free(ev);
        st = lm_error_set(LM_ERR_NOMEM, "generate: out of memory");
        goto done;
    }
    /* the conditioning, once: per image, the prompt then (cfg) its negative
     * (Z-Image: "" for None; FLUX.2-klein always "") */
    st = te_acquire(d);
    for (int i = 0; st == LM_OK && i < B; i++) {
        const char *texts[2] = {pos_text(o, i), ""};
        if (g.cfg && d->row->cfg_form == LM_SD_CFG_C_PLUS && neg_text(o, i)) texts[1] = neg_text(o, i);
        /* A1111's extra-network tags (<lora:NAME:W>) removed unless the prompt is
         * plain text; the rest is read literally, "(word:1.2)" included, as
         * ComfyUI reads these families' LLM prompts (disable_weights) and
         * diffusers does (docs/DIFFUSION.md) */
        char *clean[2] = {NULL, NULL};
        for (int k = 0; st == LM_OK && k < 2 && !o->plain_prompt; k++)
            if (strchr(texts[k], '<') &&
                (st = lm_prompt_extra_networks(texts[k], strlen(texts[k]), &clean[k], NULL, NULL)) == LM_OK)
                texts[k] = clean[k];
        if (st == LM_OK) st = encode_all(d, n, texts, o->max_sequence_length, o->n_text_layers, o->text_layers,
                                         ctx + i * n);
        free(clean[0]);
        free(clean[1]);
    }
    /* offload: the encoder freed once its hidden states are computed, the
     * transformer read again */
    if (st == LM_OK) st = te_release(d, ctx, B * n);
    else te_release(d, NULL, 0);
    if (st == LM_OK) st = lm_dit_pipe_transformer_ready(d);
    for (int i = 0; st == LM_OK && i < B * n; i++)
        if (!(tsum[i] = sum_all(ctx[i]))) st = lm_error_status();
    if (st == LM_OK && (st = prepare_refs(&g)) == LM_OK) st = hook_noise(&g);
    if (st == LM_OK && o->init && o->init->ndim == 3) {
        /* one init image for the batch: encoded once */
        if (!(g.x0 = init_latents(&g, 0))) st = lm_error_status();
        else st = lm_eval(&g.x0, 1);
    }
    for (int i = 0; st == LM_OK && i < B; i++)
        if (!(xs[i] = start(&g, i)) || !(ssum[g.t0 * B + i] = sum_all(xs[i]))) st = lm_error_status();
    int ne = 0;
    for (int i = 0; st == LM_OK && i < B * n; i++) ev[ne++] = ctx[i], ev[ne++] = tsum[i];
    for (int i = 0; st == LM_OK && i < B; i++) ev[ne++] = xs[i], ev[ne++] = ssum[g.t0 * B + i];
    if (st == LM_OK) st = lm_eval(ev, ne);
    for (int s = g.t0; st == LM_OK && s < g.steps; s++) {
        ne = 0;
        for (int i = 0; i < B; i++) {
            lm_array *next = step(&g, s, xs[i], ctx + i * n);
            lm_array *sm = next ? sum_all(next) : NULL;
            if (!sm) {
                lm_array_release(next);
                st = lm_error_status();
                break;
            }
            lm_array_release(xs[i]);
            xs[i] = next;
            ssum[(s + 1) * B + i] = sm;
            ev[ne++] = next;
            ev[ne++] = sm;
        }
        /* evaluated every step, with the latents' sums: the graph stays
         * one step long and nothing waits for the sums */
        if (st == LM_OK) st = lm_eval_async(ev, ne);
        if (st == LM_OK && o->progress) o->progress(o->progress_ctx, s - g.t0 + 1, g.steps - g.t0);
    }
    lm_array **imgs = st == LM_OK ? calloc((size_t)B, sizeof *imgs) : NULL;
    if (st == LM_OK && !imgs) st = lm_error_set(LM_ERR_NOMEM, "generate: out of memory");
    lm_vae *vae = lm_sd_pipeline_vae(p);
    const lm_vae_config *vc = lm_vae_get_config(vae);
    int made = 0;
    for (; st == LM_OK && made < B; made++) {
        lm_array *z = d->row->packed ? lm_flux2_unpack(xs[made], g.img_ids, 4, g.h / 2, g.w / 2)
                                     : lm_array_retain(xs[made]);
        raw[made] = z ? lm_dit_pipe_decode_raw(vae, lm_vae_dtype(vae), d->row, vc->scaling_factor, vc->shift_factor, z) : NULL;
        lm_array_release(z);
        if (!raw[made] || !(dsum[made] = sum_all(raw[made])) || !(imgs[made] = lm_sd_postprocess(raw[made]))) {
            st = lm_error_status();
            made++;
            break;
        }
    }
    if (st == LM_OK) img = B == 1 ? lm_array_retain(imgs[0]) : lm_concat(B, imgs, 0);
    for (int i = 0; imgs && i < made; i++) lm_array_release(imgs[i]);
    free(imgs);
    if (st == LM_OK && !img) st = lm_error_status();
    if (st == LM_OK) {
        ne = 0;
        ev[ne++] = img;
        for (int i = 0; i < B; i++) ev[ne++] = dsum[i];
        st = lm_eval(ev, ne);
    }
    free(ev);
    /* item 5 of issue 34: a NaN or an infinity is an error naming the stage,
     * never a black PNG (the clamp would hide it) */
    if (st == LM_OK) {
        bool nan = false;
        int bad = sums_bad(dsum, B, &nan, NULL);
        if (bad) st = bad < 0 ? lm_error_status() : stage_error(&g, n, tsum, ssum, dsum);
    }
done:
    for (int i = 0; xs && i < g.B; i++) lm_array_release(xs[i]);
    for (int i = 0; ctx && i < g.B * n; i++) lm_array_release(ctx[i]);
    for (int i = 0; tsum && i < g.B * n; i++) lm_array_release(tsum[i]);
    for (int i = 0; ssum && i < (g.steps + 1) * g.B; i++) lm_array_release(ssum[i]);
    for (int i = 0; raw && i < g.B; i++) lm_array_release(raw[i]);
    for (int i = 0; dsum && i < g.B; i++) lm_array_release(dsum[i]);
    free(xs);
    free(ctx);
    free(tsum);
    free(ssum);
    free(raw);
    free(dsum);
    lm_flowmatch_schedule_free(&g.sched);
    free(g.img_ids);
    free(g.txt_ids);
    lm_array_release(g.refs);
    lm_array_release(g.noise);
    lm_array_release(g.x0);
    if (st != LM_OK) {
        lm_array_release(img);
        return NULL;
    }
    return img;
}

/* ---- a transformer loaded elsewhere (models/dit_files.c) ---- */

lm_dit_pipe *lm_dit_pipe_load_parts(const lm_sd_family_row *row, const char *dir, const char *mi,
                                    const char *variant, lm_dtype dt, lm_device *dev,
                                    lm_zimage *zimage, lm_flux2 *flux2,
                                    lm_dit_transformer_reader read, const char *tr_path, bool offload)
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
    d->read = read;
    if (!(d->tr_path = strdup(tr_path)) || !(d->tr_folder = strdup(dir))) {
        lm_error_set(LM_ERR_NOMEM, "%s: out of memory", mi);
        goto fail;
    }
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
    if (!(path = lm_dfs_path(dir, E->dir))) goto fail;
    d->offload = offload;
    if (offload) {   /* read at the first prompt: its config at least must be there */
        struct stat sb;
        char cfg[4200];
        snprintf(cfg, sizeof cfg, "%s/config.json", path);
        if (stat(cfg, &sb) != 0 || !S_ISREG(sb.st_mode)) {
            lm_error_set(LM_ERR_IO, "%s: no config.json: the text encoder's folder (%s)", path, mi);
            goto fail;
        }
    } else if (!(d->te = lm_qwen3_load(path, variant, dt, dev))) goto fail;
    d->te_path = path;
    path = NULL;
    if (variant && !(d->te_variant = strdup(variant))) {
        lm_error_set(LM_ERR_NOMEM, "%s: out of memory", mi);
        goto fail;
    }
    if (!(path = lm_dfs_path(dir, "scheduler"))) goto fail;
    if (lm_flowmatch_config_load(path, &d->sched) != LM_OK) goto fail;
    free(path);
    return d;
fail:
    free(path);
    lm_dit_pipe_free(d);
    return NULL;
}
