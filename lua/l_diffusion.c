/* l_diffusion.c - lm.diffusion: image generation from Lua: the Stable
 * Diffusion pipeline (models/sd_pipeline.h; lm.models.load(dir_or_file)
 * and lm.diffusion.pipeline return one) and its stages, the CLIP tokenizer
 * and text encoders (models/clip_tokenizer.h, clip_text.h), the UNet
 * and the VAE.  Token ids are the vocabulary's ids (0-based, as transformers
 * gives them), not indices.  A stage taken from a pipeline (pipe.tokenizer,
 * pipe.unet...) borrows it: it keeps the pipeline alive and fails cleanly
 * once pipe:free() ran. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/io/gguf.h"
#include "core/io/io.h"
#include "models/clip_text.h"
#include "models/clip_tokenizer.h"
#include "models/dit_files.h"
#include "models/dit_pipeline.h"
#include "models/flux2.h"
#include "models/prompt.h"
#include "models/qwen_tokenizer.h"
#include "models/zimage.h"
#include "models/sampler.h"
#include "models/sd_hires.h"
#include "models/sd_pipeline.h"
#include "models/unet.h"
#include "models/vae.h"
#include "l_internal.h"

#define LM_LUA_CLIP_TOK "lumen.clip_tokenizer"
#define LM_LUA_CLIP_TEXT "lumen.clip_text"

void lm_lua_open_diffusion(lua_State *L);   /* module table on top (l_module.c) */

#define LM_LUA_SD_PIPE "lumen.sd_pipeline"
#define LM_LUA_SD_PART "lumen.sd_part"

bool lm_lua_sd_is_pipeline(const char *path);     /* l_models.c's hook */
int lm_lua_sd_pipeline_open(lua_State *L);         /* (path, opts) -> pipeline */
void lm_lua_open_lora(lua_State *L);               /* l_lora.c: pipe:load_lora & co. */

/* borrowed: a pipeline's stage; user value 1 is the pipeline's userdata */
typedef struct lua_tok { lm_clip_tokenizer *t; bool borrowed; } lua_tok;
typedef struct lua_enc { lm_clip_text *m; bool borrowed; } lua_enc;
typedef struct lua_pipe { lm_sd_pipeline *p; } lua_pipe;
/* pipe.unet / pipe.vae / pipe.transformer (a DiT family's) */
enum { PART_UNET, PART_VAE, PART_TRANSFORMER };
typedef struct lua_part { int kind; } lua_part;
#define LM_LUA_QWEN_TOK "lumen.qwen_tokenizer"
typedef struct lua_qtok { lm_qwen_tokenizer *t; } lua_qtok;   /* always a pipeline's */

/* The pipeline a borrowed stage at idx belongs to; raises once it was freed */
static lm_sd_pipeline *owner_of(lua_State *L, int idx)
{
    lua_getiuservalue(L, idx, 1);
    lua_pipe *o = luaL_testudata(L, -1, LM_LUA_SD_PIPE);
    lua_pop(L, 1);
    if (!o || !o->p) luaL_error(L, "the pipeline this belongs to was freed");
    return o->p;
}

static lua_tok *check_tok(lua_State *L, int idx)
{
    lua_tok *u = luaL_checkudata(L, idx, LM_LUA_CLIP_TOK);
    if (!u->t) luaL_error(L, "tokenizer was freed");
    if (u->borrowed) owner_of(L, idx);
    return u;
}

static lua_enc *check_enc(lua_State *L, int idx)
{
    lua_enc *u = luaL_checkudata(L, idx, LM_LUA_CLIP_TEXT);
    if (!u->m) luaL_error(L, "text encoder was freed");
    if (u->borrowed) owner_of(L, idx);
    return u;
}

static int l_tokenizer(lua_State *L)
{
    const char *dir = luaL_checkstring(L, 1);
    lua_tok *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->t = NULL;
    u->borrowed = false;
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

/* lm.diffusion.parse_prompt(text) -> {{text, weight}, ...} */
static int l_parse_prompt(lua_State *L)
{
    size_t len;
    const char *text = luaL_checklstring(L, 1, &len);
    lm_prompt p;
    if (lm_prompt_parse(text, len, &p) != LM_OK) return lm_lua_error(L);
    lua_createtable(L, (int)p.n, 0);
    for (int64_t i = 0; i < p.n; i++) {
        lua_createtable(L, 2, 0);
        lua_pushlstring(L, p.pairs[i].text, p.pairs[i].len);
        lua_rawseti(L, -2, 1);
        lua_pushnumber(L, p.pairs[i].weight);
        lua_rawseti(L, -2, 2);
        lua_rawseti(L, -2, i + 1);
    }
    lm_prompt_free(&p);
    return 1;
}

/* lm.diffusion.extra_networks(text) -> clean, {{kind=, args={...}}, ...} */
static int l_extra_networks(lua_State *L)
{
    size_t len, cl;
    const char *text = luaL_checklstring(L, 1, &len);
    char *clean;
    lm_prompt_networks l;
    if (lm_prompt_extra_networks(text, len, &clean, &cl, &l) != LM_OK) return lm_lua_error(L);
    lua_pushlstring(L, clean, cl);
    free(clean);
    lua_createtable(L, l.n, 0);
    for (int i = 0; i < l.n; i++) {
        lua_createtable(L, 0, 2);
        lua_pushstring(L, l.items[i].kind);
        lua_setfield(L, -2, "kind");
        lua_createtable(L, l.items[i].nargs, 0);
        for (int a = 0; a < l.items[i].nargs; a++) {
            lua_pushstring(L, l.items[i].args[a]);
            lua_rawseti(L, -2, a + 1);
        }
        lua_setfield(L, -2, "args");
        lua_rawseti(L, -2, i + 1);
    }
    lm_prompt_networks_free(&l);
    return 2;
}

/* lm.diffusion.prompt_chunks(tokenizer, text) -> {{77 ids}, ...}, {{77 weights}, ...} */
static int l_prompt_chunks(lua_State *L)
{
    lua_tok *u = check_tok(L, 1);
    size_t len;
    const char *text = luaL_checklstring(L, 2, &len);
    lm_prompt_chunks c;
    if (lm_prompt_clip_chunks(u->t, text, len, &c) != LM_OK) return lm_lua_error(L);
    for (int what = 0; what < 2; what++) {
        lua_createtable(L, (int)c.n, 0);
        for (int64_t k = 0; k < c.n; k++) {
            lua_createtable(L, LM_PROMPT_CHUNK + 2, 0);
            for (int j = 0; j < LM_PROMPT_CHUNK + 2; j++) {
                int64_t at = k * (LM_PROMPT_CHUNK + 2) + j;
                if (what) lua_pushnumber(L, c.mults[at]);
                else lua_pushinteger(L, c.ids[at]);
                lua_rawseti(L, -2, j + 1);
            }
            lua_rawseti(L, -2, k + 1);
        }
    }
    lm_prompt_chunks_free(&c);
    return 2;
}

static int l_tok_free(lua_State *L)
{
    lua_tok *u = luaL_checkudata(L, 1, LM_LUA_CLIP_TOK);
    if (!u->borrowed) lm_clip_tokenizer_free(u->t);
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
    u->borrowed = false;
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
    if (!u->borrowed) lm_clip_text_free(u->m);
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

/* ---- the Stable Diffusion pipeline ---- */

static lua_pipe *check_pipe(lua_State *L, int idx)
{
    lua_pipe *u = luaL_checkudata(L, idx, LM_LUA_SD_PIPE);
    if (!u->p) luaL_error(L, "pipeline was freed");
    return u;
}

/* A GGUF file whose header names an SD UNet tensor (stable-diffusion.cpp's
 * layout): the tensor infos follow the metadata, so the name is in the
 * first megabytes of any such file. */
static bool gguf_names_unet(const char *path)
{
    static const char key[] = "model.diffusion_model.";
    size_t cap = 16u << 20;
    int fd = lm_io_open_read(path);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (fd >= 0 && !f) close(fd);
    lm_error_clear();
    char *h = f ? malloc(cap) : NULL;
    size_t got = h ? fread(h, 1, cap, f) : 0;
    bool found = got > 4 && !memcmp(h, "GGUF", 4) && memmem(h, got, key, sizeof key - 1);
    free(h);
    if (f) fclose(f);
    return found;
}

/* A Z-Image or FLUX.2 transformer file (models/dit_files.h), told by its
 * keys as the pipeline's loader tells it: ComfyUI's files and the GGUF
 * files ComfyUI-GGUF writes name the transformer's tensors without
 * model.diffusion_model., which the header scans look for.  Both readers
 * map the file, so only the header is read. */
static bool dit_file_named(const char *path, bool gguf)
{
    lm_tensor_set s;
    memset(&s, 0, sizeof s);
    lm_status st = gguf ? lm_load_gguf(path, &s, NULL) : lm_load_safetensors(path, &s);
    bool found = st == LM_OK && lm_dit_file_family(&s) != LM_SD_UNKNOWN;
    lm_tensor_set_free(&s);
    lm_error_clear();
    return found;
}

/* true for a diffusers folder (model_index.json), a .safetensors or .gguf
 * file whose header names an SD UNet (model.diffusion_model.*), or a
 * Z-Image or FLUX.2 transformer file: what lm.models.load hands to the
 * pipeline instead of the TF.js loader */
bool lm_lua_sd_is_pipeline(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0) return false;
    if (S_ISDIR(sb.st_mode)) {
        char mi[4096];
        snprintf(mi, sizeof mi, "%s/model_index.json", path);
        /* any model_index.json (a FIFO too: the pipeline's reader refuses
         * it by name instead of the TF.js loader missing model.json) */
        return stat(mi, &sb) == 0;
    }
    size_t n = strlen(path);
    if (S_ISREG(sb.st_mode) && n >= 5 && !strcmp(path + n - 5, ".gguf"))
        return gguf_names_unet(path) || dit_file_named(path, true);
    if (!S_ISREG(sb.st_mode) || n < 12 || strcmp(path + n - 12, ".safetensors")) return false;
    int fd = lm_io_open_read(path);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        if (fd >= 0) close(fd);
        lm_error_clear();
        return false;
    }
    unsigned char len8[8];
    bool found = false;
    if (fread(len8, 1, 8, f) == 8) {
        uint64_t hl = 0;
        for (int i = 7; i >= 0; i--) hl = hl << 8 | len8[i];
        if (hl > 0 && hl <= (64u << 20)) {
            char *h = malloc(hl + 1);
            if (h && fread(h, 1, hl, f) == hl) {
                h[hl] = 0;
                found = strstr(h, "\"model.diffusion_model.") != NULL;
            }
            free(h);
        }
    }
    fclose(f);
    return found || dit_file_named(path, false);
}

