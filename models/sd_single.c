/* sd_single.c - single-file SD 1.x / 2.x / SDXL checkpoints (see sd_single.h
 * and, for the parts, sd_parts.h).
 *
 * The order of work: map the file; sort its keys; tell the family from the
 * prefixes (sd_detect.c); infer each component's architecture from a few
 * probe tensors (sd_infer.c); from it generate the table of every tensor the
 * diffusers model has, with its original name, its shape in the file and
 * how it is transformed (sd_keymap.c), and its config (sd_config.c); walk
 * the table (missing key, wrong shape: error; quantized tensors:
 * sd_gguf.c); every file key the table did not claim must be on the skip
 * list (else: error). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/io/io_internal.h"
#include "lumen.h"
#include "models/diffusers_config.h"
#include "models/sd_parts.h"


static lm_status components(reader *R, const lm_sd_single_opts *o, lm_sd_single *out, int *dropped);
static lm_status apply_table(reader *R, lm_sd_single *out);
static bool skippable(const reader *R, const char *k, int dropped);
static lm_status tokenizer_dir(const char *given, const char *config_dir, const char *sub, char **out);
static int cmp_idx(const void *a, const void *b, void *set);

lm_status lm_sd_single_read(const char *path, lm_sd_single *out)
{
    lm_sd_single_opts o = {0};
    return lm_sd_single_read_opts(path, &o, out);
}

lm_status lm_sd_single_read_opts(const char *path, const lm_sd_single_opts *o, lm_sd_single *out)
{
    memset(out, 0, sizeof *out);
    if (o->prediction_type && strcmp(o->prediction_type, "epsilon") &&
        strcmp(o->prediction_type, "v_prediction"))
        return lm_error_set(LM_ERR_ARG, "%s: prediction_type \"%s\" (epsilon or v_prediction)",
                            path, o->prediction_type);
    lm_status st = lm_init();
    if (st) return st;
    reader R = {.file = path, .dev = o->dev ? o->dev : lm_device_default()};
    int dropped = -1;
    st = lm_load_file_to(path, R.dev, &R.set);
    if (!st && R.set.format != LM_FORMAT_SAFETENSORS && R.set.format != LM_FORMAT_GGUF)
        st = lm_error_set(LM_ERR_FORMAT, "%s: a %s file, not safetensors or GGUF", path,
                          lm_format_name(R.set.format));
    if (!st) {
        R.order = malloc(sizeof *R.order * (size_t)(R.set.count + 1));
        R.used = calloc((size_t)R.set.count + 1, sizeof *R.used);
        R.deq = calloc((size_t)R.set.count + 1, sizeof *R.deq);
        if (!R.order || !R.used || !R.deq) st = lm_error_set(LM_ERR_NOMEM, "out of memory");
    }
    if (!st) {
        for (int i = 0; i < R.set.count; i++) R.order[i] = i;
        qsort_r(R.order, (size_t)R.set.count, sizeof *R.order, cmp_idx, &R.set);
        st = lm_sds_detect(&R);
    }
    out->family = R.row ? R.row->id : LM_SD_UNKNOWN;
    if (!st) st = components(&R, o, out, &dropped);
    if (!st) st = apply_table(&R, out);
    for (int i = 0; !st && i < R.set.count; i++) {
        if (R.used[i] || skippable(&R, R.set.names[i], dropped)) continue;
        char sh[96];
        lm_shape_str(sh, sizeof sh, R.set.arrays[i]->ndim, R.set.arrays[i]->shape);
        st = lm_error_set(LM_ERR_FORMAT, "%s: unexpected key %s %s: no place for it in the %s "
                          "architecture inferred from the file", path, R.set.names[i], sh,
                          R.row->name);
    }
    if (!st && !(out->scheduler = lm_sds_scheduler(R.row, o->prediction_type)))
        st = lm_error_set(LM_ERR_NOMEM, "out of memory");
    if (!st && o->config_dir) {
        cJSON *cfg[C_N] = {out->unet.config, out->vae.config, out->text_encoder.config,
                           out->text_encoder_2.config};
        for (int c = 0; !st && c < C_N; c++)
            if (cfg[c]) st = lm_sds_override(o->config_dir, lm_sds_comp_dir[c], "config.json", cfg[c]);
        if (!st) st = lm_sds_override(o->config_dir, "scheduler", "scheduler_config.json", out->scheduler);
    }
    const char *given[2] = {o->tokenizer, o->tokenizer_2};
    char **tok[2] = {&out->tokenizer, &out->tokenizer_2};
    for (int e = 0; !st && e < R.row->n_encoders && e < 2; e++)
        st = tokenizer_dir(given[e], o->config_dir, R.row->encoders[e].tokenizer, tok[e]);
    if (!st && !(out->file = strdup(path))) st = lm_error_set(LM_ERR_NOMEM, "out of memory");
    out->format = R.set.format;
    out->quant_kept = R.nkept;
    out->quant_dequantized = R.ndequant;
    for (int i = 0; R.deq && i < R.set.count; i++) lm_array_release(R.deq[i]);
    free(R.deq);
    lm_tensor_set_free(&R.set);
    free(R.order);
    free(R.used);
    free(R.t.e);
    if (st) lm_sd_single_free(out);
    return st;
}

lm_status lm_sd_single_tokenizers(const lm_sd_single *s, const char **tok, const char **tok2)
{
    const lm_sd_family_row *F = lm_sd_family_get(s->family);
    bool two = F && F->n_encoders > 1;
    *tok = s->tokenizer;
    *tok2 = two ? s->tokenizer_2 : NULL;
    if (!s->tokenizer || (two && !s->tokenizer_2))
        return lm_error_set(LM_ERR_ARG, "%s: a single-file checkpoint carries no tokenizer: give "
                            "tokenizer=%s (folders with vocab.json + merges.txt, as the %s "
                            "release's tokenizer/%s hold; or config_dir, a diffusers folder of "
                            "the model)", s->file, two ? " and tokenizer_2=" : "",
                            lm_sd_family_name(s->family),
                            two ? " and tokenizer_2/" : "");
    return LM_OK;
}

void lm_sd_single_free(lm_sd_single *s)
{
    if (!s) return;
    lm_sd_component *c[C_N] = {&s->unet, &s->vae, &s->text_encoder, &s->text_encoder_2};
    for (int i = 0; i < C_N; i++) {
        cJSON_Delete(c[i]->config);
        lm_tensor_set_free(&c[i]->weights);
    }
    cJSON_Delete(s->scheduler);
    free(s->file);
    free(s->tokenizer);
    free(s->tokenizer_2);
    memset(s, 0, sizeof *s);
}

/* Each component's architecture (sd_infer.c), table (sd_keymap.c) and
 * config (sd_config.c), in the table's order: the UNet, the VAE, the text
 * encoders of the row. */
