/* test_io_files.c - what core/io does with the file system itself: only
 * regular files are read (a FIFO is refused at once instead of blocking,
 * a directory says so); writers refuse to replace anything but a regular
 * file; a write error names the file and errno and leaves the previous
 * file whole and no temporary behind; two processes writing one path
 * never share a temporary, so every result is one writer's whole file.
 *
 * A hang would be a failure, not a stuck suite: an alarm kills the test
 * process (run_suites.sh counts a killed suite as failed). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include "io_test.h"
#include "models/tfjs.h"

#define GUARD_S 60

/* Asserts the last error mentions each of the given strings. */
static void expect_msg(const char *a, const char *b)
{
    const char *m = lm_error_message();
    if (!strstr(m, a) || (b && !strstr(m, b))) {
        fprintf(stderr, "message \"%s\", expected \"%s\"%s%s\n", m, a, b ? " and " : "",
                b ? b : "");
        fail();
    }
}

/* Files in io_tmp_dir other than the ones named (NULL-terminated). */
static int stray_files(const char *const *keep)
{
    DIR *d = opendir(io_tmp_dir);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        bool kept = false;
        for (int i = 0; keep[i]; i++) kept |= !strcmp(e->d_name, keep[i]);
        if (!kept) {
            fprintf(stderr, "left behind: %s\n", e->d_name);
            n++;
        }
    }
    if (d) closedir(d);
    return n;
}

static lm_array *ramp(int64_t n, double k)
{
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = (float)(k + (double)(i % 1000) / 1000.0);
    lm_array *a = lm_from_data(1, &n, LM_F32, v, lm_device_cpu());
    free(v);
    return a;
}

static void test_fifo_refused_at_once(void **state)
{
    (void)state;
    const char *p = io_tmp("pipe.safetensors");
    assert_int_equal(mkfifo(p, 0600), 0);
    alarm(GUARD_S);   /* before the fix each of these blocked forever */
    lm_tensor_set s;
    assert_int_equal(lm_load_file(p, &s), LM_ERR_IO);
    expect_msg(p, "is a FIFO");
    assert_int_equal(lm_load_safetensors(p, &s), LM_ERR_IO);
    expect_msg(p, "is a FIFO");
    assert_null(lm_load_npy(p));
    expect_msg(p, "is a FIFO");
    assert_int_equal(lm_load_npz(p, &s), LM_ERR_IO);
    expect_msg(p, "is a FIFO");
    assert_null(lm_png_read(p, NULL, NULL));
    expect_msg(p, "is a FIFO");
    assert_int_equal(lm_file_detect(p), LM_FORMAT_UNKNOWN);
    expect_msg(p, "is a FIFO");
    assert_null(lm_tfjs_load(p, NULL));
    expect_msg(p, "is a FIFO");
    /* a writer waiting on the other end changes nothing */
    int w = open(p, O_RDWR | O_NONBLOCK);
    assert_true(w >= 0);
    assert_int_equal(lm_load_file(p, &s), LM_ERR_IO);
    expect_msg(p, "is a FIFO");
    close(w);
    alarm(0);
    unlink(p);
}

static void test_directory_and_device_refused(void **state)
{
    (void)state;
    const char *d = io_tmp("sub.npz");
    assert_int_equal(mkdir(d, 0700), 0);
    lm_tensor_set s;
    assert_int_equal(lm_load_file(d, &s), LM_ERR_IO);
    expect_msg(d, "is a directory");   /* was "unknown magic bytes" */
    assert_null(lm_png_read(d, NULL, NULL));
    expect_msg(d, "is a directory");
    assert_int_equal(lm_load_file("/dev/zero", &s), LM_ERR_IO);
    expect_msg("/dev/zero", "is a character device");
    /* writers: the rename would replace the node (or fail on a directory
     * after the whole write), so they refuse first */
    lm_array *a = ramp(8, 0);
    assert_int_equal(lm_save_npy(d, a), LM_ERR_IO);
    expect_msg(d, "is a directory");
    const char *f = io_tmp("out.npy");
    assert_int_equal(mkfifo(f, 0600), 0);
    alarm(GUARD_S);
    assert_int_equal(lm_save_npy(f, a), LM_ERR_IO);
    expect_msg(f, "is a FIFO");
    alarm(0);
    struct stat sb;
    assert_int_equal(stat(f, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode));
    unlink(f);
    rmdir(d);
    lm_array_release(a);
}

