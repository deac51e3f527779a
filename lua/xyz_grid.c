/* xyz_grid.c - X/Y/Z plots' axes and labelled grids (xyz_grid.h). */
#include "xyz_grid.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <ft2build.h>
#include FT_FREETYPE_H

int lm_xyz_parse(const char *text, lm_xyz_axis *ax, char *why, size_t n)
{
    memset(ax, 0, sizeof *ax);
    const char *eq = strchr(text, '=');
    if (!eq || eq == text || (size_t)(eq - text) >= sizeof ax->name) {
        snprintf(why, n, "--xyz %s: expected NAME=V1,V2,... (seed=1,2,3)", text);
        return -1;
    }
    memcpy(ax->name, text, (size_t)(eq - text));
    ax->name[eq - text] = 0;
    const char *s = eq + 1;
    for (;;) {
        while (*s == ' ') s++;
        char buf[1024];
        size_t k = 0;
        if (*s == '"') {   /* a quoted value: commas kept, \" and \\ escaped */
            for (s++; *s && *s != '"'; s++) {
                if (*s == '\\' && s[1]) s++;
                if (k + 1 < sizeof buf) buf[k++] = *s;
            }
            if (*s != '"') {
                snprintf(why, n, "--xyz %s: a value's double quote is not closed", text);
                lm_xyz_free(ax);
                return -1;
            }
            s++;
            while (*s == ' ') s++;
        } else {
            for (; *s && *s != ','; s++)
                if (k + 1 < sizeof buf) buf[k++] = *s;
            while (k && buf[k - 1] == ' ') k--;
        }
        buf[k] = 0;
        if (!k) {
            snprintf(why, n, "--xyz %s: an empty value", text);
            lm_xyz_free(ax);
            return -1;
        }
        if (ax->n == LM_XYZ_MAX_VALUES) {
            snprintf(why, n, "--xyz %s: at most %d values", text, LM_XYZ_MAX_VALUES);
            lm_xyz_free(ax);
            return -1;
        }
        if (!(ax->values[ax->n++] = strdup(buf))) {
            snprintf(why, n, "out of memory");
            lm_xyz_free(ax);
            return -1;
        }
        if (*s == ',') {
            s++;
            continue;
        }
        if (*s) {
            snprintf(why, n, "--xyz %s: expected a comma after a quoted value", text);
            lm_xyz_free(ax);
            return -1;
        }
        return 0;
    }
}

void lm_xyz_free(lm_xyz_axis *ax)
{
    for (int i = 0; i < ax->n; i++) free(ax->values[i]);
    ax->n = 0;
}

const char *const lm_xyz_axes[][2] = {
    {"seed", "Seed"}, {"cfg", "CFG Scale"}, {"steps", "Steps"}, {"sampler", "Sampler"},
    {"strength", "Denoising"}, {"clip_skip", "Clip skip"}, {"prompt_sr", NULL},
    {"variation_seed", "Var. seed"}, {"variation_strength", "Var. strength"},
    {"hires_steps", "Hires steps"}, {"hires_denoise", "Hires denoise"}, {"hires_scale", "Hires upscale"},
    {NULL, NULL}};

void lm_xyz_label(const lm_xyz_axis *ax, int k, char *buf, size_t n)
{
    const char *title = ax->name;
    for (int i = 0; lm_xyz_axes[i][0]; i++)
        if (!strcmp(lm_xyz_axes[i][0], ax->name)) title = lm_xyz_axes[i][1];
    if (!title) snprintf(buf, n, "%s", ax->values[k]);
    else snprintf(buf, n, "%s: %s", title, ax->values[k]);
}

char *lm_xyz_grid_name(const char *out, int z, int nz)
{
    size_t len = strlen(out) + 40;
    char *r = malloc(len), tag[32];
    if (!r) return NULL;
    if (nz > 1) snprintf(tag, sizeof tag, "grid_%d", z);
    else snprintf(tag, sizeof tag, "grid");
    const char *pct = strchr(out, '%');
    if (pct) {
        const char *d = pct + 1;
        while (*d >= '0' && *d <= '9') d++;
        if (*d == 'd') {
            snprintf(r, len, "%.*s%s%s", (int)(pct - out), out, tag, d + 1);
            return r;
        }
    }
    const char *slash = strrchr(out, '/'), *dot = strrchr(out, '.');
    if (!dot || (slash && dot < slash)) dot = out + strlen(out);
    snprintf(r, len, "%.*s_%s%s", (int)(dot - out), out, tag, dot);
    return r;
}

