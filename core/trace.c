/* trace.c - record a lazy graph, run it again under another configuration
 * one node at a time (see trace.h), and the locations arrays remember. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "compile.h"
#include "ops.h"
#include "trace.h"

/* ---- where: interned strings ---- */

_Thread_local const char *lm_where_now;
static char **interned;
static size_t ninterned, capinterned;

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211u;
    return h;
}

/* Open addressing over the strings themselves; grows at half full. */
static const char *intern(const char *s)
{
    if (2 * (ninterned + 1) > capinterned) {
        size_t nc = capinterned ? capinterned * 2 : 256;
        char **nt = calloc(nc, sizeof *nt);
        if (!nt) return NULL;
        for (size_t i = 0; i < capinterned; i++) {
            if (!interned[i]) continue;
            size_t j = hash_str(interned[i]) & (nc - 1);
            while (nt[j]) j = (j + 1) & (nc - 1);
            nt[j] = interned[i];
        }
        free(interned);
        interned = nt;
        capinterned = nc;
    }
    size_t j = hash_str(s) & (capinterned - 1);
    while (interned[j] && strcmp(interned[j], s)) j = (j + 1) & (capinterned - 1);
    if (!interned[j]) {
        char *c = strdup(s);
        if (!c) return NULL;
        interned[j] = c;
        ninterned++;
    }
    return interned[j];
}

const char *lm_where_set(const char *s)
{
    lm_where_now = s ? intern(s) : NULL;
    return lm_where_now;
}

const char *lm_where_get(void) { return lm_where_now; }
const char *lm_array_where(const lm_array *a) { return a ? lm_node_of(a)->where : NULL; }

/* ---- the test fault (LUMEN_TEST_FAULT=op[:device[:dtype]]) ----
 * Test-only: flips the sign of every element an op's kernel wrote on the
 * named device (and dtype), so the comparison tests can plant a wrong op
 * on one device.  Nothing else reads it. */
static int fault_ready;
static char fault_op[32], fault_dev[32], fault_dt[16];

void lm_test_fault_set(const char *spec)
{
    fault_ready = 1;
    fault_op[0] = fault_dev[0] = fault_dt[0] = 0;
    if (!spec || !*spec) return;
    char tmp[96];
    snprintf(tmp, sizeof tmp, "%s", spec);
    char *dev = strchr(tmp, ':'), *dt = NULL;
    if (dev) {
        *dev++ = 0;
        if ((dt = strchr(dev, ':'))) *dt++ = 0;
    }
    snprintf(fault_op, sizeof fault_op, "%.31s", tmp);
    snprintf(fault_dev, sizeof fault_dev, "%.31s", dev ? dev : "");
    snprintf(fault_dt, sizeof fault_dt, "%.15s", dt ? dt : "");
}

static void fault_apply(lm_array *a)
{
    if (!fault_ready) lm_test_fault_set(getenv("LUMEN_TEST_FAULT"));
    if (!fault_op[0] || strcmp(lm_op_name(a->op), fault_op) || !lm_dtype_is_float(a->dtype)) return;
    if (fault_dev[0] && strncmp(a->device->spec, fault_dev, strlen(fault_dev))) return;
    if (fault_dt[0] && strcmp(lm_dtype_name(a->dtype), fault_dt)) return;
    size_t es = lm_dtype_size(a->dtype), n = lm_array_nbytes(a);
    unsigned char *p = a->buf->host ? a->buf->host : malloc(n ? n : 1);
    if (!p) return;
    if (!a->buf->host && lm_device_download(a->device, a->buf->handle, 0, p, n) != LM_OK) {
        free(p);
        return;
    }
    for (size_t i = es - 1; i < n; i += es) p[i] ^= 0x80;   /* little-endian sign bit */
    if (!a->buf->host) {
        lm_device_upload(a->device, a->buf->handle, 0, p, n);
        free(p);
    }
}

/* ---- the eval watcher (LUMEN_DUMP) ---- */
static lm_eval_watch_fn watch_fn;
static void *watch_ctx;

void lm_eval_watch(lm_eval_watch_fn fn, void *ctx)
{
    watch_fn = fn;
    watch_ctx = ctx;
}

void lm_trace_after_node(lm_array *a)
{
    fault_apply(a);
    if (watch_fn) watch_fn(a, watch_ctx);
}

/* ---- capture ---- */

