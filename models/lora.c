/* lora.c - LoRA / LyCORIS adapters merged into an SD pipeline (see lora.h).
 *
 * The stack keeps, per adapted weight (a "target"), the original array the
 * model loaded; every load or unload rebuilds the weights it touches from
 * their originals through every adapter still loaded, in load order, so
 * the result never depends on what was loaded and unloaded before, and
 * unloading the last adapter puts the original array itself back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>
#include "core/io/io.h"
#include "core/sha256.h"
#include "lora.h"
#include "lumen.h"
#include "models/clip_text.h"
#include "models/prompt.h"
#include "models/dit_common.h"
#include "models/dit_files.h"
#include "models/dit_pipeline.h"
#include "models/flux2.h"
#include "models/sd_parts.h"
#include "models/unet.h"
#include "models/zimage.h"

#define LR_NAME 256
#define LR_UNMATCHED_SHOWN 8

typedef enum lr_role {
    R_DOWN, R_UP, R_MID, R_ALPHA, R_DORA, R_MAG,
    R_H1A, R_H1B, R_H2A, R_H2B, R_HT1, R_HT2,
    R_K1, R_K1A, R_K1B, R_K2, R_K2A, R_K2B, R_KT2,
    R_COUNT
} lr_role;

/* the suffixes after a module's name, per layout (lora.h) */
static const struct { const char *suffix; lr_role role; } SUFFIX[] = {
    {".lora_down.weight", R_DOWN}, {".lora_up.weight", R_UP}, {".lora_mid.weight", R_MID},
    {".lora_A.weight", R_DOWN}, {".lora_B.weight", R_UP},
    {".lora.down.weight", R_DOWN}, {".lora.up.weight", R_UP},
    {".lora_linear_layer.down.weight", R_DOWN}, {".lora_linear_layer.up.weight", R_UP},
    {".alpha", R_ALPHA}, {".dora_scale", R_DORA},
    {".lora_magnitude_vector.weight", R_MAG}, {".lora_magnitude_vector", R_MAG},
    {".hada_w1_a", R_H1A}, {".hada_w1_b", R_H1B}, {".hada_w2_a", R_H2A}, {".hada_w2_b", R_H2B},
    {".hada_t1", R_HT1}, {".hada_t2", R_HT2},
    {".lokr_w1", R_K1}, {".lokr_w1_a", R_K1A}, {".lokr_w1_b", R_K1B},
    {".lokr_w2", R_K2}, {".lokr_w2_a", R_K2A}, {".lokr_w2_b", R_K2B}, {".lokr_t2", R_KT2},
};

#define C_DIT 3          /* a target's comp: the DiT families' transformer */
#define LR_PART0 (LM_DIT_ORIG_THIRD2 + 1)   /* lr_mod.how: a third of the target's rows */

typedef struct lr_target {
    int comp;            /* 0 the UNet, 1 the (first) text encoder, 2 SDXL's second, C_DIT */
    char *name;          /* the module: "down_blocks.0.resnets.0.conv1", "text_model.encoder..." */
    char *kname;         /* the same with '_' for '.' (kohya's spelling) */
    char *lname;         /* UNet: the original (LDM / sgm) name with '_' for '.', as kohya
                            names SDXL's ("input_blocks_4_1_transformer_blocks_0_attn1_to_q") */
    lm_array **slot;
    lm_array *orig;      /* the model's own array (kept) while an adapter changes it */
    int uidx;            /* UNet: the weight's index (lm_unet_weight_extra); DiT: its slot's */
    lm_unet_extra *extra;   /* linear weights applied at run time: the terms set */
    lm_dit_extra *dextra;   /* DiT: the same terms as dit_common.h's list (the arrays extra's) */
} lr_target;

typedef struct lr_mod {
    int target;
    int t[R_COUNT];      /* tensor index in the adapter's set, -1 = absent */
    int how;             /* DiT: an lm_dit_orig (the module is the original's fused qkv or
                            swapped pair: which rows of its up factor the target takes; SAME /
                            COPY: all of them) or LR_PART0 + p (the module is the p-th third of
                            the target, a fused qkv Lumen keeps: its up factor zero-padded) */
} lr_mod;

/* DiT: an original (single-file) module name and the targets it holds */
typedef struct lr_alias {
    char *name, *kname;  /* "double_blocks.0.img_attn.qkv", and with '_' for '.' */
    int n;
    int target[3];
    int how[3];
} lr_alias;

/* what a module key maps to: up to three targets (a fused original's) */
typedef struct lr_hit {
    int n;
    int target[3];
    int how[3];
} lr_hit;

typedef struct lr_lora {
    lm_lora_info info;
    char *path, *name, *unmatched;
    char format[32];
    bool runtime;        /* lm_lora_opts.runtime */
    lm_tensor_set set;
    int nmod, cap;
    lr_mod *mod;
} lr_lora;

struct lm_lora_stack {
    lm_unet *unet;
    lm_dit_pipe *dit;    /* the DiT families: the transformer's state */
    lm_sd_net net;
    bool detached;       /* DiT offload: the transformer freed, the slots gone (lm_lora_detach) */
    int nalias;
    lr_alias *alias;
    int ntarget;
    lr_target *target;
    int n;
    lr_lora **lora;
};

void lm_lora_opts_init(lm_lora_opts *o)
{
    memset(o, 0, sizeof *o);
    o->scale = 1.0;
    o->strict = true;
}

/* ============================================================ targets */

static lm_status add_target(lm_lora_stack *s, int comp, const char *wname, lm_array **slot)
{
    size_t n = strlen(wname);
    if (n < 8 || strcmp(wname + n - 7, ".weight") || !*slot || (*slot)->ndim < 2) return LM_OK;
    if (strstr(wname, "embeddings.")) return LM_OK;
    lr_target *t = realloc(s->target, sizeof *t * (size_t)(s->ntarget + 1));
    if (!t) return lm_error_set(LM_ERR_NOMEM, "out of memory");
    s->target = t;
    t = &s->target[s->ntarget];
    memset(t, 0, sizeof *t);
    t->comp = comp;
    t->slot = slot;
    t->name = strndup(wname, n - 7);
    t->kname = t->name ? strdup(t->name) : NULL;
    if (!t->kname) {
        free(t->name);
        return lm_error_set(LM_ERR_NOMEM, "out of memory");
    }
    for (char *c = t->kname; *c; c++)
        if (*c == '.') *c = '_';
    s->ntarget++;
    return LM_OK;
}

static char *underscored(const char *name, size_t n)
{
    char *k = strndup(name, n);
    for (char *c = k; c && *c; c++)
        if (*c == '.') *c = '_';
    return k;
}

/* The UNet targets' original names, from the single-file key map
 * (models/sd_keymap.c) generated for this UNet's config. */
