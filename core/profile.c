/* profile.c - per-kernel rows for lm_profile_* (see profile.h).
 *
 * A node's time may arrive after the node ran (a GPU reports its dispatches
 * when the submit's fence signals, possibly after several nodes), so each
 * node run while profiling is first an entry: its key (op, kernel, shapes,
 * dtype, device) and the time gathered so far.  When the outermost
 * evaluation has synced its devices every entry is complete; each is then
 * added to the rows of every open session and the entries are dropped. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "internal.h"
#include "fused.h"
#include "profile.h"

typedef struct {
    lm_profile_row key;      /* op, kernel, shape, dtype, device; the rest unused */
    char names[96];          /* kernels the backend named */
    bool device_timed, host_only, dropped, got_time;
    double t0, host_ms, dev_ms, child_ms;
} entry;

typedef struct {
    lm_profile_row *rows;
    int n, cap;
    int64_t evals;
    char notes[256];
} session;

static session sessions[LM_PROFILE_DEPTH];
static int depth;
static entry *entries;
static int64_t nentries, entries_cap;
static int64_t current = -1;       /* the entry of the node running now */
typedef enum { ENV_OFF, ENV_EVAL, ENV_TOTAL } env_mode;
static env_mode env;

double lm_profile_now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int lm_profile_depth(void) { return depth; }

static void sync_all(void)
{
    for (int i = 0; i < lm_device_count(); i++)
        if (lm_device_sync(lm_device_at(i)) != LM_OK) lm_error_clear();
}

lm_status lm_profile_begin(void)
{
    if (depth == LM_PROFILE_DEPTH)
        return lm_error_set(LM_ERR_STATE, "profile: more than %d profiles open at once", LM_PROFILE_DEPTH);
    sync_all();
    memset(&sessions[depth], 0, sizeof sessions[depth]);
    depth++;
    return LM_OK;
}

static void copy_str(char *dst, size_t n, const char *src)
{
    snprintf(dst, n, "%s", src ? src : "");
}

/* ---- rows ---- */

static bool same_key(const lm_profile_row *a, const lm_profile_row *b)
{
    return !strcmp(a->op, b->op) && !strcmp(a->kernel, b->kernel) && !strcmp(a->shape, b->shape) &&
           !strcmp(a->dtype, b->dtype) && !strcmp(a->device, b->device) && !strcmp(a->timer, b->timer);
}

static void row_merge(lm_profile_row *dst, const lm_profile_row *src)
{
    if (src->min_ms < dst->min_ms) dst->min_ms = src->min_ms;
    if (src->max_ms > dst->max_ms) dst->max_ms = src->max_ms;
    dst->count += src->count;
    dst->bytes += src->bytes;
    dst->total_ms += src->total_ms;
    dst->host_ms += src->host_ms;
}

/* one node's or transfer's time, as a row of count 1, into every open session */
static void add_sample(const lm_profile_row *key, const char *timer, double ms, double host_ms, int64_t bytes)
{
    lm_profile_row one = *key;
    copy_str(one.timer, sizeof one.timer, timer);
    one.count = 1;
    one.bytes = bytes;
    one.total_ms = one.min_ms = one.max_ms = ms < 0 ? 0 : ms;
    one.host_ms = host_ms;
    for (int k = 0; k < depth; k++) {
        session *s = &sessions[k];
        int i = 0;
        while (i < s->n && !same_key(&s->rows[i], &one)) i++;
        if (i < s->n) {
            row_merge(&s->rows[i], &one);
            continue;
        }
        if (s->n == s->cap) {
            int nc = s->cap ? s->cap * 2 : 64;
            lm_profile_row *nr = realloc(s->rows, (size_t)nc * sizeof *nr);
            if (!nr) continue;   /* a profile short of a row beats a failed evaluation */
            s->rows = nr;
            s->cap = nc;
        }
        s->rows[s->n++] = one;
    }
}

void lm_profile_note(const char *text)
{
    for (int k = 0; k < depth; k++) {
        session *s = &sessions[k];
        if (strstr(s->notes, text)) continue;
        size_t used = strlen(s->notes);
        snprintf(s->notes + used, sizeof s->notes - used, "%s%s", used ? "; " : "", text);
    }
}

/* ---- nodes ---- */

static void shape_of(char *buf, size_t n, const lm_array *a)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < a->ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)a->shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