/* The graph as captured (capture.h, no placeholders): values below nleaf
 * are its leaves, node k is value nleaf + k and instruction k of
 * lm_compile_graph over the same graph. */
struct lm_trace {
    lm_capture g;
};

void lm_trace_free(lm_trace *t)
{
    if (!t) return;
    lm_capture_free(&t->g);
    free(t);
}

/* Evaluates the pending nodes without inputs, so they become leaves. */
static lm_status settle_creations(lm_array *const *order, int64_t n)
{
    lm_vec made = {0};
    lm_status st = LM_OK;
    for (int64_t i = 0; i < n && st == LM_OK; i++) {
        lm_array *a = order[i];
        char s[96];
        if (a->flags & (LM_ARRAY_TRACER | LM_ARRAY_FREED))
            st = lm_error_set(LM_ERR_STATE, "trace: %s is a %s", lm_desc(s, sizeof s, a),
                              a->flags & LM_ARRAY_FREED ? "freed tensor" : "compile placeholder");
        else if (!a->buf && a->ninputs == 0 && !lm_vec_push(&made, a))
            st = lm_error_set(LM_ERR_NOMEM, "trace: out of host memory");
    }
    if (st == LM_OK && made.n) st = lm_eval(made.v, (int)made.n);
    free(made.v);
    return st;
}

/* what a recording cannot hold (lm_capture_check_fn) */
static lm_status recordable(const lm_array *a)
{
    if (a->params.ext)
        return lm_error_set(LM_ERR_UNSUPPORTED, "trace: %s nodes cannot be recorded (run the function uncompiled)",
                            lm_op_name(a->op));
    return LM_OK;
}

lm_trace *lm_trace_capture(int nout, lm_array *const *outs)
{
    lm_array **order = NULL;
    int64_t n = 0;
    if (lm_capture_order("trace", nout, outs, 0, NULL, &order, &n) != LM_OK) return NULL;
    lm_trace *t = NULL;
    if (settle_creations(order, n) == LM_OK) {
        if (!(t = calloc(1, sizeof *t))) lm_error_set(LM_ERR_NOMEM, "trace: out of host memory");
        else if (lm_capture_graph(&t->g, "trace", 0, NULL, nout, outs, order, n, recordable) != LM_OK) {
            free(t);
            t = NULL;
        }
    }
    free(order);
    return t;
}

int lm_trace_count(const lm_trace *t) { return t->g.n; }
int lm_trace_leaves(const lm_trace *t) { return t->g.nleaf; }
const lm_trace_node *lm_trace_node_at(const lm_trace *t, int k) { return &t->g.nodes[k]; }
lm_array *lm_trace_leaf(const lm_trace *t, int j) { return t->g.leaves[j]; }

void lm_trace_name(const lm_trace *t, int k, char *buf, size_t n)
{
    const lm_trace_node *x = &t->g.nodes[k];
    snprintf(buf, n, "%04d.%s.%s", k + 1, lm_op_name(x->op), x->where ? x->where : "-");
}

/* ---- runs ---- */

void lm_trace_config_init(lm_trace_config *c)
{
    c->device = NULL;
    c->dtype = LM_DTYPE_COUNT;
    c->compile = false;
}

lm_dtype lm_trace_config_dtype(const lm_trace_config *c, lm_dtype dt)
{
    return c->dtype != LM_DTYPE_COUNT && lm_dtype_is_float(dt) ? c->dtype : dt;
}

/* lm_contiguous taking over a's reference */
static lm_array *contiguous_take(lm_array *a)
{
    lm_array *c = lm_contiguous(a);
    lm_array_release(a);
    return c;
}

/* A leaf (or a given input) as cfg wants it: cast, then moved.  New ref. */
static lm_array *prepare(const lm_trace_config *cfg, lm_array *a)
{
    lm_dtype dt = lm_trace_config_dtype(cfg, a->dtype);
    lm_array *c = dt != a->dtype ? lm_cast(a, dt) : lm_array_retain(a);
    if (c && cfg->device && c->device != cfg->device) {
        lm_array *m = lm_array_to(c, cfg->device);
        lm_array_release(c);
        c = m;
    }
    return c;
}

/* Node x on inputs in, with cfg's dtype: the same op and parameters, so a
 * run under the recorded configuration builds the very same kernels. */
