/* l_batch.c - the C helpers of lm.batch (lua/l_batch.lua, embedded here as
 * a string): JSON through cJSON, a monotonic clock, RSS, mkdir -p, isatty,
 * the output set's lock, unique temporary files, file checks for resume, and
 * the signal handling of a run.
 *
 * Ctrl-C (SIGINT) or SIGTERM during lm.batch: the first one sets a flag,
 * cancels the running evaluation (lm_cancel) and, while a job's function
 * runs, raises "interrupted" inside it through a hook (as lua.c does), so
 * the runner abandons that one image, records the rest as pending and
 * returns; the output of the abandoned image is never renamed into place.
 * A second signal exits at once with status 128 + signal, after removing
 * the run's temporary files (they are registered here, so the handler can
 * unlink them).  The handlers in place before the run are restored after it.
 *
 * Output safety: every file of a run is written under a name only this
 * process uses, "<final>.lumen-<host>-<pid>-<k>.tmp", created with O_EXCL,
 * and renamed into place; the output set (a folder) belongs to one run at a
 * time through flock on "<folder>/.lumen-batch.lock", which names the holder
 * (pid, host, start time) for the run that is refused.  The kernel drops the
 * lock when its holder dies, even by SIGKILL; the temporaries such a run
 * left are recognised by their pattern and removed by the next run. */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cJSON.h>
#include <zlib.h>
#include "core/io/io.h"
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

/* ---- temporary files: registered so a signal can remove them ---- */

enum { TMP_SLOTS = 16 };
static char tmp_path[TMP_SLOTS][PATH_MAX];
static volatile sig_atomic_t tmp_used[TMP_SLOTS];
static unsigned long tmp_counter;

static const char *host_name(void)
{
    static char host[64];
    if (!host[0]) {
        if (gethostname(host, sizeof host - 1) != 0 || !host[0]) strcpy(host, "localhost");
        for (char *c = host; *c; c++)   /* a name part: no separators */
            if (*c == '/' || *c == '.') *c = '_';
    }
    return host;
}

/* In a signal handler: unlinks the registered temporaries (the one
 * lm.image.write_png writes beside each is core/io's, removed by
 * lm_io_unlink_temporaries) */
static void tmp_unlink_all(void)
{
    for (int i = 0; i < TMP_SLOTS; i++)
        if (tmp_used[i]) unlink(tmp_path[i]);
}

/* tmp_create(final) -> name: a new empty file "<final>.lumen-<host>-<pid>-<k>.tmp",
 * created exclusively (no other process can have it) and registered for
 * removal on a signal; or nil + message. */
static int l_tmp_create(lua_State *L)
{
    const char *final = luaL_checkstring(L, 1);
    int slot = 0;
    while (slot < TMP_SLOTS && tmp_used[slot]) slot++;
    if (slot == TMP_SLOTS) return luaL_error(L, "batch: more than %d temporary files at once", TMP_SLOTS);
    char name[PATH_MAX];
    for (int tries = 0; tries < 100; tries++) {
        int n = snprintf(name, sizeof name, "%s.lumen-%s-%ld-%lu.tmp", final, host_name(), (long)getpid(),
                         ++tmp_counter);
        if (n < 0 || (size_t)n + 5 >= sizeof name) {
            lua_pushnil(L);
            lua_pushfstring(L, "%s: the name is too long", final);
            return 2;
        }
        /* listed before it exists, so a signal in between still finds it
         * (the name holds this host and pid: no other process makes it) */
        memcpy(tmp_path[slot], name, (size_t)n + 1);
        tmp_used[slot] = 1;
        int fd = open(name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0) {
            close(fd);
            lua_pushstring(L, name);
            return 1;
        }
        tmp_used[slot] = 0;
        if (errno != EEXIST) {
            lua_pushnil(L);
            lua_pushfstring(L, "%s: cannot create a temporary file: %s", final, strerror(errno));
            return 2;
        }
    }
    lua_pushnil(L);
    lua_pushfstring(L, "%s: cannot create a temporary file (all names taken)", final);
    return 2;
}

/* tmp_forget(name): the temporary was renamed or removed; no longer one
 * the signal handler removes */
static int l_tmp_forget(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    for (int i = 0; i < TMP_SLOTS; i++)
        if (tmp_used[i] && !strcmp(tmp_path[i], name)) tmp_used[i] = 0;
    return 0;
}

/* Whether name is a temporary of lm.batch ("<x>.lumen-<host>-<pid>-<k>.tmp",
 * that + ".tmp", or that + the temporary lm.image.write_png makes beside
 * it): *host (pointer into name, hostlen bytes) and *pid. */
