/* l_create.c - making tensors (lm.tensor, zeros, arange, rand ...) and the
 * module-level state: devices, memory, random seed, print options. */
#include <math.h>
#include <string.h>
#include <time.h>
#include "core/backend.h"
#include "l_internal.h"


static lm_dtype dtype_or(const lm_lua_opts *o, lm_dtype d) { return o->dtype == LM_DTYPE_COUNT ? d : o->dtype; }

/* lm.tensor(data, {dtype=, device=}) */
static int c_tensor(lua_State *L)
{
    lm_lua_opts o;
    lm_lua_opts_read(L, lm_lua_inline_opts(L, 1, 2, "lm.tensor"), &o, "lm.tensor", NULL);
    if (lua_type(L, 1) == LUA_TNUMBER || lua_type(L, 1) == LUA_TBOOLEAN) {
        /* an explicit tensor from a number is not a weak scalar */
        lm_dtype dt = dtype_or(&o, lua_isboolean(L, 1) ? LM_BOOL : LM_F32);
        double v = lua_isboolean(L, 1) ? lua_toboolean(L, 1) : lua_tonumber(L, 1);
        unsigned char buf[8];
        lm_convert(buf, dt, &v, LM_F64, 1);
        return lm_lua_push_array(L, lm_from_data(0, NULL, dt, buf, o.device));
    }
    lm_lua_tensor *t = lm_lua_testtensor(L, 1);
    if (t) {
        lm_array *r = lm_array_retain(t->a);
        if (o.device && o.device != r->device) {
            lm_array *m = lm_array_to(r, o.device);
            lm_array_release(r);
            r = m;
        }
        if (r && o.dtype != LM_DTYPE_COUNT && o.dtype != r->dtype) {
            lm_array *c = lm_cast(r, o.dtype);
            lm_array_release(r);
            r = c;
        }
        return lm_lua_push_array(L, r);
    }
    luaL_checktype(L, 1, LUA_TTABLE);
    return lm_lua_push_array(L, lm_lua_to_array_on(L, 1, o.dtype, o.device));
}

static int fill(lua_State *L, double v, bool has_value, const char *fname)
{
    int64_t shape[LM_MAX_DIMS];
    int next;
    int n = lm_lua_shape(L, 1, shape, &next);
    if (has_value) v = luaL_checknumber(L, next++);
    lm_lua_inline_opts(L, 1, next, fname);
    lm_lua_opts o;
    lm_lua_opts_read(L, next, &o, fname, NULL);
    lm_lua_check_nargs(L, next, fname);
    return lm_lua_push_array(L, lm_full(n, shape, v, dtype_or(&o, LM_F32), o.device));
}

static int c_zeros(lua_State *L) { return fill(L, 0, false, "lm.zeros"); }
static int c_ones(lua_State *L) { return fill(L, 1, false, "lm.ones"); }
static int c_full(lua_State *L) { return fill(L, 0, true, "lm.full"); }

/* lm.arange([start,] stop [, step], [opts]) */
static int c_arange(lua_State *L)
{
    int nnum = 0;
    while (nnum < 3 && lua_type(L, nnum + 1) == LUA_TNUMBER) nnum++;
    if (nnum == 0) return luaL_error(L, "arange: expected (stop), (start, stop) or (start, stop, step)");
    bool ints = true;
    for (int i = 1; i <= nnum; i++) ints = ints && lua_isinteger(L, i);
    double start = nnum > 1 ? lua_tonumber(L, 1) : 0;
    double stop = nnum > 1 ? lua_tonumber(L, 2) : lua_tonumber(L, 1);
    double step = nnum > 2 ? lua_tonumber(L, 3) : 1;
    lm_lua_opts o;
    lm_lua_opts_read(L, nnum + 1, &o, "lm.arange", NULL);
    lm_lua_check_nargs(L, nnum + 1, "lm.arange");
    return lm_lua_push_array(L, lm_arange(start, stop, step, dtype_or(&o, ints ? LM_I64 : LM_F32), o.device));
}

static int c_linspace(lua_State *L)
{
    double a = luaL_checknumber(L, 1), b = luaL_checknumber(L, 2);
    lua_Integer n = luaL_optinteger(L, 3, 50);
    lm_lua_opts o;
    lm_lua_opts_read(L, 4, &o, "lm.linspace", NULL);
    return lm_lua_push_array(L, lm_linspace(a, b, n, dtype_or(&o, LM_F32), o.device));
}

