/* test_vk_share.c - a stacked call's kernel choices (issue 36).
 *
 * lm_share_set: the arrays made while it is set carry the number of images
 * a stacked call stacks, and lm_share_set puts the one before back.  Each
 * Vulkan kernel choice that depends on a problem's size
 * (backends/vulkan/choice.h: the conv's split-K parts and halo tile, the
 * f16 GEMM tile and split-K parts of the KHR/NV kernels, the cm2 tile,
 * the D = 512 attention split and the pieces of its two-product path, the
 * long-row and the strided norm choices, the f32 tiles and the plain
 * matmul's paths, the GEMV kernel) makes, for B images stacked
 * (batch 2B, share B, or M counting B images' rows), the choice of one
 * image (batch 2, share 1), at sizes on both sides of each threshold; and
 * without the share some of those sizes choose otherwise, so the sizes do
 * reach the thresholds (the test fails where the share is ignored).  Then
 * on the Vulkan device: an f32 product of 64 entries made under share 32
 * gives, entry for entry, the bytes of the same product made as 2 entries
 * (its tile chosen as theirs; the dispatch still covers all 64 entries:
 * a share that cut the grid fails here.  On lavapipe the two f32 tiles
 * happen to sum alike, so there it does not tell the tiles apart: the
 * tensor-core paths are the H200's, bench/gpu/tools/batch_loop.sh); the
 * same for a Winograd conv of 6 images made under share 3, and the GEMV
 * kernel's rows (matmul_gemv.c).  Pure
 * functions of sizes except the last; skipped without Vulkan. */
#include "testutil.h"
#ifdef LM_HAVE_VULKAN
#include "backends/vulkan/choice.h"
#include "backends/vulkan/vulkan.h"
#include "core/random.h"

static const int shares[] = {2, 3, 4, 8};
#define NSHARES (int)(sizeof shares / sizeof *shares)

static void test_share_scope(void **state)
{
    (void)state;
    assert_int_equal(lm_share_get(), 1);
    int64_t s[2] = {4, 4};
    lm_array *a = lm_zeros(2, s, LM_F32, lm_device_cpu());
    assert_int_equal(lm_share_set(4), 1);
    lm_array *b = lm_binary(LM_OP_ADD, a, a), *v = lm_reshape(b, 1, (int64_t[]){16});
    assert_int_equal(lm_share_set(0), 4);      /* below 1 reads as 1 */
    assert_int_equal(lm_share_get(), 1);
    int was = lm_share_set(3);
    assert_int_equal(lm_share_set(was), 3);
    lm_array *c = lm_binary(LM_OP_ADD, b, b);
    assert_int_equal(lm_array_share(a), 1);
    assert_int_equal(lm_array_share(b), 4);
    assert_int_equal(lm_array_share(v), 4);
    assert_int_equal(lm_array_share(c), 1);
    assert_int_equal(lm_array_share(NULL), 1);
    lm_array_release(a);
    lm_array_release(b);
    lm_array_release(v);
    lm_array_release(c);
}

static void test_share_mb(void **state)
{
    (void)state;
    int64_t m = 4096, b = 8;
    lm_vk_share_mb(&m, &b, 4);                 /* the batch where it divides */
    assert_true(m == 4096 && b == 2);
    m = 4 * 154, b = 1;
    lm_vk_share_mb(&m, &b, 4);                 /* else M */
    assert_true(m == 154 && b == 1);
    m = 77, b = 3;
    lm_vk_share_mb(&m, &b, 4);                 /* neither: as it is */
    assert_true(m == 77 && b == 3);
    m = 77, b = 3;
    lm_vk_share_mb(&m, &b, 1);
    assert_true(m == 77 && b == 3);
}

/* counts sizes where the stacked choice without the share differs from the
 * single one (the thresholds are reached) */
static int moved;