static bool tmp_parse(const char *name, const char **host, size_t *hostlen, long *pid)
{
    size_t n = strlen(name);
    if (n >= 8 && !strcmp(name + n - 8, ".tmp.tmp")) n -= 4;
    else lm_io_temp_base(name, &n);
    if (n < 4 || strncmp(name + n - 4, ".tmp", 4)) return false;
    const char *end = name + n - 4, *p = end;
    while (p > name && p[-1] >= '0' && p[-1] <= '9') p--;            /* k */
    if (p == end || p == name || p[-1] != '-') return false;
    const char *k = --p;
    while (p > name && p[-1] >= '0' && p[-1] <= '9') p--;            /* pid */
    if (p == k || p == name || p[-1] != '-') return false;
    *pid = strtol(p, NULL, 10);
    const char *h_end = p - 1;
    const char *mark = NULL;
    for (const char *q = name; q + 7 <= h_end; q++)
        if (!strncmp(q, ".lumen-", 7)) mark = q;
    if (!mark || mark == name) return false;
    *host = mark + 7;
    *hostlen = (size_t)(h_end - *host);
    return *hostlen > 0;
}

/* tmp_sweep(dir, all) -> count: removes the temporaries of lm.batch in dir
 * left by runs that died (all: every one, for a caller that holds the
 * output set's lock before any process of its run has written; else those
 * of this host whose process no longer exists). */
static int l_tmp_sweep(lua_State *L)
{
    const char *dir = luaL_checkstring(L, 1);
    bool all = lua_toboolean(L, 2);
    DIR *d = opendir(dir);
    lua_Integer count = 0;
    if (d) {
        const char *me = host_name();
        struct dirent *e;
        while ((e = readdir(d))) {
            const char *host;
            size_t hl;
            long pid;
            if (!tmp_parse(e->d_name, &host, &hl, &pid)) continue;
            if (!all) {
                if (hl != strlen(me) || strncmp(host, me, hl)) continue;
                if (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
            }
            char path[PATH_MAX];
            if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path) continue;
            if (unlink(path) == 0) count++;
        }
        closedir(d);
    }
    lua_pushinteger(L, count);
    return 1;
}

/* ---- the output set's lock ---- */

#define LOCK_MT "lumen.batch.lock"

static int lock_close(lua_State *L)
{
    int *fd = luaL_checkudata(L, 1, LOCK_MT);
    if (*fd >= 0) {
        if (ftruncate(*fd, 0) != 0) { /* the holder's line only informs */ }
        close(*fd);   /* drops the flock */
        *fd = -1;
    }
    return 0;
}

/* lock(path) -> handle | nil, holder: an exclusive flock on path (created
 * if missing), taken at once or refused.  The file then holds "pid P on
 * host H since T" for a run that is refused; handle:close() (or its
 * collection) releases it. */
static int l_lock(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    int *h = lua_newuserdatauv(L, sizeof *h, 0);
    *h = -1;
    if (luaL_newmetatable(L, LOCK_MT)) {
        lua_pushcfunction(L, lock_close);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, lock_close);
        lua_setfield(L, -2, "__close");
        lua_newtable(L);
        lua_pushcfunction(L, lock_close);
        lua_setfield(L, -2, "close");
        lua_setfield(L, -2, "__index");
    }
    lua_setmetatable(L, -2);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) {
        lua_pushnil(L);
        lua_pushfstring(L, "cannot open the lock file %s: %s", path, strerror(errno));
        lua_pushboolean(L, 1);   /* an error, not a holder */
        return 3;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        char holder[256] = {0};
        ssize_t n = err == EWOULDBLOCK ? pread(fd, holder, sizeof holder - 1, 0) : -1;
        close(fd);
        lua_pushnil(L);
        if (err != EWOULDBLOCK) {
            lua_pushfstring(L, "cannot lock %s: %s", path, strerror(err));
            lua_pushboolean(L, 1);
            return 3;
        }
        while (n > 0 && (holder[n - 1] == '\n' || holder[n - 1] == 0)) holder[--n] = 0;
        lua_pushstring(L, n > 0 ? holder : "a process that has not written its name yet");
        return 2;
    }
    *h = fd;
    char line[256], when[64] = "?";
    time_t now = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    int n = snprintf(line, sizeof line, "pid %ld on host %s since %s\n", (long)getpid(), host_name(), when);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)n, 0) != n) { /* the line only informs */ }
    return 1;
}

/* ---- resume: is a file complete? ---- */

/* file_check(path) -> size, crc32 (8 hex digits), png_ok | nil when path is
 * not a readable regular file.  png_ok: it starts with the PNG signature and
 * ends with an IEND chunk (what a complete PNG writer leaves last). */
