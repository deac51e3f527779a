/* l_nn.c - the image-model half of core/ops_nn.h in Lua: convolution,
 * pooling, resampling, normalization, linear layers and gated activations
 * (l_nnseq.c has attention, RoPE, sorting and the index ops).
 *
 * Names, parameter order and option names are PyTorch's (torch.nn.functional)
 * so a model ports line by line: F.conv2d(x, w, b, padding=1) is
 * lm.conv2d(x, w, b, {padding=1}) or lm.conv2d(x, w, b, 1, 1).  Arguments
 * are read by l_nnargs.c; axes are 1-based as everywhere in Lua. */
#include <float.h>
#include <math.h>
#include <string.h>
#include "l_internal.h"

/* ---- convolution ---- */

enum { C_W, C_B, C_STRIDE, C_PAD, C_DIL, C_GROUPS };
static const char *const CONV[] = {"weight", "bias", "stride", "padding", "dilation", "groups", NULL};

/* padding="same" (stride 1): PyTorch puts the odd extra on the right. */
static void same_padding(const lm_nn_args *a, int64_t k, int64_t dil, int64_t stride, int64_t out[2])
{
    if (stride != 1) luaL_error(a->L, "%s: padding='same' needs stride 1", a->fname);
    int64_t total = dil * (k - 1);
    out[0] = total / 2;
    out[1] = total - out[0];
}

/* The padding of spatial axis d (of nsp) as {before, after}: an integer,
 * one value per axis, {top, bottom, left, right} (2-D), "same" or "valid". */
static void conv_padding(const lm_nn_args *a, lm_array *w, int nsp, const int64_t *stride,
                         const int64_t *dil, int64_t pad[4])
{
    memset(pad, 0, 4 * sizeof *pad);
    if (!lm_nn_has(a, C_PAD)) return;
    if (lua_type(a->L, a->at[C_PAD]) == LUA_TSTRING) {
        const char *s = lm_nn_string(a, C_PAD, NULL);
        if (!strcmp(s, "valid")) return;
        if (strcmp(s, "same"))
            luaL_error(a->L, "%s: padding '%s' is not supported (an integer, a table, 'same' or "
                       "'valid')", a->fname, s);
        for (int d = 0; d < nsp; d++)
            same_padding(a, w->shape[w->ndim - nsp + d], dil[d], stride[d], pad + 2 * d);
        return;
    }
    int64_t v[4];
    int n = lm_nn_ints(a, C_PAD, v, 2 * nsp);
    if (n != 1 && n != nsp && n != 2 * nsp)
        luaL_error(a->L, "%s: padding needs 1, %d or %d values, got %d", a->fname, nsp, 2 * nsp, n);
    for (int d = 0; d < nsp; d++) {
        if (n == 2 * nsp) {
            pad[2 * d] = v[2 * d];
            pad[2 * d + 1] = v[2 * d + 1];
        } else {
            pad[2 * d] = pad[2 * d + 1] = v[n == 1 ? 0 : d];
        }
    }
}

/* The weight, checked for rank here so the message can say which call. */
static lm_array *conv_weight(const lm_nn_args *a, int ndim)
{
    lm_array *w = lm_nn_tensor(a, C_W, true);
    if (w->ndim != ndim)
        luaL_error(a->L, "%s: weight must be %d-d, got %d-d", a->fname, ndim, w->ndim);
    return w;
}

static int l_conv1d(lua_State *L)
{
    lm_array *x = lm_lua_check_array(L, 1);
    lm_nn_args a;
    lm_nn_args_read(L, &a, "conv1d", CONV, 2);
    lm_array *w = conv_weight(&a, 3);
    int64_t stride[2], dil[2], pad[4];
    lm_nn_pair(&a, C_STRIDE, 1, stride);
    lm_nn_pair(&a, C_DIL, 1, dil);
    conv_padding(&a, w, 1, stride, dil, pad);
    return lm_lua_push_array(L, lm_conv1d(x, w, lm_nn_tensor(&a, C_B, false), stride[0], pad, dil[0],
                                          lm_nn_int(&a, C_GROUPS, 1)));
}