static void key_of(entry *e, const lm_array *a, lm_profile_kind kind)
{
    char s[48];
    size_t k = 0, n = sizeof e->key.shape;
    int shown = a->ninputs < 4 ? a->ninputs : 4;
    for (int i = 0; i < shown && k < n; i++) {
        shape_of(s, sizeof s, a->inputs[i]);
        k += (size_t)snprintf(e->key.shape + k, n - k, "%s ", s);
    }
    if (a->ninputs > shown && k < n) k += (size_t)snprintf(e->key.shape + k, n - k, "+%d ", a->ninputs - shown);
    shape_of(s, sizeof s, a);
    if (k < n) snprintf(e->key.shape + k, n - k, "%s%s", a->ninputs ? "-> " : "", s);
    copy_str(e->key.op, sizeof e->key.op, lm_op_name(a->op));
    lm_dtype in = a->ninputs ? a->inputs[0]->dtype : a->dtype;
    if (in != a->dtype) snprintf(e->key.dtype, sizeof e->key.dtype, "%s->%s", lm_dtype_name(in), lm_dtype_name(a->dtype));
    else copy_str(e->key.dtype, sizeof e->key.dtype, lm_dtype_name(a->dtype));
    if (kind == LM_PROFILE_FALLBACK) {
        copy_str(e->key.device, sizeof e->key.device, "cpu");
        snprintf(e->key.kernel, sizeof e->key.kernel, "fallback from %s", a->device->spec);
    } else {
        copy_str(e->key.device, sizeof e->key.device, a->device->spec);
    }
    if (a->op == LM_OP_FUSED && a->params.ext) {
        const lm_fused *f = a->params.ext;
        k = (size_t)snprintf(e->key.kernel, sizeof e->key.kernel, "fused(");
        for (int i = 0; i < f->nsteps && k < sizeof e->key.kernel; i++)
            k += (size_t)snprintf(e->key.kernel + k, sizeof e->key.kernel - k, "%s%s", i ? "," : "",
                                  lm_op_name(f->steps[i].op));
        if (k < sizeof e->key.kernel) snprintf(e->key.kernel + k, sizeof e->key.kernel - k, ")");
    }
}

void lm_profile_node_begin(const lm_array *node, lm_profile_kind kind)
{
    if (!depth) return;
    if (nentries == entries_cap) {
        int64_t nc = entries_cap ? entries_cap * 2 : 256;
        entry *ne = realloc(entries, (size_t)nc * sizeof *ne);
        if (!ne) return;
        entries = ne;
        entries_cap = nc;
    }
    entry *e = &entries[nentries];
    memset(e, 0, sizeof *e);
    key_of(e, node, kind);
    current = nentries++;
    e->host_only = kind == LM_PROFILE_FALLBACK;
    e->t0 = lm_profile_now_ms();
}

void lm_profile_node_end(bool ok)
{
    if (current < 0) return;
    entry *e = &entries[current];
    e->host_ms = lm_profile_now_ms() - e->t0 - e->child_ms;
    if (e->host_ms < 0) e->host_ms = 0;
    e->dropped = !ok;
    char *kernel = e->key.kernel;
    if (e->names[0]) {
        if (!kernel[0]) copy_str(kernel, sizeof e->key.kernel, e->names);
        else {
            size_t k = strlen(kernel);
            snprintf(kernel + k, sizeof e->key.kernel - k, " [%s]", e->names);
        }
    }
    current = -1;
}

void lm_profile_kernel_name(const char *name)
{
    if (current < 0 || !name) return;
    entry *e = &entries[current];
    size_t len = strlen(name);
    for (const char *p = e->names; (p = strstr(p, name)); p += len)
        if ((p == e->names || p[-1] == '+') && (p[len] == 0 || p[len] == '+')) return;
    size_t k = strlen(e->names);
    snprintf(e->names + k, sizeof e->names - k, "%s%s", k ? "+" : "", name);
}

int64_t lm_profile_device_entry(void)
{
    if (current < 0 || entries[current].host_only) return -1;
    entries[current].device_timed = true;
    return current;
}

void lm_profile_device_time(int64_t id, double ms)
{
    if (id < 0 || id >= nentries) return;
    entries[id].dev_ms += ms;
    entries[id].got_time = true;
}

