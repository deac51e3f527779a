/* test_vulkan_nn_norm.c - the norm family of neural-network ops on Vulkan
 * (backends/vulkan/nn_norm.c) against the CPU backend: softmax and
 * log_softmax over every kind of axis, layer/rms/group norm with and without
 * affine parameters, attention (masks, causal, grouped heads, head dims 40
 * to 512, L = 1 and L not a multiple of the block; the tiled kernel's
 * cases on their own, with views it copies, D = 512 split and not),
 * every RoPE builder,
 * tril/triu and one_hot, in f32/f16/bf16 (tril/triu in any dtype), on
 * contiguous, transposed and sliced inputs.  Each supported case must run
 * on the GPU (no CPU fallback counted); f64 cases must give the CPU's
 * result through the fallback.  Same harness as test_vulkan_parity.c
 * (NMSE per dtype, NaN/Inf positions, guard arrays); PARITY_QUICK=1 runs
 * a sixth of the cases (the validation-layer pass). */
#include "testutil.h"
#ifdef LM_HAVE_VULKAN

#include "parity/parity.h"

static const lm_dtype fdt[3] = {LM_F32, LM_F16, LM_BF16};

/* run_case, plus: the Vulkan result must not have needed the CPU fallback
 * (or must have, when expect_fallback) */
static void nn_case(const char *what, int nin, lm_array **cin, build_fn f, const void *ctx, double thr,
                    bool expect_fallback)
{
    run_case_fb(what, nin, cin, f, ctx, thr, expect_fallback ? 1 : 0);
}

static lm_array *shaped(int nd, const int64_t *sh, lm_dtype dt, double lo, double hi, int flags)
{
    return data(nd, sh, dt, lo, hi, flags);
}

/* ------------------------------------------------------------ softmax */

typedef struct { bool lg; int axis; view_kind view; } smctx;

static lm_array *b_softmax(lm_array **in, const void *p)
{
    const smctx *c = p;
    lm_array *x = apply_view(in[0], c->view);
    lm_array *r = c->lg ? lm_log_softmax(x, c->axis) : lm_softmax(x, c->axis);
    lm_array_release(x);
    return r;
}

static void test_softmax(void **state)
{
    (void)state;
    struct { int nd; int64_t sh[3]; int axis; } shapes[] = {
        {2, {7, 33}, -1}, {2, {3, 1000}, 1}, {2, {300, 6}, 0}, {3, {40, 17, 9}, 1},
        {3, {5, 3, 11}, 0}, {1, {1}, 0}, {2, {257, 5}, -1},
    };
    /* more rows than one dispatch has workgroups (65535): the kernel loops */
    int64_t many[2] = {65600, 20};
    lm_array *xm = shaped(2, many, LM_F32, -6, 6, SPECIALS);
    smctx cm = {false, -1, V_NONE};
    nn_case("softmax f32 [65600,20]", 1, &xm, b_softmax, &cm, thr_for(LM_F32, true), false);
    lm_array_release(xm);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int d = 0; d < 3; d++)
            for (int lg = 0; lg < 2; lg++)
                for (view_kind vw = V_NONE; vw <= V_SLICE; vw++) {
                    if (vw == V_SLICE && shapes[s].sh[shapes[s].nd - 1] < 2) continue;
                    lm_array *x = shaped(shapes[s].nd, shapes[s].sh, fdt[d], -6, 6, d == 0 ? SPECIALS : 0);
                    smctx c = {lg, shapes[s].axis, vw};
                    char what[160];
                    snprintf(what, sizeof what, "%s %s shape %zu axis %d%s", lg ? "log_softmax" : "softmax",
                             lm_dtype_name(fdt[d]), s, c.axis, view_name[vw]);
                    nn_case(what, 1, &x, b_softmax, &c, thr_for(fdt[d], true), false);
                    lm_array_release(x);
                }
}

/* ------------------------------------------------------------ norms */

typedef struct { lm_op op; int naxes; int64_t groups; bool w, b; view_kind view; } nctx;

static lm_array *b_norm(lm_array **in, const void *p)
{
    const nctx *c = p;
    lm_array *x = apply_view(in[0], c->view);
    lm_array *w = c->w ? in[1] : NULL, *b = c->b ? in[2] : NULL, *r;
    if (c->op == LM_OP_LAYER_NORM) r = lm_layer_norm(x, c->naxes, w, b, 1e-5);
    else if (c->op == LM_OP_RMS_NORM) r = lm_rms_norm(x, c->naxes, w, 1e-6);
    else r = lm_group_norm(x, c->groups, w, b, 1e-5);
    lm_array_release(x);
    return r;
}

/* x of shape sh (as the op sees it, after the view) and affine params */
static void norm_cases(lm_op op, int nd, const int64_t *sh, int naxes, int64_t groups, const char *name)
{
    for (int d = 0; d < 3; d++)
        for (int aff = 0; aff < 3; aff++)
            for (view_kind vw = V_NONE; vw <= V_SLICE; vw += 2) {
                /* a sliced view: the stored x is twice as wide in its last axis */
                int64_t xs[4];
                memcpy(xs, sh, sizeof(int64_t) * (size_t)nd);
                if (vw == V_SLICE) xs[nd - 1] = 2 * sh[nd - 1] + 1;
                lm_array *in[3];
                in[0] = shaped(nd, xs, fdt[d], -3, 5, aff == 2 ? SPECIALS : 0);
                int64_t ps[4], pn = op == LM_OP_GROUP_NORM ? 1 : naxes;
                if (op == LM_OP_GROUP_NORM) ps[0] = sh[1];
                else memcpy(ps, sh + nd - naxes, sizeof(int64_t) * (size_t)naxes);
                /* weights in another float dtype than x, once */
                lm_dtype wdt = aff == 1 ? LM_F32 : fdt[d];
                in[1] = shaped((int)pn, ps, wdt, 0.5, 1.5, 0);
                in[2] = shaped((int)pn, ps, wdt, -1, 1, 0);
                nctx c = {op, naxes, groups, aff > 0, aff > 0 && op != LM_OP_RMS_NORM, vw};
                char what[160];
                snprintf(what, sizeof what, "%s %s %s%s%s", name, lm_dtype_name(fdt[d]),
                         aff ? "affine" : "plain", aff == 2 ? " specials" : "", view_name[vw]);
                nn_case(what, 3, in, b_norm, &c, thr_for(fdt[d], true), false);
                for (int k = 0; k < 3; k++) lm_array_release(in[k]);
            }
}