static int l_conv2d(lua_State *L)
{
    lm_array *x = lm_lua_check_array(L, 1);
    lm_nn_args a;
    lm_nn_args_read(L, &a, "conv2d", CONV, 2);
    lm_array *w = conv_weight(&a, 4);
    int64_t stride[2], dil[2], pad[4];
    lm_nn_pair(&a, C_STRIDE, 1, stride);
    lm_nn_pair(&a, C_DIL, 1, dil);
    conv_padding(&a, w, 2, stride, dil, pad);
    return lm_lua_push_array(L, lm_conv2d(x, w, lm_nn_tensor(&a, C_B, false), stride, pad, dil,
                                          lm_nn_int(&a, C_GROUPS, 1)));
}

/* PyTorch's order here has groups before dilation */
enum { T_W, T_B, T_STRIDE, T_PAD, T_OUTPAD, T_GROUPS, T_DIL };
static const char *const CONVT[] = {"weight", "bias", "stride", "padding", "output_padding",
                                    "groups", "dilation", NULL};

static int l_conv_transpose2d(lua_State *L)
{
    lm_array *x = lm_lua_check_array(L, 1);
    lm_nn_args a;
    lm_nn_args_read(L, &a, "conv_transpose2d", CONVT, 2);
    lm_array *w = conv_weight(&a, 4);
    int64_t stride[2], pad[2], outpad[2], dil[2];
    lm_nn_pair(&a, T_STRIDE, 1, stride);
    lm_nn_pair(&a, T_PAD, 0, pad);
    lm_nn_pair(&a, T_OUTPAD, 0, outpad);
    lm_nn_pair(&a, T_DIL, 1, dil);
    return lm_lua_push_array(L, lm_conv_transpose2d(x, w, lm_nn_tensor(&a, T_B, false), stride, pad,
                                                    outpad, dil, lm_nn_int(&a, T_GROUPS, 1)));
}

/* ---- pooling and resampling ---- */

static void kernel_size(const lm_nn_args *a, int i, int64_t k[2])
{
    if (!lm_nn_has(a, i)) luaL_error(a->L, "%s: kernel_size is required", a->fname);
    lm_nn_pair(a, i, 1, k);
}

enum { MP_K, MP_STRIDE, MP_PAD, MP_DIL, MP_CEIL, MP_IDX };
static const char *const MAXPOOL[] = {"kernel_size", "stride", "padding", "dilation", "ceil_mode",
                                      "return_indices", NULL};

static int l_max_pool2d(lua_State *L)
{
    lm_array *x = lm_lua_check_array(L, 1);
    lm_nn_args a;
    lm_nn_args_read(L, &a, "max_pool2d", MAXPOOL, 2);
    int64_t k[2], stride[2], pad[2], dil[2];
    kernel_size(&a, MP_K, k);
    lm_nn_pair(&a, MP_STRIDE, 0, stride);
    lm_nn_pair(&a, MP_PAD, 0, pad);
    lm_nn_pair(&a, MP_DIL, 1, dil);
    if (lm_nn_bool(&a, MP_IDX, false))
        return luaL_error(L, "max_pool2d: return_indices=true is not supported");
    return lm_lua_push_array(L, lm_max_pool2d(x, k, lm_nn_has(&a, MP_STRIDE) ? stride : NULL, pad,
                                              dil, lm_nn_bool(&a, MP_CEIL, false)));
}

enum { AP_K, AP_STRIDE, AP_PAD, AP_CEIL, AP_COUNT, AP_DIV };
static const char *const AVGPOOL[] = {"kernel_size", "stride", "padding", "ceil_mode",
                                      "count_include_pad", "divisor_override", NULL};

