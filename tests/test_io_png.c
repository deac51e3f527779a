/* test_io_png.c - PNGs written by PIL (and a tiny encoder) read to their
 * expected pixels; Lumen's writer: layouts, channels, 8/16 bits, float
 * clamping and rounding, text, batches; grid and diff heat-maps. */
#include <zlib.h>
#include "io_test.h"
#include "core/io/image.h"

static void check_png(const char *file, const char *expected)
{
    char path[256], exp[256];
    snprintf(path, sizeof path, IO_FX("%s"), file);
    snprintf(exp, sizeof exp, "io/%s", expected);
    tu_fixture fx = {0};
    assert_int_equal(tu_load(exp, &fx), 0);
    lm_png_opts o;
    lm_png_opts_init(&o);
    o.layout = LM_LAYOUT_HWC;
    lm_array *a = lm_png_read(path, &o, NULL);
    if (!a) fprintf(stderr, "%s: %s\n", file, lm_error_message());
    assert_non_null(a);
    tu_assert_close(a, &fx, 0, 0, file);
    /* the default layout is CHW */
    lm_array *c = lm_png_read(path, NULL, NULL);
    assert_non_null(c);
    io_expect_shape(c, 3, (int64_t[]){fx.shape[2], fx.shape[0], fx.shape[1]});
    lm_array_release(a);
    lm_array_release(c);
    tu_free(&fx);
}

static void test_read_pil_files(void **state)
{
    (void)state;
    const char *names[] = {"pil_rgb", "pil_rgba", "pil_gray8", "pil_la", "pil_gray16",
                           "pil_gray1", "pil_palette", "pil_palette_trns", "enc_gray2",
                           "enc_gray4", "enc_rgb16", "enc_gray_trns", "enc_rgb_interlaced",
                           "pil_palette4"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char f[64], e[64];
        snprintf(f, sizeof f, "%s.png", names[i]);
        snprintf(e, sizeof e, "%s.expected.npy", names[i]);
        check_png(f, e);
    }
    lm_array *g = lm_png_read(IO_FX("pil_gray16.png"), NULL, NULL);
    assert_int_equal(g->dtype, LM_I32);   /* 16-bit samples, raw */
    lm_array_release(g);
}

static void test_read_dtypes_and_text(void **state)
{
    (void)state;
    lm_png_opts o;
    lm_png_opts_init(&o);
    o.dtype = LM_F32;
    o.has_dtype = true;
    lm_tensor_set text = {0};
    lm_array *f = lm_png_read(IO_FX("pil_text.png"), &o, &text);
    assert_non_null(f);
    assert_int_equal(f->dtype, LM_F32);
    lm_array *u = lm_png_read(IO_FX("pil_rgb.png"), NULL, NULL);
    double *fv = tu_read(f), *uv = tu_read(u);
    for (int64_t i = 0; i < u->size; i++) assert_true(fabs(fv[i] - uv[i] / 255) < 1e-7);
    free(fv);
    free(uv);
    assert_int_equal(text.nmeta, 2);
    assert_string_equal(text.meta[0].key, "Title");
    assert_string_equal(text.meta[0].value, "lumen test");
    assert_string_equal(text.meta[1].value, "made by PIL");
    lm_tensor_set_free(&text);
    /* 16-bit read as u8 scales down with rounding */
    o.dtype = LM_U8;
    lm_array *g8 = lm_png_read(IO_FX("enc_rgb16.png"), &o, NULL);
    lm_array *g16 = lm_png_read(IO_FX("enc_rgb16.png"), NULL, NULL);
    double *a = tu_read(g8), *b = tu_read(g16);
    for (int64_t i = 0; i < g8->size; i++) assert_true(a[i] == floor(b[i] * 255 / 65535 + 0.5));
    free(a);
    free(b);
    lm_array *all[] = {f, u, g8, g16};
    for (int i = 0; i < 4; i++) lm_array_release(all[i]);
}

