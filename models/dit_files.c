/* dit_files.c - Z-Image and FLUX.2 transformer single files and GGUF
 * (see dit_files.h): detection, the FLUX.2 key map, config inference,
 * quantized weights. */
#include "dit_files.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend.h"
#include "core/io/gguf.h"
#include "lumen.h"
#include "models/diffusers_config.h"
#include "models/flux2.h"
#include "models/sd_single.h"
#include "models/zimage.h"

#define DF_PREFIX "model.diffusion_model."
#define CONFIG_MAX (1u << 20)
#define NAME_MAX_LEN 200

/* ---- keys ---- */

static int find(const lm_tensor_set *s, const char *k) { return lm_tensor_set_find(s, k); }

/* k with or without the checkpoint prefix */
static bool has_any(const lm_tensor_set *s, const char *k)
{
    char p[256];
    snprintf(p, sizeof p, DF_PREFIX "%s", k);
    return find(s, k) >= 0 || find(s, p) >= 0;
}

static bool has_prefix(const lm_tensor_set *s, const char *p)
{
    size_t n = strlen(p), m = strlen(DF_PREFIX);
    for (int i = 0; i < s->count; i++) {
        const char *k = s->names[i];
        if (!strncmp(k, DF_PREFIX, m)) k += m;
        if (!strncmp(k, p, n)) return true;
    }
    return false;
}

/* how many blocks name.0., name.1., ... there are */
static int64_t count_blocks(const lm_tensor_set *s, const char *name)
{
    int64_t n = 0;
    for (;; n++) {
        char p[96];
        snprintf(p, sizeof p, "%s.%lld.", name, (long long)n);
        if (!has_prefix(s, p)) return n;
    }
}

lm_sd_family lm_dit_file_family(const lm_tensor_set *s)
{
    if (has_any(s, "cap_embedder.1.weight") && has_prefix(s, "noise_refiner.0.") &&
        has_prefix(s, "context_refiner.0."))
        return LM_SD_ZIMAGE;
    if (has_any(s, "double_stream_modulation_img.lin.weight") ||
        has_any(s, "double_stream_modulation_img.linear.weight"))
        return LM_SD_KLEIN;
    return LM_SD_UNKNOWN;
}

/* The file's tensors on the host (CPU), names without the prefix */
static lm_status read_host(const char *path, lm_tensor_set *set)
{
    memset(set, 0, sizeof *set);
    lm_status st = lm_init();
    if (st != LM_OK) return st;
    lm_file_format f = lm_file_detect(path);
    if (f == LM_FORMAT_SAFETENSORS) st = lm_load_safetensors(path, set);
    else if (f == LM_FORMAT_GGUF) st = lm_load_gguf(path, set, NULL);
    else
        return lm_error_set(LM_ERR_FORMAT, "%s: a %s file, not safetensors or GGUF", path, lm_format_name(f));
    if (st != LM_OK) return st;
    size_t m = strlen(DF_PREFIX);
    /* a ComfyUI all-in-one checkpoint: the transformer under the prefix,
     * its text encoder and VAE (text_encoders.*, vae.*) left to the folder */
    bool aio = false;
    for (int i = 0; i < set->count && !aio; i++) aio = !strncmp(set->names[i], DF_PREFIX, m);
    for (int i = 0; aio && i < set->count; i++) {
        if (strncmp(set->names[i], "text_encoders.", 14) && strncmp(set->names[i], "vae.", 4)) continue;
        lm_array_release(set->arrays[i]);
        free(set->names[i]);
        set->count--;
        set->arrays[i] = set->arrays[set->count];
        set->names[i] = set->names[set->count];
        i--;
    }
    for (int i = 0; i < set->count; i++) {
        char *k = set->names[i];
        if (strlen(k) > NAME_MAX_LEN) {
            st = lm_error_set(LM_ERR_FORMAT, "%s: key %.40s... is too long for a transformer weight", path, k);
            break;
        }
        if (strncmp(k, DF_PREFIX, m)) continue;
        if (find(set, k + m) >= 0) {
            st = lm_error_set(LM_ERR_FORMAT, "%s: %s and %s both name one weight", path, k + m, k);
            break;
        }
        memmove(k, k + m, strlen(k + m) + 1);
    }
    if (st != LM_OK) lm_tensor_set_free(set);
    return st;
}

/* ---- building the renamed set ---- */

typedef struct df_out {
    lm_tensor_set set;
    int cap;
} df_out;

/* adds a (consumed) under name */
static lm_status add(df_out *o, const char *name, lm_array *a)
{
    if (!a) return lm_error_status();
    if (o->set.count == o->cap) {
        int cap = o->cap ? 2 * o->cap : 64;
        char **nn = realloc(o->set.names, sizeof *nn * (size_t)cap);
        if (nn) o->set.names = nn;
        lm_array **na = nn ? realloc(o->set.arrays, sizeof *na * (size_t)cap) : NULL;
        if (na) o->set.arrays = na;
        if (!nn || !na) {
            lm_array_release(a);
            return lm_error_set(LM_ERR_NOMEM, "out of memory");
        }
        o->cap = cap;
    }
    char *c = strdup(name);
    if (!c) {
        lm_array_release(a);
        return lm_error_set(LM_ERR_NOMEM, "out of memory");
    }
    o->set.names[o->set.count] = c;
    o->set.arrays[o->set.count++] = a;
    return LM_OK;
}

