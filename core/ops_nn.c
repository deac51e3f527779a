/* ops_nn.c - builders of the neural-network ops (see ops_nn.h for the
 * params each node carries).  Compositions (linear, gated activations,
 * embedding, batch_norm, l2_normalize, pixel shuffle, timestep embedding,
 * RoPE angle tables) are built from other builders here; everything else
 * becomes one LM_CLASS_NN node. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "ops_nn.h"

#define DESC(buf, a) lm_desc(buf, sizeof buf, (a))
#define SHAPE(buf, a) lm_shape_str(buf, sizeof buf, (a)->ndim, (a)->shape)

/* The dtype a float op computes in for input dtype t (integers -> f32). */
static lm_dtype float_of(lm_dtype t) { return lm_dtype_is_float(t) ? t : LM_F32; }

/* x cast to its float dtype (a new reference). */
static lm_array *as_float(lm_array *x) { return x ? lm_cast(x, float_of(x->dtype)) : NULL; }

static void release_all(lm_array **v, int n)
{
    for (int i = 0; i < n; i++) lm_array_release(v[i]);
}

/* ================================================================ conv */

static bool check_ndim(const char *op, const char *what, const lm_array *a, int ndim)
{
    if (a->ndim == ndim) return true;
    char s[160];
    lm_error_set(LM_ERR_SHAPE, "%s: %s must have %d dimensions, got %s", op, what, ndim, DESC(s, a));
    return false;
}

static bool check_float(const char *op, const char *what, const lm_array *a)
{
    if (lm_dtype_is_float(a->dtype)) return true;
    char s[160];
    lm_error_set(LM_ERR_DTYPE, "%s: %s must be a float tensor, got %s", op, what, DESC(s, a));
    return false;
}

static bool check_bias(const char *op, const lm_array *b, int64_t n)
{
    if (!b) return true;
    if (b->ndim != 1 || b->shape[0] != n) {
        char s[160];
        lm_error_set(LM_ERR_SHAPE, "%s: bias must have shape [%lld], got %s", op, (long long)n, DESC(s, b));
        return false;
    }
    return check_float(op, "bias", b);
}

/* Kernel sizes, strides, paddings and dilations are at most 2^31, so that
 * sums of them with dimensions (at most LM_MAX_SPAN) cannot overflow; their
 * products with dimensions go through lm_mul64. */
#define NN_PARAM_MAX ((int64_t)1 << 31)

static bool check_positive(const char *op, const char *what, const int64_t *v, int n, int64_t min)
{
    for (int i = 0; i < n; i++)
        if (v[i] > NN_PARAM_MAX) {
            lm_error_set(LM_ERR_ARG, "%s: %s must be at most %lld, got %lld", op, what,
                         (long long)NN_PARAM_MAX, (long long)v[i]);
            return false;
        } else if (v[i] < min) {
            lm_error_set(LM_ERR_ARG, "%s: %s must be >= %lld, got %lld", op, what, (long long)min,
                         (long long)v[i]);
            return false;
        }
    return true;
}

/* d * (k - 1) + 1, the extent of a dilated kernel; false (with a message)
 * past LM_MAX_SPAN, which no input can hold. */
static bool dilated(const char *op, int64_t d, int64_t k, int64_t *out)
{
    if (lm_mul64(d, k - 1, out) && *out < LM_MAX_SPAN) {
        *out += 1;
        return true;
    }
    lm_error_set(LM_ERR_SHAPE, "%s: kernel %lld with dilation %lld is too large", op, (long long)k,
                 (long long)d);
    return false;
}

/* The shared conv2d validation and node; `op` names the user's function. */
static lm_array *conv2d_node(const char *op, lm_array *x, lm_array *w, lm_array *b,
                             const int64_t stride[2], const int64_t pad[4], const int64_t dil[2],
                             int64_t groups)
{
    char s1[160], s2[160];
    if (!check_ndim(op, "input", x, 4) || !check_ndim(op, "weight", w, 4) ||
        !check_float(op, "weight", w) || !check_positive(op, "stride", stride, 2, 1) ||
        !check_positive(op, "dilation", dil, 2, 1) || !check_positive(op, "padding", pad, 4, 0))
        return NULL;
    int64_t C = x->shape[1], O = w->shape[0];
    int64_t wc;
    if (groups < 1 || C % groups || O % groups || !lm_mul64(w->shape[1], groups, &wc) || wc != C) {
        lm_error_set(LM_ERR_SHAPE, "%s: groups=%lld do not fit input %s and weight %s "
                     "(need C %% groups == 0, O %% groups == 0, weight.shape[1] == C/groups)",
                     op, (long long)groups, DESC(s1, x), DESC(s2, w));
        return NULL;
    }
    if (!check_bias(op, b, O)) return NULL;
    int64_t eh, ew;
    if (!dilated(op, dil[0], w->shape[2], &eh) || !dilated(op, dil[1], w->shape[3], &ew)) return NULL;
    int64_t ph = x->shape[2] + pad[0] + pad[1], pw = x->shape[3] + pad[2] + pad[3];
    if (eh > ph || ew > pw) {
        lm_error_set(LM_ERR_SHAPE, "%s: kernel %lldx%lld (dilated) is larger than the padded input "
                     "%lldx%lld (input %s, weight %s)", op, (long long)eh, (long long)ew,
                     (long long)ph, (long long)pw, DESC(s1, x), DESC(s2, w));
        return NULL;
    }
    int64_t shape[4] = {x->shape[0], O, (ph - eh) / stride[0] + 1, (pw - ew) / stride[1] + 1};
    lm_params p = {0};
    p.i[0] = stride[0]; p.i[1] = stride[1];
    p.i[2] = pad[0]; p.i[3] = pad[2]; p.i[4] = pad[1]; p.i[5] = pad[3];
    p.i[6] = dil[0]; p.i[7] = dil[1];
    p.i[8] = groups;
    p.i[9] = b != NULL;
    lm_array *xf = as_float(x);
    lm_array *in[3] = {xf, w, b};
    lm_array *r = xf ? lm_node_new(LM_OP_CONV, xf->dtype, 4, shape, b ? 3 : 2, in, &p, NULL) : NULL;
    lm_array_release(xf);
    return r;
}

lm_array *lm_conv2d(lm_array *x, lm_array *w, lm_array *b, const int64_t stride[2],
                    const int64_t pad[4], const int64_t dilation[2], int64_t groups)
{
    if (!x || !w) return NULL;
    static const int64_t one[2] = {1, 1}, zero[4] = {0, 0, 0, 0};
    return conv2d_node("conv2d", x, w, b, stride ? stride : one, pad ? pad : zero,
                       dilation ? dilation : one, groups);
}

