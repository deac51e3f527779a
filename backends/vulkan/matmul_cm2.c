/* matmul_cm2.c - f16 matmul on VK_NV_cooperative_matrix2
 * (shaders/matmul_cm2.glsl): workgroup-scope matrices loaded through tensor
 * layouts, the shared-memory staging left to the driver; f16 x f16 inputs,
 * f32 accumulation, f16 or f32 results.  Tried before matmul_coop.c's
 * subgroup-scope kernels; what it does not take goes there.
 *
 * Which products it takes (the rest keep the KHR/NV kernels):
 * - f16 x f16 -> f16 or f32 (bf16 keeps its scaled path in matmul_coop.c);
 * - each operand stored with one of its two matrix dims contiguous (a
 *   transposed view is fine: the shader reads it through a swapping tensor
 *   view), the other stride covering a whole row (a tensor layout's strides
 *   must not overlap rows: no stride-0 broadcast inside a matrix);
 * - every load's and store's base 16-byte aligned (the extension's rule):
 *   the views' offsets and batch strides multiples of 8 elements, C's batch
 *   stride (M*N) too when batched, and the buffers at 16-byte offsets.
 * Unaligned row strides are fine (the tensor layout handles them); they
 * only lose the ALIGNED hint that lets the driver use 16-byte accesses.
 *
 * The device must list VK_NV_cooperative_matrix2 with workgroup scope,
 * flexible dimensions, tensor addressing and per-element operations, and an
 * f16 x f16 + f32 workgroup shape whose granularity divides the tile for
 * the tile's invocation count (device.c); an f16 result needs the f16
 * accumulator shape too (the conversion before the store).
 *
 * LUMEN_VK_GEMM=cm2 asks for it (the default where it can run), khr|nv|plain
 * for the older kernels; an explicit cm2 the device or the build cannot
 * meet, or a product outside the subset above, is said once on stderr and
 * the next kernel taken.  LUMEN_VK_COOP=0 keeps every product off tensor
 * cores, LUMEN_VK_COOP=<tile> (a matmul_coop.c tile) off this kernel unless
 * LUMEN_VK_GEMM=cm2.  LUMEN_VK_CM2=<tile> forces a tile (128x128,
 * 128x256, 256x128, 128x256k32, 64x64), LUMEN_VK_CM2_SWZ=<rows> groups the
 * tile order for L2 (0, the default: row by row). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backends/vulkan/vk.h"
#include "backends/vulkan/shaders.h"

/* module.mk's VK_CM2_VARIANTS */
typedef struct cm2_tile {
    const char *name, *shader;
    uint16_t bm, bn, bk, invocations;
} cm2_tile;

static const cm2_tile tiles[] = {
    {"128x128", "matmul_cm2_128x128", 128, 128, 64, 256},
    {"128x256", "matmul_cm2_128x256", 128, 256, 64, 256},
    {"256x128", "matmul_cm2_256x128", 256, 128, 64, 256},
    {"128x256k32", "matmul_cm2_128x256k32", 128, 256, 32, 256},
    {"64x64", "matmul_cm2_64x64", 64, 64, 64, 128},
};
#define NTILES (int)(sizeof tiles / sizeof *tiles)

static bool in_file(const char *shader)
{
    return lm_vk_spirv_load() == LM_OK && lm_vk_shader_find(shader);
}

/* does the device list a workgroup shape this tile is made of? */
static bool device_has(const lm_vk_features *ft, const cm2_tile *t, bool f16_acc)
{
    if (t->invocations > ft->cm2_max_invocations || t->bm > ft->cm2_max_dim || t->bn > ft->cm2_max_dim ||
        t->bk > ft->cm2_max_dim)
        return false;
    for (int i = 0; i < ft->ncm2; i++)
        if (ft->cm2[i].invocations == t->invocations && ft->cm2[i].f16_acc == f16_acc &&
            t->bm % ft->cm2[i].m == 0 && t->bn % ft->cm2[i].n == 0 && t->bk % ft->cm2[i].k == 0)
            return true;
    return false;
}

