/* compare.c - comparison reports (see compare.h). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "compare.h"
#include "internal.h"

#define CHUNK (1 << 18)

void lm_compare_opts_init(lm_compare_opts *o)
{
    o->rtol = NAN;
    o->atol = NAN;
    o->equal_nan = true;
    o->check_dtype = false;
    o->peak = NAN;
}

/* torch.testing.assert_close's defaults */
static void default_tols(lm_dtype dt, double *rtol, double *atol)
{
    switch (dt) {
    case LM_F16: *rtol = 1e-3; *atol = 1e-5; break;
    case LM_BF16: *rtol = 1.6e-2; *atol = 1e-5; break;
    case LM_F32: *rtol = 1.3e-6; *atol = 1e-5; break;
    case LM_F64: *rtol = 1e-7; *atol = 1e-7; break;
    default: *rtol = 0; *atol = 0; break;
    }
}

/* Running sums over the element pairs. */
typedef struct acc {
    double sum_abs, sum_sq, sum_a2, sum_b2, dot, max_abs, max_rel, max_b;
    int64_t nfin, n_bad, nan_mis, inf_mis;
    int worst_kind;          /* 0 none, 1 finite, 2 NaN/Inf mismatch */
    int64_t worst;
    double worst_a, worst_b;
} acc;

static void set_worst(acc *s, int kind, int64_t i, double x, double y)
{
    s->worst_kind = kind;
    s->worst = i;
    s->worst_a = x;
    s->worst_b = y;
}

static void accumulate(acc *s, const double *a, const double *b, int64_t n, int64_t base,
                       double rtol, double atol, bool equal_nan)
{
    for (int64_t k = 0; k < n; k++) {
        double x = a[k], y = b[k];
        if (isnan(x) || isnan(y)) {
            if (isnan(x) && isnan(y) && equal_nan) continue;
            s->nan_mis++;
            s->n_bad++;
            if (s->worst_kind < 2) set_worst(s, 2, base + k, x, y);
            continue;
        }
        if (isinf(x) || isinf(y)) {
            if (x == y) continue;
            s->inf_mis++;
            s->n_bad++;
            if (s->worst_kind < 2) set_worst(s, 2, base + k, x, y);
            continue;
        }
        double d = fabs(x - y);
        double rel = y != 0 ? d / fabs(y) : d == 0 ? 0 : INFINITY;
        s->sum_abs += d;
        s->sum_sq += d * d;
        s->sum_a2 += x * x;
        s->sum_b2 += y * y;
        s->dot += x * y;
        s->nfin++;
        if (fabs(y) > s->max_b) s->max_b = fabs(y);
        if (rel > s->max_rel) s->max_rel = rel;
        if (d > s->max_abs || s->worst_kind == 0) {
            if (d > s->max_abs) s->max_abs = d;
            if (s->worst_kind < 2) set_worst(s, 1, base + k, x, y);
        }
        /* an infinite rtol times a zero reference is NaN: within atol, or
         * (y != 0) within atol + rtol * |y|, which an infinite tolerance
         * always is */
        if (!(d <= atol || (y != 0 && d <= atol + rtol * fabs(y)))) s->n_bad++;
    }
}

static void finish(const acc *s, lm_compare_report *r, double peak)
{
    double n = (double)s->nfin;
    r->n_bad = s->n_bad;
    r->frac_bad = r->count ? (double)s->n_bad / (double)r->count : 0;
    r->nan_mismatch = s->nan_mis;
    r->inf_mismatch = s->inf_mis;
    if (s->nfin == 0) {
        r->max_abs = r->max_rel = r->mae = r->rmse = r->nmse = r->cosine = r->psnr = NAN;
    } else {
        double mse = s->sum_sq / n;
        r->max_abs = s->max_abs;
        r->max_rel = s->max_rel;
        r->mae = s->sum_abs / n;
        r->rmse = sqrt(mse);
        r->nmse = s->sum_b2 > 0 ? s->sum_sq / s->sum_b2 : s->sum_sq > 0 ? INFINITY : 0;
        double na = sqrt(s->sum_a2), nb = sqrt(s->sum_b2);
        r->cosine = na == 0 && nb == 0 ? 1 : na == 0 || nb == 0 ? 0 : s->dot / na / nb;
        if (isnan(peak)) peak = r->dtype_b == LM_U8 ? 255 : fmax(1, s->max_b);
        r->psnr = mse == 0 ? INFINITY : 10 * log10(peak * peak / mse);
    }
    r->has_worst = s->worst_kind > 0;
    if (r->has_worst) {
        r->worst_flat = s->worst;
        r->worst_a = s->worst_a;
        r->worst_b = s->worst_b;
        int64_t rem = s->worst;
        for (int d = r->ndim_a - 1; d >= 0; d--) {
            int64_t ext = r->shape_a[d] ? r->shape_a[d] : 1;
            r->worst_index[d] = rem % ext;
            rem /= ext;
        }
    }
}

