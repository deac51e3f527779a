/* l_xyz.c - lm.image.xyz_axis, lm.image.xyz_grid, lm.image.xyz_grid_name:
 * the X/Y/Z plots of lua/xyz_grid.c (lumen generate --xyz's) for Lua and for
 * lm.batch's xyz= (lua/l_batch_xyz.lua), so a grid from `lumen batch` is
 * drawn by the code that draws `lumen generate`'s. */
#include <stdlib.h>
#include <string.h>
#include "l_internal.h"
#include "lumen_lua.h"
#include "xyz_grid.h"

/* lm.image.xyz_axis(text) -> {name=, values={...}, labels={...}} */
static int l_xyz_axis(lua_State *L)
{
    const char *text = luaL_checkstring(L, 1);
    lm_xyz_axis ax;
    char why[1200];
    if (lm_xyz_parse(text, &ax, why, sizeof why)) return luaL_error(L, "%s", why);
    lua_createtable(L, 0, 3);
    lua_pushstring(L, ax.name);
    lua_setfield(L, -2, "name");
    lua_createtable(L, ax.n, 0);
    lua_createtable(L, ax.n, 0);
    for (int k = 0; k < ax.n; k++) {
        char label[1200];
        lm_xyz_label(&ax, k, label, sizeof label);
        lua_pushstring(L, ax.values[k]);
        lua_rawseti(L, -3, k + 1);
        lua_pushstring(L, label);
        lua_rawseti(L, -2, k + 1);
    }
    lm_xyz_free(&ax);
    lua_setfield(L, -3, "labels");
    lua_setfield(L, -2, "values");
    return 1;
}

/* lm.image.xyz_grid_name(out, z, nz) -> name */
static int l_xyz_grid_name(lua_State *L)
{
    const char *out = luaL_checkstring(L, 1);
    int z = (int)luaL_checkinteger(L, 2), nz = (int)luaL_checkinteger(L, 3);
    char *r = lm_xyz_grid_name(out, z, nz);
    if (!r) return luaL_error(L, "lm.image.xyz_grid_name: out of memory");
    lua_pushstring(L, r);
    free(r);
    return 1;
}

/* the strings of opts[field] (a list of n), in s; false when absent */
static bool opt_labels(lua_State *L, int opts, const char *field, int n, const char **s)
{
    if (lua_getfield(L, opts, field) == LUA_TNIL) {
        lua_pop(L, 1);
        return false;
    }
    luaL_checktype(L, -1, LUA_TTABLE);
    if ((int)luaL_len(L, -1) != n) luaL_error(L, "lm.image.xyz_grid: %s has %d labels, want %d", field,
                                              (int)luaL_len(L, -1), n);
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, -1, i + 1);
        s[i] = luaL_tolstring(L, -1, NULL);   /* kept on the stack */
        lua_remove(L, -2);
        lua_insert(L, -2);   /* under the list */
    }
    lua_pop(L, 1);
    return true;
}