/* one large case per float dtype (affine; NaN/Inf in f32), values in
 * [lo, hi): a mean far from 0 checks that the statistics do not cancel */
static void norm_big(lm_op op, int nd, const int64_t *sh, int naxes, int64_t groups, double lo, double hi,
                     const char *name)
{
    for (int d = 0; d < 3; d++) {
        lm_array *in[3];
        in[0] = shaped(nd, sh, fdt[d], lo, hi, d == 0 ? SPECIALS : 0);
        int64_t ps[4], pn = op == LM_OP_GROUP_NORM ? 1 : naxes;
        if (op == LM_OP_GROUP_NORM) ps[0] = sh[1];
        else memcpy(ps, sh + nd - naxes, sizeof(int64_t) * (size_t)naxes);
        in[1] = shaped((int)pn, ps, fdt[d], 0.5, 1.5, 0);
        in[2] = shaped((int)pn, ps, fdt[d], -1, 1, 0);
        nctx c = {op, naxes, groups, true, op != LM_OP_RMS_NORM, V_NONE};
        char what[160];
        snprintf(what, sizeof what, "%s %s [%g, %g)", name, lm_dtype_name(fdt[d]), lo, hi);
        /* with an offset, x - mean loses the offset's bits on both sides
         * (the CPU's y = a x + (b - a mean) in f32 too) */
        double thr = thr_for(fdt[d], true);
        if (lo > 100 && thr < 1e-5) thr = 1e-5;
        nn_case(what, 3, in, b_norm, &c, thr, false);
        for (int k = 0; k < 3; k++) lm_array_release(in[k]);
    }
}

/* layer norm of rows that start off the 4-element vector alignment: a
 * contiguous view at element 1 of a flat buffer */
static lm_array *b_norm_off1(lm_array **in, const void *p)
{
    (void)p;
    int64_t sh[2] = {5, 12};
    lm_array *s = lm_slice(in[0], 0, 1, 61, 1), *x = lm_reshape(s, 2, sh);
    lm_array *r = lm_layer_norm(x, 1, in[1], in[2], 1e-5);
    lm_array_release(s);
    lm_array_release(x);
    return r;
}

static void test_norms_vec(void **state)
{
    (void)state;
    /* nn_norm_vec's split (rows over 16384 elements): vector loads with
     * channels changing inside a vector (spatial 9801), element loads
     * (odd row), layer and RMS norm split, f16/bf16 */
    int64_t g1[4] = {1, 8, 99, 99}, g2[4] = {1, 6, 101, 101}, l1[2] = {3, 20000}, l2[2] = {2, 20001};
    norm_big(LM_OP_GROUP_NORM, 4, g1, 0, 2, -3, 5, "group_norm [1,8,99,99] g2");
    norm_big(LM_OP_GROUP_NORM, 4, g1, 0, 2, 1000, 1004, "group_norm [1,8,99,99] g2");
    norm_big(LM_OP_GROUP_NORM, 4, g2, 0, 2, 1000, 1004, "group_norm [1,6,101,101] g2 (odd rows)");
    norm_big(LM_OP_LAYER_NORM, 2, l1, 1, 0, 1000, 1004, "layer_norm [3,20000] (split)");
    norm_big(LM_OP_RMS_NORM, 2, l2, 1, 0, -3, 5, "rms_norm [2,20001] (split, odd)");
    /* a row per workgroup held in registers: long, odd, and just over
     * what fits (16384: nn_rows then) */
    int64_t r1[2] = {3, 4100}, r2[2] = {2, 16384}, r3[2] = {2, 16385}, r4[2] = {5, 1283}, g3[2] = {3, 1285};
    norm_big(LM_OP_LAYER_NORM, 2, r1, 1, 0, 1000, 1004, "layer_norm [3,4100]");
    norm_big(LM_OP_LAYER_NORM, 2, r2, 1, 0, -3, 5, "layer_norm [2,16384]");
    norm_big(LM_OP_RMS_NORM, 2, r3, 1, 0, -3, 5, "rms_norm [2,16385]");
    norm_big(LM_OP_GROUP_NORM, 2, g3, 0, 5, -3, 5, "group_norm [3,1285] g5 (no spatial dims)");
    const int64_t *rs[4] = {r1, r2, r3, r4};
    for (int s = 0; s < 4; s++)
        for (int d = 0; d < 3; d++)
            for (int lg = 0; lg < 2; lg++) {
                lm_array *x = shaped(2, rs[s], fdt[d], -30, 30, d == 0 ? SPECIALS : 0);
                smctx c = {lg, -1, V_NONE};
                char what[160];
                snprintf(what, sizeof what, "%s %s [%lld,%lld]", lg ? "log_softmax" : "softmax",
                         lm_dtype_name(fdt[d]), (long long)rs[s][0], (long long)rs[s][1]);
                nn_case(what, 1, &x, b_softmax, &c, thr_for(fdt[d], true), false);
                lm_array_release(x);
            }
    int64_t flat = 64, p = 12;
    for (int d = 0; d < 3; d++) {
        lm_array *in[3] = {shaped(1, &flat, fdt[d], -3, 5, 0), shaped(1, &p, fdt[d], 0.5, 1.5, 0),
                           shaped(1, &p, fdt[d], -1, 1, 0)};
        char what[96];
        snprintf(what, sizeof what, "layer_norm [5,12] at element 1 %s", lm_dtype_name(fdt[d]));
        nn_case(what, 3, in, b_norm_off1, NULL, thr_for(fdt[d], true), false);
        for (int k = 0; k < 3; k++) lm_array_release(in[k]);
    }
    /* the split's settings: a combining dispatch or not, tiles in the stats
     * pass's order, 8 vectors a thread, element loads, the kernels before
     * nn_norm_vec (LUMEN_VK_NORM_VEC=0), 8-byte accesses of f16/bf16,
     * f16 rounded by f32_to_f16 instead of packHalf2x16 */
    /* f16/bf16 rows and tiles of multiples of 8 (16-byte accesses), the
     * last pair partial */
    int64_t w1[4] = {1, 16, 64, 66}, w2[2] = {3, 2000};
    norm_big(LM_OP_GROUP_NORM, 4, w1, 0, 2, 1000, 1004, "group_norm [1,16,64,66] g2");
    norm_big(LM_OP_LAYER_NORM, 2, w2, 1, 0, -3, 5, "layer_norm [3,2000]");
    lm_array *xw = shaped(2, w2, LM_F16, -30, 30, 0);
    smctx cw = {false, -1, V_NONE};
    nn_case("softmax f16 [3,2000]", 1, &xw, b_softmax, &cw, thr_for(LM_F16, true), false);
    lm_array_release(xw);
    const char *env[8][2] = {{"LUMEN_VK_NORM_FIN", "1"}, {"LUMEN_VK_NORM_FIN", "0"}, {"LUMEN_VK_NORM_REV", "0"},
                             {"LUMEN_VK_NORM_R", "8"}, {"LUMEN_VK_NORM_VEC", "2"}, {"LUMEN_VK_NORM_VEC", "0"},
                             {"LUMEN_VK_NORM_W8", "0"}, {"LUMEN_VK_NORM_F16HW", "0"}};
    for (int e = 0; e < 8; e++) {
        setenv(env[e][0], env[e][1], 1);
        char name[96];
        snprintf(name, sizeof name, "group_norm [1,8,99,99] g2 %s=%s", env[e][0], env[e][1]);
        norm_big(LM_OP_GROUP_NORM, 4, g1, 0, 2, 1000, 1004, name);
        snprintf(name, sizeof name, "layer_norm [3,4100] %s=%s", env[e][0], env[e][1]);
        norm_big(LM_OP_LAYER_NORM, 2, r1, 1, 0, -3, 5, name);
        unsetenv(env[e][0]);
    }
}