struct lm_grid_font {
    FT_Library lib;
    FT_Face face;
    char path[1024];
};

static const char *const FONT_PATHS[] = {
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",   /* Debian, Ubuntu: fonts-dejavu-core */
    "/usr/share/fonts/TTF/DejaVuSans.ttf",               /* Arch */
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",            /* Fedora */
    "/usr/local/share/fonts/DejaVuSans.ttf",
    NULL};

lm_grid_font *lm_grid_font_open(const char *path, char *why, size_t n)
{
    lm_grid_font *f = calloc(1, sizeof *f);
    if (!f) {
        snprintf(why, n, "out of memory");
        return NULL;
    }
    if (!path) {
        struct stat sb;
        for (int i = 0; FONT_PATHS[i] && !path; i++)
            if (stat(FONT_PATHS[i], &sb) == 0 && S_ISREG(sb.st_mode)) path = FONT_PATHS[i];
        if (!path) {
            size_t at = (size_t)snprintf(why, n, "no font for the grid's labels: looked for DejaVu Sans at ");
            for (int i = 0; FONT_PATHS[i] && at < n; i++)
                at += (size_t)snprintf(why + at, n - at, "%s%s", i ? ", " : "", FONT_PATHS[i]);
            if (at < n)
                snprintf(why + at, n - at, "; install fonts-dejavu-core or give --font FILE (a TrueType "
                         "or OpenType font)");
            free(f);
            return NULL;
        }
    }
    snprintf(f->path, sizeof f->path, "%s", path);
    FT_Error e = FT_Init_FreeType(&f->lib);
    if (e) {
        snprintf(why, n, "FreeType could not start (error %d)", e);
        free(f);
        return NULL;
    }
    if ((e = FT_New_Face(f->lib, path, 0, &f->face)) != 0) {
        snprintf(why, n, "font %s: FreeType cannot read it (%s, error %d)", path,
                 e == FT_Err_Unknown_File_Format ? "not a font file" : e == FT_Err_Cannot_Open_Resource
                 ? "cannot open it" : "a malformed font", e);
        FT_Done_FreeType(f->lib);
        free(f);
        return NULL;
    }
    if (!FT_IS_SCALABLE(f->face)) {
        snprintf(why, n, "font %s: not a scalable (TrueType or OpenType) font", path);
        lm_grid_font_close(f);
        return NULL;
    }
    return f;
}

void lm_grid_font_close(lm_grid_font *f)
{
    if (!f) return;
    if (f->face) FT_Done_Face(f->face);
    FT_Done_FreeType(f->lib);
    free(f);
}

const char *lm_grid_font_path(const lm_grid_font *f) { return f->path; }

/* the next code point of UTF-8 text (U+FFFD for a bad byte) */
static unsigned next_cp(const char **s)
{
    const unsigned char *p = (const unsigned char *)*s;
    unsigned c = p[0];
    int len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (!len) {
        (*s)++;
        return 0xfffd;
    }
    unsigned cp = len == 1 ? c : c & (0x7fu >> len);
    for (int i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80) {
            *s += i;
            return 0xfffd;
        }
        cp = cp << 6 | (p[i] & 0x3f);
    }
    *s += len;
    return cp;
}

/* the advance of text in pixels at the face's size */
static int64_t text_width(FT_Face face, const char *text)
{
    int64_t w = 0;
    for (const char *s = text; *s;) {
        unsigned cp = next_cp(&s);
        if (!FT_Load_Char(face, cp, FT_LOAD_DEFAULT)) w += face->glyph->advance.x >> 6;
    }
    return w;
}

/* draws text with its baseline at y, from x, clipped to [x0, x1) */
static void draw_text(FT_Face face, float *img, int64_t H, int64_t W, const char *text, int64_t x,
                      int64_t y, int64_t x0, int64_t x1)
{
    for (const char *s = text; *s;) {
        unsigned cp = next_cp(&s);
        if (FT_Load_Char(face, cp, FT_LOAD_RENDER)) continue;
        FT_GlyphSlot g = face->glyph;
        FT_Bitmap *b = &g->bitmap;
        for (unsigned r = 0; r < b->rows; r++)
            for (unsigned c = 0; c < b->width; c++) {
                int64_t px = x + g->bitmap_left + c, py = y - g->bitmap_top + r;
                if (px < x0 || px >= x1 || px < 0 || px >= W || py < 0 || py >= H) continue;
                float a = b->buffer[r * (unsigned)b->pitch + c] / 255.0f;
                for (int ch = 0; ch < 3; ch++) {
                    float *v = img + ((int64_t)ch * H + py) * W + px;
                    *v = *v * (1 - a);   /* black text */
                }
            }
        x += g->advance.x >> 6;
    }
}

