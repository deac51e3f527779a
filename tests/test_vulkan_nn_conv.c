/* test_vulkan_nn_conv.c - the convolution family on Vulkan against the CPU
 * (backends/vulkan/nn_conv.c): conv1d/conv2d through the implicit GEMM,
 * the few-channel kernel (conv_small.comp, also bit for bit against
 * conv_direct) and the direct kernel (stride, asymmetric padding, dilation, groups,
 * depthwise, 1x1, bias or none, mixed dtypes), conv_transpose2d (both paths; stride,
 * output_padding, dilation, groups), max/avg/adaptive-avg pooling,
 * nearest/bilinear upsampling with and without align_corners, on
 * transposed, channel-sliced and reversed input views, in f32, f16 and
 * bf16 (nearest also in integer dtypes); f64 conv and integer max_pool run
 * through the CPU fallback and must still agree.  Shapes stay small and
 * the kinds of cases few: each dtype combination is a pipeline, and
 * lavapipe takes seconds for a GEMM one.  f16 x f16 convs take the
 * tensor-core kernel (conv_coop.comp) where the device has NV cooperative
 * matrices (the H100: run there too, LUMEN_VK_CONV_COOP=0 for the other
 * path); lavapipe has none, so there they check the f32-arithmetic GEMM.
 * Uses tests/parity/parity.h. */
#include "testutil.h"
#ifdef LM_HAVE_VULKAN

#include "parity/parity.h"
#include "core/profile.h"

static const lm_dtype fdts[] = {LM_F32, LM_F16, LM_BF16};
#define NFDT 3

/* ---- views of the input x, made from data of a matching shape ---- */
typedef enum { X_PLAIN, X_T, X_CH, X_REV } xview;
static const char *xview_name[] = {"", " x transposed", " x channel-sliced", " x reversed"};

/* the data shape that view v turns into shape s[4] */
static void xview_source(xview v, const int64_t *s, int64_t *src)
{
    memcpy(src, s, 4 * sizeof *s);
    if (v == X_T) { src[2] = s[3]; src[3] = s[2]; }
    if (v == X_CH) src[1] = 2 * s[1];
}

static lm_array *xview_apply(lm_array *a, xview v)
{
    switch (v) {
    case X_T: return lm_transpose(a, 2, 3);
    case X_CH: return lm_slice(a, 1, 1, a->shape[1], 2);
    case X_REV: return lm_slice(a, 3, a->shape[3] - 1, -a->shape[3] - 1, -1);
    default: return lm_array_retain(a);
    }
}

/* a CPU input of shape s[4] in dtype dt, for view v */
static lm_array *xdata(const int64_t *s, lm_dtype dt, xview v, int flags)
{
    int64_t src[4];
    xview_source(v, s, src);
    return data(4, src, dt, -1, 1, flags);
}

/* ---- conv ---- */
typedef enum { K_CONV2D, K_CONV1D, K_CONVT } conv_kind;

typedef struct {
    conv_kind kind;
    int64_t stride[2], pad[4], dil[2], opad[2], groups;
    xview xv;
    bool wt;           /* weights as a transposed (KH<->KW) view */
} cctx;

/* what b_conv gets: the case and whether in[2] is a bias */
typedef struct { cctx c; bool bias; } cbuild;

static lm_array *b_conv(lm_array **in, const void *p)
{
    const cctx *c = &((const cbuild *)p)->c;
    lm_array *x = xview_apply(in[0], c->xv);
    lm_array *w = c->wt ? lm_transpose(in[1], 2, 3) : lm_array_retain(in[1]);
    lm_array *b = ((const cbuild *)p)->bias ? in[2] : NULL, *r = NULL;
    if (c->kind == K_CONV1D) {
        lm_array *x3 = lm_squeeze(x, 2), *w3 = lm_squeeze(w, 2);
        r = lm_conv1d(x3, w3, b, c->stride[1], &c->pad[2], c->dil[1], c->groups);
        lm_array_release(x3);
        lm_array_release(w3);
    } else if (c->kind == K_CONVT) {
        r = lm_conv_transpose2d(x, w, b, c->stride, c->pad, c->opad, c->dil, c->groups);
    } else {
        r = lm_conv2d(x, w, b, c->stride, c->pad, c->dil, c->groups);
    }
    lm_array_release(x);
    lm_array_release(w);
    return r;
}

/* x[xs] (after the view), weights ws (before the wt view), bias of nb
 * entries (0 = none) in dtypes xd, wd, bd */
static void conv_case(const char *name, const cctx *c, const int64_t *xs, const int64_t *ws, int64_t nb,
                      lm_dtype xd, lm_dtype wd, lm_dtype bd, int flags)
{
    lm_array *in[3] = {xdata(xs, xd, c->xv, flags), data(4, ws, wd, -0.5, 0.5, 0), NULL};
    if (nb) in[2] = data(1, &nb, bd, -1, 1, 0);
    char what[160];
    snprintf(what, sizeof what, "%s %s/%s/%s%s%s%s", name, lm_dtype_name(xd), lm_dtype_name(wd),
             nb ? lm_dtype_name(bd) : "-", xview_name[c->xv], c->wt ? " w transposed" : "",
             nb ? "" : " no bias");
    lm_dtype worst = xd == LM_BF16 || wd == LM_BF16 || bd == LM_BF16 ? LM_BF16
                   : xd == LM_F16 || wd == LM_F16 || bd == LM_F16 ? LM_F16 : LM_F32;
    cbuild cb = {*c, nb != 0};
    run_case(what, nb ? 3 : 2, in, b_conv, &cb, thr_for(worst, false));
    for (int k = 0; k < 3; k++) lm_array_release(in[k]);
}

/* implicit GEMM: 16 or more output channels per group, k >= 16.  Each
 * dtype combination, and aligned (k and OH*OW multiples of 4: vector
 * loads and stores) or not, is a pipeline that takes lavapipe seconds to
 * build, so f32 and f16 use aligned shapes and bf16 unaligned ones (u):
 * three GEMM pipelines in all. */
