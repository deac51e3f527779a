/* tfjs.c - TensorFlow.js layers models: model.json and its shards (or the
 * converted safetensors) parsed with cJSON, checked, and run as a Lumen
 * graph in NCHW.  See tfjs.h for what is supported.
 *
 * Load reads in three steps: the weights (manifest + shards, or the
 * safetensors tensors) into a host table of f32 arrays by name; the
 * topology into layers, each naming its inputs by index (Keras lists a
 * functional model's layers in an order where inputs come first, which is
 * required here); then each layer takes its weights from the table, checked
 * against the channels inferred along the graph, converted to OIHW and put
 * on the device.  A weight no layer claims is an error too. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/io/io_internal.h"
#include "diffusers_config.h"
#include "lumen.h"
#include "tfjs.h"

/* model.json bound: the largest here is 400 KB */
#define TF_MAX_JSON (64u << 20)
/* one weight group's bytes (thick's largest is 28 MB) */
#define TF_MAX_GROUP (2ull << 30)
#define TF_BETA 0.2

typedef enum tf_kind {
    K_INPUT, K_CONV, K_ACT, K_ADD, K_MUL, K_CONCAT, K_BETA, K_SHUFFLE, K_UPSAMPLE,
    K_LEAKY, K_PRELU,
} tf_kind;

typedef enum tf_act { A_LINEAR, A_RELU, A_RELU6, A_SIGMOID, A_TANH, A_SWISH, A_SOFTPLUS,
                      A_ELU, A_GELU } tf_act;

static const struct { const char *name; tf_act act; } tf_acts[] = {
    {"linear", A_LINEAR}, {"relu", A_RELU}, {"relu6", A_RELU6}, {"sigmoid", A_SIGMOID},
    {"tanh", A_TANH}, {"swish", A_SWISH}, {"silu", A_SWISH}, {"softplus", A_SOFTPLUS},
    {"elu", A_ELU}, {"gelu", A_GELU},
};

typedef struct tf_layer {
    char *name;
    char *cls;
    tf_kind kind;
    int nin;
    int *in;                 /* indices of earlier layers */
    int64_t ch;              /* output channels, 0 = unknown */
    double factor;           /* spatial factor from the input to here */
    double radius;           /* receptive radius in input pixels */
    /* Conv2D */
    int64_t filters, k[2], stride[2], dil[2], groups;
    bool same, bias;
    tf_act act;
    /* Concatenate: NCHW axis; PixelShuffle / UpSampling2D: factors */
    int axis;
    int64_t up[2];
    double alpha;            /* LeakyReLU */
    lm_array *w, *b;         /* OIHW kernel and bias; PReLU alpha [C,1,1] */
} tf_layer;

struct lm_tfjs_model {
    char *name;
    int n;
    tf_layer *l;
    int input, output;
    char *topology;          /* modelTopology as JSON text (for save) */
    lm_device *dev;
    lm_dtype dtype;          /* of the weights and the computation (f32 by default) */
    lm_tensor_set meta;      /* metadata of a converted file */
    char summary[512];
};

/* ---- the weights table ---- */
typedef struct tf_weight {
    char *name;
    int ndim;
    int64_t shape[LM_MAX_DIMS];
    float *data;
    bool used;
} tf_weight;

typedef struct tf_wset {
    tf_weight *w;
    int n, cap;
    bool oihw;               /* kernels already converted (safetensors) */
} tf_wset;

static void wset_free(tf_wset *ws)
{
    for (int i = 0; i < ws->n; i++) {
        free(ws->w[i].name);
        free(ws->w[i].data);
    }
    free(ws->w);
    memset(ws, 0, sizeof *ws);
}

static tf_weight *wset_add(tf_wset *ws, const char *what, const char *name)
{
    for (int i = 0; i < ws->n; i++)
        if (!strcmp(ws->w[i].name, name)) {
            lm_error_set(LM_ERR_FORMAT, "%s: weight '%s' appears twice", what, name);
            return NULL;
        }
    if (ws->n == ws->cap) {
        int cap = ws->cap ? 2 * ws->cap : 64;
        tf_weight *w = realloc(ws->w, (size_t)cap * sizeof *w);
        if (!w) { lm_error_set(LM_ERR_NOMEM, "%s: out of memory", what); return NULL; }
        ws->w = w;
        ws->cap = cap;
    }
    tf_weight *w = &ws->w[ws->n];
    memset(w, 0, sizeof *w);
    w->name = strdup(name);
    if (!w->name) { lm_error_set(LM_ERR_NOMEM, "%s: out of memory", what); return NULL; }
    ws->n++;
    return w;
}

static tf_weight *wset_find(tf_wset *ws, const char *name)
{
    for (int i = 0; i < ws->n; i++)
        if (!strcmp(ws->w[i].name, name)) return &ws->w[i];
    return NULL;
}

/* ---- JSON helpers: every error names the file, the layer and the field ---- */
typedef struct tf_ctx {
    const char *what;
    const char *layer;       /* current layer name or NULL */
    const char *cls;
} tf_ctx;

static lm_status bad(const tf_ctx *c, lm_status st, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static lm_status bad(const tf_ctx *c, lm_status st, const char *field, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->layer)
        return lm_error_set(st, "%s: layer '%s' (%s): %s%s%s", c->what, c->layer,
                            c->cls ? c->cls : "?", field ? field : "", field ? ": " : "", msg);
    return lm_error_set(st, "%s: %s%s%s", c->what, field ? field : "", field ? ": " : "", msg);
}

static cJSON *get(const cJSON *o, const char *key)
{
    return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
}

/* a JSON number that is an integer in [lo, hi] */
static bool as_int(const cJSON *v, int64_t lo, int64_t hi, int64_t *out)
{
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= (double)lo && d <= (double)hi) || d != floor(d)) return false;
    *out = (int64_t)d;
    return true;
}

/* an integer or a list of two (Keras writes lists); absent gives def */
static lm_status int_pair(const tf_ctx *c, const cJSON *cfg, const char *key, int64_t lo,
                          int64_t def, int64_t out[2])
{
    const cJSON *v = get(cfg, key);
    if (!v || cJSON_IsNull(v)) { out[0] = out[1] = def; return LM_OK; }
    if (as_int(v, lo, 1 << 16, &out[0])) { out[1] = out[0]; return LM_OK; }
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 2 &&
        as_int(cJSON_GetArrayItem(v, 0), lo, 1 << 16, &out[0]) &&
        as_int(cJSON_GetArrayItem(v, 1), lo, 1 << 16, &out[1]))
        return LM_OK;
    return bad(c, LM_ERR_FORMAT, key, "expected an integer >= %lld or a list of two",
               (long long)lo);
}

