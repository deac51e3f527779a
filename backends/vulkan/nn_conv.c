/* nn_conv.c - convolution, pooling and resampling on Vulkan (see nn.c for
 * the family; the node contract is core/ops_nn.h, the semantics those of
 * backends/cpu/nn_conv.c and nn_pool.c).
 *
 * conv2d (conv1d arrives as conv2d with H = 1) runs as an implicit GEMM on
 * the shared f32 matmul kernel: the conv_gemm* modules are matmul_f32.glsl
 * with MM_CONV defined, whose B tiles are read from the input through the
 * im2col mapping (shaders/conv_gemm.glsl), one batch entry per (image,
 * group), bias added on store.  Where 128-row tiles would mostly idle (up
 * to 16 output channels per group: the VAE's conv_out, depthwise, small
 * grouped convs) or the weights are not contiguous over (c, kh, kw),
 * conv_small.comp computes all of a group's output channels of a few pixels
 * per invocation; convs with more channels that the GEMM cannot read, and
 * grids that fit neither, go to conv_direct.comp, which computes each
 * output element on its own.
 * conv_transpose2d runs as a gather on the same two kernels (each output
 * pixel sums the input pixels that the CPU's col2im would scatter onto it,
 * so no two invocations write one element): the GEMM's transposed mode
 * reads B through the inverse mapping, zero where a tap does not divide by
 * the stride.  Pools and upsampling are one
 * gather kernel, shaders/pool.comp, with the op in a push constant so each
 * dtype is one pipeline.
 *
 * f16 x f16 convs run on tensor cores instead where the device has
 * cooperative matrices (conv_coop*: matmul_coop.glsl with the same hooks),
 * on VK_KHR_cooperative_matrix where the device and the SPIR-V file have
 * it (conv_coop_khr*, as matmul's default), else VK_NV_cooperative_matrix;
 * LUMEN_VK_CONV_COOP=0|nv|khr chooses (see coop_fits).  bf16 x bf16 takes
 * the KHR tiles built with bf16 fragments (conv_coop_khr_bf*) where the
 * device has bf16 cooperative matrices (bf16_usable), else the f32 GEMM.  Convs whose
 * output tiles are too few to fill the GPU (1280 channels at 8x8) split
 * their K range over several workgroups (split-K: f32 partial sums in a
 * scratch buffer, then conv_splitk.comp adds them in a fixed order with the
 * bias), and 1x1 stride-1 convs over contiguous pixels read their input as
 * the GEMM's plain B matrix (B_FLAT).
 * LUMEN_VK_CONV_F32=winograd sends 3x3 stride-1 convs on the f32 kernels
 * to Winograd's F(2x2, 3x3) instead (run_wino: three transforms around 16
 * batched f32 GEMMs; not a default yet).
 *
 * dtypes: f32, f16 and bf16 storage (any mix of x, weight and bias),
 * arithmetic in f32 as on the CPU, rounded once on store; nearest
 * upsampling moves raw bits and takes every dtype.  f64 (and max_pool of
 * integers) are unsupported here and run on the CPU through eval's
 * fallback. */
#include <stdlib.h>
#include <string.h>
#include "backends/vulkan/vk.h"
#include "backends/vulkan/shaders.h"

static bool float_storage(lm_dtype t) { return t == LM_F32 || t == LM_F16 || t == LM_BF16; }

static bool conv_ok(const lm_array *node)
{
    int nin = node->params.i[9] ? 3 : 2;
    if (node->ninputs != nin || node->ndim != 4 || !float_storage(node->dtype)) return false;
    for (int k = 0; k < nin; k++)
        if (!float_storage(node->inputs[k]->dtype)) return false;
    return node->inputs[0]->ndim == 4 && node->inputs[1]->ndim == 4;
}

bool lm_vk_supports_nn_conv(lm_vk_dev *v, const lm_array *node)
{
    (void)v;
    const lm_array *x = node->ninputs > 0 ? node->inputs[0] : NULL;
    switch (node->op) {
    case LM_OP_CONV:
    case LM_OP_CONV_TRANSPOSE:
        return conv_ok(node);
    case LM_OP_MAX_POOL:
    case LM_OP_AVG_POOL:
    case LM_OP_ADAPTIVE_AVG_POOL:
        return node->ninputs == 1 && x->ndim == 4 && float_storage(node->dtype) && x->dtype == node->dtype;
    case LM_OP_UPSAMPLE:
        if (node->ninputs != 1 || x->ndim != 4 || x->dtype != node->dtype) return false;
        return node->params.i[0] == LM_UPSAMPLE_NEAREST ||
               (node->params.i[0] == LM_UPSAMPLE_BILINEAR && float_storage(node->dtype));
    default:
        return false;
    }
}

/* ---------------------------------------------------------------- conv */

/* push constants of shaders/conv_gemm.glsl (exactly LM_VK_PUSH_BYTES) */
typedef struct gemm_pc {
    int32_t M, N, K, nb, off_a, off_b, sam, sak, off_bias, s_bias;
    int32_t bshape[2], bsa[2], bsb[2];
    int32_t H, W, OW, KW, KHW, sh, sw, pt, pl, dh, dw, sxc, sxh, sxw;
    int32_t transpose, swc;
} gemm_pc;

/* push constants of shaders/conv_direct.comp */
typedef struct direct_pc {
    uint32_t n;
    int32_t transpose, O, OH, OW;
    int32_t off_x, sxn, sxc, sxh, sxw, H, W;
    int32_t off_w, sw0, sw1, sw2, sw3, KH, KW;
    int32_t Cg, Og, sh, sw, pt, pl, dh, dw, off_b, s_b;
} direct_pc;

_Static_assert(sizeof(gemm_pc) <= LM_VK_PUSH_BYTES, "conv_gemm push constants");
_Static_assert(sizeof(direct_pc) <= LM_VK_PUSH_BYTES, "conv_direct push constants");

/* shapes of a conv or conv_transpose node: Cg input and Og output channels
 * per group */
typedef struct geom { int64_t N, O, OH, OW, H, W, KH, KW, G, Cg, Og; } geom;

static geom geom_of(const lm_array *node)
{
    const lm_array *x = node->inputs[0], *w = node->inputs[1];
    geom g = {x->shape[0], node->shape[1], node->shape[2], node->shape[3], x->shape[2], x->shape[3],
              w->shape[2], w->shape[3], node->params.i[8], 0, 0};
    g.Cg = x->shape[1] / g.G;
    g.Og = g.O / g.G;
    return g;
}

/* the weights' dims from `from` to 3 ((c, kh, kw) for conv, (kh, kw) for
 * conv_transpose) read as one unit-stride dim */
static bool k_contiguous(const lm_array *w, int from)
{
    int64_t s = 1;
    for (int d = 3; d >= from; d--) {
        if (w->shape[d] != 1 && w->strides[d] != s) return false;
        s *= w->shape[d];
    }
    return true;
}

/* is environment variable name set to 0? */
static bool getenv_off(const char *name)
{
    const char *e = getenv(name);
    return e && !strcmp(e, "0");
}

static bool gemm_off(void)
{
    return getenv_off("LUMEN_VK_CONV_GEMM");
}

/* Does the implicit GEMM suit this conv or conv_transpose?  Its tiles are
 * 128 output channels by 128 pixels: below 16 channels per group most of
 * each tile would be idle work, and the direct kernel does better. */
static bool gemm_fits(lm_vk_dev *v, const lm_array *node, const geom *g)
{
    const lm_vk_features *ft = &v->feat;
    if (ft->max_shared < 32768 || gemm_off()) return false;
    bool transpose = node->op == LM_OP_CONV_TRANSPOSE;
    if (g->Og < 16 || g->Cg * g->KH * g->KW < 16 || !k_contiguous(node->inputs[1], transpose ? 2 : 1))
        return false;
    int64_t pixels = g->OH * g->OW;
    return (pixels + 127) / 128 <= ft->max_groups[0] && (g->Og + 127) / 128 <= ft->max_groups[1] &&
           g->N * g->G <= ft->max_groups[2];
}

/* binding 3 and its offset/stride (-1: no bias) */
static const lm_array *bias_of(const lm_array *node, int32_t *off, int32_t *stride)
{
    const lm_array *b = node->params.i[9] ? node->inputs[2] : NULL;
    *off = b ? (int32_t)b->offset : -1;
    *stride = b ? (int32_t)b->strides[0] : 0;
    return b;
}

