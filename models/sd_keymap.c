/* sd_keymap.c - the single-file key map: from an architecture (the *_dims
 * sd_infer.c finds), the table of every tensor the diffusers model has, with
 * its name in the original (CompVis / Stability) layout, its shape in the
 * file and how it is transformed; and the transforms both ways (the writer
 * undoes them).  Generated from the architecture, so a key the map has no
 * place for and a key it needs that is absent are both found. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lumen.h"
#include "models/sd_parts.h"

static lm_status wb(reader *R, int comp, const char *lp, const char *dp, int bias, int nd,
                    int64_t d0, int64_t d1, int64_t d2, int64_t d3);
static lm_status resnet(reader *R, int comp, const char *lp, const char *dp, int64_t in,
                        int64_t out, int64_t temb);
static lm_status transformer(reader *R, const char *lp, const char *dp, int64_t C, int depth,
                             bool linear, int64_t ctx);
static lm_status vae_mid(reader *R, const char *side, int64_t C, bool attn);
static lm_status add(reader *R, int comp, xf_kind xf, int part, const char *ldm, const char *dfs,
                     int nd, int64_t d0, int64_t d1, int64_t d2, int64_t d3);
static lm_status pre(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define CAT(buf, a, b) (snprintf(buf, sizeof buf, "%s%s", a, b), buf)

/* ---- the UNet ---- */

/* the UNet's table: UNet2DConditionModel's names for the file's
 * input_blocks / middle_block / output_blocks */
lm_status lm_sds_unet_keys(reader *R, const unet_dims *D)
{
    int64_t C0 = D->C0, in_ch = D->in_ch, out_ch = D->out_ch, T = D->T, ctx = D->ctx;
    int64_t add_in = D->add_in;
    const int64_t *boc = D->boc;
    const int *depth = D->depth;
    int nlev = D->nlev, L = D->L, mid_depth = D->mid_depth, K;
    bool linear = D->linear;
    lm_status st = wb(R, C_UNET, "input_blocks.0.0.", "conv_in.", 1, 4, C0, in_ch, 3, 3);
    if (!st) st = wb(R, C_UNET, "time_embed.0.", "time_embedding.linear_1.", 1, 2, T, C0, 0, 0);
    if (!st) st = wb(R, C_UNET, "time_embed.2.", "time_embedding.linear_2.", 1, 2, T, T, 0, 0);
    if (!st && add_in) st = wb(R, C_UNET, "label_emb.0.0.", "add_embedding.linear_1.", 1, 2, T, add_in, 0, 0);
    if (!st && add_in) st = wb(R, C_UNET, "label_emb.0.2.", "add_embedding.linear_2.", 1, 2, T, T, 0, 0);
    char a[160], b[160];
    K = 1;
    for (int l = 0; !st && l < nlev; l++) {
        for (int j = 0; !st && j < L; j++, K++) {
            int64_t in = j ? boc[l] : l ? boc[l - 1] : C0;
            pre(a, sizeof a, "input_blocks.%d.0.", K);
            pre(b, sizeof b, "down_blocks.%d.resnets.%d.", l, j);
            st = resnet(R, C_UNET, a, b, in, boc[l], T);
            pre(a, sizeof a, "input_blocks.%d.1.", K);
            pre(b, sizeof b, "down_blocks.%d.attentions.%d.", l, j);
            if (!st && depth[l]) st = transformer(R, a, b, boc[l], depth[l], linear, ctx);
        }
        if (!st && l < nlev - 1) {
            pre(a, sizeof a, "input_blocks.%d.0.op.", K++);
            pre(b, sizeof b, "down_blocks.%d.downsamplers.0.conv.", l);
            st = wb(R, C_UNET, a, b, 1, 4, boc[l], boc[l], 3, 3);
        }
    }
    int64_t Cn = boc[nlev - 1];
    if (!st) st = resnet(R, C_UNET, "middle_block.0.", "mid_block.resnets.0.", Cn, Cn, T);
    if (!st) st = transformer(R, "middle_block.1.", "mid_block.attentions.0.", Cn, mid_depth, linear, ctx);
    if (!st) st = resnet(R, C_UNET, "middle_block.2.", "mid_block.resnets.1.", Cn, Cn, T);
    /* output_blocks: levels reversed, L+1 res blocks each, the skip
     * connections in the order the down path pushed them */
    K = 0;
    for (int r = 0; !st && r < nlev; r++) {
        int l = nlev - 1 - r;
        int64_t prev = r ? boc[l + 1] : Cn, skip_in = l ? boc[l - 1] : C0;
        for (int j = 0; !st && j <= L; j++, K++) {
            int64_t in = (j ? boc[l] : prev) + (j == L ? skip_in : boc[l]);
            pre(a, sizeof a, "output_blocks.%d.0.", K);
            pre(b, sizeof b, "up_blocks.%d.resnets.%d.", r, j);
            st = resnet(R, C_UNET, a, b, in, boc[l], T);
            pre(a, sizeof a, "output_blocks.%d.1.", K);
            pre(b, sizeof b, "up_blocks.%d.attentions.%d.", r, j);
            if (!st && depth[l]) st = transformer(R, a, b, boc[l], depth[l], linear, ctx);
            if (!st && j == L && l > 0) {
                pre(a, sizeof a, "output_blocks.%d.%d.conv.", K, depth[l] ? 2 : 1);
                pre(b, sizeof b, "up_blocks.%d.upsamplers.0.conv.", r);
                st = wb(R, C_UNET, a, b, 1, 4, boc[l], boc[l], 3, 3);
            }
        }
    }
    if (!st) st = wb(R, C_UNET, "out.0.", "conv_norm_out.", 1, 1, C0, 0, 0, 0);
    if (!st) st = wb(R, C_UNET, "out.2.", "conv_out.", 1, 4, out_ch, C0, 3, 3);
    return st;
}