/* A written image read back: every channel count, both layouts, 8/16 bits. */
/* a written to p with o reads back as the shape and values v */
static void write_read_expect(const char *p, lm_array *a, const lm_png_opts *o, const int64_t *shape,
                              const double *v, int64_t n)
{
    assert_int_equal(lm_png_write(p, a, o), LM_OK);
    lm_array *b = lm_png_read(p, o, NULL);
    assert_non_null(b);
    io_expect_shape(b, 3, shape);
    io_expect(b, v, n);
    lm_array_release(b);
}

static void test_write_roundtrip(void **state)
{
    (void)state;
    for (int c = 1; c <= 4; c++)
        for (int hwc = 0; hwc < 2; hwc++)
            for (int bits = 8; bits <= 16; bits += 8) {
                int64_t h = 3, w = 5, n = c * h * w;
                double *v = malloc(sizeof(double) * (size_t)n);
                for (int64_t i = 0; i < n; i++) v[i] = (double)((i * 53) % (bits == 8 ? 256 : 65536));
                int64_t shape[3] = {hwc ? h : c, hwc ? w : h, hwc ? c : w};
                lm_array *x = lm_from_data(3, shape, LM_F64, v, NULL);
                lm_array *a = lm_cast(x, LM_I32);
                lm_png_opts o;
                lm_png_opts_init(&o);
                o.layout = hwc ? LM_LAYOUT_HWC : LM_LAYOUT_CHW;
                o.bits = bits;
                write_read_expect(io_tmp("rt.png"), a, &o, shape, v, n);
                free(v);
                lm_array_release(x);
                lm_array_release(a);
            }
}

static unsigned char *slurp(const char *path, size_t *n);

/* The default writer compresses 64 KiB bands on LUMEN_THREADS threads:
 * the same bytes at 1, 2 and 5 threads, several bands, read back exactly;
 * and libpng's own encoder (an explicit level) reads back the same pixels. */
static void test_write_banded_threads(void **state)
{
    (void)state;
    const char *saved = getenv("LUMEN_THREADS");
    char *keep = saved ? strdup(saved) : NULL;
    for (int bits = 8; bits <= 16; bits += 8) {
        int64_t c = 3, h = 257, w = 411, n = c * h * w;   /* 317 KiB of rows at 8 bits: 5 bands */
        double *v = malloc(sizeof(double) * (size_t)n);
        uint32_t r = 12345;
        for (int64_t i = 0; i < n; i++) {
            r = r * 1664525u + 1013904223u;
            int64_t y = (i / w) % h;
            v[i] = (double)(y < h / 2 ? (r >> 8) % (bits == 8 ? 256u : 65536u) : (uint32_t)((i % w) / 4 + y) % 256u);
        }
        int64_t shape[3] = {c, h, w};
        lm_array *x = lm_from_data(3, shape, LM_F64, v, NULL);
        lm_array *a = lm_cast(x, LM_I32);
        lm_png_opts o;
        lm_png_opts_init(&o);
        o.bits = bits;
        unsigned char *first = NULL;
        size_t nfirst = 0;
        for (int t = 0; t < 3; t++) {
            static const char *threads[] = {"1", "2", "5"};
            setenv("LUMEN_THREADS", threads[t], 1);
            const char *p = io_tmp("banded.png");
            write_read_expect(p, a, &o, shape, v, n);
            size_t nb;
            unsigned char *bytes = slurp(p, &nb);
            assert_non_null(bytes);
            if (!first) {
                first = bytes;
                nfirst = nb;
            } else {
                assert_int_equal(nb, nfirst);
                assert_memory_equal(bytes, first, nb);
                free(bytes);
            }
        }
        free(first);
        o.level = 6;   /* libpng's encoder */
        write_read_expect(io_tmp("libpng.png"), a, &o, shape, v, n);
        free(v);
        lm_array_release(x);
        lm_array_release(a);
    }
    if (keep) setenv("LUMEN_THREADS", keep, 1);
    else unsetenv("LUMEN_THREADS");
    free(keep);
}