static void test_conv_gemm(void **state)
{
    (void)state;
    for (int t = 0; t < NFDT; t++) {
        lm_dtype dt = fdts[t];
        int64_t u = dt == LM_BF16;
        cctx pad1 = {K_CONV2D, {1, 1}, {1, 1, 1, 1}, {1, 1}, {0, 0}, 1, X_PLAIN, false};
        int64_t xs[4] = {2, 8 - u, 8 + u, 10 + u}, ws[4] = {32, 8 - u, 3, 3};
        conv_case("conv2d 3x3 pad 1 (gemm)", &pad1, xs, ws, 32, dt, dt, dt, SPECIALS);
        /* stride, asymmetric padding, dilation; odd sizes */
        cctx odd = {K_CONV2D, {2, 1}, {1, 2, 0, 1}, {2, 1}, {0, 0}, 1, X_PLAIN, false};
        int64_t xs2[4] = {1, 6 - u, 13, 10 + u}, ws2[4] = {20, 6 - u, 3, 2};
        conv_case("conv2d stride/pad/dilation (gemm)", &odd, xs2, ws2, 0, dt, dt, dt, 0);
        /* two groups of 16 */
        cctx grp = {K_CONV2D, {1, 1}, {1, 1, 1, 1}, {1, 1}, {0, 0}, 2, X_PLAIN, false};
        int64_t xs3[4] = {2, 8 - 2 * u, 7, 8 - u}, ws3[4] = {32, 4 - u, 3, 3};
        conv_case("conv2d groups 2 (gemm)", &grp, xs3, ws3, 32, dt, dt, dt, 0);
        /* input views */
        for (int v = X_T; v <= X_REV; v++) {
            if (t && v != X_T + t - 1) continue;      /* f16/bf16: one view each */
            cctx cv = pad1;
            cv.xv = (xview)v;
            conv_case("conv2d (gemm)", &cv, xs, ws, 32, dt, dt, dt, 0);
        }
    }
    /* f16: rows of 24 pixels, read by runs of 8 on the tensor-core kernel
     * (aligned, odd and even offsets, edges; conv_gemm.glsl's B_VEC) */
    cctx run8 = {K_CONV2D, {1, 1}, {1, 1, 1, 1}, {1, 1}, {0, 0}, 1, X_PLAIN, false};
    int64_t xr[4] = {1, 16, 16, 24}, wr[4] = {32, 16, 3, 3};
    /* no NaN/Inf here: the CPU runs this shape by Winograd, whose transforms
     * spread an input infinity over its tile's outputs (the direct sum does not) */
    conv_case("conv2d 3x3 pad 1, 24-pixel rows (gemm)", &run8, xr, wr, 32, LM_F16, LM_F16, LM_F16, 0);
    cctx pad2 = {K_CONV2D, {1, 1}, {2, 2, 2, 2}, {1, 1}, {0, 0}, 1, X_PLAIN, false};
    int64_t wr5[4] = {16, 16, 5, 5};
    conv_case("conv2d 5x5 pad 2, 24-pixel rows (gemm)", &pad2, xr, wr5, 16, LM_F16, LM_F16, LM_F16, 0);
    /* the small-channel tensor-core tiles (32 and 64 rows): 40 channels over
     * two images with K = 216 (edges in M and K), and 64 channels with K =
     * 288 (whole weight tiles, no bounds checks), several pixel tiles */
    int64_t xm[4] = {2, 24, 16, 24}, wm[4] = {40, 24, 3, 3};
    conv_case("conv2d 40 channels, 2 images (gemm)", &run8, xm, wm, 40, LM_F16, LM_F16, LM_F16, 0);
    int64_t xm2[4] = {1, 32, 20, 24}, wm2[4] = {64, 32, 3, 3};
    conv_case("conv2d 64 channels, K = 288 (gemm)", &run8, xm2, wm2, 64, LM_F16, LM_F16, LM_F16, 0);
    /* several tiles along M (136 channels) and N (144 pixels), 9 steps of k */
    cctx big = {K_CONV2D, {1, 1}, {1, 1, 1, 1}, {1, 1}, {0, 0}, 1, X_PLAIN, false};
    int64_t xb[4] = {1, 16, 12, 12}, wb[4] = {136, 16, 3, 3};
    conv_case("conv2d 136 channels (gemm, 2x2 tiles)", &big, xb, wb, 136, LM_F32, LM_F32, LM_F32, 0);
    /* 1x1 and conv1d (f32 only) */
    cctx one = {K_CONV2D, {1, 1}, {0, 0, 0, 0}, {1, 1}, {0, 0}, 1, X_PLAIN, false};
    int64_t xs[4] = {1, 16, 5, 8}, ws[4] = {24, 16, 1, 1};
    conv_case("conv2d 1x1 (gemm)", &one, xs, ws, 24, LM_F32, LM_F32, LM_F32, 0);
    cctx c1 = {K_CONV1D, {1, 2}, {0, 0, 2, 1}, {1, 2}, {0, 0}, 1, X_PLAIN, false};
    int64_t x1[4] = {2, 8, 1, 17}, w1[4] = {24, 8, 1, 3};
    conv_case("conv1d stride 2 dilation 2 (gemm)", &c1, x1, w1, 24, LM_F32, LM_F32, LM_F32, SPECIALS);
}

/* bf16 on bf16 cooperative matrices (conv_coop_khr_bf*, where the device
 * has VK_KHR_shader_bfloat16; elsewhere the f32-arithmetic GEMM): the f16
 * tensor-core cases in bf16 (runs of 8 pixels, 5x5, the 32/64-row tiles,
 * several tiles, groups, stride 2, 1x1 over whole rows, the input unfolded
 * by conv_im2col or gathered, split-K, f32 bias and output), within bf16's
 * tolerance of the CPU.  Says how many ran on bf16 tensor cores, or why
 * none did; LUMEN_TEST_CONV_BF16=1 (set on such a device) requires all. */
static void test_conv_coop_bf16(void **state)
{
    (void)state;
    const lm_dtype B = LM_BF16;
    int64_t before = lm_vulkan_bf16_coop_count(), c0 = cases;
    cctx pad1 = {K_CONV2D, {1, 1}, {1, 1, 1, 1}, {1, 1}, {0, 0}, 1, X_PLAIN, false};
    int64_t xr[4] = {1, 16, 16, 24}, wr[4] = {32, 16, 3, 3};
    conv_case("conv2d bf16 3x3, 24-pixel rows (tensor cores)", &pad1, xr, wr, 32, B, B, B, 0);
    cctx pad2 = {K_CONV2D, {1, 1}, {2, 2, 2, 2}, {1, 1}, {0, 0}, 1, X_PLAIN, false};
    int64_t wr5[4] = {16, 16, 5, 5};
    conv_case("conv2d bf16 5x5 (tensor cores)", &pad2, xr, wr5, 16, B, B, B, 0);
    int64_t xm[4] = {2, 24, 16, 24}, wm[4] = {40, 24, 3, 3};
    conv_case("conv2d bf16 40 channels, 2 images (tensor cores)", &pad1, xm, wm, 40, B, B, B, 0);
    int64_t xm2[4] = {1, 32, 20, 24}, wm2[4] = {64, 32, 3, 3};
    conv_case("conv2d bf16 64 channels, K = 288 (tensor cores)", &pad1, xm2, wm2, 64, B, B, LM_F32, 0);
    int64_t xb[4] = {1, 32, 24, 24}, wb[4] = {136, 32, 3, 3};
    conv_case("conv2d bf16 136 channels (tensor cores)", &pad1, xb, wb, 136, B, B, B, 0);
    cctx grp = {K_CONV2D, {1, 1}, {1, 1, 1, 1}, {1, 1}, {0, 0}, 2, X_PLAIN, false};
    int64_t xg[4] = {2, 32, 8, 16}, wg[4] = {64, 16, 3, 3};
    conv_case("conv2d bf16 groups 2 (tensor cores)", &grp, xg, wg, 64, B, B, B, 0);
    cctx one = {K_CONV2D, {1, 1}, {0, 0, 0, 0}, {1, 1}, {0, 0}, 1, X_PLAIN, false};
    int64_t x1[4] = {2, 32, 8, 8}, w1[4] = {80, 32, 1, 1};
    conv_case("conv2d bf16 1x1 (tensor cores)", &one, x1, w1, 80, B, B, B, 0);
    conv_case("conv2d bf16 1x1, no bias (tensor cores)", &one, x1, w1, 0, B, B, B, 0);
    int64_t xh[4] = {2, 16, 8, 8}, wh[4] = {96, 16, 3, 3};
    cctx s2 = {K_CONV2D, {2, 2}, {1, 0, 1, 0}, {1, 1}, {0, 0}, 1, X_PLAIN, false};
    int64_t xs2[4] = {2, 16, 16, 16}, ws2[4] = {64, 16, 3, 3};
    for (int m = 0; m < 4; m++) {
        setenv("LUMEN_VK_CONV_IM2COL", m % 2 ? "0" : "1", 1);
        setenv("LUMEN_VK_CONV_SPLITK", m / 2 ? "3" : "1", 1);
        char what[96];
        snprintf(what, sizeof what, "conv2d bf16 im2col=%d split-K %d", m % 2 ? 0 : 1, m / 2 ? 3 : 1);
        conv_case(what, &pad1, xh, wh, 96, B, B, B, 0);
        snprintf(what, sizeof what, "conv2d bf16 stride 2 im2col=%d split-K %d", m % 2 ? 0 : 1, m / 2 ? 3 : 1);
        conv_case(what, &s2, xs2, ws2, 64, B, B, LM_F32, 0);
    }
    unsetenv("LUMEN_VK_CONV_IM2COL");
    unsetenv("LUMEN_VK_CONV_SPLITK");
    int64_t ran = lm_vulkan_bf16_coop_count() - before, run = cases - c0;
    if (ran)
        printf("test_conv_coop_bf16: %lld of %lld bf16 cases on bf16 tensor cores\n", (long long)ran,
               (long long)run);
    else
        printf("test_conv_coop_bf16: the bf16 tensor-core kernels skipped (the device has no "
               "VK_KHR_shader_bfloat16 cooperative matrices, or LUMEN_VK_BF16=0): %lld cases on the "
               "f32-arithmetic GEMM\n", (long long)run);
    const char *req = getenv("LUMEN_TEST_CONV_BF16");
    if (req && !strcmp(req, "1")) assert_int_equal(ran, run);
}

