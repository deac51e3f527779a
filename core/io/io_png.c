/* io_png.c - PNG through libpng: tensors to 8/16-bit gray, gray+alpha, RGB,
 * RGBA images and back, with text chunks.
 *
 * libpng reports errors by longjmp; each call keeps everything it must free
 * in a context struct reached through a pointer that does not change after
 * setjmp, so the jump never loses a resource. */
#include <errno.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include "io_internal.h"
#include "lumen.h"

#define DEFLATE_MAX_RATIO 1040u
#define LM_PNG_MAX_CHUNK (8u << 20)   /* libpng's own default where it sets one */

void lm_png_opts_init(lm_png_opts *o)
{
    memset(o, 0, sizeof *o);
    o->layout = LM_LAYOUT_CHW;
    o->lo = 0;
    o->hi = 1;
    o->bits = 8;
    o->level = -1;
    o->dtype = LM_U8;
}

typedef struct png_ctx {
    png_structp png;
    png_infop info;
    const char *what;
    char msg[256];
    /* reading from memory */
    const unsigned char *data;
    size_t size, pos;
    /* buffers freed on every path */
    unsigned char *pixels;
    png_bytep *rows;
    png_text *text;
    unsigned char *filtered, *zdata;   /* the banded writer's */
    lm_status status;                  /* set with its message where not LM_ERR_IO */
} png_ctx;

static void on_error(png_structp png, png_const_charp msg)
{
    png_ctx *c = png_get_error_ptr(png);
    snprintf(c->msg, sizeof c->msg, "%s", msg);
    png_longjmp(png, 1);
}

/* libpng's own writer says only "Write Error": ours keeps the errno in
 * the lm_io_out, so the message names the cause (a full disk, a quota) */
static void write_out(png_structp png, png_bytep p, png_size_t n)
{
    lm_io_out *o = png_get_io_ptr(png);
    if (!lm_io_out_write(o, p, n)) {
        png_ctx *c = png_get_error_ptr(png);
        snprintf(c->msg, sizeof c->msg, "cannot write: %s", strerror(o->err ? o->err : EIO));
        png_longjmp(png, 1);
    }
}

static void flush_out(png_structp png)
{
    (void)png;   /* lm_io_out_close flushes, and reports what fails there */
}

static void on_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;   /* benign: libpng recovers (e.g. a bad ancillary chunk) */
}

/* ---- writing ---- */

typedef struct img_geom {
    int64_t c, h, w;
    bool hwc;
} img_geom;

static lm_status image_geom(const lm_array *a, const lm_png_opts *o, const char *path,
                            img_geom *g)
{
    char sh[96];
    g->hwc = false;
    if (a->ndim == 2) {
        g->c = 1; g->h = a->shape[0]; g->w = a->shape[1];
    } else if (a->ndim == 3) {
        g->hwc = o->layout == LM_LAYOUT_HWC;
        g->c = g->hwc ? a->shape[2] : a->shape[0];
        g->h = g->hwc ? a->shape[0] : a->shape[1];
        g->w = g->hwc ? a->shape[1] : a->shape[2];
    } else {
        return lm_error_set(LM_ERR_SHAPE, "write_png %s: expected [H,W], [C,H,W] or [H,W,C], "
                            "got %s", path, lm_shape_str(sh, sizeof sh, a->ndim, a->shape));
    }
    if (g->c < 1 || g->c > 4)
        return lm_error_set(LM_ERR_SHAPE, "write_png %s: %s as %s has %lld channels; PNG takes "
                            "1-4 (layout=\"%s\" is the other choice)", path,
                            lm_shape_str(sh, sizeof sh, a->ndim, a->shape),
                            g->hwc ? "HWC" : "CHW", (long long)g->c, g->hwc ? "CHW" : "HWC");
    if (g->h < 1 || g->w < 1 || g->h > 0x7FFFFFFF || g->w > 0x7FFFFFFF)
        return lm_error_set(LM_ERR_SHAPE, "write_png %s: image size %lldx%lld is not valid",
                            path, (long long)g->w, (long long)g->h);
    return LM_OK;
}

