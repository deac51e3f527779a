/* image.c - contact sheets, difference heat-maps (built on the host) and
 * images made RGB. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "image.h"
#include "internal.h"

typedef struct geom { int64_t c, h, w; } geom;

static lm_status geom_of(const char *op, const lm_array *a, lm_layout layout, geom *g)
{
    char sh[96];
    if (a->ndim == 2) { g->c = 1; g->h = a->shape[0]; g->w = a->shape[1]; return LM_OK; }
    if (a->ndim != 3)
        return lm_error_set(LM_ERR_SHAPE, "%s: an image is [H,W], [C,H,W] or [H,W,C], got %s",
                            op, lm_shape_str(sh, sizeof sh, a->ndim, a->shape));
    bool hwc = layout == LM_LAYOUT_HWC;
    g->c = hwc ? a->shape[2] : a->shape[0];
    g->h = hwc ? a->shape[0] : a->shape[1];
    g->w = hwc ? a->shape[1] : a->shape[2];
    return LM_OK;
}

/* Copies image src (geometry g) into the sheet at pixel (y0, x0). */
static void blit(double *sheet, const double *src, const geom *g, int64_t sh, int64_t sw,
                 int64_t y0, int64_t x0, bool hwc)
{
    for (int64_t c = 0; c < g->c; c++)
        for (int64_t y = 0; y < g->h; y++)
            for (int64_t x = 0; x < g->w; x++) {
                int64_t si = hwc ? (y * g->w + x) * g->c + c : (c * g->h + y) * g->w + x;
                int64_t yy = y0 + y, xx = x0 + x;
                int64_t di = hwc ? (yy * sw + xx) * g->c + c : (c * sh + yy) * sw + xx;
                sheet[di] = src[si];
            }
}

lm_array *lm_image_grid(int n, lm_array *const *images, int nrow, int pad, double pad_value,
                        lm_layout layout)
{
    geom g;
    if (n < 1 || !images[0]) {
        lm_error_set(LM_ERR_ARG, "grid: no images");
        return NULL;
    }
    if (pad < 0) { lm_error_set(LM_ERR_ARG, "grid: pad %d is negative", pad); return NULL; }
    if (geom_of("grid", images[0], layout, &g) != LM_OK) return NULL;
    for (int i = 1; i < n; i++)
        if (!images[i] || images[i]->ndim != images[0]->ndim ||
            memcmp(images[i]->shape, images[0]->shape, sizeof(int64_t) * (size_t)images[0]->ndim)) {
            char a[96], b[96];
            lm_error_set(LM_ERR_SHAPE, "grid: image %d has shape %s, image 1 has %s", i + 1,
                         images[i] ? lm_shape_str(a, sizeof a, images[i]->ndim, images[i]->shape) : "?",
                         lm_shape_str(b, sizeof b, images[0]->ndim, images[0]->shape));
            return NULL;
        }
    int64_t xm = nrow > 0 ? (nrow < n ? nrow : n) : (8 < n ? 8 : n);
    int64_t ym = (n + xm - 1) / xm;
    int64_t sh, sw, chw;
    if (!lm_mul64(ym, g.h + pad, &sh) || !lm_add64(sh, pad, &sh) || !lm_mul64(xm, g.w + pad, &sw) ||
        !lm_add64(sw, pad, &sw) || !lm_mul64(sh, sw, &chw) || !lm_mul64(chw, g.c, &chw) ||
        !lm_shape_fits(1, &chw, NULL)) {
        lm_error_set(LM_ERR_SHAPE, "grid: %d images of %lldx%lld with pad %d make a sheet too large", n,
                     (long long)g.h, (long long)g.w, pad);
        return NULL;
    }
    size_t total = (size_t)chw, one = (size_t)(g.c * g.h * g.w);
    double *sheet = malloc(total * sizeof *sheet + 1), *img = malloc(one * sizeof *img + 1);
    lm_dtype dt = images[0]->dtype;
    void *out = malloc(total * lm_dtype_size(dt) + 1);
    lm_array *res = NULL;
    if (!sheet || !img || !out) {
        lm_error_set(LM_ERR_NOMEM, "grid: out of memory for a %lldx%lld sheet", (long long)sw,
                     (long long)sh);
        goto done;
    }
    for (size_t i = 0; i < total; i++) sheet[i] = pad_value;
    for (int i = 0; i < n; i++) {
        if (lm_array_read(images[i], img, LM_F64) != LM_OK) {
            lm_error_prefix("grid");
            goto done;
        }
        blit(sheet, img, &g, sh, sw, pad + (i / xm) * (g.h + pad), pad + (i % xm) * (g.w + pad),
             layout == LM_LAYOUT_HWC && images[0]->ndim == 3);
    }
    lm_convert(out, dt, sheet, LM_F64, total);
    int64_t shape[3];
    if (images[0]->ndim == 2) { shape[0] = sh; shape[1] = sw; }
    else if (layout == LM_LAYOUT_HWC) { shape[0] = sh; shape[1] = sw; shape[2] = g.c; }
    else { shape[0] = g.c; shape[1] = sh; shape[2] = sw; }
    res = lm_from_data(images[0]->ndim, shape, dt, out, NULL);
done:
    free(sheet);
    free(img);
    free(out);
    return res;
}