/* the direct kernel: depthwise, few channels, transposed weights */
static void test_conv_direct(void **state)
{
    (void)state;
    for (int t = 0; t < NFDT; t++) {
        lm_dtype dt = fdts[t];
        cctx dw = {K_CONV2D, {2, 2}, {1, 1, 1, 1}, {1, 1}, {0, 0}, 6, X_PLAIN, false};
        int64_t xs[4] = {2, 6, 8, 9}, ws[4] = {6, 1, 3, 3};
        conv_case("conv2d depthwise stride 2", &dw, xs, ws, 6, dt, dt, dt, SPECIALS);
        cctx few = {K_CONV2D, {1, 2}, {2, 0, 1, 2}, {1, 2}, {0, 0}, 1, (xview)(X_T + t), false};
        int64_t xs2[4] = {1, 3, 10, 12}, ws2[4] = {4, 3, 5, 3};
        conv_case("conv2d 4 channels", &few, xs2, ws2, 0, dt, dt, dt, 0);
        cctx g3 = {K_CONV2D, {1, 1}, {0, 1, 1, 0}, {2, 1}, {0, 0}, 3, X_PLAIN, true};
        int64_t xs3[4] = {2, 6, 9, 7}, ws3[4] = {9, 2, 2, 3};
        conv_case("conv2d groups 3", &g3, xs3, ws3, 9, dt, dt, dt, 0);
        cctx c1 = {K_CONV1D, {1, 3}, {0, 0, 1, 2}, {1, 1}, {0, 0}, 2, X_PLAIN, false};
        int64_t x1[4] = {2, 4, 1, 23}, w1[4] = {6, 2, 1, 4};
        conv_case("conv1d groups 2 stride 3", &c1, x1, w1, 6, dt, dt, dt, 0);
    }
    /* a big channel count with transposed weights leaves the GEMM too */
    cctx wt = {K_CONV2D, {1, 1}, {1, 1, 1, 1}, {1, 1}, {0, 0}, 1, X_PLAIN, true};
    int64_t xs[4] = {1, 8, 6, 5}, ws[4] = {32, 8, 3, 3};
    conv_case("conv2d w transposed", &wt, xs, ws, 32, LM_F32, LM_F32, LM_F32, 0);
    cctx pad1 = {K_CONV2D, {1, 1}, {1, 1, 1, 1}, {1, 1}, {0, 0}, 1, X_PLAIN, false};
    int64_t xs5[4] = {1, 8, 6, 6}, ws5[4] = {8, 8, 3, 3};
    conv_case("conv2d mixed", &pad1, xs5, ws5, 8, LM_F32, LM_F16, LM_BF16, 0);
}

static void test_conv_transpose(void **state)
{
    (void)state;
    for (int t = 0; t < NFDT; t++) {
        lm_dtype dt = fdts[t];
        cctx s2 = {K_CONVT, {2, 2}, {1, 1}, {1, 1}, {1, 1}, 1, X_PLAIN, false};
        int64_t xs[4] = {2, 4, 5, 6}, ws[4] = {4, 3, 3, 3};
        conv_case("conv_transpose2d stride 2 output_padding 1", &s2, xs, ws, 3, dt, dt, dt, SPECIALS);
        cctx g2 = {K_CONVT, {3, 2}, {2, 0}, {2, 1}, {1, 0}, 2, (xview)(X_T + t), false};
        int64_t xs2[4] = {1, 6, 4, 7}, ws2[4] = {6, 2, 3, 4};
        conv_case("conv_transpose2d groups 2 dilation", &g2, xs2, ws2, 0, dt, dt, dt, 0);
    }
    /* the GEMM's transposed mode: 16 output channels per group; aligned
     * shapes in f32/f16 and unaligned in bf16 (the conv GEMM's pipelines) */
    for (int t = 0; t < NFDT; t++) {
        lm_dtype dt = fdts[t];
        int64_t u = dt == LM_BF16;
        cctx s2 = {K_CONVT, {2, 2}, {1, 1}, {1, 1}, {1 - u, 1 - u}, 1, (xview)(X_REV - t), false};
        int64_t xs[4] = {2, 8, 5, 6}, ws[4] = {8, 16, 3, 3};
        conv_case("conv_transpose2d stride 2 (gemm)", &s2, xs, ws, 16, dt, dt, dt, SPECIALS);
    }
    cctx g2 = {K_CONVT, {2, 3}, {1, 1}, {2, 1}, {1, 0}, 2, X_PLAIN, false};
    int64_t xg[4] = {1, 8, 4, 4}, wg[4] = {8, 16, 3, 3};
    conv_case("conv_transpose2d groups 2 dilation (gemm)", &g2, xg, wg, 32, LM_F32, LM_F32, LM_F32, 0);
    cctx dw = {K_CONVT, {2, 1}, {0, 1}, {1, 1}, {0, 0}, 5, X_PLAIN, false};
    int64_t xs[4] = {1, 5, 6, 5}, ws[4] = {5, 1, 4, 3};
    conv_case("conv_transpose2d depthwise", &dw, xs, ws, 5, LM_F32, LM_F32, LM_F32, 0);
}

/* ---- the halo-tile kernel (conv_halo.glsl) ---- */

/* does evaluating r run exactly the kernels `name` (one profile row)? */
static bool ran_kernel(lm_array *r, const char *name)
{
    assert_int_equal(lm_profile_begin(), LM_OK);
    assert_int_equal(lm_array_eval(r), LM_OK);
    lm_profile *p = lm_profile_end();
    assert_non_null(p);
    bool found = false;
    for (int i = 0; i < p->nrows; i++) found = found || !strcmp(p->rows[i].kernel, name);
    lm_profile_free(p);
    return found;
}

/* does a small f16 conv run the tensor-core halo kernel `shader` here? */
static bool halo_on_tensor_cores(const char *shader)
{
    int64_t xs[4] = {1, 16, 8, 16}, ws[4] = {16, 16, 3, 3}, p1[4] = {1, 1, 1, 1};
    lm_array *xc = data(4, xs, LM_F16, -1, 1, 0), *wc = data(4, ws, LM_F16, -0.5, 0.5, 0);
    lm_array *xg = lm_array_to(xc, vk), *wg = lm_array_to(wc, vk);
    assert_int_equal(lm_array_eval(xg), LM_OK);
    assert_int_equal(lm_array_eval(wg), LM_OK);
    lm_array *r = lm_conv2d(xg, wg, NULL, NULL, p1, NULL, 1);
    char both[64];
    snprintf(both, sizeof both, "conv_halo_w+%s", shader);
    bool on = ran_kernel(r, both);
    lm_array *all[] = {xc, wc, xg, wg, r};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) lm_array_release(all[i]);
    return on;
}

/* the small-channel f16 shapes of ESRGAN's dense blocks and their edges,
 * stride 1, through the halo-tile kernel: LUMEN_VK_CONV_HALO=simt runs its
 * staging, shifted views, packed weights, bias and stores without
 * cooperative matrices (lavapipe), =1 on tensor cores where the device
 * has them (elsewhere the GEMM takes them: the same answers) */