/* (path, {dtype=, device=, variant=, tokenizer=, prediction=}) -> pipeline */
int lm_lua_sd_pipeline_open(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    static const char *const known[] = {"dtype", "device", "variant", "tokenizer", "prediction",
                                        "tiling", "offload", "embeddings", "prewarm", "prewarm_size",
                                        "prewarm_sampler", NULL};
    lm_lua_opts o;
    lm_lua_opts_read(L, 2, &o, "lm.diffusion.pipeline", known);
    bool offload = false;
    if (lua_istable(L, 2)) {
        lua_getfield(L, 2, "offload");
        if (!lua_isnil(L, -1) && !lua_isboolean(L, -1))
            return luaL_error(L, "lm.diffusion.pipeline: offload: expected a boolean, got %s",
                              luaL_typename(L, -1));
        offload = lua_toboolean(L, -1);
        lua_pop(L, 1);
    }
    lm_sd_load_opts lo;
    lm_sd_load_opts_init(&lo);
    lo.dtype = o.dtype;
    lo.device = o.device;
    lo.variant = lm_lua_opt_str(L, 2, "lm.diffusion.pipeline", "variant", NULL);
    lo.tokenizer_dir = lm_lua_opt_str(L, 2, "lm.diffusion.pipeline", "tokenizer", NULL);
    lo.prediction = lm_lua_opt_str(L, 2, "lm.diffusion.pipeline", "prediction", NULL);
    lo.embeddings_dir = lm_lua_opt_str(L, 2, "lm.diffusion.pipeline", "embeddings", NULL);
    lo.no_prewarm = !lm_lua_opt_bool(L, 2, "lm.diffusion.pipeline", "prewarm", true);
    lo.prewarm_width = lo.prewarm_height = lm_lua_opt_int(L, 2, "lm.diffusion.pipeline", "prewarm_size", 0);
    lo.prewarm_sampler = lm_lua_opt_str(L, 2, "lm.diffusion.pipeline", "prewarm_sampler", NULL);
    /* checked as generate{} checks size and sampler: the dry run drops its
     * errors, so a bad value would only have made the prewarm do nothing */
    if (lo.prewarm_width &&
        lm_sd_option_check_int(LM_SD_OPT_SIZE, "lm.diffusion.pipeline", "prewarm_size", lo.prewarm_width) != LM_OK)
        return lm_lua_error(L);
    if (lo.prewarm_sampler && !lm_sampler_find(lo.prewarm_sampler)) {
        lm_error_prefix("lm.diffusion.pipeline: prewarm_sampler");
        return lm_lua_error(L);
    }
    const char *tiling = lm_lua_opt_str(L, 2, "lm.diffusion.pipeline", "tiling", "auto");
    if (!strcmp(tiling, "auto")) lo.vae_tiling = LM_VAE_TILING_AUTO;
    else if (!strcmp(tiling, "on")) lo.vae_tiling = LM_VAE_TILING_ON;
    else if (!strcmp(tiling, "off")) lo.vae_tiling = LM_VAE_TILING_OFF;
    else return luaL_error(L, "lm.diffusion.pipeline: tiling \"%s\": expected auto, on or off", tiling);
    lua_pipe *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->p = NULL;
    luaL_setmetatable(L, LM_LUA_SD_PIPE);
    lm_lua_enter(L);
    lo.offload = offload;
    u->p = lm_sd_pipeline_load(path, &lo);
    if (!u->p) return lm_lua_error(L);
    if (offload && !lm_sd_pipeline_dit(u->p))
        return luaL_error(L, "lm.diffusion.pipeline: offload: only the DiT families (Z-Image, "
                          "FLUX.2-klein) offload their text encoder; %s keeps every stage",
                          lm_sd_pipeline_row(u->p)->title);
    return 1;
}

/* texts at idx: a string or a table of strings (with none: false entries,
 * NULL here, diffusers' None for that image); *n gets the count.  The
 * strings stay valid while the argument holds them. */
static const char **texts_arg(lua_State *L, int idx, const char *what, bool none, int *n)
{
    if (lua_isnil(L, idx)) {
        *n = 0;
        return NULL;
    }
    if (lua_type(L, idx) == LUA_TSTRING) {
        const char **t = lua_newuserdatauv(L, sizeof *t, 0);   /* on the stack until return */
        t[0] = lua_tostring(L, idx);
        *n = 1;
        return t;
    }
    if (!lua_istable(L, idx)) luaL_error(L, "%s: expected a string or a table of strings", what);
    *n = (int)lua_rawlen(L, idx);
    if (*n < 1) luaL_error(L, "%s: an empty table", what);
    const char **t = lua_newuserdatauv(L, sizeof *t * (size_t)*n, 0);
    for (int i = 0; i < *n; i++) {
        lua_rawgeti(L, idx, i + 1);
        if (none && lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1)) t[i] = NULL;
        else if (lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "%s: entry %d is not a string%s", what, i + 1, none ? " or false (none)" : "");
        else t[i] = lua_tostring(L, -1);   /* the table keeps the string */
        lua_pop(L, 1);
    }
    return t;    /* the userdata stays on the stack until the call returns */
}

/* The Lua callbacks of generate{}: the function's stack index and the state */
/* busy: the stack slot of the host work registered under LM_LUA_BUSY_KEY
 * when the call began (0: none, or run already) */
typedef struct lua_cb { lua_State *L; int progress, noise, busy; } lua_cb;

/* after each queued step: the host work lm.batch registered (once, at the
 * first step: the device then has the step to compute while the host
 * works; taken from the registry so nothing else runs it again), then the
 * caller's progress function */
static void cb_progress(void *ctx, int step, int steps)
{
    lua_cb *c = ctx;
    if (c->busy) {
        lua_getfield(c->L, LUA_REGISTRYINDEX, LM_LUA_BUSY_KEY);
        bool same = lua_rawequal(c->L, -1, c->busy);
        lua_pop(c->L, 1);
        if (same) {
            lua_pushnil(c->L);
            lua_setfield(c->L, LUA_REGISTRYINDEX, LM_LUA_BUSY_KEY);
            lua_pushvalue(c->L, c->busy);
            if (lua_pcall(c->L, 0, 0, 0) != LUA_OK) lua_pop(c->L, 1);   /* its errors are its own */
        }
        c->busy = 0;
    }
    if (!lua_isfunction(c->L, c->progress)) return;
    lua_pushvalue(c->L, c->progress);
    lua_pushinteger(c->L, step);
    lua_pushinteger(c->L, steps);
    if (lua_pcall(c->L, 2, 0, 0) != LUA_OK) lua_pop(c->L, 1);   /* a report must not stop the run */
}

