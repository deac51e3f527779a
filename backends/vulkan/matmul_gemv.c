/* matmul_gemv.c - products of few rows (shaders/matmul_gemv.comp): a
 * DiT's modulation and time-embedding linears and a text encoder's pooled
 * projection at M = 1 or 2, tried before the GEMM tiles (matmul.c), which
 * would run a 128-row tile for one row with N / 128 workgroups each
 * walking all of K.  The kernel streams B once and keeps each row's sums in
 * registers: B [n][k] (a linear's weight read transposed, sbk == 1) with
 * 32 invocations a column, B [k][n] with 32 invocations along n (8 columns
 * each) and 8 slices of K; f32, f16 and bf16 in any mix, f32 sums.  Where
 * the columns' workgroups are too few to fill a GPU the K range is split
 * over workgroups (f32 partial sums in a scratch buffer, then
 * conv_splitk.comp adds them in part order: no float atomics).
 *
 * Which products (choice.h): one image's part (a stacked call: the share)
 * of at most 8 rows: M, or batch x M where B is the same for every batch
 * entry (stride 0: one workgroup's 8 rows span entries and B is read once).
 * The parts depend on N, K and B's layout alone, and every output's order
 * of additions on those and the part size (the kernel's header), so a
 * stacked call gives the single runs' bytes.
 *
 * LUMEN_VK_GEMV=0 keeps every product on the GEMM kernels, =1 sends every
 * product the grid can hold here (any M: groups of 8 rows), for
 * measurements and tests; LUMEN_VK_GEMV_PARTS=<n> forces n parts (bounded by
 * K / 8).  The B [n][k] kernel's variants, for measurements (read at every
 * dispatch, so the same for a stacked call and its single runs):
 * LUMEN_VK_GEMV_LANES=8|16|32 invocations a column (default 32; it changes
 * the order of each sum's additions, within the parity tolerances),
 * LUMEN_VK_GEMV_UN=4|8 units loaded ahead (default 4) and
 * LUMEN_VK_GEMV_ASH=1 A's part staged in shared memory once for the
 * workgroup where it fits (default 0); neither of the last two changes
 * any bits.  By default (LUMEN_VK_GEMV_SHUF=0: never; read at every
 * dispatch too; on the H200 1.04-1.31x faster at issue 36's four shapes,
 * 2026-11-30, docs/BENCHMARKS.md#conv-im2col-h200) the B [n][k] products go to
 * shaders/matmul_gemv_shuf.comp: a column's lanes added by subgroup
 * shuffles in the same tree as here (the same bits: the shared-memory
 * tree's barriers gone) and fewer workgroups, each subgroup walking
 * columns, where the device has subgroup shuffles in compute shaders and
 * its subgroups hold a column's lanes and divide the workgroup (else the
 * kernel above; A is never staged there).  Its knobs:
 * LUMEN_VK_GEMV_SHUF_WG=64|128|256 invocations a workgroup (default 256)
 * and LUMEN_VK_GEMV_SHUF_GROUPS=<n> workgroups at most along the columns
 * (default 132 x 2048 invocations' worth, an H200's SMs full, divided by
 * the grid's parts and row groups). */
#include <stdlib.h>
#include <string.h>
#include "backends/vulkan/vk.h"
#include "backends/vulkan/choice.h"

/* shaders/matmul_gemv.comp's push constants: matmul_pc.glsl's and MM_PC_MORE */
typedef struct gemv_pc {
    lm_vk_mm_pc mm;
    int32_t gpe, rows, kc;
} gemv_pc;

_Static_assert(sizeof(gemv_pc) <= LM_VK_PUSH_BYTES, "matmul_gemv push constants");

#define GEMV_ROWS 8     /* rows a workgroup (the kernel's accumulators) */
#define GEMV_KN_COLS 256 /* columns a workgroup, B [k][n] (NX * 8) */
#define GEMV_ASH_WORDS 2048 /* 16-byte words of A staged (ASH): 32 KiB */

/* a knob's value where it is one of the allowed (a power of two in
 * [lo, hi]), else the default */
static int knob(const char *name, int lo, int hi, int dflt)
{
    const char *e = getenv(name);
    int x = e ? atoi(e) : 0;
    return x >= lo && x <= hi && !(x & (x - 1)) ? x : dflt;
}

/* invocations a column, B [n][k] (the shader's LANES); 256 / it columns a
 * workgroup (RW) */
static int gemv_lanes(void) { return knob("LUMEN_VK_GEMV_LANES", 8, 32, 32); }

/* the shuffle kernel's workgroup size for a product (unless LUMEN_VK_GEMV_SHUF=0),
 * 0 where it does not apply: B [k][n], no subgroup shuffles, subgroups
 * smaller than a column's lanes or not dividing the workgroup */
static int shuf_wg(const lm_vk_dev *v, bool bt, int lanes)
{
    const char *e = getenv("LUMEN_VK_GEMV_SHUF");
    if (!bt || (e && !strcmp(e, "0"))) return 0;
    int wg = knob("LUMEN_VK_GEMV_SHUF_WG", 64, 256, 256);
    uint32_t sg = v->feat.subgroup_size;
    if (!v->feat.subgroup_shuffle || sg < (uint32_t)lanes || wg % sg) return 0;
    return wg;
}

