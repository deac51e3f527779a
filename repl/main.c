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
 *   lumen generate ...          Stable Diffusion images (repl/cli_generate.c)
 *   lumen serve ...             the OpenAI and A1111 image APIs over HTTP (repl/serve.c)
 *
 * This file only reads the command line and hands it on; chunks run under
 * the signal handling of repl/host.c.  A script stopped by a signal exits
 * with 128 + the signal: 130 for Ctrl-C, 143 for SIGTERM. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/device.h"
#include "core/error.h"
#include "core/io/io.h"
#include "host.h"
#include "repl.h"

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
            "  generate \"PROMPT\" ... Stable Diffusion images (lumen generate -h)\n"
            "  serve ...             the OpenAI and A1111 image APIs over HTTP (lumen serve -h)\n",
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

/* The subcommands written in C (generate, upscale, convert, compare...) stop
 * at SIGINT / SIGTERM as the default action does, but first unlink the
 * temporaries of the writes in progress (PNG writers run on every core): the
 * default action left them beside the outputs.  The REPL and scripts
 * install their own handlers below (lm_repl_signals_init). */
static void cli_signal(int sig)
{
    lm_io_unlink_temporaries();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void cli_signals_init(void)
{
    int sigs[2] = {SIGINT, SIGTERM};
    for (int i = 0; i < 2; i++) {
        struct sigaction sa, old;
        if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler == SIG_IGN) continue;   /* kept ignored */
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = cli_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

/* Every device's queued work finished before the process exits.  exit()
 * runs its handlers newest first, and a driver can register its own after
 * Lumen's device teardown did (C++ objects made at first use: lavapipe's
 * LLVM compiles a shader when its first dispatch runs, on the driver's
 * queue thread); work still queued then ran while those were being
 * destroyed, and the process crashed at exit, about 1 time in 100 with a
 * warm pipeline cache (tests/vk/coldstart.sh's os.exit check).  So the lumen
 * program waits for its devices before exit runs anything: at the end of
 * main and in os.exit.  A failure has nobody to tell. */
static void devices_quiesce(void)
{
    for (int i = 0; i < lm_device_count(); i++) {
        lm_device *d = lm_device_at(i);
        if (d) (void)lm_device_sync(d);
    }
    lm_error_clear();
}

/* os.exit([code [, close]]): the devices waited for, then Lua's own (upvalue 1) */
static int os_exit(lua_State *L)
{
    devices_quiesce();
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, 0);
    return 0;
}

static void wrap_os_exit(lua_State *L)
{
    if (lua_getglobal(L, "os") != LUA_TTABLE) {
        lua_pop(L, 1);
        return;
    }
    if (lua_getfield(L, -1, "exit") == LUA_TFUNCTION) {
        lua_pushcclosure(L, os_exit, 1);
        lua_setfield(L, -2, "exit");
    } else {
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

int main(int argc, char **argv)
{
    cli_signals_init();
    int r = lm_cli_files(argc, argv);
    if (r < 0) r = lm_cli_diff(argc, argv);
    if (r < 0) r = lm_cli_batch(argc, argv);
    if (r < 0) r = lm_cli_models(argc, argv);
    if (r < 0) r = lm_cli_generate(argc, argv);
    if (r < 0) r = lm_cli_serve(argc, argv);
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
    wrap_os_exit(L);
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
    devices_quiesce();
    lua_close(L);
    int sig = lm_repl_stop_signal();
    return status == LUA_OK ? 0 : sig ? 128 + sig : 1;
}
