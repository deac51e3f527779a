/* family.c - the model-family table and the generation options' defaults
 * and ranges (see family.h). */
#include "family.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* SD 1.x / 2.x / SDXL were all trained with this schedule (their
 * scheduler_config.json files agree); the class is what their releases ship */
#define SD_SCHEDULE(cls, extra)                                                           \
    "{\"_class_name\":\"" cls "\",\"num_train_timesteps\":1000,\"beta_start\":0.00085,"   \
    "\"beta_end\":0.012,\"beta_schedule\":\"scaled_linear\",\"trained_betas\":null,"     \
    "\"prediction_type\":\"epsilon\",\"set_alpha_to_one\":false,\"skip_prk_steps\":true," \
    "\"clip_sample\":false,\"steps_offset\":1,\"timestep_spacing\":\"leading\"" extra "}"

#define SD_DEFAULTS {.steps = 20, .cfg = 7, .sampler = "dpm++2m_karras", .strength = 0.8, \
                     .batch = 1, .clip_skip = 0}

const lm_sd_defaults lm_sd_defaults_generic = SD_DEFAULTS;

/* The flow-matching families' schedulers as their releases ship them
 * (Z-Image-Turbo: a fixed shift of 3; FLUX.2-klein: dynamic shifting, the
 * pipeline's mu) */
#define FLOW_SCHEDULE(extra) \
    "{\"_class_name\":\"FlowMatchEulerDiscreteScheduler\",\"num_train_timesteps\":1000" extra "}"

/* Z-Image and FLUX.2-klein's Qwen3 (Qwen3-4B): a chat-formatted prompt
 * padded to 512 tokens; Z-Image takes hidden_states[-2] at the prompt's
 * tokens, Klein layers 9, 18 and 27 stacked */
#define QWEN3_ZIMAGE {.kind = LM_SD_TE_QWEN3, .dir = "text_encoder", .tokenizer = "tokenizer", \
                      .enable_thinking = 1, .max_length = 512, .n_layers = 1, .layers = {-2},   \
                      .masked_rows = true}
#define QWEN3_KLEIN {.kind = LM_SD_TE_QWEN3, .dir = "text_encoder", .tokenizer = "tokenizer", \
                     .enable_thinking = 0, .max_length = 512, .n_layers = 3, .layers = {9, 18, 27}}
#define KLEIN_ROW(ID, NAME, TITLE, DISTILLED, STEPS, CFG)                                    \
    [ID] = {                                                                                 \
        .id = ID, .name = NAME, .title = TITLE, .pipeline_class = "Flux2Klein",             \
        .denoiser = LM_SD_NET_FLUX2, .vae = LM_SD_NET_AUTOENCODER_KL_FLUX2,                  \
        .denoiser_dir = "transformer", .vae_dir = "vae",                                     \
        .n_encoders = 1, .encoders = {QWEN3_KLEIN},                                          \
        .latent_channels = 32, .scaling_factor = 1, .shift_factor = NAN,                     \
        .sample_size = 128, .vae_sample_size = 1024,                                         \
        .scheduler = FLOW_SCHEDULE(",\"shift\":3.0,\"use_dynamic_shifting\":true,"          \
                                   "\"base_shift\":0.5,\"max_shift\":1.15,"                  \
                                   "\"base_image_seq_len\":256,\"max_image_seq_len\":4096,"  \
                                   "\"time_shift_type\":\"exponential\""),                  \
        .defaults = {.steps = STEPS, .cfg = CFG, .sampler = "euler", .strength = 1,        \
                     .batch = 1, .clip_skip = 0},                                            \
        .flow = true, .mu = LM_SD_MU_EMPIRICAL, .cfg_form = LM_SD_CFG_U_PLUS, .packed = true,\
        .distilled = DISTILLED,                                                              \
    }

