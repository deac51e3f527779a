/* l_torch.c - the names a PyTorch user tries first (t:view, t:t(),
 * t:mm, t:to("f16"), t:float(), lm.cat ...), as aliases with torch's
 * meaning in Lua's numbering, and for a method a tensor does not have, an
 * error that says so (and names the Lumen spelling where torch has one)
 * instead of Lua's "attempt to call a nil value".
 *
 * The aliases call the Lumen method they stand for, so they cannot drift
 * from it.  Registered after the op methods: t:to here, which takes a
 * dtype as well as a device, replaces l_ops.c's device-only one. */
#include <string.h>
#include "l_internal.h"

/* Calls method `name` of the tensor methods with this call's arguments. */
static int forward(lua_State *L, const char *name)
{
    int n = lua_gettop(L);
    lm_lua_push_methods(L);
    lua_getfield(L, -1, name);
    lua_remove(L, -2);
    lua_insert(L, 1);
    lua_call(L, n, LUA_MULTRET);
    return lua_gettop(L);
}

static int a_view(lua_State *L)
{
    if (lua_istable(L, 2)) lm_lua_check_nargs(L, 2, "t:view");
    return forward(L, "reshape");
}
static int a_clone(lua_State *L) { return forward(L, "copy"); }

static int a_t(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    lm_lua_check_nargs(L, 1, "t:t");
    if (a->ndim > 2)
        return luaL_error(L, "t:t: a %d-d tensor has no t() (torch's t() takes at most 2-d); use "
                             "t:transpose(a, b) or t:permute{...}", a->ndim);
    if (a->ndim < 2) {
        lua_settop(L, 1);
        return 1;
    }
    return forward(L, "transpose");
}

/* mm/bmm: matmul restricted to torch's ranks, so a batched or 1-d call is
 * not silently broadcast where torch would refuse */
static int matmul_ranked(lua_State *L, const char *fname, int rank)
{
    lm_array *a = lm_lua_check_array(L, 1), *b = lm_lua_check_array(L, 2);
    lm_lua_check_nargs(L, 2, fname);
    if (a->ndim != rank || b->ndim != rank)
        return luaL_error(L, "%s: both operands must be %d-d, got %d-d and %d-d (t:matmul "
                             "broadcasts any ranks)", fname, rank, a->ndim, b->ndim);
    return forward(L, "matmul");
}

static int a_mm(lua_State *L) { return matmul_ranked(L, "mm", 2); }
static int a_bmm(lua_State *L) { return matmul_ranked(L, "bmm", 3); }

static int as_dtype(lua_State *L, lm_dtype dt, const char *fname)
{
    lm_array *a = lm_lua_check_array(L, 1);
    lm_lua_check_nargs(L, 1, fname);
    if (a->dtype == dt) {
        lua_settop(L, 1);
        return 1;
    }
    return lm_lua_push_array(L, lm_cast(a, dt));
}

static int a_float(lua_State *L) { return as_dtype(L, LM_F32, "t:float"); }
static int a_half(lua_State *L) { return as_dtype(L, LM_F16, "t:half"); }
static int a_double(lua_State *L) { return as_dtype(L, LM_F64, "t:double"); }
static int a_bfloat16(lua_State *L) { return as_dtype(L, LM_BF16, "t:bfloat16"); }
static int a_long(lua_State *L) { return as_dtype(L, LM_I64, "t:long"); }
static int a_int(lua_State *L) { return as_dtype(L, LM_I32, "t:int"); }
static int a_bool(lua_State *L) { return as_dtype(L, LM_BOOL, "t:bool"); }

static int a_numel(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    lm_lua_check_nargs(L, 1, "t:numel");
    lua_pushinteger(L, a->size);
    return 1;
}

static int a_dim(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    lm_lua_check_nargs(L, 1, "t:dim");
    lua_pushinteger(L, a->ndim);
    return 1;
}

