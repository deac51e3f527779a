/* matmul_coop.c - matmul on tensor cores through VK_NV_cooperative_matrix
 * (shaders/matmul_coop.glsl): f16 x f16 inputs, f32 accumulation, f16 or f32
 * results; and bf16 x bf16 through exactly scaled f16 copies.  Used by
 * matmul.c where the device lists an f16 shape this build has a shader for;
 * everything else (f32, mixed dtypes, devices without cooperative matrices
 * such as lavapipe) keeps the tiled kernels.
 *
 * bf16: VK_NV_cooperative_matrix has no bf16 type, and a plain conversion
 * to f16 would lose bf16's exponent range.  So each row of A and column of
 * B is first scaled by the power of two that brings its largest magnitude
 * to [2^14, 2^15) (shaders/matmul_scale.comp: exponents, then the f16
 * copies, exact to 2^-17 of the row's largest value), multiplied in f32 on
 * the tensor cores, and C unscaled on store (MM_SCALED).  LUMEN_VK_COOP_BF16=0
 * keeps bf16 on the f32-arithmetic kernel.
 * Where the device has VK_KHR_shader_bfloat16 with bf16 cooperative
 * matrices (device.c: feat.coop_bf16), bf16 runs on bf16 fragments instead
 * (the KHR kernel built with BF16: module.mk's VK_BF16_VARIANTS, the same
 * tiles, f32 accumulation), no copies; LUMEN_VK_BF16=0 keeps the scaled
 * copies.  A bf16 C goes out through the staging area (rounded to nearest
 * even as on the CPU).
 *
 * Block tiles (one shader each, see the table): the default, 128x256s1 or
 * k64s1, and its split-K parts are chosen by shape (lm_vk_coop_choose: a
 * wave-aware estimate); LUMEN_VK_COOP=<variant> forces a tile (w4,
 * 128x256, ..., n8 for 16x8x16 fragments), =0 turns the path off;
 * LUMEN_VK_MM_SPLITK=<parts> forces the parts (matmul.c's split-K: f32
 * slabs that conv_splitk.comp adds in part order).  LUMEN_VK_COOP_DIRECT=0 stages every result through shared
 * memory, LUMEN_VK_COOP_SWZ=<rows> groups the tile order for L2 (0, the
 * default: row by row).
 *
 * Two builds of the same shader: on VK_KHR_cooperative_matrix (MM_KHR,
 * compiled by glslang 15: mk/glslang.mk; the extension AMD RDNA3 and Intel
 * Arc offer too) and on VK_NV_cooperative_matrix.  The KHR build is used
 * where the device lists a KHR shape for the tile and the SPIR-V file has
 * it; LUMEN_VK_GEMM=khr|nv|plain asks for one (plain: no tensor cores, the
 * f32-arithmetic kernels of matmul.c), and a request the device or the
 * build cannot meet is said once on stderr before the next choice in
 * khr, nv, plain order is taken. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backends/vulkan/vk.h"
#include "backends/vulkan/shaders.h"

/* the shaders built: fragment shape and block tile */
typedef struct coop_variant {
    const char *name;        /* LUMEN_VK_COOP value */
    const char *shader;
    const char *scaled;      /* the same tile for scaled bf16, or NULL */
    uint8_t fm, fn, fk;
    uint16_t bm, bn, bk;     /* bk: the depth of a K step (split-K counts them) */
    const char *khr, *khr_scaled;   /* the KHR builds (module.mk's VK_KHR_VARIANTS), or NULL */
    const char *khr_bf;             /* the KHR build with bf16 fragments (VK_BF16_VARIANTS), or NULL */
} coop_variant;

int64_t lm_vk_bf16_runs;

int64_t lm_vulkan_bf16_coop_count(void)
{
    return lm_vk_bf16_runs;
}

