/* tfjs_find.c - where TF.js models are found and which value range they
 * work in.
 *
 * Package names are looked up where an installed program keeps its data,
 * never relative to the current folder: the entries of $LUMEN_MODELS, then
 * $XDG_DATA_HOME/lumen/models, then beside the program (<exe>/../share/
 * lumen/models, as `make install` lays it out; <exe>/models, the build
 * tree's own folder when lumen runs from build/), then beside the Lua
 * module (<so>/models in the build tree, <so>/../share/lumen/models,
 * <so>/../../../share/lumen/models for <prefix>/lib/lua/5.4).
 *
 * The value range is read from the package the model sits in: every
 * UpscalerJS package declares `inputRange`/`outputRange` in the model
 * definition its package.json exports.  The definition is JavaScript; a
 * small scan (no JS engine) follows its relative imports and reads the
 * `[lo, hi]` literals, choosing between the branches of the shared ESRGAN
 * definition by the `architecture` it is given.  When that cannot be read,
 * the three packages `make models` fetches have a known range and anything
 * else is 0..1, with a warning. */
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <dirent.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "diffusers_config.h"
#include "lumen.h"
#include "tfjs.h"

#define MAX_DEF_FILES 24
#define MAX_DEF_BYTES (256 * 1024)

/* Fallback when a package's definition cannot be read (UpscalerJS: "rdn"
 * models take 0..255, "rrdn" 0..1). */
static const struct { const char *name; double range; } known[] = {
    {"esrgan-slim", 255}, {"esrgan-medium", 255}, {"esrgan-thick", 1},
};

/* snprintf that says whether it fit (paths here are bounded; a longer
 * one is treated as absent) */
static bool fmt(char *out, size_t n, const char *f, ...) __attribute__((format(printf, 3, 4)));
static bool fmt(char *out, size_t n, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    int w = vsnprintf(out, n, f, ap);
    va_end(ap);
    return w >= 0 && (size_t)w < n;
}

static bool is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static bool is_file(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static void dirs_add(lm_model_dirs *d, const char *form, const char *a, const char *b)
{
    if (d->n >= LM_MODEL_DIRS_MAX || !a || !*a) return;
    char p[sizeof d->dir[0]];
    if (!fmt(p, sizeof p, form, a, b ? b : "")) return;
    /* the same folder twice (exe and library side by side) is listed once */
    char real[PATH_MAX];
    const char *key = realpath(p, real) ? real : p;
    for (int i = 0; i < d->n; i++) {
        char other[PATH_MAX];
        const char *k = realpath(d->dir[i], other) ? other : d->dir[i];
        if (!strcmp(k, key)) return;
    }
    fmt(d->dir[d->n++], sizeof d->dir[0], "%s", p);
}

/* the folder of a file path (in place) */
static void dirname_of(char *p)
{
    char *s = strrchr(p, '/');
    if (s && s != p) *s = 0;
    else if (s) s[1] = 0;
}

/* The absolute path of the file this code was loaded from (lumen.so, or
 * the program it is linked into).  dladdr gives the name dlopen was given,
 * which is relative for package.cpath = "build/?.so"; the kernel's map of
 * the process names the same file absolutely. */
static bool module_path(char *out, size_t n)
{
    Dl_info info;
    if (!dladdr((void *)lm_tfjs_model_dirs, &info) || !info.dli_fname || !info.dli_fname[0])
        return false;
    if (info.dli_fname[0] == '/') return fmt(out, n, "%s", info.dli_fname);
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f) return false;
    uintptr_t at = (uintptr_t)(void *)lm_tfjs_model_dirs;
    char line[PATH_MAX + 256];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        int path_at = 0;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &path_at) < 2 || !path_at)
            continue;
        if (at < lo || at >= hi || line[path_at] != '/') continue;
        line[strcspn(line, "\n")] = 0;
        found = fmt(out, n, "%s", line + path_at);
    }
    fclose(f);
    return found;
}