/* the shuffle kernel's workgroups along the columns: at most the cap over
 * the grid's others (parts x row groups), as few as give every subgroup
 * the same number of column trips as the cap does */
static uint32_t shuf_groups(int64_t n, int lanes, int wg, int64_t others)
{
    int64_t cols = wg / lanes, full = (n + cols - 1) / cols;
    const char *e = getenv("LUMEN_VK_GEMV_SHUF_GROUPS");
    int64_t cap = e && atoll(e) > 0 ? atoll(e) : 132 * 2048 / wg;
    cap /= others;
    if (cap < 1) cap = 1;
    int64_t trips = (full + cap - 1) / cap;
    return (uint32_t)((full + trips - 1) / trips);
}

static int64_t shuf_runs;

int64_t lm_vulkan_gemv_shuf_count(void)
{
    return shuf_runs;
}

bool lm_vk_gemv_takes(int64_t m, int64_t batch, bool b_bcast, int share)
{
    lm_vk_share_mb(&m, &batch, share);
    return (b_bcast ? m * batch : m) <= GEMV_ROWS;
}

int64_t lm_vk_gemv_part_k(int64_t n, int64_t k, bool b_t)
{
    /* B [n][k]: one part.  On the H200 (2026-11-29, bench/gpu/
     * gemv_limit.lua) a single part was the fastest at every shape tried,
     * 1 x 3840 x 3840 22.1 us against 36.1 in the 3 parts this rule gave
     * before, 1 x 2560 x 9728 48.0 against 56.8 in 4; more parts only
     * added time (docs/BENCHMARKS.md#issue36-table).  B [k][n]: about
     * 1024 workgroups of 256 invocations (the H200's 132 SMs hold 2048
     * invocations each), parts of at least 64 elements of K (8 rows a
     * slice), at most 64 parts (the second pass reads them all): there 16
     * parts took 1 x 9728 x 2560 from 775 to 73 us */
    if (b_t) return (k + 7) / 8 * 8;
    int64_t groups = (n + GEMV_KN_COLS - 1) / GEMV_KN_COLS;
    int64_t least = 64;
    int64_t p = (1024 + groups - 1) / groups, most = k / least;
    if (p > most) p = most;
    if (p > 64) p = 64;
    if (p < 1) p = 1;
    return ((k + p - 1) / p + 7) / 8 * 8;
}

/* B stored [n][k]: the linear layer's weight read transposed */
static bool b_transposed(const lm_vk_mm_pc *pc)
{
    return pc->sbk == 1 && (pc->sbn != 1 || pc->N == 1);
}

/* B the same for every batch entry */
static bool b_broadcast(const lm_vk_mm_pc *pc)
{
    for (int d = 0; d < pc->nb; d++)
        if (pc->bsb[d] != 0 && pc->bshape[d] > 1) return false;
    return true;
}

/* can 16-byte loads start at every unit (8 elements along the unit-stride
 * dim) of x: the offset, the other stride (where more than one) and the
 * batch strides whole 16-byte steps, the buffer at a 16-byte offset */
static bool vec_ok(const lm_array *x, int64_t off, int64_t other, int64_t n_other, const int32_t *bs,
                   const lm_vk_mm_pc *pc)
{
    int64_t step = lm_dtype_size(x->dtype) == 4 ? 4 : 8;
    if (lm_dtype_size(x->dtype) != 4 && lm_dtype_size(x->dtype) != 2) return false;
    bool ok = off % step == 0 && (n_other == 1 || other % step == 0) && lm_vk_mem_of(x)->off % 16 == 0;
    for (int d = 0; d < pc->nb; d++) ok &= bs[d] % step == 0;
    return ok;
}

/* the grid: x column groups, y parts, z row groups; false when beyond the device's */
static bool grid(const lm_vk_dev *v, const lm_vk_mm_pc *pc, int64_t batch, int64_t kc, uint32_t g[3], int32_t *gpe)
{
    bool bt = b_transposed(pc), bc = b_broadcast(pc);
    int64_t cols = bt ? 256 / gemv_lanes() : GEMV_KN_COLS;
    int64_t gx = (pc->N + cols - 1) / cols, gy = (pc->K + kc - 1) / kc;
    int64_t per = (pc->M + GEMV_ROWS - 1) / GEMV_ROWS;
    int64_t gz = bc ? (batch * pc->M + GEMV_ROWS - 1) / GEMV_ROWS : batch * per;
    /* the partial sums' indices stay in int32 */
    if (gy * batch * pc->M * pc->N >= INT32_MAX) return false;
    if (gx > v->feat.max_groups[0] || gy > v->feat.max_groups[1] || gz > v->feat.max_groups[2]) return false;
    g[0] = (uint32_t)gx, g[1] = (uint32_t)gy, g[2] = (uint32_t)gz;
    *gpe = bc ? 0 : (int32_t)per;
    return true;
}

