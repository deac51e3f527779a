/* l_lora.c - LoRA / LyCORIS adapters on an SD pipeline from Lua
 * (models/lora.h): pipe:load_lora, pipe:unload_loras, pipe:loras, also as
 * lm.diffusion.load_lora(pipe, ...) and so on.  lm_lua_open_lora adds them
 * to the module table on top and to the pipeline's methods (l_diffusion.c
 * made its metatable). */
#include <stdlib.h>
#include <string.h>
#include "models/lora.h"
#include "models/sd_pipeline.h"
#include "l_internal.h"

#define LM_LUA_SD_PIPE "lumen.sd_pipeline"   /* l_diffusion.c's */
typedef struct lua_pipe { lm_sd_pipeline *p; } lua_pipe;   /* l_diffusion.c's layout */

void lm_lua_open_lora(lua_State *L);

static lm_sd_pipeline *pipe_arg(lua_State *L)
{
    lua_pipe *u = luaL_checkudata(L, 1, LM_LUA_SD_PIPE);
    if (!u->p) luaL_error(L, "pipeline was freed");
    return u->p;
}

static void push_info(lua_State *L, const lm_lora_info *f)
{
    lua_createtable(L, 0, 8);
    lua_pushstring(L, f->name);
    lua_setfield(L, -2, "name");
    lua_pushstring(L, f->path);
    lua_setfield(L, -2, "path");
    lua_pushnumber(L, f->scale);
    lua_setfield(L, -2, "scale");
    lua_pushstring(L, f->format);
    lua_setfield(L, -2, "format");
    lua_pushstring(L, f->hash);
    lua_setfield(L, -2, "hash");
    lua_pushinteger(L, f->modules);
    lua_setfield(L, -2, "modules");
    lua_pushinteger(L, f->unmatched);
    lua_setfield(L, -2, "unmatched");
    lua_pushstring(L, f->unmatched_keys);
    lua_setfield(L, -2, "unmatched_keys");
}

static int l_load_lora(lua_State *L)
{
    lm_sd_pipeline *p = pipe_arg(L);
    const char *path = luaL_checkstring(L, 2);
    static const char *const known[] = {"scale", "strict", "name", "runtime", NULL};
    lm_lua_check_opts(L, 3, "pipe:load_lora", known);
    lm_lora_opts o;
    lm_lora_opts_init(&o);
    o.scale = lm_lua_opt_num(L, 3, "pipe:load_lora", "scale", 1.0);
    o.strict = lm_lua_opt_bool(L, 3, "pipe:load_lora", "strict", true);
    o.name = lm_lua_opt_str(L, 3, "pipe:load_lora", "name", NULL);
    o.runtime = lm_lua_opt_bool(L, 3, "pipe:load_lora", "runtime", false);
    lm_lua_enter(L);
    if (lm_lora_load(p, path, &o) != LM_OK) return lm_lua_error(L);
    push_info(L, lm_lora_get(p, lm_lora_count(p) - 1));
    return 1;
}

static int l_unload_loras(lua_State *L)
{
    lm_lora_unload_all(pipe_arg(L));
    return 0;
}

static int l_loras(lua_State *L)
{
    lm_sd_pipeline *p = pipe_arg(L);
    int n = lm_lora_count(p);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        push_info(L, lm_lora_get(p, i));
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int l_lora_tags(lua_State *L)
{
    const char *prompt = luaL_checkstring(L, 1);
    enum { MAXT = 64 };
    char *clean = NULL, *names[MAXT];
    double w[MAXT];
    int n = lm_lora_tags(prompt, &clean, names, w, MAXT);
    if (n < 0) return lm_lua_error(L);
    lua_pushstring(L, clean);
    free(clean);
    lua_createtable(L, n < MAXT ? n : MAXT, 0);
    for (int i = 0; i < n && i < MAXT; i++) {
        lua_createtable(L, 0, 2);
        lua_pushstring(L, names[i]);
        lua_setfield(L, -2, "name");
        lua_pushnumber(L, w[i]);
        lua_setfield(L, -2, "weight");
        lua_rawseti(L, -2, i + 1);
        free(names[i]);
    }
    return 2;
}

static const lm_lua_func lora_funcs[] = {
    {"load_lora", l_load_lora,
     "lm.diffusion.load_lora(pipe, path, {scale=1, strict=true, name=nil, runtime=false}) -> info\n"
     "Also pipe:load_lora(path, {...}).  Merges a LoRA, DoRA, LoHa or LoKr .safetensors\n"
     "(kohya, PEFT/diffusers or LyCORIS keys) into the pipeline's UNet and text encoders at\n"
     "weight scale, after those already loaded; on Z-Image and FLUX.2-klein into the\n"
     "transformer (diffusers' transformer.*, ComfyUI's diffusion_model.*, kohya's lora_unet_*,\n"
     "original fused qkv split).  strict=false skips keys that adapt no weight of the model\n"
     "(info.unmatched counts them) instead of raising.  info: {name, path, scale, format\n"
     "(\"lora\", \"dora\", \"loha\", \"lokr\"), hash (A1111's 12-digit addnet hash), modules,\n"
     "unmatched, unmatched_keys}.  Quantized (GGUF) linear weights of the UNet or a DiT\n"
     "transformer take the adapters at run time (runtime=true asks that of float ones too);\n"
     "other quantized weights are refused."},
    {"unload_loras", l_unload_loras,
     "lm.diffusion.unload_loras(pipe)\n"
     "Also pipe:unload_loras().  The original weights back, bit for bit."},
    {"loras", l_loras,
     "lm.diffusion.loras(pipe) -> {info, ...}\n"
     "Also pipe:loras().  The loaded adapters in load order (load_lora's info tables)."},
    {"lora_tags", l_lora_tags,
     "lm.diffusion.lora_tags(prompt) -> text, {{name=, weight=}, ...}\n"
     "The prompt without its <lora:NAME:WEIGHT> tags (A1111's extra-network syntax; a\n"
     "missing weight is 1, <lora:NAME:TE:UNET> takes TE), and the tags in order, for\n"
     "scripts that load them with pipe:load_lora(dir .. \"/\" .. name .. \".safetensors\",\n"
     "{scale = weight, name = name}).  A weight that is not a number is an error."},
    {NULL, NULL, NULL},
};

void lm_lua_open_lora(lua_State *L)
{
    lm_lua_register(L, "lm.diffusion.", lora_funcs);
    luaL_getmetatable(L, LM_LUA_SD_PIPE);
    lua_getfield(L, -1, "methods");
    for (int i = 0; lora_funcs[i].name && lora_funcs[i].fn != l_lora_tags; i++) {
        lua_getfield(L, -3, lora_funcs[i].name);   /* from lm.diffusion, as registered */
        lua_setfield(L, -2, lora_funcs[i].name);
    }
    lua_pop(L, 2);
}