static void test_conv_halo(void **state)
{
    (void)state;
    const char *envs[2] = {"LUMEN_VK_CONV_HALO", "LUMEN_VK_CONV_HALO_TILE"};
    char *saved[2];
    for (int i = 0; i < 2; i++) saved[i] = getenv(envs[i]) ? strdup(getenv(envs[i])) : NULL;
    /* each mode with the 16-channel chunks, the 32-channel ones, the
     * weights read from the packed buffer, and the input read by runs of 4
     * pixels (where x allows) */
    const char *tiles[6] = {"h8", "h8k32", "h8g", "h8gq", "h8q", "h16w4q"};
    const char *shaders[6] = {"conv_halo", "conv_halo_k32", "conv_halo_g", "conv_halo_gq", "conv_halo_q",
                              "conv_halo_h16w4q"};
    for (int m = 0; m < 12; m++) {
        setenv("LUMEN_VK_CONV_HALO", m % 2 ? "1" : "simt", 1);
        setenv("LUMEN_VK_CONV_HALO_TILE", tiles[m / 2], 1);
        if (m % 2 && !halo_on_tensor_cores(shaders[m / 2])) {
            printf("test_conv_halo: no tensor-core halo kernel on this device (LUMEN_VK_CONV_HALO=1 gives the GEMM)\n");
            continue;
        }
        char name[96];
#define HALO_CASE(what, c, xs, ws, nb, bd) \
        (snprintf(name, sizeof name, "conv2d halo=%s %s %s", m % 2 ? "1" : "simt", tiles[m / 2], what), \
         conv_case(name, c, xs, ws, nb, LM_F16, LM_F16, bd, 0))
        cctx p1 = {K_CONV2D, {1, 1}, {1, 1, 1, 1}, {1, 1}, {0, 0}, 1, X_PLAIN, false};
        /* ESRGAN: 64 -> 32 (two tiles each way, whole fragments stored
         * straight), 192 -> 64 (12 channel chunks), 64 -> 3 (conv_last) */
        int64_t x1[4] = {1, 64, 16, 32}, w1[4] = {32, 64, 3, 3};
        HALO_CASE("64 -> 32", &p1, x1, w1, 32, LM_F16);
        int64_t x2[4] = {1, 192, 8, 16}, w2[4] = {64, 192, 3, 3};
        HALO_CASE("192 -> 64", &p1, x2, w2, 64, LM_F16);
        int64_t w3[4] = {3, 64, 3, 3};
        HALO_CASE("64 -> 3", &p1, x1, w3, 3, LM_F16);
        /* 16 and 48 channels; rows of 20 (a partial tile, element stores),
         * 11 rows (a partial tile in y), two images, rows of 24 (one whole
         * and one partial tile along x) */
        int64_t x4[4] = {1, 16, 12, 20}, w4[4] = {16, 16, 3, 3};
        HALO_CASE("16 -> 16, 12x20", &p1, x4, w4, 16, LM_F16);
        int64_t x5[4] = {2, 48, 11, 24}, w5[4] = {48, 48, 3, 3};
        HALO_CASE("48 -> 48, 2 images, 11x24", &p1, x5, w5, 48, LM_F16);
        /* channels that fill no whole fragment or chunk, no bias */
        int64_t x6[4] = {1, 24, 9, 16}, w6[4] = {40, 24, 3, 3};
        HALO_CASE("24 -> 40 no bias", &p1, x6, w6, 0, LM_F16);
        /* 1x1, 3x2 with asymmetric padding, a channel-sliced input and an
         * f32 bias (f32 output) */
        cctx one = {K_CONV2D, {1, 1}, {0, 0, 0, 0}, {1, 1}, {0, 0}, 1, X_CH, false};
        int64_t x7[4] = {1, 32, 10, 16}, w7[4] = {32, 32, 1, 1};
        HALO_CASE("1x1 channel-sliced", &one, x7, w7, 32, LM_F16);
        cctx asym = {K_CONV2D, {1, 1}, {2, 0, 1, 0}, {1, 1}, {0, 0}, 1, X_PLAIN, false};
        int64_t w8[4] = {32, 32, 3, 2};
        HALO_CASE("3x2 asymmetric padding, f32 bias", &asym, x7, w8, 32, LM_F32);
        /* more than 64 output channels: blocks of 64 (simt only; =1 leaves
         * them to the GEMM) */
        int64_t x9[4] = {1, 32, 8, 16}, w9[4] = {80, 32, 3, 3};
        HALO_CASE("32 -> 80", &p1, x9, w9, 80, LM_F16);
#undef HALO_CASE
    }
    /* simt: the kernel ran; the packed weights are made once per weight
     * view and again after the weights are written in place */
    setenv("LUMEN_VK_CONV_HALO", "simt", 1);
    setenv("LUMEN_VK_CONV_HALO_TILE", "h8", 1);
    int64_t xs[4] = {1, 32, 8, 16}, ws[4] = {32, 32, 3, 3}, p1[4] = {1, 1, 1, 1};
    lm_array *xc = data(4, xs, LM_F16, -1, 1, 0), *wc = data(4, ws, LM_F16, -0.5, 0.5, 0);
    lm_array *xg = lm_array_to(xc, vk), *wg = lm_array_to(wc, vk);
    assert_int_equal(lm_array_eval(xg), LM_OK);
    assert_int_equal(lm_array_eval(wg), LM_OK);
    lm_array *r1 = lm_conv2d(xg, wg, NULL, NULL, p1, NULL, 1), *r2 = lm_conv2d(xg, wg, NULL, NULL, p1, NULL, 1);
    assert_true(ran_kernel(r1, "conv_halo_w+conv_halo_simt"));
    assert_true(ran_kernel(r2, "conv_halo_simt"));
    lm_array *w2c = data(4, ws, LM_F16, -1, 1, 0);
    assert_int_equal(lm_array_assign(wg, w2c), LM_OK);
    lm_array *r3 = lm_conv2d(xg, wg, NULL, NULL, p1, NULL, 1), *e3 = lm_conv2d(xc, w2c, NULL, NULL, p1, NULL, 1);
    assert_true(ran_kernel(r3, "conv_halo_w+conv_halo_simt"));
    assert_int_equal(lm_array_eval(e3), LM_OK);
    compare("conv2d halo=simt after the weights were assigned", e3, r3, thr_for(LM_F16, false));
    lm_array *all[] = {xc, wc, xg, wg, r1, r2, w2c, r3, e3};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) lm_array_release(all[i]);
    for (int i = 0; i < 2; i++) {
        if (saved[i]) setenv(envs[i], saved[i], 1);
        else unsetenv(envs[i]);
        free(saved[i]);
    }
}

/* the kernels of r's evaluation, joined by '+' as the profile names them */
static bool ran_kernel_part(lm_array *r, const char *part)
{
    assert_int_equal(lm_profile_begin(), LM_OK);
    assert_int_equal(lm_array_eval(r), LM_OK);
    lm_profile *p = lm_profile_end();
    assert_non_null(p);
    bool found = false;
    for (int i = 0; i < p->nrows; i++) found = found || strstr(p->rows[i].kernel, part);
    lm_profile_free(p);
    return found;
}

/* split-K (LUMEN_VK_CONV_SPLITK=<parts>, on either GEMM kernel): each part
 * sums its share of K into an f32 slab, conv_splitk adds the slabs in order
 * with the bias.  3 parts over 5 steps (uneven), groups (the bias of each
 * group), f16/bf16 outputs, no bias, conv_transpose and conv1d, more parts
 * than steps; f16 1x1 over whole rows (B_FLAT on tensor cores) with and
 * without split; the pass ran, and two runs agree bit for bit. */