/* The row ranges r[0..n) of the 2-D host tensor a, one after another: views
 * (and a concat) of a float tensor; for a quantized one a copy of its
 * blocks, which a row range holds whole (ggml rows are whole blocks). */
static lm_array *pick_rows(lm_array *a, int n, const int64_t (*r)[2])
{
    if (!lm_dtype_is_quant(a->dtype)) {
        lm_array *part[2] = {NULL, NULL}, *out = NULL;
        for (int i = 0; i < n && i < 2; i++) part[i] = lm_slice(a, 0, r[i][0], r[i][1], 1);
        if (n == 1) return part[0];
        if (part[0] && part[1]) out = lm_concat(2, part, 0);
        lm_array_release(part[0]);
        lm_array_release(part[1]);
        return out;
    }
    size_t all = lm_array_nbytes(a), row = all / (size_t)a->shape[0];
    int64_t rows = 0;
    for (int i = 0; i < n; i++) rows += r[i][1] - r[i][0];
    char *src = malloc(all), *dst = malloc(row * (size_t)rows + 1);
    lm_array *out = NULL;
    if (src && dst && lm_array_read(a, src, a->dtype) == LM_OK) {
        size_t at = 0;
        for (int i = 0; i < n; i++) {
            size_t len = row * (size_t)(r[i][1] - r[i][0]);
            memcpy(dst + at, src + row * (size_t)r[i][0], len);
            at += len;
        }
        int64_t shape[2] = {rows, a->shape[1]};
        out = lm_from_data(2, shape, a->dtype, dst, a->device);
    } else if (!src || !dst) {
        lm_error_set(LM_ERR_NOMEM, "out of memory");
    }
    free(src);
    free(dst);
    return out;
}

/* ---- FLUX.2: the original (BFL) names to diffusers', as
 * convert_flux2_transformer_checkpoint_to_diffusers maps them ---- */

typedef enum { XF_COPY, XF_QKV, XF_SWAP } df_xf;

typedef struct df_entry {
    const char *orig;         /* under its scope: "", "double_blocks.N.", "single_blocks.N." */
    const char *dfs[3];       /* XF_QKV: the thirds' names */
    df_xf xf;
    bool optional;
} df_entry;

static const df_entry flux2_top[] = {
    {"img_in.weight", {"x_embedder.weight"}, XF_COPY, false},
    {"txt_in.weight", {"context_embedder.weight"}, XF_COPY, false},
    {"time_in.in_layer.weight", {"time_guidance_embed.timestep_embedder.linear_1.weight"}, XF_COPY, false},
    {"time_in.out_layer.weight", {"time_guidance_embed.timestep_embedder.linear_2.weight"}, XF_COPY, false},
    /* FLUX.2 [dev]'s guidance embedder (flux2.c refuses it by its config) */
    {"guidance_in.in_layer.weight", {"time_guidance_embed.guidance_embedder.linear_1.weight"}, XF_COPY, true},
    {"guidance_in.out_layer.weight", {"time_guidance_embed.guidance_embedder.linear_2.weight"}, XF_COPY, true},
    {"double_stream_modulation_img.lin.weight", {"double_stream_modulation_img.linear.weight"}, XF_COPY, false},
    {"double_stream_modulation_txt.lin.weight", {"double_stream_modulation_txt.linear.weight"}, XF_COPY, false},
    {"single_stream_modulation.lin.weight", {"single_stream_modulation.linear.weight"}, XF_COPY, false},
    {"final_layer.linear.weight", {"proj_out.weight"}, XF_COPY, false},
    /* the original's (shift, scale) is diffusers' (scale, shift) */
    {"final_layer.adaLN_modulation.1.weight", {"norm_out.linear.weight"}, XF_SWAP, false},
};

static const df_entry flux2_double[] = {
    {"img_attn.qkv.weight", {"attn.to_q.weight", "attn.to_k.weight", "attn.to_v.weight"}, XF_QKV, false},
    {"txt_attn.qkv.weight", {"attn.add_q_proj.weight", "attn.add_k_proj.weight", "attn.add_v_proj.weight"},
     XF_QKV, false},
    {"img_attn.norm.query_norm.scale", {"attn.norm_q.weight"}, XF_COPY, false},
    {"img_attn.norm.key_norm.scale", {"attn.norm_k.weight"}, XF_COPY, false},
    {"txt_attn.norm.query_norm.scale", {"attn.norm_added_q.weight"}, XF_COPY, false},
    {"txt_attn.norm.key_norm.scale", {"attn.norm_added_k.weight"}, XF_COPY, false},
    {"img_attn.proj.weight", {"attn.to_out.0.weight"}, XF_COPY, false},
    {"txt_attn.proj.weight", {"attn.to_add_out.weight"}, XF_COPY, false},
    {"img_mlp.0.weight", {"ff.linear_in.weight"}, XF_COPY, false},
    {"img_mlp.2.weight", {"ff.linear_out.weight"}, XF_COPY, false},
    {"txt_mlp.0.weight", {"ff_context.linear_in.weight"}, XF_COPY, false},
    {"txt_mlp.2.weight", {"ff_context.linear_out.weight"}, XF_COPY, false},
};

