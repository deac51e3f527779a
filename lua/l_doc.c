/* l_doc.c - docstrings: lm_lua_register records them, help() prints them,
 * lm.docs() hands them to the generator of docs/API.md.
 *
 * Two registry tables: DOCS maps a full name ("lm.zeros", "t:exp") to its
 * docstring; NAMES maps a function value to its first registered name, so
 * help(lm.zeros) and help(t.exp) find the text without a name. */
#include <stdio.h>
#include <string.h>
#include "l_internal.h"

#define DOCS "lumen.docs"
#define NAMES "lumen.docnames"

static void push_registry_table(lua_State *L, const char *key, const char *mode)
{
    if (lua_getfield(L, LUA_REGISTRYINDEX, key) == LUA_TTABLE) return;
    lua_pop(L, 1);
    lua_newtable(L);
    if (mode) {
        lua_newtable(L);
        lua_pushstring(L, mode);
        lua_setfield(L, -2, "__mode");
        lua_setmetatable(L, -2);
    }
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, key);
}

/* The most arguments a function takes, read from its docstring's
 * signature (the first bracket group, opened on the first line), self included
 * for a method (a name with ':'): "t:slice(axis, start, stop[, step])" -> 5, "lm.set_printoptions{...}" ->
 * 1.  -1 when the signature has "..." or there is no docstring: such a
 * function checks its own count (lm_lua_check_nargs). */
static int doc_arity(const char *doc)
{
    if (!doc) return -1;
    const char *nl = strchr(doc, '\n'), *end = doc + strlen(doc);
    if (!nl) nl = end;
    const char *p = doc;
    while (p < nl && *p != '(' && *p != '{') p++;
    if (p == nl) return -1;
    int self = memchr(doc, ':', (size_t)(p - doc)) != NULL;   /* t:exp(), model:save(path) */
    if (*p == '{') return 1 + self;
    int depth = 0, commas = 0;
    bool any = false;
    for (; p < end; p++) {
        if (*p == '(' || *p == '{') depth++;
        else if (*p == ')' || *p == '}') { if (--depth == 0) break; }
        else if (*p == ',' && depth == 1) commas++;
        else if (depth == 1 && !strncmp(p, "...", 3)) return -1;
        else if (*p != ' ' && *p != '[' && *p != ']') any = true;
    }
    if (p == end) return -1;   /* unbalanced: do not guess */
    return (any ? commas + 1 : 0) + self;
}

/* Every registered function runs through this closure: upvalues are the
 * function (C or Lua), its arity (self included) and its full name.  A
 * call with more arguments than the signature has is an error naming the
 * function, so a misread signature never computes a silently wrong number. */
static int checked_call(lua_State *L)
{
    int max = (int)lua_tointeger(L, lua_upvalueindex(2));
    int n = lua_gettop(L);
    if (n > max) {
        const char *name = lua_tostring(L, lua_upvalueindex(3));
        int self = strchr(name, ':') != NULL;
        return luaL_error(L, "%s: too many arguments (%d given, at most %d)", name, n - self,
                          max - self);
    }
    lua_CFunction f = lua_tocfunction(L, lua_upvalueindex(1));
    if (f) return f(L);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, n, LUA_MULTRET);
    return lua_gettop(L);
}

void lm_lua_push_checked(lua_State *L, int fn, const char *doc, const char *full)
{
    fn = lua_absindex(L, fn);
    int max = doc_arity(doc);
    lua_pushvalue(L, fn);
    if (max < 0) return;
    lua_pushinteger(L, max);
    lua_pushstring(L, full);
    lua_pushcclosure(L, checked_call, 3);
}

static void register_funcs(lua_State *L, const char *prefix, const lm_lua_func *funcs, bool check)
{
    int t = lua_gettop(L);
    push_registry_table(L, DOCS, NULL);
    push_registry_table(L, NAMES, "k");
    for (const lm_lua_func *f = funcs; f->name; f++) {
        const char *full = lua_pushfstring(L, "%s%s", prefix, f->name);
        lua_pushcfunction(L, f->fn);
        lm_lua_push_checked(L, -1, check ? f->doc : NULL, full);
        lua_remove(L, -2);
        lua_pushvalue(L, -1);
        lua_setfield(L, t, f->name);
        if (f->doc) {
            lua_pushstring(L, f->doc);
            lua_setfield(L, t + 1, full);
        }
        /* first name wins: a light C function is the same value in every
         * table that holds it */
        lua_pushvalue(L, -1);
        if (lua_rawget(L, t + 2) == LUA_TNIL) {
            lua_pushvalue(L, -2);
            lua_pushvalue(L, -4);
            lua_rawset(L, t + 2);
        }
        lua_settop(L, t + 2);
    }
    lua_settop(L, t);
}

