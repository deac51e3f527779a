/* lumen_lua.h - what the Lua binding files share (lua/ only).
 *
 * The module `lumen` is built from several files: the tensor type and core
 * ops (lua/l_*.c owned by the Lua API), files, images and comparison
 * (lua/l_io.c).  Each adds functions with docstrings through lm_lua_register
 * so help() and docs/ know them. */
#ifndef LM_LUMEN_LUA_H
#define LM_LUMEN_LUA_H

#include <lua.h>
#include <lauxlib.h>
#include "core/lumen.h"

#define LM_LUA_TENSOR "lumen.tensor"   /* metatable name of tensor userdata */

typedef struct lm_lua_func {
    const char *name;      /* field name in the target table */
    lua_CFunction fn;
    const char *doc;       /* "lm.load(path) -> table\nLoads ..." */
} lm_lua_func;

/* Sets each function as a field of the table at the top of the stack and
 * records its docstring under `prefix .. name` (prefix like "lm." or
 * "lm.image.").  A call with more arguments than the docstring's signature
 * lists ("lm.save(path, tensors, [opts])": 3) raises "lm.save: too many
 * arguments"; a signature with "..." leaves the count to the function. */
void lm_lua_register(lua_State *L, const char *prefix, const lm_lua_func *funcs);

/* Pushes a tensor userdata taking over the caller's reference to a.  If a is
 * NULL, raises a Lua error with lm_error_message(). */
int lm_lua_push_array(lua_State *L, lm_array *a);
/* The tensor at idx (borrowed; raises a Lua error if not a live tensor). */
lm_array *lm_lua_check_array(lua_State *L, int idx);
/* The tensor at idx, or a Lua number / nested table turned into a new array
 * (dtype dt; LM_DTYPE_COUNT = default).  Returns a NEW reference. */
lm_array *lm_lua_to_array(lua_State *L, int idx, lm_dtype dt);
/* Raises a Lua error carrying lm_error_message(). */
int lm_lua_error(lua_State *L);

/* Called by luaopen_lumen with the module table on top of the stack:
 * adds load/save/compare/allclose/compare_file and the `image` subtable. */
void lm_lua_open_io(lua_State *L);

/* Sets the hook L has between calls: the location hook while LUMEN_DUMP
 * records (l_diff.c: each node is named after the Lua line that built it),
 * else none.  A host that clears hooks around a protected call (a Ctrl-C
 * hook left set) calls this instead of lua_sethook(L, NULL, 0, 0). */
void lm_lua_hook_rest(lua_State *L);

#endif