static int l_avg_pool2d(lua_State *L)
{
    lm_array *x = lm_lua_check_array(L, 1);
    lm_nn_args a;
    lm_nn_args_read(L, &a, "avg_pool2d", AVGPOOL, 2);
    int64_t k[2], stride[2], pad[2];
    kernel_size(&a, AP_K, k);
    lm_nn_pair(&a, AP_STRIDE, 0, stride);
    lm_nn_pair(&a, AP_PAD, 0, pad);
    return lm_lua_push_array(L, lm_avg_pool2d(x, k, lm_nn_has(&a, AP_STRIDE) ? stride : NULL, pad,
                                              lm_nn_bool(&a, AP_CEIL, false),
                                              lm_nn_bool(&a, AP_COUNT, true),
                                              lm_nn_int(&a, AP_DIV, 0)));
}

static const char *const ADAPTIVE[] = {"output_size", NULL};

static int l_adaptive_avg_pool2d(lua_State *L)
{
    lm_array *x = lm_lua_check_array(L, 1);
    lm_nn_args a;
    lm_nn_args_read(L, &a, "adaptive_avg_pool2d", ADAPTIVE, 2);
    int64_t hw[2];
    if (!lm_nn_has(&a, 0)) return luaL_error(L, "adaptive_avg_pool2d: output_size is required");
    lm_nn_pair(&a, 0, 1, hw);
    return lm_lua_push_array(L, lm_adaptive_avg_pool2d(x, hw));
}

enum { UP_SIZE, UP_SCALE, UP_MODE, UP_ALIGN };
static const char *const UPSAMPLE[] = {"size", "scale_factor", "mode", "align_corners", NULL};

/* scale_factor: a number or {h, w} */
static void scale_factor(const lm_nn_args *a, double s[2])
{
    lua_State *L = a->L;
    int at = a->at[UP_SCALE];
    if (lua_type(L, at) == LUA_TNUMBER) {
        s[0] = s[1] = lua_tonumber(L, at);
        return;
    }
    if (!lua_istable(L, at) || lua_rawlen(L, at) != 2)
        luaL_error(L, "%s: scale_factor must be a number or {h, w}", a->fname);
    for (int k = 0; k < 2; k++) {
        lua_rawgeti(L, at, k + 1);
        if (lua_type(L, -1) != LUA_TNUMBER)
            luaL_error(L, "%s: scale_factor entry %d must be a number", a->fname, k + 1);
        s[k] = lua_tonumber(L, -1);
        lua_pop(L, 1);
    }
}

static int upsample(lua_State *L, const char *fname)
{
    lm_array *x = lm_lua_check_array(L, 1);
    lm_nn_args a;
    lm_nn_args_read(L, &a, fname, UPSAMPLE, 2);
    const char *m = lm_nn_string(&a, UP_MODE, "nearest");
    lm_upsample_mode mode = LM_UPSAMPLE_NEAREST;
    if (!strcmp(m, "bilinear")) mode = LM_UPSAMPLE_BILINEAR;
    else if (strcmp(m, "nearest"))
        return luaL_error(L, "%s: mode '%s' is not supported (nearest, bilinear)", fname, m);
    if (mode == LM_UPSAMPLE_NEAREST && lm_nn_has(&a, UP_ALIGN))
        return luaL_error(L, "%s: align_corners applies to mode 'bilinear' only", fname);
    if (lm_nn_has(&a, UP_SIZE) == lm_nn_has(&a, UP_SCALE))
        return luaL_error(L, "%s: give exactly one of size and scale_factor", fname);
    int64_t size[2];
    double scale[2];
    if (lm_nn_has(&a, UP_SIZE)) lm_nn_pair(&a, UP_SIZE, 0, size);
    else scale_factor(&a, scale);
    return lm_lua_push_array(L, lm_upsample(x, lm_nn_has(&a, UP_SIZE) ? size : NULL,
                                            lm_nn_has(&a, UP_SCALE) ? scale : NULL, mode,
                                            lm_nn_bool(&a, UP_ALIGN, false)));
}

static int l_upsample(lua_State *L) { return upsample(L, "upsample"); }
static int l_interpolate(lua_State *L) { return upsample(L, "interpolate"); }