static int l_file_check(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    /* O_NONBLOCK: a FIFO where an output should be would block the open
     * until some writer came; it is refused below instead */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return 0;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) { close(fd); return 0; }
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    static const unsigned char iend[12] = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xae, 0x42, 0x60, 0x82};
    unsigned char buf[65536], head[8] = {0}, tail[12] = {0};
    uLong crc = crc32(0L, Z_NULL, 0);
    off_t total = 0;
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) {
        crc = crc32(crc, buf, (uInt)n);
        for (ssize_t i = 0; i < n && total + i < 8; i++) head[total + i] = buf[i];
        total += n;
        if (n >= 12) memcpy(tail, buf + n - 12, 12);
        else {
            memmove(tail, tail + n, (size_t)(12 - n));
            memcpy(tail + 12 - n, buf, (size_t)n);
        }
    }
    close(fd);
    if (n < 0) return 0;
    char hex[9];
    snprintf(hex, sizeof hex, "%08lx", (unsigned long)crc);
    lua_pushinteger(L, (lua_Integer)total);
    lua_pushstring(L, hex);
    lua_pushboolean(L, total >= 20 && !memcmp(head, sig, 8) && !memcmp(tail, iend, 12));
    return 3;
}

/* regular(path) -> true | nil, message: a params file must be a regular
 * file; a FIFO or /dev/zero would block the run or never end */
static int l_regular(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        lua_pushnil(L);
        lua_pushfstring(L, "%s: %s", path, strerror(errno));
        return 2;
    }
    if (S_ISREG(sb.st_mode)) {
        lua_pushboolean(L, 1);
        return 1;
    }
    lua_pushnil(L);
    lua_pushfstring(L, "%s is %s; only a regular file is read", path,
                    S_ISDIR(sb.st_mode) ? "a folder" : S_ISFIFO(sb.st_mode) ? "a FIFO (named pipe)"
                    : S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode) ? "a device"
                    : "not a regular file");
    return 2;
}

/* ---- SIGINT and SIGTERM ---- */

static lua_State *sig_L;
static volatile sig_atomic_t sig_count, sig_in_job, sig_last;
static struct sigaction sig_old_int, sig_old_term;
static int sig_installed;

static void job_stop(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    lua_sethook(L, NULL, 0, 0);
    if (sig_in_job) luaL_error(L, "interrupted");
}

static void on_signal(int sig)
{
    if (sig_count++ > 0) {
        static const char msg[] = "\nlumen batch: interrupted twice, stopping now\n";
        ssize_t w = write(2, msg, sizeof msg - 1);
        (void)w;
        tmp_unlink_all();
        lm_io_unlink_temporaries();   /* a PNG or manifest write under way */
        _exit(128 + sig);
    }
    sig_last = sig;
    int saved = errno;
    lm_cancel();
    if (sig_in_job && sig_L)
        lua_sethook(sig_L, job_stop, LUA_MASKCALL | LUA_MASKRET | LUA_MASKLINE | LUA_MASKCOUNT, 1);
    errno = saved;
}

/* sigint(true) installs the run's handlers (SIGINT, SIGTERM), sigint(false)
 * restores the ones before; sigint() -> how many signals came since the
 * install, and the first one's number */
static int l_sigint(lua_State *L)
{
    if (lua_gettop(L) == 0) {
        lua_pushinteger(L, sig_count);
        lua_pushinteger(L, sig_last);
        return 2;
    }
    if (lua_toboolean(L, 1) && !sig_installed) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sigaddset(&sa.sa_mask, SIGINT);
        sigaddset(&sa.sa_mask, SIGTERM);
        sig_L = L;
        sig_count = 0;
        sig_last = 0;
        sig_in_job = 0;
        sigaction(SIGINT, &sa, &sig_old_int);
        sigaction(SIGTERM, &sa, &sig_old_term);
        sig_installed = 1;
    } else if (!lua_toboolean(L, 1) && sig_installed) {
        sigaction(SIGINT, &sig_old_int, NULL);
        sigaction(SIGTERM, &sig_old_term, NULL);
        sig_installed = 0;
        sig_in_job = 0;
        lm_lua_hook_rest(L);   /* LUMEN_DUMP's location hook stays */
        lm_cancel_clear();
    }
    return 0;
}

/* run_job(fn) -> ok, result | false, message: fn under pcall with the
 * job flag set for exactly the time fn runs.  Setting and clearing the flag
 * from Lua around a Lua pcall left windows (before the pcall started, after
 * it returned) where a signal's hook raised "interrupted" outside any
 * protection, and the run ended with a Lua error instead of stopping
 * cleanly; here no Lua instruction runs between the flag and the pcall. */
