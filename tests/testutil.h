/* testutil.h - shared helpers for the cmocka tests: fixtures (.npy files
 * written by tests/ref/gen_*.py), array construction and comparison. */
#ifndef LM_TESTUTIL_H
#define LM_TESTUTIL_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "core/lumen.h"

/* The exit status of a suite that skips itself as a whole (after printing
 * why): tests/run_suites.sh counts it as skipped, or as failed where the
 * reason is a missing Vulkan device on a machine that could run one. */
#define LM_TEST_SKIP 77

#ifndef LM_FIXTURES
/* cmocka group setup for tests that pin the CPU's kernels (the default
 * device would be a GPU where one exists) */
static inline int tu_setup_cpu(void **state)
{
    (void)state;
    if (lm_init() != LM_OK) return -1;
    lm_device_set_default(lm_device_cpu());
    return 0;
}

#define LM_FIXTURES "tests/ref/fixtures/"
#endif

/* The whole file at path, NUL-terminated (malloc'd; the test fails when it
 * cannot be read); *n (may be NULL) gets its size. */
static inline char *tu_slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) print_error("cannot open %s\n", path);
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long len = ftell(f);
    assert_true(len >= 0);
    assert_int_equal(fseek(f, 0, SEEK_SET), 0);
    char *buf = malloc((size_t)len + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    buf[len] = 0;
    if (n) *n = (size_t)len;
    return buf;
}

/* A fixture: f64 data (converted from the file's dtype) and its shape. */
typedef struct tu_fixture {
    int ndim;
    int64_t shape[LM_MAX_DIMS];
    int64_t size;
    double *data;
} tu_fixture;

/* Minimal .npy reader for the fixtures we write: v1/v2, little endian,
 * C order, <f4 <f8 <i8 <i4 |b1 |u1. */
static inline int tu_load(const char *name, tu_fixture *fx)
{
    char path[512];
    snprintf(path, sizeof path, "%s%s", LM_FIXTURES, name);
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "fixture %s missing\n", path); return -1; }
    unsigned char pre[10];
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6)) { fclose(f); return -1; }
    size_t hl = pre[8] | (pre[9] << 8);
    if (pre[6] >= 2) {
        unsigned char more[2];
        if (fread(more, 1, 2, f) != 2) { fclose(f); return -1; }
        hl |= ((size_t)more[0] << 16) | ((size_t)more[1] << 24);
    }
    char *hdr = calloc(1, hl + 1);
    if (!hdr || fread(hdr, 1, hl, f) != hl) { free(hdr); fclose(f); return -1; }
    const char *d = strstr(hdr, "'descr': '");
    const char *s = strstr(hdr, "'shape': (");
    if (!d || !s || strstr(hdr, "'fortran_order': True")) { free(hdr); fclose(f); return -1; }
    char descr[8] = {0};
    memcpy(descr, d + 10, 3);
    fx->ndim = 0; fx->size = 1;
    s += 10;
    while (*s && *s != ')') {
        while (*s == ' ' || *s == ',') s++;
        if (*s == ')') break;
        fx->shape[fx->ndim] = strtoll(s, (char **)&s, 10);
        fx->size *= fx->shape[fx->ndim++];
    }
    free(hdr);
    size_t es = descr[2] - '0';
    void *raw = malloc(es * (size_t)fx->size + 1);
    fx->data = malloc(sizeof(double) * (size_t)fx->size + 1);
    if (fread(raw, es, (size_t)fx->size, f) != (size_t)fx->size) { free(raw); fclose(f); return -1; }
    fclose(f);
    for (int64_t i = 0; i < fx->size; i++) {
        double v;
        if (!strcmp(descr, "<f4")) v = ((float *)raw)[i];
        else if (!strcmp(descr, "<f8")) v = ((double *)raw)[i];
        else if (!strcmp(descr, "<i8")) v = (double)((int64_t *)raw)[i];
        else if (!strcmp(descr, "<i4")) v = ((int32_t *)raw)[i];
        else v = ((uint8_t *)raw)[i];   /* |b1 |u1 */
        fx->data[i] = v;
    }
    free(raw);
    return 0;
}

static inline void tu_free(tu_fixture *fx) { free(fx->data); fx->data = NULL; }

/* The fixture as a new evaluated array of dtype dt on the default device. */
static inline lm_array *tu_array(const tu_fixture *fx, lm_dtype dt)
{
    lm_array *t = lm_from_data(fx->ndim, fx->shape, LM_F64, fx->data, NULL);
    lm_array *c = lm_cast(t, dt);
    lm_array_release(t);
    assert_non_null(c);
    assert_int_equal(lm_array_eval(c), LM_OK);
    return c;
}

/* Reads a as doubles (evaluating it); caller frees. */
static inline double *tu_read(lm_array *a)
{
    assert_non_null(a);
    double *v = malloc(sizeof(double) * (size_t)(a->size ? a->size : 1));
    lm_status st = lm_array_read(a, v, LM_F64);
    if (st != LM_OK) fprintf(stderr, "read failed: %s\n", lm_error_message());
    assert_int_equal(st, LM_OK);
    return v;
}

/* Asserts a (evaluated here) equals the expected values within
 * atol + rtol*|expected|; NaN must match NaN, Inf must match exactly. */
static inline void tu_assert_close_data(lm_array *a, const double *exp, int64_t n,
                                        double rtol, double atol, const char *what)
{
    assert_non_null(a);
    assert_int_equal(a->size, n);
    double *v = tu_read(a);
    for (int64_t i = 0; i < n; i++) {
        double g = v[i], e = exp[i];
        int ok = (isnan(e) && isnan(g)) || (isinf(e) && g == e) ||
                 (isfinite(e) && fabs(g - e) <= atol + rtol * fabs(e));
        if (!ok) {
            fprintf(stderr, "%s: element %lld: got %.9g expected %.9g\n", what,
                    (long long)i, g, e);
            free(v);
            fail();
        }
    }
    free(v);
}

static inline void tu_assert_close(lm_array *a, const tu_fixture *fx, double rtol,
                                   double atol, const char *what)
{
    assert_int_equal(a->ndim, fx->ndim);
    for (int d = 0; d < fx->ndim; d++) assert_int_equal(a->shape[d], fx->shape[d]);
    tu_assert_close_data(a, fx->data, fx->size, rtol, atol, what);
}

/* Tolerances per dtype for float results computed from f32-exact inputs. */
static inline double tu_rtol(lm_dtype dt)
{
    switch (dt) {
    case LM_F64: return 1e-12;
    case LM_F32: return 2e-6;
    case LM_F16: return 2e-3;
    case LM_BF16: return 1.6e-2;
    default: return 0;
    }
}

#endif
