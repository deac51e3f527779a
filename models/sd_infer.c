/* sd_infer.c - the architecture of each component, from a single file's
 * probe tensors (the shapes of a few keys, and which numbered blocks
 * exist) or, for the writer, from a diffusers folder's weights.  What the
 * shapes cannot tell is the family row's (sd_config.c writes it). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lumen.h"
#include "models/sd_parts.h"

static int depth_at(const reader *R, const char *lp);
static lm_status clip_hf(reader *R, int comp, clip_dims *cd);
static lm_status clip_open(reader *R, int comp, bool proj_needed, int drop_last, clip_dims *cd,
                           int *dropped);
static bool dfs_shape(const lm_tensor_set *s, int nd, int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int dfs_find_key(const void *set, const char *key);

/* ---- from a single file ---- */

/* The UNet: conv_in, the time embedding and conv_out give the widths; the
 * input_blocks the levels, their res blocks and transformer depths; the
 * middle block its depth; label_emb SDXL's added embeddings. */
lm_status lm_sds_unet_dims(reader *R, unet_dims *D)
{
    const char *P = R->pfx[C_UNET];
    int64_t s[4], C0, in_ch, out_ch, T, boc[SDS_MAX_LEVELS] = {0}, ctx = 0;
    int depth[SDS_MAX_LEVELS] = {0}, nlev = 0, L = -1, K = 1;
    lm_status st = lm_sds_probe(R, 4, s, "%sinput_blocks.0.0.weight", P);
    if (st) return st;
    C0 = s[0], in_ch = s[1];
    if ((st = lm_sds_probe(R, 2, s, "%stime_embed.0.weight", P))) return st;
    T = s[0];
    if ((st = lm_sds_probe(R, 4, s, "%sout.2.weight", P))) return st;
    out_ch = s[0];
    /* input_blocks: per level, res blocks (each maybe with a transformer),
     * then a Downsample (.op) except after the last level */
    bool linear = false;
    for (;;) {
        int n = 0;
        int64_t c = 0;
        if (nlev == SDS_MAX_LEVELS)
            return lm_error_set(LM_ERR_UNSUPPORTED, "%s: more than %d UNet levels", R->file, SDS_MAX_LEVELS);
        while (lm_sds_has(R, "%sinput_blocks.%d.0.in_layers.2.weight", P, K + n)) {
            char lp[96];
            if ((st = lm_sds_probe(R, 4, s, "%sinput_blocks.%d.0.in_layers.2.weight", P, K + n))) return st;
            if (!n) c = s[0];
            snprintf(lp, sizeof lp, "%sinput_blocks.%d.1.", P, K + n);
            int d = depth_at(R, lp);
            if (!n) depth[nlev] = d;
            else if (d != depth[nlev])
                return lm_error_set(LM_ERR_FORMAT, "%s: %sinput_blocks.%d.1 has %d transformer "
                                    "blocks, input_blocks.%d.1 %d: one depth per level is "
                                    "supported", R->file, P, K + n, d, K, depth[nlev]);
            if (d && !ctx) {
                if ((st = lm_sds_probe(R, 2, s, "%stransformer_blocks.0.attn2.to_k.weight", lp))) return st;
                ctx = s[1];
                char pk[128];
                snprintf(pk, sizeof pk, "%sproj_in.weight", lp);
                int pi = lm_sds_find(R, pk);
                linear = pi >= 0 && R->set.arrays[pi]->ndim == 2;
            }
            n++;
        }
        if (!n) break;
        if (L < 0) L = n;
        else if (n != L)
            return lm_error_set(LM_ERR_FORMAT, "%s: UNet level %d has %d res blocks, level 0 "
                                "has %d", R->file, nlev, n, L);
        boc[nlev++] = c;
        K += n;
        if (!lm_sds_has(R, "%sinput_blocks.%d.0.op.weight", P, K)) break;
        K++;
    }
    if (!nlev)
        return lm_error_set(LM_ERR_FORMAT, "%s: missing key %sinput_blocks.1.0.in_layers.2.weight",
                            R->file, P);
    if (!ctx)
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: the UNet has no cross-attention", R->file);
    char lp[96];
    snprintf(lp, sizeof lp, "%smiddle_block.1.", P);
    int mid_depth = depth_at(R, lp);
    int deepest = depth[nlev - 1];
    if (mid_depth != (deepest ? deepest : 1))
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: the middle block has %d transformer blocks, "
                            "the last level %d (diffusers ties them)", R->file, mid_depth, deepest);
    /* SDXL's added embeddings: pooled text (text_encoder_2's projection)
     * and six time ids, each a sinusoid of addition_time_embed_dim */
    int64_t add_in = 0, add_time = 0;
    if (lm_sds_has(R, "%slabel_emb.0.0.weight", P)) {
        if ((st = lm_sds_probe(R, 2, s, "%slabel_emb.0.0.weight", P))) return st;
        add_in = s[1];
        int64_t pj[2];
        if ((st = lm_sds_probe(R, 2, pj, "%stext_projection", R->pfx[C_TE2]))) return st;
        if ((add_in - pj[1]) <= 0 || (add_in - pj[1]) % 6)
            return lm_error_set(LM_ERR_SHAPE, "%s: %slabel_emb.0.0.weight takes %lld inputs: not "
                                "the pooled width %lld plus 6 time embeddings", R->file, P,
                                (long long)add_in, (long long)pj[1]);
        add_time = (add_in - pj[1]) / 6;
    }

    *D = (unet_dims){.C0 = C0, .in_ch = in_ch, .out_ch = out_ch, .T = T, .ctx = ctx, .add_in = add_in,
                     .add_time = add_time, .nlev = nlev, .L = L, .mid_depth = mid_depth, .linear = linear};
    memcpy(D->boc, boc, sizeof boc);
    memcpy(D->depth, depth, sizeof depth);
    return LM_OK;
}

