/* l_nn.c - the neural-network ops (core/ops_nn.h) as lm.* functions and
 * tensor methods.
 *
 * Builders arrive from the NN room; binding one is a single line in
 * lm_lua_nn_funcs below, using an adapter for its argument pattern.  Until
 * core/ops_nn.h exists this file binds nothing. */
#include "l_internal.h"

#if defined(__has_include)
#if __has_include("core/ops_nn.h")
#define LM_HAVE_OPS_NN 1
#include "core/ops_nn.h"
#endif
#endif

const lm_lua_func lm_lua_nn_funcs[] = {
    {NULL, NULL, NULL},
};