static const char *const SHUFFLE[] = {"upscale_factor", NULL};
static const char *const UNSHUFFLE[] = {"downscale_factor", NULL};

static int shuffle(lua_State *L, const char *fname, const char *const *names,
                   lm_array *(*fn)(lm_array *, int64_t))
{
    lm_array *x = lm_lua_check_array(L, 1);
    lm_nn_args a;
    lm_nn_args_read(L, &a, fname, names, 2);
    if (!lm_nn_has(&a, 0)) return luaL_error(L, "%s: %s is required", fname, names[0]);
    return lm_lua_push_array(L, fn(x, lm_nn_int(&a, 0, 1)));
}

static int l_pixel_shuffle(lua_State *L) { return shuffle(L, "pixel_shuffle", SHUFFLE, lm_pixel_shuffle); }
static int l_pixel_unshuffle(lua_State *L)
{
    return shuffle(L, "pixel_unshuffle", UNSHUFFLE, lm_pixel_unshuffle);
}

/* ---- softmax and normalization ---- */

static const char *const DIM[] = {"dim|axis", NULL};

static int softmax(lua_State *L, const char *fname, lm_array *(*fn)(lm_array *, int))
{
    lm_array *x = lm_lua_check_array(L, 1);
    lm_nn_args a;
    lm_nn_args_read(L, &a, fname, DIM, 2);
    return lm_lua_push_array(L, fn(x, lm_nn_axis(&a, 0, x->ndim, x->ndim - 1)));
}

static int l_softmax(lua_State *L) { return softmax(L, "softmax", lm_softmax); }
static int l_log_softmax(lua_State *L) { return softmax(L, "log_softmax", lm_log_softmax); }

/* normalized_shape (an integer n = {n}, or a table) must be x's trailing
 * shape; absent, it is the weight's shape, else the last axis. */
static int norm_axes(const lm_nn_args *a, int i, lm_array *x, lm_array *w)
{
    int64_t shape[LM_MAX_DIMS];
    int n = lm_nn_ints(a, i, shape, LM_MAX_DIMS);
    if (!n) return w ? w->ndim : 1;
    bool ok = n <= x->ndim;
    for (int d = 0; ok && d < n; d++) ok = shape[d] == x->shape[x->ndim - n + d];
    if (!ok) {
        char sx[128];
        lm_shape_str(sx, sizeof sx, x->ndim, x->shape);
        luaL_error(a->L, "%s: normalized_shape does not match the last %d axes of the input %s",
                   a->fname, n, sx);
    }
    return n;
}

static const char *const LAYER_NORM[] = {"normalized_shape", "weight", "bias", "eps", NULL};

static int l_layer_norm(lua_State *L)
{
    lm_array *x = lm_lua_check_array(L, 1);
    lm_nn_args a;
    lm_nn_args_read(L, &a, "layer_norm", LAYER_NORM, 2);
    lm_array *w = lm_nn_tensor(&a, 1, false), *b = lm_nn_tensor(&a, 2, false);
    int n = norm_axes(&a, 0, x, w);
    return lm_lua_push_array(L, lm_layer_norm(x, n, w, b, lm_nn_num(&a, 3, 1e-5)));
}

/* PyTorch's rms_norm default eps: the dtype's machine epsilon */
static double dtype_eps(lm_dtype dt)
{
    switch (dt) {
    case LM_F16: return 0x1p-10;
    case LM_BF16: return 0x1p-7;
    case LM_F64: return DBL_EPSILON;
    default: return FLT_EPSILON;
    }
}

static const char *const RMS_NORM[] = {"normalized_shape", "weight", "eps", NULL};

static int l_rms_norm(lua_State *L)
{
    lm_array *x = lm_lua_check_array(L, 1);
    lm_nn_args a;
    lm_nn_args_read(L, &a, "rms_norm", RMS_NORM, 2);
    lm_array *w = lm_nn_tensor(&a, 1, false);
    int n = norm_axes(&a, 0, x, w);
    return lm_lua_push_array(L, lm_rms_norm(x, n, w, lm_nn_num(&a, 2, dtype_eps(x->dtype))));
}