static lm_status components(reader *R, const lm_sd_single_opts *o, lm_sd_single *out, int *dropped)
{
    unet_dims ud;
    vae_dims vd;
    bool v = o->prediction_type && !strcmp(o->prediction_type, "v_prediction");
    lm_status st = lm_sds_unet_dims(R, &ud);
    if (!st) st = lm_sds_unet_keys(R, &ud);
    if (!st && !(out->unet.config = lm_sds_unet_config(R, &ud, v)))
        st = lm_error_set(LM_ERR_NOMEM, "out of memory");
    if (!st) st = lm_sds_vae_dims(R, &vd);
    if (!st) st = lm_sds_vae_keys(R, &vd);
    if (!st && !(out->vae.config = lm_sds_vae_config(R, &vd)))
        st = lm_error_set(LM_ERR_NOMEM, "out of memory");
    lm_sd_component *te[2] = {&out->text_encoder, &out->text_encoder_2};
    for (int e = 0; !st && e < R->row->n_encoders && e < 2; e++) {
        clip_dims cd;
        int drop = -1;
        lm_sd_te_kind kind = R->row->encoders[e].kind;
        st = lm_sds_clip_dims(R, e, o->sd2_drop_last_layer, &cd, &drop);
        if (drop >= 0) *dropped = drop;
        if (!st) st = lm_sds_clip_keys(R, C_TE + e, kind, &cd);
        if (!st && !(te[e]->config = lm_sds_clip_config(kind, &cd)))
            st = lm_error_set(LM_ERR_NOMEM, "out of memory");
    }
    return st;
}

/* ---- walking the table ---- */