static lm_array *rebuild(const lm_trace_node *x, const lm_trace_config *cfg, lm_array **in)
{
    if (x->op == LM_OP_VIEW) {
        const lm_array *b = in[0];
        if (b->buf && (b->offset || !lm_array_is_contiguous(b))) {
            lm_error_set(LM_ERR_UNSUPPORTED, "trace: a view of a strided evaluated tensor cannot be run again "
                         "under another dtype or device (make it :contiguous() first)");
            return NULL;
        }
        return lm_view_new(in[0], x->ndim, x->shape, x->strides, x->offset);
    }
    return lm_node_new(x->op, lm_trace_config_dtype(cfg, x->dtype), x->ndim, x->shape, x->nin, in,
                       &x->params, cfg->device);
}

lm_array *lm_trace_rerun(const lm_trace *t, int k, const lm_trace_config *cfg, lm_array *const *inputs)
{
    const lm_trace_node *x = &t->g.nodes[k];
    lm_array *in[64];
    if (x->nin > 64) {
        lm_error_set(LM_ERR_UNSUPPORTED, "trace: %s has %d inputs", lm_op_name(x->op), x->nin);
        return NULL;
    }
    int j = 0;
    for (; j < x->nin; j++)
        if (!(in[j] = prepare(cfg, inputs[j]))) break;
    lm_array *r = j == x->nin ? rebuild(x, cfg, in) : NULL;
    for (int q = 0; q < j; q++) lm_array_release(in[q]);
    if (r && lm_array_eval(r) != LM_OK) {
        lm_array_release(r);
        r = NULL;
    }
    return r;
}

/* Every node on the values v (v[0..nleaf) set) under cfg, into v[nleaf..). */
static lm_status rebuild_nodes(const lm_trace *t, const lm_trace_config *cfg, lm_array **v)
{
    for (int k = 0; k < t->g.n; k++) {
        const lm_trace_node *x = &t->g.nodes[k];
        lm_array *in[64];
        if (x->nin > 64) return lm_error_set(LM_ERR_UNSUPPORTED, "trace: %s has %d inputs", lm_op_name(x->op), x->nin);
        for (int q = 0; q < x->nin; q++) in[q] = v[x->in[q]];
        if (!(v[t->g.nleaf + k] = rebuild(x, cfg, in))) return lm_error_status();
    }
    return LM_OK;
}

struct lm_trace_run {
    const lm_trace *t;
    lm_trace_config cfg;
    lm_array **v;       /* nleaf + n values */
    int *left;          /* readers not yet done, per value */
    int *into;          /* per node: fused into (compile), or -1 */
    int done;           /* nodes released */
};

void lm_trace_run_free(lm_trace_run *r)
{
    if (!r) return;
    for (int i = 0; r->v && i < r->t->g.nleaf + r->t->g.n; i++) lm_array_release(r->v[i]);
    free(r->v);
    free(r->left);
    free(r->into);
    free(r);
}

/* The compiled run: the graph rebuilt on placeholders standing for the
 * leaves, compiled as lm.compile does, then replayed on the leaves. */
static lm_status start_compiled(lm_trace_run *r)
{
    const lm_trace *t = r->t;
    int nl = t->g.nleaf, n = t->g.n;
    lm_array **g = calloc((size_t)(nl + n) + 1, sizeof *g), **outs = calloc((size_t)t->g.nout + 1, sizeof *outs);
    lm_status st = g && outs ? LM_OK : lm_error_set(LM_ERR_NOMEM, "trace: out of host memory");
    for (int j = 0; j < nl && st == LM_OK; j++) {
        lm_array *l = r->v[j];
        if (!(g[j] = lm_placeholder(l->ndim, l->shape, l->dtype, l->device))) st = lm_error_status();
    }
    if (st == LM_OK) st = rebuild_nodes(t, &r->cfg, g);
    lm_compiled *c = NULL;
    if (st == LM_OK) {
        for (int o = 0; o < t->g.nout; o++) outs[o] = g[t->g.out[o]];
        if (!(c = lm_compile_graph(nl, g, t->g.nout, outs, LM_COMPILE_ON))) st = lm_error_status();
    }
    for (int i = 0; g && i < nl + n; i++) lm_array_release(g[i]);
    free(g);
    free(outs);
    if (st != LM_OK) return st;
    lm_array **leaves = calloc((size_t)nl + 1, sizeof *leaves);
    st = leaves ? LM_OK : lm_error_set(LM_ERR_NOMEM, "trace: out of host memory");
    for (int j = 0; j < nl && st == LM_OK; j++)
        if (!(leaves[j] = lm_contiguous(r->v[j]))) st = lm_error_status();
    if (st == LM_OK && lm_compiled_call_each(c, nl, leaves, n, r->v + nl, r->into) < 0) st = lm_error_status();
    for (int j = 0; leaves && j < nl; j++) lm_array_release(leaves[j]);
    free(leaves);
    lm_compiled_free(c);
    /* a value shared with an equal node, or one fused away: follow to the
     * node that holds it */
    for (int k = 0; st == LM_OK && k < n; k++) {
        int to = r->into[k];
        while (to >= 0 && !r->v[nl + to] && r->into[to] >= 0 && r->into[to] != to) to = r->into[to];
        r->into[k] = r->v[nl + k] ? -1 : to;
    }
    return st;
}

