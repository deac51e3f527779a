/* xyz_grid.h - X/Y/Z plots, shared by `lumen generate --xyz`
 * (repl/cli_generate.c) and `lumen batch --xyz` / lm.batch (lua/l_xyz.c,
 * lua/l_batch_xyz.lua): the axes' parsing, their labels, the grid files'
 * names and the labelled grid image, its labels drawn with FreeType in a
 * TrueType font (Debian fonts-dejavu-core's DejaVu Sans by default, found by
 * path at run time; --font FILE another).  In lua/ so that lumen.so (stock
 * lua5.4's `require "lumen"`) has it as the lumen binary does: both link
 * FreeType. */
#ifndef LM_XYZ_GRID_H
#define LM_XYZ_GRID_H

#include <stddef.h>
#include <stdint.h>

/* one axis: "NAME=V1,V2,..." (A1111's comma list; a value in double quotes
 * may hold commas) */
#define LM_XYZ_MAX_VALUES 64
typedef struct lm_xyz_axis {
    char name[64];
    int n;
    char *values[LM_XYZ_MAX_VALUES];   /* malloc'd */
} lm_xyz_axis;

/* 0, or -1 with why (names the text) */
int lm_xyz_parse(const char *text, lm_xyz_axis *ax, char *why, size_t n);
void lm_xyz_free(lm_xyz_axis *ax);

/* The axes lumen generate knows: {NAME, the label's title} rows, ended by
 * {NULL, NULL}; a NULL title labels a cell with the value alone (prompt_sr) */
extern const char *const lm_xyz_axes[][2];
/* the label of axis ax at value k: "Seed: 3" ("NAME: value" for an axis of
 * no row; prompt_sr's is the value) */
void lm_xyz_label(const lm_xyz_axis *ax, int k, char *buf, size_t n);
/* grid z of nz's file: out's "%d" (or "%05d") replaced by "grid" (or
 * "grid_Z"), else "_grid" ("_grid_Z") before the extension; malloc'd */
char *lm_xyz_grid_name(const char *out, int z, int nz);

/* The font: path, or the first of the usual places (DejaVu Sans).  NULL with
 * why (the paths looked at, the package to install, --font). */
typedef struct lm_grid_font lm_grid_font;
lm_grid_font *lm_grid_font_open(const char *path, char *why, size_t n);
void lm_grid_font_close(lm_grid_font *f);
const char *lm_grid_font_path(const lm_grid_font *f);

/* One tile of a grid: [3,h,w] f32 in 0..1 (borrowed: lm_grid_compose only
 * reads it). */
typedef struct lm_grid_tile {
    float *rgb;
    int64_t h, w;
} lm_grid_tile;

/* The grid of nx * ny tiles (row-major, tile[iy * nx + ix]) under a band of
 * column labels xl[nx] (NULL: none) and beside a band of row labels yl[ny]
 * (NULL: none), with a title line above (NULL: none): [3,*gh,*gw] f32
 * malloc'd, white behind black text, or NULL with why.  The tiles may differ
 * in size (a hires_scale axis): every cell is as high as the highest tile
 * and as wide as the widest (one size for all, as A1111's grids: columns and
 * rows line up under their labels), and a smaller tile sits at its cell's
 * top left on white (A1111 pastes each image at its cell's corner too). */
float *lm_grid_compose(lm_grid_font *f, int nx, int ny, const lm_grid_tile *tiles, const char *const *xl,
                       const char *const *yl, const char *title, int64_t *gh, int64_t *gw, char *why,
                       size_t n);

#endif
