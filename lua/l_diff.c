/* l_diff.c - comparison sessions: lm.diff runs a function two ways (or
 * against a saved dump) and reports node by node where it starts to differ
 * and which node adds the error; lm.trace and LUMEN_DUMP save every
 * intermediate.  core/trace.h records and replays the graph; this file
 * calls the function, names the nodes after the Lua line that built them,
 * and writes the reports and dumps (docs/COMPARE.md "Comparison sessions").
 *
 * Memory: the two runs go node by node side by side, and a value is
 * dropped as soon as no later node reads it, so a diff holds what two
 * ordinary evaluations would, plus the node being re-run. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "l_internal.h"
#include "core/compare.h"
#include "core/compile.h"
#include "core/trace.h"
#include "core/io/io.h"
#include "core/io/image.h"

#define DIFF_MT "lumen.diff_report"

/* ---- where: the Lua line that builds each node ---- */

static const char *last_src;
static int last_line = -1;
static char scope[160];   /* lm.name_scope(name): a layer name instead of lines */

static void where_from(lua_Debug *ar)
{
    if (scope[0]) return;
    if (ar->currentline <= 0 || (ar->source == last_src && ar->currentline == last_line)) return;
    last_src = ar->source;
    last_line = ar->currentline;
    const char *s = ar->source, *base = s;
    if (*s == '@' || *s == '=') {
        base = ++s;
        for (const char *p = s; *p; p++)
            if (*p == '/') base = p + 1;
    } else {
        base = "input";
    }
    char buf[160];
    snprintf(buf, sizeof buf, "%.120s:%d", base, ar->currentline);
    lm_where_set(buf);
}

/* The user's code: a file ("@x.lua"), -e ("=(command line)") or stdin
 * ("=stdin"), as stock lua names them; not lumen's own embedded Lua
 * ("=lumen/l_batch.lua", the REPL's "=repl" and "=:diff" wrappers). */
static bool user_chunk(const char *src)
{
    if (src[0] == '@') return true;
    return src[0] == '=' && strncmp(src, "=lumen/", 7) && strcmp(src, "=repl") && strcmp(src, "=:diff");
}

/* Lines of C functions and of lumen's own embedded Lua are skipped: the
 * location stays the user's line that called them. */
static void where_hook(lua_State *L, lua_Debug *ar)
{
    if (ar->event == LUA_HOOKRET) {
        lua_Debug up;
        if (!lua_getstack(L, 1, &up) || !lua_getinfo(L, "Sl", &up) || !user_chunk(up.source)) return;
        where_from(&up);
        return;
    }
    if (!lua_getinfo(L, "Sl", ar) || !user_chunk(ar->source)) return;
    where_from(ar);
}

typedef struct hook_save {
    lua_Hook fn;
    int mask, count;
    lm_compile_mode mode;
    const char *where;
    char scope[sizeof scope];
} hook_save;

static void where_begin(lua_State *L, hook_save *s)
{
    s->fn = lua_gethook(L);
    s->mask = lua_gethookmask(L);
    s->count = lua_gethookcount(L);
    s->mode = lm_compile_get_mode();
    s->where = lm_where_get();
    memcpy(s->scope, scope, sizeof scope);
    last_src = NULL;
    lm_compile_set_mode(LM_COMPILE_OFF);   /* compiled functions inside build plain graphs */
    if (!s->fn) lua_sethook(L, where_hook, LUA_MASKLINE | LUA_MASKRET, 0);
}

static void where_end(lua_State *L, const hook_save *s)
{
    if (lua_gethook(L) == where_hook) lua_sethook(L, s->fn, s->mask, s->count);
    lm_compile_set_mode(s->mode);
    lm_where_set(s->where);
    last_src = NULL;
    memcpy(scope, s->scope, sizeof scope);   /* a layer name the function left set ends with it */
}

/* ---- calling the function ---- */

/* the tensors of a result: appends the tensor at idx, or every tensor
 * value of the table at idx (a list in order, then a map's string keys
 * sorted, so a run names its outputs the same way each time) */
typedef struct outs { lm_array **v; int n, cap; } outs;

static void outs_add(lua_State *L, outs *o, lm_array *a)
{
    if (o->n == o->cap) {
        int nc = o->cap ? 2 * o->cap : 16;
        lm_array **nv = lua_newuserdatauv(L, sizeof *nv * (size_t)nc, 0);   /* freed with the stack */
        if (o->n) memcpy(nv, o->v, sizeof *nv * (size_t)o->n);
        lua_setfield(L, LUA_REGISTRYINDEX, "lumen.diff_outs");
        o->v = nv;
        o->cap = nc;
    }
    o->v[o->n++] = a;
}

static int cmp_key(const void *x, const void *y) { return strcmp(*(char *const *)x, *(char *const *)y); }

static void outs_from(lua_State *L, int idx, outs *o)
{
    lm_lua_tensor *t = lm_lua_testtensor(L, idx);
    if (t) {
        if (t->a) outs_add(L, o, t->a);
        return;
    }
    if (!lua_istable(L, idx)) return;
    lua_Integer len = (lua_Integer)lua_rawlen(L, idx);
    for (lua_Integer j = 1; j <= len; j++) {
        lua_rawgeti(L, idx, j);
        lm_lua_tensor *u = lm_lua_testtensor(L, -1);
        lua_pop(L, 1);   /* the table still holds it */
        if (u && u->a) outs_add(L, o, u->a);
    }
    /* the map part: string keys, sorted */
    int nk = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) == LUA_TSTRING) nk++;
    }
    if (!nk) return;
    const char **keys = lua_newuserdatauv(L, sizeof *keys * (size_t)nk, 0);
    int kidx = lua_gettop(L);
    lua_createtable(L, nk, 0);   /* anchors the key strings */
    int k = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) != LUA_TSTRING) continue;
        lua_pushvalue(L, -1);
        lua_rawseti(L, kidx + 1, k + 1);
        keys[k++] = lua_tostring(L, -1);
    }
    qsort(keys, (size_t)nk, sizeof *keys, cmp_key);
    for (k = 0; k < nk; k++) {
        lua_getfield(L, idx, keys[k]);
        lm_lua_tensor *u = lm_lua_testtensor(L, -1);
        lua_pop(L, 1);
        if (u && u->a) outs_add(L, o, u->a);
    }
    lua_settop(L, kidx - 1);
}

/* Calls fn (a function or anything callable) with args (a tensor, a table
 * of arguments, or nil) and records the graph behind the tensors it
 * returns (directly, or in a table: a list or a map).  *inside gets the
 * kernels evaluations ran during the call (their graphs are gone: lm.diff
 * says so).  Leaves the results on the stack. */
static lm_trace *call_and_capture(lua_State *L, int fn, int args, const char *fname, int64_t *inside)
{
    int base = lua_gettop(L);
    lua_pushvalue(L, fn);
    int nargs = 0;
    if (lua_istable(L, args) && !lm_lua_testtensor(L, args)) {
        lua_Integer n = luaL_len(L, args);
        luaL_checkstack(L, (int)n + 4, fname);
        for (lua_Integer i = 1; i <= n; i++) lua_geti(L, args, i);
        nargs = (int)n;
    } else if (!lua_isnoneornil(L, args)) {
        lua_pushvalue(L, args);
        nargs = 1;
    }
    hook_save s;
    where_begin(L, &s);
    int64_t k0 = lm_eval_kernel_count();
    int rc = lua_pcall(L, nargs, LUA_MULTRET, 0);
    *inside = lm_eval_kernel_count() - k0;
    where_end(L, &s);
    if (rc != LUA_OK) lua_error(L);
    int top = lua_gettop(L);
    outs o = {0};
    for (int i = base + 1; i <= top; i++) outs_from(L, i, &o);
    if (o.n == 0)
        luaL_error(L, "%s: the function returned no tensor (%d value%s, none a tensor nor a table of tensors)",
                   fname, top - base, top - base == 1 ? "" : "s");
    lm_trace *t = lm_trace_capture(o.n, o.v);
    lua_pushnil(L);
    lua_setfield(L, LUA_REGISTRYINDEX, "lumen.diff_outs");
    if (!t) lm_lua_error(L);
    return t;
}