static const df_entry flux2_single[] = {
    {"linear1.weight", {"attn.to_qkv_mlp_proj.weight"}, XF_COPY, false},
    {"linear2.weight", {"attn.to_out.weight"}, XF_COPY, false},
    {"norm.query_norm.scale", {"attn.norm_q.weight"}, XF_COPY, false},
    {"norm.key_norm.scale", {"attn.norm_k.weight"}, XF_COPY, false},
};

/* One entry of the table: the file's key (a norm's ".scale" may be written
 * ".weight", as some converters do) renamed and transformed into o */
static lm_status map_entry(const lm_tensor_set *s, bool *used, const char *path, const char *from_scope,
                           const char *to_scope, const df_entry *e, int64_t nd, int64_t ns, df_out *o)
{
    char k[256], alt[256], to[256];
    snprintf(k, sizeof k, "%s%s", from_scope, e->orig);
    int i = find(s, k);
    size_t n = strlen(k);
    if (i < 0 && n > 6 && !strcmp(k + n - 6, ".scale")) {
        snprintf(alt, sizeof alt, "%.*s.weight", (int)(n - 6), k);
        i = find(s, alt);
    }
    if (i < 0) {
        if (e->optional) return LM_OK;
        return lm_error_set(LM_ERR_FORMAT, "%s: missing key %s (a FLUX.2 transformer of %lld double and %lld "
                            "single blocks, as the file's keys count them)", path, k, (long long)nd,
                            (long long)ns);
    }
    used[i] = true;
    lm_array *a = s->arrays[i];
    if (e->xf != XF_COPY && (a->ndim != 2 || a->shape[0] % (e->xf == XF_QKV ? 3 : 2))) {
        char sh[96];
        lm_shape_str(sh, sizeof sh, a->ndim, a->shape);
        return lm_error_set(LM_ERR_SHAPE, "%s: %s has shape %s: expected a matrix of %s rows", path, k, sh,
                            e->xf == XF_QKV ? "3 x dim" : "2 x dim");
    }
    if (e->xf == XF_COPY) {
        snprintf(to, sizeof to, "%s%s", to_scope, e->dfs[0]);
        return add(o, to, lm_array_retain(a));
    }
    if (e->xf == XF_SWAP) {
        int64_t h = a->shape[0] / 2, r[2][2] = {{h, 2 * h}, {0, h}};
        snprintf(to, sizeof to, "%s%s", to_scope, e->dfs[0]);
        lm_status st = add(o, to, pick_rows(a, 2, r));
        return st == LM_OK ? st : lm_error_prefix("%s: %s", path, k);
    }
    int64_t t = a->shape[0] / 3;
    for (int p = 0; p < 3; p++) {
        int64_t r[1][2] = {{p * t, (p + 1) * t}};
        snprintf(to, sizeof to, "%s%s", to_scope, e->dfs[p]);
        if (add(o, to, pick_rows(a, 1, r)) != LM_OK) return lm_error_prefix("%s: %s", path, k);
    }
    return LM_OK;
}

/* The original names renamed (the set is replaced by the renamed one) */
static lm_status flux2_rename(lm_tensor_set *s, const char *path)
{
    int64_t nd = count_blocks(s, "double_blocks"), ns = count_blocks(s, "single_blocks");
    bool *used = calloc((size_t)s->count + 1, sizeof *used);
    df_out o = {0};
    lm_status st = used ? LM_OK : lm_error_set(LM_ERR_NOMEM, "out of memory");
    size_t nt = sizeof flux2_top / sizeof *flux2_top, ndb = sizeof flux2_double / sizeof *flux2_double,
           nsb = sizeof flux2_single / sizeof *flux2_single;
    for (size_t e = 0; st == LM_OK && e < nt; e++)
        st = map_entry(s, used, path, "", "", &flux2_top[e], nd, ns, &o);
    for (int64_t l = 0; st == LM_OK && l < nd; l++) {
        char from[48], to[48];
        snprintf(from, sizeof from, "double_blocks.%lld.", (long long)l);
        snprintf(to, sizeof to, "transformer_blocks.%lld.", (long long)l);
        for (size_t e = 0; st == LM_OK && e < ndb; e++)
            st = map_entry(s, used, path, from, to, &flux2_double[e], nd, ns, &o);
    }
    for (int64_t l = 0; st == LM_OK && l < ns; l++) {
        char from[48], to[48];
        snprintf(from, sizeof from, "single_blocks.%lld.", (long long)l);
        snprintf(to, sizeof to, "single_transformer_blocks.%lld.", (long long)l);
        for (size_t e = 0; st == LM_OK && e < nsb; e++)
            st = map_entry(s, used, path, from, to, &flux2_single[e], nd, ns, &o);
    }
    for (int i = 0; st == LM_OK && i < s->count; i++) {
        if (used[i]) continue;
        char sh[96];
        lm_shape_str(sh, sizeof sh, s->arrays[i]->ndim, s->arrays[i]->shape);
        st = lm_error_set(LM_ERR_FORMAT, "%s: unexpected key %s %s: no place for it in a FLUX.2 transformer "
                          "of %lld double and %lld single blocks", path, s->names[i], sh, (long long)nd,
                          (long long)ns);
    }
    free(used);
    if (st != LM_OK) {
        lm_tensor_set_free(&o.set);
        return st;
    }
    o.set.format = s->format;
    lm_tensor_set_free(s);
    *s = o.set;
    return LM_OK;
}

