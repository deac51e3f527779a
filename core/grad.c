/* grad.c - the backward pass: order the graph between inputs and outputs,
 * then push cotangents from the outputs back, one node at a time, through
 * the rules of grad_rules.c, summing where a node feeds several consumers.
 * A composite op is differentiated by walking its forward rebuilt from
 * primitives (composite_rule), so the walk recurses; the rules never do.
 * Cotangents are freed as soon as their node has been processed, so the
 * pass holds at most the frontier of the graph. */
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "grad.h"
#include "grad_rules.h"

static lm_array *identity_view(lm_array *x)
{
    if (!x) return NULL;
    lm_array *v = lm_node_new(LM_OP_VIEW, x->dtype, x->ndim, x->shape, 1, &x, NULL, x->device);
    if (!v) return NULL;
    memcpy(v->strides, x->strides, sizeof v->strides);
    v->offset = x->offset;
    v->flags |= x->flags & LM_ARRAY_TRACER;
    return v;
}

lm_array *lm_grad_leaf(lm_array *x) { return identity_view(x); }

lm_array *lm_stop_gradient(lm_array *x)
{
    if (!x) return NULL;
    if (lm_array_is_evaluated(x)) {
        /* an evaluated view has no graph: nothing flows through it */
        return lm_view_new(x, x->ndim, x->shape, x->strides, x->offset);
    }
    lm_array *v = identity_view(x);
    if (v) v->params.i[LM_PARAM_INTS - 1] = LM_GRAD_STOP_MARK;
    return v;
}

/* ---- a pointer -> slot map (open addressing) ---- */
typedef struct gnode {
    lm_array *a;
    lm_array *cot;      /* accumulated cotangent (owned) */
    int input;          /* index in inputs[] or -1 */
    bool need;          /* some input is reachable from here */
} gnode;

typedef struct gmap {
    int *slot;          /* cap entries, -1 empty, else index into nodes */
    int cap;
    gnode *nodes;
    int n, ncap;
} gmap;

static size_t hash_ptr(const void *p) { return ((uintptr_t)p >> 4) * 2654435761u; }

static int map_find(const gmap *m, const lm_array *a)
{
    if (!m->cap) return -1;
    size_t h = hash_ptr(a) & (size_t)(m->cap - 1);
    while (m->slot[h] >= 0) {
        if (m->nodes[m->slot[h]].a == a) return m->slot[h];
        h = (h + 1) & (size_t)(m->cap - 1);
    }
    return -1;
}

static bool map_grow(gmap *m)
{
    int nc = m->cap ? m->cap * 2 : 256;
    int *ns = malloc((size_t)nc * sizeof *ns);
    if (!ns) return false;
    for (int i = 0; i < nc; i++) ns[i] = -1;
    for (int i = 0; i < m->n; i++) {
        size_t h = hash_ptr(m->nodes[i].a) & (size_t)(nc - 1);
        while (ns[h] >= 0) h = (h + 1) & (size_t)(nc - 1);
        ns[h] = i;
    }
    free(m->slot);
    m->slot = ns;
    m->cap = nc;
    return true;
}

static int map_add(gmap *m, lm_array *a)
{
    if ((m->n + 1) * 2 > m->cap && !map_grow(m)) return -1;
    if (m->n == m->ncap) {
        int nc = m->ncap ? m->ncap * 2 : 256;
        gnode *nn = realloc(m->nodes, (size_t)nc * sizeof *nn);
        if (!nn) return -1;
        m->nodes = nn;
        m->ncap = nc;
    }
    size_t h = hash_ptr(a) & (size_t)(m->cap - 1);
    while (m->slot[h] >= 0) h = (h + 1) & (size_t)(m->cap - 1);
    m->slot[h] = m->n;
    m->nodes[m->n] = (gnode){a, NULL, -1, false};
    return m->n++;
}

/* Post-order (inputs before consumers) of the nodes reachable from the
 * outputs without crossing an input or a stop_gradient view. */