/* A configuration: a table {device=, dtype=, compile=}, or a dtype or
 * device name. */
static void read_config(lua_State *L, int opts, const char *field, lm_trace_config *c, const char *fname)
{
    static const char *const KNOWN[] = {"device", "dtype", "compile", NULL};
    lm_trace_config_init(c);
    if (!opts) return;
    lua_getfield(L, opts, field);
    int at = lua_gettop(L);
    if (lua_type(L, at) == LUA_TSTRING) {
        const char *s = lua_tostring(L, at);
        lm_dtype dt;
        if (lm_dtype_from_name(s, &dt)) c->dtype = dt;
        else if (!(c->device = lm_device_find(s))) luaL_error(L, "%s: %s = '%s' is neither a dtype nor a device", fname, field, s);
    } else if (lua_istable(L, at)) {
        lm_lua_check_opts(L, at, fname, KNOWN);
        const char *dev = lm_lua_opt_str(L, at, fname, "device", NULL);
        const char *dt = lm_lua_opt_str(L, at, fname, "dtype", NULL);
        if (dev && !(c->device = lm_device_find(dev))) luaL_error(L, "%s: no device '%s'", fname, dev);
        if (dt && !lm_dtype_from_name(dt, &c->dtype)) luaL_error(L, "%s: unknown dtype '%s'", fname, dt);
        c->compile = lm_lua_opt_bool(L, at, fname, "compile", false);
    } else if (!lua_isnil(L, at)) {
        luaL_error(L, "%s: %s must be a table {device=, dtype=, compile=}", fname, field);
    }
    lua_pop(L, 1);
}

static void config_str(const lm_trace_config *c, char *buf, size_t n)
{
    snprintf(buf, n, "%s%s%s%s%s", c->device ? c->device->spec : "", c->device ? " " : "",
             c->dtype != LM_DTYPE_COUNT ? lm_dtype_name(c->dtype) : "", c->dtype != LM_DTYPE_COUNT ? " " : "",
             c->compile ? "compiled" : "");
    size_t len = strlen(buf);
    if (len && buf[len - 1] == ' ') buf[len - 1] = 0;
    if (!buf[0]) snprintf(buf, n, "as built");
}

/* a growing string for the header (the LUMEN_DUMP file is written at
 * exit, when no Lua state may be at hand) */
typedef struct sbuf { char *p; size_t n, cap; bool failed; } sbuf;

