/* l_compile.c - lm.compile: trace a Lua function once per input signature,
 * run the optimised graph afterwards (core/compile.h does the work).
 *
 * Signature: for each argument, a tensor's dtype and ndim (and shape unless
 * shapeless), or a number/boolean/string's value; other Lua values are
 * passed through and not part of it.  Tensors captured from the enclosing
 * scope are constants of the trace: a later change to them is not seen.
 * Traces live in a bounded LRU cache per compiled function; dropping the
 * function (or f:clear()) frees them with their constants. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "l_internal.h"

#define COMPILED_MT "lumen.compiled"
#define MAX_ARGS 32

typedef struct trace {
    char *sig;
    lm_compiled *c;
    uint64_t used;
} trace;

typedef struct compiled_fn {
    bool shapeless;
    int cap, n;
    trace *traces;
    uint64_t clock;
    int64_t ntraced;
    int last;          /* index of the trace used last, -1 */
    int verify;        /* 0, 1 report divergence, 2 raise (lm_lua_compile_verify) */
    char name[64];
} compiled_fn;

static int tracing_depth;

static compiled_fn *check_fn(lua_State *L, int idx) { return luaL_checkudata(L, idx, COMPILED_MT); }

static void drop_trace(trace *t)
{
    free(t->sig);
    lm_compiled_free(t->c);
    memset(t, 0, sizeof *t);
}

static void clear_traces(compiled_fn *f)
{
    for (int i = 0; i < f->n; i++) drop_trace(&f->traces[i]);
    f->n = 0;
    f->last = -1;
}

/* signature of args 2..top (the function object is at 1) */
static void signature(lua_State *L, compiled_fn *f, bool with_shapes, luaL_Buffer *b)
{
    int top = lua_gettop(L);
    luaL_buffinit(L, b);
    for (int i = 2; i <= top; i++) {
        char s[160];
        lm_lua_tensor *t = lm_lua_testtensor(L, i);
        if (t && t->a) {
            int n = snprintf(s, sizeof s, "T%s:%d", lm_dtype_name(t->a->dtype), t->a->ndim);
            if (with_shapes && !f->shapeless) lm_shape_str(s + n, sizeof s - (size_t)n, t->a->ndim, t->a->shape);
            else if (with_shapes) lm_shape_str(s + n, sizeof s - (size_t)n, t->a->ndim, t->a->shape);
        } else if (lua_type(L, i) == LUA_TNUMBER) {
            snprintf(s, sizeof s, "N%.17g", lua_tonumber(L, i));
        } else if (lua_type(L, i) == LUA_TBOOLEAN) {
            snprintf(s, sizeof s, "B%d", lua_toboolean(L, i));
        } else if (lua_type(L, i) == LUA_TSTRING) {
            snprintf(s, sizeof s, "S%.120s", lua_tostring(L, i));
        } else {
            snprintf(s, sizeof s, "%s", luaL_typename(L, i));
        }
        luaL_addstring(b, s);
        luaL_addchar(b, ';');
    }
}

static int find_trace(compiled_fn *f, const char *sig)
{
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->traces[i].sig, sig)) return i;
    return -1;
}

/* Calls the Lua function with placeholders for the tensor arguments and
 * compiles what it returns.  Leaves nothing on the stack. */