/* ---- the VAE ---- */

/* the VAE's table: AutoencoderKL's names for the file's encoder / decoder */
lm_status lm_sds_vae_keys(reader *R, const vae_dims *D)
{
    int64_t C0 = D->C0, in_ch = D->in_ch, out_ch = D->out_ch, z = D->z;
    const int64_t *boc = D->boc;
    int n = D->n, L = D->L;
    bool quant = D->quant, post = D->post, attn = D->attn;
    int64_t Cn = boc[n - 1];
    char a[160], b[160];
    lm_status st = wb(R, C_VAE, "encoder.conv_in.", "encoder.conv_in.", 1, 4, C0, in_ch, 3, 3);
    for (int l = 0; !st && l < n; l++) {
        for (int j = 0; !st && j < L; j++) {
            pre(a, sizeof a, "encoder.down.%d.block.%d.", l, j);
            pre(b, sizeof b, "encoder.down_blocks.%d.resnets.%d.", l, j);
            st = resnet(R, C_VAE, a, b, j ? boc[l] : l ? boc[l - 1] : C0, boc[l], 0);
        }
        pre(a, sizeof a, "encoder.down.%d.downsample.conv.", l);
        pre(b, sizeof b, "encoder.down_blocks.%d.downsamplers.0.conv.", l);
        if (!st && l < n - 1) st = wb(R, C_VAE, a, b, 1, 4, boc[l], boc[l], 3, 3);
    }
    if (!st) st = vae_mid(R, "encoder", Cn, attn);
    if (!st) st = wb(R, C_VAE, "encoder.norm_out.", "encoder.conv_norm_out.", 1, 1, Cn, 0, 0, 0);
    if (!st) st = wb(R, C_VAE, "encoder.conv_out.", "encoder.conv_out.", 1, 4, 2 * z, Cn, 3, 3);
    if (!st && quant) st = wb(R, C_VAE, "quant_conv.", "quant_conv.", 1, 4, 2 * z, 2 * z, 1, 1);
    if (!st && post) st = wb(R, C_VAE, "post_quant_conv.", "post_quant_conv.", 1, 4, z, z, 1, 1);
    if (!st) st = wb(R, C_VAE, "decoder.conv_in.", "decoder.conv_in.", 1, 4, Cn, z, 3, 3);
    if (!st) st = vae_mid(R, "decoder", Cn, attn);
    /* the decoder's up.N counts from the lowest resolution's other end:
     * diffusers' up_blocks.r is the file's up.(n-1-r) */
    for (int r = 0; !st && r < n; r++) {
        int l = n - 1 - r;
        int64_t prev = r ? boc[l + 1] : Cn;
        for (int j = 0; !st && j <= L; j++) {
            pre(a, sizeof a, "decoder.up.%d.block.%d.", l, j);
            pre(b, sizeof b, "decoder.up_blocks.%d.resnets.%d.", r, j);
            st = resnet(R, C_VAE, a, b, j ? boc[l] : prev, boc[l], 0);
        }
        pre(a, sizeof a, "decoder.up.%d.upsample.conv.", l);
        pre(b, sizeof b, "decoder.up_blocks.%d.upsamplers.0.conv.", r);
        if (!st && l > 0) st = wb(R, C_VAE, a, b, 1, 4, boc[l], boc[l], 3, 3);
    }
    if (!st) st = wb(R, C_VAE, "decoder.norm_out.", "decoder.conv_norm_out.", 1, 1, C0, 0, 0, 0);
    if (!st) st = wb(R, C_VAE, "decoder.conv_out.", "decoder.conv_out.", 1, 4, out_ch, C0, 3, 3);
    return st;
}

