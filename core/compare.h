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
#include "io.h"

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

/* ---- tensor sets (files) by name ---- */
typedef struct lm_compare_entry {
    char *name;
    lm_compare_report r;
} lm_compare_entry;

typedef struct lm_compare_set {
    bool ok;                /* all matched ok and no name unmatched */
    int count;              /* names in both, in the order of `got` */
    lm_compare_entry *entries;
    int nmissing;           /* in the reference only */
    char **missing;
    int nextra;             /* in `got` only */
    char **extra;
} lm_compare_set;

/* Compares got against ref by name.  only: a shell pattern (fnmatch) or,
 * with no * ? [ in it, a substring, selecting names on both sides; NULL
 * selects all.  allow_missing: names only in ref do not fail ok.  When each
 * side has exactly one selected tensor (a .npy file against anything) the
 * two are compared whatever their names, under got's name. */
lm_status lm_compare_sets(const lm_tensor_set *got, const lm_tensor_set *ref,
                          const lm_compare_opts *o, const char *only, bool allow_missing,
                          lm_compare_set *out);
/* The same against a file (safetensors, npz, npy) loaded from path. */
lm_status lm_compare_file(const char *path, const lm_tensor_set *got,
                          const lm_compare_opts *o, const char *only, bool allow_missing,
                          lm_compare_set *out);
void lm_compare_set_free(lm_compare_set *s);
/* True when name is selected by the `only` pattern described above. */
bool lm_compare_name_matches(const char *only, const char *name);

/* One table row per entry, then the missing/extra names and a summary, in a
 * malloc'd string (NULL if out of memory). */
char *lm_compare_set_format(const lm_compare_set *s, int index_base);
/* The header line and one row (no newline) used by that table. */
void lm_compare_row_header(char *buf, size_t n);
void lm_compare_row(const char *name, const lm_compare_report *r, char *buf, size_t n);

#endif
