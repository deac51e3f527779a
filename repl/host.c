/* host.c - what every part of the `lumen` program needs to run Lua: the
 * module opened as the globals lumen, lm and help, protected calls that a
 * signal can stop, and error reports.  The REPL (repl.c), scripts (main.c)
 * and lumen batch (batch.c) all run their chunks through it.
 *
 * Ctrl-C follows lua.c: the handler sets a hook that raises "interrupted"
 * at the next Lua instruction, and lm_cancel() stops a running evaluation
 * in the core.  A second Ctrl-C within a second quits at once.  SIGTERM
 * stops a running chunk the same way (a file being written is finished or
 * removed by its writer, never left as a temporary), a second one quits at
 * once; at the prompt it quits.  Before the REPL starts (a script, -e,
 * the module opening), a Ctrl-C outside a running chunk quits at once. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <lualib.h>
#include "core/io/io.h"
#include "lua/lumen_lua.h"
#include "host.h"

int luaopen_lumen(lua_State *L);

bool lm_repl_color;

static lua_State *globalL;
static volatile sig_atomic_t running;       /* a chunk is running */
static volatile sig_atomic_t prompt_sigint; /* Ctrl-C came at the prompt */
static volatile sig_atomic_t prompt_quit;
static volatile sig_atomic_t interactive;   /* the REPL has started */
static volatile sig_atomic_t run_interrupted; /* Ctrl-C came while running */
static volatile sig_atomic_t stop_signal;   /* the signal that stopped the last run */
static struct timespec last_sigint;
static volatile sig_atomic_t have_last;
static int sigpipe[2] = {-1, -1};

static void lstop(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    lua_sethook(L, NULL, 0, 0);
    luaL_error(L, "interrupted");
}

static double since_last(const struct timespec *now)
{
    return (double)(now->tv_sec - last_sigint.tv_sec) + (now->tv_nsec - last_sigint.tv_nsec) / 1e9;
}

/* A second Ctrl-C within a second quits when it repeats the first in the
 * same place: twice during one run (the first did not stop it), or twice
 * at the prompt.  A Ctrl-C at the prompt followed quickly by one in a new
 * run interrupts that run only. */
static volatile sig_atomic_t last_at_prompt;

static void on_sigint(int sig)
{
    (void)sig;
    int saved = errno;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    bool soon = have_last && since_last(&now) < 1.0;
    last_sigint = now;
    have_last = 1;
    if (running) {
        if (soon && run_interrupted) {
            static const char msg[] = "\nlumen: interrupted twice, quitting\n";
            ssize_t w = write(2, msg, sizeof msg - 1);
            (void)w;
            lm_io_unlink_temporaries();
            _exit(130);
        }
        last_at_prompt = 0;
        run_interrupted = 1;
        stop_signal = SIGINT;
        lm_cancel();
        lua_sethook(globalL, lstop, LUA_MASKCALL | LUA_MASKRET | LUA_MASKLINE | LUA_MASKCOUNT, 1);
    } else if (!interactive) {
        /* a script or -e not yet running (the module opening, the file
         * loading) or between chunks: stop, as the default action would;
         * it was taken for a Ctrl-C at a prompt, and the script then ran */
        lm_io_unlink_temporaries();
        _exit(130);
    } else {
        prompt_sigint = 1;
        if (soon && last_at_prompt) prompt_quit = 1;
        last_at_prompt = 1;
        if (sigpipe[1] >= 0) {
            ssize_t w = write(sigpipe[1], "", 1);
            (void)w;
        }
    }
    errno = saved;
}

static void on_sigterm(int sig)
{
    if (!running || stop_signal == SIGTERM) {
        lm_io_unlink_temporaries();
        _exit(128 + sig);
    }
    int saved = errno;
    stop_signal = SIGTERM;
    run_interrupted = 1;
    lm_cancel();
    lua_sethook(globalL, lstop, LUA_MASKCALL | LUA_MASKRET | LUA_MASKLINE | LUA_MASKCOUNT, 1);
    errno = saved;
}

void lm_repl_signals_init(lua_State *L)
{
    globalL = L;
    if (sigpipe[0] < 0 && pipe(sigpipe) == 0) {
        for (int i = 0; i < 2; i++) fcntl(sigpipe[i], F_SETFL, fcntl(sigpipe[i], F_GETFL) | O_NONBLOCK);
        fcntl(sigpipe[0], F_SETFD, FD_CLOEXEC);
        fcntl(sigpipe[1], F_SETFD, FD_CLOEXEC);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = on_sigterm;
    sigaction(SIGTERM, &sa, NULL);
}

void lm_repl_signals_interactive(void) { interactive = 1; }

int lm_repl_sigint_fd(void) { return sigpipe[0]; }

int lm_repl_stop_signal(void) { return stop_signal; }

bool lm_repl_take_sigint(bool *quit)
{
    char buf[16];
    while (sigpipe[0] >= 0 && read(sigpipe[0], buf, sizeof buf) > 0) {}
    bool r = prompt_sigint;
    *quit = prompt_quit;
    prompt_sigint = prompt_quit = 0;
    return r;
}

static int msghandler(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    if (!msg) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
        msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    luaL_traceback(L, L, msg, 1);
    return 1;
}

static int plain_handler(lua_State *L)
{
    if (!lua_tostring(L, 1)) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
        lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    return 1;
}

int lm_repl_docall(lua_State *L, int narg, int nres, bool traceback)
{
    int base = lua_gettop(L) - narg;
    lua_pushcfunction(L, traceback ? msghandler : plain_handler);
    lua_insert(L, base);
    lm_cancel_clear();
    lm_lua_hook_rest(L);   /* not NULL: LUMEN_DUMP's location hook stays */
    run_interrupted = 0;
    stop_signal = 0;
    running = 1;
    int status = lua_pcall(L, narg, nres, base);
    running = 0;
    /* the terminal echoed ^C where the output was: end that line */
    if (run_interrupted && isatty(1)) fputc('\n', stdout);
    lm_lua_hook_rest(L);
    lm_cancel_clear();
    lua_remove(L, base);
    return status;
}

void lm_repl_report(lua_State *L, const char *progname)
{
    const char *msg = lua_tostring(L, -1);
    fflush(stdout);
    if (lm_repl_color) fputs("\033[31m", stderr);
    if (progname) fprintf(stderr, "%s: ", progname);
    fprintf(stderr, "%s", msg ? msg : "(error)");
    if (lm_repl_color) fputs("\033[0m", stderr);
    fputc('\n', stderr);
    fflush(stderr);
    lua_pop(L, 1);
}

bool lm_repl_open_lumen(lua_State *L)
{
    luaL_openlibs(L);
    lua_pushcfunction(L, luaopen_lumen);
    lua_pushstring(L, "lumen");
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
        lm_repl_report(L, "lumen");
        return false;
    }
    /* require "lumen" returns this table, never a second copy from lumen.so */
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    lua_pushvalue(L, -2);
    lua_setfield(L, -2, "lumen");
    lua_pop(L, 1);
    lua_pushvalue(L, -1);
    lua_setglobal(L, "lumen");
    lua_getfield(L, -1, "help");
    lua_setglobal(L, "help");
    lua_setglobal(L, "lm");
    return true;
}
