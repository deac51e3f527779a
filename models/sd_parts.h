/* sd_parts.h - what the single-file reader's parts share (see
 * sd_single.h for what they do together):
 *
 *   sd_single.c        the reader: map the file, sort its keys, run the
 *                      steps below in order, walk the table, check leftovers
 *   sd_parts.c         what they all use: the components' folder names and
 *                      the lookups in the file's sorted keys
 *   sd_detect.c        the family from the keys, each component's prefix
 *   sd_infer.c         the architecture (the *_dims) from a file's probe
 *                      tensors, or from a diffusers folder's weights
 *   sd_keymap.c        the key map: every tensor's original name, diffusers
 *                      name, shape in the file and transform, generated from
 *                      the architecture; and the transforms both ways
 *   sd_config.c        diffusers' config.json / scheduler_config.json from
 *                      the architecture and the family's row, and the
 *                      overrides from a diffusers folder
 *   sd_gguf.c          quantized tensors: kept for QLINEAR or dequantized
 *   sd_single_write.c  the writer's direction (lm_sd_single_from_folder)
 *
 * Names: lm_sds_* (the single-file reader's), internal to models/. */
#ifndef LM_MODELS_SD_PARTS_H
#define LM_MODELS_SD_PARTS_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include "models/family.h"
#include "models/sd_single.h"

#define SDS_MAX_CONFIG (1u << 20)
#define SDS_MAX_LEVELS 8

/* the components, in the order their tables are generated */
enum { C_UNET, C_VAE, C_TE, C_TE2, C_N };
extern const char *const lm_sds_comp_dir[C_N];   /* "unet", "vae", "text_encoder", "text_encoder_2" */

/* how a file tensor becomes the diffusers one */
typedef enum xf_kind {
    XF_COPY,      /* as it is */
    XF_SQUEEZE,   /* [O, I, 1, 1] 1x1 conv -> [O, I] linear (VAE attention) */
    XF_THIRD,     /* part 0/1/2 of a fused [3D, ...] qkv along axis 0 */
    XF_T,         /* [D, P] -> [P, D] (OpenCLIP text_projection) */
} xf_kind;

typedef struct entry {
    char ldm[192], dfs[192];
    int comp, nd, part;
    int64_t shape[4];    /* in the file */
    xf_kind xf;
} entry;

typedef struct table {
    entry *e;
    int n, cap;
} table;

typedef struct reader {
    const char *file;
    lm_tensor_set set;
    int *order;          /* indices of set sorted by name */
    bool *used;
    table t;
    const lm_sd_family_row *row;   /* the family (NULL until told) */
    const char *pfx[C_N];   /* each component's key prefix in the file */
    lm_device *dev;         /* where the weights go */
    int nkept, ndequant;    /* quantized tensors kept as they are / dequantized */
    lm_array **deq;         /* per file tensor: its dequantized f32 copy, once made */
} reader;

/* the architectures the key maps and configs are generated from: probed
 * from a single file's shapes, or read from a diffusers folder's weights */
typedef struct unet_dims {
    int64_t C0, in_ch, out_ch, T, boc[SDS_MAX_LEVELS], ctx, add_in, add_time;
    int depth[SDS_MAX_LEVELS], nlev, L, mid_depth;
    bool linear;
} unet_dims;

typedef struct vae_dims {
    int64_t C0, in_ch, out_ch, z, boc[SDS_MAX_LEVELS];
    int n, L;
    bool quant, post, attn;
} vae_dims;

/* a text encoder's sizes (tm: ViT-L's "text_model." prefix or "") */
typedef struct clip_dims {
    int64_t V, D, F, Pos, proj;
    int Lyr;
    const char *tm;
} clip_dims;

/* ---- the file's keys (sd_parts.c) ---- */
int lm_sds_find(const reader *R, const char *name);   /* the set's index, or -1 */
bool lm_sds_has(const reader *R, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* the shape of a probe tensor the inference needs: absent is an error naming it */
lm_status lm_sds_probe(const reader *R, int nd, int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* how many of fmt's %d (0, 1, ...) find(src, key) knows; fmt is
 * "%s...%d...", its %s filled with a.  One counter for the file's keys and
 * a folder's weights. */
int lm_sds_count(int (*find)(const void *src, const char *key), const void *src, const char *fmt,
                 const char *a);
int lm_sds_find_key(const void *r, const char *key);   /* lm_sds_find for lm_sds_count */

/* ---- the family (sd_detect.c) ---- */
lm_status lm_sds_detect(reader *R);   /* R->row and R->pfx from the keys */
void lm_sds_prefixes(reader *R);      /* R->pfx from R->row */

/* ---- inference (sd_infer.c) ---- */
lm_status lm_sds_unet_dims(reader *R, unet_dims *D);
lm_status lm_sds_vae_dims(reader *R, vae_dims *D);
/* encoder e of the row: CLIP or OpenCLIP by its kind; drop_last as
 * lm_sd_single_opts' sd2_drop_last_layer; *dropped the block dropped or -1 */
lm_status lm_sds_clip_dims(reader *R, int e, int drop_last, clip_dims *c, int *dropped);
/* from a diffusers folder's weights (the writer) */
lm_status lm_sds_unet_dims_dfs(const char *dir, const lm_tensor_set *U, const lm_tensor_set *te2,
                               unet_dims *D);
lm_status lm_sds_vae_dims_dfs(const char *dir, const lm_tensor_set *V, vae_dims *D);
lm_status lm_sds_clip_dims_dfs(const char *dir, const char *comp, const lm_tensor_set *T, bool proj,
                               clip_dims *c);
int lm_sds_dfs_find(const lm_tensor_set *s, const char *name);   /* with or without "text_model." */

/* ---- the key map (sd_keymap.c) ---- */
lm_status lm_sds_unet_keys(reader *R, const unet_dims *D);
lm_status lm_sds_vae_keys(reader *R, const vae_dims *D);
lm_status lm_sds_clip_keys(reader *R, int comp, lm_sd_te_kind kind, const clip_dims *c);
lm_array *lm_sds_transform(const entry *e, lm_array *a);   /* file tensor -> diffusers' */
/* the file tensor of table entry i from a folder's diffusers tensors
 * (the writer), each transform undone */
lm_array *lm_sds_untransform(const reader *R, const char *dir, lm_tensor_set *const *set, bool **used,
                             int i);

/* ---- configs (sd_config.c) ---- */
cJSON *lm_sds_unet_config(const reader *R, const unet_dims *D, bool v_prediction);
cJSON *lm_sds_vae_config(const reader *R, const vae_dims *D);
cJSON *lm_sds_clip_config(lm_sd_te_kind kind, const clip_dims *c);
cJSON *lm_sds_scheduler(const lm_sd_family_row *row, const char *prediction);
/* dir/sub/name's keys over cfg's; a key the shapes decide must agree */
lm_status lm_sds_override(const char *dir, const char *sub, const char *name, cJSON *cfg);

/* ---- quantized tensors (sd_gguf.c) ---- */
lm_array *lm_sds_unquantize(reader *R, const entry *e, int k, bool *keep);

#endif
