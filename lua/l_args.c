/* l_args.c - reading Lua arguments: 1-based axes, shapes, option tables,
 * dtypes and devices.  The Lua face counts from 1 (negative from the end);
 * the core counts from 0, so every axis crosses here.
 *
 * A leaf: it calls only the core and Lua's C API, never another lua/ file,
 * so every other file may use it (l_nnargs.c and l_indices.c build on it;
 * index tensors, which need the tensor userdata, live in l_indices.c). */
#include <math.h>
#include <string.h>
#include "l_internal.h"

int lm_lua_axis_value(lua_State *L, lua_Integer ax, int ndim, const char *fname)
{
    if (ax >= 1 && ax <= ndim) return (int)(ax - 1);
    if (ax <= -1 && ax >= -ndim) return (int)(ndim + ax);
    if (ax == 0) luaL_error(L, "%s: axis 0 is not valid (axes count from 1; -1 is the last)", fname);
    return luaL_error(L, "%s: axis %d out of range for a %d-d tensor", fname, (int)ax, ndim);
}

int lm_lua_axis(lua_State *L, int arg, int ndim, const char *fname)
{
    return lm_lua_axis_value(L, luaL_checkinteger(L, arg), ndim, fname);
}

int lm_lua_shape(lua_State *L, int arg, int64_t *shape, int *next)
{
    int n = 0;
    if (lua_istable(L, arg)) {
        lua_Integer len = luaL_len(L, arg);
        if (len > LM_MAX_DIMS) luaL_error(L, "shape: more than %d dimensions", LM_MAX_DIMS);
        for (lua_Integer i = 1; i <= len; i++) {
            lua_geti(L, arg, i);
            int ok;
            lua_Integer v = lua_tointegerx(L, -1, &ok);
            if (!ok || v < 0) luaL_error(L, "shape: entry %d must be a non-negative integer", (int)i);
            shape[n++] = v;
            lua_pop(L, 1);
        }
        if (next) *next = arg + 1;
        return n;
    }
    /* lm.zeros(2, 3) reads like lm.zeros{2, 3} */
    while (lua_type(L, arg + n) == LUA_TNUMBER) {
        if (n == LM_MAX_DIMS) luaL_error(L, "shape: more than %d dimensions", LM_MAX_DIMS);
        lua_Integer v = luaL_checkinteger(L, arg + n);
        if (v < 0) luaL_error(L, "shape: entry %d must be non-negative", n + 1);
        shape[n] = v;
        n++;
    }
    if (n == 0 && !lua_isnoneornil(L, arg))
        luaL_argerror(L, arg, "shape expected (a table like {2, 3})");
    if (next) *next = arg + n;
    return n;
}

lm_dtype lm_lua_check_dtype(lua_State *L, int arg)
{
    /* an option's value sits at a relative index: luaL_checkstring would
     * say "bad argument #-1", which names no argument the user wrote */
    if (lua_type(L, arg) != LUA_TSTRING)
        luaL_error(L, "dtype must be a name (f32 f16 bf16 f64 i8 u8 i16 i32 i64 bool), not a %s",
                   luaL_typename(L, arg));
    const char *name = lua_tostring(L, arg);
    lm_dtype dt;
    if (!lm_dtype_from_name(name, &dt))
        luaL_error(L, "unknown dtype '%s' (f32 f16 bf16 f64 i8 u8 i16 i32 i64 bool)", name);
    return dt;
}

lm_device *lm_lua_check_device(lua_State *L, int arg)
{
    lm_device *d = lm_device_find(luaL_checkstring(L, arg));
    /* luaL_error, not lm_lua_error (l_array.c): this file stays a leaf */
    if (!d) luaL_error(L, "%s", lm_error_message());
    return d;
}

/* ---- the options rule: every key of an options table must be known ---- */

bool lm_lua_opt_name_matches(const char *spec, const char *k)
{
    size_t kl = strlen(k);
    for (const char *p = spec; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == kl && !strncmp(p, k, len)) return true;
        if (!bar) break;
        p = bar + 1;
    }
    return false;
}

void lm_lua_opts_unknown(lua_State *L, const char *fname, const char *k, const char *const *known)
{
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (int i = 0; known && known[i]; i++) {
        if (i) luaL_addstring(&b, ", ");
        for (const char *p = known[i]; *p; p++) luaL_addchar(&b, *p == '|' ? '/' : *p);
    }
    luaL_pushresult(&b);
    const char *list = lua_tostring(L, -1);
    luaL_error(L, "%s: unknown option '%s' (known: %s)", fname, k, *list ? list : "none");
}

int lm_lua_check_opts(lua_State *L, int arg, const char *fname, const char *const *known)
{
    if (lua_isnoneornil(L, arg)) return 0;
    arg = lua_absindex(L, arg);
    if (lua_type(L, arg) != LUA_TTABLE)
        luaL_error(L, "%s: argument %d must be an options table, got %s", fname, arg,
                   luaL_typename(L, arg));
    for (lua_pushnil(L); lua_next(L, arg); lua_pop(L, 1)) {
        if (lua_type(L, -2) != LUA_TSTRING)
            luaL_error(L, "%s: option names must be strings, got %s", fname, luaL_typename(L, -2));
        const char *k = lua_tostring(L, -2);
        bool found = false;
        for (int i = 0; known && known[i] && !found; i++) found = lm_lua_opt_name_matches(known[i], k);
        if (!found) lm_lua_opts_unknown(L, fname, k, known);
    }
    return arg;
}