/* the original name of FLUX.2 key dfs: a table entry whose diffusers name,
 * under its scope, is dfs */
static lm_dit_orig flux2_original(const char *dfs, char *orig, size_t cap)
{
    static const struct { const char *dfs, *orig; const df_entry *t; size_t n; } scope[] = {
        {"transformer_blocks.", "double_blocks.", flux2_double, sizeof flux2_double / sizeof *flux2_double},
        {"single_transformer_blocks.", "single_blocks.", flux2_single, sizeof flux2_single / sizeof *flux2_single},
        {"", "", flux2_top, sizeof flux2_top / sizeof *flux2_top},
    };
    for (size_t s = 0; s < sizeof scope / sizeof *scope; s++) {
        size_t n = strlen(scope[s].dfs);
        if (strncmp(dfs, scope[s].dfs, n)) continue;
        const char *rest = dfs + n;
        char num[24] = "";
        if (n) {   /* the block's number */
            size_t d = strspn(rest, "0123456789");
            if (!d || d >= sizeof num || rest[d] != '.') continue;
            snprintf(num, sizeof num, "%.*s", (int)(d + 1), rest);
            rest += d + 1;
        }
        for (size_t e = 0; e < scope[s].n; e++)
            for (int p = 0; p < 3; p++) {
                const df_entry *x = &scope[s].t[e];
                if (!x->dfs[p] || strcmp(x->dfs[p], rest)) continue;
                snprintf(orig, cap, "%s%s%s", scope[s].orig, num, x->orig);
                return x->xf == XF_QKV ? (lm_dit_orig)(LM_DIT_ORIG_THIRD0 + p)
                       : x->xf == XF_SWAP ? LM_DIT_ORIG_SWAP : LM_DIT_ORIG_COPY;
            }
    }
    snprintf(orig, cap, "%s", dfs);
    return LM_DIT_ORIG_SAME;
}

/* Z-Image's: zimage_keys.c's renames read backwards */
static lm_dit_orig zimage_original(const char *dfs, char *orig, size_t cap)
{
    static const struct { const char *dfs, *orig; bool prefix; lm_dit_orig how; } rules[] = {
        {"all_final_layer.2-1.", "final_layer.", true, LM_DIT_ORIG_COPY},
        {"all_x_embedder.2-1.", "x_embedder.", true, LM_DIT_ORIG_COPY},
        {".attention.to_out.0.weight", ".attention.out.weight", false, LM_DIT_ORIG_COPY},
        {".attention.to_q.weight", ".attention.qkv.weight", false, LM_DIT_ORIG_THIRD0},
        {".attention.to_k.weight", ".attention.qkv.weight", false, LM_DIT_ORIG_THIRD1},
        {".attention.to_v.weight", ".attention.qkv.weight", false, LM_DIT_ORIG_THIRD2},
    };
    size_t n = strlen(dfs);
    for (size_t r = 0; r < sizeof rules / sizeof *rules; r++) {
        size_t k = strlen(rules[r].dfs);
        if (rules[r].prefix ? !strncmp(dfs, rules[r].dfs, k) : n > k && !strcmp(dfs + n - k, rules[r].dfs)) {
            if (rules[r].prefix) snprintf(orig, cap, "%s%s", rules[r].orig, dfs + k);
            else snprintf(orig, cap, "%.*s%s", (int)(n - k), dfs, rules[r].orig);
            return rules[r].how;
        }
    }
    snprintf(orig, cap, "%s", dfs);
    return LM_DIT_ORIG_SAME;
}

lm_dit_orig lm_dit_original_name(lm_sd_net net, const char *dfs, char *orig, size_t cap)
{
    if (net == LM_SD_NET_FLUX2) return flux2_original(dfs, orig, cap);
    if (net == LM_SD_NET_ZIMAGE) return zimage_original(dfs, orig, cap);
    snprintf(orig, cap, "%s", dfs);
    return LM_DIT_ORIG_SAME;
}

/* Z-Image: a float attention.qkv split into to_q / to_k / to_v (views),
 * so the products are diffusers' own three; a quantized one stays fused
 * (one quantized product, which zimage.c takes in their place) */
static lm_status zimage_split_qkv(lm_tensor_set *s, const char *path)
{
    df_out o = {0};
    lm_status st = LM_OK;
    static const char *const part[3] = {"to_q", "to_k", "to_v"};
    for (int i = 0; st == LM_OK && i < s->count; i++) {
        lm_array *a = s->arrays[i];
        const char *k = s->names[i], *at = strstr(k, ".attention.qkv.weight");
        if (!at || at[strlen(".attention.qkv.weight")] || lm_dtype_is_quant(a->dtype)) {
            st = add(&o, k, lm_array_retain(a));
            continue;
        }
        if (a->ndim != 2 || a->shape[0] % 3) {
            char sh[96];
            lm_shape_str(sh, sizeof sh, a->ndim, a->shape);
            st = lm_error_set(LM_ERR_SHAPE, "%s: %s has shape %s: expected [3 dim, dim]", path, k, sh);
            break;
        }
        int64_t t = a->shape[0] / 3;
        for (int p = 0; st == LM_OK && p < 3; p++) {
            char to[256];
            int64_t r[1][2] = {{p * t, (p + 1) * t}};
            snprintf(to, sizeof to, "%.*s.attention.%s.weight", (int)(at - k), k, part[p]);
            st = add(&o, to, pick_rows(a, 1, r));
        }
    }
    if (st != LM_OK) {
        lm_tensor_set_free(&o.set);
        return st;
    }
    o.set.format = s->format;
    lm_tensor_set_free(s);
    *s = o.set;
    return LM_OK;
}

