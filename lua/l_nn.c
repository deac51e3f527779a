/* l_nn.c - the neural-network ops (core/ops_nn.h) as lm.* functions and
 * tensor methods (lm.softmax(x, -1) is x:softmax(-1)).
 *
 * Binding a builder is one line in NN_OPS below: its Lua name, the adapter
 * for its argument pattern (the adapters read Lua arguments, convert
 * 1-based axes, and call the builder), the builder and the docstring.  The
 * adapter's function-pointer type is checked against the builder's
 * prototype by the compiler.  Until core/ops_nn.h exists nothing is bound. */
#include "l_internal.h"

#if defined(__has_include)
#if __has_include("core/ops_nn.h")
#define LM_HAVE_OPS_NN 1
#include "core/ops_nn.h"
#endif
#endif

#define UNUSED __attribute__((unused))

/* x -> y */
UNUSED static int nn_unary(lua_State *L, lm_array *(*fn)(lm_array *))
{
    return lm_lua_push_array(L, fn(lm_lua_check_array(L, 1)));
}

/* (x, [axis=-1]) -> y */
UNUSED static int nn_axis(lua_State *L, lm_array *(*fn)(lm_array *, int))
{
    lm_array *x = lm_lua_check_array(L, 1);
    int axis = lua_isnoneornil(L, 2) ? x->ndim - 1 : lm_lua_axis(L, 2, x->ndim, "nn");
    return lm_lua_push_array(L, fn(x, axis));
}

/* (x, y) -> z, y a tensor or number */
UNUSED static int nn_binary(lua_State *L, lm_array *(*fn)(lm_array *, lm_array *))
{
    lm_array *x = lm_lua_check_array(L, 1);
    lm_array *y = lm_lua_to_array(L, 2, LM_DTYPE_COUNT);
    lm_array *r = y ? fn(x, y) : NULL;
    lm_array_release(y);
    return lm_lua_push_array(L, r);
}

/* (x, [w], [b]) -> y with optional tensors (nil passes NULL) */
UNUSED static int nn_xwb(lua_State *L, lm_array *(*fn)(lm_array *, lm_array *, lm_array *))
{
    lm_array *x = lm_lua_check_array(L, 1);
    lm_array *w = lua_isnoneornil(L, 2) ? NULL : lm_lua_check_array(L, 2);
    lm_array *b = lua_isnoneornil(L, 3) ? NULL : lm_lua_check_array(L, 3);
    return lm_lua_push_array(L, fn(x, w, b));
}

/* X(lua_name, adapter, builder, docstring) */
#define NN_OPS(X)

#define NN_FN(name, adapter, builder, doc) \
    static int nn_##name(lua_State *L) { return adapter(L, builder); }
#define NN_ENTRY(name, adapter, builder, doc) {#name, nn_##name, doc},

NN_OPS(NN_FN)

const lm_lua_func lm_lua_nn_funcs[] = {
    NN_OPS(NN_ENTRY)
    {NULL, NULL, NULL},
};