static int64_t part_k(const lm_vk_mm_pc *pc)
{
    const char *e = getenv("LUMEN_VK_GEMV_PARTS");
    int64_t p = e ? atoll(e) : 0;
    if (p >= 1) {
        int64_t kc = ((pc->K + p - 1) / p + 7) / 8 * 8;
        return kc > 0 ? kc : 8;
    }
    return lm_vk_gemv_part_k(pc->N, pc->K, b_transposed(pc));
}

bool lm_vk_gemv_fits(lm_vk_dev *v, const lm_vk_mm_pc *pc, int64_t batch, int share)
{
    const char *e = getenv("LUMEN_VK_GEMV");
    if (e && !strcmp(e, "0")) return false;
    uint32_t g[3];
    int32_t gpe;
    if (pc->K <= 0 || pc->M <= 0 || pc->N <= 0 || !grid(v, pc, batch, part_k(pc), g, &gpe)) return false;
    if (e && !strcmp(e, "1")) return true;
    return lm_vk_gemv_takes(pc->M, batch, b_broadcast(pc), share);
}

lm_status lm_vk_run_matmul_gemv(lm_vk_dev *v, lm_array *node, const lm_vk_mm_pc *mm, int64_t batch)
{
    const lm_array *a = node->inputs[0], *b = node->inputs[1];
    gemv_pc pc = {*mm, 0, (int32_t)(batch * mm->M), 0};
    int64_t kc = part_k(mm);
    uint32_t g[3];
    if (!grid(v, mm, batch, kc, g, &pc.gpe))
        return lm_error_set(LM_ERR_UNSUPPORTED, "vulkan: gemv: %dx%dx%d (batch %lld) beyond the grid", mm->M,
                            mm->K, mm->N, (long long)batch);
    pc.kc = (int32_t)kc;
    int parts = (int)g[1];
    bool bt = b_transposed(mm);
    bool a_vec = bt && mm->sak == 1 && vec_ok(a, mm->off_a, mm->sam, mm->M, mm->bsa, mm);
    bool b_vec = bt ? vec_ok(b, mm->off_b, mm->sbn, mm->N, mm->bsb, mm)
                    : mm->sbn == 1 && vec_ok(b, mm->off_b, mm->sbk, mm->K, mm->bsb, mm);
    /* split-K: f32 partial sums, slab by slab, as the GEMM tiles' (pc.rows
     * = batch x M rows; plan mode records nothing, so it needs no scratch) */
    lm_buffer *scratch;
    const lm_vk_mem *out;
    lm_status st = lm_vk_mm_split_begin(v, node, parts, mm, batch, &scratch, &out);
    if (st != LM_OK) return lm_error_prefix("gemv");
    /* A staged in shared memory: its whole units of a part for a group's
     * rows (f32: two words a unit) beside the kernel's 8 KiB of sums */
    int64_t rmax = pc.gpe > 0 ? (mm->M < GEMV_ROWS ? mm->M : GEMV_ROWS) : (pc.rows < GEMV_ROWS ? pc.rows : GEMV_ROWS);
    int64_t words = rmax * (kc / 8) * (a->dtype == LM_F32 ? 2 : 1), cap = 256;
    while (cap < words) cap *= 2;   /* a power of two: few pipelines */
    words = cap;
    int lanes = gemv_lanes(), wg = shuf_wg(v, bt, lanes);
    bool ash = bt && !wg && a_vec && knob("LUMEN_VK_GEMV_ASH", 1, 1, 0) && words <= GEMV_ASH_WORDS &&
               (uint64_t)words * 16 + 8 * 256 * 4 <= v->feat.max_shared;
    /* constant 8: the staged words of A, or the shuffle kernel's workgroup size */
    uint32_t spec[9] = {a->dtype, b->dtype, parts > 1 ? (uint32_t)LM_F32 : node->dtype, bt, a_vec, b_vec,
                        (uint32_t)lanes, (uint32_t)knob("LUMEN_VK_GEMV_UN", 4, 8, 4),
                        wg ? (uint32_t)wg : ash ? (uint32_t)words : 1};
    lm_vk_arg args[3] = {{lm_vk_mem_of(a), false}, {lm_vk_mem_of(b), false}, {out, true}};
    if (wg) {
        g[0] = shuf_groups(mm->N, lanes, wg, (int64_t)g[1] * g[2]);
        st = lm_vk_dispatch(v, "matmul_gemv_shuf", spec, 9, args, 3, &pc, sizeof pc, g[0], g[1], g[2]);
        if (st == LM_OK && !v->plan) shuf_runs++;
    } else {
        st = lm_vk_dispatch(v, "matmul_gemv", spec, 9, args, 3, &pc, sizeof pc, g[0], g[1], g[2]);
    }
    if (st == LM_OK && parts > 1) st = lm_vk_mm_split_sum(v, node, scratch, parts, (int64_t)pc.rows * mm->N);
    if (scratch) lm_buffer_release(scratch);
    return st;
}
