/* unet.c - diffusers' UNet2DConditionModel as a Lumen graph (see unet.h).
 *
 * The network, as diffusers' unet_2d_condition.py, unet_2d_blocks.py,
 * resnet.py, transformer_2d.py and attention.py compute it:
 *   emb = time_embedding(sinusoid(t)) [+ add_embedding(text_embeds |
 *         sinusoid(time_ids))]
 *   h = conv_in(x); skips = [h]
 *   down level i: layers_per_block x (resnet, [transformer]), each output a
 *         skip; then (not last) a stride-2 conv, also a skip
 *   mid: resnet, (transformer, resnet) for the cross-attention mid block
 *   up level i: layers_per_block+1 x (concat(h, skips.pop()), resnet,
 *         [transformer]); then (not last) nearest x2 + conv
 *   out = conv_out(silu(conv_norm_out(h)))
 * A resnet is norm1, silu, conv1, + time_emb_proj(silu(emb)), norm2, silu,
 * conv2, + (1x1 conv_shortcut when channels change) x.  A transformer is
 * GroupNorm(eps 1e-6), proj_in (1x1 conv or linear), blocks of LN +
 * self-attention, LN + cross-attention to the context, LN + GEGLU
 * feed-forward, proj_out, + x.
 *
 * Loading walks the architecture once, taking each weight by name with the
 * shape the config implies; the forward pass walks it again and finds the
 * kept weights by the same names (looked up from a cursor, since both walks
 * visit them in the same order). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "diffusers_config.h"
#include "lumen.h"
#include "unet.h"

#define UN_MAX_CONFIG (1u << 20)
#define UN_KEY 256

/* Weight names are built by appending to a prefix in buffers of UN_KEY
 * bytes; diffusers' longest is under 100, and a name cut short could only
 * fail as "missing weight", so GCC's truncation warning is noise here. */
#if defined(__GNUC__) && !defined(__clang__)   /* clang has no such warning */
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

struct lm_unet {
    lm_unet_config cfg;
    lm_dtype dt;
    lm_device *dev;
    int nw, capw;
    char **wname;
    lm_array **w;
    lm_unet_extra **extra;   /* per weight: run-time additions to its linear product, or NULL */
};

/* ================================================================ config */

static lm_status refuse_set(const cJSON *j, const char *key, const char *file)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v)) return LM_OK;
    char *s = cJSON_PrintUnformatted(v);
    lm_status st = lm_error_set(LM_ERR_UNSUPPORTED, "%s: %s: %s is not supported (only %s)",
                                file, key, s ? s : "?", cJSON_IsBool(v) ? "false" : "null");
    free(s);
    return st;
}

static lm_status want_str(const cJSON *j, const char *key, const char *file, const char *only)
{
    const char *v;
    lm_status st = lm_dfs_str(j, key, file, false, only, &v);
    if (st == LM_OK && strcmp(v, only))
        st = lm_error_set(LM_ERR_UNSUPPORTED, "%s: %s: \"%s\" is not supported (only \"%s\")",
                          file, key, v, only);
    return st;
}

/* key as an int (repeated n times) or a list of n ints; missing = def */
static lm_status int_list(const cJSON *j, const char *key, const char *file, int64_t n,
                          int64_t def, int64_t lo, int64_t hi, int64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsArray(v)) {
        int64_t x;
        lm_status st = lm_dfs_int(j, key, file, false, def, lo, hi, &x);
        for (int64_t i = 0; i < n; i++) out[i] = x;
        return st;
    }
    if (cJSON_GetArraySize(v) != n)
        return lm_error_set(LM_ERR_FORMAT, "%s: %s: %d entries, expected one per level (%lld)",
                            file, key, cJSON_GetArraySize(v), (long long)n);
    int64_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        if (cJSON_IsArray(e))
            return lm_error_set(LM_ERR_UNSUPPORTED, "%s: %s: per-layer lists are not supported",
                                file, key);
        double d = e->valuedouble;
        if (!cJSON_IsNumber(e) || d != floor(d) || d < (double)lo || d > (double)hi)
            return lm_error_set(LM_ERR_FORMAT, "%s: %s[%lld]: expected an integer in [%lld, %lld]",
                                file, key, (long long)i, (long long)lo, (long long)hi);
        out[i++] = (int64_t)d;
    }
    return LM_OK;
}

static lm_status bool_list(const cJSON *j, const char *key, const char *file, int64_t n, bool *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || cJSON_IsNull(v) || cJSON_IsBool(v)) {
        for (int64_t i = 0; i < n; i++) out[i] = cJSON_IsTrue(v);
        return LM_OK;
    }
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != n)
        return lm_error_set(LM_ERR_FORMAT, "%s: %s: expected a boolean or %lld of them", file,
                            key, (long long)n);
    int64_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        if (!cJSON_IsBool(e))
            return lm_error_set(LM_ERR_FORMAT, "%s: %s[%lld]: expected a boolean", file, key,
                                (long long)i);
        out[i++] = cJSON_IsTrue(e);
    }
    return LM_OK;
}

static lm_status bool_key(const cJSON *j, const char *key, const char *file, bool def, bool *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || cJSON_IsNull(v)) { *out = def; return LM_OK; }
    if (!cJSON_IsBool(v)) return lm_error_set(LM_ERR_FORMAT, "%s: %s: expected a boolean", file, key);
    *out = cJSON_IsTrue(v);
    return LM_OK;
}

/* block types: a list of n strings, each one of a (with attention) or b
 * (without); missing = the defaults diffusers' signature gives */
static lm_status block_types(const cJSON *j, const char *key, const char *file, int64_t n,
                             const char *a, const char *b, const bool *def, bool *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v) {
        if (n != 4)
            return lm_error_set(LM_ERR_FORMAT, "%s: %s: missing (the default has 4 levels, "
                                "block_out_channels %lld)", file, key, (long long)n);
        memcpy(out, def, sizeof *out * 4);
        return LM_OK;
    }
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != n)
        return lm_error_set(LM_ERR_FORMAT, "%s: %s: expected %lld block names (one per entry of "
                            "block_out_channels)", file, key, (long long)n);
    int64_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        if (!cJSON_IsString(e))
            return lm_error_set(LM_ERR_FORMAT, "%s: %s[%lld]: expected a string", file, key,
                                (long long)i);
        if (!strcmp(e->valuestring, a)) out[i] = true;
        else if (!strcmp(e->valuestring, b)) out[i] = false;
        else
            return lm_error_set(LM_ERR_UNSUPPORTED, "%s: %s[%lld]: \"%s\" is not supported (%s "
                                "or %s)", file, key, (long long)i, e->valuestring, a, b);
        i++;
    }
    return LM_OK;
}

