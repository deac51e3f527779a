/* quant.c - ggml's block quantizations on Vulkan: op dequantize
 * (shaders/quant_deq.glsl) and op qlinear, y [..., N] f32 = x [..., K] f32
 * w [N, K]^T with w quantized:
 *   - up to 8 rows of x: a GEMV (shaders/quant_gemv.glsl) that decodes the
 *     blocks as it reads them, x in f32;
 *   - more rows, on a device whose f16 GEMM runs on tensor cores
 *     (matmul_coop.c): a transient f16 copy of w (and of x) into that GEMM
 *     (run_deq_gemm), except Q8_0 under 64 rows, where the GEMM that
 *     decodes w into its f16 tiles on tensor cores is faster
 *     (quant_gemm_coop.glsl, NV cooperative matrices 16x16x16);
 *   - elsewhere (lavapipe, LUMEN_VK_GEMM=plain): the tiled f32 GEMM that
 *     decodes w as its tile is loaded (quant_gemm.glsl).
 * Measured on an H100 (docs/BENCHMARKS.md, "Quantized GEMM and GEMV on
 * Vulkan, part 2").  Every one of the 11 types runs natively; the
 * persistent weight stays quantized.
 *
 * Unlike the CPU's qlinear (backends/cpu/quant_linear.c), which quantizes
 * each row of x to Q8_0 / Q8_K and takes integer dot products, x stays f32
 * in the GEMV and the f32 GEMM: their result is x times the dequantized
 * weight, rounded in f32 (what tests/test_vk_quant.c compares against),
 * and differs from the CPU's by the CPU's activation rounding (half a
 * step of x's block).  The tensor-core GEMMs round x and w to f16
 * (2^-11 relative an operand; |values| beyond 65504 become infinite). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backends/vulkan/quant.h"

/* the shaders' type codes (quant.glsl's QT_*) follow core/dtype.h's order */
_Static_assert(LM_Q8_K - LM_Q4_0 == 10 && LM_Q6_K - LM_Q4_0 == 9 && LM_Q4_K - LM_Q4_0 == 7,
               "quant.glsl numbers the block types as core/dtype.h orders them");

/* rows of x up to which qlinear runs as a GEMV (one pass over w) */
#define GEMV_MAX_M 8
/* Q8_0 runs on quant_gemm_coop below this many rows, the transient f16
 * copy from there (H100: 0.81x the f16 GEMM at 16 and 32 rows against
 * 0.78x and 0.72x, 0.68x against 0.72x at 64); the other types take the
 * copy from 9 rows (Q4_K at 16: 0.78x against 0.73x) */
#define QGEMM_Q8_COOP_BELOW 64

typedef struct gemv_pc { uint32_t N, K, off_x, off_y, row_bytes, gx; } gemv_pc;
typedef struct gemm_pc { uint32_t M, N, K, off_x, off_y, row_bytes; } gemm_pc;
typedef struct deq_pc { uint32_t chunks, off, src_off; } deq_pc;

static bool fits(lm_vk_dev *v, const lm_array *a)
{
    size_t n = a->buf && a->buf->handle ? (size_t)lm_vk_mem_of(a)->size : lm_array_nbytes(a);
    return n <= v->feat.max_range && n < UINT32_MAX;
}

bool lm_vk_supports_quant(lm_vk_dev *v, const lm_array *node)
{
    if (v->lost || !fits(v, node) || node->dtype != LM_F32) return false;
    for (int i = 0; i < node->ninputs; i++)
        if (!fits(v, node->inputs[i])) return false;
    if (node->op == LM_OP_DEQUANTIZE)
        return node->ninputs == 1 && lm_dtype_is_quant(node->inputs[0]->dtype) &&
               node->inputs[0]->offset == 0 && node->size % 8 == 0 && node->size < INT32_MAX;
    if (node->op != LM_OP_QLINEAR || node->ninputs != 2) return false;
    const lm_array *x = node->inputs[0], *w = node->inputs[1];
    if (x->dtype != LM_F32 || !lm_array_is_contiguous(x) || !lm_dtype_is_quant(w->dtype) || w->ndim != 2 ||
        w->offset != 0)
        return false;
    int64_t N = w->shape[0], K = w->shape[1];
    if (K % lm_dtype_block(w->dtype) || N >= INT32_MAX || K >= INT32_MAX) return false;
    int64_t M = K ? x->size / K : 0;
    /* a GEMM's grid has ceil(M / 64) rows of workgroups; a GEMV's spreads N over x and y */
    if (M > GEMV_MAX_M && (M + 63) / 64 > (int64_t)v->feat.max_groups[1]) return false;
    return x->offset + x->size < INT32_MAX && node->size < INT32_MAX;
}

