/* complete.h - Tab completion for the REPL (repl/complete.c). */
#ifndef LM_REPL_COMPLETE_H
#define LM_REPL_COMPLETE_H

#include <lua.h>

/* Installs readline's completion over L's globals, table fields, tensor
 * methods and file names. */
void lm_repl_complete_init(lua_State *L);

#endif