/* every entry's time into the open sessions' rows */
static void settle(void)
{
    for (int64_t i = 0; i < nentries; i++) {
        const entry *e = &entries[i];
        if (e->dropped) continue;
        /* a device that could not time its kernels: "none" (its submits are rows) */
        const char *timer = !e->device_timed ? "host" : e->got_time ? "gpu" : "none";
        add_sample(&e->key, timer, e->device_timed ? e->dev_ms : e->host_ms, e->host_ms, 0);
    }
    nentries = 0;
    current = -1;
}

void lm_profile_eval_end(bool top)
{
    if (!top) return;
    settle();
    for (int k = 0; k < depth; k++) sessions[k].evals++;
    /* transfers outside an evaluation (reading a value back) are in the next report */
    bool report = env == ENV_EVAL && depth && sessions[0].n;
    if (!report) return;
    /* LUMEN_PROFILE=1: the outermost session is the environment's; it
     * reports and starts again */
    int d = depth;
    depth = 1;
    lm_profile *p = lm_profile_end();
    depth = d;
    if (p) {
        char *text = lm_profile_format(p, 0);
        if (text) fputs(text, stderr);
        free(text);
        lm_profile_free(p);
    }
}

/* ---- host-timed pieces ---- */

void lm_profile_host(const char *op, const char *kernel, const lm_device *d, double ms, int64_t bytes)
{
    if (!depth) return;
    lm_profile_row key = {0};
    copy_str(key.op, sizeof key.op, op);
    copy_str(key.device, sizeof key.device, d->spec);
    copy_str(key.kernel, sizeof key.kernel, kernel);
    if (current >= 0) entries[current].child_ms += ms;
    add_sample(&key, "host", ms, ms, bytes);
}

/* ---- closing and reporting ---- */

static int by_total(const void *a, const void *b)
{
    const lm_profile_row *x = a, *y = b;
    return x->total_ms < y->total_ms ? 1 : x->total_ms > y->total_ms ? -1 : 0;
}

lm_profile *lm_profile_end(void)
{
    if (!depth) return lm_error_set(LM_ERR_STATE, "profile: no profile is open"), NULL;
    sync_all();
    settle();   /* nodes run outside an evaluation (none today) */
    session *s = &sessions[--depth];
    lm_profile *p = calloc(1, sizeof *p);
    if (!p) {
        free(s->rows);
        return lm_error_set(LM_ERR_NOMEM, "profile: out of host memory"), NULL;
    }
    p->rows = s->rows;
    p->nrows = s->n;
    p->evals = s->evals;
    copy_str(p->notes, sizeof p->notes, s->notes);
    if (p->nrows) qsort(p->rows, (size_t)p->nrows, sizeof *p->rows, by_total);
    for (int i = 0; i < p->nrows; i++) p->total_ms += p->rows[i].total_ms;
    memset(s, 0, sizeof *s);
    return p;
}

void lm_profile_group(lm_profile *p, lm_profile_by by)
{
    if (by == LM_PROFILE_BY_SHAPE) return;
    int n = 0;
    for (int i = 0; i < p->nrows; i++) {
        lm_profile_row r = p->rows[i];
        r.shape[0] = 0;
        if (by == LM_PROFILE_BY_OP) r.kernel[0] = 0;
        int k = 0;
        while (k < n && !same_key(&p->rows[k], &r)) k++;
        if (k == n) {
            p->rows[n++] = r;
            continue;
        }
        row_merge(&p->rows[k], &r);
    }
    p->nrows = n;
    if (n) qsort(p->rows, (size_t)n, sizeof *p->rows, by_total);
}

void lm_profile_free(lm_profile *p)
{
    if (!p) return;
    free(p->rows);
    free(p);
}

typedef struct { char *s; size_t n, cap; bool failed; } text;

static void put(text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (t->failed || k < 0) return;
    if (t->n + (size_t)k + 1 > t->cap) {
        size_t nc = (t->cap + (size_t)k + 1) * 2;
        char *ns = realloc(t->s, nc);
        if (!ns) { t->failed = true; return; }
        t->s = ns;
        t->cap = nc;
    }
    va_start(ap, fmt);
    vsnprintf(t->s + t->n, t->cap - t->n, fmt, ap);
    va_end(ap);
    t->n += (size_t)k;
}

static void bytes_str(char *buf, size_t n, int64_t b)
{
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024 && u < 4) { v /= 1024; u++; }
    snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", v, units[u]);
}

static int width(const lm_profile *p, size_t off, int least, int most)
{
    int w = least;
    for (int i = 0; i < p->nrows; i++) {
        int k = (int)strlen((const char *)&p->rows[i] + off);
        if (k > w) w = k;
    }
    return w < most ? w : most;
}

