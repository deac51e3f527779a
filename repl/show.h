/* show.h - the REPL's helpers written in Lua (repl/show.c). */
#ifndef LM_REPL_SHOW_H
#define LM_REPL_SHOW_H

#include <stdbool.h>
#include <lua.h>

/* Loads the Lua helpers of the REPL (value printer, :time, :mem, ?name).
 * Returns false with an error on the stack on failure. */
bool lm_repl_show_init(lua_State *L);
/* Pushes the helper called name: "show" prints values as the REPL does;
 * "timed", "profiled", "mem" and "help" serve :time, :profile, :mem and
 * ?name. */
void lm_repl_push_helper(lua_State *L, const char *name);

#endif