static lm_status order_graph(gmap *m, int nout, lm_array *const *outputs, int nin,
                             lm_array *const *inputs)
{
    for (int i = 0; i < nin; i++) {
        int k = map_find(m, inputs[i]);
        if (k < 0 && (k = map_add(m, inputs[i])) < 0) goto nomem;
        m->nodes[k].input = i;
        m->nodes[k].need = true;
    }
    int nin_nodes = m->n;
    typedef struct { lm_array *a; int next; } frame;
    frame *st = NULL;
    int sn = 0, scap = 0;
    int *order = NULL, on = 0, ocap = 0;
    for (int o = 0; o < nout; o++) {
        if (map_find(m, outputs[o]) >= 0) continue;
        if (map_add(m, outputs[o]) < 0) goto nomem2;
        if (sn == scap) { scap = scap ? scap * 2 : 64; frame *ns = realloc(st, (size_t)scap * sizeof *ns); if (!ns) goto nomem2; st = ns; }
        st[sn++] = (frame){outputs[o], 0};
        while (sn > 0) {
            frame *f = &st[sn - 1];
            lm_array *a = f->a;
            bool leaf = lm_grad_is_stop(a);
            if (!leaf && f->next < a->ninputs) {
                lm_array *in = a->inputs[f->next++];
                if (!in || map_find(m, in) >= 0) continue;
                if (map_add(m, in) < 0) goto nomem2;
                if (sn == scap) { scap *= 2; frame *ns = realloc(st, (size_t)scap * sizeof *ns); if (!ns) goto nomem2; st = ns; }
                st[sn++] = (frame){in, 0};
                continue;
            }
            /* all inputs done: need = any input needs */
            int k = map_find(m, a);
            if (!leaf)
                for (int i = 0; i < a->ninputs; i++) {
                    int ki = a->inputs[i] ? map_find(m, a->inputs[i]) : -1;
                    if (ki >= 0 && m->nodes[ki].need) m->nodes[k].need = true;
                }
            if (on == ocap) { ocap = ocap ? ocap * 2 : 256; int *no = realloc(order, (size_t)ocap * sizeof *no); if (!no) goto nomem2; order = no; }
            order[on++] = k;
            sn--;
        }
    }
    free(st);
    /* reorder nodes: inputs' slots stay first (they are never processed),
     * the rest in post-order; rebuild the map */
    gnode *nodes = malloc((size_t)(nin_nodes + on + 1) * sizeof *nodes);
    if (!nodes) { free(order); goto nomem; }
    int n = 0;
    for (int i = 0; i < nin_nodes; i++) nodes[n++] = m->nodes[i];
    for (int i = 0; i < on; i++)
        if (order[i] >= nin_nodes) nodes[n++] = m->nodes[order[i]];
    free(order);
    free(m->nodes);
    m->nodes = nodes;
    m->n = n;
    m->ncap = n;
    for (int i = 0; i < m->cap; i++) m->slot[i] = -1;
    for (int i = 0; i < n; i++) {
        size_t h = hash_ptr(nodes[i].a) & (size_t)(m->cap - 1);
        while (m->slot[h] >= 0) h = (h + 1) & (size_t)(m->cap - 1);
        m->slot[h] = i;
    }
    return LM_OK;
nomem2:
    free(st);
    free(order);
nomem:
    return lm_error_set(LM_ERR_NOMEM, "grad: out of memory ordering the graph");
}

/* cot += g (takes over g) */
static lm_status accumulate(gnode *n, lm_array *g)
{
    if (!g) return lm_error_status();
    if (g->dtype != n->a->dtype) {
        lm_array *c = lm_cast(g, n->a->dtype);
        lm_array_release(g);
        if (!(g = c)) return lm_error_status();
    }
    if (g->ndim != n->a->ndim || memcmp(g->shape, n->a->shape, sizeof(int64_t) * (size_t)g->ndim)) {
        lm_array *b = lm_broadcast_to(g, n->a->ndim, n->a->shape);
        lm_array_release(g);
        if (!(g = b)) return lm_error_status();
    }
    if (!n->cot) { n->cot = g; return LM_OK; }
    lm_array *s = lm_binary(LM_OP_ADD, n->cot, g);
    lm_array_release(g);
    if (!s) return lm_error_status();
    lm_array_release(n->cot);
    n->cot = s;
    return LM_OK;
}

/* A composite op's gradient: its forward rebuilt from primitive builders
 * on fresh leaves (lm_grad_rebuild), walked by lm_vjp: one rule per
 * primitive, checked once.  Inputs that need no gradient enter as
 * constants (stop_gradient views). */
static lm_status composite_rule(lm_array *n, lm_array *g, const bool *need, lm_array **gin)
{
    lm_array *lv[64] = {0}, *ins[64], *outs[64] = {0}, *y = NULL;
    int map[64], m = 0;
    lm_status st = LM_OK;
    for (int i = 0; i < n->ninputs && st == LM_OK; i++) {
        lv[i] = need[i] ? lm_grad_leaf(n->inputs[i]) : lm_stop_gradient(n->inputs[i]);
        if (!lv[i]) st = lm_error_status();
        else if (need[i]) { map[m] = i; ins[m++] = lv[i]; }
    }
    if (st == LM_OK && !(y = lm_grad_rebuild(n, lv))) st = lm_error_status();
    if (y && y->dtype != n->dtype) {
        lm_array *c = lm_cast(y, n->dtype);
        lm_array_release(y);
        if (!(y = c)) st = lm_error_status();
    }
    if (st == LM_OK) st = lm_vjp(1, &y, &g, m, ins, outs);
    for (int j = 0; j < m && st == LM_OK; j++) gin[map[j]] = outs[j];
    lm_array_release(y);
    for (int i = 0; i < n->ninputs; i++) lm_array_release(lv[i]);
    return st;
}

