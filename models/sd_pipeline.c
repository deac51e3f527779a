/* sd_pipeline.c - loading a Stable Diffusion pipeline and generating with
 * it, as diffusers' pipelines/stable_diffusion* do (see sd_pipeline.h). */
#include "sd_pipeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "models/clip_text.h"
#include "models/clip_tokenizer.h"
#include "models/prompt.h"
#include "models/diffusers_config.h"
#include "models/dit_files.h"
#include "models/dit_pipeline.h"
#include "models/lora.h"
#include "models/sampler.h"
#include "models/sd_inpaint.h"
#include "models/sd_single.h"
#include "models/unet.h"
#include "models/vae.h"
#include "error.h"
#include "ops.h"

#define CONFIG_MAX (1u << 20)

struct lm_sd_pipeline {
    const lm_sd_family_row *row;   /* the family: every family-specific choice below */
    char name[256];
    lm_dtype dt, vae_dt;
    lm_device *dev;
    lm_clip_tokenizer *tok[2];
    lm_clip_text *te[2];
    lm_unet *unet;
    lm_vae *vae;
    lm_sched_config sched;
    int64_t latent_channels, vae_scale, sample_size;
    int64_t unet_in;            /* the UNet's input channels: latent_channels, or 9 for the
                                   inpainting UNets (latents, mask, masked-image latents) */
    double scaling, shift;      /* shift NAN when the VAE has none */
    bool force_zeros;           /* a None negative prompt is zeros (the row's force_zeros,
                                   unless model_index.json says otherwise) */
    lm_dit_pipe *dit;                /* a flow-matching DiT family's networks (models/dit_pipeline.h);
                                   tok, te and unet are then NULL */
    lm_lora_stack *loras;       /* the merged adapters (models/lora.h), NULL = none */
    lm_prompt_embeddings emb;   /* textual-inversion embeddings (lm_sd_pipeline_load_embeddings) */
};

void lm_sd_load_opts_init(lm_sd_load_opts *o)
{
    memset(o, 0, sizeof *o);
    o->dtype = LM_DTYPE_COUNT;
}

static void gen_opts_fill(lm_sd_gen_opts *o, const lm_sd_defaults *d)
{
    memset(o, 0, sizeof *o);
    o->batch = d->batch;
    o->steps = d->steps;
    o->cfg = d->cfg;
    o->sampler = d->sampler;
    o->strength = d->strength;
    o->clip_skip = d->clip_skip;
}

void lm_sd_gen_opts_init(lm_sd_gen_opts *o) { gen_opts_fill(o, &lm_sd_defaults_generic); }

void lm_sd_gen_opts_init_for(lm_sd_gen_opts *o, const lm_sd_pipeline *p)
{
    gen_opts_fill(o, lm_sd_pipeline_defaults(p));
}

void lm_sd_pipeline_free(lm_sd_pipeline *p)
{
    if (!p) return;
    lm_lora_stack_free(p->loras);   /* the original weights back before the models go */
    for (int i = 0; i < 2; i++) {
        lm_clip_tokenizer_free(p->tok[i]);
        lm_clip_text_free(p->te[i]);
    }
    lm_unet_free(p->unet);
    lm_dit_pipe_free(p->dit);
    lm_vae_free(p->vae);
    lm_sched_config_clear(&p->sched);
    lm_prompt_embeddings_free(&p->emb);
    free(p);
}

lm_status lm_sd_pipeline_load_embeddings(lm_sd_pipeline *p, const char *dir)
{
    if (p->dit)
        return lm_error_set(LM_ERR_UNSUPPORTED, "embeddings %s: %s: textual-inversion embeddings are "
                            "for the CLIP text encoders of SD 1.x, 2.x and SDXL", dir, p->row->title);
    lm_prompt_embeddings e;
    lm_status st = lm_prompt_embeddings_load(dir, &e);
    if (st != LM_OK) return st;
    lm_prompt_embeddings_free(&p->emb);
    p->emb = e;
    return LM_OK;
}

int lm_sd_pipeline_embeddings(const lm_sd_pipeline *p) { return p->emb.n; }

lm_sd_family lm_sd_pipeline_family(const lm_sd_pipeline *p) { return p->row->id; }
const lm_sd_family_row *lm_sd_pipeline_row(const lm_sd_pipeline *p) { return p->row; }
const lm_sd_defaults *lm_sd_pipeline_defaults(const lm_sd_pipeline *p) { return &p->row->defaults; }
lm_dtype lm_sd_pipeline_dtype(const lm_sd_pipeline *p) { return p->dt; }
lm_device *lm_sd_pipeline_device(const lm_sd_pipeline *p) { return p->dev; }
const char *lm_sd_pipeline_name(const lm_sd_pipeline *p) { return p->name; }
int64_t lm_sd_pipeline_latent_channels(const lm_sd_pipeline *p) { return p->latent_channels; }
int64_t lm_sd_pipeline_vae_scale(const lm_sd_pipeline *p) { return p->vae_scale; }
int64_t lm_sd_pipeline_default_size(const lm_sd_pipeline *p) { return p->sample_size * p->vae_scale; }
lm_clip_tokenizer *lm_sd_pipeline_tokenizer(lm_sd_pipeline *p, int which) { return which == 0 || which == 1 ? p->tok[which] : NULL; }
lm_clip_text *lm_sd_pipeline_text_encoder(lm_sd_pipeline *p, int which) { return which == 0 || which == 1 ? p->te[which] : NULL; }
lm_unet *lm_sd_pipeline_unet(lm_sd_pipeline *p) { return p->unet; }
lm_vae *lm_sd_pipeline_vae(lm_sd_pipeline *p) { return p->vae; }
lm_dit_pipe *lm_sd_pipeline_dit(lm_sd_pipeline *p) { return p->dit; }
lm_lora_stack **lm_sd_pipeline_loras(lm_sd_pipeline *p) { return &p->loras; }

/* ---- loading ---- */

static bool is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* f16 on a real GPU, f32 on the CPU and on CPU-type Vulkan drivers (lavapipe),
 * where f16 is slower and only loses precision */
static lm_dtype default_dtype(const lm_device *dev)
{
    return strstr(dev->kind, "gpu") && strcmp(dev->kind, "cpu-gpu") ? LM_F16 : LM_F32;
}

/* The pipeline name: the last path component without ".safetensors" or ".gguf" */
static void set_name(lm_sd_pipeline *p, const char *path)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    const char *s = path + n;
    while (s > path && s[-1] != '/') s--;
    size_t len = (size_t)(path + n - s);
    static const char *const exts[2] = {".safetensors", ".gguf"};
    for (int i = 0; i < 2; i++) {
        size_t e = strlen(exts[i]);
        if (len > e && !strncmp(path + n - e, exts[i], e)) len -= e;
    }
    if (len >= sizeof p->name) len = sizeof p->name - 1;
    memcpy(p->name, s, len);
    p->name[len] = 0;
}

/* The numbers the pipeline needs from the UNet and VAE configs: read here from
 * the JSON, so the loop depends on the networks' forward calls only. */
static lm_status read_sizes(lm_sd_pipeline *p, const cJSON *unet, const char *ufile,
                            const cJSON *vae, const char *vfile, bool *force_upcast, bool *linear)
{
    /* sample_size may be [h, w]: the default image is then square on h */
    const cJSON *ss = cJSON_GetObjectItemCaseSensitive(unet, "sample_size");
    if (cJSON_IsArray(ss) && cJSON_GetArraySize(ss) >= 1) {
        const cJSON *h = cJSON_GetArrayItem(ss, 0);
        if (!cJSON_IsNumber(h) || h->valuedouble < 1 || h->valuedouble > 65536)
            return lm_error_set(LM_ERR_FORMAT, "%s: sample_size: expected a size or [h, w]", ufile);
        p->sample_size = (int64_t)h->valuedouble;
    } else if (lm_dfs_int(unet, "sample_size", ufile, false, 0, 1, 1 << 16, &p->sample_size) != LM_OK) {
        return lm_error_status();
    }   /* absent or null: 0 here, the family row's once the family is known */
    /* the latents are the UNet's output channels; its input has the mask and
     * the masked image's latents too in the inpainting UNets (in_channels 9) */
    if (lm_dfs_int(unet, "in_channels", ufile, false, 4, 1, 1024, &p->unet_in) != LM_OK ||
        lm_dfs_int(unet, "out_channels", ufile, false, p->unet_in, 1, 1024, &p->latent_channels) != LM_OK ||
        lm_dfs_num(vae, "scaling_factor", vfile, false, 0.18215, &p->scaling) != LM_OK)
        return lm_error_status();
    if (p->unet_in != p->latent_channels && p->unet_in != 2 * p->latent_channels + 1)
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: in_channels %lld, out_channels %lld: expected "
                            "equal ones, or %lld in (an inpainting UNet: latents, mask, masked-image "
                            "latents)", ufile, (long long)p->unet_in, (long long)p->latent_channels,
                            (long long)(2 * p->latent_channels + 1));
    if (p->scaling == 0)   /* the latents are divided by it: every image would be NaN */
        return lm_error_set(LM_ERR_FORMAT, "%s: scaling_factor 0: the latents are divided by it "
                            "(expected a number other than 0; SD's is 0.18215)", vfile);
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(vae, "shift_factor");
    p->shift = cJSON_IsNumber(sh) ? sh->valuedouble : NAN;
    if (cJSON_IsNumber(sh) && !isfinite(p->shift))      /* NaN here would mean "none" */
        return lm_error_set(LM_ERR_FORMAT, "%s: shift_factor: expected a finite number", vfile);
    const cJSON *boc = cJSON_GetObjectItemCaseSensitive(vae, "block_out_channels");
    int levels = cJSON_IsArray(boc) ? cJSON_GetArraySize(boc) : 1;
    if (levels < 1 || levels > 16)
        return lm_error_set(LM_ERR_FORMAT, "%s: block_out_channels: expected 1 to 16 levels", vfile);
    p->vae_scale = (int64_t)1 << (levels - 1);
    const cJSON *fu = cJSON_GetObjectItemCaseSensitive(vae, "force_upcast");
    *force_upcast = !fu || cJSON_IsTrue(fu);
    *linear = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(unet, "use_linear_projection"));
    return LM_OK;
}

/* scheduler_config.json (NULL = SD's training schedule, as the single-file
 * loaders assume it) with the prediction type overridden when asked. */
static lm_status read_sched(lm_sd_pipeline *p, const char *sched_dir, const char *prediction)
{
    cJSON *j = NULL;
    char *path = NULL;
    lm_status st = LM_OK;
    if (sched_dir) {
        if (!(path = lm_dfs_path(sched_dir, "scheduler_config.json"))) return lm_error_status();
        st = lm_dfs_json(path, CONFIG_MAX, true, &j);
        if (st != LM_OK) goto done;
    }
    if (!j) {
        /* the schedule the family was trained with */
        j = cJSON_Parse(p->row->scheduler);
        if (!j) {
            st = lm_error_set(LM_ERR_NOMEM, "sd pipeline: out of memory");
            goto done;
        }
        free(path);
        path = NULL;
    }
    if (prediction) {
        if (strcmp(prediction, "epsilon") && strcmp(prediction, "v_prediction")) {
            st = lm_error_set(LM_ERR_ARG, "sd pipeline: prediction \"%s\": expected epsilon or "
                              "v_prediction", prediction);
            goto done;
        }
        cJSON_DeleteItemFromObjectCaseSensitive(j, "prediction_type");
        cJSON_AddStringToObject(j, "prediction_type", prediction);
    }
    st = lm_sched_config_from_json(j, path ? path : "scheduler defaults", &p->sched);
done:
    cJSON_Delete(j);
    free(path);
    return st;
}

static lm_status load_tokenizers(lm_sd_pipeline *p, const char *dir)
{
    for (int e = 0; e < p->row->n_encoders; e++) {
        char *t = lm_dfs_path(dir, p->row->encoders[e].tokenizer);
        if (!t || !(p->tok[e] = lm_clip_tokenizer_load(t))) {
            free(t);
            return lm_error_status();
        }
        free(t);
    }
    return LM_OK;
}

/* the networks this pipeline runs: a row naming another (a DiT family's
 * row before its network is written) is refused, naming the family */
static lm_status check_networks(const lm_sd_family_row *row, const char *file)
{
    if (row->denoiser != LM_SD_NET_UNET2D || row->vae != LM_SD_NET_AUTOENCODER_KL)
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: %s: its networks are not in this build", file,
                            row->title);
    return LM_OK;
}

/* a component model_index.json names: ["library", "Class"], not absent,
 * null or [null, null] */
static bool present(const cJSON *index, const char *name)
{
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(index, name);
    return c && !cJSON_IsNull(c) && !(cJSON_IsArray(c) && cJSON_IsNull(cJSON_GetArrayItem(c, 0)));
}

