/* l_models.c - lm.models: pretrained TF.js layers models (models/tfjs.h) from
 * Lua.  A model is a userdata that is called like a function on image
 * tensors; its values are always 0..1 on the Lua side whatever range the
 * network itself works in (esrgan-slim/-medium take 0..255). */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include "models/tfjs.h"
#include "l_internal.h"

#define LM_LUA_MODEL "lumen.model"

/* l_diffusion.c: diffusion pipelines load through lm.models.load too */
bool lm_lua_sd_is_pipeline(const char *path);
int lm_lua_sd_pipeline_open(lua_State *L);

typedef struct lua_model {
    lm_tfjs_model *m;
    double range;
    char path[1024];
    char range_from[1024];   /* where the range came from (print(model)) */
} lua_model;

static lua_model *check_model(lua_State *L, int idx)
{
    lua_model *u = luaL_checkudata(L, idx, LM_LUA_MODEL);
    if (!u->m) luaL_error(L, "model was freed");
    return u;
}

/* range= as a number R or a table {0, R} */
static double opt_range(lua_State *L, double dflt)
{
    if (lua_type(L, 2) != LUA_TTABLE || lua_getfield(L, 2, "range") == LUA_TNIL) {
        if (lua_type(L, 2) == LUA_TTABLE) lua_pop(L, 1);
        return dflt;
    }
    double r = -1;
    if (lua_type(L, -1) == LUA_TNUMBER) r = lua_tonumber(L, -1);
    else if (lua_type(L, -1) == LUA_TTABLE && lua_rawlen(L, -1) == 2) {
        lua_rawgeti(L, -1, 1);
        lua_rawgeti(L, -2, 2);
        bool nums = lua_type(L, -2) == LUA_TNUMBER && lua_type(L, -1) == LUA_TNUMBER;
        if (nums && lua_tonumber(L, -2) == 0) r = lua_tonumber(L, -1);
        lua_pop(L, 2);
    }
    lua_pop(L, 1);
    if (!(r > 0))
        luaL_error(L, "lm.models.load: range must be 1, 255 or {0, R} with R > 0 (the model's "
                   "value range)");
    return r;
}

static int l_load(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    if (lm_lua_sd_is_pipeline(name)) return lm_lua_sd_pipeline_open(L);
    static const char *const known[] = {"scale", "device", "range", "dtype", NULL};
    lm_lua_opts o;
    lm_lua_opts_read(L, 2, &o, "lm.models.load", known);
    int scale = (int)lm_lua_opt_int(L, 2, "lm.models.load", "scale", 4);
    lua_model *u = lua_newuserdatauv(L, sizeof *u, 0);
    memset(u, 0, sizeof *u);
    luaL_setmetatable(L, LM_LUA_MODEL);
    lm_tfjs_found f;
    if (lm_tfjs_find(name, scale, &f) != LM_OK) return lm_lua_error(L);
    snprintf(u->path, sizeof u->path, "%s", f.path);
    snprintf(u->range_from, sizeof u->range_from, "%s", f.range_from);
    u->range = f.range;
    u->m = lm_tfjs_load(u->path, o.device);
    if (!u->m) return lm_lua_error(L);
    if (o.dtype != LM_DTYPE_COUNT && lm_tfjs_set_dtype(u->m, o.dtype) != LM_OK) return lm_lua_error(L);
    /* the weights live outside Lua's heap: pace the collector by their
     * bytes as tensors do, or a loop of loads grows without bound */
    lm_lua_gc_account(L, lm_tfjs_nbytes(u->m));
    const char *r = lm_tfjs_meta(u->m, "lumen.range");
    if (r) {
        u->range = atof(r);
        snprintf(u->range_from, sizeof u->range_from, "lumen.range");
    }
    double given = opt_range(L, -1);
    if (given > 0) {
        u->range = given;
        snprintf(u->range_from, sizeof u->range_from, "range=");
    }
    if (!(u->range > 0)) return luaL_error(L, "lm.models.load: range must be positive");
    return 1;
}

/* model(x): [C,H,W] or [N,C,H,W], values 0..1 -> the output, lazy */
static int l_call(lua_State *L)
{
    lua_model *u = check_model(L, 1);
    lm_array *x = lm_lua_check_array(L, 2);
    bool single = x->ndim == 3;
    lm_array *x4 = single ? lm_unsqueeze(x, 0) : lm_array_retain(x);
    lm_array *xs = lm_binary_scalar(LM_OP_MUL, x4, u->range, false);
    lm_array *y = lm_tfjs_forward(u->m, xs);
    lm_array *ys = lm_binary_scalar(LM_OP_MUL, y, 1.0 / u->range, false);
    lm_array *r = single ? lm_squeeze(ys, 0) : lm_array_retain(ys);
    lm_array_release(x4);
    lm_array_release(xs);
    lm_array_release(y);
    lm_array_release(ys);
    return lm_lua_push_array(L, r);
}