/* which extension a GEMM runs on */
typedef struct coop_pick {
    const coop_variant *c;
    bool khr;
    bool native;    /* bf16 on bf16 fragments (khr_bf), not scaled f16 copies */
    int parts;      /* split-K parts by the rule (LUMEN_VK_MM_SPLITK overrides: gemm) */
} coop_pick;

/* H100, 2026-11-25 (docs/VULKAN.md): every tile ran at 160-185 TFLOP/s at
 * 8192 with 168-255 registers a thread (one workgroup per SM); 128x256s1
 * was fastest from 2048 up, k64s1 at 1024 */
static const coop_variant variants[] = {
    {"128x128", "matmul_coop", NULL, 16, 16, 16, 128, 128, 32, "matmul_coop_khr_128x128", NULL, NULL},            /* 8 subgroups of 64x32, BK 32 */
    {"w4", "matmul_coop_w4", NULL, 16, 16, 16, 128, 128, 32, "matmul_coop_khr_w4", NULL, NULL},              /* 4 of 64x64 */
    {"128x128w32", "matmul_coop_128x128w32", NULL, 16, 16, 16, 128, 128, 32, "matmul_coop_khr_128x128w32", NULL, NULL}, /* 8 of 32x64 */
    {"128x256", "matmul_coop_128x256", NULL, 16, 16, 16, 128, 256, 16, "matmul_coop_khr_128x256", NULL, NULL},    /* 8 of 64x64, BK 16 */
    {"256x128", "matmul_coop_256x128", NULL, 16, 16, 16, 256, 128, 16, "matmul_coop_khr_256x128", NULL, NULL},    /* 8 of 64x64, BK 16 */
    {"128x256s1", "matmul_coop_128x256s1", "matmul_coop_bf16", 16, 16, 16, 128, 256, 32, /* BK 32, one stage */
     "matmul_coop_khr_128x256s1", "matmul_coop_khr_bf16", "matmul_coop_khr_bf_128x256s1"},
    {"256x128s1", "matmul_coop_256x128s1", NULL, 16, 16, 16, 256, 128, 32, "matmul_coop_khr_256x128s1", NULL, NULL}, /* BK 32, one stage */
    {"k64s1", "matmul_coop_k64s1", "matmul_coop_bf16_k64s1", 16, 16, 16, 128, 128, 64, /* 8 of 64x32, BK 64 */
     "matmul_coop_khr_k64s1", "matmul_coop_khr_bf16_k64s1", "matmul_coop_khr_bf_k64s1"},
    {"w4k64s1", "matmul_coop_w4k64s1", NULL, 16, 16, 16, 128, 128, 64, "matmul_coop_khr_w4k64s1", NULL, NULL},    /* 4 of 64x64, BK 64, one stage */
    {"n8", "matmul_coop_n8", NULL, 16, 8, 16, 128, 128, 32, "matmul_coop_khr_n8", NULL, "matmul_coop_khr_bf_n8"},
    {"128x256n8", "matmul_coop_128x256n8", NULL, 16, 8, 16, 128, 256, 16, "matmul_coop_khr_128x256n8", NULL, NULL},
};
#define NVARIANTS (int)(sizeof variants / sizeof *variants)

static bool listed(int n, const uint8_t (*mnk)[3], const coop_variant *c)
{
    for (int i = 0; i < n; i++)
        if (mnk[i][0] == c->fm && mnk[i][1] == c->fn && mnk[i][2] == c->fk) return true;
    return false;
}

static bool in_file(const char *shader)
{
    return shader && lm_vk_spirv_load() == LM_OK && lm_vk_shader_find(shader);
}

/* can this tile run on that extension here (device shape, SPIR-V built)? */
static bool usable(const lm_vk_features *ft, const coop_variant *c, bool khr, bool bf16)
{
    if (khr)
        return ft->coopmat_khr && listed(ft->ncoop_khr, ft->coop_khr_mnk, c) &&
               in_file(bf16 ? c->khr_scaled : c->khr);
    return ft->coopmat_nv && listed(ft->ncoop, ft->coop_mnk, c) && (!bf16 || c->scaled);
}