/* One sample of the file from one element of the tensor. */
static inline unsigned sample(double v, lm_dtype dt, const lm_png_opts *o, unsigned max)
{
    if (isnan(v)) return 0;
    if (lm_dtype_is_float(dt) || o->has_range) {
        v = (v - o->lo) / (o->hi - o->lo) * max;
    } else if (dt == LM_BOOL) {
        v = v != 0 ? max : 0;
    } else if (dt == LM_U8 && max == 65535) {
        v *= 257;
    }
    if (!(v > 0)) return 0;
    if (v >= max) return max;
    return (unsigned)(v + 0.5);   /* v > 0: rounds half away from zero */
}

/* u8 written at 8 bits: the bytes are the samples, no conversion. */
static lm_status u8_pixels(png_ctx *c, lm_array *a, const img_geom *g)
{
    size_t hw = (size_t)(g->h * g->w), ch = (size_t)g->c;
    c->pixels = malloc(hw * ch);
    unsigned char *planes = g->hwc ? c->pixels : malloc(hw * ch);
    if (!c->pixels || !planes) {
        if (planes != c->pixels) free(planes);
        return lm_error_set(LM_ERR_NOMEM, "write_png %s: out of memory", c->what);
    }
    lm_status st = lm_array_read(a, planes, LM_U8);
    if (st == LM_OK && !g->hwc)
        for (size_t k = 0; k < ch; k++)
            for (size_t p = 0; p < hw; p++) c->pixels[p * ch + k] = planes[k * hw + p];
    if (planes != c->pixels) free(planes);
    return st == LM_OK ? LM_OK : lm_error_prefix("write_png %s", c->what);
}

/* The samples of values v (as lm_array_read gives them in f64, CHW or
 * HWC per g) of an array of dtype dt, interleaved, into c->pixels: rows
 * in blocks of PACK_ROWS on the io threads (each sample on its own, so any
 * split gives the same bytes). */
#define PACK_ROWS 16
typedef struct pack_job {
    png_ctx *c;
    const double *v;
    const float *vf;   /* instead of v: f32 values (they widen to f64 exactly) */
    const img_geom *g;
    lm_dtype dt;
    const lm_png_opts *o;
} pack_job;

static void pack_rows(void *ctx, size_t k)
{
    const pack_job *j = ctx;
    const img_geom *g = j->g;
    unsigned max = j->o->bits == 16 ? 65535 : 255;
    size_t hw = (size_t)(g->h * g->w), ch = (size_t)g->c, w = (size_t)g->w;
    size_t p1 = (k + 1) * PACK_ROWS * w < hw ? (k + 1) * PACK_ROWS * w : hw;
    for (size_t p = k * PACK_ROWS * w; p < p1; p++)
        for (size_t q = 0; q < ch; q++) {
            size_t i = g->hwc ? p * ch + q : q * hw + p;
            double x = j->vf ? (double)j->vf[i] : j->v[i];
            unsigned s = sample(x, j->dt, j->o, max);
            size_t at = p * ch + q;
            if (j->o->bits == 16) ((uint16_t *)j->c->pixels)[at] = (uint16_t)s;
            else j->c->pixels[at] = (unsigned char)s;
        }
}

static void pack_samples(png_ctx *c, const double *v, const float *vf, const img_geom *g,
                         lm_dtype dt, const lm_png_opts *o)
{
    pack_job j = {c, v, vf, g, dt, o};
    lm_io_parallel(((size_t)g->h + PACK_ROWS - 1) / PACK_ROWS, pack_rows, &j);
}

/* Interleaved (HWC) 8- or 16-bit samples of a, in c->pixels. */
static lm_status make_pixels(png_ctx *c, lm_array *a, const img_geom *g, const lm_png_opts *o)
{
    if (a->dtype == LM_U8 && o->bits == 8 && !o->has_range) return u8_pixels(c, a, g);
    /* f32, f16 and bf16 values are read as f32 (half the bytes of f64,
     * the same values) */
    bool narrow = a->dtype == LM_F32 || a->dtype == LM_F16 || a->dtype == LM_BF16;
    size_t n = (size_t)(g->c * g->h * g->w), bps = o->bits == 16 ? 2 : 1;
    void *v = malloc(n * (narrow ? sizeof(float) : sizeof(double)));
    c->pixels = malloc(n * bps);
    if (!v || !c->pixels) {
        free(v);
        return lm_error_set(LM_ERR_NOMEM, "write_png %s: out of memory", c->what);
    }
    if (lm_array_read(a, v, narrow ? LM_F32 : LM_F64) != LM_OK) {
        free(v);
        return lm_error_prefix("write_png %s", c->what);
    }
    pack_samples(c, narrow ? NULL : v, narrow ? v : NULL, g, a->dtype, o);
    free(v);
    return LM_OK;
}

