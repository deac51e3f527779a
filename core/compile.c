/* compile.c - capture a traced graph, optimise it, replay it.  See compile.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "capture.h"
#include "compile.h"
#include "ops.h"
#include "ops_nn.h"
#include "replay.h"

#define MAX_FUSED_STEPS 32
#define MAX_FUSED_INPUTS 16

static int mode_ready;
static lm_compile_mode mode = LM_COMPILE_ON;

lm_compile_mode lm_compile_get_mode(void)
{
    if (!mode_ready) {
        const char *e = getenv("LUMEN_COMPILE");
        if (e && !strcmp(e, "0")) mode = LM_COMPILE_OFF;
        mode_ready = 1;
    }
    return mode;
}

void lm_compile_set_mode(lm_compile_mode m)
{
    mode_ready = 1;
    mode = m;
}

lm_array *lm_placeholder(int ndim, const int64_t *shape, lm_dtype dt, lm_device *dev)
{
    lm_array *a = lm_array_alloc(dt, ndim, shape, dev);
    if (a) a->flags |= LM_ARRAY_TRACER;
    return a;
}

/* ---- the recorded graph ---- */

/* The graph is a capture (capture.h): values [0, nin) the placeholders,
 * [nin, nin + nconst) the constants (its leaves), then one instruction per
 * captured node.  What the optimiser made of instruction k is fate[k]; a
 * fused group's root instruction becomes the FUSED node (params.ext a
 * shared program). */
typedef lm_capture_node instr;
typedef struct fate {
    int dead;             /* absorbed into a fused group, or an alias */
    int alias;            /* value this instr forwards to (no-op), or -1 */
    int into;             /* the fused group's root instr it went into, or -1 */
    int consumers;
} fate;

/* A fused program shared by the compiled function and the nodes it makes. */
typedef struct prog {
    lm_fused f;
    int refs;
    char names[256];
} prog;

struct lm_compiled {
    lm_capture g;         /* nph inputs, nleaf constants, n instrs, nout outputs */
    lm_capture_sig sig;   /* the placeholders' dtypes and shapes */
    fate *fate;
    int has_views;
    lm_replays *replays;  /* recorded device work of its calls (core/replay.c) */
    int kernels;          /* lm_compiled_kernels, once known (else -1) */
};

static void prog_release(void *p)
{
    prog *g = p;
    if (--g->refs > 0) return;
    free(g->f.steps);
    free(g);
}

/* values: [0, nin) placeholders, [nin, nin+nconst) constants, then instrs */
static int value_of_instr(const lm_compiled *c, int k) { return c->g.nph + c->g.nleaf + k; }
/* the instr a value is, or < 0 for a placeholder or a constant */
static int instr_of_value(const lm_compiled *c, int v) { return v - c->g.nph - c->g.nleaf; }

static bool is_elementwise(const instr *x)
{
    lm_op_class c = lm_op_class_of(x->op);
    if (c != LM_CLASS_UNARY && c != LM_CLASS_BINARY && c != LM_CLASS_TERNARY) return false;
    return x->offset == 0;
}

static bool same_geometry(const instr *x, int ndim, const int64_t *shape)
{
    if (x->ndim != ndim) return false;
    for (int d = 0; d < ndim; d++) if (x->shape[d] != shape[d]) return false;
    return true;
}

/* CSE key equality */
static bool same_instr(const instr *a, const instr *b)
{
    if (a->op != b->op || a->dtype != b->dtype || a->ndim != b->ndim || a->nin != b->nin ||
        a->offset != b->offset || a->params.ext || b->params.ext)
        return false;
    if (memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) ||
        memcmp(a->strides, b->strides, sizeof(int64_t) * (size_t)a->ndim) ||
        memcmp(a->params.f, b->params.f, sizeof a->params.f) || memcmp(a->params.i, b->params.i, sizeof a->params.i))
        return false;
    for (int k = 0; k < a->nin; k++) if (a->in[k] != b->in[k]) return false;
    return true;
}

static int resolve(const lm_compiled *c, int v)
{
    while (instr_of_value(c, v) >= 0 && c->fate[instr_of_value(c, v)].alias >= 0)
        v = c->fate[instr_of_value(c, v)].alias;
    return v;
}