static void test_write_float_rules(void **state)
{
    (void)state;
    double v[8] = {-0.5, 0, 0.5, 1, 1.5, NAN, 0.25, 127.5 / 255};
    lm_array *a = lm_from_data(2, (int64_t[]){2, 4}, LM_F64, v, NULL);
    const char *p = io_tmp("f.png");
    assert_int_equal(lm_png_write(p, a, NULL), LM_OK);
    lm_array *b = lm_png_read(p, NULL, NULL);
    /* clamped, rounded to nearest, NaN -> 0 */
    io_expect(b, (double[]){0, 0, 128, 255, 255, 0, 64, 128}, 8);
    lm_array_release(b);
    /* a range maps lo..hi */
    lm_png_opts o;
    lm_png_opts_init(&o);
    o.lo = -1;
    o.hi = 1;
    o.bits = 16;
    assert_int_equal(lm_png_write(p, a, &o), LM_OK);
    b = lm_png_read(p, NULL, NULL);
    io_expect(b, (double[]){16384, 32768, 49151, 65535, 65535, 0, 40959, 49151}, 8);
    lm_array_release(b);
    lm_array_release(a);
    /* bool is 0/max; u8 at 16 bits scales by 257 */
    lm_array *t = lm_from_data(2, (int64_t[]){1, 2}, LM_BOOL, (unsigned char[]){0, 1}, NULL);
    assert_int_equal(lm_png_write(p, t, NULL), LM_OK);
    b = lm_png_read(p, NULL, NULL);
    io_expect(b, (double[]){0, 255}, 2);
    lm_array_release(b);
    lm_array_release(t);
    lm_array *u = lm_from_data(2, (int64_t[]){1, 2}, LM_U8, (unsigned char[]){1, 255}, NULL);
    o.has_range = false;
    lm_png_opts_init(&o);
    o.bits = 16;
    assert_int_equal(lm_png_write(p, u, &o), LM_OK);
    b = lm_png_read(p, NULL, NULL);
    io_expect(b, (double[]){257, 65535}, 2);
    lm_array_release(b);
    lm_array_release(u);
}

static void test_write_text_batch_errors(void **state)
{
    (void)state;
    lm_array *img = lm_full(3, (int64_t[]){3, 4, 4}, 0.5, LM_F32, NULL);
    lm_kv text[] = {{"Software", "lumen"}, {"Comment", "hello"}};
    lm_png_opts o;
    lm_png_opts_init(&o);
    o.text = text;
    o.ntext = 2;
    o.level = 9;
    const char *p = io_tmp("t.png");
    assert_int_equal(lm_png_write(p, img, &o), LM_OK);
    lm_tensor_set t = {0};
    lm_array *b = lm_png_read(p, NULL, &t);
    assert_int_equal(t.nmeta, 2);
    assert_string_equal(t.meta[1].value, "hello");
    lm_tensor_set_free(&t);
    lm_array_release(b);
    /* a batch: numbered files from a pattern or from the extension */
    lm_array *batch = lm_full(4, (int64_t[]){3, 1, 2, 2}, 1, LM_F32, NULL);
    char pat[512], f[512];
    snprintf(pat, sizeof pat, "%s", io_tmp("frame_%03d.png"));
    assert_int_equal(lm_png_write(pat, batch, NULL), LM_OK);
    for (int i = 0; i < 3; i++) {
        snprintf(f, sizeof f, "%s", io_tmp(""));
        snprintf(f + strlen(f), sizeof f - strlen(f), "frame_%03d.png", i);
        assert_int_equal(access(f, F_OK), 0);
    }
    assert_int_equal(lm_png_write(io_tmp("b.png"), batch, NULL), LM_OK);
    assert_int_equal(access(io_tmp("b_0002.png"), F_OK), 0);
    lm_array_release(batch);
    /* errors */
    lm_array *five = lm_zeros(3, (int64_t[]){5, 2, 2}, LM_F32, NULL);
    assert_int_equal(lm_png_write(p, five, NULL), LM_ERR_SHAPE);
    assert_non_null(strstr(lm_error_message(), "5 channels"));
    lm_array *one = lm_zeros(1, (int64_t[]){4}, LM_F32, NULL);
    assert_int_equal(lm_png_write(p, one, NULL), LM_ERR_SHAPE);
    o.bits = 12;
    assert_int_equal(lm_png_write(p, img, &o), LM_ERR_ARG);
    lm_kv badkey[] = {{"", "empty key"}};
    lm_png_opts_init(&o);
    o.text = badkey;
    o.ntext = 1;
    assert_int_not_equal(lm_png_write(p, img, &o), LM_OK);
    lm_array_release(five);
    lm_array_release(one);
    lm_array_release(img);
}