/* noise(k, shape) -> tensor or nil; an error in it fails the generation */
static lm_status cb_noise(void *ctx, int k, int ndim, const int64_t *shape, lm_array **out)
{
    lua_cb *c = ctx;
    lua_State *L = c->L;
    *out = NULL;
    lua_pushvalue(L, c->noise);
    lua_pushinteger(L, k);
    lua_createtable(L, ndim, 0);
    for (int i = 0; i < ndim; i++) {
        lua_pushinteger(L, shape[i]);
        lua_rawseti(L, -2, i + 1);
    }
    if (lua_pcall(L, 2, 1, 0) != LUA_OK) {
        lm_status st = lm_error_set(LM_ERR_ARG, "generate: noise function: %s", lua_tostring(L, -1));
        lua_pop(L, 1);
        return st;
    }
    lm_array *a = NULL;
    if (!lua_isnil(L, -1)) {
        lm_lua_tensor *t = lm_lua_testtensor(L, -1);
        if (!t || !t->a) {
            lua_pop(L, 1);
            return lm_error_set(LM_ERR_ARG, "generate: noise function: draw %d is not a tensor", k);
        }
        a = lm_array_retain(t->a);
    }
    lua_pop(L, 1);
    if (a && (a->ndim != ndim || memcmp(a->shape, shape, sizeof *shape * (size_t)ndim))) {
        lm_array_release(a);
        return lm_error_set(LM_ERR_SHAPE, "generate: noise function: draw %d has the wrong shape", k);
    }
    *out = a;
    return LM_OK;
}

/* An integer option of pipe:generate in its range (models/family.h's, the
 * one check the CLI and the core use too), checked before narrowing to int:
 * steps = 2^32 + 2 is an error naming the option, not 2 steps. */
static int64_t opt_checked(lua_State *L, const char *fn, const char *field, lm_sd_opt id, int64_t dflt)
{
    lua_Integer v = lm_lua_opt_int(L, 2, fn, field, dflt);
    if (lm_sd_option_check_int(id, fn, field, v) != LM_OK) lm_lua_error(L);
    return v;
}

static double opt_checked_num(lua_State *L, const char *fn, const char *field, lm_sd_opt id, double dflt)
{
    lua_Number v = lm_lua_opt_num(L, 2, fn, field, dflt);
    if (lm_sd_option_check_num(id, fn, field, v) != LM_OK) lm_lua_error(L);
    return v;
}

/* one side of size=: a whole number of pixels in range */
static int64_t size_side(lua_State *L, const char *fn, int idx)
{
    int ok;
    lua_Integer v = lua_tointegerx(L, idx, &ok);
    if (!ok || lua_type(L, idx) != LUA_TNUMBER) {
        const lm_sd_option *o = lm_sd_option_get(LM_SD_OPT_SIZE);
        luaL_error(L, "%s: size %s: expected \"WxH\", {W, H} or N, whole numbers of pixels from "
                   "%d to %d", fn, lua_type(L, idx) == LUA_TNUMBER ? lua_tostring(L, idx)
                   : luaL_typename(L, idx), (int)o->ilo, (int)o->ihi);
    }
    if (lm_sd_option_check_int(LM_SD_OPT_SIZE, fn, NULL, v) != LM_OK) lm_lua_error(L);
    return v;
}

/* the value at idx in words for a message: 2.5, "x" (a string), table */
static const char *value_words(lua_State *L, int idx)
{
    if (lua_type(L, idx) == LUA_TNUMBER) return lua_tostring(L, idx);
    if (lua_type(L, idx) == LUA_TSTRING) return lua_pushfstring(L, "\"%s\" (a string)", lua_tostring(L, idx));
    return luaL_typename(L, idx);
}

/* a tensor option of pipe:generate at idx, else an error naming the option
 * (field, or field[k] for a list's entry) and what it takes */
static lm_array *opt_tensor(lua_State *L, int idx, const char *fn, const char *field, int k,
                            const char *what)
{
    lm_lua_tensor *t = lm_lua_testtensor(L, idx);
    if (!t || !t->a) {
        if (k) luaL_error(L, "%s: %s[%d]: expected %s, got %s", fn, field, k, what, value_words(L, idx));
        luaL_error(L, "%s: %s: expected %s, got %s", fn, field, what, value_words(L, idx));
    }
    return lm_lua_check_array(L, idx);
}

