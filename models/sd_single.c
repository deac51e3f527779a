/* sd_single.c - single-file SD 1.x / 2.x / SDXL checkpoints (see sd_single.h).
 *
 * The order of work: map the file; sort its keys; tell the family from the
 * prefixes; infer each component's config from a few probe tensors; from
 * that config generate the table of every tensor the diffusers model has,
 * with its original name, its shape in the file and how it is transformed;
 * walk the table (missing key, wrong shape: error); every file key the
 * table did not claim must be on the skip list (else: error). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "backend.h"
#include "core/io/io_internal.h"
#include "diffusers_config.h"
#include "lumen.h"
#include "sd_single.h"

#define SDS_MAX_CONFIG (1u << 20)

enum { C_UNET, C_VAE, C_TE, C_TE2, C_N };
static const char *const comp_dir[C_N] = {"unet", "vae", "text_encoder", "text_encoder_2"};

/* how a file tensor becomes the diffusers one */
typedef enum xf_kind {
    XF_COPY,      /* as it is */
    XF_SQUEEZE,   /* [O, I, 1, 1] 1x1 conv -> [O, I] linear (VAE attention) */
    XF_THIRD,     /* part 0/1/2 of a fused [3D, ...] qkv along axis 0 */
    XF_T,         /* [D, P] -> [P, D] (OpenCLIP text_projection) */
} xf_kind;

typedef struct entry {
    char ldm[192], dfs[192];
    int comp, nd, part;
    int64_t shape[4];    /* in the file */
    xf_kind xf;
} entry;

typedef struct table {
    entry *e;
    int n, cap;
} table;

typedef struct reader {
    const char *file;
    lm_tensor_set set;
    int *order;          /* indices of set sorted by name */
    bool *used;
    table t;
    lm_sd_family fam;
    const char *pfx[C_N];   /* each component's key prefix in the file */
    lm_device *dev;         /* where the weights go */
    int nkept, ndequant;    /* quantized tensors kept as they are / dequantized */
    lm_array **deq;         /* per file tensor: its dequantized f32 copy, once made */
} reader;

const char *lm_sd_family_name(lm_sd_family f)
{
    switch (f) {
    case LM_SD_1: return "sd1";
    case LM_SD_2: return "sd2";
    case LM_SD_XL: return "sdxl";
    default: return "unknown";
    }
}

/* ---- the file's keys ---- */

static int cmp_idx(const void *a, const void *b, void *set)
{
    const lm_tensor_set *s = set;
    return strcmp(s->names[*(const int *)a], s->names[*(const int *)b]);
}