static void test_grid(void **state)
{
    (void)state;
    lm_array *imgs[3];
    for (int i = 0; i < 3; i++) imgs[i] = lm_full(3, (int64_t[]){1, 2, 2}, i + 1, LM_F32, NULL);
    lm_array *g = lm_image_grid(3, imgs, 2, 1, 0, LM_LAYOUT_CHW);
    assert_non_null(g);
    io_expect_shape(g, 3, (int64_t[]){1, 7, 7});
    double *v = tu_read(g);
    assert_true(v[0] == 0 && v[1 * 7 + 1] == 1 && v[1 * 7 + 4] == 2 && v[4 * 7 + 1] == 3);
    assert_true(v[4 * 7 + 4] == 0 && v[3 * 7 + 3] == 0);
    free(v);
    lm_array *batch = lm_stack(3, imgs, 0);
    lm_array *gb = lm_image_grid_batch(batch, 2, 1, 0, LM_LAYOUT_CHW);
    double *x = tu_read(g), *y = tu_read(gb);
    assert_memory_equal(x, y, sizeof(double) * 49);
    free(x);
    free(y);
    lm_array *odd = lm_zeros(3, (int64_t[]){1, 3, 2}, LM_F32, NULL);
    lm_array *mix[2] = {imgs[0], odd};
    assert_null(lm_image_grid(2, mix, 2, 1, 0, LM_LAYOUT_CHW));
    assert_non_null(strstr(lm_error_message(), "image 2 has shape [1,3,2]"));
    lm_array *all[] = {g, batch, gb, odd, imgs[0], imgs[1], imgs[2]};
    for (int i = 0; i < 7; i++) lm_array_release(all[i]);
}

static void test_diff_heatmap(void **state)
{
    (void)state;
    double va[12] = {0}, vb[12] = {0};
    vb[1] = 1;      /* channel 0, pixel (0,1) */
    vb[2] = NAN;    /* one-sided NaN at pixel (1,0) */
    lm_array *a = lm_from_data(3, (int64_t[]){3, 2, 2}, LM_F64, va, NULL);
    lm_array *b = lm_from_data(3, (int64_t[]){3, 2, 2}, LM_F64, vb, NULL);
    lm_diff_stats st;
    const char *p = io_tmp("diff.png");
    assert_int_equal(lm_image_diff(a, b, p, 0, LM_LAYOUT_CHW, &st), LM_OK);
    assert_true(fabs(st.max - 1.0 / 3) < 1e-12);
    assert_int_equal(st.nan_pixels, 1);
    lm_png_opts o;
    lm_png_opts_init(&o);
    o.layout = LM_LAYOUT_HWC;
    lm_array *h = lm_png_read(p, &o, NULL);
    io_expect_shape(h, 3, (int64_t[]){2, 2, 3});
    /* equal: black; the largest error: white; NaN: magenta */
    io_expect(h, (double[]){0, 0, 0, 255, 255, 255, 255, 0, 255, 0, 0, 0}, 12);
    lm_array *c = lm_zeros(2, (int64_t[]){2, 3}, LM_F32, NULL);
    assert_int_equal(lm_image_diff(a, c, p, 0, LM_LAYOUT_CHW, NULL), LM_ERR_SHAPE);
    lm_array *all[] = {a, b, h, c};
    for (int i = 0; i < 4; i++) lm_array_release(all[i]);
}

