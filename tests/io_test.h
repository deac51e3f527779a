/* io_test.h - helpers shared by the file-format tests. */
#ifndef LM_IO_TEST_H
#define LM_IO_TEST_H

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>
#include "testutil.h"
#include "core/io/io.h"

#define IO_FX(name) LM_FIXTURES "io/" name

static char io_tmp_dir[256];

/* Removes the temporary directory and the files tests left in it. */
static inline void io_tmp_cleanup(void)
{
    DIR *d = opendir(io_tmp_dir);
    struct dirent *e;
    char p[600];
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(p, sizeof p, "%s/%s", io_tmp_dir, e->d_name);
            unlink(p);
        }
    if (d) closedir(d);
    rmdir(io_tmp_dir);
}

/* A path under a per-process temporary directory (removed at exit). */
static inline const char *io_tmp(const char *name)
{
    static char buf[8][512];
    static int k;
    char *dir = io_tmp_dir;
    if (!dir[0]) {
        snprintf(io_tmp_dir, sizeof io_tmp_dir, "/tmp/lumen-io-test-%d", (int)getpid());
        mkdir(io_tmp_dir, 0700);
        atexit(io_tmp_cleanup);
    }
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* Asserts a's values (read as f64) equal v exactly, NaN matching NaN. */
static inline void io_expect(lm_array *a, const double *v, int64_t n)
{
    assert_non_null(a);
    assert_int_equal(a->size, n);
    double *got = tu_read(a);
    for (int64_t i = 0; i < n; i++) {
        if (isnan(v[i]) && isnan(got[i])) continue;
        if (got[i] != v[i]) {
            fprintf(stderr, "element %lld: got %.17g expected %.17g\n", (long long)i, got[i], v[i]);
            free(got);
            fail();
        }
    }
    free(got);
}

static inline void io_expect_shape(const lm_array *a, int ndim, const int64_t *shape)
{
    assert_int_equal(a->ndim, ndim);
    for (int d = 0; d < ndim; d++) assert_int_equal(a->shape[d], shape[d]);
}

/* The named tensor of a set (fails the test if absent). */
static inline lm_array *io_get(const lm_tensor_set *s, const char *name)
{
    int i = lm_tensor_set_find(s, name);
    if (i < 0) fprintf(stderr, "tensor %s missing\n", name);
    assert_true(i >= 0);
    return s->arrays[i];
}

/* Reads a whole file (test helper; 0 on success). */
static inline int lm_io_read_all_for_test(const char *path, void **data, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    *data = malloc((size_t)len + 1);
    *n = fread(*data, 1, (size_t)len, f);
    fclose(f);
    return *n == (size_t)len ? 0 : -1;
}

#endif