/* n elements of q into out from element off, as f32 or f16 (quant_deq) */
static lm_status dequantize_to(lm_vk_dev *v, const lm_array *q, const lm_vk_mem *out, int64_t off, int64_t n,
                               bool f16)
{
    deq_pc pc = {(uint32_t)(n / 8), (uint32_t)off, 0};
    uint32_t spec[3] = {(uint32_t)(q->dtype - LM_Q4_0), f16, 0};
    lm_vk_arg args[2] = {{lm_vk_mem_of(q), false}, {out, true}};
    /* the f16 copy of Q4_K and Q8_0 takes units of 32 elements an invocation */
    uint64_t items = f16 && (q->dtype == LM_Q4_K || q->dtype == LM_Q8_0) ? pc.chunks / 4 : pc.chunks;
    return lm_vk_dispatch(v, "quant_deq", spec, 3, args, 2, &pc, sizeof pc, lm_vk_groups(v, items, 256), 1, 1);
}

/* the contiguous f32 x (its size a multiple of 8) rounded to f16 into out */
static lm_status to_f16(lm_vk_dev *v, const lm_array *x, const lm_vk_mem *out)
{
    deq_pc pc = {(uint32_t)(x->size / 8), 0, (uint32_t)x->offset};
    uint32_t spec[3] = {0, 1, 1};
    lm_vk_arg args[2] = {{lm_vk_mem_of(x), false}, {out, true}};
    return lm_vk_dispatch(v, "quant_deq", spec, 3, args, 2, &pc, sizeof pc, lm_vk_groups(v, pc.chunks, 256), 1, 1);
}

static lm_status run_dequantize(lm_vk_dev *v, lm_array *node)
{
    return dequantize_to(v, node->inputs[0], lm_vk_mem_of(node), node->offset, node->size, false);
}

/* tensor cores: 16x16x16 f16 fragments (NV) and the 40 KiB of shared
 * memory quant_gemm_coop.glsl stages its tiles in */
static bool coop_ok(const lm_vk_dev *v)
{
    if (!v->feat.coopmat_nv || v->feat.max_shared < 2 * 2 * 128 * 5 * 16) return false;
    for (int i = 0; i < v->feat.ncoop; i++)
        if (v->feat.coop_mnk[i][0] == 16 && v->feat.coop_mnk[i][1] == 16 && v->feat.coop_mnk[i][2] == 16) return true;
    return false;
}

/* does element `off` of a's buffer start on 16 bytes (f32 rows of a multiple of 4)? */
static uint32_t pc_vec(const lm_array *a, int64_t off)
{
    return off % 4 == 0 && lm_vk_mem_of(a)->off % 16 == 0;
}

/* ---- large M: a transient f16 copy of w and Lumen's f16 GEMM ----
 * Lumen's f16 GEMM on tensor cores (matmul_coop.c) after one decode of w
 * into f16 and x's f16 copy reaches 0.84x the f16 GEMM at M = 4096 on an
 * H100 (the copies and their barriers: ~73 us of 0.67 ms) and 0.62-0.72x at
 * 16 to 512 rows (~47 us), where decoding blocks inside a GEMM's inner
 * loop reached 0.24-0.35x from 128 rows (quant_gemm_coop); ggml-cuda does
 * the same for big batches.  Both copies are scratch from the core's buffer cache,
 * counted by lm.memory while they live and released as soon as the GEMM
 * that reads them is recorded (exec.c's barriers order any later user of
 * the memory after it); the persistent weight stays quantized. */

/* the f16 GEMM y [M, N] f32 = a [M, K] f16 b [N, K]^T f16 through the matmul
 * kernels' node contract: they read only the dtypes, inputs and buffers */
typedef struct deq_gemm {
    lm_array a, b, y;
    lm_array *in[2];
    lm_vk_mm_pc pc;
} deq_gemm;