/* ---- palette images made here (zlib), including invalid ones ---- */

static size_t put_chunk(unsigned char *o, const char *type, const unsigned char *d, uint32_t n)
{
    unsigned char be[4] = {(unsigned char)(n >> 24), (unsigned char)(n >> 16),
                           (unsigned char)(n >> 8), (unsigned char)n};
    memcpy(o, be, 4);
    memcpy(o + 4, type, 4);
    if (n) memcpy(o + 8, d, n);
    uLong crc = crc32(crc32(0, NULL, 0), o + 4, n + 4);
    for (int i = 0; i < 4; i++) o[8 + n + i] = (unsigned char)(crc >> (24 - 8 * i));
    return 12 + n;
}

/* A 1-row palette PNG of the given bit depth: `count` indices, npal
 * palette entries (gray ramp colours), ntrans tRNS alphas. */
static size_t palette_png(unsigned char *out, int depth, const unsigned char *idx, int count,
                          int npal, const unsigned char *trans, int ntrans)
{
    unsigned char ihdr[13] = {0, 0, 0, 0, 0, 0, 0, 1, (unsigned char)depth, 3, 0, 0, 0};
    ihdr[3] = (unsigned char)count;
    unsigned char pal[768], raw[64] = {0}, z[256];
    for (int i = 0; i < npal; i++) {
        pal[3 * i] = (unsigned char)(10 * i);
        pal[3 * i + 1] = (unsigned char)(10 * i + 1);
        pal[3 * i + 2] = (unsigned char)(10 * i + 2);
    }
    int per = 8 / depth;   /* indices per byte, first in the high bits */
    for (int i = 0; i < count; i++)
        raw[1 + i / per] |= (unsigned char)(idx[i] << (8 - depth * (i % per + 1)));
    uLongf zn = sizeof z;
    assert_int_equal(compress(z, &zn, raw, 1 + (uLong)((count + per - 1) / per)), Z_OK);
    size_t n = 8;
    memcpy(out, "\x89PNG\r\n\x1a\n", 8);
    n += put_chunk(out + n, "IHDR", ihdr, 13);
    n += put_chunk(out + n, "PLTE", pal, (uint32_t)(3 * npal));
    if (ntrans) n += put_chunk(out + n, "tRNS", trans, (uint32_t)ntrans);
    n += put_chunk(out + n, "IDAT", z, (uint32_t)zn);
    n += put_chunk(out + n, "IEND", NULL, 0);
    return n;
}