static const coop_variant *find(const lm_vk_features *ft, const char *name, bool khr, bool bf16)
{
    for (int j = 0; j < NVARIANTS; j++)
        if (!strcmp(variants[j].name, name) && usable(ft, &variants[j], khr, bf16)) return &variants[j];
    return NULL;
}

/* can this tile run bf16 on bf16 fragments here? */
static bool usable_native(const lm_vk_features *ft, const coop_variant *c)
{
    return ft->coop_bf16 && listed(ft->ncoop_bf16, ft->coop_bf16_mnk, c) && in_file(c->khr_bf);
}

static const coop_variant *find_native(const lm_vk_features *ft, const char *name)
{
    for (int j = 0; j < NVARIANTS; j++)
        if (!strcmp(variants[j].name, name) && usable_native(ft, &variants[j])) return &variants[j];
    return NULL;
}

/* The tile and split-K parts of a tensor-core GEMM (choice.h), from the
 * sizes alone, counted on one image's part of a stacked call.  Each tile
 * runs one 256-invocation workgroup an SM (236 registers a thread), so a
 * grid runs in waves of COOP_H200_SMS workgroups, and a wave costs about
 * as much whether it is full or not: on the H200 a lone wave of 20 k64s1
 * workgroups ([2,77,2048] x [2048,1280], 32 steps of 64) took 65 us, a
 * step no faster than a full wave's.  So a candidate (tile, parts) is
 * estimated as
 *     waves x (K steps of a part + COOP_FIXED_STEPS) x the tile's ns a step
 *   + where parts > 1: the f32 slabs written and read (8 bytes a sum a
 *     part) at COOP_SPLIT_BYTES_NS, and COOP_SPLIT_NS for the second pass
 * (waves = ceil(workgroups / COOP_H200_SMS), workgroups = tiles x batch x
 * parts; a step of 128x256s1 (128 x 256 x 32) costs COOP_BIG_NS, one of
 * k64s1 (128 x 128 x 64) COOP_K64_NS), over 128x256s1 and k64s1 and 1..16
 * parts of at least COOP_MIN_STEPS steps each, and the cheapest is taken
 * (ties: the bigger tile, fewer parts).  COOP_FIXED_STEPS stands for a
 * workgroup's first load and its stores.  COOP_H200_SMS is the H200's (and
 * the H100's) SM count: Vulkan's core properties do not give one
 * (VK_NV_shader_sm_builtins' shaderSMCount would); lavapipe and other
 * devices without cooperative matrices never get here, and the f32 tiles
 * split only where LUMEN_VK_MM_SPLITK says.
 * The constants are fitted to the H200's GPU times of both tiles at 1, 2,
 * 3, 4 and 8 parts over 19 products of SD 1.5, SDXL and Z-Image
 * (bench/gpu/mm_shapes.lua under LUMEN_VK_COOP and LUMEN_VK_MM_SPLITK,
 * 2026-11-29 23:55 UTC, docs/BENCHMARKS.md "Split-K and the tile by
 * waves"): the rule's pick is the fastest measured at 17 of them and
 * within 3% and 10% at the other two, where the helper's first estimates
 * (820 / 1000 ns, 4 fixed steps, 8 steps a part at least) lost up to 1.66x
 * ([2,77,768] x [768,320]: 12 steps of 64 want 4 parts of 3). */
#define COOP_H200_SMS 132
#define COOP_FIXED_STEPS 2
#define COOP_BIG_NS 1000.0
#define COOP_K64_NS 900.0
/* bf16 on bf16 fragments: k64s1 measured 1.2-2.7% slower than 128x256s1 at
 * Z-Image's [4224,3840] x 3840 and [4224,10240] x 3840 (565.2 / 1376.0
 * against 558.6 / 1340.2 us, 23:55 UTC) where f16's k64s1 was as fast or
 * faster: a step costs 1030 ns there, so full-wave products keep the big
 * tile in bf16 */