/* ---- config inference ---- */

/* the 2-D or 1-D weight k (its original name orig for messages), or NULL
 * with the error set */
static lm_array *probe(const lm_tensor_set *s, const char *path, const char *k, const char *orig, int nd)
{
    int i = find(s, k);
    if (i < 0) {
        lm_error_set(LM_ERR_FORMAT, "%s: missing key %s%s%s%s: the config cannot be inferred without it", path,
                     orig ? orig : k, orig ? " (diffusers' " : "", orig ? k : "", orig ? ")" : "");
        return NULL;
    }
    lm_array *a = s->arrays[i];
    if (a->ndim != nd) {
        char sh[96];
        lm_shape_str(sh, sizeof sh, a->ndim, a->shape);
        lm_error_set(LM_ERR_SHAPE, "%s: %s has shape %s: expected %d dimensions", path, orig ? orig : k, sh, nd);
        return NULL;
    }
    return a;
}

static bool add_ints(cJSON *c, const char *key, int n, const int64_t *v)
{
    cJSON *a = cJSON_AddArrayToObject(c, key);
    for (int i = 0; a && i < n; i++) {
        cJSON *x = cJSON_CreateNumber((double)v[i]);
        if (!x || !cJSON_AddItemToArray(a, x)) return false;
    }
    return a != NULL;
}

/* The folder's transformer/config.json over the inferred config c: keys
 * the shapes told (told[]) must agree, the others replace the released
 * models' conventions. */
static lm_status overlay(cJSON *c, const char *const *told, const char *path, const char *config_dir)
{
    if (!config_dir) return LM_OK;
    char *cp = lm_dfs_path(config_dir, "transformer/config.json");
    cJSON *f = NULL;
    lm_status st = cp ? lm_dfs_json(cp, CONFIG_MAX, true, &f) : lm_error_status();
    for (cJSON *it = f ? f->child : NULL; st == LM_OK && it; it = it->next) {
        if (!it->string || it->string[0] == '_') continue;
        bool shape = false;
        for (int k = 0; told[k]; k++) shape |= !strcmp(told[k], it->string);
        const cJSON *mine = cJSON_GetObjectItemCaseSensitive(c, it->string);
        if (shape && mine && !cJSON_Compare(mine, it, true) &&
            !(cJSON_IsNumber(mine) && cJSON_IsNumber(it) && mine->valuedouble == it->valuedouble)) {
            char *a = cJSON_PrintUnformatted(mine), *b = cJSON_PrintUnformatted(it);
            st = lm_error_set(LM_ERR_FORMAT, "%s: %s is %s by the file's shapes, %s in %s", path, it->string,
                              a ? a : "?", b ? b : "?", cp);
            free(a);
            free(b);
            break;
        }
        cJSON *d = cJSON_Duplicate(it, true);
        if (!d || !cJSON_ReplaceItemInObjectCaseSensitive(c, it->string, d)) {
            if (d && !mine && cJSON_AddItemToObject(c, it->string, d)) continue;
            cJSON_Delete(d);
            st = lm_error_set(LM_ERR_NOMEM, "out of memory");
        }
    }
    cJSON_Delete(f);
    free(cp);
    return st;
}

/* the RoPE axes the config must have by now */
static lm_status need_axes(const cJSON *c, const char *key, int64_t head, const char *path, const char *config_dir)
{
    if (cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(c, key))) return LM_OK;
    return lm_error_set(LM_ERR_FORMAT, "%s: the head size is %lld, not the released model's 128, so %s cannot be "
                        "told from the shapes: give a diffusers folder of the model with transformer/config.json%s%s",
                        path, (long long)head, key, config_dir ? " (none in " : "", config_dir ? config_dir : "");
}