static lm_status ldm_names(lm_lora_stack *s, const lm_unet *u)
{
    const lm_unet_config *c = lm_unet_get_config(u);
    unet_dims D;
    memset(&D, 0, sizeof D);
    D.C0 = c->block_out_channels[0];
    D.in_ch = c->in_channels;
    D.out_ch = c->out_channels;
    D.T = c->time_embed_dim;
    D.nlev = (int)c->levels;
    for (int l = 0; l < D.nlev && l < SDS_MAX_LEVELS; l++) {
        D.boc[l] = c->block_out_channels[l];
        D.depth[l] = c->down_attn[l] ? (int)c->transformer_layers[l] : 0;
    }
    D.L = (int)c->layers_per_block[0];
    D.mid_depth = c->mid == 2 ? (int)c->transformer_layers[D.nlev - 1] : 0;
    D.ctx = c->cross_attention_dim;
    D.add_in = c->projection_class_embeddings_input_dim;
    D.linear = c->use_linear_projection;
    reader R;
    memset(&R, 0, sizeof R);
    R.pfx[C_UNET] = "";
    lm_status st = lm_sds_unet_keys(&R, &D);
    for (int i = 0; st == LM_OK && i < R.t.n; i++) {
        const entry *e = &R.t.e[i];
        size_t n = strlen(e->dfs);
        if (n < 8 || strcmp(e->dfs + n - 7, ".weight")) continue;
        for (int k = 0; k < s->ntarget; k++) {
            lr_target *t = &s->target[k];
            if (t->comp || t->lname || strncmp(t->name, e->dfs, n - 7) || t->name[n - 7]) continue;
            size_t nl = strlen(e->ldm);
            if (!(t->lname = underscored(e->ldm, nl - 7))) st = lm_error_set(LM_ERR_NOMEM, "out of memory");
            break;
        }
    }
    free(R.t.e);
    return st;
}

static lm_status build_targets(lm_lora_stack *s, lm_sd_pipeline *p)
{
    lm_unet *u = lm_sd_pipeline_unet(p);
    lm_status st = LM_OK;
    s->unet = u;
    for (int i = 0; u && st == LM_OK && i < lm_unet_weight_count(u); i++) {
        int before = s->ntarget;
        st = add_target(s, 0, lm_unet_weight_name(u, i), lm_unet_weight_slot(u, i));
        if (s->ntarget > before) s->target[before].uidx = i;
    }
    if (u && st == LM_OK) st = ldm_names(s, u);
    for (int e = 0; e < 2 && st == LM_OK; e++) {
        lm_clip_text *m = lm_sd_pipeline_text_encoder(p, e);
        char name[LR_NAME];
        for (int i = 0; m && st == LM_OK && i < lm_clip_text_weight_count(m); i++) {
            lm_array **slot = lm_clip_text_weight_slot(m, i, name, sizeof name);
            st = add_target(s, 1 + e, name, slot);
        }
    }
    return st;
}

/* the DiT transformer's weights as its model took them */
static lm_dit_slots *dit_slots(lm_dit_pipe *d)
{
    if (lm_dit_pipe_zimage(d)) return lm_zimage_weights(lm_dit_pipe_zimage(d));
    if (lm_dit_pipe_flux2(d)) return lm_flux2_weights(lm_dit_pipe_flux2(d));
    return NULL;
}

/* target ti under the original name orig (".weight" stripped) as part how */
static lm_status add_alias(lm_lora_stack *s, const char *orig, int ti, int how)
{
    size_t n = strlen(orig);
    if (n > 7 && !strcmp(orig + n - 7, ".weight")) n -= 7;
    lr_alias *a = NULL;
    for (int i = 0; i < s->nalias && !a; i++)
        if (strlen(s->alias[i].name) == n && !strncmp(s->alias[i].name, orig, n)) a = &s->alias[i];
    if (!a) {
        lr_alias *g = realloc(s->alias, sizeof *g * (size_t)(s->nalias + 1));
        if (!g) return lm_error_set(LM_ERR_NOMEM, "out of memory");
        s->alias = g;
        a = &s->alias[s->nalias];
        memset(a, 0, sizeof *a);
        a->name = strndup(orig, n);
        a->kname = underscored(orig, n);
        if (!a->name || !a->kname) {
            free(a->name);
            free(a->kname);
            return lm_error_set(LM_ERR_NOMEM, "out of memory");
        }
        s->nalias++;
    }
    if (a->n == 3) return LM_OK;
    a->target[a->n] = ti;
    a->how[a->n++] = how;
    return LM_OK;
}

/* The DiT transformer's weights (every matrix it took) and their original
 * names; the transformer read first where an offload freed it. */
static lm_status build_dit_targets(lm_lora_stack *s, lm_sd_pipeline *p)
{
    lm_dit_pipe *d = lm_sd_pipeline_dit(p);
    s->dit = d;
    s->net = lm_sd_pipeline_row(p)->denoiser;
    lm_dit_slots *w = dit_slots(d);
    lm_status st = w ? LM_OK : lm_error_set(LM_ERR_STATE, "lora: the transformer is not loaded");
    for (int i = 0; st == LM_OK && i < w->n; i++) {
        int before = s->ntarget;
        st = add_target(s, C_DIT, w->s[i].name, w->s[i].slot);
        if (st != LM_OK || s->ntarget == before) continue;
        s->target[before].uidx = i;
        char orig[LR_NAME];
        lm_dit_orig how = lm_dit_original_name(s->net, w->s[i].name, orig, sizeof orig);
        if (how != LM_DIT_ORIG_SAME) st = add_alias(s, orig, before, how);
        /* Z-Image's fused attention.qkv (kept so when quantized): diffusers'
         * to_q / to_k / to_v are its thirds */
        const char *at = strstr(w->s[i].name, ".attention.qkv.weight");
        for (int k = 0; st == LM_OK && at && !at[strlen(".attention.qkv.weight")] && k < 3; k++) {
            static const char *const part[3] = {"to_q", "to_k", "to_v"};
            snprintf(orig, sizeof orig, "%.*s.attention.%s", (int)(at - w->s[i].name), w->s[i].name, part[k]);
            st = add_alias(s, orig, before, LR_PART0 + k);
        }
    }
    return st;
}

static int find_target(const lm_lora_stack *s, int comp, const char *name, bool kohya)
{
    for (int i = 0; i < s->ntarget; i++)
        if (s->target[i].comp == comp && !strcmp(kohya ? s->target[i].kname : s->target[i].name, name))
            return i;
    for (int i = 0; kohya && i < s->ntarget; i++)
        if (s->target[i].comp == comp && s->target[i].lname && !strcmp(s->target[i].lname, name))
            return i;
    return -1;
}

/* in place: every "from" in s becomes "to" (to no longer than from) */
static void replace_all(char *s, const char *from, const char *to)
{
    size_t nf = strlen(from), nt = strlen(to);
    for (char *p = strstr(s, from); p; p = strstr(p + nt, from)) {
        memmove(p + nt, p + nf, strlen(p + nf) + 1);
        memcpy(p, to, nt);
    }
}

/* The target a module key (without its suffix) names, or -1. */
static int map_module(const lm_lora_stack *s, const char *key)
{
    static const struct { const char *prefix; int comp; bool kohya; } PFX[] = {
        {"lora_unet_", 0, true}, {"lora_te1_", 1, true}, {"lora_te2_", 2, true}, {"lora_te_", 1, true},
        {"unet.", 0, false}, {"text_encoder_2.", 2, false}, {"text_encoder.", 1, false},
    };
    const char *k = key;
    if (!strncmp(k, "base_model.model.", 17)) k += 17;   /* PEFT's own wrapper */
    for (size_t i = 0; i < sizeof PFX / sizeof *PFX; i++) {
        size_t n = strlen(PFX[i].prefix);
        if (strncmp(k, PFX[i].prefix, n)) continue;
        char name[LR_NAME + 16];
        if (strlen(k + n) >= LR_NAME) return -1;
        if (PFX[i].comp && !PFX[i].kohya && strncmp(k + n, "text_model.", 11) &&
            strcmp(k + n, "text_projection"))
            snprintf(name, sizeof name, "text_model.%s", k + n);   /* transformers 5 drops it */
        else
            snprintf(name, sizeof name, "%s", k + n);
        if (!PFX[i].kohya && !PFX[i].comp) {
            /* diffusers' attention-processor names (its older LoRA files) */
            replace_all(name, ".processor.", ".");
            replace_all(name, "to_out_lora", "to_out.0");
            replace_all(name, "to_q_lora", "to_q");
            replace_all(name, "to_k_lora", "to_k");
            replace_all(name, "to_v_lora", "to_v");
        }
        return find_target(s, PFX[i].comp, name, PFX[i].kohya);
    }
    return find_target(s, 0, k, false);   /* a bare UNet state dict */
}