static void test_splitk(void **state)
{
    (void)state;
    unsetenv("LUMEN_VK_CONV_SPLITK");
    int before = moved;
    for (int i = 0; i < NSHARES; i++)
        for (int64_t tiles = 1; tiles <= 300; tiles++)
            for (int64_t steps = 8; steps <= 512; steps *= 2)
                for (int dflt = 0; dflt < 2; dflt++) {
                    int B = shares[i], one = lm_vk_splitk_parts(tiles, 2, 1, steps, 1 << 16, dflt);
                    assert_int_equal(lm_vk_splitk_parts(tiles, 2 * B, B, steps, 1 << 16, dflt), one);
                    moved += lm_vk_splitk_parts(tiles, 2 * B, 1, steps, 1 << 16, dflt) != one;
                }
    /* SD 1.5's 320 channels at 64x64: 2 parts for one image's CFG pair */
    assert_int_equal(lm_vk_splitk_parts(96, 2, 1, 45, 1 << 16, true), 2);
    assert_int_equal(lm_vk_splitk_parts(96, 8, 4, 45, 1 << 16, true), 2);
    assert_int_equal(lm_vk_splitk_parts(96, 8, 1, 45, 1 << 16, true), 1);
    assert_true(moved > before);
}

static void test_halo_tile(void **state)
{
    (void)state;
    int before = moved;
    for (int i = 0; i < NSHARES; i++)
        for (int64_t hw = 8; hw <= 512; hw += 8)
            for (int64_t o = 3; o <= 64; o *= 4) {
                int B = shares[i];
                bool one = lm_vk_halo_tall(hw, hw, 2, o, 1);
                assert_int_equal(lm_vk_halo_tall(hw, hw, 2 * B, o, B), one);
                moved += lm_vk_halo_tall(hw, hw, 2 * B, o, 1) != one;
            }
    /* the UNet's conv_out at 1024x1024 (128x128 latents, 4 channels) */
    assert_false(lm_vk_halo_tall(128, 128, 2, 4, 1));
    assert_false(lm_vk_halo_tall(128, 128, 8, 4, 4));
    assert_true(lm_vk_halo_tall(128, 128, 8, 4, 1));
    assert_true(moved > before);
}

static const int64_t dims[] = {64, 77, 128, 154, 256, 320, 640, 1024, 1280, 2048, 4096};
#define NDIMS (int)(sizeof dims / sizeof *dims)

/* f(m, n, batch, share) for an M x N product: batch 2B share B, and M of B
 * images' rows (batch 1), choose as one image */
static void check_mn(bool (*fb)(int64_t, int64_t, int64_t, int), int (*fi)(int64_t, int64_t, int64_t, int))
{
    int before = moved;
    for (int i = 0; i < NSHARES; i++)
        for (int a = 0; a < NDIMS; a++)
            for (int c = 0; c < NDIMS; c++) {
                int64_t B = shares[i], m = dims[a], n = dims[c];
                int one = fb ? fb(m, n, 2, 1) : fi(m, n, 2, 1);
                assert_int_equal(fb ? fb(m, n, 2 * B, (int)B) : fi(m, n, 2 * B, (int)B), one);
                moved += (fb ? fb(m, n, 2 * B, 1) : fi(m, n, 2 * B, 1)) != one;
                int folded = fb ? fb(2 * m, n, 1, 1) : fi(2 * m, n, 1, 1);
                assert_int_equal(fb ? fb(2 * m * B, n, 1, (int)B) : fi(2 * m * B, n, 1, (int)B), folded);
                moved += (fb ? fb(2 * m * B, n, 1, 1) : fi(2 * m * B, n, 1, 1)) != folded;
            }
    assert_true(moved > before);
}

/* the tensor-core GEMM's choice (lm_vk_coop_choose: tile and split-K
 * parts) at K = coop_k, as one int for check_mn; and the parts of a forced
 * 128x128 tile of depth 64 (lm_vk_coop_parts) */
static int64_t coop_k;

static int coop_choice(int64_t m, int64_t n, int64_t batch, int share)
{
    bool big;
    int parts = lm_vk_coop_choose(m, n, coop_k, batch, share, false, &big);
    return 2 * parts + big;
}

