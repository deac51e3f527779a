/* flux2_latents.c - Flux2KleinPipeline's latent helpers (see flux2.h):
 * the position ids of the packed latents and of the text tokens, the 2x2
 * patchify of the VAE's latents and its inverse, packing to tokens and back
 * by the ids, and the batch-norm (de)normalization with the VAE's running
 * statistics.  Each is a reshape / permute / gather or elementwise ops, as
 * pipeline_flux2_klein.py writes them, so results are exact. */
#include <stdlib.h>
#include "flux2.h"
#include "lumen.h"

/* Releases *a and replaces it with r (which may be NULL). */
static lm_array *swap(lm_array **a, lm_array *r)
{
    lm_array_release(*a);
    *a = r;
    return r;
}

void lm_flux2_latent_ids(int64_t h, int64_t w, int32_t *ids)
{
    for (int64_t r = 0; r < h; r++)
        for (int64_t col = 0; col < w; col++) {
            int32_t *id = ids + 4 * (r * w + col);
            id[0] = 0;
            id[1] = (int32_t)r;
            id[2] = (int32_t)col;
            id[3] = 0;
        }
}

void lm_flux2_image_ids(int n, const int64_t *h, const int64_t *w, int64_t scale, int32_t *ids)
{
    for (int i = 0; i < n; i++) {
        for (int64_t r = 0; r < h[i]; r++)
            for (int64_t col = 0; col < w[i]; col++, ids += 4) {
                ids[0] = (int32_t)(scale + scale * i);
                ids[1] = (int32_t)r;
                ids[2] = (int32_t)col;
                ids[3] = 0;
            }
    }
}

void lm_flux2_text_ids(int64_t L, int32_t *ids)
{
    for (int64_t l = 0; l < L; l++) {
        ids[4 * l] = ids[4 * l + 1] = ids[4 * l + 2] = 0;
        ids[4 * l + 3] = (int32_t)l;
    }
}

static bool check_latents(const char *op, const lm_array *lat, bool even)
{
    if (!lat) return false;
    if (lat->ndim == 4 && (!even || (lat->shape[2] % 2 == 0 && lat->shape[3] % 2 == 0))) return true;
    char s[96];
    lm_shape_str(s, sizeof s, lat->ndim, lat->shape);
    lm_error_set(LM_ERR_SHAPE, "flux2 %s: latents %s: expected [B, C, H, W]%s", op, s,
                 even ? " with H and W even" : "");
    return false;
}

lm_array *lm_flux2_patchify(lm_array *lat)
{
    if (!check_latents("patchify", lat, true)) return NULL;
    int64_t B = lat->shape[0], C = lat->shape[1], H = lat->shape[2], W = lat->shape[3];
    int64_t s6[6] = {B, C, H / 2, 2, W / 2, 2}, s4[4] = {B, 4 * C, H / 2, W / 2};
    const int perm[6] = {0, 1, 3, 5, 2, 4};
    lm_array *r = lm_reshape(lat, 6, s6);
    swap(&r, lm_permute(r, perm));
    return swap(&r, lm_reshape(r, 4, s4));
}

lm_array *lm_flux2_unpatchify(lm_array *lat)
{
    if (!check_latents("unpatchify", lat, false)) return NULL;
    int64_t B = lat->shape[0], C = lat->shape[1], H = lat->shape[2], W = lat->shape[3];
    if (C % 4) {
        lm_error_set(LM_ERR_SHAPE, "flux2 unpatchify: %lld channels: expected a multiple of 4", (long long)C);
        return NULL;
    }
    int64_t s6[6] = {B, C / 4, 2, 2, H, W}, s4[4] = {B, C / 4, 2 * H, 2 * W};
    const int perm[6] = {0, 1, 4, 2, 5, 3};
    lm_array *r = lm_reshape(lat, 6, s6);
    swap(&r, lm_permute(r, perm));
    return swap(&r, lm_reshape(r, 4, s4));
}

lm_array *lm_flux2_pack(lm_array *lat)
{
    if (!check_latents("pack", lat, false)) return NULL;
    int64_t s3[3] = {lat->shape[0], lat->shape[1], lat->shape[2] * lat->shape[3]};
    lm_array *r = lm_reshape(lat, 3, s3);
    return swap(&r, lm_transpose(r, 1, 2));
}