static const char *str_field(const cJSON *o, const char *key)
{
    const cJSON *v = get(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static lm_status parse_act(const tf_ctx *c, const cJSON *cfg, const char *key, tf_act *out)
{
    const cJSON *v = get(cfg, key);
    if (!v || cJSON_IsNull(v)) { *out = A_LINEAR; return LM_OK; }
    if (!cJSON_IsString(v)) return bad(c, LM_ERR_FORMAT, key, "expected a string");
    for (size_t i = 0; i < sizeof tf_acts / sizeof *tf_acts; i++)
        if (!strcmp(v->valuestring, tf_acts[i].name)) { *out = tf_acts[i].act; return LM_OK; }
    return bad(c, LM_ERR_UNSUPPORTED, key, "activation '%.64s' is not supported", v->valuestring);
}

/* ---- weights from the manifest and its shards ---- */
static lm_status dtype_bytes(const tf_ctx *c, const char *name, const cJSON *w, int *esize,
                             int *kind, double *qscale, double *qmin)
{
    /* kind: 0 f32, 1 f16 (quantized), 2 u8 affine, 3 u16 affine */
    const char *dt = str_field(w, "dtype");
    if (!dt || strcmp(dt, "float32"))
        return bad(c, LM_ERR_UNSUPPORTED, "weightsManifest", "weight '%s': dtype '%.32s' (only float32)",
                   name, dt ? dt : "(missing)");
    *esize = 4;
    *kind = 0;
    const cJSON *q = get(w, "quantization");
    if (!q || cJSON_IsNull(q)) return LM_OK;
    const char *qd = str_field(q, "dtype");
    if (qd && !strcmp(qd, "float16")) { *esize = 2; *kind = 1; return LM_OK; }
    const cJSON *s = get(q, "scale"), *m = get(q, "min");
    if (qd && (!strcmp(qd, "uint8") || !strcmp(qd, "uint16")) && cJSON_IsNumber(s) &&
        cJSON_IsNumber(m)) {
        if (!isfinite(s->valuedouble) || !isfinite(m->valuedouble))
            return bad(c, LM_ERR_FORMAT, "weightsManifest",
                       "weight '%s': quantization scale and min must be finite numbers", name);
        *esize = qd[4] == '8' ? 1 : 2;
        *kind = qd[4] == '8' ? 2 : 3;
        *qscale = s->valuedouble;
        *qmin = m->valuedouble;
        return LM_OK;
    }
    return bad(c, LM_ERR_UNSUPPORTED, "weightsManifest", "weight '%s': quantization not supported",
               name);
}

static void decode(float *dst, const unsigned char *src, int64_t n, int kind, double qs,
                   double qm)
{
    for (int64_t i = 0; i < n; i++) {
        switch (kind) {
        case 0: { uint32_t u = lm_io_le32(src + 4 * i); memcpy(&dst[i], &u, 4); break; }
        case 1: dst[i] = lm_f16_to_f32(lm_io_le16(src + 2 * i)); break;
        case 2: dst[i] = (float)(src[i] * qs + qm); break;
        default: dst[i] = (float)(lm_io_le16(src + 2 * i) * qs + qm); break;
        }
    }
}

/* A manifest path must stay inside the model's folder. */
static bool safe_path(const char *p)
{
    if (!*p || p[0] == '/') return false;
    for (const char *s = p; *s; ) {
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n == 2 && s[0] == '.' && s[1] == '.') return false;
        if (!e) break;
        s = e + 1;
    }
    return true;
}

static lm_status read_group(const tf_ctx *c, int gi, const cJSON *g, lm_tfjs_shard_fn shard,
                            void *ctx, tf_wset *ws)
{
    const cJSON *paths = get(g, "paths"), *weights = get(g, "weights");
    if (!cJSON_IsArray(paths) || !cJSON_IsArray(weights))
        return bad(c, LM_ERR_FORMAT, "weightsManifest", "group %d lacks 'paths' or 'weights' lists", gi);
    /* the group's shards, concatenated */
    unsigned char *buf = NULL;
    uint64_t total = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, paths) {
        if (!cJSON_IsString(p) || !safe_path(p->valuestring)) {
            free(buf);
            return bad(c, LM_ERR_FORMAT, "weightsManifest", "group %d: a path is not a relative "
                       "file name inside the model's folder", gi);
        }
        size_t sz = 0;
        const void *d = shard(ctx, p->valuestring, &sz);
        if (!d) { free(buf); return lm_error_status(); }
        if (total + sz > TF_MAX_GROUP) {
            free(buf);
            return bad(c, LM_ERR_FORMAT, "weightsManifest", "group %d is larger than %llu bytes",
                       gi, (unsigned long long)TF_MAX_GROUP);
        }
        unsigned char *nb = realloc(buf, (size_t)(total + sz + 1));
        if (!nb) { free(buf); return bad(c, LM_ERR_NOMEM, NULL, "out of memory reading shards"); }
        buf = nb;
        if (sz) memcpy(buf + total, d, sz);
        total += sz;
    }
    uint64_t off = 0;
    lm_status st = LM_OK;
    const cJSON *w;
    cJSON_ArrayForEach(w, weights) {
        const char *name = str_field(w, "name");
        const cJSON *shape = get(w, "shape");
        if (!name || !cJSON_IsArray(shape) || cJSON_GetArraySize(shape) > LM_MAX_DIMS) {
            st = bad(c, LM_ERR_FORMAT, "weightsManifest", "group %d: a weight without a name or "
                     "a shape (a list of at most %d sizes)", gi, LM_MAX_DIMS);
            break;
        }
        int esize, kind;
        double qs = 0, qm = 0;
        if ((st = dtype_bytes(c, name, w, &esize, &kind, &qs, &qm)) != LM_OK) break;
        tf_weight *tw = wset_add(ws, c->what, name);
        if (!tw) { st = lm_error_status(); break; }
        uint64_t count = 1;
        const cJSON *d;
        cJSON_ArrayForEach(d, shape) {
            int64_t v;
            if (!as_int(d, 0, INT32_MAX, &v) || !lm_io_mul(count, (uint64_t)v, TF_MAX_GROUP, &count)) {
                st = bad(c, LM_ERR_FORMAT, "weightsManifest", "weight '%s': bad shape", name);
                break;
            }
            tw->shape[tw->ndim++] = v;
        }
        if (st != LM_OK) break;
        uint64_t nbytes = count * (uint64_t)esize;
        if (off + nbytes > total) {
            st = bad(c, LM_ERR_FORMAT, "weightsManifest", "weight '%s' needs bytes %llu..%llu but "
                     "group %d's shards hold %llu (a shard is missing or truncated)", name,
                     (unsigned long long)off, (unsigned long long)(off + nbytes), gi,
                     (unsigned long long)total);
            break;
        }
        tw->data = malloc(count ? (size_t)count * sizeof(float) : 1);
        if (!tw->data) { st = bad(c, LM_ERR_NOMEM, NULL, "out of memory"); break; }
        decode(tw->data, buf + off, (int64_t)count, kind, qs, qm);
        off += nbytes;
    }
    if (st == LM_OK && off != total)
        st = bad(c, LM_ERR_FORMAT, "weightsManifest", "group %d's shards hold %llu bytes, its "
                 "weights %llu", gi, (unsigned long long)total, (unsigned long long)off);
    free(buf);
    return st;
}

