/* batch.c - `lumen batch SCRIPT.lua [options]`: the command line of
 * lm.batch (lua/l_batch.lua), and its MPI distributor.
 *
 * Under mpirun (built with MPI: LM_HAVE_MPI) every rank runs lm.batch with
 * a `_dist` table: rank 0 keeps a job counter in an MPI window and each
 * rank, rank 0 included, takes the next chunk of jobs with an atomic
 * fetch-and-add, so fast ranks take more.  Ranks send their manifest
 * records to rank 0, which writes the one manifest in index order and draws
 * the progress bar for the whole run.  Each rank renders on the GPU its
 * node-local rank picks (vulkan:K, K = local rank mod the number of GPUs)
 * unless LUMEN_DEVICE says otherwise, or on the CPU with the cores it is
 * bound to (LUMEN_THREADS, unless set). */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <lualib.h>
#include "lua/lumen_lua.h"
#include "host.h"
#include "repl.h"
#ifdef LM_HAVE_MPI
#include <mpi.h>
#endif

static void batch_usage(FILE *f)
{
    fprintf(f,
            "usage: lumen batch SCRIPT.lua [--seeds 1-1000 | --params FILE.jsonl|.csv|DIR]\n"
            "         [-o 'out/%%05d.png'] [--only N] [--batch-size N] [--nan-check]\n"
            "         [--sheet sheet.png] [--sheet-max N] [--manifest FILE|none]\n"
            "         [--progress bar|lines|off] [--serial] [--timeline FILE]\n"
            "         [--xyz NAME=V1,V2,... (up to 3) [--grid FILE] [--font FILE]]\n"
            "         [--lora FILE[:W] ...] [--lora-dir DIR] [-- script args]\n"
            "  SCRIPT returns a function from a job's parameters (seed, params columns) to\n"
            "  an image tensor, or a table {render=, render_batch=, names=, png=}.\n"
            "  Complete outputs are kept (resume); one run at a time per output folder.\n"
            "  The next job is queued on the device while this one's PNGs are written;\n"
            "  --serial (LUMEN_BATCH_SERIAL=1) writes each before the next starts.\n"
            "  --timeline FILE: each process's seconds (load, generate, write, idle...),\n"
            "  one JSON line a process, also printed at the end.\n"
            "  Exit status: 0 all made, 1 a job failed or the run could not start, 2 a\n"
            "  bad command line, 130 Ctrl-C, 143 SIGTERM.  Under mpirun the jobs are\n"
            "  shared among the ranks.\n"
            "  --xyz expands the one job (a params row or a seed) into the cells of an X/Y/Z\n"
            "  plot (seed, cfg, steps, sampler, prompt_sr, lora:NAME, any column), one job\n"
            "  each, and writes the labelled grid (OUT's %%d made 'grid') once all exist.\n"
            "  --lora and --lora-dir reach each job's params as lora= and lora_dir=.\n"
            "  docs/BATCH.md has the details.\n");
}

#ifdef LM_HAVE_MPI
enum { TAG_REC = 1, TAG_DONE = 2 };

typedef struct mpi_dist {
    int rank, size, local_rank;
    MPI_Win win;
    int64_t *counter;        /* rank 0's window: jobs handed out so far */
    int done_ranks;          /* rank 0: ranks that sent TAG_DONE */
    long cpus;               /* the CPUs this rank may run on */
    long unbound;            /* > 0: the launcher had bound it to this many, and it was unbound */
} mpi_dist;

static mpi_dist dist;

/* next(n) -> first, last: the next n job indices (1-based) */
static int d_next(lua_State *L)
{
    int64_t n = (int64_t)luaL_checkinteger(L, 1), old = 0;
    MPI_Fetch_and_op(&n, &old, MPI_INT64_T, 0, 0, MPI_SUM, dist.win);
    MPI_Win_flush(0, dist.win);
    lua_pushinteger(L, (lua_Integer)old + 1);
    lua_pushinteger(L, (lua_Integer)(old + n));
    return 2;
}

/* send(index, line): a manifest record to rank 0 */
static int d_send(lua_State *L)
{
    int64_t index = (int64_t)luaL_checkinteger(L, 1);
    size_t n;
    const char *line = luaL_checklstring(L, 2, &n);
    char *buf = lua_newuserdatauv(L, n + 8, 0);
    memcpy(buf, &index, 8);
    memcpy(buf + 8, line, n);
    MPI_Send(buf, (int)(n + 8), MPI_CHAR, 0, TAG_REC, MPI_COMM_WORLD);
    return 0;
}

