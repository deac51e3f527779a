/* sd_single_write.c - the writer's direction of the single-file key map
 * (lm_sd_single_from_folder, see sd_single.h): a diffusers folder's
 * weights under the original names, the architecture read from the
 * folder's weights (sd_infer.c), the same table the reader generates
 * (sd_keymap.c) walked backwards. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/io/io_internal.h"
#include "lumen.h"
#include "models/diffusers_config.h"
#include "models/sd_parts.h"

lm_status lm_sd_single_from_folder(const char *dir, lm_tensor_set *out, lm_sd_family *family_out)
{
    memset(out, 0, sizeof *out);
    lm_status st = lm_init();
    if (st) return st;
    reader R = {.file = dir};
    lm_tensor_set set[C_N] = {{0}};
    lm_tensor_set *sp[C_N] = {&set[0], &set[1], &set[2], &set[3]};
    bool *used[C_N] = {0};
    char *path = NULL;
    cJSON *cfg = NULL;
    /* the family: the number of text encoders, then whether the first is
     * OpenCLIP's (gelu) or OpenAI's CLIP (quick_gelu) */
    char *te = lm_dfs_path(dir, "text_encoder/config.json"), *te2 = lm_dfs_path(dir, "text_encoder_2/config.json");
    struct stat sb;
    if (!te || !te2) st = lm_error_status();
    else if (!stat(te2, &sb)) R.row = lm_sd_family_get(lm_sd_family_match(2, -1, -1));
    else if ((st = lm_dfs_json(te, SDS_MAX_CONFIG, false, &cfg)) == LM_OK) {
        const cJSON *act = cJSON_GetObjectItemCaseSensitive(cfg, "hidden_act");
        bool gelu = cJSON_IsString(act) && !strcmp(act->valuestring, "gelu");
        R.row = lm_sd_family_get(lm_sd_family_match(1, -1, gelu));
    }
    free(te);
    free(te2);
    cJSON_Delete(cfg);
    cfg = NULL;
    if (!st && !R.row) st = lm_error_set(LM_ERR_UNSUPPORTED, "%s: no model family has these text encoders", dir);
    if (!st) lm_sds_prefixes(&R);
    static const char *const stem[C_N] = {"diffusion_pytorch_model", "diffusion_pytorch_model", "model", "model"};
    for (int c = 0; !st && c < C_N; c++) {
        if (c >= C_TE && c - C_TE >= R.row->n_encoders) continue;
        if (!(path = lm_dfs_path(dir, lm_sds_comp_dir[c]))) st = lm_error_status();
        else st = lm_dfs_load_weights_stem(path, stem[c], NULL, lm_device_cpu(), &set[c], NULL);
        free(path);
        path = NULL;
        if (!st && !(used[c] = calloc((size_t)set[c].count + 1, sizeof *used[c])))
            st = lm_error_set(LM_ERR_NOMEM, "out of memory");
    }
    unet_dims ud;
    vae_dims vd;
    clip_dims ce;
    /* the table, as the reader generates it: the UNet, the VAE, the encoders */
    int pooled = -1;
    for (int e = 0; !st && e < R.row->n_encoders; e++)
        if (R.row->encoders[e].pooled) pooled = C_TE + e;
    if (!st) st = lm_sds_unet_dims_dfs(dir, &set[C_UNET], pooled >= 0 ? &set[pooled] : NULL, &ud);
    if (!st) st = lm_sds_unet_keys(&R, &ud);
    if (!st) st = lm_sds_vae_dims_dfs(dir, &set[C_VAE], &vd);
    if (!st) st = lm_sds_vae_keys(&R, &vd);
    for (int e = 0; !st && e < R.row->n_encoders; e++) {
        lm_sd_te_kind kind = R.row->encoders[e].kind;
        st = lm_sds_clip_dims_dfs(dir, lm_sds_comp_dir[C_TE + e], &set[C_TE + e],
                                  kind == LM_SD_TE_OPENCLIP_PROJ, &ce);
        if (!st && kind != LM_SD_TE_CLIP) ce.tm = "";
        if (!st) st = lm_sds_clip_keys(&R, C_TE + e, kind, &ce);
    }
    for (int i = 0; !st && i < R.t.n; i++) {
        const entry *e = &R.t.e[i];
        if (e->xf == XF_THIRD && e->part) continue;
        if (e->xf == XF_THIRD && lm_tensor_set_find(out, e->ldm) >= 0) continue;   /* its bias or weight twin */
        lm_array *a = lm_sds_untransform(&R, dir, sp, used, i);
        st = a ? lm_io_set_add(out, e->ldm, a) : lm_error_status();
    }
    /* every folder tensor has its place (transformers' position_ids buffer aside) */
    for (int c = 0; !st && c < C_N; c++)
        for (int i = 0; !st && i < set[c].count; i++) {
            const char *n = set[c].names[i];
            size_t len = strlen(n);
            if (used[c][i] || (len >= 12 && !strcmp(n + len - 12, "position_ids"))) continue;
            char sh[96];
            lm_shape_str(sh, sizeof sh, set[c].arrays[i]->ndim, set[c].arrays[i]->shape);
            st = lm_error_set(LM_ERR_FORMAT, "%s/%s: unexpected weight %s %s: no place for it in the "
                              "%s architecture", dir, lm_sds_comp_dir[c], n, sh, R.row->name);
        }
    for (int c = 0; c < C_N; c++) {
        lm_tensor_set_free(&set[c]);
        free(used[c]);
    }
    free(R.t.e);
    if (family_out) *family_out = R.row ? R.row->id : LM_SD_UNKNOWN;
    if (st) lm_tensor_set_free(out);
    return st;
}