static lm_status read_manifest(const tf_ctx *c, const cJSON *man, lm_tfjs_shard_fn shard,
                               void *ctx, tf_wset *ws)
{
    if (!cJSON_IsArray(man)) return bad(c, LM_ERR_FORMAT, "weightsManifest", "missing or not a list");
    int gi = 0;
    const cJSON *g;
    cJSON_ArrayForEach(g, man) {
        lm_status st = read_group(c, gi++, g, shard, ctx, ws);
        if (st != LM_OK) return st;
    }
    return LM_OK;
}

/* ---- layers ---- */
static const struct { const char *cls; tf_kind kind; } tf_classes[] = {
    {"InputLayer", K_INPUT}, {"Conv2D", K_CONV}, {"Activation", K_ACT}, {"ReLU", K_ACT},
    {"Add", K_ADD}, {"Multiply", K_MUL}, {"Concatenate", K_CONCAT},
    {"MultiplyBeta", K_BETA}, {"UpSampling2D", K_UPSAMPLE}, {"LeakyReLU", K_LEAKY},
    {"PReLU", K_PRELU},
};

static void layer_free(tf_layer *l)
{
    free(l->name);
    free(l->cls);
    free(l->in);
    lm_array *ws[2] = {l->w, l->b};
    for (int i = 0; i < 2; i++)
        if (ws[i]) { lm_array_unkeep(ws[i]); lm_array_release(ws[i]); }
}

static lm_status check_channels_last(const tf_ctx *c, const cJSON *cfg)
{
    const char *df = str_field(cfg, "data_format");
    if (df && strcmp(df, "channels_last"))
        return bad(c, LM_ERR_UNSUPPORTED, "data_format", "'%.32s' (only channels_last)", df);
    return LM_OK;
}

static lm_status parse_conv(const tf_ctx *c, const cJSON *cfg, tf_layer *l)
{
    lm_status st;
    int64_t f[2];
    if ((st = int_pair(c, cfg, "filters", 1, 0, f)) != LM_OK) return st;
    if (f[0] == 0) return bad(c, LM_ERR_FORMAT, "filters", "missing");
    l->filters = f[0];
    if ((st = int_pair(c, cfg, "kernel_size", 1, 0, l->k)) != LM_OK) return st;
    if (l->k[0] == 0) return bad(c, LM_ERR_FORMAT, "kernel_size", "missing");
    if ((st = int_pair(c, cfg, "strides", 1, 1, l->stride)) != LM_OK) return st;
    if ((st = int_pair(c, cfg, "dilation_rate", 1, 1, l->dil)) != LM_OK) return st;
    if ((l->stride[0] > 1 || l->stride[1] > 1) && (l->dil[0] > 1 || l->dil[1] > 1))
        return bad(c, LM_ERR_UNSUPPORTED, "dilation_rate", "dilation with strides > 1 (Keras "
                   "refuses it too)");
    int64_t g[2];
    if ((st = int_pair(c, cfg, "groups", 1, 1, g)) != LM_OK) return st;
    l->groups = g[0];
    if (l->filters % l->groups)
        return bad(c, LM_ERR_FORMAT, "groups", "%lld does not divide filters %lld",
                   (long long)l->groups, (long long)l->filters);
    const char *pad = str_field(cfg, "padding");
    if (!pad || (strcmp(pad, "same") && strcmp(pad, "valid")))
        return bad(c, LM_ERR_UNSUPPORTED, "padding", "'%.32s' (same or valid)", pad ? pad : "(missing)");
    l->same = !strcmp(pad, "same");
    const cJSON *ub = get(cfg, "use_bias");
    l->bias = !ub || cJSON_IsTrue(ub);
    if ((st = check_channels_last(c, cfg)) != LM_OK) return st;
    return parse_act(c, cfg, "activation", &l->act);
}

static lm_status parse_config(const tf_ctx *c, const cJSON *cfg, tf_layer *l)
{
    lm_status st;
    switch (l->kind) {
    case K_CONV:
        return parse_conv(c, cfg, l);
    case K_ACT:
        if (!strcmp(l->cls, "ReLU")) {
            const cJSON *mv = get(cfg, "max_value"), *ns = get(cfg, "negative_slope"),
                        *th = get(cfg, "threshold");
            if ((mv && !cJSON_IsNull(mv)) || (ns && !(cJSON_IsNumber(ns) && ns->valuedouble == 0)) ||
                (th && !(cJSON_IsNumber(th) && th->valuedouble == 0)))
                return bad(c, LM_ERR_UNSUPPORTED, "max_value", "only the plain ReLU");
            l->act = A_RELU;
            return LM_OK;
        }
        return parse_act(c, cfg, "activation", &l->act);
    case K_LEAKY: {
        const cJSON *a = get(cfg, "alpha");
        if (!a) a = get(cfg, "negative_slope");
        l->alpha = 0.3;      /* Keras' default */
        if (a && !(cJSON_IsNumber(a) && isfinite(a->valuedouble)))
            return bad(c, LM_ERR_FORMAT, "alpha", "expected a finite number");
        if (a) l->alpha = a->valuedouble;
        return LM_OK;
    }
    case K_PRELU: {
        const cJSON *sa = get(cfg, "shared_axes");
        int64_t ax[2];
        if (!cJSON_IsArray(sa) || cJSON_GetArraySize(sa) != 2 ||
            !as_int(cJSON_GetArrayItem(sa, 0), 1, 1, &ax[0]) ||
            !as_int(cJSON_GetArrayItem(sa, 1), 2, 2, &ax[1]))
            return bad(c, LM_ERR_UNSUPPORTED, "shared_axes", "only [1, 2] (one slope per channel)");
        return LM_OK;
    }
    case K_CONCAT: {
        int64_t axis = -1;
        const cJSON *a = get(cfg, "axis");
        if (a && !as_int(a, -4, 3, &axis))
            return bad(c, LM_ERR_FORMAT, "axis", "expected an integer in -4..3");
        if (axis < 0) axis += 4;
        /* NHWC axis -> NCHW axis */
        static const int map[4] = {0, 2, 3, 1};
        l->axis = map[axis];
        if (l->axis == 0) return bad(c, LM_ERR_UNSUPPORTED, "axis", "concatenating along the batch");
        return LM_OK;
    }
    case K_UPSAMPLE: {
        if ((st = int_pair(c, cfg, "size", 1, 2, l->up)) != LM_OK) return st;
        const char *in = str_field(cfg, "interpolation");
        if (in && strcmp(in, "nearest"))
            return bad(c, LM_ERR_UNSUPPORTED, "interpolation", "'%.32s' (only nearest)", in);
        return check_channels_last(c, cfg);
    }
    case K_SHUFFLE: {
        /* the factor is in the class name (UpscalerJS's closure); a config
         * "scale" must agree */
        long r = strtol(l->cls + strlen("PixelShuffle"), NULL, 10);
        int64_t s;
        const cJSON *sc = get(cfg, "scale");
        if (sc && (!as_int(sc, 1, 64, &s) || s != r))
            return bad(c, LM_ERR_FORMAT, "scale", "does not match the class name");
        l->up[0] = l->up[1] = r;
        return LM_OK;
    }
    default:
        return LM_OK;
    }
}