static void test_palette_index_past_palette(void **state)
{
    (void)state;
    unsigned char png[2048];
    /* 8-bit: index 5 of a 2-entry palette (libpng decodes it as black) */
    size_t n = palette_png(png, 8, (const unsigned char[]){0, 1, 5, 1}, 4, 2, NULL, 0);
    const char *path = io_tmp("bad_palette.png");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(png, 1, n, f), n);
    fclose(f);
    assert_null(lm_png_read(path, NULL, NULL));
    const char *m = lm_error_message();
    if (!strstr(m, path) || !strstr(m, "palette index 5 at pixel (x=2, y=0)") ||
        !strstr(m, "2 entries")) {
        fprintf(stderr, "message: %s\n", m);
        fail();
    }
    assert_int_equal(lm_error_status(), LM_ERR_FORMAT);
    lm_tensor_set s;
    assert_int_equal(lm_load_file(path, &s), LM_ERR_FORMAT);
    assert_int_equal(s.nmeta, 0);
    /* 4-bit: index 7 of 3 entries, the last pixel of an odd row */
    n = palette_png(png, 4, (const unsigned char[]){0, 1, 2, 7, 2}, 5, 3, NULL, 0);
    assert_null(lm_png_read_mem(png, n, "mem4.png", NULL, NULL));
    assert_non_null(strstr(lm_error_message(), "mem4.png: bad PNG: palette index 7 at pixel (x=3"));
    /* valid: every index inside; tRNS shorter than the palette leaves the
     * rest opaque */
    n = palette_png(png, 2, (const unsigned char[]){0, 1, 2, 1, 0}, 5, 3,
                    (const unsigned char[]){7}, 1);
    lm_png_opts o;
    lm_png_opts_init(&o);
    o.layout = LM_LAYOUT_HWC;
    lm_array *a = lm_png_read_mem(png, n, "ok.png", &o, NULL);
    if (!a) fprintf(stderr, "%s\n", lm_error_message());
    io_expect_shape(a, 3, (int64_t[]){1, 5, 4});
    io_expect(a, (const double[]){0, 1, 2, 7, 10, 11, 12, 255, 20, 21, 22, 255, 10, 11, 12, 255,
                                  0, 1, 2, 7}, 20);
    lm_array_release(a);
    /* and without tRNS: RGB */
    n = palette_png(png, 1, (const unsigned char[]){1, 0, 1}, 3, 2, NULL, 0);
    a = lm_png_read_mem(png, n, "ok1.png", &o, NULL);
    assert_non_null(a);
    io_expect(a, (const double[]){10, 11, 12, 0, 1, 2, 10, 11, 12}, 9);
    lm_array_release(a);
}

/* the bytes of a file (malloc'd) */
static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    unsigned char *b = malloc((size_t)len + 1);
    assert_non_null(b);
    *n = fread(b, 1, (size_t)len, f);
    fclose(f);
    return b;
}

/* lm_png_write_f32 / lm_png_read_f32 (plain memory, for worker threads)
 * give the bytes and values of lm_png_write / lm_png_read of an f32 array:
 * every channel count, 8 and 16 bits, clamping, NaN, rounding ties, text */
