/* sd_config.c - diffusers' configs for a single-file checkpoint: each
 * component's config.json from its architecture (sd_infer.c) plus the
 * family row's conventions for what the shapes cannot tell
 * (docs/DIFFUSION.md, "Single-file checkpoints"), the family's
 * scheduler_config.json, and a diffusers folder's configs over them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lumen.h"
#include "models/diffusers_config.h"
#include "models/sd_parts.h"

static cJSON *int_array(const int64_t *v, int n);
static cJSON *str_array(const char *const *v, int n);
static bool shape_key(const char *k);

/* UNet2DConditionModel's config: the shapes, then the family's conventions */
cJSON *lm_sds_unet_config(const reader *R, const unet_dims *D, bool v_prediction)
{
    const lm_sd_family_row *F = R->row;
    int64_t C0 = D->C0, in_ch = D->in_ch, out_ch = D->out_ch, T = D->T, ctx = D->ctx;
    int64_t add_in = D->add_in, add_time = D->add_time;
    const int64_t *boc = D->boc;
    const int *depth = D->depth;
    int nlev = D->nlev, L = D->L;
    bool linear = D->linear;
    const char *down[SDS_MAX_LEVELS], *up[SDS_MAX_LEVELS];
    int64_t heads[SDS_MAX_LEVELS], tl[SDS_MAX_LEVELS];
    for (int l = 0; l < nlev; l++) {
        down[l] = depth[l] ? "CrossAttnDownBlock2D" : "DownBlock2D";
        up[nlev - 1 - l] = depth[l] ? "CrossAttnUpBlock2D" : "UpBlock2D";
        tl[l] = depth[l] ? depth[l] : 1;
        /* heads of 64 channels, unless the row fixes the count (SD 1.x: 8
         * everywhere; diffusers' attention_head_dim holds the count there) */
        heads[l] = boc[l] / 64 ? boc[l] / 64 : 1;
    }
    cJSON *c = cJSON_CreateObject();
    if (!c) return NULL;
    cJSON_AddStringToObject(c, "_class_name", "UNet2DConditionModel");
    cJSON_AddNumberToObject(c, "in_channels", (double)in_ch);
    cJSON_AddNumberToObject(c, "out_channels", (double)out_ch);
    cJSON_AddItemToObject(c, "block_out_channels", int_array(boc, nlev));
    cJSON_AddNumberToObject(c, "layers_per_block", L);
    cJSON_AddItemToObject(c, "down_block_types", str_array(down, nlev));
    cJSON_AddItemToObject(c, "up_block_types", str_array(up, nlev));
    cJSON_AddStringToObject(c, "mid_block_type", "UNetMidBlock2DCrossAttn");
    cJSON_AddNumberToObject(c, "cross_attention_dim", (double)ctx);
    cJSON_AddBoolToObject(c, "use_linear_projection", linear);
    bool one_depth = true;
    for (int l = 1; l < nlev; l++) one_depth = one_depth && tl[l] == tl[0];
    if (F->unet_layers_list || !one_depth)
        cJSON_AddItemToObject(c, "transformer_layers_per_block", int_array(tl, nlev));
    else cJSON_AddNumberToObject(c, "transformer_layers_per_block", (double)tl[0]);
    if (F->unet_heads > 0) cJSON_AddNumberToObject(c, "attention_head_dim", F->unet_heads);
    else cJSON_AddItemToObject(c, "attention_head_dim", int_array(heads, nlev));
    if (T != 4 * C0) cJSON_AddNumberToObject(c, "time_embedding_dim", (double)T);
    if (add_in) {
        cJSON_AddStringToObject(c, "addition_embed_type", "text_time");
        cJSON_AddNumberToObject(c, "addition_time_embed_dim", (double)add_time);
        cJSON_AddNumberToObject(c, "projection_class_embeddings_input_dim", (double)add_in);
    } else {
        cJSON_AddNullToObject(c, "addition_embed_type");
    }
    int64_t sample = v_prediction && F->sample_size_v ? F->sample_size_v : F->sample_size;
    cJSON_AddNumberToObject(c, "sample_size", (double)sample);
    cJSON_AddNumberToObject(c, "norm_num_groups", 32);
    cJSON_AddNumberToObject(c, "norm_eps", 1e-5);
    cJSON_AddBoolToObject(c, "upcast_attention", F->upcast_attention);
    cJSON_AddBoolToObject(c, "flip_sin_to_cos", true);
    cJSON_AddNumberToObject(c, "freq_shift", 0);
    cJSON_AddStringToObject(c, "act_fn", "silu");
    cJSON_AddBoolToObject(c, "center_input_sample", false);
    cJSON_AddNumberToObject(c, "downsample_padding", 1);
    cJSON_AddNumberToObject(c, "mid_block_scale_factor", 1);
    cJSON_AddBoolToObject(c, "only_cross_attention", false);
    cJSON_AddBoolToObject(c, "dual_cross_attention", false);
    cJSON_AddStringToObject(c, "resnet_time_scale_shift", "default");
    cJSON_AddStringToObject(c, "time_embedding_type", "positional");
    cJSON_AddNullToObject(c, "class_embed_type");
    cJSON_AddNullToObject(c, "num_attention_heads");
    return c;
}