lm_array *lm_image_grid_batch(lm_array *batch, int nrow, int pad, double pad_value,
                              lm_layout layout)
{
    if (!batch) return NULL;
    if (batch->ndim != 4 && batch->ndim != 3) {
        char sh[96];
        lm_error_set(LM_ERR_SHAPE, "grid: a batch is [N,C,H,W] or [N,H,W,C], got %s",
                     lm_shape_str(sh, sizeof sh, batch->ndim, batch->shape));
        return NULL;
    }
    int64_t n = batch->shape[0];
    if (n < 1 || n > 1 << 20) {
        lm_error_set(LM_ERR_SHAPE, "grid: batch of %lld images", (long long)n);
        return NULL;
    }
    lm_array **imgs = calloc((size_t)n, sizeof *imgs);
    lm_array *res = NULL;
    if (!imgs) { lm_error_set(LM_ERR_NOMEM, "grid: out of memory"); return NULL; }
    int64_t i = 0;
    for (; i < n; i++) {
        lm_array *s = lm_slice(batch, 0, i, i + 1, 1);
        imgs[i] = lm_squeeze(s, 0);
        lm_array_release(s);
        if (!imgs[i]) break;
    }
    if (i == n) res = lm_image_grid((int)n, imgs, nrow, pad, pad_value, layout);
    for (int64_t k = 0; k < n; k++) lm_array_release(imgs[k]);
    free(imgs);
    return res;
}

/* black -> red -> yellow -> white ("hot") */
static void heat(double t, unsigned char *rgb)
{
    double c[3] = {3 * t, 3 * t - 1, 3 * t - 2};
    for (int k = 0; k < 3; k++)
        rgb[k] = (unsigned char)lround(255 * (c[k] < 0 ? 0 : c[k] > 1 ? 1 : c[k]));
}

/* Per-pixel mean |a-b| over channels; NAN where one side only is NaN. */
static void pixel_errors(const double *a, const double *b, const geom *g, bool hwc,
                         double *err, lm_diff_stats *st)
{
    int64_t hw = g->h * g->w;
    double sum = 0;
    int64_t counted = 0;
    for (int64_t p = 0; p < hw; p++) {
        double e = 0;
        bool nan_one = false;
        for (int64_t c = 0; c < g->c; c++) {
            int64_t i = hwc ? p * g->c + c : c * hw + p;
            if (isnan(a[i]) != isnan(b[i])) nan_one = true;
            else if (!isnan(a[i])) e += a[i] == b[i] ? 0 : fabs(a[i] - b[i]);
        }
        e /= (double)g->c;
        if (nan_one) { err[p] = NAN; st->nan_pixels++; continue; }
        err[p] = e;
        if (e > st->max) st->max = e;
        sum += e;
        counted++;
    }
    st->mean = counted ? sum / (double)counted : 0;
}

lm_status lm_image_diff(lm_array *a, lm_array *b, const char *path, double scale,
                        lm_layout layout, lm_diff_stats *stats)
{
    geom g;
    char sa[96], sb[96];
    if (!a || !b) return lm_error_status() ? lm_error_status() : LM_ERR_ARG;
    if (a->ndim != b->ndim || memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim))
        return lm_error_set(LM_ERR_SHAPE, "image.diff: shapes differ: %s vs %s",
                            lm_shape_str(sa, sizeof sa, a->ndim, a->shape),
                            lm_shape_str(sb, sizeof sb, b->ndim, b->shape));
    if (geom_of("image.diff", a, layout, &g) != LM_OK) return lm_error_status();
    size_t n = (size_t)a->size, hw = (size_t)(g.h * g.w);
    double *va = malloc(n * sizeof *va + 1), *vb = malloc(n * sizeof *vb + 1);
    double *err = malloc(hw * sizeof *err + 1);
    unsigned char *rgb = malloc(hw * 3 + 1);
    lm_diff_stats st = {0};
    lm_status rc;
    if (!va || !vb || !err || !rgb) {
        rc = lm_error_set(LM_ERR_NOMEM, "image.diff: out of memory");
    } else if (lm_array_read(a, va, LM_F64) != LM_OK || lm_array_read(b, vb, LM_F64) != LM_OK) {
        rc = lm_error_prefix("image.diff");
    } else {
        pixel_errors(va, vb, &g, layout == LM_LAYOUT_HWC && a->ndim == 3, err, &st);
        double s = scale > 0 ? scale : st.max;
        for (size_t p = 0; p < hw; p++) {
            if (isnan(err[p])) { rgb[3 * p] = 255; rgb[3 * p + 1] = 0; rgb[3 * p + 2] = 255; }
            else heat(s > 0 ? err[p] / s : 0, rgb + 3 * p);
        }
        int64_t shape[3] = {g.h, g.w, 3};
        lm_array *img = lm_from_data(3, shape, LM_U8, rgb, NULL);
        lm_png_opts o;
        lm_png_opts_init(&o);
        o.layout = LM_LAYOUT_HWC;
        rc = img ? lm_png_write(path, img, &o) : lm_error_status();
        lm_array_release(img);
    }
    free(va);
    free(vb);
    free(err);
    free(rgb);
    if (stats) *stats = st;
    return rc;
}

lm_array *lm_image_rgb(lm_array *img)
{
    char sh[96];
    if (!img) return NULL;   /* the error of what made it stands, as the ops pass NULL on */
    if (img->ndim != 3 || img->shape[0] < 1 || img->shape[0] > 4) {
        lm_error_set(LM_ERR_SHAPE, "image.rgb: an image is [C,H,W] with 1-4 channels, got %s",
                     lm_shape_str(sh, sizeof sh, img->ndim, img->shape));
        return NULL;
    }
    lm_array *r;
    if (img->shape[0] >= 3) r = lm_slice(img, 0, 0, 3, 1);
    else {
        lm_array *g = lm_slice(img, 0, 0, 1, 1);
        int64_t shape[3] = {3, img->shape[1], img->shape[2]};
        r = g ? lm_broadcast_to(g, 3, shape) : NULL;
        lm_array_release(g);
    }
    lm_array *c = lm_contiguous(r);
    lm_array_release(r);
    return c;
}