static void fuse(lm_compiled *c)
{
    instr *code = c->g.nodes;
    fate *f = c->fate;
    /* consumers of each instr: other live instrs and the outputs */
    for (int k = 0; k < c->g.n; k++) f[k].consumers = 0;
    for (int k = 0; k < c->g.n; k++) {
        if (f[k].dead) continue;
        for (int j = 0; j < code[k].nin; j++) {
            int v = instr_of_value(c, code[k].in[j]), dup = 0;
            for (int q = 0; q < j; q++) dup |= code[k].in[q] == code[k].in[j];   /* x*x: one consumer */
            if (v >= 0 && !dup) f[v].consumers++;
        }
    }
    for (int o = 0; o < c->g.nout; o++) {
        int v = instr_of_value(c, c->g.out[o]);
        if (v >= 0) f[v].consumers += 2;   /* outputs are never absorbed */
    }
    for (int root = c->g.n - 1; root >= 0; root--) {
        instr *r = &code[root];
        if (f[root].dead || !is_elementwise(r)) continue;
        /* grow the group backwards over single-consumer elementwise inputs */
        int members[MAX_FUSED_STEPS], nm = 1;
        members[0] = root;
        bool in_group[MAX_FUSED_STEPS] = {0};
        (void)in_group;
        for (int scan = 0; scan < nm; scan++) {
            instr *x = &code[members[scan]];
            for (int j = 0; j < x->nin && nm < MAX_FUSED_STEPS; j++) {
                int v = instr_of_value(c, x->in[j]);
                if (v < 0) continue;
                instr *y = &code[v];
                bool already = false;
                for (int m = 0; m < nm; m++) already |= members[m] == v;
                if (already || f[v].dead || f[v].consumers != 1 || !is_elementwise(y) ||
                    !same_geometry(y, r->ndim, r->shape))
                    continue;
                members[nm++] = v;
            }
        }
        if (nm < 2) continue;
        /* members in topological (index) order */
        for (int a = 0; a < nm; a++)
            for (int b = a + 1; b < nm; b++)
                if (members[b] < members[a]) { int t = members[a]; members[a] = members[b]; members[b] = t; }
        int ext[MAX_FUSED_INPUTS * 4], next = 0;
        bool too_many = false;
        for (int m = 0; m < nm && !too_many; m++) {
            instr *x = &code[members[m]];
            for (int j = 0; j < x->nin; j++) {
                int v = x->in[j], internal = 0;
                for (int q = 0; q < nm; q++) internal |= value_of_instr(c, members[q]) == v;
                if (internal) continue;
                int seen = 0;
                for (int q = 0; q < next; q++) seen |= ext[q] == v;
                if (!seen) {
                    if (next == MAX_FUSED_INPUTS) { too_many = true; break; }
                    ext[next++] = v;
                }
            }
        }
        if (too_many) continue;
        prog *g = calloc(1, sizeof *g);
        lm_fused_step *steps = g ? calloc((size_t)nm, sizeof *steps) : NULL;
        int *ins = malloc(sizeof(int) * (size_t)next);
        if (!g || !steps || !ins) { free(g); free(steps); free(ins); return; }
        g->f.ninputs = next;
        g->f.nsteps = nm;
        g->f.steps = steps;
        g->refs = 1;
        for (int m = 0; m < nm; m++) {
            instr *x = &code[members[m]];
            lm_fused_step *s = &steps[m];
            s->op = x->op;
            s->dtype = x->dtype;
            s->nin = x->nin;
            s->params = x->params;
            for (int j = 0; j < x->nin; j++) {
                int v = x->in[j], reg = -1;
                for (int q = 0; q < nm; q++) if (value_of_instr(c, members[q]) == v) reg = next + q;
                for (int q = 0; reg < 0 && q < next; q++) if (ext[q] == v) reg = q;
                s->in[j] = reg;
            }
            size_t len = strlen(g->names);
            snprintf(g->names + len, sizeof g->names - len, "%s%s", m ? "," : "", lm_op_name(x->op));
        }
        memcpy(ins, ext, sizeof(int) * (size_t)next);
        for (int m = 0; m < nm - 1; m++) {
            f[members[m]].dead = 1;
            f[members[m]].into = root;
        }
        free(r->in);
        r->in = ins;
        r->nin = next;
        r->op = LM_OP_FUSED;
        memset(&r->params, 0, sizeof r->params);
        r->params.ext = g;
        r->params.ext_free = prog_release;
    }
}