static const lm_sd_family_row rows[LM_SD_FAMILY_COUNT] = {
    [LM_SD_1] = {
        .id = LM_SD_1, .name = "sd1", .title = "SD 1.x",
        .pipeline_class = "StableDiffusion",
        .denoiser = LM_SD_NET_UNET2D, .vae = LM_SD_NET_AUTOENCODER_KL,
        .denoiser_dir = "unet", .vae_dir = "vae",
        .denoiser_prefix = "model.diffusion_model.", .vae_prefix = "first_stage_model.",
        .n_encoders = 1,
        .encoders = {{.kind = LM_SD_TE_CLIP, .dir = "text_encoder", .tokenizer = "tokenizer",
                      .prefix = "cond_stage_model.transformer.", .skip_base = 0,
                      .final_norm = true}},
        .latent_channels = 4, .scaling_factor = 0.18215, .shift_factor = NAN,
        .sample_size = 64, .vae_sample_size = 512, .unet_heads = 8,
        .scheduler = SD_SCHEDULE("PNDMScheduler", ""),
        .defaults = SD_DEFAULTS,
    },
    [LM_SD_2] = {
        .id = LM_SD_2, .name = "sd2", .title = "SD 2.x",
        .pipeline_class = "StableDiffusion",
        .denoiser = LM_SD_NET_UNET2D, .vae = LM_SD_NET_AUTOENCODER_KL,
        .denoiser_dir = "unet", .vae_dir = "vae",
        .denoiser_prefix = "model.diffusion_model.", .vae_prefix = "first_stage_model.",
        .n_encoders = 1,
        .encoders = {{.kind = LM_SD_TE_OPENCLIP, .dir = "text_encoder", .tokenizer = "tokenizer",
                      .prefix = "cond_stage_model.model.", .skip_base = 0, .final_norm = true}},
        .latent_channels = 4, .scaling_factor = 0.18215, .shift_factor = NAN,
        .sample_size = 64, .sample_size_v = 96, .vae_sample_size = 768, .upcast_attention = true,
        .linear_projection = true,
        .scheduler = SD_SCHEDULE("PNDMScheduler", ""),
        .defaults = SD_DEFAULTS,
    },
    [LM_SD_XL] = {
        .id = LM_SD_XL, .name = "sdxl", .title = "SDXL",
        .pipeline_class = "StableDiffusion",
        .denoiser = LM_SD_NET_UNET2D, .vae = LM_SD_NET_AUTOENCODER_KL,
        .denoiser_dir = "unet", .vae_dir = "vae",
        .denoiser_prefix = "model.diffusion_model.", .vae_prefix = "first_stage_model.",
        .n_encoders = 2,
        .encoders = {{.kind = LM_SD_TE_CLIP, .dir = "text_encoder", .tokenizer = "tokenizer",
                      .prefix = "conditioner.embedders.0.transformer.", .skip_base = 1},
                     {.kind = LM_SD_TE_OPENCLIP_PROJ, .dir = "text_encoder_2",
                      .tokenizer = "tokenizer_2", .prefix = "conditioner.embedders.1.model.",
                      .skip_base = 1, .pooled = true}},
        .time_ids = true, .force_zeros = true,
        .latent_channels = 4, .scaling_factor = 0.13025, .shift_factor = NAN, .vae_upcast = true,
        .sample_size = 128, .vae_sample_size = 1024, .unet_layers_list = true, .linear_projection = true,
        .scheduler = SD_SCHEDULE("EulerDiscreteScheduler",
                                 ",\"interpolation_type\":\"linear\",\"use_karras_sigmas\":false"),
        .defaults = SD_DEFAULTS,
    },
    /* Z-Image's defaults are Z-Image-Turbo's (its model card: 9 steps, no
     * guidance); the base model wants steps 50, cfg 5 (ZImagePipeline's) */
    [LM_SD_ZIMAGE] = {
        .id = LM_SD_ZIMAGE, .name = "zimage", .title = "Z-Image",
        .pipeline_class = "ZImage",
        .denoiser = LM_SD_NET_ZIMAGE, .vae = LM_SD_NET_AUTOENCODER_KL,
        .denoiser_dir = "transformer", .vae_dir = "vae",
        .n_encoders = 1, .encoders = {QWEN3_ZIMAGE},
        .latent_channels = 16, .scaling_factor = 0.3611, .shift_factor = 0.1159,
        .sample_size = 128, .vae_sample_size = 1024,
        .scheduler = FLOW_SCHEDULE(",\"shift\":3.0,\"use_dynamic_shifting\":false"),
        .defaults = {.steps = 9, .cfg = 0, .sampler = "euler", .strength = 0.6, .batch = 1,
                     .clip_skip = 0},
        .flow = true, .mu = LM_SD_MU_LINEAR, .cfg_form = LM_SD_CFG_C_PLUS, .distilled = -1,
    },
    KLEIN_ROW(LM_SD_KLEIN, "klein", "FLUX.2-klein", 1, 4, 1),
    KLEIN_ROW(LM_SD_KLEIN_BASE, "klein-base", "FLUX.2-klein base", 0, 50, 4),
};

const lm_sd_family_row *lm_sd_family_get(lm_sd_family f)
{
    return f > LM_SD_UNKNOWN && f < LM_SD_FAMILY_COUNT ? &rows[f] : NULL;
}