/* ---- text encoders ---- */

/* ViT-L in transformers' names: kept as they are, with the text_model.
 * prefix when the file has it */
static lm_status clip_hf_keys(reader *R, int comp, const clip_dims *c)
{
    int64_t V = c->V, D = c->D, F = c->F, Pos = c->Pos;
    int Lyr = c->Lyr;
    const char *tm = c->tm;
    char a[192];
    pre(a, sizeof a, "%sembeddings.token_embedding.", tm);
    lm_status st = wb(R, comp, a, a, 0, 2, V, D, 0, 0);
    pre(a, sizeof a, "%sembeddings.position_embedding.", tm);
    if (!st) st = wb(R, comp, a, a, 0, 2, Pos, D, 0, 0);
    for (int l = 0; !st && l < Lyr; l++) {
        static const char *const lin[4] = {"q_proj", "k_proj", "v_proj", "out_proj"};
        for (int k = 0; !st && k < 4; k++) {
            pre(a, sizeof a, "%sencoder.layers.%d.self_attn.%s.", tm, l, lin[k]);
            st = wb(R, comp, a, a, 1, 2, D, D, 0, 0);
        }
        for (int k = 1; !st && k <= 2; k++) {
            pre(a, sizeof a, "%sencoder.layers.%d.layer_norm%d.", tm, l, k);
            st = wb(R, comp, a, a, 1, 1, D, 0, 0, 0);
        }
        pre(a, sizeof a, "%sencoder.layers.%d.mlp.fc1.", tm, l);
        if (!st) st = wb(R, comp, a, a, 1, 2, F, D, 0, 0);
        pre(a, sizeof a, "%sencoder.layers.%d.mlp.fc2.", tm, l);
        if (!st) st = wb(R, comp, a, a, 1, 2, D, F, 0, 0);
    }
    pre(a, sizeof a, "%sfinal_layer_norm.", tm);
    if (!st) st = wb(R, comp, a, a, 1, 1, D, 0, 0, 0);
    return st;
}

/* OpenCLIP's text tower -> transformers' names: the fused qkv in thirds,
 * text_projection transposed */
static lm_status clip_open_keys(reader *R, int comp, const clip_dims *c)
{
    int64_t V = c->V, D = c->D, F = c->F, Pos = c->Pos, proj = c->proj;
    int Lyr = c->Lyr;
    char a[192], b[192];
    lm_status st = add(R, comp, XF_COPY, 0, "token_embedding.weight", "text_model.embeddings.token_embedding.weight", 2, V, D, 0, 0);
    if (!st) st = add(R, comp, XF_COPY, 0, "positional_embedding", "text_model.embeddings.position_embedding.weight", 2, Pos, D, 0, 0);
    for (int l = 0; !st && l < Lyr; l++) {
        static const char *const q[3] = {"q_proj", "k_proj", "v_proj"};
        for (int k = 0; !st && k < 3; k++) {
            pre(a, sizeof a, "transformer.resblocks.%d.attn.in_proj_weight", l);
            pre(b, sizeof b, "text_model.encoder.layers.%d.self_attn.%s.weight", l, q[k]);
            st = add(R, comp, XF_THIRD, k, a, b, 2, 3 * D, D, 0, 0);
            pre(a, sizeof a, "transformer.resblocks.%d.attn.in_proj_bias", l);
            pre(b, sizeof b, "text_model.encoder.layers.%d.self_attn.%s.bias", l, q[k]);
            if (!st) st = add(R, comp, XF_THIRD, k, a, b, 1, 3 * D, 0, 0, 0);
        }
        struct { const char *l, *d; int nd; int64_t d0, d1; } m[] = {
            {"attn.out_proj.", "self_attn.out_proj.", 2, D, D}, {"ln_1.", "layer_norm1.", 1, D, 0},
            {"ln_2.", "layer_norm2.", 1, D, 0}, {"mlp.c_fc.", "mlp.fc1.", 2, F, D},
            {"mlp.c_proj.", "mlp.fc2.", 2, D, F},
        };
        for (size_t k = 0; !st && k < sizeof m / sizeof *m; k++) {
            pre(a, sizeof a, "transformer.resblocks.%d.%s", l, m[k].l);
            pre(b, sizeof b, "text_model.encoder.layers.%d.%s", l, m[k].d);
            st = wb(R, comp, a, b, 1, m[k].nd, m[k].d0, m[k].d1, 0, 0);
        }
    }
    if (!st) st = wb(R, comp, "ln_final.", "text_model.final_layer_norm.", 1, 1, D, 0, 0, 0);
    if (!st && proj) st = add(R, comp, XF_T, 0, "text_projection", "text_projection.weight", 2, D, proj, 0, 0);
    return st;
}