static int c_eye(lua_State *L)
{
    lua_Integer n = luaL_checkinteger(L, 1);
    int arg = 2;
    lua_Integer m = n, k = 0;
    if (lua_type(L, arg) == LUA_TNUMBER) m = lua_tointeger(L, arg++);
    if (lua_type(L, arg) == LUA_TNUMBER) k = lua_tointeger(L, arg++);
    lm_lua_opts o;
    lm_lua_opts_read(L, arg, &o, "lm.eye", NULL);
    lm_lua_check_nargs(L, arg, "lm.eye");
    return lm_lua_push_array(L, lm_eye(n, m, k, dtype_or(&o, LM_F32), o.device));
}

static lm_key key_from(lua_State *L, int opt, const char *fname)
{
    if (lua_istable(L, opt)) {
        bool has = lua_getfield(L, opt, "seed") != LUA_TNIL;
        lua_pop(L, 1);
        if (has) return lm_random_key((uint64_t)lm_lua_opt_int(L, opt, fname, "seed", 0));
    }
    return lm_random_next_key();
}

static int random_tensor(lua_State *L, bool normal)
{
    static const char *const UNIFORM[] = {"seed", "low", "high", "dtype", "device", NULL};
    static const char *const NORMAL[] = {"seed", "mean", "std", "dtype", "device", NULL};
    const char *fname = normal ? "lm.randn" : "lm.rand";
    int64_t shape[LM_MAX_DIMS];
    int next;
    int n = lm_lua_shape(L, 1, shape, &next);
    lm_lua_inline_opts(L, 1, next, fname);
    lm_lua_opts o;
    lm_lua_opts_read(L, next, &o, fname, normal ? NORMAL : UNIFORM);
    lm_lua_check_nargs(L, next, fname);
    lm_key k = key_from(L, next, fname);
    lm_dtype dt = dtype_or(&o, LM_F32);
    if (normal) {
        double mean = lm_lua_opt_num(L, next, fname, "mean", 0);
        double std = lm_lua_opt_num(L, next, fname, "std", 1);
        return lm_lua_push_array(L, lm_random_normal(n, shape, mean, std, dt, k, o.device));
    }
    double lo = lm_lua_opt_num(L, next, fname, "low", 0);
    double hi = lm_lua_opt_num(L, next, fname, "high", 1);
    return lm_lua_push_array(L, lm_random_uniform(n, shape, lo, hi, dt, k, o.device));
}

static int c_rand(lua_State *L) { return random_tensor(L, false); }
static int c_randn(lua_State *L) { return random_tensor(L, true); }

static int c_seed(lua_State *L)
{
    lm_random_seed((uint64_t)luaL_checkinteger(L, 1));
    return 0;
}

/* ---- devices and memory ---- */