const char *lm_sd_family_name(lm_sd_family f)
{
    const lm_sd_family_row *r = lm_sd_family_get(f);
    return r ? r->name : "unknown";
}

static bool has_prefix(const char *const *names, int n, const char *p)
{
    size_t len = strlen(p);
    for (int i = 0; i < n; i++)
        if (!strncmp(names[i], p, len)) return true;
    return false;
}

lm_sd_family lm_sd_family_from_keys(const char *const *names, int n)
{
    /* the rows whose every encoder prefix occurs: the one with the most
     * encoders (SDXL's pair beats a lone encoder's leftovers); a tie is a
     * mix of families (SD 1.x and 2.x encoders in one file) */
    lm_sd_family found = LM_SD_UNKNOWN;
    bool tie = false;
    for (int f = LM_SD_UNKNOWN + 1; f < LM_SD_FAMILY_COUNT; f++) {
        const lm_sd_family_row *r = &rows[f];
        bool all = r->n_encoders > 0 && r->denoiser == LM_SD_NET_UNET2D;
        for (int e = 0; all && e < r->n_encoders; e++)
            all = has_prefix(names, n, r->encoders[e].prefix);
        if (!all) continue;
        if (found == LM_SD_UNKNOWN || r->n_encoders > rows[found].n_encoders) {
            found = (lm_sd_family)f;
            tie = false;
        } else if (r->n_encoders == rows[found].n_encoders) {
            tie = true;
        }
    }
    return tie ? LM_SD_UNKNOWN : found;
}

lm_sd_family lm_sd_family_match(int n_encoders, int linear_projection, int openclip_first)
{
    lm_sd_family first = LM_SD_UNKNOWN;
    for (int f = LM_SD_UNKNOWN + 1; f < LM_SD_FAMILY_COUNT; f++) {
        const lm_sd_family_row *r = &rows[f];
        if (r->n_encoders != n_encoders || r->denoiser != LM_SD_NET_UNET2D) continue;
        bool open = r->encoders[0].kind == LM_SD_TE_OPENCLIP || r->encoders[0].kind == LM_SD_TE_OPENCLIP_PROJ;
        if ((linear_projection < 0 || r->linear_projection == (linear_projection > 0)) &&
            (openclip_first < 0 || open == (openclip_first > 0)))
            return (lm_sd_family)f;
        if (first == LM_SD_UNKNOWN) first = (lm_sd_family)f;
    }
    return first;
}

/* ---- generation options ---- */

static const lm_sd_option options[LM_SD_OPT_COUNT] = {
    [LM_SD_OPT_STEPS] = {"steps", true, 1, 10000, 0, 0, false},
    [LM_SD_OPT_CFG] = {"cfg", false, 0, 0, 0, 1000, false},
    [LM_SD_OPT_STRENGTH] = {"strength", false, 0, 0, 0, 1, true},
    [LM_SD_OPT_BATCH] = {"batch", true, 1, 4096, 0, 0, false},
    [LM_SD_OPT_SIZE] = {"size", true, 8, 1 << 16, 0, 0, false},
    [LM_SD_OPT_CLIP_SKIP] = {"clip_skip", true, 0, 63, 0, 0, false},
    [LM_SD_OPT_SEED] = {"seed", true, 0, INT64_MAX, 0, 0, false},
};

const lm_sd_option *lm_sd_option_get(lm_sd_opt id)
{
    return id >= 0 && id < LM_SD_OPT_COUNT ? &options[id] : NULL;
}

const char *lm_sd_option_range(lm_sd_opt id, int64_t offset, char *buf, size_t n)
{
    const lm_sd_option *o = lm_sd_option_get(id);
    if (!o) snprintf(buf, n, "?");
    else if (o->integer && o->ihi == INT64_MAX)
        snprintf(buf, n, "a whole number >= %lld", (long long)(o->ilo + offset));
    else if (o->integer)
        snprintf(buf, n, "a whole number from %lld to %lld", (long long)(o->ilo + offset),
                 (long long)(o->ihi + offset));
    else if (o->lo_open)
        snprintf(buf, n, "a number in (%g, %g]", o->lo, o->hi);
    else
        snprintf(buf, n, "a number from %g to %g", o->lo, o->hi);
    return buf;
}

static lm_status out_of_range(const lm_sd_option *o, lm_sd_opt id, const char *who, const char *name,
                              const char *val)
{
    char r[96];
    lm_sd_option_range(id, 0, r, sizeof r);
    return lm_error_set(LM_ERR_ARG, "%s%s%s %s: expected %s", who ? who : "", who ? ": " : "",
                        name ? name : o->name, val, r);
}