/* what a trace cannot hold (lm_capture_check_fn): a node with extra data,
 * and a pending node that reads nothing (only a placeholder may) */
static lm_status traceable(const lm_array *a)
{
    if (a->params.ext) return lm_error_set(LM_ERR_UNSUPPORTED, "compile: %s cannot be traced", lm_op_name(a->op));
    if (a->ninputs == 0 || a->op == LM_OP_NONE)
        return lm_error_set(LM_ERR_STATE, "compile: an output depends on an unevaluated %s that is not an input",
                            lm_op_name(a->op));
    return LM_OK;
}

lm_compiled *lm_compile_graph(int nin, lm_array *const *ph, int nout, lm_array *const *outs, lm_compile_mode m)
{
    for (int i = 0; i < nout; i++) {
        if (!outs[i]) {
            lm_error_set(LM_ERR_ARG, "compile: output %d is not a tensor", i + 1);
            return NULL;
        }
    }
    /* fold: evaluate subgraphs that do not depend on a placeholder */
    lm_array **order = NULL;
    int64_t n = 0;
    if (lm_capture_order("compile", nout, outs, nin, ph, &order, &n) != LM_OK) return NULL;
    lm_pmap dep;   /* room for every key, so its puts never grow (nor fail) */
    if (!lm_pmap_init(&dep, n)) { free(order); lm_error_set(LM_ERR_NOMEM, "compile: out of host memory"); return NULL; }
    int64_t nfold = 0;
    lm_array **fold = malloc(sizeof *fold * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n && fold; i++) {
        lm_array *a = order[i];
        int d = 0;
        for (int k = 0; k < nin; k++) d |= a == ph[k];
        for (int k = 0; !a->buf && k < a->ninputs; k++) d |= lm_pmap_get(&dep, a->inputs[k]) == 1;
        lm_pmap_put(&dep, a, d);
        if (!d && !a->buf) fold[nfold++] = a;
    }
    lm_pmap_free(&dep);
    free(order);
    if (!fold || (nfold && lm_eval(fold, (int)nfold) != LM_OK)) {
        if (!fold) lm_error_set(LM_ERR_NOMEM, "compile: out of host memory");
        else lm_error_prefix("compile: folding constants");
        free(fold);
        return NULL;
    }
    free(fold);
    if (lm_capture_order("compile", nout, outs, nin, ph, &order, &n) != LM_OK) return NULL;

    lm_compiled *c = calloc(1, sizeof *c);
    if (!c || !lm_capture_sig_init(&c->sig, nin, ph)) {
        free(order);
        free(c);
        lm_error_set(LM_ERR_NOMEM, "compile: out of host memory");
        return NULL;
    }
    c->kernels = -1;
    lm_status st = lm_capture_graph(&c->g, "compile", nin, ph, nout, outs, order, n, traceable);
    free(order);
    if (st == LM_OK && !(c->fate = calloc((size_t)c->g.n + 1, sizeof *c->fate)))
        st = lm_error_set(LM_ERR_NOMEM, "compile: out of host memory");
    if (st != LM_OK) {
        lm_compiled_free(c);
        return NULL;
    }
    for (int k = 0; k < c->g.n; k++) {
        c->fate[k].alias = c->fate[k].into = -1;
        if (c->g.nodes[k].op == LM_OP_VIEW) c->has_views = 1;
    }
    if (m == LM_COMPILE_OFF) return c;
    /* CSE and no-op removal, in order so inputs are already canonical */
    for (int k = 0; k < c->g.n; k++) {
        instr *x = &c->g.nodes[k];
        fate *f = &c->fate[k];
        for (int j = 0; j < x->nin; j++) x->in[j] = resolve(c, x->in[j]);
        for (int q = 0; q < k && f->alias < 0; q++)
            if (!c->fate[q].dead && same_instr(&c->g.nodes[q], x)) f->alias = value_of_instr(c, q);
        if (f->alias < 0 && x->op == LM_OP_CAST && instr_of_value(c, x->in[0]) >= 0 &&
            c->g.nodes[instr_of_value(c, x->in[0])].dtype == x->dtype)
            f->alias = x->in[0];
        if (f->alias >= 0) f->dead = 1;
    }
    for (int o = 0; o < nout; o++) c->g.out[o] = resolve(c, c->g.out[o]);
    if (m == LM_COMPILE_ON) fuse(c);
    return c;
}