static int trace_new(lua_State *L, compiled_fn *f, const char *sig)
{
    int top = lua_gettop(L), nargs = top - 1, nph = 0;
    lm_array *ph[MAX_ARGS];
    lua_getiuservalue(L, 1, 1);
    for (int i = 2; i <= top; i++) {
        lm_lua_tensor *t = lm_lua_testtensor(L, i);
        if (t && t->a) {
            ph[nph] = lm_placeholder(t->a->ndim, t->a->shape, t->a->dtype, t->a->device);
            lm_lua_push_array(L, lm_array_retain(ph[nph]));
            nph++;
        } else {
            lua_pushvalue(L, i);
        }
    }
    tracing_depth++;
    int st = lua_pcall(L, nargs, LUA_MULTRET, 0);
    tracing_depth--;
    if (st != LUA_OK) {
        for (int k = 0; k < nph; k++) lm_array_release(ph[k]);
        return luaL_error(L, "compile: tracing %s: %s", f->name, lua_tostring(L, -1));
    }
    int nout = lua_gettop(L) - top;
    lm_array *outs[MAX_ARGS];
    if (nout < 1 || nout > MAX_ARGS) {
        for (int k = 0; k < nph; k++) lm_array_release(ph[k]);
        return luaL_error(L, "compile: %s returned %d values; it must return 1 to %d tensors", f->name, nout, MAX_ARGS);
    }
    for (int k = 0; k < nout; k++) {
        lm_lua_tensor *t = lm_lua_testtensor(L, top + 1 + k);
        if (!t || !t->a) {
            for (int q = 0; q < nph; q++) lm_array_release(ph[q]);
            return luaL_error(L, "compile: %s returned a %s as result %d, expected a tensor", f->name,
                              luaL_typename(L, top + 1 + k), k + 1);
        }
        outs[k] = t->a;
    }
    lm_compiled *c = lm_compile_graph(nph, ph, nout, outs, lm_compile_get_mode());
    for (int k = 0; k < nph; k++) lm_array_release(ph[k]);
    lua_settop(L, top);
    if (!c) return luaL_error(L, "compile: %s: %s", f->name, lm_error_message());
    if (f->n == f->cap) {   /* evict the least recently used */
        int lru = 0;
        for (int i = 1; i < f->n; i++) if (f->traces[i].used < f->traces[lru].used) lru = i;
        drop_trace(&f->traces[lru]);
        f->traces[lru] = f->traces[--f->n];
    }
    trace *t = &f->traces[f->n];
    t->sig = strdup(sig);
    t->c = c;
    t->used = ++f->clock;
    f->ntraced++;
    return f->n++;
}

/* the signature of the call's arguments into key (a C buffer, so a Lua
 * error while tracing leaks nothing); false if it does not fit */
static bool make_key(lua_State *L, compiled_fn *f, bool with_shapes, const char *suffix, char *key, size_t n)
{
    int top = lua_gettop(L);
    luaL_Buffer b;
    signature(L, f, with_shapes, &b);
    luaL_addstring(&b, suffix);
    luaL_pushresult(&b);
    size_t len;
    const char *s = lua_tolstring(L, -1, &len);
    bool ok = len < n;
    if (ok) memcpy(key, s, len + 1);
    lua_settop(L, top);
    return ok;
}

static int compiled_call(lua_State *L)
{
    compiled_fn *f = check_fn(L, 1);
    int top = lua_gettop(L);
    bool inline_call = tracing_depth > 0 || lm_compile_get_mode() == LM_COMPILE_OFF;
    lm_array *in[MAX_ARGS];
    int nin = 0;
    if (top - 1 > MAX_ARGS) return luaL_error(L, "compile: at most %d arguments", MAX_ARGS);
    for (int i = 2; i <= top; i++) {
        lm_lua_tensor *t = lm_lua_testtensor(L, i);
        if (!t) continue;
        if (!t->a) return luaL_error(L, "compile: argument %d is a freed tensor", i - 1);
        if (t->a->flags & LM_ARRAY_TRACER) inline_call = true;   /* inside an outer trace */
        in[nin++] = t->a;
    }
    if (inline_call) {
        /* run the function itself: an outer trace then sees (and fuses) its ops */
        lua_getiuservalue(L, 1, 1);
        lua_insert(L, 2);
        lua_call(L, top - 1, LUA_MULTRET);
        return lua_gettop(L) - 1;
    }
    char key[4096];
    if (!make_key(L, f, !f->shapeless, "", key, sizeof key))
        return luaL_error(L, "compile: argument signature too long");
    int k = find_trace(f, key);
    if (k < 0) k = trace_new(L, f, key);
    lm_array *outs[MAX_ARGS];
    int nout = lm_compiled_call(f->traces[k].c, nin, in, outs);
    if (nout == -2) {
        /* a shapeless trace whose views pin its shapes: trace this shape too */
        if (!make_key(L, f, true, "#exact", key, sizeof key))
            return luaL_error(L, "compile: argument signature too long");
        k = find_trace(f, key);
        if (k < 0) k = trace_new(L, f, key);
        nout = lm_compiled_call(f->traces[k].c, nin, in, outs);
    }
    if (nout < 0) return lm_lua_error(L);
    if (f->verify) {   /* fused against unfused, node by node (l_diff.c) */
        lua_getiuservalue(L, 1, 1);
        lm_lua_compile_verify(L, lua_gettop(L), 2, top - 1, f->verify == 2, f->name);
        lua_pop(L, 1);
    }
    f->traces[k].used = ++f->clock;
    f->last = k;
    for (int i = 0; i < nout; i++) lm_lua_push_array(L, outs[i]);
    return nout;
}