static lm_status check_opts(const char *path, const lm_png_opts *o)
{
    if (o->bits != 8 && o->bits != 16)
        return lm_error_set(LM_ERR_ARG, "write_png %s: bits must be 8 or 16, not %d", path, o->bits);
    if (!(o->hi != o->lo) || !isfinite(o->lo) || !isfinite(o->hi))
        return lm_error_set(LM_ERR_ARG, "write_png %s: range {%g, %g} is empty", path, o->lo, o->hi);
    return LM_OK;
}

/* The image data of the default writer: every row with the Sub filter
 * (cheap, and close to libpng's adaptive choice on photographs and renders),
 * then one zlib stream at level 1 compressed in 64 KiB bands on all cores
 * (io_deflate.c), written as IDAT chunks of at most 1 MiB and closed with
 * IEND.  A 1024x1024 RGB image took 35-100 ms on one core through libpng;
 * the bytes are the same at any thread count.  Runs inside encode's setjmp:
 * libpng's chunk writer longjmps on a write error, and c frees the buffers
 * on every path. */
#define PNG_BAND_BYTES ((size_t)64 << 10)
typedef struct filter_job {
    png_ctx *c;
    size_t h, stride, bpp;
    bool wide;
} filter_job;

/* rows [k*PACK_ROWS, ...) of c->pixels into c->filtered, each with the Sub
 * filter: each byte less the byte one pixel to its left */
static void filter_rows(void *ctx, size_t k)
{
    const filter_job *j = ctx;
    size_t stride = j->stride, bpp = j->bpp, row = stride + 1;
    size_t y1 = (k + 1) * PACK_ROWS < j->h ? (k + 1) * PACK_ROWS : j->h;
    for (size_t y = k * PACK_ROWS; y < y1; y++) {
        const unsigned char *p = j->c->pixels + y * stride;
        unsigned char *f = j->c->filtered + y * row;
        *f++ = 1;
        if (j->wide) {
            /* samples are little endian here, big endian in the file */
            for (size_t i = 0; i < stride; i += 2) {
                f[i] = p[i + 1];
                f[i + 1] = p[i];
            }
            for (size_t i = stride; i-- > bpp;) f[i] = (unsigned char)(f[i] - f[i - bpp]);
        } else {
            memcpy(f, p, bpp < stride ? bpp : stride);
            for (size_t i = bpp; i < stride; i++) f[i] = (unsigned char)(p[i] - p[i - bpp]);
        }
    }
}

#define PNG_IDAT_MAX ((size_t)1 << 20)
static void write_banded(png_ctx *c, const img_geom *g, const lm_png_opts *o, size_t stride)
{
    size_t bpp = (size_t)g->c * (o->bits == 16 ? 2 : 1), row = stride + 1;
    size_t h = (size_t)g->h;
    c->filtered = malloc(h * row);
    if (!c->filtered) {
        c->status = lm_error_set(LM_ERR_NOMEM, "write_png %s: out of memory", c->what);
        snprintf(c->msg, sizeof c->msg, "out of memory");
        png_longjmp(c->png, 1);
    }
    filter_job fj = {c, h, stride, bpp, o->bits == 16};
    lm_io_parallel((h + PACK_ROWS - 1) / PACK_ROWS, filter_rows, &fj);
    size_t zn;
    char what[300];
    snprintf(what, sizeof what, "write_png %s", c->what);
    if (lm_io_deflate_bands(c->filtered, h * row, PNG_BAND_BYTES, 1, &c->zdata, &zn, what) != LM_OK) {
        c->status = lm_error_status();
        snprintf(c->msg, sizeof c->msg, "cannot compress");
        png_longjmp(c->png, 1);
    }
    for (size_t at = 0; at < zn; at += PNG_IDAT_MAX)
        png_write_chunk(c->png, (png_const_bytep) "IDAT", c->zdata + at,
                        zn - at < PNG_IDAT_MAX ? zn - at : PNG_IDAT_MAX);
    png_write_chunk(c->png, (png_const_bytep) "IEND", NULL, 0);
}