/* A DiT family's folder (row): its VAE here, the rest in dit_pipeline.c */
/* file: a transformer single file (models/dit_files.h) the transformer is
 * read from, the rest from dir; NULL: all from the folder dir */
static lm_status load_dit(lm_sd_pipeline *p, const char *dir, const char *mi, const lm_sd_family_row *row,
                          const lm_sd_load_opts *o, const char *file)
{
    cJSON *vcfg = NULL;
    char *vpath = lm_dfs_path(dir, "vae/config.json"), *comp = NULL;
    lm_status st = vpath ? lm_dfs_json(vpath, CONFIG_MAX, false, &vcfg) : lm_error_status();
    p->row = row;
    if (st != LM_OK) goto done;
    bool upcast = false, linear = false;
    /* the VAE config names the latents' channels (an empty object stands in
     * for the UNet config the SD families read them from) */
    cJSON *none = cJSON_CreateObject();
    const cJSON *lc = cJSON_GetObjectItemCaseSensitive(vcfg, "latent_channels");
    if (!none || (cJSON_IsNumber(lc) && !cJSON_AddNumberToObject(none, "in_channels", lc->valuedouble))) {
        cJSON_Delete(none);
        st = lm_error_set(LM_ERR_NOMEM, "%s: out of memory", mi);
        goto done;
    }
    st = read_sizes(p, none, vpath, vcfg, vpath, &upcast, &linear);
    cJSON_Delete(none);
    if (st != LM_OK) goto done;
    p->sample_size = row->sample_size;
    p->vae_dt = p->dt;
    if (!(p->dit = file ? lm_dit_file_load(row, file, dir, mi, o->variant, p->dt, p->dev, o->offload)
                        : lm_dit_pipe_load(row, dir, mi, o->variant, p->dt, p->dev, o->offload)) ||
        !(comp = lm_dfs_path(dir, row->vae_dir)) ||
        !(p->vae = lm_vae_load(comp, o->variant, p->vae_dt, p->dev)))
        st = lm_error_status();
done:
    free(vpath);
    free(comp);
    cJSON_Delete(vcfg);
    return st;
}

static lm_status load_folder(lm_sd_pipeline *p, const char *dir, const lm_sd_load_opts *o)
{
    char *mi = lm_dfs_path(dir, "model_index.json");
    cJSON *index = NULL, *ucfg = NULL, *vcfg = NULL;
    char *upath = NULL, *vpath = NULL, *comp = NULL;
    lm_status st = mi ? lm_dfs_json(mi, CONFIG_MAX, false, &index) : lm_error_status();
    if (st != LM_OK) goto done;
    const char *cls = "";
    if (lm_dfs_str(index, "_class_name", mi, false, "", &cls) != LM_OK) {
        st = lm_error_status();
        goto done;
    }
    int n_enc = present(index, "text_encoder_2") ? 2 : 1;
    bool known = false;
    for (int f = LM_SD_UNKNOWN + 1; f < LM_SD_FAMILY_COUNT; f++) {
        const lm_sd_family_row *r = lm_sd_family_get((lm_sd_family)f);
        known |= r->denoiser == LM_SD_NET_UNET2D && !strncmp(cls, r->pipeline_class, strlen(r->pipeline_class));
    }
    if (!known) {
        /* a DiT family: the class, and FLUX.2-klein's is_distilled */
        const cJSON *dist = cJSON_GetObjectItemCaseSensitive(index, "is_distilled");
        const lm_sd_family_row *row = lm_sd_family_get(lm_sd_family_from_class(cls, cJSON_IsTrue(dist)));
        if (row) st = load_dit(p, dir, mi, row, o, NULL);
        else st = lm_error_set(LM_ERR_UNSUPPORTED, "%s: _class_name \"%s\": only StableDiffusion[XL]"
                               "[Img2Img]Pipeline, ZImagePipeline and Flux2KleinPipeline folders are "
                               "read", mi, cls);
        goto done;
    }
    if (!present(index, "text_encoder")) {
        st = lm_error_set(LM_ERR_UNSUPPORTED, "%s: no text_encoder (SDXL refiner-style folders "
                          "with text_encoder_2 only are not read)", mi);
        goto done;
    }
    upath = lm_dfs_path(dir, "unet/config.json");
    vpath = lm_dfs_path(dir, "vae/config.json");
    if (!upath || !vpath) { st = lm_error_status(); goto done; }
    if ((st = lm_dfs_json(upath, CONFIG_MAX, false, &ucfg)) != LM_OK ||
        (st = lm_dfs_json(vpath, CONFIG_MAX, false, &vcfg)) != LM_OK)
        goto done;
    bool upcast = false, linear = false;
    if ((st = read_sizes(p, ucfg, upath, vcfg, vpath, &upcast, &linear)) != LM_OK) goto done;
    /* the family: the encoders model_index.json names, then the UNet's
     * projections (SD 2.x's are linear) */
    p->row = lm_sd_family_get(lm_sd_family_match(n_enc, linear, -1));
    if (!p->row || strncmp(cls, p->row->pipeline_class, strlen(p->row->pipeline_class))) {
        st = lm_error_set(LM_ERR_UNSUPPORTED, "%s: _class_name \"%s\" with %d text encoder%s: no "
                          "model family has both", mi, cls, n_enc, n_enc == 1 ? "" : "s");
        goto done;
    }
    if ((st = check_networks(p->row, mi)) != LM_OK) goto done;
    if (!p->sample_size) p->sample_size = p->row->sample_size;
    const cJSON *fz = cJSON_GetObjectItemCaseSensitive(index, "force_zeros_for_empty_prompt");
    p->force_zeros = p->row->force_zeros && (!fz || cJSON_IsTrue(fz));
    /* diffusers' SDXL pipelines run an f16 VAE in f32 when its config says
     * force_upcast (SDXL's VAE overflows in f16); its SD 1.x / 2.x pipelines
     * never upcast (their VAE configs say force_upcast too, by default) */
    p->vae_dt = upcast && p->row->vae_upcast && p->dt == LM_F16 ? LM_F32 : p->dt;
    if ((st = load_tokenizers(p, dir)) != LM_OK) goto done;
    for (int i = 0; i < p->row->n_encoders; i++) {
        free(comp);
        if (!(comp = lm_dfs_path(dir, p->row->encoders[i].dir)) ||
            !(p->te[i] = lm_clip_text_load(comp, o->variant, p->dt, p->dev))) {
            st = lm_error_status();
            goto done;
        }
    }
    free(comp);
    if (!(comp = lm_dfs_path(dir, p->row->denoiser_dir)) ||
        !(p->unet = lm_unet_load(comp, o->variant, p->dt, p->dev))) {
        st = lm_error_status();
        goto done;
    }
    free(comp);
    if (!(comp = lm_dfs_path(dir, p->row->vae_dir)) ||
        !(p->vae = lm_vae_load(comp, o->variant, p->vae_dt, p->dev))) {
        st = lm_error_status();
        goto done;
    }
    free(comp);
    comp = lm_dfs_path(dir, "scheduler");
    st = comp ? read_sched(p, comp, o->prediction) : lm_error_status();
done:
    free(mi);
    free(upath);
    free(vpath);
    free(comp);
    cJSON_Delete(index);
    cJSON_Delete(ucfg);
    cJSON_Delete(vcfg);
    return st;
}

/* The tokenizers a single file lacks, in the caller's words for
 * tokenizer_dir (sd_single.h's own message names its options) */
static lm_status no_tokenizer(const lm_sd_pipeline *p, const char *path, const lm_sd_load_opts *o)
{
    const char *opt = o->tokenizer_option ? o->tokenizer_option : "tokenizer = DIR";
    bool two = p->row->n_encoders > 1;
    if (o->tokenizer_dir)
        return lm_error_set(LM_ERR_ARG, "%s: %s has two text encoders and %s is not a diffusers "
                            "folder with tokenizer/ and tokenizer_2/: give %s, a diffusers folder "
                            "of the model", path, p->row->title, o->tokenizer_dir, opt);
    return lm_error_set(LM_ERR_ARG, "%s: a single-file checkpoint carries no tokenizer: give %s, "
                        "a diffusers folder of the %s model (its tokenizer/%s and scheduler/ are "
                        "used)%s", path, opt, p->row->title, two ? ", tokenizer_2/" : "",
                        two ? "" : ", or its tokenizer folder (vocab.json and merges.txt)");
}

/* A single-file checkpoint: sd_single.h gives each component's config and
 * diffusers-named weights (consumed by the _load_from entries); the
 * tokenizers, and the scheduler config when there is one, come from
 * o->tokenizer_dir. */
static lm_status load_single(lm_sd_pipeline *p, const char *path, const lm_sd_load_opts *o)
{
    /* a Z-Image or FLUX.2 transformer: the rest from the folder o->tokenizer_dir */
    const lm_sd_family_row *drow = NULL;
    char *dmi = NULL;
    lm_status dst = lm_dit_file_row(path, o->tokenizer_dir, &drow, &dmi);
    if (dst != LM_OK || drow) {
        if (dst == LM_OK) dst = load_dit(p, o->tokenizer_dir, dmi, drow, o, path);
        free(dmi);
        return dst;
    }
    lm_sd_single_opts so = {0};
    so.prediction_type = o->prediction;
    so.dev = p->dev;
    bool folder = false;
    if (o->tokenizer_dir) {
        /* a diffusers folder (tokenizer/ inside) or one tokenizer folder */
        char *t = lm_dfs_path(o->tokenizer_dir, "tokenizer");
        if (!t) return lm_error_status();
        folder = is_dir(t);
        free(t);
        if (folder) so.config_dir = o->tokenizer_dir;
        else so.tokenizer = o->tokenizer_dir;
    }
    lm_sd_single s;
    memset(&s, 0, sizeof s);
    lm_status st = lm_sd_single_read_opts(path, &so, &s);
    if (st != LM_OK) return st;
    const char *tok[2] = {NULL, NULL};
    lm_sd_component *te[2] = {&s.text_encoder, &s.text_encoder_2};
    p->row = lm_sd_family_get(s.family);   /* the keys told */
    if ((st = check_networks(p->row, path)) != LM_OK) goto done;
    p->force_zeros = p->row->force_zeros;   /* as the release's model_index.json says */
    bool upcast = false, linear;
    if (lm_sd_single_tokenizers(&s, &tok[0], &tok[1]) != LM_OK) {
        st = no_tokenizer(p, path, o);
        goto done;
    }
    if ((st = read_sizes(p, s.unet.config, path, s.vae.config, path, &upcast, &linear)) != LM_OK)
        goto done;
    p->vae_dt = upcast && p->row->vae_upcast && p->dt == LM_F16 ? LM_F32 : p->dt;   /* as for folders */
    if (!p->sample_size) p->sample_size = p->row->sample_size;
    for (int e = 0; e < p->row->n_encoders; e++)
        if (!(p->tok[e] = lm_clip_tokenizer_load(tok[e])) ||
            !(p->te[e] = lm_clip_text_load_from(te[e]->config, &te[e]->weights, path, p->dt, p->dev))) {
            st = lm_error_status();
            goto done;
        }
    if (!(p->unet = lm_unet_load_from(s.unet.config, &s.unet.weights, path, p->dt, p->dev)) ||
        !(p->vae = lm_vae_load_from(s.vae.config, &s.vae.weights, path, p->vae_dt, p->dev))) {
        st = lm_error_status();
        goto done;
    }
    if (s.scheduler) {
        cJSON *j = cJSON_Duplicate(s.scheduler, true);
        if (!j) {
            st = lm_error_set(LM_ERR_NOMEM, "sd pipeline: out of memory");
            goto done;
        }
        if (o->prediction) {
            cJSON_DeleteItemFromObjectCaseSensitive(j, "prediction_type");
            cJSON_AddStringToObject(j, "prediction_type", o->prediction);
        }
        st = lm_sched_config_from_json(j, path, &p->sched);
        cJSON_Delete(j);
    } else {
        st = read_sched(p, NULL, o->prediction);
    }
done:
    lm_sd_single_free(&s);
    return st;
}

static lm_array *generate(lm_sd_pipeline *p, const lm_sd_gen_opts *opts, bool decode);

/* The first image's kernels started at load (lm_sd_load_opts.no_prewarm):
 * a generation at the family's defaults or the size and sampler the caller
 * gives (a prompt of everyday length, batch 1, at most 3 steps: the
 * samplers' first, middle and last steps differ) evaluated in
 * the device's plan mode, which compiles the pipelines each node needs on
 * the backend's threads and runs nothing.  Its output is garbage and is
 * dropped, with any error it ends on (a garbage NaN check, say); nothing it
 * touches is kept (the backend makes no derived data in plan mode, and
 * nothing in the pipeline caches a computed tensor).  Without it the
 * pipelines are met stage by stage -- the text encoder's compile, then the
 * UNet's, then the VAE's -- and each stage waits for its slowest. */