/* AutoencoderKL's config */
cJSON *lm_sds_vae_config(const reader *R, const vae_dims *D)
{
    int64_t C0 = D->C0, in_ch = D->in_ch, out_ch = D->out_ch, z = D->z;
    const int64_t *boc = D->boc;
    int n = D->n, L = D->L;
    bool quant = D->quant, post = D->post, attn = D->attn;
    (void)C0;
    const char *down[SDS_MAX_LEVELS], *up[SDS_MAX_LEVELS];
    for (int l = 0; l < n; l++) down[l] = "DownEncoderBlock2D", up[l] = "UpDecoderBlock2D";
    cJSON *c = cJSON_CreateObject();
    if (!c) return NULL;
    cJSON_AddStringToObject(c, "_class_name", "AutoencoderKL");
    cJSON_AddNumberToObject(c, "in_channels", (double)in_ch);
    cJSON_AddNumberToObject(c, "out_channels", (double)out_ch);
    cJSON_AddItemToObject(c, "block_out_channels", int_array(boc, n));
    cJSON_AddNumberToObject(c, "layers_per_block", L);
    cJSON_AddItemToObject(c, "down_block_types", str_array(down, n));
    cJSON_AddItemToObject(c, "up_block_types", str_array(up, n));
    cJSON_AddNumberToObject(c, "latent_channels", (double)z);
    cJSON_AddBoolToObject(c, "use_quant_conv", quant);
    cJSON_AddBoolToObject(c, "use_post_quant_conv", post);
    cJSON_AddBoolToObject(c, "mid_block_add_attention", attn);
    cJSON_AddStringToObject(c, "act_fn", "silu");
    cJSON_AddNumberToObject(c, "norm_num_groups", 32);
    cJSON_AddNumberToObject(c, "sample_size", (double)R->row->vae_sample_size);
    cJSON_AddNumberToObject(c, "scaling_factor", R->row->scaling_factor);
    if (isfinite(R->row->shift_factor)) cJSON_AddNumberToObject(c, "shift_factor", R->row->shift_factor);
    else cJSON_AddNullToObject(c, "shift_factor");
    cJSON_AddBoolToObject(c, "force_upcast", true);
    return c;
}

/* CLIPTextModel[WithProjection]'s config: quick_gelu for OpenAI's CLIP,
 * gelu for OpenCLIP's */
