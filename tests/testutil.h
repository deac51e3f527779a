/* testutil.h - shared helpers for the cmocka tests: fixtures (.npy files
 * written by tests/ref/gen_*.py), array construction and comparison, and
 * what the model tests share (temporary folders, edited copies of weights
 * and configs, comparison against a reference tensor set). */
#ifndef LM_TESTUTIL_H
#define LM_TESTUTIL_H

#include <math.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <dirent.h>
#include <unistd.h>
#include "core/lumen.h"
#include "core/io/io.h"

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

/* Reads a as f32 (evaluating it); caller frees.  The test fails (printing
 * the error) when it cannot be read. */
static inline float *tu_read_f32(lm_array *a)
{
    assert_non_null(a);
    float *v = malloc(sizeof *v * (size_t)(a->size ? a->size : 1));
    assert_non_null(v);
    lm_status st = lm_array_read(a, v, LM_F32);
    if (st != LM_OK) fprintf(stderr, "read failed: %s\n", lm_error_message());
    assert_int_equal(st, LM_OK);
    return v;
}

/* max |a - b| over the elements read as f32 (a NaN difference is the
 * result: NaN counts); the sizes must be equal. */
static inline double tu_max_err(lm_array *a, lm_array *b)
{
    assert_int_equal(a->size, b->size);
    float *x = tu_read_f32(a), *y = tu_read_f32(b);
    double m = 0;
    for (int64_t i = 0; i < a->size; i++) {
        double d = fabs((double)x[i] - y[i]);
        if (!(d <= m)) m = d;
    }
    free(x);
    free(y);
    return m;
}

/* Whether a and b read as f32 are the same bytes (same size, bit-equal). */
static inline bool tu_same_bytes(lm_array *a, lm_array *b)
{
    if (a->size != b->size) return false;
    float *x = tu_read_f32(a), *y = tu_read_f32(b);
    bool same = !memcmp(x, y, sizeof *x * (size_t)a->size);
    free(x);
    free(y);
    return same;
}

/* a, which the test needs: when it is NULL the test fails, printing what
 * returned it and the library's error. */