static int compiled_gc(lua_State *L)
{
    compiled_fn *f = check_fn(L, 1);
    clear_traces(f);
    free(f->traces);
    f->traces = NULL;
    return 0;
}

static int compiled_graph(lua_State *L)
{
    compiled_fn *f = check_fn(L, 1);
    if (f->last < 0 || f->last >= f->n) {
        lua_pushfstring(L, "compiled %s: not traced yet", f->name);
        return 1;
    }
    char *d = lm_compiled_describe(f->traces[f->last].c);
    if (!d) return luaL_error(L, "graph: out of memory");
    lua_pushfstring(L, "%s %s", f->name, d);
    free(d);
    return 1;
}

static int compiled_traces(lua_State *L)
{
    compiled_fn *f = check_fn(L, 1);
    lua_pushinteger(L, (lua_Integer)f->ntraced);
    lua_pushinteger(L, f->n);
    return 2;
}

static int compiled_kernels(lua_State *L)
{
    compiled_fn *f = check_fn(L, 1);
    lua_pushinteger(L, f->last >= 0 && f->last < f->n ? lm_compiled_kernels(f->traces[f->last].c) : 0);
    return 1;
}

static int compiled_clear(lua_State *L)
{
    clear_traces(check_fn(L, 1));
    return 0;
}

static int compiled_tostring(lua_State *L)
{
    compiled_fn *f = check_fn(L, 1);
    lua_pushfstring(L, "<compiled %s: %d traces cached>", f->name, f->n);
    return 1;
}

static int l_compile(lua_State *L)
{
    static const char *const KNOWN[] = {"shapeless", "name", "cache", "verify", NULL};
    luaL_checktype(L, 1, LUA_TFUNCTION);
    lm_lua_check_opts(L, 2, "lm.compile", KNOWN);
    bool shapeless = lm_lua_opt_bool(L, 2, "lm.compile", "shapeless", false);
    lua_Integer cap = lm_lua_opt_int(L, 2, "lm.compile", "cache", 16);
    if (cap < 1) return luaL_error(L, "compile: cache must be at least 1");
    const char *name = "fn";
    if (lua_istable(L, 2)) {
        lua_getfield(L, 2, "name");
        if (lua_isstring(L, -1)) name = lua_tostring(L, -1);
        lua_pop(L, 1);
    }
    compiled_fn *f = lua_newuserdatauv(L, sizeof *f, 1);
    memset(f, 0, sizeof *f);
    f->shapeless = shapeless;
    f->cap = (int)cap;
    f->last = -1;
    if (lua_istable(L, 2)) {
        lua_getfield(L, 2, "verify");
        f->verify = lua_type(L, -1) == LUA_TSTRING && !strcmp(lua_tostring(L, -1), "error") ? 2 : lua_toboolean(L, -1);
        lua_pop(L, 1);
    }
    snprintf(f->name, sizeof f->name, "%s", name);
    f->traces = calloc((size_t)cap, sizeof *f->traces);
    if (!f->traces) return luaL_error(L, "compile: out of memory");
    luaL_setmetatable(L, COMPILED_MT);
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1);
    return 1;
}