/* A DiT module key: transformer.<diffusers name> (diffusers / PEFT),
 * diffusion_model.<name> (ComfyUI, ai-toolkit: diffusers' or the original
 * names), lora_unet_<name with _> (kohya: either), or a bare name; a
 * diffusers name first, then an original one (lm_dit_original_name). */
static bool map_dit(const lm_lora_stack *s, const char *key, lr_hit *h)
{
    static const struct { const char *prefix; bool kohya; } PFX[] = {
        {"transformer.", false}, {"model.diffusion_model.", false}, {"diffusion_model.", false},
        {"lora_unet_", true}, {"", false},
    };
    const char *k = key;
    if (!strncmp(k, "base_model.model.", 17)) k += 17;   /* PEFT's own wrapper */
    memset(h, 0, sizeof *h);
    for (size_t i = 0; i < sizeof PFX / sizeof *PFX; i++) {
        size_t n = strlen(PFX[i].prefix);
        if (strncmp(k, PFX[i].prefix, n)) continue;
        const char *name = k + n;
        int t = find_target(s, C_DIT, name, PFX[i].kohya);
        if (t >= 0) {
            h->n = 1;
            h->target[0] = t;
            h->how[0] = LM_DIT_ORIG_SAME;
            return true;
        }
        for (int a = 0; a < s->nalias; a++) {
            const lr_alias *al = &s->alias[a];
            if (strcmp(PFX[i].kohya ? al->kname : al->name, name)) continue;
            h->n = al->n;
            for (int j = 0; j < al->n; j++) {
                h->target[j] = al->target[j];
                h->how[j] = al->how[j];
            }
            return true;
        }
        return false;
    }
    return false;
}

/* ============================================================ the math */

static lm_array *sw(lm_array **a, lm_array *r)
{
    lm_array_release(*a);
    *a = r;
    return r;
}

static lm_array *f32(const lr_lora *L, const lr_mod *m, lr_role r)
{
    return lm_cast(L->set.arrays[m->t[r]], LM_F32);
}

/* a as [rows, size / rows]; consumes a */
static lm_array *rs2(lm_array *a, int64_t rows)
{
    if (!a) return NULL;
    int64_t s[2] = {rows, rows > 0 ? a->size / rows : 0};
    lm_array *r = lm_reshape(a, 2, s);
    lm_array_release(a);
    return r;
}

/* lm_contiguous, consuming a */
static lm_array *cont(lm_array *a)
{
    lm_array *r = lm_contiguous(a);
    lm_array_release(a);
    return r;
}

static lm_array *mm(lm_array *a, lm_array *b)
{
    lm_array *r = lm_matmul(a, b);
    lm_array_release(a);
    lm_array_release(b);
    return r;
}

/* sum_ij t[i,j,k,l] wa[i,p] wb[j,r] -> [p, r, k, l] (LyCORIS' CP / Tucker form) */
static lm_array *cp(lm_array *t, lm_array *wa, lm_array *wb)
{
    if (!t || !wa || !wb || t->ndim != 4 || wa->ndim != 2 || wb->ndim != 2 ||
        wa->shape[0] != t->shape[0] || wb->shape[0] != t->shape[1]) {
        if (t && wa && wb) lm_error_set(LM_ERR_SHAPE, "tucker core and factors do not fit");
        return NULL;
    }
    int64_t I = t->shape[0], J = t->shape[1], KL = t->shape[2] * t->shape[3];
    int64_t P = wa->shape[1], Rr = wb->shape[1];
    lm_array *a = mm(cont(lm_transpose(wa, 0, 1)), rs2(lm_array_retain(t), I));   /* [P, J*KL] */
    int64_t s3[3] = {P, J, KL};
    int perm[3] = {0, 2, 1};
    sw(&a, lm_reshape(a, 3, s3));
    sw(&a, cont(lm_permute(a, perm)));                                           /* [P, KL, J] */
    a = mm(rs2(a, P * KL), lm_array_retain(wb));                                 /* [P*KL, R] */
    int64_t s4[3] = {P, KL, Rr};
    sw(&a, lm_reshape(a, 3, s4));
    sw(&a, cont(lm_permute(a, perm)));                                           /* [P, R, KL] */
    int64_t s5[4] = {P, Rr, t->shape[2], t->shape[3]};
    return sw(&a, lm_reshape(a, 4, s5));
}

static double scalar_of(lm_array *a)
{
    double v = 0;
    if (a->size == 1 && lm_array_read(a, &v, LM_F64) == LM_OK) return v;
    return 0;
}

static lm_status bad(const lr_lora *L, const lm_lora_stack *s, const lr_mod *m, const char *what)
{
    const lr_target *t = &s->target[m->target];
    const lm_array *w = *t->slot;
    char ws[96];
    lm_shape_str(ws, sizeof ws, w->ndim, w->shape);
    int any = -1;
    for (int r = 0; r < R_COUNT && any < 0; r++) any = m->t[r];
    return lm_error_set(LM_ERR_SHAPE, "lora %s: %s: %s (the weight %s%s is %s)", L->path,
                        any >= 0 ? L->set.names[any] : "?", what,
                        t->comp == 0 ? "unet " : t->comp == 1 ? "text_encoder " :
                        t->comp == C_DIT ? "transformer " : "text_encoder_2 ",
                        t->name, ws);
}

/* The up factor's rows the target takes, [out, rank] f32 (new lazy array):
 * all of them, or a third of a fused qkv's, or a pair's halves swapped. */
/* how many rows the module's up factor has for a target of out rows */
static int64_t up_count(const lr_mod *m, int64_t out)
{
    return m->how >= LR_PART0 ? out / 3 : m->how >= LM_DIT_ORIG_THIRD0 ? 3 * out : out;
}

static lm_array *up_rows(const lr_lora *L, const lr_mod *m, int64_t out)
{
    if (m->how < LM_DIT_ORIG_SWAP) return rs2(f32(L, m, R_UP), out);
    bool third = m->how >= LM_DIT_ORIG_THIRD0 && m->how < LR_PART0;
    lm_array *up = rs2(f32(L, m, R_UP), up_count(m, out));
    if (!up) return NULL;
    lm_array *r = NULL;
    if (m->how >= LR_PART0) {   /* zero rows around it */
        int64_t p = m->how - LR_PART0, t = out / 3, z[2] = {p * t, (2 - p) * t};
        int64_t s0[2] = {z[0], up->shape[1]}, s1[2] = {z[1], up->shape[1]};
        lm_array *part[3];
        int n = 0;
        if (z[0]) part[n++] = lm_zeros(2, s0, LM_F32, up->device);
        part[n++] = lm_array_retain(up);
        if (z[1]) part[n++] = lm_zeros(2, s1, LM_F32, up->device);
        bool ok = true;
        for (int k = 0; k < n; k++) ok = ok && part[k];
        if (ok) r = lm_concat(n, part, 0);
        for (int k = 0; k < n; k++) lm_array_release(part[k]);
    } else if (third) {
        int64_t p = (int64_t)(m->how - LM_DIT_ORIG_THIRD0);
        r = cont(lm_slice(up, 0, p * out, (p + 1) * out, 1));
    } else {
        int64_t h = out / 2;
        lm_array *part[2] = {lm_slice(up, 0, h, out, 1), lm_slice(up, 0, 0, h, 1)};
        if (part[0] && part[1]) r = lm_concat(2, part, 0);
        lm_array_release(part[0]);
        lm_array_release(part[1]);
    }
    lm_array_release(up);
    return r;
}