/* c->pixels (freed here) into the file at path, atomically */
static lm_status encode(png_ctx *c, const char *path, const img_geom *g, const lm_png_opts *o)
{
    lm_io_out out;
    lm_status st = lm_io_out_open(&out, path);
    if (st != LM_OK) { free(c->pixels); return st; }
    c->png = png_create_write_struct(PNG_LIBPNG_VER_STRING, c, on_error, on_warning);
    c->info = c->png ? png_create_info_struct(c->png) : NULL;
    c->rows = malloc((size_t)g->h * sizeof *c->rows);
    c->text = calloc((size_t)o->ntext + 1, sizeof *c->text);
    if (!c->png || !c->info || !c->rows || !c->text) {
        snprintf(c->msg, sizeof c->msg, "out of memory");
    } else if (!setjmp(png_jmpbuf(c->png))) {
        static const int types[] = {0, PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA,
                                    PNG_COLOR_TYPE_RGB, PNG_COLOR_TYPE_RGB_ALPHA};
        png_set_write_fn(c->png, &out, write_out, flush_out);
        /* an explicit level: libpng's encoder with its adaptive filters */
        if (o->level >= 0) png_set_compression_level(c->png, o->level > 9 ? 9 : o->level);
        png_set_IHDR(c->png, c->info, (png_uint_32)g->w, (png_uint_32)g->h, o->bits,
                     types[g->c], PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                     PNG_FILTER_TYPE_DEFAULT);
        for (int i = 0; i < o->ntext; i++) {
            c->text[i].compression = PNG_TEXT_COMPRESSION_NONE;
            c->text[i].key = (png_charp)o->text[i].key;
            c->text[i].text = (png_charp)o->text[i].value;
        }
        if (o->ntext > 0) png_set_text(c->png, c->info, c->text, o->ntext);
        png_write_info(c->png, c->info);
        size_t stride = (size_t)(g->w * g->c) * (o->bits == 16 ? 2 : 1);
        if (o->level < 0) {
            write_banded(c, g, o, stride);
        } else {
            if (o->bits == 16) png_set_swap(c->png);   /* our samples are little endian */
            for (int64_t y = 0; y < g->h; y++) c->rows[y] = c->pixels + (size_t)y * stride;
            png_write_image(c->png, c->rows);
            png_write_end(c->png, NULL);
        }
        c->msg[0] = 0;
    }
    bool ok = c->png && c->info && c->rows && c->text && !c->msg[0];
    png_destroy_write_struct(c->png ? &c->png : NULL, c->info ? &c->info : NULL);
    free(c->rows);
    free(c->text);
    free(c->pixels);
    free(c->filtered);
    free(c->zdata);
    if (!ok && c->status != LM_OK) {   /* its message is set */
        lm_io_out_close(&out, false);
        return c->status;
    }
    if (!ok) lm_error_set(LM_ERR_IO, "write_png %s: %s", path, c->msg);
    if (!ok) return lm_io_out_close(&out, false);
    /* the last buffered bytes fail here, if anywhere */
    st = lm_io_out_close(&out, true);
    return st == LM_OK ? LM_OK : lm_error_prefix("write_png");
}

static lm_status write_one(const char *path, lm_array *a, const lm_png_opts *o)
{
    img_geom g;
    if (image_geom(a, o, path, &g) != LM_OK) return lm_error_status();
    if (check_opts(path, o) != LM_OK) return lm_error_status();
    png_ctx ctx = {.what = path}, *c = &ctx;
    if (make_pixels(c, a, &g, o) != LM_OK) { free(c->pixels); return lm_error_status(); }
    return encode(c, path, &g, o);
}

/* The 8-bit samples lm_png_write would write for a, without a file: for
 * what shows an image elsewhere (the terminal, lua/term_image.c). */
lm_status lm_png_pixels8(lm_array *a, const lm_png_opts *o, const char *what,
                         lm_png_u8 *img)
{
    lm_png_opts def;
    if (!o) { lm_png_opts_init(&def); o = &def; }
    lm_png_opts o8 = *o;
    o8.bits = 8;
    img->data = NULL;
    img_geom g;
    if (!a) return lm_error_status() ? lm_error_status()
                                     : lm_error_set(LM_ERR_ARG, "%s: no tensor", what);
    if (image_geom(a, &o8, what, &g) != LM_OK) return lm_error_status();
    if (check_opts(what, &o8) != LM_OK) return lm_error_status();
    png_ctx ctx = {.what = what}, *c = &ctx;
    if (make_pixels(c, a, &g, &o8) != LM_OK) { free(c->pixels); return lm_error_status(); }
    img->c = g.c; img->h = g.h; img->w = g.w;
    img->data = c->pixels;
    return LM_OK;
}