/* A write that fails part way (the file size limit stands in for a full
 * disk: the write gets EFBIG) names the file and errno, keeps the file
 * that was there and leaves no temporary.  Two PNGs: libpng's encoder (an
 * explicit level) and the default, whose bands are compressed on threads
 * and written as chunks by the calling one. */
static void test_write_error_names_file_and_errno(void **state)
{
    (void)state;
    const char *npy = io_tmp("w.npy"), *npz = io_tmp("w.npz"), *st = io_tmp("w.safetensors"),
               *png = io_tmp("w.png"), *pngd = io_tmp("wd.png");
    lm_array *small = ramp(4, 0), *big = ramp(1 << 20, 1);
    lm_array *img = lm_random_uniform(3, (int64_t[]){3, 512, 512}, 0, 1, LM_F32,
                                      lm_random_key(7), lm_device_cpu());
    lm_array *tiny = lm_slice(img, 1, 0, 4, 1);
    const char *name = "x";
    assert_int_equal(lm_save_npy(npy, small), LM_OK);
    assert_int_equal(lm_save_npz(npz, 1, &name, &small, false), LM_OK);
    assert_int_equal(lm_save_safetensors(st, 1, &name, &small, 0, NULL), LM_OK);
    lm_png_opts o;
    lm_png_opts_init(&o);
    o.level = 0;   /* stored: the image is larger than the limit */
    assert_int_equal(lm_png_write(png, tiny, &o), LM_OK);
    assert_int_equal(lm_png_write(pngd, tiny, NULL), LM_OK);
    struct stat before[5];
    const char *paths[5] = {npy, npz, st, png, pngd};
    for (int i = 0; i < 5; i++) assert_int_equal(stat(paths[i], &before[i]), 0);

    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 64 << 10;
    signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    lm_status r[5];
    char msg[5][512];
    r[0] = lm_save_npy(npy, big);
    snprintf(msg[0], sizeof msg[0], "%s", lm_error_message());
    r[1] = lm_save_npz(npz, 1, &name, &big, false);
    snprintf(msg[1], sizeof msg[1], "%s", lm_error_message());
    r[2] = lm_save_safetensors(st, 1, &name, &big, 0, NULL);
    snprintf(msg[2], sizeof msg[2], "%s", lm_error_message());
    r[3] = lm_png_write(png, img, &o);
    snprintf(msg[3], sizeof msg[3], "%s", lm_error_message());
    r[4] = lm_png_write(pngd, img, NULL);   /* ~770 KB at level 1: past the limit */
    snprintf(msg[4], sizeof msg[4], "%s", lm_error_message());
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, SIG_DFL);

    const char *why = strerror(EFBIG);
    for (int i = 0; i < 5; i++) {
        if (r[i] != LM_ERR_IO || !strstr(msg[i], paths[i]) || !strstr(msg[i], why)) {
            fprintf(stderr, "%s: status %d, message \"%s\", expected the path and \"%s\"\n",
                    paths[i], r[i], msg[i], why);
            fail();
        }
        struct stat now;
        assert_int_equal(stat(paths[i], &now), 0);
        assert_int_equal(now.st_size, before[i].st_size);
        assert_int_equal(now.st_ino, before[i].st_ino);
    }
    lm_tensor_set s;
    assert_int_equal(lm_load_file(npy, &s), LM_OK);   /* the old file, whole */
    assert_int_equal(s.arrays[0]->size, 4);
    lm_tensor_set_free(&s);
    assert_int_equal(stray_files((const char *[]){"w.npy", "w.npz", "w.safetensors", "w.png",
                                                  "wd.png", NULL}), 0);
    for (int i = 0; i < 5; i++) unlink(paths[i]);
    lm_array_release(small);
    lm_array_release(big);
    lm_array_release(img);
    lm_array_release(tiny);
}

