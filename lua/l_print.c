/* l_print.c - tostring(t): numpy-style text for tensors.
 *
 * Evaluates the tensor, then reads back only what is printed: past
 * `threshold` elements each long axis keeps `edgeitems` entries at both
 * ends, read through slice views (a corner block at a time), so printing a
 * huge device tensor downloads a few dozen numbers.  One number format is
 * chosen from the printed elements (fixed or scientific, a common count of
 * fraction digits) and every element is right-aligned to a common width.
 * A footer names dtype, shape and device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "l_internal.h"
#include "core/quant.h"

lm_print_opts lm_lua_print_opts = {4, 1000, 3, 80};

void lm_lua_push_brief(lua_State *L, const lm_array *a)
{
    char s[160];
    const char *state = (a->flags & LM_ARRAY_FREED) ? " freed" : lm_array_is_evaluated(a) ? "" : " lazy";
    lua_pushfstring(L, "<tensor %s %s %s%s>", lm_dtype_name(a->dtype),
                    lm_shape_str(s, sizeof s, a->ndim, a->shape),
                    a->device ? a->device->spec : "?", state);
}

/* What is printed: per axis the kept count and whether it is cut. */
typedef struct view_plan {
    int ndim;
    int64_t n[LM_MAX_DIMS];      /* kept entries per axis */
    bool cut[LM_MAX_DIMS];       /* edgeitems ... edgeitems */
    int64_t total;
    int edge;
} view_plan;

static void plan_make(const lm_array *a, view_plan *p)
{
    const lm_print_opts *o = &lm_lua_print_opts;
    bool summarise = a->size > o->threshold;
    p->ndim = a->ndim;
    p->edge = o->edgeitems;
    p->total = 1;
    for (int d = 0; d < a->ndim; d++) {
        p->cut[d] = summarise && a->shape[d] > 2 * o->edgeitems;
        p->n[d] = p->cut[d] ? 2 * o->edgeitems : a->shape[d];
        p->total *= p->n[d];
    }
}

/* Reads corner block `mask` (bit d set = the tail of cut axis d) into out. */
static lm_status read_block(lm_array *a, const view_plan *p, unsigned mask, void *out, lm_dtype as,
                            void *tmp)
{
    lm_array *v = lm_array_retain(a);
    int64_t bshape[LM_MAX_DIMS], off[LM_MAX_DIMS], bsize = 1;
    for (int d = 0; d < p->ndim && v; d++) {
        bshape[d] = p->n[d];
        off[d] = 0;
        if (!p->cut[d]) { bsize *= bshape[d]; continue; }
        bshape[d] = p->edge;
        bsize *= bshape[d];
        int64_t n = a->shape[d];
        int64_t s = (mask >> d) & 1 ? n - p->edge : 0;
        off[d] = (mask >> d) & 1 ? p->edge : 0;
        lm_array *w = lm_slice(v, d, s, s + p->edge, 1);
        lm_array_release(v);
        v = w;
    }
    if (!v) return lm_error_status();
    lm_status st = lm_array_read(v, tmp, as);
    lm_array_release(v);
    if (st != LM_OK) return st;
    /* scatter the block into the compact printed array (8-byte elements) */
    int64_t idx[LM_MAX_DIMS] = {0};
    for (int64_t i = 0; i < bsize; i++) {
        int64_t pos = 0;
        for (int d = 0; d < p->ndim && d < LM_MAX_DIMS; d++) pos = pos * p->n[d] + off[d] + idx[d];
        memcpy((char *)out + 8 * pos, (char *)tmp + 8 * i, 8);
        for (int d = p->ndim - 1; d >= 0; d--) {
            if (++idx[d] < bshape[d]) break;
            idx[d] = 0;
        }
    }
    return LM_OK;
}

