/* l_batch.c - the C helpers of lm.batch (lua/l_batch.lua, embedded here as
 * a string): JSON through cJSON, a monotonic clock, RSS, mkdir -p, isatty,
 * and the SIGINT handling of a run.
 *
 * Ctrl-C during lm.batch: the first one sets a flag, cancels the running
 * evaluation (lm_cancel) and, while a job's function runs, raises
 * "interrupted" inside it through a hook (as lua.c does), so the runner
 * abandons that one image, records the rest as pending and returns; the
 * output of the abandoned image is never renamed into place.  A second
 * Ctrl-C exits at once with status 130: outputs are written under a
 * temporary name and renamed, so nothing half-written carries a final name.
 * The handler in place before the run is restored after it. */
#include <errno.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cJSON.h>
#include "l_internal.h"

/* ---- JSON ---- */

static cJSON *to_json(lua_State *L, int idx, int depth);

static int cmp_keys(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A table with keys 1..n is an array; otherwise an object with its string
 * keys sorted, so the same table always encodes to the same bytes. */
static cJSON *table_to_json(lua_State *L, int idx, int depth)
{
    lua_Integer n = luaL_len(L, idx);
    int count = 0;
    for (lua_pushnil(L); lua_next(L, idx); lua_pop(L, 1)) count++;
    if (count > 0 && n == count) {
        cJSON *arr = cJSON_CreateArray();
        for (lua_Integer i = 1; arr && i <= n; i++) {
            lua_geti(L, idx, i);
            cJSON *v = to_json(L, lua_gettop(L), depth + 1);
            lua_pop(L, 1);
            if (!v) { cJSON_Delete(arr); return NULL; }
            cJSON_AddItemToArray(arr, v);
        }
        return arr;
    }
    const char **keys = lua_newuserdatauv(L, sizeof *keys * (size_t)(count ? count : 1), 0);
    int k = 0;
    for (lua_pushnil(L); lua_next(L, idx); lua_pop(L, 1)) {
        if (lua_type(L, -2) != LUA_TSTRING) luaL_error(L, "json: object keys must be strings");
        keys[k++] = lua_tostring(L, -2);   /* anchored by the table */
    }
    qsort(keys, (size_t)count, sizeof *keys, cmp_keys);
    cJSON *obj = cJSON_CreateObject();
    for (int i = 0; obj && i < count; i++) {
        lua_getfield(L, idx, keys[i]);
        cJSON *v = to_json(L, lua_gettop(L), depth + 1);
        lua_pop(L, 1);
        if (!v) { cJSON_Delete(obj); obj = NULL; break; }
        cJSON_AddItemToObject(obj, keys[i], v);
    }
    lua_pop(L, 1);   /* keys */
    return obj;
}

static cJSON *to_json(lua_State *L, int idx, int depth)
{
    if (depth > 32) luaL_error(L, "json: nested too deeply");
    switch (lua_type(L, idx)) {
    case LUA_TNIL: return cJSON_CreateNull();
    case LUA_TBOOLEAN: return cJSON_CreateBool(lua_toboolean(L, idx));
    case LUA_TNUMBER: return cJSON_CreateNumber(lua_tonumber(L, idx));
    case LUA_TSTRING: return cJSON_CreateString(lua_tostring(L, idx));
    case LUA_TTABLE: return table_to_json(L, idx, depth);
    default: luaL_error(L, "json: cannot encode a %s", luaL_typename(L, idx));
    }
    return NULL;
}

/* lm._batch.json_encode(value) -> string (one line) */
static int l_json_encode(lua_State *L)
{
    luaL_checkany(L, 1);
    cJSON *j = to_json(L, 1, 0);
    char *s = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!s) return luaL_error(L, "json: out of memory");
    lua_pushstring(L, s);
    cJSON_free(s);
    return 1;
}

