/* sd_detect.c - a single file's family, told from its keys: the row whose
 * text encoders' prefixes occur (models/family.c decides); then each
 * component's prefix from the row. */
#include <string.h>
#include "lumen.h"
#include "models/sd_parts.h"

lm_status lm_sds_detect(reader *R)
{
    R->row = lm_sd_family_get(lm_sd_family_from_keys((const char *const *)R->set.names, R->set.count));
    if (!R->row)
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: not an SD 1.x, 2.x or SDXL base checkpoint: "
                            "no cond_stage_model.transformer. (1.x), cond_stage_model.model. "
                            "(2.x) or conditioner.embedders.0.transformer. + .1.model. (SDXL) "
                            "text encoder keys", R->file);
    lm_sds_prefixes(R);
    bool un = false, va = false;
    size_t nu = strlen(R->pfx[C_UNET]), nv = strlen(R->pfx[C_VAE]);
    for (int i = 0; i < R->set.count; i++) {
        un |= !strncmp(R->set.names[i], R->pfx[C_UNET], nu);
        va |= !strncmp(R->set.names[i], R->pfx[C_VAE], nv);
    }
    if (!un || !va)
        return lm_error_set(LM_ERR_FORMAT, "%s: no %s keys: a single-file checkpoint holds the "
                            "UNet and the VAE", R->file, un ? R->pfx[C_VAE] : R->pfx[C_UNET]);
    return LM_OK;
}

/* each component's key prefix in a file of R->row's family */
void lm_sds_prefixes(reader *R)
{
    R->pfx[C_UNET] = R->row->denoiser_prefix;
    R->pfx[C_VAE] = R->row->vae_prefix;
    R->pfx[C_TE] = R->row->n_encoders > 0 ? R->row->encoders[0].prefix : NULL;
    R->pfx[C_TE2] = R->row->n_encoders > 1 ? R->row->encoders[1].prefix : NULL;
}