void lm_lua_check_nargs(lua_State *L, int max, const char *fname)
{
    int n = lua_gettop(L);
    if (n > max) luaL_error(L, "%s: too many arguments (%d given, at most %d)", fname, n, max);
}

static const char *const DTYPE_DEVICE[] = {"dtype", "device", NULL};

void lm_lua_opts_read(lua_State *L, int arg, lm_lua_opts *o, const char *fname,
                      const char *const *known)
{
    o->dtype = LM_DTYPE_COUNT;
    o->device = NULL;
    if (lua_isnoneornil(L, arg)) return;
    if (lua_type(L, arg) == LUA_TSTRING) {
        o->dtype = lm_lua_check_dtype(L, arg);
        return;
    }
    lm_lua_check_opts(L, arg, fname, known ? known : DTYPE_DEVICE);
    if (lua_getfield(L, arg, "dtype") != LUA_TNIL) o->dtype = lm_lua_check_dtype(L, -1);
    lua_pop(L, 1);
    if (lua_getfield(L, arg, "device") != LUA_TNIL) o->device = lm_lua_check_device(L, -1);
    lua_pop(L, 1);
}

bool lm_lua_opt_bool(lua_State *L, int arg, const char *fname, const char *field, bool dflt)
{
    if (arg == 0 || !lua_istable(L, arg)) return dflt;
    bool v = dflt;
    if (lua_getfield(L, arg, field) != LUA_TNIL) {
        if (!lua_isboolean(L, -1))
            luaL_error(L, "%s: option '%s' must be a boolean, got %s", fname, field, luaL_typename(L, -1));
        v = lua_toboolean(L, -1);
    }
    lua_pop(L, 1);
    return v;
}

lua_Integer lm_lua_opt_int(lua_State *L, int arg, const char *fname, const char *field,
                           lua_Integer dflt)
{
    if (arg == 0 || !lua_istable(L, arg)) return dflt;
    lua_Integer v = dflt;
    if (lua_getfield(L, arg, field) != LUA_TNIL) {
        int ok;
        v = lua_tointegerx(L, -1, &ok);
        if (!ok) luaL_error(L, "%s: option '%s' must be an integer", fname, field);
    }
    lua_pop(L, 1);
    return v;
}

const char *lm_lua_opt_str(lua_State *L, int arg, const char *fname, const char *field,
                           const char *dflt)
{
    if (arg == 0 || !lua_istable(L, arg)) return dflt;
    const char *v = dflt;
    if (lua_getfield(L, arg, field) != LUA_TNIL) {
        if (lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "%s: option '%s' must be a string, got %s", fname, field, luaL_typename(L, -1));
        v = lua_tostring(L, -1);
    }
    lua_pop(L, 1);   /* the string stays valid while the options table holds it */
    return v;
}

lua_Number lm_lua_opt_num(lua_State *L, int arg, const char *fname, const char *field,
                          lua_Number dflt)
{
    if (arg == 0 || !lua_istable(L, arg)) return dflt;
    lua_Number v = dflt;
    if (lua_getfield(L, arg, field) != LUA_TNIL) {
        int ok;
        v = lua_tonumberx(L, -1, &ok);
        if (!ok) luaL_error(L, "%s: option '%s' must be a number", fname, field);
    }
    lua_pop(L, 1);
    return v;
}

lua_Number lm_lua_opt_tol(lua_State *L, int arg, const char *fname, const char *field)
{
    lua_Number v = lm_lua_opt_num(L, arg, fname, field, NAN);
    if (arg != 0 && lua_istable(L, arg) && lua_getfield(L, arg, field) != LUA_TNIL && !(v >= 0))
        luaL_error(L, "%s: option '%s' is %s: a tolerance is a number >= 0 (math.huge accepts "
                   "everything; leave it out for the dtype's default)", fname, field,
                   isnan(v) ? "NaN" : "negative");
    if (arg != 0 && lua_istable(L, arg)) lua_pop(L, 1);
    return v;
}

/* ---- options written inside a shape or data table ---- */

int lm_lua_inline_opts(lua_State *L, int tbl, int opts, const char *fname)
{
    if (lua_type(L, tbl) != LUA_TTABLE) return opts;
    tbl = lua_absindex(L, tbl);
    lua_Integer len = (lua_Integer)lua_rawlen(L, tbl);
    bool any = false;
    for (lua_pushnil(L); lua_next(L, tbl); lua_pop(L, 1)) {
        if (lua_type(L, -2) == LUA_TSTRING) {
            any = true;
            continue;
        }
        if (lua_isinteger(L, -2) && lua_tointeger(L, -2) >= 1 && lua_tointeger(L, -2) <= len) continue;
        lua_pushvalue(L, -2);
        luaL_error(L, "%s: key [%s] in the shape table is neither an entry 1..%d nor an option name",
                   fname, luaL_tolstring(L, -1, NULL), (int)len);
    }
    if (!any) return opts;
    if (!lua_isnoneornil(L, opts))
        luaL_error(L, "%s: options given both inside the table of argument %d and as argument %d",
                   fname, tbl, opts);
    if (lua_gettop(L) < opts) lua_settop(L, opts);
    lua_newtable(L);
    for (lua_pushnil(L); lua_next(L, tbl); lua_pop(L, 1)) {
        if (lua_type(L, -2) != LUA_TSTRING) continue;
        lua_pushvalue(L, -2);
        lua_pushvalue(L, -2);
        lua_rawset(L, -5);
    }
    lua_replace(L, opts);
    return opts;
}