static int m_devices(lua_State *L)
{
    int n = lm_device_count();
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lm_device *d = lm_device_at(i);
        lm_memstats m = lm_device_memory(d);
        lua_createtable(L, 0, 6);
        lua_pushstring(L, d->name);
        lua_setfield(L, -2, "name");
        lua_pushstring(L, d->spec);
        lua_setfield(L, -2, "spec");
        lua_pushstring(L, d->backend ? d->backend->name : "?");
        lua_setfield(L, -2, "backend");
        lua_pushstring(L, d->kind);
        lua_setfield(L, -2, "kind");
        lua_pushinteger(L, (lua_Integer)m.device_total);
        lua_setfield(L, -2, "memory");
        lua_pushstring(L, d->info);
        lua_setfield(L, -2, "info");
        lua_pushboolean(L, d == lm_device_default());
        lua_setfield(L, -2, "default");
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int m_device(lua_State *L)
{
    if (!lua_isnoneornil(L, 1)) lm_device_set_default(lm_lua_check_device(L, 1));
    lm_device *d = lm_device_default();
    lua_pushstring(L, d ? d->spec : "?");
    return 1;
}

static void push_memstats(lua_State *L, lm_device *d)
{
    lm_memstats m = lm_device_memory(d);
    lua_createtable(L, 0, 7);
#define F(name, v) (lua_pushinteger(L, (lua_Integer)(v)), lua_setfield(L, -2, name))
    F("active", m.active);
    F("peak", m.peak);
    F("cache", m.cached);
    F("limit", m.limit);
    F("cache_limit", m.cache_limit);
    F("total", m.device_total);
    F("allocs", m.allocs);
#undef F
    lua_pushstring(L, d->spec);
    lua_setfield(L, -2, "device");
}

/* lm.memory([device]) */
static int m_memory(lua_State *L)
{
    bool all = lua_isnoneornil(L, 1);
    lm_device *d = all ? lm_device_default() : lm_lua_check_device(L, 1);
    push_memstats(L, d);
    if (all) {
        for (int i = 0; i < lm_device_count(); i++) {
            lm_device *e = lm_device_at(i);
            push_memstats(L, e);
            lua_setfield(L, -2, e->spec);
        }
    }
    return 1;
}

static lm_device *opt_device(lua_State *L, int arg)
{
    return lua_isnoneornil(L, arg) ? lm_device_default() : lm_lua_check_device(L, arg);
}

static int m_set_memory_limit(lua_State *L)
{
    lm_device_set_memory_limit(opt_device(L, 2), (size_t)luaL_checkinteger(L, 1));
    return 0;
}

static int m_set_cache_limit(lua_State *L)
{
    lm_device_set_cache_limit(opt_device(L, 2), (size_t)luaL_checkinteger(L, 1));
    return 0;
}

static int m_clear_cache(lua_State *L)
{
    lm_device_clear_cache(opt_device(L, 1));
    return 0;
}

static int m_reset_peak(lua_State *L)
{
    lm_device_reset_peak(opt_device(L, 1));
    return 0;
}

static int m_sweep(lua_State *L)
{
    lua_pushinteger(L, lm_sweep());
    return 1;
}

static int m_live(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)lm_array_live_count());
    return 1;
}

static int m_is_tensor(lua_State *L)
{
    lua_pushboolean(L, lm_lua_testtensor(L, 1) != NULL);
    return 1;
}

static int m_set_printoptions(lua_State *L)
{
    static const char *const KNOWN[] = {"precision", "threshold", "edgeitems", "linewidth", NULL};
    lm_print_opts *p = &lm_lua_print_opts;
    luaL_checktype(L, 1, LUA_TTABLE);
    lm_lua_check_opts(L, 1, "lm.set_printoptions", KNOWN);
    p->precision = (int)lm_lua_opt_int(L, 1, "lm.set_printoptions", "precision", p->precision);
    p->threshold = (int)lm_lua_opt_int(L, 1, "lm.set_printoptions", "threshold", p->threshold);
    p->edgeitems = (int)lm_lua_opt_int(L, 1, "lm.set_printoptions", "edgeitems", p->edgeitems);
    p->linewidth = (int)lm_lua_opt_int(L, 1, "lm.set_printoptions", "linewidth", p->linewidth);
    if (p->precision < 0 || p->precision > 17) p->precision = 4;
    if (p->edgeitems < 1) p->edgeitems = 1;
    return 0;
}

/* ---- time ---- */

static int m_clock(lua_State *L)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    lua_pushnumber(L, (lua_Number)t.tv_sec + (lua_Number)t.tv_nsec * 1e-9);
    return 1;
}

/* lm.sync([device]): every device when none is named */
static int m_sync(lua_State *L)
{
    if (!lua_isnoneornil(L, 1)) {
        if (lm_device_sync(lm_lua_check_device(L, 1)) != LM_OK) return lm_lua_error(L);
        return 0;
    }
    for (int i = 0; i < lm_device_count(); i++)
        if (lm_device_sync(lm_device_at(i)) != LM_OK) return lm_lua_error(L);
    return 0;
}