static lm_status parse_kind(const tf_ctx *c, tf_layer *l)
{
    for (size_t i = 0; i < sizeof tf_classes / sizeof *tf_classes; i++)
        if (!strcmp(l->cls, tf_classes[i].cls)) { l->kind = tf_classes[i].kind; return LM_OK; }
    /* PixelShuffle<N>x, N in 2..16 */
    if (!strncmp(l->cls, "PixelShuffle", 12)) {
        char *end;
        long r = strtol(l->cls + 12, &end, 10);
        if (r >= 2 && r <= 16 && end[0] == 'x' && !end[1] && l->cls[12] >= '1' && l->cls[12] <= '9') {
            l->kind = K_SHUFFLE;
            return LM_OK;
        }
    }
    return bad(c, LM_ERR_UNSUPPORTED, "class_name", "layer class '%.64s' is not supported", l->cls);
}

static int find_layer(const lm_tfjs_model *m, int upto, const char *name)
{
    for (int i = 0; i < upto; i++)
        if (!strcmp(m->l[i].name, name)) return i;
    return -1;
}

/* [name, node_index 0, tensor_index 0, ...] -> an earlier layer */
static lm_status parse_ref(const tf_ctx *c, const lm_tfjs_model *m, int upto, const cJSON *r,
                           const char *field, int *out)
{
    int64_t ni, ti;
    const cJSON *nm = cJSON_GetArrayItem(r, 0);
    if (!cJSON_IsArray(r) || cJSON_GetArraySize(r) < 3 || !cJSON_IsString(nm) ||
        !as_int(cJSON_GetArrayItem(r, 1), 0, INT32_MAX, &ni) ||
        !as_int(cJSON_GetArrayItem(r, 2), 0, INT32_MAX, &ti))
        return bad(c, LM_ERR_FORMAT, field, "expected [name, node_index, tensor_index, ...]");
    if (ni != 0 || ti != 0)
        return bad(c, LM_ERR_UNSUPPORTED, field, "'%.64s' used as node %lld tensor %lld (shared "
                   "layers and multi-output layers are not supported)", nm->valuestring,
                   (long long)ni, (long long)ti);
    *out = find_layer(m, upto, nm->valuestring);
    if (*out < 0)
        return bad(c, LM_ERR_FORMAT, field, "'%.64s' is not a layer defined before this one",
                   nm->valuestring);
    return LM_OK;
}

static lm_status parse_inbound(const tf_ctx *c, lm_tfjs_model *m, int idx, const cJSON *inb)
{
    tf_layer *l = &m->l[idx];
    if (l->kind == K_INPUT) {
        if (cJSON_IsArray(inb) && cJSON_GetArraySize(inb) > 0)
            return bad(c, LM_ERR_FORMAT, "inbound_nodes", "an InputLayer has no inputs");
        return LM_OK;
    }
    if (!cJSON_IsArray(inb) || cJSON_GetArraySize(inb) != 1)
        return bad(c, cJSON_IsArray(inb) ? LM_ERR_UNSUPPORTED : LM_ERR_FORMAT, "inbound_nodes",
                   "expected one call of the layer (shared layers are not supported)");
    const cJSON *node = cJSON_GetArrayItem(inb, 0);
    int n = cJSON_IsArray(node) ? cJSON_GetArraySize(node) : 0;
    if (n < 1) return bad(c, LM_ERR_FORMAT, "inbound_nodes", "no inputs");
    bool merge = l->kind == K_ADD || l->kind == K_MUL || l->kind == K_CONCAT;
    if (merge ? n < 2 : n != 1)
        return bad(c, LM_ERR_FORMAT, "inbound_nodes", "%d inputs (%s)", n,
                   merge ? "a merge layer takes at least 2" : "this layer takes 1");
    l->in = malloc((size_t)n * sizeof *l->in);
    if (!l->in) return bad(c, LM_ERR_NOMEM, NULL, "out of memory");
    l->nin = n;
    for (int i = 0; i < n; i++) {
        lm_status st = parse_ref(c, m, idx, cJSON_GetArrayItem(node, i), "inbound_nodes", &l->in[i]);
        if (st != LM_OK) return st;
    }
    return LM_OK;
}

/* Takes a weight from the table, checked against the shape it must have. */
static lm_status take_weight(const tf_ctx *c, tf_wset *ws, const tf_layer *l, const char *suffix,
                             int ndim, const int64_t *want, lm_device *dev, lm_array **out)
{
    char key[512];
    snprintf(key, sizeof key, "%s/%s", l->name, suffix);
    tf_weight *w = wset_find(ws, key);
    if (!w) return bad(c, LM_ERR_FORMAT, suffix, "weight '%s' is not in the weights", key);
    if (w->used) return bad(c, LM_ERR_FORMAT, suffix, "weight '%s' used twice", key);
    char a[96], b[96];
    bool ok = w->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = want[i] < 0 || w->shape[i] == want[i];
    if (!ok)
        return bad(c, LM_ERR_SHAPE, suffix, "weight '%s' has shape %s, the layer needs %s", key,
                   lm_shape_str(a, sizeof a, w->ndim, w->shape), lm_shape_str(b, sizeof b, ndim, want));
    w->used = true;
    const float *src = w->data;
    float *tmp = NULL;
    int64_t shape[4];
    if (ndim == 4 && !ws->oihw) {
        /* HWIO -> OIHW, once */
        int64_t H = w->shape[0], W = w->shape[1], I = w->shape[2], O = w->shape[3];
        tmp = malloc((size_t)(H * W * I * O) * sizeof *tmp + 1);
        if (!tmp) return bad(c, LM_ERR_NOMEM, suffix, "out of memory");
        for (int64_t h = 0; h < H; h++)
            for (int64_t x = 0; x < W; x++)
                for (int64_t i = 0; i < I; i++)
                    for (int64_t o = 0; o < O; o++)
                        tmp[((o * I + i) * H + h) * W + x] = src[((h * W + x) * I + i) * O + o];
        src = tmp;
        shape[0] = O; shape[1] = I; shape[2] = H; shape[3] = W;
    } else {
        memcpy(shape, w->shape, (size_t)w->ndim * sizeof *shape);
    }
    *out = lm_from_data(w->ndim, shape, LM_F32, src, dev);
    free(tmp);
    if (!*out) return lm_error_prefix("%s: layer '%s'", c->what, l->name);
    lm_array_keep(*out);
    return LM_OK;
}

