/* diffusers_config.c - bounded JSON and component weights of a diffusers
 * folder (see diffusers_config.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
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
    /* a missing file keeps its errno (ENOENT) for the optional ones; every
     * other refusal (a FIFO, a directory, a device) comes from the one open
     * path of the readers, which never blocks */
    struct stat st;
    if (stat(path, &st) != 0) {
        int e = errno;
        lm_error_set(LM_ERR_IO, "%s: %s", path, strerror(e));
        errno = e;
        return LM_ERR_IO;
    }
    int fd = lm_io_open_read(path);
    if (fd < 0) {
        errno = EINVAL;
        return lm_error_status();
    }
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return lm_error_set(LM_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if ((uint64_t)st.st_size > max) {
        close(fd);
        return lm_error_set(LM_ERR_FORMAT, "%s: %lld bytes, more than the %zu allowed", path,
                            (long long)st.st_size, max);
    }
    char *buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        close(fd);
        return lm_error_set(LM_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t got = 0, want = (size_t)st.st_size;
    while (got < want) {
        ssize_t r = read(fd, buf + got, want - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r < 0 ? errno : 0;
            close(fd);
            free(buf);
            return lm_error_set(LM_ERR_IO, "%s: short read (%zu of %zu bytes)%s%s", path, got,
                                want, e ? ": " : "", e ? strerror(e) : "");
        }
        got += (size_t)r;
    }
    close(fd);
    buf[got] = 0;
    *data = buf;
    *size = got;
    return LM_OK;
}

/* ------------------------------------------------ Python's JSON numbers */

/* Python's json writes float('nan'), float('inf') and -inf as NaN, Infinity
 * and -Infinity (diffusers' DPM++ config has "lambda_min_clipped":
 * -Infinity) and reads them back; cJSON refuses them.  Outside strings,
 * Infinity becomes 1e999999 (the same length; strtod reads it as inf) and
 * NaN a string no string of the file holds, turned into a NaN number after
 * the parse.  Readers of numbers then see inf and NaN themselves: lm_dfs_num
 * and lm_dfs_int refuse them, so nothing becomes a finite value unasked. */

/* the offset of the next tok outside strings at or after from (which must
 * itself be outside a string), or n when there is none */
static size_t next_token(const char *t, size_t n, size_t from, const char *tok)
{
    size_t len = strlen(tok);
    bool in_str = false;
    for (size_t i = from; i < n; i++) {
        char c = t[i];
        if (in_str) {
            if (c == '\\' && i + 1 < n) i++;
            else if (c == '"') in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == tok[0] && n - i >= len && !memcmp(t + i, tok, len)) {
            return i;
        }
    }
    return n;
}

/* how many NaN tokens stand outside strings; the first cap offsets go to
 * nan_at (may be NULL) */
static size_t scan_tokens(const char *t, size_t n, size_t *nan_at, size_t cap)
{
    size_t k = 0;
    for (size_t i = next_token(t, n, 0, "NaN"); i < n; i = next_token(t, n, i + 3, "NaN")) {
        if (nan_at && k < cap) nan_at[k] = i;
        k++;
    }
    return k;
}

static void patch_infinity(char *t, size_t n)
{
    for (size_t i = next_token(t, n, 0, "Infinity"); i < n; i = next_token(t, n, i + 8, "Infinity"))
        memcpy(t + i, "1e999999", 8);
}

/* string values equal to mark become NaN numbers; returns how many */
static size_t nan_strings(cJSON *j, const char *mark, bool convert)
{
    size_t k = 0;
    for (cJSON *c = j ? j->child : NULL; c; c = c->next) {
        if (cJSON_IsString(c) && c->valuestring && !strcmp(c->valuestring, mark)) {
            k++;
            if (convert) {
                cJSON_free(c->valuestring);
                c->valuestring = NULL;
                c->type = cJSON_Number;
                c->valuedouble = NAN;
                c->valueint = 0;
            }
        } else if (cJSON_IsArray(c) || cJSON_IsObject(c)) {
            k += nan_strings(c, mark, convert);
        }
    }
    return k;
}

cJSON *lm_dfs_parse(const char *text, size_t n, const char *what)
{
    size_t nans = scan_tokens(text, n, NULL, 0);
    bool has_inf = false;
    for (size_t i = 0; i + 8 <= n && !has_inf; i++)
        has_inf = text[i] == 'I' && !memcmp(text + i, "Infinity", 8);
    const char *end = NULL;
    if (!nans && !has_inf) {
        cJSON *j = cJSON_ParseWithLengthOpts(text, n, &end, false);
        if (!j)
            lm_error_set(LM_ERR_FORMAT, "%s: not valid JSON (near byte %ld)", what,
                         end ? (long)(end - text) : -1L);
        return j;
    }
    /* a mark no string of the file holds (nor one written with escapes:
     * the count after the parse must be the count of NaN tokens) */
    char mark[40];
    size_t *at = NULL;
    char *t = NULL;
    cJSON *j = NULL;
    for (int attempt = 0; attempt < 64; attempt++) {
        snprintf(mark, sizeof mark, "lumen:NaN:%d", attempt);
        size_t ml = strlen(mark);
        if (memmem(text, n, mark, ml)) continue;
        free(at);
        free(t);
        at = malloc((nans ? nans : 1) * sizeof *at);
        size_t cap = n + nans * (ml + 2) + 1;
        t = malloc(cap);
        if (!at || !t) {
            lm_error_set(LM_ERR_NOMEM, "%s: out of memory", what);
            goto done;
        }
        scan_tokens(text, n, at, nans);
        size_t o = 0, prev = 0;
        for (size_t i = 0; i < nans; i++) {
            memcpy(t + o, text + prev, at[i] - prev);
            o += at[i] - prev;
            t[o++] = '"';
            memcpy(t + o, mark, ml);
            o += ml;
            t[o++] = '"';
            prev = at[i] + 3;
            at[i] = o;      /* now: where the token ends in t */
        }
        memcpy(t + o, text + prev, n - prev);
        o += n - prev;
        t[o] = 0;
        patch_infinity(t, o);
        j = cJSON_ParseWithLengthOpts(t, o, &end, false);
        if (!j) {
            /* the byte of the file, not of the patched text */
            long e = end ? (long)(end - t) : -1L;
            long back = 0;
            for (size_t i = 0; i < nans && e >= 0; i++)
                if ((long)at[i] <= e) back += (long)ml + 2 - 3;
            lm_error_set(LM_ERR_FORMAT, "%s: not valid JSON (near byte %ld)", what,
                         e >= 0 ? e - back : -1L);
            goto done;
        }
        if (nan_strings(j, mark, false) == nans) {
            nan_strings(j, mark, true);
            goto done;
        }
        cJSON_Delete(j);
        j = NULL;
    }
    lm_error_set(LM_ERR_FORMAT, "%s: cannot read its NaN values (every marker is taken)", what);
done:
    free(at);
    free(t);
    return j;
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
    cJSON *j = lm_dfs_parse(text, n, path);
    free(text);
    if (!j) return lm_error_status();
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
    if (!cJSON_IsNumber(v))
        return lm_error_set(LM_ERR_FORMAT, "%s: %s: expected a number", what, key);
    if (!isfinite(v->valuedouble))
        return lm_error_set(LM_ERR_FORMAT, "%s: %s: expected a finite number, not %s", what, key,
                            isnan(v->valuedouble) ? "NaN" : v->valuedouble > 0 ? "Infinity"
                                                                               : "-Infinity");
    *out = v->valuedouble;
    return LM_OK;
}

lm_status lm_dfs_eps(const cJSON *o, const char *key, const char *what, double def, double *out)
{
    lm_status st = lm_dfs_num(o, key, what, false, def, out);
    if (st == LM_OK && *out < 0)
        st = lm_error_set(LM_ERR_FORMAT, "%s: %s: %g: expected a number >= 0 (a normalization's "
                          "epsilon)", what, key, *out);
    return st;
}

lm_status lm_dfs_bool(const cJSON *o, const char *key, const char *what, bool required,
                      bool def, bool *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        if (required) return lm_error_set(LM_ERR_FORMAT, "%s: %s: missing", what, key);
        *out = def;
        return LM_OK;
    }
    if (!cJSON_IsBool(v)) return lm_error_set(LM_ERR_FORMAT, "%s: %s: expected true or false", what, key);
    *out = cJSON_IsTrue(v);
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

lm_status lm_dfs_prime_convs(lm_array *const *w, int n, lm_device *dev)
{
    if (!dev || dev != lm_device_cpu()) return LM_OK;
    lm_status st = LM_OK;
    for (int i = 0; i < n && st == LM_OK; i++) {
        const lm_array *a = w[i];
        /* the CPU's Winograd shapes (backends/cpu/nn_conv.c): 3x3, at least
         * 16 channels in and out, a float dtype other than f64 */
        if (!a || a->ndim != 4 || a->shape[2] != 3 || a->shape[3] != 3 || a->shape[0] < 16 || a->shape[1] < 16 ||
            !lm_dtype_is_float(a->dtype) || a->dtype == LM_F64)
            continue;
        int64_t xs[4] = {1, a->shape[1], 2, 2}, pad[4] = {1, 1, 1, 1};
        lm_array *x = lm_zeros(4, xs, a->dtype, dev);
        lm_array *y = x ? lm_conv2d(x, w[i], NULL, NULL, pad, NULL, 1) : NULL;
        st = y ? lm_array_eval(y) : lm_error_status();
        lm_array_release(y);
        lm_array_release(x);
    }
    return st;
}
