/* choice.h - the Vulkan kernel choices that depend on a problem's size, as
 * functions of the sizes alone (for tests/test_vk_share.c).
 *
 * A stacked call (lm_share_set: `share` images along the leading axis)
 * chooses from one image's part of the problem: the batch divided by the
 * share where it divides, else M (a product whose rows hold every image's
 * tokens), so 4 images' batch 8 chooses as one image's batch 2 and each
 * output element is summed in the single run's order (a kernel's
 * arithmetic for an element depends on its tile, parts and split, not on
 * the grid).  Only the choice reads the share: the dispatch covers the
 * whole problem.  Share 1 is the size as it is. */
#ifndef LM_VK_CHOICE_H
#define LM_VK_CHOICE_H

#include <stdbool.h>
#include <stdint.h>

/* n / share where that divides, else n (one image's part of a count that
 * stacks the images) */
int64_t lm_vk_share_div(int64_t n, int share);
/* *batch / share where that divides, else *m / share where that does */
void lm_vk_share_mb(int64_t *m, int64_t *batch, int share);
/* (1) nn_conv.c: split-K parts of a conv of tiles output tiles an entry,
 * entries (batch x groups) entries and steps K steps; slab: f32 sums a part */
int lm_vk_splitk_parts(int64_t tiles, int64_t entries, int share, int64_t steps, int64_t slab, bool by_default);
/* nn_conv.c: the Winograd conv's tile rows a chunk, for an OH x OW output
 * over n images, c the larger channel count, cap bytes of scratch a
 * chunk, gx_max the device's grid along x */
int64_t lm_vk_wino_rows(int64_t oh, int64_t ow, int64_t n, int64_t c, int share, int64_t cap, int64_t gx_max);
/* nn_conv.c: the halo conv's 16-row tile (true) or 8-row for an OH x OW
 * output of o channels over n images */
bool lm_vk_halo_tall(int64_t oh, int64_t ow, int64_t n, int64_t o, int share);
/* (2) matmul_coop.c: the tensor-core GEMM's tile, 128x256s1 (*big) or
 * k64s1, and its split-K parts (the return, 1: none) for an M x N x K x
 * batch product (also the bf16 tiles), by the wave-aware estimate there */
int lm_vk_coop_choose(int64_t m, int64_t n, int64_t k, int64_t batch, int share, bool bf16, bool *big);
/* matmul_coop.c: the parts for a bm x bn tile of depth bk by the same
 * estimate (a tile LUMEN_VK_COOP forces) */
int lm_vk_coop_parts(int64_t m, int64_t n, int64_t k, int64_t batch, int share, int bm, int bn, int bk);
/* matmul_cm2.c: the first tile tried, 0 128x256, 1 128x128, 2 64x64 */
int lm_vk_cm2_first(int64_t m, int64_t n, int64_t batch, int share);
/* (3) nn_attn_fa.c: workgroups a query block of D = 512 attention over bh
 * (batch x heads) and lq queries: 2 or 1 */
int lm_vk_fa512_parts(int64_t bh, int64_t lq, int share);
/* nn_attn_fa.c: queries a piece of the D > 256 attention on two products
 * takes, over b batch entries of h heads, lq queries and lk keys: 0 all of
 * them for one image's batch entries at once (their f32 scores fit 256
 * MiB), else that many of one (batch, head): a multiple of 64, or lq */
int64_t lm_vk_attn_gemm_rows(int64_t b, int64_t h, int64_t lq, int64_t lk, int share);
/* (4) nn_norm.c: few enough rows (of a long norm) for the split kernel */
bool lm_vk_norm_split_rows(int64_t rows, int share);
/* nn_norm.c: nn_rows a row an invocation (true) or a workgroup a row */
bool lm_vk_norm_per_thread(int64_t rows, int64_t inner, int64_t len, int share);
/* matmul.c: M x N of one entry, as a stacked call counts it (M / share
 * where the batch does not divide): the f32 tiles from 128 x 128 outputs,
 * the plain kernel's 128-row tiles from 512 x 512 */
int64_t lm_vk_mm_size(int64_t m, int64_t n, int64_t batch, int share);
/* (5) matmul.c: the f32 tile for an M x N x batch product or conv:
 * "t128" / "k8w" (true) or "128x128" */
bool lm_vk_f32_big(int64_t m, int64_t n, int64_t batch, int share);
/* (6) matmul_gemv.c: the GEMV kernel for an M x N x batch product (true)
 * or the GEMM kernels: at most 8 rows in one image's part, M or, where B
 * is the same for every batch entry (b_bcast), batch x M */
bool lm_vk_gemv_takes(int64_t m, int64_t batch, bool b_bcast, int share);
/* matmul_gemv.c: elements of K a part (a multiple of 8; K / that, rounded
 * up, parts) for N columns and K, B stored [n][k] (b_t) or [k][n]: no M,
 * batch or share, so stacked rows sum as single ones */
int64_t lm_vk_gemv_part_k(int64_t n, int64_t k, bool b_t);

#endif