static void sb_add(sbuf *b, const char *s, size_t n)
{
    if (b->failed) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = (b->cap ? b->cap * 2 : 4096) + n;
        char *np = realloc(b->p, nc);
        if (!np) { b->failed = true; return; }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

/* ---- the per-node results ---- */

typedef struct row {
    int into_a, into_b;          /* fused into that node (compiled run), else -1 */
    bool have, have_att;
    lm_compare_report r;         /* b (or the run) against a (or the reference) */
    lm_compare_report att;       /* b's op on a's inputs against a */
    double added;                /* the error the node adds itself (nmse; inf for NaN/Inf) */
    int64_t nan_a, inf_a, nan_b, inf_b;
    int ref;                     /* reference tensor index, -1 */
} row;

static double score(const lm_compare_report *r)
{
    if (r->nan_mismatch || r->inf_mismatch) return INFINITY;
    return isnan(r->nmse) ? 0 : r->nmse;
}

typedef struct session {
    lm_trace *t;
    lm_trace_run *ra, *rb;
    row *rows;
    lm_array *keep[4];           /* first: a, b; worst: a, b (for pictures) */
    lm_tensor_set ref;
    int *ref_kord;               /* ref's tensors by op and where, then execution order */
    bool ref_foreign;            /* written by another framework: pairs by layer only */
} session;

static void session_free(session *s)
{
    lm_trace_run_free(s->ra);
    lm_trace_run_free(s->rb);
    lm_trace_free(s->t);
    free(s->rows);
    for (int i = 0; i < 4; i++) lm_array_release(s->keep[i]);
    lm_tensor_set_free(&s->ref);
    free(s->ref_kord);
    memset(s, 0, sizeof *s);
}

static int session_gc(lua_State *L)
{
    session_free(luaL_checkudata(L, 1, "lumen.diff_session"));
    return 0;
}

static session *session_new(lua_State *L)
{
    session *s = lua_newuserdatauv(L, sizeof *s, 0);
    memset(s, 0, sizeof *s);
    if (luaL_newmetatable(L, "lumen.diff_session")) {
        lua_pushcfunction(L, session_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    return s;
}

static void keep_pair(session *s, int slot, lm_array *a, lm_array *b)
{
    lm_array_release(s->keep[slot]);
    lm_array_release(s->keep[slot + 1]);
    s->keep[slot] = lm_array_retain(a);
    s->keep[slot + 1] = lm_array_retain(b);
}

/* The reference tensor for node k: the same name, else (a dump from
 * another program, tools/torch_dump.py) the tensor whose location part
 * equals node k's where, for the last node of that where. */
/* dump names in execution order: by the leading index as a number (past
 * 9999 it has more digits), then as text */
static int dump_name_cmp(const char *a, const char *b)
{
    long ia = strtol(a, NULL, 10), ib = strtol(b, NULL, 10);
    return ia != ib ? (ia < ib ? -1 : 1) : strcmp(a, b);
}

/* "add.x.lua:3" of "0007.add.x.lua:3", "" when not a dump name */
static const char *kind_of(const char *name)
{
    const char *p = strchr(name, '.');
    return p && strchr(p + 1, '.') ? p + 1 : "";
}

static const lm_tensor_set *kind_set;
static int by_kind(const void *x, const void *y)
{
    const char *a = kind_set->names[*(const int *)x], *b = kind_set->names[*(const int *)y];
    int c = strcmp(kind_of(a), kind_of(b));
    return c ? c : dump_name_cmp(a, b);
}

/* The reference's tensor of this kind (op and where) that comes occ-th
 * (from 0) in execution order, -1 if none: the k-th add of x.lua:3 pairs
 * with the reference's k-th add there, whatever other nodes (lazy
 * creations, which a recording evaluates first; earlier evaluations in a
 * LUMEN_DUMP) moved the indices.  kord: the reference by kind, then
 * execution order. */
static int ref_kth(const lm_tensor_set *ref, const int *kord, const char *kind, int occ)
{
    int lo = 0, hi = ref->count;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (strcmp(kind_of(ref->names[kord[mid]]), kind) < 0) lo = mid + 1;
        else hi = mid;
    }
    int q = lo + occ;
    return q < ref->count && !strcmp(kind_of(ref->names[kord[q]]), kind) ? kord[q] : -1;
}

static int ref_for(const session *s, int k)
{
    char name[256];
    lm_trace_name(s->t, k, name, sizeof name);
    int i = s->ref_foreign ? -1 : lm_tensor_set_find(&s->ref, name);
    if (i >= 0) return i;
    const lm_trace_node *x = lm_trace_node_at(s->t, k);
    const char *w = x->where;
    if (!w) return -1;
    int occ = 0;
    for (int q = 0; q < k; q++) {
        const lm_trace_node *y = lm_trace_node_at(s->t, q);
        occ += y->where == w && y->op == x->op;
    }
    char kind[256];
    snprintf(kind, sizeof kind, "%s.%s", lm_op_name(x->op), w);
    if (s->ref_kord && (i = ref_kth(&s->ref, s->ref_kord, kind, occ)) >= 0) {
        const lm_array *r = s->ref.arrays[i];
        bool same = r->ndim == x->ndim;
        for (int d = 0; same && d < x->ndim; d++) same = r->shape[d] == x->shape[d];
        if (same) return i;   /* else not the same tensor: a layer's output may still pair below */
    }
    for (int q = k + 1; q < lm_trace_count(s->t); q++) {
        const char *wq = lm_trace_node_at(s->t, q)->where;
        if (wq == w) return -1;   /* not the last node of its layer */
    }
    for (int j = s->ref.count - 1; j >= 0; j--) {
        const char *p = strchr(s->ref.names[j], '.');
        p = p ? strchr(p + 1, '.') : NULL;
        if (p && !strcmp(p + 1, w)) return j;
    }
    return -1;
}

typedef struct diff_opts {
    lm_compare_opts cmp;
    bool attribute;
    const char *reference, *images;
} diff_opts;

/* Runs the session: node by node, a and b side by side (or a against the
 * reference), dropping each value once no later node reads it. */
static lm_status diff_run(session *s, const lm_trace_config *ca, const lm_trace_config *cb, const diff_opts *o)
{
    int n = lm_trace_count(s->t);
    s->rows = calloc((size_t)n + 1, sizeof *s->rows);
    if (!s->rows) return lm_error_set(LM_ERR_NOMEM, "diff: out of host memory");
    if (!(s->ra = lm_trace_run_start(s->t, ca))) return lm_error_status();
    if (!o->reference && !(s->rb = lm_trace_run_start(s->t, cb))) return lm_error_status();
    bool first_found = false;
    double worst = 0;
    for (int k = 0; k < n; k++) {
        row *w = &s->rows[k];
        const lm_trace_node *x = lm_trace_node_at(s->t, k);
        lm_array *va = NULL, *vb = NULL, *refv = NULL;
        w->ref = -1;
        if (lm_trace_run_step(s->ra, k, &va, &w->into_a) != LM_OK) return lm_error_prefix("diff: node %d (%s)", k + 1, lm_op_name(x->op));
        if (s->rb) {
            if (lm_trace_run_step(s->rb, k, &vb, &w->into_b) != LM_OK)
                return lm_error_prefix("diff: node %d (%s) under b", k + 1, lm_op_name(x->op));
        } else {
            w->into_b = -1;
            if ((w->ref = ref_for(s, k)) >= 0) refv = s->ref.arrays[w->ref];
        }
        lm_status st = LM_OK;
        if (va) st = lm_count_nonfinite(va, &w->nan_a, &w->inf_a);
        if (st == LM_OK && vb) st = lm_count_nonfinite(vb, &w->nan_b, &w->inf_b);
        lm_array *mine = s->rb ? vb : va, *theirs = s->rb ? va : refv;
        if (st == LM_OK && mine && theirs) {
            st = lm_compare(mine, theirs, &o->cmp, &w->r);
            w->have = st == LM_OK;
            if (w->have && !w->r.ok && !first_found) {
                first_found = true;
                keep_pair(s, 0, theirs, mine);
            }
        }
        if (st == LM_OK && s->rb && o->attribute && va && vb && x->op != LM_OP_VIEW) {
            lm_array *ins[64];
            bool ok = x->nin <= 64;
            for (int q = 0; ok && q < x->nin; q++) ok = (ins[q] = lm_trace_run_value(s->ra, x->in[q])) != NULL;
            lm_array *again = ok ? lm_trace_rerun(s->t, k, cb, ins) : NULL;
            if (ok && !again) return lm_error_prefix("diff: node %d (%s) re-run under b", k + 1, lm_op_name(x->op));
            if (again) {
                st = lm_compare(again, va, &o->cmp, &w->att);
                w->have_att = st == LM_OK;
                w->added = w->have_att ? score(&w->att) : 0;
                if (w->have_att && w->added > worst) {
                    worst = w->added;
                    keep_pair(s, 2, va, vb);
                }
                lm_array_release(again);
            }
        }
        if (st != LM_OK) return lm_error_prefix("diff: comparing node %d (%s)", k + 1, lm_op_name(x->op));
        lm_trace_run_release(s->ra, k);
        if (s->rb) lm_trace_run_release(s->rb, k);
    }
    return LM_OK;
}

/* ---- the report ---- */

/* why a function left no graph: its result was evaluated inside it (an
 * :item(), :eval(), print, or a loop that evaluates each step, as
 * pipe:generate does), or it returned values evaluated before the call */
static void nothing_left(char *buf, size_t n, int64_t inside, const char *verb)
{
    if (inside)
        snprintf(buf, n, "the result was already evaluated (%lld kernels ran inside the function: an :item(), "
                 ":eval(), print or a loop that evaluates each step, as pipe:generate does): nothing of its graph "
                 "is left to %s; call it on a function that builds the graph and returns it unevaluated (of a "
                 "pipeline, one part: pipe.unet(x, t, ctx), pipe.vae:decode(z))",
                 (long long)inside, verb);
    else
        snprintf(buf, n, "the function returned tensors already evaluated before it ran (its arguments or "
                 "values computed earlier): there is no graph to %s; build the computation inside the function",
                 verb);
}

/* a function that evaluated part of its graph itself: only the rest is compared */
static void inside_note(char *buf, size_t n, int64_t inside, int kept, const char *verb)
{
    snprintf(buf, n, "%lld kernel%s ran inside the function before it returned: what %s computed is an input "
             "here, %s under no configuration; only the %d node%s left unevaluated %s %s", (long long)inside,
             inside == 1 ? "" : "s", inside == 1 ? "it" : "they", verb, kept, kept == 1 ? "" : "s",
             kept == 1 ? "was" : "were", verb);
}

static void push_shape(lua_State *L, int ndim, const int64_t *shape)
{
    lua_createtable(L, ndim, 0);
    for (int d = 0; d < ndim; d++) {
        lua_pushinteger(L, shape[d]);
        lua_rawseti(L, -2, d + 1);
    }
}

static void set_num(lua_State *L, const char *k, double v)
{
    lua_pushnumber(L, v);
    lua_setfield(L, -2, k);
}

static void set_int(lua_State *L, const char *k, lua_Integer v)
{
    lua_pushinteger(L, v);
    lua_setfield(L, -2, k);
}

static void push_row(lua_State *L, const session *s, int k, const lm_trace_config *cb)
{
    const lm_trace_node *x = lm_trace_node_at(s->t, k);
    const row *w = &s->rows[k];
    char name[256];
    lua_createtable(L, 0, 24);
    set_int(L, "index", k + 1);
    lua_pushstring(L, lm_op_name(x->op));
    lua_setfield(L, -2, "op");
    lua_pushstring(L, x->where ? x->where : "?");
    lua_setfield(L, -2, "where");
    lm_trace_name(s->t, k, name, sizeof name);
    lua_pushstring(L, name);
    lua_setfield(L, -2, "name");
    push_shape(L, x->ndim, x->shape);
    lua_setfield(L, -2, "shape");
    lua_pushstring(L, lm_dtype_name(x->dtype));
    lua_setfield(L, -2, "dtype");
    if (cb) {
        lua_pushstring(L, lm_dtype_name(lm_trace_config_dtype(cb, x->dtype)));
        lua_setfield(L, -2, "dtype_b");
    }
    lua_pushboolean(L, !w->have || w->r.ok);
    lua_setfield(L, -2, "ok");
    if (w->have) {
        set_num(L, "max_abs", w->r.max_abs);
        set_num(L, "max_rel", w->r.max_rel);
        set_num(L, "nmse", w->r.nmse);
        set_num(L, "cosine", w->r.cosine);
        set_num(L, "frac_bad", w->r.frac_bad);
        set_int(L, "n_bad", w->r.n_bad);
        set_int(L, "nan_mismatch", w->r.nan_mismatch);
        set_int(L, "inf_mismatch", w->r.inf_mismatch);
        set_num(L, "rtol", w->r.rtol);
        set_num(L, "atol", w->r.atol);
    }
    if (w->have_att) {
        set_num(L, "added", w->added);
        set_num(L, "added_max_abs", w->att.max_abs);
        lua_pushboolean(L, w->att.ok);
        lua_setfield(L, -2, "added_ok");
    }
    set_int(L, "nan_a", w->nan_a);
    set_int(L, "inf_a", w->inf_a);
    set_int(L, "nan_b", w->nan_b);
    set_int(L, "inf_b", w->inf_b);
    if (w->into_a >= 0) set_int(L, "fused_a", w->into_a + 1);
    if (w->into_b >= 0) set_int(L, "fused_b", w->into_b + 1);
    if (w->ref >= 0) {
        lua_pushstring(L, s->ref.names[w->ref]);
        lua_setfield(L, -2, "reference");
    }
}

static void fmt_g(char *buf, size_t n, double v)
{
    if (isnan(v)) snprintf(buf, n, "-");
    else snprintf(buf, n, "%.3g", v);
}

static void append_row(luaL_Buffer *b, const session *s, int k, const char *mark)
{
    const lm_trace_node *x = lm_trace_node_at(s->t, k);
    const row *w = &s->rows[k];
    char line[512], sh[96], m1[16], m2[16], m3[16], m4[16];
    lm_shape_str(sh, sizeof sh, x->ndim, x->shape);
    fmt_g(m1, sizeof m1, w->have ? w->r.max_abs : NAN);
    fmt_g(m2, sizeof m2, w->have ? w->r.nmse : NAN);
    fmt_g(m3, sizeof m3, w->have_att ? w->added : NAN);
    snprintf(m4, sizeof m4, "%s", !w->have ? (w->into_a >= 0 || w->into_b >= 0 ? "fused" : "-")
                                  : w->r.ok ? "ok" : "DIFF");
    snprintf(line, sizeof line, "%-6s %5d  %-12s %-22s %-16s %-10s %-10s %-10s %s\n", mark, k + 1,
             lm_op_name(x->op), x->where ? x->where : "?", sh, m1, m2, m3, m4);
    luaL_addstring(b, line);
}

/* The table print(r) shows: the first divergence, the worst offenders,
 * and the error growth over the nodes that changed it by 10x or more. */
static void push_text(lua_State *L, const session *s, int first, int worst, int nanat, const char *title,
                      const sbuf *stages, const char *nothing, const char *note)
{
    int n = lm_trace_count(s->t);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addstring(&b, title);
    luaL_addstring(&b, "\n");
    if (nothing) {
        luaL_addstring(&b, nothing);
        luaL_addstring(&b, "\n");
        luaL_pushresult(&b);
        return;
    }
    if (note) {
        luaL_addstring(&b, "note: ");
        luaL_addstring(&b, note);
        luaL_addstring(&b, "\n");
    }
    if (first < 0 && nanat < 0) luaL_addstring(&b, "no divergence: every node within tolerance\n");
    luaL_addstring(&b, "       index  op           where                  shape            max_abs    nmse       added      status\n");
    if (first >= 0) append_row(&b, s, first, "first");
    if (worst >= 0) append_row(&b, s, worst, "worst");
    if (nanat >= 0) append_row(&b, s, nanat, "nan");
    /* the other large adders, biggest first (at most 5) */
    int shown[5], ns = 0;
    for (int r = 0; r < 5; r++) {
        int best = -1;
        for (int k = 0; k < n; k++) {
            bool taken = k == worst;
            for (int q = 0; q < ns; q++) taken |= shown[q] == k;
            if (taken || !s->rows[k].have_att || s->rows[k].added <= 0) continue;
            if (best < 0 || s->rows[k].added > s->rows[best].added) best = k;
        }
        if (best < 0) break;
        shown[ns++] = best;
        append_row(&b, s, best, "adds");
    }
    luaL_addstring(&b, "growth (nodes where nmse grew 10x):\n");
    double last = 0;
    int lines = 0;
    for (int k = 0; k < n && lines < 12; k++) {
        const row *w = &s->rows[k];
        if (!w->have || isnan(w->r.nmse) || w->r.nmse <= 0) continue;
        if (last == 0 ? w->r.nmse > 1e-12 : w->r.nmse >= 10 * last) {
            append_row(&b, s, k, "");
            lines++;
            last = w->r.nmse;
        }
    }
    if (stages->n) {
        luaL_addstring(&b, "per location (its last node; added: the sum its nodes add):\n");
        luaL_addstring(&b, stages->p);
    }
    luaL_pushresult(&b);
}

/* Per location, in order of first appearance: the last node built there
 * (a layer's output when lm.name_scope names layers), its error and the error
 * the location's nodes add.  NULL-free: pushes a list. */
static void push_stages(lua_State *L, const session *s, sbuf *text)
{
    int n = lm_trace_count(s->t), ns = 0;
    lua_newtable(L);
    for (int k = 0; k < n; k++) {
        const char *w = lm_trace_node_at(s->t, k)->where;
        bool seen = false;
        for (int q = 0; q < k && !seen; q++) seen = lm_trace_node_at(s->t, q)->where == w;
        if (seen) continue;
        int last = k;
        double added = 0;
        for (int q = k; q < n; q++)
            if (lm_trace_node_at(s->t, q)->where == w) {
                if (s->rows[q].have) last = q;
                if (s->rows[q].have_att) added += s->rows[q].added;
            }
        const row *r = &s->rows[last];
        lua_createtable(L, 0, 6);
        lua_pushstring(L, w ? w : "?");
        lua_setfield(L, -2, "where");
        set_int(L, "index", last + 1);
        if (r->have) {
            set_num(L, "max_abs", r->r.max_abs);
            set_num(L, "nmse", r->r.nmse);
            set_num(L, "cosine", r->r.cosine);
        }
        set_num(L, "added", added);
        lua_rawseti(L, -2, ++ns);
        if (text && ns <= 40) {
            char line[320], m1[16], m2[16], m3[16];
            fmt_g(m1, sizeof m1, r->have ? r->r.max_abs : NAN);
            fmt_g(m2, sizeof m2, r->have ? r->r.nmse : NAN);
            fmt_g(m3, sizeof m3, added);
            snprintf(line, sizeof line, "  %-28.28s %5d  %-10s %-10s %-10s\n", w ? w : "?", last + 1, m1, m2, m3);
            sb_str(text, line);
        }
    }
}

static int report_tostring(lua_State *L)
{
    lua_getfield(L, 1, "text");
    return 1;
}

/* Heat maps of the first and worst nodes when their values look like images
 * ([H,W], [C,H,W], [N,C,H,W] with N = 1). */
static void write_images(lua_State *L, session *s, const char *dir, int first, int worst)
{
    const char *what[2] = {"first", "worst"};
    int at[2] = {first, worst};
    for (int i = 0; i < 2; i++) {
        lm_array *a = s->keep[2 * i], *b = s->keep[2 * i + 1];
        if (at[i] < 0 || !a || !b || a->ndim < 2 || a->ndim > 4 || (a->ndim == 4 && a->shape[0] != 1)) continue;
        lm_array *a3 = a, *b3 = b;
        if (a->ndim == 4) {
            a3 = lm_reshape(a, 3, a->shape + 1);
            b3 = lm_reshape(b, 3, b->shape + 1);
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/%s-%04d.png", dir, what[i], at[i] + 1);
        lm_status st = a3 && b3 ? lm_image_diff(b3, a3, path, NAN, LM_LAYOUT_CHW, NULL) : lm_error_status();
        if (a3 != a) lm_array_release(a3);
        if (b3 != b) lm_array_release(b3);
        if (st != LM_OK) lm_lua_error(L);
        lua_pushstring(L, path);
        lua_setfield(L, -2, i ? "worst_image" : "first_image");
    }
}

static const char *const DIFF_OPTS[] = {"a", "b", "reference", "rtol", "atol", "equal_nan", "attribute",
                                        "images", "overwrite", NULL};

/* images = dir, checked before anything runs: a folder (made when missing,
 * as lumen batch makes its output folder) holding no heat maps of an
 * earlier diff unless overwrite, as lm.trace refuses an existing dump */
static void images_ready(lua_State *L, const char *dir, bool overwrite)
{
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        if (mkdir(dir, 0777) != 0)
            luaL_error(L, "lm.diff: images = '%s': cannot make the folder: %s", dir, strerror(errno));
        return;
    }
    if (!S_ISDIR(sb.st_mode)) luaL_error(L, "lm.diff: images = '%s' is not a folder", dir);
    if (overwrite) return;
    DIR *dd = opendir(dir);
    if (!dd) luaL_error(L, "lm.diff: images = '%s': %s", dir, strerror(errno));
    struct dirent *e;
    char found[300] = "";
    while ((e = readdir(dd)) && !found[0]) {
        unsigned n;
        char end[8];
        if ((sscanf(e->d_name, "first-%u.%7s", &n, end) == 2 || sscanf(e->d_name, "worst-%u.%7s", &n, end) == 2) &&
            !strcmp(end, "png"))
            snprintf(found, sizeof found, "%.255s", e->d_name);
    }
    closedir(dd);
    if (found[0])
        luaL_error(L, "lm.diff: %s/%s exists: images = '%s' holds the heat maps of an earlier diff (pass overwrite "
                   "= true to write over them, or name another folder)", dir, found, dir);
}

static int l_diff(lua_State *L)
{
    luaL_checkany(L, 1);
    int opts = lm_lua_check_opts(L, 3, "lm.diff", DIFF_OPTS);
    diff_opts o;
    lm_compare_opts_init(&o.cmp);
    o.cmp.rtol = lm_lua_opt_tol(L, opts, "lm.diff", "rtol");
    o.cmp.atol = lm_lua_opt_tol(L, opts, "lm.diff", "atol");
    o.cmp.equal_nan = lm_lua_opt_bool(L, opts, "lm.diff", "equal_nan", true);
    o.attribute = lm_lua_opt_bool(L, opts, "lm.diff", "attribute", true);
    o.reference = lm_lua_opt_str(L, opts, "lm.diff", "reference", NULL);
    o.images = lm_lua_opt_str(L, opts, "lm.diff", "images", NULL);
    bool overwrite = lm_lua_opt_bool(L, opts, "lm.diff", "overwrite", false);
    lm_trace_config ca, cb;
    read_config(L, opts, "a", &ca, "lm.diff");
    read_config(L, opts, "b", &cb, "lm.diff");
    session *s = session_new(L);
    int sidx = lua_gettop(L);
    if (o.reference && lm_load_file(o.reference, &s->ref) != LM_OK) return lm_lua_error(L);
    /* another framework's dump (tools/torch_dump.py) names modules, not
     * ops: its tensors pair by name and by layer only */
    for (int i = 0; o.reference && i < s->ref.nmeta; i++)
        if (!strcmp(s->ref.meta[i].key, "writer")) s->ref_foreign = strncmp(s->ref.meta[i].value, "lumen", 5) != 0;
    if (o.reference && !s->ref_foreign && (s->ref_kord = malloc(sizeof(int) * ((size_t)s->ref.count + 1)))) {
        for (int j = 0; j < s->ref.count; j++) s->ref_kord[j] = j;
        kind_set = &s->ref;
        qsort(s->ref_kord, (size_t)s->ref.count, sizeof *s->ref_kord, by_kind);
    }
    if (o.images) images_ready(L, o.images, overwrite);
    int64_t inside;
    s->t = call_and_capture(L, 1, 2, "lm.diff", &inside);
    lua_settop(L, sidx);
    if (diff_run(s, &ca, &cb, &o) != LM_OK) return lm_lua_error(L);
    int n = lm_trace_count(s->t), first = -1, worst = -1, nanat = -1, compared = 0;
    double wv = 0;
    for (int k = 0; k < n; k++) {
        const row *w = &s->rows[k];
        compared += w->have;
        if (first < 0 && w->have && !w->r.ok) first = k;
        if (w->have_att && w->added > wv) { wv = w->added; worst = k; }
        if (nanat < 0 && (w->nan_a || w->inf_a || w->nan_b || w->inf_b)) nanat = k;
    }
    lua_createtable(L, 0, 12);
    lua_createtable(L, n, 0);
    for (int k = 0; k < n; k++) {
        push_row(L, s, k, o.reference ? NULL : &cb);
        lua_rawseti(L, -2, k + 1);
    }
    lua_setfield(L, -2, "nodes");
    int nodes = lua_gettop(L);
    const struct { const char *name; int at; } picks[] = {{"first", first}, {"worst", worst}, {"nan", nanat}};
    for (int i = 0; i < 3; i++) {
        if (picks[i].at < 0) continue;
        lua_getfield(L, nodes, "nodes");
        lua_rawgeti(L, -1, picks[i].at + 1);
        lua_setfield(L, nodes, picks[i].name);
        lua_pop(L, 1);
    }
    /* nothing compared is no success: ok = false and the reason */
    char reason[600] = "", note[300] = "";
    if (compared == 0) {
        char why[400];
        if (n == 0) nothing_left(why, sizeof why, inside, "compare");
        else if (o.reference)
            snprintf(why, sizeof why, "none of the graph's %d node%s pairs with a tensor of %.200s (names "
                     "NNNN.op.where, as lm.trace writes them, or a layer's name from lm.name_scope)", n,
                     n == 1 ? "" : "s", o.reference);
        else snprintf(why, sizeof why, "none of the graph's %d node%s had a value on both sides", n, n == 1 ? "" : "s");
        snprintf(reason, sizeof reason, "nothing compared: %s", why);
        lua_pushstring(L, reason);
        lua_setfield(L, -2, "reason");
    } else if (inside) {
        inside_note(note, sizeof note, inside, compared, "compared");
        lua_pushstring(L, note);
        lua_setfield(L, -2, "note");
    }
    set_int(L, "compared", compared);
    lua_pushboolean(L, compared > 0 && first < 0 && nanat < 0);
    lua_setfield(L, -2, "ok");
    char sa[64], sb[64], title[300];
    config_str(&ca, sa, sizeof sa);
    config_str(&cb, sb, sizeof sb);
    lua_pushstring(L, sa);
    lua_setfield(L, -2, "a");
    if (o.reference) {
        lua_pushstring(L, o.reference);
        lua_setfield(L, -2, "reference");
        snprintf(title, sizeof title, "diff: %d node%s, %s against %.200s", n, n == 1 ? "" : "s", sa, o.reference);
    } else {
        lua_pushstring(L, sb);
        lua_setfield(L, -2, "b");
        snprintf(title, sizeof title, "diff: %d node%s, a = %s, b = %s", n, n == 1 ? "" : "s", sa, sb);
    }
    sbuf st = {0};
    push_stages(L, s, &st);
    lua_setfield(L, -2, "stages");
    push_text(L, s, first, worst, nanat, title, &st, reason[0] ? reason : NULL, note[0] ? note : NULL);
    free(st.p);
    lua_setfield(L, -2, "text");
    if (o.images) write_images(L, s, o.images, first, worst);
    if (luaL_newmetatable(L, DIFF_MT)) {
        lua_pushcfunction(L, report_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_setmetatable(L, -2);
    return 1;
}

/* ---- lm.compile(fn, {verify = true}) ---- */

/* The members of the fused kernel that holds node k under b, in order. */
static int group_of(const session *s, int k, int *members, int cap)
{
    int n = 0;
    for (int q = 0; q <= k && n < cap; q++)
        if (q == k || s->rows[q].into_b == k) members[n++] = q;
    return n;
}

static void chain_text(const session *s, const int *members, int n, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = 0;
    for (int m = 0; m < n; m++) {
        const lm_trace_node *x = lm_trace_node_at(s->t, members[m]);
        int wr = snprintf(buf + len, cap - len, "%s%s (%s)", len ? " -> " : "", lm_op_name(x->op),
                          x->where ? x->where : "?");
        if (wr < 0 || (size_t)wr >= cap - len) break;
        len += (size_t)wr;
    }
}

/* Delta debugging over the fused group: the shortest run of consecutive
 * members that, compiled alone on a's values of its inputs, still leaves
 * the tolerance against the value of a; start and len get it (the whole group
 * when nothing shorter fails). */
static lm_status shrink(session *s, const lm_trace_config *ca, const lm_trace_config *cb, const int *members,
                        int n, const lm_compare_opts *o, int *start, int *len)
{
    *start = 0;
    *len = n;
    lm_trace_run *ra = lm_trace_run_start(s->t, ca);
    if (!ra) return lm_error_status();
    lm_trace_run_keep_all(ra);
    lm_status st = LM_OK;
    for (int k = 0; k <= members[n - 1] && st == LM_OK; k++) {
        lm_array *v;
        st = lm_trace_run_step(ra, k, &v, NULL);
    }
    for (int l = 1; l < n && st == LM_OK && *len == n; l++)
        for (int b = 0; b + l <= n && st == LM_OK; b++) {
            lm_array *got = lm_trace_rerun_chain(s->t, members + b, l, cb, ra);
            if (!got) { st = lm_error_status(); break; }
            lm_compare_report r;
            st = lm_compare(got, lm_trace_run_value(ra, lm_trace_leaves(s->t) + members[b + l - 1]), o, &r);
            lm_array_release(got);
            if (st == LM_OK && !r.ok) {
                *start = b;
                *len = l;
                break;
            }
        }
    lm_trace_run_free(ra);
    return st;
}

void lm_lua_compile_verify(lua_State *L, int fn, int first, int n, bool raise, const char *name)
{
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_pushvalue(L, first + i);
        lua_rawseti(L, -2, i + 1);
    }
    int args = lua_gettop(L);
    session *s = session_new(L);
    int sidx = lua_gettop(L);
    int64_t inside;
    s->t = call_and_capture(L, fn, args, "compile verify", &inside);
    lua_settop(L, sidx);
    lm_trace_config ca, cb;
    lm_trace_config_init(&ca);
    lm_trace_config_init(&cb);
    cb.compile = true;
    diff_opts o;
    lm_compare_opts_init(&o.cmp);
    o.attribute = false;
    o.reference = o.images = NULL;
    if (diff_run(s, &ca, &cb, &o) != LM_OK) lm_lua_error(L);
    int k = 0, cnt = lm_trace_count(s->t);
    while (k < cnt && (!s->rows[k].have || s->rows[k].r.ok)) k++;
    if (k < cnt) {
        char chain[1024], group[1024], msg[2300];
        int members[64], nm = group_of(s, k, members, 64), b = 0, l = nm;
        if (nm > 1 && shrink(s, &ca, &cb, members, nm, &o.cmp, &b, &l) != LM_OK) lm_lua_error(L);
        chain_text(s, members + b, l, chain, sizeof chain);
        chain_text(s, members, nm, group, sizeof group);
        const row *w = &s->rows[k];
        snprintf(msg, sizeof msg, "compile verify: %s: the fused run diverges at node %d: max_abs %.4g, "
                 "%lld elements outside tolerance; smallest failing chain: %s (of the fused kernel %s)", name,
                 k + 1, w->r.max_abs, (long long)w->r.n_bad, chain, group);
        if (raise) luaL_error(L, "%s", msg);
        fprintf(stderr, "lumen: %s\n", msg);
    }
    lua_settop(L, args - 1);
}

/* ---- dumps: every intermediate into one safetensors file ----
 * Tensors go to a temporary data file as they come (floats and integers as
 * F32), the header is written last into another temporary beside the
 * target, the data copied after it, and that file renamed into place. */

typedef struct dump {
    char path[4096], data_path[4200];
    FILE *data;
    int n, cap;
    char **names;
    int *ndim;
    int64_t (*shape)[LM_MAX_DIMS];
    uint64_t *end;
    uint64_t size;
} dump;

/* What a dump may be written over: nothing (a new file), or a regular file
 * when overwrite.  One message per case, saying what the path must be:
 * LUMEN_DUMP names a new safetensors file (it never replaces one), lm.trace's
 * path a new file or, with overwrite = true, an existing regular one. */
static lm_status dump_target(const char *path, bool overwrite, bool env)
{
    struct stat sb;
    const char *must = env ? "LUMEN_DUMP names the new safetensors file to write (an existing file is never "
                             "replaced; unset it to dump nothing)"
                           : "lm.trace writes one safetensors file (new, or an existing file with overwrite = true)";
    char head[4200];
    snprintf(head, sizeof head, env ? "LUMEN_DUMP=%s" : "lm.trace: %s", path);
    if (stat(path, &sb) != 0) return LM_OK;
    if (S_ISDIR(sb.st_mode))
        return lm_error_set(LM_ERR_IO, "%s is a folder: name a file in it, such as %s/%s.safetensors (%s)", head,
                            path, env ? "dump" : "trace", must);
    if (!S_ISREG(sb.st_mode))
        return lm_error_set(LM_ERR_IO, "%s is not a regular file (a device, FIFO or socket): %s", head, must);
    if (env) return lm_error_set(LM_ERR_IO, "%s exists: %s", head, must);
    if (!overwrite) return lm_error_set(LM_ERR_IO, "%s exists (pass overwrite = true to replace it)", head);
    return LM_OK;
}

static lm_status dump_open(dump *d, const char *path, bool overwrite, bool env)
{
    memset(d, 0, sizeof *d);
    if (dump_target(path, overwrite, env) != LM_OK) return lm_error_status();
    snprintf(d->path, sizeof d->path, "%s", path);
    snprintf(d->data_path, sizeof d->data_path, "%s.data.XXXXXX", path);
    int fd = mkstemp(d->data_path);
    if (fd < 0 || !(d->data = fdopen(fd, "w+b"))) {
        if (fd >= 0) close(fd);
        return lm_error_set(LM_ERR_IO, "%s%s: cannot write a file beside it: %s", env ? "LUMEN_DUMP=" : "lm.trace: ",
                            path, strerror(errno));
    }
    return LM_OK;
}

static void dump_drop(dump *d)
{
    if (d->data) {
        fclose(d->data);
        unlink(d->data_path);
    }
    for (int i = 0; i < d->n; i++) free(d->names[i]);
    free(d->names);
    free(d->ndim);
    free(d->shape);
    free(d->end);
    memset(d, 0, sizeof *d);
}

/* a's values as f32, read from its (evaluated) buffer without starting an
 * evaluation (the watcher runs inside one) */
static lm_status read_f32(lm_array *a, float *dst)
{
    lm_array c = *a;
    size_t es = lm_dtype_size(a->dtype);
    if (!lm_array_is_contiguous(a)) return lm_error_set(LM_ERR_UNSUPPORTED, "trace: strided value");
    size_t n = (size_t)a->size * es, off = (size_t)a->offset * es;
    if (a->buf->host) {
        lm_convert(dst, LM_F32, (const char *)a->buf->host + off, a->dtype, (size_t)a->size);
        return LM_OK;
    }
    void *tmp = malloc(n ? n : 1);
    if (!tmp) return lm_error_set(LM_ERR_NOMEM, "trace: out of host memory");
    lm_status st = lm_device_download(c.device, c.buf->handle, off, tmp, n);
    if (st == LM_OK) lm_convert(dst, LM_F32, tmp, a->dtype, (size_t)a->size);
    free(tmp);
    return st;
}

static lm_status dump_add(dump *d, const char *name, lm_array *a)
{
    if (d->n == d->cap) {
        int nc = d->cap ? d->cap * 2 : 256;
        char **nn = realloc(d->names, sizeof *nn * (size_t)nc);
        if (nn) d->names = nn;
        int *nd = realloc(d->ndim, sizeof *nd * (size_t)nc);
        if (nd) d->ndim = nd;
        int64_t (*ns)[LM_MAX_DIMS] = realloc(d->shape, sizeof *ns * (size_t)nc);
        if (ns) d->shape = ns;
        uint64_t *ne = realloc(d->end, sizeof *ne * (size_t)nc);
        if (ne) d->end = ne;
        if (!nn || !nd || !ns || !ne) return lm_error_set(LM_ERR_NOMEM, "trace: out of host memory");
        d->cap = nc;
    }
    float *buf = malloc((size_t)a->size * 4 + 4);
    if (!buf) return lm_error_set(LM_ERR_NOMEM, "trace: out of host memory for %s", name);
    lm_status st = read_f32(a, buf);
    if (st == LM_OK && fwrite(buf, 4, (size_t)a->size, d->data) != (size_t)a->size)
        st = lm_error_set(LM_ERR_IO, "trace: writing %s: %s", d->data_path, strerror(errno));
    free(buf);
    if (st != LM_OK) return st;
    if (!(d->names[d->n] = strdup(name))) return lm_error_set(LM_ERR_NOMEM, "trace: out of host memory");
    d->ndim[d->n] = a->ndim;
    memcpy(d->shape[d->n], a->shape, sizeof d->shape[d->n]);
    d->size += (uint64_t)a->size * 4;
    d->end[d->n++] = d->size;
    return LM_OK;
}

static void json_str(sbuf *b, const char *s)
{
    sb_str(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char e[8];
        if (c == '"' || c == '\\') { e[0] = '\\'; e[1] = (char)c; sb_add(b, e, 2); }
        else if (c < 0x20) { snprintf(e, sizeof e, "\\u%04x", c); sb_str(b, e); }
        else sb_add(b, (const char *)&c, 1);
    }
    sb_str(b, "\"");
}

static lm_status dump_finish(dump *d)
{
    sbuf b = {0};
    sb_str(&b, "{\"__metadata__\":{\"format\":\"pt\",\"writer\":\"lumen trace\"}");
    uint64_t start = 0;
    for (int i = 0; i < d->n; i++) {
        char num[64];
        sb_str(&b, ",");
        json_str(&b, d->names[i]);
        sb_str(&b, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int q = 0; q < d->ndim[i]; q++) {
            snprintf(num, sizeof num, "%s%lld", q ? "," : "", (long long)d->shape[i][q]);
            sb_str(&b, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)start,
                 (unsigned long long)d->end[i]);
        sb_str(&b, num);
        start = d->end[i];
    }
    sb_str(&b, "}");
    while (!b.failed && b.n % 8) sb_str(&b, " ");
    if (b.failed) {
        free(b.p);
        return lm_error_set(LM_ERR_NOMEM, "trace: out of host memory for the header of %s", d->path);
    }
    /* core/io's atomic file: a private temporary renamed into place, listed
     * for a signal handler's cleanup */
    lm_io_out o;
    lm_status st = lm_io_out_open(&o, d->path);
    if (st != LM_OK) {
        free(b.p);
        return st;
    }
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)b.n >> (8 * i));
    bool ok = lm_io_out_write(&o, len, 8) && lm_io_out_write(&o, b.p, b.n);
    free(b.p);
    if (ok && (fflush(d->data) != 0 || fseek(d->data, 0, SEEK_SET) != 0)) {
        ok = false;
        st = lm_error_set(LM_ERR_IO, "trace: reading back the values spilled for %s: %s", d->path,
                          strerror(errno));
    }
    char chunk[1 << 16];
    size_t got;
    while (ok && (got = fread(chunk, 1, sizeof chunk, d->data)) > 0) ok = lm_io_out_write(&o, chunk, got);
    /* a failed write is reported by the close, which removes the temporary */
    lm_status sc = lm_io_out_close(&o, st == LM_OK);
    return st != LM_OK ? st : sc;
}

static int dump_gc(lua_State *L)
{
    dump_drop(luaL_checkudata(L, 1, "lumen.dump"));
    return 0;
}

static dump *dump_new(lua_State *L)
{
    dump *d = lua_newuserdatauv(L, sizeof *d, 0);
    memset(d, 0, sizeof *d);
    if (luaL_newmetatable(L, "lumen.dump")) {
        lua_pushcfunction(L, dump_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    return d;
}

static int l_trace(lua_State *L)
{
    static const char *const KNOWN[] = {"device", "dtype", "compile", "overwrite", NULL};
    luaL_checkany(L, 1);
    const char *path = luaL_checkstring(L, 3);
    int opts = lm_lua_check_opts(L, 4, "lm.trace", KNOWN);
    lm_trace_config c;
    lm_trace_config_init(&c);
    const char *dev = lm_lua_opt_str(L, opts, "lm.trace", "device", NULL);
    const char *dt = lm_lua_opt_str(L, opts, "lm.trace", "dtype", NULL);
    if (dev && !(c.device = lm_device_find(dev))) return luaL_error(L, "lm.trace: no device '%s'", dev);
    if (dt && !lm_dtype_from_name(dt, &c.dtype)) return luaL_error(L, "lm.trace: unknown dtype '%s'", dt);
    c.compile = lm_lua_opt_bool(L, opts, "lm.trace", "compile", false);
    bool overwrite = lm_lua_opt_bool(L, opts, "lm.trace", "overwrite", false);
    session *s = session_new(L);
    int sidx = lua_gettop(L);
    dump *d = dump_new(L);
    if (dump_open(d, path, overwrite, false) != LM_OK) return lm_lua_error(L);
    int64_t inside;
    s->t = call_and_capture(L, 1, 2, "lm.trace", &inside);
    if (lm_trace_count(s->t) == 0) {
        char why[400];
        nothing_left(why, sizeof why, inside, "record");
        return luaL_error(L, "lm.trace: nothing recorded, %s (%s not written)", why, path);
    }
    lua_settop(L, sidx + 1);
    if (!(s->ra = lm_trace_run_start(s->t, &c))) return lm_lua_error(L);
    int n = lm_trace_count(s->t), written = 0;
    for (int k = 0; k < n; k++) {
        lm_array *v;
        char name[256];
        if (lm_trace_run_step(s->ra, k, &v, NULL) != LM_OK) return lm_lua_error(L);
        lm_trace_name(s->t, k, name, sizeof name);
        lm_array *c2 = v ? lm_contiguous(v) : NULL;
        if (c2 && lm_array_eval(c2) != LM_OK) { lm_array_release(c2); return lm_lua_error(L); }
        lm_status st = c2 ? dump_add(d, name, c2) : LM_OK;
        lm_array_release(c2);
        if (st != LM_OK) return lm_lua_error(L);
        written += v != NULL;
        lm_trace_run_release(s->ra, k);
    }
    if (dump_finish(d) != LM_OK) return lm_lua_error(L);
    dump_drop(d);
    lua_pushinteger(L, written);
    if (!inside) return 1;
    char note[300];
    inside_note(note, sizeof note, inside, written, "recorded");
    lua_pushstring(L, note);
    return 2;
}

/* ---- LUMEN_DUMP=path: every node any evaluation runs ----
 * The file is written when the Lua state closes or, for hosts that exit
 * without closing it, at exit. */

static dump env_dump;
static bool env_on;
static int env_count;

static void env_watch(lm_array *a, void *ctx)
{
    (void)ctx;
    if (!env_on || a->op == LM_OP_VIEW || !lm_array_is_contiguous(a)) return;
    char name[256];
    const char *w = lm_array_where(a);
    snprintf(name, sizeof name, "%04d.%s.%s", ++env_count, lm_op_name(a->op), w ? w : "-");
    if (dump_add(&env_dump, name, a) != LM_OK) {
        fprintf(stderr, "lumen: LUMEN_DUMP: %s; dumping stops\n", lm_error_message());
        lm_eval_watch(NULL, NULL);
    }
}

static void env_dump_close(void)
{
    if (!env_on) return;
    env_on = false;
    lm_eval_watch(NULL, NULL);
    if (dump_finish(&env_dump) != LM_OK) fprintf(stderr, "lumen: LUMEN_DUMP: %s\n", lm_error_message());
    else fprintf(stderr, "lumen: LUMEN_DUMP: %d tensors in %s\n", env_dump.n, env_dump.path);
    dump_drop(&env_dump);
}

static int env_dump_gc(lua_State *L)
{
    lua_sethook(L, NULL, 0, 0);
    env_dump_close();
    return 0;
}

void lm_lua_hook_rest(lua_State *L)
{
    last_src = NULL;
    if (env_on) lua_sethook(L, where_hook, LUA_MASKLINE | LUA_MASKRET, 0);
    else lua_sethook(L, NULL, 0, 0);
}

static void env_dump_open(lua_State *L)
{
    const char *path = getenv("LUMEN_DUMP");
    static bool registered;
    if (!path || !*path || env_on) return;
    if (dump_open(&env_dump, path, false, true) != LM_OK) {
        fprintf(stderr, "lumen: %s; not dumping\n", lm_error_message());
        return;
    }
    env_on = true;
    if (!registered) registered = atexit(env_dump_close) == 0;
    lua_newuserdatauv(L, 1, 0);
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, env_dump_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    lua_setfield(L, LUA_REGISTRYINDEX, "lumen.env_dump");
    lm_eval_watch(env_watch, NULL);
    lua_sethook(L, where_hook, LUA_MASKLINE | LUA_MASKRET, 0);
}

/* ---- ulp distances ---- */

/* ulps of the less precise floating dtype between a and b: buckets 0, 1,
 * 2-3, 4-7, ... up to 2^20 and more; NaN/Inf pairs counted apart. */
static int l_ulp_hist(lua_State *L)
{
    lm_array *a = lm_lua_check_array(L, 1), *b = lm_lua_check_array(L, 2);
    if (a->size != b->size) return luaL_error(L, "lm.ulp_hist: %lld vs %lld elements", (long long)a->size, (long long)b->size);
    lm_dtype dt = lm_dtype_size(a->dtype) <= lm_dtype_size(b->dtype) ? a->dtype : b->dtype;
    if (!lm_dtype_is_float(dt)) dt = LM_F32;
    int mant = dt == LM_F16 ? 10 : dt == LM_BF16 ? 7 : dt == LM_F64 ? 52 : 23;
    size_t n = (size_t)a->size;
    double *x = malloc(n * 8 + 8), *y = malloc(n * 8 + 8);
    lm_status st = x && y ? LM_OK : lm_error_set(LM_ERR_NOMEM, "lm.ulp_hist: out of host memory");
    if (st == LM_OK) st = lm_array_read(a, x, LM_F64);
    if (st == LM_OK) st = lm_array_read(b, y, LM_F64);
    int64_t hist[23] = {0}, nonfinite = 0;
    for (size_t i = 0; st == LM_OK && i < n; i++) {
        if (!isfinite(x[i]) || !isfinite(y[i])) { nonfinite += !(x[i] == y[i]); continue; }
        double m = fmax(fabs(x[i]), fabs(y[i]));
        int e;
        frexp(m, &e);
        double ulp = m > 0 ? ldexp(1.0, e - 1 - mant) : ldexp(1.0, -1074);
        double u = fabs(x[i] - y[i]) / ulp;
        int bucket = u < 0.5 ? 0 : 1 + (int)floor(log2(u + 0.5));
        hist[bucket > 21 ? 22 : bucket]++;
    }
    free(x);
    free(y);
    if (st != LM_OK) return lm_lua_error(L);
    lua_createtable(L, 23, 2);
    for (int i = 0; i < 23; i++) {
        lua_pushinteger(L, hist[i]);
        lua_rawseti(L, -2, i + 1);
    }
    set_int(L, "nonfinite", nonfinite);
    lua_pushstring(L, lm_dtype_name(dt));
    lua_setfield(L, -2, "dtype");
    return 1;
}

static int l_name_scope(lua_State *L)
{
    lua_settop(L, 1);
    if (scope[0]) lua_pushstring(L, scope);
    else lua_pushnil(L);
    const char *name = luaL_optstring(L, 1, NULL);
    snprintf(scope, sizeof scope, "%s", name ? name : "");
    last_src = NULL;
    if (name) lm_where_set(name);
    return 1;
}

static int l_test_fault(lua_State *L)
{
    lm_test_fault_set(luaL_optstring(L, 1, NULL));
    return 0;
}

static const lm_lua_func funcs[] = {
    {"diff", l_diff,
     "lm.diff(fn, args, [opts]) -> report\n"
     "Runs fn(args...) under opts.a and opts.b ({device=, dtype=, compile=}, or a dtype or\n"
     "device name), node by node, and reports per node (r.nodes: index, op, where, shape,\n"
     "max_abs, max_rel, nmse, cosine, frac_bad, added), r.first (first node out of\n"
     "tolerance: rtol/atol or lm.compare's defaults), r.worst (the node that adds the most\n"
     "error itself: re-run under b on a's inputs), r.nan (first NaN/Inf). {reference =\n"
     "path} compares one run (opts.a) with a dump of lm.trace or tools/torch_dump.py;\n"
     "images = dir writes heat maps of the first and worst nodes (overwrite = true to\n"
     "write over an earlier diff's); attribute = false skips the re-runs. fn may return\n"
     "tensors or tables of them (a list, a map). r.compared counts the nodes compared;\n"
     "when none was (the result was already evaluated) r.ok is false and r.reason says\n"
     "why; r.note says when kernels ran inside fn. print(r) shows a table."},
    {"trace", l_trace,
     "lm.trace(fn, args, path, [opts]) -> count, [note]\n"
     "Runs fn(args...) ({device=, dtype=, compile=} as lm.diff's a) and saves every\n"
     "intermediate as F32 into the safetensors file path, named NNNN.op.where in\n"
     "execution order; overwrite = true replaces an existing file. An error when\n"
     "nothing is left to record (the result was already evaluated); note: kernels\n"
     "that ran inside fn, outside the recording."},
    {"ulp_hist", l_ulp_hist,
     "lm.ulp_hist(a, b) -> table\n"
     "Histogram of the distance between a and b in ulps of the less precise floating\n"
     "dtype: [1] = 0 ulp, [2] = 1, [3] = 2-3, [4] = 4-7, ... [23] = 2^21 and more;\n"
     "nonfinite counts NaN/Inf pairs that differ."},
    {"name_scope", l_name_scope,
     "lm.name_scope([name]) -> previous\n"
     "Names the nodes built from now on (a layer name: \"mid.resnet0\") in lm.diff and\n"
     "lm.trace reports and dumps, instead of the Lua line that built them; nil goes back\n"
     "to lines. Returns the name it replaces (nil for lines)."},
    {"_test_fault", l_test_fault,
     "lm._test_fault([spec])\n"
     "Test only: spec \"op[:device[:dtype]]\" makes that op's results wrong on that\n"
     "device and dtype (LUMEN_TEST_FAULT); nil clears it."},
    {NULL, NULL, NULL},
};

void lm_lua_open_diff(lua_State *L);   /* called by luaopen_lumen (l_module.c) */
void lm_lua_open_diff(lua_State *L)
{
    lm_lua_register(L, "lm.", funcs);
    env_dump_open(L);
}
