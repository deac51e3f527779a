/* l_grad.c - lm.grad, lm.value_and_grad, lm.vjp, lm.stop_gradient.
 *
 * The C part is small: fresh leaves (lm_grad_leaf), the backward pass
 * (lm_vjp) over lists of tensors, and a tracer test.  Walking nested
 * parameter tables and rebuilding them is Lua (lua/l_grad.lua, embedded at
 * build time as a string), as is lm.optim (lua/l_optim.lua). */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include "l_internal.h"
#include "core/grad.h"

/* a list (table) of tensors at idx into a new C array (borrowed entries) */
static lm_array **tensor_list(lua_State *L, int idx, int *n, const char *fname, const char *what)
{
    luaL_checktype(L, idx, LUA_TTABLE);
    int len = (int)luaL_len(L, idx);
    lm_array **v = lua_newuserdatauv(L, sizeof *v * (size_t)(len ? len : 1), 0);
    for (int i = 0; i < len; i++) {
        lua_geti(L, idx, i + 1);
        lm_lua_tensor *t = lm_lua_testtensor(L, -1);
        if (!t || !t->a) luaL_error(L, "%s: %s[%d] is not a tensor", fname, what, i + 1);
        v[i] = t->a;
        lua_pop(L, 1);
    }
    *n = len;
    return v;
}

