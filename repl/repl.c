/* repl.c - the interactive loop: readline (callback mode, so Ctrl-C at the
 * prompt is seen through a self-pipe and just clears the line), history,
 * lua.c's input rules and the REPL's own commands.
 *
 * Input rules, as lua.c: a line is first tried as `return <line>` so an
 * expression prints its value; else it is a statement; a statement whose
 * syntax error ends at <eof> continues on a `..` prompt.  A trailing `;`
 * runs without printing.  `_` holds the last printed value.  Lines starting
 * with `:` are commands (:q :mem :time :show :help), `?x` is help(x). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <readline/readline.h>
#include <readline/history.h>
#include "complete.h"
#include "host.h"
#include "repl.h"
#include "show.h"

#define PROMPT "> "
#define PROMPT2 ".. "
#define HISTORY_MAX 1000

static char *history_path;

/* ---- reading a line ---- */

static char *got_line;
static bool line_ready;

static void on_line(char *line)
{
    got_line = line;
    line_ready = true;
    rl_callback_handler_remove();
}

enum { READ_LINE, READ_EOF, READ_INTERRUPT, READ_QUIT };

static int read_line(const char *prompt, char **out)
{
    int sfd = lm_repl_sigint_fd();
    bool quit;
    line_ready = false;
    got_line = NULL;
    /* a Ctrl-C left from before drops nothing now, but a second one that
     * came while the first was being handled still quits */
    if (lm_repl_take_sigint(&quit) && quit) {
        fputs("^C\n", stdout);
        fflush(stdout);
        return READ_QUIT;
    }
    fflush(stdout);
    rl_callback_handler_install(prompt, on_line);
    while (!line_ready) {
        fd_set fds;
        FD_ZERO(&fds);
        FD_SET(0, &fds);
        if (sfd >= 0) FD_SET(sfd, &fds);
        int r = select((sfd > 0 ? sfd : 0) + 1, &fds, NULL, NULL, NULL);
        if (lm_repl_take_sigint(&quit)) {
            /* Ctrl-C at the prompt: drop the line, start afresh */
            rl_free_line_state();
            rl_callback_sigcleanup();
            rl_replace_line("", 0);
            rl_callback_handler_remove();
            fputs("^C\n", stdout);
            fflush(stdout);
            return quit ? READ_QUIT : READ_INTERRUPT;
        }
        if (r < 0) {
            if (errno == EINTR) continue;
            rl_callback_handler_remove();
            return READ_EOF;
        }
        if (FD_ISSET(0, &fds)) rl_callback_read_char();
    }
    *out = got_line;
    return got_line ? READ_LINE : READ_EOF;
}

/* ---- history ---- */

static void history_init(void)
{
    const char *env = getenv("LUMEN_HISTORY");
    const char *home = getenv("HOME");
    if (env) {
        if (!*env) return;                 /* LUMEN_HISTORY= turns it off */
        history_path = strdup(env);
    } else if (home) {
        size_t n = strlen(home) + 32;
        history_path = malloc(n);
        if (history_path) snprintf(history_path, n, "%s/.lumen_history", home);
    }
    if (!history_path) return;
    stifle_history(HISTORY_MAX);
    int fd = open(history_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd >= 0) close(fd);
    read_history(history_path);
}

static void history_add(const char *chunk)
{
    if (!*chunk) return;
    HIST_ENTRY *last = history_length > 0 ? history_get(history_base + history_length - 1) : NULL;
    if (last && !strcmp(last->line, chunk)) return;
    add_history(chunk);
    /* appended at once, so a crash or a double Ctrl-C loses nothing */
    if (history_path) append_history(1, history_path);
}

static void history_done(void)
{
    if (history_path) history_truncate_file(history_path, HISTORY_MAX);
    free(history_path);
    history_path = NULL;
}

/* ---- chunks ---- */

static bool incomplete(lua_State *L, int status)
{
    if (status != LUA_ERRSYNTAX) return false;
    size_t n;
    const char *msg = lua_tolstring(L, -1, &n);
    return n >= 5 && !strcmp(msg + n - 5, "<eof>");
}

static const char *skip_space(const char *s)
{
    while (*s == ' ' || *s == '\t') s++;
    return s;
}

static bool ends_with_semicolon(const char *s)
{
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n')) n--;
    return n && s[n - 1] == ';';
}

/* Calls show(...) on the values above base, and sets _ to the first: _ is
 * the last value shown, as IPython's is, so a line ending in ';' (shown
 * nothing) leaves _ as it was. */
static void show_results(lua_State *L, int base)
{
    int n = lua_gettop(L) - base;
    if (n == 0) return;
    lua_pushvalue(L, base + 1);
    lua_setglobal(L, "_");
    lm_repl_push_helper(L, "show");
    lua_insert(L, base + 1);
    if (lm_repl_docall(L, n, 0, false) != LUA_OK) lm_repl_report(L, NULL);
}

