/* tfjs.h - TensorFlow.js layers models (model.json + binary weight shards)
 * as Lumen graphs, and their converted safetensors form.
 *
 * A model.json holds a Keras functional topology ("modelTopology") and a
 * "weightsManifest": groups of little-endian shards, concatenated per group,
 * holding the named weights in order.  lm_tfjs_load parses both (cJSON),
 * checks every weight's name, shape, dtype and byte count against the
 * manifest and the layers, converts the kernels once from TF's HWIO to
 * Lumen's OIHW, and keeps them on the device.  lm_tfjs_forward then builds
 * the whole network as a lazy graph in NCHW for an input of any size.
 *
 * Layers: InputLayer, Conv2D (strides, dilation, groups, "same"/"valid",
 * use_bias, its activation), Activation, ReLU, LeakyReLU, PReLU (per
 * channel), Add, Multiply, Concatenate, UpSampling2D (nearest), and
 * UpscalerJS's MultiplyBeta (x * 0.2, as UpscalerJS ignores its config)
 * and PixelShuffle<N>x (tf.depthToSpace, NHWC channel order).  Anything
 * else, or an option a layer does not support, is LM_ERR_UNSUPPORTED naming
 * the layer and the field; a malformed file is LM_ERR_FORMAT.
 *
 * Ownership: lm_tfjs_load returns a model the caller frees with
 * lm_tfjs_free (which releases its weights).  Arrays passed in are
 * borrowed; lm_tfjs_forward returns a new reference. */
#ifndef LM_TFJS_H
#define LM_TFJS_H

#include <stddef.h>
#include <stdint.h>
#include "array.h"
#include "device.h"
#include "core/io/io.h"

typedef struct lm_tfjs_model lm_tfjs_model;

/* path: a model.json (shards beside it, paths relative to it) or a
 * safetensors file written by lm_tfjs_save.  dev NULL = default device. */
lm_tfjs_model *lm_tfjs_load(const char *path, lm_device *dev);

/* The bytes of one shard named in the manifest (a path relative to the
 * model), or NULL with the error set.  The bytes must stay valid until
 * lm_tfjs_load_mem returns. */
typedef const void *(*lm_tfjs_shard_fn)(void *ctx, const char *path, size_t *size);
/* model.json text in memory; `what` names it in errors. */
lm_tfjs_model *lm_tfjs_load_mem(const char *json, size_t len, const char *what,
                                lm_tfjs_shard_fn shard, void *ctx, lm_device *dev);

void lm_tfjs_free(lm_tfjs_model *m);   /* NULL is fine */

/* x [N, C, H, W] (C = the input layer's channels, any float dtype) in the
 * model's own value range -> the output [N, C', H*s, W*s], lazy. */
lm_array *lm_tfjs_forward(lm_tfjs_model *m, lm_array *x);

/* Casts the weights to dt (f32, f16, bf16, f64) once; lm_tfjs_forward then
 * computes in dt (an input of another dtype is cast to dt and the output
 * back to the input's dtype).  Saving casts nothing: lm_tfjs_save writes the
 * weights as they are. */
lm_status lm_tfjs_set_dtype(lm_tfjs_model *m, lm_dtype dt);
lm_dtype lm_tfjs_dtype(const lm_tfjs_model *m);

/* What the model is: its name ("generator"), the number of layers, the
 * input and output channels, the spatial factor s (output size / input
 * size; 0 when that is not a whole number), and the radius in input pixels of its receptive
 * field (how far one output pixel sees). */
const char *lm_tfjs_name(const lm_tfjs_model *m);
lm_device *lm_tfjs_device(const lm_tfjs_model *m);   /* where its weights live */
int lm_tfjs_layer_count(const lm_tfjs_model *m);
int64_t lm_tfjs_in_channels(const lm_tfjs_model *m);
int64_t lm_tfjs_out_channels(const lm_tfjs_model *m);
int64_t lm_tfjs_scale(const lm_tfjs_model *m);
int64_t lm_tfjs_receptive_radius(const lm_tfjs_model *m);
/* How many layers of each class: "Conv2D:154 Activation:120 ..." (in
 * first-seen order), for tests and inspection. */