static int l_pipe_generate(lua_State *L)
{
    static const char *const known[] = {"prompt", "negative", "steps", "cfg", "sampler", "seed",
                                        "latents", "size", "init", "strength", "batch",
                                        "progress", "noise", "stacked", "clip_skip",
                                        "max_sequence_length", "cfg_normalization", "cfg_truncation",
                                        "refs", "text_layers", "prompt_syntax", "hires", "variation_seed",
                                        "variation_strength", "seed_resize_from", "mask", "mask_blur",
                                        "mask_overlay", "inpaint_full_res", "inpaint_padding", NULL};
    const char *fn = "pipe:generate";
    luaL_checktype(L, 2, LUA_TTABLE);
    lm_lua_check_opts(L, 2, fn, known);   /* before the pipeline: a typo is named first */
    lua_pipe *u = check_pipe(L, 1);
    lm_sd_gen_opts o;
    lm_sd_gen_opts_init_for(&o, u->p);   /* the family's defaults */
    lua_getfield(L, 2, "prompt");         /* 3 */
    lua_getfield(L, 2, "negative");       /* 4 */
    lua_getfield(L, 2, "seed");           /* 5 */
    lua_getfield(L, 2, "progress");       /* 6 */
    lua_getfield(L, 2, "noise");          /* 7 */
    lua_getfield(L, 2, "size");           /* 8 */
    o.prompts = texts_arg(L, 3, "pipe:generate: prompt", false, &o.nprompts);
    o.negatives = texts_arg(L, 4, "pipe:generate: negative", true, &o.nnegatives);
    bool has_batch = !lua_isnil(L, (lua_getfield(L, 2, "batch"), -1));
    lua_pop(L, 1);
    o.batch = (int)opt_checked(L, fn, "batch", LM_SD_OPT_BATCH, o.nprompts > 1 ? o.nprompts : o.batch);
    o.steps = (int)opt_checked(L, fn, "steps", LM_SD_OPT_STEPS, o.steps);
    o.cfg = opt_checked_num(L, fn, "cfg", LM_SD_OPT_CFG, o.cfg);
    o.sampler = lm_lua_opt_str(L, 2, fn, "sampler", o.sampler);
    o.strength = opt_checked_num(L, fn, "strength", LM_SD_OPT_STRENGTH, o.strength);
    o.stacked = lm_lua_opt_bool(L, 2, fn, "stacked", false);
    o.clip_skip = (int)opt_checked(L, fn, "clip_skip", LM_SD_OPT_CLIP_SKIP, o.clip_skip);
    o.plain_prompt = !lm_lua_opt_bool(L, 2, fn, "prompt_syntax", true);
    /* the DiT families' (models/sd_pipeline.h checks their ranges) */
    lua_Integer msl = lm_lua_opt_int(L, 2, fn, "max_sequence_length", 0);
    o.max_sequence_length = msl < 0 || msl > 1 << 16 ? -1 : (int)msl;
    o.cfg_normalization = lm_lua_opt_num(L, 2, fn, "cfg_normalization", 0);
    o.cfg_truncation = lm_lua_opt_num(L, 2, fn, "cfg_truncation", 0);
    uint64_t *seeds = lua_newuserdatauv(L, sizeof *seeds * (size_t)o.batch, 0);
    if (lua_istable(L, 5)) {
        if ((int)lua_rawlen(L, 5) != o.batch)
            return luaL_error(L, "%s: %d seeds for a batch of %d", fn, (int)lua_rawlen(L, 5), o.batch);
        for (int i = 0; i < o.batch; i++) {
            lua_rawgeti(L, 5, i + 1);
            if (!lua_isinteger(L, -1))
                return luaL_error(L, "%s: seeds[%d] = %s: expected a whole number >= 0", fn, i + 1,
                                  value_words(L, lua_absindex(L, -1)));
            if (lm_sd_option_check_int(LM_SD_OPT_SEED, fn, "seed", lua_tointeger(L, -1)) != LM_OK)
                return lm_lua_error(L);
            seeds[i] = (uint64_t)lua_tointeger(L, -1);
            lua_pop(L, 1);
        }
    } else {
        int whole = lua_isnil(L, 5);
        lua_Integer s0 = whole ? 0 : lua_tointegerx(L, 5, &whole);
        if (!whole || (!lua_isnil(L, 5) && lua_type(L, 5) != LUA_TNUMBER))
            return luaL_error(L, "%s: seed %s: expected a whole number >= 0, or one per image", fn,
                              value_words(L, 5));
        /* seed .. seed+batch-1 each one that can be given back */
        if (lm_sd_seeds_check(fn, "seed", "batch", s0, o.batch) != LM_OK) return lm_lua_error(L);
        for (int i = 0; i < o.batch; i++) seeds[i] = (uint64_t)s0 + (uint64_t)i;
    }
    o.seeds = seeds;
    /* size: N, {W, H} ({N} a square) or "WxH" / "N", each in range; nil = the model's */
    if (lua_type(L, 8) == LUA_TNUMBER) o.width = o.height = size_side(L, fn, 8);
    else if (lua_istable(L, 8)) {
        int ns = (int)lua_rawlen(L, 8);
        if (ns != 1 && ns != 2)
            return luaL_error(L, "%s: size: a table of %d values: expected {W, H} or {N}", fn, ns);
        lua_rawgeti(L, 8, 1);
        lua_rawgeti(L, 8, 2);
        o.width = size_side(L, fn, -2);
        o.height = lua_isnil(L, -1) ? o.width : size_side(L, fn, -1);
        lua_pop(L, 2);
    } else if (lua_type(L, 8) == LUA_TSTRING) {
        if (lm_sd_size_parse(fn, NULL, lua_tostring(L, 8), &o.width, &o.height) != LM_OK)
            return lm_lua_error(L);
    } else if (!lua_isnil(L, 8)) return luaL_error(L, "%s: size: \"WxH\", {W, H} or N", fn);
    lua_getfield(L, 2, "latents");
    if (!lua_isnil(L, -1))
        o.latents = opt_tensor(L, -1, fn, "latents", 0, "a tensor [B,C,h,w] (the initial latents)");
    lua_getfield(L, 2, "init");
    if (!lua_isnil(L, -1)) o.init = opt_tensor(L, -1, fn, "init", 0, "a tensor [3,H,W] or [B,3,H,W] in 0..1");
    /* inpainting (models/sd_inpaint.h) */
    lua_getfield(L, 2, "mask");
    if (!lua_isnil(L, -1)) o.mask = opt_tensor(L, -1, fn, "mask", 0, "a tensor [H,W] or [C,H,W] in 0..1 (white = repaint)");
    o.mask_blur = lm_lua_opt_num(L, 2, fn, "mask_blur", 0);
    o.mask_overlay = lm_lua_opt_bool(L, 2, fn, "mask_overlay", false);
    o.inpaint_crop = lm_lua_opt_bool(L, 2, fn, "inpaint_full_res", false);
    o.inpaint_padding = lm_lua_opt_int(L, 2, fn, "inpaint_padding", 32);
    /* refs: FLUX.2-klein's reference images, a tensor or a list (borrowed
     * from the table, which stays on the stack) */
    lua_getfield(L, 2, "refs");
    int refs_at = lua_gettop(L);
    if (lua_istable(L, refs_at)) {
        int nr = (int)lua_rawlen(L, refs_at);
        lm_array **r = lua_newuserdatauv(L, sizeof *r * (size_t)(nr ? nr : 1), 0);
        for (int k = 0; k < nr; k++) {
            lua_rawgeti(L, refs_at, k + 1);
            r[k] = opt_tensor(L, -1, fn, "refs", k + 1, "a tensor [3,H,W] in 0..1");
            lua_pop(L, 1);
        }
        o.refs = r;
        o.nrefs = nr;
    } else if (!lua_isnil(L, refs_at)) {
        lm_array **one = lua_newuserdatauv(L, sizeof *one, 0);
        one[0] = opt_tensor(L, refs_at, fn, "refs", 0, "a tensor [3,H,W] in 0..1, or a list of them");
        o.refs = one;
        o.nrefs = 1;
    }
    /* text_layers: the text encoder's hidden states a DiT takes */
    lua_getfield(L, 2, "text_layers");
    int *tl = lua_newuserdatauv(L, sizeof *tl * LM_SD_MAX_LAYERS, 0);
    if (lua_istable(L, -2)) {
        int nl = (int)lua_rawlen(L, -2);
        if (nl < 1 || nl > LM_SD_MAX_LAYERS) return luaL_error(L, "%s: text_layers: 1 to %d layers", fn, LM_SD_MAX_LAYERS);
        for (int k = 0; k < nl; k++) {
            lua_rawgeti(L, -2, k + 1);
            int isint;
            lua_Integer v = lua_tointegerx(L, -1, &isint);
            if (!isint || v < -1024 || v > 1024) return luaL_error(L, "%s: text_layers[%d]: a layer index", fn, k + 1);
            tl[k] = (int)v;
            lua_pop(L, 1);
        }
        o.text_layers = tl;
        o.n_text_layers = nl;
    } else if (!lua_isnil(L, -2)) return luaL_error(L, "%s: text_layers: a table of layer indices", fn);
    lua_getfield(L, LUA_REGISTRYINDEX, LM_LUA_BUSY_KEY);
    lua_cb cb = {L, 6, 7, lua_isfunction(L, -1) ? lua_gettop(L) : 0};
    if (!lua_isnil(L, 6) && !lua_isfunction(L, 6)) return luaL_error(L, "%s: progress must be a function", fn);
    if (lua_isfunction(L, 6) || cb.busy) o.progress = cb_progress, o.progress_ctx = &cb;
    if (lua_isfunction(L, 7)) o.noise = cb_noise, o.noise_ctx = &cb;
    else if (!lua_isnil(L, 7)) return luaL_error(L, "%s: noise must be a function", fn);
    if (o.latents && !has_batch && o.latents->ndim == 4) o.batch = (int)o.latents->shape[0];
    /* A1111's variation seed (image i's start noise slerped toward
     * variation_seed + i's) and hires fix (models/sd_hires.h) */
    lua_getfield(L, 2, "variation_seed");
    if (lua_istable(L, -1)) {   /* one per image, as seed= */
        if ((int)lua_rawlen(L, -1) != o.batch)
            return luaL_error(L, "%s: %d variation seeds for a batch of %d", fn, (int)lua_rawlen(L, -1),
                              o.batch);
        uint64_t *subs = lua_newuserdatauv(L, sizeof *subs * (size_t)o.batch, 0);
        for (int i = 0; i < o.batch; i++) {
            lua_rawgeti(L, -2, i + 1);
            int whole;
            lua_Integer v = lua_tointegerx(L, -1, &whole);
            if (!whole || lm_sd_option_check_int(LM_SD_OPT_SEED, fn, "variation_seed", v) != LM_OK)
                return whole ? lm_lua_error(L) : luaL_error(L, "%s: variation_seed[%d]: expected a whole "
                                                            "number >= 0", fn, i + 1);
            subs[i] = (uint64_t)v;
            lua_pop(L, 1);
        }
        o.subseeds = subs;   /* held by the stack until the call returns */
    } else {
        lua_Integer vs = lm_lua_opt_int(L, 2, fn, "variation_seed", 0);
        if (lm_sd_option_check_int(LM_SD_OPT_SEED, fn, "variation_seed", vs) != LM_OK) return lm_lua_error(L);
        o.subseed = (uint64_t)vs;
    }
    o.subseed_strength = lm_lua_opt_num(L, 2, fn, "variation_strength", 0);
    const char *srf = lm_lua_opt_str(L, 2, fn, "seed_resize_from", NULL);
    if (srf && lm_sd_size_parse(fn, "seed_resize_from", srf, &o.seed_resize_w, &o.seed_resize_h) != LM_OK)
        return lm_lua_error(L);
    lm_sd_hires_opts ho;
    lm_sd_hires_opts_init(&ho);
    lua_getfield(L, 2, "hires");
    int hi = lua_gettop(L);
    bool hires = !lua_isnil(L, hi);
    if (hires) {
        static const char *const hknown[] = {"scale", "size", "steps", "denoise", "upscaler", "tile", NULL};
        const char *hf = "pipe:generate: hires";
        lm_lua_check_opts(L, hi, hf, hknown);
        ho.scale = lm_lua_opt_num(L, hi, hf, "scale", ho.scale);
        lua_Integer st = lm_lua_opt_int(L, hi, hf, "steps", 0);
        if (st && lm_sd_option_check_int(LM_SD_OPT_STEPS, hf, "steps", st) != LM_OK) return lm_lua_error(L);
        ho.steps = (int)st;
        ho.denoise = lm_lua_opt_num(L, hi, hf, "denoise", ho.denoise);
        ho.upscaler = lm_lua_opt_str(L, hi, hf, "upscaler", ho.upscaler);
        lua_Integer tile = lm_lua_opt_int(L, hi, hf, "tile", 0);
        ho.tile = tile < 0 ? 0 : tile;
        const char *hs = lm_lua_opt_str(L, hi, hf, "size", NULL);
        if (hs && sscanf(hs, "%" SCNd64 "x%" SCNd64, &ho.width, &ho.height) != 2)
            return luaL_error(L, "%s: size %s: expected \"WxH\" (0 for one side keeps the aspect)", hf, hs);
    }
    lm_lua_enter(L);
    lm_array *img = hires ? lm_sd_generate_hires(u->p, &o, &ho) : lm_sd_generate(u->p, &o);
    if (!img) return lm_lua_error(L);
    if (o.batch == 1 && !has_batch) {
        lm_array *sq = lm_squeeze(img, 0);
        lm_array_release(img);
        img = sq;
    }
    return lm_lua_push_array(L, img);
}

/* pipe:encode_prompt for a DiT family: one prompt gives one array (Z-Image
 * [L, D] at its tokens, FLUX.2 [1, L, n*D]), a table of prompts a table */