void lm_tfjs_model_dirs(lm_model_dirs *d)
{
    memset(d, 0, sizeof *d);
    const char *env = getenv("LUMEN_MODELS");
    if (env && *env) {
        char buf[4096];
        fmt(buf, sizeof buf, "%s", env);
        for (char *save = NULL, *tok = strtok_r(buf, ":", &save); tok;
             tok = strtok_r(NULL, ":", &save))
            dirs_add(d, "%s%s", tok, NULL);
    }
    const char *xdg = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
    if (xdg && *xdg == '/') dirs_add(d, "%s%s/lumen/models", xdg, NULL);
    else if (home && *home) dirs_add(d, "%s%s/.local/share/lumen/models", home, NULL);
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        dirname_of(exe);
        dirs_add(d, "%s%s/../share/lumen/models", exe, NULL);
        dirs_add(d, "%s%s/models", exe, NULL);
    }
    /* `require "lumen"` from a stock lua5.4: the exe is lua's, the module
     * sits in <prefix>/lib/lua/5.4 when installed, in build/ beside
     * build/models when loaded from the build tree */
    char self[PATH_MAX], lib[PATH_MAX];
    ssize_t sn = readlink("/proc/self/exe", self, sizeof self - 1);
    self[sn > 0 ? sn : 0] = 0;
    if (module_path(lib, sizeof lib) && strcmp(lib, self) != 0) {
        dirname_of(lib);
        dirs_add(d, "%s%s/models", lib, NULL);
        dirs_add(d, "%s%s/../share/lumen/models", lib, NULL);
        dirs_add(d, "%s%s/../../../share/lumen/models", lib, NULL);
    }
}

/* "a, b, c" of the packages in the folders (names with models/ inside) */
static void list_packages(const lm_model_dirs *d, char *out, size_t n)
{
    out[0] = 0;
    size_t used = 0;
    for (int i = 0; i < d->n; i++) {
        DIR *dir = opendir(d->dir[i]);
        for (struct dirent *e; dir && (e = readdir(dir));) {
            char p[2048];
            if (e->d_name[0] == '.') continue;
            fmt(p, sizeof p, "%s/%s/models", d->dir[i], e->d_name);
            char item[300];
            fmt(item, sizeof item, ", %s, ", e->d_name);
            char seen[2100];
            fmt(seen, sizeof seen, ", %s, ", out);
            if (!is_dir(p) || strstr(seen, item)) continue;
            if (!fmt(out + used, n - used, "%s%s", used ? ", " : "", e->d_name)) {
                out[used] = 0;
                break;
            }
            used = strlen(out);
        }
        if (dir) closedir(dir);
    }
}

/* ---- the range a package declares ---- */

typedef struct def_file {
    char path[1024];
    char *text;
} def_file;

typedef struct def_set {
    def_file f[MAX_DEF_FILES];
    int n;
} def_set;

static char *read_text(const char *path)
{
    /* lm_dfs_read: a FIFO in the package is refused, never waited on */
    char *t = NULL;
    size_t n;
    if (lm_dfs_read(path, MAX_DEF_BYTES, &t, &n) != LM_OK) {
        lm_error_clear();
        return NULL;
    }
    return t;
}

/* a relative import: as written, + ".js", or + "/index.js" */
static bool resolve_import(const char *from, const char *spec, size_t len, char *out, size_t n)
{
    char dir[1024];
    fmt(dir, sizeof dir, "%s", from);
    dirname_of(dir);
    static const char *const tails[] = {"", ".js", "/index.js"};
    for (int i = 0; i < 3; i++) {
        if (!fmt(out, n, "%s/%.*s%s", dir, (int)len, spec, tails[i])) return false;
        if (is_file(out)) return true;
    }
    return false;
}