static lm_status layer_weights(const tf_ctx *c, tf_wset *ws, tf_layer *l, int64_t cin,
                               lm_device *dev)
{
    if (l->kind == K_CONV) {
        int64_t ci = cin ? cin / l->groups : -1;
        if (cin && cin % l->groups)
            return bad(c, LM_ERR_SHAPE, "groups", "%lld does not divide the %lld input channels",
                       (long long)l->groups, (long long)cin);
        int64_t hwio[4] = {l->k[0], l->k[1], ci, l->filters};
        int64_t oihw[4] = {l->filters, ci, l->k[0], l->k[1]};
        lm_status st = take_weight(c, ws, l, "kernel", 4, ws->oihw ? oihw : hwio, dev, &l->w);
        if (st != LM_OK) return st;
        int64_t bs[1] = {l->filters};
        return l->bias ? take_weight(c, ws, l, "bias", 1, bs, dev, &l->b) : LM_OK;
    }
    if (l->kind == K_PRELU) {
        if (!cin) return bad(c, LM_ERR_UNSUPPORTED, "alpha", "input channels unknown");
        int64_t hwc[3] = {1, 1, cin}, chw[3] = {cin, 1, 1};
        lm_status st = take_weight(c, ws, l, "alpha", 3, ws->oihw ? chw : hwc, dev, &l->w);
        if (st != LM_OK || ws->oihw) return st;
        lm_array *r = lm_reshape(l->w, 3, chw);
        lm_array_unkeep(l->w);
        lm_array_release(l->w);
        l->w = r;
        if (!r) return lm_error_prefix("%s: layer '%s'", c->what, l->name);
        lm_array_keep(r);
    }
    return LM_OK;
}

/* Channels, spatial factor and receptive radius from the inputs. */
static lm_status infer(const tf_ctx *c, lm_tfjs_model *m, tf_layer *l)
{
    if (l->kind == K_INPUT) { l->factor = 1; return LM_OK; }
    const tf_layer *a = &m->l[l->in[0]];
    l->ch = a->ch;
    l->factor = a->factor;
    l->radius = a->radius;
    for (int i = 1; i < l->nin; i++) {
        const tf_layer *b = &m->l[l->in[i]];
        if (b->factor != l->factor)
            return bad(c, LM_ERR_SHAPE, "inbound_nodes", "inputs '%s' and '%s' have different sizes",
                       a->name, b->name);
        if (b->radius > l->radius) l->radius = b->radius;
        if (l->kind == K_CONCAT && l->axis == 1) {
            l->ch = l->ch && b->ch ? l->ch + b->ch : 0;
        } else if (b->ch && l->ch && b->ch != l->ch) {
            return bad(c, LM_ERR_SHAPE, "inbound_nodes", "inputs '%s' (%lld channels) and '%s' "
                       "(%lld) differ", a->name, (long long)a->ch, b->name, (long long)b->ch);
        }
    }
    if (l->kind == K_CONV) {
        l->ch = l->filters;
        int64_t kh = (l->k[0] - 1) * l->dil[0], kw = (l->k[1] - 1) * l->dil[1];
        l->radius += (double)(kh > kw ? kh : kw) / 2.0 / l->factor;
        if (l->stride[0] != l->stride[1])
            return bad(c, LM_ERR_UNSUPPORTED, "strides", "different strides along h and w");
        l->factor /= (double)l->stride[0];
    } else if (l->kind == K_SHUFFLE || l->kind == K_UPSAMPLE) {
        if (l->up[0] != l->up[1])
            return bad(c, LM_ERR_UNSUPPORTED, "size", "different factors along h and w");
        int64_t rr = l->kind == K_SHUFFLE ? l->up[0] * l->up[0] : 1;
        if (l->ch % rr)
            return bad(c, LM_ERR_SHAPE, "inbound_nodes", "%lld channels do not split into %lldx%lld "
                       "blocks", (long long)l->ch, (long long)l->up[0], (long long)l->up[0]);
        l->ch /= rr;
        l->factor *= (double)l->up[0];
        if (l->factor > 1 << 16) return bad(c, LM_ERR_UNSUPPORTED, "size", "too large");
    }
    return LM_OK;
}

static lm_status parse_io(const tf_ctx *c, lm_tfjs_model *m, const cJSON *cfg, const char *key,
                          int *out)
{
    const cJSON *v = get(cfg, key);
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 1)
        return bad(c, LM_ERR_UNSUPPORTED, key, "exactly one is supported");
    return parse_ref(c, m, m->n, cJSON_GetArrayItem(v, 0), key, out);
}

static lm_status input_channels(const tf_ctx *c, const cJSON *cfg, tf_layer *l)
{
    const cJSON *s = get(cfg, "batch_input_shape");
    if (!s) s = get(cfg, "batch_shape");
    if (!cJSON_IsArray(s) || cJSON_GetArraySize(s) != 4)
        return bad(c, LM_ERR_UNSUPPORTED, "batch_input_shape", "only images [batch, h, w, c]");
    const cJSON *ch = cJSON_GetArrayItem(s, 3);
    if (!cJSON_IsNull(ch) && !as_int(ch, 1, 1 << 20, &l->ch))
        return bad(c, LM_ERR_FORMAT, "batch_input_shape", "bad channel count");
    const char *dt = str_field(cfg, "dtype");
    if (dt && strcmp(dt, "float32"))
        return bad(c, LM_ERR_UNSUPPORTED, "dtype", "'%.32s' (only float32)", dt);
    return LM_OK;
}

static lm_status parse_layer(tf_ctx *c, lm_tfjs_model *m, tf_wset *ws, const cJSON *jl)
{
    int idx = m->n;
    tf_layer *l = &m->l[idx];
    memset(l, 0, sizeof *l);
    const cJSON *cfg = get(jl, "config");
    const char *cls = str_field(jl, "class_name");
    const char *name = str_field(jl, "name");
    if (!name) name = str_field(cfg, "name");
    if (!cls || !name || !cJSON_IsObject(cfg))
        return bad(c, LM_ERR_FORMAT, "layers", "layer %d lacks class_name, name or config", idx);
    l->name = strdup(name);
    l->cls = strdup(cls);
    m->n++;
    if (!l->name || !l->cls) return bad(c, LM_ERR_NOMEM, NULL, "out of memory");
    c->layer = l->name;
    c->cls = l->cls;
    if (find_layer(m, idx, name) >= 0) return bad(c, LM_ERR_FORMAT, "name", "appears twice");
    lm_status st;
    if ((st = parse_kind(c, l)) != LM_OK) return st;
    if (l->kind == K_INPUT && (st = input_channels(c, cfg, l)) != LM_OK) return st;
    if ((st = parse_config(c, cfg, l)) != LM_OK) return st;
    if ((st = parse_inbound(c, m, idx, get(jl, "inbound_nodes"))) != LM_OK) return st;
    int64_t cin = l->nin ? m->l[l->in[0]].ch : 0;
    if ((st = infer(c, m, l)) != LM_OK) return st;
    if ((st = layer_weights(c, ws, l, cin, m->dev)) != LM_OK) return st;
    c->layer = c->cls = NULL;
    return LM_OK;
}

static void summarize(lm_tfjs_model *m)
{
    size_t len = 0;
    m->summary[0] = 0;
    for (int i = 0; i < m->n; i++) {
        bool seen = false;
        for (int j = 0; j < i && !seen; j++) seen = !strcmp(m->l[j].cls, m->l[i].cls);
        if (seen) continue;
        int count = 0;
        for (int j = i; j < m->n; j++) count += !strcmp(m->l[j].cls, m->l[i].cls);
        int w = snprintf(m->summary + len, sizeof m->summary - len, "%s%s:%d", len ? " " : "",
                         m->l[i].cls, count);
        if (w < 0 || (size_t)w >= sizeof m->summary - len) break;
        len += (size_t)w;
    }
}