#define COOP_K64_BF16_NS 1030.0
#define COOP_SPLIT_BYTES_NS 2000.0
#define COOP_SPLIT_NS 1000.0
#define COOP_MAX_PARTS 16
#define COOP_MIN_STEPS 3

/* the estimate in ns for one image's part: m x n x k x batch on bm x bn
 * tiles of depth bk, a step costing step_ns, in `parts` parts */
static double coop_cost(int64_t m, int64_t n, int64_t k, int64_t batch, int bm, int bn, int bk, double step_ns,
                        int parts)
{
    int64_t steps = (k + bk - 1) / bk, per = (steps + parts - 1) / parts;
    int64_t groups = ((m + bm - 1) / bm) * ((n + bn - 1) / bn) * batch * parts;
    int64_t waves = (groups + COOP_H200_SMS - 1) / COOP_H200_SMS;
    double t = (double)waves * (double)(per + COOP_FIXED_STEPS) * step_ns;
    if (parts > 1) t += 8.0 * (double)parts * (double)(m * n * batch) / COOP_SPLIT_BYTES_NS + COOP_SPLIT_NS;
    return t;
}

/* the cheapest parts for that tile (*cost: its estimate) */
static int coop_best(int64_t m, int64_t n, int64_t k, int64_t batch, int bm, int bn, int bk, double step_ns,
                     double *cost)
{
    int64_t steps = (k + bk - 1) / bk;
    int best = 1;
    double bc = coop_cost(m, n, k, batch, bm, bn, bk, step_ns, 1);
    for (int p = 2; p <= COOP_MAX_PARTS && steps / p >= COOP_MIN_STEPS; p++) {
        /* as many parts as ceil(steps / p) steps a part make (none empty) */
        int64_t per = (steps + p - 1) / p;
        if ((steps + per - 1) / per != p) continue;
        double c = coop_cost(m, n, k, batch, bm, bn, bk, step_ns, p);
        if (c < bc) bc = c, best = p;
    }
    *cost = bc;
    return best;
}

int lm_vk_coop_choose(int64_t m, int64_t n, int64_t k, int64_t batch, int share, bool bf16, bool *big)
{
    lm_vk_share_mb(&m, &batch, share);
    double cb, ck;
    int pb = coop_best(m, n, k, batch, 128, 256, 32, COOP_BIG_NS, &cb);
    int pk = coop_best(m, n, k, batch, 128, 128, 64, bf16 ? COOP_K64_BF16_NS : COOP_K64_NS, &ck);
    *big = cb <= ck;
    return *big ? pb : pk;
}

int lm_vk_coop_parts(int64_t m, int64_t n, int64_t k, int64_t batch, int share, int bm, int bn, int bk)
{
    lm_vk_share_mb(&m, &batch, share);
    double c;
    /* another tile's step: as k64s1's per multiply-add */
    return coop_best(m, n, k, batch, bm, bn, bk, COOP_K64_NS * bm * bn * bk / (128.0 * 128 * 64), &c);
}

/* the default tile for an M x N x K (x batch) product, and its parts
 * (lm_vk_coop_choose); where the device lacks its fragment shape, n8 */
static const coop_variant *pick_tile(const lm_vk_features *ft, const lm_vk_mm_pc *pc, int64_t batch, int share,
                                     bool khr, bool bf16, int *parts)
{
    bool big;
    *parts = lm_vk_coop_choose(pc->M, pc->N, pc->K, batch, share, false, &big);
    const coop_variant *c = find(ft, big ? "128x256s1" : "k64s1", khr, bf16);
    if (c) return c;
    c = find(ft, "n8", khr, bf16);
    if (c) *parts = lm_vk_coop_parts(pc->M, pc->N, pc->K, batch, share, c->bm, c->bn, c->bk);
    return c;
}

static int env_int(const char *name, int dflt)
{
    const char *e = getenv(name);
    return e && *e ? atoi(e) : dflt;
}