/* poll() -> {{index=, line=, rank=}, ...}: records that have arrived (rank 0) */
static int d_poll(lua_State *L)
{
    lua_newtable(L);
    int k = 0;
    for (;;) {
        int flag = 0;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
        if (!flag) break;
        int n = 0;
        MPI_Get_count(&st, MPI_CHAR, &n);
        char *buf = malloc((size_t)n + 1);
        if (!buf) return luaL_error(L, "batch: out of memory receiving a record");
        MPI_Recv(buf, n, MPI_CHAR, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (st.MPI_TAG == TAG_DONE) dist.done_ranks++;
        else if (n >= 8) {
            int64_t index;
            memcpy(&index, buf, 8);
            lua_createtable(L, 0, 3);
            lua_pushinteger(L, (lua_Integer)index);
            lua_setfield(L, -2, "index");
            lua_pushinteger(L, st.MPI_SOURCE);
            lua_setfield(L, -2, "rank");
            lua_pushlstring(L, buf + 8, (size_t)n - 8);
            lua_setfield(L, -2, "line");
            lua_rawseti(L, -2, ++k);
        }
        free(buf);
    }
    return 1;
}

static int d_finish(lua_State *L)
{
    (void)L;
    if (dist.rank != 0) MPI_Send(NULL, 0, MPI_CHAR, 0, TAG_DONE, MPI_COMM_WORLD);
    return 0;
}

/* start(ok): rank 0 says whether the run starts (it holds the output set's
 * lock and opened the manifest); the other ranks wait for that word before
 * they write anything.  When rank 0 says no, it reports why and ends the
 * job with MPI_Abort: the others wait here until then. */
static int d_start(lua_State *L)
{
    int ok = dist.rank == 0 ? lua_toboolean(L, 1) : 0;
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!ok && dist.rank != 0) {
        MPI_Barrier(MPI_COMM_WORLD);   /* rank 0 never comes: it aborts */
        return luaL_error(L, "batch: rank 0 could not start the run");
    }
    return 0;
}

/* all_done() -> whether every other rank has finished (rank 0); waits a
 * millisecond when not, so rank 0's wait does not spin a core */
static int d_all_done(lua_State *L)
{
    bool done = dist.done_ranks >= dist.size - 1;
    if (!done) nanosleep(&(struct timespec){0, 1000000}, NULL);
    lua_pushboolean(L, done);
    return 1;
}

static bool mpi_start(int *argc, char ***argv)
{
    /* only under a launcher: a plain `lumen batch` never starts MPI */
    if (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMIX_RANK") && !getenv("PMI_RANK")) return false;
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &dist.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &dist.size);
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, dist.rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &dist.local_rank);
    int local_size = 1;
    MPI_Comm_size(local, &local_size);
    MPI_Comm_free(&local);
    /* CPU threads: the cores this rank is bound to, or a share of the
     * node's; never a full pool per rank.  Open MPI binds each rank to one
     * core when np <= 2 unless told otherwise: a GPU rank then encodes its
     * PNGs and runs its driver's threads on that one core (on 2 H200s the
     * PNG writes of a 1024² sweep took 9 to 130 times as long as in one
     * process, issue 39).  So a rank the launcher bound to fewer CPUs than
     * its share of the node, when the user chose no binding (mpirun
     * --bind-to reaches the rank as OMPI_MCA_hwloc_base_binding_policy), is
     * unbound, as with --bind-to none, and uses its share. */
    long online = sysconf(_SC_NPROCESSORS_ONLN), share = online / (local_size > 0 ? local_size : 1);
    cpu_set_t set;
    long bound = online;
    if (sched_getaffinity(0, sizeof set, &set) == 0) bound = CPU_COUNT(&set);
    if (bound < share && bound < online && !getenv("OMPI_MCA_hwloc_base_binding_policy") &&
        !getenv("LUMEN_THREADS")) {
        CPU_ZERO(&set);
        for (long c = 0; c < online && c < CPU_SETSIZE; c++) CPU_SET((int)c, &set);
        /* the kernel keeps only the CPUs the process may use (a
         * container's cpuset): what it got is read back */
        if (sched_setaffinity(0, sizeof set, &set) == 0 && sched_getaffinity(0, sizeof set, &set) == 0) {
            dist.unbound = bound;
            bound = CPU_COUNT(&set);
            share = bound / (local_size > 0 ? local_size : 1);
        }
    }
    dist.cpus = bound;
    if (!getenv("LUMEN_THREADS")) {
        long n = bound < share ? bound : share;   /* a socket (np > 2) holds several ranks */
        char buf[24];
        snprintf(buf, sizeof buf, "%ld", n < 1 ? 1 : n);
        setenv("LUMEN_THREADS", buf, 1);
    }
    MPI_Win_allocate(dist.rank == 0 ? (MPI_Aint)sizeof(int64_t) : 0, sizeof(int64_t), MPI_INFO_NULL,
                     MPI_COMM_WORLD, &dist.counter, &dist.win);
    if (dist.rank == 0) *dist.counter = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock_all(0, dist.win);
    return true;
}