/* the GEMM's view of the conv: A = weights, B = the unfolded input */
static void gemm_params(const lm_array *node, const geom *g, gemm_pc *pc)
{
    const lm_array *x = node->inputs[0], *w = node->inputs[1];
    const int64_t *p = node->params.i;
    memset(pc, 0, sizeof *pc);
    pc->M = (int32_t)g->Og;
    pc->N = (int32_t)(g->OH * g->OW);
    pc->K = (int32_t)(g->Cg * g->KH * g->KW);
    pc->nb = 2;
    pc->off_a = (int32_t)w->offset;
    pc->off_b = (int32_t)x->offset;
    pc->transpose = node->op == LM_OP_CONV_TRANSPOSE;
    /* conv: w[o, k]; conv_transpose: w[c, o, kh, kw] (conv_fetch_a) */
    pc->sam = (int32_t)w->strides[pc->transpose ? 1 : 0];
    pc->swc = (int32_t)w->strides[0];
    pc->sak = 1;
    bias_of(node, &pc->off_bias, &pc->s_bias);
    pc->bshape[0] = (int32_t)g->N;
    pc->bshape[1] = (int32_t)g->G;
    pc->bsa[1] = (int32_t)((pc->transpose ? g->Cg : g->Og) * w->strides[0]);
    pc->bsb[0] = (int32_t)x->strides[0];
    pc->bsb[1] = (int32_t)(g->Cg * x->strides[1]);
    pc->H = (int32_t)g->H; pc->W = (int32_t)g->W; pc->OW = (int32_t)g->OW;
    pc->KW = (int32_t)g->KW; pc->KHW = (int32_t)(g->KH * g->KW);
    pc->sh = (int32_t)p[0]; pc->sw = (int32_t)p[1]; pc->pt = (int32_t)p[2]; pc->pl = (int32_t)p[3];
    pc->dh = (int32_t)p[6]; pc->dw = (int32_t)p[7];
    pc->sxc = (int32_t)x->strides[1]; pc->sxh = (int32_t)x->strides[2]; pc->sxw = (int32_t)x->strides[3];
}

static bool has_16x16x16(int n, const uint8_t (*mnk)[3])
{
    for (int i = 0; i < n; i++)
        if (mnk[i][0] == 16 && mnk[i][1] == 16 && mnk[i][2] == 16) return true;
    return false;
}

/* the KHR build of the conv kernels: the device lists the 16x16x16 f16
 * shape and the SPIR-V file has the modules (built with glslang 15) */
static bool khr_usable(lm_vk_dev *v)
{
    const lm_vk_features *ft = &v->feat;
    return ft->coopmat_khr && has_16x16x16(ft->ncoop_khr, ft->coop_khr_mnk) && lm_vk_spirv_load() == LM_OK &&
           lm_vk_shader_find("conv_coop_khr") != NULL;
}

/* bf16 x bf16 on bf16 cooperative matrices (conv_coop_khr_bf*: the KHR
 * build with bf16 fragments, module.mk's VK_BF16_VARIANTS) where the
 * device has them (device.c: feat.coop_bf16, 16x16x16) and KHR is not
 * turned away (LUMEN_VK_CONV_COOP=nv: bf16 then keeps the f32-arithmetic
 * GEMM, as everywhere without them) */
static bool bf16_usable(lm_vk_dev *v)
{
    const lm_vk_features *ft = &v->feat;
    const char *e = getenv("LUMEN_VK_CONV_COOP");
    return ft->coop_bf16 && has_16x16x16(ft->ncoop_bf16, ft->coop_bf16_mnk) && !(e && !strcmp(e, "nv")) &&
           khr_usable(v) && lm_vk_shader_find("conv_coop_khr_bf_k64s1") != NULL;
}

/* which extension conv_coop runs on: LUMEN_VK_CONV_COOP=nv or khr asks
 * (khr where it cannot be had falls back to nv), unset: khr, else nv */
static bool coop_khr(lm_vk_dev *v)
{
    const char *e = getenv("LUMEN_VK_CONV_COOP");
    if (e && !strcmp(e, "nv")) return false;
    return khr_usable(v);
}

/* f16 x f16 on tensor cores (conv_coop*, matmul_coop.glsl's kernel with
 * the same hooks) where matmul would use them: the 16x16x16 shape, subgroups
 * of 32, 48 KiB of shared memory, LUMEN_VK_COOP not 0.  The default since
 * it measured faster at every VAE and ESRGAN shape on an H100 (2026-11-25,
 * bench/gpu/ops.py: 2.0-2.2x the f32-arithmetic GEMM at 128-512 channels,
 * 1.3-1.7x at 32-64 output channels, five batches within 10% of each
 * other); LUMEN_VK_CONV_COOP=0 turns it off. */
static bool coop_fits(lm_vk_dev *v, const lm_array *node)
{
    const lm_vk_features *ft = &v->feat;
    if (!(ft->coopmat_nv || ft->coopmat_khr) || ft->subgroup_size != 32 || ft->max_shared < 48 * 1024)
        return false;
    if (node->op != LM_OP_CONV || node->inputs[0]->dtype != node->inputs[1]->dtype) return false;
    if (getenv_off("LUMEN_VK_CONV_COOP") || getenv_off("LUMEN_VK_COOP")) return false;
    if (node->inputs[0]->dtype == LM_BF16) return bf16_usable(v);
    if (node->inputs[0]->dtype != LM_F16) return false;
    return (ft->coopmat_nv && has_16x16x16(ft->ncoop, ft->coop_mnk)) || khr_usable(v);
}

/* conv_coop's block tiles (output channels x pixels, depth bk), by the
 * output channels of a group: 128-row tiles would leave most of their rows
 * idle at ESRGAN's 32 and 64.  shader: the NV build (NULL: KHR only), khr:
 * the KHR build.  LUMEN_VK_CONV_TILE=<name> forces one. */
typedef struct coop_tile { const char *name, *shader, *khr, *khr_bf; int bm, bn, bk; } coop_tile;
static const coop_tile conv_tiles[] = {
    {"128", "conv_coop", "conv_coop_khr", "conv_coop_khr_bf", 128, 128, 32},       /* 8 subgroups of 64x32 */
    {"m64", "conv_coop_m64", "conv_coop_khr_m64", NULL, 64, 128, 32},              /* 4 of 32x64 */
    {"m64w8", "conv_coop_m64w8", "conv_coop_khr_m64w8", "conv_coop_khr_bf_m64w8", 64, 128, 32}, /* 8 of 32x32 */
    {"m32", "conv_coop_m32", "conv_coop_khr_m32", NULL, 32, 128, 32},              /* 4 of 32x32 */
    {"m32n256", "conv_coop_m32n256", "conv_coop_khr_m32n256", NULL, 32, 256, 32},  /* 4 of 32x64 */
    {"n64", "conv_coop_n64", "conv_coop_khr_n64", "conv_coop_khr_bf_n64", 128, 64, 32}, /* 8 of 32x32 */
    {"k64s1", NULL, "conv_coop_khr_k64s1", "conv_coop_khr_bf_k64s1", 128, 128, 64}, /* 8 of 64x32, one stage */
    {"128x256s1", NULL, "conv_coop_khr_128x256s1", NULL, 128, 256, 32},            /* 8 of 64x64, one stage */
};

static const coop_tile *tile_named(const char *name)
{
    for (size_t i = 0; name && i < sizeof conv_tiles / sizeof *conv_tiles; i++)
        if (!strcmp(name, conv_tiles[i].name)) return &conv_tiles[i];
    return NULL;
}

static const coop_tile *conv_tile(int32_t og, int32_t npix, int32_t k, bool khr, bool bf16)
{
    const coop_tile *t = tile_named(getenv("LUMEN_VK_CONV_TILE"));
    if (t && (bf16 ? t->khr_bf != NULL : khr || t->shader)) return t;
    /* H100 (docs/VULKAN.md): m64w8 (114 registers, two workgroups per SM)
     * led at every shape up to 64 channels.  Above, on KHR, k64s1 (depth 64,
     * one stage) at the SD UNet's 3x3 convs (1.1-1.4x the 128 tile, with
     * split-K and the unfolded input, 2026-11-27) and its 1x1 convs from
     * 16x16 up; n64 where a group's image has at most 64 pixels and K is
     * short (1x1 at 8x8: 1.4x k64s1, whose split then has too few steps) */
    if (og <= 64) return tile_named("m64w8");
    if (npix <= 64 && (k < 2048 || !khr)) return tile_named("n64");
    return tile_named(khr ? "k64s1" : "128");
}