/* topology: a modelTopology object (with or without "model_config") */
static lm_tfjs_model *build(const char *what, const cJSON *topo, tf_wset *ws, lm_device *dev)
{
    tf_ctx c = {what, NULL, NULL};
    const cJSON *mc = get(topo, "model_config");
    if (!mc) mc = topo;
    const char *mcls = str_field(mc, "class_name");
    const cJSON *cfg = get(mc, "config");
    const cJSON *layers = get(cfg, "layers");
    if (!mcls || !cJSON_IsArray(layers)) {
        bad(&c, LM_ERR_FORMAT, "modelTopology", "expected model_config {class_name, config {layers}}");
        return NULL;
    }
    if (strcmp(mcls, "Functional") && strcmp(mcls, "Model")) {
        bad(&c, LM_ERR_UNSUPPORTED, "model_config", "class '%.64s' (Functional models only)", mcls);
        return NULL;
    }
    lm_tfjs_model *m = calloc(1, sizeof *m);
    int n = cJSON_GetArraySize(layers);
    if (!m || !(m->l = calloc(n ? (size_t)n : 1, sizeof *m->l))) {
        free(m);
        lm_error_set(LM_ERR_NOMEM, "%s: out of memory", what);
        return NULL;
    }
    m->dev = dev ? dev : lm_device_default();
    m->dtype = LM_F32;
    const char *nm = str_field(cfg, "name");
    m->name = strdup(nm ? nm : "model");
    m->topology = cJSON_PrintUnformatted(topo);
    lm_status st = m->name && m->topology ? LM_OK : bad(&c, LM_ERR_NOMEM, NULL, "out of memory");
    const cJSON *jl;
    cJSON_ArrayForEach(jl, layers) {
        if (st != LM_OK) break;
        st = parse_layer(&c, m, ws, jl);
    }
    c.layer = c.cls = NULL;
    if (st == LM_OK) st = parse_io(&c, m, cfg, "input_layers", &m->input);
    if (st == LM_OK) st = parse_io(&c, m, cfg, "output_layers", &m->output);
    if (st == LM_OK && m->l[m->input].kind != K_INPUT)
        st = bad(&c, LM_ERR_FORMAT, "input_layers", "'%s' is not an InputLayer", m->l[m->input].name);
    for (int i = 0; st == LM_OK && i < m->n; i++)
        if (m->l[i].kind == K_INPUT && i != m->input)
            st = bad(&c, LM_ERR_UNSUPPORTED, "input_layers", "a second input '%s'", m->l[i].name);
    for (int i = 0; st == LM_OK && i < ws->n; i++)
        if (!ws->w[i].used)
            st = bad(&c, LM_ERR_FORMAT, "weightsManifest", "weight '%s' belongs to no layer",
                     ws->w[i].name);
    if (st != LM_OK) {
        lm_tfjs_free(m);
        return NULL;
    }
    summarize(m);
    return m;
}

void lm_tfjs_free(lm_tfjs_model *m)
{
    if (!m) return;
    for (int i = 0; i < m->n; i++) layer_free(&m->l[i]);
    free(m->l);
    free(m->name);
    cJSON_free(m->topology);
    lm_tensor_set_free(&m->meta);
    free(m);
}

/* ---- loading ---- */
static lm_tfjs_model *from_json(const char *json, size_t len, const char *what,
                                lm_tfjs_shard_fn shard, void *ctx, lm_device *dev)
{
    tf_ctx c = {what, NULL, NULL};
    if (len > TF_MAX_JSON) {
        bad(&c, LM_ERR_FORMAT, NULL, "model.json larger than %u bytes", TF_MAX_JSON);
        return NULL;
    }
    /* Python's NaN and Infinity read as Python reads them (the converter
     * is Python); a field that needs a finite value refuses them */
    cJSON *root = lm_dfs_parse(json, len, what);
    if (!root) return NULL;
    lm_tfjs_model *m = NULL;
    tf_wset ws = {0};
    const char *fmt = str_field(root, "format");
    const cJSON *topo = get(root, "modelTopology");
    if (fmt && strcmp(fmt, "layers-model"))
        bad(&c, LM_ERR_UNSUPPORTED, "format", "'%.32s' (only layers-model; graph models are not "
            "supported)", fmt);
    else if (!cJSON_IsObject(topo))
        bad(&c, LM_ERR_FORMAT, "modelTopology", "missing");
    else if (read_manifest(&c, get(root, "weightsManifest"), shard, ctx, &ws) == LM_OK)
        m = build(what, topo, &ws, dev);
    wset_free(&ws);
    cJSON_Delete(root);
    return m;
}

lm_tfjs_model *lm_tfjs_load_mem(const char *json, size_t len, const char *what,
                                lm_tfjs_shard_fn shard, void *ctx, lm_device *dev)
{
    if (lm_init() != LM_OK) return NULL;
    if (!json || !shard) {
        lm_error_set(LM_ERR_ARG, "tfjs: NULL model text or shard reader");
        return NULL;
    }
    return from_json(json, len, what ? what : "model.json", shard, ctx, dev);
}

typedef struct dir_shards {
    char *dir;               /* with the trailing '/', or "" */
    void *data;              /* the last shard read */
} dir_shards;

static const void *read_shard(void *ctx, const char *path, size_t *size)
{
    dir_shards *d = ctx;
    free(d->data);
    d->data = NULL;
    size_t n = strlen(d->dir) + strlen(path) + 1;
    char *full = malloc(n);
    if (!full) { lm_error_set(LM_ERR_NOMEM, "tfjs: out of memory"); return NULL; }
    snprintf(full, n, "%s%s", d->dir, path);
    lm_status st = lm_io_read_all(full, &d->data, size);
    if (st != LM_OK) lm_error_prefix("weights shard '%s' (run `make models`?)", path);
    free(full);
    return st == LM_OK ? d->data : NULL;
}

static lm_tfjs_model *from_safetensors(const char *path, lm_device *dev)
{
    lm_tensor_set s = {0};
    if (lm_load_safetensors(path, &s) != LM_OK) return NULL;
    tf_ctx c = {path, NULL, NULL};
    lm_tfjs_model *m = NULL;
    tf_wset ws = {.oihw = true};
    const char *topo_text = NULL;
    for (int i = 0; i < s.nmeta; i++)
        if (!strcmp(s.meta[i].key, "tfjs.topology")) topo_text = s.meta[i].value;
    cJSON *topo = topo_text ? lm_dfs_parse(topo_text, strlen(topo_text), "tfjs.topology") : NULL;
    if (!topo) {
        bad(&c, LM_ERR_FORMAT, "tfjs.topology", "metadata missing or not JSON (not written by "
            "lumen convert?)");
        goto done;
    }
    for (int i = 0; i < s.count; i++) {
        lm_array *a = s.arrays[i];
        tf_weight *w = wset_add(&ws, path, s.names[i]);
        if (!w) goto done;
        w->ndim = a->ndim;
        memcpy(w->shape, a->shape, sizeof w->shape);
        w->data = malloc(a->size * sizeof(float) + 1);
        if (!w->data) { bad(&c, LM_ERR_NOMEM, NULL, "out of memory"); goto done; }
        if (lm_array_read(a, w->data, LM_F32) != LM_OK) goto done;
    }
    m = build(path, topo, &ws, dev);
    if (m) {
        /* the model keeps the metadata; the tensors go with s */
        m->meta.meta = s.meta;
        m->meta.nmeta = s.nmeta;
        s.meta = NULL;
        s.nmeta = 0;
    }
done:
    cJSON_Delete(topo);
    wset_free(&ws);
    lm_tensor_set_free(&s);
    return m;
}

