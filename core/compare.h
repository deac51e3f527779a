/* compare.h - holding a tensor against a reference: error metrics, the
 * elements outside tolerance, the worst element, NaN/Inf disagreement.
 *
 * Everything is computed in f64 on the host, the tensors read in chunks, so
 * comparing never needs more than a few MB besides the tensors.  An element
 * passes when |a - b| <= atol + rtol * |b| (b is the reference, as in
 * numpy.isclose and torch.testing.assert_close); NaN matches NaN when
 * equal_nan, and an infinity only the same infinity. */
#ifndef LM_COMPARE_H
#define LM_COMPARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "array.h"

typedef struct lm_compare_opts {
    double rtol, atol;  /* NAN = torch.testing defaults for the less precise dtype:
                           f16 1e-3/1e-5, bf16 1.6e-2/1e-5, f32 1.3e-6/1e-5,
                           f64 1e-7/1e-7, integers and bool 0/0 */
    bool equal_nan;     /* default true */
    bool check_dtype;   /* dtypes must match for ok; default false */
    double peak;        /* PSNR peak; NAN = 255 for u8 references, else
                           max(1, max |b|) */
} lm_compare_opts;

void lm_compare_opts_init(lm_compare_opts *o);

typedef struct lm_compare_report {
    bool ok;
    bool shape_equal, dtype_equal;
    lm_dtype dtype_a, dtype_b;
    int ndim_a, ndim_b;
    int64_t shape_a[LM_MAX_DIMS], shape_b[LM_MAX_DIMS];
    double rtol, atol;      /* the tolerances used */
    int64_t count;          /* elements compared (0 when shapes differ) */
    /* over element pairs where both are finite; NAN when there are none */
    double max_abs, max_rel, mae, rmse, nmse, cosine, psnr;
    int64_t n_bad;          /* outside tolerance, NaN/Inf mismatches included */
    double frac_bad;
    int64_t nan_mismatch, inf_mismatch;
    bool has_worst;         /* a NaN/Inf mismatch if any, else max |a - b| */
    int64_t worst_flat;
    int64_t worst_index[LM_MAX_DIMS];   /* 0-based */
    double worst_a, worst_b;
} lm_compare_report;

/* Fills r; a shape mismatch is a report (ok false), not an error.  Fails
 * only when a tensor cannot be evaluated or read.  o may be NULL. */
lm_status lm_compare(lm_array *a, lm_array *b, const lm_compare_opts *o,
                     lm_compare_report *r);
/* numpy.allclose: shapes broadcast, NaN never equals NaN unless equal_nan. */
lm_status lm_allclose(lm_array *a, lm_array *b, double rtol, double atol, bool equal_nan,
                      bool *out);

/* A compact multi-line table of r into buf (always NUL-terminated);
 * indices are printed from index_base (1 for Lua, 0 for numpy users). */
void lm_compare_format(const lm_compare_report *r, int index_base, char *buf, size_t n);
/* The worst element's index, "[i,j,...]" from index_base, into buf. */
void lm_compare_worst_str(const lm_compare_report *r, int index_base, char *buf, size_t n);

/* The header line and one row (no newline) used by that table. */
void lm_compare_row_header(char *buf, size_t n);
void lm_compare_row(const char *name, const lm_compare_report *r, char *buf, size_t n);

#endif