lm_trace_run *lm_trace_run_start(const lm_trace *t, const lm_trace_config *cfg)
{
    lm_trace_run *r = calloc(1, sizeof *r);
    int nv = t->g.nleaf + t->g.n;
    if (r) {
        r->t = t;
        r->cfg = *cfg;
        r->v = calloc((size_t)nv + 1, sizeof *r->v);
        r->left = calloc((size_t)nv + 1, sizeof *r->left);
        r->into = malloc(sizeof(int) * ((size_t)t->g.n + 1));
    }
    if (!r || !r->v || !r->left || !r->into) {
        lm_trace_run_free(r);
        lm_error_set(LM_ERR_NOMEM, "trace: out of host memory");
        return NULL;
    }
    for (int k = 0; k < t->g.n; k++) {
        r->into[k] = -1;
        for (int q = 0; q < t->g.nodes[k].nin; q++) r->left[t->g.nodes[k].in[q]]++;
    }
    lm_status st = LM_OK;
    for (int j = 0; j < t->g.nleaf && st == LM_OK; j++)
        if (!(r->v[j] = prepare(cfg, t->g.leaves[j]))) st = lm_error_status();
    if (st == LM_OK && cfg->compile) {
        st = start_compiled(r);
    } else if (st == LM_OK) {
        st = rebuild_nodes(t, cfg, r->v);
    }
    if (st != LM_OK) {
        lm_error_prefix("trace: running the graph again");
        lm_trace_run_free(r);
        return NULL;
    }
    return r;
}

lm_status lm_trace_run_step(lm_trace_run *r, int k, lm_array **value, int *into)
{
    lm_array *a = r->v[r->t->g.nleaf + k];
    *value = NULL;
    if (into) *into = r->into[k];
    if (!a) return r->into[k] >= 0 ? LM_OK : lm_error_set(LM_ERR_STATE, "trace: node %d was released", k + 1);
    lm_status st = lm_array_eval(a);
    if (st == LM_OK) *value = a;
    return st;
}

lm_array *lm_trace_run_value(const lm_trace_run *r, int v) { return r->v[v]; }

void lm_trace_run_keep_all(lm_trace_run *r)
{
    for (int v = 0; v < r->t->g.nleaf + r->t->g.n; v++) r->left[v]++;
}

void lm_trace_run_release(lm_trace_run *r, int k)
{
    const lm_trace *t = r->t;
    for (; r->done <= k && r->done < t->g.n; r->done++) {
        const lm_trace_node *x = &t->g.nodes[r->done];
        for (int q = 0; q < x->nin; q++) {
            int v = x->in[q];
            if (--r->left[v] == 0 && (v < t->g.nleaf || v - t->g.nleaf < r->done)) {
                lm_array_release(r->v[v]);
                r->v[v] = NULL;
            }
        }
        int me = t->g.nleaf + r->done;
        if (r->left[me] == 0) {
            lm_array_release(r->v[me]);
            r->v[me] = NULL;
        }
    }
}

/* The chain members[0..n) (node indices, ascending) alone: built on the
 * values run `from` gave their outside inputs (prepared as cfg says) and
 * compiled when cfg says so; its last node's value, evaluated. */