static const char *const GROUP_NORM[] = {"num_groups", "weight", "bias", "eps", NULL};

static int l_group_norm(lua_State *L)
{
    lm_array *x = lm_lua_check_array(L, 1);
    lm_nn_args a;
    lm_nn_args_read(L, &a, "group_norm", GROUP_NORM, 2);
    if (!lm_nn_has(&a, 0)) return luaL_error(L, "group_norm: num_groups is required");
    return lm_lua_push_array(L, lm_group_norm(x, lm_nn_int(&a, 0, 1), lm_nn_tensor(&a, 1, false),
                                              lm_nn_tensor(&a, 2, false), lm_nn_num(&a, 3, 1e-5)));
}

enum { BN_MEAN, BN_VAR, BN_W, BN_B, BN_TRAIN, BN_MOM, BN_EPS };
static const char *const BATCH_NORM[] = {"running_mean", "running_var", "weight", "bias", "training",
                                         "momentum", "eps", NULL};

static int l_batch_norm(lua_State *L)
{
    lm_array *x = lm_lua_check_array(L, 1);
    lm_nn_args a;
    lm_nn_args_read(L, &a, "batch_norm", BATCH_NORM, 2);
    if (lm_nn_bool(&a, BN_TRAIN, false))
        return luaL_error(L, "batch_norm: training=true is not supported (inference form only)");
    lm_nn_num(&a, BN_MOM, 0.1);        /* checked; only training would use it */
    return lm_lua_push_array(L, lm_batch_norm(x, lm_nn_tensor(&a, BN_MEAN, true),
                                              lm_nn_tensor(&a, BN_VAR, true), lm_nn_tensor(&a, BN_W, false),
                                              lm_nn_tensor(&a, BN_B, false), lm_nn_num(&a, BN_EPS, 1e-5)));
}

static const char *const NORMALIZE[] = {"p", "dim|axis", "eps", NULL};

/* F.normalize: p must be 2; dim defaults to PyTorch's 1, our axis 2 */
static int l_normalize(lua_State *L)
{
    lm_array *x = lm_lua_check_array(L, 1);
    lm_nn_args a;
    lm_nn_args_read(L, &a, "normalize", NORMALIZE, 2);
    if (lm_nn_num(&a, 0, 2) != 2) return luaL_error(L, "normalize: only p=2 is supported");
    int dflt = x->ndim >= 2 ? 1 : 0;
    return lm_lua_push_array(L, lm_l2_normalize(x, lm_nn_axis(&a, 1, x->ndim, dflt),
                                                lm_nn_num(&a, 2, 1e-12)));
}

static const char *const L2_NORMALIZE[] = {"dim|axis", "eps", NULL};

static int l_l2_normalize(lua_State *L)
{
    lm_array *x = lm_lua_check_array(L, 1);
    lm_nn_args a;
    lm_nn_args_read(L, &a, "l2_normalize", L2_NORMALIZE, 2);
    return lm_lua_push_array(L, lm_l2_normalize(x, lm_nn_axis(&a, 0, x->ndim, x->ndim - 1),
                                                lm_nn_num(&a, 1, 1e-12)));
}

/* ---- linear layers and activations ---- */

static const char *const LINEAR[] = {"weight", "bias", NULL};

static int l_linear(lua_State *L)
{
    lm_array *x = lm_lua_check_array(L, 1);
    lm_nn_args a;
    lm_nn_args_read(L, &a, "linear", LINEAR, 2);
    return lm_lua_push_array(L, lm_linear(x, lm_nn_tensor(&a, 0, true), lm_nn_tensor(&a, 1, false)));
}

static const char *const GATE[] = {"up", NULL};