/* As write_one of an f32 [C,H,W] CPU array holding img's values: the same
 * f64 values (f32 widens exactly), samples and bytes, and no lm_array. */
lm_status lm_png_write_f32(const char *path, const lm_png_f32 *img, const lm_png_opts *o)
{
    lm_png_opts def;
    if (!o) { lm_png_opts_init(&def); o = &def; }
    img_geom g = {img->c, img->h, img->w, false};
    if (!img->data || g.c < 1 || g.c > 4 || g.h < 1 || g.w < 1 || g.h > 0x7FFFFFFF ||
        g.w > 0x7FFFFFFF)
        return lm_error_set(LM_ERR_SHAPE, "write_png %s: image [%lld,%lld,%lld] is not a [C,H,W] "
                            "image with C in 1..4", path, (long long)g.c, (long long)g.h,
                            (long long)g.w);
    if (check_opts(path, o) != LM_OK) return lm_error_status();
    size_t n = (size_t)(g.c * g.h * g.w);
    png_ctx ctx = {.what = path}, *c = &ctx;
    c->pixels = malloc(n * (o->bits == 16 ? 2 : 1));
    if (!c->pixels) return lm_error_set(LM_ERR_NOMEM, "write_png %s: out of memory", path);
    pack_samples(c, NULL, img->data, &g, LM_F32, o);
    return encode(c, path, &g, o);
}

/* "img_%03d.png" with i, or "img.png" -> "img_0007.png".  Only a %d with an
 * optional zero-padded width is a field; any other '%' is literal. */
static lm_status batch_path(const char *pattern, int64_t i, char *buf, size_t cap)
{
    const char *p = pattern;
    for (; (p = strchr(p, '%')); p++) {
        const char *q = p + 1;
        int width = 0;
        if (*q == '0') while (*q >= '0' && *q <= '9') width = width * 10 + (*q++ - '0');
        if (*q == 'd' && width < 20) {
            int n = snprintf(buf, cap, "%.*s%0*lld%s", (int)(p - pattern), pattern, width,
                             (long long)i, q + 1);
            return n >= 0 && (size_t)n < cap ? LM_OK
                   : lm_error_set(LM_ERR_ARG, "write_png: path too long");
        }
    }
    const char *slash = strrchr(pattern, '/');
    const char *dot = strrchr(pattern, '.');
    if (!dot || (slash && dot < slash)) dot = pattern + strlen(pattern);
    int n = snprintf(buf, cap, "%.*s_%04lld%s", (int)(dot - pattern), pattern, (long long)i, dot);
    return n >= 0 && (size_t)n < cap ? LM_OK : lm_error_set(LM_ERR_ARG, "write_png: path too long");
}

lm_status lm_png_write(const char *path, lm_array *a, const lm_png_opts *o)
{
    lm_png_opts def;
    if (!o) { lm_png_opts_init(&def); o = &def; }
    if (!a) return lm_error_status() ? lm_error_status()
                                     : lm_error_set(LM_ERR_ARG, "write_png: no tensor");
    if (a->ndim != 4) return write_one(path, a, o);
    if (lm_array_eval(a) != LM_OK) return lm_error_prefix("write_png %s", path);
    for (int64_t i = 0; i < a->shape[0]; i++) {
        char file[4096];
        lm_array *s = lm_slice(a, 0, i, i + 1, 1);
        lm_array *img = lm_squeeze(s, 0);
        lm_array_release(s);
        lm_status st = img ? batch_path(path, i, file, sizeof file) : lm_error_status();
        if (st == LM_OK) st = write_one(file, img, o);
        lm_array_release(img);
        if (st != LM_OK) return st;
    }
    return LM_OK;
}

/* ---- reading ---- */

static void read_mem(png_structp png, png_bytep out, png_size_t n)
{
    png_ctx *c = png_get_io_ptr(png);
    if (n > c->size - c->pos) png_error(png, "truncated file");
    memcpy(out, c->data + c->pos, n);
    c->pos += n;
}