/* t:to(x, [y]): each of x, y a dtype name or a device spec (torch's
 * .to(device), .to(dtype), .to(device, dtype)) */
static int a_to(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    lm_lua_check_nargs(L, 3, "t:to");
    lm_dtype dt = LM_DTYPE_COUNT;
    lm_device *dev = NULL;
    for (int i = 2; i <= lua_gettop(L); i++) {
        const char *s = luaL_checkstring(L, i);
        lm_dtype d;
        if (lm_dtype_from_name(s, &d)) {
            if (dt != LM_DTYPE_COUNT) return luaL_error(L, "t:to: two dtypes given");
            dt = d;
            continue;
        }
        if (dev) return luaL_error(L, "t:to: two devices given");
        dev = lm_device_find(s);
        if (!dev)
            return luaL_error(L, "t:to: '%s' is neither a dtype (f32 f16 bf16 f64 i8 u8 i16 i32 "
                                 "i64 bool) nor a device (%s)", s, lm_error_message());
    }
    if (lua_gettop(L) < 2) return luaL_error(L, "t:to: a dtype or a device is required");
    lm_array *r = lm_array_retain(a);
    if (dev && dev != r->device) {
        lm_array *m = lm_array_to(r, dev);
        lm_array_release(r);
        r = m;
    }
    if (r && dt != LM_DTYPE_COUNT && dt != r->dtype) {
        lm_array *c = lm_cast(r, dt);
        lm_array_release(r);
        r = c;
    }
    if (r == a) {
        lm_array_release(r);
        lua_settop(L, 1);
        return 1;
    }
    return lm_lua_push_array(L, r);
}

static int a_cpu(lua_State *L)
{
    lm_lua_check_nargs(L, 1, "t:cpu");
    lua_pushliteral(L, "cpu");
    return a_to(L);
}

