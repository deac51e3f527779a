/* host.h - running Lua for the `lumen` program (repl/host.c): the module
 * opened, protected calls that Ctrl-C or SIGTERM stop, error reports. */
#ifndef LM_REPL_HOST_H
#define LM_REPL_HOST_H

#include <stdbool.h>
#include <lua.h>
#include <lauxlib.h>

extern bool lm_repl_color;      /* colours on stderr/stdout (a terminal, no NO_COLOR) */
/* Calls the function below narg arguments with a traceback handler while
 * Ctrl-C interrupts it; returns the Lua status.  On error the message is
 * on the stack. */
int lm_repl_docall(lua_State *L, int narg, int nres, bool traceback);
/* Prints the error message on top of the stack (and pops it). */
void lm_repl_report(lua_State *L, const char *progname);
/* luaL_openlibs and the module lumen as the globals lumen, lm and help;
 * false (error reported) if the module cannot start */
bool lm_repl_open_lumen(lua_State *L);
/* Signals: the SIGINT handler (installed once) and its self-pipe, which
 * wakes the prompt's select() when Ctrl-C arrives at the prompt. */
void lm_repl_signals_init(lua_State *L);
int lm_repl_sigint_fd(void);
/* The REPL has started: from now on a Ctrl-C outside a running chunk is
 * one at the prompt (before, it quits with status 130). */
void lm_repl_signals_interactive(void);
/* The signal (SIGINT, SIGTERM) that stopped the last lm_repl_docall, or 0. */
int lm_repl_stop_signal(void);
/* true (once) if Ctrl-C came at the prompt; *quit when it was the second
 * within a second. */
bool lm_repl_take_sigint(bool *quit);

#endif