lm_status lm_sds_clip_keys(reader *R, int comp, lm_sd_te_kind kind, const clip_dims *c)
{
    return kind == LM_SD_TE_CLIP ? clip_hf_keys(R, comp, c) : clip_open_keys(R, comp, c);
}

/* ---- the transforms ---- */

lm_array *lm_sds_transform(const entry *e, lm_array *a)
{
    switch (e->xf) {
    case XF_COPY: return lm_array_retain(a);
    case XF_SQUEEZE: {
        int64_t s[2] = {e->shape[0], e->shape[1]};
        return lm_reshape(a, 2, s);
    }
    case XF_THIRD: {
        int64_t D = e->shape[0] / 3;
        return lm_slice(a, 0, e->part * D, (e->part + 1) * D, 1);
    }
    case XF_T: {
        lm_array *t = lm_transpose(a, 0, 1);
        lm_array *c = t ? lm_contiguous(t) : NULL;
        lm_array_release(t);
        return c;
    }
    }
    return NULL;
}

/* The file tensor of table entry i from the folder's diffusers tensor(s),
 * each transform undone; a fused qkv (part 0) takes its parts 1 and 2 from
 * the entries of the same original name. */
lm_array *lm_sds_untransform(const reader *R, const char *dir, lm_tensor_set *const *set, bool **used,
                             int i)
{
    const entry *e = &R->t.e[i];
    const lm_tensor_set *S = set[e->comp];
    int idx[3] = {-1, -1, -1}, parts = e->xf == XF_THIRD ? 3 : 1;
    for (int j = i, p = 0; p < parts && j < R->t.n; j++) {
        const entry *f = &R->t.e[j];
        if (strcmp(f->ldm, e->ldm)) continue;
        int k = lm_sds_dfs_find(S, f->dfs);
        if (k < 0) {
            lm_error_set(LM_ERR_FORMAT, "%s/%s: missing weight %s (the single file's %s)", dir,
                         lm_sds_comp_dir[f->comp], f->dfs, f->ldm);
            return NULL;
        }
        idx[p++] = k;
        used[e->comp][k] = true;
    }
    /* the shape diffusers gives it */
    int64_t want[4];
    int nd = e->nd;
    memcpy(want, e->shape, sizeof want);
    if (e->xf == XF_SQUEEZE) nd = 2;
    if (e->xf == XF_THIRD) want[0] /= 3;
    if (e->xf == XF_T) want[0] = e->shape[1], want[1] = e->shape[0];
    for (int p = 0; p < parts; p++) {
        const lm_array *a = S->arrays[idx[p]];
        bool same = a->ndim == nd;
        for (int d = 0; same && d < nd; d++) same = a->shape[d] == want[d];
        if (!same) {
            char got[96], need[96];
            lm_shape_str(got, sizeof got, a->ndim, a->shape);
            lm_shape_str(need, sizeof need, nd, want);
            lm_error_set(LM_ERR_SHAPE, "%s/%s: %s has shape %s, the architecture needs %s", dir,
                         lm_sds_comp_dir[e->comp], S->names[idx[p]], got, need);
            return NULL;
        }
    }
    lm_array *a = S->arrays[idx[0]];
    switch (e->xf) {
    case XF_COPY: return lm_array_retain(a);
    case XF_SQUEEZE: return lm_reshape(a, 4, e->shape);
    case XF_THIRD: {
        lm_array *three[3] = {a, S->arrays[idx[1]], S->arrays[idx[2]]};
        return lm_concat(3, three, 0);
    }
    case XF_T: {
        lm_array *t = lm_transpose(a, 0, 1);
        lm_array *c = t ? lm_contiguous(t) : NULL;
        lm_array_release(t);
        return c;
    }
    }
    return NULL;
}

