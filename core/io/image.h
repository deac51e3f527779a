/* image.h - images as tensors: contact sheets and difference heat-maps.
 *
 * Images are [H,W] or [C,H,W] ([H,W,C] with LM_LAYOUT_HWC); a batch is
 * [N,C,H,W] ([N,H,W,C]).  Results are new evaluated arrays the caller
 * releases; inputs are borrowed. */
#ifndef LM_IMAGE_H
#define LM_IMAGE_H

#include "array.h"
#include "io.h"

/* torchvision.utils.make_grid: n images of one shape in rows of nrow
 * (<= 0: 8), pad pixels of pad_value around and between them.  The result
 * has the images' dtype and layout ([C,H',W'], or [H',W'] for 2-D input). */
lm_array *lm_image_grid(int n, lm_array *const *images, int nrow, int pad,
                        double pad_value, lm_layout layout);
/* The same for the images of a batch. */
lm_array *lm_image_grid_batch(lm_array *batch, int nrow, int pad, double pad_value,
                              lm_layout layout);

/* An image [C,H,W] of 1-4 channels as [3,H,W] in its dtype: RGB kept, alpha
 * dropped, gray (with or without alpha) repeated over the three, as lumen
 * generate, lumen serve and lm.image.rgb read an init image.  A new
 * (lazy) array, or NULL with the error set (naming the shape); NULL in,
 * NULL out (the error of what made it stands, as the ops pass NULL on). */
lm_array *lm_image_rgb(lm_array *img);

typedef struct lm_diff_stats {
    double max, mean;       /* of the per-pixel error (mean |a-b| over channels) */
    int64_t nan_pixels;     /* pixels where a NaN appears on one side only */
} lm_diff_stats;

/* Writes an RGB heat-map PNG of where a and b (same shape) differ: black is
 * equal, through red and yellow to white at `scale` (<= 0 or NaN: the
 * largest error); magenta marks a NaN on one side only.  stats may be NULL. */
lm_status lm_image_diff(lm_array *a, lm_array *b, const char *path, double scale,
                        lm_layout layout, lm_diff_stats *stats);

#endif
