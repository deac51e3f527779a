/* compare_sets.h - holding a set of named tensors (a file) against a
 * reference set: per-name reports (core/compare.h), the names only one side
 * has, and the table `lumen compare` and lm.compare print.
 *
 * Ownership: lm_compare_set owns its names and entries; lm_compare_set_free
 * releases them.  The tensor sets compared are borrowed. */
#ifndef LM_COMPARE_SETS_H
#define LM_COMPARE_SETS_H

#include "core/compare.h"
#include "core/io/io.h"

typedef struct lm_compare_entry {
    char *name;
    lm_compare_report r;
} lm_compare_entry;

typedef struct lm_compare_set {
    bool ok;                /* all matched ok, no name unmatched, and something
                               compared (else reason says why not) */
    char reason[160];       /* "" unless nothing was compared: why */
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
#endif
