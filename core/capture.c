/* capture.c - the graph-capture walk compile, trace and replay share.  See capture.h. */
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "capture.h"

static bool is_stop(const lm_array *a, int nstop, lm_array *const *stop)
{
    for (int k = 0; k < nstop; k++)
        if (a == stop[k]) return true;
    return false;
}

lm_status lm_capture_order(const char *who, int nout, lm_array *const *outs, int nstop, lm_array *const *stop,
                           lm_array ***order, int64_t *n)
{
    lm_vec ord = {0}, stack = {0};
    lm_pmap seen;
    lm_status st = LM_OK;
    if (!lm_pmap_init(&seen, 1024)) st = LM_ERR_NOMEM;
    for (int i = 0; i < nout && st == LM_OK; i++) {
        if (!outs[i]) { st = lm_error_status(); break; }
        if (lm_pmap_get(&seen, outs[i]) >= 0) continue;
        if (!lm_pmap_put(&seen, outs[i], 1) || !lm_vec_push(&stack, outs[i])) { st = LM_ERR_NOMEM; break; }
        while (stack.n && st == LM_OK) {
            lm_array *a = stack.v[stack.n - 1];
            bool leaf = a->buf || is_stop(a, nstop, stop), pushed = false;
            for (int k = 0; !leaf && k < a->ninputs; k++) {
                lm_array *in = a->inputs[k];
                if (lm_pmap_get(&seen, in) >= 0) continue;
                if (!lm_pmap_put(&seen, in, 1) || !lm_vec_push(&stack, in)) { st = LM_ERR_NOMEM; break; }
                pushed = true;
                break;
            }
            if (pushed || st != LM_OK) continue;
            stack.n--;
            if (!lm_vec_push(&ord, a)) st = LM_ERR_NOMEM;
        }
    }
    free(stack.v);
    lm_pmap_free(&seen);
    if (st != LM_OK) {
        free(ord.v);
        return st == LM_ERR_NOMEM ? lm_error_set(LM_ERR_NOMEM, "%s: out of host memory", who) : st;
    }
    *order = ord.v;
    *n = ord.n;
    return LM_OK;
}

void lm_capture_free(lm_capture *g)
{
    for (int j = 0; g->leaves && j < g->nleaf; j++) lm_array_release(g->leaves[j]);
    for (int k = 0; g->nodes && k < g->n; k++) free(g->nodes[k].in);
    free(g->leaves);
    free(g->nodes);
    free(g->out);
    memset(g, 0, sizeof *g);
}

/* a as node x, its inputs numbered through idx */
static bool copy_node(lm_capture_node *x, const lm_array *a, const lm_pmap *idx)
{
    x->op = a->op;
    x->dtype = a->dtype;
    x->ndim = a->ndim;
    memcpy(x->shape, a->shape, sizeof x->shape);
    memcpy(x->strides, a->strides, sizeof x->strides);
    x->offset = a->offset;
    x->params = a->params;
    x->where = lm_node_of(a)->where;
    x->nin = a->ninputs;
    x->in = malloc(sizeof(int) * (size_t)(a->ninputs ? a->ninputs : 1));
    if (!x->in) return false;
    for (int k = 0; k < a->ninputs; k++) x->in[k] = lm_pmap_get(idx, a->inputs[k]);
    return true;
}

lm_status lm_capture_graph(lm_capture *g, const char *who, int nph, lm_array *const *ph, int nout,
                           lm_array *const *outs, lm_array *const *order, int64_t n, lm_capture_check_fn check)
{
    memset(g, 0, sizeof *g);
    lm_pmap idx = {0};   /* room for every key, so its puts never grow (nor fail) */
    lm_status st = LM_OK;
    g->nph = nph;
    g->leaves = calloc((size_t)n + 1, sizeof *g->leaves);
    g->nodes = calloc((size_t)n + 1, sizeof *g->nodes);
    g->out = calloc((size_t)nout + 1, sizeof *g->out);
    if (!g->leaves || !g->nodes || !g->out || !lm_pmap_init(&idx, n + nph)) goto nomem;
    for (int k = 0; k < nph; k++) lm_pmap_put(&idx, ph[k], k);
    for (int64_t i = 0; i < n; i++) {
        lm_array *a = order[i];
        if (lm_pmap_get(&idx, a) >= 0 || !a->buf) continue;
        g->leaves[g->nleaf] = lm_array_retain(a);
        lm_pmap_put(&idx, a, nph + g->nleaf++);
    }
    int first = nph + g->nleaf;   /* the value of node 0 */
    for (int64_t i = 0; i < n; i++) {
        lm_array *a = order[i];
        if (lm_pmap_get(&idx, a) >= 0) continue;
        if ((st = check(a)) != LM_OK) goto fail;
        lm_capture_node *x = &g->nodes[g->n];
        if (!copy_node(x, a, &idx)) goto nomem;
        for (int k = 0; k < x->nin; k++)
            if (x->in[k] >= first) g->nodes[x->in[k] - first].uses++;
        lm_pmap_put(&idx, a, first + g->n++);
    }
    for (int o = 0; o < nout; o++) {
        int v = lm_pmap_get(&idx, outs[o]);
        g->out[o] = v;
        if (v >= first) g->nodes[v - first].output = true;
    }
    g->nout = nout;
    lm_pmap_free(&idx);
    return LM_OK;
nomem:
    st = lm_error_set(LM_ERR_NOMEM, "%s: out of host memory", who);
fail:
    lm_pmap_free(&idx);
    lm_capture_free(g);
    return st;
}

/* ---- signatures ---- */

bool lm_capture_sig_init(lm_capture_sig *s, int n, lm_array *const *a)
{
    s->n = n;
    s->dtype = calloc((size_t)n + 1, sizeof *s->dtype);
    s->ndim = calloc((size_t)n + 1, sizeof *s->ndim);
    s->shape = calloc((size_t)n + 1, sizeof *s->shape);
    if (!s->dtype || !s->ndim || !s->shape) {
        lm_capture_sig_free(s);
        return false;
    }
    for (int k = 0; k < n; k++) {
        s->dtype[k] = a[k]->dtype;
        s->ndim[k] = a[k]->ndim;
        memcpy(s->shape[k], a[k]->shape, sizeof s->shape[k]);
    }
    return true;
}

void lm_capture_sig_free(lm_capture_sig *s)
{
    free(s->dtype);
    free(s->ndim);
    free(s->shape);
    memset(s, 0, sizeof *s);
}

bool lm_capture_sig_kind(const lm_capture_sig *s, int k, const lm_array *a)
{
    return a->dtype == s->dtype[k] && a->ndim == s->ndim[k];
}

bool lm_capture_sig_shape(const lm_capture_sig *s, int k, const lm_array *a)
{
    return lm_capture_sig_kind(s, k, a) && !memcmp(a->shape, s->shape[k], sizeof(int64_t) * (size_t)a->ndim);
}