/* The module's delta, [out, ...] as the weight w, in f32 (new lazy array), and its
 * rank-scale (alpha / rank, or 1) in *scale. */
static lm_array *delta(const lr_lora *L, const lm_lora_stack *s, const lr_mod *m, const lm_array *w,
                       double *scale)
{
    const int *t = m->t;
    double alpha = t[R_ALPHA] >= 0 ? scalar_of(L->set.arrays[t[R_ALPHA]]) : 0;
    int64_t rank = 0, out = w->shape[0];
    lm_array *d = NULL;
    if (t[R_DOWN] >= 0 || t[R_UP] >= 0) {
        if (t[R_DOWN] < 0 || t[R_UP] < 0) {
            bad(L, s, m, "a LoRA module needs both its down (A) and up (B) weights");
            return NULL;
        }
        lm_array *dn = L->set.arrays[t[R_DOWN]], *up = L->set.arrays[t[R_UP]];
        rank = dn->shape[0];
        int64_t rows = up_count(m, out);   /* the up factor's */
        if (m->how >= LM_DIT_ORIG_SWAP && (t[R_MID] >= 0 || t[R_MAG] >= 0 || t[R_DORA] >= 0)) {
            bad(L, s, m, "a LoCon middle or DoRA magnitude on an original fused module is not supported");
            return NULL;
        }
        if (up->shape[0] != rows || rank < 1 || up->size != rows * rank) {
            char us[96], ds[96], msg[256];
            lm_shape_str(us, sizeof us, up->ndim, up->shape);
            lm_shape_str(ds, sizeof ds, dn->ndim, dn->shape);
            snprintf(msg, sizeof msg, "lora_up %s and lora_down %s do not fit the weight or each other",
                     us, ds);
            bad(L, s, m, msg);
            return NULL;
        }
        lm_array *down = rs2(f32(L, m, R_DOWN), rank);
        if (t[R_MID] >= 0) {   /* LoCon: down [r, in, 1, 1], mid [r, r, kh, kw] */
            lm_array *mid = f32(L, m, R_MID);
            if (!mid || mid->ndim != 4 || mid->shape[0] != rank || mid->shape[1] != rank) {
                lm_array_release(mid);
                lm_array_release(down);
                bad(L, s, m, "lora_mid is not [rank, rank, kh, kw]");
                return NULL;
            }
            int perm[4] = {0, 2, 3, 1};
            int64_t KL = mid->shape[2] * mid->shape[3], C = down->shape[1];
            lm_array *mp = cont(lm_permute(mid, perm));                          /* [i, k, l, j] */
            lm_array *nd = mm(rs2(mp, rank * KL), down);                         /* [i*KL, C] */
            lm_array_release(mid);
            int64_t s3[3] = {rank, KL, C};
            int p3[3] = {0, 2, 1};
            sw(&nd, lm_reshape(nd, 3, s3));
            sw(&nd, cont(lm_permute(nd, p3)));                                   /* [i, C, KL] */
            down = rs2(nd, rank);
        }
        d = mm(up_rows(L, m, out), down);
    } else if (m->how >= LM_DIT_ORIG_SWAP) {
        bad(L, s, m, "only a LoRA (down / up) is taken on an original fused module (LoHa, LoKr are not)");
        return NULL;
    } else if (t[R_H1A] >= 0 || t[R_H1B] >= 0 || t[R_H2A] >= 0 || t[R_H2B] >= 0) {
        if (t[R_H1A] < 0 || t[R_H1B] < 0 || t[R_H2A] < 0 || t[R_H2B] < 0) {
            bad(L, s, m, "a LoHa module needs hada_w1_a, hada_w1_b, hada_w2_a and hada_w2_b");
            return NULL;
        }
        rank = L->set.arrays[t[R_H1B]]->shape[0];
        lm_array *h[2];
        for (int k = 0; k < 2; k++) {
            lr_role a = k ? R_H2A : R_H1A, b = k ? R_H2B : R_H1B, c = k ? R_HT2 : R_HT1;
            lm_array *wa = f32(L, m, a), *wb = f32(L, m, b);
            if (t[c] >= 0) {
                lm_array *core = f32(L, m, c);
                h[k] = cp(core, wa, wb);
                lm_array_release(core);
                lm_array_release(wa);
                lm_array_release(wb);
            } else {
                h[k] = mm(wa, rs2(wb, wb ? wb->shape[0] : 0));
            }
        }
        if (h[0] && h[1] && h[0]->size != h[1]->size) {
            lm_array_release(h[0]);
            lm_array_release(h[1]);
            bad(L, s, m, "the two Hadamard factors differ in size");
            return NULL;
        }
        lm_array *h0 = rs2(h[0], out), *h1 = rs2(h[1], out);
        d = lm_binary(LM_OP_MUL, h0, h1);
        lm_array_release(h0);
        lm_array_release(h1);
    } else if (t[R_K1] >= 0 || t[R_K1A] >= 0 || t[R_K2] >= 0 || t[R_K2A] >= 0) {
        bool ok1 = t[R_K1] >= 0 || (t[R_K1A] >= 0 && t[R_K1B] >= 0);
        bool ok2 = t[R_K2] >= 0 || (t[R_K2A] >= 0 && t[R_K2B] >= 0);
        if (!ok1 || !ok2) {
            bad(L, s, m, "a LoKr module needs lokr_w1 (or lokr_w1_a and _b) and lokr_w2 (or _a and _b)");
            return NULL;
        }
        lm_array *w1, *w2;
        if (t[R_K1] >= 0) {
            w1 = f32(L, m, R_K1);
        } else {
            rank = L->set.arrays[t[R_K1B]]->shape[0];
            w1 = mm(f32(L, m, R_K1A), f32(L, m, R_K1B));
        }
        if (t[R_K2] >= 0) {
            w2 = f32(L, m, R_K2);
        } else if (t[R_KT2] >= 0) {
            rank = L->set.arrays[t[R_K2B]]->shape[0];
            lm_array *core = f32(L, m, R_KT2), *wa = f32(L, m, R_K2A), *wb = f32(L, m, R_K2B);
            w2 = cp(core, wa, wb);
            lm_array_release(core);
            lm_array_release(wa);
            lm_array_release(wb);
        } else {
            rank = L->set.arrays[t[R_K2B]]->shape[0];
            lm_array *wb = f32(L, m, R_K2B);
            w2 = mm(f32(L, m, R_K2A), rs2(wb, wb ? wb->shape[0] : 0));
        }
        if (w1 && w2) {   /* kron(w1 [a, c], w2 [b, M]) = [a*b, c*M] */
            int64_t A = w1->shape[0], C = w1->size / A, B = w2->shape[0], M = w2->size / B;
            int64_t s1[4] = {A, 1, C, 1}, s2[4] = {1, B, 1, M};
            lm_array *x = lm_reshape(w1, 4, s1), *y = lm_reshape(w2, 4, s2);
            d = lm_binary(LM_OP_MUL, x, y);
            lm_array_release(x);
            lm_array_release(y);
            d = rs2(d, A * B);
        }
        lm_array_release(w1);
        lm_array_release(w2);
        /* LyCORIS: alpha / rank where a factor is factorized, else 1 */
        if (!rank) alpha = 0;
    } else {
        bad(L, s, m, "no weights of a known adapter layout");
        return NULL;
    }
    if (!d) return NULL;
    if (d->size != w->size) {
        lm_array_release(d);
        bad(L, s, m, "the adapter's product does not have the weight's size");
        return NULL;
    }
    *scale = alpha > 0 && rank > 0 ? alpha / (double)rank : 1.0;
    return sw(&d, lm_reshape(d, w->ndim, w->shape));
}

