/* l_tensor.c - the tensor's metatable: operators, indexing, properties,
 * the methods about life and memory, printing.  How arrays enter and leave
 * Lua (push, check, conversion from Lua values) and the memory coupling
 * with the collector are in l_array.c, which every binding file uses. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "l_internal.h"

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
    lm_lua_enter(L);
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

/* A shape is a plain table {3, 64, 64} that users index, measure and
 * iterate, with a metatable that prints it as {3, 64, 64} (PyTorch prints
 * torch.Size([3, 64, 64])), compares it by value with another shape or a
 * table of the same integers (as torch.Size == tuple), and concatenates it
 * to a string.  Nothing else: no __index, so it stays a table. */
#define LM_LUA_SHAPE "lumen.shape"

static int shape_tostring(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addchar(&b, '{');
    lua_Integer n = (lua_Integer)lua_rawlen(L, 1);
    for (lua_Integer i = 1; i <= n; i++) {
        if (i > 1) luaL_addstring(&b, ", ");
        lua_rawgeti(L, 1, i);
        luaL_tolstring(L, -1, NULL);
        lua_remove(L, -2);
        luaL_addvalue(&b);
    }
    luaL_addchar(&b, '}');
    luaL_pushresult(&b);
    return 1;
}

static int shape_eq(lua_State *L)
{
    bool same = lua_type(L, 1) == LUA_TTABLE && lua_type(L, 2) == LUA_TTABLE &&
                lua_rawlen(L, 1) == lua_rawlen(L, 2);
    lua_Integer n = same ? (lua_Integer)lua_rawlen(L, 1) : 0;
    for (lua_Integer i = 1; same && i <= n; i++) {
        lua_rawgeti(L, 1, i);
        lua_rawgeti(L, 2, i);
        same = lua_rawequal(L, -1, -2) ||
               (lua_isnumber(L, -1) && lua_isnumber(L, -2) && lua_compare(L, -1, -2, LUA_OPEQ));
        lua_pop(L, 2);
    }
    lua_pushboolean(L, same);
    return 1;
}

static int shape_concat(lua_State *L)
{
    luaL_tolstring(L, 1, NULL);
    luaL_tolstring(L, 2, NULL);
    lua_concat(L, 2);
    return 1;
}

void lm_lua_push_shape(lua_State *L, int ndim, const int64_t *shape)
{
    lua_createtable(L, ndim, 0);
    for (int d = 0; d < ndim; d++) {
        lua_pushinteger(L, shape[d]);
        lua_rawseti(L, -2, d + 1);
    }
    if (luaL_newmetatable(L, LM_LUA_SHAPE)) {
        static const luaL_Reg fns[] = {
            {"__tostring", shape_tostring}, {"__eq", shape_eq}, {"__concat", shape_concat},
            {NULL, NULL}};
        luaL_setfuncs(L, fns, 0);
    }
    lua_setmetatable(L, -2);
}

static void push_shape(lua_State *L, const lm_array *a)
{
    lm_lua_push_shape(L, a->ndim, a->shape);
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
    bool wait = true;
    static const char *const known[] = {"wait", NULL};
    if (lm_lua_check_opts(L, 2, "eval", known)) {
        lua_getfield(L, 2, "wait");
        if (!lua_isnil(L, -1)) {
            if (!lua_isboolean(L, -1)) return luaL_error(L, "eval: option 'wait' must be true or false");
            wait = lua_toboolean(L, -1);
        }
        lua_pop(L, 1);
    }
    if ((wait ? lm_array_eval(a) : lm_eval_async(&a, 1)) != LM_OK) return lm_lua_error(L);
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
    {"eval", t_eval, "t:eval([{wait = false}]) -> t\nEvaluates t now (and what it depends on); returns "
     "t. With wait = false it returns once the work is queued (see lm.async_eval)."},
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