static int l_compile_mode(lua_State *L)
{
    static const char *names[] = {"off", "no_fuse", "on", NULL};
    lua_pushstring(L, names[lm_compile_get_mode()]);
    if (!lua_isnoneornil(L, 1)) lm_compile_set_mode((lm_compile_mode)luaL_checkoption(L, 1, NULL, names));
    return 1;
}

static int l_export_dot(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    const char *path = luaL_checkstring(L, 2);
    if (lm_export_dot(a, path) != LM_OK) return lm_lua_error(L);
    return 0;
}

static const lm_lua_func compile_funcs[] = {
    {"compile", l_compile,
     "lm.compile(fn, {shapeless=false, name=, cache=16}) -> compiled function\n"
     "Traces fn once per input signature (tensor dtypes, ndims and shapes unless shapeless;\n"
     "the values of number/boolean/string arguments) on placeholder tensors, optimises the\n"
     "graph (constant folding, CSE, fusion of elementwise chains into single kernels) and\n"
     "replays it on later calls without calling fn. Tensors captured from outside fn are\n"
     "constants of the trace. fn must return one or more tensors. Compiled functions called\n"
     "while another is traced are inlined. f:graph() describes the optimised graph,\n"
     "f:traces() returns (traces made, traces cached), f:kernels() the kernels per call,\n"
     "f:clear() drops the cache. verify = true runs every call fused and unfused too and\n"
     "reports the first fused kernel that diverges (verify = \"error\" raises).\n"
     "On Vulkan a call with the input devices, dtypes and shapes of an earlier one replays\n"
     "recorded device work instead of rebuilding and recording its graph (what a CUDA graph is\n"
     "to PyTorch): the second such call records into memory the trace owns (one call's working\n"
     "set, counted in lm.memory() and given back with the trace); later calls copy their inputs\n"
     "in, resubmit it and copy the outputs out, returning evaluated tensors whose work is queued\n"
     "as after lm.async_eval. Calls that cannot be recorded (a CPU fallback, an index-checking\n"
     "gather, an open profile, one kernel or large inputs) run as before; LUMEN_VK_REPLAY=0\n"
     "switches replay off (docs/VULKAN.md)."},
    {"compile_mode", l_compile_mode,
     "lm.compile_mode([\"off\"|\"no_fuse\"|\"on\"]) -> previous mode\n"
     "off runs compiled functions as plain Lua (LUMEN_COMPILE=0 starts there); no_fuse keeps\n"
     "the other passes but launches every op as its own kernel."},
    {"export_dot", l_export_dot,
     "lm.export_dot(t, path)\nWrites the graph behind t (lazy parts and their evaluated leaves) as Graphviz DOT."},
    {NULL, NULL, NULL},
};

void lm_lua_open_compile(lua_State *L)
{
    if (luaL_newmetatable(L, COMPILED_MT)) {
        static const luaL_Reg meta[] = {
            {"__call", compiled_call}, {"__gc", compiled_gc}, {"__close", compiled_gc},
            {"__tostring", compiled_tostring}, {NULL, NULL},
        };
        static const luaL_Reg methods[] = {
            {"graph", compiled_graph}, {"traces", compiled_traces}, {"kernels", compiled_kernels},
            {"clear", compiled_clear}, {NULL, NULL},
        };
        luaL_setfuncs(L, meta, 0);
        luaL_newlib(L, methods);
        lua_setfield(L, -2, "__index");
    }
    lua_pop(L, 1);
    lm_lua_register(L, "lm.", compile_funcs);
}