static void test_norms(void **state)
{
    (void)state;
    int64_t a[2] = {6, 37}, b[3] = {4, 5, 130}, c[4] = {2, 6, 5, 7}, e[3] = {3, 8, 11}, f[2] = {3, 700};
    norm_cases(LM_OP_LAYER_NORM, 2, a, 1, 0, "layer_norm [6,37]");
    norm_cases(LM_OP_LAYER_NORM, 3, b, 2, 0, "layer_norm [4,5,130] over 2 axes");
    norm_cases(LM_OP_LAYER_NORM, 2, f, 1, 0, "layer_norm [3,700]");
    norm_cases(LM_OP_RMS_NORM, 2, a, 1, 0, "rms_norm [6,37]");
    norm_cases(LM_OP_RMS_NORM, 3, b, 1, 0, "rms_norm [4,5,130]");
    norm_cases(LM_OP_GROUP_NORM, 4, c, 0, 3, "group_norm [2,6,5,7] g3");
    norm_cases(LM_OP_GROUP_NORM, 3, e, 0, 2, "group_norm [3,8,11] g2");
    norm_cases(LM_OP_GROUP_NORM, 3, e, 0, 8, "group_norm [3,8,11] g8");
    /* few long rows: nn_norm_split (chunks of 4096, the last one partial) */
    int64_t g[4] = {1, 32, 70, 70}, l[3] = {2, 9, 1000};
    norm_cases(LM_OP_GROUP_NORM, 4, g, 0, 8, "group_norm [1,32,70,70] g8 (split rows)");
    norm_cases(LM_OP_LAYER_NORM, 3, l, 2, 0, "layer_norm [2,9,1000] over 2 axes (split rows)");
    norm_cases(LM_OP_RMS_NORM, 3, l, 2, 0, "rms_norm [2,9,1000] over 2 axes (split rows)");
}

/* ---------------------------------------------------------- attention */

/* how q, k and v reach lm_attention */
enum {
    AV_NONE,      /* contiguous */
    AV_LH,        /* transposed views of [B, L, H, D] (unit-stride rows: the fast kernel reads them as they are) */
    AV_DL,        /* transposed views of [B, H, D, L] (strided head dim: the fast kernel copies them) */
    AV_SLICE,     /* [B, H, L, D + 1] from element 1 of the last dim (rows off the vector alignment: copied too) */
};

typedef struct {
    int64_t B, Hq, Hk, Lq, Lk, D, Dv;
    int mask;        /* 0 none, 1 bool [Lq, Lk], 2 additive [B, 1, Lq, Lk] with -inf rows */
    bool causal;
    int view;        /* AV_* */
    bool specials;   /* NaN, Inf and zeros in q */
} actx;

static lm_array *attn_view(lm_array *a, int view)
{
    if (view == AV_LH) return lm_transpose(a, 1, 2);
    if (view == AV_DL) return lm_transpose(a, 2, 3);
    if (view == AV_SLICE) return lm_slice(a, 3, 1, a->shape[3], 1);
    return lm_array_retain(a);
}

static lm_array *b_attn(lm_array **in, const void *p)
{
    const actx *c = p;
    lm_array *t[3];
    for (int k = 0; k < 3; k++) t[k] = attn_view(in[k], c->view);
    lm_array *r = lm_attention(t[0], t[1], t[2], c->mask ? in[3] : NULL, c->causal, 0);
    for (int k = 0; k < 3; k++) lm_array_release(t[k]);
    return r;
}

static void attn_case(const actx *c, lm_dtype dt)
{
    int64_t qs[4] = {c->B, c->Hq, c->Lq, c->D}, ks[4] = {c->B, c->Hk, c->Lk, c->D};
    int64_t vs[4] = {c->B, c->Hk, c->Lk, c->Dv};
    if (c->view == AV_LH) {
        qs[1] = c->Lq; qs[2] = c->Hq;
        ks[1] = vs[1] = c->Lk; ks[2] = vs[2] = c->Hk;
    } else if (c->view == AV_DL) {
        qs[2] = c->D; qs[3] = c->Lq;
        ks[2] = c->D; ks[3] = c->Lk;
        vs[2] = c->Dv; vs[3] = c->Lk;
    } else if (c->view == AV_SLICE) {
        qs[3]++; ks[3]++; vs[3]++;
    }
    lm_array *in[4] = {shaped(4, qs, dt, -1, 1, c->specials ? SPECIALS : 0), shaped(4, ks, dt, -1, 1, 0),
                       shaped(4, vs, dt, -2, 2, 0), NULL};
    if (c->mask == 1) {
        int64_t ms[2] = {c->Lq, c->Lk};
        lm_array *m = shaped(2, ms, LM_F32, 0, 1, 0), *h = lm_full(0, NULL, 0.3, LM_F32, cpu);
        in[3] = lm_binary(LM_OP_GT, m, h);
        assert_int_equal(lm_array_eval(in[3]), LM_OK);
        lm_array_release(m);
        lm_array_release(h);
    } else if (c->mask == 2) {
        int64_t ms[4] = {c->B, 1, c->Lq, c->Lk};
        int64_t n = c->B * c->Lq * c->Lk;
        float *v = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) v[i] = urand() < 0.2 ? -INFINITY : (float)(urand() * 2 - 1);
        for (int64_t j = 0; j < c->Lk && c->Lq > 1; j++) v[c->Lk + j] = -INFINITY;   /* row 1: nothing visible */
        in[3] = lm_from_data(4, ms, LM_F32, v, cpu);
        free(v);
    }
    char what[200];
    snprintf(what, sizeof what, "attention %s B%lld Hq%lld Hk%lld Lq%lld Lk%lld D%lld Dv%lld mask%d%s%s%s",
             lm_dtype_name(dt), (long long)c->B, (long long)c->Hq, (long long)c->Hk, (long long)c->Lq,
             (long long)c->Lk, (long long)c->D, (long long)c->Dv, c->mask, c->causal ? " causal" : "",
             c->view == AV_LH ? " transposed" : c->view == AV_DL ? " strided-d" : c->view == AV_SLICE ? " sliced" : "",
             c->specials ? " specials in q" : "");
    nn_case(what, c->mask ? 4 : 3, in, b_attn, c, thr_for(dt, true), false);
    for (int k = 0; k < 4; k++) lm_array_release(in[k]);
}