static int coop_parts_k64(int64_t m, int64_t n, int64_t batch, int share)
{
    return lm_vk_coop_parts(m, n, coop_k, batch, share, 128, 128, 64);
}

static void test_coop_tile(void **state)
{
    (void)state;
    static const int64_t ks[] = {320, 768, 1280, 2048, 5120, 10240};
    for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
        coop_k = ks[i];
        check_mn(NULL, coop_choice);
        if (coop_k >= 2048) check_mn(NULL, coop_parts_k64);
        /* at most 16 parts, each of at least 3 of the chosen tile's steps */
        for (int a = 0; a < NDIMS; a++)
            for (int c = 0; c < NDIMS; c++)
                for (int64_t b = 1; b <= 8; b *= 2) {
                    bool big;
                    int p = lm_vk_coop_choose(dims[a], dims[c], coop_k, b, 1, false, &big);
                    int64_t steps = (coop_k + (big ? 31 : 63)) / (big ? 32 : 64);
                    assert_true(p >= 1 && p <= 16 && (p == 1 || steps / p >= 3));
                }
    }
    bool big, big8;
    /* SDXL's cross-attention k/v of the text ([2,77,2048] x [2048,1280]):
     * 20 k64s1 workgroups on 132 SMs took 65 us; split by default, and 4
     * images' stacked call splits as one image's */
    int p = lm_vk_coop_choose(77, 1280, 2048, 2, 1, false, &big);
    assert_true(p > 1);
    assert_int_equal(lm_vk_coop_choose(77, 1280, 2048, 8, 4, false, &big8), p);
    assert_int_equal(big8, big);
    /* the feed-forward's up projection ([2,1024,1280] x [1280,10240]):
     * 1280 workgroups of k64s1 (284.9 us on the H200 against 294.4 on
     * 128x256s1), no split */
    assert_int_equal(lm_vk_coop_choose(1024, 10240, 1280, 2, 1, false, &big), 1);
    assert_false(big);
    /* Z-Image's [4224,3840] x 3840 in bf16 keeps 128x256s1 (k64s1 1.2%
     * slower there), in f16 k64s1 (5% faster in the same call) */
    assert_int_equal(lm_vk_coop_choose(4224, 3840, 3840, 1, 1, true, &big), 1);
    assert_true(big);
    assert_int_equal(lm_vk_coop_choose(4224, 3840, 3840, 1, 1, false, &big), 1);
    assert_false(big);
    /* SD 1.5's [2,77,768] x [768,320]: 12 steps of 64 in 4 parts (17.0 us
     * against 30.6 unsplit and 28.3 on 128x256s1 in 3) */
    assert_int_equal(lm_vk_coop_choose(77, 320, 768, 2, 1, false, &big), 4);
    assert_false(big);
}

static void test_cm2_tile(void **state)
{
    (void)state;
    check_mn(NULL, lm_vk_cm2_first);
}

static void test_f32_tile(void **state)
{
    (void)state;
    check_mn(lm_vk_f32_big, NULL);
}

static bool mm_f32_path(int64_t m, int64_t n, int64_t batch, int share)
{
    return lm_vk_mm_size(m, n, batch, share) >= 128 * 128;
}

static bool mm_plain_big(int64_t m, int64_t n, int64_t batch, int share)
{
    return lm_vk_mm_size(m, n, batch, share) >= 512 * 512;
}

static void test_mm_paths(void **state)
{
    (void)state;
    check_mn(mm_f32_path, NULL);
    check_mn(mm_plain_big, NULL);
}

/* the GEMV kernel (at most 8 rows of one image's part): B images' batch
 * 2B or rows of B images choose as one; the parts read no M, batch or share */