lm_array *lm_conv1d(lm_array *x, lm_array *w, lm_array *b, int64_t stride,
                    const int64_t pad[2], int64_t dilation, int64_t groups)
{
    if (!x || !w) return NULL;
    if (!check_ndim("conv1d", "input", x, 3) || !check_ndim("conv1d", "weight", w, 3)) return NULL;
    int64_t st[2] = {1, stride}, dl[2] = {1, dilation};
    int64_t pd[4] = {0, 0, pad ? pad[0] : 0, pad ? pad[1] : 0};
    lm_array *x4 = lm_unsqueeze(x, 2), *w4 = lm_unsqueeze(w, 2);
    lm_array *r = x4 && w4 ? conv2d_node("conv1d", x4, w4, b, st, pd, dl, groups) : NULL;
    lm_array *out = r ? lm_squeeze(r, 2) : NULL;
    lm_array_release(x4);
    lm_array_release(w4);
    lm_array_release(r);
    return out;
}

lm_array *lm_conv_transpose2d(lm_array *x, lm_array *w, lm_array *b, const int64_t stride[2],
                              const int64_t pad[2], const int64_t output_padding[2],
                              const int64_t dilation[2], int64_t groups)
{
    if (!x || !w) return NULL;
    const char *op = "conv_transpose2d";
    static const int64_t one[2] = {1, 1}, zero[2] = {0, 0};
    const int64_t *st = stride ? stride : one, *pd = pad ? pad : zero;
    const int64_t *op_ = output_padding ? output_padding : zero, *dl = dilation ? dilation : one;
    char s1[160], s2[160];
    if (!check_ndim(op, "input", x, 4) || !check_ndim(op, "weight", w, 4) ||
        !check_float(op, "weight", w) || !check_positive(op, "stride", st, 2, 1) ||
        !check_positive(op, "dilation", dl, 2, 1) || !check_positive(op, "padding", pd, 2, 0) ||
        !check_positive(op, "output_padding", op_, 2, 0))
        return NULL;
    int64_t Cin = x->shape[1];
    if (groups < 1 || Cin % groups || w->shape[0] != Cin) {
        lm_error_set(LM_ERR_SHAPE, "%s: groups=%lld do not fit input %s and weight %s "
                     "(need weight.shape[0] == C and C %% groups == 0)",
                     op, (long long)groups, DESC(s1, x), DESC(s2, w));
        return NULL;
    }
    if (op_[0] >= (st[0] > dl[0] ? st[0] : dl[0]) || op_[1] >= (st[1] > dl[1] ? st[1] : dl[1])) {
        lm_error_set(LM_ERR_ARG, "%s: output_padding (%lld, %lld) must be smaller than stride or dilation",
                     op, (long long)op_[0], (long long)op_[1]);
        return NULL;
    }
    int64_t Cout, oh, ow, eh, ew;
    if (!lm_mul64(w->shape[1], groups, &Cout)) {
        lm_error_set(LM_ERR_SHAPE, "%s: groups=%lld times weight %s overflows", op, (long long)groups,
                     DESC(s2, w));
        return NULL;
    }
    if (!check_bias(op, b, Cout)) return NULL;
    if (!dilated(op, dl[0], w->shape[2], &eh) || !dilated(op, dl[1], w->shape[3], &ew)) return NULL;
    /* (in - 1) * stride - 2 * pad + extent + output_padding, each term checked */
    if (!lm_mul64(x->shape[2] - 1, st[0], &oh) || !lm_add64(oh, eh + op_[0] - 2 * pd[0], &oh) ||
        !lm_mul64(x->shape[3] - 1, st[1], &ow) || !lm_add64(ow, ew + op_[1] - 2 * pd[1], &ow)) {
        lm_error_set(LM_ERR_SHAPE, "%s: output size of input %s, weight %s overflows", op, DESC(s1, x),
                     DESC(s2, w));
        return NULL;
    }
    if (oh <= 0 || ow <= 0) {
        lm_error_set(LM_ERR_SHAPE, "%s: padding leaves an empty output (%lldx%lld) for input %s, weight %s",
                     op, (long long)oh, (long long)ow, DESC(s1, x), DESC(s2, w));
        return NULL;
    }
    int64_t shape[4] = {x->shape[0], Cout, oh, ow};
    lm_params p = {0};
    p.i[0] = st[0]; p.i[1] = st[1]; p.i[2] = pd[0]; p.i[3] = pd[1];
    p.i[4] = op_[0]; p.i[5] = op_[1]; p.i[6] = dl[0]; p.i[7] = dl[1];
    p.i[8] = groups; p.i[9] = b != NULL;
    lm_array *xf = as_float(x);
    lm_array *in[3] = {xf, w, b};
    lm_array *r = xf ? lm_node_new(LM_OP_CONV_TRANSPOSE, xf->dtype, 4, shape, b ? 3 : 2, in, &p, NULL) : NULL;
    lm_array_release(xf);
    return r;
}

/* ============================================================= pooling */

/* PyTorch's pooling_output_shape, with its checks. */
static bool pool_out(const char *op, const lm_array *x, int axis, int64_t k, int64_t s, int64_t p,
                     int64_t d, bool ceil_mode, int64_t *out)
{
    int64_t in = x->shape[axis], ek;
    char s1[160];
    if (!dilated(op, d, k, &ek)) return false;
    if (p * 2 > k) {
        lm_error_set(LM_ERR_ARG, "%s: padding %lld must be at most half the kernel %lld", op,
                     (long long)p, (long long)k);
        return false;
    }
    int64_t num = in + 2 * p - ek + (ceil_mode ? s - 1 : 0);
    if (num < 0) {
        lm_error_set(LM_ERR_SHAPE, "%s: kernel %lld (dilated %lld) is larger than the padded input %s",
                     op, (long long)k, (long long)ek, DESC(s1, x));
        return false;
    }
    int64_t o = num / s + 1;
    if (ceil_mode && (o - 1) * s >= in + p) o--;
    *out = o;
    return true;
}

static lm_array *pool_node(lm_op opc, const char *op, lm_array *x, const int64_t kernel[2],
                           const int64_t stride[2], const int64_t pad[2], const int64_t dilation[2],
                           bool ceil_mode, bool count_include_pad, int64_t divisor)
{
    if (!x) return NULL;
    static const int64_t one[2] = {1, 1}, zero[2] = {0, 0};
    const int64_t *st = stride ? stride : kernel, *pd = pad ? pad : zero, *dl = dilation ? dilation : one;
    if (!check_ndim(op, "input", x, 4) || !check_positive(op, "kernel", kernel, 2, 1) ||
        !check_positive(op, "stride", st, 2, 1) || !check_positive(op, "dilation", dl, 2, 1) ||
        !check_positive(op, "padding", pd, 2, 0))
        return NULL;
    int64_t shape[4] = {x->shape[0], x->shape[1], 0, 0};
    if (!pool_out(op, x, 2, kernel[0], st[0], pd[0], dl[0], ceil_mode, &shape[2]) ||
        !pool_out(op, x, 3, kernel[1], st[1], pd[1], dl[1], ceil_mode, &shape[3]))
        return NULL;
    lm_params p = {0};
    p.i[0] = kernel[0]; p.i[1] = kernel[1]; p.i[2] = st[0]; p.i[3] = st[1];
    p.i[4] = pd[0]; p.i[5] = pd[1]; p.i[6] = dl[0]; p.i[7] = dl[1];
    p.i[8] = ceil_mode; p.i[9] = count_include_pad; p.i[10] = divisor;
    lm_array *xf = opc == LM_OP_AVG_POOL ? as_float(x) : lm_array_retain(x);
    if (xf && xf->dtype == LM_BOOL) {
        lm_array_release(xf);
        xf = lm_cast(x, LM_F32);
    }
    lm_array *r = xf ? lm_node_new(opc, xf->dtype, 4, shape, 1, &xf, &p, NULL) : NULL;
    lm_array_release(xf);
    return r;
}