static int find(const reader *R, const char *name)
{
    int lo = 0, hi = R->set.count - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = strcmp(R->set.names[R->order[mid]], name);
        if (!c) return R->order[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

static bool has(const reader *R, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool has(const reader *R, const char *fmt, ...)
{
    char k[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k, sizeof k, fmt, ap);
    va_end(ap);
    return find(R, k) >= 0;
}

/* The shape of a probe tensor, which the inference needs: absent is an
 * error naming the key. */
static lm_status probe(const reader *R, int nd, int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static lm_status probe(const reader *R, int nd, int64_t *shape, const char *fmt, ...)
{
    char k[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k, sizeof k, fmt, ap);
    va_end(ap);
    int i = find(R, k);
    if (i < 0) return lm_error_set(LM_ERR_FORMAT, "%s: missing key %s", R->file, k);
    const lm_array *a = R->set.arrays[i];
    if (a->ndim != nd) {
        char got[96];
        lm_shape_str(got, sizeof got, a->ndim, a->shape);
        return lm_error_set(LM_ERR_SHAPE, "%s: %s has shape %s, expected %d dimensions", R->file,
                            k, got, nd);
    }
    for (int d = 0; d < nd; d++) shape[d] = a->shape[d];
    return LM_OK;
}

/* ---- the table ---- */

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

static lm_status pre(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static lm_status pre(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    return LM_OK;
}

#define CAT(buf, a, b) (snprintf(buf, sizeof buf, "%s%s", a, b), buf)

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

/* ---- config helpers ---- */

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

/* ---- UNet ---- */

#define MAX_LEVELS 8

/* the number of transformer blocks under prefix lp (0: no attention there) */
static int depth_at(const reader *R, const char *lp)
{
    int n = 0;
    while (n < 1024 && has(R, "%stransformer_blocks.%d.attn1.to_q.weight", lp, n)) n++;
    return n;
}

/* What the UNet's table and config are made from: probed from a single
 * file's shapes, or read from a diffusers folder's weights (the writer) */
typedef struct unet_dims {
    int64_t C0, in_ch, out_ch, T, boc[MAX_LEVELS], ctx, add_in, add_time;
    int depth[MAX_LEVELS], nlev, L, mid_depth;
    bool linear;
} unet_dims;

static lm_status unet_emit(reader *R, const lm_sd_single_opts *o, const unet_dims *D, cJSON **cfg);

static lm_status unet(reader *R, const lm_sd_single_opts *o, cJSON **cfg)
{
    const char *P = R->pfx[C_UNET];
    int64_t s[4], C0, in_ch, out_ch, T, boc[MAX_LEVELS] = {0}, ctx = 0;
    int depth[MAX_LEVELS] = {0}, nlev = 0, L = -1, K = 1;
    lm_status st = probe(R, 4, s, "%sinput_blocks.0.0.weight", P);
    if (st) return st;
    C0 = s[0], in_ch = s[1];
    if ((st = probe(R, 2, s, "%stime_embed.0.weight", P))) return st;
    T = s[0];
    if ((st = probe(R, 4, s, "%sout.2.weight", P))) return st;
    out_ch = s[0];
    /* input_blocks: per level, res blocks (each maybe with a transformer),
     * then a Downsample (.op) except after the last level */
    bool linear = false;
    for (;;) {
        int n = 0;
        int64_t c = 0;
        if (nlev == MAX_LEVELS)
            return lm_error_set(LM_ERR_UNSUPPORTED, "%s: more than %d UNet levels", R->file, MAX_LEVELS);
        while (has(R, "%sinput_blocks.%d.0.in_layers.2.weight", P, K + n)) {
            char lp[96];
            if ((st = probe(R, 4, s, "%sinput_blocks.%d.0.in_layers.2.weight", P, K + n))) return st;
            if (!n) c = s[0];
            snprintf(lp, sizeof lp, "%sinput_blocks.%d.1.", P, K + n);
            int d = depth_at(R, lp);
            if (!n) depth[nlev] = d;
            else if (d != depth[nlev])
                return lm_error_set(LM_ERR_FORMAT, "%s: %sinput_blocks.%d.1 has %d transformer "
                                    "blocks, input_blocks.%d.1 %d: one depth per level is "
                                    "supported", R->file, P, K + n, d, K, depth[nlev]);
            if (d && !ctx) {
                if ((st = probe(R, 2, s, "%stransformer_blocks.0.attn2.to_k.weight", lp))) return st;
                ctx = s[1];
                char pk[128];
                snprintf(pk, sizeof pk, "%sproj_in.weight", lp);
                int pi = find(R, pk);
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
        if (!has(R, "%sinput_blocks.%d.0.op.weight", P, K)) break;
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
    if (has(R, "%slabel_emb.0.0.weight", P)) {
        if ((st = probe(R, 2, s, "%slabel_emb.0.0.weight", P))) return st;
        add_in = s[1];
        int64_t pj[2];
        if ((st = probe(R, 2, pj, "%stext_projection", R->pfx[C_TE2]))) return st;
        if ((add_in - pj[1]) <= 0 || (add_in - pj[1]) % 6)
            return lm_error_set(LM_ERR_SHAPE, "%s: %slabel_emb.0.0.weight takes %lld inputs: not "
                                "the pooled width %lld plus 6 time embeddings", R->file, P,
                                (long long)add_in, (long long)pj[1]);
        add_time = (add_in - pj[1]) / 6;
    }

    unet_dims D = {.C0 = C0, .in_ch = in_ch, .out_ch = out_ch, .T = T, .ctx = ctx, .add_in = add_in,
                   .add_time = add_time, .nlev = nlev, .L = L, .mid_depth = mid_depth, .linear = linear};
    memcpy(D.boc, boc, sizeof boc);
    memcpy(D.depth, depth, sizeof depth);
    return unet_emit(R, o, &D, cfg);
}

/* the UNet's table, from that architecture, and its config */
static lm_status unet_emit(reader *R, const lm_sd_single_opts *o, const unet_dims *D, cJSON **cfg)
{
    int64_t C0 = D->C0, in_ch = D->in_ch, out_ch = D->out_ch, T = D->T, ctx = D->ctx;
    int64_t add_in = D->add_in, add_time = D->add_time;
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
    if (st) return st;

    /* the config: shapes, then the family's conventions */
    const char *down[MAX_LEVELS], *up[MAX_LEVELS];
    int64_t heads[MAX_LEVELS], tl[MAX_LEVELS];
    bool sd1 = R->fam == LM_SD_1;
    for (int l = 0; l < nlev; l++) {
        down[l] = depth[l] ? "CrossAttnDownBlock2D" : "DownBlock2D";
        up[nlev - 1 - l] = depth[l] ? "CrossAttnUpBlock2D" : "UpBlock2D";
        tl[l] = depth[l] ? depth[l] : 1;
        /* SD 1.x: 8 heads everywhere (diffusers' attention_head_dim holds
         * the head count there); SD 2.x / SDXL: heads of 64 channels */
        heads[l] = boc[l] / 64 ? boc[l] / 64 : 1;
    }
    cJSON *c = cJSON_CreateObject();
    if (!c) return lm_error_set(LM_ERR_NOMEM, "out of memory");
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
    if (R->fam == LM_SD_XL || !one_depth)
        cJSON_AddItemToObject(c, "transformer_layers_per_block", int_array(tl, nlev));
    else cJSON_AddNumberToObject(c, "transformer_layers_per_block", (double)tl[0]);
    if (sd1) cJSON_AddNumberToObject(c, "attention_head_dim", 8);
    else cJSON_AddItemToObject(c, "attention_head_dim", int_array(heads, nlev));
    if (T != 4 * C0) cJSON_AddNumberToObject(c, "time_embedding_dim", (double)T);
    if (add_in) {
        cJSON_AddStringToObject(c, "addition_embed_type", "text_time");
        cJSON_AddNumberToObject(c, "addition_time_embed_dim", (double)add_time);
        cJSON_AddNumberToObject(c, "projection_class_embeddings_input_dim", (double)add_in);
    } else {
        cJSON_AddNullToObject(c, "addition_embed_type");
    }
    int64_t sample = R->fam == LM_SD_XL ? 128 : R->fam == LM_SD_2 && o->prediction_type &&
                     !strcmp(o->prediction_type, "v_prediction") ? 96 : 64;
    cJSON_AddNumberToObject(c, "sample_size", (double)sample);
    cJSON_AddNumberToObject(c, "norm_num_groups", 32);
    cJSON_AddNumberToObject(c, "norm_eps", 1e-5);
    cJSON_AddBoolToObject(c, "upcast_attention", R->fam == LM_SD_2);
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
    *cfg = c;
    return LM_OK;
}

/* ---- VAE ---- */

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

typedef struct vae_dims {
    int64_t C0, in_ch, out_ch, z, boc[MAX_LEVELS];
    int n, L;
    bool quant, post, attn;
} vae_dims;

static lm_status vae_emit(reader *R, const vae_dims *D, cJSON **cfg);

static lm_status vae(reader *R, cJSON **cfg)
{
    const char *P = R->pfx[C_VAE];
    int64_t s[4], C0, in_ch, out_ch, z, boc[MAX_LEVELS];
    int n = 0, L = 0;
    lm_status st = probe(R, 4, s, "%sencoder.conv_in.weight", P);
    if (st) return st;
    C0 = s[0], in_ch = s[1];
    while (n < MAX_LEVELS && has(R, "%sencoder.down.%d.block.0.conv1.weight", P, n)) {
        if ((st = probe(R, 4, s, "%sencoder.down.%d.block.0.conv1.weight", P, n))) return st;
        boc[n++] = s[0];
    }
    if (!n) return lm_error_set(LM_ERR_FORMAT, "%s: missing key %sencoder.down.0.block.0.conv1.weight",
                                R->file, P);
    while (L < 64 && has(R, "%sencoder.down.0.block.%d.conv1.weight", P, L)) L++;
    if ((st = probe(R, 4, s, "%sdecoder.conv_in.weight", P))) return st;
    z = s[1];
    if ((st = probe(R, 4, s, "%sdecoder.conv_out.weight", P))) return st;
    out_ch = s[0];
    bool quant = has(R, "%squant_conv.weight", P), post = has(R, "%spost_quant_conv.weight", P);
    bool attn = has(R, "%sencoder.mid.attn_1.norm.weight", P);
    vae_dims D = {.C0 = C0, .in_ch = in_ch, .out_ch = out_ch, .z = z, .n = n, .L = L, .quant = quant,
                  .post = post, .attn = attn};
    memcpy(D.boc, boc, sizeof boc);
    return vae_emit(R, &D, cfg);
}

/* the VAE's table and config */
static lm_status vae_emit(reader *R, const vae_dims *D, cJSON **cfg)
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
    if (st) return st;

    const char *down[MAX_LEVELS], *up[MAX_LEVELS];
    for (int l = 0; l < n; l++) down[l] = "DownEncoderBlock2D", up[l] = "UpDecoderBlock2D";
    cJSON *c = cJSON_CreateObject();
    if (!c) return lm_error_set(LM_ERR_NOMEM, "out of memory");
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
    cJSON_AddNumberToObject(c, "sample_size", R->fam == LM_SD_XL ? 1024 : R->fam == LM_SD_2 ? 768 : 512);
    cJSON_AddNumberToObject(c, "scaling_factor", R->fam == LM_SD_XL ? 0.13025 : 0.18215);
    cJSON_AddNullToObject(c, "shift_factor");
    cJSON_AddBoolToObject(c, "force_upcast", true);
    *cfg = c;
    return LM_OK;
}

/* ---- text encoders ---- */

static int count_layers(const reader *R, const char *fmt_prefix, const char *pfx)
{
    int n = 0;
    char k[256];
    for (;;) {
        snprintf(k, sizeof k, fmt_prefix, pfx, n);
        if (find(R, k) < 0) return n;
        n++;
    }
}

static cJSON *clip_config(int64_t V, int64_t D, int64_t F, int64_t Lyr, int64_t Pos, int64_t proj,
                          bool quick)
{
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

/* a text encoder's sizes (tm: ViT-L's "text_model." prefix or "") */
typedef struct clip_dims {
    int64_t V, D, F, Pos, proj;
    int Lyr;
    const char *tm;
} clip_dims;

static lm_status clip_hf_emit(reader *R, int comp, const clip_dims *c, cJSON **cfg);
static lm_status clip_open_emit(reader *R, int comp, const clip_dims *c, cJSON **cfg);

/* ViT-L in transformers' names (SD 1.x, SDXL's first): the table keeps the
 * names as they are, with the text_model. prefix when the file has it */
static lm_status clip_hf(reader *R, int comp, cJSON **cfg)
{
    const char *P = R->pfx[comp];
    const char *tm = has(R, "%stext_model.embeddings.token_embedding.weight", P) ? "text_model." : "";
    int64_t s[4], V, D, F, Pos;
    lm_status st = probe(R, 2, s, "%s%sembeddings.token_embedding.weight", P, tm);
    if (st) return st;
    V = s[0], D = s[1];
    if ((st = probe(R, 2, s, "%s%sembeddings.position_embedding.weight", P, tm))) return st;
    Pos = s[0];
    if ((st = probe(R, 2, s, "%s%sencoder.layers.0.mlp.fc1.weight", P, tm))) return st;
    F = s[0];
    char fmt[128];
    snprintf(fmt, sizeof fmt, "%%s%sencoder.layers.%%d.mlp.fc1.weight", tm);
    int Lyr = count_layers(R, fmt, P);
    clip_dims c = {.V = V, .D = D, .F = F, .Pos = Pos, .Lyr = Lyr, .tm = tm};
    return clip_hf_emit(R, comp, &c, cfg);
}

static lm_status clip_hf_emit(reader *R, int comp, const clip_dims *c, cJSON **cfg)
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
    if (st) return st;
    *cfg = clip_config(V, D, F, Lyr, Pos, 0, true);
    return *cfg ? LM_OK : lm_error_set(LM_ERR_NOMEM, "out of memory");
}

/* OpenCLIP's text tower (SD 2.x, SDXL's second) -> transformers' names */
static lm_status clip_open(reader *R, int comp, int drop_last, cJSON **cfg, int *dropped)
{
    const char *P = R->pfx[comp];
    int64_t s[4], V, D, F, Pos, proj = 0;
    lm_status st = probe(R, 2, s, "%stoken_embedding.weight", P);
    if (st) return st;
    V = s[0], D = s[1];
    if ((st = probe(R, 2, s, "%spositional_embedding", P))) return st;
    Pos = s[0];
    if ((st = probe(R, 2, s, "%stransformer.resblocks.0.mlp.c_fc.weight", P))) return st;
    F = s[0];
    int Lyr = count_layers(R, "%stransformer.resblocks.%d.mlp.c_fc.weight", P);
    bool has_proj = has(R, "%stext_projection", P);
    *dropped = -1;
    if (comp == C_TE2) {
        if ((st = probe(R, 2, s, "%stext_projection", P))) return st;
        proj = s[1];
    } else if (drop_last > 0 || (drop_last == 0 && has_proj)) {
        /* SD 2.x conditions on the penultimate layer: the last block is
         * never run (diffusers' text encoder has one layer fewer) */
        if (Lyr < 2)
            return lm_error_set(LM_ERR_FORMAT, "%s: %stransformer has %d blocks: SD 2.x's "
                                "penultimate layer needs at least 2", R->file, P, Lyr);
        *dropped = --Lyr;
    }
    clip_dims c = {.V = V, .D = D, .F = F, .Pos = Pos, .Lyr = Lyr, .proj = proj, .tm = ""};
    return clip_open_emit(R, comp, &c, cfg);
}

static lm_status clip_open_emit(reader *R, int comp, const clip_dims *c, cJSON **cfg)
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
    if (st) return st;
    *cfg = clip_config(V, D, F, Lyr, Pos, proj, false);
    return *cfg ? LM_OK : lm_error_set(LM_ERR_NOMEM, "out of memory");
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
        /* SD 2.x: OpenCLIP's projection and the block past the penultimate */
        if (c == C_TE && R->fam == LM_SD_2) {
            char last[64];
            snprintf(last, sizeof last, "transformer.resblocks.%d.", dropped);
            if (!strcmp(r, "text_projection") || (dropped >= 0 && !strncmp(r, last, strlen(last))))
                return true;
        }
    }
    return false;
}

/* ---- the family ---- */

/* each component's key prefix in a file of R->fam */
static void prefixes(reader *R)
{
    R->pfx[C_UNET] = "model.diffusion_model.";
    R->pfx[C_VAE] = "first_stage_model.";
    R->pfx[C_TE] = R->fam == LM_SD_XL ? "conditioner.embedders.0.transformer."
                   : R->fam == LM_SD_2 ? "cond_stage_model.model." : "cond_stage_model.transformer.";
    R->pfx[C_TE2] = R->fam == LM_SD_XL ? "conditioner.embedders.1.model." : NULL;
}

static lm_status family(reader *R)
{
    bool sd1 = false, sd2 = false, xl0 = false, xl1 = false, un = false, va = false;
    for (int i = 0; i < R->set.count; i++) {
        const char *k = R->set.names[i];
        sd1 |= !strncmp(k, "cond_stage_model.transformer.", 29);
        sd2 |= !strncmp(k, "cond_stage_model.model.", 23);
        xl0 |= !strncmp(k, "conditioner.embedders.0.transformer.", 36);
        xl1 |= !strncmp(k, "conditioner.embedders.1.model.", 30);
        un |= !strncmp(k, "model.diffusion_model.", 22);
        va |= !strncmp(k, "first_stage_model.", 18);
    }
    if (xl0 && xl1) {
        R->fam = LM_SD_XL;
    } else if (sd2 && !sd1) {
        R->fam = LM_SD_2;
    } else if (sd1 && !sd2) {
        R->fam = LM_SD_1;
    } else {
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: not an SD 1.x, 2.x or SDXL base checkpoint: "
                            "no cond_stage_model.transformer. (1.x), cond_stage_model.model. "
                            "(2.x) or conditioner.embedders.0.transformer. + .1.model. (SDXL) "
                            "text encoder keys", R->file);
    }
    prefixes(R);
    if (!un || !va)
        return lm_error_set(LM_ERR_FORMAT, "%s: no %s keys: a single-file checkpoint holds the "
                            "UNet and the VAE", R->file, un ? "first_stage_model." : "model.diffusion_model.");
    return LM_OK;
}

/* ---- walking the table ---- */

static lm_array *transform(const entry *e, lm_array *a)
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

/* Whether the model runs this table entry through lm_linear as it is (a
 * UNet or text-encoder weight [out, in] taken whole; embeddings are
 * gathered, not multiplied, and the VAE's attention is squeezed from 1x1
 * convs) */
static bool linear_weight(const entry *e)
{
    size_t n = strlen(e->dfs);
    return e->comp != C_VAE && e->xf == XF_COPY && e->nd == 2 && n > 7 &&
           !strcmp(e->dfs + n - 7, ".weight") && !strstr(e->dfs, "embedding");
}

/* Whether dev runs QLINEAR with a weight like w: asked of the backend with a
 * node of the real shapes, so a backend that learns the op (or a dtype)
 * needs no change here. */
static bool qlinear_supported(lm_device *dev, lm_array *w)
{
    int64_t xs[2] = {1, w->shape[1]};
    lm_array *x = lm_zeros(2, xs, LM_F32, w->device);
    lm_array *y = x ? lm_linear(x, w, NULL) : NULL;
    bool ok = y && y->op == LM_OP_QLINEAR && dev->backend->supports(dev, y);
    lm_array_release(y);
    lm_array_release(x);
    lm_error_clear();
    return ok;
}

/* A quantized file tensor (GGUF): a linear weight the device multiplies
 * quantized stays so (*keep); anything else is dequantized to f32 here and
 * cast to the compute dtype by the model, as a float file tensor is. */
static lm_array *unquantize(reader *R, const entry *e, int k, bool *keep)
{
    lm_array *a = R->set.arrays[k];
    *keep = linear_weight(e) && qlinear_supported(R->dev, a);
    if (*keep) {
        R->nkept++;
        return lm_array_retain(a);
    }
    /* once per file tensor: a fused qkv gives three entries */
    if (!R->deq[k]) {
        if (!(R->deq[k] = lm_dequantize(a))) {
            lm_error_prefix("%s: %s (%s)", R->file, e->ldm, lm_dtype_name(a->dtype));
            return NULL;
        }
        R->ndequant++;
    }
    return lm_array_retain(R->deq[k]);
}

static lm_status apply_table(reader *R, lm_sd_single *out)
{
    lm_sd_component *comp[C_N] = {&out->unet, &out->vae, &out->text_encoder, &out->text_encoder_2};
    for (int i = 0; i < R->t.n; i++) {
        const entry *e = &R->t.e[i];
        char want[96], got[96];
        lm_shape_str(want, sizeof want, e->nd, e->shape);
        int k = find(R, e->ldm);
        if (k < 0)
            return lm_error_set(LM_ERR_FORMAT, "%s: missing key %s %s (diffusers' %s/%s)", R->file,
                                e->ldm, want, comp_dir[e->comp], e->dfs);
        lm_array *a = R->set.arrays[k];
        bool same = a->ndim == e->nd;
        for (int d = 0; same && d < e->nd; d++) same = a->shape[d] == e->shape[d];
        if (!same) {
            lm_shape_str(got, sizeof got, a->ndim, a->shape);
            return lm_error_set(LM_ERR_SHAPE, "%s: %s has shape %s, the inferred %s config needs "
                                "%s (diffusers' %s)", R->file, e->ldm, got, comp_dir[e->comp],
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
            lm_array *f = unquantize(R, e, k, &keep);
            if (!f) return lm_error_status();
            t = keep ? f : transform(e, f);
            if (!keep) lm_array_release(f);
        } else {
            t = transform(e, a);
        }
        if (!t) return lm_error_prefix("%s: %s", R->file, e->ldm);
        lm_status st = lm_io_set_add(&comp[e->comp]->weights, e->dfs, t);
        if (st) return st;
    }
    return LM_OK;
}

/* ---- overrides from a diffusers folder ---- */

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

static lm_status override(const char *dir, const char *sub, const char *name, cJSON *cfg)
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

static cJSON *scheduler(lm_sd_family fam, const char *pred)
{
    cJSON *c = cJSON_CreateObject();
    if (!c) return NULL;
    cJSON_AddStringToObject(c, "_class_name", fam == LM_SD_XL ? "EulerDiscreteScheduler" : "PNDMScheduler");
    cJSON_AddNumberToObject(c, "num_train_timesteps", 1000);
    cJSON_AddNumberToObject(c, "beta_start", 0.00085);
    cJSON_AddNumberToObject(c, "beta_end", 0.012);
    cJSON_AddStringToObject(c, "beta_schedule", "scaled_linear");
    cJSON_AddNullToObject(c, "trained_betas");
    cJSON_AddStringToObject(c, "prediction_type", pred ? pred : "epsilon");
    cJSON_AddBoolToObject(c, "set_alpha_to_one", false);
    cJSON_AddBoolToObject(c, "skip_prk_steps", true);
    cJSON_AddBoolToObject(c, "clip_sample", false);
    cJSON_AddNumberToObject(c, "steps_offset", 1);
    cJSON_AddStringToObject(c, "timestep_spacing", "leading");
    if (fam == LM_SD_XL) {
        cJSON_AddStringToObject(c, "interpolation_type", "linear");
        cJSON_AddBoolToObject(c, "use_karras_sigmas", false);
    }
    return c;
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
        st = family(&R);
    }
    out->family = R.fam;
    if (!st) st = unet(&R, o, &out->unet.config);
    if (!st) st = vae(&R, &out->vae.config);
    if (!st) st = R.fam == LM_SD_2 ? clip_open(&R, C_TE, o->sd2_drop_last_layer, &out->text_encoder.config, &dropped)
                                   : clip_hf(&R, C_TE, &out->text_encoder.config);
    int unused = -1;
    if (!st && R.fam == LM_SD_XL) st = clip_open(&R, C_TE2, 0, &out->text_encoder_2.config, &unused);
    if (!st) st = apply_table(&R, out);
    for (int i = 0; !st && i < R.set.count; i++) {
        if (R.used[i] || skippable(&R, R.set.names[i], dropped)) continue;
        char sh[96];
        lm_shape_str(sh, sizeof sh, R.set.arrays[i]->ndim, R.set.arrays[i]->shape);
        st = lm_error_set(LM_ERR_FORMAT, "%s: unexpected key %s %s: no place for it in the %s "
                          "architecture inferred from the file", path, R.set.names[i], sh,
                          lm_sd_family_name(R.fam));
    }
    if (!st && !(out->scheduler = scheduler(R.fam, o->prediction_type)))
        st = lm_error_set(LM_ERR_NOMEM, "out of memory");
    if (!st && R.fam == LM_SD_2 && o->prediction_type && !strcmp(o->prediction_type, "v_prediction"))
        cJSON_ReplaceItemInObjectCaseSensitive(out->unet.config, "upcast_attention", cJSON_CreateBool(true));
    if (!st && o->config_dir) {
        cJSON *cfg[C_N] = {out->unet.config, out->vae.config, out->text_encoder.config,
                           out->text_encoder_2.config};
        for (int c = 0; !st && c < C_N; c++)
            if (cfg[c]) st = override(o->config_dir, comp_dir[c], "config.json", cfg[c]);
        if (!st) st = override(o->config_dir, "scheduler", "scheduler_config.json", out->scheduler);
    }
    if (!st) st = tokenizer_dir(o->tokenizer, o->config_dir, "tokenizer", &out->tokenizer);
    if (!st && R.fam == LM_SD_XL)
        st = tokenizer_dir(o->tokenizer_2, o->config_dir, "tokenizer_2", &out->tokenizer_2);
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
    *tok = s->tokenizer;
    *tok2 = s->family == LM_SD_XL ? s->tokenizer_2 : NULL;
    if (!s->tokenizer || (s->family == LM_SD_XL && !s->tokenizer_2))
        return lm_error_set(LM_ERR_ARG, "%s: a single-file checkpoint carries no tokenizer: give "
                            "tokenizer=%s (folders with vocab.json + merges.txt, as the %s "
                            "release's tokenizer/%s hold; or config_dir, a diffusers folder of "
                            "the model)", s->file, s->family == LM_SD_XL ? " and tokenizer_2=" : "",
                            lm_sd_family_name(s->family),
                            s->family == LM_SD_XL ? " and tokenizer_2/" : "");
    return LM_OK;
}

/* ---- a diffusers folder under the single file's names (the writer) ---- */

/* a folder tensor by diffusers' name; transformers 5 saves CLIP without
 * "text_model." */
static int dfs_find(const lm_tensor_set *s, const char *name)
{
    int i = lm_tensor_set_find(s, name);
    if (i < 0 && !strncmp(name, "text_model.", 11)) i = lm_tensor_set_find(s, name + 11);
    return i;
}

static bool dfs_shape(const lm_tensor_set *s, int nd, int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static bool dfs_shape(const lm_tensor_set *s, int nd, int64_t *shape, const char *fmt, ...)
{
    char k[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k, sizeof k, fmt, ap);
    va_end(ap);
    int i = dfs_find(s, k);
    if (i < 0 || s->arrays[i]->ndim != nd) return false;
    for (int d = 0; d < nd; d++) shape[d] = s->arrays[i]->shape[d];
    return true;
}

/* how many of fmt's %d (0, 1, ...) the set has; fmt is "%s...%d...", its
 * %s filled with a */
static int dfs_count(const lm_tensor_set *s, const char *fmt, const char *a)
{
    int n = 0;
    char k[256];
    for (;;) {
        snprintf(k, sizeof k, fmt, a, n);
        if (dfs_find(s, k) < 0) return n;
        n++;
    }
}

static lm_status dfs_need(const char *dir, const char *comp, bool ok, const char *what)
{
    return ok ? LM_OK : lm_error_set(LM_ERR_FORMAT, "%s/%s: missing weight %s (or not the shape "
                                     "diffusers gives it)", dir, comp, what);
}

static lm_status unet_dims_dfs(const char *dir, const lm_tensor_set *U, const lm_tensor_set *te2,
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
    while (D->nlev < MAX_LEVELS && dfs_shape(U, 4, s, "down_blocks.%d.resnets.0.conv1.weight", D->nlev))
        D->boc[D->nlev++] = s[0];
    if ((st = dfs_need(dir, "unet", D->nlev > 0, "down_blocks.0.resnets.0.conv1.weight"))) return st;
    D->L = dfs_count(U, "%sdown_blocks.0.resnets.%d.conv1.weight", "");
    for (int l = 0; l < D->nlev; l++) {
        char lp[96];
        snprintf(lp, sizeof lp, "down_blocks.%d.attentions.0.", l);
        D->depth[l] = dfs_count(U, "%stransformer_blocks.%d.attn1.to_q.weight", lp);
        if (D->depth[l] && !D->ctx) {
            if (dfs_shape(U, 2, s, "%stransformer_blocks.0.attn2.to_k.weight", lp)) D->ctx = s[1];
            int64_t pi[4];
            D->linear = dfs_shape(U, 2, pi, "%sproj_in.weight", lp);
        }
    }
    D->mid_depth = dfs_count(U, "%stransformer_blocks.%d.attn1.to_q.weight", "mid_block.attentions.0.");
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

static lm_status vae_dims_dfs(const char *dir, const lm_tensor_set *V, vae_dims *D)
{
    int64_t s[4];
    memset(D, 0, sizeof *D);
    lm_status st = dfs_need(dir, "vae", dfs_shape(V, 4, s, "encoder.conv_in.weight"), "encoder.conv_in.weight");
    if (st) return st;
    D->C0 = s[0], D->in_ch = s[1];
    while (D->n < MAX_LEVELS && dfs_shape(V, 4, s, "encoder.down_blocks.%d.resnets.0.conv1.weight", D->n))
        D->boc[D->n++] = s[0];
    if ((st = dfs_need(dir, "vae", D->n > 0, "encoder.down_blocks.0.resnets.0.conv1.weight"))) return st;
    D->L = dfs_count(V, "%sencoder.down_blocks.0.resnets.%d.conv1.weight", "");
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

static lm_status clip_dims_dfs(const char *dir, const char *comp, const lm_tensor_set *T, bool proj,
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
    c->Lyr = dfs_count(T, "%sencoder.layers.%d.mlp.fc1.weight", "text_model.");
    if (proj) {
        if ((st = dfs_need(dir, comp, dfs_shape(T, 2, s, "text_projection.weight"), "text_projection.weight")))
            return st;
        c->proj = s[0];
    }
    return LM_OK;
}

/* The file tensor of table entry i from the folder's diffusers tensor(s),
 * each transform undone; a fused qkv (part 0) takes its parts 1 and 2 from
 * the entries of the same original name. */
static lm_array *untransform(const reader *R, const char *dir, lm_tensor_set *const *set, bool **used,
                             int i)
{
    const entry *e = &R->t.e[i];
    const lm_tensor_set *S = set[e->comp];
    int idx[3] = {-1, -1, -1}, parts = e->xf == XF_THIRD ? 3 : 1;
    for (int j = i, p = 0; p < parts && j < R->t.n; j++) {
        const entry *f = &R->t.e[j];
        if (strcmp(f->ldm, e->ldm)) continue;
        int k = dfs_find(S, f->dfs);
        if (k < 0) {
            lm_error_set(LM_ERR_FORMAT, "%s/%s: missing weight %s (the single file's %s)", dir,
                         comp_dir[f->comp], f->dfs, f->ldm);
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
                         comp_dir[e->comp], S->names[idx[p]], got, need);
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
    /* the family: a second text encoder is SDXL; OpenCLIP (gelu) alone SD 2.x */
    char *te = lm_dfs_path(dir, "text_encoder/config.json"), *te2 = lm_dfs_path(dir, "text_encoder_2/config.json");
    struct stat sb;
    if (!te || !te2) st = lm_error_status();
    else if (!stat(te2, &sb)) R.fam = LM_SD_XL;
    else if ((st = lm_dfs_json(te, SDS_MAX_CONFIG, false, &cfg)) == LM_OK) {
        const cJSON *act = cJSON_GetObjectItemCaseSensitive(cfg, "hidden_act");
        R.fam = cJSON_IsString(act) && !strcmp(act->valuestring, "gelu") ? LM_SD_2 : LM_SD_1;
    }
    free(te);
    free(te2);
    cJSON_Delete(cfg);
    cfg = NULL;
    if (!st) prefixes(&R);
    static const char *const stem[C_N] = {"diffusion_pytorch_model", "diffusion_pytorch_model", "model", "model"};
    for (int c = 0; !st && c < C_N; c++) {
        if (c == C_TE2 && R.fam != LM_SD_XL) continue;
        if (!(path = lm_dfs_path(dir, comp_dir[c]))) st = lm_error_status();
        else st = lm_dfs_load_weights_stem(path, stem[c], NULL, lm_device_cpu(), &set[c], NULL);
        free(path);
        path = NULL;
        if (!st && !(used[c] = calloc((size_t)set[c].count + 1, sizeof *used[c])))
            st = lm_error_set(LM_ERR_NOMEM, "out of memory");
    }
    unet_dims ud;
    vae_dims vd;
    clip_dims c1, c2;
    lm_sd_single_opts o = {0};
    if (!st) st = unet_dims_dfs(dir, &set[C_UNET], R.fam == LM_SD_XL ? &set[C_TE2] : NULL, &ud);
    if (!st) st = unet_emit(&R, &o, &ud, &cfg);
    cJSON_Delete(cfg), cfg = NULL;
    if (!st) st = vae_dims_dfs(dir, &set[C_VAE], &vd);
    if (!st) st = vae_emit(&R, &vd, &cfg);
    cJSON_Delete(cfg), cfg = NULL;
    if (!st) st = clip_dims_dfs(dir, comp_dir[C_TE], &set[C_TE], false, &c1);
    if (!st && R.fam == LM_SD_2) {
        c1.tm = "";
        st = clip_open_emit(&R, C_TE, &c1, &cfg);
    } else if (!st) {
        st = clip_hf_emit(&R, C_TE, &c1, &cfg);
    }
    cJSON_Delete(cfg), cfg = NULL;
    if (!st && R.fam == LM_SD_XL) st = clip_dims_dfs(dir, comp_dir[C_TE2], &set[C_TE2], true, &c2);
    if (!st && R.fam == LM_SD_XL) st = clip_open_emit(&R, C_TE2, &c2, &cfg);
    cJSON_Delete(cfg), cfg = NULL;
    for (int i = 0; !st && i < R.t.n; i++) {
        const entry *e = &R.t.e[i];
        if (e->xf == XF_THIRD && e->part) continue;
        if (e->xf == XF_THIRD && lm_tensor_set_find(out, e->ldm) >= 0) continue;   /* its bias or weight twin */
        lm_array *a = untransform(&R, dir, sp, used, i);
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
                              "%s architecture", dir, comp_dir[c], n, sh, lm_sd_family_name(R.fam));
        }
    for (int c = 0; c < C_N; c++) {
        lm_tensor_set_free(&set[c]);
        free(used[c]);
    }
    free(R.t.e);
    if (family_out) *family_out = R.fam;
    if (st) lm_tensor_set_free(out);
    return st;
}