lm_status lm_sd_option_check_int(lm_sd_opt id, const char *who, const char *name, int64_t v)
{
    const lm_sd_option *o = lm_sd_option_get(id);
    if (!o) return lm_error_set(LM_ERR_ARG, "%s: unknown option %d", who ? who : "generate", (int)id);
    bool ok = o->integer ? v >= o->ilo && v <= o->ihi
                         : (o->lo_open ? (double)v > o->lo : (double)v >= o->lo) && (double)v <= o->hi;
    if (ok) return LM_OK;
    char val[32];
    snprintf(val, sizeof val, "%lld", (long long)v);
    return out_of_range(o, id, who, name, val);
}

lm_status lm_sd_option_check_num(lm_sd_opt id, const char *who, const char *name, double v)
{
    const lm_sd_option *o = lm_sd_option_get(id);
    if (!o) return lm_error_set(LM_ERR_ARG, "%s: unknown option %d", who ? who : "generate", (int)id);
    bool ok;
    if (o->integer)   /* a whole number in range: the float's exact value */
        ok = v == floor(v) && v >= (double)o->ilo && v < 0x1p63 && (int64_t)v <= o->ihi;
    else
        ok = (o->lo_open ? v > o->lo : v >= o->lo) && v <= o->hi;
    if (ok) return LM_OK;
    char val[40];
    snprintf(val, sizeof val, "%.17g", v);
    return out_of_range(o, id, who, name, val);
}

lm_status lm_sd_seeds_check(const char *who, const char *seed_name, const char *batch_name,
                            int64_t seed, int64_t batch)
{
    const lm_sd_option *o = lm_sd_option_get(LM_SD_OPT_SEED);
    if (lm_sd_option_check_int(LM_SD_OPT_SEED, who, seed_name, seed) != LM_OK) return lm_error_status();
    if (batch <= 1 || seed <= o->ihi - (batch - 1)) return LM_OK;
    return lm_error_set(LM_ERR_ARG, "%s%s%s %lld with %s %lld: the last image's seed would be "
                        "%llu, past the largest seed %lld; give %s %lld or less", who ? who : "",
                        who ? ": " : "", seed_name, (long long)seed, batch_name, (long long)batch,
                        (unsigned long long)seed + (unsigned long long)(batch - 1), (long long)o->ihi,
                        seed_name, (long long)(o->ihi - (batch - 1)));
}

/* a whole number of size's range, the whole of s[0..len) */
static bool size_number(const char *s, size_t len, int64_t *out)
{
    char buf[32];
    if (!len || len >= sizeof buf) return false;
    memcpy(buf, s, len);
    buf[len] = 0;
    for (size_t i = 0; i < len; i++)
        if (buf[i] < '0' || buf[i] > '9') return false;
    errno = 0;
    char *end;
    long long v = strtoll(buf, &end, 10);
    if (errno || *end) return false;
    *out = v;
    return lm_sd_option_check_int(LM_SD_OPT_SIZE, NULL, NULL, v) == LM_OK;
}

lm_status lm_sd_size_parse(const char *who, const char *name, const char *s, int64_t *w, int64_t *h)
{
    const char *x = s ? strchr(s, 'x') : NULL;
    size_t n = s ? strlen(s) : 0;
    bool ok = s && (x ? size_number(s, (size_t)(x - s), w) && size_number(x + 1, strlen(x + 1), h)
                      : size_number(s, n, w));
    if (ok && !x) *h = *w;
    if (ok) {
        lm_error_clear();
        return LM_OK;
    }
    const lm_sd_option *o = lm_sd_option_get(LM_SD_OPT_SIZE);
    return lm_error_set(LM_ERR_ARG, "%s%s%s \"%s\": expected WxH or N, whole numbers of pixels "
                        "from %lld to %lld", who ? who : "", who ? ": " : "", name ? name : o->name,
                        s ? s : "", (long long)o->ilo, (long long)o->ihi);
}

lm_sd_family lm_sd_family_from_class(const char *cls, int distilled)
{
    for (int f = LM_SD_UNKNOWN + 1; cls && f < LM_SD_FAMILY_COUNT; f++) {
        const lm_sd_family_row *r = &rows[f];
        if (r->denoiser == LM_SD_NET_UNET2D || strncmp(cls, r->pipeline_class, strlen(r->pipeline_class)))
            continue;
        if (r->distilled < 0 || r->distilled == (distilled > 0)) return (lm_sd_family)f;
    }
    return LM_SD_UNKNOWN;
}