lm_array *lm_max_pool2d(lm_array *x, const int64_t kernel[2], const int64_t stride[2],
                        const int64_t pad[2], const int64_t dilation[2], bool ceil_mode)
{
    return pool_node(LM_OP_MAX_POOL, "max_pool2d", x, kernel, stride, pad, dilation, ceil_mode, false, 0);
}

lm_array *lm_avg_pool2d(lm_array *x, const int64_t kernel[2], const int64_t stride[2],
                        const int64_t pad[2], bool ceil_mode, bool count_include_pad,
                        int64_t divisor_override)
{
    if (divisor_override < 0) {
        lm_error_set(LM_ERR_ARG, "avg_pool2d: divisor_override must be positive (0 = none)");
        return NULL;
    }
    return pool_node(LM_OP_AVG_POOL, "avg_pool2d", x, kernel, stride, pad, NULL, ceil_mode,
                     count_include_pad, divisor_override);
}

lm_array *lm_adaptive_avg_pool2d(lm_array *x, const int64_t out_hw[2])
{
    if (!x) return NULL;
    if (!check_ndim("adaptive_avg_pool2d", "input", x, 4) ||
        !check_positive("adaptive_avg_pool2d", "output size", out_hw, 2, 1))
        return NULL;
    int64_t shape[4] = {x->shape[0], x->shape[1], out_hw[0], out_hw[1]};
    lm_params p = {0};
    p.i[0] = out_hw[0];
    p.i[1] = out_hw[1];
    lm_array *xf = as_float(x);
    lm_array *r = xf ? lm_node_new(LM_OP_ADAPTIVE_AVG_POOL, xf->dtype, 4, shape, 1, &xf, &p, NULL) : NULL;
    lm_array_release(xf);
    return r;
}

lm_array *lm_upsample(lm_array *x, const int64_t size[2], const double scale[2],
                      lm_upsample_mode mode, bool align_corners)
{
    if (!x) return NULL;
    const char *op = "upsample";
    if (!check_ndim(op, "input", x, 4)) return NULL;
    if (!size == !scale) {
        lm_error_set(LM_ERR_ARG, "%s: give exactly one of size and scale", op);
        return NULL;
    }
    if (mode != LM_UPSAMPLE_NEAREST && mode != LM_UPSAMPLE_BILINEAR) {
        lm_error_set(LM_ERR_ARG, "%s: unknown mode %d", op, (int)mode);
        return NULL;
    }
    int64_t shape[4] = {x->shape[0], x->shape[1], 0, 0};
    lm_params p = {0};
    for (int a = 0; a < 2; a++) {
        int64_t in = x->shape[2 + a];
        if (scale) {
            if (!(scale[a] > 0) || !isfinite(scale[a])) {
                lm_error_set(LM_ERR_ARG, "%s: scale factors must be positive, got %g", op, scale[a]);
                return NULL;
            }
            double o = floor((double)in * scale[a]);
            if (o > (double)LM_MAX_SPAN) {
                lm_error_set(LM_ERR_SHAPE, "%s: scale factor %g makes a too large output", op, scale[a]);
                return NULL;
            }
            shape[2 + a] = (int64_t)o;
            p.f[a] = 1.0 / scale[a];
            p.f[2 + a] = scale[a];             /* exact, for lm_nn_rebuild */
        } else {
            shape[2 + a] = size[a];
            p.f[a] = size[a] > 0 ? (double)in / (double)size[a] : 0;
        }
        if (shape[2 + a] <= 0 || in <= 0) {
            char s[160];
            lm_error_set(LM_ERR_SHAPE, "%s: input %s and output %lldx%lld must be non-empty", op,
                         DESC(s, x), (long long)shape[2], (long long)shape[3]);
            return NULL;
        }
    }
    p.i[0] = mode;
    p.i[1] = align_corners;
    p.i[2] = scale != NULL;            /* for lm_nn_rebuild: what the caller asked for */
    p.i[3] = size ? size[0] : 0;
    p.i[4] = size ? size[1] : 0;
    lm_array *xf = mode == LM_UPSAMPLE_BILINEAR ? as_float(x) : lm_array_retain(x);
    lm_array *r = xf ? lm_node_new(LM_OP_UPSAMPLE, xf->dtype, 4, shape, 1, &xf, &p, NULL) : NULL;
    lm_array_release(xf);
    return r;
}

/* pixel shuffle as reshape -> permute -> reshape (the last one copies) */
static lm_array *shuffle(const char *op, lm_array *x, int64_t r, bool down)
{
    if (!x) return NULL;
    char s[160];
    if (!check_ndim(op, "input", x, 4)) return NULL;
    if (r < 1) {
        lm_error_set(LM_ERR_ARG, "%s: factor must be >= 1, got %lld", op, (long long)r);
        return NULL;
    }
    int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    if (down ? (H % r || W % r) : C % (r * r)) {
        lm_error_set(LM_ERR_SHAPE, down ? "%s: height and width of %s must be divisible by %lld"
                                        : "%s: channels of %s must be divisible by %lld^2",
                     op, DESC(s, x), (long long)r);
        return NULL;
    }
    lm_array *a, *b, *out;
    if (!down) {
        int64_t s6[6] = {N, C / (r * r), r, r, H, W}, s4[4] = {N, C / (r * r), H * r, W * r};
        int perm[6] = {0, 1, 4, 2, 5, 3};
        a = lm_reshape(x, 6, s6);
        b = lm_permute(a, perm);
        out = lm_reshape(b, 4, s4);
    } else {
        int64_t s6[6] = {N, C, H / r, r, W / r, r}, s4[4] = {N, C * r * r, H / r, W / r};
        int perm[6] = {0, 1, 3, 5, 2, 4};
        a = lm_reshape(x, 6, s6);
        b = lm_permute(a, perm);
        out = lm_reshape(b, 4, s4);
    }
    lm_array_release(a);
    lm_array_release(b);
    return out;
}

lm_array *lm_pixel_shuffle(lm_array *x, int64_t r) { return shuffle("pixel_shuffle", x, r, false); }
lm_array *lm_pixel_unshuffle(lm_array *x, int64_t r) { return shuffle("pixel_unshuffle", x, r, true); }

/* ======================================================= normalization */

static lm_array *softmax_node(lm_op opc, const char *op, lm_array *x, int axis)
{
    if (!x) return NULL;
    if (x->ndim == 0) {
        lm_error_set(LM_ERR_SHAPE, "%s: needs at least one dimension", op);
        return NULL;
    }
    if (!lm_axis_norm(op, &axis, x->ndim)) return NULL;
    lm_params p = {0};
    p.i[0] = axis;
    lm_array *xf = as_float(x);
    lm_array *r = xf ? lm_node_new(opc, xf->dtype, x->ndim, x->shape, 1, &xf, &p, NULL) : NULL;
    lm_array_release(xf);
    return r;
}

