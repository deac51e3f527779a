/* bench_io.c - file benchmarks: opening a 4 GiB safetensors file (header
 * only, thanks to mmap), loading one tensor against a plain read(2) of the
 * same bytes, and writing a 1024x1024 RGB PNG at two compression levels.
 * The 4 GiB file is sparse, so it takes no disk space. */
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "core/io/io.h"
#include "core/lumen.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#define NT 64
#define DIM 4096   /* 64 tensors of f32[4096,4096] = 64 MiB each: 4 GiB */

static int make_sparse(const char *path, size_t *data_off)
{
    char *h = malloc(NT * 128 + 64);
    size_t n = (size_t)sprintf(h, "{");
    size_t each = (size_t)DIM * DIM * 4;
    for (int i = 0; i < NT; i++)
        n += (size_t)sprintf(h + n, "%s\"layer.%d\":{\"dtype\":\"F32\",\"shape\":[%d,%d],"
                             "\"data_offsets\":[%zu,%zu]}", i ? "," : "", i, DIM, DIM,
                             each * (size_t)i, each * (size_t)(i + 1));
    n += (size_t)sprintf(h + n, "}");
    while ((n + 8) % 8) h[n++] = ' ';
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)(n >> (8 * i));
    int ok = fd >= 0 && write(fd, len, 8) == 8 && write(fd, h, n) == (ssize_t)n &&
             ftruncate(fd, (off_t)(8 + n + each * NT)) == 0;
    if (fd >= 0) close(fd);
    free(h);
    *data_off = 8 + n;
    return ok ? 0 : -1;
}

static void bench_safetensors(void)
{
    const char *path = "/tmp/lumen-bench-4g.safetensors";
    size_t off;
    if (make_sparse(path, &off) != 0) { printf("safetensors: cannot create %s\n", path); return; }
    double best_open = 1e9;
    lm_tensor_set s;
    for (int r = 0; r < 5; r++) {
        double t0 = now();
        if (lm_load_safetensors(path, &s) != LM_OK) { printf("%s\n", lm_error_message()); return; }
        double t = now() - t0;
        if (t < best_open) best_open = t;
        if (r < 4) lm_tensor_set_free(&s);
    }
    printf("safetensors open 4 GiB (%d tensors)   %8.3f ms  (header only)\n", NT, best_open * 1e3);
    size_t each = (size_t)DIM * DIM * 4;
    float *dst = malloc(each);
    /* warm the pages once, then time: both sides read from the page cache */
    lm_array_read(s.arrays[3], dst, LM_F32);
    double t0 = now();
    lm_array_read(s.arrays[3], dst, LM_F32);
    double t_lm = now() - t0;
    int fd = open(path, O_RDONLY);
    t0 = now();
    ssize_t got = pread(fd, dst, each, (off_t)(off + 3 * each));
    double t_read = now() - t0;
    close(fd);
    printf("load one 64 MiB tensor (lm_array_read) %8.3f ms  %6.2f GB/s\n", t_lm * 1e3,
           (double)each / t_lm / 1e9);
    printf("  peer: pread(2) of the same bytes     %8.3f ms  %6.2f GB/s  ratio %.2f%s\n",
           t_read * 1e3, (double)each / t_read / 1e9, t_lm / t_read,
           got == (ssize_t)each ? "" : " (short read)");
    free(dst);
    lm_tensor_set_free(&s);
    unlink(path);
}

/* a smooth image (gradients, like renders) and one with 4 bits of noise
 * (like photographs), which deflate finds much harder */
static void fill(unsigned char *px, int h, int w, bool noisy)
{
    unsigned seed = 1;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            unsigned char *p = px + ((size_t)y * w + x) * 3;
            if (noisy) {
                seed = seed * 1103515245u + 12345u;
                int noise = (int)((seed >> 16) & 15);
                p[0] = (unsigned char)(x / 4 + noise);
                p[1] = (unsigned char)(y / 4 + noise);
                p[2] = (unsigned char)((x + y) / 8);
            } else {
                p[0] = (unsigned char)(128 + 100 * sin(x * 0.01) * cos(y * 0.013));
                p[1] = (unsigned char)(x / 4);
                p[2] = (unsigned char)((x * y) >> 12);
            }
        }
}

static void bench_png(void)
{
    int h = 1024, w = 1024;
    unsigned char *px = malloc((size_t)h * w * 3);
    lm_png_opts o;
    lm_png_opts_init(&o);
    o.layout = LM_LAYOUT_HWC;
    const int levels[2] = {-1, 1};
    for (int noisy = 0; noisy < 2; noisy++) {
        fill(px, h, w, noisy);
        lm_array *img = lm_from_data(3, (int64_t[]){h, w, 3}, LM_U8, px, NULL);
        for (int l = 0; l < 2; l++) {
            o.level = levels[l];
            double best = 1e9;
            for (int r = 0; r < 3; r++) {
                double t0 = now();
                if (lm_png_write("/tmp/lumen-bench.png", img, &o) != LM_OK) {
                    printf("%s\n", lm_error_message());
                    break;
                }
                double t = now() - t0;
                if (t < best) best = t;
            }
            printf("write 1024x1024 RGB PNG, %-6s level %-7s %8.3f ms\n",
                   noisy ? "noisy" : "smooth", l ? "1" : "default", best * 1e3);
        }
        double best = 1e9;
        for (int r = 0; r < 3; r++) {
            double t0 = now();
            lm_array *b = lm_png_read("/tmp/lumen-bench.png", NULL, NULL);
            double t = now() - t0;
            lm_array_release(b);
            if (t < best) best = t;
        }
        printf("read  1024x1024 RGB PNG, %-6s               %8.3f ms\n", noisy ? "noisy" : "smooth",
               best * 1e3);
        lm_array_release(img);
    }
    unlink("/tmp/lumen-bench.png");
    free(px);
}

int main(void)
{
    if (lm_init() != LM_OK) return 1;
    bench_safetensors();
    bench_png();
    return 0;
}