static void test_attention(void **state)
{
    (void)state;
    const actx acases[] = {
        {1, 2, 2, 1, 1, 64, 64, 0, false, false, false},
        {1, 2, 2, 1, 1, 64, 64, 0, true, false, false},
        {2, 4, 2, 37, 37, 64, 64, 0, true, false, false},
        {2, 4, 2, 37, 37, 64, 64, 1, false, true, false},
        {1, 2, 1, 20, 45, 128, 128, 2, false, false, false},
        {1, 2, 1, 20, 45, 128, 128, 0, true, false, false},
        {1, 1, 1, 33, 17, 40, 40, 0, true, false, false},
        {1, 3, 3, 17, 33, 80, 48, 1, true, true, false},
        {1, 1, 1, 9, 70, 256, 256, 2, true, false, false},
        {1, 1, 1, 40, 1, 64, 32, 0, false, false, false},
        {1, 2, 2, 32, 64, 64, 64, 0, true, false, false},   /* whole query and key blocks */
        /* nn_attn512: D or Dv over 256 */
        {1, 2, 1, 19, 45, 300, 300, 2, true, false, false},
        {1, 1, 1, 9, 40, 512, 512, 1, false, false, false},
        {1, 2, 2, 17, 33, 64, 512, 0, true, false, false},
        {1, 1, 1, 8, 32, 512, 96, 0, false, true, false},
    };
    for (size_t i = 0; i < sizeof acases / sizeof *acases; i++)
        for (int d = 0; d < 3; d++) attn_case(&acases[i], fdt[d]);
}

/* the tiled kernel (nn_attn_fa.c: no mask or causal, D = Dv in {64, 128,
 * 256}) around its 64 x 64 blocks: partial blocks, L = 1, Lq != Lk either
 * way under causal (rows past Lk see every key), grouped heads, views it
 * reads as they are and views it copies first */
static void test_attention_fast(void **state)
{
    (void)state;
    const actx acases[] = {
        {1, 2, 2, 1, 1, 128, 128, 0, false, AV_NONE, false},
        {1, 2, 1, 1, 1, 64, 64, 0, true, AV_NONE, false},
        {1, 4, 2, 100, 100, 128, 128, 0, true, AV_NONE, false},
        {1, 2, 1, 70, 150, 64, 64, 0, true, AV_NONE, false},
        {1, 2, 2, 150, 70, 64, 64, 0, true, AV_NONE, false},
        {2, 2, 1, 65, 130, 128, 128, 0, false, AV_LH, false},
        {1, 4, 2, 33, 77, 64, 64, 0, false, AV_DL, false},
        {1, 2, 2, 45, 45, 128, 128, 0, true, AV_SLICE, false},
        {1, 1, 1, 20, 40, 256, 256, 0, true, AV_NONE, false},
        {1, 2, 2, 128, 192, 64, 64, 0, false, AV_NONE, false},   /* whole blocks */
    };
    for (size_t i = 0; i < sizeof acases / sizeof *acases; i++)
        for (int d = 0; d < 3; d++) attn_case(&acases[i], fdt[d]);
}

/* D = 512 (a VAE's mid-block attention) in both kernels: one workgroup
 * per query block, and two with 256 output columns each */
static void test_attention_fast512(void **state)
{
    (void)state;
    const actx acases[] = {
        {1, 1, 1, 70, 130, 512, 512, 0, false, AV_NONE, false},
        {1, 2, 1, 65, 65, 512, 512, 0, true, AV_NONE, false},
        {1, 1, 1, 1, 1, 512, 512, 0, false, AV_NONE, false},
        {2, 1, 1, 40, 64, 512, 512, 0, false, AV_LH, false},
    };
    const char *split[2] = {"0", "1"};
    for (int s = 0; s < 2; s++) {
        setenv("LUMEN_VK_ATTN_SPLIT", split[s], 1);
        for (size_t i = 0; i < sizeof acases / sizeof *acases; i++)
            for (int d = 0; d < 3; d++) attn_case(&acases[i], fdt[d]);
    }
    unsetenv("LUMEN_VK_ATTN_SPLIT");
}

/* A tensor-core attention path the tests below pin: the counter of the
 * calls that took it, what the count line calls it, the switch that turns
 * it off, and the variable that requires every case to take it. */
typedef struct attn_path {
    const char *test;          /* the test's name, leading its lines */
    int64_t (*count)(void);    /* calls that took the path */
    const char *kernel;        /* "tensor cores", ... */
    const char *none;          /* printed instead of the count when none took it (NULL: the count) */
    const char *off;           /* the path's switch: =0 turns it off */
    const char *require;       /* =1 requires every case to have taken it */
} attn_path;

/* Runs the n cases cc in each of the ndt dtypes dts, printing how many took
 * path p; where p->require is 1, every one must have.  Then every fourth
 * case again in dts[0] with p->off=0 (its earlier value restored after):
 * none may take it. */