/* split-K parts for a conv of `tiles` output tiles and `steps` K steps:
 * LUMEN_VK_CONV_SPLITK=<parts> forces (1: none); by default, where the
 * tiles make fewer than 256 workgroups (two an SM of an H100), enough
 * parts for about 256, each of at least 8 steps, at most 16 (H100,
 * 2026-11-27: 1280 channels at 8x8, 20 tiles, went from 0.27 to 0.06 ms;
 * 320 at 64x64, 192 tiles, 0.23 to 0.20 ms with 2 parts).  A function of
 * the shape only, so a conv sums in the same order on every run; tiles is
 * an entry's, counted over entries / share entries (choice.h), so a stacked
 * call splits as one image's.  The caps below (32-bit slab indices, the
 * device's grid) count the whole slab: they bind only far above SD's sizes. */
int lm_vk_splitk_parts(int64_t tiles, int64_t entries, int share, int64_t steps, int64_t slab, bool by_default)
{
    const char *e = getenv("LUMEN_VK_CONV_SPLITK");
    int64_t s = 1;
    tiles *= lm_vk_share_div(entries, share);   /* a stacked call: one image's entries (choice.h) */
    if (e && *e) {
        s = atoi(e);
    } else if (by_default && tiles < 256) {
        s = (256 + tiles - 1) / tiles;
        if (s > steps / 8) s = steps / 8;
        if (s > 16) s = 16;
    }
    if (s > steps) s = steps;
    if (s > 64) s = 64;
    /* the slabs are indexed in 32 bits */
    while (s > 1 && s * slab >= INT32_MAX) s--;
    return s < 1 ? 1 : (int)s;
}

/* ------------------------------------------------------- halo tiles */

/* push constants of shaders/conv_halo.glsl and conv_halo_w.comp */
typedef struct halo_pc {
    int32_t C, O, H, W, OH, OW, pt, pl;
    int32_t off_x, sxn, sxc, sxh, CP, MP, OB;
    int32_t off_bias, s_bias;
} halo_pc;

typedef struct halo_wpc {
    uint32_t n;
    int32_t O, C, KW, KHW, MP, CP;
    int32_t off_w, sw0, sw1, sw2, sw3;
} halo_wpc;

_Static_assert(sizeof(halo_pc) <= LM_VK_PUSH_BYTES, "conv_halo push constants");

/* conv_halo's tiles: output rows per workgroup (16 pixels wide), the most
 * output-channel fragments of 16 per workgroup, input channels per chunk;
 * g: weight fragments read from the packed buffer (not staged), two input
 * buffers; q: the input read as aligned runs of 4 pixels (8-byte loads),
 * where x allows (else the tile named by `plain`).  simt: the emulation
 * with the same chunk, weight and input paths. */
typedef struct halo_tile { const char *name, *shader, *simt; int th, mfmax, ck; const char *plain; } halo_tile;
static const halo_tile halo_tiles[] = {
    {"h8", "conv_halo", "conv_halo_simt", 8, 4, 16, NULL},              /* 4 subgroups of 2 rows */
    {"h4", "conv_halo_h4", "conv_halo_simt", 4, 4, 16, NULL},           /* 4 of 1 row */
    {"h16", "conv_halo_h16", "conv_halo_simt", 16, 4, 16, NULL},        /* 8 of 2 rows */
    {"h8k32", "conv_halo_k32", "conv_halo_simt_k32", 8, 2, 32, NULL},   /* 4 of 2 rows, 32 channels a chunk */
    {"h4k32", "conv_halo_h4k32", "conv_halo_simt_k32", 4, 2, 32, NULL}, /* 4 of 1 row, the same */
    {"h8g", "conv_halo_g", "conv_halo_simt_g", 8, 4, 32, NULL},         /* 4 of 2 rows, g */
    {"h4g", "conv_halo_h4g", "conv_halo_simt_g", 4, 4, 32, NULL},       /* 4 of 1 row, g */
    {"h8gq", "conv_halo_gq", "conv_halo_simt_gq", 8, 4, 32, "h8g"},     /* h8g, q */
    {"h4gq", "conv_halo_h4gq", "conv_halo_simt_gq", 4, 4, 32, "h4g"},   /* h4g, q */
    {"h8w8gq", "conv_halo_w8gq", "conv_halo_simt_gq", 8, 4, 32, "h8g"}, /* 8 of 1 row, g, q */
    {"h8q", "conv_halo_q", "conv_halo_simt_q", 8, 4, 16, "h8"},         /* h8, q */
    {"h16q", "conv_halo_h16q", "conv_halo_simt_q", 16, 4, 16, "h16"},   /* h16, q */
    {"h16w4q", "conv_halo_h16w4q", "conv_halo_simt_q", 16, 4, 16, "h16"}, /* 4 of 4 rows, q */
};

static const halo_tile *halo_tile_named(const char *name)
{
    for (size_t i = 0; name && i < sizeof halo_tiles / sizeof *halo_tiles; i++)
        if (!strcmp(name, halo_tiles[i].name)) return &halo_tiles[i];
    return NULL;
}

bool lm_vk_halo_tall(int64_t oh, int64_t ow, int64_t n, int64_t o, int share)
{
    return (oh + 15) / 16 * ((ow + 15) / 16) * lm_vk_share_div(n, share) * ((o + 63) / 64) >= 256;
}

/* the tile for x (LUMEN_VK_CONV_HALO_TILE, else the default, from one
 * image's grid in a stacked call: choice.h); a q tile
 * needs W, x's offset and strides multiples of 4 and an 8-byte aligned
 * binding, and at most 4 columns of left padding */
static const halo_tile *halo_tile_for(const lm_array *node, const geom *g)
{
    const halo_tile *t = halo_tile_named(getenv("LUMEN_VK_CONV_HALO_TILE"));
    /* default (H100, 2026-11-25 22:45, docs/VULKAN.md "Halo tiles"): h8q,
     * or h16w4q where 16-row tiles still make at least 256 workgroups (it
     * led at 256x256, h8q at 128x128, where 16-row tiles leave SMs idle) */
    if (!t) t = halo_tile_named(lm_vk_halo_tall(g->OH, g->OW, g->N, g->O, lm_array_share(node)) ? "h16w4q" : "h8q");
    const lm_array *x = node->inputs[0];
    bool runs = x->shape[3] % 4 == 0 && x->offset % 4 == 0 && x->strides[0] % 4 == 0 && x->strides[1] % 4 == 0 &&
                x->strides[2] % 4 == 0 && lm_vk_mem_of(x)->off % 8 == 0 && node->params.i[3] <= 4;
    return t->plain && !runs ? halo_tile_named(t->plain) : t;
}

/* LUMEN_VK_CONV_HALO: 0 never, 1 up to 64 output channels (the default:
 * faster than the implicit GEMM at every ESRGAN shape on the H100), all:
 * any count (in blocks of 64), 32: up to 32, simt: conv_halo_simt* on
 * any device (tests) */
#define HALO_DEFAULT "1"
static const char *halo_env(void)
{
    const char *e = getenv("LUMEN_VK_CONV_HALO");
    return e && *e ? e : HALO_DEFAULT;
}

/* Does conv_halo take this conv?  An f16 x f16 conv (on tensor cores: one
 * that conv_coop would take, the caller checks), groups 1, stride and
 * dilation 1, kernels up to 3x3, x unit-strided along W, at most 64 output
 * channels (32 with LUMEN_VK_CONV_HALO=32, any with all or simt). */
static bool halo_fits(lm_vk_dev *v, const lm_array *node, const geom *g)
{
    const char *e = halo_env();
    if (!strcmp(e, "0")) return false;
    if (node->op != LM_OP_CONV || node->inputs[0]->dtype != LM_F16 || node->inputs[1]->dtype != LM_F16)
        return false;
    const int64_t *p = node->params.i;
    if (g->G != 1 || p[0] != 1 || p[1] != 1 || p[6] != 1 || p[7] != 1 || g->KH > 3 || g->KW > 3) return false;
    if (node->inputs[0]->strides[3] != 1 && g->W > 1) return false;
    if (strcmp(e, "all") && strcmp(e, "simt") && g->Og > (strcmp(e, "32") ? 64 : 32)) return false;
    int64_t mp = (g->O + 63) / 64 * 64, cp = (g->Cg + 31) / 32 * 32;
    const lm_vk_features *ft = &v->feat;
    return ft->max_shared >= 24 * 1024 && g->KH * g->KW * mp * cp < INT32_MAX && (g->OW + 15) / 16 <= ft->max_groups[0] &&
           (g->OH + 3) / 4 <= ft->max_groups[1] && g->N * (mp / 64) <= ft->max_groups[2];
}

/* conv_halo's packed weights ([tap][MP][CP] f16, conv_halo_w.comp), made
 * on the GPU once per weight view and hung on the weight's buffer as
 * derived data, which the core drops when the buffer is written or
 * released */
