/* io_tool.c - writes files with Lumen for independent readers to check
 * (tests/io_interop.sh runs it, then tests/ref/check_io_interop.py reads
 * the files with PIL, numpy and a hand-written safetensors reader).
 * The values follow formulas the Python side repeats. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/io/io.h"
#include "core/lumen.h"

static int failures;

static void check(lm_status st, const char *what)
{
    if (st == LM_OK) return;
    fprintf(stderr, "io_tool: %s: %s\n", what, lm_error_message());
    failures++;
}

/* element i of the dtype fixtures: see value() in check_io_interop.py */
static double value(lm_dtype dt, int i)
{
    if (dt == LM_BOOL) return i % 3 == 0;
    if (dt == LM_U8) return (i * 37) % 11 + 200;
    double v = (i * 37) % 11 - 3;
    return lm_dtype_is_float(dt) ? v + 0.5 : v;
}

static lm_array *dtype_array(lm_dtype dt)
{
    double v[12];
    for (int i = 0; i < 12; i++) v[i] = value(dt, i);
    lm_array *x = lm_from_data(3, (int64_t[]){2, 3, 2}, LM_F64, v, NULL);
    lm_array *c = lm_cast(x, dt);
    lm_array_release(x);
    return c;
}

/* a c x h x w integer image at bits (values as check_io_interop.py
 * expects them: "big" images are noisy above, smooth below) */
static void write_int_png(const char *path, int c, int h, int w, int bits, bool big)
{
    int max = bits == 8 ? 255 : 65535;
    double *v = malloc(sizeof(double) * (size_t)(c * h * w));
    for (int ch = 0; ch < c; ch++)
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                v[(ch * h + y) * w + x] =
                    !big ? (x * 7919 + y * 104729 + ch * 1299709) % (max + 1)
                    : y < h / 2 ? (x * 7919 + y * 104729 + ch * 1299709 + x * x * y) % (max + 1)
                                : (x / 3 + y * 2 + ch * 50) % (max + 1);
    lm_array *a = lm_from_data(3, (int64_t[]){c, h, w}, LM_F64, v, NULL);
    lm_array *i32 = lm_cast(a, LM_I32);
    lm_png_opts o;
    lm_png_opts_init(&o);
    o.bits = bits;
    check(lm_png_write(path, i32, &o), path);
    lm_array_release(a);
    lm_array_release(i32);
    free(v);
}

static void write_pngs(const char *dir)
{
    char path[512];
    for (int c = 1; c <= 4; c++)
        for (int bits = 8; bits <= 16; bits += 8) {
            snprintf(path, sizeof path, "%s/png_c%d_%d.png", dir, c, bits);
            write_int_png(path, c, 6, 9, bits, false);
        }
    /* large enough for several of the writer's 64 KiB bands (each
     * compressed on its own thread, seeded with the one before) */
    for (int c = 1; c <= 4; c += 2)
        for (int bits = 8; bits <= 16; bits += 8) {
            snprintf(path, sizeof path, "%s/png_big_c%d_%d.png", dir, c, bits);
            write_int_png(path, c, 181, 700, bits, true);
        }
    /* floats: clamp and round to nearest, NaN -> 0; HWC layout */
    double f[4 * 4 * 3];
    for (int i = 0; i < 48; i++) f[i] = (i % 17) / 16.0 * 1.2 - 0.1;
    f[5] = NAN;
    lm_array *fa = lm_from_data(3, (int64_t[]){4, 4, 3}, LM_F64, f, NULL);
    lm_kv text[] = {{"Title", "lumen"}, {"Comment", "interop"}};
    lm_png_opts o;
    lm_png_opts_init(&o);
    o.layout = LM_LAYOUT_HWC;
    o.text = text;
    o.ntext = 2;
    snprintf(path, sizeof path, "%s/png_float.png", dir);
    check(lm_png_write(path, fa, &o), path);
    lm_array_release(fa);
}

static void write_tensors(const char *dir)
{
    char path[512];
    lm_array *arrs[LM_DTYPE_COUNT];
    char names[LM_DTYPE_COUNT][16];
    const char *np[LM_DTYPE_COUNT];
    for (int dt = 0; dt < LM_DTYPE_COUNT; dt++) {
        arrs[dt] = dtype_array((lm_dtype)dt);
        snprintf(names[dt], sizeof names[dt], "t_%s", lm_dtype_name((lm_dtype)dt));
        np[dt] = names[dt];
        snprintf(path, sizeof path, "%s/npy_%s.npy", dir, lm_dtype_name((lm_dtype)dt));
        check(lm_save_npy(path, arrs[dt]), path);
    }
    snprintf(path, sizeof path, "%s/rt.npz", dir);
    check(lm_save_npz(path, LM_DTYPE_COUNT, np, arrs, false), path);
    snprintf(path, sizeof path, "%s/rt_c.npz", dir);
    check(lm_save_npz(path, LM_DTYPE_COUNT, np, arrs, true), path);
    lm_kv meta[] = {{"format", "pt"}, {"note", "caf\xc3\xa9 \"q\""}};
    snprintf(path, sizeof path, "%s/rt.safetensors", dir);
    check(lm_save_safetensors(path, LM_DTYPE_COUNT, np, arrs, 2, meta), path);
    for (int dt = 0; dt < LM_DTYPE_COUNT; dt++) lm_array_release(arrs[dt]);
}

int main(int argc, char **argv)
{
    if (argc != 3 || strcmp(argv[1], "write")) {
        fprintf(stderr, "usage: io_tool write DIR\n");
        return 2;
    }
    if (lm_init() != LM_OK) return 2;
    write_pngs(argv[2]);
    write_tensors(argv[2]);
    return failures ? 1 : 0;
}
