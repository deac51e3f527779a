/* l_nnargs.c - PyTorch-style arguments for the neural-network functions:
 * F.conv2d(x, w, b, stride, padding) and F.conv2d(x, w, b, padding=1) read
 * in Lua as lm.conv2d(x, w, b, 1, 1) and lm.conv2d(x, w, b, {padding=1}).
 *
 * A function declares its parameters after the input in PyTorch's order.
 * Values come positionally and/or from a trailing options table (a table
 * with no array part); a name given both ways, an unknown option name or
 * more positional values than parameters is an error naming the function,
 * so a typo never falls back silently to a default.  The readers below
 * name the function and the parameter in every message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "l_internal.h"

/* The parameter name as users see it in messages: the first spelling. */
static const char *shown(lua_State *L, const char *spec)
{
    const char *bar = strchr(spec, '|');
    if (!bar) return spec;
    return lua_pushlstring(L, spec, (size_t)(bar - spec));
}

static bool is_options(lua_State *L, int i)
{
    return lua_type(L, i) == LUA_TTABLE && lua_rawlen(L, i) == 0;
}

static int find_name(const lm_nn_args *a, const char *k)
{
    for (int i = 0; i < a->n; i++)
        if (lm_lua_opt_name_matches(a->names[i], k)) return i;
    return -1;
}

/* Checks every key of the options table at t, then pushes each given value
 * on the stack and records where it lies. */
static void read_options(lm_nn_args *a, int t)
{
    lua_State *L = a->L;
    lua_pushnil(L);
    while (lua_next(L, t)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "%s: option names must be strings, got %s", a->fname, luaL_typename(L, -1));
        const char *k = lua_tostring(L, -1);
        int i = find_name(a, k);
        if (i < 0) lm_lua_opts_unknown(L, a->fname, k, a->names);
        if (a->at[i])
            luaL_error(L, "%s: %s given both as argument %d and as an option", a->fname,
                       shown(L, a->names[i]), a->at[i]);
    }
    luaL_checkstack(L, a->n, "too many options");
    for (int i = 0; i < a->n; i++) {
        for (const char *p = a->names[i]; p && *p;) {
            const char *bar = strchr(p, '|');
            lua_pushlstring(L, p, bar ? (size_t)(bar - p) : strlen(p));
            if (lua_rawget(L, t) != LUA_TNIL) {
                a->at[i] = lua_gettop(L);
                break;
            }
            lua_pop(L, 1);
            p = bar ? bar + 1 : NULL;
        }
    }
}

void lm_nn_args_read(lua_State *L, lm_nn_args *a, const char *fname, const char *const *names,
                     int first)
{
    a->L = L;
    a->fname = fname;
    a->names = names;
    for (a->n = 0; names[a->n]; a->n++) {}
    if (a->n > LM_NN_MAX_ARGS) luaL_error(L, "%s: too many parameters declared", fname);
    memset(a->at, 0, sizeof a->at);
    int top = lua_gettop(L), opts = 0;
    if (top >= first && is_options(L, top)) opts = top--;
    if (top - first + 1 > a->n)
        luaL_error(L, "%s: too many arguments (%d given, at most %d)", fname, top, first - 1 + a->n);
    for (int i = first; i <= top; i++)
        if (!lua_isnil(L, i)) a->at[i - first] = i;
    if (opts) read_options(a, opts);
}

bool lm_nn_has(const lm_nn_args *a, int i) { return a->at[i] != 0; }

const char *lm_nn_name(const lm_nn_args *a, int i) { return shown(a->L, a->names[i]); }

lm_array *lm_nn_tensor(const lm_nn_args *a, int i, bool required)
{
    if (!a->at[i]) {
        if (required) luaL_error(a->L, "%s: %s is required", a->fname, lm_nn_name(a, i));
        return NULL;
    }
    lm_lua_tensor *t = lm_lua_testtensor(a->L, a->at[i]);
    if (!t || !t->a)
        luaL_error(a->L, "%s: %s must be a tensor, got %s", a->fname, lm_nn_name(a, i),
                   t ? "a freed tensor" : luaL_typename(a->L, a->at[i]));
    return lm_lua_check_array(a->L, a->at[i]);
}

lua_Integer lm_nn_int(const lm_nn_args *a, int i, lua_Integer dflt)
{
    if (!a->at[i]) return dflt;
    int ok;
    lua_Integer v = lua_tointegerx(a->L, a->at[i], &ok);
    if (!ok || lua_type(a->L, a->at[i]) != LUA_TNUMBER)
        luaL_error(a->L, "%s: %s must be an integer, got %s", a->fname, lm_nn_name(a, i),
                   lua_type(a->L, a->at[i]) == LUA_TNUMBER ? lua_tostring(a->L, a->at[i])
                                                          : luaL_typename(a->L, a->at[i]));
    return v;
}

double lm_nn_num(const lm_nn_args *a, int i, double dflt)
{
    if (!a->at[i]) return dflt;
    if (lua_type(a->L, a->at[i]) != LUA_TNUMBER)
        luaL_error(a->L, "%s: %s must be a number, got %s", a->fname, lm_nn_name(a, i),
                   luaL_typename(a->L, a->at[i]));
    return lua_tonumber(a->L, a->at[i]);
}

bool lm_nn_bool(const lm_nn_args *a, int i, bool dflt)
{
    if (!a->at[i]) return dflt;
    if (lua_type(a->L, a->at[i]) != LUA_TBOOLEAN)
        luaL_error(a->L, "%s: %s must be a boolean, got %s", a->fname, lm_nn_name(a, i),
                   luaL_typename(a->L, a->at[i]));
    return lua_toboolean(a->L, a->at[i]);
}

const char *lm_nn_string(const lm_nn_args *a, int i, const char *dflt)
{
    if (!a->at[i]) return dflt;
    if (lua_type(a->L, a->at[i]) != LUA_TSTRING)
        luaL_error(a->L, "%s: %s must be a string, got %s", a->fname, lm_nn_name(a, i),
                   luaL_typename(a->L, a->at[i]));
    return lua_tostring(a->L, a->at[i]);
}

int lm_nn_ints(const lm_nn_args *a, int i, int64_t *out, int max)
{
    lua_State *L = a->L;
    if (!a->at[i]) return 0;
    if (lua_type(L, a->at[i]) == LUA_TNUMBER) {
        out[0] = lm_nn_int(a, i, 0);
        return 1;
    }
    int n = lua_istable(L, a->at[i]) ? (int)lua_rawlen(L, a->at[i]) : 0;
    if (n < 1 || n > max)
        luaL_error(L, "%s: %s must be an integer or a table of 1 to %d integers", a->fname,
                   lm_nn_name(a, i), max);
    for (int k = 0; k < n; k++) {
        int ok;
        lua_rawgeti(L, a->at[i], k + 1);
        out[k] = lua_tointegerx(L, -1, &ok);
        if (!ok) luaL_error(L, "%s: %s entry %d must be an integer", a->fname, lm_nn_name(a, i), k + 1);
        lua_pop(L, 1);
    }
    return n;
}

void lm_nn_pair(const lm_nn_args *a, int i, int64_t dflt, int64_t out[2])
{
    int64_t v[2];
    int n = lm_nn_ints(a, i, v, 2);
    out[0] = n ? v[0] : dflt;
    out[1] = n == 2 ? v[1] : out[0];
}

int lm_nn_axis(const lm_nn_args *a, int i, int ndim, int dflt)
{
    if (!a->at[i]) return dflt;
    return lm_lua_axis_value(a->L, lm_nn_int(a, i, 0), ndim, a->fname);
}