lm_array *lm_softmax(lm_array *x, int axis) { return softmax_node(LM_OP_SOFTMAX, "softmax", x, axis); }
lm_array *lm_log_softmax(lm_array *x, int axis)
{
    return softmax_node(LM_OP_LOG_SOFTMAX, "log_softmax", x, axis);
}

/* w (if any) must have exactly the shape of x's last naxes axes */
static bool check_affine(const char *op, const char *what, const lm_array *x, int naxes, const lm_array *w)
{
    if (!w) return true;
    bool ok = w->ndim == naxes;
    for (int d = 0; ok && d < naxes; d++) ok = w->shape[d] == x->shape[x->ndim - naxes + d];
    if (!ok) {
        char s1[160], s2[160];
        lm_error_set(LM_ERR_SHAPE, "%s: %s %s does not match the last %d axes of input %s", op, what,
                     DESC(s1, w), naxes, DESC(s2, x));
        return false;
    }
    return check_float(op, what, w);
}

/* The node of a norm with an optional affine weight and bias, once their
 * shapes are checked: i[0] = what it normalizes over (the last i[0] axes,
 * or i[0] groups), i[1]/i[2] = w/b given, f[0] = eps; it computes in x's
 * float dtype. */
static lm_array *norm_node(lm_op opc, const char *op, lm_array *x, int64_t over, lm_array *w,
                           lm_array *b, double eps)
{
    if (!(eps >= 0)) {
        lm_error_set(LM_ERR_ARG, "%s: eps must be >= 0, got %g", op, eps);
        return NULL;
    }
    lm_params p = {0};
    p.i[0] = over;
    p.i[1] = w != NULL;
    p.i[2] = b != NULL;
    p.f[0] = eps;
    lm_array *xf = as_float(x);
    lm_array *in[3] = {xf, NULL, NULL};
    int n = 1;
    if (w) in[n++] = w;
    if (b) in[n++] = b;
    lm_array *r = xf ? lm_node_new(opc, xf->dtype, x->ndim, x->shape, n, in, &p, NULL) : NULL;
    lm_array_release(xf);
    return r;
}

/* layer_norm and rms_norm: over the last naxes axes, w and b of their shape */
static lm_array *axes_norm(lm_op opc, const char *op, lm_array *x, int naxes, lm_array *w,
                           lm_array *b, double eps)
{
    if (!x) return NULL;
    if (naxes < 1 || naxes > x->ndim) {
        char s[160];
        lm_error_set(LM_ERR_ARG, "%s: cannot normalize over the last %d axes of %s", op, naxes, DESC(s, x));
        return NULL;
    }
    if (!check_affine(op, "weight", x, naxes, w) || !check_affine(op, "bias", x, naxes, b)) return NULL;
    return norm_node(opc, op, x, naxes, w, b, eps);
}

lm_array *lm_layer_norm(lm_array *x, int naxes, lm_array *w, lm_array *b, double eps)
{
    return axes_norm(LM_OP_LAYER_NORM, "layer_norm", x, naxes, w, b, eps);
}

lm_array *lm_rms_norm(lm_array *x, int naxes, lm_array *w, double eps)
{
    return axes_norm(LM_OP_RMS_NORM, "rms_norm", x, naxes, w, NULL, eps);
}

/* group_norm and batch_norm take x as [N, C, ...] */
static bool check_channels(const char *op, const lm_array *x)
{
    if (x->ndim >= 2) return true;
    char s[160];
    lm_error_set(LM_ERR_SHAPE, "%s: input must be [N, C, ...], got %s", op, DESC(s, x));
    return false;
}

lm_array *lm_group_norm(lm_array *x, int64_t groups, lm_array *w, lm_array *b, double eps)
{
    if (!x) return NULL;
    const char *op = "group_norm";
    if (!check_channels(op, x)) return NULL;
    int64_t C = x->shape[1];
    if (groups < 1 || C % groups) {
        char s[160];
        lm_error_set(LM_ERR_SHAPE, "%s: %lld groups do not divide the %lld channels of %s", op,
                     (long long)groups, (long long)C, DESC(s, x));
        return NULL;
    }
    if (!check_bias(op, w, C) || !check_bias(op, b, C)) return NULL;
    return norm_node(LM_OP_GROUP_NORM, op, x, groups, w, b, eps);
}

/* v[C] as [C, 1, ...] so it broadcasts over axis 1 of an ndim array */
static lm_array *channel_view(lm_array *v, int ndim)
{
    int64_t shape[LM_MAX_DIMS];
    shape[0] = v->shape[0];
    for (int d = 1; d < ndim - 1; d++) shape[d] = 1;
    return lm_reshape(v, ndim - 1 > 0 ? ndim - 1 : 1, shape);
}

lm_array *lm_batch_norm(lm_array *x, lm_array *mean, lm_array *var, lm_array *w,
                        lm_array *b, double eps)
{
    if (!x || !mean || !var) return NULL;
    const char *op = "batch_norm";
    if (!check_channels(op, x)) return NULL;
    int64_t C = x->shape[1];
    if (!check_bias(op, mean, C) || !check_bias(op, var, C) || !check_bias(op, w, C) || !check_bias(op, b, C))
        return NULL;
    /* scale = w / sqrt(var + eps); shift = b - mean * scale; y = x * scale + shift */
    lm_array *t[10] = {0};
    lm_dtype dt = float_of(x->dtype);
    t[0] = lm_binary_scalar(LM_OP_ADD, var, eps, false);
    t[1] = lm_unary(LM_OP_RSQRT, t[0]);
    t[2] = w ? lm_binary(LM_OP_MUL, t[1], w) : lm_array_retain(t[1]);
    t[3] = lm_binary(LM_OP_MUL, mean, t[2]);
    t[4] = b ? lm_binary(LM_OP_SUB, b, t[3]) : lm_unary(LM_OP_NEG, t[3]);
    t[5] = t[2] ? lm_cast(t[2], dt) : NULL;
    t[6] = t[4] ? lm_cast(t[4], dt) : NULL;
    t[7] = t[5] ? channel_view(t[5], x->ndim) : NULL;
    t[8] = t[6] ? channel_view(t[6], x->ndim) : NULL;
    t[9] = lm_binary(LM_OP_MUL, x, t[7]);
    lm_array *r = lm_binary(LM_OP_ADD, t[9], t[8]);
    release_all(t, 10);
    return r;
}

lm_array *lm_l2_normalize(lm_array *x, int axis, double eps)
{
    if (!x) return NULL;
    if (!lm_axis_norm("l2_normalize", &axis, x->ndim)) return NULL;
    lm_array *t[5] = {0};
    t[0] = as_float(x);
    t[1] = lm_binary(LM_OP_MUL, t[0], t[0]);
    t[2] = lm_reduce(LM_OP_SUM, t[1], 1, &axis, true);
    t[3] = lm_unary(LM_OP_SQRT, t[2]);
    t[4] = lm_clamp(t[3], eps, NAN);
    lm_array *r = lm_binary(LM_OP_DIV, t[0], t[4]);
    release_all(t, 5);
    return r;
}