/* Runs the function on top; prints its results unless quiet. */
static void run_function(lua_State *L, bool quiet)
{
    int base = lua_gettop(L) - 1;
    int status = lm_repl_docall(L, 0, LUA_MULTRET, false);
    if (status != LUA_OK) {
        lm_repl_report(L, NULL);
        return;
    }
    if (!quiet) show_results(L, base);
    lua_settop(L, base);
}

/* Reads continuation lines until the chunk in *buf compiles or fails for
 * another reason than <eof>.  Returns the load status (function or error
 * on the stack), or -1 when the user abandoned the chunk. */
static int load_statement(lua_State *L, char **buf)
{
    for (;;) {
        int status = luaL_loadbuffer(L, *buf, strlen(*buf), "=stdin");
        if (!incomplete(L, status)) return status;
        lua_pop(L, 1);
        char *line;
        int r = read_line(PROMPT2, &line);
        if (r != READ_LINE) {
            if (r == READ_EOF) fputc('\n', stdout);
            history_add(*buf);
            return -1;
        }
        size_t n = strlen(*buf) + strlen(line) + 2;
        char *joined = malloc(n);
        if (!joined) { free(line); return -1; }
        snprintf(joined, n, "%s\n%s", *buf, line);
        free(line);
        free(*buf);
        *buf = joined;
    }
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

/* Loads expr as a function ("return expr", else as a statement); false
 * after reporting a syntax error. */
static bool load_expr(lua_State *L, const char *expr)
{
    lua_pushfstring(L, "return %s", expr);
    int status = luaL_loadbuffer(L, lua_tostring(L, -1), lua_rawlen(L, -1), "=stdin");
    lua_remove(L, -2);
    if (status != LUA_OK) {
        lua_pop(L, 1);
        status = luaL_loadbuffer(L, expr, strlen(expr), "=stdin");
        if (status != LUA_OK) { lm_repl_report(L, NULL); return false; }
    }
    return true;
}

/* :time expr - wall time of running expr and evaluating tensors it returns */
static void cmd_time(lua_State *L, const char *expr)
{
    if (!load_expr(L, expr)) return;
    int base = lua_gettop(L) - 1;
    lm_repl_push_helper(L, "timed");
    lua_insert(L, -2);
    lua_pushnumber(L, now_s());
    int status = lm_repl_docall(L, 2, LUA_MULTRET, false);
    double t = now_s();
    if (status != LUA_OK) { lm_repl_report(L, NULL); return; }
    /* timed() returns its start time then the values */
    double t0 = lua_tonumber(L, base + 1);
    lua_remove(L, base + 1);
    if (!ends_with_semicolon(expr)) show_results(L, base);
    lua_settop(L, base);
    double dt = t - t0;
    if (dt < 1e-3) printf("wall time: %.1f us\n", dt * 1e6);
    else if (dt < 1) printf("wall time: %.2f ms\n", dt * 1e3);
    else printf("wall time: %.3f s\n", dt);
}

/* :profile expr - lm.profile's table for running expr, then its values */
static void cmd_profile(lua_State *L, const char *expr)
{
    if (!load_expr(L, expr)) return;
    int base = lua_gettop(L) - 1;
    lm_repl_push_helper(L, "profiled");
    lua_insert(L, -2);
    if (lm_repl_docall(L, 1, LUA_MULTRET, false) != LUA_OK) { lm_repl_report(L, NULL); return; }
    if (!ends_with_semicolon(expr)) show_results(L, base);
    lua_settop(L, base);
}

/* :diff expr - lm.diff of expr on the CPU against the default device (f16
 * on the CPU when that is the default), its report printed */
static void cmd_diff(lua_State *L, const char *expr)
{
    static const char run[] =
        "local fn = ...; local lm = require 'lumen'; local d = tostring(lm.device())\n"
        "local b = d:match('^cpu') and {dtype = 'f16'} or {device = d}\n"
        "print(lm.diff(fn, nil, {a = {device = 'cpu'}, b = b}))";
    if (!load_expr(L, expr)) return;
    int base = lua_gettop(L) - 1;
    if (luaL_loadbuffer(L, run, sizeof run - 1, "=:diff") != LUA_OK) { lm_repl_report(L, NULL); return; }
    lua_insert(L, -2);
    if (lm_repl_docall(L, 1, 0, false) != LUA_OK) lm_repl_report(L, NULL);
    lua_settop(L, base);
}

/* :show expr - lm.show of expr's values (a tensor or a PNG path, then
 * lm.show's options); says why when nothing could be drawn */
static void cmd_show(lua_State *L, const char *expr)
{
    static const char run[] =
        "local fn = ...; local ok, why = require('lumen').show(fn())\n"
        "if not ok then io.stderr:write('not shown: ', why, '\\n') end";
    if (!load_expr(L, expr)) return;
    int base = lua_gettop(L) - 1;
    if (luaL_loadbuffer(L, run, sizeof run - 1, "=:show") != LUA_OK) { lm_repl_report(L, NULL); return; }
    lua_insert(L, -2);
    if (lm_repl_docall(L, 1, 0, false) != LUA_OK) lm_repl_report(L, NULL);
    lua_settop(L, base);
}

static void call_helper(lua_State *L, const char *name, const char *arg)
{
    lm_repl_push_helper(L, name);
    int n = 0;
    if (arg) {
        lua_pushstring(L, arg);
        n = 1;
    }
    if (lm_repl_docall(L, n, 0, false) != LUA_OK) lm_repl_report(L, NULL);
}

static const char COMMANDS_HELP[] =
    "  :time expr   run expr (evaluating the tensors it returns) and show the wall time\n"
    "  :profile expr  the same with a table of the kernels it ran and their times (lm.profile)\n"
    "  :diff expr   lm.diff of expr: the CPU against the default device (f16 if that is the CPU)\n"
    "  :show expr   draw the image expr gives (a tensor or a PNG path) in the terminal (lm.show)\n"
    "  :mem         memory per device\n"
    "  :q           quit (also Ctrl-D)\n"
    "  ?name        help for a function, e.g. ?lm.zeros or ?t:sum (also :help name)\n"
    "  help(x)      the same as a function; help() for an overview\n";

/* Returns true to quit. */
static bool command(lua_State *L, const char *line)
{
    const char *c = line + 1;
    if (!strcmp(c, "q") || !strcmp(c, "quit") || !strcmp(c, "exit")) return true;
    if (!strncmp(c, "time", 4) && (c[4] == ' ' || c[4] == '\t')) cmd_time(L, skip_space(c + 4));
    else if (!strncmp(c, "profile", 7) && (c[7] == ' ' || c[7] == '\t')) cmd_profile(L, skip_space(c + 7));
    else if (!strncmp(c, "diff", 4) && (c[4] == ' ' || c[4] == '\t')) cmd_diff(L, skip_space(c + 4));
    else if (!strncmp(c, "show", 4) && (c[4] == ' ' || c[4] == '\t')) cmd_show(L, skip_space(c + 4));
    else if (!strcmp(c, "mem") || !strcmp(c, "memory")) call_helper(L, "mem", NULL);
    else if (!strcmp(c, "help") || !strcmp(c, "h") || !strcmp(c, "?")) fputs(COMMANDS_HELP, stdout);
    else if ((!strncmp(c, "help", 4) && (c[4] == ' ' || c[4] == '\t')) ||
             ((c[0] == 'h' || c[0] == '?') && (c[1] == ' ' || c[1] == '\t')))
        call_helper(L, "help", skip_space(c + (c[0] == 'h' && c[1] == 'e' ? 4 : 1)));   /* :help name */
    else if (!strcmp(c, "time") || !strcmp(c, "profile") || !strcmp(c, "diff") || !strcmp(c, "show"))
        fprintf(stderr, ":%s needs an expression, e.g. :%s lm.randn{512, 512}:sum()\n", c, c);
    else fprintf(stderr, "unknown command :%s (try :help)\n", c);
    return false;
}

/* Handles one input; returns true to quit. */
static bool handle(lua_State *L, char *line)
{
    const char *s = skip_space(line);
    if (!*s) { free(line); return false; }
    if (*s == ':' && s[1] && s[1] != ':') {
        history_add(line);
        bool q = command(L, s);
        free(line);
        return q;
    }
    if (*s == '?' || !strcmp(s, "help")) {
        history_add(line);
        call_helper(L, "help", *s == '?' ? skip_space(s + 1) : "");
        free(line);
        return false;
    }
    bool quiet = ends_with_semicolon(line);
    lua_pushfstring(L, "return %s", line);
    int status = luaL_loadbuffer(L, lua_tostring(L, -1), lua_rawlen(L, -1), "=stdin");
    lua_remove(L, -2);
    char *buf = line;
    if (status != LUA_OK) {
        lua_pop(L, 1);
        status = load_statement(L, &buf);
        if (status == -1) { free(buf); return false; }
        quiet = ends_with_semicolon(buf);
    }
    history_add(buf);
    free(buf);
    if (status != LUA_OK) lm_repl_report(L, NULL);
    else run_function(L, quiet);
    return false;
}

int lm_repl_interactive(lua_State *L)
{
    lm_repl_signals_interactive();
    rl_readline_name = "lumen";
    rl_catch_signals = 0;
    history_init();
    lm_repl_complete_init(L);
    if (!lm_repl_show_init(L)) {
        lm_repl_report(L, "lumen");
        return LUA_ERRRUN;
    }
    lua_getglobal(L, "lm");
    lua_getfield(L, -1, "version");
    printf("Lumen %s on %s - help() for help, :q to quit\n", lua_tostring(L, -1), LUA_RELEASE);
    lua_pop(L, 2);
    for (;;) {
        char *line;
        int r = read_line(PROMPT, &line);
        if (r == READ_EOF) { fputc('\n', stdout); break; }
        if (r == READ_QUIT) break;
        if (r == READ_INTERRUPT) continue;
        if (handle(L, line)) break;
        lua_settop(L, 0);
    }
    history_done();
    return LUA_OK;
}