static lm_status zimage_config(const lm_tensor_set *s, const char *path, const char *config_dir, cJSON **out)
{
    lm_array *cap = probe(s, path, "cap_embedder.1.weight", NULL, 2);
    lm_array *xe = cap ? probe(s, path, "all_x_embedder.2-1.weight", "x_embedder.weight", 2) : NULL;
    if (!xe) return lm_error_status();
    int64_t dim = cap->shape[0], pd = xe->shape[1];
    int64_t nl = count_blocks(s, "layers"), nr = count_blocks(s, "noise_refiner"),
            nc = count_blocks(s, "context_refiner");
    if (nr != nc)
        return lm_error_set(LM_ERR_FORMAT, "%s: %lld noise_refiner and %lld context_refiner blocks (Z-Image has as "
                            "many of each)", path, (long long)nr, (long long)nc);
    /* the q-norm's width is the head size (the release: 3840 / 30 = 128) */
    int qn = find(s, "layers.0.attention.norm_q.weight");
    int64_t head = qn >= 0 ? s->arrays[qn]->shape[0] : 128;
    if (pd % 4 || head <= 0 || dim % head)
        return lm_error_set(LM_ERR_SHAPE, "%s: x_embedder.weight [%lld,%lld], head size %lld: expected 2x2 patches "
                            "of the latent channels and a dim of whole heads", path, (long long)xe->shape[0],
                            (long long)pd, (long long)head);
    cJSON *c = cJSON_CreateObject();
    int64_t one = 1, two = 2, axes[3] = {32, 48, 48}, lens[3] = {1536, 512, 512};
    bool ok = c && cJSON_AddStringToObject(c, "_class_name", "ZImageTransformer2DModel") &&
              add_ints(c, "all_patch_size", 1, &two) && add_ints(c, "all_f_patch_size", 1, &one) &&
              cJSON_AddNumberToObject(c, "in_channels", (double)(pd / 4)) &&
              cJSON_AddNumberToObject(c, "dim", (double)dim) &&
              cJSON_AddNumberToObject(c, "n_layers", (double)nl) &&
              cJSON_AddNumberToObject(c, "n_refiner_layers", (double)nr) &&
              cJSON_AddNumberToObject(c, "n_heads", (double)(dim / head)) &&
              cJSON_AddNumberToObject(c, "n_kv_heads", (double)(dim / head)) &&
              cJSON_AddNumberToObject(c, "norm_eps", 1e-5) && cJSON_AddBoolToObject(c, "qk_norm", qn >= 0) &&
              cJSON_AddNumberToObject(c, "cap_feat_dim", (double)cap->shape[1]) &&
              cJSON_AddNumberToObject(c, "rope_theta", 256.0) && cJSON_AddNumberToObject(c, "t_scale", 1000.0) &&
              (head != 128 || add_ints(c, "axes_dims", 3, axes)) && add_ints(c, "axes_lens", 3, lens);
    if (!ok) {
        cJSON_Delete(c);
        return lm_error_set(LM_ERR_NOMEM, "out of memory");
    }
    static const char *const told_qk[] = {"in_channels", "dim", "n_layers", "n_refiner_layers", "n_heads",
                                          "n_kv_heads", "cap_feat_dim", "qk_norm", NULL};
    static const char *const told[] = {"in_channels", "dim", "n_layers", "n_refiner_layers", "cap_feat_dim",
                                       "qk_norm", NULL};
    lm_status st = overlay(c, qn >= 0 ? told_qk : told, path, config_dir);
    if (st == LM_OK) st = need_axes(c, "axes_dims", head, path, config_dir);
    if (st != LM_OK) {
        cJSON_Delete(c);
        return st;
    }
    *out = c;
    return LM_OK;
}

static lm_status flux2_config(const lm_tensor_set *s, const char *path, const char *config_dir, cJSON **out)
{
    lm_array *x = probe(s, path, "x_embedder.weight", "img_in.weight", 2);
    lm_array *ctx = x ? probe(s, path, "context_embedder.weight", "txt_in.weight", 2) : NULL;
    lm_array *t = ctx ? probe(s, path, "time_guidance_embed.timestep_embedder.linear_1.weight",
                              "time_in.in_layer.weight", 2) : NULL;
    lm_array *po = t ? probe(s, path, "proj_out.weight", "final_layer.linear.weight", 2) : NULL;
    if (!po) return lm_error_status();
    int64_t D = x->shape[0], nd = count_blocks(s, "transformer_blocks"),
            ns = count_blocks(s, "single_transformer_blocks");
    /* the head size from a q-norm; the MLP width from a block's SwiGLU
     * input ([2 M, D]) or a single block's fused projection ([3 D + 2 M, D]) */
    lm_array *qn = NULL, *mlp = NULL;
    if (nd > 0) {
        qn = probe(s, path, "transformer_blocks.0.attn.norm_q.weight", "double_blocks.0.img_attn.norm.query_norm.scale", 1);
        mlp = qn ? probe(s, path, "transformer_blocks.0.ff.linear_in.weight", "double_blocks.0.img_mlp.0.weight", 2)
                 : NULL;
    } else if (ns > 0) {
        qn = probe(s, path, "single_transformer_blocks.0.attn.norm_q.weight", "single_blocks.0.norm.query_norm.scale",
                   1);
        mlp = qn ? probe(s, path, "single_transformer_blocks.0.attn.to_qkv_mlp_proj.weight",
                         "single_blocks.0.linear1.weight", 2) : NULL;
    } else {
        return lm_error_set(LM_ERR_FORMAT, "%s: no double_blocks or single_blocks: not a FLUX.2 transformer", path);
    }
    if (!mlp) return lm_error_status();
    int64_t head = qn->shape[0], M = nd > 0 ? mlp->shape[0] / 2 : (mlp->shape[0] - 3 * D) / 2;
    double ratio = (double)M / (double)D;
    if (head <= 0 || D % head || M <= 0 || (int64_t)((double)D * ratio) != M || x->shape[1] <= 0)
        return lm_error_set(LM_ERR_SHAPE, "%s: inner dim %lld, head size %lld, MLP width %lld: not a FLUX.2 "
                            "transformer's shapes", path, (long long)D, (long long)head, (long long)M);
    int64_t in = x->shape[1], axes[4] = {32, 32, 32, 32};
    bool guided = find(s, "time_guidance_embed.guidance_embedder.linear_1.weight") >= 0;
    cJSON *c = cJSON_CreateObject();
    bool ok = c && cJSON_AddStringToObject(c, "_class_name", "Flux2Transformer2DModel") &&
              cJSON_AddNumberToObject(c, "patch_size", 1) && cJSON_AddNumberToObject(c, "in_channels", (double)in) &&
              (po->shape[0] == in ? cJSON_AddNullToObject(c, "out_channels") != NULL
                                  : cJSON_AddNumberToObject(c, "out_channels", (double)po->shape[0]) != NULL) &&
              cJSON_AddNumberToObject(c, "num_layers", (double)nd) &&
              cJSON_AddNumberToObject(c, "num_single_layers", (double)ns) &&
              cJSON_AddNumberToObject(c, "attention_head_dim", (double)head) &&
              cJSON_AddNumberToObject(c, "num_attention_heads", (double)(D / head)) &&
              cJSON_AddNumberToObject(c, "joint_attention_dim", (double)ctx->shape[1]) &&
              cJSON_AddNumberToObject(c, "timestep_guidance_channels", (double)t->shape[1]) &&
              cJSON_AddNumberToObject(c, "mlp_ratio", ratio) &&
              (head != 128 || add_ints(c, "axes_dims_rope", 4, axes)) &&
              cJSON_AddNumberToObject(c, "rope_theta", 2000) && cJSON_AddNumberToObject(c, "eps", 1e-6) &&
              cJSON_AddBoolToObject(c, "guidance_embeds", guided);
    if (!ok) {
        cJSON_Delete(c);
        return lm_error_set(LM_ERR_NOMEM, "out of memory");
    }
    static const char *const told[] = {"in_channels", "num_layers", "num_single_layers", "attention_head_dim",
                                       "num_attention_heads", "joint_attention_dim", "timestep_guidance_channels",
                                       "mlp_ratio", "guidance_embeds", NULL};
    lm_status st = overlay(c, told, path, config_dir);
    if (st == LM_OK) st = need_axes(c, "axes_dims_rope", head, path, config_dir);
    if (st != LM_OK) {
        cJSON_Delete(c);
        return st;
    }
    *out = c;
    return LM_OK;
}