/* =============================================== linear and activations */

lm_array *lm_linear(lm_array *x, lm_array *w, lm_array *b)
{
    if (!x || !w) return NULL;
    char s1[160], s2[160];
    if (w->ndim != 2 || x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1]) {
        lm_error_set(LM_ERR_SHAPE, "linear: input %s does not fit weight %s (want [..., in] and [out, in])",
                     DESC(s1, x), DESC(s2, w));
        return NULL;
    }
    if (!check_bias("linear", b, w->shape[0])) return NULL;
    lm_array *y;
    if (lm_dtype_is_quant(w->dtype)) {
        /* a quantized weight stays quantized: integer dots on the CPU
         * (backends/cpu/quant_linear.c); the result is f32 */
        if (!lm_dtype_is_float(x->dtype)) {
            lm_error_set(LM_ERR_DTYPE, "linear: a %s weight needs a float input, got %s", lm_dtype_name(w->dtype),
                         DESC(s1, x));
            return NULL;
        }
        if (!lm_array_is_contiguous(w)) {   /* w.T: its blocks run along out, not in */
            lm_error_set(LM_ERR_SHAPE, "linear: the %s weight %s is a transpose (w.T); linear takes w [out, in] "
                         "as stored (matmul(x, w.T) is linear(x, w))", lm_dtype_name(w->dtype), DESC(s2, w));
            return NULL;
        }
        lm_array *xf = lm_cast(x, LM_F32), *xc = lm_contiguous(xf);
        int64_t shape[LM_MAX_DIMS];
        memcpy(shape, x->shape, sizeof shape);
        shape[x->ndim - 1] = w->shape[0];
        lm_array *in[2] = {xc, w};
        y = xc ? lm_node_new(LM_OP_QLINEAR, LM_F32, x->ndim, shape, 2, in, NULL, NULL) : NULL;
        lm_array_release(xf);
        lm_array_release(xc);
    } else {
        lm_array *wt = lm_transpose(w, 0, 1);
        y = lm_matmul(x, wt);
        lm_array_release(wt);
    }
    if (!b || !y) return y;
    lm_array *r = lm_binary(LM_OP_ADD, y, b);
    lm_array_release(y);
    return r;
}

static lm_array *gated(const char *op, lm_op act, lm_array *gate, lm_array *up)
{
    if (!gate) return NULL;
    lm_array *parts[2] = {NULL, NULL};
    if (!up) {
        if (gate->ndim < 1 || gate->shape[gate->ndim - 1] % 2) {
            char s[160];
            lm_error_set(LM_ERR_SHAPE, "%s: the last axis of %s must split into two halves", op, DESC(s, gate));
            return NULL;
        }
        if (lm_split(gate, 2, NULL, 0, -1, parts, 2) != 2) return NULL;
    } else {
        parts[0] = lm_array_retain(gate);
        parts[1] = lm_array_retain(up);
    }
    lm_array *a = lm_unary(act, parts[0]);
    lm_array *r = lm_binary(LM_OP_MUL, a, parts[1]);
    if (!r) lm_error_prefix("%s", op);
    lm_array_release(a);
    release_all(parts, 2);
    return r;
}

lm_array *lm_swiglu(lm_array *gate, lm_array *up) { return gated("swiglu", LM_OP_SILU, gate, up); }
lm_array *lm_geglu(lm_array *gate, lm_array *up) { return gated("geglu", LM_OP_GELU, gate, up); }

lm_array *lm_leaky_relu(lm_array *x, double slope)
{
    if (!x) return NULL;
    lm_array *xf = as_float(x);
    lm_array *zero = xf ? lm_scalar(0, xf->dtype, xf->device) : NULL;
    lm_array *pos = zero ? lm_binary(LM_OP_GE, xf, zero) : NULL;
    lm_array *neg = xf ? lm_binary_scalar(LM_OP_MUL, xf, slope, false) : NULL;
    /* where(x >= 0, x, slope * x): a NaN compares false and gives slope * NaN = NaN */
    lm_array *r = pos && neg ? lm_where(pos, xf, neg) : NULL;
    lm_array_release(xf);
    lm_array_release(zero);
    lm_array_release(pos);
    lm_array_release(neg);
    return r;
}

lm_array *lm_embedding(lm_array *weight, lm_array *idx)
{
    if (!weight || !idx) return NULL;
    char s1[160], s2[160];
    if (weight->ndim != 2 || !lm_dtype_is_int(idx->dtype) || idx->ndim + 1 > LM_MAX_DIMS) {
        lm_error_set(LM_ERR_ARG, "embedding: want weight [V, D] and integer indices, got %s and %s",
                     DESC(s1, weight), DESC(s2, idx));
        return NULL;
    }
    int64_t flat = -1, shape[LM_MAX_DIMS];
    memcpy(shape, idx->shape, sizeof(int64_t) * (size_t)idx->ndim);
    shape[idx->ndim] = weight->shape[1];
    lm_array *f = lm_reshape(idx, 1, &flat);
    lm_array *g = lm_index_select(weight, 0, f);
    lm_array *r = lm_reshape(g, idx->ndim + 1, shape);
    lm_array_release(f);
    lm_array_release(g);
    return r;
}

/* ============================================================ attention */

static bool attn_shapes(const lm_array *q, const lm_array *k, const lm_array *v)
{
    char s1[160], s2[160], s3[160];
    bool ok = q->ndim == 4 && k->ndim == 4 && v->ndim == 4 && q->shape[0] == k->shape[0] &&
              k->shape[0] == v->shape[0] && q->shape[3] == k->shape[3] && k->shape[1] == v->shape[1] &&
              k->shape[2] == v->shape[2];
    if (!ok) {
        lm_error_set(LM_ERR_SHAPE, "attention: q %s, k %s, v %s do not fit "
                     "(want [B,Hq,Lq,D], [B,Hk,Lk,D], [B,Hk,Lk,Dv])",
                     DESC(s1, q), DESC(s2, k), DESC(s3, v));
        return false;
    }
    if (k->shape[1] == 0 || q->shape[1] % k->shape[1]) {
        lm_error_set(LM_ERR_SHAPE, "attention: %lld query heads are not a multiple of %lld key/value heads "
                     "(q %s, k %s)", (long long)q->shape[1], (long long)k->shape[1], DESC(s1, q), DESC(s2, k));
        return false;
    }
    return true;
}