static void deq_gemm_init(deq_gemm *g, lm_buffer *a, lm_buffer *b, lm_buffer *y, int64_t M, int64_t N, int64_t K)
{
    memset(g, 0, sizeof *g);
    g->a.dtype = g->b.dtype = LM_F16;
    g->a.buf = a;
    g->b.buf = b;
    g->in[0] = &g->a;
    g->in[1] = &g->b;
    g->y.dtype = LM_F32;
    g->y.ninputs = 2;
    g->y.inputs = g->in;
    g->y.buf = y;
    g->pc.M = (int32_t)M;
    g->pc.N = (int32_t)N;
    g->pc.K = (int32_t)K;
    g->pc.sam = (int32_t)K;
    g->pc.sak = 1;
    g->pc.sbk = 1;              /* B = w^T: w's rows are B's columns */
    g->pc.sbn = (int32_t)K;
}

/* can the f16 GEMM take this qlinear (tensor cores, 32-bit indices, y at
 * its buffer's start)? */
static bool deq_fits(lm_vk_dev *v, const lm_array *node, int64_t M, int64_t N, int64_t K)
{
    if (node->offset != 0 || M * K >= INT32_MAX || N * K >= INT32_MAX || M * N >= INT32_MAX) return false;
    deq_gemm g;
    deq_gemm_init(&g, NULL, NULL, node->buf, M, N, K);
    return lm_vk_coop_fits(v, &g.y, &g.pc, 1, 1);
}

static lm_status run_deq_gemm(lm_vk_dev *v, lm_array *node, int64_t M, int64_t N, int64_t K)
{
    const lm_array *x = node->inputs[0], *w = node->inputs[1];
    lm_buffer *x16 = lm_buffer_alloc(v->dev, (size_t)(2 * M * K));
    lm_buffer *w16 = x16 ? lm_buffer_alloc(v->dev, (size_t)(2 * N * K)) : NULL;
    lm_status st = w16 ? LM_OK : lm_error_status();
    if (st == LM_OK) st = to_f16(v, x, x16->handle);
    if (st == LM_OK) st = dequantize_to(v, w, w16->handle, 0, N * K, true);
    if (st == LM_OK) {
        deq_gemm g;
        deq_gemm_init(&g, x16, w16, node->buf, M, N, K);
        st = lm_vk_run_matmul_coop(v, &g.y, &g.pc, 1, 1);
    }
    if (x16) lm_buffer_release(x16);
    if (w16) lm_buffer_release(w16);
    return st;
}

/* the GEMV's shape (quant_gemv.glsl): invocations a row of w, rows of w a
 * workgroup, whole Q4_K / Q8_0 units from wide loads or eight elements at
 * a time; LUMEN_VK_QGEMV=<lanes>x<rows>[g] (g: eight at a time) for
 * measurement and tests */
typedef struct gemv_shape { uint32_t lanes, rows; bool fast; } gemv_shape;

static gemv_shape gemv_pick(lm_dtype t)
{
    const char *e = getenv("LUMEN_VK_QGEMV");
    unsigned l = 0, r = 0;
    char g = 0;
    if (e && sscanf(e, "%ux%u%c", &l, &r, &g) >= 2 && l >= 8 && l <= 256 && !(l & (l - 1)) && r >= 1 &&
        l * r <= 256)
        return (gemv_shape){l, r, g != 'g'};
    /* H100 (GB/s of the blocks, 4096^2 and 8192^2): Q4_K in units, 32x8
     * 621 and 752, 128x1 527 and 762, eight at a time 391 and 495; Q8_0
     * in units 670-840, eight at a time 128x1 995 and 1432; Q6_K, Q5_K,
     * Q4_0 best or level at 128x1 eight at a time (657, 405, 555) */
    if (t == LM_Q4_K) return (gemv_shape){32, 8, true};
    return (gemv_shape){128, 1, false};
}