static int gated(lua_State *L, const char *fname, lm_array *(*fn)(lm_array *, lm_array *))
{
    lm_array *g = lm_lua_check_array(L, 1);
    lm_nn_args a;
    lm_nn_args_read(L, &a, fname, GATE, 2);
    return lm_lua_push_array(L, fn(g, lm_nn_tensor(&a, 0, false)));
}

static int l_swiglu(lua_State *L) { return gated(L, "swiglu", lm_swiglu); }
static int l_geglu(lua_State *L) { return gated(L, "geglu", lm_geglu); }

static const char *const LEAKY[] = {"negative_slope", NULL};

static int l_leaky_relu(lua_State *L)
{
    lm_array *x = lm_lua_check_array(L, 1);
    lm_nn_args a;
    lm_nn_args_read(L, &a, "leaky_relu", LEAKY, 2);
    return lm_lua_push_array(L, lm_leaky_relu(x, lm_nn_num(&a, 0, 0.01)));
}

/* ---- the tables ---- */

#define SEE_OPTS "  Options may be positional (PyTorch's order) or in a table; an unknown name is an error."

const lm_lua_func lm_lua_nn_methods[] = {
    {"softmax", l_softmax, "t:softmax([dim=-1]) -> tensor\nexp(t) / sum(exp(t)) along dim, computed "
     "stably (max subtracted).  Also lm.softmax(x, dim) and {dim=} (or {axis=})."},
    {"log_softmax", l_log_softmax, "t:log_softmax([dim=-1]) -> tensor\nlog(softmax(t)) along dim, "
     "computed stably.  Also lm.log_softmax(x, dim)."},
    {"leaky_relu", l_leaky_relu, "t:leaky_relu([negative_slope=0.01]) -> tensor\nt where t >= 0, "
     "negative_slope * t below (NaN stays NaN).  Also lm.leaky_relu(x, slope)."},
    {"l2_normalize", l_l2_normalize, "t:l2_normalize([dim=-1], [eps=1e-12]) -> tensor\n"
     "t / max(||t||_2 along dim, eps).  lm.normalize is PyTorch's F.normalize (default dim 2)."},
    {NULL, NULL, NULL},
};

