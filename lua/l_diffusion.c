/* l_diffusion.c - lm.diffusion: the stages of image generation from Lua,
 * starting with the CLIP tokenizer and text encoders of a diffusers folder
 * (core/models/clip_tokenizer.h, clip_text.h).  Token ids are the
 * vocabulary's ids (0-based, as transformers gives them), not indices. */
#include <stdlib.h>
#include <string.h>
#include "core/models/clip_text.h"
#include "core/models/clip_tokenizer.h"
#include "l_internal.h"

#define LM_LUA_CLIP_TOK "lumen.clip_tokenizer"
#define LM_LUA_CLIP_TEXT "lumen.clip_text"

void lm_lua_open_diffusion(lua_State *L);   /* module table on top (l_module.c) */

typedef struct lua_tok { lm_clip_tokenizer *t; } lua_tok;
typedef struct lua_enc { lm_clip_text *m; } lua_enc;

static lua_tok *check_tok(lua_State *L, int idx)
{
    lua_tok *u = luaL_checkudata(L, idx, LM_LUA_CLIP_TOK);
    if (!u->t) luaL_error(L, "tokenizer was freed");
    return u;
}

static lua_enc *check_enc(lua_State *L, int idx)
{
    lua_enc *u = luaL_checkudata(L, idx, LM_LUA_CLIP_TEXT);
    if (!u->m) luaL_error(L, "text encoder was freed");
    return u;
}

static int l_tokenizer(lua_State *L)
{
    const char *dir = luaL_checkstring(L, 1);
    lua_tok *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->t = NULL;
    luaL_setmetatable(L, LM_LUA_CLIP_TOK);
    u->t = lm_clip_tokenizer_load(dir);
    if (!u->t) return lm_lua_error(L);
    return 1;
}

static int l_encode(lua_State *L)
{
    lua_tok *u = check_tok(L, 1);
    size_t len;
    const char *text = luaL_checklstring(L, 2, &len);
    static const char *const known[] = {"tensor", "pad", NULL};
    lm_lua_check_opts(L, 3, "lm.diffusion.encode", known);
    bool as_tensor = lm_lua_opt_bool(L, 3, "lm.diffusion.encode", "tensor", false);
    bool pad = lm_lua_opt_bool(L, 3, "lm.diffusion.encode", "pad", true);
    int64_t max = lm_clip_tokenizer_max_length(u->t), n, full;
    int32_t *ids = malloc(sizeof *ids * (size_t)max);
    if (!ids) return luaL_error(L, "lm.diffusion.encode: out of memory");
    if (lm_clip_tokenizer_encode(u->t, text, len, pad, ids, &n, &full) != LM_OK) {
        free(ids);
        return lm_lua_error(L);
    }
    if (as_tensor) {
        int64_t *w = malloc(sizeof *w * (size_t)n);
        if (!w) {
            free(ids);
            return luaL_error(L, "lm.diffusion.encode: out of memory");
        }
        for (int64_t i = 0; i < n; i++) w[i] = ids[i];
        free(ids);
        lm_array *a = lm_from_data(1, &n, LM_I64, w, NULL);
        free(w);
        lm_lua_push_array(L, a);
    } else {
        lua_createtable(L, (int)n, 0);
        for (int64_t i = 0; i < n; i++) {
            lua_pushinteger(L, ids[i]);
            lua_rawseti(L, -2, i + 1);
        }
        free(ids);
    }
    lua_pushinteger(L, full);
    return 2;
}

static int l_tok_free(lua_State *L)
{
    lua_tok *u = luaL_checkudata(L, 1, LM_LUA_CLIP_TOK);
    lm_clip_tokenizer_free(u->t);
    u->t = NULL;
    return 0;
}

static int l_tok_index(lua_State *L)
{
    lua_tok *u = check_tok(L, 1);
    const char *k = luaL_checkstring(L, 2);
    if (!strcmp(k, "max_length")) lua_pushinteger(L, lm_clip_tokenizer_max_length(u->t));
    else if (!strcmp(k, "vocab_size")) lua_pushinteger(L, lm_clip_tokenizer_vocab_size(u->t));
    else if (!strcmp(k, "bos")) lua_pushinteger(L, lm_clip_tokenizer_bos(u->t));
    else if (!strcmp(k, "eos")) lua_pushinteger(L, lm_clip_tokenizer_eos(u->t));
    else if (!strcmp(k, "pad")) lua_pushinteger(L, lm_clip_tokenizer_pad(u->t));
    else {
        luaL_getmetatable(L, LM_LUA_CLIP_TOK);
        lua_getfield(L, -1, "methods");
        lua_getfield(L, -1, k);
    }
    return 1;
}