static void prewarm(lm_sd_pipeline *p, const lm_sd_load_opts *o)
{
    const char *e = getenv("LUMEN_PREWARM");
    if (o->no_prewarm || o->offload || (e && !strcmp(e, "0"))) return;
    if (lm_device_plan(p->dev, true) != LM_OK) {   /* the CPU, or no compile threads: nothing to do */
        lm_error_clear();
        return;
    }
    lm_sd_gen_opts g;
    lm_sd_gen_opts_init_for(&g, p);
    /* a prompt of an everyday length: the DiT families' transformers take
     * the prompt's own tokens (SD's CLIP pads to 77 anyway) */
    const char *prompt[1] = {"a photograph of a mountain lake at sunset, trees on the shore, clouds"};
    g.prompts = prompt;
    g.nprompts = 1;
    g.batch = 1;
    if (g.steps > 3) g.steps = 3;
    if (o->prewarm_width > 0) g.width = o->prewarm_width;
    if (o->prewarm_height > 0) g.height = o->prewarm_height;
    if (o->prewarm_sampler) g.sampler = o->prewarm_sampler;
    lm_array_release(generate(p, &g, true));
    lm_device_plan(p->dev, false);
    lm_error_clear();
}

lm_sd_pipeline *lm_sd_pipeline_load(const char *path, const lm_sd_load_opts *opts)
{
    lm_sd_load_opts dflt;
    lm_sd_load_opts_init(&dflt);
    const lm_sd_load_opts *o = opts ? opts : &dflt;
    if (!path || !*path) {
        lm_error_set(LM_ERR_ARG, "sd pipeline: no model path given");
        return NULL;
    }
    lm_sd_pipeline *p = calloc(1, sizeof *p);
    if (!p) {
        lm_error_set(LM_ERR_NOMEM, "sd pipeline: out of memory");
        return NULL;
    }
    p->dev = o->device ? o->device : lm_device_default();
    p->dt = o->dtype == LM_DTYPE_COUNT ? default_dtype(p->dev) : o->dtype;
    if (p->dt != LM_F32 && p->dt != LM_F16 && p->dt != LM_BF16) {
        lm_error_set(LM_ERR_DTYPE, "sd pipeline: dtype %s: expected f32, f16 or bf16",
                     lm_dtype_name(p->dt));
        free(p);
        return NULL;
    }
    set_name(p, path);
    lm_status st;
    struct stat sb;
    if (stat(path, &sb) != 0)
        st = lm_error_set(LM_ERR_IO, "%s: no such file or folder (a diffusers folder with "
                          "model_index.json, or a single-file .safetensors or .gguf checkpoint)", path);
    else if (S_ISDIR(sb.st_mode) && o->tokenizer_dir)   /* refused, not ignored */
        st = lm_error_set(LM_ERR_ARG, "%s is a diffusers folder, which has its own tokenizer: %s "
                          "(%s) is for single-file checkpoints (.safetensors, .gguf)", path,
                          o->tokenizer_option ? o->tokenizer_option : "tokenizer = DIR",
                          o->tokenizer_dir);
    else if (S_ISDIR(sb.st_mode))
        st = load_folder(p, path, o);
    else
        st = load_single(p, path, o);
    if (st == LM_OK && o->embeddings_dir) st = lm_sd_pipeline_load_embeddings(p, o->embeddings_dir);
    if (st == LM_OK && o->vae_tiling) {
        lm_vae_tiling t = lm_vae_get_tiling(p->vae);
        t.mode = (lm_vae_tiling_mode)o->vae_tiling;
        st = lm_vae_set_tiling(p->vae, &t);
    }
    if (st != LM_OK) {
        lm_sd_pipeline_free(p);
        return NULL;
    }
    prewarm(p, o);
    return p;
}

/* ---- text conditioning ---- */

/* One encoder's part for n prompts: SD 1.x/2.x the last hidden state, SDXL
 * the penultimate layer (hidden_states[-2]) and, for the second encoder, the
 * projected pooled output. */
static lm_status encode_ids(lm_sd_pipeline *p, int e, const int32_t *ids, int64_t rows, int64_t L,
                            const int32_t *extra, lm_array *table, int skip, lm_array **hidden,
                            lm_array **pooled)
{
    lm_clip_text_out out;
    lm_status st = lm_clip_text_forward_ex(p->te[e], ids, rows, L, extra, table, &out);
    if (st != LM_OK) return st;
    const lm_sd_encoder *E = &p->row->encoders[e];
    int at = out.nhidden - 1 - skip - E->skip_base, layers = out.nhidden - 1;
    if (at < 0) {
        lm_clip_text_out_free(&out);
        return lm_error_set(LM_ERR_ARG, "encode_prompt: clip_skip %d: %s has %d layers, so clip_skip "
                            "%d at most (diffusers' count; A1111's Clip skip, lumen generate's "
                            "--clip-skip, is one more: %d)", skip, E->dir, layers,
                            layers - E->skip_base, layers - E->skip_base + 1);
    }
    if (!E->final_norm) *hidden = lm_array_retain(out.hidden_states[at]);
    else if (skip || E->skip_base) *hidden = lm_clip_text_final_norm(p->te[e], out.hidden_states[at]);
    else *hidden = lm_array_retain(out.last_hidden_state);
    if (!*hidden) {
        lm_clip_text_out_free(&out);
        return lm_error_status();
    }
    if (pooled) *pooled = out.text_embeds ? lm_array_retain(out.text_embeds) : NULL;
    lm_clip_text_out_free(&out);
    if (E->pooled && pooled && !*pooled) {
        lm_array_release(*hidden);
        return lm_error_set(LM_ERR_FORMAT, "encode_prompt: %s has no text_projection (%s pools its "
                            "projected output)", E->dir, p->row->title);
    }
    return LM_OK;
}

static lm_status encode_one(lm_sd_pipeline *p, int e, int n, const char *const *prompts,
                            int skip, lm_array **hidden, lm_array **pooled)
{
    lm_clip_tokenizer *tok = p->tok[e];
    int64_t L = lm_clip_tokenizer_max_length(tok), got;
    int32_t *ids = malloc(sizeof *ids * (size_t)(L * n));
    if (!ids) return lm_error_set(LM_ERR_NOMEM, "encode_prompt: out of memory");
    for (int i = 0; i < n; i++) {
        const char *t = prompts[i] ? prompts[i] : "";
        if (lm_clip_tokenizer_encode(tok, t, strlen(t), true, ids + (int64_t)i * L, &got, NULL) != LM_OK) {
            free(ids);
            return lm_error_status();
        }
    }
    lm_status st = encode_ids(p, e, ids, n, L, NULL, NULL, skip, hidden, pooled);
    free(ids);
    return st;
}

/* ---- A1111's prompt syntax (models/prompt.h) ---- */

#define CW (LM_PROMPT_CHUNK + 2)

/* z [rows,L,D] times the multipliers, then scaled back to its mean, per row
 * (one chunk of one prompt): A1111's "Original" emphasis */
static lm_array *emphasis(lm_array *z, const float *mults, int64_t rows, int64_t L)
{
    int64_t shape[3] = {rows, L, 1};
    int axes[2] = {1, 2};
    lm_array *zf = lm_cast(z, LM_F32);
    lm_array *m = lm_from_data(3, shape, LM_F32, mults, z->device);
    lm_array *mean0 = zf ? lm_reduce(LM_OP_MEAN, zf, 2, axes, true) : NULL;
    lm_array *zw = zf && m ? lm_binary(LM_OP_MUL, zf, m) : NULL;
    lm_array *mean1 = zw ? lm_reduce(LM_OP_MEAN, zw, 2, axes, true) : NULL;
    lm_array *ratio = mean0 && mean1 ? lm_binary(LM_OP_DIV, mean0, mean1) : NULL;
    lm_array *r = ratio ? lm_binary(LM_OP_MUL, zw, ratio) : NULL;
    lm_array *out = r ? lm_cast(r, z->dtype) : NULL;
    lm_array_release(zf);
    lm_array_release(m);
    lm_array_release(mean0);
    lm_array_release(zw);
    lm_array_release(mean1);
    lm_array_release(ratio);
    lm_array_release(r);
    return out;
}

/* Every encoder's conditioning of n prompts the A1111 way: each prompt's
 * chunks (the most chunks of any prompt and encoder: shorter ones padded
 * with empty chunks, as A1111 pads a batch), encoded as rows of one batch,
 * emphasis applied per chunk, the chunks joined along the sequence;
 * pooled: the first chunk's (A1111's zs[0].pooled). */
static lm_status encode_a1111(lm_sd_pipeline *p, int n, const char *const *prompts, int skip,
                              lm_array **h, lm_array **pool)
{
    int ne = p->row->n_encoders;
    lm_prompt_chunks *c = calloc((size_t)(n * ne), sizeof *c);
    int32_t *ids = NULL, *extra = NULL;
    float *mults = NULL;
    lm_array *table[LM_SD_MAX_ENCODERS] = {NULL};
    if (!c) return lm_error_set(LM_ERR_NOMEM, "encode_prompt: out of memory");
    lm_status st = LM_OK;
    int64_t K = 1;
    for (int e = 0; st == LM_OK && e < ne; e++) {
        if (lm_clip_text_get_config(p->te[e])->max_positions < CW) {
            st = lm_error_set(LM_ERR_ARG, "encode_prompt: %s has %lld positions: A1111's prompt "
                              "chunks need %d (turn the prompt syntax off)", p->row->encoders[e].dir,
                              (long long)lm_clip_text_get_config(p->te[e])->max_positions, CW);
            break;
        }
        for (int i = 0; st == LM_OK && i < n; i++) {
            const char *t = prompts[i] ? prompts[i] : "";
            lm_array *tab = NULL;
            st = lm_prompt_clip_chunks_ti(p->tok[e], t, strlen(t), &p->emb, e, ne,
                                          lm_clip_text_get_config(p->te[e])->hidden_size,
                                          &c[e * n + i], &tab);
            if (tab && !table[e]) table[e] = tab;   /* the same table for every prompt */
            else lm_array_release(tab);
            if (st == LM_OK && c[e * n + i].n > K) K = c[e * n + i].n;
        }
    }
    int64_t rows = (int64_t)n * K;
    if (st == LM_OK && (!(ids = malloc(sizeof *ids * (size_t)(rows * CW))) ||
                        !(mults = malloc(sizeof *mults * (size_t)(rows * CW))) ||
                        !(extra = malloc(sizeof *extra * (size_t)(rows * CW)))))
        st = lm_error_set(LM_ERR_NOMEM, "encode_prompt: out of memory");
    for (int e = 0; st == LM_OK && e < ne; e++) {
        lm_clip_tokenizer *tok = p->tok[e];
        int32_t bos = lm_clip_tokenizer_bos(tok), eos = lm_clip_tokenizer_eos(tok), pad = lm_clip_tokenizer_pad(tok);
        bool weighted = false;
        for (int i = 0; i < n; i++)
            for (int64_t k = 0; k < K; k++) {
                const lm_prompt_chunks *ci = &c[e * n + i];
                int32_t *row = ids + (i * K + k) * CW;
                float *mr = mults + (i * K + k) * CW;
                for (int j = 0; j < CW; j++) {
                    /* an empty chunk: bos, eos, then pad (SD 2.x / SDXL's
                       second tokenizer) or eos */
                    row[j] = k < ci->n ? ci->ids[k * CW + j] : j == 0 ? bos : j == 1 ? eos : pad;
                    mr[j] = k < ci->n ? ci->mults[k * CW + j] : 1.0f;
                    extra[(i * K + k) * CW + j] = k < ci->n && ci->extra ? ci->extra[k * CW + j] : -1;
                    weighted |= mr[j] != 1.0f;
                }
            }
        lm_array *z = NULL, *pl = NULL;
        bool pools_e = p->row->encoders[e].pooled;
        st = encode_ids(p, e, ids, rows, CW, table[e] ? extra : NULL, table[e], skip, &z,
                        pools_e ? &pl : NULL);
        if (st != LM_OK) break;
        if (weighted) {
            lm_array *w = emphasis(z, mults, rows, CW);
            lm_array_release(z);
            if (!(z = w)) {
                lm_array_release(pl);
                st = lm_error_status();
                break;
            }
        }
        int64_t D = z->shape[2], shape[3] = {n, K * CW, D};
        h[e] = lm_reshape(z, 3, shape);
        lm_array_release(z);
        if (!h[e]) {
            lm_array_release(pl);
            st = lm_error_status();
            break;
        }
        if (pl) {
            int64_t P = pl->shape[1], s3[3] = {n, K, P}, s2[2] = {n, P};
            lm_array *r3 = lm_reshape(pl, 3, s3), *first = r3 ? lm_slice(r3, 1, 0, 1, 1) : NULL;
            *pool = first ? lm_reshape(first, 2, s2) : NULL;
            lm_array_release(r3);
            lm_array_release(first);
            lm_array_release(pl);
            if (!*pool) {
                st = lm_error_status();
                break;
            }
        }
    }
    for (int i = 0; i < n * ne; i++) lm_prompt_chunks_free(&c[i]);
    for (int e = 0; e < LM_SD_MAX_ENCODERS; e++) lm_array_release(table[e]);
    free(c);
    free(ids);
    free(mults);
    free(extra);
    return st;
}