lm_status lm_vjp(int nout, lm_array *const *outputs, lm_array *const *cotangents,
                 int nin, lm_array *const *inputs, lm_array **grads)
{
    for (int i = 0; i < nin; i++) grads[i] = NULL;
    for (int i = 0; i < nout; i++)
        if (!outputs[i] || !cotangents[i]) return lm_error_status();
    for (int i = 0; i < nin; i++)
        if (!inputs[i]) return lm_error_status();
    gmap m = {0};
    lm_status st = order_graph(&m, nout, outputs, nin, inputs);
    for (int o = 0; o < nout && st == LM_OK; o++) {
        char s1[64], s2[64];
        const lm_array *c = cotangents[o], *y = outputs[o];
        if (c->ndim != y->ndim || memcmp(c->shape, y->shape, sizeof(int64_t) * (size_t)c->ndim)) {
            st = lm_error_set(LM_ERR_SHAPE, "vjp: cotangent %s does not match output %d %s",
                              lm_desc(s1, sizeof s1, c), o + 1, lm_desc(s2, sizeof s2, y));
            break;
        }
        int k = map_find(&m, y);
        if (k >= 0 && m.nodes[k].need) st = accumulate(&m.nodes[k], lm_array_retain(cotangents[o]));
    }
    for (int k = m.n - 1; k >= 0 && st == LM_OK; k--) {
        gnode *n = &m.nodes[k];
        if (n->input >= 0 || !n->cot || !n->need || lm_grad_is_stop(n->a)) continue;
        lm_array *a = n->a;
        if (!lm_dtype_is_float(a->dtype)) {
            /* name the op that made the integers, not the +1 or cast after it */
            const lm_array *o = a;
            while ((lm_op_class_of(o->op) == LM_CLASS_UNARY || lm_op_class_of(o->op) == LM_CLASS_BINARY ||
                    o->op == LM_OP_VIEW) && o->ninputs > 0 && o->inputs[0] &&
                   !lm_dtype_is_float(o->inputs[0]->dtype) && o->inputs[0]->ninputs > 0)
                o = o->inputs[0];
            char s1[64];
            st = lm_error_set(LM_ERR_UNSUPPORTED, "grad: %s is not differentiable (its output is %s)",
                              lm_op_name(o->op), lm_desc(s1, sizeof s1, o));
            break;
        }
        bool need[64] = {0};
        lm_array *gin[64] = {0};
        if (a->ninputs > 64) { st = lm_error_set(LM_ERR_UNSUPPORTED, "grad: %s has %d inputs (at most 64)", lm_op_name(a->op), a->ninputs); break; }
        bool any = false;
        for (int i = 0; i < a->ninputs; i++) {
            int ki = a->inputs[i] ? map_find(&m, a->inputs[i]) : -1;
            need[i] = ki >= 0 && m.nodes[ki].need;
            any |= need[i];
        }
        if (any) st = lm_grad_is_composite(a) ? composite_rule(a, n->cot, need, gin)
                                              : lm_grad_rule(a, n->cot, need, gin);
        lm_array_release(n->cot);
        n->cot = NULL;
        for (int i = 0; i < a->ninputs; i++) {
            if (st == LM_OK && gin[i] && need[i]) {
                st = accumulate(&m.nodes[map_find(&m, a->inputs[i])], gin[i]);
            } else lm_array_release(gin[i]);
        }
    }
    for (int i = 0; i < nin && st == LM_OK; i++) {
        gnode *n = &m.nodes[map_find(&m, inputs[i])];
        if (n->cot) grads[i] = lm_array_retain(n->cot);
        else grads[i] = lm_zeros(inputs[i]->ndim, inputs[i]->shape, inputs[i]->dtype, inputs[i]->device);
        if (!grads[i]) st = lm_error_status();
    }
    for (int k = 0; k < m.n; k++) lm_array_release(m.nodes[k].cot);
    free(m.nodes);
    free(m.slot);
    if (st != LM_OK)
        for (int i = 0; i < nin; i++) { lm_array_release(grads[i]); grads[i] = NULL; }
    return st;
}
