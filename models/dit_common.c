/* dit_common.c - weights and graph helpers the Qwen3 encoder and the DiTs
 * share (see dit_common.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dit_common.h"
#include "diffusers_config.h"
#include "lumen.h"

lm_status lm_dit_weights_init(lm_dit_weights *w, lm_tensor_set *weights, const char *file,
                              lm_dtype dt, lm_device *dev)
{
    memset(w, 0, sizeof *w);
    w->set = *weights;
    memset(weights, 0, sizeof *weights);
    w->file = file ? file : "weights";
    w->dt = dt;
    w->used = calloc((size_t)w->set.count + 1, sizeof *w->used);
    if (!w->used) return lm_error_set(LM_ERR_NOMEM, "%s: out of memory", w->file);
    return lm_tensor_set_place(&w->set, dev ? dev : lm_device_default());
}

void lm_dit_weights_free(lm_dit_weights *w)
{
    if (!w) return;
    lm_tensor_set_free(&w->set);
    free(w->used);
    memset(w, 0, sizeof *w);
}

int lm_dit_weights_find(const lm_dit_weights *w, const char *key)
{
    if (w->prefix && *w->prefix) {
        char buf[512];
        snprintf(buf, sizeof buf, "%s%s", w->prefix, key);
        int i = lm_tensor_set_find(&w->set, buf);
        if (i >= 0) return i;
    }
    return lm_tensor_set_find(&w->set, key);
}

lm_status lm_dit_take(lm_dit_weights *w, const char *key, int nd, const int64_t *shape,
                      lm_array **out)
{
    /* embeddings are gathered, so only a linear weight may stay quantized */
    return lm_dit_take_as(w, key, nd, shape, !strstr(key, "embed"), out);
}

lm_status lm_dit_take_as(lm_dit_weights *w, const char *key, int nd, const int64_t *shape, bool linear,
                         lm_array **out)
{
    *out = NULL;
    int i = lm_dit_weights_find(w, key);
    char want[96], got[96];
    lm_shape_str(want, sizeof want, nd, shape);
    if (i < 0)
        return lm_error_set(LM_ERR_FORMAT, "%s: missing weight %s%s %s", w->file,
                            w->prefix ? w->prefix : "", key, want);
    lm_array *a = w->set.arrays[i];
    bool same = a->ndim == nd;
    for (int d = 0; same && d < nd; d++) same = a->shape[d] == shape[d];
    if (!same) {
        lm_shape_str(got, sizeof got, a->ndim, a->shape);
        return lm_error_set(LM_ERR_SHAPE, "%s: %s has shape %s, the config needs %s", w->file,
                            w->set.names[i], got, want);
    }
    if (w->used[i])
        return lm_error_set(LM_ERR_FORMAT, "%s: %s is claimed twice", w->file, w->set.names[i]);
    bool quant = lm_dtype_is_quant(a->dtype) && nd == 2 && linear;
    if (!lm_dtype_is_float(a->dtype) && !quant)
        return lm_error_set(LM_ERR_DTYPE, "%s: %s is %s, expected a float dtype%s", w->file,
                            w->set.names[i], lm_dtype_name(a->dtype), lm_dtype_is_quant(a->dtype) ?
                            " (a quantized one only for a linear weight)" : "");
    w->used[i] = true;
    lm_array *c = a->dtype == w->dt || quant ? lm_array_retain(a) : lm_cast(a, w->dt);
    if (!c || lm_array_eval(c) != LM_OK) {
        lm_array_release(c);
        return lm_error_prefix("%s: %s", w->file, w->set.names[i]);
    }
    lm_array_keep(c);
    lm_array_release(c);   /* the keep holds it */
    *out = c;
    lm_dit_slots *r = w->record;
    if (r && r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 64;
        lm_dit_slot *g = realloc(r->s, sizeof *g * (size_t)cap);
        if (!g) return lm_error_set(LM_ERR_NOMEM, "out of memory");
        r->s = g;
        r->cap = cap;
    }
    if (r) {
        if (!(r->s[r->n].name = strdup(key))) return lm_error_set(LM_ERR_NOMEM, "out of memory");
        r->s[r->n].extra = NULL;
        r->s[r->n++].slot = out;
    }
    return LM_OK;
}

void lm_dit_slots_free(lm_dit_slots *s)
{
    if (!s) return;
    for (int i = 0; i < s->n; i++) free(s->s[i].name);
    free(s->s);
    memset(s, 0, sizeof *s);
}

