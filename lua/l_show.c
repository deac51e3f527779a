/* l_show.c - lm.show and lm.show_protocol: tensors and PNG files drawn
 * inline in the terminal (lua/term_image.c chooses the protocol and
 * libchafa encodes).  The pixels are the ones lm.save would write. */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <unistd.h>
#include "l_internal.h"
#include "core/io/io.h"
#include "core/io/image.h"
#include "term_image.h"

static const char *const SHOW_OPTS[] = {"width", "height", "layout", "range", "protocol",
                                        "string", NULL};

/* The layout of a 3-D image: given, else CHW when the first axis could be
 * channels (1-4), else HWC. */
static lm_layout pick_layout(lua_State *L, int opts, const lm_array *a)
{
    const char *l = lm_lua_opt_str(L, opts, "lm.show", "layout", NULL);
    if (l) {
        if (!strcmp(l, "CHW") || !strcmp(l, "chw")) return LM_LAYOUT_CHW;
        if (!strcmp(l, "HWC") || !strcmp(l, "hwc")) return LM_LAYOUT_HWC;
        luaL_error(L, "lm.show: layout must be \"CHW\" or \"HWC\", not \"%s\"", l);
    }
    int d = a->ndim == 4 ? 1 : 0;
    if (a->ndim >= 3 && (a->shape[d] < 1 || a->shape[d] > 4) && a->shape[a->ndim - 1] >= 1 &&
        a->shape[a->ndim - 1] <= 4)
        return LM_LAYOUT_HWC;
    return LM_LAYOUT_CHW;
}

static void read_range(lua_State *L, int opts, lm_png_opts *o)
{
    if (!opts) return;
    lua_getfield(L, opts, "range");
    if (!lua_isnil(L, -1)) {
        if (!lua_istable(L, -1)) luaL_error(L, "lm.show: range must be {lo, hi}");
        lua_rawgeti(L, -1, 1);
        lua_rawgeti(L, -2, 2);
        if (!lua_isnumber(L, -2) || !lua_isnumber(L, -1)) luaL_error(L, "lm.show: range must be {lo, hi}");
        o->lo = lua_tonumber(L, -2);
        o->hi = lua_tonumber(L, -1);
        o->has_range = true;
        lua_pop(L, 2);
    }
    lua_pop(L, 1);
}

/* The 8-bit pixels of argument 1 (a tensor, or a PNG file's path) as
 * lm.save would write them; a batch [N,C,H,W] becomes a contact sheet. */
static void image_of(lua_State *L, int opts, lm_png_u8 *img)
{
    lm_png_opts o;
    lm_png_opts_init(&o);
    lm_array *a;
    if (lua_type(L, 1) == LUA_TSTRING) {
        const char *path = lua_tostring(L, 1);
        o.layout = LM_LAYOUT_HWC;
        o.dtype = LM_U8;
        o.has_dtype = true;
        a = lm_png_read(path, &o, NULL);
        if (!a) lm_lua_error(L);
        lm_status st = lm_png_pixels8(a, &o, path, img);
        lm_array_release(a);
        if (st != LM_OK) lm_lua_error(L);
        return;
    }
    a = lm_lua_check_array(L, 1);
    o.layout = pick_layout(L, opts, a);
    read_range(L, opts, &o);
    lm_array *grid = NULL;
    if (a->ndim == 4) {
        grid = lm_image_grid_batch(a, 0, 2, 0, o.layout);
        if (!grid) lm_lua_error(L);
        a = grid;
    }
    lm_status st = lm_png_pixels8(a, &o, "lm.show", img);
    if (grid) lm_array_release(grid);
    if (st != LM_OK) lm_lua_error(L);
}