static void test_gemv(void **state)
{
    (void)state;
    int before = moved;
    for (int i = 0; i < NSHARES; i++)
        for (int64_t m = 1; m <= 12; m++)
            for (int bc = 0; bc < 2; bc++) {
                int B = shares[i];
                bool one = lm_vk_gemv_takes(m, 2, bc, 1);
                assert_int_equal(lm_vk_gemv_takes(m, 2 * B, bc, B), one);
                moved += lm_vk_gemv_takes(m, 2 * B, bc, 1) != one;
                bool folded = lm_vk_gemv_takes(m, 1, bc, 1);
                assert_int_equal(lm_vk_gemv_takes(m * B, 1, bc, B), folded);
                moved += lm_vk_gemv_takes(m * B, 1, bc, 1) != folded;
            }
    /* a DiT's modulation linear at CFG batch 2 (M 1, B broadcast), 4 images */
    assert_true(lm_vk_gemv_takes(1, 8, true, 4));
    assert_false(lm_vk_gemv_takes(1, 16, true, 1));
    assert_true(moved > before);
    /* parts: 1x9728x2560 [k][n] splits 10 column groups' K over 64 parts,
     * [n][k] never splits (1x9728x2560 and 1x3840x3840: one part each) */
    assert_int_equal(lm_vk_gemv_part_k(2560, 9728, false), 152);
    assert_int_equal(lm_vk_gemv_part_k(9728, 2560, true), 2560);
    assert_int_equal(lm_vk_gemv_part_k(2560, 9728, true), 9728);
    assert_int_equal(lm_vk_gemv_part_k(3840, 3840, true), 3840);
}

static void test_fa512(void **state)
{
    (void)state;
    int before = moved;
    for (int i = 0; i < NSHARES; i++)
        for (int64_t heads = 1; heads <= 2; heads++)
            for (int64_t lq = 1; lq <= 20000; lq += 61) {
                int B = shares[i], one = lm_vk_fa512_parts(heads, lq, 1);
                assert_int_equal(lm_vk_fa512_parts(B * heads, lq, B), one);
                moved += lm_vk_fa512_parts(B * heads, lq, 1) != one;
            }
    /* the VAE's mid block at 512x512: 64 query blocks split, 4 images too */
    assert_int_equal(lm_vk_fa512_parts(1, 4096, 1), 2);
    assert_int_equal(lm_vk_fa512_parts(4, 4096, 4), 2);
    assert_int_equal(lm_vk_fa512_parts(4, 4096, 1), 1);
    assert_true(moved > before);
}

/* the D > 256 attention on two products: its pieces (every query of one
 * image's batch entries at once, or pieces of rows of one head) */
static void test_attn_gemm(void **state)
{
    (void)state;
    int before = moved;
    const int64_t lks[] = {1, 64, 4096, 9000, 16384, 70000};
    for (int i = 0; i < NSHARES; i++)
        for (int64_t b = 1; b <= 2; b++)
            for (int64_t heads = 1; heads <= 3; heads++)
                for (size_t k = 0; k < sizeof lks / sizeof *lks; k++)
                    for (int64_t lq = 1; lq <= 40000; lq += 997) {
                        int B = shares[i];
                        int64_t one = lm_vk_attn_gemm_rows(b, heads, lq, lks[k], 1);
                        assert_int_equal(lm_vk_attn_gemm_rows(B * b, heads, lq, lks[k], B), one);
                        moved += lm_vk_attn_gemm_rows(B * b, heads, lq, lks[k], 1) != one;
                    }
    /* the SD VAE's mid block at 512x512 (4096 tokens): all at once, 8
     * images stacked too; SDXL's at 1024x1024: pieces of 4096 queries */
    assert_int_equal(lm_vk_attn_gemm_rows(1, 1, 4096, 4096, 1), 0);
    assert_int_equal(lm_vk_attn_gemm_rows(8, 1, 4096, 4096, 8), 0);
    assert_int_equal(lm_vk_attn_gemm_rows(8, 1, 4096, 4096, 1), 4096);
    assert_int_equal(lm_vk_attn_gemm_rows(1, 1, 16384, 16384, 1), 4096);
    assert_true(moved > before);
}