static void push_json(lua_State *L, const cJSON *j, int depth)
{
    luaL_checkstack(L, 4, "json: nested too deeply");
    if (depth > 64) luaL_error(L, "json: nested too deeply");
    if (cJSON_IsBool(j)) lua_pushboolean(L, cJSON_IsTrue(j));
    else if (cJSON_IsNumber(j)) {
        double v = j->valuedouble;
        if (v == (double)(lua_Integer)v && v > -9007199254740992.0 && v < 9007199254740992.0)
            lua_pushinteger(L, (lua_Integer)v);
        else lua_pushnumber(L, v);
    } else if (cJSON_IsString(j)) lua_pushstring(L, j->valuestring);
    else if (cJSON_IsArray(j) || cJSON_IsObject(j)) {
        lua_newtable(L);
        int i = 1;
        for (const cJSON *c = j->child; c; c = c->next) {
            if (cJSON_IsNull(c)) { i++; continue; }
            push_json(L, c, depth + 1);
            if (cJSON_IsArray(j)) lua_rawseti(L, -2, i++);
            else lua_setfield(L, -2, c->string);
        }
    } else lua_pushnil(L);
}

/* lm._batch.json_decode(string) -> value | nil, message */
static int l_json_decode(lua_State *L)
{
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(s, n, &end, 0);
    if (!j) {
        lua_pushnil(L);
        lua_pushfstring(L, "invalid JSON near byte %d", end ? (int)(end - s) + 1 : 1);
        return 2;
    }
    push_json(L, j, 0);
    cJSON_Delete(j);
    return 1;
}

/* ---- small system helpers ---- */

static int l_now(lua_State *L)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    lua_pushnumber(L, (double)t.tv_sec + t.tv_nsec / 1e9);
    return 1;
}

/* resident set size in bytes (Linux), or nil */
static int l_rss(lua_State *L)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, res = 0;
    int ok = f && fscanf(f, "%ld %ld", &pages, &res) == 2;
    if (f) fclose(f);
    if (!ok) return 0;
    lua_pushinteger(L, (lua_Integer)res * sysconf(_SC_PAGESIZE));
    return 1;
}

/* columns of the terminal on fd, or nil */
static int l_term_width(lua_State *L)
{
    struct winsize ws;
    if (ioctl((int)luaL_checkinteger(L, 1), TIOCGWINSZ, &ws) != 0 || ws.ws_col == 0) return 0;
    lua_pushinteger(L, ws.ws_col);
    return 1;
}

static int l_isatty(lua_State *L)
{
    lua_pushboolean(L, isatty((int)luaL_checkinteger(L, 1)));
    return 1;
}

/* mkdirs(dir): creates dir and its parents; true, or nil + message */
static int l_mkdirs(lua_State *L)
{
    size_t n;
    const char *dir = luaL_checklstring(L, 1, &n);
    char *p = lua_newuserdatauv(L, n + 1, 0);
    memcpy(p, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != 0) continue;
        char c = p[i];
        p[i] = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            lua_pushnil(L);
            lua_pushfstring(L, "cannot create directory %s: %s", p, strerror(errno));
            return 2;
        }
        p[i] = c;
    }
    lua_pushboolean(L, 1);
    return 1;
}