static int l_show(lua_State *L)
{
    int opts = lm_lua_check_opts(L, 2, "lm.show", SHOW_OPTS);
    if (lua_type(L, 1) != LUA_TSTRING && !lm_lua_testtensor(L, 1))
        return luaL_error(L, "lm.show: expected a tensor or a PNG file's path, got %s",
                          luaL_typename(L, 1));
    lm_term_size size = {(int)lm_lua_opt_int(L, opts, "lm.show", "width", 0),
                         (int)lm_lua_opt_int(L, opts, "lm.show", "height", 0)};
    if (size.cols < 0 || size.rows < 0 || size.cols > 1000 || size.rows > 1000)
        return luaL_error(L, "lm.show: width %d and height %d must be 0..1000 cells",
                          size.cols, size.rows);
    bool as_string = lm_lua_opt_bool(L, opts, "lm.show", "string", false);
    const char *pname = lm_lua_opt_str(L, opts, "lm.show", "protocol", NULL);
    lm_term_proto p;
    const char *why = "protocol=\"off\"";
    if (pname) {
        if (!lm_term_proto_parse(pname, &p))
            return luaL_error(L, "lm.show: protocol \"%s\" is not one of kitty, iterm, sixel, "
                              "blocks, off", pname);
    } else if (lm_term_detect(&p, &why) != LM_OK) {
        return lm_lua_error(L);
    }
    if (as_string && p == LM_TERM_OFF && !pname) p = LM_TERM_BLOCKS;
    if (p == LM_TERM_OFF || (!as_string && !isatty(STDOUT_FILENO))) {
        lua_pushboolean(L, 0);
        lua_pushstring(L, p == LM_TERM_OFF ? why : "stdout is not a terminal");
        return 2;
    }
    lm_png_u8 img;
    image_of(L, opts, &img);
    unsigned char *rgba = lm_term_rgba(&img);
    free(img.data);
    if (!rgba) return lm_lua_error(L);
    char *s;
    size_t n;
    lm_status st = lm_term_encode(rgba, (int)img.w, (int)img.h, p, &size, &s, &n);
    free(rgba);
    if (st != LM_OK) return lm_lua_error(L);
    if (as_string) {
        lua_pushlstring(L, s, n);
        free(s);
        return 1;
    }
    fflush(stdout);
    bool ok = fwrite(s, 1, n, stdout) == n && fflush(stdout) == 0;
    free(s);
    if (!ok) return luaL_error(L, "lm.show: writing to the terminal failed");
    lua_pushboolean(L, 1);
    lua_pushstring(L, lm_term_proto_name(p));
    return 2;
}

static int l_show_protocol(lua_State *L)
{
    lm_term_proto p;
    const char *why;
    if (lm_term_detect(&p, &why) != LM_OK) return lm_lua_error(L);
    lua_pushstring(L, lm_term_proto_name(p));
    lua_pushstring(L, why);
    return 2;
}

static const lm_lua_func show_funcs[] = {
    {"show", l_show,
     "lm.show(t_or_path, {width=, height=, layout=, range=, protocol=, string=}) -> shown, how\n"
     "Draws an image inline in the terminal: a tensor ([H,W], [C,H,W] or [H,W,C] with\n"
     "1-4 channels, any dtype, the pixels lm.save writes: floats map range={0,1} to\n"
     "0..255; a batch [N,C,H,W] as a contact sheet) or a PNG file.  width/height: the\n"
     "most cells it takes, filled (default: the terminal's width and height less two\n"
     "lines, never enlarged past the image's pixels, two a cell with half blocks).\n"
     "layout: \"CHW\" or \"HWC\" (default CHW when the first axis has 1-4 entries).\n"
     "The protocol is lm.show_protocol()'s (kitty graphics, iTerm2, sixel or truecolor\n"
     "half blocks) unless protocol= names one.  Returns true and the protocol, or\n"
     "false and why nothing was printed (stdout not a terminal, LUMEN_IMAGES=off).\n"
     "string=true returns the escape sequences instead of writing them."},
    {"show_protocol", l_show_protocol,
     "lm.show_protocol() -> name, why\n"
     "How lm.show draws: \"kitty\", \"iterm\", \"sixel\", \"blocks\" or \"off\", and why.\n"
     "LUMEN_IMAGES=kitty|iterm|sixel|blocks|off chooses; else the environment\n"
     "(KITTY_WINDOW_ID, TERM, TERM_PROGRAM, LC_TERMINAL; half blocks inside tmux or\n"
     "screen), else the terminal's answers to kitty's graphics query and the\n"
     "device-attributes query (sixel), waited for at most 200 ms (no answer: half\n"
     "blocks).  \"off\" when stdout is not a terminal.  Asked once per process."},
    {NULL, NULL, NULL},
};

void lm_lua_open_show(lua_State *L);   /* called by luaopen_lumen (l_module.c) */
void lm_lua_open_show(lua_State *L)
{
    lm_lua_register(L, "lm.", show_funcs);
}