static lm_status read_printed(lm_array *a, const view_plan *p, void *out, lm_dtype as, void *tmp)
{
    lm_status st = lm_array_eval(a);
    if (st != LM_OK) return st;
    unsigned ncut = 0;
    for (int d = 0; d < p->ndim && d < LM_MAX_DIMS; d++) ncut += p->cut[d];
    if (ncut == 0) return lm_array_read(a, out, as);
    unsigned cutmask = 0;
    for (int d = 0; d < p->ndim && d < LM_MAX_DIMS; d++) cutmask |= (unsigned)p->cut[d] << d;
    /* every subset of the cut axes is one corner block */
    for (unsigned m = 0;; m = (m - cutmask) & cutmask) {
        if ((st = read_block(a, p, m, out, as, tmp)) != LM_OK) return st;
        if (m == cutmask) break;
    }
    return LM_OK;
}

/* ---- number format ---- */

typedef struct numfmt {
    bool is_float, is_bool, sci;
    int prec;
    int width;
} numfmt;

static int frac_digits(const char *s)
{
    const char *dot = strchr(s, '.');
    if (!dot) return 0;
    const char *end = dot + 1;
    while (*end >= '0' && *end <= '9') end++;
    const char *last = end;
    while (last > dot + 1 && last[-1] == '0') last--;
    return (int)(last - dot - 1);
}

static void fmt_float(char *buf, size_t n, double v, const numfmt *f)
{
    if (isnan(v)) snprintf(buf, n, "nan");
    else if (isinf(v)) snprintf(buf, n, v < 0 ? "-inf" : "inf");
    else if (f->sci) snprintf(buf, n, "%.*e", f->prec, v);
    else if (f->prec == 0) snprintf(buf, n, "%.0f.", v);
    else snprintf(buf, n, "%.*f", f->prec, v);
}

static void fmt_elem(char *buf, size_t n, const void *data, int64_t i, const numfmt *f)
{
    if (f->is_float) fmt_float(buf, n, ((const double *)data)[i], f);
    else if (f->is_bool) snprintf(buf, n, "%s", ((const int64_t *)data)[i] ? "true" : "false");
    else snprintf(buf, n, "%lld", (long long)((const int64_t *)data)[i]);
}

static void choose_format(numfmt *f, const void *data, int64_t count)
{
    const int P = lm_lua_print_opts.precision;
    char buf[64];
    f->prec = 0;
    f->sci = false;
    if (f->is_float) {
        const double *x = data;
        double mx = 0, mn = INFINITY;
        bool integral = true;
        for (int64_t i = 0; i < count; i++) {
            double v = fabs(x[i]);
            if (!isfinite(v)) continue;
            if (v > mx) mx = v;
            if (v > 0 && v < mn) mn = v;
            if (v != floor(v)) integral = false;
        }
        f->sci = mx >= 1e8 || (mn < 1e-4) || (mn < INFINITY && mx / mn > 1e3 && !integral);
        if (mn == INFINITY) f->sci = mx >= 1e8;   /* only zeros (or no finite values) */
        if (f->sci || !integral) {
            for (int64_t i = 0; i < count; i++) {
                if (!isfinite(x[i])) continue;
                if (f->sci) snprintf(buf, sizeof buf, "%.*e", P, x[i]);
                else snprintf(buf, sizeof buf, "%.*f", P, x[i]);
                int fd = frac_digits(buf);
                if (fd > f->prec) f->prec = fd;
            }
        }
    }
    f->width = 0;
    for (int64_t i = 0; i < count; i++) {
        fmt_elem(buf, sizeof buf, data, i, f);
        int w = (int)strlen(buf);
        if (w > f->width) f->width = w;
    }
}

/* ---- layout (numpy's _formatArray) ---- */

typedef struct printer {
    luaL_Buffer *b;
    const view_plan *p;
    const void *data;
    numfmt f;
    int col;           /* column of the output cursor */
} printer;

static void put(printer *pr, const char *s)
{
    luaL_addstring(pr->b, s);
    const char *nl = strrchr(s, '\n');
    pr->col = nl ? (int)strlen(nl + 1) : pr->col + (int)strlen(s);
}

