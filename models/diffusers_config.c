/* diffusers_config.c - bounded JSON and component weights of a diffusers
 * folder (see diffusers_config.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/io/io_internal.h"
#include "diffusers_config.h"
#include "lumen.h"

/* an index.json bound: SDXL's UNet index is ~200 KB */
#define DFS_MAX_INDEX (64u << 20)
/* shards of one component: more than any published checkpoint uses */
#define DFS_MAX_SHARDS 4096

char *lm_dfs_path(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (!p) {
        lm_error_set(LM_ERR_NOMEM, "out of memory");
        return NULL;
    }
    snprintf(p, n, "%s%s%s", dir, (*dir && dir[strlen(dir) - 1] != '/') ? "/" : "", name);
    return p;
}

lm_status lm_dfs_read(const char *path, size_t max, char **data, size_t *size)
{
    *data = NULL;
    *size = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        lm_error_set(LM_ERR_IO, "%s: %s", path, strerror(e));
        errno = e;
        return LM_ERR_IO;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        errno = EINVAL;
        return lm_error_set(LM_ERR_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > max) {
        fclose(f);
        return lm_error_set(LM_ERR_FORMAT, "%s: %lld bytes, more than the %zu allowed", path,
                            (long long)st.st_size, max);
    }
    char *buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        fclose(f);
        return lm_error_set(LM_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t got = fread(buf, 1, (size_t)st.st_size, f);
    fclose(f);
    if (got != (size_t)st.st_size) {
        free(buf);
        return lm_error_set(LM_ERR_IO, "%s: short read", path);
    }
    buf[got] = 0;
    *data = buf;
    *size = got;
    return LM_OK;
}

lm_status lm_dfs_json(const char *path, size_t max, bool optional, cJSON **out)
{
    *out = NULL;
    char *text;
    size_t n;
    lm_status st = lm_dfs_read(path, max, &text, &n);
    if (st != LM_OK) {
        if (optional && st == LM_ERR_IO && errno == ENOENT) {
            lm_error_clear();
            return LM_OK;
        }
        return st;
    }
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, n, &end, false);
    if (!j) {
        long at = end ? (long)(end - text) : -1;
        free(text);
        return lm_error_set(LM_ERR_FORMAT, "%s: not valid JSON (near byte %ld)", path, at);
    }
    free(text);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return lm_error_set(LM_ERR_FORMAT, "%s: expected a JSON object", path);
    }
    *out = j;
    return LM_OK;
}

lm_status lm_dfs_int(const cJSON *o, const char *key, const char *what, bool required,
                     int64_t def, int64_t lo, int64_t hi, int64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        if (required) return lm_error_set(LM_ERR_FORMAT, "%s: %s: missing", what, key);
        *out = def;
        return LM_OK;
    }
    double d = v->valuedouble;
    if (!cJSON_IsNumber(v) || d != floor(d) || d < (double)lo || d > (double)hi)
        return lm_error_set(LM_ERR_FORMAT, "%s: %s: expected an integer in [%lld, %lld]", what,
                            key, (long long)lo, (long long)hi);
    *out = (int64_t)d;
    return LM_OK;
}

lm_status lm_dfs_num(const cJSON *o, const char *key, const char *what, bool required,
                     double def, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        if (required) return lm_error_set(LM_ERR_FORMAT, "%s: %s: missing", what, key);
        *out = def;
        return LM_OK;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return lm_error_set(LM_ERR_FORMAT, "%s: %s: expected a number", what, key);
    *out = v->valuedouble;
    return LM_OK;
}

