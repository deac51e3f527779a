/* l_module.c - luaopen_lumen: the module table `lumen` (the REPL calls it
 * lm too).  Starts the core once, builds the tensor metatable, registers
 * every function with its docstring and lets the files room add its part. */
#include "l_internal.h"

#define LUMEN_VERSION "0.1.0"

int luaopen_lumen(lua_State *L);
void lm_lua_open_diffusion(lua_State *L);   /* l_diffusion.c */
void lm_lua_open_diff(lua_State *L);        /* l_diff.c */
void lm_lua_open_show(lua_State *L);        /* l_show.c */

int luaopen_lumen(lua_State *L)
{
    if (lm_init() != LM_OK) return lm_lua_error(L);
    lua_newtable(L);
    lm_lua_open_doc(L);
    lm_lua_open_tensor(L);
    /* every op method is also lm.name(t, ...); module-only entries after
     * them win where a name is both (lm.eval takes many tensors) */
    lm_lua_register(L, "lm.", lm_lua_op_methods);
    lm_lua_register(L, "lm.", lm_lua_op_module);
    lm_lua_register(L, "lm.", lm_lua_create_funcs);
    lm_lua_register_nn(L, "lm.", lm_lua_nn_methods);
    lm_lua_register_nn(L, "lm.", lm_lua_nnseq_methods);
    lm_lua_register_nn(L, "lm.", lm_lua_nn_funcs);
    lm_lua_register_nn(L, "lm.", lm_lua_nnseq_funcs);
    lm_lua_push_methods(L);
    lm_lua_register_nn(L, "t:", lm_lua_nn_methods);
    lm_lua_register_nn(L, "t:", lm_lua_nnseq_methods);
    lua_pop(L, 1);
    lm_lua_open_torch(L);
    lua_pushliteral(L, LUMEN_VERSION);
    lua_setfield(L, -2, "version");
    lm_lua_install_oom_hook(L);
    lm_lua_open_io(L);
    lm_lua_open_xyz(L);
    lm_lua_open_compile(L);
    lm_lua_open_grad(L);
    lm_lua_open_batch(L);
    lm_lua_open_models(L);
    lm_lua_open_diffusion(L);
    lm_lua_open_profile(L);
    lm_lua_open_diff(L);
    lm_lua_open_show(L);
    return 1;
}
