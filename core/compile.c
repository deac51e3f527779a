/* compile.c - capture a traced graph, optimise it, replay it.  See compile.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
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

typedef struct instr {
    lm_op op;
    lm_dtype dtype;
    int ndim;
    int64_t shape[LM_MAX_DIMS], strides[LM_MAX_DIMS], offset;
    int nin;
    int *in;              /* value indices */
    lm_params params;     /* ext only for FUSED (a shared program) */
    int dead;             /* absorbed into a fused group, or an alias */
    int alias;            /* value this instr forwards to (no-op), or -1 */
    int into;             /* the fused group's root instr it went into, or -1 */
    int consumers;
} instr;

/* A fused program shared by the compiled function and the nodes it makes. */
typedef struct prog {
    lm_fused f;
    int refs;
    char names[256];
} prog;

struct lm_compiled {
    int nin, nconst, ninstr, nout;
    lm_dtype *in_dtype;
    int *in_ndim;
    int64_t (*in_shape)[LM_MAX_DIMS];
    lm_array **consts;
    instr *code;
    int *out;             /* value indices */
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
static int value_of_instr(const lm_compiled *c, int k) { return c->nin + c->nconst + k; }

/* Post-order of everything between the outputs and the leaves. */
static lm_status collect(lm_array *const *outs, int n, int nph, lm_array *const *ph, lm_array ***order, int64_t *norder)
{
    int64_t cap = 256, cnt = 0, sp = 0, scap = 256;
    lm_array **ord = malloc((size_t)cap * sizeof *ord), **stack = malloc((size_t)scap * sizeof *stack);
    lm_pmap seen = {0};
    if (!ord || !stack || !lm_pmap_init(&seen, 4096)) {
        free(ord); free(stack); lm_pmap_free(&seen);
        return lm_error_set(LM_ERR_NOMEM, "compile: out of host memory");
    }
    lm_status st = LM_OK;
    for (int i = 0; i < n && st == LM_OK; i++) {
        if (lm_pmap_get(&seen, outs[i]) >= 0) continue;
        if (!lm_pmap_put(&seen, outs[i], 0)) { st = LM_ERR_NOMEM; break; }
        stack[sp++] = outs[i];
        while (sp && st == LM_OK) {
            lm_array *a = stack[sp - 1];
            bool leaf = a->buf != NULL;
            for (int k = 0; k < nph; k++) leaf |= a == ph[k];
            bool pushed = false;
            for (int k = 0; !leaf && k < a->ninputs; k++) {
                lm_array *in = a->inputs[k];
                if (lm_pmap_get(&seen, in) >= 0) continue;
                if (!lm_pmap_put(&seen, in, 0)) { st = LM_ERR_NOMEM; break; }
                if (sp == scap) { scap *= 2; lm_array **ns = realloc(stack, (size_t)scap * sizeof *ns); if (!ns) { st = LM_ERR_NOMEM; break; } stack = ns; }
                stack[sp++] = in;
                pushed = true;
                break;
            }
            if (pushed || st != LM_OK) continue;
            sp--;
            if (cnt == cap) { cap *= 2; lm_array **no = realloc(ord, (size_t)cap * sizeof *no); if (!no) { st = LM_ERR_NOMEM; break; } ord = no; }
            ord[cnt++] = a;
        }
    }
    free(stack);
    lm_pmap_free(&seen);
    if (st != LM_OK) { free(ord); return lm_error_set(LM_ERR_NOMEM, "compile: out of host memory"); }
    *order = ord;
    *norder = cnt;
    return LM_OK;
}

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
    while (v >= c->nin + c->nconst && c->code[v - c->nin - c->nconst].alias >= 0)
        v = c->code[v - c->nin - c->nconst].alias;
    return v;
}