static void test_norms(void **state)
{
    (void)state;
    int before = moved;
    for (int i = 0; i < NSHARES; i++)
        for (int64_t rows = 1; rows <= 700; rows++) {
            int64_t B = shares[i];
            bool one = lm_vk_norm_split_rows(2 * rows, 1);
            assert_int_equal(lm_vk_norm_split_rows(2 * rows * B, (int)B), one);
            moved += lm_vk_norm_split_rows(2 * rows * B, 1) != one;
            for (int64_t len = 8; len <= 32; len += 8) {
                bool pt = lm_vk_norm_per_thread(2 * rows, 4, len, 1);
                assert_int_equal(lm_vk_norm_per_thread(2 * rows * B, 4, len, (int)B), pt);
                moved += lm_vk_norm_per_thread(2 * rows * B, 4, len, 1) != pt;
            }
        }
    assert_true(moved > before);
}

/* the Winograd conv's chunk rows: images of 16x16 (8 tile rows of 8
 * tiles), 64 channels (32 KiB a row), chunks of up to 1-40 rows of tiles
 * over 1-3 images; with the share a stacked call's chunks are one image's */
static void test_wino_rows(void **state)
{
    (void)state;
    int before = moved;
    for (int i = 0; i < NSHARES; i++)
        for (int64_t n = 1; n <= 3; n++)
            for (int64_t rows = 1; rows <= 40; rows++) {
                int64_t B = shares[i], cap = rows * 32768;
                int64_t one = lm_vk_wino_rows(16, 16, n, 64, 1, cap, 65535);
                assert_int_equal(lm_vk_wino_rows(16, 16, n * B, 64, (int)B, cap, 65535), one);
                moved += lm_vk_wino_rows(16, 16, n * B, 64, 1, cap, 65535) != one;
            }
    /* whole images where they fit, else rows; at least one; the grid */
    assert_int_equal(lm_vk_wino_rows(16, 16, 3, 64, 1, 20 * 32768, 65535), 16);
    assert_int_equal(lm_vk_wino_rows(16, 16, 3, 64, 1, 5 * 32768, 65535), 5);
    assert_int_equal(lm_vk_wino_rows(16, 16, 3, 64, 1, 100, 65535), 1);
    assert_int_equal(lm_vk_wino_rows(16, 16, 3, 64, 1, 20 * 32768, 1), 8);
    /* V and M indexed in 32 bits: 2^31 elements of a chunk at most */
    assert_int_equal(lm_vk_wino_rows(2048, 2048, 64, 64, 1, (int64_t)1 << 40, 65535), 1024);
    assert_true(moved > before);
}

/* ---- on the device ---- */

static lm_device *vk;

/* [64, 256, 256] @ [256, 256]: 4 tiles an entry, 256 over 64 entries (the
 * t128 tile), 8 over 2 (128x128).  Under share 32 the 64 entries take the
 * 2 entries' tile: every entry's bytes equal those of the 2-entry product */
static void test_stacked_bytes(void **state)
{
    (void)state;
    unsetenv("LUMEN_VK_MM_F32");
    assert_false(lm_vk_f32_big(256, 256, 2, 1));
    assert_true(lm_vk_f32_big(256, 256, 64, 1));
    int64_t sx[3] = {64, 256, 256}, sw[2] = {256, 256};
    lm_array *x = lm_random_normal(3, sx, 0, 1, LM_F32, lm_random_key(36), vk);
    lm_array *w = lm_random_normal(2, sw, 0, 1, LM_F32, lm_random_key(37), vk);
    assert_int_equal(lm_array_eval(x), LM_OK);
    assert_int_equal(lm_array_eval(w), LM_OK);
    int was = lm_share_set(32);
    lm_array *all = lm_matmul(x, w);
    lm_share_set(was);
    assert_int_equal(lm_array_share(all), 32);
    size_t one = 2 * 256 * 256;
    float *ha = malloc(32 * one * sizeof *ha), *hp = malloc(one * sizeof *hp);
    assert_int_equal(lm_array_read(all, ha, LM_F32), LM_OK);
    for (int64_t k = 0; k < 64; k += 2) {
        lm_array *xs = lm_slice(x, 0, k, k + 2, 1), *p = lm_matmul(xs, w);
        assert_int_equal(lm_array_read(p, hp, LM_F32), LM_OK);
        assert_memory_equal(hp, ha + k * 256 * 256, one * sizeof *hp);
        lm_array_release(xs);
        lm_array_release(p);
    }
    free(ha);
    free(hp);
    lm_array_release(x);
    lm_array_release(w);
    lm_array_release(all);
}

