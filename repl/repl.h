/* repl.h - what the files of the `lumen` program share: the command-line
 * tools and the interactive loop.  Running chunks under Ctrl-C protection
 * is host.h's; completion complete.h's, showing values show.h's. */
#ifndef LM_REPL_H
#define LM_REPL_H

#include <stdbool.h>
#include <lua.h>
#include <lauxlib.h>

/* ---- the command-line tools: each returns the exit status, or -1 when
 * argv is not its subcommand ---- */
int lm_cli_files(int argc, char **argv);    /* cli_files.c: compare, inspect */
int lm_cli_diff(int argc, char **argv);     /* cli_diff.c: diff (two dumps) */
/* cli_models.c: an flock on an output folder while an output is renamed in
 * (lumen upscale, lumen generate); -1 with "lumen PROG: ..." printed */
int lm_cli_lock_dir(const char *dir, const char *prog);
/* ... the folder dir of output out made and writable: 0, or 1 printed */
int lm_cli_out_dir(const char *dir, const char *out, const char *prog);
int lm_cli_batch(int argc, char **argv);    /* batch.c */
int lm_cli_models(int argc, char **argv);   /* cli_models.c: upscale, convert */
int lm_cli_generate(int argc, char **argv); /* cli_generate.c */

/* ---- repl.c ---- */
int lm_repl_interactive(lua_State *L);

#endif