static void test_conv_splitk(void **state)
{
    (void)state;
    char *saved = getenv("LUMEN_VK_CONV_SPLITK") ? strdup(getenv("LUMEN_VK_CONV_SPLITK")) : NULL;
    setenv("LUMEN_VK_CONV_SPLITK", "3", 1);
    cctx pad1 = {K_CONV2D, {1, 1}, {1, 1, 1, 1}, {1, 1}, {0, 0}, 1, X_PLAIN, false};
    int64_t xs[4] = {2, 8, 8, 10}, ws[4] = {32, 8, 3, 3};
    conv_case("conv2d split-K 3", &pad1, xs, ws, 32, LM_F32, LM_F32, LM_F32, 0);
    cctx grp = {K_CONV2D, {1, 1}, {1, 1, 1, 1}, {1, 1}, {0, 0}, 2, X_PLAIN, false};
    int64_t xg[4] = {2, 8, 7, 8}, wg[4] = {32, 4, 3, 3};
    conv_case("conv2d split-K 3 groups 2", &grp, xg, wg, 32, LM_F32, LM_F32, LM_F32, 0);
    int64_t xh[4] = {2, 16, 8, 8}, wh[4] = {96, 16, 3, 3};
    conv_case("conv2d split-K 3 96 channels 8x8", &pad1, xh, wh, 96, LM_F16, LM_F16, LM_F16, 0);
    cctx odd = {K_CONV2D, {2, 1}, {1, 2, 0, 1}, {2, 1}, {0, 0}, 1, X_PLAIN, false};
    int64_t xo[4] = {1, 7, 13, 11}, wo[4] = {20, 7, 3, 2};
    conv_case("conv2d split-K 3 stride/pad/dilation no bias", &odd, xo, wo, 0, LM_BF16, LM_BF16, LM_BF16, 0);
    cctx tr = {K_CONVT, {2, 2}, {1, 1}, {1, 1}, {1, 1}, 1, X_PLAIN, false};
    int64_t xt[4] = {1, 24, 5, 6}, wt[4] = {24, 16, 3, 3};
    conv_case("conv_transpose2d split-K 3", &tr, xt, wt, 16, LM_F32, LM_F32, LM_F32, 0);
    cctx one = {K_CONV2D, {1, 1}, {0, 0, 0, 0}, {1, 1}, {0, 0}, 1, X_PLAIN, false};
    int64_t x1[4] = {2, 32, 8, 8}, w1[4] = {80, 32, 1, 1};
    conv_case("conv2d 1x1 split-K 3", &one, x1, w1, 80, LM_F16, LM_F16, LM_F16, 0);
    setenv("LUMEN_VK_CONV_SPLITK", "64", 1);      /* more parts than steps: one a step */
    conv_case("conv2d split-K 64", &pad1, xs, ws, 32, LM_F32, LM_F32, LM_F32, 0);
    setenv("LUMEN_VK_CONV_SPLITK", "1", 1);
    conv_case("conv2d 1x1 no split", &one, x1, w1, 80, LM_F16, LM_F16, LM_F16, 0);
    /* tensor cores: the input unfolded by conv_im2col (the default at
     * these sizes) and gathered in the GEMM's loop instead, with and
     * without split-K; stride 2 and padding through the unfolded copy */
    for (int m = 0; m < 4; m++) {
        setenv("LUMEN_VK_CONV_IM2COL", m % 2 ? "0" : "1", 1);
        setenv("LUMEN_VK_CONV_SPLITK", m / 2 ? "3" : "1", 1);
        char what[96];
        snprintf(what, sizeof what, "conv2d f16 im2col=%d split-K %d", m % 2 ? 0 : 1, m / 2 ? 3 : 1);
        conv_case(what, &pad1, xh, wh, 96, LM_F16, LM_F16, LM_F16, 0);
        cctx s2 = {K_CONV2D, {2, 2}, {1, 0, 1, 0}, {1, 1}, {0, 0}, 1, X_PLAIN, false};
        int64_t xs2[4] = {2, 16, 16, 16}, ws2[4] = {64, 16, 3, 3};
        snprintf(what, sizeof what, "conv2d f16 stride 2 im2col=%d split-K %d", m % 2 ? 0 : 1, m / 2 ? 3 : 1);
        conv_case(what, &s2, xs2, ws2, 64, LM_F16, LM_F16, LM_F32, 0);
        /* 144 pixels, K = 144: the depth-64 tile (KHR) with a partial K step */
        int64_t xs3[4] = {1, 16, 12, 12};
        snprintf(what, sizeof what, "conv2d f16 12x12 im2col=%d split-K %d", m % 2 ? 0 : 1, m / 2 ? 3 : 1);
        conv_case(what, &pad1, xs3, wh, 96, LM_F16, LM_F16, LM_F16, 0);
    }
    unsetenv("LUMEN_VK_CONV_IM2COL");
    conv_case("conv2d 1x1 no split, no bias", &one, x1, w1, 0, LM_F16, LM_F16, LM_F16, 0);

    /* the second pass ran, and the sums do not depend on the run */
    setenv("LUMEN_VK_CONV_SPLITK", "3", 1);
    int64_t p1[4] = {1, 1, 1, 1};
    lm_array *xc = data(4, xh, LM_F16, -1, 1, 0), *wc = data(4, wh, LM_F16, -0.5, 0.5, 0);
    lm_array *xv = lm_array_to(xc, vk), *wv = lm_array_to(wc, vk);
    assert_int_equal(lm_array_eval(xv), LM_OK);
    assert_int_equal(lm_array_eval(wv), LM_OK);
    lm_array *r1 = lm_conv2d(xv, wv, NULL, NULL, p1, NULL, 1), *r2 = lm_conv2d(xv, wv, NULL, NULL, p1, NULL, 1);
    assert_true(ran_kernel_part(r1, "+conv_splitk"));
    assert_int_equal(lm_array_eval(r2), LM_OK);
    size_t n = (size_t)r1->size;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    assert_int_equal(lm_array_read(r1, a, LM_F32), LM_OK);
    assert_int_equal(lm_array_read(r2, b, LM_F32), LM_OK);
    assert_memory_equal(a, b, n * sizeof *a);
    free(a);
    free(b);
    lm_array *all[] = {xc, wc, xv, wv, r1, r2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) lm_array_release(all[i]);
    if (saved) setenv("LUMEN_VK_CONV_SPLITK", saved, 1);
    else unsetenv("LUMEN_VK_CONV_SPLITK");
    free(saved);
}

/* ---- few output channels: conv_small.comp ---- */

/* setenv/unsetenv that give back the previous value (free with env_restore) */
typedef struct { const char *name; char *old; } env_saved;

static env_saved env_put(const char *name, const char *value)
{
    env_saved e = {name, getenv(name) ? strdup(getenv(name)) : NULL};
    if (value) setenv(name, value, 1);
    else unsetenv(name);
    return e;
}

static void env_restore(env_saved *e)
{
    if (e->old) setenv(e->name, e->old, 1);
    else unsetenv(e->name);
    free(e->old);
    e->old = NULL;
}

/* the conv of case c on Vulkan: the kernel `kernel` ran, and its answer is
 * conv_direct's (LUMEN_VK_CONV_SMALL=0) bit for bit: each output's sum is
 * taken in the same order */
static void small_same_bits(const char *what, const cctx *c, const int64_t *xs, const int64_t *ws, int64_t nb,
                            lm_dtype dt, const char *kernel)
{
    lm_array *in[3] = {xdata(xs, dt, c->xv, SPECIALS), data(4, ws, dt, -0.5, 0.5, 0), NULL};
    if (nb) in[2] = data(1, &nb, dt, -1, 1, 0);
    lm_array *gin[3] = {NULL, NULL, NULL};
    for (int k = 0; k < (nb ? 3 : 2); k++) {
        gin[k] = lm_array_to(in[k], vk);
        assert_int_equal(lm_array_eval(gin[k]), LM_OK);
    }
    cbuild cb = {*c, nb != 0};
    lm_array *r1 = b_conv(gin, &cb);
    assert_true(ran_kernel(r1, kernel));
    env_saved off = env_put("LUMEN_VK_CONV_SMALL", "0");
    lm_array *r0 = b_conv(gin, &cb);
    assert_true(ran_kernel(r0, "conv_direct"));
    env_restore(&off);
    size_t n = (size_t)r1->size;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    assert_int_equal(lm_array_read(r1, a, LM_F32), LM_OK);
    assert_int_equal(lm_array_read(r0, b, LM_F32), LM_OK);
    cases++;
    if (memcmp(a, b, n * sizeof *a)) {
        failures++;
        fprintf(stderr, "PARITY FAIL %s %s: conv_small and conv_direct differ\n", what, lm_dtype_name(dt));
    }
    free(a);
    free(b);
    lm_array *all[] = {in[0], in[1], in[2], gin[0], gin[1], gin[2], r0, r1};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i]) lm_array_release(all[i]);
}

/* conv_small against the CPU: 1, 3, 12 and 16 output channels (16 with the
 * GEMM turned off, which would take it), f32/f16/bf16, stride 2, padding,
 * dilation, bias or none, odd sizes, groups, conv1d, views of x and w,
 * 1, 2 and 4 pixels an invocation, workgroups of 64, 128 and 256
 * invocations, weights staged in several chunks of
 * input channels, a grid of many workgroups; then the same bits as
 * conv_direct, and conv_direct for weights that do not fit */