static lm_status apply_table(reader *R, lm_sd_single *out)
{
    lm_sd_component *comp[C_N] = {&out->unet, &out->vae, &out->text_encoder, &out->text_encoder_2};
    for (int i = 0; i < R->t.n; i++) {
        const entry *e = &R->t.e[i];
        char want[96], got[96];
        lm_shape_str(want, sizeof want, e->nd, e->shape);
        int k = lm_sds_find(R, e->ldm);
        if (k < 0)
            return lm_error_set(LM_ERR_FORMAT, "%s: missing key %s %s (diffusers' %s/%s)", R->file,
                                e->ldm, want, lm_sds_comp_dir[e->comp], e->dfs);
        lm_array *a = R->set.arrays[k];
        bool same = a->ndim == e->nd;
        for (int d = 0; same && d < e->nd; d++) same = a->shape[d] == e->shape[d];
        if (!same) {
            lm_shape_str(got, sizeof got, a->ndim, a->shape);
            return lm_error_set(LM_ERR_SHAPE, "%s: %s has shape %s, the inferred %s config needs "
                                "%s (diffusers' %s)", R->file, e->ldm, got, lm_sds_comp_dir[e->comp],
                                want, e->dfs);
        }
        if (!lm_dtype_is_float(a->dtype) && !lm_dtype_is_quant(a->dtype)) {
            lm_shape_str(got, sizeof got, a->ndim, a->shape);
            return lm_error_set(LM_ERR_DTYPE, "%s: %s %s is %s: a weight is a float or a block-"
                                "quantized dtype", R->file, e->ldm, got, lm_dtype_name(a->dtype));
        }
        R->used[k] = true;
        lm_array *t;
        if (lm_dtype_is_quant(a->dtype)) {
            bool keep;
            lm_array *f = lm_sds_unquantize(R, e, k, &keep);
            if (!f) return lm_error_status();
            t = keep ? f : lm_sds_transform(e, f);
            if (!keep) lm_array_release(f);
        } else {
            t = lm_sds_transform(e, a);
        }
        if (!t) return lm_error_prefix("%s: %s", R->file, e->ldm);
        lm_status st = lm_io_set_add(&comp[e->comp]->weights, e->dfs, t);
        if (st) return st;
    }
    return LM_OK;
}

/* ---- what may be skipped ---- */

static bool skippable(const reader *R, const char *k, int dropped)
{
    static const char *const top[] = {
        "betas", "alphas_cumprod", "alphas_cumprod_prev", "sqrt_alphas_cumprod",
        "sqrt_one_minus_alphas_cumprod", "log_one_minus_alphas_cumprod",
        "sqrt_recip_alphas_cumprod", "sqrt_recipm1_alphas_cumprod", "posterior_variance",
        "posterior_log_variance_clipped", "posterior_mean_coef1", "posterior_mean_coef2",
        "logvar", "lvlb_weights", "model.diffusion_model.logvar", "denoiser.sigmas",
        "denoiser.log_sigmas",
    };
    if (!strncmp(k, "model_ema.", 10)) return true;
    for (size_t i = 0; i < sizeof top / sizeof *top; i++)
        if (!strcmp(k, top[i])) return true;
    for (int c = C_TE; c <= C_TE2; c++) {
        const char *p = R->pfx[c];
        size_t n = p ? strlen(p) : 0;
        if (!n || strncmp(k, p, n)) continue;
        const char *r = k + n;
        if (!strcmp(r, "text_model.embeddings.position_ids") || !strcmp(r, "embeddings.position_ids") ||
            !strcmp(r, "logit_scale"))
            return true;
        /* OpenCLIP taken to its penultimate layer (SD 2.x): its projection
         * and the block past the penultimate */
        if (R->row->encoders[c - C_TE].kind == LM_SD_TE_OPENCLIP) {
            char last[64];
            snprintf(last, sizeof last, "transformer.resblocks.%d.", dropped);
            if (!strcmp(r, "text_projection") || (dropped >= 0 && !strncmp(r, last, strlen(last))))
                return true;
        }
    }
    return false;
}

/* a tokenizer folder: given, or beside the configs; checked to hold one */
static lm_status tokenizer_dir(const char *given, const char *config_dir, const char *sub, char **out)
{
    *out = NULL;
    char *d = given ? strdup(given) : config_dir ? lm_dfs_path(config_dir, sub) : NULL;
    if (!d) return given || config_dir ? lm_error_set(LM_ERR_NOMEM, "out of memory") : LM_OK;
    struct stat st;
    char *v = lm_dfs_path(d, "vocab.json"), *t = lm_dfs_path(d, "tokenizer.json");
    bool ok = (v && !stat(v, &st)) || (t && !stat(t, &st));
    free(v);
    free(t);
    if (!ok) {
        lm_status r = given ? lm_error_set(LM_ERR_IO, "tokenizer %s: no vocab.json (with merges.txt) "
                                           "nor tokenizer.json there", d) : LM_OK;
        free(d);
        return r;
    }
    *out = d;
    return LM_OK;
}

/* ---- the file's keys ---- */

static int cmp_idx(const void *a, const void *b, void *set)
{
    const lm_tensor_set *s = set;
    return strcmp(s->names[*(const int *)a], s->names[*(const int *)b]);
}

