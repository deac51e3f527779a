/* l_tensor.c - the tensor userdata: how arrays enter and leave Lua, the
 * metatable (operators, indexing, properties, printing) and the memory
 * coupling between Lua's garbage collector and the core's buffers.
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

/* Pushes a new tensor for the value at idx, raising on failure. */
static lm_array *to_array_checked(lua_State *L, int idx)
{
    lm_array *a = lm_lua_to_array(L, idx, LM_DTYPE_COUNT);
    if (!a) lm_lua_error(L);
    return a;
}

/* ---- operators ---- */

static int arith(lua_State *L, lm_op op)
{
    lm_lua_tensor *ta = lm_lua_testtensor(L, 1), *tb = lm_lua_testtensor(L, 2);
    current_L = L;
    if (ta && lua_type(L, 2) == LUA_TNUMBER)
        return lm_lua_push_array(L, lm_binary_scalar(op, ta->a, lua_tonumber(L, 2), false));
    if (tb && lua_type(L, 1) == LUA_TNUMBER)
        return lm_lua_push_array(L, lm_binary_scalar(op, tb->a, lua_tonumber(L, 1), true));
    lm_array *a = to_array_checked(L, 1);
    lm_array *b = lm_lua_to_array(L, 2, LM_DTYPE_COUNT);
    lm_array *r = b ? lm_binary(op, a, b) : NULL;
    lm_array_release(a);
    lm_array_release(b);
    return lm_lua_push_array(L, r);
}

static int t_add(lua_State *L) { return arith(L, LM_OP_ADD); }
static int t_sub(lua_State *L) { return arith(L, LM_OP_SUB); }
static int t_mul(lua_State *L) { return arith(L, LM_OP_MUL); }
static int t_div(lua_State *L) { return arith(L, LM_OP_DIV); }
static int t_mod(lua_State *L) { return arith(L, LM_OP_MOD); }
static int t_pow(lua_State *L) { return arith(L, LM_OP_POW); }

/* a // b: floor division; integers stay integers, exactly */
static int t_idiv(lua_State *L) { return arith(L, LM_OP_FLOOR_DIVIDE); }

static int t_unm(lua_State *L)
{
    return lm_lua_push_array(L, lm_unary(LM_OP_NEG, lm_lua_check_array(L, 1)));
}

static int t_compare(lua_State *L)
{
    return luaL_error(L, "tensors compare elementwise with methods: t:lt(u), t:le(u), t:gt(u), "
                         "t:ge(u), t:eq(u), t:ne(u) (Lua's < and <= must give one boolean)");
}

static int t_len(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    if (a->ndim == 0) return luaL_error(L, "#t: a 0-d tensor has no length");
    lua_pushinteger(L, a->shape[0]);
    return 1;
}

static int t_tostring(lua_State *L)
{
    lm_lua_push_format(L, lm_lua_check_array(L, 1));
    return 1;
}

static int t_gc(lua_State *L)
{
    lm_lua_tensor *ud = lm_lua_testtensor(L, 1);
    if (ud && ud->a) {
        lm_array_release(ud->a);
        ud->a = NULL;
    }
    return 0;
}

/* ---- properties ---- */

static void push_shape(lua_State *L, const lm_array *a)
{
    lua_createtable(L, a->ndim, 0);
    for (int d = 0; d < a->ndim; d++) {
        lua_pushinteger(L, a->shape[d]);
        lua_rawseti(L, -2, d + 1);
    }
}

static int push_property(lua_State *L, const lm_array *a, const char *k)
{
    if (!strcmp(k, "shape")) push_shape(L, a);
    else if (!strcmp(k, "dtype")) lua_pushstring(L, lm_dtype_name(a->dtype));
    else if (!strcmp(k, "ndim")) lua_pushinteger(L, a->ndim);
    else if (!strcmp(k, "size")) lua_pushinteger(L, a->size);
    else if (!strcmp(k, "nbytes")) lua_pushinteger(L, (lua_Integer)lm_array_nbytes(a));
    else if (!strcmp(k, "device")) lua_pushstring(L, a->device ? a->device->spec : "?");
    else if (!strcmp(k, "evaluated")) lua_pushboolean(L, lm_array_is_evaluated(a));
    else if (!strcmp(k, "kept")) lua_pushboolean(L, (a->flags & LM_ARRAY_KEPT) != 0);
    else if (!strcmp(k, "freed")) lua_pushboolean(L, (a->flags & LM_ARRAY_FREED) != 0);
    else if (!strcmp(k, "T")) lm_lua_push_array(L, a->ndim < 2 ? lm_array_retain((lm_array *)a)
                                                              : lm_transpose((lm_array *)a, -2, -1));
    else return 0;
    return 1;
}

static int t_index(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    switch (lua_type(L, 2)) {
    case LUA_TSTRING:
        if (lua_pushvalue(L, 2), lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) return 1;
        if (push_property(L, a, lua_tostring(L, 2))) return 1;
        lm_lua_push_missing_method(L, 2);
        return 1;
    case LUA_TNUMBER:
    case LUA_TTABLE:
    case LUA_TUSERDATA:
        return lm_lua_index_get(L, a, 2);
    default:
        return luaL_error(L, "tensor index: number, table or name expected, got %s", luaL_typename(L, 2));
    }
}

static int t_newindex(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    if (lua_type(L, 2) == LUA_TSTRING)
        return luaL_error(L, "tensor: cannot set field '%s' (tensors have no fields to set)", lua_tostring(L, 2));
    return lm_lua_index_set(L, a, 2, 3);
}