lm_array *lm_attention(lm_array *q, lm_array *k, lm_array *v, lm_array *mask, bool causal, double scale)
{
    if (!q || !k || !v) return NULL;
    if (!attn_shapes(q, k, v)) return NULL;
    if (!check_float("attention", "q", q) || !check_float("attention", "k", k) ||
        !check_float("attention", "v", v))
        return NULL;
    int64_t B = q->shape[0], Hq = q->shape[1], Lq = q->shape[2], Lk = k->shape[2];
    lm_params p = {0};
    p.i[0] = causal;
    p.f[0] = scale > 0 && isfinite(scale) ? scale : 1.0 / sqrt((double)(q->shape[3] ? q->shape[3] : 1));
    lm_array *mv = NULL;
    if (mask) {
        int64_t full[4] = {B, Hq, Lq, Lk};
        int n;
        int64_t bs[LM_MAX_DIMS];
        bool fits = mask->ndim <= 4 &&
                    lm_broadcast_shapes("attention", mask->ndim, mask->shape, 4, full, &n, bs) == LM_OK;
        for (int d = 0; fits && d < 4; d++) fits = bs[d] == full[d];
        if (!fits) {
            char s1[160], s2[160];
            lm_error_set(LM_ERR_SHAPE, "attention: mask %s cannot broadcast to the scores [%lld,%lld,%lld,%lld] "
                         "(q %s)", DESC(s1, mask), (long long)B, (long long)Hq, (long long)Lq,
                         (long long)Lk, DESC(s2, q));
            return NULL;
        }
        p.i[1] = mask->dtype == LM_BOOL ? 2 : 1;
        lm_array *mc = lm_cast(mask, mask->dtype == LM_BOOL ? LM_BOOL : LM_F32);
        mv = lm_broadcast_to(mc, 4, full);
        lm_array_release(mc);
        if (!mv) return NULL;
    }
    int64_t shape[4] = {B, Hq, Lq, v->shape[3]};
    lm_dtype dt = lm_dtype_promote(q->dtype, lm_dtype_promote(k->dtype, v->dtype));
    lm_array *in[4] = {q, k, v, mv};
    lm_array *r = lm_node_new(LM_OP_ATTENTION, dt, 4, shape, mv ? 4 : 3, in, &p, NULL);
    lm_array_release(mv);
    return r;
}

/* ================================================================= rope */

lm_array *lm_rope_angles(lm_array *x, lm_array *angles, int64_t dims, bool traditional)
{
    if (!x || !angles) return NULL;
    const char *op = "rope";
    char s1[160], s2[160];
    if (x->ndim < 2) {
        lm_error_set(LM_ERR_SHAPE, "%s: input must be [..., L, D], got %s", op, DESC(s1, x));
        return NULL;
    }
    int64_t D = x->shape[x->ndim - 1];
    if (dims <= 0 || dims % 2 || dims > D) {
        lm_error_set(LM_ERR_ARG, "%s: rotary dims %lld must be even, positive and at most D of %s", op,
                     (long long)dims, DESC(s1, x));
        return NULL;
    }
    int64_t want[LM_MAX_DIMS];
    memcpy(want, x->shape, sizeof want);
    want[x->ndim - 1] = dims / 2;
    int n;
    int64_t bs[LM_MAX_DIMS];
    bool fits = angles->ndim <= x->ndim &&
                lm_broadcast_shapes(op, angles->ndim, angles->shape, x->ndim, want, &n, bs) == LM_OK;
    for (int d = 0; fits && d < x->ndim; d++) fits = bs[d] == want[d];
    if (!fits) {
        lm_error_set(LM_ERR_SHAPE, "%s: angles %s do not broadcast to [..., L, dims/2] of input %s (dims %lld)",
                     op, DESC(s1, angles), DESC(s2, x), (long long)dims);
        return NULL;
    }
    lm_array *af = as_float(angles);
    lm_array *av = lm_broadcast_to(af, x->ndim, want);
    lm_array *xf = as_float(x);
    lm_params p = {0};
    p.i[0] = dims;
    p.i[1] = traditional;
    lm_array *in[2] = {xf, av};
    lm_array *r = xf && av ? lm_node_new(LM_OP_ROPE, xf->dtype, x->ndim, x->shape, 2, in, &p, NULL) : NULL;
    lm_array_release(af);
    lm_array_release(av);
    lm_array_release(xf);
    return r;
}

/* angles[L, half] = (offset + p) * scale * freq[j], built on the host in f64 */
static lm_array *angle_table(const lm_array *x, int64_t half, const double *freq, double scale, int64_t offset)
{
    int64_t L = x->shape[x->ndim - 2];
    double *a = malloc(sizeof(double) * (size_t)(L * half + 1));
    if (!a) {
        lm_error_set(LM_ERR_NOMEM, "rope: out of host memory");
        return NULL;
    }
    for (int64_t p = 0; p < L; p++)
        for (int64_t j = 0; j < half; j++) a[p * half + j] = (double)(offset + p) * scale * freq[j];
    int64_t shape[2] = {L, half};
    lm_array *t = lm_from_data(2, shape, LM_F64, a, x->device);
    free(a);
    return t;
}

lm_array *lm_rope(lm_array *x, int64_t dims, bool traditional, double base, double scale, int64_t offset)
{
    if (!x) return NULL;
    if (x->ndim < 2 || dims <= 0 || dims % 2 || dims > x->shape[x->ndim - 1])
        return lm_rope_angles(x, x, dims, traditional);   /* reports the problem */
    if (!(base > 0)) {
        lm_error_set(LM_ERR_ARG, "rope: base must be positive, got %g", base);
        return NULL;
    }
    int64_t half = dims / 2;
    double *f = malloc(sizeof(double) * (size_t)half);
    if (!f) {
        lm_error_set(LM_ERR_NOMEM, "rope: out of host memory");
        return NULL;
    }
    for (int64_t j = 0; j < half; j++) f[j] = pow(base, -2.0 * (double)j / (double)dims);
    lm_array *ang = angle_table(x, half, f, scale, offset);
    free(f);
    lm_array *r = ang ? lm_rope_angles(x, ang, dims, traditional) : NULL;
    lm_array_release(ang);
    return r;
}

lm_array *lm_rope_freqs(lm_array *x, int64_t dims, bool traditional, lm_array *freqs, double scale,
                        int64_t offset)
{
    if (!x || !freqs) return NULL;
    if (freqs->ndim != 1 || freqs->shape[0] * 2 != dims) {
        char s[160];
        lm_error_set(LM_ERR_SHAPE, "rope: freqs %s must have dims/2 = %lld entries", DESC(s, freqs),
                     (long long)(dims / 2));
        return NULL;
    }
    if (x->ndim < 2) return lm_rope_angles(x, x, dims, traditional);
    double one = 1.0;
    lm_array *pos = angle_table(x, 1, &one, scale, offset);          /* [L, 1] positions */
    lm_array *f64 = lm_cast(freqs, LM_F64);
    lm_array *ang = lm_binary(LM_OP_MUL, pos, f64);                   /* [L, dims/2] */
    lm_array *r = lm_rope_angles(x, ang, dims, traditional);
    lm_array_release(pos);
    lm_array_release(f64);
    lm_array_release(ang);
    return r;
}