/* f(W) for one module of one adapter (lora.h), W f32; a new lazy array */
static lm_array *apply(const lr_lora *L, const lm_lora_stack *s, const lr_mod *m, lm_array *W)
{
    double rs = 1;
    lm_array *d = delta(L, s, m, W, &rs);
    if (!d) return NULL;
    lm_array *v = lm_binary_scalar(LM_OP_MUL, d, rs * L->info.scale, false);
    lm_array_release(d);
    sw(&v, lm_binary(LM_OP_ADD, W, v));
    int mi = m->t[R_MAG] >= 0 ? m->t[R_MAG] : m->t[R_DORA];
    if (!v || mi < 0) return v;
    /* DoRA as PEFT merges it: m / ||V|| per output row, times V */
    lm_array *mag = L->set.arrays[mi];
    int64_t out = W->shape[0];
    /* PEFT's magnitude is [out] ([1, out, 1, 1] on a conv); kohya's dora_scale
     * [out, 1...], LyCORIS' other axis [1, in] */
    if (mag->size != out || (mi == m->t[R_DORA] && mag->ndim >= 2 && mag->shape[0] != out)) {
        lm_array_release(v);
        bad(L, s, m, "the DoRA magnitude has not one value per output (a LyCORIS dora_scale over "
                     "the input axis is not supported)");
        return NULL;
    }
    int axes[LM_MAX_DIMS], na = 0;
    for (int a = 1; a < W->ndim; a++) axes[na++] = a;
    int64_t ms[LM_MAX_DIMS] = {out};
    for (int a = 1; a < W->ndim; a++) ms[a] = 1;
    lm_array *sq = lm_binary(LM_OP_MUL, v, v);
    lm_array *nrm = lm_reduce(LM_OP_SUM, sq, na, axes, true);
    lm_array_release(sq);
    sw(&nrm, lm_unary(LM_OP_SQRT, nrm));
    lm_array *mg = lm_cast(mag, LM_F32);
    sw(&mg, lm_reshape(mg, W->ndim, ms));
    lm_array *f = lm_binary(LM_OP_DIV, mg, nrm);
    lm_array_release(mg);
    lm_array_release(nrm);
    lm_array *r = lm_binary(LM_OP_MUL, f, v);
    lm_array_release(f);
    lm_array_release(v);
    return r;
}

static void extra_free(lm_unet_extra *e)
{
    while (e) {
        lm_unet_extra *n = e->next;
        if (e->a) lm_array_unkeep(e->a);
        if (e->b) lm_array_unkeep(e->b);
        free(e);
        e = n;
    }
}

/* takes a (a new reference): evaluated and kept, or NULL */
static lm_array *kept(lm_array *a)
{
    if (!a || lm_array_eval(a) != LM_OK) {
        lm_array_release(a);
        return NULL;
    }
    lm_array_keep(a);
    lm_array_release(a);
    return a;
}

static lm_dtype dit_dtype(lm_dit_pipe *d)
{
    return lm_dit_pipe_zimage(d) ? lm_zimage_dtype(lm_dit_pipe_zimage(d)) : lm_flux2_dtype(lm_dit_pipe_flux2(d));
}

/* Gives target t's run-time terms head (NULL: none) to its model: the UNet's
 * weight, or the DiT transformer's slot (a list of its own referring to
 * head's arrays).  t->extra becomes head; the old terms are freed. */
static lm_status set_extra(lm_lora_stack *s, lr_target *t, lm_unet_extra *head)
{
    lm_status st = LM_OK;
    if (s->dit) {
        lm_dit_extra *dh = NULL, **dt = &dh;
        for (lm_unet_extra *e = head; e && st == LM_OK; e = e->next) {
            if (!(*dt = calloc(1, sizeof **dt))) st = lm_error_set(LM_ERR_NOMEM, "out of memory");
            else {
                (*dt)->a = e->a;
                (*dt)->b = e->b;
                dt = &(*dt)->next;
            }
        }
        if (st == LM_OK && t->slot) lm_dit_slots_set_extra(dit_slots(s->dit), t->uidx, dh);
        lm_dit_extra *old = st == LM_OK ? t->dextra : dh;
        if (st == LM_OK) t->dextra = dh;
        while (old) {
            lm_dit_extra *n = old->next;
            free(old);
            old = n;
        }
    } else {
        st = lm_unet_weight_extra(s->unet, t->uidx, head);
    }
    if (st != LM_OK) return st;
    if (t->extra != head) extra_free(t->extra);
    t->extra = head;
    return LM_OK;
}

/* One module's run-time term on linear weight W (quantized or not): LoRA
 * as its two factors, (x down^T) (s alpha/rank up)^T; anything else as the
 * dense delta. */
static lm_status runtime_term(const lr_lora *L, const lm_lora_stack *s, const lr_mod *m, const lm_array *W,
                              lm_dtype dt, lm_unet_extra **res)
{
    const int *t = m->t;
    if (t[R_MAG] >= 0 || t[R_DORA] >= 0)
        return bad(L, s, m, "DoRA on a weight applied at run time (quantized) is not supported");
    lm_unet_extra *e = calloc(1, sizeof *e);
    if (!e) return lm_error_set(LM_ERR_NOMEM, "out of memory");
    if (t[R_DOWN] >= 0 && t[R_UP] >= 0 && t[R_MID] < 0) {
        lm_array *dn = L->set.arrays[t[R_DOWN]], *up = L->set.arrays[t[R_UP]];
        int64_t rank = dn->shape[0], out = W->shape[0], rows = up_count(m, out);
        if (up->shape[0] != rows || rank < 1 || up->size != rows * rank || dn->size != rank * W->shape[1]) {
            free(e);
            return bad(L, s, m, "lora_up and lora_down do not fit the weight or each other");
        }
        double alpha = t[R_ALPHA] >= 0 ? scalar_of(L->set.arrays[t[R_ALPHA]]) : 0;
        double sc = L->info.scale * (alpha > 0 ? alpha / (double)rank : 1.0);
        lm_array *a = rs2(f32(L, m, R_DOWN), rank);
        lm_array *up2 = up_rows(L, m, out);
        lm_array *b = lm_binary_scalar(LM_OP_MUL, up2, sc, false);
        lm_array_release(up2);
        e->a = kept(lm_cast(a, dt));
        e->b = kept(lm_cast(b, dt));
        lm_array_release(a);
        lm_array_release(b);
    } else {
        double rs = 1;
        lm_array *d = delta(L, s, m, W, &rs);
        lm_array *v = d ? lm_binary_scalar(LM_OP_MUL, d, rs * L->info.scale, false) : NULL;
        lm_array_release(d);
        e->a = kept(lm_cast(v, dt));
        lm_array_release(v);
        if (!d) {
            free(e);
            return lm_error_status();
        }
    }
    if (!e->a || (t[R_DOWN] >= 0 && t[R_MID] < 0 && !e->b)) {
        extra_free(e);
        return lm_error_prefix("lora %s", L->path);
    }
    *res = e;
    return LM_OK;
}

/* Whether target ti is applied at run time: a quantized UNet linear weight,
 * or one an adapter asked that of (lm_lora_opts.runtime). */