static void attn_path_cases(const attn_path *p, const actx *cc, size_t n, const lm_dtype *dts, int ndt)
{
    const char *req = getenv(p->require);
    for (int d = 0; d < ndt; d++) {
        int64_t before = p->count(), c0 = cases;   /* PARITY_QUICK samples cases */
        for (size_t i = 0; i < n; i++) attn_case(&cc[i], dts[d]);
        int64_t ran = p->count() - before, run = cases - c0;
        if (ran || !p->none)
            printf("%s: %lld of %lld %s cases on %s\n", p->test, (long long)ran, (long long)run,
                   lm_dtype_name(dts[d]), p->kernel);
        else
            printf("%s: %s: %lld cases on the SIMT kernel\n", p->test, p->none, (long long)run);
        if (req && !strcmp(req, "1")) assert_int_equal(ran, run);
    }
    const char *was = getenv(p->off);
    char keep[32];
    snprintf(keep, sizeof keep, "%s", was ? was : "");
    setenv(p->off, "0", 1);
    int64_t before = p->count();
    for (size_t i = 0; i < n; i += 4) attn_case(&cc[i], dts[0]);
    if (was) setenv(p->off, keep, 1);
    else unsetenv(p->off);
    assert_int_equal(p->count(), before);
}

/* D > 256 as two matrix products around a softmax (nn_attn_fa.c's
 * run_gemm; the default only where the products run on tensor cores, so
 * here LUMEN_VK_ATTN512=gemm forces it onto the matmul kernels lavapipe
 * has): every query of all heads at once, and pieces of 32 queries of one
 * head (LUMEN_VK_ATTN512_ROWS=32: several pieces, the last one partial),
 * L = 1, batch x heads > 1 with grouped heads, causal with Lq != Lk both
 * ways, D != Dv, views read through strides (transposed, strided head dim,
 * sliced off the alignment), NaN/Inf/zeros in q; f16, bf16 and (forced
 * only) f32, within each dtype's tolerance of the CPU.  Every case must
 * take the path, and none with LUMEN_VK_ATTN512=simt (or 0). */
/* the two-product path in plan mode (lm_device_plan, a model's prewarm):
 * its pipelines start and nothing runs or is left behind (no scratch kept,
 * not counted as run), and the real evaluation after it starts no
 * pipeline of its own.  First in the process for these pipelines
 * (nn_attn_sm is only this path's). */
static void attn_gemm_plan(void)
{
    int64_t s[4] = {1, 1, 100, 512};
    lm_array *in[3];
    for (int k = 0; k < 3; k++) {
        lm_array *c = shaped(4, s, LM_F16, -1, 1, 0);
        in[k] = lm_array_to(c, vk);
        assert_int_equal(lm_array_eval(in[k]), LM_OK);
        lm_array_release(c);
    }
    /* P kept in f32: pipelines of their own (the product and the softmax's
     * other output), which no earlier test in the process started (on a GPU
     * with tensor cores the default D = 512 attention of the other tests
     * already takes this path with P as the inputs' dtype) */
    setenv("LUMEN_VK_ATTN512_P", "f32", 1);
    size_t active = lm_device_memory(vk).active;
    int64_t s0 = lm_vulkan_pipelines_started(), runs = lm_vulkan_attn_gemm_count();
    lm_status st = lm_device_plan(vk, true);
    if (st == LM_ERR_UNSUPPORTED) {   /* no compile threads: nothing to plan */
        printf("test_attention_gemm: plan mode not offered here (%s)\n", lm_error_message());
        lm_error_clear();
    } else {
        assert_int_equal(st, LM_OK);
        lm_array *o = lm_attention(in[0], in[1], in[2], NULL, false, 0);
        assert_int_equal(lm_array_eval(o), LM_OK);
        lm_array_release(o);
        assert_int_equal(lm_device_plan(vk, false), LM_OK);
        assert_int_equal(lm_vulkan_attn_gemm_count(), runs);
        assert_int_equal(lm_device_memory(vk).active, active);
        int64_t s1 = lm_vulkan_pipelines_started();
        assert_true(s1 > s0);
        o = lm_attention(in[0], in[1], in[2], NULL, false, 0);
        assert_int_equal(lm_array_eval(o), LM_OK);
        lm_array_release(o);
        assert_int_equal(lm_vulkan_attn_gemm_count(), runs + 1);
        printf("test_attention_gemm: plan mode started %lld pipelines, the evaluation after it %lld\n",
               (long long)(s1 - s0), (long long)(lm_vulkan_pipelines_started() - s1));
        assert_int_equal(lm_vulkan_pipelines_started(), s1);
    }
    unsetenv("LUMEN_VK_ATTN512_P");
    for (int k = 0; k < 3; k++) lm_array_release(in[k]);
}

static void test_attention_gemm(void **state)
{
    (void)state;
    setenv("LUMEN_VK_ATTN512", "gemm", 1);
    attn_gemm_plan();
    const actx cc[] = {
        {1, 1, 1, 70, 130, 512, 512, 0, false, AV_NONE, false},
        {1, 2, 1, 65, 65, 512, 512, 0, true, AV_NONE, false},
        {1, 1, 1, 1, 1, 512, 512, 0, false, AV_NONE, false},
        {2, 1, 1, 40, 64, 512, 512, 0, false, AV_LH, false},
        {2, 2, 2, 33, 50, 512, 512, 0, true, AV_DL, false},
        {1, 2, 2, 45, 45, 512, 512, 0, false, AV_SLICE, false},
        {1, 2, 1, 40, 70, 512, 512, 0, false, AV_NONE, true},
        {1, 3, 1, 70, 40, 320, 512, 0, true, AV_NONE, false},
        {2, 1, 1, 50, 60, 512, 96, 0, false, AV_NONE, false},
    };
    const char *rows[2] = {NULL, "32"};
    setenv("LUMEN_TEST_ATTN_GEMM", "1", 1);
    for (int r = 0; r < 2; r++) {
        setenv("LUMEN_VK_ATTN512", "gemm", 1);
        if (rows[r]) setenv("LUMEN_VK_ATTN512_ROWS", rows[r], 1);
        const attn_path p = {"test_attention_gemm", lm_vulkan_attn_gemm_count,
                             rows[r] ? "two products, pieces of 32 queries" : "two products", NULL,
                             "LUMEN_VK_ATTN512", "LUMEN_TEST_ATTN_GEMM"};
        attn_path_cases(&p, cc, sizeof cc / sizeof *cc, (const lm_dtype[]){LM_F16, LM_BF16, LM_F32}, 3);
        setenv("LUMEN_VK_ATTN512", "simt", 1);
        int64_t before = lm_vulkan_attn_gemm_count();
        attn_case(&cc[0], LM_F16);
        assert_int_equal(lm_vulkan_attn_gemm_count(), before);
        unsetenv("LUMEN_VK_ATTN512_ROWS");
    }
    unsetenv("LUMEN_VK_ATTN512");
    unsetenv("LUMEN_TEST_ATTN_GEMM");
}

