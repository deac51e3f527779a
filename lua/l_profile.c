/* l_profile.c - lm.profile: where a function's evaluation spends its time,
 * kernel by kernel (core/profile.h does the counting).  The profile is
 * closed on every way out of fn, so an error leaves no session open. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "l_internal.h"
#include "core/profile.h"

static const char *const KNOWN[] = {"print", "rows", "by", NULL};

static void set_num(lua_State *L, const char *k, double v)
{
    lua_pushnumber(L, v);
    lua_setfield(L, -2, k);
}

static void set_str(lua_State *L, const char *k, const char *v)
{
    lua_pushstring(L, v);
    lua_setfield(L, -2, k);
}

/* {op=, kernel=, ..., [i] = rows} with the report as .text */
static void push_profile(lua_State *L, const lm_profile *p, const char *text)
{
    lua_createtable(L, p->nrows, 4);
    for (int i = 0; i < p->nrows; i++) {
        const lm_profile_row *r = &p->rows[i];
        lua_createtable(L, 0, 14);
        set_str(L, "op", r->op);
        set_str(L, "kernel", r->kernel);
        set_str(L, "shape", r->shape);
        set_str(L, "dtype", r->dtype);
        set_str(L, "device", r->device);
        set_str(L, "timer", r->timer);
        lua_pushinteger(L, r->count);
        lua_setfield(L, -2, "count");
        lua_pushinteger(L, r->bytes);
        lua_setfield(L, -2, "bytes");
        set_num(L, "total_ms", r->total_ms);
        set_num(L, "mean_ms", r->count ? r->total_ms / (double)r->count : 0);
        set_num(L, "min_ms", r->min_ms);
        set_num(L, "max_ms", r->max_ms);
        set_num(L, "host_ms", r->host_ms);
        set_num(L, "percent", p->total_ms > 0 ? 100 * r->total_ms / p->total_ms : 0);
        lua_rawseti(L, -2, i + 1);
    }
    set_num(L, "total_ms", p->total_ms);
    lua_pushinteger(L, p->evals);
    lua_setfield(L, -2, "evals");
    set_str(L, "notes", p->notes);
    set_str(L, "text", text ? text : "");
}

/* Evaluates the tensors among the values from idx to the top; false with
 * the message pushed when that fails. */
static bool eval_results(lua_State *L, int idx)
{
    int top = lua_gettop(L), n = 0;
    lm_array **v = lua_newuserdatauv(L, sizeof *v * (size_t)(top - idx + 1 > 0 ? top - idx + 1 : 1), 0);
    for (int i = idx; i <= top; i++) {
        lm_lua_tensor *t = lm_lua_testtensor(L, i);
        if (t && t->a) v[n++] = t->a;
    }
    lm_status st = n ? lm_eval(v, n) : LM_OK;
    lua_pop(L, 1);
    if (st == LM_OK) return true;
    lua_pushfstring(L, "lm.profile: %s", lm_error_message());
    return false;
}

/* the option by = "shape" | "kernel" | "op" of the table at 1 */
static lm_profile_by check_by(lua_State *L)
{
    static const char *const names[] = {"shape", "kernel", "op"};
    lm_profile_by by = LM_PROFILE_BY_SHAPE;
    if (lua_getfield(L, 1, "by") != LUA_TNIL) {
        const char *s = lua_tostring(L, -1);
        int k = 0;
        while (k < 3 && !(lua_type(L, -1) == LUA_TSTRING && !strcmp(s, names[k]))) k++;
        if (k == 3) luaL_error(L, "lm.profile: option 'by' must be \"shape\", \"kernel\" or \"op\"");
        by = (lm_profile_by)k;
    }
    lua_pop(L, 1);
    return by;
}

/* lm.profile([opts,] fn, ...) -> fn's results..., profile */
static int m_profile(lua_State *L)
{
    int fn = 1;
    bool print = true;
    lua_Integer rows = 0;
    lm_profile_by by = LM_PROFILE_BY_SHAPE;
    if (lua_type(L, 1) == LUA_TTABLE) {
        lm_lua_check_opts(L, 1, "lm.profile", KNOWN);
        print = lm_lua_opt_bool(L, 1, "lm.profile", "print", true);
        rows = lm_lua_opt_int(L, 1, "lm.profile", "rows", 0);
        by = check_by(L);
        fn = 2;
    }
    if (lua_type(L, fn) != LUA_TFUNCTION && !luaL_getmetafield(L, fn, "__call"))
        return luaL_error(L, "lm.profile: argument %d must be a function, got %s", fn, luaL_typename(L, fn));
    if (lua_type(L, fn) != LUA_TFUNCTION) lua_pop(L, 1);
    if (lm_profile_begin() != LM_OK) return lm_lua_error(L);
    int status = lua_pcall(L, lua_gettop(L) - fn, LUA_MULTRET, 0);
    bool ok = status == LUA_OK && eval_results(L, fn);
    lm_profile *p = lm_profile_end();
    if (!ok) {
        lm_profile_free(p);
        return lua_error(L);   /* fn's error (or the evaluation's), as fn raised it */
    }
    if (!p) return lm_lua_error(L);
    lm_profile_group(p, by);
    char *text = lm_profile_format(p, rows > INT_MAX ? INT_MAX : (int)rows);
    if (print && text) {
        fputs(text, stdout);
        fflush(stdout);
    }
    push_profile(L, p, text);
    free(text);
    lm_profile_free(p);
    return lua_gettop(L) - fn + 1;
}

static const lm_lua_func funcs[] = {
    {"profile", m_profile,
     "lm.profile([{print=true, rows=0, by=\"shape\"},] fn, ...) -> fn's results..., profile\nRuns fn(...) with profiling on, "
     "evaluates the tensors it returns, prints a table of every kernel that ran, and of the host work "
     "around them (transfers, allocations, pipeline creation), with op, "
     "kernel, device, dtype, count, total/mean/min/max ms and shapes, sorted by total time, and returns "
     "fn's results followed by the profile: a list of rows {op=, kernel=, shape=, dtype=, device=, "
     "timer=, count=, bytes=, total_ms=, mean_ms=, min_ms=, max_ms=, host_ms=, percent=} with fields "
     "total_ms, evals, notes and text (the table as printed).  Times are GPU time from timestamp queries on "
     "Vulkan (timer 'gpu'), wall time on the CPU and for transfers (timer 'host'); host_ms is the time "
     "the host spent in the call.  Options {print=true, rows=0}: print=false only returns the profile; rows=N prints the N rows that took longest and one line for the rest (0: all); by=\"kernel\" merges the rows that differ only in shapes, by=\"op\" also those that differ in kernels (one row per op, dtype and device).  "
     "Profiles nest (an inner one's work is in the outer one too).  LUMEN_PROFILE=1 in the environment "
     "prints such a table on stderr after each evaluation, LUMEN_PROFILE=total once at exit."},
    {NULL, NULL, NULL},
};

void lm_lua_open_profile(lua_State *L)
{
    lm_lua_register(L, "lm.", funcs);
}