/* ---- building the table ---- */

static lm_status add(reader *R, int comp, xf_kind xf, int part, const char *ldm, const char *dfs,
                     int nd, int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
    table *t = &R->t;
    if (t->n == t->cap) {
        int cap = t->cap ? t->cap * 2 : 1024;
        entry *g = realloc(t->e, sizeof *g * (size_t)cap);
        if (!g) return lm_error_set(LM_ERR_NOMEM, "out of memory");
        t->e = g;
        t->cap = cap;
    }
    entry *e = &t->e[t->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->ldm, sizeof e->ldm, "%s%s", R->pfx[comp], ldm);
    snprintf(e->dfs, sizeof e->dfs, "%s", dfs);
    e->comp = comp;
    e->xf = xf;
    e->part = part;
    e->nd = nd;
    int64_t d[4] = {d0, d1, d2, d3};
    memcpy(e->shape, d, sizeof d);
    return LM_OK;
}

/* weight + bias of one module: ldm prefix lp, diffusers prefix dp (both end
 * in '.'); the weight has nd dimensions, the bias [d0]; bias < 0: none */
static lm_status wb(reader *R, int comp, const char *lp, const char *dp, int bias, int nd,
                    int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
    char l[192], d[192];
    snprintf(l, sizeof l, "%sweight", lp);
    snprintf(d, sizeof d, "%sweight", dp);
    lm_status st = add(R, comp, XF_COPY, 0, l, d, nd, d0, d1, d2, d3);
    if (st == LM_OK && bias) {
        snprintf(l, sizeof l, "%sbias", lp);
        snprintf(d, sizeof d, "%sbias", dp);
        st = add(R, comp, XF_COPY, 0, l, d, 1, d0, 0, 0, 0);
    }
    return st;
}

static lm_status pre(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    return LM_OK;
}

/* ResBlock (ldm: in_layers/emb_layers/out_layers/skip_connection; VAE:
 * norm1/conv1/norm2/conv2/nin_shortcut) <-> diffusers' ResnetBlock2D.
 * temb 0: the VAE's, without a time embedding. */
static lm_status resnet(reader *R, int comp, const char *lp, const char *dp, int64_t in,
                        int64_t out, int64_t temb)
{
    char a[192], b[192];
    bool unet = comp == C_UNET;
    lm_status st = wb(R, comp, CAT(a, lp, unet ? "in_layers.0." : "norm1."), CAT(b, dp, "norm1."), 1, 1, in, 0, 0, 0);
    if (!st) st = wb(R, comp, CAT(a, lp, unet ? "in_layers.2." : "conv1."), CAT(b, dp, "conv1."), 1, 4, out, in, 3, 3);
    if (!st && temb) st = wb(R, comp, CAT(a, lp, "emb_layers.1."), CAT(b, dp, "time_emb_proj."), 1, 2, out, temb, 0, 0);
    if (!st) st = wb(R, comp, CAT(a, lp, unet ? "out_layers.0." : "norm2."), CAT(b, dp, "norm2."), 1, 1, out, 0, 0, 0);
    if (!st) st = wb(R, comp, CAT(a, lp, unet ? "out_layers.3." : "conv2."), CAT(b, dp, "conv2."), 1, 4, out, out, 3, 3);
    if (!st && in != out)
        st = wb(R, comp, CAT(a, lp, unet ? "skip_connection." : "nin_shortcut."), CAT(b, dp, "conv_shortcut."), 1, 4, out, in, 1, 1);
    return st;
}