/* x * mask, mask[i] = 0 for the NULL prompts: diffusers' zeros for an SDXL
 * negative prompt of None */
static lm_array *zero_rows(lm_array *x, int n, const char *const *prompts)
{
    float *m = malloc(sizeof *m * (size_t)n);
    if (!m) {
        lm_error_set(LM_ERR_NOMEM, "encode_prompt: out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++) m[i] = prompts[i] ? 1.0f : 0.0f;
    int64_t shape[LM_MAX_DIMS] = {n, 1, 1};
    lm_array *mask = lm_from_data(x->ndim, shape, LM_F32, m, x->device);
    free(m);
    lm_array *mc = mask ? lm_cast(mask, x->dtype) : NULL;
    lm_array *r = mc ? lm_binary(LM_OP_MUL, x, mc) : NULL;
    lm_array_release(mask);
    lm_array_release(mc);
    return r;
}

lm_status lm_sd_encode_prompt(lm_sd_pipeline *p, int n, const char *const *prompts,
                              lm_array **embeds, lm_array **pooled)
{
    return lm_sd_encode_prompt_skip(p, n, prompts, 0, embeds, pooled);
}

lm_status lm_sd_encode_prompt_skip(lm_sd_pipeline *p, int n, const char *const *prompts,
                                   int clip_skip, lm_array **embeds, lm_array **pooled)
{
    return lm_sd_encode_prompt_syntax(p, n, prompts, clip_skip, false, embeds, pooled);
}

lm_status lm_sd_encode_prompt_syntax(lm_sd_pipeline *p, int n, const char *const *prompts,
                                     int clip_skip, bool a1111, lm_array **embeds, lm_array **pooled)
{
    *embeds = NULL;
    if (pooled) *pooled = NULL;
    if (p->dit)   /* its conditioning has its own shape: models/dit_pipeline.h */
        return lm_error_set(LM_ERR_ARG, "encode_prompt: %s: use lm_dit_pipe_encode_prompt (Lua's "
                            "pipe:encode_prompt does)", p->row->title);
    if (n < 1) return lm_error_set(LM_ERR_ARG, "encode_prompt: no prompts");
    if (clip_skip < 0) return lm_error_set(LM_ERR_ARG, "encode_prompt: clip_skip %d: expected >= 0", clip_skip);
    const lm_sd_family_row *F = p->row;
    lm_array *h[LM_SD_MAX_ENCODERS] = {NULL}, *pool = NULL, *cat = NULL;
    lm_status st = LM_OK;
    if (a1111) st = encode_a1111(p, n, prompts, clip_skip, h, &pool);
    for (int e = 0; !a1111 && st == LM_OK && e < F->n_encoders; e++)
        st = encode_one(p, e, n, prompts, clip_skip, &h[e], F->encoders[e].pooled ? &pool : NULL);
    if (st != LM_OK) goto fail;
    cat = F->n_encoders > 1 ? lm_concat(F->n_encoders, h, 2) : lm_array_retain(h[0]);
    if (!cat) goto fail;
    bool any_none = false;
    for (int i = 0; i < n; i++) any_none |= prompts[i] == NULL;
    if (p->force_zeros && any_none) {
        lm_array *z = zero_rows(cat, n, prompts), *zp = z && pool ? zero_rows(pool, n, prompts) : NULL;
        bool had_pool = pool != NULL;
        lm_array_release(cat);
        lm_array_release(pool);
        cat = z;
        pool = zp;
        if (!z || (had_pool && !zp)) goto fail;
    }
    *embeds = lm_cast(cat, p->dt);
    if (pooled && pool) *pooled = lm_cast(pool, p->dt);
    if (!*embeds || (pooled && pool && !*pooled)) goto fail;
    for (int e = 0; e < LM_SD_MAX_ENCODERS; e++) lm_array_release(h[e]);
    lm_array_release(cat);
    lm_array_release(pool);
    return LM_OK;
fail:
    st = lm_error_status() != LM_OK ? lm_error_status() : LM_ERR_NOMEM;
    for (int e = 0; e < LM_SD_MAX_ENCODERS; e++) lm_array_release(h[e]);
    lm_array_release(cat);
    lm_array_release(pool);
    lm_array_release(*embeds);
    *embeds = NULL;
    if (pooled) {
        lm_array_release(*pooled);
        *pooled = NULL;
    }
    return st;
}

/* ---- the VAE as the pipeline applies it ---- */

/* latents to the VAE decoder's output [B,3,H,W] f32 in about -1..1, before
 * the postprocess (generate checks it there: the clamp would hide a NaN) */
static lm_array *decode_raw(lm_sd_pipeline *p, lm_array *latents)
{
    if (p->dit) return lm_dit_pipe_decode_raw(p->vae, p->vae_dt, p->row, p->scaling, p->shift, latents);
    lm_array *a = lm_binary_scalar(LM_OP_DIV, latents, p->scaling, false), *b = NULL, *c = NULL,
             *d = NULL, *e = NULL;
    if (a && isfinite(p->shift)) {
        b = lm_binary_scalar(LM_OP_ADD, a, p->shift, false);
        lm_array_release(a);
        a = b;
    }
    if (a) c = lm_cast(a, p->vae_dt);
    if (c) d = lm_vae_decode(p->vae, c);
    if (d) e = lm_cast(d, LM_F32);
    lm_array_release(a);
    lm_array_release(c);
    lm_array_release(d);
    return e;
}

/* diffusers' postprocess: (x / 2 + 0.5).clamp(0, 1) */
lm_array *lm_sd_postprocess(lm_array *e)
{
    lm_array *g = lm_binary_scalar(LM_OP_MUL, e, 0.5, false);
    lm_array *f = g ? lm_binary_scalar(LM_OP_ADD, g, 0.5, false) : NULL;
    lm_array *r = f ? lm_clamp(f, 0, 1) : NULL;
    lm_array_release(f);
    lm_array_release(g);
    return r;
}

lm_array *lm_sd_decode_latents(lm_sd_pipeline *p, lm_array *latents)
{
    lm_array *e = decode_raw(p, latents), *r = e ? lm_sd_postprocess(e) : NULL;
    lm_array_release(e);
    return r;
}

/* image [B,3,H,W] in 0..1 to scaled latents: the mean of the latent
 * distribution, or mean + std * sample when sample is given (diffusers'
 * latent_dist.sample with its generator's draw) */
static lm_array *encode_scaled(lm_sd_pipeline *p, lm_array *image, lm_array *sample)
{
    /* diffusers' preprocess: 2x - 1 */
    lm_array *a = lm_binary_scalar(LM_OP_MUL, image, 2, false);
    lm_array *b = a ? lm_binary_scalar(LM_OP_SUB, a, 1, false) : NULL;
    lm_array *c = b ? lm_cast(b, p->vae_dt) : NULL, *mean = NULL, *logvar = NULL;
    lm_array_release(a);
    lm_array_release(b);
    if (!c || lm_vae_encode(p->vae, c, &mean, &logvar) != LM_OK) {
        lm_array_release(c);
        return NULL;
    }
    lm_array_release(c);
    lm_array *m = lm_cast(mean, LM_F32), *s = NULL, *r = NULL;
    lm_array_release(mean);
    if (m && sample) {
        /* std = exp(0.5 * logvar) (the encoder already clamps logvar to [-30, 20]) */
        lm_array *lv = lm_cast(logvar, LM_F32), *h = lv ? lm_binary_scalar(LM_OP_MUL, lv, 0.5, false) : NULL;
        lm_array *sd = h ? lm_unary(LM_OP_EXP, h) : NULL, *d = sd ? lm_binary(LM_OP_MUL, sd, sample) : NULL;
        lm_array *ms = d ? lm_binary(LM_OP_ADD, m, d) : NULL;
        lm_array_release(lv);
        lm_array_release(h);
        lm_array_release(sd);
        lm_array_release(d);
        lm_array_release(m);
        m = ms;
    }
    lm_array_release(logvar);
    if (m && isfinite(p->shift)) {
        s = lm_binary_scalar(LM_OP_SUB, m, p->shift, false);
        lm_array_release(m);
        m = s;
    }
    if (m) r = lm_binary_scalar(LM_OP_MUL, m, p->scaling, false);
    lm_array_release(m);
    return r;
}

lm_array *lm_sd_encode_image(lm_sd_pipeline *p, lm_array *image)
{
    if (p->row->packed) {
        lm_error_set(LM_ERR_UNSUPPORTED, "encode_image: %s: its latents are packed and normalized by the "
                     "VAE's statistics; not read yet", p->row->title);
        return NULL;
    }
    return encode_scaled(p, image, NULL);
}

/* ---- A1111's names ---- */

const char *lm_sd_sampler_a1111(const char *name, const char **schedule)
{
    const lm_sampler_info *r = lm_sampler_find(name);
    lm_error_clear();
    if (schedule) *schedule = r ? r->a1111_schedule : NULL;
    return r ? r->a1111 : NULL;
}

/* ---- generation ---- */

/* A batch runs in lanes: each lane is one image (its CFG pair) whose text
 * encoder, UNet and VAE graphs are exactly those of a run of that image
 * alone, all lanes evaluated together.  One lane for the whole batch
 * (stacked) is one UNet call over every image, but the CPU's GEMM cuts a
 * product of stacked rows by their number (docs/CPU_MATH.md,
 * "Determinism"), so its bits would depend on the batch size.  On Vulkan
 * a stacked lane's nodes carry its image count (lm_share_set in per_lane
 * and prepare), and the kernel choices that depend on a problem's size
 * are made from one image's part (backends/vulkan/choice.h): there a
 * stacked batch gives the bytes of single runs. */
typedef struct gen {
    lm_sd_pipeline *p;
    const lm_sd_gen_opts *o;
    int B, lanes, per;        /* images, lanes, images per lane */
    bool cfg;
    uint64_t *seeds;
    int64_t shape[4];         /* [B, C, h, w] of the latents */
    int64_t size_h, size_w;   /* SDXL's time_ids: height / width as given (diffusers'
                                 arguments), else the latents' */
    lm_array **ctx, **pooled; /* per lane: [2per or per, L, D], SDXL [.., P] */
    lm_array **ctx_c;         /* per lane: NULL, or the prompts' rows [per, Lc, D] when
                                 their chunks outnumber the negatives' or the reverse
                                 (A1111's prompt syntax): ctx is then the negatives'
                                 [per, Lu, D] and the UNet runs on each apart */
    lm_array *tids;           /* SDXL: [2per or per, 6] */
    /* per-image sums [B] of each stage's output, evaluated with it: a NaN
     * or an infinity there makes the sum one (see stage_error) */
    lm_array *start_sums, *decode_sums;
    lm_array **step_sums;     /* one per sampler step */
    int nsteps;
    /* inpainting (o->mask, models/sd_inpaint.h) */
    lm_sd_mask mask;          /* H = 0: none */
    bool nine;                /* the UNet takes the mask and masked latents (9 channels) */
    lm_array *mask_lat;       /* [1,1,h,w] the binary mask at the latents' size */
    lm_array *inp_x0, *inp_noise; /* 4-channel UNets: the init latents and draw 0 [B,C,h,w] */
    lm_array **inp_cond;      /* 9-channel: per lane [per, C+1, h, w] (mask, masked
                                 latents) in the UNet's dtype */
} gen;

static lm_array *concat_lanes(const gen *g, lm_array **parts)
{
    return g->lanes == 1 ? lm_array_retain(parts[0]) : lm_concat(g->lanes, parts, 0);
}

void lm_sd_noise_slerp(double val, const float *low, const float *high, int64_t C, int64_t H,
                       int64_t W, float *out)
{
    /* A1111: low_norm = low / low.norm(dim=1, keepdim=True) (same for high),
     * dot = (low_norm * high_norm).sum(1); dot.mean() > 0.9995: the lerp
     * (its weights as A1111 writes them); else per column omega = acos(dot),
     * (sin((1-val) omega) low + sin(val omega) high) / sin(omega) */
    double mean = 0;
    for (int64_t c = 0; c < C; c++)
        for (int64_t w = 0; w < W; w++) {
            double ll = 0, hh = 0, lh = 0;
            for (int64_t h = 0; h < H; h++) {
                double a = low[(c * H + h) * W + w], b = high[(c * H + h) * W + w];
                ll += a * a;
                hh += b * b;
                lh += a * b;
            }
            mean += lh / (sqrt(ll) * sqrt(hh));
        }
    mean /= (double)(C * W);
    if (mean > 0.9995) {
        for (int64_t i = 0; i < C * H * W; i++) out[i] = (float)(low[i] * val + high[i] * (1 - val));
        return;
    }
    for (int64_t c = 0; c < C; c++)
        for (int64_t w = 0; w < W; w++) {
            double ll = 0, hh = 0, lh = 0;
            for (int64_t h = 0; h < H; h++) {
                double a = low[(c * H + h) * W + w], b = high[(c * H + h) * W + w];
                ll += a * a;
                hh += b * b;
                lh += a * b;
            }
            double dot = lh / (sqrt(ll) * sqrt(hh));
            dot = dot > 1 ? 1 : dot < -1 ? -1 : dot;
            double om = acos(dot), so = sin(om);
            double wl = sin((1 - val) * om) / so, wh = sin(val * om) / so;
            for (int64_t h = 0; h < H; h++) {
                int64_t at = (c * H + h) * W + w;
                out[at] = (float)(wl * low[at] + wh * high[at]);
            }
        }
}

static int64_t floordiv2(int64_t a) { return a >= 0 ? a / 2 : -((-a + 1) / 2); }

void lm_sd_noise_paste(const float *small, int64_t sh, int64_t sw, float *full, int64_t C, int64_t H,
                       int64_t W)
{
    /* A1111: dx = (W - sw) // 2, w = sw if dx >= 0 else sw + 2 * dx,
     * tx = max(dx, 0), then dx = max(-dx, 0); the same for y;
     * x[:, ty:ty+h, tx:tx+w] = noise[:, dy:dy+h, dx:dx+w] */
    int64_t dx = floordiv2(W - sw), dy = floordiv2(H - sh);
    int64_t w = dx >= 0 ? sw : sw + 2 * dx, h = dy >= 0 ? sh : sh + 2 * dy;
    int64_t tx = dx < 0 ? 0 : dx, ty = dy < 0 ? 0 : dy;
    dx = dx < 0 ? -dx : 0;
    dy = dy < 0 ? -dy : 0;
    /* Python's slices clip at the ends */
    if (w > W - tx) w = W - tx;
    if (w > sw - dx) w = sw - dx;
    if (h > H - ty) h = H - ty;
    if (h > sh - dy) h = sh - dy;
    for (int64_t c = 0; c < C; c++)
        for (int64_t r = 0; r < h; r++)
            for (int64_t x = 0; x < w; x++)
                full[(c * H + ty + r) * W + tx + x] = small[(c * sh + dy + r) * sw + dx + x];
}

/* image i's initial noise: n [1,C,h,w] (its seed's) slerped toward its
 * subseed's, drawn at seed_resize_from's latents and pasted into n when
 * that is another size (A1111's ImageRNG.first) */
static lm_array *vary(const gen *g, int i, lm_array *n)
{
    const lm_sd_gen_opts *o = g->o;
    int64_t one[4] = {1, g->shape[1], g->shape[2], g->shape[3]}, at[4] = {1, g->shape[1], 0, 0};
    int64_t vs = g->p->vae_scale;
    bool resize = o->seed_resize_w > 0 && o->seed_resize_h > 0 &&
                  (o->seed_resize_h / vs != one[2] || o->seed_resize_w / vs != one[3]);
    at[2] = resize ? o->seed_resize_h / vs : one[2];
    at[3] = resize ? o->seed_resize_w / vs : one[3];
    uint64_t seed = g->seeds[i], sub = o->subseeds ? o->subseeds[i] : o->subseed + (uint64_t)i;
    size_t count = (size_t)(at[1] * at[2] * at[3]), full = (size_t)(one[1] * one[2] * one[3]);
    float *lo = malloc(sizeof *lo * (count * 3 + full));
    lm_array *ln = NULL, *hi = NULL, *r = NULL;
    if (!lo) {
        lm_error_set(LM_ERR_NOMEM, "generate: out of memory");
        return NULL;
    }
    float *hv = lo + count, *mix = hv + count, *out = mix + count;
    if (!(ln = resize ? lm_diffusion_noise(seed, 0, 4, at, LM_F32, g->p->dev) : lm_array_retain(n)) ||
        lm_array_read(ln, lo, LM_F32) != LM_OK)
        goto done;
    if (o->subseed_strength != 0) {
        if (!(hi = lm_diffusion_noise(sub, 0, 4, at, LM_F32, g->p->dev)) || lm_array_read(hi, hv, LM_F32) != LM_OK)
            goto done;
        lm_sd_noise_slerp(o->subseed_strength, lo, hv, at[1], at[2], at[3], mix);
    } else memcpy(mix, lo, sizeof *lo * count);
    if (resize) {
        if (lm_array_read(n, out, LM_F32) != LM_OK) goto done;
        lm_sd_noise_paste(mix, at[2], at[3], out, one[1], one[2], one[3]);
    } else out = mix;
    r = lm_from_data(4, one, LM_F32, out, g->p->dev);
done:
    lm_array_release(ln);
    lm_array_release(hi);
    free(lo);
    return r;
}

/* Draw k of the batch: the test hook's, else each image's own seed. */
static lm_array *noise(const gen *g, int k)
{
    if (g->o->noise) {
        lm_array *n = NULL;
        if (g->o->noise(g->o->noise_ctx, k, 4, g->shape, &n) != LM_OK) return NULL;
        if (n) {
            lm_array *c = lm_cast(n, LM_F32);
            lm_array_release(n);
            return c;
        }
    }
    int64_t one[4] = {1, g->shape[1], g->shape[2], g->shape[3]};
    lm_array **parts = calloc((size_t)g->B, sizeof *parts);
    if (!parts) {
        lm_error_set(LM_ERR_NOMEM, "generate: out of memory");
        return NULL;
    }
    lm_array *r = NULL;
    int made = 0;
    for (; made < g->B; made++)
        if (!(parts[made] = lm_diffusion_noise(g->seeds[made], (uint64_t)k, 4, one, LM_F32, g->p->dev)))
            goto done;
    if (k == 0 && (g->o->subseed_strength != 0 || (g->o->seed_resize_w > 0 && g->o->seed_resize_h > 0)))
        for (int i = 0; i < g->B; i++) {
            lm_array *v = vary(g, i, parts[i]);
            if (!v) goto done;
            lm_array_release(parts[i]);
            parts[i] = v;
        }
    r = g->B == 1 ? lm_array_retain(parts[0]) : lm_concat(g->B, parts, 0);
done:
    for (int i = 0; i < made; i++) lm_array_release(parts[i]);
    free(parts);
    return r;
}

/* whether an encoder's pooled output conditions the UNet (SDXL) */
static bool pools(const lm_sd_pipeline *p)
{
    for (int e = 0; e < p->row->n_encoders; e++)
        if (p->row->encoders[e].pooled) return true;
    return false;
}

/* the most chunks A1111's syntax makes of any of n texts (NULL: "") with
 * any encoder, or -1 with the error set */
static int64_t most_chunks(lm_sd_pipeline *p, int n, const char *const *texts)
{
    int64_t k = 1;
    for (int e = 0; e < p->row->n_encoders; e++)
        for (int i = 0; i < n; i++) {
            const char *t = texts[i] ? texts[i] : "";
            lm_prompt_chunks c;
            if (lm_prompt_clip_chunks_ti(p->tok[e], t, strlen(t), &p->emb, e, p->row->n_encoders,
                                         lm_clip_text_get_config(p->te[e])->hidden_size, &c,
                                         NULL) != LM_OK)
                return -1;
            if (c.n > k) k = c.n;
            lm_prompt_chunks_free(&c);
        }
    return k;
}

/* Lane l's negatives and prompts encoded apart (their chunk counts differ):
 * ctx[l] the negatives', ctx_c[l] the prompts', pooled[l] both joined */
static lm_status conditioning_apart(gen *g, int l, const char **texts)
{
    int per = g->per;
    const lm_sd_gen_opts *o = g->o;
    lm_array *pu = NULL, *pc = NULL;
    bool pool = pools(g->p);
    lm_status st = lm_sd_encode_prompt_syntax(g->p, per, texts, o->clip_skip, true, &g->ctx[l],
                                              pool ? &pu : NULL);
    if (st == LM_OK)
        st = lm_sd_encode_prompt_syntax(g->p, per, texts + per, o->clip_skip, true, &g->ctx_c[l],
                                        pool ? &pc : NULL);
    if (st == LM_OK && pool) {
        lm_array *two[2] = {pu, pc};
        if (!(g->pooled[l] = lm_concat(2, two, 0))) st = lm_error_status();
    }
    lm_array_release(pu);
    lm_array_release(pc);
    return st;
}

/* Lane l's conditioning: [2per,...] (negatives first, as diffusers
 * concatenates them) with CFG, [per,...] without. */
static lm_status conditioning(gen *g, int l)
{
    int per = g->per, n = g->cfg ? 2 * per : per;
    const char **texts = calloc((size_t)n, sizeof *texts);
    if (!texts) return lm_error_set(LM_ERR_NOMEM, "generate: out of memory");
    const lm_sd_gen_opts *o = g->o;
    for (int j = 0; j < per; j++) {
        int i = l * per + j;
        const char *pos = o->nprompts > 1 ? o->prompts[i] : o->nprompts == 1 ? o->prompts[0] : "";
        const char *neg = o->nnegatives > 1 ? o->negatives[i] : o->nnegatives == 1 ? o->negatives[0] : NULL;
        if (g->cfg) texts[j] = neg, texts[per + j] = pos;
        else texts[j] = pos;
    }
    /* A1111 runs the UNet on the prompts and the negatives apart when their
       chunk counts differ (its default, pad_cond_uncond off) */
    if (g->cfg && !o->plain_prompt) {
        int64_t ku = most_chunks(g->p, per, texts), kc = ku < 0 ? -1 : most_chunks(g->p, per, texts + per);
        if (ku < 0 || kc < 0) {
            free(texts);
            return lm_error_status();
        }
        if (ku != kc) {
            lm_status st = conditioning_apart(g, l, texts);
            free(texts);
            return st;
        }
    }
    lm_status st = lm_sd_encode_prompt_syntax(g->p, n, texts, o->clip_skip, !o->plain_prompt,
                                              &g->ctx[l], pools(g->p) ? &g->pooled[l] : NULL);
    free(texts);
    return st;
}

/* SDXL's add_time_ids: original size, crop top-left (0, 0), target size,
 * each (height, width), the same for every row */
static lm_array *time_ids(const gen *g, int n, lm_dtype dt)
{
    float *v = malloc(sizeof *v * 6 * (size_t)n);
    if (!v) {
        lm_error_set(LM_ERR_NOMEM, "generate: out of memory");
        return NULL;
    }
    float H = (float)g->size_h, W = (float)g->size_w;
    for (int i = 0; i < n; i++) {
        float row[6] = {H, W, 0, 0, H, W};
        memcpy(v + 6 * i, row, sizeof row);
    }
    int64_t shape[2] = {n, 6};
    lm_array *a = lm_from_data(2, shape, LM_F32, v, g->p->dev);
    free(v);
    lm_array *r = a ? lm_cast(a, dt) : NULL;
    lm_array_release(a);
    return r;
}

/* rows [a, b) of x (x itself when that is all of it; NULL stays NULL) */
static lm_array *rows(lm_array *x, int64_t a, int64_t b)
{
    if (!x) return NULL;
    return a == 0 && b == x->shape[0] ? lm_array_retain(x) : lm_slice(x, 0, a, b, 1);
}

/* the UNet on lane l's negatives and prompts apart (ctx_c), joined:
 * A1111's two calls when their sequence lengths differ */
static lm_array *unet_apart(const gen *g, int l, lm_array *xin, lm_array *t)
{
    int64_t per = g->per;
    lm_array *outs[2] = {NULL, NULL}, *r = NULL;
    for (int h = 0; h < 2; h++) {
        lm_array *x = rows(xin, h * per, (h + 1) * per), *th = rows(t, h * per, (h + 1) * per);
        lm_array *pl = rows(g->pooled[l], h * per, (h + 1) * per), *ti = rows(g->tids, h * per, (h + 1) * per);
        if (x && th && (pl || !g->pooled[l]) && (ti || !g->tids))
            outs[h] = lm_unet_forward(g->p->unet, x, th, h ? g->ctx_c[l] : g->ctx[l], pl, ti);
        lm_array_release(x);
        lm_array_release(th);
        lm_array_release(pl);
        lm_array_release(ti);
    }
    if (outs[0] && outs[1]) r = lm_concat(2, outs, 0);
    lm_array_release(outs[0]);
    lm_array_release(outs[1]);
    return r;
}

/* A 9-channel UNet's input: the scaled latents [n, C, h, w] (released)
 * with lane l's mask and masked-image latents after them on the channel axis,
 * for both halves of CFG (diffusers' torch.cat([latent_model_input, mask,
 * masked_image_latents], dim=1)) */
static lm_array *with_cond(const gen *g, int l, lm_array *xin)
{
    lm_array *c = g->inp_cond[l], *two[2] = {c, c};
    lm_array *cc = g->cfg ? lm_concat(2, two, 0) : lm_array_retain(c);
    lm_array *parts[2] = {xin, cc};
    lm_array *r = cc ? lm_concat(2, parts, 1) : NULL;
    lm_array_release(cc);
    lm_array_release(xin);
    return r;
}

/* Lane l's UNet call, guided: u + cfg * (c - u).  x: the lane's latents.
 * New reference, lazy, f32. */
static lm_array *denoise_lane(const gen *g, lm_sampler *s, int i, lm_array *x, int l)
{
    lm_sd_pipeline *p = g->p;
    int per = g->per, n = g->cfg ? 2 * per : per;
    lm_array *xs = lm_sampler_scale_input(s, x, i), *xx = NULL, *xin = NULL, *t = NULL,
             *out = NULL, *o32 = NULL, *r = NULL;
    if (!xs) return NULL;
    lm_array *two[2] = {xs, xs};
    xx = g->cfg ? lm_concat(2, two, 0) : lm_array_retain(xs);
    if (xx) xin = lm_cast(xx, p->dt);
    if (xin && g->inp_cond) xin = with_cond(g, l, xin);
    int64_t tn = n;
    if (xin) t = lm_full(1, &tn, lm_sampler_timestep(s, i), LM_F32, p->dev);
    if (t && g->ctx_c[l]) out = unet_apart(g, l, xin, t);
    else if (t) out = lm_unet_forward(p->unet, xin, t, g->ctx[l], g->pooled[l], g->tids);
    if (out) o32 = lm_cast(out, LM_F32);
    if (o32 && !g->cfg) r = lm_array_retain(o32);
    else if (o32) {
        lm_array *u = lm_slice(o32, 0, 0, per, 1), *c = lm_slice(o32, 0, per, 2 * per, 1);
        lm_array *d = u && c ? lm_binary(LM_OP_SUB, c, u) : NULL;
        lm_array *gd = d ? lm_binary_scalar(LM_OP_MUL, d, g->o->cfg, false) : NULL;
        if (gd) r = lm_binary(LM_OP_ADD, u, gd);
        lm_array_release(u);
        lm_array_release(c);
        lm_array_release(d);
        lm_array_release(gd);
    }
    lm_array_release(xs);
    lm_array_release(xx);
    lm_array_release(xin);
    lm_array_release(t);
    lm_array_release(out);
    lm_array_release(o32);
    return r;
}

/* f(lane's rows of x) for every lane, concatenated: the batch's result */
typedef lm_array *(*lane_fn)(const gen *g, lm_array *x, int l, void *ctx);

static lm_array *per_lane(const gen *g, lm_array *x, lane_fn f, void *ctx)
{
    lm_array **parts = calloc((size_t)g->lanes, sizeof *parts), *r = NULL;
    if (!parts) {
        lm_error_set(LM_ERR_NOMEM, "generate: out of memory");
        return NULL;
    }
    int l = 0;
    for (; l < g->lanes; l++) {
        lm_array *lx = g->lanes == 1 ? lm_array_retain(x) : lm_slice(x, 0, l * g->per, (l + 1) * g->per, 1);
        /* a lane of per images stacked: its nodes choose their kernels as
         * one image's (lm_share_set), so a stacked batch repeats the bytes
         * of single runs */
        int was = lm_share_set(g->per);
        parts[l] = lx ? f(g, lx, l, ctx) : NULL;
        lm_share_set(was);
        lm_array_release(lx);
        if (!parts[l]) break;
    }
    if (l == g->lanes) r = concat_lanes(g, parts);
    for (int j = 0; j < l; j++) lm_array_release(parts[j]);
    free(parts);
    return r;
}

typedef struct step_ctx { lm_sampler *s; int i; } step_ctx;

static lm_array *lane_denoise(const gen *g, lm_array *x, int l, void *ctx)
{
    step_ctx *c = ctx;
    return denoise_lane(g, c->s, c->i, x, l);
}

static lm_array *lane_decode(const gen *g, lm_array *x, int l, void *ctx)
{
    (void)l;
    (void)ctx;
    return decode_raw(g->p, x);
}

static lm_array *lane_encode(const gen *g, lm_array *img, int l, void *ctx)
{
    lm_array *sample = ctx, *sl = NULL;
    if (sample && g->lanes > 1 && !(sl = lm_slice(sample, 0, l * g->per, (l + 1) * g->per, 1)))
        return NULL;
    lm_array *r = encode_scaled(g->p, img, sl ? sl : sample);
    lm_array_release(sl);
    return r;
}

/* The init image as a batch [B,3,H,W] f32 */
static lm_array *init_batch(const gen *g)
{
    lm_array *im = g->o->init;
    if (im->ndim == 3) {
        lm_array *u = lm_unsqueeze(im, 0), *r = NULL;
        if (!u) return NULL;
        if (g->B == 1) r = lm_cast(u, LM_F32);
        else {
            int64_t shape[4] = {g->B, u->shape[1], u->shape[2], u->shape[3]};
            lm_array *b = lm_broadcast_to(u, 4, shape);
            r = b ? lm_cast(b, LM_F32) : NULL;
            lm_array_release(b);
        }
        lm_array_release(u);
        return r;
    }
    return lm_cast(im, LM_F32);
}

/* The batch img [B,3,H,W] encoded to latents; the test hook may give
 * diffusers' latent_dist.sample draw (k = -1: the init image, -2: the masked
 * image), else the mean. */
static lm_array *encode_batch(const gen *g, lm_array *img, int k)
{
    const lm_sd_gen_opts *o = g->o;
    lm_array *sample = NULL;
    if (o->noise) {
        lm_array *n = NULL;
        if (o->noise(o->noise_ctx, k, 4, g->shape, &n) != LM_OK) return NULL;
        sample = n ? lm_cast(n, LM_F32) : NULL;
        lm_array_release(n);
        if (n && !sample) return NULL;
    }
    lm_array *r = per_lane(g, img, lane_encode, sample);
    lm_array_release(sample);
    return r;
}

/* Inpainting's start (diffusers' prepare_latents and prepare_mask_latents):
 * strength 1 is pure noise times init_noise_sigma, below it the init latents
 * noised; a 4-channel UNet keeps the init latents and the noise for the
 * blend after each step, a 9-channel one gets the mask and the masked
 * image's latents per lane. */
static lm_array *inpaint_start(gen *g, lm_sampler *s)
{
    const lm_sd_gen_opts *o = g->o;
    lm_sd_pipeline *p = g->p;
    bool full = o->strength == 1.0;
    lm_array *img = init_batch(g), *x0 = NULL, *nz = NULL, *x = NULL, *bin = NULL, *mi = NULL,
             *ml = NULL;
    if (!img) return NULL;
    if ((!g->nine || !full) && !(x0 = encode_batch(g, img, -1))) goto fail;
    if (!(nz = noise(g, 0))) goto fail;
    x = full ? lm_binary_scalar(LM_OP_MUL, nz, lm_sampler_init_sigma(s), false) : lm_sampler_add_noise(s, x0, nz);
    if (!x || !(g->mask_lat = lm_sd_mask_latents(&g->mask, g->shape[2], g->shape[3], p->dev))) goto fail;
    if (!g->nine) {
        g->inp_x0 = x0;
        g->inp_noise = nz;
        lm_array_release(img);
        return x;
    }
    if (!(bin = lm_sd_mask_pixels(&g->mask, false, p->dev)) || !(mi = lm_sd_inpaint_masked_image(img, bin)) ||
        !(ml = encode_batch(g, mi, -2)))
        goto fail;
    if (!(g->inp_cond = calloc((size_t)g->lanes, sizeof *g->inp_cond))) {
        lm_error_set(LM_ERR_NOMEM, "generate: out of memory");
        goto fail;
    }
    int64_t ms[4] = {g->per, 1, g->shape[2], g->shape[3]};
    lm_array *mb = lm_broadcast_to(g->mask_lat, 4, ms);
    for (int l = 0; mb && l < g->lanes; l++) {
        lm_array *rl = rows(ml, (int64_t)l * g->per, (int64_t)(l + 1) * g->per);
        lm_array *parts[2] = {mb, rl}, *c = rl ? lm_concat(2, parts, 1) : NULL;
        g->inp_cond[l] = c ? lm_cast(c, p->dt) : NULL;
        lm_array_release(rl);
        lm_array_release(c);
        if (!g->inp_cond[l]) break;
    }
    bool ok = mb && g->inp_cond[g->lanes - 1];
    lm_array_release(mb);
    if (!ok || lm_eval(g->inp_cond, g->lanes) != LM_OK) goto fail;
    lm_array_release(img);
    lm_array_release(x0);
    lm_array_release(nz);
    lm_array_release(bin);
    lm_array_release(mi);
    lm_array_release(ml);
    return x;
fail:
    lm_array_release(img);
    lm_array_release(x0);
    lm_array_release(nz);
    lm_array_release(x);
    lm_array_release(bin);
    lm_array_release(mi);
    lm_array_release(ml);
    return NULL;
}

/* A 4-channel UNet's masked step (diffusers' init_latents_proper): outside
 * the mask, the init latents noised to the next step's timestep, or the init
 * latents themselves after the last step.  x is released. */
static lm_array *inpaint_keep(const gen *g, lm_sampler *s, int i, int n, lm_array *x)
{
    lm_array *keep = i + 1 < n ? lm_sampler_add_noise_at(s, g->inp_x0, g->inp_noise, i + 1)
                               : lm_array_retain(g->inp_x0);
    lm_array *r = keep ? lm_sd_inpaint_blend(x, keep, g->mask_lat) : NULL;
    lm_array_release(keep);
    lm_array_release(x);
    return r;
}

/* The starting latents: noise (or the given latents) times init_noise_sigma;
 * img2img: the init image's latents noised to the first kept timestep. */
static lm_array *start_latents(gen *g, lm_sampler *s)
{
    const lm_sd_gen_opts *o = g->o;
    if (g->mask.H) return inpaint_start(g, s);
    if (o->init) {
        lm_array *img = init_batch(g), *x0 = img ? encode_batch(g, img, -1) : NULL;
        lm_array_release(img);
        lm_array *nz = x0 ? noise(g, 0) : NULL, *r = nz ? lm_sampler_add_noise(s, x0, nz) : NULL;
        lm_array_release(x0);
        lm_array_release(nz);
        return r;
    }
    if (o->init_latents) {
        lm_array *x0 = lm_cast(o->init_latents, LM_F32);
        lm_array *nz = x0 ? noise(g, 0) : NULL, *r = nz ? lm_sampler_add_noise(s, x0, nz) : NULL;
        lm_array_release(x0);
        lm_array_release(nz);
        return r;
    }
    lm_array *x = o->latents ? lm_cast(o->latents, LM_F32) : noise(g, 0);
    lm_array *r = x ? lm_binary_scalar(LM_OP_MUL, x, lm_sampler_init_sigma(s), false) : NULL;
    lm_array_release(x);
    return r;
}

/* every seed one that can be given back (family.h's range): a batch from
 * one seed must not run past it */
static lm_status check_seeds(const lm_sd_gen_opts *o)
{
    const lm_sd_option *r = lm_sd_option_get(LM_SD_OPT_SEED);
    for (int i = 0; o->seeds && i < o->batch; i++)
        if (o->seeds[i] > (uint64_t)r->ihi)
            return lm_error_set(LM_ERR_ARG, "generate: seed %llu (image %d): expected a whole number "
                                "from 0 to %lld", (unsigned long long)o->seeds[i], i + 1,
                                (long long)r->ihi);
    if (o->seeds) return LM_OK;
    if (o->seed > (uint64_t)r->ihi)
        return lm_error_set(LM_ERR_ARG, "generate: seed %llu: expected a whole number from 0 to %lld",
                            (unsigned long long)o->seed, (long long)r->ihi);
    return lm_sd_seeds_check("generate", "seed", "batch", (int64_t)o->seed, o->batch);
}

lm_status lm_sd_gen_opts_check(const lm_sd_gen_opts *o)
{
    /* the ranges of models/family.h, the ones the CLI and Lua check with */
    if (lm_sd_option_check_int(LM_SD_OPT_BATCH, "generate", NULL, o->batch) ||
        lm_sd_option_check_int(LM_SD_OPT_STEPS, "generate", NULL, o->steps) ||
        lm_sd_option_check_num(LM_SD_OPT_CFG, "generate", NULL, o->cfg) ||
        (o->width && lm_sd_option_check_int(LM_SD_OPT_SIZE, "generate", "width", o->width)) ||
        (o->height && lm_sd_option_check_int(LM_SD_OPT_SIZE, "generate", "height", o->height)))
        return lm_error_status();
    if (check_seeds(o) != LM_OK) return lm_error_status();
    if (o->nprompts > 1 && o->nprompts != o->batch)
        return lm_error_set(LM_ERR_ARG, "generate: %d prompts for a batch of %d", o->nprompts, o->batch);
    if (o->nnegatives > 1 && o->nnegatives != o->batch)
        return lm_error_set(LM_ERR_ARG, "generate: %d negative prompts for a batch of %d",
                            o->nnegatives, o->batch);
    return LM_OK;
}

static lm_status check_gen(gen *g)
{
    const lm_sd_gen_opts *o = g->o;
    lm_sd_pipeline *p = g->p;
    if (lm_sd_gen_opts_check(o) != LM_OK ||
        lm_sd_option_check_int(LM_SD_OPT_CLIP_SKIP, "generate", NULL, o->clip_skip) != LM_OK)
        return lm_error_status();
    if (o->nrefs)
        return lm_error_set(LM_ERR_ARG, "generate: %d reference image%s: %s takes none (they are "
                            "FLUX.2-klein's editing); an init image (img2img) starts from one", o->nrefs,
                            o->nrefs == 1 ? "" : "s", p->row->title);
    g->B = o->batch;
    g->lanes = o->stacked ? 1 : g->B;
    g->per = g->B / g->lanes;
    g->cfg = o->cfg > 1;
    int64_t H = o->height, W = o->width, C = p->latent_channels;
    if (!(o->subseed_strength >= 0 && o->subseed_strength <= 1))
        return lm_error_set(LM_ERR_ARG, "generate: variation strength %g: expected a number from 0 "
                            "to 1", o->subseed_strength);
    if (o->subseed_strength != 0) {
        const lm_sd_option *r = lm_sd_option_get(LM_SD_OPT_SEED);
        for (int i = 0; i < g->B; i++) {
            uint64_t sub = o->subseeds ? o->subseeds[i] : o->subseed + (uint64_t)i;
            if (sub > (uint64_t)r->ihi || (!o->subseeds && sub < o->subseed))
                return lm_error_set(LM_ERR_ARG, "generate: variation seed %llu (image %d): expected a "
                                    "whole number from 0 to %lld", (unsigned long long)sub, i + 1,
                                    (long long)r->ihi);
        }
    }
    if (o->init && o->init_latents)
        return lm_error_set(LM_ERR_ARG, "generate: an init image and init latents: give one");
    if (o->mask && !o->init)
        return lm_error_set(LM_ERR_ARG, "generate: a mask without an init image: inpainting repaints "
                            "the mask's white part of an init image (--init; Lua init=)");
    if (o->inpaint_crop && !o->mask)
        return lm_error_set(LM_ERR_ARG, "generate: inpainting only the masked area (inpaint_full_res) "
                            "without a mask: give one (--mask; Lua mask=)");
    if (p->unet_in != C && !o->mask)
        return lm_error_set(LM_ERR_ARG, "generate: %s: its UNet takes %lld input channels (an "
                            "inpainting model: latents, mask, masked image): give an init image and a "
                            "mask (--init IMG --mask MASK; Lua init=, mask=)", p->name,
                            (long long)p->unet_in);
    if (o->seed_resize_w < 0 || o->seed_resize_h < 0 || o->seed_resize_w > (1 << 16) ||
        o->seed_resize_h > (1 << 16) || (o->seed_resize_w > 0) != (o->seed_resize_h > 0) ||
        (o->seed_resize_w > 0 && (o->seed_resize_w < p->vae_scale || o->seed_resize_h < p->vae_scale)))
        return lm_error_set(LM_ERR_ARG, "generate: seed resize from %lldx%lld: expected both sides "
                            "from %lld to 65536 pixels (or both 0: off)", (long long)o->seed_resize_w,
                            (long long)o->seed_resize_h, (long long)p->vae_scale);
    if (o->init) {
        lm_array *im = o->init;
        if ((im->ndim != 3 && im->ndim != 4) || im->shape[im->ndim - 3] != 3 ||
            (im->ndim == 4 && im->shape[0] != g->B))
            return lm_error_set(LM_ERR_SHAPE, "generate: init image: expected [3,H,W] or [%d,3,H,W]",
                                g->B);
        if (lm_sd_option_check_num(LM_SD_OPT_STRENGTH, "generate", NULL, o->strength) ||
            lm_sd_img2img_check("generate", o->steps, o->strength))
            return lm_error_status();
        H = im->shape[im->ndim - 2];
        W = im->shape[im->ndim - 1];
        if (o->mask) {
            /* a mask of another size is resized to the init image's */
            if (lm_sd_mask_prepare(o->mask, o->mask_blur, H, W, "generate", &g->mask) != LM_OK)
                return lm_error_status();
            g->nine = p->unet_in != C;
        }
    } else if (o->init_latents) {
        lm_array *l = o->init_latents;
        if (o->latents)
            return lm_error_set(LM_ERR_ARG, "generate: init latents and latents: give one (img2img "
                                "from latents, or the initial noise)");
        if (l->ndim != 4 || l->shape[0] != g->B || l->shape[1] != C)
            return lm_error_set(LM_ERR_SHAPE, "generate: init latents: expected [%d,%lld,h,w]", g->B,
                                (long long)C);
        if (lm_sd_option_check_num(LM_SD_OPT_STRENGTH, "generate", NULL, o->strength) ||
            lm_sd_img2img_check("generate", o->steps, o->strength))
            return lm_error_status();
        H = l->shape[2] * p->vae_scale;
        W = l->shape[3] * p->vae_scale;
    } else if (o->latents) {
        lm_array *l = o->latents;
        if (l->ndim != 4 || l->shape[0] != g->B || l->shape[1] != C)
            return lm_error_set(LM_ERR_SHAPE, "generate: latents: expected [%d,%lld,h,w]", g->B,
                                (long long)C);
        H = l->shape[2] * p->vae_scale;
        W = l->shape[3] * p->vae_scale;
    }
    if (H <= 0) H = lm_sd_pipeline_default_size(p);
    if (W <= 0) W = lm_sd_pipeline_default_size(p);
    if (H % p->vae_scale || W % p->vae_scale || H > (1 << 16) || W > (1 << 16))
        return lm_error_set(LM_ERR_ARG, "generate: size %lldx%lld: width and height must be "
                            "multiples of %lld (the VAE's scale), at most 65536", (long long)W,
                            (long long)H, (long long)p->vae_scale);
    g->size_h = o->height > 0 && !o->init && !o->init_latents ? o->height : H;
    g->size_w = o->width > 0 && !o->init && !o->init_latents ? o->width : W;
    g->shape[0] = g->B;
    g->shape[1] = C;
    g->shape[2] = H / p->vae_scale;
    g->shape[3] = W / p->vae_scale;
    g->seeds = malloc(sizeof *g->seeds * (size_t)g->B);
    g->ctx = calloc((size_t)g->lanes, sizeof *g->ctx);
    g->pooled = calloc((size_t)g->lanes, sizeof *g->pooled);
    g->ctx_c = calloc((size_t)g->lanes, sizeof *g->ctx_c);
    if (!g->seeds || !g->ctx || !g->pooled || !g->ctx_c)
        return lm_error_set(LM_ERR_NOMEM, "generate: out of memory");
    for (int i = 0; i < g->B; i++) g->seeds[i] = o->seeds ? o->seeds[i] : o->seed + (uint64_t)i;
    return LM_OK;
}

static void gen_free(gen *g)
{
    for (int l = 0; g->ctx && l < g->lanes; l++) lm_array_release(g->ctx[l]);
    for (int l = 0; g->pooled && l < g->lanes; l++) lm_array_release(g->pooled[l]);
    for (int l = 0; g->ctx_c && l < g->lanes; l++) lm_array_release(g->ctx_c[l]);
    lm_array_release(g->tids);
    lm_array_release(g->start_sums);
    lm_array_release(g->decode_sums);
    for (int i = 0; g->step_sums && i < g->nsteps; i++) lm_array_release(g->step_sums[i]);
    free(g->step_sums);
    for (int l = 0; g->inp_cond && l < g->lanes; l++) lm_array_release(g->inp_cond[l]);
    free(g->inp_cond);
    lm_array_release(g->mask_lat);
    lm_array_release(g->inp_x0);
    lm_array_release(g->inp_noise);
    lm_sd_mask_free(&g->mask);
    free(g->ctx);
    free(g->pooled);
    free(g->ctx_c);
    free(g->seeds);
}

/* the conditioning, computed once (not once per step) */
static lm_status prepare(gen *g)
{
    for (int l = 0; l < g->lanes; l++) {
        int was = lm_share_set(g->per);   /* per images' prompts stacked: per_lane says why */
        lm_status st = conditioning(g, l);
        lm_share_set(was);
        if (st != LM_OK) return lm_error_status();
    }
    int per = g->per;
    if (g->p->row->time_ids && !(g->tids = time_ids(g, g->cfg ? 2 * per : per, g->p->dt)))
        return lm_error_status();
    int n = 0;
    lm_array **all = calloc((size_t)(3 * g->lanes + 1), sizeof *all);
    if (!all) return lm_error_set(LM_ERR_NOMEM, "generate: out of memory");
    for (int l = 0; l < g->lanes; l++) {
        all[n++] = g->ctx[l];
        if (g->ctx_c[l]) all[n++] = g->ctx_c[l];
        if (g->pooled[l]) all[n++] = g->pooled[l];
    }
    if (g->tids) all[n++] = g->tids;
    lm_status st = lm_eval(all, n);
    free(all);
    return st;
}

const lm_sd_family_row *lm_sd_family_peek(const char *path)
{
    if (!path || !is_dir(path)) return NULL;
    char *mi = lm_dfs_path(path, "model_index.json");
    cJSON *index = NULL;
    const lm_sd_family_row *row = NULL;
    if (mi && lm_dfs_json(mi, CONFIG_MAX, true, &index) == LM_OK && index) {
        const cJSON *cls = cJSON_GetObjectItemCaseSensitive(index, "_class_name");
        const cJSON *dist = cJSON_GetObjectItemCaseSensitive(index, "is_distilled");
        if (cJSON_IsString(cls))
            row = lm_sd_family_get(lm_sd_family_from_class(cls->valuestring, cJSON_IsTrue(dist)));
    }
    free(mi);
    cJSON_Delete(index);
    lm_error_clear();   /* an unreadable folder is the load's to report */
    return row;
}

lm_status lm_sd_img2img_check_for(const char *who, const lm_sd_family_row *row, int64_t steps,
                                  double strength)
{
    /* the flow-matching families run steps - int(steps - steps * strength)
     * of them, at least one for any strength in (0, 1] (dit_pipeline.c) */
    if (row && row->flow) return LM_OK;
    return lm_sd_img2img_check(who, steps, strength);
}

lm_status lm_sd_img2img_check(const char *who, int64_t steps, double strength)
{
    /* diffusers' get_timesteps: int(steps * strength) steps run */
    if (!(strength > 0 && strength <= 1) || steps < 1 || (int64_t)((double)steps * strength) >= 1)
        return LM_OK;
    int64_t need = (int64_t)ceil(1 / strength);
    while ((int64_t)((double)need * strength) < 1) need++;
    const lm_sd_option *r = lm_sd_option_get(LM_SD_OPT_STEPS);
    char more[64] = "";
    if (need <= r->ihi) snprintf(more, sizeof more, "%lld steps or more, or ", (long long)need);
    return lm_error_set(LM_ERR_ARG, "%s%sstrength %g of %lld steps leaves no step to run (img2img "
                        "runs int(steps * strength) of them): give %sa strength of 1/%lld or more",
                        who ? who : "", who ? ": " : "", strength, (long long)steps, more,
                        (long long)steps);
}

/* ---- NaN: which stage gave it ---- */

/* x's sum per image (x [B,...]) in f32, lazy: NaN or infinite when the
 * image holds a NaN or an infinity, finite otherwise (latents and images
 * are far from overflowing a sum) */
static lm_array *image_sums(lm_array *x)
{
    int axes[LM_MAX_DIMS];
    for (int i = 1; i < x->ndim; i++) axes[i - 1] = i;
    lm_array *f = x->dtype == LM_F32 ? lm_array_retain(x) : lm_cast(x, LM_F32);
    lm_array *r = f ? lm_reduce(LM_OP_SUM, f, x->ndim - 1, axes, false) : NULL;
    lm_array_release(f);
    return r;
}

/* reads sums (evaluated) into v: 1 when one is not finite, 0 when none is,
 * -1 with the error set */
static int read_bad(lm_array *sums, float *v)
{
    if (lm_array_read(sums, v, LM_F32) != LM_OK) return -1;
    for (int64_t i = 0; i < sums->size; i++)
        if (!isfinite(v[i])) return 1;
    return 0;
}

/* the text encoders' outputs, kept for the whole run: 1 when one holds a
 * NaN or an infinity (what in *nan), 0, or -1 with the error set */
static int text_bad(const gen *g, bool *nan)
{
    for (int l = 0; l < g->lanes; l++)
        for (int k = 0; k < 3; k++) {
            lm_array *x = k == 2 ? g->ctx_c[l] : k ? g->pooled[l] : g->ctx[l], *s = x ? image_sums(x) : NULL;
            if (!x) continue;
            float *v = s ? malloc(sizeof *v * (size_t)s->size) : NULL;
            int bad = v ? read_bad(s, v) : -1;
            for (int64_t i = 0; bad == 1 && i < s->size; i++) *nan |= isnan(v[i]);
            free(v);
            lm_array_release(s);
            if (bad) return bad;
        }
    return 0;
}

/* The error for a generation whose decoded images hold a NaN or an
 * infinity: the first stage whose kept sums show one (only read now, so a
 * run that goes well never waits for them) */
static lm_status stage_error(gen *g, const float *decoded)
{
    lm_sd_pipeline *p = g->p;
    float *v = malloc(sizeof *v * (size_t)g->B);
    if (!v) return lm_error_set(LM_ERR_NOMEM, "generate: out of memory");
    char stage[160];
    const float *bad = v;
    bool nan = false;
    lm_dtype dt = p->dt;
    int t = text_bad(g, &nan), k = -1, rc = 0;
    if (t < 0) goto fail;
    if (t) {
        snprintf(stage, sizeof stage, "the text encoder%s", p->row->n_encoders > 1 ? "s" : "");
        bad = NULL;
    } else if ((rc = read_bad(g->start_sums, v)) != 0) {
        if (rc < 0) goto fail;
        snprintf(stage, sizeof stage, "%s", g->o->init ? "the VAE encoder (the init image's latents)"
                 : g->o->init_latents ? "the init latents given" : g->o->latents ? "the latents given" : "the initial noise");
        dt = g->o->init ? p->vae_dt : LM_F32;
    } else {
        for (k = 0; k < g->nsteps && (rc = read_bad(g->step_sums[k], v)) == 0; k++) {}
        if (rc < 0) goto fail;
        if (k < g->nsteps) snprintf(stage, sizeof stage, "the UNet at step %d of %d", k + 1, g->nsteps);
        else {
            snprintf(stage, sizeof stage, "the VAE decoder (its input: the latents / scaling_factor %g)",
                     p->scaling);
            bad = decoded;
            dt = p->vae_dt;
        }
    }
    char which[160] = "";
    size_t at = 0;
    int nbad = 0;
    for (int i = 0; bad && i < g->B; i++) {
        if (isfinite(bad[i])) continue;
        nan |= isnan(bad[i]);
        if (++nbad <= 4 && at < sizeof which)
            at += (size_t)snprintf(which + at, sizeof which - at, "%s%d (seed %llu)", nbad > 1 ? ", " : "",
                                   i + 1, (unsigned long long)g->seeds[i]);
    }
    if (nbad > 4 && at < sizeof which) snprintf(which + at, sizeof which - at, ", ...");
    char why[96];
    if (dt == LM_F32) snprintf(why, sizeof why, "a weight of it may be NaN or infinite");
    else snprintf(why, sizeof why, "a weight of it may be NaN, or %s overflowed there (dtype f32 "
                  "avoids that)", lm_dtype_name(dt));
    lm_status st = lm_error_set(LM_ERR_STATE, "generate: %s produced %s%s%s%s%s; no image is given: "
                                "%s", stage, nan ? "NaN" : "an infinity",
                                g->B > 1 && nbad ? " in image" : "", g->B > 1 && nbad > 1 ? "s" : "",
                                g->B > 1 && nbad ? " " : "", g->B > 1 ? which : "", why);
    free(v);
    return st;
fail:
    free(v);
    return lm_error_status();
}

/* A1111's overlay: the init image outside the (blurred) mask.  img released. */
static lm_array *overlay(const gen *g, lm_array *img)
{
    lm_array *init = init_batch(g), *m = init ? lm_sd_mask_pixels(&g->mask, true, g->p->dev) : NULL;
    lm_array *r = m ? lm_sd_inpaint_blend(img, init, m) : NULL;
    lm_array_release(init);
    lm_array_release(m);
    lm_array_release(img);
    return r;
}

static lm_array *generate_at(lm_sd_pipeline *p, const lm_sd_gen_opts *opts, bool decode);

/* An init image with a width or height of another size is resized to them
 * first (diffusers' image_processor.preprocess(image, height, width); A1111's
 * "Just resize"), then generated from as if given at that size. */
static lm_array *generate(lm_sd_pipeline *p, const lm_sd_gen_opts *opts, bool decode)
{
    lm_array *im = opts ? opts->init : NULL;
    if (!im || (im->ndim != 3 && im->ndim != 4) || im->shape[im->ndim - 3] != 3)
        return generate_at(p, opts, decode);   /* its checks name what is wrong */
    int64_t ih = im->shape[im->ndim - 2], iw = im->shape[im->ndim - 1];
    int64_t h = opts->height > 0 ? opts->height : ih, w = opts->width > 0 ? opts->width : iw;
    if (h == ih && w == iw) return generate_at(p, opts, decode);
    lm_sd_gen_opts o = *opts;
    if (!(o.init = lm_sd_image_resize(im, h, w, lm_sd_pipeline_device(p)))) {
        lm_error_prefix("generate: init image %lldx%lld to %lldx%lld", (long long)iw, (long long)ih,
                        (long long)w, (long long)h);
        return NULL;
    }
    lm_array *r = generate_at(p, &o, decode);
    lm_array_release(o.init);
    return r;
}

static lm_array *generate_at(lm_sd_pipeline *p, const lm_sd_gen_opts *opts, bool decode)
{
    lm_sd_gen_opts dflt;
    lm_sd_gen_opts_init(&dflt);
    gen g = {.p = p, .o = opts ? opts : &dflt};
    const lm_sd_gen_opts *o = g.o;
    if (p->dit && (o->init_latents || o->subseed_strength != 0 || o->seed_resize_w > 0 ||
                   o->seed_resize_h > 0 || !decode)) {
        lm_error_set(LM_ERR_UNSUPPORTED, "generate: %s: %s is for the SD families (SD 1.x, 2.x, SDXL) "
                     "so far", p->row->title, o->subseed_strength != 0 || o->seed_resize_w > 0 ||
                     o->seed_resize_h > 0 ? "a variation seed (or seed resize)"
                     : "img2img from latents (the hires fix's latent upscalers)");
        return NULL;
    }
    if (p->dit && o->mask) {
        lm_error_set(LM_ERR_UNSUPPORTED, "generate: %s: inpainting (a mask) is for the SD families "
                     "(SD 1.x, 2.x, SDXL) so far", p->row->title);
        return NULL;
    }
    if (p->dit) return lm_dit_pipe_generate(p->dit, p, o);
    lm_sampler *s = NULL;
    lm_array *x = NULL, *raw = NULL, *img = NULL;
    float *sums = NULL;
    if (check_gen(&g) != LM_OK) goto fail;
    const char *sname = o->sampler ? o->sampler : p->row->defaults.sampler;
    const lm_sampler_info *row = lm_sampler_find(sname);
    if (!row) {
        lm_error_prefix("generate");
        goto fail;
    }
    /* the schedule first: a strength that leaves no step fails before any network runs */
    if (!(s = lm_sampler_new_row(&p->sched, row, o->steps, o->init || o->init_latents ? o->strength : 1.0)))
        goto fail;
    if (prepare(&g) != LM_OK) goto fail;
    if (!(x = start_latents(&g, s)) || !(g.start_sums = image_sums(x))) goto fail;
    lm_array *first[2] = {x, g.start_sums};
    if (lm_eval(first, 2) != LM_OK) goto fail;
    int n = lm_sampler_count(s), draws = 0;
    if (!(g.step_sums = calloc((size_t)n, sizeof *g.step_sums))) {
        lm_error_set(LM_ERR_NOMEM, "generate: out of memory");
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        step_ctx sc = {s, i};
        lm_array *eps = per_lane(&g, x, lane_denoise, &sc), *nz = NULL, *next = NULL;
        bool needs = lm_sampler_needs_noise(s, i);
        if (eps && needs) nz = noise(&g, ++draws);
        if (eps && (nz || !needs)) next = lm_sampler_step(s, eps, i, x, nz);
        if (next && g.inp_x0) next = inpaint_keep(&g, s, i, n, next);
        lm_array_release(eps);
        lm_array_release(nz);
        /* evaluated every step: the graph stays one step long; queued
         * without waiting, so the next step's graph is built while the GPU
         * runs this one (the progress shown may run up to two steps ahead
         * of the GPU; the decode below waits for all).  The step's sums go
         * with it and are read only if the images come out wrong. */
        lm_array *both[2] = {next, next ? image_sums(next) : NULL};
        g.step_sums[i] = both[1];
        g.nsteps = i + 1;
        if (!both[1] || lm_eval_async(both, 2) != LM_OK) {
            lm_array_release(next);
            goto fail;
        }
        lm_array_release(x);
        x = next;
        if (o->progress) o->progress(o->progress_ctx, i + 1, n);
        if (o->step_latents) o->step_latents(o->progress_ctx, i + 1, n, x);
    }
    if (!decode) {
        /* the last step's sums show a NaN; stage_error walks the stages */
        if (!(sums = malloc(sizeof *sums * (size_t)g.B))) {
            lm_error_set(LM_ERR_NOMEM, "generate: out of memory");
            goto fail;
        }
        int bad = read_bad(g.step_sums[n - 1], sums);
        if (bad) {
            if (bad > 0) stage_error(&g, sums);
            goto fail;
        }
        free(sums);
        lm_sampler_free(s);
        gen_free(&g);
        return x;
    }
    if (!(raw = per_lane(&g, x, lane_decode, NULL)) || !(img = lm_sd_postprocess(raw)) ||
        !(g.decode_sums = image_sums(raw)))
        goto fail;
    if (g.mask.H && o->mask_overlay && !(img = overlay(&g, img))) goto fail;
    lm_array *last[2] = {img, g.decode_sums};
    if (lm_eval(last, 2) != LM_OK) goto fail;
    lm_array_release(raw);
    raw = NULL;
    if (!(sums = malloc(sizeof *sums * (size_t)g.B))) {
        lm_error_set(LM_ERR_NOMEM, "generate: out of memory");
        goto fail;
    }
    int bad = read_bad(g.decode_sums, sums);
    if (bad) {
        if (bad > 0) stage_error(&g, sums);
        goto fail;
    }
    free(sums);
    lm_array_release(x);
    lm_sampler_free(s);
    gen_free(&g);
    return img;
fail:
    free(sums);
    lm_array_release(raw);
    lm_array_release(img);
    lm_array_release(x);
    lm_sampler_free(s);
    gen_free(&g);
    return NULL;
}

/* "Only masked" (lm_sd_inpaint_crop): the crop generated as given, blurred
 * already, without the overlay (the crop's paste-back is it) */
typedef struct crop_gen {
    lm_sd_pipeline *p;
    const lm_sd_gen_opts *o;
} crop_gen;

static lm_array *crop_generate(void *ctx, lm_array *init, lm_array *mask)
{
    const crop_gen *c = ctx;
    lm_sd_gen_opts o = *c->o;
    o.inpaint_crop = false;
    o.init = init;
    o.mask = mask;
    o.mask_blur = 0;
    o.mask_overlay = false;
    return generate(c->p, &o, true);
}

lm_array *lm_sd_generate(lm_sd_pipeline *p, const lm_sd_gen_opts *o)
{
    if (o && o->mask && o->inpaint_crop) {
        crop_gen c = {p, o};
        lm_sd_inpaint_crop_args a = {.init = o->init, .mask = o->mask, .blur = o->mask_blur, .ph = o->height,
                                     .pw = o->width, .pad = o->inpaint_padding, .dev = p->dev};
        return lm_sd_inpaint_crop(&a, crop_generate, &c);
    }
    return generate(p, o, true);
}

lm_array *lm_sd_generate_latents(lm_sd_pipeline *p, const lm_sd_gen_opts *o)
{
    return generate(p, o, false);
}