/* LUMEN_VK_GEMM: 0 khr, 1 nv, 2 plain; unset or unknown: khr (cm2, which
 * matmul_cm2.c takes first: khr for what it leaves) */
static int gemm_wanted(void)
{
    const char *e = getenv("LUMEN_VK_GEMM");
    if (!e || !*e || !strcmp(e, "khr") || !strcmp(e, "cm2")) return 0;
    if (!strcmp(e, "nv")) return 1;
    if (!strcmp(e, "plain")) return 2;
    static bool said;
    if (!said) fprintf(stderr, "lumen: LUMEN_VK_GEMM=%s: not cm2, khr, nv or plain; using the default\n", e);
    said = true;
    return 0;
}

/* the rule's parts for a tile LUMEN_VK_COOP forces (or n8) */
static int tile_parts(const coop_variant *c, const lm_vk_mm_pc *pc, int64_t batch, int share)
{
    return lm_vk_coop_parts(pc->M, pc->N, pc->K, batch, share, c->bm, c->bn, c->bk);
}

static coop_pick variant_for(lm_vk_dev *v, const lm_array *node, const lm_vk_mm_pc *pc, int64_t batch, int share)
{
    const lm_vk_features *ft = &v->feat;
    coop_pick none = {NULL, false, false, 1};
    if (node->ninputs != 2) return none;
    lm_dtype ta = node->inputs[0]->dtype, tb = node->inputs[1]->dtype;
    bool f16 = ta == LM_F16 && tb == LM_F16 && (node->dtype == LM_F16 || node->dtype == LM_F32);
    bool bf16 = ta == LM_BF16 && tb == LM_BF16 && (node->dtype == LM_BF16 || node->dtype == LM_F32) &&
                ft->subgroup_arith && env_int("LUMEN_VK_COOP_BF16", 1) != 0;
    if (!f16 && !bf16) return none;
    const char *env = getenv("LUMEN_VK_COOP");
    if (env && !strcmp(env, "0")) return none;
    int want = gemm_wanted();
    if (want == 2) return none;
    /* the shaders' tiling assumes subgroups of 32 and up to 48 KiB of
     * shared memory; the bf16 scaling reduces over subgroups */
    if (!(ft->coopmat_nv || ft->coopmat_khr) || ft->subgroup_size != 32 || ft->max_shared < 48 * 1024) {
        static bool said_none;
        const char *asked = getenv("LUMEN_VK_GEMM");
        if (asked && *asked && !said_none)
            fprintf(stderr, "lumen: LUMEN_VK_GEMM=%s: %s has no usable cooperative matrices; plain kernels\n",
                    asked, v->dev->name);
        said_none = true;
        return none;
    }
    /* bf16: native fragments first (the KHR path), the tiles as f16's */
    const char *nat = getenv("LUMEN_VK_BF16");
    if (bf16 && want == 0 && !(nat && !strcmp(nat, "0"))) {
        bool big;
        int parts = lm_vk_coop_choose(pc->M, pc->N, pc->K, batch, share, true, &big);
        const coop_variant *c = env && *env ? find_native(ft, env) : NULL;
        if (!c) c = find_native(ft, big ? "128x256s1" : "k64s1");
        else parts = tile_parts(c, pc, batch, share);
        if (!c && (c = find_native(ft, "n8"))) parts = tile_parts(c, pc, batch, share);
        if (c) return (coop_pick){c, true, true, parts};
    }
    for (int khr = want == 0; khr >= 0; khr--) {
        const coop_variant *c = env && *env ? find(ft, env, khr, bf16) : NULL;
        int parts = c ? tile_parts(c, pc, batch, share) : 1;
        if (!c) c = pick_tile(ft, pc, batch, share, khr, bf16, &parts);
        if (c) return (coop_pick){c, khr != 0, false, parts};
        /* an explicit khr that cannot be had here: said once */
        static bool said;
        const char *asked = getenv("LUMEN_VK_GEMM");
        if (khr && asked && *asked && !said) {
            fprintf(stderr, "lumen: LUMEN_VK_GEMM=%s: %s; trying VK_NV_cooperative_matrix\n", asked,
                    !ft->coopmat_khr ? "the device lists no f16 VK_KHR_cooperative_matrix shape"
                                     : "the SPIR-V file has no KHR kernel for this product (without glslang 15 "
                                       "the build has none: mk/glslang.mk)");
            said = true;
        }
    }
    return none;
}