lm_status lm_dfs_str(const cJSON *o, const char *key, const char *what, bool required,
                     const char *def, const char **out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (v && cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    if (!v || cJSON_IsNull(v)) {
        if (required) return lm_error_set(LM_ERR_FORMAT, "%s: %s: missing", what, key);
        *out = def;
        return LM_OK;
    }
    if (!cJSON_IsString(v))
        return lm_error_set(LM_ERR_FORMAT, "%s: %s: expected a string", what, key);
    *out = v->valuestring;
    return LM_OK;
}

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Moves every tensor of src into dst (names must be new). */
static lm_status set_merge(lm_tensor_set *dst, lm_tensor_set *src, const char *file)
{
    for (int i = 0; i < src->count; i++) {
        if (lm_tensor_set_find(dst, src->names[i]) >= 0)
            return lm_error_set(LM_ERR_FORMAT, "%s: tensor %s is in two shards", file,
                                src->names[i]);
        lm_status st = lm_io_set_add(dst, src->names[i], src->arrays[i]);
        src->arrays[i] = NULL;
        if (st != LM_OK) return st;
    }
    return LM_OK;
}

static lm_status load_index(const char *dir, const char *index, lm_device *dev,
                            lm_tensor_set *out)
{
    cJSON *j;
    lm_status st = lm_dfs_json(index, DFS_MAX_INDEX, false, &j);
    if (st != LM_OK) return st;
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(j, "weight_map");
    if (!cJSON_IsObject(map)) {
        cJSON_Delete(j);
        return lm_error_set(LM_ERR_FORMAT, "%s: weight_map: missing or not an object", index);
    }
    /* the distinct shard names, in first-seen order */
    const char **shards = NULL;
    int nshards = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, map) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/') || !strcmp(e->valuestring, "..")) {
            st = lm_error_set(LM_ERR_FORMAT, "%s: weight_map: %s: expected a file name beside "
                              "the index", index, e->string);
            goto done;
        }
        int k = 0;
        while (k < nshards && strcmp(shards[k], e->valuestring)) k++;
        if (k < nshards) continue;
        if (nshards == DFS_MAX_SHARDS) {
            st = lm_error_set(LM_ERR_FORMAT, "%s: more than %d shards", index, DFS_MAX_SHARDS);
            goto done;
        }
        const char **grown = realloc(shards, sizeof *shards * (size_t)(nshards + 1));
        if (!grown) { st = lm_error_set(LM_ERR_NOMEM, "out of memory"); goto done; }
        shards = grown;
        shards[nshards++] = e->valuestring;
    }
    for (int k = 0; k < nshards && st == LM_OK; k++) {
        char *p = lm_dfs_path(dir, shards[k]);
        if (!p) { st = LM_ERR_NOMEM; break; }
        lm_tensor_set part = {0};
        st = lm_load_file_to(p, dev, &part);
        if (st == LM_OK) {
            /* a tensor the map puts in this shard must be there */
            cJSON_ArrayForEach(e, map) {
                if (strcmp(e->valuestring, shards[k])) continue;
                if (lm_tensor_set_find(&part, e->string) < 0) {
                    st = lm_error_set(LM_ERR_FORMAT, "%s: %s: listed in %s but not in that "
                                      "file", index, e->string, shards[k]);
                    break;
                }
            }
        }
        if (st == LM_OK) st = set_merge(out, &part, p);
        lm_tensor_set_free(&part);
        free(p);
    }
done:
    free(shards);
    cJSON_Delete(j);
    return st;
}

lm_status lm_dfs_load_weights(const char *dir, const char *variant, lm_device *dev,
                              lm_tensor_set *out, char **file)
{
    return lm_dfs_load_weights_stem(dir, "model", variant, dev, out, file);
}

lm_status lm_dfs_load_weights_stem(const char *dir, const char *stem, const char *variant,
                                   lm_device *dev, lm_tensor_set *out, char **file)
{
    memset(out, 0, sizeof *out);
    if (file) *file = NULL;
    const char *tries[2] = {variant ? variant : "", variant ? NULL : "fp16"};
    for (int t = 0; t < 2 && tries[t]; t++) {
        char name[160];
        const char *v = tries[t];
        if (strlen(v) > 32) return lm_error_set(LM_ERR_ARG, "variant %s: too long", v);
        if (strlen(stem) > 64) return lm_error_set(LM_ERR_ARG, "file stem %s: too long", stem);
        snprintf(name, sizeof name, "%s%s%s.safetensors", stem, *v ? "." : "", v);
        char *p = lm_dfs_path(dir, name);
        if (!p) return LM_ERR_NOMEM;
        lm_status st = LM_ERR_IO;
        bool found = false;
        if (file_exists(p)) {
            found = true;
            st = lm_load_file_to(p, dev, out);
        } else {
            free(p);
            snprintf(name, sizeof name, "%s%s%s.safetensors.index.json", stem, *v ? "." : "", v);
            p = lm_dfs_path(dir, name);
            if (!p) return LM_ERR_NOMEM;
            if (file_exists(p)) {
                found = true;
                st = load_index(dir, p, dev, out);
            }
        }
        if (found) {
            if (st != LM_OK) lm_tensor_set_free(out);
            if (file && st == LM_OK) *file = p;
            else free(p);
            return st;
        }
        free(p);
    }
    return lm_error_set(LM_ERR_IO, "%s: no %s%s%s.safetensors (nor its .index.json)%s", dir, stem,
                        variant && *variant ? "." : "", variant ? variant : "",
                        variant ? "" : " and no fp16 variant");
}