/* the tensor-core kernels (nn_attn_khr*.comp: f16 q/k/v, D = Dv up to 256,
 * masks; else nn_attn_coop*.comp, D = Dv = 64 or 128, no mask; taken only
 * where the device has cooperative matrices, so on lavapipe these run on
 * the SIMT and general kernels): their 64 x 64 blocks, 16-row
 * slices per subgroup (Lq 1, 15, 17, 80), several key blocks, causal with
 * Lq != Lk both ways, grouped heads, views, NaN/Inf/zeros in q, and the
 * path off (LUMEN_VK_ATTN_COOP=0).  LUMEN_TEST_ATTN_COOP=1 (set on a
 * device with them) requires every case to have taken it. */
static void test_attention_coop(void **state)
{
    (void)state;
    const actx cc[] = {
        {1, 1, 1, 1, 1, 64, 64, 0, false, AV_NONE, false},
        {1, 2, 2, 1, 300, 128, 128, 0, true, AV_NONE, false},
        {1, 2, 1, 15, 15, 64, 64, 0, true, AV_NONE, false},
        {2, 4, 2, 17, 200, 128, 128, 0, false, AV_NONE, false},
        {1, 6, 2, 80, 80, 128, 128, 0, true, AV_NONE, false},
        {1, 2, 2, 200, 130, 64, 64, 0, true, AV_NONE, false},
        {1, 2, 2, 130, 257, 64, 64, 0, true, AV_NONE, false},
        {1, 1, 1, 256, 256, 128, 128, 0, true, AV_NONE, false},
        {2, 2, 1, 65, 130, 128, 128, 0, true, AV_LH, false},
        {1, 2, 2, 33, 77, 64, 64, 0, false, AV_DL, false},
        {1, 2, 2, 45, 90, 128, 128, 0, false, AV_SLICE, false},
        {1, 2, 2, 100, 100, 64, 64, 0, false, AV_NONE, true},
        {1, 2, 1, 70, 70, 128, 128, 0, true, AV_NONE, true},
        /* the KHR kernel (nn_attn_khr.glsl) also takes masks and head dims
         * 32 to 256 (D a multiple of 8, padded to the variant's HD) */
        {1, 4, 2, 37, 90, 64, 64, 1, true, AV_NONE, false},
        {2, 2, 1, 20, 45, 128, 128, 2, false, AV_NONE, false},
        {1, 2, 2, 130, 70, 64, 64, 2, true, AV_LH, false},
        {1, 2, 2, 33, 70, 40, 40, 0, true, AV_NONE, false},
        {1, 2, 1, 50, 50, 80, 80, 2, true, AV_NONE, false},
        {1, 2, 2, 30, 70, 96, 96, 1, false, AV_NONE, false},
        {1, 2, 2, 70, 40, 160, 160, 0, true, AV_NONE, false},
        {1, 1, 1, 40, 100, 256, 256, 2, true, AV_NONE, false},
        {1, 3, 1, 20, 30, 32, 32, 0, false, AV_NONE, true},
        {2, 4, 4, 150, 150, 40, 40, 0, false, AV_NONE, false},
    };
    const attn_path p = {"test_attention_coop", lm_vulkan_attn_coop_count, "tensor cores", NULL,
                         "LUMEN_VK_ATTN_COOP", "LUMEN_TEST_ATTN_COOP"};
    attn_path_cases(&p, cc, sizeof cc / sizeof *cc, (const lm_dtype[]){LM_F16}, 1);
}

/* bf16 q, k and v on bf16 cooperative matrices (nn_attn_khr*_bf: the KHR
 * kernel built with bf16 fragments, where the device has
 * VK_KHR_shader_bfloat16; elsewhere, lavapipe included, the SIMT kernel):
 * test_attention_coop's cases in bf16 (head dims 32 to 256 on the 64, 128
 * and 256 builds, masks, causal, views, specials), within bf16's
 * tolerance of the CPU.  Says how many ran on bf16 tensor cores, or why
 * none did; LUMEN_TEST_ATTN_BF16=1 (set on such a device) requires all. */
static void test_attention_coop_bf16(void **state)
{
    (void)state;
    const actx cc[] = {
        {1, 1, 1, 1, 1, 64, 64, 0, false, AV_NONE, false},
        {1, 2, 2, 1, 300, 128, 128, 0, true, AV_NONE, false},
        {1, 2, 1, 15, 15, 64, 64, 0, true, AV_NONE, false},
        {2, 4, 2, 17, 200, 128, 128, 0, false, AV_NONE, false},
        {1, 6, 2, 80, 80, 128, 128, 0, true, AV_NONE, false},
        {1, 2, 2, 200, 130, 64, 64, 0, true, AV_NONE, false},
        {1, 1, 1, 256, 256, 128, 128, 0, true, AV_NONE, false},
        {2, 2, 1, 65, 130, 128, 128, 0, true, AV_LH, false},
        {1, 2, 2, 33, 77, 64, 64, 0, false, AV_DL, false},
        {1, 2, 2, 45, 90, 128, 128, 0, false, AV_SLICE, false},
        {1, 2, 2, 100, 100, 64, 64, 0, false, AV_NONE, true},
        {1, 2, 1, 70, 70, 128, 128, 0, true, AV_NONE, true},
        {1, 4, 2, 37, 90, 64, 64, 1, true, AV_NONE, false},
        {2, 2, 1, 20, 45, 128, 128, 2, false, AV_NONE, false},
        {1, 2, 2, 130, 70, 64, 64, 2, true, AV_LH, false},
        {1, 2, 2, 33, 70, 40, 40, 0, true, AV_NONE, false},
        {1, 2, 1, 50, 50, 80, 80, 2, true, AV_NONE, false},
        {1, 2, 2, 70, 40, 160, 160, 0, true, AV_NONE, false},
        {1, 1, 1, 40, 100, 256, 256, 2, true, AV_NONE, false},
        {1, 3, 1, 20, 30, 32, 32, 0, false, AV_NONE, true},
        {1, 30, 30, 300, 300, 128, 128, 0, false, AV_NONE, false},   /* a DiT's heads */
    };
    /* LUMEN_VK_BF16=0 is read when the device is probed: the path's own
     * switch off here is LUMEN_VK_ATTN_KHR=0 */
    const attn_path p = {"test_attention_coop_bf16", lm_vulkan_bf16_coop_count, "bf16 tensor cores",
                         "the bf16 tensor-core kernels skipped (the device has no VK_KHR_shader_bfloat16 "
                         "cooperative matrices, or LUMEN_VK_BF16=0)",
                         "LUMEN_VK_ATTN_KHR", "LUMEN_TEST_ATTN_BF16"};
    attn_path_cases(&p, cc, sizeof cc / sizeof *cc, (const lm_dtype[]){LM_BF16}, 1);
}