typedef struct halo_pack {
    lm_derived link;                  /* first: the core hands it back */
    lm_buffer *packed;
    int64_t offset, shape[4], strides[4], mp;
} halo_pack;

static void halo_pack_drop(lm_derived *d)
{
    halo_pack *h = (halo_pack *)d;
    lm_buffer_release(h->packed);
    free(h);
}

static lm_status halo_weights(lm_vk_dev *v, const lm_array *w, int32_t MP, int32_t CP, const lm_vk_mem **out)
{
    for (lm_derived *d = w->buf->derived; d; d = d->next) {
        const halo_pack *h = (const halo_pack *)d;
        if (d->drop == halo_pack_drop && h->offset == w->offset && h->mp == MP &&
            !memcmp(h->shape, w->shape, sizeof h->shape) && !memcmp(h->strides, w->strides, sizeof h->strides)) {
            *out = (const lm_vk_mem *)h->packed->handle;
            return LM_OK;
        }
    }
    if (v->plan) {   /* plan mode: the packing kernel's pipeline started, no pack made or kept */
        *out = v->dummy;
        return lm_vk_dispatch(v, "conv_halo_w", NULL, 0, NULL, 0, NULL, 0, 1, 1, 1);
    }
    halo_pack *h = calloc(1, sizeof *h);
    if (!h) return lm_error_set(LM_ERR_NOMEM, "vulkan: conv2d: out of memory for the packed weights");
    int64_t khw = w->shape[2] * w->shape[3];
    h->packed = lm_buffer_alloc(w->buf->device, (size_t)(2 * khw * MP * CP));
    if (!h->packed) {
        free(h);
        return lm_error_status();
    }
    halo_wpc pc = {(uint32_t)(khw * MP * CP), (int32_t)w->shape[0], (int32_t)w->shape[1], (int32_t)w->shape[3],
                   (int32_t)khw, MP, CP, (int32_t)w->offset, (int32_t)w->strides[0], (int32_t)w->strides[1],
                   (int32_t)w->strides[2], (int32_t)w->strides[3]};
    lm_vk_arg args[2] = {{lm_vk_mem_of(w), false}, {(const lm_vk_mem *)h->packed->handle, true}};
    lm_status st = lm_vk_dispatch(v, "conv_halo_w", NULL, 0, args, 2, &pc, sizeof pc,
                                  lm_vk_groups(v, pc.n, 256), 1, 1);
    if (st != LM_OK) {
        halo_pack_drop(&h->link);
        return st;
    }
    h->link.drop = halo_pack_drop;
    h->offset = w->offset;
    h->mp = MP;
    memcpy(h->shape, w->shape, sizeof h->shape);
    memcpy(h->strides, w->strides, sizeof h->strides);
    lm_buffer_attach(w->buf, &h->link);
    *out = (const lm_vk_mem *)h->packed->handle;
    return LM_OK;
}

static lm_status run_halo(lm_vk_dev *v, lm_array *node, const geom *g, bool simt)
{
    const lm_array *x = node->inputs[0], *w = node->inputs[1];
    const int64_t *p = node->params.i;
    const halo_tile *t = halo_tile_for(node, g);
    int32_t mf = (int32_t)((g->O + 15) / 16);
    if (mf > t->mfmax) mf = t->mfmax;
    /* whole fragments and chunks of 32 channels, zero-padded */
    int32_t ob = (int32_t)((g->O + 16 * mf - 1) / (16 * mf)), mp = ob * 16 * mf, cp = (int32_t)((g->Cg + 31) / 32 * 32);
    const lm_vk_mem *wp = NULL;
    lm_status st = halo_weights(v, w, mp, cp, &wp);
    if (st != LM_OK) return st;
    halo_pc pc = {(int32_t)g->Cg, (int32_t)g->O, (int32_t)g->H, (int32_t)g->W, (int32_t)g->OH, (int32_t)g->OW,
                  (int32_t)p[2], (int32_t)p[3], (int32_t)x->offset, (int32_t)x->strides[0],
                  (int32_t)x->strides[1], (int32_t)x->strides[2], cp, mp, ob, 0, 0};
    const lm_array *b = bias_of(node, &pc.off_bias, &pc.s_bias);
    /* whole fragments straight to the output: 16-byte aligned rows */
    bool direct = g->OW % 8 == 0 && (node->dtype == LM_F16 || node->dtype == LM_F32) &&
                  lm_vk_mem_of(node)->off % 16 == 0 && !getenv_off("LUMEN_VK_CONV_HALO_DIRECT");
    uint32_t spec[6] = {node->dtype, b ? b->dtype : node->dtype, (uint32_t)g->KH, (uint32_t)g->KW, (uint32_t)mf,
                        direct};
    lm_vk_arg args[4] = {{wp, false}, {lm_vk_mem_of(x), false}, {lm_vk_mem_of(node), true},
                         {b ? lm_vk_mem_of(b) : NULL, false}};
    int th = simt ? 8 : t->th;      /* the emulation's tiles are 8 rows */
    return lm_vk_dispatch(v, simt ? t->simt : t->shader, spec, 6, args, 4, &pc, sizeof pc,
                          (uint32_t)((g->OW + 15) / 16), (uint32_t)((g->OH + th - 1) / th), (uint32_t)(g->N * ob));
}

/* push constants of shaders/conv_im2col.comp */
typedef struct im2col_pc {
    uint32_t n;
    int32_t K, NP, G, Cg, KW, KHW, OW, H, W, sh, sw, pt, pl, dh, dw;
    int32_t off_x, sxn, sxc, sxh, sxw;
} im2col_pc;

/* Does conv_coop read an unfolded copy of x (conv_im2col.comp, then
 * B_FLAT) rather than gathering through the im2col mapping in its inner
 * loop?  LUMEN_VK_CONV_IM2COL=0 never, 1 wherever the copy's indices fit
 * 32 bits, unset: where one entry's copy (an image's group) takes at most
 * 320 MiB.  On the H200 (2026-11-30, bench/gpu/conv.py, f16 3x3, GPU time)
 * the copy and the flat GEMM beat the gather 1.28-1.54x at 47-302 MB an
 * image (SDXL's 320 channels at 128x128 and 640 at 64x64, the VAE's 512 at
 * 128x128 and 256 at 256x256), and lost 7% at 604 MB (128 channels at
 * 512x512, K = 1152); the first limit, 64 MiB for the whole batch, had
 * kept every one of those on the gather.  The copy is the same halves in
 * the same order, so the choice changes no bits; it is made per image, so
 * a stacked call takes its single runs' path in any case. */
static bool im2col_wanted(const gemm_pc *pc, int64_t entries)
{
    const char *e = getenv("LUMEN_VK_CONV_IM2COL");
    if ((e && !strcmp(e, "0")) || pc->N % 8 != 0) return false;
    int64_t elems = entries * pc->K * pc->N;
    if (elems >= INT32_MAX) return false;
    return (e && !strcmp(e, "1")) || 2 * (int64_t)pc->K * pc->N <= (int64_t)320 << 20;
}

/* the unfolded input of the conv into cols ([entry][K][N] f16); pc then
 * describes cols as a 1x1 conv's contiguous input */
static lm_status run_im2col(lm_vk_dev *v, const lm_array *node, const geom *g, gemm_pc *pc, lm_buffer **cols)
{
    const lm_array *x = node->inputs[0];
    int64_t entries = g->N * g->G, elems = entries * pc->K * pc->N;
    *cols = lm_buffer_alloc(v->dev, (size_t)(2 * elems));
    if (!*cols) return lm_error_status();
    if (((const lm_vk_mem *)(*cols)->handle)->off % 16 != 0) {     /* B_FLAT's 16-byte loads: keep the gather */
        lm_buffer_release(*cols);
        *cols = NULL;
        return LM_OK;
    }
    im2col_pc ip = {(uint32_t)(elems / 8), pc->K, pc->N, (int32_t)g->G, (int32_t)g->Cg, pc->KW, pc->KHW, pc->OW,
                    pc->H, pc->W, pc->sh, pc->sw, pc->pt, pc->pl, pc->dh, pc->dw, (int32_t)x->offset,
                    (int32_t)x->strides[0], pc->sxc, pc->sxh, pc->sxw};
    lm_vk_arg args[2] = {{lm_vk_mem_of(x), false}, {(const lm_vk_mem *)(*cols)->handle, true}};
    lm_status st = lm_vk_dispatch(v, "conv_im2col", NULL, 0, args, 2, &ip, sizeof ip, lm_vk_groups(v, ip.n, 256),
                                  1, 1);
    pc->off_b = 0;
    pc->sxc = pc->N;
    pc->bsb[0] = (int32_t)(g->G * pc->K * pc->N);
    pc->bsb[1] = pc->K * pc->N;
    return st;
}