/* lm.image.xyz_grid(tiles, {cols=, xlabels=, ylabels=, title=, font=}) -> [3,H,W] */
static int l_xyz_grid(lua_State *L)
{
    static const char *const known[] = {"cols", "xlabels", "ylabels", "title", "font", NULL};
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TTABLE);
    lm_lua_check_opts(L, 2, "lm.image.xyz_grid", known);
    int n = (int)luaL_len(L, 1);
    int nx = (int)lm_lua_opt_num(L, 2, "lm.image.xyz_grid", "cols", n);
    if (n < 1 || nx < 1 || n % nx)
        return luaL_error(L, "lm.image.xyz_grid: %d tiles do not make rows of cols = %d", n, nx);
    int ny = n / nx;
    if (nx > LM_XYZ_MAX_VALUES || ny > LM_XYZ_MAX_VALUES)
        return luaL_error(L, "lm.image.xyz_grid: at most %d columns and rows", LM_XYZ_MAX_VALUES);
    luaL_checkstack(L, 2 * LM_XYZ_MAX_VALUES + 8, "lm.image.xyz_grid");
    const char *xl[LM_XYZ_MAX_VALUES], *yl[LM_XYZ_MAX_VALUES];
    bool hx = opt_labels(L, 2, "xlabels", nx, xl), hy = opt_labels(L, 2, "ylabels", ny, yl);
    lua_getfield(L, 2, "title");
    const char *title = lua_isnil(L, -1) ? NULL : luaL_checkstring(L, -1);
    lua_getfield(L, 2, "font");
    const char *fontpath = lua_isnil(L, -1) ? NULL : luaL_checkstring(L, -1);
    lm_grid_tile *tiles = lua_newuserdatauv(L, sizeof *tiles * (size_t)n, 0);
    memset(tiles, 0, sizeof *tiles * (size_t)n);
    lm_status st = LM_OK;
    char why[4200] = "";
    /* the shapes first (a Lua error leaves nothing allocated), then the
     * pixels; the tiles may differ in size (lm_grid_compose pads them) */
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, 1, i + 1);
        lm_array *t = lm_lua_check_array(L, -1);
        if (t->ndim != 3 || t->shape[0] != 3 || t->shape[1] < 1 || t->shape[2] < 1) {
            char msg[256];
            size_t at = (size_t)snprintf(msg, sizeof msg, "tile %d: want [3, H, W], not [", i + 1);
            for (int d = 0; d < t->ndim && at < sizeof msg; d++)
                at += (size_t)snprintf(msg + at, sizeof msg - at, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
            if (at < sizeof msg) snprintf(msg + at, sizeof msg - at, "]");
            return luaL_error(L, "lm.image.xyz_grid: %s", msg);
        }
        tiles[i].h = t->shape[1];
        tiles[i].w = t->shape[2];
        lua_pop(L, 1);
    }
    for (int i = 0; i < n && st == LM_OK; i++) {
        lua_rawgeti(L, 1, i + 1);
        lm_array *t = lm_lua_check_array(L, -1);
        if (!(tiles[i].rgb = malloc(sizeof *tiles[i].rgb * 3 * (size_t)(tiles[i].h * tiles[i].w))))
            st = lm_error_set(LM_ERR_NOMEM, "lm.image.xyz_grid: out of memory");
        else st = lm_array_read(t, tiles[i].rgb, LM_F32);
        lua_pop(L, 1);
    }
    lm_grid_font *font = NULL;
    float *g = NULL;
    int64_t gh = 0, gw = 0;
    if (st == LM_OK && (font = lm_grid_font_open(fontpath, why, sizeof why)))
        g = lm_grid_compose(font, nx, ny, tiles, hx ? xl : NULL, hy ? yl : NULL, title, &gh, &gw, why,
                            sizeof why);
    lm_grid_font_close(font);
    for (int i = 0; i < n; i++) free(tiles[i].rgb);
    if (st != LM_OK) return lm_lua_error(L);
    if (!g) return luaL_error(L, "lm.image.xyz_grid: %s", why);
    int64_t shape[3] = {3, gh, gw};
    lm_array *img = lm_from_data(3, shape, LM_F32, g, lm_device_cpu());
    free(g);
    return lm_lua_push_array(L, img);
}

static const lm_lua_func xyz_funcs[] = {
    {"xyz_axis", l_xyz_axis,
     "lm.image.xyz_axis(text) -> {name=, values={...}, labels={...}}\n"
     "An X/Y/Z plot axis as lumen generate --xyz reads it: \"NAME=V1,V2,...\" (a value in\n"
     "double quotes may hold commas), with each value's grid label (\"Seed: 3\")."},
    {"xyz_grid", l_xyz_grid,
     "lm.image.xyz_grid(tiles, {cols=, xlabels=, ylabels=, title=, font=}) -> t\n"
     "The labelled grid of lumen generate --xyz: tiles (a list of [3,H,W] images, rows of\n"
     "cols) under column labels, beside row labels, under a title, drawn with FreeType in\n"
     "DejaVu Sans (or font, a TrueType/OpenType file): [3,H,W] f32 in 0..1.  Tiles may\n"
     "differ in size: every cell is the largest tile's size (as A1111's), a smaller tile\n"
     "at its cell's top left on white."},
    {"xyz_grid_name", l_xyz_grid_name,
     "lm.image.xyz_grid_name(out, z, nz) -> name\n"
     "The file of grid z (0-based) of nz: out's %d made \"grid\" (\"grid_Z\"), else \"_grid\"\n"
     "before the extension, as lumen generate names its grids."},
    {NULL, NULL, NULL},
};

void lm_lua_open_xyz(lua_State *L)
{
    lua_getfield(L, -1, "image");
    lm_lua_register(L, "lm.image.", xyz_funcs);
    lua_pop(L, 1);
}