/* ---- two writers, one path ---- */

#define WRITES 40
#define ELEMS (1 << 17)   /* 512 KB: many write() calls per file */

/* The child: writes its own array (k = 1 or 2) to path WRITES times and
 * reads the file back after each write; any file that is neither array
 * whole, or any failed write, is an exit status. */
static int writer_main(const char *path, int k, const char *fmt)
{
    if (lm_init() != LM_OK) return 10;
    lm_device_set_default(lm_device_cpu());
    lm_array *mine = ramp(ELEMS, k);
    const char *name = "x";
    for (int i = 0; i < WRITES; i++) {
        lm_status st = !strcmp(fmt, "npy") ? lm_save_npy(path, mine)
                       : lm_save_safetensors(path, 1, &name, &mine, 0, NULL);
        if (st != LM_OK) {
            fprintf(stderr, "writer %d: %s\n", k, lm_error_message());
            return 11;
        }
        lm_tensor_set s;
        if (lm_load_file(path, &s) != LM_OK || s.count != 1 || s.arrays[0]->size != ELEMS) {
            fprintf(stderr, "writer %d: read back: %s\n", k, lm_error_message());
            return 12;
        }
        float *v = malloc(ELEMS * sizeof *v);
        lm_array_read(s.arrays[0], v, LM_F32);
        double first = floor(v[0]);   /* 1 or 2: whose file this is */
        for (int64_t j = 0; j < ELEMS; j++)
            if (v[j] != (float)(first + (double)(j % 1000) / 1000.0) || (first != 1 && first != 2)) {
                fprintf(stderr, "writer %d: element %lld is %g: a torn file\n", k, (long long)j,
                        v[j]);
                free(v);
                return 13;
            }
        free(v);
        lm_tensor_set_free(&s);
    }
    lm_array_release(mine);
    return 0;
}

static void concurrent_writers(const char *file, const char *fmt)
{
    const char *path = io_tmp(file);
    pid_t pid[2];
    alarm(GUARD_S * 3);
    for (int k = 0; k < 2; k++) {
        char kk[4];
        snprintf(kk, sizeof kk, "%d", k + 1);
        pid[k] = fork();
        assert_true(pid[k] >= 0);
        if (pid[k] == 0) {
            /* a fresh process, as a second `lumen` would be */
            execl("/proc/self/exe", "test_io_files", "--writer", path, kk, fmt, (char *)NULL);
            _exit(127);
        }
    }
    for (int k = 0; k < 2; k++) {
        int ws = 0;
        assert_int_equal(waitpid(pid[k], &ws, 0), pid[k]);
        if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
            fprintf(stderr, "%s writer %d: status %#x\n", fmt, k + 1, ws);
            fail();
        }
    }
    alarm(0);
    assert_int_equal(stray_files((const char *[]){file, NULL}), 0);
    unlink(path);
}

static void test_concurrent_writers_npy(void **state)
{
    (void)state;
    concurrent_writers("same.npy", "npy");
}

static void test_concurrent_writers_safetensors(void **state)
{
    (void)state;
    concurrent_writers("same.safetensors", "safetensors");
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "--writer")) return writer_main(argv[2], atoi(argv[3]), argv[4]);
    if (lm_init() != LM_OK) return 1;
    lm_device_set_default(lm_device_cpu());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fifo_refused_at_once),
        cmocka_unit_test(test_directory_and_device_refused),
        cmocka_unit_test(test_write_error_names_file_and_errno),
        cmocka_unit_test(test_concurrent_writers_npy),
        cmocka_unit_test(test_concurrent_writers_safetensors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