bool lm_vk_coop_fits(lm_vk_dev *v, const lm_array *node, const lm_vk_mm_pc *pc, int64_t batch, int share)
{
    return variant_for(v, node, pc, batch, share).c != NULL;
}

/* can a 16-byte load start at every chunk of 8 along the contiguous dim? */
static bool vec_ok(const lm_vk_mem *m, int64_t off, int64_t srow, int64_t scol, int nb, const int32_t *bs)
{
    bool ok = scol == 1 && off % 8 == 0 && srow % 8 == 0 && m->off % 16 == 0;
    for (int d = 0; d < nb; d++) ok &= bs[d] % 8 == 0;     /* the batch offsets too */
    return ok;
}

/* LUMEN_VK_MM_SAY=1: each product's tile and parts on stderr, once until
 * the shape changes (bench/gpu/mm_sweep36.sh: what the rule chose) */
static void say_choice(const coop_variant *c, coop_pick pk, const lm_vk_mm_pc *pc, int64_t batch, int parts)
{
    static int64_t last[6];
    const char *e = getenv("LUMEN_VK_MM_SAY");
    if (!e || strcmp(e, "1")) return;
    int64_t key[6] = {pc->M, pc->K, pc->N, batch, parts, (int64_t)(uintptr_t)c};
    if (!memcmp(key, last, sizeof key)) return;
    memcpy(last, key, sizeof key);
    fprintf(stderr, "lumen: matmul b%lldx%dx%dx%d: %s%s, %d part%s\n", (long long)batch, pc->M, pc->K, pc->N,
            c->name, pk.native ? " (bf16)" : pk.khr ? " (khr)" : " (nv)", parts, parts > 1 ? "s" : "");
}

/* the GEMM on f16 operands ma, mb into node (pc: lm_vk_mm_pc, with e_off
 * after it for the scaled shader, whose exponents are ex) */