lm_array *lm_rope_multi(lm_array *x, lm_array *pos, int naxes, const int64_t *axes_dims, double theta,
                        bool traditional)
{
    if (!x || !pos) return NULL;
    char s1[160];
    if (naxes < 1 || naxes > 16 || pos->ndim < 2 || pos->shape[pos->ndim - 1] != naxes) {
        lm_error_set(LM_ERR_SHAPE, "rope: positions %s must be [..., L, %d]", DESC(s1, pos), naxes);
        return NULL;
    }
    int64_t dims = 0;
    for (int a = 0; a < naxes; a++) {
        if (axes_dims[a] <= 0 || axes_dims[a] % 2) {
            lm_error_set(LM_ERR_ARG, "rope: axis %d has %lld dims; each must be even and positive", a,
                         (long long)axes_dims[a]);
            return NULL;
        }
        dims += axes_dims[a];
    }
    lm_array *parts[16] = {0}, *pf = lm_cast(pos, LM_F64), *ang = NULL, *r = NULL;
    int made = 0;
    for (; pf && made < naxes; made++) {
        int64_t half = axes_dims[made] / 2;
        double *f = malloc(sizeof(double) * (size_t)half);
        if (!f) break;
        for (int64_t j = 0; j < half; j++) f[j] = pow(theta, -2.0 * (double)j / (double)axes_dims[made]);
        lm_array *fa = lm_from_data(1, &half, LM_F64, f, x->device);
        free(f);
        lm_array *col = lm_slice(pf, -1, made, made + 1, 1);          /* [..., L, 1] */
        parts[made] = lm_binary(LM_OP_MUL, col, fa);                  /* [..., L, half] */
        lm_array_release(fa);
        lm_array_release(col);
        if (!parts[made]) break;
    }
    if (made == naxes) ang = lm_concat(naxes, parts, -1);
    if (ang) r = lm_rope_angles(x, ang, dims, traditional);
    release_all(parts, naxes);
    lm_array_release(pf);
    lm_array_release(ang);
    return r;
}

/* ================================================= sort, topk, scatter */