const lm_lua_func lm_lua_create_funcs[] = {
    {"tensor", c_tensor, "lm.tensor(data, [{dtype=, device=}]) -> tensor\nA tensor from a number, a "
     "boolean, a nested table ({{1, 2}, {3, 4}}) or a list of tensors (stacked).  Numbers become f32 "
     "and booleans bool unless dtype says otherwise.  The options may also sit in the data table: "
     "lm.tensor{1, 2, dtype = \"i64\"}."},
    {"zeros", c_zeros, "lm.zeros(shape | n1, n2, ..., [{dtype=, device=} | dtype]) -> tensor\nA "
     "tensor of zeros; shape is a table {2, 3} (or the numbers 2, 3).  Every creation function "
     "also takes its options inside the shape table, as torch takes dtype= beside the size: "
     "lm.zeros{2, 3, dtype = \"f16\"}, lm.randn{2, 3, seed = 1}; an unknown name is an error.  "
     "A table with options only ({seed = 1}) is the shape {}: a 0-d tensor."},
    {"ones", c_ones, "lm.ones(shape | n1, n2, ..., [opts]) -> tensor\nA tensor of ones."},
    {"full", c_full, "lm.full(shape, value, [opts]) -> tensor\nA tensor filled with value."},
    {"arange", c_arange, "lm.arange([start=0,] stop, [step=1], [opts]) -> tensor\nstart, start+step, "
     "... up to but excluding stop (numpy.arange).  i64 when every argument is an integer, else f32."},
    {"linspace", c_linspace, "lm.linspace(start, stop, [n=50], [opts]) -> tensor\nn evenly spaced "
     "points from start to stop inclusive."},
    {"eye", c_eye, "lm.eye(n, [m=n], [k=0], [opts]) -> tensor\nAn n x m matrix with ones on diagonal k."},
    {"rand", c_rand, "lm.rand(shape | n1, n2, ..., [{seed=, low=0, high=1, dtype=, device=}]) "
     "-> tensor\nUniform random numbers in [low, high).  The same seed gives the same tensor on every device."},
    {"randn", c_randn, "lm.randn(shape | n1, n2, ..., [{seed=, mean=0, std=1, dtype=, device=}]) "
     "-> tensor\nNormal random numbers."},
    {"seed", c_seed, "lm.seed(n)\nResets the generator that rand/randn use when no seed is given."},
    {"devices", m_devices, "lm.devices() -> {{name=, spec=, backend=, kind=, memory=, info=, default=}, ...}\n"
     "The devices Lumen can run on."},
    {"device", m_device, "lm.device([spec]) -> string\nThe default device (\"cpu\", \"vulkan:0\"); with "
     "spec, sets it first.  LUMEN_DEVICE sets it at start."},
    {"memory", m_memory, "lm.memory([device]) -> {active=, peak=, cache=, limit=, cache_limit=, "
     "total=, allocs=, device=}\nMemory in bytes of the default device (or the given one); without an "
     "argument the table also holds every device's table under its spec (m.cpu)."},
    {"set_memory_limit", m_set_memory_limit, "lm.set_memory_limit(bytes, [device])\nAllocations past "
     "bytes fail with an error instead of exhausting the machine (0 = no limit)."},
    {"set_cache_limit", m_set_cache_limit, "lm.set_cache_limit(bytes, [device])\nBounds the cache of "
     "freed buffers kept for reuse."},
    {"clear_cache", m_clear_cache, "lm.clear_cache([device])\nReturns cached buffers to the system."},
    {"reset_peak", m_reset_peak, "lm.reset_peak([device])\nStarts measuring peak memory again."},
    {"sweep", m_sweep, "lm.sweep() -> integer\nFrees every tensor not marked with t:keep(); returns how "
     "many.  For loops that cannot wait for Lua's collector."},
    {"live", m_live, "lm.live() -> integer\nThe number of live core arrays (a leak check)."},
    {"is_tensor", m_is_tensor, "lm.is_tensor(x) -> boolean\nTrue when x is a tensor."},
    {"clock", m_clock, "lm.clock() -> seconds\nA monotonic wall clock (a float; only differences "
     "mean something).  os.clock() is the process's CPU time summed over every thread instead.  "
     "Work is lazy: evaluate what you time, and lm.sync() before reading the clock again."},
    {"sync", m_sync, "lm.sync([device])\nWaits until the device (every device when none is named) "
     "has finished the work handed to it, as the REPL's :time does before reading the clock.  "
     "Evaluation on the CPU is already synchronous."},
    {"set_printoptions", m_set_printoptions, "lm.set_printoptions{precision=4, threshold=1000, "
     "edgeitems=3, linewidth=80}\nHow tensors print: fraction digits, the element count past which "
     "printing summarises, the items kept at each end, the line width."},
    {NULL, NULL, NULL},
};