const char *lm_tfjs_summary(const lm_tfjs_model *m);
/* String metadata carried by a converted safetensors (NULL if absent). */
const char *lm_tfjs_meta(const lm_tfjs_model *m, const char *key);

/* Writes the converted weights (OIHW, "<layer>/kernel" ..., in the model's
 * dtype: f32 unless lm_tfjs_set_dtype changed it) and
 * the topology (metadata "tfjs.topology") plus nmeta extra pairs. */
lm_status lm_tfjs_save(const lm_tfjs_model *m, const char *path, int nmeta,
                       const lm_kv *meta);

/* ---- upscaling images (models/tfjs_upscale.c) ---- */

/* The folders searched for model packages, in order (models/
 * tfjs_find.c): each entry of $LUMEN_MODELS (colon-separated),
 * $XDG_DATA_HOME/lumen/models (default ~/.local/share/lumen/models),
 * <dir of the executable>/../share/lumen/models (where `make install` puts
 * them), <dir of the executable>/models (build/models when run from build/),
 * and, for lumen.so under another program (a stock lua5.4), <dir of
 * lumen.so>/models, <dir>/../share/lumen/models and
 * <dir>/../../../share/lumen/models.  Never the current folder. */
#define LM_MODEL_DIRS_MAX 16
typedef struct lm_model_dirs {
    int n;
    char dir[LM_MODEL_DIRS_MAX][1024];
} lm_model_dirs;
void lm_tfjs_model_dirs(lm_model_dirs *d);

typedef struct lm_tfjs_found {
    char path[1024];        /* the model.json or converted safetensors */
    double range;           /* the value range it works in: 0..range */
    char range_from[1024];  /* where that came from: the package's definition
                               file, "known package NAME" or "default" */
} lm_tfjs_found;

/* Finds a model: `model` is a package name in the folders above
 * ("esrgan-slim" -> <dir>/esrgan-slim/models/x<scale>/model.json, or
 * models/model.json for a package of one scale), a package folder (a path),
 * or the path of a model.json or converted safetensors.  The range is read
 * from the package's model definition (UpscalerJS's `inputRange` in the JS
 * file package.json exports for "./<scale>x"); when that cannot be read,
 * 255 for esrgan-slim/-medium, 1 for esrgan-thick and anything else, with
 * a warning on stderr.  A converted file's "lumen.range" is read at load
 * (lm_tfjs_meta).  A missing package is LM_ERR_IO naming the folders
 * searched and the packages they hold. */
lm_status lm_tfjs_find(const char *model, int scale, lm_tfjs_found *f);

/* Bytes of the model's weights (for pacing a garbage collector). */
size_t lm_tfjs_nbytes(const lm_tfjs_model *m);

typedef struct lm_upscale_opts {
    int64_t tile;       /* input tile side in pixels; 0 = the whole image at once */
    int64_t overlap;    /* context pixels around each tile; < 0 = default (16) */
    double range;       /* the model's value range (255 or 1); <= 0 = 1 */
    /* called after each tile (done of total); may be NULL */
    void (*progress)(void *ctx, int64_t done, int64_t total);
    void *progress_ctx;
} lm_upscale_opts;
void lm_upscale_opts_init(lm_upscale_opts *o);

/* img [C, H, W] with values 0..1 (any dtype, any device), C = 1 gray, 2
 * gray+alpha, 3 RGB, 4 RGBA -> a new evaluated f32 CPU array [C', H*s,
 * W*s], values 0..1 (not clamped), C' = 3 or 4 (gray becomes RGB).  Tiles
 * of o->tile pixels are run with o->overlap pixels of context on each side
 * (the model's working memory is bounded by the tile); alpha is resized
 * bilinearly.  Needs a whole-number scale and 3 input channels. */
lm_array *lm_tfjs_upscale(lm_tfjs_model *m, lm_array *img, const lm_upscale_opts *o);

#endif