void lm_compiled_free(lm_compiled *c)
{
    if (!c) return;
    lm_replays_free(c->replays);   /* first: its runs read the constants */
    for (int k = 0; k < c->g.n; k++)
        if (c->g.nodes[k].params.ext) prog_release(c->g.nodes[k].params.ext);
    lm_capture_free(&c->g);
    lm_capture_sig_free(&c->sig);
    free(c->fate);
    free(c);
}

int lm_compiled_outputs(const lm_compiled *c) { return c->g.nout; }

int lm_compiled_kernels(const lm_compiled *c)
{
    int k = 0;
    for (int i = 0; i < c->g.n; i++) {
        if (c->fate[i].dead || c->g.nodes[i].op == LM_OP_VIEW) continue;
        /* casts the builders insert count as kernels too, as they run as such */
        k++;
    }
    return k;
}

char *lm_compiled_describe(const lm_compiled *c)
{
    size_t cap = 256 + (size_t)c->g.n * 160, len = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    len += (size_t)snprintf(s + len, cap - len, "compiled: %d inputs, %d constants, %d kernels\n", c->g.nph,
                            c->g.nleaf, lm_compiled_kernels(c));
    for (int i = 0; i < c->g.n && len < cap; i++) {
        const instr *x = &c->g.nodes[i];
        if (c->fate[i].dead) continue;
        char sh[128];
        lm_shape_str(sh, sizeof sh, x->ndim, x->shape);
        if (x->op == LM_OP_FUSED) {
            const prog *g = x->params.ext;
            len += (size_t)snprintf(s + len, cap - len, "  %%%d = fused(%s) %s%s  [%d ops, %d inputs]\n", i,
                                    g->names, lm_dtype_name(x->dtype), sh, g->f.nsteps, g->f.ninputs);
        } else {
            len += (size_t)snprintf(s + len, cap - len, "  %%%d = %s %s%s\n", i, lm_op_name(x->op),
                                    lm_dtype_name(x->dtype), sh);
        }
    }
    return s;
}

/* ---- replay ---- */

static lm_array *build_elementwise(lm_op op, lm_dtype dt, const lm_params *p, lm_array **in)
{
    switch (op) {
    case LM_OP_CAST: return lm_cast(in[0], dt);
    case LM_OP_CLAMP:
        return lm_clamp(in[0], (p->i[0] & 1) ? p->f[0] : NAN, (p->i[0] & 2) ? p->f[1] : NAN);
    case LM_OP_WHERE: return lm_where(in[0], in[1], in[2]);
    default:
        if (lm_op_class_of(op) == LM_CLASS_BINARY) return lm_binary(op, in[0], in[1]);
        return lm_unary(op, in[0]);
    }
}

/* the steps of a fused group one by one, for devices without fused kernels */
static lm_array *expand_fused(const prog *g, lm_array **in)
{
    lm_array *regs[MAX_FUSED_INPUTS + MAX_FUSED_STEPS] = {0};
    for (int k = 0; k < g->f.ninputs; k++) regs[k] = in[k];
    lm_array *r = NULL;
    int s = 0;
    for (; s < g->f.nsteps; s++) {
        const lm_fused_step *st = &g->f.steps[s];
        lm_array *args[3];
        for (int j = 0; j < st->nin; j++) args[j] = regs[st->in[j]];
        r = regs[g->f.ninputs + s] = build_elementwise(st->op, st->dtype, &st->params, args);
        if (!r) break;
    }
    for (int k = 0; k < s; k++) if (k + 1 < g->f.nsteps || !r) lm_array_release(regs[g->f.ninputs + k]);
    return s == g->f.nsteps ? r : NULL;
}