lm_array *lm_trace_rerun_chain(const lm_trace *t, const int *members, int n, const lm_trace_config *cfg,
                               const lm_trace_run *from)
{
    int nv = t->g.nleaf + t->g.n, next = 0;
    lm_array **g = calloc((size_t)nv + 1, sizeof *g), **ph = calloc((size_t)nv + 1, sizeof *ph);
    lm_array **real = calloc((size_t)nv + 1, sizeof *real), *out = NULL, *res = NULL;
    lm_status st = g && ph && real ? LM_OK : lm_error_set(LM_ERR_NOMEM, "trace: out of host memory");
    for (int m = 0; m < n && st == LM_OK; m++) {
        const lm_trace_node *x = &t->g.nodes[members[m]];
        lm_array *in[64];
        for (int q = 0; q < x->nin && q < 64 && st == LM_OK; q++) {
            int v = x->in[q];
            if (!g[v]) {   /* an outside input: a placeholder for its value */
                lm_array *val = from->v[v];
                if (!val) { st = lm_error_set(LM_ERR_STATE, "trace: input %d of node %d was released", q + 1, members[m] + 1); break; }
                if (!(real[next] = prepare(cfg, val)) || !(real[next] = contiguous_take(real[next])) ||
                    !(g[v] = ph[next] = lm_placeholder(real[next]->ndim, real[next]->shape, real[next]->dtype,
                                                       real[next]->device)))
                    st = lm_error_status();
                next++;
            }
            in[q] = g[v];
        }
        if (st == LM_OK && !(g[t->g.nleaf + members[m]] = rebuild(x, cfg, in))) st = lm_error_status();
    }
    if (st == LM_OK) {
        out = g[t->g.nleaf + members[n - 1]];
        if (cfg->compile) {
            lm_compiled *c = lm_compile_graph(next, ph, 1, &out, LM_COMPILE_ON);
            if (!c || lm_compiled_call(c, next, real, &res) < 0) st = lm_error_status();
            lm_compiled_free(c);
        } else {
            st = lm_error_set(LM_ERR_ARG, "trace: a chain re-runs compiled only");
        }
    }
    if (st == LM_OK && lm_array_eval(res) != LM_OK) st = lm_error_status();
    for (int m = 0; g && m < n; m++) lm_array_release(g[t->g.nleaf + members[m]]);   /* the rest are ph's */
    for (int i = 0; i < next; i++) {
        lm_array_release(ph[i]);
        lm_array_release(real[i]);
    }
    free(g);
    free(ph);
    free(real);
    if (st != LM_OK) {
        lm_array_release(res);
        return NULL;
    }
    return res;
}

/* ---- non-finite values ---- */

lm_status lm_count_nonfinite(lm_array *a, int64_t *nan, int64_t *inf)
{
    *nan = *inf = 0;
    if (!lm_dtype_is_float(a->dtype)) return LM_OK;
    /* host memory of the usual dtypes is read where it lies: a copy in f64
     * would be the largest allocation of a session */
    if (a->buf && a->buf->host && lm_array_is_contiguous(a) && (a->dtype == LM_F32 || a->dtype == LM_F16)) {
        const char *p = (const char *)a->buf->host + (size_t)a->offset * lm_dtype_size(a->dtype);
        for (int64_t i = 0; i < a->size; i++) {
            float v = a->dtype == LM_F32 ? ((const float *)(const void *)p)[i]
                                         : lm_f16_to_f32(((const uint16_t *)(const void *)p)[i]);
            if (isnan(v)) (*nan)++;
            else if (isinf(v)) (*inf)++;
        }
        return LM_OK;
    }
    lm_array *f = a->dtype == LM_F64 ? lm_array_retain(a) : lm_cast(a, LM_F64);
    lm_array *c = f ? lm_contiguous(f) : NULL;
    lm_array_release(f);
    if (!c) return lm_error_status();
    lm_status st = lm_array_eval(c);
    double *p = NULL;
    if (st == LM_OK && !c->buf->host) {
        p = malloc(lm_array_nbytes(c) + 8);
        if (!p) st = lm_error_set(LM_ERR_NOMEM, "trace: out of host memory");
        else st = lm_array_read(c, p, LM_F64);
    }
    if (st == LM_OK) {
        const double *d = p ? p : (const double *)c->buf->host + c->offset;
        for (int64_t i = 0; i < c->size; i++) {
            if (isnan(d[i])) (*nan)++;
            else if (isinf(d[i])) (*inf)++;
        }
    }
    free(p);
    lm_array_release(c);
    return st;
}