static int l_text_encoder(lua_State *L)
{
    const char *dir = luaL_checkstring(L, 1);
    static const char *const known[] = {"dtype", "device", "variant", NULL};
    lm_lua_opts o;
    lm_lua_opts_read(L, 2, &o, "lm.diffusion.text_encoder", known);
    const char *variant = NULL;
    if (lua_istable(L, 2)) {
        lua_getfield(L, 2, "variant");
        if (!lua_isnil(L, -1)) variant = luaL_checkstring(L, -1);
        lua_pop(L, 1);
    }
    lua_enc *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->m = NULL;
    luaL_setmetatable(L, LM_LUA_CLIP_TEXT);
    u->m = lm_clip_text_load(dir, variant, o.dtype == LM_DTYPE_COUNT ? LM_F32 : o.dtype, o.device);
    if (!u->m) return lm_lua_error(L);
    return 1;
}

/* ids: a table of ids, a table of such rows, or an integer tensor [L] / [B,L] */
static int32_t *read_ids(lua_State *L, int idx, int64_t *B, int64_t *Lq)
{
    if (lua_istable(L, idx)) {
        lua_rawgeti(L, idx, 1);
        bool rows = lua_istable(L, -1);
        lua_pop(L, 1);
        *B = rows ? (int64_t)lua_rawlen(L, idx) : 1;
        if (rows) {
            lua_rawgeti(L, idx, 1);
            *Lq = (int64_t)lua_rawlen(L, -1);
            lua_pop(L, 1);
        } else {
            *Lq = (int64_t)lua_rawlen(L, idx);
        }
        if (*B < 1 || *Lq < 1) luaL_error(L, "text encoder: ids: an empty table");
        int32_t *ids = malloc(sizeof *ids * (size_t)(*B * *Lq));
        if (!ids) luaL_error(L, "text encoder: out of memory");
        for (int64_t b = 0; b < *B; b++) {
            if (rows) {
                lua_rawgeti(L, idx, b + 1);
                if (!lua_istable(L, -1) || (int64_t)lua_rawlen(L, -1) != *Lq) {
                    free(ids);
                    luaL_error(L, "text encoder: ids: row %d is not a table of %d ids", (int)b + 1, (int)*Lq);
                }
            } else {
                lua_pushvalue(L, idx);
            }
            for (int64_t i = 0; i < *Lq; i++) {
                lua_rawgeti(L, -1, i + 1);
                int isnum;
                lua_Integer v = lua_tointegerx(L, -1, &isnum);
                lua_pop(L, 1);
                if (!isnum) {
                    free(ids);
                    luaL_error(L, "text encoder: ids: entry %d of row %d is not an integer", (int)i + 1, (int)b + 1);
                }
                ids[b * *Lq + i] = v < INT32_MIN || v > INT32_MAX ? -1 : (int32_t)v;
            }
            lua_pop(L, 1);
        }
        return ids;
    }
    lm_array *a = lm_lua_check_array(L, idx);
    if (a->ndim != 1 && a->ndim != 2) luaL_error(L, "text encoder: ids: a tensor [L] or [B,L]");
    *B = a->ndim == 2 ? a->shape[0] : 1;
    *Lq = a->shape[a->ndim - 1];
    int32_t *ids = malloc(sizeof *ids * (size_t)(a->size ? a->size : 1));
    if (!ids) luaL_error(L, "text encoder: out of memory");
    if (lm_array_read(a, ids, LM_I32) != LM_OK) {
        free(ids);
        lm_lua_error(L);
    }
    return ids;
}

