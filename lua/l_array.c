/* l_array.c - the tensor userdata as every binding file sees it: how
 * arrays enter and leave Lua (push, check, conversion from Lua values), the
 * errors core messages become, and the memory coupling between Lua's
 * garbage collector and the core's buffers.  It calls nothing above it in
 * lua/, so the files that build on it (l_tensor, l_index, l_print, l_doc,
 * l_torch ...) form no circle.
 *
 * A userdata holds exactly one core reference, dropped by __gc.  Lua's
 * collector sees only the few bytes of the userdata, so every new tensor
 * adds its byte size to the collector's debt (lm_lua_gc_account): a loop
 * that makes and drops big tensors then collects as often as one that made
 * big strings.  When an allocation still fails, the core calls our
 * out-of-memory hook once, which runs a full collection before the retry. */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "l_internal.h"

/* The state that last entered the binding: the out-of-memory hook collects
 * there, because a core call that allocates is always made from it. */
static lua_State *current_L;
static size_t gc_debt, gc_since_full;

#define GC_STEP_BYTES ((size_t)1 << 20)
/* In generational mode (stock lua.c's default, which luaopen_lumen turns
 * back to incremental) a tensor that survives two minor collections is old
 * and only a major collection frees it; this bounds what such tensors can
 * hold when a user switches to generational mode anyway. */
#define GC_FULL_BYTES ((size_t)1 << 30)

void lm_lua_gc_account(lua_State *L, size_t bytes)
{
    gc_debt += bytes;
    if (gc_debt < GC_STEP_BYTES) return;
    size_t kb = gc_debt / 1024;
    gc_since_full += gc_debt;
    gc_debt = 0;
    if (gc_since_full >= GC_FULL_BYTES) {
        gc_since_full = 0;
        lua_gc(L, LUA_GCCOLLECT, 0);
        return;
    }
    lua_gc(L, LUA_GCSTEP, (int)(kb > 1u << 30 ? 1u << 30 : kb));
}

static bool oom_hook(void *ctx)
{
    (void)ctx;
    if (!current_L) return false;
    lua_gc(current_L, LUA_GCCOLLECT, 0);
    return true;
}

static int sentinel_gc(lua_State *L)
{
    (void)L;
    current_L = NULL;
    lm_set_oom_hook(NULL, NULL);
    return 0;
}