static bool at_runtime(const lm_lora_stack *s, int ti)
{
    const lr_target *t = &s->target[ti];
    const lm_array *w = t->orig ? t->orig : *t->slot;
    if ((t->comp != 0 && t->comp != C_DIT) || w->ndim != 2) return false;
    if (lm_dtype_is_quant(w->dtype)) return true;
    for (int i = 0; i < s->n; i++)
        for (int k = 0; s->lora[i]->runtime && k < s->lora[i]->nmod; k++)
            if (s->lora[i]->mod[k].target == ti) return true;
    return false;
}

static lm_status rebuild_runtime(lm_lora_stack *s, int ti)
{
    lr_target *t = &s->target[ti];
    if (t->orig) {   /* merged before: the original back first */
        lm_array_unkeep(*t->slot);
        *t->slot = t->orig;
        t->orig = NULL;
    }
    lm_unet_extra *head = NULL, **tail = &head;
    lm_dtype dt = s->dit ? dit_dtype(s->dit) : lm_unet_dtype(s->unet);
    lm_status st = LM_OK;
    for (int i = 0; i < s->n && st == LM_OK; i++)
        for (int k = 0; k < s->lora[i]->nmod && st == LM_OK; k++) {
            if (s->lora[i]->mod[k].target != ti) continue;
            st = runtime_term(s->lora[i], s, &s->lora[i]->mod[k], *t->slot, dt, tail);
            if (st == LM_OK) tail = &(*tail)->next;
        }
    if (st == LM_OK) st = set_extra(s, t, head);
    if (st != LM_OK) extra_free(head);
    return st;
}

/* Recomputes target ti from its original through every loaded adapter. */
static lm_status rebuild(lm_lora_stack *s, int ti)
{
    lr_target *t = &s->target[ti];
    if (at_runtime(s, ti)) return rebuild_runtime(s, ti);
    if (t->extra) set_extra(s, t, NULL);   /* applied at run time before */
    lm_array *orig = t->orig ? t->orig : *t->slot;
    lm_array *cur = NULL;
    for (int i = 0; i < s->n; i++) {
        const lr_lora *L = s->lora[i];
        for (int k = 0; k < L->nmod; k++) {
            if (L->mod[k].target != ti) continue;
            if (!cur) cur = lm_cast(orig, LM_F32);
            if (!cur) return lm_error_prefix("lora %s", L->path);
            lm_array *n = apply(L, s, &L->mod[k], cur);
            lm_array_release(cur);
            if (!n) return lm_error_status();
            cur = n;
        }
    }
    if (!cur) {   /* no adapter left here: the original back */
        if (t->orig) {
            lm_array_unkeep(*t->slot);
            *t->slot = t->orig;
            t->orig = NULL;
        }
        return LM_OK;
    }
    sw(&cur, lm_cast(cur, orig->dtype));
    if (!cur || lm_array_eval(cur) != LM_OK) {
        lm_array_release(cur);
        return lm_error_prefix("lora: merging into %s", t->name);
    }
    lm_array_keep(cur);
    lm_array_release(cur);
    if (t->orig) lm_array_unkeep(*t->slot);
    else t->orig = *t->slot;
    *t->slot = cur;
    return LM_OK;
}

/* ============================================================ loading */

static void lora_free(lr_lora *L)
{
    if (!L) return;
    lm_tensor_set_free(&L->set);
    free(L->mod);
    free(L->path);
    free(L->name);
    free(L->unmatched);
    free(L);
}

lm_status lm_lora_file_hash(const char *path, char hash[13])
{
    int fd = lm_io_open_read(path);
    if (fd < 0) return lm_error_status();
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return lm_error_set(LM_ERR_IO, "lora %s: cannot read it", path);
    }
    unsigned char h8[8];
    uint64_t n = 0;
    lm_status st = fread(h8, 1, 8, f) == 8 ? LM_OK
                                          : lm_error_set(LM_ERR_FORMAT, "lora %s: not a safetensors file", path);
    for (int i = 7; st == LM_OK && i >= 0; i--) n = n << 8 | h8[i];
    if (st == LM_OK && (n > LM_SAFETENSORS_MAX_HEADER || fseeko(f, (off_t)(8 + n), SEEK_SET)))
        st = lm_error_set(LM_ERR_FORMAT, "lora %s: header length %llu past the file", path,
                          (unsigned long long)n);
    lm_sha256 sh;
    lm_sha256_init(&sh);
    enum { CHUNK = 1 << 20 };
    unsigned char *buf = st == LM_OK ? malloc(CHUNK) : NULL;
    if (st == LM_OK && !buf) st = lm_error_set(LM_ERR_NOMEM, "out of memory");
    size_t got;
    while (st == LM_OK && (got = fread(buf, 1, CHUNK, f)) > 0) lm_sha256_update(&sh, buf, got);
    free(buf);
    if (st == LM_OK && ferror(f)) st = lm_error_set(LM_ERR_IO, "lora %s: read error", path);
    fclose(f);
    if (st != LM_OK) return st;
    uint8_t d[32];
    lm_sha256_final(&sh, d);
    for (int i = 0; i < 6; i++) snprintf(hash + 2 * i, 3, "%02x", d[i]);
    return LM_OK;
}

static lm_status append(char **buf, const char *s)
{
    size_t a = *buf ? strlen(*buf) : 0;
    char *n = realloc(*buf, a + strlen(s) + 3);
    if (!n) return lm_error_set(LM_ERR_NOMEM, "out of memory");
    snprintf(n + a, strlen(s) + 3, "%s%s", a ? ", " : "", s);
    *buf = n;
    return LM_OK;
}