lm_status lm_dit_take_list(lm_dit_weights *w, const char *prefix, const lm_dit_want *want, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        if (!want[k].on) continue;
        char key[256];
        if (snprintf(key, sizeof key, "%s%s", prefix ? prefix : "", want[k].name) >= (int)sizeof key)
            return lm_error_set(LM_ERR_ARG, "%s: weight name %s%s is too long", w->file, prefix ? prefix : "",
                                want[k].name);
        lm_status st = lm_dit_take_as(w, key, want[k].nd, want[k].shape, true, want[k].dst);
        if (st != LM_OK) return st;
    }
    return LM_OK;
}

void lm_dit_weights_skip(lm_dit_weights *w, const char *key)
{
    int i = lm_tensor_set_find(&w->set, key);
    if (i >= 0) w->used[i] = true;
}

lm_status lm_dit_weights_finish(const lm_dit_weights *w, const char *context)
{
    for (int i = 0; i < w->set.count; i++) {
        if (w->used[i]) continue;
        char sh[96];
        lm_shape_str(sh, sizeof sh, w->set.arrays[i]->ndim, w->set.arrays[i]->shape);
        return lm_error_set(LM_ERR_FORMAT, "%s: unexpected weight %s %s%s%s%s", w->file,
                            w->set.names[i], sh, context ? " (" : "", context ? context : "",
                            context ? ")" : "");
    }
    return LM_OK;
}

void lm_dit_drop(lm_array **a)
{
    if (*a) lm_array_unkeep(*a);
    *a = NULL;
}

/* prefixes the error with the component's name (and the folder) unless it
 * starts with the name's first word already */
static void name_error(const lm_dit_component *c, const char *dir)
{
    if (!strncmp(lm_error_message(), c->what, strcspn(c->what, " "))) return;
    if (dir) lm_error_prefix("%s %s", c->what, dir);
    else lm_error_prefix("%s", c->what);
}

/* config and weights checked, dt checked, Lumen initialized, the weights
 * given to dev (*weights left empty), then c->build */
static void *build(const lm_dit_component *c, const cJSON *config, const char *cfg_name,
                   lm_tensor_set *weights, const char *file, lm_dtype dt, lm_device *dev)
{
    void *m = NULL;
    lm_dit_weights w = {0};
    lm_status st = LM_OK;
    if (!config || !weights)
        st = lm_error_set(LM_ERR_ARG, "%s %s: no config or no weights", c->what, file ? file : "weights");
    if (st == LM_OK && dt != LM_F32 && dt != LM_F16 && dt != LM_BF16 && !(c->f64 && dt == LM_F64))
        st = lm_error_set(LM_ERR_DTYPE, "%s %s: compute dtype %s (f32, f16, bf16%s)", c->what,
                          file ? file : "weights", lm_dtype_name(dt), c->f64 ? ", f64" : "");
    if (st == LM_OK) st = lm_init();
    if (st == LM_OK && !dev) dev = lm_device_default();
    if (st == LM_OK) st = lm_dit_weights_init(&w, weights, file, dt, dev);
    if (st == LM_OK) m = c->build(config, cfg_name, &w, dt, dev);
    lm_dit_weights_free(&w);
    lm_tensor_set_free(weights);
    return m;
}

void *lm_dit_load_dir(const lm_dit_component *c, const char *dir, const char *variant, lm_dtype dt,
                      lm_device *dev)
{
    char *path = lm_dfs_path(dir, "config.json");
    if (!path) return NULL;
    cJSON *j = NULL;
    lm_tensor_set set = {0};
    char *file = NULL;
    void *m = NULL;
    lm_status st = lm_init();
    if (st == LM_OK && !dev) dev = lm_device_default();
    if (st == LM_OK) st = lm_dfs_json(path, c->max_config, false, &j);
    if (st == LM_OK && c->check) st = c->check(j, path);
    if (st == LM_OK)
        st = lm_dfs_load_weights_stem(dir, c->stem ? c->stem : "model", variant, dev, &set, &file);
    if (st == LM_OK) m = build(c, j, path, &set, file, dt, dev);
    if (!m) name_error(c, dir);
    lm_tensor_set_free(&set);
    cJSON_Delete(j);
    free(file);
    free(path);
    return m;
}

void *lm_dit_load_parts(const lm_dit_component *c, const cJSON *config, const char *cfg_name,
                        lm_tensor_set *weights, const char *file, lm_dtype dt, lm_device *dev)
{
    void *m = build(c, config, cfg_name, weights, file, dt, dev);
    if (!m) name_error(c, NULL);
    return m;
}