void lm_lua_install_oom_hook(lua_State *L)
{
    /* The collector is paced by tensor bytes through LUA_GCSTEP, which
     * only works in incremental mode: in generational mode the tensors
     * that outlive two minor steps wait for a rare major collection. */
    lua_gc(L, LUA_GCINC, 0, 0, 0);
    current_L = L;
    lm_set_oom_hook(oom_hook, NULL);
    /* when this state closes the hook must not point at it any more */
    lua_newuserdatauv(L, 1, 0);
    lua_newtable(L);
    lua_pushcfunction(L, sentinel_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    lua_setfield(L, LUA_REGISTRYINDEX, "lumen.sentinel");
}

/* The core's messages are its C API's and count axes from 0 ("concat: ...
 * on axis 0"); a Lua user counts from 1.  Every "axis N" with N >= 0 is
 * shown as N + 1 here, the one door core messages pass through to Lua, so
 * no message can reach a script 0-based.  Negative axes mean the same in
 * both conventions and stay. */
static void push_lua_numbered(lua_State *L, const char *m)
{
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (const char *p = m; *p;) {
        const char *hit = strstr(p, "axis ");
        if (!hit) {
            luaL_addstring(&b, p);
            break;
        }
        const char *num = hit + 5;
        luaL_addlstring(&b, p, (size_t)(num - p));
        p = num;
        bool word = hit == m || !(isalnum((unsigned char)hit[-1]) || hit[-1] == '_');
        if (!word || !isdigit((unsigned char)*num)) continue;
        char *end;
        long long v = strtoll(num, &end, 10);
        lua_pushfstring(L, "%I", (lua_Integer)(v + 1));
        luaL_addvalue(&b);
        p = end;
    }
    luaL_pushresult(&b);
}

int lm_lua_error(lua_State *L)
{
    const char *m = lm_error_message();
    luaL_where(L, 1);
    push_lua_numbered(L, m && *m ? m : "lumen: unknown error");
    lua_concat(L, 2);
    return lua_error(L);
}

lm_lua_tensor *lm_lua_testtensor(lua_State *L, int idx)
{
    return luaL_testudata(L, idx, LM_LUA_TENSOR);
}

int lm_lua_push_array(lua_State *L, lm_array *a)
{
    if (!a) return lm_lua_error(L);
    lm_lua_tensor *ud = lua_newuserdatauv(L, sizeof *ud, 0);
    ud->a = a;
    luaL_setmetatable(L, LM_LUA_TENSOR);
    if (a->op != LM_OP_VIEW) lm_lua_gc_account(L, lm_array_nbytes(a));
    return 1;
}

lm_array *lm_lua_check_array(lua_State *L, int idx)
{
    lm_lua_tensor *ud = lm_lua_testtensor(L, idx);
    current_L = L;
    if (!ud) {
        const char *got = luaL_typename(L, idx);
        luaL_argerror(L, idx, lua_pushfstring(L, "tensor expected, got %s", got));
    }
    return ud->a;
}

/* ---- Lua values to arrays ---- */

typedef struct nest {
    int ndim;
    int64_t shape[LM_MAX_DIMS];
    bool boolean;          /* all leaves are booleans */
    int ntensors;          /* a table of tensors: stack them */
} nest;

static void nest_shape(lua_State *L, int idx, nest *n)
{
    n->ndim = 0;
    n->ntensors = 0;
    lua_pushvalue(L, idx);
    for (;;) {
        if (n->ndim == LM_MAX_DIMS) luaL_error(L, "tensor: more than %d nested levels", LM_MAX_DIMS);
        n->shape[n->ndim++] = (int64_t)luaL_len(L, -1);
        if (n->shape[n->ndim - 1] == 0) break;
        int t = lua_geti(L, -1, 1);
        lua_remove(L, -2);
        if (t == LUA_TTABLE) continue;
        n->boolean = t == LUA_TBOOLEAN;
        if (t == LUA_TUSERDATA && lm_lua_testtensor(L, -1) && n->ndim == 1) n->ntensors = (int)n->shape[0];
        else if (t != LUA_TNUMBER && t != LUA_TBOOLEAN)
            luaL_error(L, "tensor: table leaves must be numbers or booleans, got %s", lua_typename(L, t));
        break;
    }
    lua_pop(L, 1);
}

/* Fills out[] (row-major doubles) from the table at idx, checking that the
 * nesting is rectangular. */
static void nest_fill(lua_State *L, int idx, const nest *n, int d, double *out, int64_t *pos)
{
    idx = lua_absindex(L, idx);
    if ((int64_t)luaL_len(L, idx) != n->shape[d])
        luaL_error(L, "tensor: ragged nested table (level %d has length %d, expected %d)", d + 1,
                   (int)luaL_len(L, idx), (int)n->shape[d]);
    for (int64_t i = 1; i <= n->shape[d]; i++) {
        int t = lua_geti(L, idx, i);
        if (d + 1 < n->ndim) {
            if (t != LUA_TTABLE) luaL_error(L, "tensor: ragged nested table at level %d", d + 2);
            nest_fill(L, -1, n, d + 1, out, pos);
        } else if (t == LUA_TNUMBER) {
            out[(*pos)++] = lua_tonumber(L, -1);
        } else if (t == LUA_TBOOLEAN) {
            out[(*pos)++] = lua_toboolean(L, -1);
        } else {
            luaL_error(L, "tensor: table leaves must be numbers or booleans, got %s", lua_typename(L, t));
        }
        lua_pop(L, 1);
    }
}

static lm_array *stack_tensors(lua_State *L, int idx, int n)
{
    lm_array **v = lua_newuserdatauv(L, sizeof *v * (size_t)(n ? n : 1), 0);
    for (int i = 0; i < n; i++) {
        lua_geti(L, idx, i + 1);
        v[i] = lm_lua_check_array(L, -1);
        lua_pop(L, 1);
    }
    lm_array *r = lm_stack(n, v, 0);
    lua_pop(L, 1);
    return r;
}

static lm_array *from_table(lua_State *L, int idx, lm_dtype dt, lm_device *dev)
{
    nest n = {0};
    nest_shape(L, idx, &n);
    if (n.ntensors) {
        lm_array *s = stack_tensors(L, idx, n.ntensors);
        if (s && dt != LM_DTYPE_COUNT && dt != s->dtype) {
            lm_array *c = lm_cast(s, dt);
            lm_array_release(s);
            s = c;
        }
        return s;
    }
    int64_t size = 1;
    for (int d = 0; d < n.ndim; d++) size *= n.shape[d];
    if (dt == LM_DTYPE_COUNT) dt = n.boolean ? LM_BOOL : LM_F32;
    /* scratch memory owned by Lua so an error while filling cannot leak */
    double *tmp = lua_newuserdatauv(L, sizeof(double) * (size_t)(size ? size : 1), 0);
    void *data = lua_newuserdatauv(L, lm_dtype_size(dt) * (size_t)(size ? size : 1), 0);
    int64_t pos = 0;
    nest_fill(L, idx, &n, 0, tmp, &pos);
    lm_convert(data, dt, tmp, LM_F64, (size_t)size);
    lm_array *a = lm_from_data(n.ndim, n.shape, dt, data, dev);
    lua_pop(L, 2);
    return a;
}


lm_array *lm_lua_to_array_on(lua_State *L, int idx, lm_dtype dt, lm_device *dev)
{
    current_L = L;
    idx = lua_absindex(L, idx);
    lm_lua_tensor *ud = lm_lua_testtensor(L, idx);
    if (ud) return lm_array_retain(ud->a);
    switch (lua_type(L, idx)) {
    case LUA_TNUMBER:
        if (dt == LM_DTYPE_COUNT) dt = lua_isinteger(L, idx) ? LM_I64 : LM_F64;
        return lm_scalar(lua_tonumber(L, idx), dt, dev);
    case LUA_TBOOLEAN:
        return lm_scalar(lua_toboolean(L, idx), dt == LM_DTYPE_COUNT ? LM_BOOL : dt, dev);
    case LUA_TTABLE:
        return from_table(L, idx, dt, dev);
    default:
        luaL_argerror(L, idx, lua_pushfstring(L, "tensor, number or table expected, got %s",
                                              luaL_typename(L, idx)));
        return NULL;
    }
}

lm_array *lm_lua_to_array(lua_State *L, int idx, lm_dtype dt)
{
    return lm_lua_to_array_on(L, idx, dt, NULL);
}

/* Records L as the state the out-of-memory hook collects in (every call
 * that checks or converts a tensor does it; others call this first). */
void lm_lua_enter(lua_State *L) { current_L = L; }

/* The method table l_tensor.c made (for files that add methods to it). */
void lm_lua_push_methods(lua_State *L)
{
    lua_getfield(L, LUA_REGISTRYINDEX, "lumen.methods");
}