void lm_lua_register(lua_State *L, const char *prefix, const lm_lua_func *funcs)
{
    register_funcs(L, prefix, funcs, true);
}

void lm_lua_register_nn(lua_State *L, const char *prefix, const lm_lua_func *funcs)
{
    register_funcs(L, prefix, funcs, false);
}

/* lm._arity(f) -> integer|nil: the most arguments f takes (self included),
 * nil when it is variadic or not a registered function (tests use it). */
static int l_arity(lua_State *L)
{
    if (lua_tocfunction(L, 1) == checked_call && lua_getupvalue(L, 1, 2)) return 1;
    lua_pushnil(L);
    return 1;
}

/* The docstring for a name as typed: "lm.zeros", "lumen.zeros", "zeros",
 * "t:exp", "t.exp", "exp". */
static int push_doc_by_name(lua_State *L, const char *name)
{
    static const char *prefixes[] = {"", "lm.", "t:", "lm.image.", NULL};
    char buf[256];
    if (!strncmp(name, "lumen.", 6)) {
        snprintf(buf, sizeof buf, "lm.%s", name + 6);
        name = buf;
    }
    push_registry_table(L, DOCS, NULL);
    for (int i = 0; prefixes[i]; i++) {
        const char *n = name;
        char tmp[256];
        /* t.exp and x:exp both mean the method */
        const char *dot = strpbrk(name, ".:");
        if (i == 2 && dot && strncmp(name, "lm.", 3)) n = dot + 1;
        lua_pushfstring(L, "%s%s", prefixes[i], n);
        snprintf(tmp, sizeof tmp, "%s", lua_tostring(L, -1));
        lua_pop(L, 1);
        if (lua_getfield(L, -1, tmp) == LUA_TSTRING) {
            lua_remove(L, -2);
            return 1;
        }
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return 0;
}

void lm_lua_push_doc(lua_State *L, int idx)
{
    idx = lua_absindex(L, idx);
    if (lua_type(L, idx) == LUA_TSTRING) {
        if (!push_doc_by_name(L, lua_tostring(L, idx))) lua_pushnil(L);
        return;
    }
    push_registry_table(L, NAMES, "k");
    lua_pushvalue(L, idx);
    lua_rawget(L, -2);
    lua_remove(L, -2);
    if (lua_type(L, -1) == LUA_TSTRING) {
        const char *n = lua_tostring(L, -1);
        int ok = push_doc_by_name(L, n);
        lua_remove(L, -2);
        if (ok) return;
    } else {
        lua_pop(L, 1);
    }
    lua_pushnil(L);
}

/* One line per documented name starting with prefix: "  name  summary". */
static void push_index(lua_State *L, const char *prefix)
{
    luaL_Buffer b;
    push_registry_table(L, DOCS, NULL);
    int t = lua_gettop(L);
    /* sort the names for a stable listing */
    lua_newtable(L);
    int n = 0;
    lua_pushnil(L);
    while (lua_next(L, t)) {
        lua_pop(L, 1);
        const char *k = lua_tostring(L, -1);
        /* lm.exp is t:exp: list it once, as the method */
        bool dup = false;
        if (!strcmp(prefix, "lm.") && !strchr(k + 3, '.')) {
            lua_pushfstring(L, "t:%s", k + 3);
            lua_gettable(L, t);
            lua_pushvalue(L, -2);
            lua_gettable(L, t);
            dup = lua_rawequal(L, -1, -2);
            lua_pop(L, 2);
        }
        if (!dup && !strncmp(k, prefix, strlen(prefix))) {
            lua_pushvalue(L, -1);
            lua_rawseti(L, t + 1, ++n);
        }
    }
    lua_getglobal(L, "table");
    if (lua_istable(L, -1) && lua_getfield(L, -1, "sort") == LUA_TFUNCTION) {
        lua_pushvalue(L, t + 1);
        lua_call(L, 1, 0);
        lua_pop(L, 1);
    } else {
        lua_pop(L, 2);
    }
    luaL_buffinit(L, &b);
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, t + 1, i);
        lua_pushvalue(L, -1);
        lua_gettable(L, t);
        const char *doc = lua_tostring(L, -1);
        const char *nl = strchr(doc, '\n');
        lua_pushlstring(L, doc, nl ? (size_t)(nl - doc) : strlen(doc));
        lua_remove(L, -2);
        lua_remove(L, -2);
        luaL_addstring(&b, "  ");
        luaL_addvalue(&b);
        luaL_addchar(&b, '\n');
    }
    luaL_pushresult(&b);
    lua_replace(L, t);
    lua_settop(L, t);
}