static void test_conv_small(void **state)
{
    (void)state;
    cctx pad1 = {K_CONV2D, {1, 1}, {1, 1, 1, 1}, {1, 1}, {0, 0}, 1, X_PLAIN, false};
    cctx odd = {K_CONV2D, {2, 1}, {1, 2, 0, 1}, {2, 1}, {0, 0}, 1, X_PLAIN, false};
    for (int t = 0; t < NFDT; t++) {
        lm_dtype dt = fdts[t];
        /* the VAE's conv_out and ESRGAN's last conv, small */
        int64_t xs[4] = {2, 16, 9, 13}, w3[4] = {3, 16, 3, 3}, w12[4] = {12, 16, 3, 3};
        conv_case("conv2d 16 -> 3 (small)", &pad1, xs, w3, 3, dt, dt, dt, SPECIALS);
        conv_case("conv2d 16 -> 12 (small)", &pad1, xs, w12, 12, dt, dt, dt, 0);
        /* one channel; stride 2 x 1, asymmetric padding, dilation, no bias */
        int64_t xo[4] = {1, 5, 13, 11}, w1[4] = {1, 5, 3, 2};
        conv_case("conv2d 5 -> 1 stride/pad/dilation (small)", &odd, xo, w1, 0, dt, dt, dt, 0);
        /* input views: transposed, channel-sliced, reversed; weights transposed */
        cctx cv = pad1;
        cv.xv = (xview)(X_T + t);
        cv.wt = t == 2;
        conv_case("conv2d 16 -> 3 (small)", &cv, xs, w3, 3, dt, dt, dt, 0);
    }
    /* 16 channels: the GEMM's unless it is off */
    env_saved gemm = env_put("LUMEN_VK_CONV_GEMM", "0");
    int64_t xs[4] = {1, 8, 7, 10}, w16[4] = {16, 8, 3, 3};
    conv_case("conv2d 8 -> 16 (small)", &pad1, xs, w16, 16, LM_F32, LM_F32, LM_F32, SPECIALS);
    conv_case("conv2d 8 -> 16 stride/pad/dilation (small)", &odd, xs, w16, 0, LM_F16, LM_F16, LM_F16, 0);
    env_restore(&gemm);
    /* groups (3 of 2 -> 4), depthwise with stride 2, conv1d, 5x5, mixed dtypes */
    cctx g3 = {K_CONV2D, {1, 1}, {0, 1, 1, 0}, {2, 1}, {0, 0}, 3, X_PLAIN, false};
    int64_t xg[4] = {2, 6, 9, 7}, wg[4] = {12, 2, 2, 3};
    conv_case("conv2d groups 3 (small)", &g3, xg, wg, 12, LM_F32, LM_F32, LM_F32, 0);
    cctx dw = {K_CONV2D, {2, 2}, {1, 1, 1, 1}, {1, 1}, {0, 0}, 5, X_PLAIN, false};
    int64_t xd[4] = {1, 5, 11, 8}, wd[4] = {5, 1, 3, 3};
    conv_case("conv2d depthwise stride 2 (small)", &dw, xd, wd, 5, LM_BF16, LM_BF16, LM_BF16, 0);
    cctx c1 = {K_CONV1D, {1, 2}, {0, 0, 3, 1}, {1, 2}, {0, 0}, 1, X_PLAIN, false};
    int64_t x1[4] = {3, 7, 1, 41}, w1[4] = {5, 7, 1, 4};
    conv_case("conv1d stride 2 dilation 2 (small)", &c1, x1, w1, 5, LM_F16, LM_F16, LM_F16, SPECIALS);
    cctx p2 = {K_CONV2D, {1, 1}, {2, 2, 2, 2}, {1, 1}, {0, 0}, 1, X_PLAIN, false};
    int64_t x5[4] = {1, 4, 10, 12}, w5[4] = {7, 4, 5, 5};
    conv_case("conv2d 5x5 mixed dtypes (small)", &p2, x5, w5, 7, LM_F32, LM_F16, LM_BF16, 0);
    /* 1, 2 and 4 pixels an invocation in workgroups of 256, 128 and 64
     * (the default here) over 40 x 70 pixels (11, 11 and 11 workgroups, the
     * last partial); 64 input channels of 16 outputs' 3x3 weights (36 vec4s
     * each) take two chunks of shared memory */
    int64_t xb[4] = {1, 64, 40, 70}, wb[4] = {13, 64, 3, 3};
    const char *pxs[3] = {"1", "2", "4"}, *wgs[3] = {"256", "128", NULL};
    for (int i = 0; i < 3; i++) {
        env_saved px = env_put("LUMEN_VK_CONV_SMALL_PX", pxs[i]), wgr = env_put("LUMEN_VK_CONV_SMALL_WG", wgs[i]);
        char what[80];
        snprintf(what, sizeof what, "conv2d 64 -> 13, %s px, workgroup %s (small)", pxs[i], wgs[i] ? wgs[i] : "64");
        conv_case(what, &pad1, xb, wb, 13, i == 1 ? LM_F16 : LM_F32, i == 1 ? LM_F16 : LM_F32, LM_F32, 0);
        small_same_bits(what, &pad1, xb, wb, 13, LM_F32, "conv_small");
        env_restore(&wgr);
        env_restore(&px);
    }
    /* the same bits as conv_direct in each storage dtype, with specials */
    for (int t = 0; t < NFDT; t++) {
        int64_t xs3[4] = {2, 16, 9, 13}, w3[4] = {3, 16, 3, 3};
        small_same_bits("conv2d 16 -> 3", &odd, xs3, w3, 3, fdts[t], "conv_small");
    }
    /* 13 channels of a 23x23 kernel: 2116 vec4s for one input channel,
     * more than the 32 KiB conv_small asks for: conv_direct */
    cctx p11 = {K_CONV2D, {1, 1}, {11, 11, 11, 11}, {1, 1}, {0, 0}, 1, X_PLAIN, false};
    int64_t xh[4] = {1, 2, 6, 5}, wh[4] = {13, 2, 23, 23};
    lm_array *xc = data(4, xh, LM_F32, -1, 1, 0), *wc = data(4, wh, LM_F32, -0.5, 0.5, 0);
    lm_array *xv = lm_array_to(xc, vk), *wv = lm_array_to(wc, vk);
    assert_int_equal(lm_array_eval(xv), LM_OK);
    assert_int_equal(lm_array_eval(wv), LM_OK);
    lm_array *r = lm_conv2d(xv, wv, NULL, NULL, p11.pad, NULL, 1), *e = lm_conv2d(xc, wc, NULL, NULL, p11.pad, NULL, 1);
    assert_true(ran_kernel(r, "conv_direct"));
    compare("conv2d 2 -> 13 23x23 (direct)", e, r, thr_for(LM_F32, false));
    lm_array *all[] = {xc, wc, xv, wv, r, e};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) lm_array_release(all[i]);
}

/* ---- Winograd F(2x2, 3x3): LUMEN_VK_CONV_F32=winograd ---- */

/* the largest errors of the f32 convs of case c against the CPU's f64 sum:
 * max abs, and max abs over max |reference| (*rel) and NMSE (*nmse) */
static double conv_err64(const cctx *c, lm_array **in, int nin, double *rel, double *nmse)
{
    lm_array *in64[3] = {NULL, NULL, NULL}, *gin[3] = {NULL, NULL, NULL};
    for (int k = 0; k < nin; k++) {
        in64[k] = lm_cast(in[k], LM_F64);
        gin[k] = lm_array_to(in[k], vk);
        assert_int_equal(lm_array_eval(gin[k]), LM_OK);
    }
    cbuild cb = {*c, nin == 3};
    lm_array *r = b_conv(in64, &cb), *y = b_conv(gin, &cb);
    size_t n = (size_t)r->size;
    double *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), mx = 0, ref = 0, num = 0, den = 0;
    assert_int_equal(lm_array_read(r, a, LM_F64), LM_OK);
    assert_int_equal(lm_array_read(y, b, LM_F64), LM_OK);
    for (size_t i = 0; i < n; i++) {
        mx = fmax(mx, fabs(a[i] - b[i]));
        ref = fmax(ref, fabs(a[i]));
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += a[i] * a[i];
    }
    *rel = mx / ref;
    *nmse = num / den;
    free(a);
    free(b);
    lm_array *all[] = {in64[0], in64[1], in64[2], gin[0], gin[1], gin[2], r, y};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i]) lm_array_release(all[i]);
    return mx;
}

/* one Winograd case: against the CPU (the harness' f32 threshold), the
 * path ran, and its error against the f64 sum beside the default path's
 * (printed: the figures docs/VULKAN.md quotes) */
static void wino_case(const char *name, const cctx *c, const int64_t *xs, const int64_t *ws, int64_t nb,
                      lm_dtype dt)
{
    lm_array *in[3] = {xdata(xs, dt, c->xv, 0), data(4, ws, dt, -0.5, 0.5, 0), NULL};
    if (nb) in[2] = data(1, &nb, dt, -1, 1, 0);
    int nin = nb ? 3 : 2;
    char what[160];
    snprintf(what, sizeof what, "winograd %s %s%s%s%s", name, lm_dtype_name(dt), xview_name[c->xv],
             c->wt ? " w transposed" : "", nb ? "" : " no bias");
    cbuild cb = {*c, nb != 0};
    /* a handful of outputs: the NMSE is one output's relative error squared
     * (below); 1e-10 holds that to 1e-5 (the H200's CPU gave 1.74e-12 at
     * "3 -> 1 (one output)" on 0f828b1) */
    bool tiny = xs[0] * ws[0] * xs[2] * xs[3] < 16;    /* at most images x outputs x input pixels */
    run_case(what, nin, in, b_conv, &cb, tiny && dt == LM_F32 ? 1e-10 : thr_for(dt, false));
    lm_array *gin[3] = {NULL, NULL, NULL};
    for (int k = 0; k < nin; k++) {
        gin[k] = lm_array_to(in[k], vk);
        assert_int_equal(lm_array_eval(gin[k]), LM_OK);
    }
    lm_array *r = b_conv(gin, &cb);
    cases++;
    if (!ran_kernel_part(r, "conv_wino_v+")) {
        failures++;
        fprintf(stderr, "PARITY FAIL %s: conv_wino_v did not run\n", what);
    }
    if (dt == LM_F32) {
        double rw, nw, rd, nd;
        double aw = conv_err64(c, in, nin, &rw, &nw);
        env_saved off = env_put("LUMEN_VK_CONV_F32", NULL);
        double ad = conv_err64(c, in, nin, &rd, &nd);
        env_restore(&off);
        fprintf(stderr, "  %s: against f64: winograd max abs %.3g, rel %.3g, nmse %.3g; default %.3g, %.3g, %.3g\n",
                what, aw, rw, nw, ad, rd, nd);
        cases++;
        /* an NMSE over a handful of outputs is one output's relative error
         * squared: Winograd's transforms give a single f32 output a few
         * ulps more than the direct sum (the H200: 1.67e-6 relative, NMSE
         * 2.79e-12, at "3 -> 1 (one output)"), so there the relative
         * error is held to 1e-5 instead */
        bool ok = r->size < 8 ? rw <= 1e-5 : nw <= thr_for(LM_F32, false);
        if (!ok) {
            failures++;
            fprintf(stderr, "PARITY FAIL %s: nmse %.3g, max rel %.3g against f64\n", what, nw, rw);
        }
    }
    lm_array *all[] = {in[0], in[1], in[2], gin[0], gin[1], gin[2], r};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i]) lm_array_release(all[i]);
}