static int cmp_strs(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* listdir(dir, suffix) -> sorted names ending in suffix (case-insensitive),
 * or nil + message when dir is not a directory */
static int l_listdir(lua_State *L)
{
    const char *dir = luaL_checkstring(L, 1);
    size_t ns;
    const char *suffix = luaL_optlstring(L, 2, "", &ns);
    DIR *d = opendir(dir);
    if (!d) {
        lua_pushnil(L);
        lua_pushfstring(L, "%s: %s", dir, strerror(errno));
        return 2;
    }
    size_t n = 0, cap = 64;
    char **names = malloc(cap * sizeof *names);
    struct dirent *e;
    while (names && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (e->d_name[0] == '.' || len < ns || strcasecmp(e->d_name + len - ns, suffix)) continue;
        if (n == cap) {
            char **grown = realloc(names, (cap *= 2) * sizeof *names);
            if (!grown) break;
            names = grown;
        }
        if (!(names[n] = strdup(e->d_name))) break;
        n++;
    }
    closedir(d);
    if (!names) return luaL_error(L, "listdir: out of memory");
    qsort(names, n, sizeof *names, cmp_strs);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_pushstring(L, names[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
        free(names[i]);
    }
    free(names);
    return 1;
}

/* ---- SIGINT ---- */

static lua_State *sig_L;
static volatile sig_atomic_t sig_count, sig_in_job;
static struct sigaction sig_old;
static int sig_installed;

static void job_stop(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    lua_sethook(L, NULL, 0, 0);
    if (sig_in_job) luaL_error(L, "interrupted");
}

static void on_sigint(int sig)
{
    (void)sig;
    if (sig_count++ > 0) {
        static const char msg[] = "\nlumen batch: interrupted twice, stopping now\n";
        ssize_t w = write(2, msg, sizeof msg - 1);
        (void)w;
        _exit(130);
    }
    int saved = errno;
    lm_cancel();
    if (sig_in_job && sig_L)
        lua_sethook(sig_L, job_stop, LUA_MASKCALL | LUA_MASKRET | LUA_MASKLINE | LUA_MASKCOUNT, 1);
    errno = saved;
}

/* sigint(true) installs the run's handler, sigint(false) restores the one
 * before it; sigint() -> how many Ctrl-C came since the install */
static int l_sigint(lua_State *L)
{
    if (lua_gettop(L) == 0) {
        lua_pushinteger(L, sig_count);
        return 1;
    }
    if (lua_toboolean(L, 1) && !sig_installed) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigint;
        sigemptyset(&sa.sa_mask);
        sig_L = L;
        sig_count = 0;
        sig_in_job = 0;
        sigaction(SIGINT, &sa, &sig_old);
        sig_installed = 1;
    } else if (!lua_toboolean(L, 1) && sig_installed) {
        sigaction(SIGINT, &sig_old, NULL);
        sig_installed = 0;
        sig_in_job = 0;
        lua_sethook(L, NULL, 0, 0);
        lm_cancel_clear();
    }
    return 0;
}

/* in_job(flag): whether a job's function is running (a Ctrl-C then raises
 * "interrupted" inside it) */
static int l_in_job(lua_State *L)
{
    sig_in_job = lua_toboolean(L, 1);
    if (!sig_in_job) lua_sethook(L, NULL, 0, 0);
    return 0;
}

static const lm_lua_func batch_helpers[] = {
    {"json_encode", l_json_encode, "lm._batch.json_encode(v) -> string\nOne line of JSON; "
     "object keys sorted (internal)."},
    {"json_decode", l_json_decode, "lm._batch.json_decode(s) -> value | nil, message\n(internal)"},
    {"now", l_now, "lm._batch.now() -> seconds\nA monotonic clock (internal)."},
    {"rss", l_rss, "lm._batch.rss() -> bytes\nResident set size of the process (internal)."},
    {"isatty", l_isatty, "lm._batch.isatty(fd) -> boolean\n(internal)"},
    {"term_width", l_term_width, "lm._batch.term_width(fd) -> columns | nil\n(internal)"},
    {"listdir", l_listdir, "lm._batch.listdir(dir, [suffix]) -> names | nil, message\nSorted file "
     "names in dir ending in suffix (internal)."},
    {"mkdirs", l_mkdirs, "lm._batch.mkdirs(dir) -> true | nil, message\n(internal)"},
    {"sigint", l_sigint, "lm._batch.sigint([on]) -> count\nThe run's Ctrl-C handler (internal)."},
    {"in_job", l_in_job, "lm._batch.in_job(flag)\n(internal)"},
    {NULL, NULL, NULL},
};

#include "l_batch_lua.h"   /* lm_batch_lua_src: lua/l_batch.lua */

void lm_lua_open_batch(lua_State *L)
{
    lua_newtable(L);
    lm_lua_register(L, "lm._batch.", batch_helpers);
    lua_setfield(L, -2, "_batch");
    if (luaL_loadbuffer(L, lm_batch_lua_src, sizeof lm_batch_lua_src - 1, "=lumen/l_batch.lua") != LUA_OK) {
        lua_error(L);
        return;
    }
    lua_pushvalue(L, -2);     /* the module table */
    lua_call(L, 1, 0);
}