/* Refuses pixels a file this small cannot hold before libpng allocates. */
static bool plausible(png_ctx *c, png_uint_32 w, png_uint_32 h, int depth, int type)
{
    int ch = type == PNG_COLOR_TYPE_GRAY || type == PNG_COLOR_TYPE_PALETTE ? 1
             : type == PNG_COLOR_TYPE_GRAY_ALPHA ? 2 : type == PNG_COLOR_TYPE_RGB ? 3 : 4;
    uint64_t rowbits = (uint64_t)w * (uint64_t)(ch * depth);
    uint64_t raw = ((rowbits + 7) / 8 + 1) * h;   /* + the filter byte */
    return raw / DEFLATE_MAX_RATIO <= c->size;
}

typedef struct png_out {
    png_uint_32 w, h;
    int channels, depth;
    bool palette;          /* c->pixels holds indices until expand_palette */
} png_out;

static void set_transforms(png_ctx *c, png_out *po)
{
    int type = png_get_color_type(c->png, c->info);
    int depth = png_get_bit_depth(c->png, c->info);
    /* palette images are read as indices, one byte each, and expanded here
     * (expand_palette): libpng's expansion turns an index past the palette
     * into black without a word, and its own check
     * (png_set_check_for_invalid_index) misses 8-bit indices in 1.6.39 */
    po->palette = type == PNG_COLOR_TYPE_PALETTE;
    if (po->palette && depth < 8) png_set_packing(c->png);
    if (type == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(c->png);
    if (!po->palette && png_get_valid(c->png, c->info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(c->png);
    if (depth == 16) png_set_swap(c->png);
    png_set_interlace_handling(c->png);
    png_read_update_info(c->png, c->info);
    po->channels = png_get_channels(c->png, c->info);
    po->depth = png_get_bit_depth(c->png, c->info);
}

/* Indices -> RGB, or RGBA where the file has tRNS (entries past its
 * length are opaque, as the PNG spec says).  An index with no palette
 * entry makes the file invalid (PNG spec 11.2.3): refused, naming it. */
static lm_status expand_palette(png_ctx *c, png_out *po)
{
    png_colorp pal = NULL;
    int npal = 0, ntrans = 0;
    png_bytep trans = NULL;
    png_get_PLTE(c->png, c->info, &pal, &npal);
    if (png_get_valid(c->png, c->info, PNG_INFO_tRNS))
        png_get_tRNS(c->png, c->info, &trans, &ntrans, NULL);
    size_t hw = (size_t)po->w * po->h;
    for (size_t p = 0; p < hw; p++)
        if (c->pixels[p] >= npal)
            return lm_error_set(LM_ERR_FORMAT, "%s: bad PNG: palette index %d at pixel (x=%zu, "
                                "y=%zu) is beyond the palette's %d entries", c->what,
                                c->pixels[p], p % po->w, p / po->w, npal);
    int ch = trans && ntrans > 0 ? 4 : 3;
    unsigned char *rgb = malloc(hw * (size_t)ch + 1);
    if (!rgb) return lm_error_set(LM_ERR_NOMEM, "%s: out of memory for the image", c->what);
    for (size_t p = 0; p < hw; p++) {
        unsigned i = c->pixels[p];
        unsigned char *o = rgb + p * (size_t)ch;
        o[0] = pal[i].red;
        o[1] = pal[i].green;
        o[2] = pal[i].blue;
        if (ch == 4) o[3] = (int)i < ntrans ? trans[i] : 255;
    }
    free(c->pixels);
    c->pixels = rgb;
    po->channels = ch;
    po->palette = false;
    return LM_OK;
}

static void collect_text(png_ctx *c, lm_tensor_set *text)
{
    png_textp t;
    int n = 0;
    if (!text || !png_get_text(c->png, c->info, &t, &n)) return;
    for (int i = 0; i < n; i++) {
        size_t len = t[i].compression == PNG_ITXT_COMPRESSION_NONE ||
                     t[i].compression == PNG_ITXT_COMPRESSION_zTXt ? t[i].itxt_length
                                                                    : t[i].text_length;
        bool seen = false;   /* chunks before the image are listed again after it */
        for (int k = 0; k < text->nmeta && !seen; k++) seen = !strcmp(text->meta[k].key, t[i].key);
        if (seen) continue;
        lm_io_set_meta(text, t[i].key, strlen(t[i].key), t[i].text ? t[i].text : "", len);
    }
}

/* Walks the chunk headers before libpng does: a chunk may not claim more
 * bytes than the file has left, so libpng (which allocates a chunk's
 * length before reading it) never allocates more than the file's size. */
static lm_status check_chunks(const png_ctx *c)
{
    size_t pos = 8;
    /* every chunk whose length and type are there, even one cut short
     * before its CRC (fuzz_png: a 71-byte file whose last chunk header
     * claimed 1.2 GB made libpng allocate and clear that much) */
    while (c->size - pos >= 8) {
        const unsigned char *h = c->data + pos;
        size_t len = ((size_t)h[0] << 24) | ((size_t)h[1] << 16) | ((size_t)h[2] << 8) | h[3];
        size_t rest = c->size - pos - 8, left = rest >= 4 ? rest - 4 : 0;   /* less the CRC */
        if (rest < 4 || len > left)
            return lm_error_set(LM_ERR_FORMAT, "%s: bad PNG: chunk %.4s claims %zu bytes, the "
                                "file has %zu left (truncated?)", c->what, (const char *)h + 4,
                                len, left);
        if (!memcmp(h + 4, "IEND", 4)) break;
        pos += 12 + len;
    }
    return LM_OK;
}

/* Decodes into c->pixels (interleaved, 8 or 16 bit native). */
static lm_status decode(png_ctx *c, png_out *po, lm_tensor_set *text)
{
    if (c->size < 8 || png_sig_cmp(c->data, 0, 8)) {
        /* say what it is when the bytes tell: a JPEG given where a PNG is read */
        const char *kind = lm_io_kind_of(c->data, c->size);
        if (kind)
            return lm_error_set(LM_ERR_FORMAT, "%s: %s, not a PNG: only PNG images are read; "
                                "convert it to PNG first", c->what, kind);
        return lm_error_set(LM_ERR_FORMAT, "%s: not a PNG file (bad signature)", c->what);
    }
    if (check_chunks(c) != LM_OK) return LM_ERR_FORMAT;
    c->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, c, on_error, on_warning);
    c->info = c->png ? png_create_info_struct(c->png) : NULL;
    if (!c->png || !c->info) return lm_error_set(LM_ERR_NOMEM, "%s: out of memory", c->what);
    if (setjmp(png_jmpbuf(c->png)))
        return lm_error_set(LM_ERR_FORMAT, "%s: bad PNG: %s", c->what, c->msg);
    png_set_read_fn(c->png, c, read_mem);
    png_set_user_limits(c->png, 0x7FFFFFFF, 0x7FFFFFFF);
    /* an ancillary chunk (text, ICC profile) claiming gigabytes must not be
     * allocated before the read finds the file too short */
    png_set_chunk_malloc_max(c->png, LM_PNG_MAX_CHUNK);
    png_read_info(c->png, c->info);
    po->w = png_get_image_width(c->png, c->info);
    po->h = png_get_image_height(c->png, c->info);
    if (!plausible(c, po->w, po->h, png_get_bit_depth(c->png, c->info),
                   png_get_color_type(c->png, c->info)))
        png_error(c->png, "image size impossible for the file's length");
    set_transforms(c, po);
    size_t stride = png_get_rowbytes(c->png, c->info);
    uint64_t total;
    if (!lm_io_mul(stride, po->h, SIZE_MAX / 2, &total)) png_error(c->png, "image too large");
    c->pixels = malloc((size_t)total + 1);
    c->rows = malloc((size_t)po->h * sizeof *c->rows + 1);
    if (!c->pixels || !c->rows) png_error(c->png, "out of memory for the image");
    for (png_uint_32 y = 0; y < po->h; y++) c->rows[y] = c->pixels + (size_t)y * stride;
    png_read_image(c->png, c->rows);
    if (po->palette && expand_palette(c, po) != LM_OK) return lm_error_status();
    collect_text(c, text);
    /* text after the image data is a bonus: a damaged tail keeps the pixels */
    if (!setjmp(png_jmpbuf(c->png))) {
        png_read_end(c->png, c->info);
        collect_text(c, text);
    }
    return LM_OK;
}

/* The decoded samples as floats of dtype dt's scale (0..1 for a float
 * dtype, rounded pixel values otherwise), CHW or HWC. */
static void to_f32(const png_ctx *c, const png_out *po, lm_dtype dt, bool hwc, float *f)
{
    size_t hw = (size_t)po->w * po->h, ch = (size_t)po->channels;
    double max = po->depth == 16 ? 65535 : 255;
    double scale = lm_dtype_is_float(dt) ? 1 / max : dt == LM_U8 ? 255 / max : 1;
    for (size_t p = 0; p < hw; p++)
        for (size_t k = 0; k < ch; k++) {
            size_t at = p * ch + k;
            double v = po->depth == 16 ? ((const uint16_t *)c->pixels)[at] : c->pixels[at];
            v *= scale;
            if (!lm_dtype_is_float(dt)) v = floor(v + 0.5);
            f[hwc ? at : k * hw + p] = (float)v;
        }
}

/* Interleaved samples -> tensor of the asked dtype and layout. */
static lm_array *to_array(const png_ctx *c, const png_out *po, const lm_png_opts *o)
{
    size_t hw = (size_t)po->w * po->h, ch = (size_t)po->channels, n = hw * ch;
    lm_dtype dt = o->has_dtype ? o->dtype : po->depth == 16 ? LM_I32 : LM_U8;
    float *f = malloc(n * sizeof *f + 1);
    void *out = malloc(n * lm_dtype_size(dt) + 1);
    if (!f || !out) {
        free(f);
        free(out);
        lm_error_set(LM_ERR_NOMEM, "read_png %s: out of memory", c->what);
        return NULL;
    }
    bool hwc = o->layout == LM_LAYOUT_HWC;
    if (po->depth == 8 && dt == LM_U8) {
        /* the common case: bytes in, bytes out, only the layout changes */
        unsigned char *u = out;
        if (hwc) memcpy(u, c->pixels, n);
        else
            for (size_t p = 0; p < hw; p++)
                for (size_t k = 0; k < ch; k++) u[k * hw + p] = c->pixels[p * ch + k];
        free(f);
        f = NULL;
    }
    if (f) to_f32(c, po, dt, hwc, f);
    if (f) lm_convert(out, dt, f, LM_F32, n);
    free(f);
    int64_t shape[3];
    if (hwc) { shape[0] = po->h; shape[1] = po->w; shape[2] = po->channels; }
    else { shape[0] = po->channels; shape[1] = po->h; shape[2] = po->w; }
    lm_array *a = lm_from_data(3, shape, dt, out, lm_device_cpu());
    free(out);
    return a;
}

lm_array *lm_png_read_mem(const void *data, size_t size, const char *what,
                          const lm_png_opts *o, lm_tensor_set *text)
{
    lm_png_opts def;
    if (!o) { lm_png_opts_init(&def); o = &def; }
    png_ctx ctx = {.what = what, .data = data, .size = size};
    png_out po = {0};
    lm_status st = decode(&ctx, &po, text);
    lm_array *a = st == LM_OK ? to_array(&ctx, &po, o) : NULL;
    png_destroy_read_struct(ctx.png ? &ctx.png : NULL, ctx.info ? &ctx.info : NULL, NULL);
    free(ctx.pixels);
    free(ctx.rows);
    return a;
}

lm_array *lm_png_read(const char *path, const lm_png_opts *o, lm_tensor_set *text)
{
    void *data;
    size_t size;
    if (lm_io_read_all(path, &data, &size) != LM_OK) return NULL;
    lm_array *a = lm_png_read_mem(data, size, path, o, text);
    free(data);
    return a;
}

/* As lm_png_read with dtype f32 (CHW), into plain memory: no lm_array is
 * made, so a worker thread may read while the main thread evaluates. */
lm_status lm_png_read_f32(const char *path, lm_png_f32 *img)
{
    void *data;
    size_t size;
    memset(img, 0, sizeof *img);
    if (lm_io_read_all(path, &data, &size) != LM_OK) return lm_error_status();
    png_ctx ctx = {.what = path, .data = data, .size = size};
    png_out po = {0};
    lm_status st = decode(&ctx, &po, NULL);
    size_t n = (size_t)po.w * po.h * (size_t)po.channels;
    if (st == LM_OK && !(img->data = malloc(n * sizeof *img->data + 1)))
        st = lm_error_set(LM_ERR_NOMEM, "read_png %s: out of memory", path);
    if (st == LM_OK) {
        to_f32(&ctx, &po, LM_F32, false, img->data);
        img->c = po.channels;
        img->h = po.h;
        img->w = po.w;
        img->bits = po.depth == 16 ? 16 : 8;
    }
    png_destroy_read_struct(ctx.png ? &ctx.png : NULL, ctx.info ? &ctx.info : NULL, NULL);
    free(ctx.pixels);
    free(ctx.rows);
    free(data);
    return st;
}
