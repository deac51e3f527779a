/* l_index.c - 1-based indexing: t[i], t[{ {2, 4}, {}, 3 }], t:slice(...),
 * and assignment t[...] = v.
 *
 * Lua ranges are inclusive and 1-based with negative values from the end;
 * here they become the core's numpy-style [start, stop) with clipping.  We
 * clip ourselves so the core never reinterprets a negative bound, except
 * for the "before the first element" stop of a reversed range, which numpy
 * spells -(n+1). */
#include <string.h>
#include "l_internal.h"

static int64_t to0(lua_Integer i, int64_t n) { return i > 0 ? i - 1 : n + i; }

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* New view of a sliced on axis by an inclusive Lua range. */
static lm_array *slice_range(lua_State *L, lm_array *a, int axis, bool has_s, lua_Integer s,
                             bool has_e, lua_Integer e, lua_Integer step)
{
    int64_t n = a->shape[axis], start, stop;
    if (step == 0) luaL_error(L, "slice: step must not be 0");
    if (step > 0) {
        start = has_s ? clamp64(to0(s, n), 0, n) : 0;
        stop = has_e ? clamp64(to0(e, n) + 1, 0, n) : n;
    } else {
        start = has_s ? clamp64(to0(s, n), -1, n - 1) : n - 1;
        stop = has_e ? clamp64(to0(e, n) - 1, -1, n - 1) : -1;
        if (start < 0) start = stop = 0;          /* empty */
        else if (stop < 0) stop = -n - 1;         /* through element 0 */
    }
    return lm_slice(a, axis, start, stop, step);
}

static int64_t check_index(lua_State *L, lua_Integer i, int64_t n, int axis)
{
    if (i == 0) luaL_error(L, "index 0 on axis %d: indices count from 1 (-1 is the last)", axis + 1);
    int64_t k = to0(i, n);
    if (k < 0 || k >= n)
        luaL_error(L, "index %d out of range for axis %d of size %d", (int)i, axis + 1, (int)n);
    return k;
}

/* a[i] on one axis: a view with that axis removed. */
static lm_array *select_index(lua_State *L, lm_array *a, int axis, lua_Integer i)
{
    int64_t k = check_index(L, i, a->shape[axis], axis);
    lm_array *s = lm_slice(a, axis, k, k + 1, 1);
    lm_array *r = lm_squeeze(s, axis);
    lm_array_release(s);
    return r;
}

static bool opt_int(lua_State *L, int t, int i, lua_Integer *out)
{
    int ty = lua_rawgeti(L, t, i);
    bool has = ty != LUA_TNIL;
    if (has) {
        int ok;
        *out = lua_tointegerx(L, -1, &ok);
        if (!ok) luaL_error(L, "slice: range entries must be integers, got %s", lua_typename(L, ty));
    }
    lua_pop(L, 1);
    return has;
}

/* Applies the key table at idx to a; returns a new reference (raises).
 * Each intermediate view lives on the Lua stack so an error cannot leak it. */
static lm_array *apply_key(lua_State *L, lm_array *a, int idx)
{
    int axis = 0;
    lua_Integer nkeys = luaL_len(L, idx);
    if (nkeys > a->ndim)
        luaL_error(L, "index: %d entries for a %d-d tensor", (int)nkeys, a->ndim);
    lm_lua_push_array(L, lm_array_retain(a));
    for (lua_Integer k = 1; k <= nkeys; k++) {
        lm_array *cur = lm_lua_check_array(L, -1), *next;
        int ty = lua_geti(L, idx, k);
        if (ty == LUA_TNUMBER) {
            int ok;
            lua_Integer i = lua_tointegerx(L, -1, &ok);
            if (!ok) luaL_error(L, "index: entry %d is not an integer", (int)k);
            next = select_index(L, cur, axis, i);
        } else if (ty == LUA_TTABLE) {
            lua_Integer s = 0, e = 0, st = 1;
            bool hs = opt_int(L, -1, 1, &s), he = opt_int(L, -1, 2, &e);
            opt_int(L, -1, 3, &st);
            next = slice_range(L, cur, axis, hs, s, he, e, st);
            axis++;
        } else if (lm_lua_testtensor(L, -1)) {
            lm_array *ix = lm_lua_index_tensor(L, -1, "index", axis, cur->shape[axis]);
            next = lm_index_select(cur, axis, ix);
            lm_array_release(ix);
            axis++;
        } else {
            return luaL_error(L, "index: entry %d must be an integer, a range table or an index "
                                 "tensor, got %s", (int)k, lua_typename(L, ty)), NULL;
        }
        lua_pop(L, 2);
        lm_lua_push_array(L, next);
    }
    lm_array *r = lm_array_retain(lm_lua_check_array(L, -1));
    lua_pop(L, 1);
    return r;
}

