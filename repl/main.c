/* main.c - the `lumen` program: a Lua 5.4 interpreter with the module
 * `lumen` preloaded as the globals lumen and lm.
 *
 *   lumen                 the REPL (or, with stdin not a terminal, runs stdin)
 *   lumen script.lua a b  runs a script with arg = {[0]="script.lua", "a", "b"}
 *   lumen -e 'code'       runs code;  -i  stays interactive afterwards
 *   lumen -               runs stdin as a script
 *   lumen compare|inspect ...   the files subcommands (repl/cli_files.c)
 *   lumen diff A B ...          two dumps compared (repl/cli_diff.c)
 *   lumen batch SCRIPT ...      batch image generation (repl/batch.c)
 *   lumen upscale|convert ...   pretrained upscalers (repl/cli_models.c)
 *
 * Ctrl-C follows lua.c: the handler sets a hook that raises "interrupted"
 * at the next Lua instruction, and lm_cancel() stops a running evaluation
 * in the core.  A second Ctrl-C within a second quits at once.  SIGTERM
 * stops a running chunk the same way (a file being written is finished or
 * removed by its writer, never left as a temporary), a second one quits at
 * once; at the prompt it quits.  A script stopped by a signal exits with
 * 128 + the signal: 130 for Ctrl-C, 143 for SIGTERM. */
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
#include "repl.h"

int luaopen_lumen(lua_State *L);

bool lm_repl_color;

static lua_State *globalL;
static volatile sig_atomic_t running;       /* a chunk is running */
static volatile sig_atomic_t prompt_sigint; /* Ctrl-C came at the prompt */
static volatile sig_atomic_t prompt_quit;
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
    lua_sethook(L, NULL, 0, 0);
    run_interrupted = 0;
    stop_signal = 0;
    running = 1;
    int status = lua_pcall(L, narg, nres, base);
    running = 0;
    /* the terminal echoed ^C where the output was: end that line */
    if (run_interrupted && isatty(1)) fputc('\n', stdout);
    lua_sethook(L, NULL, 0, 0);
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

/* to stdout when asked for (-h), to stderr after a usage error */
static void usage_to(FILE *f, const char *prog)
{
    fprintf(f,
            "usage: %s [options] [script [args]]\n"
            "  -e code    run code\n"
            "  -i         enter the REPL after running script/code\n"
            "  -l name    require library name into global name\n"
            "  -h, --help     show this help\n"
            "  -v, --version  show the version\n"
            "  -          run stdin as a script\n"
            "  --         stop handling options\n"
            "  compare|inspect ...   file subcommands (lumen compare -h, lumen inspect -h)\n"
            "  diff A B ...          two dumps tensor by tensor (lumen diff -h)\n"
            "  batch SCRIPT ...      batch image generation (lumen batch -h)\n"
            "  upscale|convert ...   pretrained upscalers (lumen upscale -h)\n"
            "  generate \"PROMPT\" ... Stable Diffusion images (lumen generate -h)\n",
            prog);
}

static void usage(const char *prog) { usage_to(stderr, prog); }

/* arg table as lua.c builds it: arg[0] the script, negative indices the
 * interpreter and its options */
static void create_arg_table(lua_State *L, char **argv, int argc, int script)
{
    lua_createtable(L, argc - script, script + 1);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i - script);
    }
    lua_setglobal(L, "arg");
}

static int run_chunk_status(lua_State *L, int status)
{
    if (status == LUA_OK) status = lm_repl_docall(L, 0, 0, true);
    if (status != LUA_OK) lm_repl_report(L, "lumen");
    return status;
}

static int run_script(lua_State *L, const char *name, char **args, int nargs)
{
    const char *fname = strcmp(name, "-") == 0 ? NULL : name;
    int status = luaL_loadfile(L, fname);
    if (status == LUA_OK) {
        for (int i = 0; i < nargs; i++) lua_pushstring(L, args[i]);
        status = lm_repl_docall(L, nargs, 0, true);
    }
    if (status != LUA_OK) lm_repl_report(L, "lumen");
    return status;
}

static int require_global(lua_State *L, const char *name)
{
    lua_getglobal(L, "require");
    lua_pushstring(L, name);
    int status = lm_repl_docall(L, 1, 1, true);
    if (status == LUA_OK) lua_setglobal(L, name);
    else lm_repl_report(L, "lumen");
    return status;
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

int main(int argc, char **argv)
{
    int r = lm_cli_files(argc, argv);
    if (r < 0) r = lm_cli_diff(argc, argv);
    if (r < 0) r = lm_cli_batch(argc, argv);
    if (r < 0) r = lm_cli_models(argc, argv);
    if (r < 0) r = lm_cli_generate(argc, argv);
    if (r >= 0) return r;
    const char *prog = argc > 0 && argv[0] ? argv[0] : "lumen";

    /* first pass: validate options and find the script */
    bool interactive = false, has_e = false, version = false;
    int script = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || !strcmp(a, "-")) { script = i; break; }
        if (!strcmp(a, "--")) { if (i + 1 < argc) script = i + 1; break; }
        if (!strcmp(a, "-i")) interactive = true;
        else if (!strcmp(a, "-v") || !strcmp(a, "--version")) version = true;
        else if (!strcmp(a, "-e") || !strcmp(a, "-l")) {
            if (++i >= argc) { usage(prog); return 1; }
            if (a[1] == 'e') has_e = true;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage_to(stdout, prog); return 0; }
        else { fprintf(stderr, "lumen: unknown option '%s'\n", a); usage(prog); return 1; }
    }

    bool tty_in = isatty(0), tty_out = isatty(1);
    (void)tty_out;
    lm_repl_color = tty_out && isatty(2) && !getenv("NO_COLOR");
    lua_State *L = luaL_newstate();
    if (!L) { fprintf(stderr, "lumen: cannot create the Lua state\n"); return 1; }
    lm_repl_signals_init(L);
    if (!lm_repl_open_lumen(L)) { lua_close(L); return 1; }
    create_arg_table(L, argv, argc, script ? script : argc);
    if (version) {
        lua_getglobal(L, "lm");
        lua_getfield(L, -1, "version");
        printf("lumen %s (%s)\n", lua_tostring(L, -1), LUA_RELEASE);
        lua_pop(L, 2);
    }

    int status = LUA_OK;
    for (int i = 1; i < argc && status == LUA_OK && (!script || i < script); i++) {
        if (!strcmp(argv[i], "-e"))
            status = run_chunk_status(L, luaL_loadbuffer(L, argv[i + 1], strlen(argv[i + 1]), "=(command line)")), i++;
        else if (!strcmp(argv[i], "-l"))
            status = require_global(L, argv[i + 1]), i++;
    }
    if (status == LUA_OK && script)
        status = run_script(L, argv[script], argv + script + 1, argc - script - 1);
    if (status == LUA_OK && !script && !has_e && !version) {
        if (tty_in) interactive = true;
        else status = run_script(L, "-", NULL, 0);     /* piped: stdin is a script */
    }
    if (status == LUA_OK && interactive) {
        if (!tty_in) interactive = false;
        else status = lm_repl_interactive(L);
    }
    lua_close(L);
    return status == LUA_OK ? 0 : stop_signal ? 128 + stop_signal : 1;
}