static inline lm_array *tu_must(lm_array *a, const char *what)
{
    if (!a) fprintf(stderr, "%s: %s\n", what, lm_error_message());
    assert_non_null(a);
    return a;
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

/* ---- files and folders ---- */

/* Writes n bytes of data to path, replacing it; the test fails when it cannot. */
static inline void tu_spit(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) print_error("cannot write %s\n", path);
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static inline void tu_copy_file(const char *from, const char *to)
{
    size_t n;
    char *d = tu_slurp(from, &n);
    tu_spit(to, d, n);
    free(d);
}

/* text with its first `from` replaced by `to` (malloc'd; text itself when
 * from is NULL); the test fails when text has no `from`. */
static inline char *tu_replace(const char *text, const char *from, const char *to)
{
    const char *at = from ? strstr(text, from) : NULL;
    if (from && !at) print_error("the text has no %s\n", from);
    assert_true(!from || at);
    size_t len = strlen(text) + (to ? strlen(to) : 0) + 1;
    char *out = malloc(len);
    assert_non_null(out);
    if (at) snprintf(out, len, "%.*s%s%s", (int)(at - text), text, to ? to : "", at + strlen(from));
    else snprintf(out, len, "%s", text);
    return out;
}

/* Makes a new folder /tmp/lumen_<tag>_XXXXXX and puts its name in dir (n
 * bytes); 0, or -1 when it cannot (the value a cmocka setup returns). */
static inline int tu_tmpdir(char *dir, size_t n, const char *tag)
{
    snprintf(dir, n, "/tmp/lumen_%s_XXXXXX", tag);
    return mkdtemp(dir) ? 0 : -1;
}

/* A model test's group setup: the library with the CPU as the default
 * device, the reference set *ref read from ref_path, and a new folder
 * tu_tmpdir(dir, n, tag) makes.  0, or -1 (printing why). */
static inline int tu_setup_models(const char *ref_path, lm_tensor_set *ref, char *dir, size_t n,
                                  const char *tag)
{
    if (lm_init() != LM_OK) return -1;
    lm_device_set_default(lm_device_cpu());
    if (lm_load_safetensors(ref_path, ref) != LM_OK) {
        fprintf(stderr, "%s\n", lm_error_message());
        return -1;
    }
    return tu_tmpdir(dir, n, tag);
}

/* Removes the files a test left in dir, then dir itself (a teardown: nothing
 * is asserted). */
static inline void tu_tmpdir_remove(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char p[512];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

/* ---- models: devices, weights, references ---- */

/* The first Vulkan device, or NULL where there is none. */
static inline lm_device *tu_vulkan_device(void)
{
    for (int i = 0; i < lm_device_count(); i++)
        if (!strncmp(lm_device_at(i)->spec, "vulkan", 6)) return lm_device_at(i);
    return NULL;
}

/* The first Vulkan device; where there is none, prints line and skips the
 * test. */
static inline lm_device *tu_vulkan_or_skip(const char *line)
{
    lm_device *vk = tu_vulkan_device();
    if (!vk) {
        printf("%s\n", line);
        skip();
    }
    return vk;
}

/* Saves s's tensors to path (replacing it) without the one named `drop`
 * and with one more named `extra` (the first tensor again); either may be
 * NULL.  The model tests make a missing and an unexpected weight with it. */
static inline void tu_save_edited(const lm_tensor_set *s, const char *path, const char *drop,
                                  const char *extra)
{
    const char **names = malloc(sizeof *names * (size_t)(s->count + 1));
    lm_array **arr = malloc(sizeof *arr * (size_t)(s->count + 1));
    assert_true(names && arr);
    int n = 0;
    for (int i = 0; i < s->count; i++) {
        if (drop && !strcmp(s->names[i], drop)) continue;
        names[n] = s->names[i];
        arr[n++] = s->arrays[i];
    }
    if (extra) { names[n] = extra; arr[n++] = s->arrays[0]; }
    unlink(path);
    assert_int_equal(lm_save_safetensors(path, n, names, arr, 0, NULL), LM_OK);
    free(names);
    free(arr);
}

/* The tensor `name` of the reference set r (borrowed); the test fails
 * when r has none. */
static inline lm_array *tu_set_get(const lm_tensor_set *r, const char *name)
{
    int i = lm_tensor_set_find(r, name);
    if (i < 0) fprintf(stderr, "reference %s missing\n", name);
    assert_true(i >= 0);
    return r->arrays[i];
}

/* max |got - want| (into *abs_err when not NULL) over max |want| (over 1 when
 * want is all zeros); the test fails on a NULL got (printing the error), a
 * shape that differs, or a NaN in got. */
static inline double tu_rel_err(lm_array *got, lm_array *want, double *abs_err)
{
    if (!got) fprintf(stderr, "%s\n", lm_error_message());
    assert_non_null(got);
    assert_int_equal(got->ndim, want->ndim);
    for (int d = 0; d < got->ndim; d++) assert_int_equal(got->shape[d], want->shape[d]);
    double *g = tu_read(got), *w = tu_read(want), err = 0, big = 0;
    for (int64_t i = 0; i < want->size; i++) {
        assert_false(isnan(g[i]));
        err = fmax(err, fabs(g[i] - w[i]));
        big = fmax(big, fabs(w[i]));
    }
    free(g);
    free(w);
    if (abs_err) *abs_err = err;
    return err / (big > 0 ? big : 1);
}

/* Asserts that the call just made failed with a message that holds
 * needle1 and needle2 (NULL: no second); prints the message. */
static inline void tu_expect_message(const char *needle1, const char *needle2)
{
    const char *msg = lm_error_message();
    printf("  error: %s\n", msg);
    assert_non_null(strstr(msg, needle1));
    if (needle2) assert_non_null(strstr(msg, needle2));
}

#endif