static lm_status read_config(const cJSON *j, const char *file, lm_unet_config *c)
{
    static const char *const refused[] = {
        "class_embed_type", "num_class_embeds", "encoder_hid_dim", "encoder_hid_dim_type",
        "dual_cross_attention", "time_embedding_act_fn", "timestep_post_act",
        "time_cond_proj_dim", "class_embeddings_concat", "cross_attention_norm",
        "reverse_transformer_layers_per_block",
    };
    lm_status st = LM_OK;
    for (size_t k = 0; st == LM_OK && k < sizeof refused / sizeof *refused; k++)
        st = refuse_set(j, refused[k], file);
    if (st == LM_OK) st = want_str(j, "resnet_time_scale_shift", file, "default");
    if (st == LM_OK) st = want_str(j, "time_embedding_type", file, "positional");
    if (st == LM_OK) st = want_str(j, "act_fn", file, "silu");
    if (st == LM_OK) st = want_str(j, "attention_type", file, "default");
    if (st != LM_OK) return st;

    const int64_t big = 1 << 16;
    const cJSON *boc = cJSON_GetObjectItemCaseSensitive(j, "block_out_channels");
    if (!boc) {
        static const int64_t def[4] = {320, 640, 1280, 1280};
        c->levels = 4;
        memcpy(c->block_out_channels, def, sizeof def);
    } else {
        int n = cJSON_IsArray(boc) ? cJSON_GetArraySize(boc) : 0;
        if (n < 1 || n > LM_UNET_MAX_LEVELS)
            return lm_error_set(LM_ERR_FORMAT, "%s: block_out_channels: expected a list of 1 to %d "
                                "integers", file, LM_UNET_MAX_LEVELS);
        c->levels = n;
        st = int_list(j, "block_out_channels", file, n, 0, 1, big, c->block_out_channels);
    }
    int64_t n = c->levels;
    static const bool down_def[4] = {true, true, true, false}, up_def[4] = {false, true, true, true};
    if (st == LM_OK) st = block_types(j, "down_block_types", file, n, "CrossAttnDownBlock2D",
                                      "DownBlock2D", down_def, c->down_attn);
    if (st == LM_OK) st = block_types(j, "up_block_types", file, n, "CrossAttnUpBlock2D",
                                      "UpBlock2D", up_def, c->up_attn);
    const cJSON *mid = cJSON_GetObjectItemCaseSensitive(j, "mid_block_type");
    if (st == LM_OK) {
        if (!mid) c->mid = 2;
        else if (cJSON_IsNull(mid)) c->mid = 0;
        else if (cJSON_IsString(mid) && !strcmp(mid->valuestring, "UNetMidBlock2DCrossAttn")) c->mid = 2;
        else if (cJSON_IsString(mid) && !strcmp(mid->valuestring, "UNetMidBlock2D")) c->mid = 1;
        else st = lm_error_set(LM_ERR_UNSUPPORTED, "%s: mid_block_type: %s is not supported "
                               "(UNetMidBlock2DCrossAttn, UNetMidBlock2D or null)", file,
                               cJSON_IsString(mid) ? mid->valuestring : "(not a string)");
    }
    if (st == LM_OK) st = lm_dfs_int(j, "in_channels", file, false, 4, 1, big, &c->in_channels);
    if (st == LM_OK) st = lm_dfs_int(j, "out_channels", file, false, 4, 1, big, &c->out_channels);
    /* sample_size may be [h, w]; the height stands for both */
    const cJSON *ss = cJSON_GetObjectItemCaseSensitive(j, "sample_size");
    const cJSON *s0 = cJSON_IsArray(ss) ? cJSON_GetArrayItem(ss, 0) : NULL;
    if (st == LM_OK && cJSON_IsArray(ss) && !(cJSON_IsNumber(s0) && s0->valuedouble >= 0 &&
                                              s0->valuedouble <= (double)big))
        st = lm_error_set(LM_ERR_FORMAT, "%s: sample_size: expected an integer or [h, w]", file);
    else if (st == LM_OK && s0) c->sample_size = (int64_t)s0->valuedouble;
    else if (st == LM_OK) st = lm_dfs_int(j, "sample_size", file, false, 0, 0, big, &c->sample_size);
    if (st == LM_OK) st = int_list(j, "layers_per_block", file, n, 2, 1, 64, c->layers_per_block);
    if (st == LM_OK) st = int_list(j, "transformer_layers_per_block", file, n, 1, 1, 64,
                                   c->transformer_layers);
    /* diffusers' quirk: attention_head_dim holds the head count unless
     * num_attention_heads is given (which diffusers itself then refuses) */
    const cJSON *nah = cJSON_GetObjectItemCaseSensitive(j, "num_attention_heads");
    const char *hk = nah && !cJSON_IsNull(nah) ? "num_attention_heads" : "attention_head_dim";
    if (st == LM_OK) st = int_list(j, hk, file, n, 8, 1, 4096, c->heads);
    if (st == LM_OK) st = bool_list(j, "only_cross_attention", file, n, c->only_cross_attention);
    int64_t cad[LM_UNET_MAX_LEVELS] = {0};
    if (st == LM_OK) st = int_list(j, "cross_attention_dim", file, n, 1280, 1, big, cad);
    for (int64_t i = 1; st == LM_OK && i < n; i++)
        if (cad[i] != cad[0])
            st = lm_error_set(LM_ERR_UNSUPPORTED, "%s: cross_attention_dim: different widths per "
                              "level (%lld, %lld) are not supported: one context feeds them all",
                              file, (long long)cad[0], (long long)cad[i]);
    c->cross_attention_dim = cad[0];
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(j, "norm_num_groups");
    if (st == LM_OK && g && cJSON_IsNull(g))
        st = lm_error_set(LM_ERR_UNSUPPORTED, "%s: norm_num_groups: null (no output norm) is not "
                          "supported", file);
    if (st == LM_OK) st = lm_dfs_int(j, "norm_num_groups", file, false, 32, 1, big, &c->norm_num_groups);
    if (st == LM_OK) st = lm_dfs_eps(j, "norm_eps", file, 1e-5, &c->norm_eps);
    if (st == LM_OK) st = bool_key(j, "use_linear_projection", file, false, &c->use_linear_projection);
    if (st == LM_OK) st = bool_key(j, "upcast_attention", file, false, &c->upcast_attention);
    if (st == LM_OK) st = bool_key(j, "center_input_sample", file, false, &c->center_input_sample);
    if (st == LM_OK) st = bool_key(j, "flip_sin_to_cos", file, true, &c->flip_sin_to_cos);
    if (st == LM_OK) st = lm_dfs_num(j, "freq_shift", file, false, 0, &c->freq_shift);
    if (st == LM_OK) st = lm_dfs_int(j, "time_embedding_dim", file, false,
                                     4 * c->block_out_channels[0], 1, big, &c->time_embed_dim);
    if (st == LM_OK) st = lm_dfs_int(j, "conv_in_kernel", file, false, 3, 1, 31, &c->conv_in_kernel);
    if (st == LM_OK) st = lm_dfs_int(j, "conv_out_kernel", file, false, 3, 1, 31, &c->conv_out_kernel);
    if (st == LM_OK) st = lm_dfs_int(j, "downsample_padding", file, false, 1, 0, 1, &c->downsample_padding);
    if (st == LM_OK) st = lm_dfs_num(j, "mid_block_scale_factor", file, false, 1, &c->mid_block_scale_factor);
    if (st == LM_OK && (c->conv_in_kernel % 2 == 0 || c->conv_out_kernel % 2 == 0))
        st = lm_error_set(LM_ERR_UNSUPPORTED, "%s: conv_in_kernel %lld / conv_out_kernel %lld: "
                          "only odd kernels keep the size", file, (long long)c->conv_in_kernel,
                          (long long)c->conv_out_kernel);
    if (st == LM_OK && c->mid_block_scale_factor == 0)
        st = lm_error_set(LM_ERR_FORMAT, "%s: mid_block_scale_factor: 0", file);
    const char *add = NULL;
    if (st == LM_OK) st = lm_dfs_str(j, "addition_embed_type", file, false, NULL, &add);
    if (st == LM_OK && add) {
        if (strcmp(add, "text_time"))
            st = lm_error_set(LM_ERR_UNSUPPORTED, "%s: addition_embed_type: \"%s\" is not "
                              "supported (only \"text_time\" or null)", file, add);
        c->addition_embed_type = LM_UNET_ADD_TEXT_TIME;
        if (st == LM_OK) st = lm_dfs_int(j, "addition_time_embed_dim", file, true, 0, 1, big,
                                         &c->addition_time_embed_dim);
        if (st == LM_OK) st = lm_dfs_int(j, "projection_class_embeddings_input_dim", file, true,
                                         0, 1, 1 << 24, &c->projection_class_embeddings_input_dim);
    }
    /* sizes the weights alone would not catch as clearly */
    for (int64_t i = 0; st == LM_OK && i < n; i++) {
        int64_t ch = c->block_out_channels[i];
        if (ch % c->norm_num_groups)
            st = lm_error_set(LM_ERR_FORMAT, "%s: block_out_channels[%lld] = %lld is not a multiple "
                              "of norm_num_groups %lld", file, (long long)i, (long long)ch,
                              (long long)c->norm_num_groups);
        bool attn = c->down_attn[i] || c->up_attn[n - 1 - i] || (c->mid == 2 && i == n - 1);
        if (st == LM_OK && attn && ch % c->heads[i])
            st = lm_error_set(LM_ERR_FORMAT, "%s: block_out_channels[%lld] = %lld is not a multiple "
                              "of its %lld attention heads", file, (long long)i, (long long)ch,
                              (long long)c->heads[i]);
    }
    if (st == LM_OK && c->block_out_channels[0] / 2 <= c->freq_shift)
        st = lm_error_set(LM_ERR_FORMAT, "%s: freq_shift %g: must be below block_out_channels[0]/2",
                          file, c->freq_shift);
    if (st == LM_OK && c->addition_embed_type && c->addition_time_embed_dim / 2 <= c->freq_shift)
        st = lm_error_set(LM_ERR_FORMAT, "%s: freq_shift %g: must be below addition_time_embed_dim/2",
                          file, c->freq_shift);
    return st;
}

