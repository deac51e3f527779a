/* repl.h - what the files of the `lumen` program share: running chunks
 * under Ctrl-C protection, the interactive loop, completion and showing
 * values. */
#ifndef LM_REPL_H
#define LM_REPL_H

#include <stdbool.h>
#include <lua.h>
#include <lauxlib.h>

/* ---- main.c ---- */
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
/* The signal (SIGINT, SIGTERM) that stopped the last lm_repl_docall, or 0. */
int lm_repl_stop_signal(void);
/* true (once) if Ctrl-C came at the prompt; *quit when it was the second
 * within a second. */
bool lm_repl_take_sigint(bool *quit);

/* ---- the command-line tools: each returns the exit status, or -1 when
 * argv is not its subcommand ---- */
int lm_cli_files(int argc, char **argv);    /* cli_files.c: compare, inspect */
int lm_cli_diff(int argc, char **argv);     /* cli_diff.c: diff (two dumps) */
/* cli_models.c: an flock on an output folder while an output is renamed in
 * (lumen upscale, lumen generate); -1 with "lumen PROG: ..." printed */
int lm_cli_lock_dir(const char *dir, const char *prog);
int lm_cli_batch(int argc, char **argv);    /* batch.c */
int lm_cli_models(int argc, char **argv);   /* cli_models.c: upscale, convert */
int lm_cli_generate(int argc, char **argv); /* cli_generate.c */

/* ---- repl.c ---- */
int lm_repl_interactive(lua_State *L);

/* ---- complete.c ---- */
void lm_repl_complete_init(lua_State *L);

/* ---- show.c ---- */
/* Loads the Lua helpers of the REPL (value printer, :mem).  Returns false
 * with an error on the stack on failure. */
bool lm_repl_show_init(lua_State *L);
/* Pushes the function `show(...)` that prints values as the REPL does. */
void lm_repl_push_helper(lua_State *L, const char *name);

#endif