static lm_status gemm(lm_vk_dev *v, coop_pick pk, lm_array *node, const lm_vk_mem *ma,
                      const lm_vk_mem *mb, const lm_vk_mem *ex, const lm_vk_mm_pc *pc, size_t pcsize,
                      int64_t batch)
{
    const coop_variant *c = pk.c;
    /* stage each operand with its unit-stride dim contiguous in shared memory;
     * with neither stride 1 the layout does not matter (element loads) */
    bool a_k = pc->sak == 1 || pc->sam != 1, b_n = pc->sbn == 1 || pc->sbk != 1;
    bool a_vec = a_k ? vec_ok(ma, pc->off_a, pc->sam, pc->sak, pc->nb, pc->bsa)
                     : vec_ok(ma, pc->off_a, pc->sak, pc->sam, pc->nb, pc->bsa);
    bool b_vec = b_n ? vec_ok(mb, pc->off_b, pc->sbk, pc->sbn, pc->nb, pc->bsb)
                     : vec_ok(mb, pc->off_b, pc->sbn, pc->sbk, pc->nb, pc->bsb);
    /* split-K (LUMEN_VK_MM_SPLITK, else the rule's parts): f32 slabs,
     * then conv_splitk.comp adds them in part order into node */
    int forced = lm_vk_mm_splitk_env();
    int parts = lm_vk_mm_parts_fit(v, forced ? forced : pk.parts, (pc->K + c->bk - 1) / c->bk, pc, batch);
    say_choice(c, pk, pc, batch, parts);
    lm_buffer *scratch;
    const lm_vk_mem *out;
    lm_status st = lm_vk_mm_split_begin(v, node, parts, pc, batch, &scratch, &out);
    if (st != LM_OK) return st;
    uint32_t odt = parts > 1 ? (uint32_t)LM_F32 : node->dtype;
    /* straight coopMatStore of interior fragments: C rows 16-byte aligned */
    bool direct = pc->N % 8 == 0 && (!out || out->off % 16 == 0) && env_int("LUMEN_VK_COOP_DIRECT", 1) != 0;
    /* bf16 results go through the staging area: stf's rounding to nearest
     * even, as the CPU (a fragment's conversion may round otherwise) */
    if (pk.native && odt == LM_BF16) direct = false;
    /* whole tiles only: no bounds checks in the loads */
    bool full = a_vec && b_vec && pc->M % c->bm == 0 && pc->N % c->bn == 0 && pc->K % 64 == 0;
    uint32_t gx = (uint32_t)((pc->N + c->bn - 1) / c->bn), gy = (uint32_t)((pc->M + c->bm - 1) / c->bm);
    int swz = env_int("LUMEN_VK_COOP_SWZ", 0);
    if (swz < 0 || (uint32_t)swz >= gy) swz = 0;
    uint32_t in = pk.native ? LM_BF16 : LM_F16;
    uint32_t spec[15] = {in, in, odt, a_k, b_n, a_vec, b_vec, 0, 0, 0, 0,
                         direct, (uint32_t)swz, full, lm_vk_splitk_spec(parts, pc->bshape, pc->nb, batch)};
    lm_vk_arg args[4] = {{ma, false}, {mb, false}, {out, true}, {ex, false}};
    const char *shader = pk.native ? c->khr_bf : pk.khr ? (ex ? c->khr_scaled : c->khr) : (ex ? c->scaled : c->shader);
    /* one part: the 14 constants of before, so the pipeline is the same */
    st = lm_vk_dispatch(v, shader, spec, parts > 1 ? 15 : 14, args, ex ? 4 : 3, pc, pcsize, gx, gy,
                        (uint32_t)(batch * parts));
    if (st == LM_OK && pk.native) lm_vk_bf16_runs++;
    return lm_vk_mm_split_end(v, node, scratch, parts, pc, batch, st);
}

/* ---- bf16: scaled f16 copies (shaders/matmul_scale.comp) ---- */
typedef struct scale_pc {
    int32_t R, L, nbatch, off, s_i, s_j, nb, e_base;
    int32_t bshape[4], bs[4];
} scale_pc;

typedef struct scaled_pc {
    lm_vk_mm_pc mm;
    int32_t e_off;
} scaled_pc;

/* exponents of A's rows (is_b false) or B's columns into ex, then the
 * scaled f16 copy into dst: A as [batch][M][K], B as [batch][K][N] */
static lm_status scale_operand(lm_vk_dev *v, const lm_vk_mem *src, const lm_vk_mem *ex, const lm_vk_mem *dst,
                               const lm_vk_mm_pc *pc, bool is_b, int64_t batch)
{
    scale_pc s = {0};
    s.R = is_b ? pc->N : pc->M;
    s.L = pc->K;
    s.nbatch = (int32_t)batch;
    s.off = is_b ? pc->off_b : pc->off_a;
    s.s_i = is_b ? pc->sbn : pc->sam;
    s.s_j = is_b ? pc->sbk : pc->sak;
    s.nb = pc->nb;
    s.e_base = is_b ? (int32_t)(batch * pc->M) : 0;
    for (int d = 0; d < pc->nb; d++) {
        s.bshape[d] = pc->bshape[d];
        s.bs[d] = is_b ? pc->bsb[d] : pc->bsa[d];
    }
    bool rows = s.s_j == 1;
    int64_t nout = batch * s.R;
    int64_t groups = rows ? (nout + 7) / 8 : (nout + 31) / 32;
    if (groups > 65535) groups = 65535;     /* the kernel loops */
    uint32_t spec0[3] = {0, rows, is_b};
    lm_vk_arg a0[2] = {{src, false}, {ex, true}};
    lm_status st = lm_vk_dispatch(v, "matmul_scale", spec0, 3, a0, 2, &s, sizeof s, (uint32_t)groups, 1, 1);
    if (st != LM_OK) return st;
    uint32_t spec1[3] = {1, rows, is_b};
    lm_vk_arg a1[3] = {{src, false}, {ex, false}, {dst, true}};
    return lm_vk_dispatch(v, "matmul_scale", spec1, 3, a1, 3, &s, sizeof s,
                          lm_vk_groups(v, (uint64_t)(batch * s.R * s.L), 256), 1, 1);
}