lm_tfjs_model *lm_tfjs_load(const char *path, lm_device *dev)
{
    if (lm_init() != LM_OK) return NULL;
    if (!path) { lm_error_set(LM_ERR_ARG, "tfjs: NULL path"); return NULL; }
    if (lm_file_detect(path) == LM_FORMAT_SAFETENSORS) {
        lm_error_clear();
        return from_safetensors(path, dev);
    }
    lm_error_clear();
    void *json = NULL;
    size_t len = 0;
    if (lm_io_read_all(path, &json, &len) != LM_OK) {
        lm_error_prefix("tfjs");
        return NULL;
    }
    const char *slash = strrchr(path, '/');
    dir_shards d = {strndup(path, slash ? (size_t)(slash - path + 1) : 0), NULL};
    lm_tfjs_model *m = NULL;
    if (!d.dir) lm_error_set(LM_ERR_NOMEM, "tfjs: out of memory");
    else m = from_json(json, len, path, read_shard, &d, dev);
    free(d.data);
    free(d.dir);
    free(json);
    return m;
}

/* ---- the forward graph ---- */
static lm_array *activate(lm_array *x, tf_act a)
{
    switch (a) {
    case A_LINEAR: return lm_array_retain(x);
    case A_RELU: return lm_unary(LM_OP_RELU, x);
    case A_RELU6: return lm_clamp(x, 0, 6);
    case A_SIGMOID: return lm_unary(LM_OP_SIGMOID, x);
    case A_TANH: return lm_unary(LM_OP_TANH, x);
    case A_SWISH: return lm_unary(LM_OP_SILU, x);
    case A_SOFTPLUS: return lm_unary(LM_OP_SOFTPLUS, x);
    case A_GELU: return lm_unary(LM_OP_GELU, x);
    case A_ELU: {
        lm_array *pos = lm_binary_scalar(LM_OP_GT, x, 0, false);
        lm_array *neg = lm_unary(LM_OP_EXPM1, x);
        lm_array *r = lm_where(pos, x, neg);
        lm_array_release(pos);
        lm_array_release(neg);
        return r;
    }
    }
    return NULL;
}

/* TF's "same": out = ceil(in / s), the padding split with the odd pixel
 * after (bottom/right). */
static void same_pad(int64_t in, int64_t k, int64_t s, int64_t d, int64_t *before, int64_t *after)
{
    int64_t out = (in + s - 1) / s;
    int64_t total = (out - 1) * s + (k - 1) * d + 1 - in;
    if (total < 0) total = 0;
    *before = total / 2;
    *after = total - *before;
}

static lm_array *run_conv(const tf_layer *l, lm_array *x)
{
    int64_t pad[4] = {0, 0, 0, 0};
    if (l->same) {
        same_pad(x->shape[2], l->k[0], l->stride[0], l->dil[0], &pad[0], &pad[1]);
        same_pad(x->shape[3], l->k[1], l->stride[1], l->dil[1], &pad[2], &pad[3]);
    }
    lm_array *y = lm_conv2d(x, l->w, l->b, l->stride, pad, l->dil, l->groups);
    if (!y || l->act == A_LINEAR) return y;
    lm_array *r = activate(y, l->act);
    lm_array_release(y);
    return r;
}

/* tf.depthToSpace (NHWC): out[h*r+i, w*r+j, c] = in[h, w, (i*r+j)*C + c] */
static lm_array *run_shuffle(int64_t r, lm_array *x)
{
    int64_t N = x->shape[0], C = x->shape[1] / (r * r), H = x->shape[2], W = x->shape[3];
    int64_t s6[6] = {N, r, r, C, H, W}, s4[4] = {N, C, H * r, W * r};
    static const int perm[6] = {0, 3, 4, 1, 5, 2};
    lm_array *a = lm_reshape(x, 6, s6);
    lm_array *b = lm_permute(a, perm);
    lm_array *y = lm_reshape(b, 4, s4);
    lm_array_release(a);
    lm_array_release(b);
    return y;
}

static lm_array *run_layer(const tf_layer *l, lm_array **v)
{
    lm_array *x = v[l->in[0]];
    switch (l->kind) {
    case K_CONV: return run_conv(l, x);
    case K_ACT: return activate(x, l->act);
    case K_BETA: return lm_binary_scalar(LM_OP_MUL, x, TF_BETA, false);
    case K_LEAKY: return lm_leaky_relu(x, l->alpha);
    case K_SHUFFLE: return run_shuffle(l->up[0], x);
    case K_UPSAMPLE: {
        double s[2] = {(double)l->up[0], (double)l->up[1]};
        return lm_upsample(x, NULL, s, LM_UPSAMPLE_NEAREST, false);
    }
    case K_PRELU: {
        lm_array *pos = lm_binary_scalar(LM_OP_GE, x, 0, false);
        lm_array *neg = lm_binary(LM_OP_MUL, x, l->w);
        lm_array *r = lm_where(pos, x, neg);
        lm_array_release(pos);
        lm_array_release(neg);
        return r;
    }
    case K_CONCAT: {
        lm_array *ins[64];
        if (l->nin > 64) {
            lm_error_set(LM_ERR_UNSUPPORTED, "tfjs: layer '%s': more than 64 inputs", l->name);
            return NULL;
        }
        for (int i = 0; i < l->nin; i++) ins[i] = v[l->in[i]];
        return lm_concat(l->nin, ins, l->axis);
    }
    case K_ADD:
    case K_MUL: {
        lm_array *acc = lm_array_retain(x);
        for (int i = 1; i < l->nin && acc; i++) {
            lm_array *n = lm_binary(l->kind == K_ADD ? LM_OP_ADD : LM_OP_MUL, acc, v[l->in[i]]);
            lm_array_release(acc);
            acc = n;
        }
        return acc;
    }
    case K_INPUT: break;
    }
    return lm_array_retain(x);
}