static int l_run_job(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TFUNCTION);
    lua_settop(L, 1);
    sig_in_job = 1;
    int st = lua_pcall(L, 0, 1, 0);
    sig_in_job = 0;
    lm_lua_hook_rest(L);   /* LUMEN_DUMP's location hook stays */
    lua_pushboolean(L, st == LUA_OK);
    lua_insert(L, -2);
    return 2;
}

/* outside_job(fn) -> ok, result | false, message: fn under pcall with the
 * job flag cleared, inside a job: host work that a generation runs for the
 * runner (busy below) is stopped by a signal as it is outside a job (the
 * signal counts, the evaluation is cancelled, the work checks and returns),
 * not by an error raised in the middle of it; a signal that came while it
 * ran stops the job it returns to, as if it had come there */
static int l_outside_job(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TFUNCTION);
    lua_settop(L, 1);
    sig_atomic_t was = sig_in_job;
    sig_in_job = 0;
    int st = lua_pcall(L, 0, 1, 0);
    sig_in_job = was;
    if (was && sig_count > 0 && sig_L)
        lua_sethook(sig_L, job_stop, LUA_MASKCALL | LUA_MASKRET | LUA_MASKLINE | LUA_MASKCOUNT, 1);
    lua_pushboolean(L, st == LUA_OK);
    lua_insert(L, -2);
    return 2;
}

/* busy(fn | nil) -> the function registered before, if not yet run: fn is
 * the host work the next pipe:generate runs once its first step is queued
 * (LM_LUA_BUSY_KEY, lua/l_diffusion.c) */
static int l_busy(lua_State *L)
{
    if (!lua_isnoneornil(L, 1)) luaL_checktype(L, 1, LUA_TFUNCTION);
    lua_settop(L, 1);
    lua_getfield(L, LUA_REGISTRYINDEX, LM_LUA_BUSY_KEY);
    lua_pushvalue(L, 1);
    lua_setfield(L, LUA_REGISTRYINDEX, LM_LUA_BUSY_KEY);
    return 1;
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
    {"run_job", l_run_job, "lm._batch.run_job(fn) -> ok, result | false, message\nfn under "
     "pcall with the job flag set while it runs (internal)."},
    {"tmp_create", l_tmp_create, "lm._batch.tmp_create(final) -> name | nil, message\nA new "
     "temporary file beside final, created exclusively (internal)."},
    {"tmp_forget", l_tmp_forget, "lm._batch.tmp_forget(name)\n(internal)"},
    {"tmp_sweep", l_tmp_sweep, "lm._batch.tmp_sweep(dir, all) -> count\nRemoves temporaries of "
     "dead runs (internal)."},
    {"lock", l_lock, "lm._batch.lock(path) -> handle | nil, holder\nThe output set's lock "
     "(internal)."},
    {"regular", l_regular, "lm._batch.regular(path) -> true | nil, message\n(internal)"},
    {"outside_job", l_outside_job, "lm._batch.outside_job(fn) -> ok, result | false, message\nfn "
     "under pcall with the job flag cleared (internal)."},
    {"busy", l_busy, "lm._batch.busy(fn | nil) -> previous\nHost work for the next generation to "
     "run after its first step is queued (internal)."},
    {"file_check", l_file_check, "lm._batch.file_check(path) -> size, crc32, png_ok | nil\n"
     "(internal)"},
    {NULL, NULL, NULL},
};

#include "l_batch_lua.h"       /* lm_batch_lua_src: lua/l_batch.lua */
#include "l_batch_xyz_lua.h"   /* lm_batch_xyz_lua_src: lua/l_batch_xyz.lua */

void lm_lua_open_batch(lua_State *L)
{
    lua_newtable(L);
    lm_lua_register(L, "lm._batch.", batch_helpers);
    /* lm._batch.xyz: grids, LoRAs (lua/l_batch_xyz.lua) */
    if (luaL_loadbuffer(L, lm_batch_xyz_lua_src, sizeof lm_batch_xyz_lua_src - 1, "=lumen/l_batch_xyz.lua")
        != LUA_OK) {
        lua_error(L);
        return;
    }
    lua_pushvalue(L, -3);     /* the module table */
    lua_pushvalue(L, -3);     /* lm._batch */
    lua_call(L, 2, 0);
    lua_setfield(L, -2, "_batch");
    if (luaL_loadbuffer(L, lm_batch_lua_src, sizeof lm_batch_lua_src - 1, "=lumen/l_batch.lua") != LUA_OK) {
        lua_error(L);
        return;
    }
    lua_pushvalue(L, -2);     /* the module table */
    lua_call(L, 1, 0);
}
