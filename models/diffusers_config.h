/* diffusers_config.h - reading the pieces of a diffusers / transformers
 * checkpoint folder that every network there shares: bounded JSON files
 * (config.json, tokenizer files) and the weights of one component
 * (model.safetensors, its fp16 variant, or shards listed in
 * *.safetensors.index.json).  Used by the CLIP tokenizer and text encoder;
 * meant for the UNet and VAE loaders too.
 *
 * Errors name the file and the key: "text_encoder/config.json: hidden_size:
 * expected an integer in [1, 65536]". */
#ifndef LM_DIFFUSERS_CONFIG_H
#define LM_DIFFUSERS_CONFIG_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/io/io.h"
#include "device.h"

/* Reads path whole into *data (malloc'd, NUL-terminated beyond *size) when
 * it is a regular file of at most max bytes (opened with lm_io_open_read: a
 * FIFO is refused, never waited on).  A missing file is LM_ERR_IO
 * with errno kept (ENOENT), so callers can treat it as optional. */
lm_status lm_dfs_read(const char *path, size_t max, char **data, size_t *size);
/* Parses a JSON file of at most max bytes (lm_dfs_parse); *out gets the tree (free with
 * cJSON_Delete).  *out is NULL and LM_OK returned when the file is absent
 * and optional. */
lm_status lm_dfs_json(const char *path, size_t max, bool optional, cJSON **out);

/* Parses n bytes of JSON as Python's json does: NaN, Infinity and -Infinity
 * outside strings are numbers (NaN and +-inf in valuedouble, which
 * lm_dfs_num and lm_dfs_int refuse: a reader that takes them says so).
 * NULL with the error set, naming what and the byte, when it is not JSON. */
cJSON *lm_dfs_parse(const char *text, size_t n, const char *what);

/* Typed fields of an object: missing keys give the default (LM_OK) unless
 * required; a present key of the wrong type or out of range is
 * LM_ERR_FORMAT naming what (the file) and the key. */
lm_status lm_dfs_int(const cJSON *o, const char *key, const char *what, bool required,
                     int64_t def, int64_t lo, int64_t hi, int64_t *out);
lm_status lm_dfs_num(const cJSON *o, const char *key, const char *what, bool required,
                     double def, double *out);
lm_status lm_dfs_bool(const cJSON *o, const char *key, const char *what, bool required,
                      bool def, bool *out);
/* A normalization's epsilon (layer_norm_eps, norm_eps, ...): lm_dfs_num's
 * number, also refused when negative, naming what and key. */
lm_status lm_dfs_eps(const cJSON *o, const char *key, const char *what, double def, double *out);
/* The string at key (borrowed from o), or def; a token given as
 * {"content": "..."} (as tokenizer configs write special tokens) counts as
 * its content. */
lm_status lm_dfs_str(const cJSON *o, const char *key, const char *what, bool required,
                     const char *def, const char **out);

/* The weights of one component folder: dir/model[.variant].safetensors, or
 * the shards named by dir/model[.variant].safetensors.index.json (each shard
 * file at most once; every tensor named in the weight map must be in its
 * shard).  variant NULL tries "" and then "fp16".  Tensors go to dev as
 * lm_load_file_to places them.  *file (may be NULL) gets the malloc'd name
 * of the file (or index) read, for error messages. */
lm_status lm_dfs_load_weights(const char *dir, const char *variant, lm_device *dev,
                              lm_tensor_set *out, char **file);
/* The same for another file stem: "diffusion_pytorch_model" (UNet, VAE)
 * reads dir/diffusion_pytorch_model[.variant].safetensors or its
 * .safetensors.index.json.  lm_dfs_load_weights is this with "model". */
lm_status lm_dfs_load_weights_stem(const char *dir, const char *stem, const char *variant,
                                   lm_device *dev, lm_tensor_set *out, char **file);

/* Prepares the n weights' 3x3 convolution filters on the CPU now (a
 * one-tile convolution each: the CPU backend transforms a weight's
 * Winograd filters at its first convolution and keeps them with the
 * weight), so that a model's first call costs no more than the next.
 * Nothing on other devices, nor for weights of another shape. */
lm_status lm_dfs_prime_convs(lm_array *const *w, int n, lm_device *dev);

/* "dir/name" in a malloc'd string (NULL when out of memory, error set). */
char *lm_dfs_path(const char *dir, const char *name);

#endif