lm_array *lm_tfjs_forward(lm_tfjs_model *m, lm_array *x)
{
    if (!m || !x) {
        lm_error_set(LM_ERR_ARG, "tfjs: NULL model or input");
        return NULL;
    }
    char s[96];
    const tf_layer *in = &m->l[m->input];
    if (x->ndim != 4 || (in->ch && x->shape[1] != in->ch) || !lm_dtype_is_float(x->dtype)) {
        lm_error_set(LM_ERR_SHAPE, "tfjs %s: input %s %s, expected a float [N, %lld, H, W]",
                     m->name, lm_shape_str(s, sizeof s, x->ndim, x->shape), lm_dtype_name(x->dtype),
                     (long long)in->ch);
        return NULL;
    }
    /* last use of each layer's value, so intermediates are released early */
    int *last = malloc((size_t)m->n * sizeof *last);
    lm_array **v = calloc((size_t)m->n, sizeof *v);
    lm_array *out = NULL;
    if (!last || !v) {
        lm_error_set(LM_ERR_NOMEM, "tfjs: out of memory");
        goto done;
    }
    for (int i = 0; i < m->n; i++) last[i] = i == m->output ? m->n : i;
    for (int i = 0; i < m->n; i++)
        for (int j = 0; j < m->l[i].nin; j++)
            if (last[m->l[i].in[j]] < i) last[m->l[i].in[j]] = i;
    v[m->input] = x->dtype == m->dtype ? lm_array_retain(x) : lm_cast(x, m->dtype);
    if (!v[m->input]) goto done;
    for (int i = 0; i < m->n; i++) {
        const tf_layer *l = &m->l[i];
        if (l->kind == K_INPUT) continue;
        v[i] = run_layer(l, v);
        if (!v[i]) {
            lm_error_prefix("tfjs %s: layer '%s' (%s)", m->name, l->name, l->cls);
            goto done;
        }
        for (int j = 0; j < l->nin; j++)
            if (last[l->in[j]] == i && v[l->in[j]]) {
                lm_array_release(v[l->in[j]]);
                v[l->in[j]] = NULL;
            }
    }
    out = x->dtype == m->dtype ? lm_array_retain(v[m->output]) : lm_cast(v[m->output], x->dtype);
done:
    if (v)
        for (int i = 0; i < m->n; i++) lm_array_release(v[i]);
    free(v);
    free(last);
    return out;
}

lm_status lm_tfjs_set_dtype(lm_tfjs_model *m, lm_dtype dt)
{
    if (!lm_dtype_is_float(dt))
        return lm_error_set(LM_ERR_DTYPE, "tfjs %s: dtype %s is not a float type", m->name,
                            lm_dtype_name(dt));
    /* every cast in one evaluation: one submit and wait on a GPU, not one
     * per weight (esrgan-thick has hundreds) */
    lm_array **c = calloc((size_t)2 * (size_t)m->n + 1, sizeof *c);
    if (!c) return lm_error_set(LM_ERR_NOMEM, "tfjs %s: out of memory", m->name);
    lm_status st = LM_OK;
    for (int i = 0; i < m->n && st == LM_OK; i++) {
        lm_array *ws[2] = {m->l[i].w, m->l[i].b};
        for (int j = 0; j < 2 && st == LM_OK; j++)
            if (ws[j] && ws[j]->dtype != dt && !(c[2 * i + j] = lm_cast(ws[j], dt)))
                st = lm_error_prefix("tfjs %s: layer '%s'", m->name, m->l[i].name);
    }
    if (st == LM_OK && (st = lm_eval(c, 2 * m->n)) != LM_OK)
        lm_error_prefix("tfjs %s: casting the weights to %s", m->name, lm_dtype_name(dt));
    for (int i = 0; i < m->n; i++) {
        lm_array **ws[2] = {&m->l[i].w, &m->l[i].b};
        for (int j = 0; j < 2; j++) {
            lm_array *w = c[2 * i + j];
            if (!w) continue;
            if (st == LM_OK) {
                lm_array_keep(w);
                lm_array_unkeep(*ws[j]);
                lm_array_release(*ws[j]);
                *ws[j] = w;
            } else {
                lm_array_release(w);
            }
        }
    }
    free(c);
    if (st == LM_OK) m->dtype = dt;
    return st;
}

lm_dtype lm_tfjs_dtype(const lm_tfjs_model *m) { return m->dtype; }

/* ---- inspection and saving ---- */
const char *lm_tfjs_name(const lm_tfjs_model *m) { return m->name; }
lm_device *lm_tfjs_device(const lm_tfjs_model *m) { return m->dev; }
int lm_tfjs_layer_count(const lm_tfjs_model *m) { return m->n; }
int64_t lm_tfjs_in_channels(const lm_tfjs_model *m) { return m->l[m->input].ch; }
int64_t lm_tfjs_out_channels(const lm_tfjs_model *m) { return m->l[m->output].ch; }
int64_t lm_tfjs_scale(const lm_tfjs_model *m)
{
    double f = m->l[m->output].factor;
    return f >= 1 && f == floor(f) ? (int64_t)f : 0;
}
int64_t lm_tfjs_receptive_radius(const lm_tfjs_model *m)
{
    return (int64_t)ceil(m->l[m->output].radius);
}
const char *lm_tfjs_summary(const lm_tfjs_model *m) { return m->summary; }

size_t lm_tfjs_nbytes(const lm_tfjs_model *m)
{
    size_t n = 0;
    for (int i = 0; i < m->n; i++)
        n += (m->l[i].w ? lm_array_nbytes(m->l[i].w) : 0) + (m->l[i].b ? lm_array_nbytes(m->l[i].b) : 0);
    return n;
}

const char *lm_tfjs_meta(const lm_tfjs_model *m, const char *key)
{
    for (int i = 0; i < m->meta.nmeta; i++)
        if (!strcmp(m->meta.meta[i].key, key)) return m->meta.meta[i].value;
    return NULL;
}

lm_status lm_tfjs_save(const lm_tfjs_model *m, const char *path, int nmeta, const lm_kv *meta)
{
    int n = 0;
    for (int i = 0; i < m->n; i++) n += (m->l[i].w != NULL) + (m->l[i].b != NULL);
    char **names = calloc((size_t)n + 1, sizeof *names);
    lm_array **arrays = calloc((size_t)n + 1, sizeof *arrays);
    lm_kv *kv = calloc((size_t)nmeta + 2, sizeof *kv);
    lm_status st = names && arrays && kv ? LM_OK : lm_error_set(LM_ERR_NOMEM, "tfjs save: out of memory");
    int k = 0;
    for (int i = 0; st == LM_OK && i < m->n; i++) {
        const tf_layer *l = &m->l[i];
        const char *suffix[2] = {l->kind == K_PRELU ? "alpha" : "kernel", "bias"};
        lm_array *a[2] = {l->w, l->b};
        for (int j = 0; j < 2 && st == LM_OK; j++) {
            if (!a[j]) continue;
            if (asprintf(&names[k], "%s/%s", l->name, suffix[j]) < 0) {
                names[k] = NULL;
                st = lm_error_set(LM_ERR_NOMEM, "tfjs save: out of memory");
                break;
            }
            arrays[k++] = a[j];
        }
    }
    if (st == LM_OK) {
        kv[0] = (lm_kv){"tfjs.topology", m->topology};
        kv[1] = (lm_kv){"lumen.kernel_layout", "OIHW"};
        for (int i = 0; i < nmeta; i++) kv[2 + i] = meta[i];
        st = lm_save_safetensors(path, k, (const char *const *)names, arrays, nmeta + 2, kv);
    }
    for (int i = 0; names && i < n; i++) free(names[i]);
    free(names);
    free(arrays);
    free(kv);
    return st;
}