/* the cooperative-matrix-2 kernel (nn_attn_cm2*: f16 or bf16 q/k/v, no
 * mask, D = Dv a multiple of 8 up to 128; taken only where the device has
 * VK_NV_cooperative_matrix2 with reductions, so on lavapipe these run on
 * the other kernels): its 64- and 128-query blocks and 64-key steps, tails
 * of both (the clamped tensor loads), D below the build's 64 or 128,
 * causal with Lq != Lk both ways, grouped heads, views, NaN/Inf/zeros in
 * q, a DiT's heads, and the path off (LUMEN_VK_ATTN_CM2=0).  The kernel
 * is opt-in: LUMEN_VK_ATTN_CM2=1 in the environment when the device opens;
 * LUMEN_TEST_ATTN_CM2=1 (set with it on such a device) requires every case
 * to have taken it. */
static void test_attention_cm2(void **state)
{
    (void)state;
    const actx cc[] = {
        {1, 1, 1, 1, 1, 64, 64, 0, false, AV_NONE, false},
        {1, 2, 2, 1, 300, 128, 128, 0, true, AV_NONE, false},
        {1, 2, 1, 15, 15, 64, 64, 0, true, AV_NONE, false},
        {2, 4, 2, 17, 200, 128, 128, 0, false, AV_NONE, false},
        {1, 6, 2, 80, 80, 128, 128, 0, true, AV_NONE, false},
        {1, 2, 2, 200, 130, 64, 64, 0, true, AV_NONE, false},
        {1, 2, 2, 130, 257, 64, 64, 0, true, AV_NONE, false},
        {1, 1, 1, 256, 256, 128, 128, 0, true, AV_NONE, false},
        {1, 2, 2, 128, 192, 128, 128, 0, false, AV_NONE, false},   /* whole blocks: unclamped steps */
        {2, 2, 1, 65, 130, 128, 128, 0, true, AV_LH, false},
        {1, 2, 2, 33, 77, 64, 64, 0, false, AV_DL, false},
        {1, 2, 2, 45, 90, 128, 128, 0, false, AV_SLICE, false},
        {1, 2, 2, 100, 100, 64, 64, 0, false, AV_NONE, true},
        {1, 2, 1, 70, 70, 128, 128, 0, true, AV_NONE, true},
        {1, 2, 2, 33, 70, 40, 40, 0, true, AV_NONE, false},
        {1, 2, 2, 70, 150, 80, 80, 0, false, AV_NONE, false},
        {1, 3, 1, 20, 30, 32, 32, 0, false, AV_NONE, true},
        {1, 30, 30, 300, 300, 128, 128, 0, false, AV_NONE, false},   /* a DiT's heads */
    };
    const attn_path p = {"test_attention_cm2", lm_vulkan_attn_cm2_count, "the cooperative-matrix-2 kernel", NULL,
                         "LUMEN_VK_ATTN_CM2", "LUMEN_TEST_ATTN_CM2"};
    attn_path_cases(&p, cc, sizeof cc / sizeof *cc, (const lm_dtype[]){LM_F16, LM_BF16}, 2);
}

/* --------------------------------------------------------------- rope */

typedef struct { int kind; int64_t dims; bool trad; view_kind view; } rctx;

static lm_array *b_rope(lm_array **in, const void *p)
{
    const rctx *c = p;
    lm_array *x = c->view == V_T ? lm_transpose(in[0], 1, 2) : lm_array_retain(in[0]), *r = NULL;
    switch (c->kind) {
    case 0: r = lm_rope(x, c->dims, c->trad, 10000.0, 1.0, 1000); break;
    case 1: r = lm_rope_freqs(x, c->dims, c->trad, in[1], 0.5, 3); break;
    case 2: {
        int64_t axes[3] = {c->dims / 2 - 2 * (c->dims / 8), 2 * (c->dims / 8), c->dims / 2};
        if (axes[0] <= 0) { axes[0] = c->dims / 2; axes[1] = c->dims / 2; axes[2] = 0; }
        r = lm_rope_multi(x, in[2], axes[2] ? 3 : 2, axes, 10000.0, c->trad);
        break;
    }
    default: r = lm_rope_angles(x, in[3], c->dims, c->trad); break;
    }
    lm_array_release(x);
    return r;
}

static void test_rope(void **state)
{
    (void)state;
    const char *kinds[] = {"rope", "rope_freqs", "rope_multi", "rope_angles f32"};
    for (int d = 0; d < 3; d++)
        for (int kind = 0; kind < 4; kind++)
            for (int trad = 0; trad < 2; trad++)
                for (int tv = 0; tv < 2; tv++) {
                    /* partial rotation (dims < D) for rope and rope_angles */
                    int64_t D = 40, dims = kind == 0 ? 24 : kind == 3 ? 16 : 40, L = 13, H = 3;
                    /* x is [B, H, L, D], or a transposed view of [B, L, H, D] */
                    int64_t xs[4] = {2, tv ? L : H, tv ? H : L, D};
                    int64_t fs = dims / 2, ps[2] = {L, dims == 40 ? 3 : 2}, as[3] = {1, L, dims / 2};
                    lm_array *in[4] = {shaped(4, xs, fdt[d], -2, 2, 0), shaped(1, &fs, LM_F32, 0.01, 1, 0),
                                       shaped(2, ps, LM_F32, 0, 300, 0), shaped(3, as, LM_F32, -400, 400, 0)};
                    rctx c = {kind, dims, trad, tv ? V_T : V_NONE};
                    char what[160];
                    snprintf(what, sizeof what, "%s %s dims %lld%s%s", kinds[kind], lm_dtype_name(fdt[d]),
                             (long long)dims, trad ? " traditional" : "", tv ? " transposed" : "");
                    nn_case(what, 4, in, b_rope, &c, thr_for(fdt[d], true), false);
                    for (int k = 0; k < 4; k++) lm_array_release(in[k]);
                }
}

/* ------------------------------------------------- tril, triu, one_hot */

typedef struct { bool upper; int64_t k; view_kind view; } tctx;