char *lm_profile_format(const lm_profile *p, int max_rows)
{
    text t = {0};
    int64_t count = 0;
    for (int i = 0; i < p->nrows; i++) count += p->rows[i].count;
    put(&t, "lumen profile: %lld evaluation%s, %lld kernels and transfers, %.3f ms in all\n",
        (long long)p->evals, p->evals == 1 ? "" : "s", (long long)count, p->total_ms);
    if (p->notes[0]) put(&t, "  note: %s\n", p->notes);
    int wop = width(p, offsetof(lm_profile_row, op), 2, 31);
    int wk = width(p, offsetof(lm_profile_row, kernel), 6, 48);
    int wdev = width(p, offsetof(lm_profile_row, device), 6, 31);
    int wdt = width(p, offsetof(lm_profile_row, dtype), 5, 23);
    /* where a device timed the kernels, the host's time recording them too
     * (a launch cost the GPU time does not show) */
    bool device_rows = false;
    for (int i = 0; i < p->nrows; i++) device_rows |= strcmp(p->rows[i].timer, "host") != 0;
    put(&t, "  %-*s %-*s %-*s %-*s %-5s %7s %10s %6s %9s %9s %9s%s  %s\n", wop, "op", wk, "kernel", wdev,
        "device", wdt, "dtype", "timer", "count", "total ms", "%", "mean ms", "min ms", "max ms",
        device_rows ? "   host ms" : "", "shape");
    int shown = max_rows > 0 && max_rows < p->nrows ? max_rows : p->nrows;
    for (int i = 0; i < shown; i++) {
        const lm_profile_row *r = &p->rows[i];
        char shape[200];
        if (r->bytes) {
            bytes_str(shape, sizeof shape, r->bytes);
            if (r->total_ms > 0 && (!strcmp(r->op, "upload") || !strcmp(r->op, "download"))) {
                size_t k = strlen(shape);
                snprintf(shape + k, sizeof shape - k, " (%.2f GB/s)", (double)r->bytes / (r->total_ms * 1e6));
            }
        } else {
            copy_str(shape, sizeof shape, r->shape);
        }
        char host[16] = "";
        if (device_rows) snprintf(host, sizeof host, " %9.3f", r->host_ms);
        put(&t, "  %-*.*s %-*.*s %-*.*s %-*.*s %-5s %7lld %10.3f %6.1f %9.3f %9.3f %9.3f%s  %s\n", wop, wop,
            r->op, wk, wk, r->kernel, wdev, wdev, r->device, wdt, wdt, r->dtype, r->timer,
            (long long)r->count, r->total_ms, p->total_ms > 0 ? 100.0 * r->total_ms / p->total_ms : 0.0,
            r->count ? r->total_ms / (double)r->count : 0.0, r->min_ms, r->max_ms, host, shape);
    }
    if (shown < p->nrows) {
        double rest = 0;
        for (int i = shown; i < p->nrows; i++) rest += p->rows[i].total_ms;
        put(&t, "  ... %d more rows, %.3f ms (%.1f%%)\n", p->nrows - shown, rest,
            p->total_ms > 0 ? 100.0 * rest / p->total_ms : 0.0);
    }
    if (t.failed) {
        free(t.s);
        return NULL;
    }
    return t.s;
}

/* ---- LUMEN_PROFILE ---- */

static void report_at_exit(void)
{
    if (!depth) return;
    depth = 1;   /* sessions left open by a script that failed are not the environment's */
    lm_profile *p = lm_profile_end();
    if (!p) return;
    char *s = lm_profile_format(p, 0);
    if (s) fputs(s, stderr);
    free(s);
    lm_profile_free(p);
}

void lm_profile_init_env(void)
{
    const char *e = getenv("LUMEN_PROFILE");
    if (!e || !*e || !strcmp(e, "0")) return;
    env = !strcmp(e, "total") ? ENV_TOTAL : ENV_EVAL;
    if (strcmp(e, "1") && strcmp(e, "total"))
        fprintf(stderr, "lumen: LUMEN_PROFILE=%s: expected 1 (a report per evaluation) or total "
                "(one at exit); reporting per evaluation\n", e);
    if (lm_profile_begin() != LM_OK) return;
    if (env == ENV_TOTAL) atexit(report_at_exit);
}