/* ---- methods about life and memory ---- */

static int t_eval(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    if (lm_array_eval(a) != LM_OK) return lm_lua_error(L);
    lua_settop(L, 1);
    return 1;
}

static int t_free(lua_State *L)
{
    lm_array_free(lm_lua_check_array(L, 1));
    return 0;
}

static int t_keep(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    if (!(a->flags & LM_ARRAY_KEPT)) lm_array_keep(a);
    lua_settop(L, 1);
    return 1;
}

static int t_unkeep(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    if (a->flags & LM_ARRAY_KEPT) lm_array_unkeep(a);
    lua_settop(L, 1);
    return 1;
}

static void push_scalar(lua_State *L, lm_dtype dt, double d, int64_t i)
{
    if (dt == LM_BOOL) lua_pushboolean(L, i != 0);
    else if (lm_dtype_is_int(dt)) lua_pushinteger(L, (lua_Integer)i);
    else lua_pushnumber(L, d);
}

static int t_item(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    if (a->size != 1) {
        char s[128];
        return luaL_error(L, "item: tensor of shape %s has %d elements, not 1",
                          lm_shape_str(s, sizeof s, a->ndim, a->shape), (int)a->size);
    }
    double d = 0;
    int64_t i = 0;
    bool isint = !lm_dtype_is_float(a->dtype);
    if (lm_array_read(a, isint ? (void *)&i : (void *)&d, isint ? LM_I64 : LM_F64) != LM_OK)
        return lm_lua_error(L);
    push_scalar(L, a->dtype, d, i);
    return 1;
}

static void build_table(lua_State *L, const lm_array *a, int d, const void *data, int64_t *pos)
{
    bool isint = !lm_dtype_is_float(a->dtype);
    lua_createtable(L, (int)a->shape[d], 0);
    for (int64_t i = 0; i < a->shape[d]; i++) {
        if (d + 1 < a->ndim) {
            build_table(L, a, d + 1, data, pos);
        } else {
            int64_t p = (*pos)++;
            push_scalar(L, a->dtype, isint ? 0 : ((const double *)data)[p],
                        isint ? ((const int64_t *)data)[p] : 0);
        }
        lua_rawseti(L, -2, i + 1);
    }
}

static int t_totable(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    bool isint = !lm_dtype_is_float(a->dtype);
    void *data = lua_newuserdatauv(L, 8 * (size_t)(a->size ? a->size : 1), 0);
    if (lm_array_read(a, data, isint ? LM_I64 : LM_F64) != LM_OK) return lm_lua_error(L);
    if (a->ndim == 0) {
        push_scalar(L, a->dtype, ((double *)data)[0], ((int64_t *)data)[0]);
        return 1;
    }
    int64_t pos = 0;
    build_table(L, a, 0, data, &pos);
    return 1;
}

static int t_brief(lua_State *L)
{
    lm_lua_push_brief(L, lm_lua_check_array(L, 1));
    return 1;
}

static const lm_lua_func tensor_methods[] = {
    {"eval", t_eval, "t:eval() -> t\nEvaluates t now (and what it depends on); returns t."},
    {"free", t_free, "t:free()\nReleases t's memory at once instead of when Lua collects it; using "
     "t afterwards is an error (\"tensor was freed\").  `local t <close> = ...` does this at scope end."},
    {"keep", t_keep, "t:keep() -> t\nMarks t to survive lm.sweep() (weights, caches)."},
    {"unkeep", t_unkeep, "t:unkeep() -> t\nUndoes t:keep()."},
    {"item", t_item, "t:item() -> number|integer|boolean\nThe single element of t (evaluates)."},
    {"totable", t_totable, "t:totable() -> table\nt's elements as nested Lua tables (evaluates); a "
     "0-d tensor gives a number."},
    {"brief", t_brief, "t:brief() -> string\nA one-line description (dtype, shape, device, lazy or "
     "not) that never evaluates."},
    {NULL, NULL, NULL},
};

static const luaL_Reg meta[] = {
    {"__add", t_add}, {"__sub", t_sub}, {"__mul", t_mul}, {"__div", t_div},
    {"__mod", t_mod}, {"__pow", t_pow}, {"__unm", t_unm}, {"__idiv", t_idiv},
    {"__lt", t_compare}, {"__le", t_compare}, {"__len", t_len},
    {"__tostring", t_tostring}, {"__gc", t_gc}, {"__close", t_free},
    {"__newindex", t_newindex},
    {NULL, NULL},
};

void lm_lua_push_methods(lua_State *L)
{
    lua_getfield(L, LUA_REGISTRYINDEX, "lumen.methods");
}

/* Creates the metatable and the method table (module table on top). */
void lm_lua_open_tensor(lua_State *L)
{
    int module = lua_gettop(L);
    lua_newtable(L);                       /* methods */
    int methods = lua_gettop(L);
    lm_lua_register(L, "t:", tensor_methods);
    lm_lua_register(L, "t:", lm_lua_index_methods);
    lm_lua_register(L, "t:", lm_lua_op_methods);
    lua_pushvalue(L, methods);
    lua_setfield(L, LUA_REGISTRYINDEX, "lumen.methods");
    luaL_newmetatable(L, LM_LUA_TENSOR);
    luaL_setfuncs(L, meta, 0);
    lua_pushvalue(L, methods);
    lua_pushcclosure(L, t_index, 1);
    lua_setfield(L, -2, "__index");
    lua_pushliteral(L, "tensor");
    lua_setfield(L, -2, "__name");
    lua_settop(L, module);
}