lm_array *lm_flux2_unpack(lm_array *x, const int32_t *ids, int ncol, int64_t h, int64_t w)
{
    if (!x) return NULL;
    char s[96];
    lm_shape_str(s, sizeof s, x->ndim, x->shape);
    if (x->ndim != 3 || h < 1 || w < 1 || x->shape[1] != h * w) {
        lm_error_set(LM_ERR_SHAPE, "flux2 unpack: x %s: expected [B, %lld, C] for a %lld x %lld grid", s,
                     (long long)(h * w), (long long)h, (long long)w);
        return NULL;
    }
    if (ids && ncol < 3) {
        lm_error_set(LM_ERR_ARG, "flux2 unpack: ids of %d columns: rows and columns are columns 1 and 2", ncol);
        return NULL;
    }
    int64_t n = h * w, s4[4] = {x->shape[0], h, w, x->shape[2]};
    lm_array *r = NULL;
    if (ids) {
        /* token i goes to cell ids[i].row * w + ids[i].col: gather by the inverse */
        int64_t *inv = malloc(sizeof *inv * (size_t)n);
        if (!inv) {
            lm_error_set(LM_ERR_NOMEM, "out of memory");
            return NULL;
        }
        for (int64_t p = 0; p < n; p++) inv[p] = -1;
        int64_t bad = -1;
        for (int64_t i = 0; i < n && bad < 0; i++) {
            int64_t row = ids[i * ncol + 1], col = ids[i * ncol + 2], cell = row * w + col;
            if (row < 0 || row >= h || col < 0 || col >= w || inv[cell] >= 0) bad = i;
            else inv[cell] = i;
        }
        if (bad >= 0) {
            lm_error_set(LM_ERR_ARG, "flux2 unpack: token %lld's ids (row %d, column %d) are outside the "
                         "%lld x %lld grid or repeat a cell", (long long)bad, ids[bad * ncol + 1],
                         ids[bad * ncol + 2], (long long)h, (long long)w);
            free(inv);
            return NULL;
        }
        lm_array *idx = lm_from_data(1, &n, LM_I64, inv, x->device);
        free(inv);
        r = lm_index_select(x, 1, idx);
        lm_array_release(idx);
    } else {
        r = lm_array_retain(x);
    }
    swap(&r, lm_reshape(r, 4, s4));
    const int perm[4] = {0, 3, 1, 2};
    return swap(&r, lm_permute(r, perm));
}

/* sqrt(var + eps) in var's dtype, then mean and std in x's dtype */
static bool bn_stats(const char *op, lm_array *x, lm_array *mean, lm_array *var, double eps, lm_array **m4,
                     lm_array **s4)
{
    *m4 = *s4 = NULL;
    if (!x || !mean || !var) return false;
    if (x->ndim != 4 || mean->ndim != 1 || var->ndim != 1 || mean->shape[0] != x->shape[1] ||
        var->shape[0] != x->shape[1]) {
        char a[96], b[96], c[96];
        lm_shape_str(a, sizeof a, x->ndim, x->shape);
        lm_shape_str(b, sizeof b, mean->ndim, mean->shape);
        lm_shape_str(c, sizeof c, var->ndim, var->shape);
        lm_error_set(LM_ERR_SHAPE, "flux2 %s: latents %s, mean %s and var %s: expected [B, C, h, w], [C], [C]",
                     op, a, b, c);
        return false;
    }
    int64_t s[4] = {1, x->shape[1], 1, 1};
    lm_array *sd = lm_binary_scalar(LM_OP_ADD, var, eps, false);
    swap(&sd, lm_unary(LM_OP_SQRT, sd));
    swap(&sd, lm_cast(sd, x->dtype));
    *s4 = lm_reshape(sd, 4, s);
    lm_array_release(sd);
    lm_array *mc = lm_cast(mean, x->dtype);
    *m4 = lm_reshape(mc, 4, s);
    lm_array_release(mc);
    return *m4 && *s4;
}

lm_array *lm_flux2_bn_normalize(lm_array *x, lm_array *mean, lm_array *var, double eps)
{
    lm_array *m4, *s4, *r = NULL;
    if (bn_stats("bn_normalize", x, mean, var, eps, &m4, &s4)) {
        r = lm_binary(LM_OP_SUB, x, m4);
        swap(&r, lm_binary(LM_OP_DIV, r, s4));
    }
    lm_array_release(m4);
    lm_array_release(s4);
    return r;
}

lm_array *lm_flux2_bn_denormalize(lm_array *x, lm_array *mean, lm_array *var, double eps)
{
    lm_array *m4, *s4, *r = NULL;
    if (bn_stats("bn_denormalize", x, mean, var, eps, &m4, &s4)) {
        r = lm_binary(LM_OP_MUL, x, s4);
        swap(&r, lm_binary(LM_OP_ADD, r, m4));
    }
    lm_array_release(m4);
    lm_array_release(s4);
    return r;
}