/* ---- quantized tensors ---- */

/* Whether dev runs QLINEAR with a weight like w (asked of its backend with
 * a node of the real shapes, as sd_gguf.c does; nothing is uploaded) */
static bool qlinear_ok(lm_device *dev, lm_array *w)
{
    int64_t xs[2] = {1, w->shape[1]};
    lm_array *wd = lm_array_to(w, dev);
    lm_array *x = wd ? lm_zeros(2, xs, LM_F32, dev) : NULL;
    lm_array *y = x ? lm_linear(x, wd, NULL) : NULL;
    bool ok = y && y->op == LM_OP_QLINEAR && dev->backend->supports(dev, y);
    lm_array_release(y);
    lm_array_release(x);
    lm_array_release(wd);
    lm_error_clear();
    return ok;
}

/* Quantized linear weights kept where dev multiplies them, every other
 * quantized tensor dequantized (evaluated on the host); pad tokens [dim]
 * made [1, dim] */
static lm_status settle(lm_tensor_set *s, const char *path, lm_device *dev, lm_dit_file *out)
{
    for (int i = 0; i < s->count; i++) {
        lm_array *a = s->arrays[i], *r = NULL;
        bool pad = strstr(s->names[i], "pad_token") != NULL;
        if (lm_dtype_is_quant(a->dtype)) {
            if (a->ndim == 2 && !pad && qlinear_ok(dev, a)) {
                out->quant_kept++;
                continue;
            }
            r = lm_dequantize(a);
            if (r && lm_array_eval(r) != LM_OK) {
                lm_array_release(r);
                r = NULL;
            }
            if (!r) return lm_error_prefix("%s: %s (%s)", path, s->names[i], lm_dtype_name(a->dtype));
            out->quant_dequantized++;
            lm_array_release(a);
            s->arrays[i] = a = r;
        }
        if (pad && a->ndim == 1) {
            int64_t shape[2] = {1, a->shape[0]};
            if (!(r = lm_reshape(a, 2, shape))) return lm_error_prefix("%s: %s", path, s->names[i]);
            lm_array_release(a);
            s->arrays[i] = r;
        }
    }
    return LM_OK;
}

/* ---- the entries ---- */

void lm_dit_file_free(lm_dit_file *f)
{
    if (!f) return;
    cJSON_Delete(f->config);
    lm_tensor_set_free(&f->weights);
    memset(f, 0, sizeof *f);
}