static void def_load(def_set *s, const char *path)
{
    if (s->n >= MAX_DEF_FILES) return;
    char real[PATH_MAX];
    if (!realpath(path, real)) return;
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->f[i].path, real)) return;
    char *t = read_text(real);
    if (!t) return;
    def_file *f = &s->f[s->n++];
    fmt(f->path, sizeof f->path, "%s", real);
    f->text = t;
    /* from './x' / from "../y" / require('./z') / import './w' */
    static const char *const keys[] = {"from", "require(", "import"};
    for (int k = 0; k < 3; k++)
        for (const char *p = strstr(t, keys[k]); p; p = strstr(p + 1, keys[k])) {
            const char *q = p + strlen(keys[k]);
            while (*q == ' ' || *q == '\t') q++;
            if ((*q != '\'' && *q != '"') || q[1] != '.') continue;
            const char *end = strchr(q + 1, *q);
            char next[1024];
            if (end && resolve_import(real, q + 1, (size_t)(end - q - 1), next, sizeof next))
                def_load(s, next);
        }
}

static const char *skip_ws(const char *p)
{
    while (isspace((unsigned char)*p)) p++;
    return p;
}

/* `key: [lo, hi]` (a trailing comma allowed) at p; false if it is not that */
static bool read_pair(const char *p, double v[2])
{
    p = skip_ws(p);
    if (*p++ != ':') return false;
    p = skip_ws(p);
    if (*p++ != '[') return false;
    for (int i = 0; i < 2; i++) {
        char *end;
        v[i] = strtod(skip_ws(p), &end);
        if (end == skip_ws(p)) return false;
        p = skip_ws(end);
        if (i == 0 && *p++ != ',') return false;
    }
    if (*p == ',') p = skip_ws(p + 1);
    return *p == ']';
}

/* the end of the block that starts at the first '{' after p */
static const char *block_end(const char *p)
{
    p = strchr(p, '{');
    for (int depth = 0; p && *p; p++) {
        if (*p == '{') depth++;
        else if (*p == '}' && --depth == 0) return p;
    }
    return NULL;
}

/* the quoted value after `key` (`architecture: "rdn"`) into out */
static bool quoted_after(const char *p, char *out, size_t n)
{
    p = skip_ws(p);
    if (*p != '\'' && *p != '"') return false;
    const char *end = strchr(p + 1, *p);
    if (!end || (size_t)(end - p - 1) >= n) return false;
    memcpy(out, p + 1, (size_t)(end - p - 1));
    out[end - p - 1] = 0;
    return true;
}

/* Which of a key's [lo, hi] literals applies: those inside an
 * `if (architecture === 'X') {...}` for the architecture the package names,
 * else those outside any such block.  false when none or when they differ. */
static bool pick_range(const def_set *s, const char *key, const char *arch, double out[2],
                       int *file)
{
    int found = 0;
    for (int pass = 0; pass < 2 && !found; pass++)
        for (int i = 0; i < s->n; i++) {
            const char *t = s->f[i].text;
            size_t kl = strlen(key);
            for (const char *p = strstr(t, key); p; p = strstr(p + 1, key)) {
                double v[2];
                if (!read_pair(p + kl, v)) continue;
                /* the architecture block it lies in, if any */
                char cond[64] = "";
                for (const char *c = strstr(t, "architecture ==="); c && c < p;
                     c = strstr(c + 1, "architecture ===")) {
                    const char *e = block_end(c);
                    char name[64];
                    if (e && p < e && quoted_after(c + 16, name, sizeof name))
                        fmt(cond, sizeof cond, "%s", name);
                }
                bool want = pass == 0 ? (arch[0] && !strcmp(cond, arch)) : !cond[0];
                if (!want) continue;
                if (found && (v[0] != out[0] || v[1] != out[1])) return false;
                out[0] = v[0], out[1] = v[1];
                if (!found++) *file = i;
            }
        }
    return found > 0;
}

/* the package folder holding a model.json: up to three folders up, the
 * first with a package.json */