static lm_array *view_for(lua_State *L, lm_array *a, int key)
{
    if (lua_type(L, key) == LUA_TNUMBER) {
        if (a->ndim == 0) luaL_error(L, "index: a 0-d tensor cannot be indexed (use t:item())");
        int ok;
        lua_Integer i = lua_tointegerx(L, key, &ok);
        if (!ok) luaL_error(L, "index: %s is not an integer", lua_tostring(L, key));
        lm_array *r = select_index(L, a, 0, i);
        if (!r) lm_lua_error(L);
        return r;
    }
    if (lm_lua_testtensor(L, key)) {
        lm_array *ix = lm_lua_index_tensor(L, key, "index", 0, a->ndim ? a->shape[0] : 0);
        lm_array *r = lm_index_select(a, 0, ix);
        lm_array_release(ix);
        if (!r) lm_lua_error(L);
        return r;
    }
    return apply_key(L, a, key);
}

int lm_lua_index_get(lua_State *L, lm_array *a, int key)
{
    return lm_lua_push_array(L, view_for(L, a, key));
}

int lm_lua_index_set(lua_State *L, lm_array *a, int key, int val)
{
    if (lm_array_eval(a) != LM_OK) return lm_lua_error(L);
    lm_array *v = view_for(L, a, key);
    lm_array *src = lm_lua_to_array(L, val, LM_DTYPE_COUNT);
    lm_status st = src ? lm_array_assign(v, src) : lm_error_status();
    lm_array_release(v);
    lm_array_release(src);
    if (st != LM_OK) return lm_lua_error(L);
    return 0;
}

/* t:slice(axis, start, stop, step) */
static int t_slice(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    int axis = lm_lua_axis(L, 2, a->ndim, "slice");
    bool hs = !lua_isnoneornil(L, 3), he = !lua_isnoneornil(L, 4);
    lua_Integer s = hs ? luaL_checkinteger(L, 3) : 0;
    lua_Integer e = he ? luaL_checkinteger(L, 4) : 0;
    lua_Integer st = luaL_optinteger(L, 5, 1);
    return lm_lua_push_array(L, slice_range(L, a, axis, hs, s, he, e, st));
}

/* t:select(axis, i) */
static int t_select(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    int axis = lm_lua_axis(L, 2, a->ndim, "select");
    return lm_lua_push_array(L, select_index(L, a, axis, luaL_checkinteger(L, 3)));
}

/* t:index_select(axis, idx) */
static int t_index_select(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    int axis = lm_lua_axis(L, 2, a->ndim, "index_select");
    lm_array *ix = lm_lua_index_tensor(L, 3, "index_select", axis, a->shape[axis]);
    lm_array *r = lm_index_select(a, axis, ix);
    lm_array_release(ix);
    return lm_lua_push_array(L, r);
}

/* t:take_along_axis(idx, axis) */
static int t_take_along_axis(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    int axis = lm_lua_axis(L, 3, a->ndim, "take_along_axis");
    lm_array *ix = lm_lua_index_tensor(L, 2, "take_along_axis", axis, a->shape[axis]);
    lm_array *r = lm_take_along_axis(a, ix, axis);
    lm_array_release(ix);
    return lm_lua_push_array(L, r);
}

/* t:set(key, value): t[key] = value as a method (returns t) */
static int t_set(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1);
    if (lua_isnoneornil(L, 2)) {
        lua_settop(L, 3);
        lua_newtable(L);
        lua_replace(L, 2);
    }
    lm_lua_index_set(L, a, 2, 3);
    lua_settop(L, 1);
    return 1;
}

const lm_lua_func lm_lua_index_methods[] = {
    {"slice", t_slice, "t:slice(axis, start, stop[, step]) -> tensor\nA view of t on one axis from start "
     "to stop inclusive (1-based, negative from the end, out-of-range bounds clipped); step may be "
     "negative.  Same as t[{..., {start, stop, step}}]."},
    {"select", t_select, "t:select(axis, i) -> tensor\nA view of element i along axis, with that axis "
     "removed (t[i] does this on axis 1)."},
    {"index_select", t_index_select, "t:index_select(axis, idx) -> tensor\nThe entries of t at the "
     "1-based integer indices idx (a tensor or table; negative from the end) along axis."},
    {"take_along_axis", t_take_along_axis, "t:take_along_axis(idx, axis) -> tensor\nnumpy's "
     "take_along_axis with 1-based indices: idx has t's ndim and broadcasts on the other axes."},
    {"set", t_set, "t:set(key, value) -> t\nWrites value (a number or tensor, broadcast and cast) into "
     "the part of t that t[key] selects (key nil = all of t).  t must be evaluated (it is evaluated "
     "first); the write is in place.  t[key] = value does the same."},
    {NULL, NULL, NULL},
};