static const char GENERAL_HELP[] =
    "Lumen: tensors for Lua.  Start with  x = lm.randn{3, 4}  and  x:sum(2).\n"
    "  help(lm)        every module function       help(lm.zeros)  one function\n"
    "  help(t)         tensor methods               ?t:exp          same, shorter\n"
    "REPL commands:  :time expr   :mem   :q (or Ctrl-D)   ?name\n"
    "Axes and indices are 1-based; negative values count from the end.\n";

static int is_module(lua_State *L, int idx)
{
    if (!lua_istable(L, idx)) return 0;
    int r = lua_getfield(L, idx, "zeros") == LUA_TFUNCTION
            && lua_getfield(L, idx, "tensor") == LUA_TFUNCTION;
    lua_pop(L, 2);
    return r;
}

/* lm.doc(x) -> string|nil */
static int l_doc(lua_State *L)
{
    lua_settop(L, 1);
    if (lm_lua_testtensor(L, 1)) {
        lua_pushliteral(L, "Tensor methods (t:name(...)):\n");
        push_index(L, "t:");
        lua_concat(L, 2);
    } else if (is_module(L, 1)) {
        lua_pushliteral(L, "Module functions (lm.name(...)); every tensor method is also "
                           "lm.name(t, ...), see help(t):\n");
        push_index(L, "lm.");
        lua_concat(L, 2);
    } else if (lua_isnoneornil(L, 1)) {
        lua_pushstring(L, GENERAL_HELP);
    } else {
        lm_lua_push_doc(L, 1);
    }
    return 1;
}

/* help(x): prints lm.doc(x) */
static int l_help(lua_State *L)
{
    l_doc(L);
    if (lua_isnil(L, -1)) {
        const char *what = luaL_tolstring(L, 1, NULL);
        printf("no documentation for %s\n", what);
    } else {
        size_t n;
        const char *s = lua_tolstring(L, -1, &n);
        fwrite(s, 1, n, stdout);
        if (n && s[n - 1] != '\n') putchar('\n');
    }
    fflush(stdout);
    return 0;
}

/* lm.docs() -> {name = doc, ...} (a copy, for the docs generator) */
static int l_docs(lua_State *L)
{
    push_registry_table(L, DOCS, NULL);
    lua_newtable(L);
    lua_pushnil(L);
    while (lua_next(L, -3)) {
        lua_pushvalue(L, -2);
        lua_insert(L, -2);
        lua_settable(L, -4);
    }
    return 1;
}

static const lm_lua_func doc_funcs[] = {
    {"help", l_help, "lm.help([x])\nPrints the documentation of a function, method, the module "
     "(help(lm)) or a tensor's methods (help(t)).  The REPL also has it as help(x) and ?x."},
    {"doc", l_doc, "lm.doc([x]) -> string|nil\nThe documentation help(x) prints, as a string."},
    {"_arity", l_arity, "lm._arity(f) -> integer|nil\nThe most arguments a Lumen function takes "
     "(self included), nil when variadic (internal; tests use it)."},
    {"docs", l_docs, "lm.docs() -> table\nEvery docstring by full name ({[\"lm.zeros\"] = \"...\"}); "
     "docs/API.md is generated from it."},
    {NULL, NULL, NULL},
};

void lm_lua_open_doc(lua_State *L)
{
    lm_lua_register(L, "lm.", doc_funcs);
}