static bool package_of(const char *model_json, char *pkg, size_t n)
{
    char p[1024];
    fmt(p, sizeof p, "%s", model_json);
    for (int up = 0; up < 4; up++) {
        dirname_of(p);
        char pj[1100];
        fmt(pj, sizeof pj, "%s/package.json", p);
        if (is_file(pj)) {
            fmt(pkg, n, "%s", p);
            return true;
        }
        if (!strchr(p, '/') || !strcmp(p, "/")) break;
    }
    return false;
}

/* The file package.json exports for scale s ("./4x"), else its main entry */
static bool package_entry(const char *pkg, int scale, char *out, size_t n)
{
    char pj[1100];
    fmt(pj, sizeof pj, "%s/package.json", pkg);
    char *text = read_text(pj);
    cJSON *j = text ? lm_dfs_parse(text, strlen(text), pj) : NULL;
    if (!j) lm_error_clear();
    free(text);
    if (!j) return false;
    const char *rel = NULL;
    char sub[32];
    fmt(sub, sizeof sub, "./%dx", scale);
    const cJSON *ex = cJSON_GetObjectItemCaseSensitive(j, "exports");
    const cJSON *e = ex ? cJSON_GetObjectItemCaseSensitive(ex, sub) : NULL;
    if (!e && ex) e = cJSON_GetObjectItemCaseSensitive(ex, ".");
    if (cJSON_IsString(e)) rel = e->valuestring;
    static const char *const conds[] = {"import", "require", "default", "module"};
    for (int i = 0; i < 4 && !rel && cJSON_IsObject(e); i++) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, conds[i]);
        if (cJSON_IsString(c)) rel = c->valuestring;
    }
    static const char *const mains[] = {"module", "main"};
    for (int i = 0; i < 2 && !rel; i++) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, mains[i]);
        if (cJSON_IsString(c)) rel = c->valuestring;
    }
    bool ok = false;
    if (rel) {
        if (!strncmp(rel, "./", 2)) rel += 2;
        ok = fmt(out, n, "%s/%s", pkg, rel) && is_file(out);
    }
    cJSON_Delete(j);
    return ok;
}

/* The range declared by the package a model.json sits in.  1 = read (range
 * and the file it came from set), 0 = no package around the model, -1 = a
 * package whose definition could not be read (why in `why`). */
static int package_range(const char *model_json, int scale, double *range, char *from,
                         size_t fn, char *why, size_t wn)
{
    char pkg[1024], entry[1200];
    if (!package_of(model_json, pkg, sizeof pkg)) return 0;
    if (!package_entry(pkg, scale, entry, sizeof entry)) {
        fmt(why, wn, "%s/package.json names no model definition that exists", pkg);
        return -1;
    }
    def_set *s = calloc(1, sizeof *s);
    if (!s) {
        fmt(why, wn, "out of memory");
        return -1;
    }
    def_load(s, entry);
    char arch[64] = "";
    for (int i = 0; i < s->n && !arch[0]; i++)
        for (const char *p = strstr(s->f[i].text, "architecture:"); p && !arch[0];
             p = strstr(p + 1, "architecture:"))
            quoted_after(p + 13, arch, sizeof arch);
    double in[2], out[2];
    int file = 0, ofile = 0;
    bool ok_in = pick_range(s, "inputRange", arch, in, &file);
    bool ok_out = pick_range(s, "outputRange", arch, out, &ofile);
    int rc = -1;
    if (!ok_in || !ok_out)
        fmt(why, wn, "%s (and the files it imports) declare no single inputRange and "
                 "outputRange", entry);
    else if (in[0] != 0 || out[0] != 0 || in[1] != out[1] || !(in[1] > 0))
        fmt(why, wn, "%s declares inputRange [%g, %g] and outputRange [%g, %g]; lumen "
                 "supports one range [0, R]", entry, in[0], in[1], out[0], out[1]);
    else {
        *range = in[1];
        fmt(from, fn, "%s", s->f[file].path);
        rc = 1;
    }
    for (int i = 0; i < s->n; i++) free(s->f[i].text);
    free(s);
    return rc;
}