/* =============================================================== weights */

typedef struct un_load {
    lm_tensor_set *set;
    bool *used;
    const char *file;
    lm_unet *m;
} un_load;

static lm_status push_weight(lm_unet *m, const char *name, lm_array *a)
{
    if (m->nw == m->capw) {
        int cap = m->capw ? 2 * m->capw : 256;
        char **n = realloc(m->wname, sizeof *n * (size_t)cap);
        if (n) m->wname = n;
        lm_array **w = realloc(m->w, sizeof *w * (size_t)cap);
        if (w) m->w = w;
        if (!n || !w) return lm_error_set(LM_ERR_NOMEM, "out of memory");
        m->capw = cap;
    }
    m->wname[m->nw] = strdup(name);
    if (!m->wname[m->nw]) return lm_error_set(LM_ERR_NOMEM, "out of memory");
    m->w[m->nw++] = a;
    return LM_OK;
}

/* Takes the weight named by fmt (shape nd/shape), cast to the compute
 * dtype, evaluated on the device and kept. */
static lm_status take(un_load *L, int nd, const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static lm_status take(un_load *L, int nd, const int64_t *shape, const char *fmt, ...)
{
    char key[UN_KEY], want[96], got[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(key, sizeof key, fmt, ap);
    va_end(ap);
    lm_shape_str(want, sizeof want, nd, shape);
    int i = lm_tensor_set_find(L->set, key);
    if (i < 0) return lm_error_set(LM_ERR_FORMAT, "%s: missing weight %s %s", L->file, key, want);
    lm_array *a = L->set->arrays[i];
    bool same = a->ndim == nd;
    for (int d = 0; same && d < nd; d++) same = a->shape[d] == shape[d];
    if (!same) {
        lm_shape_str(got, sizeof got, a->ndim, a->shape);
        return lm_error_set(LM_ERR_SHAPE, "%s: %s has shape %s, the config needs %s", L->file,
                            key, got, want);
    }
    /* a quantized weight (GGUF) is kept as it is for lm_linear's quantized
     * product; every UNet weight of two dimensions is a linear one */
    bool quant = lm_dtype_is_quant(a->dtype) && nd == 2;
    if (!lm_dtype_is_float(a->dtype) && !quant)
        return lm_error_set(LM_ERR_DTYPE, "%s: %s is %s, expected a float dtype%s", L->file, key,
                            lm_dtype_name(a->dtype), lm_dtype_is_quant(a->dtype) ?
                            " (a quantized one only for a linear weight)" : "");
    if (L->used[i])
        return lm_error_set(LM_ERR_STATE, "%s: %s taken twice", L->file, key);
    L->used[i] = true;
    lm_array *c = a->dtype == L->m->dt || quant ? lm_array_retain(a) : lm_cast(a, L->m->dt);
    if (!c || lm_array_eval(c) != LM_OK) {
        lm_array_release(c);
        return lm_error_prefix("%s: %s", L->file, key);
    }
    lm_array_keep(c);
    lm_array_release(c);   /* the keep holds it */
    lm_status st = push_weight(L->m, key, c);
    if (st != LM_OK) lm_array_unkeep(c);
    return st;
}

static lm_status take_conv(un_load *L, const char *p, int64_t out, int64_t in, int64_t k)
{
    int64_t ws[4] = {out, in, k, k};
    lm_status st = take(L, 4, ws, "%s.weight", p);
    return st == LM_OK ? take(L, 1, &out, "%s.bias", p) : st;
}

static lm_status take_linear(un_load *L, const char *p, int64_t out, int64_t in, bool bias)
{
    int64_t ws[2] = {out, in};
    lm_status st = take(L, 2, ws, "%s.weight", p);
    return st == LM_OK && bias ? take(L, 1, &out, "%s.bias", p) : st;
}

static lm_status take_norm(un_load *L, const char *p, int64_t c)
{
    lm_status st = take(L, 1, &c, "%s.weight", p);
    return st == LM_OK ? take(L, 1, &c, "%s.bias", p) : st;
}

static lm_status take_resnet(un_load *L, const char *p, int64_t in, int64_t out)
{
    const lm_unet_config *c = &L->m->cfg;
    char k[UN_KEY];
    lm_status st;
    snprintf(k, sizeof k, "%s.norm1", p);
    st = take_norm(L, k, in);
    snprintf(k, sizeof k, "%s.conv1", p);
    if (st == LM_OK) st = take_conv(L, k, out, in, 3);
    snprintf(k, sizeof k, "%s.time_emb_proj", p);
    if (st == LM_OK) st = take_linear(L, k, out, c->time_embed_dim, true);
    snprintf(k, sizeof k, "%s.norm2", p);
    if (st == LM_OK) st = take_norm(L, k, out);
    snprintf(k, sizeof k, "%s.conv2", p);
    if (st == LM_OK) st = take_conv(L, k, out, out, 3);
    snprintf(k, sizeof k, "%s.conv_shortcut", p);
    if (st == LM_OK && in != out) st = take_conv(L, k, out, in, 1);
    return st;
}

static lm_status take_attn(un_load *L, const char *p, int64_t dim, int64_t kv_dim)
{
    char k[UN_KEY];
    lm_status st;
    snprintf(k, sizeof k, "%s.to_q", p);
    st = take_linear(L, k, dim, dim, false);
    snprintf(k, sizeof k, "%s.to_k", p);
    if (st == LM_OK) st = take_linear(L, k, dim, kv_dim, false);
    snprintf(k, sizeof k, "%s.to_v", p);
    if (st == LM_OK) st = take_linear(L, k, dim, kv_dim, false);
    snprintf(k, sizeof k, "%s.to_out.0", p);
    if (st == LM_OK) st = take_linear(L, k, dim, dim, true);
    return st;
}

static lm_status take_transformer(un_load *L, const char *p, int64_t ch, int64_t layers,
                                  bool only_cross)
{
    const lm_unet_config *c = &L->m->cfg;
    int64_t D = c->cross_attention_dim;
    char k[UN_KEY];
    snprintf(k, sizeof k, "%s.norm", p);
    lm_status st = take_norm(L, k, ch);
    snprintf(k, sizeof k, "%s.proj_in", p);
    if (st == LM_OK) st = c->use_linear_projection ? take_linear(L, k, ch, ch, true)
                                                   : take_conv(L, k, ch, ch, 1);
    for (int64_t l = 0; st == LM_OK && l < layers; l++) {
        static const char *const norms[3] = {"norm1", "norm2", "norm3"};
        for (int n = 0; st == LM_OK && n < 3; n++) {
            snprintf(k, sizeof k, "%s.transformer_blocks.%lld.%s", p, (long long)l, norms[n]);
            st = take_norm(L, k, ch);
        }
        snprintf(k, sizeof k, "%s.transformer_blocks.%lld.attn1", p, (long long)l);
        if (st == LM_OK) st = take_attn(L, k, ch, only_cross ? D : ch);
        snprintf(k, sizeof k, "%s.transformer_blocks.%lld.attn2", p, (long long)l);
        if (st == LM_OK) st = take_attn(L, k, ch, D);
        snprintf(k, sizeof k, "%s.transformer_blocks.%lld.ff.net.0.proj", p, (long long)l);
        if (st == LM_OK) st = take_linear(L, k, 8 * ch, ch, true);
        snprintf(k, sizeof k, "%s.transformer_blocks.%lld.ff.net.2", p, (long long)l);
        if (st == LM_OK) st = take_linear(L, k, ch, 4 * ch, true);
    }
    snprintf(k, sizeof k, "%s.proj_out", p);
    if (st == LM_OK) st = c->use_linear_projection ? take_linear(L, k, ch, ch, true)
                                                   : take_conv(L, k, ch, ch, 1);
    return st;
}

/* The up level i reads down level n-1-i's settings, as diffusers reverses
 * its per-level lists. */
static int64_t up_level(const lm_unet_config *c, int64_t i) { return c->levels - 1 - i; }

static lm_status take_all(un_load *L)
{
    const lm_unet_config *c = &L->m->cfg;
    const int64_t *boc = c->block_out_channels, n = c->levels, T = c->time_embed_dim;
    char k[UN_KEY];
    lm_status st = take_conv(L, "conv_in", boc[0], c->in_channels, c->conv_in_kernel);
    if (st == LM_OK) st = take_linear(L, "time_embedding.linear_1", T, boc[0], true);
    if (st == LM_OK) st = take_linear(L, "time_embedding.linear_2", T, T, true);
    if (st == LM_OK && c->addition_embed_type == LM_UNET_ADD_TEXT_TIME) {
        st = take_linear(L, "add_embedding.linear_1", T, c->projection_class_embeddings_input_dim, true);
        if (st == LM_OK) st = take_linear(L, "add_embedding.linear_2", T, T, true);
    }
    int64_t ch = boc[0];
    for (int64_t i = 0; st == LM_OK && i < n; i++) {
        for (int64_t j = 0; st == LM_OK && j < c->layers_per_block[i]; j++) {
            snprintf(k, sizeof k, "down_blocks.%lld.resnets.%lld", (long long)i, (long long)j);
            st = take_resnet(L, k, j == 0 ? ch : boc[i], boc[i]);
            snprintf(k, sizeof k, "down_blocks.%lld.attentions.%lld", (long long)i, (long long)j);
            if (st == LM_OK && c->down_attn[i])
                st = take_transformer(L, k, boc[i], c->transformer_layers[i], c->only_cross_attention[i]);
        }
        ch = boc[i];
        snprintf(k, sizeof k, "down_blocks.%lld.downsamplers.0.conv", (long long)i);
        if (st == LM_OK && i < n - 1) st = take_conv(L, k, ch, ch, 3);
    }
    if (st == LM_OK && c->mid) st = take_resnet(L, "mid_block.resnets.0", ch, ch);
    if (st == LM_OK && c->mid == 2) {
        st = take_transformer(L, "mid_block.attentions.0", ch, c->transformer_layers[n - 1], false);
        if (st == LM_OK) st = take_resnet(L, "mid_block.resnets.1", ch, ch);
    }
    for (int64_t i = 0; st == LM_OK && i < n; i++) {
        int64_t lv = up_level(c, i), out = boc[lv], prev = ch;
        int64_t in = boc[lv > 0 ? lv - 1 : 0], nl = c->layers_per_block[lv] + 1;
        for (int64_t j = 0; st == LM_OK && j < nl; j++) {
            int64_t skip = j == nl - 1 ? in : out, rin = j == 0 ? prev : out;
            snprintf(k, sizeof k, "up_blocks.%lld.resnets.%lld", (long long)i, (long long)j);
            st = take_resnet(L, k, rin + skip, out);
            snprintf(k, sizeof k, "up_blocks.%lld.attentions.%lld", (long long)i, (long long)j);
            if (st == LM_OK && c->up_attn[i])
                st = take_transformer(L, k, out, c->transformer_layers[lv], c->only_cross_attention[lv]);
        }
        ch = out;
        snprintf(k, sizeof k, "up_blocks.%lld.upsamplers.0.conv", (long long)i);
        if (st == LM_OK && i < n - 1) st = take_conv(L, k, ch, ch, 3);
    }
    if (st == LM_OK) st = take_norm(L, "conv_norm_out", ch);
    if (st == LM_OK) st = take_conv(L, "conv_out", c->out_channels, ch, c->conv_out_kernel);
    return st;
}

void lm_unet_free(lm_unet *m)
{
    if (!m) return;
    for (int i = 0; i < m->nw; i++) {
        lm_array_unkeep(m->w[i]);
        free(m->wname[i]);
    }
    free(m->extra);   /* the terms are their setter's (models/lora.c) */
    free(m->w);
    free(m->wname);
    free(m);
}

lm_unet *lm_unet_load_from(const cJSON *config, lm_tensor_set *weights, const char *file,
                           lm_dtype dt, lm_device *dev)
{
    lm_unet *m = NULL;
    if (!file) file = "unet weights";
    if (!weights || !cJSON_IsObject(config)) {
        if (weights) lm_tensor_set_free(weights);
        lm_error_set(LM_ERR_ARG, "unet %s: need a config object and a tensor set", file);
        return NULL;
    }
    un_load L = {.set = weights, .file = file};
    lm_status st = LM_OK;
    if (dt != LM_F32 && dt != LM_F16 && dt != LM_BF16 && dt != LM_F64)
        st = lm_error_set(LM_ERR_DTYPE, "unet %s: compute dtype %s (f32, f16, bf16, f64)", file,
                          lm_dtype_name(dt));
    if (st == LM_OK) st = lm_init();
    if (st == LM_OK) {
        m = calloc(1, sizeof *m);
        L.used = calloc((size_t)weights->count + 1, sizeof *L.used);
        if (!m || !L.used) st = lm_error_set(LM_ERR_NOMEM, "out of memory");
    }
    if (st == LM_OK) {
        m->dt = dt;
        m->dev = dev ? dev : lm_device_default();
        L.m = m;
        st = read_config(config, file, &m->cfg);
    }
    if (st == LM_OK) st = take_all(&L);
    for (int i = 0; st == LM_OK && i < weights->count; i++) {
        if (L.used[i]) continue;
        char sh[96];
        lm_shape_str(sh, sizeof sh, weights->arrays[i]->ndim, weights->arrays[i]->shape);
        st = lm_error_set(LM_ERR_FORMAT, "%s: unexpected weight %s %s (config: %lld levels, "
                          "layers_per_block %lld, %s projection)", file, weights->names[i], sh,
                          (long long)m->cfg.levels, (long long)m->cfg.layers_per_block[0],
                          m->cfg.use_linear_projection ? "linear" : "conv");
    }
    lm_tensor_set_free(weights);
    memset(weights, 0, sizeof *weights);
    free(L.used);
    /* the CPU's Winograd filters made now, not in the first call */
    if (st == LM_OK) st = lm_dfs_prime_convs(m->w, m->nw, m->dev);
    if (st != LM_OK) {
        if (strncmp(lm_error_message(), "unet", 4)) lm_error_prefix("unet");
        lm_unet_free(m);
        return NULL;
    }
    return m;
}

lm_unet *lm_unet_load(const char *dir, const char *variant, lm_dtype dt, lm_device *dev)
{
    if (lm_init() != LM_OK) return NULL;
    if (!dev) dev = lm_device_default();
    char *path = lm_dfs_path(dir, "config.json"), *file = NULL;
    cJSON *j = NULL;
    lm_tensor_set set = {0};
    lm_unet *m = NULL;
    lm_status st = path ? lm_dfs_json(path, UN_MAX_CONFIG, false, &j) : LM_ERR_NOMEM;
    /* the config is checked before the weights are read: a refused config
     * costs no I/O */
    lm_unet_config probe = {0};
    if (st == LM_OK) st = read_config(j, path, &probe);
    if (st == LM_OK) st = lm_dfs_load_weights_stem(dir, "diffusion_pytorch_model", variant, dev,
                                                   &set, &file);
    if (st == LM_OK) m = lm_unet_load_from(j, &set, file, dt, dev);
    else if (strncmp(lm_error_message(), "unet", 4)) lm_error_prefix("unet");
    lm_tensor_set_free(&set);
    cJSON_Delete(j);
    free(path);
    free(file);
    return m;
}

const lm_unet_config *lm_unet_get_config(const lm_unet *m) { return &m->cfg; }
lm_dtype lm_unet_dtype(const lm_unet *m) { return m->dt; }
lm_device *lm_unet_device(const lm_unet *m) { return m->dev; }
int lm_unet_weight_count(const lm_unet *m) { return m->nw; }
const char *lm_unet_weight_name(const lm_unet *m, int i) { return m->wname[i]; }
lm_array **lm_unet_weight_slot(lm_unet *m, int i) { return &m->w[i]; }

lm_status lm_unet_weight_extra(lm_unet *m, int i, lm_unet_extra *e)
{
    if (i < 0 || i >= m->nw) return lm_error_set(LM_ERR_ARG, "unet: no weight %d", i);
    if (!m->extra && e) {
        m->extra = calloc((size_t)m->nw, sizeof *m->extra);
        if (!m->extra) return lm_error_set(LM_ERR_NOMEM, "out of memory");
    }
    if (m->extra) m->extra[i] = e;
    return LM_OK;
}

/* =============================================================== forward */

typedef struct un_fwd {
    const lm_unet *m;
    int cursor;
    int64_t B;
    lm_array *temb_act;    /* silu(emb), shared by every resnet */
    lm_array *ctx;
} un_fwd;

static lm_array *wget(un_fwd *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static lm_array *wget(un_fwd *f, const char *fmt, ...)
{
    char key[UN_KEY];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(key, sizeof key, fmt, ap);
    va_end(ap);
    const lm_unet *m = f->m;
    for (int k = 0; k < m->nw; k++) {
        int i = (f->cursor + k) % m->nw;
        if (!strcmp(m->wname[i], key)) {
            f->cursor = i + 1;
            return m->w[i];
        }
    }
    lm_error_set(LM_ERR_STATE, "unet: no weight %s", key);
    return NULL;
}

/* Releases *a and replaces it with r (which may be NULL). */
static lm_array *swap(lm_array **a, lm_array *r)
{
    lm_array_release(*a);
    *a = r;
    return r;
}

static lm_array *conv(un_fwd *f, const char *p, lm_array *x, int64_t stride, int64_t pad)
{
    lm_array *w = wget(f, "%s.weight", p), *b = w ? wget(f, "%s.bias", p) : NULL;
    if (!b) return NULL;
    int64_t s[2] = {stride, stride}, pd[4] = {pad, pad, pad, pad}, d[2] = {1, 1};
    if (pad < 0) {   /* diffusers' Downsample2D with padding 0: pad right and bottom by 1 */
        pd[0] = pd[2] = 0;
        pd[1] = pd[3] = 1;
    }
    return lm_conv2d(x, w, b, s, pd, d, 1);
}

/* y + the run-time terms of weight i (models/lora.c's adapters on weights it
 * cannot merge into): (x a^T) b^T each, or x a^T where b is NULL */
static lm_array *extras(const lm_unet *m, int i, lm_array *x, lm_array *y)
{
    for (const lm_unet_extra *e = m->extra && i >= 0 ? m->extra[i] : NULL; e && y; e = e->next) {
        lm_array *t = lm_linear(x, e->a, NULL);
        if (t && e->b) swap(&t, lm_linear(t, e->b, NULL));
        swap(&y, t ? lm_binary(LM_OP_ADD, y, t) : NULL);
        lm_array_release(t);
    }
    return y;
}

static lm_array *linear(un_fwd *f, const char *p, lm_array *x, bool bias)
{
    lm_array *w = wget(f, "%s.weight", p);
    int wi = f->cursor - 1;   /* wget leaves the cursor after what it found */
    lm_array *b = w && bias ? wget(f, "%s.bias", p) : NULL;
    if (!w || (bias && !b)) return NULL;
    if (!lm_dtype_is_quant(w->dtype)) return extras(f->m, wi, x, lm_linear(x, w, b));
    /* QLINEAR computes in f32: back to the model's dtype before the bias */
    lm_array *y = lm_linear(x, w, NULL);
    if (y && y->dtype != x->dtype) swap(&y, lm_cast(y, x->dtype));
    if (y && b) swap(&y, lm_binary(LM_OP_ADD, y, b));
    return extras(f->m, wi, x, y);
}

static lm_array *gnorm(un_fwd *f, const char *p, lm_array *x, double eps)
{
    lm_array *w = wget(f, "%s.weight", p), *b = w ? wget(f, "%s.bias", p) : NULL;
    if (!b) return NULL;
    return lm_group_norm(x, f->m->cfg.norm_num_groups, w, b, eps);
}

static lm_array *lnorm(un_fwd *f, const char *p, lm_array *x)
{
    lm_array *w = wget(f, "%s.weight", p), *b = w ? wget(f, "%s.bias", p) : NULL;
    if (!b) return NULL;
    return lm_layer_norm(x, 1, w, b, 1e-5);
}

static lm_array *silu(lm_array *x) { return lm_unary(LM_OP_SILU, x); }

static lm_array *resnet(un_fwd *f, const char *p, lm_array *x, double scale)
{
    const lm_unet_config *c = &f->m->cfg;
    char k[UN_KEY];
    snprintf(k, sizeof k, "%s.norm1", p);
    lm_array *h = gnorm(f, k, x, c->norm_eps);
    swap(&h, silu(h));
    snprintf(k, sizeof k, "%s.conv1", p);
    swap(&h, h ? conv(f, k, h, 1, 1) : NULL);
    snprintf(k, sizeof k, "%s.time_emb_proj", p);
    lm_array *t = h ? linear(f, k, f->temb_act, true) : NULL;
    if (t) {
        int64_t s[4] = {f->B, t->shape[1], 1, 1};
        swap(&t, lm_reshape(t, 4, s));
    }
    swap(&h, lm_binary(LM_OP_ADD, h, t));
    lm_array_release(t);
    snprintf(k, sizeof k, "%s.norm2", p);
    swap(&h, h ? gnorm(f, k, h, c->norm_eps) : NULL);
    swap(&h, silu(h));
    snprintf(k, sizeof k, "%s.conv2", p);
    swap(&h, h ? conv(f, k, h, 1, 1) : NULL);
    lm_array *sc = NULL;
    if (h && h->shape[1] != x->shape[1]) {
        snprintf(k, sizeof k, "%s.conv_shortcut", p);
        sc = conv(f, k, x, 1, 0);
    } else {
        sc = lm_array_retain(x);
    }
    swap(&h, lm_binary(LM_OP_ADD, sc, h));
    lm_array_release(sc);
    if (scale != 1) swap(&h, lm_binary_scalar(LM_OP_DIV, h, scale, false));
    return h;
}

/* [B, L, H*Dh] -> [B, H, L, Dh] */
static lm_array *heads(lm_array *x, int64_t H)
{
    if (!x) return NULL;
    int64_t s[4] = {x->shape[0], x->shape[1], H, x->shape[2] / H};
    lm_array *r = lm_reshape(x, 4, s);
    lm_array *t = lm_transpose(r, 1, 2);
    lm_array_release(r);
    return t;
}

/* The GPU's fast attention kernels take heads of 64, 128, 256 or 512
 * channels; SD 1.x's eight heads are 40, 80 and 160 wide and fell to the
 * general kernel at a tenth of the speed (65% of a 512x512 step on the H100).
 * Zero channels add nothing to a score q.k and give zero output columns, so
 * off the CPU such heads are padded to the next fast width and the output
 * sliced back; the scale stays that of the real width.  LUMEN_UNET_PAD_HEADS=0
 * turns it off (for comparisons). */
static int64_t padded_head_width(const lm_unet *m, int64_t dh)
{
    static int off = -1;
    if (off < 0) {
        const char *e = getenv("LUMEN_UNET_PAD_HEADS");
        off = e && !strcmp(e, "0");
    }
    if (off || m->dev == lm_device_cpu()) return dh;
    for (int64_t w = 64; w <= 512; w *= 2)
        if (dh <= w) return w;
    return dh;
}

static lm_array *pad_last(lm_array *x, int64_t to)
{
    if (!x || x->shape[x->ndim - 1] == to) return x;
    int64_t pads[2 * LM_MAX_DIMS] = {0};
    pads[2 * (x->ndim - 1) + 1] = to - x->shape[x->ndim - 1];
    lm_array *r = lm_pad(x, pads, 0.0);
    lm_array_release(x);
    return r;
}

static lm_array *attention(un_fwd *f, const char *p, lm_array *x, lm_array *kv, int64_t H)
{
    char k[UN_KEY];
    snprintf(k, sizeof k, "%s.to_q", p);
    lm_array *q = linear(f, k, x, false);
    snprintf(k, sizeof k, "%s.to_k", p);
    lm_array *kk = q ? linear(f, k, kv, false) : NULL;
    snprintf(k, sizeof k, "%s.to_v", p);
    lm_array *v = kk ? linear(f, k, kv, false) : NULL;
    int64_t B = x->shape[0], L = x->shape[1], D = q ? q->shape[2] : 0;
    swap(&q, heads(q, H));
    swap(&kk, heads(kk, H));
    swap(&v, heads(v, H));
    int64_t dh = D / H, dp = padded_head_width(f->m, dh);
    q = pad_last(q, dp);
    kk = pad_last(kk, dp);
    v = pad_last(v, dp);
    /* f16/bf16 attention computes its scores and softmax in f32: what
     * upcast_attention asks for, always */
    lm_array *a = q && kk && v ? lm_attention(q, kk, v, NULL, false, 1.0 / sqrt((double)dh)) : NULL;
    lm_array_release(q);
    lm_array_release(kk);
    lm_array_release(v);
    if (dp != dh) swap(&a, a ? lm_slice(a, 3, 0, dh, 1) : NULL);
    int64_t bld[3] = {B, L, D};
    swap(&a, lm_transpose(a, 1, 2));
    swap(&a, lm_contiguous(a));
    swap(&a, lm_reshape(a, 3, bld));
    snprintf(k, sizeof k, "%s.to_out.0", p);
    swap(&a, a ? linear(f, k, a, true) : NULL);
    return a;
}

static lm_array *basic_block(un_fwd *f, const char *p, lm_array *x, int64_t H, bool only_cross)
{
    char k[UN_KEY];
    snprintf(k, sizeof k, "%s.norm1", p);
    lm_array *n = lnorm(f, k, x);
    snprintf(k, sizeof k, "%s.attn1", p);
    lm_array *a = n ? attention(f, k, n, only_cross ? f->ctx : n, H) : NULL;
    lm_array *h = lm_binary(LM_OP_ADD, a, x);
    lm_array_release(a);
    snprintf(k, sizeof k, "%s.norm2", p);
    swap(&n, h ? lnorm(f, k, h) : NULL);
    snprintf(k, sizeof k, "%s.attn2", p);
    a = n ? attention(f, k, n, f->ctx, H) : NULL;
    swap(&h, lm_binary(LM_OP_ADD, a, h));
    lm_array_release(a);
    snprintf(k, sizeof k, "%s.norm3", p);
    swap(&n, h ? lnorm(f, k, h) : NULL);
    snprintf(k, sizeof k, "%s.ff.net.0.proj", p);
    swap(&n, n ? linear(f, k, n, true) : NULL);
    /* diffusers' GEGLU: value = first half, gate = second half */
    lm_array *g = NULL;
    if (n) {
        int64_t F = n->shape[2] / 2;
        lm_array *val = lm_slice(n, 2, 0, F, 1), *gate = lm_slice(n, 2, F, 2 * F, 1);
        g = lm_geglu(gate, val);
        lm_array_release(val);
        lm_array_release(gate);
    }
    lm_array_release(n);
    snprintf(k, sizeof k, "%s.ff.net.2", p);
    swap(&g, g ? linear(f, k, g, true) : NULL);
    swap(&h, lm_binary(LM_OP_ADD, g, h));
    lm_array_release(g);
    return h;
}

static lm_array *transformer(un_fwd *f, const char *p, lm_array *x, int64_t H, int64_t layers,
                             bool only_cross)
{
    bool lin = f->m->cfg.use_linear_projection;
    int64_t B = x->shape[0], C = x->shape[1], Hh = x->shape[2], W = x->shape[3];
    int64_t bld[3] = {B, Hh * W, C}, bhwc[4] = {B, Hh, W, C};
    static const int to_last[4] = {0, 2, 3, 1}, to_chan[4] = {0, 3, 1, 2};
    char k[UN_KEY];
    snprintf(k, sizeof k, "%s.norm", p);
    lm_array *h = gnorm(f, k, x, 1e-6);
    snprintf(k, sizeof k, "%s.proj_in", p);
    if (!lin) swap(&h, h ? conv(f, k, h, 1, 0) : NULL);
    swap(&h, lm_permute(h, to_last));
    swap(&h, lm_reshape(h, 3, bld));
    if (lin) swap(&h, h ? linear(f, k, h, true) : NULL);
    for (int64_t l = 0; h && l < layers; l++) {
        snprintf(k, sizeof k, "%s.transformer_blocks.%lld", p, (long long)l);
        swap(&h, basic_block(f, k, h, H, only_cross));
    }
    snprintf(k, sizeof k, "%s.proj_out", p);
    if (lin) swap(&h, h ? linear(f, k, h, true) : NULL);
    swap(&h, lm_reshape(h, 4, bhwc));
    swap(&h, lm_permute(h, to_chan));
    if (!lin) swap(&h, h ? conv(f, k, h, 1, 0) : NULL);
    swap(&h, lm_binary(LM_OP_ADD, h, x));
    return h;
}

/* diffusers' get_timestep_embedding, in f32 as PyTorch computes it (the
 * frequencies rounded to f32 the same way), so large timesteps give the
 * same angles: t [N] -> [N, dim] f32 */
static lm_array *sinusoid(lm_array *t, int64_t dim, bool flip, double shift, lm_device *dev)
{
    int64_t half = dim / 2;
    float *fr = malloc(sizeof *fr * (size_t)(half > 0 ? half : 1));
    if (!fr) {
        lm_error_set(LM_ERR_NOMEM, "out of memory");
        return NULL;
    }
    const float nl = (float)-log(10000.0);
    for (int64_t j = 0; j < half; j++) fr[j] = expf(nl * (float)j / (float)((double)half - shift));
    int64_t fs[2] = {1, half}, cs[2] = {t->shape[0], 1};
    lm_array *freq = lm_from_data(2, fs, LM_F32, fr, dev);
    free(fr);
    lm_array *tf = lm_cast(t, LM_F32);
    swap(&tf, lm_reshape(tf, 2, cs));
    lm_array *arg = lm_binary(LM_OP_MUL, tf, freq);
    lm_array_release(tf);
    lm_array_release(freq);
    lm_array *s = lm_unary(LM_OP_SIN, arg), *co = lm_unary(LM_OP_COS, arg);
    lm_array_release(arg);
    lm_array *parts[2] = {flip ? co : s, flip ? s : co};
    lm_array *e = s && co ? lm_concat(2, parts, 1) : NULL;
    lm_array_release(s);
    lm_array_release(co);
    if (e && dim % 2) {
        int64_t pads[4] = {0, 0, 0, 1};
        swap(&e, lm_pad(e, pads, 0));
    }
    return e;
}

static lm_array *time_mlp(un_fwd *f, const char *p, lm_array *x)
{
    char k[UN_KEY];
    snprintf(k, sizeof k, "%s.linear_1", p);
    lm_array *h = linear(f, k, x, true);
    swap(&h, silu(h));
    snprintf(k, sizeof k, "%s.linear_2", p);
    swap(&h, h ? linear(f, k, h, true) : NULL);
    return h;
}

static lm_array *embedding(un_fwd *f, lm_array *t, lm_array *text_embeds, lm_array *time_ids)
{
    const lm_unet_config *c = &f->m->cfg;
    lm_dtype dt = f->m->dt;
    lm_array *e = sinusoid(t, c->block_out_channels[0], c->flip_sin_to_cos, c->freq_shift, f->m->dev);
    swap(&e, lm_cast(e, dt));
    swap(&e, e ? time_mlp(f, "time_embedding", e) : NULL);
    if (!e || c->addition_embed_type != LM_UNET_ADD_TEXT_TIME) return e;
    int64_t flat = time_ids->size, bt[2] = {f->B, -1};
    lm_array *ids = lm_reshape(time_ids, 1, &flat);
    lm_array *te = ids ? sinusoid(ids, c->addition_time_embed_dim, c->flip_sin_to_cos,
                                  c->freq_shift, f->m->dev) : NULL;
    lm_array_release(ids);
    swap(&te, lm_reshape(te, 2, bt));
    lm_array *tx = lm_cast(text_embeds, LM_F32);
    lm_array *parts[2] = {tx, te};
    lm_array *add = tx && te ? lm_concat(2, parts, 1) : NULL;
    lm_array_release(tx);
    lm_array_release(te);
    swap(&add, lm_cast(add, dt));
    swap(&add, add ? time_mlp(f, "add_embedding", add) : NULL);
    swap(&e, lm_binary(LM_OP_ADD, e, add));
    lm_array_release(add);
    return e;
}

static lm_status check_inputs(const lm_unet *m, lm_array *x, lm_array *t, lm_array *ctx,
                              lm_array *te, lm_array *ids)
{
    const lm_unet_config *c = &m->cfg;
    char a[96], b[96], d[96];
    if (!x || !t || !ctx)
        return lm_error_set(LM_ERR_ARG, "unet: x, t and context are required");
    lm_shape_str(a, sizeof a, x->ndim, x->shape);
    lm_shape_str(b, sizeof b, t->ndim, t->shape);
    lm_shape_str(d, sizeof d, ctx->ndim, ctx->shape);
    int64_t B = x->ndim == 4 ? x->shape[0] : 0;
    if (x->ndim != 4 || x->shape[1] != c->in_channels || x->shape[2] < 1 || x->shape[3] < 1)
        return lm_error_set(LM_ERR_SHAPE, "unet: x %s: expected [B, %lld, H, W]", a,
                            (long long)c->in_channels);
    if (!(t->ndim == 0 || (t->ndim == 1 && (t->shape[0] == B || t->shape[0] == 1))))
        return lm_error_set(LM_ERR_SHAPE, "unet: t %s: expected [%lld] (or one timestep) for x %s",
                            b, (long long)B, a);
    if (ctx->ndim != 3 || ctx->shape[0] != B || ctx->shape[2] != c->cross_attention_dim)
        return lm_error_set(LM_ERR_SHAPE, "unet: context %s: expected [%lld, L, %lld]", d,
                            (long long)B, (long long)c->cross_attention_dim);
    if (c->addition_embed_type != LM_UNET_ADD_TEXT_TIME) {
        if (te || ids)
            return lm_error_set(LM_ERR_ARG, "unet: text_embeds/time_ids given, but the config has "
                                "no addition_embed_type text_time");
        return LM_OK;
    }
    if (!te || !ids)
        return lm_error_set(LM_ERR_ARG, "unet: addition_embed_type text_time needs text_embeds "
                            "and time_ids");
    lm_shape_str(a, sizeof a, te->ndim, te->shape);
    lm_shape_str(b, sizeof b, ids->ndim, ids->shape);
    if (te->ndim != 2 || ids->ndim != 2 || te->shape[0] != B || ids->shape[0] != B ||
        te->shape[1] + ids->shape[1] * c->addition_time_embed_dim !=
            c->projection_class_embeddings_input_dim)
        return lm_error_set(LM_ERR_SHAPE, "unet: text_embeds %s, time_ids %s: expected [%lld, P] "
                            "and [%lld, n] with P + n*%lld = %lld", a, b, (long long)B,
                            (long long)B, (long long)c->addition_time_embed_dim,
                            (long long)c->projection_class_embeddings_input_dim);
    return LM_OK;
}

#define UN_MAX_SKIPS (LM_UNET_MAX_LEVELS * 66 + 1)

lm_array *lm_unet_forward(lm_unet *m, lm_array *x, lm_array *t, lm_array *context,
                          lm_array *text_embeds, lm_array *time_ids)
{
    if (!m) {
        lm_error_set(LM_ERR_ARG, "unet: no model");
        return NULL;
    }
    if (check_inputs(m, x, t, context, text_embeds, time_ids) != LM_OK) return NULL;
    const lm_unet_config *c = &m->cfg;
    const int64_t n = c->levels;
    un_fwd f = {.m = m, .B = x->shape[0]};
    lm_array *skips[UN_MAX_SKIPS] = {0}, *h = NULL, *emb = NULL, *tt = NULL;
    int ns = 0;
    char k[UN_KEY];
    /* timesteps broadcast to the batch, as diffusers' expand */
    int64_t b1 = 1;
    tt = t->ndim == 0 ? lm_reshape(t, 1, &b1) : lm_array_retain(t);
    if (tt && tt->shape[0] != f.B) swap(&tt, lm_broadcast_to(tt, 1, &f.B));
    emb = tt ? embedding(&f, tt, text_embeds, time_ids) : NULL;
    f.temb_act = silu(emb);
    f.ctx = lm_cast(context, m->dt);
    h = lm_cast(x, m->dt);
    if (c->center_input_sample) {
        swap(&h, lm_binary_scalar(LM_OP_MUL, h, 2, false));
        swap(&h, lm_binary_scalar(LM_OP_SUB, h, 1, false));
    }
    bool ok = f.temb_act && f.ctx && h;
    /* a failure so far keeps its message: nothing more is built */
    swap(&h, ok ? conv(&f, "conv_in", h, 1, (c->conv_in_kernel - 1) / 2) : NULL);
    if (h) skips[ns++] = lm_array_retain(h);
    for (int64_t i = 0; h && i < n; i++) {
        for (int64_t j = 0; h && j < c->layers_per_block[i]; j++) {
            snprintf(k, sizeof k, "down_blocks.%lld.resnets.%lld", (long long)i, (long long)j);
            swap(&h, resnet(&f, k, h, 1));
            snprintf(k, sizeof k, "down_blocks.%lld.attentions.%lld", (long long)i, (long long)j);
            if (h && c->down_attn[i])
                swap(&h, transformer(&f, k, h, c->heads[i], c->transformer_layers[i],
                                     c->only_cross_attention[i]));
            if (h) skips[ns++] = lm_array_retain(h);
        }
        snprintf(k, sizeof k, "down_blocks.%lld.downsamplers.0.conv", (long long)i);
        if (h && i < n - 1) {
            swap(&h, conv(&f, k, h, 2, c->downsample_padding ? c->downsample_padding : -1));
            if (h) skips[ns++] = lm_array_retain(h);
        }
    }
    if (h && c->mid) swap(&h, resnet(&f, "mid_block.resnets.0", h, c->mid_block_scale_factor));
    if (h && c->mid == 2) {
        swap(&h, transformer(&f, "mid_block.attentions.0", h, c->heads[n - 1],
                             c->transformer_layers[n - 1], false));
        if (h) swap(&h, resnet(&f, "mid_block.resnets.1", h, c->mid_block_scale_factor));
    }
    for (int64_t i = 0; h && i < n; i++) {
        int64_t lv = up_level(c, i), nl = c->layers_per_block[lv] + 1;
        for (int64_t j = 0; h && j < nl; j++) {
            if (ns == 0) {
                swap(&h, NULL);
                lm_error_set(LM_ERR_STATE, "unet: skip connections ran out");
                break;
            }
            lm_array *s = skips[--ns], *pair[2] = {h, s};
            skips[ns] = NULL;
            swap(&h, lm_concat(2, pair, 1));
            lm_array_release(s);
            snprintf(k, sizeof k, "up_blocks.%lld.resnets.%lld", (long long)i, (long long)j);
            if (h) swap(&h, resnet(&f, k, h, 1));
            snprintf(k, sizeof k, "up_blocks.%lld.attentions.%lld", (long long)i, (long long)j);
            if (h && c->up_attn[i])
                swap(&h, transformer(&f, k, h, c->heads[lv], c->transformer_layers[lv],
                                     c->only_cross_attention[lv]));
        }
        if (h && i < n - 1 && ns > 0) {
            /* to the size of the skip it meets next: x2, or what an odd
             * input size left (diffusers' upsample_size) */
            int64_t size[2] = {skips[ns - 1]->shape[2], skips[ns - 1]->shape[3]};
            swap(&h, lm_upsample(h, size, NULL, LM_UPSAMPLE_NEAREST, false));
            snprintf(k, sizeof k, "up_blocks.%lld.upsamplers.0.conv", (long long)i);
            if (h) swap(&h, conv(&f, k, h, 1, 1));
        }
    }
    if (h) swap(&h, gnorm(&f, "conv_norm_out", h, c->norm_eps));
    swap(&h, silu(h));
    if (h) swap(&h, conv(&f, "conv_out", h, 1, (c->conv_out_kernel - 1) / 2));
    for (int i = 0; i < ns; i++) lm_array_release(skips[i]);
    lm_array_release(tt);
    lm_array_release(emb);
    lm_array_release(f.temb_act);
    lm_array_release(f.ctx);
    if (!h && strncmp(lm_error_message(), "unet", 4)) lm_error_prefix("unet");
    return h;
}