static void mpi_stop(void)
{
    MPI_Win_unlock_all(dist.win);
    MPI_Win_free(&dist.win);
    MPI_Finalize();
}

/* the `_dist` option */
static void push_dist(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"next", d_next}, {"send", d_send}, {"poll", d_poll},
        {"finish", d_finish}, {"all_done", d_all_done}, {"start", d_start}, {NULL, NULL},
    };
    lua_newtable(L);
    luaL_setfuncs(L, fns, 0);
    lua_pushinteger(L, dist.rank);
    lua_setfield(L, -2, "rank");
    lua_pushinteger(L, dist.size);
    lua_setfield(L, -2, "size");
    lua_pushinteger(L, dist.local_rank);
    lua_setfield(L, -2, "local_rank");
    lua_pushinteger(L, dist.cpus);
    lua_setfield(L, -2, "cpus");
    lua_pushinteger(L, dist.unbound);
    lua_setfield(L, -2, "unbound");
    const char *th = getenv("LUMEN_THREADS");
    lua_pushinteger(L, th ? strtol(th, NULL, 10) : 0);
    lua_setfield(L, -2, "threads");
}
#endif

static int set_opt(lua_State *L, const char *key, const char *val, bool integer)
{
    if (integer) {
        char *end;
        long long v = strtoll(val, &end, 10);
        if (!*val || *end) {
            fprintf(stderr, "lumen batch: --%s wants an integer, not '%s'\n", key, val);
            return -1;
        }
        lua_pushinteger(L, (lua_Integer)v);
    } else {
        lua_pushstring(L, val);
    }
    lua_setfield(L, -2, key);
    return 0;
}

/* the options table of lm.batch from argv (on top of the stack) */
static int parse_args(lua_State *L, int argc, char **argv)
{
    static const struct { const char *flag, *key; bool integer, list; } opts[] = {
        {"--seeds", "seeds", false, false}, {"--params", "params", false, false}, {"-o", "out", false, false},
        {"--out", "out", false, false}, {"--only", "only", true, false}, {"--batch-size", "batch_size", true, false},
        {"--sheet", "sheet", false, false}, {"--sheet-max", "sheet_max", true, false},
        {"--manifest", "manifest", false, false}, {"--progress", "progress", false, false},
        /* X/Y/Z grids and LoRAs (lua/l_batch_xyz.lua) */
        {"--xyz", "xyz", false, true}, {"--grid", "grid", false, false}, {"--font", "font", false, false},
        {"--lora", "lora", false, true}, {"--lora-dir", "lora_dir", false, false},
        {"--timeline", "timeline", false, false},
    };
    lua_newtable(L);
    int nargs = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            lua_newtable(L);
            for (int k = i + 1; k < argc; k++) {
                lua_pushstring(L, argv[k]);
                lua_rawseti(L, -2, ++nargs);
            }
            lua_setfield(L, -2, "args");
            break;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { batch_usage(stdout); return 0; }
        if (!strcmp(a, "--nan-check") || !strcmp(a, "--serial")) {
            lua_pushboolean(L, 1);
            lua_setfield(L, -2, !strcmp(a, "--serial") ? "serial" : "nan_check");
            continue;
        }
        if (a[0] != '-') {
            if (lua_getfield(L, -1, "script") != LUA_TNIL) {
                fprintf(stderr, "lumen batch: two scripts: '%s' and '%s'\n", lua_tostring(L, -1), a);
                return -1;
            }
            lua_pop(L, 1);
            lua_pushstring(L, a);
            lua_setfield(L, -2, "script");
            continue;
        }
        size_t k = 0, nopts = sizeof opts / sizeof opts[0];
        const char *val = NULL;
        for (; k < nopts; k++) {
            size_t n = strlen(opts[k].flag);
            if (!strncmp(a, opts[k].flag, n) && a[n] == '=') { val = a + n + 1; break; }
            if (!strcmp(a, opts[k].flag)) break;
        }
        if (k == nopts) {
            fprintf(stderr, "lumen batch: unknown option '%s'\n", a);
            return -1;
        }
        if (!val) {
            if (++i >= argc) { fprintf(stderr, "lumen batch: %s needs a value\n", a); return -1; }
            val = argv[i];
        }
        if (opts[k].list) {   /* repeatable: a list in order */
            if (lua_getfield(L, -1, opts[k].key) != LUA_TTABLE) {
                lua_pop(L, 1);
                lua_newtable(L);
                lua_pushvalue(L, -1);
                lua_setfield(L, -3, opts[k].key);
            }
            lua_pushstring(L, val);
            lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
            lua_pop(L, 1);
        } else if (set_opt(L, opts[k].key, val, opts[k].integer) != 0) return -1;
    }
    if (lua_getfield(L, -1, "script") == LUA_TNIL) {
        lua_pop(L, 1);
        batch_usage(stderr);
        return -1;
    }
    lua_pop(L, 1);
    return 1;
}