static double known_range(const char *path, const char **name)
{
    for (size_t i = 0; i < sizeof known / sizeof *known; i++) {
        const char *p = strstr(path, known[i].name);
        size_t n = strlen(known[i].name);
        if (p && (p[n] == 0 || p[n] == '/')) {
            *name = known[i].name;
            return known[i].range;
        }
    }
    *name = NULL;
    return 1;
}

/* Sets f->range and f->range_from for the model at f->path */
static void find_range(lm_tfjs_found *f, int scale)
{
    char why[600] = "";
    const char *name;
    int rc = package_range(f->path, scale, &f->range, f->range_from, sizeof f->range_from, why,
                           sizeof why);
    if (rc == 1) return;
    f->range = known_range(f->path, &name);
    if (name)
        fmt(f->range_from, sizeof f->range_from, "known package %s", name);
    else
        fmt(f->range_from, sizeof f->range_from, "default");
    if (rc < 0)
        fprintf(stderr, "lumen: warning: cannot read the value range of %s: %s; using 0..%g "
                "(%s; --range or range= to set it)\n", f->path, why, f->range, f->range_from);
}

lm_status lm_tfjs_find(const char *model, int scale, lm_tfjs_found *f)
{
    memset(f, 0, sizeof *f);
    f->range = 1;
    if (!model || !*model) return lm_error_set(LM_ERR_ARG, "upscale: no model given");
    size_t len = strlen(model);
    bool is_path = strchr(model, '/') || (len > 5 && !strcmp(model + len - 5, ".json")) ||
                   (len > 12 && !strcmp(model + len - 12, ".safetensors"));
    char pkg[1024] = "";
    if (is_path && is_dir(model)) {
        fmt(pkg, sizeof pkg, "%s", model);   /* a package folder of one's own */
    } else if (is_path) {
        if (!fmt(f->path, sizeof f->path, "%s", model))
            return lm_error_set(LM_ERR_ARG, "upscale: model path too long");
        if (!is_file(f->path) || access(f->path, R_OK) != 0)
            return lm_error_set(LM_ERR_IO, "upscale: model file '%s' cannot be read%s", f->path,
                                is_file(f->path) ? "" : " (no such regular file)");
        if (len > 12 && !strcmp(model + len - 12, ".safetensors"))
            fmt(f->range_from, sizeof f->range_from, "default");
        else find_range(f, scale);
        return LM_OK;
    } else {
        lm_model_dirs d;
        lm_tfjs_model_dirs(&d);
        for (int i = 0; i < d.n && !pkg[0]; i++) {
            char p[1100];
            fmt(p, sizeof p, "%s/%s", d.dir[i], model);
            if (is_dir(p)) fmt(pkg, sizeof pkg, "%s", p);
        }
        if (!pkg[0]) {
            char where[600] = "", have[400];
            for (int i = 0; i < d.n; i++) {
                size_t u = strlen(where);
                fmt(where + u, sizeof where - u, "%s%s", i ? ", " : "", d.dir[i]);
            }
            list_packages(&d, have, sizeof have);
            if (have[0])
                return lm_error_set(LM_ERR_IO, "upscale: no model '%s'; installed: %s "
                                    "(looked in %s)", model, have, where);
            return lm_error_set(LM_ERR_IO, "upscale: model '%s' is not installed: run `make "
                                "models` (and `make install`), or set LUMEN_MODELS to the folder "
                                "that holds it (looked in %s)", model, where);
        }
    }
    if (!fmt(f->path, sizeof f->path, "%s/models/x%d/model.json", pkg, scale))
        return lm_error_set(LM_ERR_ARG, "upscale: model path too long");
    if (!is_file(f->path)) {
        char one[1100];
        fmt(one, sizeof one, "%s/models/model.json", pkg);
        if (!is_file(one))
            return lm_error_set(LM_ERR_IO, "upscale: model '%s' has no x%d (%s is missing)",
                                model, scale, f->path);
        fmt(f->path, sizeof f->path, "%s", one);
    }
    find_range(f, scale);
    return LM_OK;
}