/* the dispatches of a conv of case c whose filters were transformed
 * already (an earlier conv with the same weights) */
static int64_t wino_dispatches(const cctx *c, const int64_t *xs, const int64_t *ws)
{
    lm_array *in[2] = {xdata(xs, LM_F32, c->xv, 0), data(4, ws, LM_F32, -0.5, 0.5, 0)}, *gin[2];
    for (int k = 0; k < 2; k++) {
        gin[k] = lm_array_to(in[k], vk);
        assert_int_equal(lm_array_eval(gin[k]), LM_OK);
    }
    cbuild cb = {*c, false};
    lm_array *r1 = b_conv(gin, &cb), *r2 = b_conv(gin, &cb);
    assert_int_equal(lm_array_eval(r1), LM_OK);
    int64_t d0 = lm_vulkan_dispatch_count();
    assert_int_equal(lm_array_eval(r2), LM_OK);
    int64_t d = lm_vulkan_dispatch_count() - d0;
    lm_array *all[] = {in[0], in[1], gin[0], gin[1], r1, r2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) lm_array_release(all[i]);
    return d;
}

/* 3x3 stride-1 convs by Winograd's F(2x2, 3x3) (nn_conv.c's run_wino,
 * forced by LUMEN_VK_CONV_F32=winograd): odd heights and widths (partial
 * tiles), padding 0, 1 and asymmetric, one to three images, channel
 * counts that are no multiple of 4, bias or none, views of x and w, f16
 * and bf16 storage (on the f32-arithmetic kernels here), a product big
 * enough for the f32 GEMM tiles, chunks of one tile row and of two images
 * (LUMEN_VK_CONV_WINO_KB); the filters' transform made once per weight
 * and again after the weights are written in place; convs it does not
 * take (stride 2, 5x5, groups) keep their kernels */
static void test_conv_winograd(void **state)
{
    (void)state;
    env_saved ask = env_put("LUMEN_VK_CONV_F32", "winograd");
    cctx p1 = {K_CONV2D, {1, 1}, {1, 1, 1, 1}, {1, 1}, {0, 0}, 1, X_PLAIN, false};
    cctx p0 = {K_CONV2D, {1, 1}, {0, 0, 0, 0}, {1, 1}, {0, 0}, 1, X_PLAIN, false};
    cctx asym = {K_CONV2D, {1, 1}, {2, 0, 1, 3}, {1, 1}, {0, 0}, 1, X_PLAIN, false};
    int64_t x1[4] = {1, 8, 8, 10}, w1[4] = {8, 8, 3, 3};
    wino_case("8 -> 8 pad 1", &p1, x1, w1, 8, LM_F32);
    int64_t x2[4] = {3, 5, 7, 9}, w2[4] = {7, 5, 3, 3};
    wino_case("5 -> 7, 3 images, 7x9, pad 1", &p1, x2, w2, 7, LM_F32);
    wino_case("5 -> 7, 3 images, 7x9, pad 0", &p0, x2, w2, 0, LM_F32);
    int64_t x3[4] = {2, 17, 9, 6}, w3[4] = {20, 17, 3, 3};
    wino_case("17 -> 20, 2 images, 9x6, pad 0", &p0, x3, w3, 20, LM_F32);
    wino_case("17 -> 20, 2 images, 9x6, asymmetric padding", &asym, x3, w3, 0, LM_F32);
    int64_t x4[4] = {1, 3, 3, 3}, w4[4] = {1, 3, 3, 3};
    wino_case("3 -> 1, 3x3 pad 0 (one output)", &p0, x4, w4, 1, LM_F32);
    for (int v = X_T; v <= X_REV; v++) {
        cctx cv = p1;
        cv.xv = (xview)v;
        cv.wt = v == X_REV;
        wino_case("5 -> 7 pad 1", &cv, x2, w2, 7, LM_F32);
    }
    /* 16-bit convs: on the f32-arithmetic kernels (a device with tensor
     * cores sends them there otherwise, and Winograd takes only the others) */
    setenv("LUMEN_VK_CONV_COOP", "0", 1);
    wino_case("17 -> 20 pad 1", &p1, x3, w3, 20, LM_F16);
    wino_case("17 -> 20 pad 1", &p1, x3, w3, 0, LM_BF16);
    unsetenv("LUMEN_VK_CONV_COOP");
    /* 32 channels over 32x64 pixels: 32 x 512 x 16 products, on the f32 tiles */
    int64_t x5[4] = {1, 16, 32, 63}, w5[4] = {32, 16, 3, 3};
    wino_case("16 -> 32, 32x63 (f32 tiles)", &p1, x5, w5, 32, LM_F32);
    /* chunks: one tile row (12 chunks: 4 rows of tiles an image), two
     * images (2 chunks: 18 KiB holds 8 rows of 5 tiles of 7 channels) */
    const char *kb[2] = {"1", "18"};
    int64_t chunks[2] = {12, 2};
    for (int m = 0; m < 2; m++) {
        env_saved chunk = env_put("LUMEN_VK_CONV_WINO_KB", kb[m]);
        char name[96];
        snprintf(name, sizeof name, "5 -> 7, 3 images, chunks of %s KiB", kb[m]);
        wino_case(name, &p1, x2, w2, 7, LM_F32);
        cases++;
        int64_t d = wino_dispatches(&p1, x2, w2);
        if (d != 3 * chunks[m]) {
            failures++;
            fprintf(stderr, "PARITY FAIL %s: %lld dispatches, not 3 for each of %lld chunks\n", name, (long long)d,
                    (long long)chunks[m]);
        }
        env_restore(&chunk);
    }
    /* convs it does not take keep their kernels */
    cctx s2 = {K_CONV2D, {2, 2}, {1, 1, 1, 1}, {1, 1}, {0, 0}, 1, X_PLAIN, false};
    int64_t w6[4] = {24, 8, 5, 5}, w7[4] = {32, 8, 3, 3};
    conv_case("stride 2 with winograd asked", &s2, x1, w7, 32, LM_F32, LM_F32, LM_F32, 0);
    cctx p2 = {K_CONV2D, {1, 1}, {2, 2, 2, 2}, {1, 1}, {0, 0}, 1, X_PLAIN, false};
    conv_case("5x5 with winograd asked", &p2, x1, w6, 24, LM_F32, LM_F32, LM_F32, 0);

    /* the filters' transform: once per weight view, again after the
     * weights are written in place */
    int64_t p[4] = {1, 1, 1, 1};
    lm_array *xc = data(4, x3, LM_F32, -1, 1, 0), *wc = data(4, w3, LM_F32, -0.5, 0.5, 0);
    lm_array *xg = lm_array_to(xc, vk), *wg = lm_array_to(wc, vk);
    assert_int_equal(lm_array_eval(xg), LM_OK);
    assert_int_equal(lm_array_eval(wg), LM_OK);
    lm_array *r1 = lm_conv2d(xg, wg, NULL, NULL, p, NULL, 1), *r2 = lm_conv2d(xg, wg, NULL, NULL, p, NULL, 1);
    assert_true(ran_kernel_part(r1, "conv_wino_u+conv_wino_v+"));
    assert_true(ran_kernel_part(r2, "conv_wino_v+"));
    assert_false(ran_kernel_part(r2, "conv_wino_u"));
    lm_array *w2c = data(4, w3, LM_F32, -1, 1, 0);
    assert_int_equal(lm_array_assign(wg, w2c), LM_OK);
    lm_array *r3 = lm_conv2d(xg, wg, NULL, NULL, p, NULL, 1), *e3 = lm_conv2d(xc, w2c, NULL, NULL, p, NULL, 1);
    assert_true(ran_kernel_part(r3, "conv_wino_u+conv_wino_v+"));
    assert_int_equal(lm_array_eval(e3), LM_OK);
    compare("winograd after the weights were assigned", e3, r3, thr_for(LM_F32, false));
    lm_array *all[] = {xc, wc, xg, wg, r1, r2, w2c, r3, e3};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) lm_array_release(all[i]);
    env_restore(&ask);
}