static lm_status read_chunk(lm_array *flat, int64_t start, int64_t n, double *dst)
{
    if (start == 0 && n == flat->size) return lm_array_read(flat, dst, LM_F64);
    lm_array *s = lm_slice(flat, 0, start, start + n, 1);
    lm_status st = s ? lm_array_read(s, dst, LM_F64) : lm_error_status();
    lm_array_release(s);
    return st;
}

static void report_head(lm_array *a, lm_array *b, lm_compare_report *r)
{
    memset(r, 0, sizeof *r);
    r->dtype_a = a->dtype;
    r->dtype_b = b->dtype;
    r->dtype_equal = a->dtype == b->dtype;
    r->ndim_a = a->ndim;
    r->ndim_b = b->ndim;
    memcpy(r->shape_a, a->shape, sizeof r->shape_a);
    memcpy(r->shape_b, b->shape, sizeof r->shape_b);
    r->shape_equal = a->ndim == b->ndim && !memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim);
}

lm_status lm_compare(lm_array *a, lm_array *b, const lm_compare_opts *o, lm_compare_report *r)
{
    lm_compare_opts def;
    if (!o) { lm_compare_opts_init(&def); o = &def; }
    if (!a || !b) return lm_error_status() ? lm_error_status()
                                           : lm_error_set(LM_ERR_ARG, "compare: missing tensor");
    report_head(a, b, r);
    double rt[2], at[2];
    default_tols(a->dtype, &rt[0], &at[0]);
    default_tols(b->dtype, &rt[1], &at[1]);
    r->rtol = isnan(o->rtol) ? fmax(rt[0], rt[1]) : o->rtol;
    r->atol = isnan(o->atol) ? fmax(at[0], at[1]) : o->atol;
    if (r->rtol < 0 || r->atol < 0)
        return lm_error_set(LM_ERR_ARG, "compare: %s %g: a tolerance is a number >= 0 "
                            "(math.huge accepts everything)", r->rtol < 0 ? "rtol" : "atol",
                            r->rtol < 0 ? r->rtol : r->atol);
    if (!r->shape_equal) {
        r->max_abs = r->max_rel = r->mae = r->rmse = r->nmse = r->cosine = r->psnr = NAN;
        return LM_OK;
    }
    lm_array *in[2] = {a, b};
    if (lm_eval(in, 2) != LM_OK) return lm_error_prefix("compare");
    r->count = a->size;
    int64_t flat_shape[1] = {a->size};
    lm_array *fa = lm_reshape(a, 1, flat_shape), *fb = lm_reshape(b, 1, flat_shape);
    double *ba = malloc(sizeof(double) * CHUNK), *bb = malloc(sizeof(double) * CHUNK);
    lm_status st = fa && fb ? LM_OK : lm_error_status();
    if (st == LM_OK && (!ba || !bb)) st = lm_error_set(LM_ERR_NOMEM, "compare: out of memory");
    acc s = {0};
    for (int64_t i = 0; st == LM_OK && i < a->size; i += CHUNK) {
        int64_t n = a->size - i < CHUNK ? a->size - i : CHUNK;
        st = read_chunk(fa, i, n, ba);
        if (st == LM_OK) st = read_chunk(fb, i, n, bb);
        if (st == LM_OK) accumulate(&s, ba, bb, n, i, r->rtol, r->atol, o->equal_nan);
    }
    free(ba);
    free(bb);
    lm_array_release(fa);
    lm_array_release(fb);
    if (st != LM_OK) return lm_error_prefix("compare");
    finish(&s, r, o->peak);
    r->ok = s.n_bad == 0 && (!o->check_dtype || r->dtype_equal);
    return LM_OK;
}

lm_status lm_allclose(lm_array *a, lm_array *b, double rtol, double atol, bool equal_nan,
                      bool *out)
{
    *out = false;
    if (!a || !b) return lm_error_status() ? lm_error_status()
                                           : lm_error_set(LM_ERR_ARG, "allclose: missing tensor");
    int nd;
    int64_t shape[LM_MAX_DIMS];
    if (lm_broadcast_shapes("allclose", a->ndim, a->shape, b->ndim, b->shape, &nd, shape) != LM_OK)
        return lm_error_status();
    lm_array *x = lm_broadcast_to(a, nd, shape), *y = lm_broadcast_to(b, nd, shape);
    lm_compare_opts o;
    lm_compare_opts_init(&o);
    o.rtol = rtol;
    o.atol = atol;
    o.equal_nan = equal_nan;
    lm_compare_report r;
    lm_status st = x && y ? lm_compare(x, y, &o, &r) : lm_error_status();
    lm_array_release(x);
    lm_array_release(y);
    if (st == LM_OK) *out = r.ok;
    return st;
}