static int l_upscale(lua_State *L)
{
    lua_model *u = check_model(L, 1);
    lm_array *img = lm_lua_check_array(L, 2);
    static const char *const known[] = {"tile", "overlap", NULL};
    lm_lua_check_opts(L, 3, "lm.models.upscale", known);
    lm_upscale_opts o;
    lm_upscale_opts_init(&o);
    o.range = u->range;
    o.tile = lm_lua_opt_int(L, 3, "lm.models.upscale", "tile", 0);
    o.overlap = lm_lua_opt_int(L, 3, "lm.models.upscale", "overlap", -1);
    if (o.tile < 0) return luaL_error(L, "lm.models.upscale: tile must be >= 0");
    return lm_lua_push_array(L, lm_tfjs_upscale(u->m, img, &o));
}

static int l_save(lua_State *L)
{
    lua_model *u = check_model(L, 1);
    const char *path = luaL_checkstring(L, 2);
    char range[32], scale[32];
    snprintf(range, sizeof range, "%g", u->range);
    snprintf(scale, sizeof scale, "%lld", (long long)lm_tfjs_scale(u->m));
    lm_kv kv[3] = {{"lumen.range", range}, {"lumen.scale", scale}, {"lumen.source", u->path}};
    if (lm_tfjs_save(u->m, path, 3, kv) != LM_OK) return lm_lua_error(L);
    return 0;
}

static int l_free(lua_State *L)
{
    lua_model *u = luaL_checkudata(L, 1, LM_LUA_MODEL);
    lm_tfjs_free(u->m);
    u->m = NULL;
    return 0;
}

static int l_tostring(lua_State *L)
{
    lua_model *u = luaL_checkudata(L, 1, LM_LUA_MODEL);
    if (!u->m) lua_pushliteral(L, "<model (freed)>");
    else {
        char buf[2400];
        snprintf(buf, sizeof buf, "<model %s x%d, %d layers, range 0..%g (%s), %s>", u->path,
                 (int)lm_tfjs_scale(u->m), lm_tfjs_layer_count(u->m), u->range, u->range_from,
                 lm_tfjs_device(u->m)->spec);
        lua_pushstring(L, buf);
    }
    return 1;
}

static int l_index(lua_State *L)
{
    lua_model *u = check_model(L, 1);
    const char *k = luaL_checkstring(L, 2);
    if (!strcmp(k, "scale")) lua_pushinteger(L, lm_tfjs_scale(u->m));
    else if (!strcmp(k, "range")) lua_pushnumber(L, u->range);
    else if (!strcmp(k, "range_from")) lua_pushstring(L, u->range_from);
    else if (!strcmp(k, "name")) lua_pushstring(L, lm_tfjs_name(u->m));
    else if (!strcmp(k, "path")) lua_pushstring(L, u->path);
    else if (!strcmp(k, "layers")) lua_pushinteger(L, lm_tfjs_layer_count(u->m));
    else if (!strcmp(k, "summary")) lua_pushstring(L, lm_tfjs_summary(u->m));
    else if (!strcmp(k, "device")) lua_pushstring(L, lm_tfjs_device(u->m)->spec);
    else if (!strcmp(k, "radius")) lua_pushinteger(L, lm_tfjs_receptive_radius(u->m));
    else if (!strcmp(k, "dtype")) lua_pushstring(L, lm_dtype_name(lm_tfjs_dtype(u->m)));
    else {
        luaL_getmetatable(L, LM_LUA_MODEL);
        lua_getfield(L, -1, "methods");
        lua_getfield(L, -1, k);
    }
    return 1;
}