/* the Winograd conv (LUMEN_VK_CONV_F32=winograd) of 6 images made under
 * share 3, in chunks of 3 images where nothing is shared (4 chunks of 2
 * under the share): each pair's bytes are those of the pair's own conv */
static void test_stacked_wino(void **state)
{
    (void)state;
    setenv("LUMEN_VK_CONV_F32", "winograd", 1);
    setenv("LUMEN_VK_CONV_WINO_KB", "90", 1);      /* 15 rows of 6 tiles of 16 channels: 3 images */
    int64_t sx[4] = {6, 8, 10, 12}, sw[4] = {16, 8, 3, 3}, pad[4] = {1, 1, 1, 1};
    lm_array *x = lm_random_normal(4, sx, 0, 1, LM_F32, lm_random_key(38), vk);
    lm_array *w = lm_random_normal(4, sw, 0, 1, LM_F32, lm_random_key(39), vk);
    assert_int_equal(lm_array_eval(x), LM_OK);
    assert_int_equal(lm_array_eval(w), LM_OK);
    int was = lm_share_set(3);
    lm_array *all = lm_conv2d(x, w, NULL, NULL, pad, NULL, 1);
    lm_share_set(was);
    size_t one = 2 * 16 * 10 * 12;
    float *ha = malloc(3 * one * sizeof *ha), *hp = malloc(one * sizeof *hp);
    assert_int_equal(lm_array_read(all, ha, LM_F32), LM_OK);
    for (int64_t k = 0; k < 6; k += 2) {
        lm_array *xs = lm_slice(x, 0, k, k + 2, 1), *p = lm_conv2d(xs, w, NULL, NULL, pad, NULL, 1);
        assert_int_equal(lm_array_read(p, hp, LM_F32), LM_OK);
        assert_memory_equal(hp, ha + k / 2 * one, one * sizeof *hp);
        lm_array_release(xs);
        lm_array_release(p);
    }
    free(ha);
    free(hp);
    lm_array_release(x);
    lm_array_release(w);
    lm_array_release(all);
    unsetenv("LUMEN_VK_CONV_F32");
    unsetenv("LUMEN_VK_CONV_WINO_KB");
}

/* x [12, K] @ w^T (w [37, K], a linear's weight) made under share 4
 * (3 rows an image: the GEMV kernel, 2 split-K parts forced: a linear's
 * weight takes one part by itself) gives, rows for rows,
 * the bytes of each image's [3, K] product; without the share the 12
 * rows would take the GEMM kernel.  K = 1100, then 1104 (whole 16-byte
 * units: A's rows aligned, so A staged in shared memory applies) under
 * the B [n][k] kernel's variants (matmul_gemv.c: lanes, units ahead, A
 * staged, those on LUMEN_VK_GEMV_SHUF=0, and the subgroup-shuffle kernel,
 * the default, at 8 lanes where the subgroups hold them: lavapipe's do) */