static void put_spaces(printer *pr, int n)
{
    for (int i = 0; i < n; i++) luaL_addchar(pr->b, ' ');
    pr->col += n;
}

static void put_elem(printer *pr, int64_t i)
{
    char buf[64];
    fmt_elem(buf, sizeof buf, pr->data, i, &pr->f);
    put_spaces(pr, pr->f.width - (int)strlen(buf));
    put(pr, buf);
}

/* element separator on the last axis: wraps long rows at linewidth */
static void put_row_sep(printer *pr, int indent, int next_width)
{
    if (pr->col + 2 + next_width + 1 > lm_lua_print_opts.linewidth) {
        put(pr, ",\n");
        put_spaces(pr, indent);
    } else {
        put(pr, ", ");
    }
}

static void put_block_sep(printer *pr, int d)
{
    luaL_addchar(pr->b, ',');
    for (int k = 0; k < pr->p->ndim - d - 1; k++) luaL_addchar(pr->b, '\n');
    pr->col = 0;
    put_spaces(pr, d + 1);
}

static void format_axis(printer *pr, int d, int64_t base)
{
    const view_plan *p = pr->p;
    int64_t stride = 1;
    for (int k = d + 1; k < p->ndim; k++) stride *= p->n[k];
    put(pr, "[");
    for (int64_t i = 0; i < p->n[d]; i++) {
        bool gap = p->cut[d] && i == p->edge;
        if (d == p->ndim - 1) {
            if (i > 0) put_row_sep(pr, d + 1, gap ? 3 : pr->f.width);
            if (gap) {
                put(pr, "...");
                put_row_sep(pr, d + 1, pr->f.width);
            }
            put_elem(pr, base + i);
        } else {
            if (i > 0) put_block_sep(pr, d);
            if (gap) {
                put(pr, "...");
                put_block_sep(pr, d);
            }
            format_axis(pr, d + 1, base + i * stride);
        }
    }
    put(pr, "]");
}

/* A quantized tensor prints its dequantized values under its own footer. */
static void push_format_quant(lua_State *L, lm_array *a)
{
    lm_lua_push_array(L, lm_dequantize(a));
    lm_lua_push_format(L, lm_lua_check_array(L, -1));
    size_t n;
    const char *s = lua_tolstring(L, -1, &n);
    const char *nl = strrchr(s, '\n');
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addlstring(&b, s, nl ? (size_t)(nl - s + 1) : 0);
    lm_lua_push_brief(L, a);
    luaL_addvalue(&b);
    luaL_addstring(&b, " (values dequantized)");
    luaL_pushresult(&b);
    lua_replace(L, -3);
    lua_pop(L, 1);
}

void lm_lua_push_format(lua_State *L, lm_array *a)
{
    if (lm_dtype_is_quant(a->dtype)) {
        push_format_quant(L, a);
        return;
    }
    view_plan p;
    plan_make(a, &p);
    numfmt f = {0};
    f.is_float = lm_dtype_is_float(a->dtype);
    f.is_bool = a->dtype == LM_BOOL;
    lm_dtype as = f.is_float ? LM_F64 : LM_I64;
    size_t bytes = 8 * (size_t)(p.total ? p.total : 1);
    void *data = lua_newuserdatauv(L, bytes, 0);
    void *tmp = lua_newuserdatauv(L, bytes, 0);
    if (read_printed(a, &p, data, as, tmp) != LM_OK) lm_lua_error(L);
    choose_format(&f, data, p.total);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    printer pr = {&b, &p, data, f, 0};
    if (a->ndim == 0) put_elem(&pr, 0);
    else if (p.total == 0) put(&pr, "[]");
    else format_axis(&pr, 0, 0);
    luaL_addchar(&b, '\n');
    lm_lua_push_brief(L, a);
    luaL_addvalue(&b);
    luaL_pushresult(&b);
    lua_replace(L, -3);
    lua_pop(L, 1);
}