lm_status lm_dit_file_read(const char *path, const char *config_dir, lm_device *dev, lm_dit_file *out)
{
    memset(out, 0, sizeof *out);
    lm_status st = read_host(path, &out->weights);
    if (st != LM_OK) return st;
    if (!dev) dev = lm_device_default();
    lm_tensor_set *s = &out->weights;
    out->format = s->format;
    out->family = lm_dit_file_family(s);
    if (out->family == LM_SD_ZIMAGE) {
        if (lm_zimage_is_original(s)) st = lm_zimage_rename_original(s, path);
        if (st == LM_OK) st = zimage_split_qkv(s, path);
        if (st == LM_OK) st = zimage_config(s, path, config_dir, &out->config);
    } else if (out->family == LM_SD_KLEIN) {
        if (find(s, "double_stream_modulation_img.lin.weight") >= 0) st = flux2_rename(s, path);
        if (st == LM_OK) st = flux2_config(s, path, config_dir, &out->config);
    } else {
        st = lm_error_set(LM_ERR_FORMAT, "%s: not a Z-Image transformer (cap_embedder.1.weight, noise_refiner.*, "
                          "context_refiner.*) or a FLUX.2 one (double_stream_modulation_img.lin.weight)", path);
    }
    if (st == LM_OK) st = settle(s, path, dev, out);
    if (st != LM_OK) lm_dit_file_free(out);
    return st;
}

lm_status lm_dit_file_row(const char *path, const char *folder, const lm_sd_family_row **row, char **mi)
{
    *row = NULL;
    *mi = NULL;
    lm_tensor_set s;
    lm_status st = read_host(path, &s);
    if (st != LM_OK) return st;
    lm_sd_family f = lm_dit_file_family(&s);
    bool sd = lm_sd_family_from_keys((const char *const *)s.names, s.count) != LM_SD_UNKNOWN;
    bool flux1 = has_prefix(&s, "double_blocks.0.img_mod.");
    lm_tensor_set_free(&s);
    if (f == LM_SD_UNKNOWN) {
        if (flux1)
            return lm_error_set(LM_ERR_UNSUPPORTED, "%s: a FLUX.1 transformer (double_blocks.0.img_mod.*): only "
                                "FLUX.2 (klein) transformers are read", path);
        if (sd) return LM_OK;
        return lm_error_set(LM_ERR_UNSUPPORTED, "%s: the model cannot be told from its keys: not an SD 1.x, 2.x "
                            "or SDXL checkpoint (cond_stage_model.* or conditioner.embedders.* text encoder "
                            "keys), a Z-Image transformer (cap_embedder.1.weight, noise_refiner.*, "
                            "context_refiner.*) or a FLUX.2 one (double_stream_modulation_img.lin.weight)", path);
    }
    const char *what = f == LM_SD_ZIMAGE ? "Z-Image" : "FLUX.2";
    if (!folder)
        return lm_error_set(LM_ERR_ARG, "%s: a %s transformer file holds the transformer only: give a diffusers "
                            "folder of the model (lumen generate --tokenizer DIR; tokenizer_dir) to take its "
                            "tokenizer/, text_encoder/, vae/ and scheduler/ from", path, what);
    char *m = lm_dfs_path(folder, "model_index.json");
    cJSON *index = NULL;
    const char *cls = "";
    st = m ? lm_dfs_json(m, CONFIG_MAX, false, &index) : lm_error_status();
    if (st == LM_OK) st = lm_dfs_str(index, "_class_name", m, true, "", &cls);
    if (st == LM_OK) {
        const cJSON *dist = cJSON_GetObjectItemCaseSensitive(index, "is_distilled");
        const lm_sd_family_row *r = lm_sd_family_get(lm_sd_family_from_class(cls, cJSON_IsTrue(dist)));
        lm_sd_net net = f == LM_SD_ZIMAGE ? LM_SD_NET_ZIMAGE : LM_SD_NET_FLUX2;
        if (!r || r->denoiser != net)
            st = lm_error_set(LM_ERR_ARG, "%s is a %s transformer, but %s names %s: the folder given for its "
                              "tokenizer, text encoder and VAE must be the same model's (%s)", path, what, m, cls,
                              f == LM_SD_ZIMAGE ? "ZImagePipeline" : "Flux2KleinPipeline");
        else
            *row = r;
    }
    cJSON_Delete(index);
    if (st == LM_OK) *mi = m;
    else free(m);
    return st;
}

/* lm_dit_transformer_reader of a single file (also after an offload) */
static lm_status read_file(const lm_sd_family_row *row, const char *path, const char *folder,
                           const char *variant, lm_dtype dt, lm_device *dev, lm_zimage **z, lm_flux2 **x)
{
    (void)row;
    (void)variant;
    lm_dit_file f;
    if (lm_dit_file_read(path, folder, dev, &f) != LM_OK) return lm_error_status();
    if (f.family == LM_SD_ZIMAGE) *z = lm_zimage_load_from(f.config, &f.weights, path, dt, dev);
    else *x = lm_flux2_load_from(f.config, &f.weights, path, dt, dev);
    lm_dit_file_free(&f);
    return *z || *x ? LM_OK : lm_error_status();
}

lm_dit_pipe *lm_dit_file_load(const lm_sd_family_row *row, const char *path, const char *folder,
                              const char *mi, const char *variant, lm_dtype dt, lm_device *dev,
                              bool offload)
{
    lm_zimage *z = NULL;
    lm_flux2 *x = NULL;
    if (read_file(row, path, folder, variant, dt, dev, &z, &x) != LM_OK) return NULL;
    return lm_dit_pipe_load_parts(row, folder, mi, variant, dt, dev, z, x, read_file, path, offload);
}