/* Groups the file's keys into modules mapped to targets. */
static lm_status parse(lm_lora_stack *s, lr_lora *L, bool strict)
{
    const lm_tensor_set *set = &L->set;
    L->cap = set->count + 1;
    L->mod = calloc((size_t)L->cap, sizeof *L->mod);
    if (!L->mod) return lm_error_set(LM_ERR_NOMEM, "out of memory");
    unsigned kinds = 0;
    for (int i = 0; i < set->count; i++) {
        const char *key = set->names[i];
        size_t n = strlen(key);
        int role = -1;
        size_t cut = 0;
        for (size_t k = 0; k < sizeof SUFFIX / sizeof *SUFFIX && role < 0; k++) {
            size_t ns = strlen(SUFFIX[k].suffix);
            if (n > ns && !strcmp(key + n - ns, SUFFIX[k].suffix)) {
                role = (int)SUFFIX[k].role;
                cut = n - ns;
            }
        }
        lr_hit hit = {0};
        if (role >= 0 && cut < LR_NAME) {
            char mod[LR_NAME];
            memcpy(mod, key, cut);
            mod[cut] = 0;
            if (s->dit) map_dit(s, mod, &hit);
            else if ((hit.target[0] = map_module(s, mod)) >= 0) hit.n = 1;
        }
        if (!hit.n) {
            if (strict)
                return lm_error_set(LM_ERR_FORMAT, role < 0 ?
                    "lora %s: %s is no key of a known adapter layout (LoRA, LoHa, LoKr); strict=false skips it" :
                    "lora %s: %s adapts no weight of this model; strict=false skips it", L->path, key);
            L->info.unmatched++;
            if (L->info.unmatched <= LR_UNMATCHED_SHOWN && append(&L->unmatched, key) != LM_OK)
                return lm_error_status();
            continue;
        }
        if (!lm_dtype_is_float(set->arrays[i]->dtype))
            return lm_error_set(LM_ERR_DTYPE, "lora %s: %s is %s, expected a float dtype", L->path, key,
                                lm_dtype_name(set->arrays[i]->dtype));
        for (int h = 0; h < hit.n; h++) {
            int target = hit.target[h];
            if (lm_dtype_is_quant((*s->target[target].slot)->dtype) &&
                ((s->target[target].comp && s->target[target].comp != C_DIT) ||
                 (*s->target[target].slot)->ndim != 2))
                return lm_error_set(LM_ERR_UNSUPPORTED,
                                    "lora %s: %s: the weight %s is %s (quantized): merging needs f32, f16 or "
                                    "bf16 weights (load a safetensors %s)", L->path, key, s->target[target].name,
                                    lm_dtype_name((*s->target[target].slot)->dtype),
                                    s->dit ? "transformer" : "checkpoint");
            int m = 0;
            while (m < L->nmod && L->mod[m].target != target) m++;
            if (m == L->nmod) {
                /* set->count + 1 mods: an original fused key adds up to three */
                if (L->nmod == L->cap) {
                    int cap = 2 * L->cap;
                    lr_mod *g = realloc(L->mod, sizeof *g * (size_t)cap);
                    if (!g) return lm_error_set(LM_ERR_NOMEM, "out of memory");
                    L->mod = g;
                    L->cap = cap;
                }
                L->mod[m].target = target;
                L->mod[m].how = hit.how[h];
                for (int r = 0; r < R_COUNT; r++) L->mod[m].t[r] = -1;
                L->nmod++;
            }
            if (L->mod[m].t[role] >= 0 || L->mod[m].how != hit.how[h])
                return lm_error_set(LM_ERR_FORMAT, "lora %s: %s and %s adapt the same weight %s", L->path,
                                    L->mod[m].t[role] >= 0 ? set->names[L->mod[m].t[role]] : "another key",
                                    key, s->target[target].name);
            L->mod[m].t[role] = i;
        }
        kinds |= role == R_DORA || role == R_MAG ? 2u : role >= R_K1 ? 8u : role >= R_H1A ? 4u :
                 role == R_ALPHA ? 0u : 1u;
    }
    static const char *const KIND[] = {"lora", "dora", "loha", "lokr"};
    if (kinds & 2u) kinds &= ~1u;
    L->format[0] = 0;
    for (int k = 0; k < 4; k++)
        if (kinds & (1u << k))
            snprintf(L->format + strlen(L->format), sizeof L->format - strlen(L->format), "%s%s",
                     L->format[0] ? "+" : "", KIND[k]);
    if (!L->nmod)
        return lm_error_set(LM_ERR_FORMAT, "lora %s: no adapter weights for this model (%d keys%s%s)",
                            L->path, set->count, L->unmatched ? ", the first: " : "",
                            L->unmatched ? L->unmatched : "");
    return LM_OK;
}

/* A1111 takes kohya's sshs_model_hash from the metadata before hashing the
 * file (network.py); only a hex one is taken here, the rest is hashed. */
static bool meta_hash(const lm_tensor_set *set, char hash[13])
{
    for (int i = 0; i < set->nmeta; i++) {
        const char *v = set->meta[i].value;
        if (strcmp(set->meta[i].key, "sshs_model_hash") || !v || strlen(v) < 12) continue;
        for (int k = 0; k < 12; k++)
            if (!strchr("0123456789abcdefABCDEF", v[k]) || !v[k]) return false;
        memcpy(hash, v, 12);
        hash[12] = 0;
        return true;
    }
    return false;
}

static char *stem(const char *path)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    const char *dot = strrchr(b, '.');
    return strndup(b, dot && dot != b ? (size_t)(dot - b) : strlen(b));
}

static void fill_info(lr_lora *L)
{
    L->info.path = L->path;
    L->info.name = L->name;
    L->info.format = L->format;
    L->info.modules = L->nmod;
    L->info.unmatched_keys = L->unmatched ? L->unmatched : "";
}

lm_status lm_lora_load(lm_sd_pipeline *p, const char *path, const lm_lora_opts *o)
{
    lm_lora_opts def;
    if (!o) {
        lm_lora_opts_init(&def);
        o = &def;
    }
    if (!p || !path) return lm_error_set(LM_ERR_ARG, "lora: no pipeline or path");
    if (!(o->scale == o->scale) || o->scale < -1e6 || o->scale > 1e6)
        return lm_error_set(LM_ERR_ARG, "lora %s: weight %g is not a finite number", path, o->scale);
    lm_lora_stack **sp = lm_sd_pipeline_loras(p), *s = *sp;
    lm_dit_pipe *d = lm_sd_pipeline_dit(p);
    if (d) {
        /* resident (after an offload: read again, the loaded adapters merged) */
        lm_dit_pipe_set_loras(d, sp);
        if (lm_dit_pipe_transformer_ready(d) != LM_OK) return lm_error_prefix("lora %s", path);
    }
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s) return lm_error_set(LM_ERR_NOMEM, "out of memory");
        if ((d ? build_dit_targets(s, p) : build_targets(s, p)) != LM_OK) {
            lm_lora_stack_free(s);
            return lm_error_status();
        }
        *sp = s;
    }
    lr_lora *L = calloc(1, sizeof *L);
    lr_lora **grown = L ? realloc(s->lora, sizeof *grown * (size_t)(s->n + 1)) : NULL;
    if (grown) s->lora = grown;
    if (!L || !grown) {
        free(L);
        return lm_error_set(LM_ERR_NOMEM, "out of memory");
    }
    L->path = strdup(path);
    L->name = o->name ? strdup(o->name) : stem(path);
    L->info.scale = o->scale;
    L->runtime = o->runtime;
    lm_status st = L->path && L->name ? LM_OK : lm_error_set(LM_ERR_NOMEM, "out of memory");
    if (st == LM_OK) st = lm_load_file_to(path, lm_sd_pipeline_device(p), &L->set);
    if (st == LM_OK && !meta_hash(&L->set, L->info.hash)) st = lm_lora_file_hash(path, L->info.hash);
    if (st == LM_OK && L->set.format != LM_FORMAT_SAFETENSORS)
        st = lm_error_set(LM_ERR_FORMAT, "lora %s: a %s file; LoRAs are read from safetensors", path,
                          lm_format_name(L->set.format));
    if (st == LM_OK) st = parse(s, L, o->strict);
    if (st != LM_OK) {
        const char *msg = lm_error_message();
        if (strncmp(msg, "lora ", 5)) {
            if (strstr(msg, path)) lm_error_prefix("lora");   /* the reader named the file */
            else lm_error_prefix("lora %s", path);
        }
        lora_free(L);
        return st;
    }
    fill_info(L);
    s->lora[s->n++] = L;
    for (int k = 0; k < L->nmod && st == LM_OK; k++) st = rebuild(s, L->mod[k].target);
    if (st != LM_OK) {   /* back to the state before: every target it touched rebuilt without it */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", lm_error_message());
        s->n--;
        for (int k = 0; k < L->nmod; k++) rebuild(s, L->mod[k].target);
        lora_free(L);
        return lm_error_set(st, "%s", msg);
    }
    return LM_OK;
}

void lm_lora_stack_free(lm_lora_stack *s)
{
    if (!s) return;
    int n = s->n;
    s->n = 0;
    for (int i = 0; i < s->ntarget; i++) {
        lr_target *t = &s->target[i];
        if (t->extra) set_extra(s, t, NULL);
        if (t->orig && t->slot) {
            lm_array_unkeep(*t->slot);
            *t->slot = t->orig;
        }
        free(t->name);
        free(t->kname);
        free(t->lname);
    }
    for (int i = 0; i < n; i++) lora_free(s->lora[i]);
    for (int i = 0; i < s->nalias; i++) {
        free(s->alias[i].name);
        free(s->alias[i].kname);
    }
    free(s->alias);
    free(s->lora);
    free(s->target);
    free(s);
}