/* scratch from the core's buffer cache: at 8192 the copies are 128 MiB
 * each, which fresh allocations (zeroed by the driver) would pay for on
 * every call; the cache's reuse within an evaluation is ordered by the
 * dispatches' barriers like any node's output */
static lm_status scratch(lm_vk_dev *v, int64_t bytes, lm_buffer **out)
{
    *out = lm_buffer_alloc(v->dev, (size_t)bytes);
    return *out ? LM_OK : lm_error_status();
}

static lm_status run_bf16(lm_vk_dev *v, coop_pick c, lm_array *node, const lm_vk_mm_pc *pc,
                          int64_t batch)
{
    int64_t na = batch * pc->M * pc->K, nbe = batch * pc->K * pc->N;
    if (na >= INT32_MAX || nbe >= INT32_MAX || batch * (pc->M + pc->N) >= INT32_MAX)
        return lm_error_set(LM_ERR_UNSUPPORTED, "vulkan: bf16 matmul operands beyond 2^31 elements");
    lm_buffer *ex = NULL, *a16 = NULL, *b16 = NULL;
    lm_status st = scratch(v, 4 * batch * (pc->M + pc->N), &ex);
    if (st == LM_OK) st = scratch(v, 2 * na, &a16);
    if (st == LM_OK) st = scratch(v, 2 * nbe, &b16);
    if (st == LM_OK) st = scale_operand(v, lm_vk_mem_of(node->inputs[0]), ex->handle, a16->handle, pc, false, batch);
    if (st == LM_OK) st = scale_operand(v, lm_vk_mem_of(node->inputs[1]), ex->handle, b16->handle, pc, true, batch);
    if (st == LM_OK) {
        /* the copies are contiguous: A [batch][M][K], B [batch][K][N] */
        scaled_pc s = {.mm = {.M = pc->M, .N = pc->N, .K = pc->K, .nb = 1, .sam = pc->K, .sak = 1,
                              .sbk = pc->N, .sbn = 1},
                       .e_off = (int32_t)(batch * pc->M)};
        s.mm.bshape[0] = (int32_t)batch;
        s.mm.bsa[0] = pc->M * pc->K;
        s.mm.bsb[0] = pc->K * pc->N;
        st = gemm(v, c, node, a16->handle, b16->handle, ex->handle, &s.mm, sizeof s, batch);
    }
    if (ex) lm_buffer_release(ex);
    if (a16) lm_buffer_release(a16);
    if (b16) lm_buffer_release(b16);
    return st;
}

lm_status lm_vk_run_matmul_coop(lm_vk_dev *v, lm_array *node, const lm_vk_mm_pc *pc, int64_t batch, int share)
{
    coop_pick c = variant_for(v, node, pc, batch, share);
    if (!c.c) return lm_error_set(LM_ERR_UNSUPPORTED, "vulkan: no cooperative-matrix kernel for this matmul");
    if (node->inputs[0]->dtype == LM_BF16 && !c.native) return run_bf16(v, c, node, pc, batch);
    return gemm(v, c, node, lm_vk_mem_of(node->inputs[0]), lm_vk_mem_of(node->inputs[1]), NULL, pc, sizeof *pc,
                batch);
}
