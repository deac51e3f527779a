/* l_indices.c - index tensors crossing from Lua to the core.
 *
 * Lua indices count from 1 (negative from the end); the core's count from
 * 0.  Every op that takes an index tensor (t[idx], index_select,
 * take_along_axis, scatter, scatter_add, one_hot, embedding) reads it here.
 *
 * The values are checked on the host before the op is built, as PyTorch
 * checks them eagerly: a lazy index is evaluated first.  Checking lazily
 * would need a sentinel value carried through the index arithmetic, and
 * that broke twice: a u8 index's arithmetic ran in u8, where the sentinel
 * for 0 became 0 (one_hot of a lazy 0 silently gave class 1), and the
 * errors at evaluation named 0-based values and axes.  Only a compile
 * trace's placeholder, which has no values yet, stays lazy: its 0 becomes
 * INT64_MIN, which every index kernel rejects when the compiled function
 * runs (with the core's 0-based message). */
#include <stdio.h>
#include <stdlib.h>
#include "l_internal.h"

/* Raises the error for Lua index v at flat position p (the buffer is
 * freed and t released first: luaL_error does not return). */
static void bad_index(lua_State *L, lm_array *t, int64_t *buf, int64_t p, int64_t v, int64_t n,
                      const char *fname, const char *what)
{
    char msg[240];
    if (v == 0)
        snprintf(msg, sizeof msg, "%s: index 0 at position %lld of %s (indices count from 1; -1 "
                 "is the last)", fname, (long long)p + 1, what);
    else
        snprintf(msg, sizeof msg, "%s: index %lld at position %lld of %s is out of range 1..%lld "
                 "(or -%lld..-1)", fname, (long long)v, (long long)p + 1, what, (long long)n,
                 (long long)n);
    free(buf);
    lm_array_release(t);
    luaL_error(L, "%s", msg);
}

/* Reads the evaluated t back (from any device, through any view) and
 * checks each value against 1..n / -n..-1 (only against 0 when n is 0). */
static void check_on_host(lua_State *L, lm_array *t, int64_t n, const char *fname, const char *what)
{
    int64_t *buf = malloc(sizeof *buf * (size_t)(t->size ? t->size : 1));
    if (!buf || lm_array_read(t, buf, LM_I64) != LM_OK) {
        free(buf);
        lm_array_release(t);
        if (buf) lm_lua_error(L);
        luaL_error(L, "%s: out of memory reading %s", fname, what);
    }
    for (int64_t p = 0; p < t->size; p++)
        if (buf[p] == 0 || (n > 0 && (buf[p] > n || buf[p] < -n)))
            bad_index(L, t, buf, p, buf[p], n, fname, what);
    free(buf);
}

/* where(c, a, b) taking over all three references (NULL-safe). */
static lm_array *where_own(lm_array *c, lm_array *a, lm_array *b)
{
    lm_array *r = c && a && b ? lm_where(c, a, b) : NULL;
    lm_array_release(c);
    lm_array_release(a);
    lm_array_release(b);
    return r;
}

lm_array *lm_lua_index_arg(lua_State *L, int arg, const char *fname, const char *what, int64_t n,
                           bool wrap)
{
    lm_array *t = lm_lua_to_array(L, arg, LM_I64);
    if (!t) lm_lua_error(L);
    if (!lm_dtype_is_int(t->dtype)) {
        const char *name = lm_dtype_name(t->dtype);
        lm_array_release(t);
        luaL_error(L, "%s: %s must have an integer dtype, got %s", fname, what, name);
    }
    bool traced = t->flags & LM_ARRAY_TRACER;
    if (!traced) {
        if (lm_array_eval(t) != LM_OK) {
            lm_array_release(t);
            lm_lua_error(L);
        }
        check_on_host(L, t, n, fname, what);
    }
    /* all arithmetic in i64: in a narrower dtype i - 1 wraps and the
     * sentinel below would not fit */
    lm_array *t64 = lm_cast(t, LM_I64);
    lm_array_release(t);
    if (!t64) lm_lua_error(L);
    /* i > 0 -> i - 1; i < 0 stays (the core counts it from the end) or
     * becomes i + n where the op does not wrap */
    lm_array *r = lm_binary_scalar(LM_OP_SUB, t64, 1, false);
    lm_array *neg = wrap ? lm_binary_scalar(LM_OP_ADD, t64, (double)n, false) : lm_array_retain(t64);
    if (traced) {
        lm_array *zero = lm_binary_scalar(LM_OP_EQ, t64, 0, false);
        neg = where_own(zero, lm_scalar(-9223372036854775808.0, LM_I64, t64->device), neg);
    }
    r = where_own(lm_binary_scalar(LM_OP_GT, t64, 0, false), r, neg);
    lm_array_release(t64);
    if (!r) lm_lua_error(L);
    return r;
}

lm_array *lm_lua_index_tensor(lua_State *L, int idx, const char *fname, int axis, int64_t n)
{
    char what[64];
    snprintf(what, sizeof what, "the index for axis %d", axis + 1);
    return lm_lua_index_arg(L, idx, fname, what, n, false);
}

lm_array *lm_lua_one_based(lm_array *idx)
{
    lm_array *r = lm_binary_scalar(LM_OP_ADD, idx, 1, false);
    lm_array_release(idx);
    return r;
}