/* The VAE: the encoder's levels and res blocks, the latent width, the
 * optional quant convs and mid-block attention. */
lm_status lm_sds_vae_dims(reader *R, vae_dims *D)
{
    const char *P = R->pfx[C_VAE];
    int64_t s[4], C0, in_ch, out_ch, z, boc[SDS_MAX_LEVELS];
    int n = 0, L = 0;
    lm_status st = lm_sds_probe(R, 4, s, "%sencoder.conv_in.weight", P);
    if (st) return st;
    C0 = s[0], in_ch = s[1];
    while (n < SDS_MAX_LEVELS && lm_sds_has(R, "%sencoder.down.%d.block.0.conv1.weight", P, n)) {
        if ((st = lm_sds_probe(R, 4, s, "%sencoder.down.%d.block.0.conv1.weight", P, n))) return st;
        boc[n++] = s[0];
    }
    if (!n) return lm_error_set(LM_ERR_FORMAT, "%s: missing key %sencoder.down.0.block.0.conv1.weight",
                                R->file, P);
    while (L < 64 && lm_sds_has(R, "%sencoder.down.0.block.%d.conv1.weight", P, L)) L++;
    if ((st = lm_sds_probe(R, 4, s, "%sdecoder.conv_in.weight", P))) return st;
    z = s[1];
    if ((st = lm_sds_probe(R, 4, s, "%sdecoder.conv_out.weight", P))) return st;
    out_ch = s[0];
    bool quant = lm_sds_has(R, "%squant_conv.weight", P), post = lm_sds_has(R, "%spost_quant_conv.weight", P);
    bool attn = lm_sds_has(R, "%sencoder.mid.attn_1.norm.weight", P);
    *D = (vae_dims){.C0 = C0, .in_ch = in_ch, .out_ch = out_ch, .z = z, .n = n, .L = L, .quant = quant,
                    .post = post, .attn = attn};
    memcpy(D->boc, boc, sizeof boc);
    return LM_OK;
}

lm_status lm_sds_clip_dims(reader *R, int e, int drop_last, clip_dims *c, int *dropped)
{
    int comp = C_TE + e;
    lm_sd_te_kind kind = R->row->encoders[e].kind;
    *dropped = -1;
    if (kind == LM_SD_TE_CLIP) return clip_hf(R, comp, c);
    return kind == LM_SD_TE_OPENCLIP_PROJ ? clip_open(R, comp, true, 0, c, dropped)
                                          : clip_open(R, comp, false, drop_last, c, dropped);
}

/* CLIP ViT-L in transformers' names (LM_SD_TE_CLIP): its sizes, and whether
 * the file writes the text_model. prefix */
static lm_status clip_hf(reader *R, int comp, clip_dims *cd)
{
    const char *P = R->pfx[comp];
    const char *tm = lm_sds_has(R, "%stext_model.embeddings.token_embedding.weight", P) ? "text_model." : "";
    int64_t s[4], V, D, F, Pos;
    lm_status st = lm_sds_probe(R, 2, s, "%s%sembeddings.token_embedding.weight", P, tm);
    if (st) return st;
    V = s[0], D = s[1];
    if ((st = lm_sds_probe(R, 2, s, "%s%sembeddings.position_embedding.weight", P, tm))) return st;
    Pos = s[0];
    if ((st = lm_sds_probe(R, 2, s, "%s%sencoder.layers.0.mlp.fc1.weight", P, tm))) return st;
    F = s[0];
    char fmt[128];
    snprintf(fmt, sizeof fmt, "%%s%sencoder.layers.%%d.mlp.fc1.weight", tm);
    int Lyr = lm_sds_count(lm_sds_find_key, R, fmt, P);
    *cd = (clip_dims){.V = V, .D = D, .F = F, .Pos = Pos, .Lyr = Lyr, .tm = tm};
    return LM_OK;
}