static lm_array *replay(const instr *x, lm_array **in, bool same_shapes)
{
    if (x->op == LM_OP_FUSED) {
        prog *g = x->params.ext;
        int nd = 0;
        int64_t shape[LM_MAX_DIMS];
        if (same_shapes) {
            nd = x->ndim;
            memcpy(shape, x->shape, sizeof shape);
        } else {
            for (int k = 0; k < x->nin; k++)
                if (lm_broadcast_shapes("fused", nd, shape, in[k]->ndim, in[k]->shape, &nd, shape) != LM_OK)
                    return NULL;
        }
        lm_params p = {0};
        p.ext = g;
        p.ext_free = prog_release;
        lm_array *node = lm_node_new(LM_OP_FUSED, x->dtype, nd, shape, x->nin, in, &p, NULL);
        if (!node) return NULL;
        g->refs++;
        lm_device *d = node->device;
        if (d->backend->run_fused && d->backend->supports(d, node)) return node;
        lm_array_release(node);
        return expand_fused(g, in);
    }
    if (x->op == LM_OP_VIEW) return lm_view_new(in[0], x->ndim, x->shape, x->strides, x->offset);
    lm_op_class cls = lm_op_class_of(x->op);
    if (!same_shapes) {
        if (cls == LM_CLASS_UNARY || cls == LM_CLASS_BINARY || cls == LM_CLASS_TERNARY)
            return build_elementwise(x->op, x->dtype, &x->params, in);
        if (x->op == LM_OP_CONCAT) return lm_concat(x->nin, in, (int)x->params.i[0]);
        if (x->op == LM_OP_CUMSUM) return lm_cumsum(in[0], (int)x->params.i[0]);
        if (cls == LM_CLASS_NN) return lm_nn_rebuild(x->op, &x->params, x->nin, in);
        if (cls == LM_CLASS_REDUCE) {
            int axes[LM_MAX_DIMS], na = 0;
            for (int d = 0; d < in[0]->ndim; d++) if (x->params.i[0] & (1 << d)) axes[na++] = d;
            bool keep = x->params.i[1] != 0;
            if (x->op == LM_OP_ARGMAX || x->op == LM_OP_ARGMIN) return lm_argreduce(x->op, in[0], axes[0], keep);
            if (x->op == LM_OP_VAR) return lm_var(in[0], na, axes, (int)x->params.i[2], keep);
            if (x->op == LM_OP_STD) return lm_std(in[0], na, axes, (int)x->params.i[2], keep);
            return lm_reduce(x->op, in[0], na, axes, keep);
        }
        lm_error_set(LM_ERR_SHAPE, "compile: %s needs a retrace for new shapes", lm_op_name(x->op));
        return NULL;
    }
    return lm_node_new(x->op, x->dtype, x->ndim, x->shape, x->nin, in, &x->params, NULL);
}

static int call(lm_compiled *c, int nin, lm_array *const *inputs, lm_array **outs, lm_array **each,
                int *into);

static int build_call(void *ctx, lm_array *const *inputs, lm_array **outs)
{
    lm_compiled *c = ctx;
    return call(c, c->g.nph, inputs, outs, NULL, NULL);
}

int lm_compiled_call(lm_compiled *c, int nin, lm_array *const *inputs, lm_array **outs)
{
    /* a call seen before replays its recorded device work (replay.h);
     * a miscounted call gets call()'s message */
    if (nin == c->g.nph) {
        if (c->kernels < 0) c->kernels = lm_compiled_kernels(c);
        int r = lm_replay_call(&c->replays, nin, inputs, c->g.nleaf, c->g.leaves, c->g.nout, c->kernels, build_call, c,
                               outs);
        if (r != LM_REPLAY_NOT_HANDLED) return r;
    }
    return call(c, nin, inputs, outs, NULL, NULL);
}

int lm_compiled_call_each(lm_compiled *c, int nin, lm_array *const *inputs, int ninstr,
                          lm_array **each, int *into)
{
    if (ninstr != c->g.n) {
        lm_error_set(LM_ERR_STATE, "compiled function: %d instructions, asked for %d", c->g.n, ninstr);
        return -1;
    }
    lm_array **outs = calloc((size_t)c->g.nout + 1, sizeof *outs);
    if (!outs) {
        lm_error_set(LM_ERR_NOMEM, "compile: out of host memory");
        return -1;
    }
    int r = call(c, nin, inputs, outs, each, into);
    for (int o = 0; o < c->g.nout; o++) lm_array_release(outs[o]);
    free(outs);
    return r;
}