cJSON *lm_sds_clip_config(lm_sd_te_kind kind, const clip_dims *cd)
{
    int64_t V = cd->V, D = cd->D, F = cd->F, Lyr = cd->Lyr, Pos = cd->Pos, proj = cd->proj;
    bool quick = kind == LM_SD_TE_CLIP;
    cJSON *c = cJSON_CreateObject();
    if (!c) return NULL;
    const char *arch[1] = {proj ? "CLIPTextModelWithProjection" : "CLIPTextModel"};
    cJSON_AddItemToObject(c, "architectures", str_array(arch, 1));
    cJSON_AddNumberToObject(c, "vocab_size", (double)V);
    cJSON_AddNumberToObject(c, "hidden_size", (double)D);
    cJSON_AddNumberToObject(c, "intermediate_size", (double)F);
    cJSON_AddNumberToObject(c, "num_hidden_layers", (double)Lyr);
    /* CLIP's heads are 64 channels wide (ViT-L 12, ViT-H 16, bigG 20) */
    cJSON_AddNumberToObject(c, "num_attention_heads", (double)(D % 64 == 0 ? D / 64 : 1));
    cJSON_AddNumberToObject(c, "max_position_embeddings", (double)Pos);
    if (proj) cJSON_AddNumberToObject(c, "projection_dim", (double)proj);
    cJSON_AddStringToObject(c, "hidden_act", quick ? "quick_gelu" : "gelu");
    cJSON_AddNumberToObject(c, "layer_norm_eps", 1e-5);
    /* 2: pool at the argmax of the ids (the eos, CLIP's largest id), as
     * the configs SD's encoders ship with say */
    cJSON_AddNumberToObject(c, "eos_token_id", 2);
    cJSON_AddNumberToObject(c, "bos_token_id", 0);
    cJSON_AddNumberToObject(c, "pad_token_id", 1);
    return c;
}

/* the row's scheduler_config.json with prediction_type set */
cJSON *lm_sds_scheduler(const lm_sd_family_row *row, const char *prediction)
{
    cJSON *c = cJSON_Parse(row->scheduler);
    if (!c) return NULL;
    cJSON *p = cJSON_CreateString(prediction ? prediction : "epsilon");
    if (!p || !cJSON_ReplaceItemInObjectCaseSensitive(c, "prediction_type", p)) {
        cJSON_Delete(p);
        cJSON_Delete(c);
        return NULL;
    }
    return c;
}

/* ---- overrides from a diffusers folder ---- */

lm_status lm_sds_override(const char *dir, const char *sub, const char *name, cJSON *cfg)
{
    char rel[96];
    snprintf(rel, sizeof rel, "%s/%s", sub, name);
    char *path = lm_dfs_path(dir, rel);
    if (!path) return LM_ERR_NOMEM;
    cJSON *j;
    lm_status st = lm_dfs_json(path, SDS_MAX_CONFIG, true, &j);
    for (cJSON *e = j ? j->child : NULL; st == LM_OK && e; e = e->next) {
        cJSON *mine = cJSON_GetObjectItemCaseSensitive(cfg, e->string);
        if (mine && shape_key(e->string) && !cJSON_Compare(mine, e, true)) {
            char *x = cJSON_PrintUnformatted(mine), *y = cJSON_PrintUnformatted(e);
            st = lm_error_set(LM_ERR_FORMAT, "%s: %s is %s, but the checkpoint's shapes say %s",
                              path, e->string, y ? y : "?", x ? x : "?");
            free(x);
            free(y);
            break;
        }
        cJSON *dup = cJSON_Duplicate(e, true);
        if (!dup) { st = lm_error_set(LM_ERR_NOMEM, "out of memory"); break; }
        if (mine) cJSON_ReplaceItemInObjectCaseSensitive(cfg, e->string, dup);
        else cJSON_AddItemToObject(cfg, e->string, dup);
    }
    cJSON_Delete(j);
    free(path);
    return st;
}

/* keys the shapes decide: an override must agree with them */
static bool shape_key(const char *k)
{
    static const char *const keys[] = {
        "in_channels", "out_channels", "block_out_channels", "layers_per_block",
        "down_block_types", "up_block_types", "cross_attention_dim", "use_linear_projection",
        "addition_embed_type", "projection_class_embeddings_input_dim", "latent_channels",
        "use_quant_conv", "use_post_quant_conv", "mid_block_add_attention", "vocab_size", "hidden_size",
        "intermediate_size", "num_hidden_layers", "max_position_embeddings", "projection_dim",
    };
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (!strcmp(k, keys[i])) return true;
    return false;
}

/* ---- helpers ---- */

static cJSON *int_array(const int64_t *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
    return a;
}

static cJSON *str_array(const char *const *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateString(v[i]));
    return a;
}