/* OpenCLIP's text tower (LM_SD_TE_OPENCLIP[_PROJ]): its sizes; taken to the
 * penultimate layer (the last block dropped) unless its projection is needed */
static lm_status clip_open(reader *R, int comp, bool proj_needed, int drop_last, clip_dims *cd,
                           int *dropped)
{
    const char *P = R->pfx[comp];
    int64_t s[4], V, D, F, Pos, proj = 0;
    lm_status st = lm_sds_probe(R, 2, s, "%stoken_embedding.weight", P);
    if (st) return st;
    V = s[0], D = s[1];
    if ((st = lm_sds_probe(R, 2, s, "%spositional_embedding", P))) return st;
    Pos = s[0];
    if ((st = lm_sds_probe(R, 2, s, "%stransformer.resblocks.0.mlp.c_fc.weight", P))) return st;
    F = s[0];
    int Lyr = lm_sds_count(lm_sds_find_key, R, "%stransformer.resblocks.%d.mlp.c_fc.weight", P);
    bool has_proj = lm_sds_has(R, "%stext_projection", P);
    *dropped = -1;
    if (proj_needed) {
        if ((st = lm_sds_probe(R, 2, s, "%stext_projection", P))) return st;
        proj = s[1];
    } else if (drop_last > 0 || (drop_last == 0 && has_proj)) {
        /* SD 2.x conditions on the penultimate layer: the last block is
         * never run (diffusers' text encoder has one layer fewer) */
        if (Lyr < 2)
            return lm_error_set(LM_ERR_FORMAT, "%s: %stransformer has %d blocks: SD 2.x's "
                                "penultimate layer needs at least 2", R->file, P, Lyr);
        *dropped = --Lyr;
    }
    *cd = (clip_dims){.V = V, .D = D, .F = F, .Pos = Pos, .Lyr = Lyr, .proj = proj, .tm = ""};
    return LM_OK;
}

/* the number of transformer blocks under prefix lp (0: no attention there) */
static int depth_at(const reader *R, const char *lp)
{
    int n = 0;
    while (n < 1024 && lm_sds_has(R, "%stransformer_blocks.%d.attn1.to_q.weight", lp, n)) n++;
    return n;
}

/* ---- from a diffusers folder's weights (the writer) ---- */

/* a folder tensor by diffusers' name; transformers 5 saves CLIP without
 * "text_model." */
int lm_sds_dfs_find(const lm_tensor_set *s, const char *name)
{
    int i = lm_tensor_set_find(s, name);
    if (i < 0 && !strncmp(name, "text_model.", 11)) i = lm_tensor_set_find(s, name + 11);
    return i;
}

static bool dfs_shape(const lm_tensor_set *s, int nd, int64_t *shape, const char *fmt, ...)
{
    char k[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k, sizeof k, fmt, ap);
    va_end(ap);
    int i = lm_sds_dfs_find(s, k);
    if (i < 0 || s->arrays[i]->ndim != nd) return false;
    for (int d = 0; d < nd; d++) shape[d] = s->arrays[i]->shape[d];
    return true;
}

static lm_status dfs_need(const char *dir, const char *comp, bool ok, const char *what)
{
    return ok ? LM_OK : lm_error_set(LM_ERR_FORMAT, "%s/%s: missing weight %s (or not the shape "
                                     "diffusers gives it)", dir, comp, what);
}