/* SpatialTransformer <-> Transformer2DModel: the same names inside */
static lm_status transformer(reader *R, const char *lp, const char *dp, int64_t C, int depth,
                             bool linear, int64_t ctx)
{
    char a[192], b[192], x[192];
    lm_status st = wb(R, C_UNET, CAT(a, lp, "norm."), CAT(b, dp, "norm."), 1, 1, C, 0, 0, 0);
    if (!st) st = linear ? wb(R, C_UNET, CAT(a, lp, "proj_in."), CAT(b, dp, "proj_in."), 1, 2, C, C, 0, 0)
                         : wb(R, C_UNET, CAT(a, lp, "proj_in."), CAT(b, dp, "proj_in."), 1, 4, C, C, 1, 1);
    for (int n = 0; !st && n < depth; n++) {
        char tb[64];
        snprintf(tb, sizeof tb, "transformer_blocks.%d.", n);
        for (int at = 1; !st && at <= 2; at++) {
            int64_t kv = at == 1 ? C : ctx;
            static const char *const qkv[3] = {"to_q.", "to_k.", "to_v."};
            for (int q = 0; !st && q < 3; q++) {
                pre(x, sizeof x, "%sattn%d.%s", tb, at, qkv[q]);
                st = wb(R, C_UNET, CAT(a, lp, x), CAT(b, dp, x), 0, 2, C, q ? kv : C, 0, 0);
            }
            pre(x, sizeof x, "%sattn%d.to_out.0.", tb, at);
            if (!st) st = wb(R, C_UNET, CAT(a, lp, x), CAT(b, dp, x), 1, 2, C, C, 0, 0);
        }
        for (int k = 1; !st && k <= 3; k++) {
            pre(x, sizeof x, "%snorm%d.", tb, k);
            st = wb(R, C_UNET, CAT(a, lp, x), CAT(b, dp, x), 1, 1, C, 0, 0, 0);
        }
        /* GEGLU: a projection to 2 x 4C, then 4C back */
        pre(x, sizeof x, "%sff.net.0.proj.", tb);
        if (!st) st = wb(R, C_UNET, CAT(a, lp, x), CAT(b, dp, x), 1, 2, 8 * C, C, 0, 0);
        pre(x, sizeof x, "%sff.net.2.", tb);
        if (!st) st = wb(R, C_UNET, CAT(a, lp, x), CAT(b, dp, x), 1, 2, C, 4 * C, 0, 0);
    }
    if (!st) st = linear ? wb(R, C_UNET, CAT(a, lp, "proj_out."), CAT(b, dp, "proj_out."), 1, 2, C, C, 0, 0)
                         : wb(R, C_UNET, CAT(a, lp, "proj_out."), CAT(b, dp, "proj_out."), 1, 4, C, C, 1, 1);
    return st;
}

/* mid block: two resnets around one attention whose q/k/v/proj_out are
 * 1x1 convs in the file and linears in diffusers */
static lm_status vae_mid(reader *R, const char *side, int64_t C, bool attn)
{
    char a[160], b[160];
    pre(a, sizeof a, "%s.mid.block_1.", side);
    pre(b, sizeof b, "%s.mid_block.resnets.0.", side);
    lm_status st = resnet(R, C_VAE, a, b, C, C, 0);
    pre(a, sizeof a, "%s.mid.block_2.", side);
    pre(b, sizeof b, "%s.mid_block.resnets.1.", side);
    if (!st) st = resnet(R, C_VAE, a, b, C, C, 0);
    if (!attn) return st;
    pre(a, sizeof a, "%s.mid.attn_1.norm.", side);
    pre(b, sizeof b, "%s.mid_block.attentions.0.group_norm.", side);
    if (!st) st = wb(R, C_VAE, a, b, 1, 1, C, 0, 0, 0);
    static const char *const ld[4] = {"q", "k", "v", "proj_out"};
    static const char *const dd[4] = {"to_q", "to_k", "to_v", "to_out.0"};
    for (int k = 0; !st && k < 4; k++) {
        pre(a, sizeof a, "%s.mid.attn_1.%s.weight", side, ld[k]);
        pre(b, sizeof b, "%s.mid_block.attentions.0.%s.weight", side, dd[k]);
        st = add(R, C_VAE, XF_SQUEEZE, 0, a, b, 4, C, C, 1, 1);
        pre(a, sizeof a, "%s.mid.attn_1.%s.bias", side, ld[k]);
        pre(b, sizeof b, "%s.mid_block.attentions.0.%s.bias", side, dd[k]);
        if (!st) st = add(R, C_VAE, XF_COPY, 0, a, b, 1, C, 0, 0, 0);
    }
    return st;
}