static void fuse(lm_compiled *c)
{
    /* consumers of each instr: other live instrs and the outputs */
    for (int k = 0; k < c->ninstr; k++) c->code[k].consumers = 0;
    for (int k = 0; k < c->ninstr; k++) {
        if (c->code[k].dead) continue;
        for (int j = 0; j < c->code[k].nin; j++) {
            int v = c->code[k].in[j] - c->nin - c->nconst, dup = 0;
            for (int q = 0; q < j; q++) dup |= c->code[k].in[q] == c->code[k].in[j];   /* x*x: one consumer */
            if (v >= 0 && !dup) c->code[v].consumers++;
        }
    }
    for (int o = 0; o < c->nout; o++) {
        int v = c->out[o] - c->nin - c->nconst;
        if (v >= 0) c->code[v].consumers += 2;   /* outputs are never absorbed */
    }
    for (int root = c->ninstr - 1; root >= 0; root--) {
        instr *r = &c->code[root];
        if (r->dead || !is_elementwise(r)) continue;
        /* grow the group backwards over single-consumer elementwise inputs */
        int members[MAX_FUSED_STEPS], nm = 1;
        members[0] = root;
        bool in_group[MAX_FUSED_STEPS] = {0};
        (void)in_group;
        for (int scan = 0; scan < nm; scan++) {
            instr *x = &c->code[members[scan]];
            for (int j = 0; j < x->nin && nm < MAX_FUSED_STEPS; j++) {
                int v = x->in[j] - c->nin - c->nconst;
                if (v < 0) continue;
                instr *y = &c->code[v];
                bool already = false;
                for (int m = 0; m < nm; m++) already |= members[m] == v;
                if (already || y->dead || y->consumers != 1 || !is_elementwise(y) ||
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
            instr *x = &c->code[members[m]];
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
            instr *x = &c->code[members[m]];
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
            c->code[members[m]].dead = 1;
            c->code[members[m]].into = root;
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
    if (collect(outs, nout, nin, ph, &order, &n) != LM_OK) return NULL;
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
    if (collect(outs, nout, nin, ph, &order, &n) != LM_OK) return NULL;

    lm_compiled *c = calloc(1, sizeof *c);
    lm_pmap idx = {0};   /* room for every key, so its puts never grow (nor fail) */
    if (!c || !lm_pmap_init(&idx, n + nin)) goto nomem;
    c->kernels = -1;
    c->nin = nin;
    c->in_dtype = calloc((size_t)nin + 1, sizeof *c->in_dtype);
    c->in_ndim = calloc((size_t)nin + 1, sizeof *c->in_ndim);
    c->in_shape = calloc((size_t)nin + 1, sizeof *c->in_shape);
    c->consts = calloc((size_t)n + 1, sizeof *c->consts);
    c->code = calloc((size_t)n + 1, sizeof *c->code);
    c->out = calloc((size_t)nout + 1, sizeof *c->out);
    if (!c->in_dtype || !c->in_ndim || !c->in_shape || !c->consts || !c->code || !c->out) goto nomem;
    for (int k = 0; k < nin; k++) {
        lm_pmap_put(&idx, ph[k], k);
        c->in_dtype[k] = ph[k]->dtype;
        c->in_ndim[k] = ph[k]->ndim;
        memcpy(c->in_shape[k], ph[k]->shape, sizeof c->in_shape[k]);
    }
    /* constants first (their indices must precede instrs), then instrs */
    for (int64_t i = 0; i < n; i++) {
        lm_array *a = order[i];
        if (lm_pmap_get(&idx, a) >= 0 || !a->buf) continue;
        c->consts[c->nconst] = lm_array_retain(a);
        lm_pmap_put(&idx, a, nin + c->nconst++);
    }
    for (int64_t i = 0; i < n; i++) {
        lm_array *a = order[i];
        if (lm_pmap_get(&idx, a) >= 0) continue;
        if (a->params.ext) {
            lm_error_set(LM_ERR_UNSUPPORTED, "compile: %s cannot be traced", lm_op_name(a->op));
            goto fail;
        }
        if (a->ninputs == 0 || a->op == LM_OP_NONE) {
            lm_error_set(LM_ERR_STATE, "compile: an output depends on an unevaluated %s that is not an input",
                         lm_op_name(a->op));
            goto fail;
        }
        instr *x = &c->code[c->ninstr];
        x->op = a->op;
        x->dtype = a->dtype;
        x->ndim = a->ndim;
        memcpy(x->shape, a->shape, sizeof x->shape);
        memcpy(x->strides, a->strides, sizeof x->strides);
        x->offset = a->offset;
        x->params = a->params;
        x->alias = -1;
        x->into = -1;
        x->nin = a->ninputs;
        x->in = malloc(sizeof(int) * (size_t)a->ninputs);
        if (!x->in) goto nomem;
        for (int k = 0; k < a->ninputs; k++) x->in[k] = lm_pmap_get(&idx, a->inputs[k]);
        if (a->op == LM_OP_VIEW) c->has_views = 1;
        lm_pmap_put(&idx, a, nin + c->nconst + c->ninstr++);
    }
    for (int o = 0; o < nout; o++) c->out[o] = lm_pmap_get(&idx, outs[o]);
    c->nout = nout;
    free(order);
    order = NULL;
    lm_pmap_free(&idx);
    if (m == LM_COMPILE_OFF) return c;
    /* CSE and no-op removal, in order so inputs are already canonical */
    for (int k = 0; k < c->ninstr; k++) {
        instr *x = &c->code[k];
        for (int j = 0; j < x->nin; j++) x->in[j] = resolve(c, x->in[j]);
        for (int q = 0; q < k && x->alias < 0; q++)
            if (!c->code[q].dead && same_instr(&c->code[q], x)) x->alias = value_of_instr(c, q);
        if (x->alias < 0 && x->op == LM_OP_CAST && x->in[0] >= c->nin + c->nconst &&
            c->code[x->in[0] - c->nin - c->nconst].dtype == x->dtype)
            x->alias = x->in[0];
        if (x->alias >= 0) x->dead = 1;
    }
    for (int o = 0; o < nout; o++) c->out[o] = resolve(c, c->out[o]);
    if (m == LM_COMPILE_ON) fuse(c);
    return c;
nomem:
    lm_error_set(LM_ERR_NOMEM, "compile: out of host memory");
fail:
    free(order);
    lm_pmap_free(&idx);
    lm_compiled_free(c);
    return NULL;
}

void lm_compiled_free(lm_compiled *c)
{
    if (!c) return;
    lm_replays_free(c->replays);   /* first: its runs read the constants */
    for (int k = 0; k < c->nconst; k++) lm_array_release(c->consts[k]);
    for (int k = 0; k < c->ninstr; k++) {
        free(c->code[k].in);
        if (c->code[k].params.ext) prog_release(c->code[k].params.ext);
    }
    free(c->consts);
    free(c->code);
    free(c->out);
    free(c->in_dtype);
    free(c->in_ndim);
    free(c->in_shape);
    free(c);
}

int lm_compiled_outputs(const lm_compiled *c) { return c->nout; }

int lm_compiled_kernels(const lm_compiled *c)
{
    int k = 0;
    for (int i = 0; i < c->ninstr; i++) {
        if (c->code[i].dead || c->code[i].op == LM_OP_VIEW) continue;
        /* casts the builders insert count as kernels too, as they run as such */
        k++;
    }
    return k;
}

char *lm_compiled_describe(const lm_compiled *c)
{
    size_t cap = 256 + (size_t)c->ninstr * 160, len = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    len += (size_t)snprintf(s + len, cap - len, "compiled: %d inputs, %d constants, %d kernels\n", c->nin,
                            c->nconst, lm_compiled_kernels(c));
    for (int i = 0; i < c->ninstr && len < cap; i++) {
        const instr *x = &c->code[i];
        if (x->dead) continue;
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
    return call(c, c->nin, inputs, outs, NULL, NULL);
}

int lm_compiled_call(lm_compiled *c, int nin, lm_array *const *inputs, lm_array **outs)
{
    /* a call seen before replays its recorded device work (replay.h);
     * a miscounted call gets call()'s message */
    if (nin == c->nin) {
        if (c->kernels < 0) c->kernels = lm_compiled_kernels(c);
        int r = lm_replay_call(&c->replays, nin, inputs, c->nconst, c->consts, c->nout, c->kernels, build_call, c,
                               outs);
        if (r != LM_REPLAY_NOT_HANDLED) return r;
    }
    return call(c, nin, inputs, outs, NULL, NULL);
}

int lm_compiled_call_each(lm_compiled *c, int nin, lm_array *const *inputs, int ninstr,
                          lm_array **each, int *into)
{
    if (ninstr != c->ninstr) {
        lm_error_set(LM_ERR_STATE, "compiled function: %d instructions, asked for %d", c->ninstr, ninstr);
        return -1;
    }
    lm_array **outs = calloc((size_t)c->nout + 1, sizeof *outs);
    if (!outs) {
        lm_error_set(LM_ERR_NOMEM, "compile: out of host memory");
        return -1;
    }
    int r = call(c, nin, inputs, outs, each, into);
    for (int o = 0; o < c->nout; o++) lm_array_release(outs[o]);
    free(outs);
    return r;
}

static int call(lm_compiled *c, int nin, lm_array *const *inputs, lm_array **outs, lm_array **each,
                int *into)
{
    if (nin != c->nin) {
        lm_error_set(LM_ERR_ARG, "compiled function: traced with %d inputs, called with %d", c->nin, nin);
        return -1;
    }
    bool same = true;
    for (int k = 0; k < nin; k++) {
        if (!inputs[k]) return -1;
        if (inputs[k]->dtype != c->in_dtype[k] || inputs[k]->ndim != c->in_ndim[k]) {
            lm_error_set(LM_ERR_ARG, "compiled function: input %d is %s with %d dims, traced as %s with %d",
                         k + 1, lm_dtype_name(inputs[k]->dtype), inputs[k]->ndim, lm_dtype_name(c->in_dtype[k]),
                         c->in_ndim[k]);
            return -1;
        }
        same &= !memcmp(inputs[k]->shape, c->in_shape[k], sizeof(int64_t) * (size_t)c->in_ndim[k]);
    }
    if (!same && c->has_views) {
        lm_error_set(LM_ERR_SHAPE, "compiled function: new input shapes need a retrace (the trace has views)");
        return -2;
    }
    int nv = c->nin + c->nconst + c->ninstr;
    lm_array **v = calloc((size_t)nv, sizeof *v);
    if (!v) {
        lm_error_set(LM_ERR_NOMEM, "compile: out of host memory");
        return -1;
    }
    int status = c->nout;
    /* views were recorded against contiguous placeholders */
    for (int k = 0; k < nin; k++) v[k] = c->has_views ? lm_contiguous(inputs[k]) : lm_array_retain(inputs[k]);
    for (int k = 0; k < c->nconst; k++) v[c->nin + k] = lm_array_retain(c->consts[k]);
    for (int i = 0; i < c->ninstr; i++) {
        const instr *x = &c->code[i];
        if (x->dead) continue;
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
    for (int o = 0; o < c->nout; o++) outs[o] = status >= 0 ? lm_array_retain(v[c->out[o]]) : NULL;
    for (int i = 0; each && i < c->ninstr; i++) {
        const instr *x = &c->code[i];
        int src = x->alias >= 0 ? resolve(c, x->alias) : value_of_instr(c, i);
        int at = src - c->nin - c->nconst;   /* negative: an input's value */
        into[i] = x->into >= 0 ? x->into : x->alias >= 0 && at >= 0 ? at : -1;
        each[i] = status >= 0 && x->into < 0 ? lm_array_retain(v[src]) : NULL;
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
    lm_status st = collect(&a, 1, 0, NULL, &order, &n);
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