void lm_lora_detach(lm_lora_stack *s)
{
    if (!s || !s->dit || s->detached) return;
    for (int i = 0; i < s->ntarget; i++) {
        lr_target *t = &s->target[i];
        if (t->extra) set_extra(s, t, NULL);
        if (t->orig) {
            lm_array_unkeep(*t->slot);
            *t->slot = t->orig;
            t->orig = NULL;
        }
        t->slot = NULL;
    }
    s->detached = true;
}

lm_status lm_lora_attach(lm_lora_stack *s, lm_dit_pipe *d)
{
    if (!s || !s->detached) return LM_OK;
    lm_dit_slots *w = dit_slots(d);
    if (!w) return lm_error_set(LM_ERR_STATE, "lora: the transformer is not loaded");
    for (int i = 0; i < s->ntarget; i++) {
        lr_target *t = &s->target[i];
        size_t n = strlen(t->name);
        for (int k = 0; k < w->n && !t->slot; k++)
            if (!strncmp(w->s[k].name, t->name, n) && !strcmp(w->s[k].name + n, ".weight")) {
                t->slot = w->s[k].slot;
                t->uidx = k;
            }
        if (!t->slot) {
            for (int k = 0; k < i; k++) s->target[k].slot = NULL;
            return lm_error_set(LM_ERR_FORMAT, "lora: the transformer read again has no weight %s.weight", t->name);
        }
    }
    s->detached = false;
    bool *done = calloc((size_t)s->ntarget + 1, sizeof *done);
    if (!done) {
        lm_lora_detach(s);
        return lm_error_set(LM_ERR_NOMEM, "out of memory");
    }
    lm_status st = LM_OK;
    for (int i = 0; i < s->n && st == LM_OK; i++)
        for (int k = 0; k < s->lora[i]->nmod && st == LM_OK; k++) {
            int ti = s->lora[i]->mod[k].target;
            if (!done[ti]) st = rebuild(s, ti);
            done[ti] = true;
        }
    free(done);
    if (st != LM_OK) lm_lora_detach(s);
    return st;
}

void lm_lora_unload_all(lm_sd_pipeline *p)
{
    if (!p) return;
    lm_lora_stack **sp = lm_sd_pipeline_loras(p);
    lm_lora_stack_free(*sp);
    *sp = NULL;
}

int lm_lora_count(const lm_sd_pipeline *p)
{
    const lm_lora_stack *s = p ? *lm_sd_pipeline_loras((lm_sd_pipeline *)p) : NULL;
    return s ? s->n : 0;
}

const lm_lora_info *lm_lora_get(const lm_sd_pipeline *p, int i)
{
    const lm_lora_stack *s = p ? *lm_sd_pipeline_loras((lm_sd_pipeline *)p) : NULL;
    return s && i >= 0 && i < s->n ? &s->lora[i]->info : NULL;
}

const char *lm_lora_hashes(const lm_sd_pipeline *p, char *buf, size_t cap)
{
    size_t at = 0;
    if (cap) buf[0] = 0;
    for (int i = 0; i < lm_lora_count(p) && at < cap; i++) {
        const lm_lora_info *f = lm_lora_get(p, i);
        /* A1111 drops ':' and ',' from the name (extra_networks_lora.py) */
        char name[256];
        size_t n = 0;
        for (const char *c = f->name; *c && n + 1 < sizeof name; c++)
            if (*c != ':' && *c != ',') name[n++] = *c;
        name[n] = 0;
        int w = snprintf(buf + at, cap - at, "%s%s: %s", i ? ", " : "", name, f->hash);
        if (w < 0) break;
        at += (size_t)w;
    }
    return buf;
}

/* ============================================================ prompt tags */

int lm_lora_tags(const char *prompt, char **clean, char **names, double *weights, int max)
{
    /* the one tag parser: models/prompt.c's (A1111's extra_networks), which
     * removes every <kind:args> tag; the <lora:...> ones are read here */
    lm_prompt_networks nets;
    size_t cl;
    *clean = NULL;
    if (lm_prompt_extra_networks(prompt, strlen(prompt), clean, &cl, &nets) != LM_OK) return -1;
    int count = 0, kept = 0;
    for (int i = 0; i < nets.n; i++) {
        const lm_prompt_network *t = &nets.items[i];
        if (strcmp(t->kind, "lora")) continue;
        const char *name = t->args[0];
        double w = 1.0;
        if (t->nargs > 1) {   /* A1111's te:unet pair: the first */
            char *e = NULL;
            const char *num = t->args[1];
            w = strtod(num, &e);
            if (!*num || !e || *e) {
                lm_error_set(LM_ERR_ARG, "prompt: <lora:%s:%s>: the weight is not a number", name, num);
                count = -1;
            }
        }
        if (count >= 0 && !*name) {
            lm_error_set(LM_ERR_ARG, "prompt: <lora:%s> names no LoRA", t->nargs > 1 ? t->args[0] : "");
            count = -1;
        }
        if (count < 0) break;
        if (count < max && !(names[count] = strdup(name))) {
            lm_error_set(LM_ERR_NOMEM, "out of memory");
            count = -1;
            break;
        }
        if (count < max) weights[count] = w, kept++;
        count++;
    }
    if (count < 0) {
        /* the names kept so far are freed; so is the text */
        for (int i = 0; i < kept; i++) free(names[i]);
        free(*clean);
        *clean = NULL;
    }
    lm_prompt_networks_free(&nets);
    return count;
}

/* ============================================================ surfaces */

lm_status lm_lora_load_spec(lm_sd_pipeline *p, const char *spec, bool strict)
{
    lm_lora_opts o;
    lm_lora_opts_init(&o);
    o.strict = strict;
    const char *colon = strrchr(spec, ':');
    char *path = NULL;
    if (colon && colon[1]) {
        char *e;
        double w = strtod(colon + 1, &e);
        if (!*e && e != colon + 1) {
            o.scale = w;
            path = strndup(spec, (size_t)(colon - spec));
        }
    }
    lm_status st = lm_lora_load(p, path ? path : spec, &o);
    free(path);
    return st;
}

lm_status lm_lora_load_tags(lm_sd_pipeline *p, const char *prompt, const char *dir, const char *who,
                            bool strict, char **clean)
{
    enum { MAXT = 64 };
    char *names[MAXT];
    double w[MAXT];
    *clean = NULL;
    int n = lm_lora_tags(prompt, clean, names, w, MAXT);
    if (n < 0) return lm_error_status();
    lm_status st = LM_OK;
    if (n > MAXT) st = lm_error_set(LM_ERR_ARG, "prompt: %d <lora:...> tags (at most %d)", n, MAXT);
    for (int i = 0; i < n && i < MAXT; i++) {
        if (st == LM_OK && !dir)
            st = lm_error_set(LM_ERR_ARG, "prompt: <lora:%s> needs a LoRA folder (%s)", names[i],
                              who ? who : "lora_dir");
        if (st == LM_OK) {
            size_t len = strlen(dir) + strlen(names[i]) + 16;
            char *path = malloc(len);
            if (!path) st = lm_error_set(LM_ERR_NOMEM, "out of memory");
            else {
                snprintf(path, len, "%s/%s.safetensors", dir, names[i]);
                lm_lora_opts o;
                lm_lora_opts_init(&o);
                o.scale = w[i];
                o.strict = strict;
                o.name = names[i];
                st = lm_lora_load(p, path, &o);
                free(path);
            }
        }
        free(names[i]);
    }
    if (st != LM_OK) {
        free(*clean);
        *clean = NULL;
    }
    return st;
}