static int call(lm_compiled *c, int nin, lm_array *const *inputs, lm_array **outs, lm_array **each,
                int *into)
{
    if (nin != c->g.nph) {
        lm_error_set(LM_ERR_ARG, "compiled function: traced with %d inputs, called with %d", c->g.nph, nin);
        return -1;
    }
    bool same = true;
    for (int k = 0; k < nin; k++) {
        if (!inputs[k]) return -1;
        if (!lm_capture_sig_kind(&c->sig, k, inputs[k])) {
            lm_error_set(LM_ERR_ARG, "compiled function: input %d is %s with %d dims, traced as %s with %d",
                         k + 1, lm_dtype_name(inputs[k]->dtype), inputs[k]->ndim, lm_dtype_name(c->sig.dtype[k]),
                         c->sig.ndim[k]);
            return -1;
        }
        same &= lm_capture_sig_shape(&c->sig, k, inputs[k]);
    }
    if (!same && c->has_views) {
        lm_error_set(LM_ERR_SHAPE, "compiled function: new input shapes need a retrace (the trace has views)");
        return -2;
    }
    int nv = c->g.nph + c->g.nleaf + c->g.n;
    lm_array **v = calloc((size_t)nv, sizeof *v);
    if (!v) {
        lm_error_set(LM_ERR_NOMEM, "compile: out of host memory");
        return -1;
    }
    int status = c->g.nout;
    /* views were recorded against contiguous placeholders */
    for (int k = 0; k < nin; k++) v[k] = c->has_views ? lm_contiguous(inputs[k]) : lm_array_retain(inputs[k]);
    for (int k = 0; k < c->g.nleaf; k++) v[c->g.nph + k] = lm_array_retain(c->g.leaves[k]);
    for (int i = 0; i < c->g.n; i++) {
        const instr *x = &c->g.nodes[i];
        if (c->fate[i].dead) continue;
        lm_array *args[64], **ap = args, **heap = NULL;
        if (x->nin > 64) ap = heap = malloc(sizeof *heap * (size_t)x->nin);
        bool ok = ap != NULL;
        for (int j = 0; ok && j < x->nin; j++) ok = (ap[j] = v[x->in[j]]) != NULL;
        lm_array *r = ok ? replay(x, ap, same) : NULL;
        free(heap);
        if (!r) {
            status = -1;
            lm_error_prefix("compiled function");
            break;
        }
        v[value_of_instr(c, i)] = r;
    }
    for (int o = 0; o < c->g.nout; o++) outs[o] = status >= 0 ? lm_array_retain(v[c->g.out[o]]) : NULL;
    for (int i = 0; each && i < c->g.n; i++) {
        const fate *f = &c->fate[i];
        int src = f->alias >= 0 ? resolve(c, f->alias) : value_of_instr(c, i);
        int at = instr_of_value(c, src);   /* negative: an input's value */
        into[i] = f->into >= 0 ? f->into : f->alias >= 0 && at >= 0 ? at : -1;
        each[i] = status >= 0 && f->into < 0 ? lm_array_retain(v[src]) : NULL;
    }
    for (int k = 0; k < nv; k++) lm_array_release(v[k]);
    free(v);
    return status;
}

/* ---- Graphviz ---- */

lm_status lm_export_dot(lm_array *a, const char *path)
{
    if (!a) return lm_error_status();
    lm_array **order;
    int64_t n;
    lm_status st = lm_capture_order("compile", 1, &a, 0, NULL, &order, &n);
    if (st != LM_OK) return st;
    FILE *f = fopen(path, "w");
    if (!f) {
        free(order);
        return lm_error_set(LM_ERR_IO, "export_dot: cannot write %s", path);
    }
    fprintf(f, "digraph lumen {\n  rankdir=TB;\n  node [fontname=\"monospace\"];\n");
    for (int64_t i = 0; i < n; i++) {
        lm_array *x = order[i];
        char sh[128];
        lm_shape_str(sh, sizeof sh, x->ndim, x->shape);
        const char *label = x->buf ? "data" : lm_op_name(x->op);
        fprintf(f, "  n%llu [label=\"%s\\n%s%s\"%s];\n", (unsigned long long)x->id, label,
                lm_dtype_name(x->dtype), sh, x->buf ? " shape=box style=filled fillcolor=lightgrey" : "");
        for (int k = 0; !x->buf && k < x->ninputs; k++)
            fprintf(f, "  n%llu -> n%llu;\n", (unsigned long long)x->inputs[k]->id, (unsigned long long)x->id);
    }
    fprintf(f, "}\n");
    free(order);
    if (fclose(f) != 0) return lm_error_set(LM_ERR_IO, "export_dot: error writing %s", path);
    return LM_OK;
}