/* push constants of shaders/conv_splitk.comp */
_Static_assert(sizeof(im2col_pc) <= LM_VK_PUSH_BYTES, "conv_im2col push constants");
_Static_assert(sizeof(lm_vk_splitk_pc) <= LM_VK_PUSH_BYTES, "conv_splitk push constants");

/* the second pass of a split-K conv: parts f32 slabs of n sums from
 * scratch, plus the bias, into node */
static lm_status run_splitk(lm_vk_dev *v, lm_array *node, const geom *g, const gemm_pc *pc, lm_buffer *scratch,
                            int parts)
{
    int32_t off_bias, s_bias;
    const lm_array *b = bias_of(node, &off_bias, &s_bias);
    lm_vk_splitk_pc rp = {(uint32_t)((int64_t)pc->M * pc->N * g->N * g->G), pc->M, pc->N, (int32_t)g->G, off_bias,
                          s_bias, parts};
    return lm_vk_splitk_run(v, node, scratch, &rp, b);
}

/* the GEMM kernel (coop: conv_coop*, else conv_gemm*): straight into node,
 * or with split-K into scratch (f32, no bias) and then run_splitk */
static lm_status run_gemm(lm_vk_dev *v, lm_array *node, const geom *g)
{
    gemm_pc pc;
    gemm_params(node, g, &pc);
    const lm_array *x = node->inputs[0], *w = node->inputs[1];
    const lm_array *b = node->params.i[9] ? node->inputs[2] : NULL;
    uint32_t gz = (uint32_t)(g->N * g->G), bdt = b ? b->dtype : node->dtype;
    bool wal = lm_vk_mem_of(w)->off % 16 == 0;
    if (coop_fits(v, node) && halo_fits(v, node, g)) return run_halo(v, node, g, false);
    bool coop = coop_fits(v, node), bf16 = coop && x->dtype == LM_BF16, khr = bf16 || (coop && coop_khr(v));
    const coop_tile *ct = coop ? conv_tile(pc.M, pc.N, pc.K, khr, bf16) : NULL;
    int share = lm_array_share(node);
    const lm_vk_f32_tile *ft = coop ? NULL : lm_vk_f32_pick(v, true, pc.M, pc.N, gz, share);
    int bm = coop ? ct->bm : ft->bm, bn = coop ? ct->bn : ft->bn;
    uint32_t gx = (uint32_t)((pc.N + bn - 1) / bn), gy = (uint32_t)((pc.M + bm - 1) / bm);
    int64_t slab = (int64_t)pc.M * pc.N * gz;
    /* by default only on tensor cores (measured there); LUMEN_VK_CONV_SPLITK
     * forces it on either kernel */
    int64_t bk = coop ? ct->bk : 16;
    int parts = lm_vk_splitk_parts((int64_t)gx * gy, gz, share, (pc.K + bk - 1) / bk, slab, coop);
    if ((int64_t)gz * parts > v->feat.max_groups[2]) parts = 1;
    lm_buffer *scratch = NULL, *cols = NULL;
    if (parts > 1) {
        scratch = lm_buffer_alloc(v->dev, (size_t)(4 * slab * parts));
        if (!scratch) return lm_error_status();
        pc.off_bias = -1;       /* run_splitk adds it */
        pc.s_bias = 0;
    }
    const lm_vk_mem *out = scratch ? (const lm_vk_mem *)scratch->handle : lm_vk_mem_of(node);
    uint32_t odt = scratch ? LM_F32 : node->dtype;
    lm_vk_arg args[4] = {{lm_vk_mem_of(w), false}, {lm_vk_mem_of(x), false},
                         {out, true}, {b && !scratch ? lm_vk_mem_of(b) : NULL, false}};
    lm_status st = LM_OK;
    if (coop) {
        /* 16-byte weight loads: 8 halves */
        bool a_vec = pc.off_a % 8 == 0 && pc.sam % 8 == 0 && pc.bsa[1] % 8 == 0 && wal;
        /* the input read by runs of 8 pixels (conv_gemm.glsl's B_VEC) */
        bool b_run = pc.sw == 1 && pc.dw == 1 && pc.sxw == 1 && pc.OW % 8 == 0 && pc.off_b % 2 == 0 &&
                     pc.sxc % 2 == 0 && pc.sxh % 2 == 0 && pc.bsb[0] % 2 == 0 && pc.bsb[1] % 2 == 0 &&
                     lm_vk_mem_of(x)->off % 16 == 0 && !getenv_off("LUMEN_VK_CONV_RUNS");
        /* a 1x1 stride-1 unpadded conv over whole rows: B is x's [C][H*W]
         * as it is, read by 16-byte vectors (conv_gemm.glsl's B_FLAT) */
        bool flat = pc.KHW == 1 && pc.sh == 1 && pc.sw == 1 && pc.pt == 0 && pc.pl == 0 && g->OH == g->H &&
                    g->OW == g->W && pc.sxw == 1 && pc.sxh == pc.W && pc.N % 8 == 0 && pc.off_b % 8 == 0 &&
                    pc.sxc % 8 == 0 && pc.bsb[0] % 8 == 0 && pc.bsb[1] % 8 == 0 &&
                    lm_vk_mem_of(x)->off % 16 == 0 && !getenv_off("LUMEN_VK_CONV_FLAT");
        if (!flat && im2col_wanted(&pc, gz)) {
            st = run_im2col(v, node, g, &pc, &cols);
            if (st != LM_OK) goto out;
            if (cols) {
                args[1].mem = (const lm_vk_mem *)cols->handle;
                flat = true;
                pc.KW = pc.KHW = 1;
            }
        }
        /* whole weight tiles: no bounds checks on A */
        bool full = a_vec && pc.M % bm == 0 && pc.K % ct->bk == 0;
        /* interior fragments stored straight to C where no bias is added on
         * store: 16-byte aligned rows of f16 or f32 */
        bool direct = pc.off_bias < 0 && (odt == LM_F16 || odt == LM_F32) && pc.N % 8 == 0 && out->off % 16 == 0 &&
                      !getenv_off("LUMEN_VK_CONV_DIRECT");
        /* the kernel's width and taps are compile-time (one pipeline each) */
        uint32_t in = bf16 ? LM_BF16 : LM_F16;
        uint32_t spec[16] = {in, in, odt, 1, 1, a_vec, b_run && !flat, 0, bdt, (uint32_t)pc.KW,
                             (uint32_t)pc.KHW, direct, 0, full, lm_vk_splitk_spec(parts, pc.bshape, pc.nb, gz), flat};
        st = lm_vk_dispatch(v, bf16 ? ct->khr_bf : khr ? ct->khr : ct->shader, spec, 16, args, 4, &pc, sizeof pc,
                            gx, gy, gz * (uint32_t)parts);
        if (st == LM_OK && bf16) lm_vk_bf16_runs++;
    } else {
        /* 4-element weight loads need every row start on a 16-byte boundary */
        bool a_vec = pc.off_a % 4 == 0 && pc.sam % 4 == 0 && pc.bsa[1] % 4 == 0 && wal;
        bool c_vec = pc.N % 4 == 0 && out->off % 16 == 0;
        /* conv_transpose reads its weights by element whatever A_VEC says: give
         * it the value that a conv of the same output alignment would, so the
         * two share a pipeline */
        if (pc.transpose) a_vec = c_vec;
        /* the f32 tiles split only where forced: their count stays a
         * constant (read off the grid, the f32 conv build gave wrong sums on
         * the H200 and not on lavapipe: not understood, docs/VULKAN.md) */
        uint32_t spec[15] = {w->dtype, x->dtype, odt, 1, 1, a_vec, 0, c_vec, bdt, 0, 0, 0, 0, 0, (uint32_t)parts};
        st = lm_vk_dispatch(v, ft->conv, spec, parts > 1 ? 15 : 9, args, 4, &pc, sizeof pc, gx, gy,
                            gz * (uint32_t)parts);
    }
    if (st == LM_OK && scratch) st = run_splitk(v, node, g, &pc, scratch, parts);
out:
    if (cols) lm_buffer_release(cols);
    if (scratch) lm_buffer_release(scratch);
    return st;
}