/* whether lm.batch failed on its options or job list (lm._batch.usage_error) */
static bool usage_error(lua_State *L)
{
    bool r = false;
    if (lua_getglobal(L, "lm") == LUA_TTABLE && lua_getfield(L, -1, "_batch") == LUA_TTABLE) {
        lua_getfield(L, -1, "usage_error");
        r = lua_toboolean(L, -1);
        lua_pop(L, 1);
    }
    lua_settop(L, 0);
    return r;
}

static int summary_int(lua_State *L, const char *key)
{
    lua_getfield(L, -1, key);
    int v = (int)lua_tointeger(L, -1);
    lua_pop(L, 1);
    return v;
}

int lm_cli_batch(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "batch")) return -1;
    /* the timeline's zero (lm._batch.now's clock) */
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    bool mpi = false;
#ifdef LM_HAVE_MPI
    mpi = mpi_start(&argc, &argv);
#endif
    int rc = 1;
    lua_State *L = luaL_newstate();
    if (!L) { fprintf(stderr, "lumen: cannot create the Lua state\n"); goto done; }
    lm_repl_signals_init(L);
    if (!lm_repl_open_lumen(L)) goto done;
    lua_getglobal(L, "lm");
    lua_getfield(L, -1, "batch");
    lua_remove(L, -2);
    int pr = parse_args(L, argc, argv);
    if (pr <= 0) { rc = pr == 0 ? 0 : 2; goto done; }
    lua_pushnumber(L, (double)start.tv_sec + start.tv_nsec / 1e9);
    lua_setfield(L, -2, "_t0");
    /* arg for the script, as `lumen script.lua args` gives it */
    lua_getfield(L, -1, "script");
    lua_createtable(L, 0, 1);
    lua_insert(L, -2);
    lua_rawseti(L, -2, 0);
    if (lua_getfield(L, -2, "args") == LUA_TTABLE) {
        for (lua_Integer i = 1; lua_geti(L, -1, i) != LUA_TNIL; i++) lua_rawseti(L, -3, i);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    lua_setglobal(L, "arg");
#ifdef LM_HAVE_MPI
    if (mpi) {
        push_dist(L);
        lua_setfield(L, -2, "_dist");
    }
#endif
    if (lm_repl_docall(L, 1, 1, false) != LUA_OK) {
        /* Ctrl-C or SIGTERM before the run's own handler (while the script loads) */
        int sig = lm_repl_stop_signal();
        lm_repl_report(L, "lumen");
        rc = sig ? 128 + sig : usage_error(L) ? 2 : 1;
#ifdef LM_HAVE_MPI
        /* the other ranks would wait for this one's records forever */
        if (mpi) MPI_Abort(MPI_COMM_WORLD, 1);
#endif
        goto done;
    }
    lua_getfield(L, -1, "interrupted");
    bool interrupted = lua_toboolean(L, -1);
    lua_pop(L, 1);
    /* 128 + the signal that stopped the run: 130 Ctrl-C, 143 SIGTERM */
    int sig = summary_int(L, "signal");
    rc = interrupted ? 128 + (sig > 0 ? sig : 2) : summary_int(L, "failed") > 0 ? 1 : 0;
done:
    if (L) lua_close(L);
#ifdef LM_HAVE_MPI
    if (mpi) mpi_stop();
#endif
    (void)mpi;
    return rc;
}