static lm_status run_qlinear(lm_vk_dev *v, lm_array *node)
{
    const lm_array *x = node->inputs[0], *w = node->inputs[1];
    int64_t N = w->shape[0], K = w->shape[1], M = K ? x->size / K : 0;
    if (K == 0) return lm_vk_fill(v, lm_vk_mem_of(node), LM_F32, node->size, 0.0);   /* empty sums */
    uint32_t qt = (uint32_t)(w->dtype - LM_Q4_0), row_bytes = (uint32_t)lm_dtype_nbytes(w->dtype, K);
    lm_vk_arg args[3] = {{lm_vk_mem_of(x), false}, {lm_vk_mem_of(w), false}, {lm_vk_mem_of(node), true}};
    gemm_pc pc = {(uint32_t)M, (uint32_t)N, (uint32_t)K, (uint32_t)x->offset, (uint32_t)node->offset, row_bytes};
    if (M <= GEMV_MAX_M) {
        gemv_shape g = gemv_pick(w->dtype);
        /* one workgroup for g.rows output columns, spread over x and y past the grid's width */
        uint32_t cap = v->feat.max_groups[0] < 65535 ? v->feat.max_groups[0] : 65535;
        int64_t groups = (N + g.rows - 1) / g.rows;
        uint32_t gx = groups < cap ? (uint32_t)groups : cap, gy = (uint32_t)((groups + gx - 1) / gx);
        gemv_pc gv = {(uint32_t)N, (uint32_t)K, (uint32_t)x->offset, (uint32_t)node->offset, row_bytes, gx};
        uint32_t spec[6] = {qt, (uint32_t)M, g.lanes, g.rows, g.fast, g.lanes * g.rows};
        return lm_vk_dispatch(v, "quant_gemv", spec, 6, args, 3, &gv, sizeof gv, gx, gy, 1);
    }
    /* LUMEN_VK_QGEMM=deq|coop|f32|64|128 picks a kernel for measurement
     * and tests (one the device cannot run gives way to the next) */
    const char *e = getenv("LUMEN_VK_QGEMM");
    bool ask_deq = e && !strcmp(e, "deq"), ask_coop = e && !strcmp(e, "coop");
    bool ask_f32 = e && (!strcmp(e, "64") || !strcmp(e, "128") || !strcmp(e, "f32"));
    bool tc = !ask_f32 && deq_fits(v, node, M, N, K);     /* the f16 GEMM is on tensor cores here */
    bool small_q8 = w->dtype == LM_Q8_0 && M < QGEMM_Q8_COOP_BELOW && coop_ok(v);
    if (tc && !ask_coop && (ask_deq || !small_q8)) {
        /* the copies need 2 (M + N) K bytes: where the memory limit or the
         * device refuses them, the kernels below need none */
        lm_status st = run_deq_gemm(v, node, M, N, K);
        if (st != LM_ERR_NOMEM && st != LM_ERR_LIMIT) return st;
        lm_error_clear();
    }
    if (!ask_f32 && (ask_coop || (tc && small_q8)) && coop_ok(v)) {
        uint32_t spec[3] = {qt, pc_vec(x, x->offset), pc_vec(node, node->offset) && N % 4 == 0};
        return lm_vk_dispatch(v, "quant_gemm_coop", spec, 3, args, 3, &pc, sizeof pc, (uint32_t)((N + 127) / 128),
                              (uint32_t)((M + 127) / 128), 1);
    }
    /* f32 arithmetic: 128 x 128 tiles (8 x 8 an invocation, K 16 at a
     * time) once they fill the device (128 of them: about one an SM of an
     * H100); 64 x 64 (4 x 4, K 32 at a time) otherwise. */
    bool big = ask_f32 && strcmp(e, "f32") ? !strcmp(e, "128") : ((M + 127) / 128) * ((N + 127) / 128) >= 128;
    big &= v->feat.max_shared >= 2 * 16 * 132 * 4;
    int64_t tile = big ? 128 : 64;
    return lm_vk_dispatch(v, big ? "quant_gemm_big" : "quant_gemm", &qt, 1, args, 3, &pc, sizeof pc,
                          (uint32_t)((N + tile - 1) / tile), (uint32_t)((M + tile - 1) / tile), 1);
}

lm_status lm_vk_run_quant(lm_vk_dev *v, lm_array *node)
{
    if (!lm_vk_supports_quant(v, node))
        return lm_error_set(LM_ERR_UNSUPPORTED, "vulkan: %s of %s %s is beyond these kernels", lm_op_name(node->op),
                            lm_dtype_name(node->inputs[node->ninputs - 1]->dtype), "(size or layout)");
    lm_status st = node->op == LM_OP_DEQUANTIZE ? run_dequantize(v, node) : run_qlinear(v, node);
    return st == LM_OK ? st : lm_error_prefix("%s", lm_op_name(node->op));
}