static lm_status run_direct(lm_vk_dev *v, lm_array *node, const geom *g)
{
    const lm_array *x = node->inputs[0], *w = node->inputs[1];
    const int64_t *p = node->params.i;
    direct_pc pc = {0};
    pc.n = (uint32_t)node->size;
    pc.transpose = node->op == LM_OP_CONV_TRANSPOSE;
    pc.O = (int32_t)g->O; pc.OH = (int32_t)g->OH; pc.OW = (int32_t)g->OW;
    pc.off_x = (int32_t)x->offset;
    pc.sxn = (int32_t)x->strides[0]; pc.sxc = (int32_t)x->strides[1];
    pc.sxh = (int32_t)x->strides[2]; pc.sxw = (int32_t)x->strides[3];
    pc.H = (int32_t)g->H; pc.W = (int32_t)g->W;
    pc.off_w = (int32_t)w->offset;
    pc.sw0 = (int32_t)w->strides[0]; pc.sw1 = (int32_t)w->strides[1];
    pc.sw2 = (int32_t)w->strides[2]; pc.sw3 = (int32_t)w->strides[3];
    pc.KH = (int32_t)g->KH; pc.KW = (int32_t)g->KW;
    pc.Cg = (int32_t)g->Cg; pc.Og = (int32_t)g->Og;
    pc.sh = (int32_t)p[0]; pc.sw = (int32_t)p[1]; pc.pt = (int32_t)p[2]; pc.pl = (int32_t)p[3];
    pc.dh = (int32_t)p[6]; pc.dw = (int32_t)p[7];
    const lm_array *b = bias_of(node, &pc.off_b, &pc.s_b);
    uint32_t spec[4] = {x->dtype, w->dtype, node->dtype, b ? b->dtype : node->dtype};
    lm_vk_arg args[4] = {{lm_vk_mem_of(x), false}, {lm_vk_mem_of(w), false},
                         {lm_vk_mem_of(node), true}, {b ? lm_vk_mem_of(b) : NULL, false}};
    return lm_vk_dispatch(v, "conv_direct", spec, 4, args, 4, &pc, sizeof pc,
                          lm_vk_groups(v, pc.n, 256), 1, 1);
}

/* ------------------------------------------- few output channels */

/* push constants of shaders/conv_small.comp */
typedef struct small_pc {
    int32_t npix, OW, O, G;
    int32_t off_x, sxn, sxc, sxh, sxw, H, W;
    int32_t off_w, sw0, sw1, sw2, sw3;
    int32_t Cg, CC;
    int32_t sh, sw, pt, pl, dh, dw;
    int32_t off_b, s_b;
} small_pc;

_Static_assert(sizeof(small_pc) <= LM_VK_PUSH_BYTES, "conv_small push constants");

#define SMALL_OG 16             /* conv_small.comp's OGMAX */
#define SMALL_SHARED 32768      /* the most shared memory it asks for */

/* conv_small's plan for a conv: pixels per invocation, invocations per
 * workgroup, input channels per staged chunk of weights, the shared vec4
 * slots, the grid along x */
typedef struct small_plan { int px, wg, cc, wsv; int64_t gx; } small_plan;

/* pixels per invocation: LUMEN_VK_CONV_SMALL_PX=1|2|4, else the most that
 * still leaves 2^17 invocations (half of an H100's 132 SMs x 2048): more
 * pixels share each weight load from shared memory and each index
 * computation, fewer keep the GPU full.  Not part of any sum's order. */
static int small_px(int64_t pixels)
{
    const char *e = getenv("LUMEN_VK_CONV_SMALL_PX");
    int px = e && *e ? atoi(e) : 0;
    if (px == 1 || px == 2 || px == 4) return px;
    for (px = 4; px > 1 && pixels / px < (1 << 17); px /= 2) {}
    return px;
}

/* invocations per workgroup: LUMEN_VK_CONV_SMALL_WG=64|128|256, else 256
 * halved (down to 64) while the grid has fewer than 256 workgroups (two an
 * SM of an H100), so that a small conv (the SD UNet's conv_out: 2 x 4096
 * pixels) still spreads over the GPU */
static int small_wg(int64_t entries, int64_t npix, int px)
{
    const char *e = getenv("LUMEN_VK_CONV_SMALL_WG");
    int wg = e && *e ? atoi(e) : 0;
    if (wg == 64 || wg == 128 || wg == 256) return wg;
    for (wg = 256; wg > 64 && entries * ((npix + (int64_t)wg * px - 1) / ((int64_t)wg * px)) < 256; wg /= 2) {}
    return wg;
}

/* Does conv_small take this conv (see gemm_fits for the GEMM's share)?  A
 * conv (not transposed) of at most 16 output channels per group whose
 * weights for one input channel (KH*KW*ceil(Og/4) vec4s) fit the shared
 * memory it asks for; the grid and the output's indices fit.
 * LUMEN_VK_CONV_SMALL=0 leaves these convs to conv_direct. */
static bool small_fits(lm_vk_dev *v, const lm_array *node, const geom *g, small_plan *plan)
{
    const lm_vk_features *ft = &v->feat;
    if (node->op != LM_OP_CONV || g->Og > SMALL_OG || getenv_off("LUMEN_VK_CONV_SMALL")) return false;
    /* the shared slots in steps of 256 (4 KiB), so that convs of similar
     * sizes share a pipeline */
    int64_t cap = (ft->max_shared < SMALL_SHARED ? ft->max_shared : SMALL_SHARED) / 16 / 256 * 256;
    int64_t per_c = g->KH * g->KW * ((g->Og + 3) / 4), npix = g->OH * g->OW;
    if (per_c < 1 || per_c > cap || node->size < 1 || node->size >= INT32_MAX) return false;
    plan->px = small_px(g->N * g->G * npix);
    plan->wg = small_wg(g->N * g->G, npix, plan->px);
    plan->cc = (int)(g->Cg < cap / per_c ? g->Cg : cap / per_c);
    plan->wsv = (int)((plan->cc * per_c + 255) / 256 * 256);
    plan->gx = (npix + (int64_t)plan->wg * plan->px - 1) / ((int64_t)plan->wg * plan->px);
    return plan->gx <= ft->max_groups[0] && g->N * g->G <= ft->max_groups[2];
}

static lm_status run_small(lm_vk_dev *v, lm_array *node, const geom *g, const small_plan *plan)
{
    const lm_array *x = node->inputs[0], *w = node->inputs[1];
    const int64_t *p = node->params.i;
    small_pc pc = {(int32_t)(g->OH * g->OW), (int32_t)g->OW, (int32_t)g->O, (int32_t)g->G,
                   (int32_t)x->offset, (int32_t)x->strides[0], (int32_t)x->strides[1], (int32_t)x->strides[2],
                   (int32_t)x->strides[3], (int32_t)g->H, (int32_t)g->W,
                   (int32_t)w->offset, (int32_t)w->strides[0], (int32_t)w->strides[1], (int32_t)w->strides[2],
                   (int32_t)w->strides[3], (int32_t)g->Cg, plan->cc,
                   (int32_t)p[0], (int32_t)p[1], (int32_t)p[2], (int32_t)p[3], (int32_t)p[6], (int32_t)p[7],
                   0, 0};
    const lm_array *b = bias_of(node, &pc.off_b, &pc.s_b);
    uint32_t spec[10] = {x->dtype, w->dtype, node->dtype, b ? b->dtype : node->dtype, (uint32_t)g->Og,
                         (uint32_t)g->KH, (uint32_t)g->KW, (uint32_t)plan->px, (uint32_t)plan->wsv,
                         (uint32_t)plan->wg};
    lm_vk_arg args[4] = {{lm_vk_mem_of(x), false}, {lm_vk_mem_of(w), false},
                         {lm_vk_mem_of(node), true}, {b ? lm_vk_mem_of(b) : NULL, false}};
    return lm_vk_dispatch(v, "conv_small", spec, 10, args, 4, &pc, sizeof pc, (uint32_t)plan->gx, 1,
                          (uint32_t)(g->N * g->G));
}

/* ------------------------------------------------------- Winograd */

/* push constants of shaders/conv_wino_u.comp, conv_wino_v.comp, conv_wino_y.comp */
typedef struct wino_upc {
    uint32_t n;
    int32_t O, C, off_w, sw0, sw1, sw2, sw3;
} wino_upc;

typedef struct wino_vpc {
    uint32_t n;
    int32_t T, C, tw, th, r0, H, W, pt, pl, off_x, sxn, sxc, sxh, sxw;
} wino_vpc;

typedef struct wino_ypc {
    uint32_t n;
    int32_t T, O, tw, th, r0, OH, OW, off_bias, s_bias;
} wino_ypc;

_Static_assert(sizeof(wino_upc) <= LM_VK_PUSH_BYTES, "conv_wino_u push constants");
_Static_assert(sizeof(wino_vpc) <= LM_VK_PUSH_BYTES, "conv_wino_v push constants");
_Static_assert(sizeof(wino_ypc) <= LM_VK_PUSH_BYTES, "conv_wino_y push constants");