static lm_array *sort_node(lm_op opc, const char *op, lm_array *x, int axis, int64_t k, bool largest,
                           int which)
{
    if (x->ndim == 0) {
        lm_error_set(LM_ERR_SHAPE, "%s: needs at least one dimension", op);
        return NULL;
    }
    if (!lm_axis_norm(op, &axis, x->ndim)) return NULL;
    int64_t shape[LM_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    lm_params p = {0};
    p.i[0] = axis;
    if (opc == LM_OP_TOPK) {
        if (k < 0 || k > x->shape[axis]) {
            char s[160];
            lm_error_set(LM_ERR_ARG, "topk: k=%lld out of range for axis %d of %s", (long long)k, axis,
                         DESC(s, x));
            return NULL;
        }
        shape[axis] = k;
        p.i[1] = k;
        p.i[2] = largest;
        p.i[3] = which;
    } else {
        p.i[1] = largest;   /* descending */
    }
    lm_dtype dt = opc == LM_OP_ARGSORT || which == 1 ? LM_I64 : x->dtype;
    return lm_node_new(opc, dt, x->ndim, shape, 1, &x, &p, NULL);
}

lm_status lm_topk(lm_array *x, int64_t k, int axis, bool largest, lm_array **values, lm_array **indices)
{
    if (values) *values = NULL;
    if (indices) *indices = NULL;
    if (!x) return lm_error_status();
    if (values && !(*values = sort_node(LM_OP_TOPK, "topk", x, axis, k, largest, 0))) return lm_error_status();
    if (indices && !(*indices = sort_node(LM_OP_TOPK, "topk", x, axis, k, largest, 1))) {
        if (values) { lm_array_release(*values); *values = NULL; }
        return lm_error_status();
    }
    return LM_OK;
}

lm_array *lm_sort(lm_array *x, int axis, bool descending)
{
    return x ? sort_node(LM_OP_SORT, "sort", x, axis, 0, descending, 0) : NULL;
}

lm_array *lm_argsort(lm_array *x, int axis, bool descending)
{
    return x ? sort_node(LM_OP_ARGSORT, "argsort", x, axis, 0, descending, 0) : NULL;
}

static lm_array *scatter_node(lm_op opc, const char *op, lm_array *a, int axis, lm_array *idx, lm_array *src)
{
    if (!a || !idx || !src) return NULL;
    char s1[160], s2[160], s3[160];
    if (!lm_dtype_is_int(idx->dtype)) {
        lm_error_set(LM_ERR_DTYPE, "%s: indices must be integers, got %s", op, DESC(s1, idx));
        return NULL;
    }
    if (!lm_axis_norm(op, &axis, a->ndim ? a->ndim : 1)) return NULL;
    bool ok = idx->ndim == a->ndim && (src->ndim == 0 || src->ndim == a->ndim);
    for (int d = 0; ok && d < a->ndim; d++) {
        ok = (d == axis || idx->shape[d] <= a->shape[d]) && (src->ndim == 0 || idx->shape[d] <= src->shape[d]);
    }
    if (!ok) {
        lm_error_set(LM_ERR_SHAPE, "%s: index %s must have the dimensions of input %s and be no larger "
                     "than it (except on axis %d) and than src %s", op, DESC(s1, idx), DESC(s2, a), axis,
                     DESC(s3, src));
        return NULL;
    }
    lm_array *sv = src->ndim == 0 ? lm_broadcast_to(src, idx->ndim, idx->shape) : lm_array_retain(src);
    for (int d = 0; sv && d < src->ndim; d++) {
        if (sv->shape[d] == idx->shape[d]) continue;
        lm_array *t = lm_slice(sv, d, 0, idx->shape[d], 1);
        lm_array_release(sv);
        sv = t;
    }
    lm_array *sc = sv ? lm_cast(sv, a->dtype) : NULL;
    lm_array *ic = lm_cast(idx, LM_I64);
    lm_params p = {0};
    p.i[0] = axis;
    lm_array *in[3] = {a, ic, sc};
    lm_array *r = sc && ic ? lm_node_new(opc, a->dtype, a->ndim, a->shape, 3, in, &p, NULL) : NULL;
    lm_array_release(sv);
    lm_array_release(sc);
    lm_array_release(ic);
    return r;
}

lm_array *lm_scatter(lm_array *a, int axis, lm_array *idx, lm_array *src)
{
    return scatter_node(LM_OP_SCATTER, "scatter", a, axis, idx, src);
}

lm_array *lm_scatter_add(lm_array *a, int axis, lm_array *idx, lm_array *src)
{
    return scatter_node(LM_OP_SCATTER_ADD, "scatter_add", a, axis, idx, src);
}

lm_array *lm_one_hot(lm_array *idx, int64_t num_classes)
{
    if (!idx) return NULL;
    char s[160];
    if (!lm_dtype_is_int(idx->dtype) || idx->ndim >= LM_MAX_DIMS) {
        lm_error_set(LM_ERR_DTYPE, "one_hot: indices must be integers, got %s", DESC(s, idx));
        return NULL;
    }
    if (num_classes <= 0) {
        lm_error_set(LM_ERR_ARG, "one_hot: num_classes must be > 0, got %lld", (long long)num_classes);
        return NULL;
    }
    int64_t shape[LM_MAX_DIMS];
    memcpy(shape, idx->shape, sizeof(int64_t) * (size_t)idx->ndim);
    shape[idx->ndim] = num_classes;
    lm_params p = {0};
    p.i[0] = num_classes;
    return lm_node_new(LM_OP_ONE_HOT, LM_I64, idx->ndim + 1, shape, 1, &idx, &p, NULL);
}

static lm_array *tri(lm_op opc, const char *op, lm_array *x, int64_t k)
{
    if (!x) return NULL;
    if (x->ndim < 2) {
        char s[160];
        lm_error_set(LM_ERR_SHAPE, "%s: input must have at least 2 dimensions, got %s", op, DESC(s, x));
        return NULL;
    }
    lm_params p = {0};
    p.i[0] = k;
    return lm_node_new(opc, x->dtype, x->ndim, x->shape, 1, &x, &p, NULL);
}

lm_array *lm_tril(lm_array *x, int64_t k) { return tri(LM_OP_TRIL, "tril", x, k); }
lm_array *lm_triu(lm_array *x, int64_t k) { return tri(LM_OP_TRIU, "triu", x, k); }

/* ============================================== timestep embedding */

lm_array *lm_timestep_embedding(lm_array *t, int64_t dim, double max_period, bool flip_sin_to_cos,
                                double shift, double scale)
{
    if (!t) return NULL;
    char s[160];
    if (t->ndim != 1 || dim < 1) {
        lm_error_set(LM_ERR_SHAPE, "timestep_embedding: want t [N] and dim >= 1, got %s and %lld",
                     DESC(s, t), (long long)dim);
        return NULL;
    }
    int64_t half = dim / 2;
    if (half > 0 && !(half - shift > 0)) {
        lm_error_set(LM_ERR_ARG, "timestep_embedding: shift %g must be below dim/2 = %lld", shift,
                     (long long)half);
        return NULL;
    }
    double *f = malloc(sizeof(double) * (size_t)(half + 1));
    if (!f) {
        lm_error_set(LM_ERR_NOMEM, "timestep_embedding: out of host memory");
        return NULL;
    }
    for (int64_t j = 0; j < half; j++) f[j] = exp(-log(max_period) * (double)j / ((double)half - shift)) * scale;
    int64_t fs[2] = {1, half}, cs[2] = {t->shape[0], 1};
    lm_array *v[9] = {0};
    v[0] = lm_from_data(2, fs, LM_F64, f, t->device);
    free(f);
    v[1] = lm_cast(t, LM_F64);
    v[2] = lm_reshape(v[1], 2, cs);
    v[3] = lm_binary(LM_OP_MUL, v[2], v[0]);
    v[4] = lm_unary(LM_OP_COS, v[3]);
    v[5] = lm_unary(LM_OP_SIN, v[3]);
    lm_array *cat[2] = {flip_sin_to_cos ? v[4] : v[5], flip_sin_to_cos ? v[5] : v[4]};
    v[6] = v[4] && v[5] ? lm_concat(2, cat, 1) : NULL;
    if (dim % 2 && v[6]) {
        int64_t pads[4] = {0, 0, 0, 1};
        v[7] = lm_pad(v[6], pads, 0);
    } else {
        v[7] = lm_array_retain(v[6]);
    }
    v[8] = v[7] ? lm_cast(v[7], float_of(t->dtype)) : NULL;
    lm_array *r = lm_array_retain(v[8]);
    release_all(v, 9);
    return r;
}

/* ============================================================= rebuild */

lm_array *lm_nn_rebuild(lm_op op, const lm_params *p, int n, lm_array *const *in)
{
    for (int k = 0; k < n; k++) if (!in[k]) return NULL;
    const int64_t *i = p->i;
    int64_t a2[2] = {i[0], i[1]}, b2[2] = {i[2], i[3]}, c2[2] = {i[4], i[5]}, d2[2] = {i[6], i[7]};
    lm_array *opt1 = n > 1 ? in[1] : NULL;
    switch (op) {
    case LM_OP_CONV: {
        int64_t pad[4] = {i[2], i[4], i[3], i[5]};
        return lm_conv2d(in[0], in[1], i[9] && n > 2 ? in[2] : NULL, a2, pad, d2, i[8]);
    }
    case LM_OP_CONV_TRANSPOSE:
        return lm_conv_transpose2d(in[0], in[1], i[9] && n > 2 ? in[2] : NULL, a2, b2, c2, d2, i[8]);
    case LM_OP_MAX_POOL: return lm_max_pool2d(in[0], a2, b2, c2, d2, i[8] != 0);
    case LM_OP_AVG_POOL: return lm_avg_pool2d(in[0], a2, b2, c2, i[8] != 0, i[9] != 0, i[10]);
    case LM_OP_ADAPTIVE_AVG_POOL: return lm_adaptive_avg_pool2d(in[0], a2);
    case LM_OP_UPSAMPLE: {
        double sc[2] = {p->f[2], p->f[3]};
        int64_t sz[2] = {i[3], i[4]};
        return lm_upsample(in[0], i[2] ? NULL : sz, i[2] ? sc : NULL, (lm_upsample_mode)i[0], i[1] != 0);
    }
    case LM_OP_SOFTMAX: return lm_softmax(in[0], (int)i[0]);
    case LM_OP_LOG_SOFTMAX: return lm_log_softmax(in[0], (int)i[0]);
    case LM_OP_LAYER_NORM:
        return lm_layer_norm(in[0], (int)i[0], i[1] ? opt1 : NULL, i[2] && n > 1 + (i[1] != 0) ? in[1 + (i[1] != 0)] : NULL,
                             p->f[0]);
    case LM_OP_RMS_NORM: return lm_rms_norm(in[0], (int)i[0], i[1] ? opt1 : NULL, p->f[0]);
    case LM_OP_GROUP_NORM:
        return lm_group_norm(in[0], i[0], i[1] ? opt1 : NULL, i[2] && n > 1 + (i[1] != 0) ? in[1 + (i[1] != 0)] : NULL,
                             p->f[0]);
    case LM_OP_ATTENTION: return lm_attention(in[0], in[1], in[2], n > 3 ? in[3] : NULL, i[0] != 0, p->f[0]);
    case LM_OP_ROPE: return lm_rope_angles(in[0], in[1], i[0], i[1] != 0);
    case LM_OP_TOPK: return sort_node(LM_OP_TOPK, "topk", in[0], (int)i[0], i[1], i[2] != 0, (int)i[3]);
    case LM_OP_SORT: return sort_node(LM_OP_SORT, "sort", in[0], (int)i[0], 0, i[1] != 0, 0);
    case LM_OP_ARGSORT: return sort_node(LM_OP_ARGSORT, "argsort", in[0], (int)i[0], 0, i[1] != 0, 0);
    case LM_OP_SCATTER: return lm_scatter(in[0], (int)i[0], in[1], in[2]);
    case LM_OP_SCATTER_ADD: return lm_scatter_add(in[0], (int)i[0], in[1], in[2]);
    case LM_OP_ONE_HOT: return lm_one_hot(in[0], i[0]);
    case LM_OP_TRIL: return lm_tril(in[0], i[0]);
    case LM_OP_TRIU: return lm_triu(in[0], i[0]);
    default:
        lm_error_set(LM_ERR_ARG, "nn_rebuild: %s is not an NN node", lm_op_name(op));
        return NULL;
    }
}