lm_array *lm_dit_swap(lm_array **a, lm_array *r)
{
    lm_array_release(*a);
    *a = r;
    return r;
}

lm_array *lm_dit_linear(lm_array *x, lm_array *w, lm_array *b)
{
    if (!x || !w || !lm_dtype_is_quant(w->dtype)) return lm_linear(x, w, b);
    lm_array *y = lm_linear(x, w, NULL);
    if (y && y->dtype != x->dtype) lm_dit_swap(&y, lm_cast(y, x->dtype));
    if (y && b) lm_dit_swap(&y, lm_binary(LM_OP_ADD, y, b));
    return y;
}

lm_array *lm_dit_linear_in(const lm_dit_slots *s, lm_array *x, lm_array *w, lm_array *b)
{
    lm_array *y = lm_dit_linear(x, w, b);
    const lm_dit_extra *e = NULL;
    for (int i = 0; s && s->nextra && w && i < s->n && !e; i++)
        if (*s->s[i].slot == w) e = s->s[i].extra;
    for (; e && y; e = e->next) {
        lm_array *t = lm_linear(x, e->a, NULL);
        if (t && e->b) lm_dit_swap(&t, lm_linear(t, e->b, NULL));
        lm_dit_swap(&y, t ? lm_binary(LM_OP_ADD, y, t) : NULL);
        lm_array_release(t);
    }
    return y;
}

void lm_dit_slots_set_extra(lm_dit_slots *s, int i, const lm_dit_extra *e)
{
    if (!s || i < 0 || i >= s->n) return;
    s->nextra += (e != NULL) - (s->s[i].extra != NULL);
    s->s[i].extra = e;
}

lm_array *lm_dit_rms_norm(lm_array *x, lm_array *w, double eps)
{
    return lm_rms_norm(x, 1, w, eps);
}

lm_array *lm_dit_split_heads(lm_array *x, int64_t H, int64_t Dh)
{
    if (!x) return NULL;
    if (x->ndim != 3 || x->shape[2] != H * Dh) {
        char s[96];
        lm_shape_str(s, sizeof s, x->ndim, x->shape);
        lm_error_set(LM_ERR_SHAPE, "split heads: %s is not [B, L, %lld heads * %lld]", s,
                     (long long)H, (long long)Dh);
        return NULL;
    }
    int64_t shape[4] = {x->shape[0], x->shape[1], H, Dh};
    return lm_reshape(x, 4, shape);   /* a view where the strides allow, else a copy */
}

lm_array *lm_dit_merge_heads(lm_array *x)
{
    if (!x) return NULL;
    if (x->ndim != 4) {
        char s[96];
        lm_shape_str(s, sizeof s, x->ndim, x->shape);
        lm_error_set(LM_ERR_SHAPE, "merge heads: %s is not [B, H, L, Dh]", s);
        return NULL;
    }
    int64_t shape[3] = {x->shape[0], x->shape[2], x->shape[1] * x->shape[3]};
    lm_array *t = lm_transpose(x, 1, 2);
    lm_array *c = t ? lm_contiguous(t) : NULL;
    lm_array *r = c ? lm_reshape(c, 3, shape) : NULL;
    lm_array_release(t);
    lm_array_release(c);
    return r;
}

lm_array *lm_dit_rope(lm_array *x, lm_array *angles, lm_dit_layout layout, bool interleaved)
{
    if (!x || !angles) return NULL;
    if (x->ndim != 4 || angles->ndim < 2 || angles->ndim > 3) {
        char s1[96], s2[96];
        lm_shape_str(s1, sizeof s1, x->ndim, x->shape);
        lm_shape_str(s2, sizeof s2, angles->ndim, angles->shape);
        lm_error_set(LM_ERR_SHAPE, "rope: x %s must be [B, H, L, D] or [B, L, H, D] and angles %s "
                     "[L, D/2] or [B, L, D/2]", s1, s2);
        return NULL;
    }
    int64_t dims = 2 * angles->shape[angles->ndim - 1];
    if (layout == LM_DIT_BHLD) {
        /* [L, half] broadcasts as it is; [B, L, half] gets a head axis */
        if (angles->ndim == 2) return lm_rope_angles(x, angles, dims, interleaved);
        int64_t s[4] = {angles->shape[0], 1, angles->shape[1], angles->shape[2]};
        lm_array *a = lm_reshape(angles, 4, s);
        lm_array *r = a ? lm_rope_angles(x, a, dims, interleaved) : NULL;
        lm_array_release(a);
        return r;
    }
    /* [B, L, H, D]: the op rotates along axis -2 by angles broadcast to
     * [..., H, half], so the angles get a head axis of 1 after L */
    int64_t s[4], n = 0;
    for (int d = 0; d < angles->ndim - 1; d++) s[n++] = angles->shape[d];
    s[n++] = 1;
    s[n++] = angles->shape[angles->ndim - 1];
    lm_array *a = lm_reshape(angles, (int)n, s);
    lm_array *r = a ? lm_rope_angles(x, a, dims, interleaved) : NULL;
    lm_array_release(a);
    return r;
}