/* 3x3 stride-1 convs on the f32 kernels go to Winograd's F(2x2, 3x3)
 * wherever wino_fits: by default on GPUs (on the H200, 2026-11-29, it took
 * 0.51-0.59 of the GEMM tiles' time at every shape measured, 32 to 256
 * channels, 128² to 1024²: docs/BENCHMARKS.md#issue36-table) where both
 * channel counts are 32 or more (as every shape measured; conv_small's
 * few output channels and a 3-channel input keep their kernels), not on
 * CPU devices (lavapipe: its three dispatches were slower there);
 * LUMEN_VK_CONV_F32=winograd forces it, any other value of that knob (a
 * tile's name) keeps the GEMM tiles */
static bool wino_asked(const lm_vk_dev *v, const geom *g)
{
    const char *e = getenv("LUMEN_VK_CONV_F32");
    if (e && *e) return !strcmp(e, "winograd");
    return !lm_vk_cpu_device(v) && g->Cg >= 32 && g->O >= 32;
}

/* Can the Winograd path take this conv?  conv2d (not transposed), groups 1,
 * 3x3, stride and dilation 1, any padding, on the f32-arithmetic kernels
 * (f16 and bf16 convs that go to tensor cores keep them); the filters'
 * transform and the output indexed in 32 bits. */
static bool wino_fits(lm_vk_dev *v, const lm_array *node, const geom *g)
{
    const int64_t *p = node->params.i;
    if (node->op != LM_OP_CONV || g->G != 1 || g->KH != 3 || g->KW != 3 || p[0] != 1 || p[1] != 1 || p[6] != 1 ||
        p[7] != 1)
        return false;
    if (g->Cg < 1 || g->O < 1 || g->OH < 1 || g->OW < 1 || coop_fits(v, node)) return false;
    int64_t tw = (g->OW + 1) / 2, c = g->Cg > g->O ? g->Cg : g->O;
    return 16 * g->O * g->Cg < INT32_MAX && node->size < INT32_MAX && 16 * c * tw * 4 < INT32_MAX &&
           tw <= (int64_t)v->feat.max_groups[0] * 64 && (g->O + 63) / 64 <= v->feat.max_groups[1];
}

/* U = the filters' transform ([16][O][C] f32, conv_wino_u.comp), made on
 * the GPU once per weight view and hung on the weight's buffer as derived
 * data (as conv_halo's packed weights): the core drops it when the buffer
 * is written or released, so it never outlives the weights it came from */
typedef struct wino_pack {
    lm_derived link;                  /* first: the core hands it back */
    lm_buffer *u;
    int64_t offset, shape[4], strides[4];
    lm_dtype dtype;
} wino_pack;

static void wino_pack_drop(lm_derived *d)
{
    wino_pack *h = (wino_pack *)d;
    lm_buffer_release(h->u);
    free(h);
}

static lm_status wino_weights(lm_vk_dev *v, const lm_array *w, const lm_vk_mem **out)
{
    for (lm_derived *d = w->buf->derived; d; d = d->next) {
        const wino_pack *h = (const wino_pack *)d;
        if (d->drop == wino_pack_drop && h->offset == w->offset && h->dtype == w->dtype &&
            !memcmp(h->shape, w->shape, sizeof h->shape) && !memcmp(h->strides, w->strides, sizeof h->strides)) {
            *out = (const lm_vk_mem *)h->u->handle;
            return LM_OK;
        }
    }
    uint32_t spec[1] = {w->dtype};
    if (v->plan) {   /* plan mode: the transform's pipeline started, no U made or kept */
        *out = v->dummy;
        return lm_vk_dispatch(v, "conv_wino_u", spec, 1, NULL, 0, NULL, 0, 1, 1, 1);
    }
    wino_pack *h = calloc(1, sizeof *h);
    if (!h) return lm_error_set(LM_ERR_NOMEM, "vulkan: conv2d: out of memory for the Winograd filters");
    int64_t O = w->shape[0], C = w->shape[1];
    h->u = lm_buffer_alloc(w->buf->device, (size_t)(4 * 16 * O * C));
    if (!h->u) {
        free(h);
        return lm_error_status();
    }
    wino_upc pc = {(uint32_t)(O * C), (int32_t)O, (int32_t)C, (int32_t)w->offset, (int32_t)w->strides[0],
                   (int32_t)w->strides[1], (int32_t)w->strides[2], (int32_t)w->strides[3]};
    lm_vk_arg args[2] = {{lm_vk_mem_of(w), false}, {(const lm_vk_mem *)h->u->handle, true}};
    lm_status st = lm_vk_dispatch(v, "conv_wino_u", spec, 1, args, 2, &pc, sizeof pc, lm_vk_groups(v, pc.n, 256),
                                  1, 1);
    if (st != LM_OK) {
        wino_pack_drop(&h->link);
        return st;
    }
    h->link.drop = wino_pack_drop;
    h->offset = w->offset;
    h->dtype = w->dtype;
    memcpy(h->shape, w->shape, sizeof h->shape);
    memcpy(h->strides, w->strides, sizeof h->strides);
    lm_buffer_attach(w->buf, &h->link);
    *out = (const lm_vk_mem *)h->u->handle;
    return LM_OK;
}

/* Tiles of 2x2 outputs go through V and M in chunks of whole tile rows:
 * up to cap bytes of either a chunk (at least one row), so SDXL's
 * 128-channel 1024x1024 convs (2 GiB each at once) take 8 chunks of 256
 * MiB, and at most 64 * gx_max tiles (the GEMM's grid).  A chunk is whole
 * images where one image fits, else rows of one image, and never crosses
 * a stacked call's image group (choice.h): each chunk is one that a single
 * image's call makes, and its GEMM chooses its tile as that call's does.
 * The tile rows a chunk (a multiple of th where whole images fit). */
int64_t lm_vk_wino_rows(int64_t oh, int64_t ow, int64_t n, int64_t c, int share, int64_t cap, int64_t gx_max)
{
    int64_t th = (oh + 1) / 2, tw = (ow + 1) / 2;
    if (cap > 4 * (int64_t)INT32_MAX) cap = 4 * (int64_t)INT32_MAX;   /* the shaders index V and M in 32 bits */
    int64_t rows = cap / (16 * 4 * c * tw), grid = gx_max * 64 / tw;
    if (rows > grid) rows = grid;
    if (rows < 1) rows = 1;
    if (rows < th) return rows;
    int64_t imgs = rows / th, one = lm_vk_share_div(n, share);
    return (imgs < one ? imgs : one) * th;
}

/* the chunks' rows for this conv: LUMEN_VK_CONV_WINO_KB KiB of V or M at
 * most (default 262144: 256 MiB) */
static int64_t wino_chunk_rows(lm_vk_dev *v, const geom *g, int share)
{
    const char *e = getenv("LUMEN_VK_CONV_WINO_KB");
    long long kb = e ? strtoll(e, NULL, 10) : 0;
    int64_t cap = (kb > 0 && kb < ((int64_t)1 << 40) ? kb : 262144) * (int64_t)1024;
    return lm_vk_wino_rows(g->OH, g->OW, g->N, g->Cg > g->O ? g->Cg : g->O, share, cap, v->feat.max_groups[0]);
}