static int l_enc_call(lua_State *L)
{
    lua_enc *u = check_enc(L, 1);
    int64_t B, Lq;
    int32_t *ids = read_ids(L, 2, &B, &Lq);
    lm_clip_text_out o;
    lm_status st = lm_clip_text_forward(u->m, ids, B, Lq, &o);
    free(ids);
    if (st != LM_OK) return lm_lua_error(L);
    lua_createtable(L, 0, 4);
    lm_lua_push_array(L, o.last_hidden_state);
    lua_setfield(L, -2, "last_hidden_state");
    lua_createtable(L, o.nhidden, 0);
    for (int i = 0; i < o.nhidden; i++) {
        lm_lua_push_array(L, o.hidden_states[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "hidden_states");
    lm_lua_push_array(L, o.pooled);
    lua_setfield(L, -2, "pooled");
    if (o.text_embeds) {
        lm_lua_push_array(L, o.text_embeds);
        lua_setfield(L, -2, "text_embeds");
    }
    /* the pushes took over the references */
    free(o.hidden_states);
    return 1;
}

static int l_enc_free(lua_State *L)
{
    lua_enc *u = luaL_checkudata(L, 1, LM_LUA_CLIP_TEXT);
    lm_clip_text_free(u->m);
    u->m = NULL;
    return 0;
}

static int l_enc_index(lua_State *L)
{
    lua_enc *u = check_enc(L, 1);
    const char *k = luaL_checkstring(L, 2);
    const lm_clip_text_config *c = lm_clip_text_get_config(u->m);
    if (!strcmp(k, "hidden_size")) lua_pushinteger(L, c->hidden_size);
    else if (!strcmp(k, "num_layers")) lua_pushinteger(L, c->num_layers);
    else if (!strcmp(k, "num_heads")) lua_pushinteger(L, c->num_heads);
    else if (!strcmp(k, "max_positions")) lua_pushinteger(L, c->max_positions);
    else if (!strcmp(k, "vocab_size")) lua_pushinteger(L, c->vocab_size);
    else if (!strcmp(k, "projection_dim")) lua_pushinteger(L, c->projection_dim);
    else if (!strcmp(k, "hidden_act")) lua_pushstring(L, c->quick_gelu ? "quick_gelu" : "gelu");
    else if (!strcmp(k, "dtype")) lua_pushstring(L, lm_dtype_name(lm_clip_text_dtype(u->m)));
    else if (!strcmp(k, "device")) lua_pushstring(L, lm_clip_text_device(u->m)->spec);
    else {
        luaL_getmetatable(L, LM_LUA_CLIP_TEXT);
        lua_getfield(L, -1, "methods");
        lua_getfield(L, -1, k);
    }
    return 1;
}

/* free: one name for both kinds of object */
static int l_free_any(lua_State *L)
{
    if (luaL_testudata(L, 1, LM_LUA_CLIP_TEXT)) return l_enc_free(L);
    return l_tok_free(L);
}

static const lm_lua_func diffusion_funcs[] = {
    {"tokenizer", l_tokenizer,
     "lm.diffusion.tokenizer(dir) -> tokenizer\n"
     "CLIP's byte-level BPE tokenizer from a tokenizer folder of a diffusers model\n"
     "(vocab.json + merges.txt, or tokenizer.json; tokenizer_config.json and\n"
     "special_tokens_map.json for bos/eos/pad and the length, 77).  tok:encode(text) gives\n"
     "transformers' ids.  Fields: max_length, vocab_size, bos, eos, pad."},
    {"encode", l_encode,
     "lm.diffusion.encode(tokenizer, text, {tensor=false, pad=true}) -> ids, n\n"
     "Also tokenizer:encode(text, {...}).  The ids (0-based vocabulary ids) of text as\n"
     "transformers' CLIPTokenizer(text, padding=\"max_length\", truncation=True) gives them:\n"
     "bos, the tokens, eos, pad ids up to max_length (pad=false stops at eos).  A prompt\n"
     "longer than max_length-2 tokens is truncated; n is the length it had before (bos and\n"
     "eos counted).  tensor=true returns an i64 tensor [len] instead of a table."},
    {"text_encoder", l_text_encoder,
     "lm.diffusion.text_encoder(dir, {dtype=\"f32\", device=nil, variant=nil}) -> encoder\n"
     "A CLIP text encoder (CLIPTextModel or CLIPTextModelWithProjection) from a diffusers\n"
     "text_encoder folder: config.json and model.safetensors, model.fp16.safetensors, or\n"
     "shards (*.safetensors.index.json); variant=\"fp16\" picks the fp16 file.  Weights\n"
     "are cast to dtype and kept on the device.  enc(ids) takes a table of ids, a table of\n"
     "rows, or an integer tensor [L] / [B,L] and returns {last_hidden_state=[B,L,D],\n"
     "hidden_states={embeddings, layer 1, ..., layer N} (hidden_states[#-1] is the\n"
     "penultimate layer, for clip_skip and SDXL), pooled=[B,D] (the eos row),\n"
     "text_embeds=[B,P] (with a projection)}, lazy.  Fields: hidden_size, num_layers,\n"
     "num_heads, max_positions, vocab_size, projection_dim, hidden_act, dtype, device."},
    {"free", l_free_any,
     "lm.diffusion.free(obj)\nAlso obj:free().  Releases a tokenizer or text encoder now."},
    {NULL, NULL, NULL},
};

static void metatable(lua_State *L, const char *name, lua_CFunction index, lua_CFunction gc,
                      lua_CFunction call, const char *const *methods, int nmethods)
{
    luaL_newmetatable(L, name);
    lua_pushcfunction(L, index);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, gc);
    lua_setfield(L, -2, "__close");
    if (call) {
        lua_pushcfunction(L, call);
        lua_setfield(L, -2, "__call");
    }
    lua_newtable(L);
    for (int i = 0; i < nmethods; i++) {
        lua_getfield(L, -3, methods[i]);   /* from lm.diffusion (below the metatable) */
        lua_setfield(L, -2, methods[i]);
    }
    lua_setfield(L, -2, "methods");
    lua_pop(L, 1);
}

void lm_lua_open_diffusion(lua_State *L)
{
    lua_newtable(L);
    lm_lua_register(L, "lm.diffusion.", diffusion_funcs);
    static const char *const tm[] = {"encode", "free"}, *const em[] = {"free"};
    metatable(L, LM_LUA_CLIP_TOK, l_tok_index, l_tok_free, NULL, tm, 2);
    metatable(L, LM_LUA_CLIP_TEXT, l_enc_index, l_enc_free, l_enc_call, em, 1);
    lua_setfield(L, -2, "diffusion");
}