lm_array *lm_dit_rope_angles(lm_array *pos, int naxes, const int64_t *axes_dims, double theta)
{
    if (!pos) return NULL;
    if (naxes < 1 || naxes > 16 || pos->ndim < 2 || pos->shape[pos->ndim - 1] != naxes) {
        char s[96];
        lm_shape_str(s, sizeof s, pos->ndim, pos->shape);
        lm_error_set(LM_ERR_SHAPE, "rope angles: positions %s must be [..., L, %d]", s, naxes);
        return NULL;
    }
    if (!(theta > 0)) {
        lm_error_set(LM_ERR_ARG, "rope angles: theta must be positive, got %g", theta);
        return NULL;
    }
    for (int a = 0; a < naxes; a++)
        if (axes_dims[a] <= 0 || axes_dims[a] % 2) {
            lm_error_set(LM_ERR_ARG, "rope angles: axis %d has %lld dims; each must be even and "
                         "positive", a, (long long)axes_dims[a]);
            return NULL;
        }
    lm_array *parts[16] = {0}, *pf = lm_cast(pos, LM_F64), *ang = NULL;
    int made = 0;
    for (; pf && made < naxes; made++) {
        int64_t half = axes_dims[made] / 2;
        double *f = malloc(sizeof(double) * (size_t)half);
        if (!f) {
            lm_error_set(LM_ERR_NOMEM, "rope angles: out of host memory");
            break;
        }
        for (int64_t j = 0; j < half; j++) f[j] = pow(theta, -2.0 * (double)j / (double)axes_dims[made]);
        lm_array *fa = lm_from_data(1, &half, LM_F64, f, pos->device);
        free(f);
        lm_array *col = lm_slice(pf, -1, made, made + 1, 1);          /* [..., L, 1] */
        parts[made] = fa && col ? lm_binary(LM_OP_MUL, col, fa) : NULL;   /* [..., L, half] */
        lm_array_release(fa);
        lm_array_release(col);
        if (!parts[made]) break;
    }
    if (made == naxes) ang = naxes == 1 ? lm_array_retain(parts[0]) : lm_concat(naxes, parts, -1);
    for (int a = 0; a < naxes; a++) lm_array_release(parts[a]);
    lm_array_release(pf);
    return ang;
}

lm_array *lm_dit_sinusoid(lm_array *t, int64_t dim, lm_device *dev)
{
    int64_t half = dim / 2, n = t->shape[0];
    float *fr = malloc(sizeof *fr * (size_t)(half + 1));
    if (!fr) {
        lm_error_set(LM_ERR_NOMEM, "timestep embedding: out of memory");
        return NULL;
    }
    /* freqs = exp(-log(10000) * arange(half) / half), in f32 as torch does */
    const float nl = (float)-log(10000.0);
    for (int64_t j = 0; j < half; j++) fr[j] = expf(nl * (float)j / (float)half);
    int64_t fs[2] = {1, half}, cs[2] = {n, 1};
    lm_array *freq = lm_from_data(2, fs, LM_F32, fr, dev);
    free(fr);
    lm_array *tf = freq ? lm_cast(t, LM_F32) : NULL;
    if (tf) lm_dit_swap(&tf, lm_reshape(tf, 2, cs));
    lm_array *arg = tf ? lm_binary(LM_OP_MUL, tf, freq) : NULL;
    lm_array_release(tf);
    lm_array_release(freq);
    lm_array *s = arg ? lm_unary(LM_OP_SIN, arg) : NULL, *co = arg ? lm_unary(LM_OP_COS, arg) : NULL;
    lm_array_release(arg);
    lm_array *parts[2] = {co, s};
    lm_array *e = s && co ? lm_concat(2, parts, 1) : NULL;
    lm_array_release(s);
    lm_array_release(co);
    if (e && dim % 2) {
        int64_t pads[4] = {0, 0, 0, 1};
        lm_dit_swap(&e, lm_pad(e, pads, 0));
    }
    return e;
}