/* f64 has no kernel here: the node runs on the CPU and agrees bitwise */
static void test_conv_f64_fallback(void **state)
{
    (void)state;
    int64_t xs[4] = {1, 4, 6, 7}, ws[4] = {16, 4, 3, 3}, p1[4] = {1, 1, 1, 1};
    lm_array *xc = data(4, xs, LM_F64, -1, 1, 0), *wc = data(4, ws, LM_F64, -1, 1, 0);
    lm_array *xg = lm_array_to(xc, vk), *wg = lm_array_to(wc, vk);
    assert_int_equal(lm_array_eval(xg), LM_OK);
    assert_int_equal(lm_array_eval(wg), LM_OK);
    lm_array *rc = lm_conv2d(xc, wc, NULL, NULL, p1, NULL, 1), *rg = lm_conv2d(xg, wg, NULL, NULL, p1, NULL, 1);
    assert_int_equal(lm_array_eval(rg), LM_OK);
    assert_true(lm_eval_last_stats().fallbacks >= 1);
    assert_true(rg->device == vk);
    compare("conv2d f64 (CPU fallback)", rc, rg, 0);
    lm_array_release(rc); lm_array_release(rg);
    lm_array_release(xg); lm_array_release(wg);
    lm_array_release(xc); lm_array_release(wc);
}

/* ---- pooling and upsampling ---- */
typedef enum { P_MAX, P_AVG, P_ADAPT, P_NEAR, P_BILIN } pool_kind;

typedef struct {
    pool_kind kind;
    int64_t k[2], s[2], p[2], d[2];
    bool ceil, cip, align, by_scale;
    int64_t div, size[2];
    double scale[2];
    xview xv;
} pctx;

static lm_array *b_pool(lm_array **in, const void *pv)
{
    const pctx *c = pv;
    lm_array *x = xview_apply(in[0], c->xv), *r = NULL;
    switch (c->kind) {
    case P_MAX: r = lm_max_pool2d(x, c->k, c->s, c->p, c->d, c->ceil); break;
    case P_AVG: r = lm_avg_pool2d(x, c->k, c->s, c->p, c->ceil, c->cip, c->div); break;
    case P_ADAPT: r = lm_adaptive_avg_pool2d(x, c->size); break;
    default:
        r = lm_upsample(x, c->by_scale ? NULL : c->size, c->by_scale ? c->scale : NULL,
                        c->kind == P_NEAR ? LM_UPSAMPLE_NEAREST : LM_UPSAMPLE_BILINEAR, c->align);
    }
    lm_array_release(x);
    return r;
}

static void pool_case(const char *name, const pctx *c, const int64_t *xs, lm_dtype dt, int flags)
{
    bool fl = lm_dtype_is_float(dt);
    int64_t src[4];
    xview_source(c->xv, xs, src);
    lm_array *x = data(4, src, dt, fl ? -2 : 0, fl ? 2 : 100, flags);
    char what[160];
    snprintf(what, sizeof what, "%s %s[%lld,%lld,%lld,%lld]%s", name, lm_dtype_name(dt), (long long)xs[0],
             (long long)xs[1], (long long)xs[2], (long long)xs[3], xview_name[c->xv]);
    run_case(what, 1, &x, b_pool, c, thr_for(dt, false));
    lm_array_release(x);
}

static void test_pool(void **state)
{
    (void)state;
    int64_t xs[4] = {2, 3, 9, 11}, xs2[4] = {1, 4, 8, 7};
    for (int t = 0; t < NFDT; t++) {
        lm_dtype dt = fdts[t];
        xview v = (xview)(X_T + t);
        pctx mx = {.kind = P_MAX, .k = {3, 3}, .s = {2, 2}, .p = {1, 1}, .d = {1, 1}};
        pool_case("max_pool2d 3x3 stride 2 pad 1", &mx, xs, dt, SPECIALS);
        pctx mx2 = {.kind = P_MAX, .k = {2, 3}, .s = {2, 1}, .p = {1, 1}, .d = {2, 1}, .ceil = true, .xv = v};
        pool_case("max_pool2d dilation ceil_mode", &mx2, xs2, dt, 0);
        pctx av = {.kind = P_AVG, .k = {3, 2}, .s = {2, 2}, .p = {1, 1}, .ceil = true, .cip = true};
        pool_case("avg_pool2d ceil_mode count_include_pad", &av, xs, dt, SPECIALS);
        pctx av2 = {.kind = P_AVG, .k = {3, 3}, .s = {2, 3}, .p = {1, 1}, .ceil = true, .xv = v};
        pool_case("avg_pool2d ceil_mode exclude pad", &av2, xs2, dt, 0);
        pctx av3 = {.kind = P_AVG, .k = {2, 2}, .s = {1, 2}, .p = {1, 0}, .div = 3};
        pool_case("avg_pool2d divisor 3", &av3, xs2, dt, 0);
        pctx ad = {.kind = P_ADAPT, .size = {4, 3}, .xv = v};
        pool_case("adaptive_avg_pool2d 4x3", &ad, xs, dt, 0);
        pctx ad2 = {.kind = P_ADAPT, .size = {11, 1}};
        pool_case("adaptive_avg_pool2d 11x1", &ad2, xs2, dt, SPECIALS);
    }
    /* integer max_pool runs on the CPU */
    pctx mx = {.kind = P_MAX, .k = {2, 2}, .s = {2, 2}, .p = {1, 0}, .d = {1, 1}};
    pool_case("max_pool2d (CPU fallback)", &mx, xs, LM_I32, 0);
}

static void test_upsample(void **state)
{
    (void)state;
    int64_t xs[4] = {1, 3, 5, 7};
    for (int t = 0; t < NFDT; t++) {
        lm_dtype dt = fdts[t];
        xview v = (xview)(X_T + t);
        pctx n2 = {.kind = P_NEAR, .by_scale = true, .scale = {2, 2}};
        pool_case("upsample nearest x2", &n2, xs, dt, SPECIALS);
        pctx n3 = {.kind = P_NEAR, .size = {9, 4}, .xv = v};
        pool_case("upsample nearest to 9x4", &n3, xs, dt, 0);
        pctx b1 = {.kind = P_BILIN, .by_scale = true, .scale = {1.5, 2.5}};
        pool_case("upsample bilinear x1.5,x2.5", &b1, xs, dt, 0);
        pctx b2 = {.kind = P_BILIN, .size = {8, 13}, .align = true, .xv = v};
        pool_case("upsample bilinear align_corners", &b2, xs, dt, 0);
        pctx b3 = {.kind = P_BILIN, .size = {3, 4}};
        pool_case("upsample bilinear down to 3x4", &b3, xs, dt, SPECIALS);
        pctx b4 = {.kind = P_BILIN, .size = {1, 6}, .align = true};
        pool_case("upsample bilinear align_corners to 1 row", &b4, xs, dt, 0);
    }
    /* nearest moves raw bits: every dtype */
    const lm_dtype raw[] = {LM_I32, LM_U8, LM_I64, LM_F64, LM_BOOL, LM_I16};
    for (size_t k = 0; k < sizeof raw / sizeof *raw; k++) {
        pctx n = {.kind = P_NEAR, .by_scale = true, .scale = {1.7, 0.6}, .xv = X_REV};
        pool_case("upsample nearest x1.7,x0.6", &n, xs, raw[k], 0);
    }
}

#define VK_TEST(f) cmocka_unit_test(f)

int main(void)
{
    parity_setup(NULL);
    if (!vk) {
        printf("test_vulkan_nn_conv: no Vulkan device (%s); skipped\n", lm_vulkan_status());
        return LM_TEST_SKIP;
    }
    const struct CMUnitTest tests[] = {
        VK_TEST(test_conv_gemm), VK_TEST(test_conv_halo), VK_TEST(test_conv_splitk), VK_TEST(test_conv_direct), VK_TEST(test_conv_small),
        VK_TEST(test_conv_transpose), VK_TEST(test_conv_coop_bf16), VK_TEST(test_conv_winograd),
        VK_TEST(test_conv_f64_fallback), VK_TEST(test_pool), VK_TEST(test_upsample),
        VK_TEST(test_summary),
    };
    return PARITY_RUN(tests);
}

#else
int main(void)
{
    printf("test_vulkan_nn_conv: built without Vulkan; skipped\n");
    return LM_TEST_SKIP;
}
#endif