static int m_cat(lua_State *L)
{
    lua_getfield(L, LUA_REGISTRYINDEX, "lumen.concat");
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

static int m_mm(lua_State *L) { return a_mm(L); }

static int m_manual_seed(lua_State *L)
{
    lm_random_seed((uint64_t)luaL_checkinteger(L, 1));
    return 0;
}

#define ALIAS "  (PyTorch's name.)"

static const lm_lua_func torch_methods[] = {
    {"view", a_view, "t:view(shape | n1, n2, ...) -> tensor\nt:reshape under torch's name: the same "
     "elements in a new shape (one entry may be -1)." ALIAS},
    {"t", a_t, "t:t() -> tensor\ntorch's t(): a 2-d tensor transposed, a 0-d or 1-d one as it is; "
     "more dimensions are an error (use t:transpose or t:permute)." ALIAS},
    {"mm", a_mm, "t:mm(u) -> tensor\nThe product of two 2-d matrices (t:matmul, refusing other ranks "
     "as torch.mm does)." ALIAS},
    {"bmm", a_bmm, "t:bmm(u) -> tensor\nThe batched product of two 3-d tensors (t:matmul, refusing "
     "other ranks as torch.bmm does)." ALIAS},
    {"to", a_to, "t:to(dtype | device, [dtype | device]) -> tensor\nt on another device (\"cpu\", "
     "\"vulkan\", \"vulkan:1\") and/or in another dtype (\"f16\"), as torch's .to(); t itself when "
     "nothing changes."},
    {"cpu", a_cpu, "t:cpu() -> tensor\nt:to(\"cpu\")." ALIAS},
    {"clone", a_clone, "t:clone() -> tensor\nt:copy(): a new contiguous copy." ALIAS},
    {"numel", a_numel, "t:numel() -> integer\nThe number of elements (also the property t.size, "
     "numpy's name)." ALIAS},
    {"dim", a_dim, "t:dim() -> integer\nThe number of dimensions (also the property t.ndim)." ALIAS},
    {"float", a_float, "t:float() -> tensor\nt:astype(\"f32\")." ALIAS},
    {"half", a_half, "t:half() -> tensor\nt:astype(\"f16\")." ALIAS},
    {"double", a_double, "t:double() -> tensor\nt:astype(\"f64\")." ALIAS},
    {"bfloat16", a_bfloat16, "t:bfloat16() -> tensor\nt:astype(\"bf16\")." ALIAS},
    {"long", a_long, "t:long() -> tensor\nt:astype(\"i64\")." ALIAS},
    {"int", a_int, "t:int() -> tensor\nt:astype(\"i32\")." ALIAS},
    {"bool", a_bool, "t:bool() -> tensor\nt:astype(\"bool\")." ALIAS},
    {NULL, NULL, NULL},
};

static const lm_lua_func torch_module[] = {
    {"cat", m_cat, "lm.cat({a, b, ...}, [axis=1]) -> tensor\nlm.concat under torch's name (axis "
     "1-based: torch.cat(xs, 0) is lm.cat(xs, 1))." ALIAS},
    {"mm", m_mm, "lm.mm(a, b) -> tensor\nThe product of two 2-d matrices (torch.mm)." ALIAS},
    {"manual_seed", m_manual_seed, "lm.manual_seed(n)\nlm.seed(n): resets the generator that "
     "rand/randn use when no seed is given." ALIAS},
    {"to", a_to, "lm.to(t, dtype | device, [dtype | device]) -> tensor\nt:to(...)."},
    {NULL, NULL, NULL},
};

void lm_lua_open_torch(lua_State *L)
{
    lm_lua_push_methods(L);
    lm_lua_register(L, "t:", torch_methods);
    lua_pop(L, 1);
    lm_lua_register(L, "lm.", torch_module);
    /* lm.cat calls the lm.concat the module was opened with */
    lua_getfield(L, -1, "concat");
    lua_setfield(L, LUA_REGISTRYINDEX, "lumen.concat");
}

/* ---- methods a tensor does not have ---- */

/* torch (and numpy) spellings with no alias here, and what Lumen spells */
static const char *const HINTS[][2] = {
    {"size", "t.shape (a table; t.shape[d] for one axis) or t.size (the element count, numpy's "
             "name, a number: not callable)"},
    {"cuda", "t:to(\"vulkan\")"},
    {"numpy", "t:totable()"},
    {"tolist", "t:totable()"},
    {"backward", "lm.grad(f) or lm.value_and_grad(f)"},
    {"detach", "lm.stop_gradient(t)"},
    {"type", "t.dtype and t:astype(dtype)"},
    {"expand", "t:broadcast_to(shape)"},
    {"masked_fill", "lm.where(mask, value, t)"},
    {"fill_", "t:set(nil, value)"},
    {"zero_", "t:set(nil, 0)"},
    {"copy_", "t:set(nil, src)"},
    {"flip", "t:slice(axis, -1, 1, -1)"},
    {"repeat", "t:broadcast_to(shape) or lm.concat"},
    {"stride", "t:contiguous() (Lumen does not expose strides)"},
};

static int no_method(lua_State *L)
{
    int i = (int)lua_tointeger(L, lua_upvalueindex(1));
    return luaL_error(L, "tensor has no method '%s' (in Lumen: %s)", HINTS[i][0], HINTS[i][1]);
}

/* Only the names a PyTorch user tries get a function that explains itself;
 * any other missing field is nil, as Lua code testing `t.field` expects
 * (and calling it still names the method in Lua's own message). */
void lm_lua_push_missing_method(lua_State *L, int name)
{
    const char *s = lua_tostring(L, name);
    for (size_t i = 0; s && i < sizeof HINTS / sizeof HINTS[0]; i++)
        if (!strcmp(HINTS[i][0], s)) {
            lua_pushinteger(L, (lua_Integer)i);
            lua_pushcclosure(L, no_method, 1);
            return;
        }
    lua_pushnil(L);
}