const lm_lua_func lm_lua_nn_funcs[] = {
    {"conv1d", l_conv1d, "lm.conv1d(x, weight, [bias], {stride=1, padding=0, dilation=1, groups=1}) "
     "-> tensor\nF.conv1d: x [N, C, L], weight [O, C/groups, K], bias [O].  padding is an integer, "
     "{left, right}, 'same' (stride 1) or 'valid'." SEE_OPTS},
    {"conv2d", l_conv2d, "lm.conv2d(x, weight, [bias], {stride=1, padding=0, dilation=1, groups=1}) "
     "-> tensor\nF.conv2d: x [N, C, H, W], weight [O, C/groups, KH, KW], bias [O].  stride and "
     "dilation are an integer or {h, w}; padding an integer, {h, w}, {top, bottom, left, right}, "
     "'same' (stride 1) or 'valid'.  Zero padding; f16/bf16 weights with f32 x are fine." SEE_OPTS},
    {"conv_transpose2d", l_conv_transpose2d, "lm.conv_transpose2d(x, weight, [bias], {stride=1, "
     "padding=0, output_padding=0, groups=1, dilation=1}) -> tensor\nF.conv_transpose2d: weight "
     "[Cin, Cout/groups, KH, KW]; each size is an integer or {h, w}." SEE_OPTS},
    {"max_pool2d", l_max_pool2d, "lm.max_pool2d(x, kernel_size, {stride=kernel_size, padding=0, "
     "dilation=1, ceil_mode=false}) -> tensor\nF.max_pool2d on x [N, C, H, W]; sizes are an integer "
     "or {h, w}; padding counts as -inf, NaN propagates; no return_indices." SEE_OPTS},
    {"avg_pool2d", l_avg_pool2d, "lm.avg_pool2d(x, kernel_size, {stride=kernel_size, padding=0, "
     "ceil_mode=false, count_include_pad=true, divisor_override=nil}) -> tensor\nF.avg_pool2d on x "
     "[N, C, H, W]." SEE_OPTS},
    {"adaptive_avg_pool2d", l_adaptive_avg_pool2d, "lm.adaptive_avg_pool2d(x, output_size) -> tensor\n"
     "F.adaptive_avg_pool2d: x [N, C, H, W] averaged to output_size (an integer or {h, w})."},
    {"upsample", l_upsample, "lm.upsample(x, {size=, scale_factor=, mode='nearest', "
     "align_corners=false}) -> tensor\nF.interpolate on x [N, C, H, W]: exactly one of size (an "
     "integer or {h, w}) and scale_factor (a number or {h, w}); mode 'nearest' (PyTorch's legacy "
     "nearest) or 'bilinear'; align_corners for bilinear only.  With a scale the output is "
     "floor(H * scale)." SEE_OPTS},
    {"interpolate", l_interpolate, "lm.interpolate(x, {size=, scale_factor=, mode='nearest', "
     "align_corners=false}) -> tensor\nAlias of lm.upsample (PyTorch's name, F.interpolate)."},
    {"pixel_shuffle", l_pixel_shuffle, "lm.pixel_shuffle(x, upscale_factor) -> tensor\n"
     "Depth to space: [N, C*r*r, H, W] -> [N, C, H*r, W*r]."},
    {"pixel_unshuffle", l_pixel_unshuffle, "lm.pixel_unshuffle(x, downscale_factor) -> tensor\n"
     "Space to depth: [N, C, H*r, W*r] -> [N, C*r*r, H, W]."},
    {"layer_norm", l_layer_norm, "lm.layer_norm(x, [normalized_shape], [weight], [bias], [eps=1e-5]) "
     "-> tensor\nF.layer_norm over the last axes: normalized_shape is their shape (a table, or an "
     "integer n for {n}); when nil, the weight's shape or the last axis.  Biased variance." SEE_OPTS},
    {"rms_norm", l_rms_norm, "lm.rms_norm(x, [normalized_shape], [weight], [eps]) -> tensor\n"
     "x * rsqrt(mean(x^2 over the last axes) + eps) * weight (F.rms_norm).  eps defaults to the "
     "dtype's machine epsilon, as PyTorch; models usually pass theirs (LLaMA, Flux: 1e-6)." SEE_OPTS},
    {"group_norm", l_group_norm, "lm.group_norm(x, num_groups, [weight], [bias], [eps=1e-5]) -> tensor\n"
     "F.group_norm: x [N, C, ...], weight and bias [C]." SEE_OPTS},
    {"batch_norm", l_batch_norm, "lm.batch_norm(x, running_mean, running_var, [weight], [bias], "
     "{eps=1e-5}) -> tensor\nF.batch_norm(training=False): (x - mean) / sqrt(var + eps) * weight + "
     "bias over axis 2 of x [N, C, ...].  training=true is an error; momentum is accepted and "
     "unused." SEE_OPTS},
    {"normalize", l_normalize, "lm.normalize(x, {p=2, dim=2, eps=1e-12}) -> tensor\nF.normalize: "
     "x / max(||x||_2 along dim, eps); dim defaults to 2 (PyTorch's dim=1, the channels; 1 for a "
     "1-d x).  Only p = 2." SEE_OPTS},
    {"linear", l_linear, "lm.linear(x, weight, [bias]) -> tensor\nF.linear: x [..., in] @ "
     "weight[out, in]^T + bias[out]."},
    {"swiglu", l_swiglu, "lm.swiglu(gate, [up]) -> tensor\nsilu(gate) * up; with one tensor its last "
     "axis is split in halves, the first half being the gate."},
    {"geglu", l_geglu, "lm.geglu(gate, [up]) -> tensor\ngelu(gate) * up (exact erf GELU); with one "
     "tensor the first half of the last axis is the gate (diffusers' GEGLU gates with the second "
     "half: pass the halves explicitly)."},
    {NULL, NULL, NULL},
};