static void test_plain_memory_forms(void **state)
{
    (void)state;
    for (int c = 1; c <= 4; c++)
        for (int bits = 8; bits <= 16; bits += 8) {
            int64_t h = 7, w = 9, n = c * h * w;
            float *v = malloc(sizeof(float) * (size_t)n);
            for (int64_t i = 0; i < n; i++)
                v[i] = i % 11 == 0 ? NAN : i % 7 == 0 ? -0.25f : i % 5 == 0 ? 1.5f
                       : i % 3 == 0 ? 0.5f / 255 : (float)(i * 37 % 1000) / 999;
            int64_t shape[3] = {c, h, w};
            lm_array *a = lm_from_data(3, shape, LM_F32, v, lm_device_cpu());
            lm_kv text[1] = {{"Software", "test"}};
            lm_png_opts o;
            lm_png_opts_init(&o);
            o.bits = bits;
            o.ntext = 1;
            o.text = text;
            char p1[256], p2[256];
            snprintf(p1, sizeof p1, "%s", io_tmp("arr.png"));
            snprintf(p2, sizeof p2, "%s", io_tmp("mem.png"));
            assert_int_equal(lm_png_write(p1, a, &o), LM_OK);
            lm_png_f32 img = {c, h, w, 0, v};
            assert_int_equal(lm_png_write_f32(p2, &img, &o), LM_OK);
            size_t n1, n2;
            unsigned char *b1 = slurp(p1, &n1), *b2 = slurp(p2, &n2);
            assert_int_equal(n1, n2);
            assert_memory_equal(b1, b2, n1);
            free(b1);
            free(b2);
            lm_png_opts ro;
            lm_png_opts_init(&ro);
            ro.dtype = LM_F32;
            ro.has_dtype = true;
            lm_array *r = lm_png_read(p1, &ro, NULL);
            assert_non_null(r);
            float *want = malloc(sizeof(float) * (size_t)n);
            assert_int_equal(lm_array_read(r, want, LM_F32), LM_OK);
            lm_png_f32 got;
            assert_int_equal(lm_png_read_f32(p1, &got), LM_OK);
            assert_true(got.c == c && got.h == h && got.w == w && got.bits == bits);
            assert_memory_equal(got.data, want, sizeof(float) * (size_t)n);
            free(got.data);
            free(want);
            free(v);
            lm_array_release(a);
            lm_array_release(r);
        }
    /* every kind of file the reader takes (palettes, 1-16 bits, tRNS, interlaced) */
    const char *names[] = {"pil_rgb", "pil_rgba", "pil_gray8", "pil_la", "pil_gray16",
                           "pil_gray1", "pil_palette", "pil_palette_trns", "enc_gray2",
                           "enc_gray4", "enc_rgb16", "enc_gray_trns", "enc_rgb_interlaced",
                           "pil_palette4"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char f[256];
        snprintf(f, sizeof f, IO_FX("%s.png"), names[i]);
        lm_png_opts ro;
        lm_png_opts_init(&ro);
        ro.dtype = LM_F32;
        ro.has_dtype = true;
        lm_array *r = lm_png_read(f, &ro, NULL);
        assert_non_null(r);
        lm_png_f32 got;
        assert_int_equal(lm_png_read_f32(f, &got), LM_OK);
        assert_true(got.c == r->shape[0] && got.h == r->shape[1] && got.w == r->shape[2]);
        float *want = malloc(sizeof(float) * (size_t)r->size);
        assert_int_equal(lm_array_read(r, want, LM_F32), LM_OK);
        assert_memory_equal(got.data, want, sizeof(float) * (size_t)r->size);
        free(want);
        free(got.data);
        lm_array_release(r);
    }
    /* errors: as lm_png_read's, nothing allocated */
    const char *bad = io_tmp("bad.png");
    FILE *fb = fopen(bad, "wb");
    fputs("not a png at all", fb);
    fclose(fb);
    lm_png_f32 none;
    assert_int_equal(lm_png_read_f32(bad, &none), LM_ERR_FORMAT);
    assert_non_null(strstr(lm_error_message(), "not a PNG file"));
    assert_null(none.data);
    /* a JPEG where a PNG is read: said once, with what it is (issue 34:
     * "rgb64.jpg: rgb64.jpg: not a PNG file") */
    const char *jpg = io_tmp("rgb64.jpg");
    fb = fopen(jpg, "wb");
    fwrite("\xff\xd8\xff\xe0\0\x10JFIF\0\1\1\0\0\1\0\1\0\0\xff\xd9", 1, 22, fb);
    fclose(fb);
    assert_null(lm_png_read(jpg, NULL, NULL));
    const char *m = lm_error_message();
    assert_non_null(strstr(m, "rgb64.jpg: a JPEG image, not a PNG: only PNG images are read"));
    assert_null(strstr(strstr(m, "rgb64.jpg") + 1, "rgb64.jpg"));
    lm_tensor_set ts;
    assert_int_not_equal(lm_load_file(jpg, &ts), LM_OK);
    assert_non_null(strstr(lm_error_message(), "rgb64.jpg: a JPEG image; only safetensors"));
    float px[5] = {0};
    lm_png_f32 five = {5, 1, 1, 0, px};
    assert_int_equal(lm_png_write_f32(io_tmp("five.png"), &five, NULL), LM_ERR_SHAPE);
    assert_non_null(strstr(lm_error_message(), "C in 1..4"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_pil_files),
        cmocka_unit_test(test_read_dtypes_and_text),
        cmocka_unit_test(test_write_roundtrip),
        cmocka_unit_test(test_write_banded_threads),
        cmocka_unit_test(test_write_float_rules),
        cmocka_unit_test(test_write_text_batch_errors),
        cmocka_unit_test(test_grid),
        cmocka_unit_test(test_diff_heatmap),
        cmocka_unit_test(test_palette_index_past_palette),
        cmocka_unit_test(test_plain_memory_forms),
    };
    int rc = cmocka_run_group_tests_name("io_png", tests, NULL, NULL);
    io_tmp_cleanup();
    return rc;
}