static void test_stacked_gemv_bytes(void **state)
{
    (void)state;
    unsetenv("LUMEN_VK_GEMV");
    setenv("LUMEN_VK_GEMV_PARTS", "2", 1);
    assert_true(lm_vk_gemv_takes(12, 1, false, 4));
    assert_false(lm_vk_gemv_takes(12, 1, false, 1));
    const char *variants[][4] = {{NULL, NULL, NULL, "0"}, {"8", "8", "1", "0"}, {"16", "4", "1", "0"},
                                 {"32", "8", "0", "0"}, {"8", "4", "0", NULL}};
    int64_t shuf0 = lm_vulkan_gemv_shuf_count();
    for (int var = 0; var < 5; var++) {
        int64_t kk = var ? 1104 : 1100;
        const char *names[4] = {"LUMEN_VK_GEMV_LANES", "LUMEN_VK_GEMV_UN", "LUMEN_VK_GEMV_ASH", "LUMEN_VK_GEMV_SHUF"};
        assert_int_equal(lm_device_sync(vk), LM_OK);   /* the knobs change with the device idle */
        for (int q = 0; q < 4; q++) {
            if (variants[var][q]) setenv(names[q], variants[var][q], 1);
            else unsetenv(names[q]);
        }
        const lm_dtype dts[] = {LM_F32, LM_BF16};
        for (int t = 0; t < 2; t++) {
            int64_t sx[2] = {12, kk}, sw[2] = {37, kk};
            lm_array *x = lm_random_normal(2, sx, 0, 1, dts[t], lm_random_key(38), vk);
            lm_array *w = lm_random_normal(2, sw, 0, 1, dts[t], lm_random_key(39), vk);
            lm_array *wt = lm_transpose(w, 0, 1);
            assert_int_equal(lm_array_eval(x), LM_OK);
            assert_int_equal(lm_array_eval(w), LM_OK);
            int was = lm_share_set(4);
            lm_array *all = lm_matmul(x, wt);
            lm_share_set(was);
            float ha[12 * 37], hp[3 * 37];
            assert_int_equal(lm_array_read(all, ha, LM_F32), LM_OK);
            for (int64_t k = 0; k < 12; k += 3) {
                lm_array *xs = lm_slice(x, 0, k, k + 3, 1), *p = lm_matmul(xs, wt);
                assert_int_equal(lm_array_read(p, hp, LM_F32), LM_OK);
                assert_memory_equal(hp, ha + k * 37, sizeof hp);
                lm_array_release(xs);
                lm_array_release(p);
            }
            lm_array_release(x);
            lm_array_release(w);
            lm_array_release(wt);
            lm_array_release(all);
        }
    }
    unsetenv("LUMEN_VK_GEMV_LANES");
    unsetenv("LUMEN_VK_GEMV_UN");
    unsetenv("LUMEN_VK_GEMV_ASH");
    unsetenv("LUMEN_VK_GEMV_SHUF");
    unsetenv("LUMEN_VK_GEMV_PARTS");
    /* the shuffle kernel ran (5 products a dtype) where the subgroups hold 8 lanes */
    const char *sg = strstr(vk->info, "subgroup ");
    int64_t shuf = lm_vulkan_gemv_shuf_count() - shuf0;
    printf("  gemv: the shuffle kernel ran %lld products\n", (long long)shuf);
    if (sg && atoi(sg + 9) >= 8) assert_int_equal(shuf, 10);
}

int main(void)
{
    lm_init();
    const char *spec = getenv("LUMEN_DEVICE");
    vk = spec && !strncmp(spec, "vulkan", 6) ? lm_device_find(spec) : NULL;
    for (int i = 0; !vk && i < lm_device_count(); i++)
        if (!strncmp(lm_device_at(i)->spec, "vulkan", 6)) vk = lm_device_at(i);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_share_scope), cmocka_unit_test(test_share_mb), cmocka_unit_test(test_splitk),
        cmocka_unit_test(test_halo_tile),
        cmocka_unit_test(test_coop_tile),   cmocka_unit_test(test_cm2_tile), cmocka_unit_test(test_f32_tile),
        cmocka_unit_test(test_mm_paths),    cmocka_unit_test(test_gemv),
        cmocka_unit_test(test_fa512),       cmocka_unit_test(test_attn_gemm), cmocka_unit_test(test_norms),
        cmocka_unit_test(test_wino_rows),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (!vk) {
        printf("test_vk_share: no Vulkan device (%s); the device test skipped\n", lm_vulkan_status());
        return rc;
    }
    const struct CMUnitTest dev_tests[] = {cmocka_unit_test(test_stacked_bytes), cmocka_unit_test(test_stacked_wino),
                                        cmocka_unit_test(test_stacked_gemv_bytes)};
    return rc | cmocka_run_group_tests(dev_tests, NULL, NULL);
}

#else
int main(void)
{
    printf("test_vk_share: built without Vulkan; skipped\n");
    return LM_TEST_SKIP;
}
#endif