lm_status lm_sds_unet_dims_dfs(const char *dir, const lm_tensor_set *U, const lm_tensor_set *te2,
                               unet_dims *D)
{
    int64_t s[4];
    memset(D, 0, sizeof *D);
    lm_status st = dfs_need(dir, "unet", dfs_shape(U, 4, s, "conv_in.weight"), "conv_in.weight");
    if (st) return st;
    D->C0 = s[0], D->in_ch = s[1];
    if ((st = dfs_need(dir, "unet", dfs_shape(U, 2, s, "time_embedding.linear_1.weight"),
                       "time_embedding.linear_1.weight"))) return st;
    D->T = s[0];
    if ((st = dfs_need(dir, "unet", dfs_shape(U, 4, s, "conv_out.weight"), "conv_out.weight"))) return st;
    D->out_ch = s[0];
    while (D->nlev < SDS_MAX_LEVELS && dfs_shape(U, 4, s, "down_blocks.%d.resnets.0.conv1.weight", D->nlev))
        D->boc[D->nlev++] = s[0];
    if ((st = dfs_need(dir, "unet", D->nlev > 0, "down_blocks.0.resnets.0.conv1.weight"))) return st;
    D->L = lm_sds_count(dfs_find_key, U, "%sdown_blocks.0.resnets.%d.conv1.weight", "");
    for (int l = 0; l < D->nlev; l++) {
        char lp[96];
        snprintf(lp, sizeof lp, "down_blocks.%d.attentions.0.", l);
        D->depth[l] = lm_sds_count(dfs_find_key, U, "%stransformer_blocks.%d.attn1.to_q.weight", lp);
        if (D->depth[l] && !D->ctx) {
            if (dfs_shape(U, 2, s, "%stransformer_blocks.0.attn2.to_k.weight", lp)) D->ctx = s[1];
            int64_t pi[4];
            D->linear = dfs_shape(U, 2, pi, "%sproj_in.weight", lp);
        }
    }
    D->mid_depth = lm_sds_count(dfs_find_key, U, "%stransformer_blocks.%d.attn1.to_q.weight", "mid_block.attentions.0.");
    if (dfs_shape(U, 2, s, "add_embedding.linear_1.weight")) {
        D->add_in = s[1];
        int64_t pj[2];
        if (!te2 || !dfs_shape(te2, 2, pj, "text_projection.weight") || D->add_in <= pj[0] ||
            (D->add_in - pj[0]) % 6)
            return lm_error_set(LM_ERR_FORMAT, "%s: unet/add_embedding.linear_1.weight takes %lld "
                                "inputs: not text_encoder_2's projection plus 6 time embeddings",
                                dir, (long long)D->add_in);
        D->add_time = (D->add_in - pj[0]) / 6;
    }
    return LM_OK;
}

lm_status lm_sds_vae_dims_dfs(const char *dir, const lm_tensor_set *V, vae_dims *D)
{
    int64_t s[4];
    memset(D, 0, sizeof *D);
    lm_status st = dfs_need(dir, "vae", dfs_shape(V, 4, s, "encoder.conv_in.weight"), "encoder.conv_in.weight");
    if (st) return st;
    D->C0 = s[0], D->in_ch = s[1];
    while (D->n < SDS_MAX_LEVELS && dfs_shape(V, 4, s, "encoder.down_blocks.%d.resnets.0.conv1.weight", D->n))
        D->boc[D->n++] = s[0];
    if ((st = dfs_need(dir, "vae", D->n > 0, "encoder.down_blocks.0.resnets.0.conv1.weight"))) return st;
    D->L = lm_sds_count(dfs_find_key, V, "%sencoder.down_blocks.0.resnets.%d.conv1.weight", "");
    if ((st = dfs_need(dir, "vae", dfs_shape(V, 4, s, "decoder.conv_in.weight"), "decoder.conv_in.weight")))
        return st;
    D->z = s[1];
    if ((st = dfs_need(dir, "vae", dfs_shape(V, 4, s, "decoder.conv_out.weight"), "decoder.conv_out.weight")))
        return st;
    D->out_ch = s[0];
    D->quant = dfs_shape(V, 4, s, "quant_conv.weight");
    D->post = dfs_shape(V, 4, s, "post_quant_conv.weight");
    D->attn = dfs_shape(V, 1, s, "encoder.mid_block.attentions.0.group_norm.weight");
    return LM_OK;
}

lm_status lm_sds_clip_dims_dfs(const char *dir, const char *comp, const lm_tensor_set *T, bool proj,
                               clip_dims *c)
{
    int64_t s[4];
    memset(c, 0, sizeof *c);
    c->tm = "text_model.";
    lm_status st = dfs_need(dir, comp, dfs_shape(T, 2, s, "text_model.embeddings.token_embedding.weight"),
                            "text_model.embeddings.token_embedding.weight");
    if (st) return st;
    c->V = s[0], c->D = s[1];
    if ((st = dfs_need(dir, comp, dfs_shape(T, 2, s, "text_model.embeddings.position_embedding.weight"),
                       "text_model.embeddings.position_embedding.weight"))) return st;
    c->Pos = s[0];
    if ((st = dfs_need(dir, comp, dfs_shape(T, 2, s, "text_model.encoder.layers.0.mlp.fc1.weight"),
                       "text_model.encoder.layers.0.mlp.fc1.weight"))) return st;
    c->F = s[0];
    c->Lyr = lm_sds_count(dfs_find_key, T, "%sencoder.layers.%d.mlp.fc1.weight", "text_model.");
    if (proj) {
        if ((st = dfs_need(dir, comp, dfs_shape(T, 2, s, "text_projection.weight"), "text_projection.weight")))
            return st;
        c->proj = s[0];
    }
    return LM_OK;
}

static int dfs_find_key(const void *set, const char *key) { return lm_sds_dfs_find(set, key); }