/* the folders searched, in order (models/tfjs_find.c) */
static int l_dirs(lua_State *L)
{
    lm_model_dirs d;
    lm_tfjs_model_dirs(&d);
    lua_createtable(L, d.n, 0);
    for (int i = 0; i < d.n; i++) {
        lua_pushstring(L, d.dir[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* the first folder searched that exists (where `make install` and
 * LUMEN_MODELS put packages), else the first searched */
static int l_dir(lua_State *L)
{
    lm_model_dirs d;
    lm_tfjs_model_dirs(&d);
    int pick = 0;
    for (int i = d.n - 1; i >= 0; i--) {
        DIR *dir = opendir(d.dir[i]);
        if (dir) closedir(dir), pick = i;
    }
    lua_pushstring(L, d.n ? d.dir[pick] : "");
    return 1;
}

/* every package (a folder with models/ inside) in the folders searched,
 * sorted, each name once */
static int l_list(lua_State *L)
{
    lm_model_dirs d;
    lm_tfjs_model_dirs(&d);
    lua_newtable(L);   /* the set */
    lua_newtable(L);   /* the list */
    int n = 0;
    for (int i = 0; i < d.n; i++) {
        DIR *dir = opendir(d.dir[i]);
        for (struct dirent *e; dir && (e = readdir(dir));) {
            char p[2048];
            if (e->d_name[0] == '.') continue;
            snprintf(p, sizeof p, "%s/%s/models", d.dir[i], e->d_name);
            DIR *sub = opendir(p);
            if (!sub) continue;
            closedir(sub);
            if (lua_getfield(L, -2, e->d_name) != LUA_TNIL) {
                lua_pop(L, 1);
                continue;
            }
            lua_pop(L, 1);
            lua_pushboolean(L, 1);
            lua_setfield(L, -3, e->d_name);
            lua_pushstring(L, e->d_name);
            lua_rawseti(L, -2, ++n);
        }
        if (dir) closedir(dir);
    }
    lua_remove(L, -2);
    lua_getglobal(L, "table");
    lua_getfield(L, -1, "sort");
    lua_pushvalue(L, -3);
    lua_call(L, 1, 0);
    lua_pop(L, 1);
    return 1;
}

static const lm_lua_func models_funcs[] = {
    {"load", l_load,
     "lm.models.load(name_or_path, {scale=4, device=nil, range=nil, dtype=\"f32\"}) -> model\n"
     "Loads a TensorFlow.js layers model: a package fetched by `make models` (esrgan-slim,\n"
     "esrgan-medium, esrgan-thick; `scale` picks models/x<scale>) found in lm.models.dirs(),\n"
     "a package folder, or the path of any model.json or converted safetensors.  model(x)\n"
     "runs it on x [C,H,W] or [N,C,H,W] with values 0..1 (lazy result, same layout, 0..1,\n"
     "not clamped); the model's own range is applied inside: read from the package's model\n"
     "definition (UpscalerJS's inputRange), or range=255 / range={0, 255} to set it.  Fields:\n"
     "scale, range, range_from, name, path, layers, summary, device, radius, dtype.\n"
     "dtype=\"f16\" keeps the weights in f16 and computes in f16.\n"
     "A diffusers folder (model_index.json), a single-file SD .safetensors or .gguf, or a\n"
     "Z-Image or FLUX.2 transformer file (.safetensors or .gguf, with tokenizer=DIR) gives a\n"
     "diffusion pipeline instead (lm.diffusion.pipeline: pipe:generate{prompt=...})."},
    {"upscale", l_upscale,
     "lm.models.upscale(model, img, {tile=0, overlap=16}) -> tensor\n"
     "Also model:upscale(img, {...}).  Upscales img [C,H,W] (values 0..1; C 1 gray, 2\n"
     "gray+alpha, 3 RGB, 4 RGBA) by the model's scale, in tiles of `tile` input pixels (0 =\n"
     "whole image) with `overlap` pixels of context each side.  Returns an evaluated f32 CPU\n"
     "tensor [3 or 4, H*s, W*s], 0..1 (alpha resized bilinearly; gray comes back as RGB)."},
    {"save", l_save,
     "lm.models.save(model, path)\n"
     "Also model:save(path).  Writes the converted weights (OIHW) and the topology as a\n"
     "safetensors file that lm.models.load reads back (as `lumen convert` does)."},
    {"free", l_free, "lm.models.free(model)\nAlso model:free().  Releases the model's weights now."},
    {"list", l_list, "lm.models.list() -> {names}\nThe packages in the folders lm.models.dirs() lists."},
    {"dirs", l_dirs,
     "lm.models.dirs() -> {folders}\nWhere packages are looked up, in order: each entry of\n"
     "$LUMEN_MODELS, $XDG_DATA_HOME/lumen/models (~/.local/share), <prefix>/share/lumen/models\n"
     "beside the program, build/models when run from the build tree; never the current folder."},
    {"dir", l_dir, "lm.models.dir() -> string\nThe first folder of lm.models.dirs() that exists."},
    {NULL, NULL, NULL},
};

void lm_lua_open_models(lua_State *L)
{
    luaL_newmetatable(L, LM_LUA_MODEL);
    lua_pushcfunction(L, l_call);
    lua_setfield(L, -2, "__call");
    lua_pushcfunction(L, l_index);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, l_free);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, l_free);
    lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, l_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_newtable(L);
    lm_lua_register(L, "lm.models.", models_funcs);
    /* model:upscale(...) is lm.models.upscale(model, ...): the same checked
     * functions in the metatable's methods table */
    lua_newtable(L);
    static const char *const methods[] = {"upscale", "save", "free"};
    for (int i = 0; i < 3; i++) {
        lua_getfield(L, -2, methods[i]);
        lua_setfield(L, -2, methods[i]);
    }
    lua_setfield(L, -3, "methods");
    lua_setfield(L, -3, "models");
    lua_pop(L, 1);
}