static const cm2_tile *usable(const lm_vk_features *ft, const char *name, bool f16_out)
{
    for (int j = 0; j < NTILES; j++)
        if (!strcmp(tiles[j].name, name) && device_has(ft, &tiles[j], false) &&
            (!f16_out || device_has(ft, &tiles[j], true)) && in_file(tiles[j].shader))
            return &tiles[j];
    return NULL;
}

int lm_vk_cm2_first(int64_t m, int64_t n, int64_t batch, int share)
{
    lm_vk_share_mb(&m, &batch, share);
    int64_t big = ((m + 127) / 128) * ((n + 255) / 256) * batch;
    int64_t mid = ((m + 127) / 128) * ((n + 127) / 128) * batch;
    return big >= 96 ? 0 : mid >= 64 ? 1 : 2;
}

/* the default tile: 128x256 where that makes enough workgroups to fill an
 * H100's 132 SMs (2048x2048 makes 128), else 128x128, 64x64 for small grids;
 * a stacked call (share) counts one image's part (choice.h) */
static const cm2_tile *pick_tile(const lm_vk_features *ft, const lm_vk_mm_pc *pc, int64_t batch, int share,
                                 bool f16_out)
{
    const char *env = getenv("LUMEN_VK_CM2");
    const cm2_tile *t = env && *env ? usable(ft, env, f16_out) : NULL;
    if (t) return t;
    const char *order[3] = {"128x256", "128x128", "64x64"};
    int first = lm_vk_cm2_first(pc->M, pc->N, batch, share);
    for (int i = first; i < 3 + first; i++)
        if ((t = usable(ft, order[i % 3], f16_out))) return t;
    return NULL;
}

/* can a tensor-layout load start at this operand's every batch (16 bytes)? */
static bool base_ok(const lm_vk_mem *m, int64_t off, int nb, const int32_t *bs)
{
    bool ok = off % 8 == 0 && m->off % 16 == 0;
    for (int d = 0; d < nb; d++) ok &= bs[d] % 8 == 0;
    return ok;
}

/* the layout of one operand: rows x cols stored with strides (srow, scol).
 * A dim of size 1 takes any stride, so it is given the one the layout
 * wants.  Sets *t when it is stored transposed (cols outer) and *outer to
 * the outer stride; false when neither dim is contiguous or the outer
 * stride overlaps rows (a tensor layout's stride must cover the inner dim). */
static bool layout_of(int64_t rows, int64_t cols, int64_t srow, int64_t scol, bool *t, int32_t *outer)
{
    if (cols == 1) scol = 1;
    if (rows == 1) srow = cols;
    if (scol == 1 && srow >= cols) { *t = false; *outer = (int32_t)srow; return true; }
    if (cols == 1 || rows == 1) return false;
    if (srow == 1 && scol >= rows) { *t = true; *outer = (int32_t)scol; return true; }
    return false;
}

/* -1 default (cm2 first), 0 cm2 asked for, 1 khr, nv or plain asked for
 * (anything else is the default: matmul_coop.c says so) */
static int cm2_wanted(void)
{
    const char *e = getenv("LUMEN_VK_GEMM");
    if (!e || !*e) return -1;
    if (!strcmp(e, "cm2")) return 0;
    return !strcmp(e, "khr") || !strcmp(e, "nv") || !strcmp(e, "plain") ? 1 : -1;
}

static void say_once(const char *why)
{
    static bool said;
    if (!said && cm2_wanted() == 0) fprintf(stderr, "lumen: LUMEN_VK_GEMM=cm2: %s; the next kernel is used\n", why);
    said = true;
}

typedef struct cm2_plan {
    const cm2_tile *t;
    bool a_t, b_t;               /* stored transposed */
    int32_t sa, sb;              /* their outer strides */
} cm2_plan;