static int dit_encode_prompt(lua_State *L, lm_sd_pipeline *p)
{
    static const char *const known[] = {"max_sequence_length", "text_layers", NULL};
    const char *fn = "pipe:encode_prompt";
    lm_lua_check_opts(L, 3, fn, known);
    lua_Integer msl = lm_lua_opt_int(L, 3, fn, "max_sequence_length", 0);
    if (msl < 0 || msl > 1 << 16) return luaL_error(L, "%s: max_sequence_length %d: expected 1 to 65536", fn,
                                                     (int)msl);
    int layers[LM_SD_MAX_LAYERS], nl = 0;
    if (lua_istable(L, 3)) {
        lua_getfield(L, 3, "text_layers");
        if (lua_istable(L, -1)) {
            nl = (int)lua_rawlen(L, -1);
            if (nl < 1 || nl > LM_SD_MAX_LAYERS)
                return luaL_error(L, "%s: text_layers: 1 to %d layers", fn, LM_SD_MAX_LAYERS);
            for (int i = 0; i < nl; i++) {
                lua_rawgeti(L, -1, i + 1);
                int ok;
                lua_Integer v = lua_tointegerx(L, -1, &ok);
                if (!ok || v < -1024 || v > 1024) return luaL_error(L, "%s: text_layers[%d]: a layer index", fn, i + 1);
                layers[i] = (int)v;
                lua_pop(L, 1);
            }
        } else if (!lua_isnil(L, -1)) return luaL_error(L, "%s: text_layers: a table of layer indices", fn);
        lua_pop(L, 1);
    }
    bool many = lua_istable(L, 2);
    int n;
    const char **t = texts_arg(L, 2, fn, true, &n);
    if (!t) {
        static const char *none[1] = {NULL};
        t = none;
        n = 1;
    }
    lm_array **out = lua_newuserdatauv(L, sizeof *out * (size_t)n, 0);
    lm_lua_enter(L);
    if (lm_dit_pipe_encode_prompt(lm_sd_pipeline_dit(p), n, t, (int)msl, nl, nl ? layers : NULL, out) != LM_OK)
        return lm_lua_error(L);
    if (!many) return lm_lua_push_array(L, out[0]);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lm_lua_push_array(L, out[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int l_pipe_encode_prompt(lua_State *L)
{
    lua_pipe *u = check_pipe(L, 1);
    if (lm_sd_pipeline_dit(u->p)) return dit_encode_prompt(L, u->p);
    static const char *const known[] = {"clip_skip", "prompt_syntax", NULL};
    lm_lua_check_opts(L, 3, "pipe:encode_prompt", known);
    lua_Integer skip = lm_lua_opt_int(L, 3, "pipe:encode_prompt", "clip_skip", 0);
    bool syntax = lm_lua_opt_bool(L, 3, "pipe:encode_prompt", "prompt_syntax", false);
    if (lm_sd_option_check_int(LM_SD_OPT_CLIP_SKIP, "pipe:encode_prompt", NULL, skip) != LM_OK)
        return lm_lua_error(L);
    int n;
    const char **t = texts_arg(L, 2, "pipe:encode_prompt", true, &n);
    if (!t) {   /* nil: diffusers' negative_prompt=None */
        static const char *none[1] = {NULL};
        t = none;
        n = 1;
    }
    lm_array *e, *p;
    lm_lua_enter(L);
    if (lm_sd_encode_prompt_syntax(u->p, n, t, (int)skip, syntax, &e, &p) != LM_OK) return lm_lua_error(L);
    lm_lua_push_array(L, e);
    if (!p) return 1;
    lm_lua_push_array(L, p);
    return 2;
}

static int l_pipe_decode(lua_State *L)
{
    lua_pipe *u = check_pipe(L, 1);
    lm_lua_enter(L);
    return lm_lua_push_array(L, lm_sd_decode_latents(u->p, lm_lua_check_array(L, 2)));
}

static int l_pipe_encode_image(lua_State *L)
{
    lua_pipe *u = check_pipe(L, 1);
    lm_lua_enter(L);
    return lm_lua_push_array(L, lm_sd_encode_image(u->p, lm_lua_check_array(L, 2)));
}

static int l_pipe_free(lua_State *L)
{
    lua_pipe *u = luaL_checkudata(L, 1, LM_LUA_SD_PIPE);
    lm_sd_pipeline_free(u->p);
    u->p = NULL;
    return 0;
}

/* a stage borrowed from the pipeline at 1: user value 1 keeps it alive */
static void push_borrowed(lua_State *L, const char *mt, void *obj, size_t size)
{
    void *u = lua_newuserdatauv(L, size, 1);
    memset(u, 0, size);
    if (!strcmp(mt, LM_LUA_CLIP_TOK)) ((lua_tok *)u)->t = obj, ((lua_tok *)u)->borrowed = true;
    else if (!strcmp(mt, LM_LUA_CLIP_TEXT)) ((lua_enc *)u)->m = obj, ((lua_enc *)u)->borrowed = true;
    else if (!strcmp(mt, LM_LUA_QWEN_TOK)) ((lua_qtok *)u)->t = obj;
    else ((lua_part *)u)->kind = !strcmp((const char *)obj, "vae") ? PART_VAE
                                 : !strcmp((const char *)obj, "transformer") ? PART_TRANSFORMER : PART_UNET;
    luaL_setmetatable(L, mt);
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1);
}

static int l_pipe_index(lua_State *L)
{
    lua_pipe *u = check_pipe(L, 1);
    const char *k = luaL_checkstring(L, 2);
    lm_sd_pipeline *p = u->p;
    if (!strcmp(k, "family")) lua_pushstring(L, lm_sd_family_name(lm_sd_pipeline_family(p)));
    else if (!strcmp(k, "dtype")) lua_pushstring(L, lm_dtype_name(lm_sd_pipeline_dtype(p)));
    else if (!strcmp(k, "device")) lua_pushstring(L, lm_sd_pipeline_device(p)->spec);
    else if (!strcmp(k, "name")) lua_pushstring(L, lm_sd_pipeline_name(p));
    else if (!strcmp(k, "latent_channels")) lua_pushinteger(L, lm_sd_pipeline_latent_channels(p));
    else if (!strcmp(k, "vae_scale")) lua_pushinteger(L, lm_sd_pipeline_vae_scale(p));
    else if (!strcmp(k, "default_size")) lua_pushinteger(L, lm_sd_pipeline_default_size(p));
    else if (!strcmp(k, "defaults")) {   /* the family's generation defaults (models/family.h) */
        const lm_sd_defaults *d = lm_sd_pipeline_defaults(p);
        lua_createtable(L, 0, 6);
        lua_pushinteger(L, d->steps);
        lua_setfield(L, -2, "steps");
        lua_pushnumber(L, d->cfg);
        lua_setfield(L, -2, "cfg");
        lua_pushstring(L, d->sampler);
        lua_setfield(L, -2, "sampler");
        lua_pushnumber(L, d->strength);
        lua_setfield(L, -2, "strength");
        lua_pushinteger(L, d->clip_skip);
        lua_setfield(L, -2, "clip_skip");
        lua_pushinteger(L, lm_sd_pipeline_default_size(p));
        lua_setfield(L, -2, "size");
    }
    else if (lm_sd_pipeline_dit(p) && !strcmp(k, "tokenizer"))
        push_borrowed(L, LM_LUA_QWEN_TOK, lm_dit_pipe_tokenizer(lm_sd_pipeline_dit(p)), sizeof(lua_qtok));
    else if (!strcmp(k, "transformer")) {
        if (lm_sd_pipeline_dit(p)) push_borrowed(L, LM_LUA_SD_PART, (void *)"transformer", sizeof(lua_part));
        else lua_pushnil(L);
    } else if (!strcmp(k, "tokenizer") || !strcmp(k, "tokenizer_2")) {
        lm_clip_tokenizer *t = lm_sd_pipeline_tokenizer(p, k[9] == '_');
        if (t) push_borrowed(L, LM_LUA_CLIP_TOK, t, sizeof(lua_tok));
        else lua_pushnil(L);
    } else if (!strcmp(k, "text_encoder") || !strcmp(k, "text_encoder_2")) {
        lm_clip_text *t = lm_sd_pipeline_text_encoder(p, k[12] == '_');
        if (t) push_borrowed(L, LM_LUA_CLIP_TEXT, t, sizeof(lua_enc));
        else lua_pushnil(L);
    } else if (!strcmp(k, "unet")) {
        if (lm_sd_pipeline_unet(p)) push_borrowed(L, LM_LUA_SD_PART, (void *)"unet", sizeof(lua_part));
        else lua_pushnil(L);
    }
    else if (!strcmp(k, "vae")) push_borrowed(L, LM_LUA_SD_PART, (void *)"vae", sizeof(lua_part));
    else {
        luaL_getmetatable(L, LM_LUA_SD_PIPE);
        lua_getfield(L, -1, "methods");
        lua_getfield(L, -1, k);
    }
    return 1;
}

static lm_sd_pipeline *check_part(lua_State *L, int idx, int kind)
{
    static const char *const names[] = {"pipe.unet", "pipe.vae", "pipe.transformer"};
    lua_part *u = luaL_checkudata(L, idx, LM_LUA_SD_PART);
    if (u->kind != kind) luaL_error(L, "expected %s", names[kind]);
    return owner_of(L, idx);
}

/* ---- a DiT family's stages (Z-Image, FLUX.2-klein) ---- */

static lm_qwen_tokenizer *check_qtok(lua_State *L, int idx, lm_sd_pipeline **p)
{
    lua_qtok *u = luaL_checkudata(L, idx, LM_LUA_QWEN_TOK);
    lm_sd_pipeline *o = owner_of(L, idx);
    if (p) *p = o;
    return u->t;
}

/* tok:chat(prompt[, {thinking = bool}]): the text the family's pipeline
 * gives its encoder (apply_chat_template, one user message, the generation
 * prompt; thinking defaults to what the pipeline passes) */
static int l_qtok_chat(lua_State *L)
{
    lm_sd_pipeline *p;
    lm_qwen_tokenizer *t = check_qtok(L, 1, &p);
    const char *prompt = luaL_checkstring(L, 2);
    static const char *const known[] = {"thinking", NULL};
    lm_lua_check_opts(L, 3, "tokenizer:chat", known);
    int think = lm_sd_pipeline_row(p)->encoders[0].enable_thinking;
    if (lua_istable(L, 3)) {
        lua_getfield(L, 3, "thinking");
        if (!lua_isnil(L, -1)) think = lm_lua_opt_bool(L, 3, "tokenizer:chat", "thinking", false);
        lua_pop(L, 1);
    }
    char *text = lm_qwen_tokenizer_chat(t, prompt, think);
    if (!text) return lm_lua_error(L);
    lua_pushstring(L, text);
    free(text);
    return 1;
}

static void push_ids(lua_State *L, const int32_t *ids, int64_t n)
{
    lua_createtable(L, (int)n, 0);
    for (int64_t i = 0; i < n; i++) {
        lua_pushinteger(L, ids[i]);
        lua_rawseti(L, -2, i + 1);
    }
}

/* tok:encode(text[, {max_length = N}]): the ids (0-based, as transformers
 * gives them); with max_length, padded or cut to it, and the mask */
static int l_qtok_encode(lua_State *L)
{
    lm_qwen_tokenizer *t = check_qtok(L, 1, NULL);
    const char *text = luaL_checkstring(L, 2);
    static const char *const known[] = {"max_length", NULL};
    lm_lua_check_opts(L, 3, "tokenizer:encode", known);
    lua_Integer max = lm_lua_opt_int(L, 3, "tokenizer:encode", "max_length", 0);
    if (max < 0 || max > 1 << 20) return luaL_error(L, "tokenizer:encode: max_length %d: expected 1 to %d",
                                                    (int)max, 1 << 20);
    if (!max) {
        int32_t *ids = NULL;
        int64_t n = 0;
        if (lm_qwen_tokenizer_encode(t, text, &ids, &n) != LM_OK) return lm_lua_error(L);
        push_ids(L, ids, n);
        free(ids);
        return 1;
    }
    int32_t *ids = malloc(sizeof *ids * (size_t)max), *mask = malloc(sizeof *mask * (size_t)max);
    if (!ids || !mask || lm_qwen_tokenizer_encode_padded(t, text, max, ids, mask, NULL) != LM_OK) {
        bool oom = !ids || !mask;
        free(ids);
        free(mask);
        return oom ? luaL_error(L, "tokenizer:encode: out of memory") : lm_lua_error(L);
    }
    push_ids(L, ids, max);
    push_ids(L, mask, max);
    free(ids);
    free(mask);
    return 2;
}

static int l_qtok_decode(lua_State *L)
{
    lm_qwen_tokenizer *t = check_qtok(L, 1, NULL);
    luaL_checktype(L, 2, LUA_TTABLE);
    int64_t n = (int64_t)lua_rawlen(L, 2);
    int32_t *ids = lua_newuserdatauv(L, sizeof *ids * (size_t)(n ? n : 1), 0);
    for (int64_t i = 0; i < n; i++) {
        lua_rawgeti(L, 2, i + 1);
        int ok;
        lua_Integer v = lua_tointegerx(L, -1, &ok);
        if (!ok || v < INT32_MIN || v > INT32_MAX)
            return luaL_error(L, "tokenizer:decode: ids[%d] is not a token id", (int)(i + 1));
        ids[i] = (int32_t)v;
        lua_pop(L, 1);
    }
    char *text = lm_qwen_tokenizer_decode(t, ids, n);
    if (!text) return lm_lua_error(L);
    lua_pushstring(L, text);
    free(text);
    return 1;
}

static int l_qtok_index(lua_State *L)
{
    lm_qwen_tokenizer *t = check_qtok(L, 1, NULL);
    const char *k = luaL_checkstring(L, 2);
    if (!strcmp(k, "vocab_size")) lua_pushinteger(L, lm_qwen_tokenizer_vocab_size(t));
    else if (!strcmp(k, "pad")) lua_pushinteger(L, lm_qwen_tokenizer_pad_id(t));
    else if (!strcmp(k, "eos")) lua_pushinteger(L, lm_qwen_tokenizer_eos_id(t));
    else if (!strcmp(k, "chat")) lua_pushcfunction(L, l_qtok_chat);
    else if (!strcmp(k, "encode")) lua_pushcfunction(L, l_qtok_encode);
    else if (!strcmp(k, "decode")) lua_pushcfunction(L, l_qtok_decode);
    else lua_pushnil(L);
    return 1;
}

static int l_qtok_free(lua_State *L) { (void)L; return 0; }   /* the pipeline owns it */

/* pipe.transformer(latents, t, context): one call of the family's
 * transformer, as its pipeline makes it.  Z-Image: latents [B, C, H, W],
 * t the pipeline's (1000 - timestep) / 1000 (a number or [B]), context one
 * [L, D] array (B = 1) or a table of B; the raw output [B, C, H, W] (the
 * pipeline negates it).  FLUX.2: latents [B, 4C, h, w] (the VAE's latents
 * in 2x2 patches), t the timestep / 1000, context [B, L, D]; packed, given
 * their position ids and unpacked here: [B, 4C, h, w]. */
static int l_transformer_call(lua_State *L)
{
    lm_sd_pipeline *p = check_part(L, 1, PART_TRANSFORMER);
    lm_dit_pipe *d = lm_sd_pipeline_dit(p);
    lm_array *x = lm_lua_check_array(L, 2);
    if (x->ndim != 4) return luaL_error(L, "pipe.transformer: latents: expected [B, C, H, W]");
    int64_t B = x->shape[0];
    lm_array **caps = lua_newuserdatauv(L, sizeof *caps * (size_t)B, 0);
    int ncap = 0;
    if (lua_istable(L, 4)) {
        ncap = (int)lua_rawlen(L, 4);
        for (int i = 0; i < ncap && i < B; i++) {
            lua_rawgeti(L, 4, i + 1);
            caps[i] = lm_lua_check_array(L, -1);
            lua_pop(L, 1);   /* the table keeps it */
        }
    } else {
        caps[0] = lm_lua_check_array(L, 4);
        ncap = 1;
    }
    lm_lua_enter(L);
    lm_array *t;
    if (lua_type(L, 3) == LUA_TNUMBER) t = lm_full(1, &B, lua_tonumber(L, 3), LM_F32, lm_sd_pipeline_device(p));
    else t = lm_cast(lm_lua_check_array(L, 3), LM_F32);
    if (!t) return lm_lua_error(L);
    lm_array *r = NULL;
    if (lm_dit_pipe_transformer_ready(d) != LM_OK) {   /* after an offload */
        lm_array_release(t);
        return lm_lua_error(L);
    }
    if (lm_dit_pipe_zimage(d)) {
        if (ncap != B) {
            lm_array_release(t);
            return luaL_error(L, "pipe.transformer: %d caption arrays for a batch of %d", ncap, (int)B);
        }
        r = lm_zimage_forward(lm_dit_pipe_zimage(d), x, t, ncap, caps);
    } else {
        lm_array *ctx = caps[0];
        int64_t h = x->shape[2], w = x->shape[3], S = h * w, Lc = ctx->ndim == 3 ? ctx->shape[1] : 0;
        int32_t *img_ids = malloc(sizeof *img_ids * (size_t)(S * 4));
        int32_t *txt_ids = malloc(sizeof *txt_ids * (size_t)((Lc ? Lc : 1) * 4));
        lm_array *packed = img_ids && txt_ids && Lc ? lm_flux2_pack(x) : NULL, *out = NULL;
        if (!Lc) lm_error_set(LM_ERR_SHAPE, "pipe.transformer: context: expected [B, L, D]");
        else if (!img_ids || !txt_ids) lm_error_set(LM_ERR_NOMEM, "pipe.transformer: out of memory");
        if (packed) {
            lm_flux2_latent_ids(h, w, img_ids);
            lm_flux2_text_ids(Lc, txt_ids);
            out = lm_flux2_forward(lm_dit_pipe_flux2(d), packed, ctx, t, img_ids, S, txt_ids, Lc);
        }
        if (out) r = lm_flux2_unpack(out, img_ids, 4, h, w);
        lm_array_release(packed);
        lm_array_release(out);
        free(img_ids);
        free(txt_ids);
    }
    lm_array_release(t);
    return lm_lua_push_array(L, r);
}

/* pipe.unet(latents, t, context[, text_embeds, time_ids]) */
static int l_unet_call(lua_State *L)
{
    if (((lua_part *)luaL_checkudata(L, 1, LM_LUA_SD_PART))->kind == PART_TRANSFORMER)
        return l_transformer_call(L);
    lm_sd_pipeline *p = check_part(L, 1, PART_UNET);
    lm_array *x = lm_lua_check_array(L, 2), *ctx = lm_lua_check_array(L, 4);
    lm_array *te = lua_isnoneornil(L, 5) ? NULL : lm_lua_check_array(L, 5);
    lm_array *ti = lua_isnoneornil(L, 6) ? NULL : lm_lua_check_array(L, 6);
    lm_array *t;
    lm_lua_enter(L);
    if (lua_type(L, 3) == LUA_TNUMBER) {
        int64_t n = x->ndim == 4 ? x->shape[0] : 1;
        t = lm_full(1, &n, lua_tonumber(L, 3), LM_F32, lm_sd_pipeline_device(p));
    } else {
        lm_array *tt = lm_lua_check_array(L, 3);
        t = lm_cast(tt, LM_F32);
    }
    if (!t) return lm_lua_error(L);
    lm_array *r = lm_unet_forward(lm_sd_pipeline_unet(p), x, t, ctx, te, ti);
    lm_array_release(t);
    return lm_lua_push_array(L, r);
}

static int l_vae_encode(lua_State *L)
{
    lm_sd_pipeline *p = check_part(L, 1, PART_VAE);
    lm_array *mean, *logvar;
    lm_lua_enter(L);
    if (lm_vae_encode(lm_sd_pipeline_vae(p), lm_lua_check_array(L, 2), &mean, &logvar) != LM_OK)
        return lm_lua_error(L);
    lm_lua_push_array(L, mean);
    lm_lua_push_array(L, logvar);
    return 2;
}

static int l_vae_decode(lua_State *L)
{
    lm_sd_pipeline *p = check_part(L, 1, PART_VAE);
    lm_lua_enter(L);
    return lm_lua_push_array(L, lm_vae_decode(lm_sd_pipeline_vae(p), lm_lua_check_array(L, 2)));
}

static int l_part_index(lua_State *L)
{
    lua_part *u = luaL_checkudata(L, 1, LM_LUA_SD_PART);
    const char *k = luaL_checkstring(L, 2);
    if (u->kind == PART_VAE && !strcmp(k, "encode")) lua_pushcfunction(L, l_vae_encode);
    else if (u->kind == PART_VAE && !strcmp(k, "decode")) lua_pushcfunction(L, l_vae_decode);
    else lua_pushnil(L);
    return 1;
}

static int l_part_free(lua_State *L) { (void)L; return 0; }   /* the pipeline owns it */

/* samplers(): the sampler table's rows as tables */
static int l_samplers(lua_State *L)
{
    static const char *const sigmas[] = {"none", "default", "karras", "exponential"};
    static const char *const preds[] = {"epsilon", "v_prediction", "sample"};
    lua_newtable(L);
    const lm_sampler_info *r;
    for (int i = 0; (r = lm_sampler_info_at(i)); i++) {
        lua_createtable(L, 0, 11);
        lua_pushstring(L, r->name);
        lua_setfield(L, -2, "name");
        lua_pushstring(L, r->a1111);
        lua_setfield(L, -2, "a1111");
        lua_pushstring(L, r->a1111_schedule);
        lua_setfield(L, -2, "schedule");
        lua_pushstring(L, lm_sampler_kind_name(r->kind));
        lua_setfield(L, -2, "kind");
        lua_pushstring(L, sigmas[r->sigmas]);
        lua_setfield(L, -2, "sigmas");
        lua_pushboolean(L, r->ancestral);
        lua_setfield(L, -2, "ancestral");
        lua_pushinteger(L, r->order_min);
        lua_setfield(L, -2, "order_min");
        lua_pushinteger(L, r->order_max);
        lua_setfield(L, -2, "order_max");
        lua_newtable(L);
        for (int p = 0, n = 0; p < 3; p++)
            if (r->predictions & LM_PRED_BIT(p)) {
                lua_pushstring(L, preds[p]);
                lua_rawseti(L, -2, ++n);
            }
        lua_setfield(L, -2, "predictions");
        lua_pushstring(L, r->diffusers);
        lua_setfield(L, -2, "diffusers");
        lua_pushstring(L, r->config);
        lua_setfield(L, -2, "config");
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* free: one name for every kind of object */
static int l_free_any(lua_State *L)
{
    if (luaL_testudata(L, 1, LM_LUA_CLIP_TEXT)) return l_enc_free(L);
    if (luaL_testudata(L, 1, LM_LUA_SD_PIPE)) return l_pipe_free(L);
    if (luaL_testudata(L, 1, LM_LUA_SD_PART)) return l_part_free(L);
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
    {"pipeline", lm_lua_sd_pipeline_open,
     "lm.diffusion.pipeline(path, {dtype=, device=, variant=, tokenizer=, prediction=, tiling=,\n"
     "offload=, prewarm=true, prewarm_size=, prewarm_sampler=})\n"
     "-> pipe\n"
     "Also lm.models.load(path).  A Stable Diffusion pipeline (SD 1.x, 2.x, SDXL) from a\n"
     "diffusers folder (model_index.json) or a single-file .safetensors or .gguf checkpoint\n"
     "(GGUF: stable-diffusion.cpp's layout, linear weights maybe quantized), computed\n"
     "as diffusers computes it.  dtype: f16 on a GPU, f32 on the CPU by default.  variant:\n"
     "\"fp16\" picks the *.fp16.safetensors files.  tokenizer: for single files, a diffusers\n"
     "folder to take tokenizer/ [tokenizer_2/] and scheduler/ from.  prediction: \"epsilon\" or\n"
     "\"v_prediction\", overriding the scheduler config.  embeddings: a folder of A1111\n"
     "textual-inversion embeddings (*.safetensors: emb_params / string_to_param, or SDXL's\n"
     "clip_l + clip_g) whose file names stand for their vectors in prompts.  tiling: the\n"
     "VAE's, \"auto\" (the default, see models/vae.h), \"on\" or \"off\" (diffusers' default).\n"
     "offload = true (Z-Image, FLUX.2-klein): one network on the device at a time, the Qwen3\n"
     "encoder and the transformer read again for each image, so the peak is the larger one's.\n"
     "prewarm (default true; off with LUMEN_PREWARM=0 or offload): on a GPU, a dry run at load\n"
     "that starts compiling every kernel pipeline a generation at prewarm_size (default the\n"
     "family's size) with prewarm_sampler (default the family's) needs, and runs none, so\n"
     "the first image does not wait for them stage by stage; results do not change.\n"
     "Weights "
     "load once and stay on the\n"
     "device.  Stages: pipe.tokenizer, pipe.tokenizer_2, pipe.text_encoder,\n"
     "pipe.text_encoder_2, pipe.unet(latents, t, context[, text_embeds, time_ids]),\n"
     "pipe.vae:encode(img in -1..1) -> mean, logvar, pipe.vae:decode(z) -> image in -1..1.\n"
     "Fields: family (sd1, sd2, sdxl), dtype, device, name, latent_channels, vae_scale,\n"
     "default_size, defaults (the family's {steps=, cfg=, sampler=, strength=, clip_skip=,\n"
     "size=}).  Methods: generate, encode_prompt, decode_latents, encode_image, free."},
    {"generate", l_pipe_generate,
     "lm.diffusion.generate(pipe, {prompt=, negative=, steps=20, cfg=7, sampler=\"dpm++2m_karras\",\n"
     "seed=0 | latents=, size=, init=, strength=0.8, batch=, progress=, noise=, stacked=false})\n"
     "-> image\n"
     "Defaults: the model family's (pipe.defaults; those above for SD).  Ranges, the same as\n"
     "lumen generate's: steps 1 to 10000, cfg 0 to 1000, strength (0, 1], batch 1 to 4096,\n"
     "clip_skip 0 to 63, seed >= 0, each side of size 8 to 65536; anything else (or a\n"
     "number that is not whole where one is needed) is an error naming the option; so is\n"
     "a seed whose batch would run past 2^63-1, and a strength that leaves no step\n"
     "(int(steps * strength) < 1), before any network runs.  A NaN or an infinity produced\n"
     "by a stage (text encoder, UNet step, VAE) is an error naming it: no image.\n"
     "Also pipe:generate{...}.  The image [3,H,W] in 0..1 ([B,3,H,W] when batch= is given),\n"
     "as diffusers' pipeline(prompt, negative_prompt=, num_inference_steps=, guidance_scale=,\n"
     "latents=) gives it.  prompt / negative: a string or one per image; a missing negative\n"
     "(or a false entry in a table of them) is diffusers' None (zeros on SDXL; \"\" encodes\n"
     "the empty prompt).  sampler: a name from lm.diffusion.samplers(),\n"
     "Lumen's or A1111's.  seed: a number (image i gets seed+i) or one per image; each\n"
     "image's noise comes from its own seed and each image's networks run as they would\n"
     "alone (evaluated together), so a batch gives the bytes of single runs; stacked=true\n"
     "runs the whole batch in one UNet call instead (last bits differ on the CPU; on Vulkan\n"
     "its kernels are chosen as for one image, meant to keep single runs' bytes).\n"
     "clip_skip: as diffusers' (1 = the penultimate layer).  prompt_syntax (default true, SD\n"
     "families): A1111's prompt handling (lm.diffusion.parse_prompt's weights, BREAK, prompts\n"
     "over 75 tokens in chunks, <lora:...> tags removed; see docs/DIFFUSION.md); false\n"
     "tokenizes the prompt literally and cuts it at 77 tokens, as diffusers.  Z-Image and\n"
     "FLUX.2-klein: true removes <lora:...> tags, the rest read literally ((word:1.2) too).\n"
     "latents: [B,C,h,w] initial latents (times init_noise_sigma).  size: \"WxH\", \"N\", {W,H}\n"
     "or N (multiples of the VAE's scale, 8; default the model's).  init: img2img from an image [3,H,W] in 0..1\n"
     "(encoded to the latent mean; with size= of another size, resized to it first: PIL's\n"
     "Lanczos, diffusers' preprocess(image, height, width), A1111's \"Just resize\"; a mask= of\n"
     "another size is resized to the init image's), strength in (0,1].  cfg <= 1 runs without guidance.\n"
     "progress(step, steps) is called after every step; noise(k, shape) may return the\n"
     "tensor to use as draw k (0 = initial / img2img's add_noise, k >= 1 = ancestral, -1 =\n"
     "img2img's VAE sample, else the mean is used), to compare with diffusers' draws.\n"
     "The DiT families (pipe.family \"zimage\", \"klein\", \"klein-base\"): sampler \"euler\"\n"
     "only (FlowMatchEulerDiscreteScheduler as the release's config sets it); Z-Image's cfg\n"
     "> 0 guides (c + cfg (c - u)), cfg_normalization= and cfg_truncation= as ZImagePipeline's\n"
     "(0 = off); FLUX.2-klein guides when cfg > 1 and the model is not distilled, with an\n"
     "empty negative; refs= a [3,H,W] image in 0..1 or a list of them (FLUX.2-klein's\n"
     "reference images: sides >= 64, centre-cropped to multiples of 16); max_sequence_length=\n"
     "(default 512) and text_layers= (the encoder's hidden states, transformers' indices;\n"
     "default the family's) as the pipelines' arguments of those names.  Sizes are multiples\n"
     "of twice the VAE's scale (16).\n"
     "hires={scale=2, size=\"WxH\", steps=, denoise=0.7, upscaler=\"latent\", tile=}: A1111's\n"
     "hires fix (SD families): generate at size, upscale the latents (\"latent\" = bilinear,\n"
     "\"latent-nearest\") or the decoded images with a Lumen upscaler (\"esrgan-thick\", a\n"
     "model.json), then img2img at the target size with steps (default the base's;\n"
     "int(steps * denoise) run) and strength denoise; the image is the target size's.\n"
     "variation_seed= (a number, or one per image), variation_strength= (0..1): A1111's\n"
     "variation seed: image i's start noise slerped toward variation_seed + i's (or its own)\n"
     "by A1111's formula (SD families); seed_resize_from=\"WxH\": A1111's, that size's noise\n"
     "pasted centred into the image's.\n"
     "mask= [H,W] or [C,H,W] in 0..1 at init's size (white = repaint): inpainting as\n"
     "diffusers' StableDiffusion(XL)InpaintPipeline (SD families): a 9-channel inpainting UNet\n"
     "gets the mask and the masked image's latents, a 4-channel one keeps the init latents\n"
     "(noised to each step) outside the mask; strength 1 starts from pure noise.  mask_blur=\n"
     "(pixels, PIL's GaussianBlur as diffusers' mask_processor.blur, before the mask is\n"
     "binarized at 0.5), mask_overlay=true pastes the init image back outside the blurred\n"
     "mask (A1111's overlay).  noise(k) draw -2: the masked image's VAE sample.\n"
     "inpaint_full_res=true: A1111's \"Only masked\" (diffusers' padding_mask_crop): only the\n"
     "mask's box, padded by inpaint_padding= pixels (default 32) and grown to the image's\n"
     "aspect, is inpainted at the image's size (PIL's Lanczos both ways) and pasted back."},
    {"samplers", l_samplers,
     "lm.diffusion.samplers() -> {row, ...}\n"
     "The sampler table, one row per sampler generate's sampler= takes: {name=\"dpm++2m_karras\",\n"
     "a1111=\"DPM++ 2M\", schedule=\"Karras\" (A1111's infotext Sampler / Schedule type),\n"
     "kind=\"dpm++2m\" (its step function), sigmas=\"default\" | \"karras\" | \"none\",\n"
     "ancestral=false, order_min=1, order_max=2, predictions={\"epsilon\", ...} (the\n"
     "prediction_type values it runs), diffusers= (the scheduler it matches), config= (the\n"
     "scheduler_config.json keys it reads beyond the betas, prediction_type,\n"
     "timestep_spacing and steps_offset)}."},
    {"encode_prompt", l_pipe_encode_prompt,
     "lm.diffusion.encode_prompt(pipe, text | {texts} | nil, {clip_skip=0, prompt_syntax=false})\n"
     "-> embeds[, pooled]\n"
     "Also pipe:encode_prompt(text).  diffusers' encode_prompt for each text: [n,77,D] (SD:\n"
     "the last hidden state; SDXL: both encoders' penultimate layers concatenated) and on\n"
     "SDXL the pooled [n,P] (text_embeds of text_encoder_2).  nil is a None negative prompt.\n"
     "clip_skip as diffusers counts it (1 = the penultimate layer, A1111's \"Clip skip: 2\").\n"
     "prompt_syntax=true encodes as pipe:generate does by default: A1111's weights, BREAK\n"
     "and chunks of 75 tokens joined along the sequence ([n,77*K,D], K the most chunks)."},
    {"parse_prompt", l_parse_prompt,
     "lm.diffusion.parse_prompt(text) -> {{text, weight}, ...}\n"
     "AUTOMATIC1111's parse_prompt_attention: (x) x1.1, (x:1.3), [x] /1.1, nesting, \\( \\) \\[\n"
     "\\] \\\\ escapes, unbalanced brackets as A1111 (an open one multiplies the rest), BREAK\n"
     "as its own pair {\"BREAK\", -1}, neighbours of equal weight merged.  A weight that is no\n"
     "number (\"(a:1.2.3)\") is an error, as A1111's float() raises."},
    {"extra_networks", l_extra_networks,
     "lm.diffusion.extra_networks(text) -> clean, {{kind=, args={...}}, ...}\n"
     "A1111's extra_networks.parse_prompt: every <kind:arg[:arg...]> tag (<lora:name:0.8>,\n"
     "<lyco:...>, <hypernet:...>) removed from text, and the tags in order."},
    {"prompt_chunks", l_prompt_chunks,
     "lm.diffusion.prompt_chunks(tokenizer, text) -> {{ids}, ...}, {{weights}, ...}\n"
     "The 77-id chunks A1111 encodes for text (tags removed, parsed, 75 tokens a chunk, BREAK,\n"
     "the comma backtrack of 20, pad after the first eos) and each token's weight."},
    {"decode_latents", l_pipe_decode,
     "lm.diffusion.decode_latents(pipe, latents) -> image\n"
     "Also pipe:decode_latents(z).  [B,C,h,w] latents / scaling_factor (+ shift_factor)\n"
     "through the VAE decoder to [B,3,H,W] in 0..1, as the pipeline ends."},
    {"encode_image", l_pipe_encode_image,
     "lm.diffusion.encode_image(pipe, image) -> latents\n"
     "Also pipe:encode_image(img).  [B,3,H,W] in 0..1 to the VAE's latent mean times\n"
     "scaling_factor, as img2img starts."},
    {"free", l_free_any,
     "lm.diffusion.free(obj)\nAlso obj:free().  Releases a tokenizer, text encoder or pipeline\n"
     "now (stages taken from a freed pipeline fail cleanly)."},
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
    static const char *const pm[] = {"generate", "encode_prompt", "decode_latents", "encode_image",
                                     "free"};
    metatable(L, LM_LUA_SD_PIPE, l_pipe_index, l_pipe_free, NULL, pm, 5);
    metatable(L, LM_LUA_SD_PART, l_part_index, l_part_free, l_unet_call, NULL, 0);
    metatable(L, LM_LUA_QWEN_TOK, l_qtok_index, l_qtok_free, NULL, NULL, 0);
    lm_lua_open_lora(L);   /* pipe:load_lora & co. (l_lora.c) */
    lua_setfield(L, -2, "diffusion");
}