static lm_array *b_tri(lm_array **in, const void *p)
{
    const tctx *c = p;
    lm_array *x = apply_view(in[0], c->view);
    lm_array *r = c->upper ? lm_triu(x, c->k) : lm_tril(x, c->k);
    lm_array_release(x);
    return r;
}

static void test_tri(void **state)
{
    (void)state;
    const lm_dtype dts[] = {LM_F32, LM_F16, LM_BF16, LM_F64, LM_I32, LM_I64, LM_U8, LM_BOOL};
    const int64_t ks[] = {0, -1, 2, -100, 100};
    int64_t sh[3] = {3, 7, 9};
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
        for (size_t k = 0; k < sizeof ks / sizeof *ks; k++)
            for (int up = 0; up < 2; up++) {
                view_kind vw = k % 2 ? V_T : V_NONE;
                lm_array *x = shaped(3, sh, dts[d], -50, 50, 0);
                tctx c = {up, ks[k], vw};
                char what[120];
                snprintf(what, sizeof what, "%s %s k %lld%s", up ? "triu" : "tril", lm_dtype_name(dts[d]),
                         (long long)ks[k], view_name[vw]);
                nn_case(what, 1, &x, b_tri, &c, 0, false);
                lm_array_release(x);
            }
}

typedef struct { int64_t nc; bool sliced; } octx;

static lm_array *b_one_hot(lm_array **in, const void *p)
{
    const octx *c = p;
    lm_array *x = c->sliced ? lm_slice(in[0], 1, 1, in[0]->shape[1], 2) : lm_array_retain(in[0]);
    lm_array *r = lm_one_hot(x, c->nc);
    lm_array_release(x);
    return r;
}

static void test_one_hot(void **state)
{
    (void)state;
    const lm_dtype dts[] = {LM_I64, LM_I32, LM_U8, LM_I16};
    int64_t sh[2] = {5, 9};
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
        for (int sl = 0; sl < 2; sl++) {
            lm_array *x = shaped(2, sh, dts[d], 0, 7, 0);
            octx c = {7, sl};
            char what[120];
            snprintf(what, sizeof what, "one_hot %s%s", lm_dtype_name(dts[d]), sl ? " sliced" : "");
            nn_case(what, 1, &x, b_one_hot, &c, 0, false);
            lm_array_release(x);
        }
    /* an index out of range is an error from the same eval, as on the CPU */
    int64_t bad[3] = {0, 9, 1}, n = 3;
    lm_array *i = lm_from_data(1, &n, LM_I64, bad, vk), *o = lm_one_hot(i, 4);
    cases++;
    if (lm_array_eval(o) != LM_ERR_ARG) {
        fprintf(stderr, "PARITY FAIL one_hot out of range: no error\n");
        failures++;
    }
    lm_array_release(o);
    lm_array_release(i);
}

/* ----------------------------------------------------- CPU fallback */

static lm_array *b_f64(lm_array **in, const void *p)
{
    (void)p;
    lm_array *s = lm_softmax(in[0], -1), *l = lm_layer_norm(s, 1, NULL, NULL, 1e-5);
    lm_array_release(s);
    return l;
}

static lm_array *b_attn_long_d(lm_array **in, const void *p)
{
    (void)p;
    return lm_attention(in[0], in[0], in[0], NULL, true, 0);
}

static void test_fallback(void **state)
{
    (void)state;
    bool was = quick;
    quick = false;   /* always run: it is the one check of the fallback */
    int64_t sh[2] = {5, 19};
    lm_array *x = shaped(2, sh, LM_F64, -4, 4, SPECIALS);
    nn_case("f64 softmax + layer_norm through the CPU fallback", 1, &x, b_f64, NULL, 0, true);
    lm_array_release(x);
    /* f64: no Vulkan attention kernel takes it on any device (an f32
     * D = 600 runs on the two products on a GPU: nn_attn_fa.c) */
    int64_t qs[4] = {1, 1, 5, 600};
    x = shaped(4, qs, LM_F64, -1, 1, 0);
    nn_case("f64 attention with D 600 through the CPU fallback", 1, &x, b_attn_long_d, NULL, 0, true);
    lm_array_release(x);
    quick = was;
}

/* the temporary copies of strided inputs go back: active memory returns
 * to where it was once the results are released */
static void test_memory(void **state)
{
    (void)state;
    int64_t sh[3] = {4, 9, 24};
    lm_array *c = shaped(3, sh, LM_F32, -2, 2, 0), *x = lm_array_to(c, vk);
    assert_int_equal(lm_array_eval(x), LM_OK);
    size_t before = lm_device_memory(vk).active;
    for (int k = 0; k < 3; k++) {
        lm_array *t = lm_transpose(x, 0, 2);      /* [24, 9, 4], not contiguous */
        lm_array *y = k == 0 ? lm_softmax(t, 1) : k == 1 ? lm_rms_norm(t, 2, NULL, 1e-6)
                    : lm_rope(t, 4, false, 10000.0, 1.0, 0);
        assert_int_equal(lm_array_eval(y), LM_OK);
        assert_int_equal(lm_eval_last_stats().fallbacks, 0);
        lm_array_release(y);
        lm_array_release(t);
    }
    cases++;
    if (lm_device_memory(vk).active != before) {
        fprintf(stderr, "PARITY FAIL memory: active %zu bytes after, %zu before\n",
                lm_device_memory(vk).active, before);
        failures++;
    }
    lm_array_release(x);
    lm_array_release(c);
}

#define VK_TEST(f) cmocka_unit_test(f)

int main(void)
{
    parity_setup(NULL);
    if (!vk) {
        printf("test_vulkan_nn_norm: no Vulkan device (%s); skipped\n", lm_vulkan_status());
        return LM_TEST_SKIP;
    }
    const struct CMUnitTest tests[] = {
        VK_TEST(test_softmax), VK_TEST(test_norms), VK_TEST(test_norms_vec), VK_TEST(test_attention), VK_TEST(test_attention_fast),
        VK_TEST(test_attention_fast512), VK_TEST(test_attention_gemm), VK_TEST(test_attention_coop), VK_TEST(test_attention_coop_bf16),
        VK_TEST(test_attention_cm2),
        VK_TEST(test_rope), VK_TEST(test_tri), VK_TEST(test_one_hot), VK_TEST(test_fallback),
        VK_TEST(test_memory), VK_TEST(test_summary),
    };
    return PARITY_RUN(tests);
}

#else
int main(void)
{
    printf("test_vulkan_nn_norm: built without Vulkan; skipped\n");
    return LM_TEST_SKIP;
}
#endif