void lm_str_append(char *buf, size_t *l, size_t cap, const char *fmt, ...)
{
    if (*l + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *l, cap - *l, fmt, ap);
    va_end(ap);
    if (n > 0) *l = *l + (size_t)n < cap ? *l + (size_t)n : cap - 1;
}

/* ---- formatting ---- */

static const char *shape_of(char *buf, size_t n, int ndim, const int64_t *shape)
{
    return lm_shape_str(buf, n, ndim, shape);
}

void lm_compare_worst_str(const lm_compare_report *r, int base, char *buf, size_t n)
{
    size_t l = 0;
    lm_str_append(buf, &l, n, "[");
    for (int d = 0; d < r->ndim_a; d++)
        lm_str_append(buf, &l, n, d ? ",%lld" : "%lld", (long long)(r->worst_index[d] + base));
    lm_str_append(buf, &l, n, "]");
}

void lm_compare_format(const lm_compare_report *r, int index_base, char *buf, size_t n)
{
    char sa[96], sb[96], idx[128];
    shape_of(sa, sizeof sa, r->ndim_a, r->shape_a);
    shape_of(sb, sizeof sb, r->ndim_b, r->shape_b);
    size_t l = 0;
#define OUT(...) lm_str_append(buf, &l, n, __VA_ARGS__)
    OUT("compare: %s\n", r->ok ? "ok" : "MISMATCH");
    if (!r->shape_equal) {
        OUT("  shape    %s %s vs %s %s (differ)\n", sa, lm_dtype_name(r->dtype_a), sb,
            lm_dtype_name(r->dtype_b));
        return;
    }
    OUT("  shape    %s  dtype %s vs %s%s  %lld elements\n", sa, lm_dtype_name(r->dtype_a),
        lm_dtype_name(r->dtype_b), r->dtype_equal ? "" : " (differ)", (long long)r->count);
    OUT("  tol      rtol %.3g  atol %.3g\n", r->rtol, r->atol);
    OUT("  outside  %lld (%.4g%%)  nan mismatch %lld  inf mismatch %lld\n", (long long)r->n_bad,
        100 * r->frac_bad, (long long)r->nan_mismatch, (long long)r->inf_mismatch);
    OUT("  max abs  %-11.4g max rel %-11.4g mae %-11.4g rmse %.4g\n", r->max_abs, r->max_rel,
        r->mae, r->rmse);
    OUT("  nmse     %-11.4g cosine  %-11.8g psnr %.4g dB\n", r->nmse, r->cosine, r->psnr);
    if (r->has_worst) {
        lm_compare_worst_str(r, index_base, idx, sizeof idx);
        OUT("  worst    %s: %.9g vs %.9g\n", idx, r->worst_a, r->worst_b);
    }
#undef OUT
    if (l > 0 && buf[l - 1] == '\n') buf[l - 1] = 0;
}

void lm_compare_row_header(char *buf, size_t n)
{
    snprintf(buf, n, "%-32s %-16s %-9s %-10s %-10s %-10s %-8s %s", "name", "shape", "dtype",
             "max_abs", "max_rel", "cosine", "outside", "status");
}

void lm_compare_row(const char *name, const lm_compare_report *r, char *buf, size_t n)
{
    char sh[96], dt[24];
    shape_of(sh, sizeof sh, r->ndim_a, r->shape_a);
    if (!r->shape_equal) {
        char sb[96];
        snprintf(buf, n, "%-32s %s vs %s  MISMATCH (shape)", name, sh,
                 shape_of(sb, sizeof sb, r->ndim_b, r->shape_b));
        return;
    }
    if (r->dtype_equal) snprintf(dt, sizeof dt, "%s", lm_dtype_name(r->dtype_a));
    else snprintf(dt, sizeof dt, "%s/%s", lm_dtype_name(r->dtype_a), lm_dtype_name(r->dtype_b));
    snprintf(buf, n, "%-32s %-16s %-9s %-10.3g %-10.3g %-10.7g %-8lld %s", name, sh, dt,
             r->max_abs, r->max_rel, r->cosine, (long long)r->n_bad, r->ok ? "ok" : "MISMATCH");
}