float *lm_grid_compose(lm_grid_font *f, int nx, int ny, const lm_grid_tile *tiles, const char *const *xl,
                       const char *const *yl, const char *title, int64_t *gh, int64_t *gw, char *why,
                       size_t n)
{
    /* every cell the largest tile's size (A1111's grids: one size for all) */
    int64_t th = 0, tw = 0;
    for (int i = 0; i < nx * ny; i++) {
        if (!tiles[i].rgb || tiles[i].h < 1 || tiles[i].w < 1) {
            snprintf(why, n, "tile %d is %lldx%lld (no pixels)", i + 1, (long long)tiles[i].w,
                     (long long)tiles[i].h);
            return NULL;
        }
        if (tiles[i].h > th) th = tiles[i].h;
        if (tiles[i].w > tw) tw = tiles[i].w;
    }
    /* A1111's draw_grid_annotations: a font of (width + height) / 25 pixels
     * (here of a cell, at least 10), labels centred over columns and beside
     * rows on white */
    int64_t size = (tw + th) / 25;
    if (size < 10) size = 10;
    if (FT_Set_Pixel_Sizes(f->face, 0, (FT_UInt)size)) {
        snprintf(why, n, "font %s: cannot be set to %lld pixels", f->path, (long long)size);
        return NULL;
    }
    FT_Face face = f->face;
    int64_t asc = face->size->metrics.ascender >> 6, desc = -(face->size->metrics.descender >> 6);
    int64_t line = asc + desc, pad = size / 2;
    int64_t left = 0, top = 0;
    if (yl)
        for (int i = 0; i < ny; i++) {
            int64_t w = text_width(face, yl[i]) + 2 * pad;
            if (w > left) left = w;
        }
    if (left > 2 * tw) left = 2 * tw;   /* longer labels are clipped */
    if (xl) top += line + 2 * pad;
    if (title) top += line + 2 * pad;
    int64_t W = left + nx * tw, H = top + ny * th;
    if (title) {
        int64_t w = text_width(face, title) + 2 * pad;
        if (w > W && w < 4 * W) {   /* the title widens the grid rather than be clipped */
            left += (w - W) / 2;
            W = w;
        }
    }
    float *img = malloc(sizeof *img * 3 * (size_t)H * (size_t)W);
    if (!img) {
        snprintf(why, n, "out of memory for a %lldx%lld grid", (long long)W, (long long)H);
        return NULL;
    }
    for (int64_t i = 0; i < 3 * H * W; i++) img[i] = 1;
    for (int iy = 0; iy < ny; iy++)
        for (int ix = 0; ix < nx; ix++) {
            const lm_grid_tile *t = &tiles[iy * nx + ix];
            for (int ch = 0; ch < 3; ch++)
                for (int64_t r = 0; r < t->h; r++)
                    memcpy(img + ((int64_t)ch * H + top + iy * th + r) * W + left + ix * tw,
                           t->rgb + ((int64_t)ch * t->h + r) * t->w, sizeof *img * (size_t)t->w);
        }
    int64_t y = pad + asc;
    if (title) {
        draw_text(face, img, H, W, title, (W - text_width(face, title)) / 2, y, 0, W);
        y += line + 2 * pad;
    }
    if (xl)
        for (int ix = 0; ix < nx; ix++) {
            int64_t x0 = left + ix * tw, w = text_width(face, xl[ix]);
            draw_text(face, img, H, W, xl[ix], x0 + (w < tw ? (tw - w) / 2 : 0), y, x0, x0 + tw);
        }
    if (yl)
        for (int iy = 0; iy < ny; iy++) {
            int64_t w = text_width(face, yl[iy]);
            int64_t x = w + 2 * pad < left ? (left - w) / 2 : pad;
            draw_text(face, img, H, W, yl[iy], x, top + iy * th + (th + asc - desc) / 2, 0, left);
        }
    *gh = H;
    *gw = W;
    return img;
}