/* the three stages over one chunk of nt tiles from tile row r0 */
static lm_status wino_chunk(lm_vk_dev *v, lm_array *node, const geom *g, const lm_vk_mem *u, const lm_vk_mem *vm,
                            const lm_vk_mem *mm, int64_t r0, int64_t nt)
{
    const lm_array *x = node->inputs[0];
    const int64_t *p = node->params.i;
    int32_t th = (int32_t)((g->OH + 1) / 2), tw = (int32_t)((g->OW + 1) / 2);
    wino_vpc vp = {(uint32_t)(g->Cg * nt), (int32_t)nt, (int32_t)g->Cg, tw, th, (int32_t)r0, (int32_t)g->H,
                   (int32_t)g->W, (int32_t)p[2], (int32_t)p[3], (int32_t)x->offset, (int32_t)x->strides[0],
                   (int32_t)x->strides[1], (int32_t)x->strides[2], (int32_t)x->strides[3]};
    uint32_t vspec[1] = {x->dtype};
    lm_vk_arg vargs[2] = {{lm_vk_mem_of(x), false}, {vm, true}};
    lm_status st = lm_vk_dispatch(v, "conv_wino_v", vspec, 1, vargs, 2, &vp, sizeof vp,
                                  lm_vk_groups(v, vp.n, 256), 1, 1);
    if (st == LM_OK) {
        /* M[k] = U[k] V[k], k < 16: [O][C] x [C][nt], contiguous, the
         * kernel matmul.c takes for that size (the chunk is one image's part) */
        lm_vk_gemm gm = {.a = u, .b = vm, .c = mm, .ta = LM_F32, .tb = LM_F32, .tc = LM_F32, .batch = 16,
                         .share = 1};
        gm.pc.M = (int32_t)g->O;
        gm.pc.N = (int32_t)nt;
        gm.pc.K = (int32_t)g->Cg;
        gm.pc.sam = (int32_t)g->Cg;
        gm.pc.sak = 1;
        gm.pc.sbk = (int32_t)nt;
        gm.pc.sbn = 1;
        gm.pc.nb = 1;
        gm.pc.bshape[0] = 16;
        gm.pc.bsa[0] = (int32_t)(g->O * g->Cg);
        gm.pc.bsb[0] = (int32_t)(g->Cg * nt);
        st = lm_vk_gemm_run(v, &gm);
    }
    if (st != LM_OK) return st;
    wino_ypc yp = {(uint32_t)(g->O * nt), (int32_t)nt, (int32_t)g->O, tw, th, (int32_t)r0, (int32_t)g->OH,
                   (int32_t)g->OW, 0, 0};
    const lm_array *b = bias_of(node, &yp.off_bias, &yp.s_bias);
    uint32_t yspec[2] = {node->dtype, b ? b->dtype : node->dtype};
    lm_vk_arg yargs[3] = {{mm, false}, {lm_vk_mem_of(node), true}, {b ? lm_vk_mem_of(b) : NULL, false}};
    return lm_vk_dispatch(v, "conv_wino_y", yspec, 2, yargs, 3, &yp, sizeof yp, lm_vk_groups(v, yp.n, 256), 1, 1);
}

/* Y = A^T [U . V] A, 16 GEMMs M[k] = U[k] V[k] in between (see the
 * shaders and backends/cpu/nn_conv_wino.c); V and M in scratch buffers
 * reused by every chunk (plan mode: none, the pipelines only) */
static lm_status run_wino(lm_vk_dev *v, lm_array *node, const geom *g)
{
    int64_t th = (g->OH + 1) / 2, tw = (g->OW + 1) / 2, all = g->N * th;
    int64_t rows = wino_chunk_rows(v, g, lm_array_share(node));
    int64_t group = lm_vk_share_div(g->N, lm_array_share(node)) * th;   /* one stacked image group's rows */
    const lm_vk_mem *u = NULL;
    lm_status st = wino_weights(v, node->inputs[1], &u);
    if (st != LM_OK) return st;
    lm_buffer *vb = NULL, *mb = NULL;
    const lm_vk_mem *vm = v->dummy, *mm = v->dummy;
    if (!v->plan) {
        vb = lm_buffer_alloc(v->dev, (size_t)(4 * 16 * g->Cg * rows * tw));
        mb = vb ? lm_buffer_alloc(v->dev, (size_t)(4 * 16 * g->O * rows * tw)) : NULL;
        if (!mb) {
            st = lm_error_status();
            goto out;
        }
        vm = (const lm_vk_mem *)vb->handle;
        mm = (const lm_vk_mem *)mb->handle;
    }
    /* chunks of `rows` within an image (rows < th) or an image group */
    int64_t unit = rows < th ? th : group;
    for (int64_t u0 = 0; u0 < all && st == LM_OK; u0 += unit)
        for (int64_t r0 = u0; r0 < u0 + unit && r0 < all && st == LM_OK; r0 += rows) {
            int64_t nr = u0 + unit - r0 < rows ? u0 + unit - r0 : rows;
            st = wino_chunk(v, node, g, u, vm, mm, r0, nr * tw);
        }
out:
    if (vb) lm_buffer_release(vb);
    if (mb) lm_buffer_release(mb);
    return st;
}

static lm_status run_conv(lm_vk_dev *v, lm_array *node)
{
    geom g = geom_of(node);
    small_plan plan;
    if (wino_asked(v, &g) && wino_fits(v, node, &g)) return run_wino(v, node, &g);
    if (!strcmp(halo_env(), "simt") && halo_fits(v, node, &g)) return run_halo(v, node, &g, true);
    if (gemm_fits(v, node, &g)) return run_gemm(v, node, &g);
    return small_fits(v, node, &g, &plan) ? run_small(v, node, &g, &plan) : run_direct(v, node, &g);
}

/* ------------------------------------------------- pooling, upsampling */

/* push constants of shaders/pool.comp; op codes P_* there */
typedef struct pool_pc {
    uint32_t n;
    int32_t op, C, OH, OW, H, W;
    int32_t off, sxn, sxc, sxh, sxw;
    int32_t kh, kw, sh, sw, ph, pw, dh, dw;
    int32_t count_pad, divisor, align;
    float fh, fw;
} pool_pc;

_Static_assert(sizeof(pool_pc) <= LM_VK_PUSH_BYTES, "pool push constants");

enum { P_MAX, P_AVG, P_ADAPTIVE, P_NEAREST, P_BILINEAR };

/* bilinear's source/destination scale along an axis, as the CPU's make_taps */
static float bilinear_scale(int64_t in, int64_t out, double scale, bool align)
{
    if (!align) return (float)scale;
    return out > 1 ? (float)((double)(in - 1) / (double)(out - 1)) : 0.0f;
}

static void pool_params(const lm_array *node, pool_pc *pc)
{
    const int64_t *p = node->params.i;
    const lm_array *x = node->inputs[0];
    if (node->op == LM_OP_ADAPTIVE_AVG_POOL) {
        pc->op = P_ADAPTIVE;
    } else if (node->op == LM_OP_UPSAMPLE) {
        bool bilinear = p[0] == LM_UPSAMPLE_BILINEAR;
        pc->op = bilinear ? P_BILINEAR : P_NEAREST;
        pc->align = bilinear && p[1];
        pc->fh = bilinear ? bilinear_scale(x->shape[2], node->shape[2], node->params.f[0], p[1])
                          : (float)node->params.f[0];
        pc->fw = bilinear ? bilinear_scale(x->shape[3], node->shape[3], node->params.f[1], p[1])
                          : (float)node->params.f[1];
    } else {
        pc->op = node->op == LM_OP_MAX_POOL ? P_MAX : P_AVG;
        pc->kh = (int32_t)p[0]; pc->kw = (int32_t)p[1];
        pc->sh = (int32_t)p[2]; pc->sw = (int32_t)p[3];
        pc->ph = (int32_t)p[4]; pc->pw = (int32_t)p[5];
        pc->dh = (int32_t)p[6]; pc->dw = (int32_t)p[7];
        if (pc->op == P_AVG) {
            pc->dh = pc->dw = 1;
            pc->count_pad = (int32_t)p[9];
            pc->divisor = (int32_t)p[10];
        }
    }
}

static lm_status run_pool(lm_vk_dev *v, lm_array *node)
{
    const lm_array *x = node->inputs[0];
    pool_pc pc = {0};
    pc.n = (uint32_t)node->size;
    pc.C = (int32_t)node->shape[1]; pc.OH = (int32_t)node->shape[2]; pc.OW = (int32_t)node->shape[3];
    pc.H = (int32_t)x->shape[2]; pc.W = (int32_t)x->shape[3];
    pc.off = (int32_t)x->offset;
    pc.sxn = (int32_t)x->strides[0]; pc.sxc = (int32_t)x->strides[1];
    pc.sxh = (int32_t)x->strides[2]; pc.sxw = (int32_t)x->strides[3];
    pool_params(node, &pc);
    uint32_t spec[1] = {pc.op == P_NEAREST ? lm_vk_raw_dtype(node->dtype) : node->dtype};
    lm_vk_arg args[2] = {{lm_vk_mem_of(x), false}, {lm_vk_mem_of(node), true}};
    return lm_vk_dispatch(v, "pool", spec, 1, args, 2, &pc, sizeof pc, lm_vk_groups(v, pc.n, 256), 1, 1);
}

lm_status lm_vk_run_nn_conv(lm_vk_dev *v, lm_array *node)
{
    if (!lm_vk_supports_nn_conv(v, node))
        return lm_error_set(LM_ERR_UNSUPPORTED, "vulkan: %s of %s is not implemented", lm_op_name(node->op),
                            lm_dtype_name(node->dtype));
    lm_status st = node->op == LM_OP_CONV || node->op == LM_OP_CONV_TRANSPOSE ? run_conv(v, node)
                                                                             : run_pool(v, node);
    return st == LM_OK ? st : lm_error_prefix("%s", lm_op_name(node->op));
}