/* lm._vjp(outputs, cotangents, inputs) -> {grads} */
static int l_vjp_core(lua_State *L)
{
    int nout, ncot, nin;
    lm_array **outs = tensor_list(L, 1, &nout, "vjp", "outputs");
    lm_array **cots = tensor_list(L, 2, &ncot, "vjp", "cotangents");
    lm_array **ins = tensor_list(L, 3, &nin, "vjp", "inputs");
    if (nout != ncot) return luaL_error(L, "vjp: %d outputs but %d cotangents", nout, ncot);
    lm_array **g = lua_newuserdatauv(L, sizeof *g * (size_t)(nin ? nin : 1), 0);
    if (lm_vjp(nout, outs, cots, nin, ins, g) != LM_OK) return lm_lua_error(L);
    lua_createtable(L, nin, 0);
    for (int i = 0; i < nin; i++) {
        lm_lua_push_array(L, g[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int l_grad_leaf(lua_State *L)
{
    return lm_lua_push_array(L, lm_grad_leaf(lm_lua_check_array(L, 1)));
}

static int l_stop_gradient(lua_State *L)
{
    if (lua_gettop(L) != 1) return luaL_error(L, "stop_gradient: takes one tensor, got %d arguments", lua_gettop(L));
    return lm_lua_push_array(L, lm_stop_gradient(lm_lua_check_array(L, 1)));
}

/* lm._eval_list({tensors}): evaluates them together unless one is a
 * compile placeholder's descendant (inside lm.compile's trace). */
static int l_eval_list(lua_State *L)
{
    int n;
    lm_array **v = tensor_list(L, 1, &n, "eval", "tensors");
    for (int i = 0; i < n; i++)
        if (v[i]->flags & LM_ARRAY_TRACER) return 0;
    if (lm_eval(v, n) != LM_OK) return lm_lua_error(L);
    return 0;
}


/* lm.data.load_idx(path, [limit]) -> u8 tensor: the idx format of (Fashion-)
 * MNIST, gzip-compressed or not (zlib reads both).  limit keeps the first
 * items only. */
static int l_load_idx(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    lua_Integer limit = luaL_optinteger(L, 2, -1);
    if (lua_gettop(L) > 2) return luaL_error(L, "load_idx: takes path and an optional limit");
    gzFile f = gzopen(path, "rb");
    if (!f) return luaL_error(L, "load_idx: cannot open %s", path);
    unsigned char hdr[4];
    int64_t shape[LM_MAX_DIMS], total = 1;
    if (gzread(f, hdr, 4) != 4 || hdr[0] || hdr[1] || hdr[2] != 0x08 || hdr[3] < 1 || hdr[3] > 4) {
        gzclose(f);
        return luaL_error(L, "load_idx: %s is not an unsigned-byte idx file", path);
    }
    int nd = hdr[3];
    for (int d = 0; d < nd; d++) {
        unsigned char b[4];
        if (gzread(f, b, 4) != 4) { gzclose(f); return luaL_error(L, "load_idx: %s: short header", path); }
        shape[d] = (int64_t)b[0] << 24 | b[1] << 16 | b[2] << 8 | b[3];
        if (d == 0 && limit >= 0 && limit < shape[0]) shape[0] = limit;
        if (shape[d] > ((int64_t)1 << 31) / total) { gzclose(f); return luaL_error(L, "load_idx: %s: too large", path); }
        total *= shape[d];
    }
    unsigned char *buf = malloc((size_t)(total ? total : 1));
    if (!buf) { gzclose(f); return luaL_error(L, "load_idx: out of memory"); }
    int64_t got = 0;
    while (got < total) {
        int r = gzread(f, buf + got, (unsigned)(total - got > (1 << 30) ? (1 << 30) : total - got));
        if (r <= 0) break;
        got += r;
    }
    gzclose(f);
    if (got != total) { free(buf); return luaL_error(L, "load_idx: %s: truncated data", path); }
    lm_array *a = lm_from_data(nd, shape, LM_U8, buf, NULL);
    free(buf);
    return lm_lua_push_array(L, a);
}

static const lm_lua_func data_funcs[] = {
    {"load_idx", l_load_idx, "lm.data.load_idx(path, [limit]) -> u8 tensor\nReads an idx file "
     "((Fashion-)MNIST images or labels; .gz or plain), the first limit items when given."},
    {NULL, NULL, NULL},
};

/* lm._set_doc(fn, name, doc) -> fn: docstrings for the functions written
 * in Lua (the registry tables of l_doc.c); returns fn checked against the
 * arity of doc's signature, as lm_lua_register does for C functions. */
static int l_set_doc(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TFUNCTION);
    const char *name = luaL_checkstring(L, 2);
    const char *doc = luaL_checkstring(L, 3);
    lm_lua_push_checked(L, 1, doc, name);
    int fn = lua_gettop(L);
    if (lua_getfield(L, LUA_REGISTRYINDEX, "lumen.docs") == LUA_TTABLE) {
        lua_pushvalue(L, 3);
        lua_setfield(L, -2, name);
    }
    if (lua_getfield(L, LUA_REGISTRYINDEX, "lumen.docnames") == LUA_TTABLE) {
        lua_pushvalue(L, fn);
        lua_pushvalue(L, 2);
        lua_rawset(L, -3);
    }
    lua_settop(L, fn);
    return 1;
}

static const lm_lua_func grad_funcs[] = {
    {"_set_doc", l_set_doc, "lm._set_doc(fn, name, doc) -> fn\nRecords the docstring of a function "
     "written in Lua and returns it checked against the signature's arity (internal)."},
    {"stop_gradient", l_stop_gradient,
     "lm.stop_gradient(x) -> tensor\nx itself as far as values go; no gradient flows back through it."},
    {"_vjp", l_vjp_core, "lm._vjp(outputs, cotangents, inputs) -> grads\nThe backward pass over lists "
     "of tensors (internal: use lm.vjp / lm.grad)."},
    {"_grad_leaf", l_grad_leaf, "lm._grad_leaf(x) -> tensor\nA fresh leaf over x's data (internal)."},
    {"_eval_list", l_eval_list, "lm._eval_list(list)\nEvaluates a list of tensors together (internal)."},
    {NULL, NULL, NULL},
};

#include "l_grad_lua.h"   /* lm_grad_lua_src: lua/l_grad.lua + lua/l_optim.lua */

void lm_lua_open_grad(lua_State *L)
{
    lm_lua_register(L, "lm.", grad_funcs);
    lua_newtable(L);
    lm_lua_register(L, "lm.data.", data_funcs);
    lua_setfield(L, -2, "data");
    if (luaL_loadbuffer(L, lm_grad_lua_src, sizeof lm_grad_lua_src - 1, "=lumen/l_grad.lua") != LUA_OK) {
        lua_error(L);
        return;
    }
    lua_pushvalue(L, -2);     /* the module table */
    lua_call(L, 1, 0);
}