static bool plan(lm_vk_dev *v, const lm_array *node, const lm_vk_mm_pc *pc, int64_t batch, int share, cm2_plan *p)
{
    const lm_vk_features *ft = &v->feat;
    /* opt-in until measured: written without a device that has the
     * extension (the session's device time was spent), so the default
     * stays the KHR/NV kernel; LUMEN_VK_GEMM=cm2 asks for it */
    if (node->ninputs != 2 || cm2_wanted() != 0) return false;
    /* LUMEN_VK_COOP=0: no tensor cores at all; =<tile>: that subgroup-scope
     * tile of matmul_coop.c (bench/gpu/mm_sweep.sh), unless cm2 is asked for */
    const char *coop = getenv("LUMEN_VK_COOP");
    if (coop && (!strcmp(coop, "0") || (*coop && cm2_wanted() != 0))) return false;
    bool f16_out = node->dtype == LM_F16;
    if (node->inputs[0]->dtype != LM_F16 || node->inputs[1]->dtype != LM_F16 || (!f16_out && node->dtype != LM_F32))
        return false;
    if (!ft->coopmat2) {
        say_once("the device does not list VK_NV_cooperative_matrix2 with workgroup-scope f16 shapes");
        return false;
    }
    if (!(p->t = pick_tile(ft, pc, batch, share, f16_out))) {
        say_once("no cm2 tile fits the device's shapes, or the SPIR-V file has none (without glslang 15 the "
                 "build has none: mk/glslang.mk)");
        return false;
    }
    const lm_vk_mem *ma = lm_vk_mem_of(node->inputs[0]), *mb = lm_vk_mem_of(node->inputs[1]);
    if (!layout_of(pc->M, pc->K, pc->sam, pc->sak, &p->a_t, &p->sa) ||
        !layout_of(pc->K, pc->N, pc->sbk, pc->sbn, &p->b_t, &p->sb) ||
        !base_ok(ma, pc->off_a, pc->nb, pc->bsa) || !base_ok(mb, pc->off_b, pc->nb, pc->bsb) ||
        lm_vk_mem_of(node)->off % 16 != 0 || (batch > 1 && (int64_t)pc->M * pc->N % 8 != 0)) {
        say_once("a product outside its subset (element-strided operands, or bases not 16-byte aligned: "
                 "matmul_cm2.c)");
        return false;
    }
    return true;
}

bool lm_vk_cm2_fits(lm_vk_dev *v, const lm_array *node, const lm_vk_mm_pc *pc, int64_t batch, int share)
{
    cm2_plan p;
    return plan(v, node, pc, batch, share, &p);
}

lm_status lm_vk_run_matmul_cm2(lm_vk_dev *v, lm_array *node, const lm_vk_mm_pc *pc, int64_t batch, int share)
{
    cm2_plan p;
    if (!plan(v, node, pc, batch, share, &p))
        return lm_error_set(LM_ERR_UNSUPPORTED, "vulkan: no cooperative-matrix-2 kernel for this matmul");
    const cm2_tile *t = p.t;
    /* the outer strides where the shader reads them, as layout_of gave them */
    lm_vk_mm_pc q = *pc;
    *(p.a_t ? &q.sak : &q.sam) = p.sa;
    *(p.b_t ? &q.sbn : &q.sbk) = p.sb;
    bool aligned = p.sa % 8 == 0 && p.sb % 8 == 0;
    uint32_t gx = (uint32_t)((q.N + t->bn - 1) / t->bn), gy = (uint32_t)((q.M + t->bm - 1) / t->bm);
    const char *e = getenv("LUMEN_VK_CM2_SWZ");
    int swz = e ? atoi(e) : 0;
    if (swz < 0 || (uint32_t)swz >= gy) swz = 0;
    uint32_t spec[5] = {node->dtype, p.a_t, p.b_t, aligned, (uint32_t)swz};
    lm_vk_arg args[3] = {{lm_vk_mem_of(node->inputs[0]), false}, {lm_vk_mem_of(node->inputs[1]), false},
                         {lm_vk_mem_of(node), true}};
    return lm_vk_dispatch(v, t->shader, spec, 5, args, 3, &q, sizeof q, gx, gy, (uint32_t)batch);
}
