/* eval.c - turning lazy graphs into buffers.
 *
 * Order the pending nodes reachable from the outputs (iterative DFS, so deep
 * graphs do not overflow the stack), then run them in order.  Each node
 * holds a reference to its inputs; right after it runs it drops them (the
 * MLX detach), so an intermediate nobody names is freed exactly after its
 * last consumer and its buffer goes back to the cache for the next node. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "profile.h"

static _Thread_local lm_eval_stats last_stats;
static int64_t kernel_total;
static int64_t epoch;

lm_eval_stats lm_eval_last_stats(void) { return last_stats; }
int64_t lm_eval_kernel_count(void) { return kernel_total; }

static lm_status check_usable(const lm_array *a)
{
    char s[96];
    if (a->flags & LM_ARRAY_FREED)
        return lm_error_set(LM_ERR_STATE, "eval: tensor %s was freed", lm_desc(s, sizeof s, a));
    if (a->flags & LM_ARRAY_TRACER)
        return lm_error_set(LM_ERR_STATE,
                            "eval: cannot evaluate a placeholder %s while tracing a compiled function",
                            lm_desc(s, sizeof s, a));
    return LM_OK;
}

/* Post-order of the pending nodes; a node is emitted after all its inputs. */
static lm_status topo_order(lm_array *const *outs, int n, lm_vec *order)
{
    lm_vec stack = {0};
    lm_status st = LM_OK;
    int64_t mark = ++epoch * 2;   /* mark: seen; mark + 1: emitted */
    for (int i = 0; i < n && st == LM_OK; i++) {
        lm_array *o = outs[i];
        if (!o) continue;
        if ((st = check_usable(o)) != LM_OK) break;
        if (o->buf || lm_node_of(o)->eval_mark >= mark) continue;
        lm_node_of(o)->eval_mark = mark;
        if (!lm_vec_push(&stack, o)) { st = lm_error_set(LM_ERR_NOMEM, "eval: out of host memory"); break; }
        while (stack.n && st == LM_OK) {
            lm_array *a = stack.v[stack.n - 1];
            bool pushed = false;
            for (int k = 0; k < a->ninputs; k++) {
                lm_array *in = a->inputs[k];
                if (in->buf || lm_node_of(in)->eval_mark >= mark) continue;
                if ((st = check_usable(in)) != LM_OK) break;
                lm_node_of(in)->eval_mark = mark;
                if (!lm_vec_push(&stack, in)) { st = lm_error_set(LM_ERR_NOMEM, "eval: out of host memory"); break; }
                pushed = true;
                break;
            }
            if (st != LM_OK || pushed) continue;
            stack.n--;
            lm_node_of(a)->eval_mark = mark + 1;
            if (!lm_vec_push(order, a)) st = lm_error_set(LM_ERR_NOMEM, "eval: out of host memory");
        }
    }
    free(stack.v);
    return st;
}

/* Moves a contiguous array between devices through host memory. */
static lm_status transfer(lm_array *node)
{
    lm_array *src = node->inputs[0];
    lm_device *sd = src->device, *dd = node->device;
    size_t n = lm_array_nbytes(node);
    size_t off = (size_t)src->offset * lm_dtype_size(src->dtype);
    if (src->buf->host)
        return lm_device_upload(dd, node->buf->handle, 0, (char *)src->buf->host + off, n);
    if (node->buf->host)
        return lm_device_download(sd, src->buf->handle, off, node->buf->host, n);
    void *tmp = malloc(n ? n : 1);
    if (!tmp) return lm_error_set(LM_ERR_NOMEM, "to: out of host memory staging %zu bytes", n);
    lm_status st = lm_device_download(sd, src->buf->handle, off, tmp, n);
    if (st == LM_OK) st = lm_device_upload(dd, node->buf->handle, 0, tmp, n);
    free(tmp);
    return st;
}

/* LUMEN_FALLBACK: "0" turns the host fallback off (unsupported nodes fail),
 * "quiet" runs it without a word, anything else (the default) says so on
 * stderr once per op, dtype, shape and device.  Read at each fallback, so a
 * program (or a test) may change it between evaluations. */
typedef enum { FALLBACK_OFF, FALLBACK_QUIET, FALLBACK_WARN } fallback_mode;

static fallback_mode fallback_get(void)
{
    const char *e = getenv("LUMEN_FALLBACK");
    if (e && !strcmp(e, "0")) return FALLBACK_OFF;
    if (e && !strcmp(e, "quiet")) return FALLBACK_QUIET;
    return FALLBACK_WARN;
}

/* Says once per (op, dtype, shape, device) that a node ran on the CPU: a
 * silent fallback once cost a VAE decoder a fifth of its time unnoticed.
 * The keys seen are remembered as hashes in a bounded table; past it,
 * warnings stop (the count in lm_eval_last_stats() goes on). */
static void fallback_warn(const lm_array *a)
{
    static uint64_t seen[512];
    static int nseen;
    if (fallback_get() != FALLBACK_WARN || nseen < 0) return;
    char key[256], s[96];
    snprintf(key, sizeof key, "%s %s", lm_op_name(a->op), lm_desc(s, sizeof s, a));
    uint64_t h = 1469598103934665603u;   /* FNV-1a over the key and the device */
    for (const char *p = key; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211u;
    for (const char *p = a->device->spec; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211u;
    for (int i = 0; i < nseen; i++)
        if (seen[i] == h) return;
    fprintf(stderr, "lumen: %s is not supported on %s (%s); running it on the CPU "
            "(LUMEN_FALLBACK=quiet hides this, LUMEN_FALLBACK=0 makes it an error)\n",
            key, a->device->spec, a->device->name);
    if (nseen == (int)(sizeof seen / sizeof *seen)) {
        fprintf(stderr, "lumen: more CPU fallbacks follow, not listed\n");
        nseen = -1;
        return;
    }
    seen[nseen++] = h;
}

/* A node its device cannot run (an op or dtype the backend lacks) runs on
 * the CPU, as ggml's scheduler does: each input's whole buffer is copied to
 * host memory (the download waits for the device's recorded work), the CPU
 * kernel runs on stand-ins that keep the inputs' geometry, and the result is
 * uploaded into the node's buffer.  Slow but correct; counted in
 * lm_eval_last_stats().fallbacks. */
static lm_status run_on_host(lm_array *a)
{
    lm_device *cpu = lm_device_cpu(), *d = a->device;
    int n = a->ninputs;
    lm_array *stand = calloc((size_t)n + 1, sizeof *stand);
    lm_array **ins = calloc((size_t)n + 1, sizeof *ins);
    lm_status st = stand && ins ? LM_OK : lm_error_set(LM_ERR_NOMEM, "eval: out of host memory");
    int k = 0;
    for (; k < n && st == LM_OK; k++) {
        lm_array *in = a->inputs[k];
        stand[k] = *in;
        ins[k] = &stand[k];
        if (in->buf->host) continue;   /* CPU-addressable already */
        stand[k].device = cpu;
        stand[k].buf = lm_buffer_alloc(cpu, in->buf->size);
        if (!stand[k].buf) { st = lm_error_prefix("%s: host copy of input %d", lm_op_name(a->op), k + 1); break; }
        st = lm_device_download(in->device, in->buf->handle, 0, stand[k].buf->host, in->buf->size);
    }
    lm_array out = *a;
    out.device = cpu;
    out.inputs = ins;
    out.buf = NULL;
    if (st == LM_OK) {
        out.buf = lm_buffer_alloc(cpu, lm_array_nbytes(a));
        if (!out.buf) st = lm_error_prefix("%s: host result", lm_op_name(a->op));
    }
    if (st == LM_OK) st = cpu->backend->run(cpu, &out);
    if (st == LM_OK) st = lm_device_upload(d, a->buf->handle, 0, out.buf->host, lm_array_nbytes(a));
    if (out.buf) lm_buffer_release(out.buf);
    for (int j = 0; j < k && j < n; j++)
        if (stand[j].buf != a->inputs[j]->buf && stand[j].buf) lm_buffer_release(stand[j].buf);
    free(stand);
    free(ins);
    last_stats.fallbacks++;
    if (st == LM_OK) fallback_warn(a);
    return st;
}

/* ---- concat outputs written in place ----
 * A concat copies each input into its part of the output.  Where that part
 * is one dense block (every axis before the concat's has length 1: the
 * batch-1 channel concat of a dense block) and the input is a node of this
 * evaluation that nothing outside it can reach (every reference to it comes
 * from the evaluation's pending nodes: not kept, not an output, not held by
 * a caller), the input's producer writes straight into that part: its
 * buffer is a window of the concat's (lm_buffer_window), made when the
 * producer runs, the concat's buffer made first.  Its other consumers only
 * read it, and no other node writes that part, so they see what a copy
 * would hold.  A window the backend refuses (alignment), a part that is not
 * one block, an input used beyond the evaluation, a view, a leaf or another
 * dtype or device: the concat copies as before.  LUMEN_CONCAT_INPLACE=0
 * turns it off (read at each evaluation, for measurement and tests). */
static bool place_enabled(void)
{
    const char *e = getenv("LUMEN_CONCAT_INPLACE");
    return !(e && !strcmp(e, "0"));
}

/* The byte offset of input k's part of concat c where that part is one
 * dense block of c's output, else -1. */
static int64_t concat_part(const lm_array *c, int k)
{
    int axis = (int)c->params.i[0];
    for (int d = 0; d < axis; d++)
        if (c->shape[d] != 1) return -1;
    int64_t inner = (int64_t)lm_dtype_size(c->dtype), at = 0;
    for (int d = axis + 1; d < c->ndim; d++) inner *= c->shape[d];
    for (int j = 0; j < k; j++) at += c->inputs[j]->shape[axis];
    return at * inner;
}

bool lm_concat_placed(const lm_array *node, int k)
{
    const lm_array *in = node->inputs[k];
    if (!in->buf || !in->buf->parent || in->buf->parent != node->buf) return false;
    int64_t off = concat_part(node, k);
    return off >= 0 && in->buf->parent_off == (size_t)off && in->offset == 0 &&
           in->dtype == node->dtype && lm_array_is_contiguous(in);
}

static void plan_places(const lm_vec *order)
{
    for (int64_t i = 0; i < order->n; i++) {
        lm_node *x = lm_node_of(order->v[i]);
        x->eval_uses = 0;
        x->place_in = NULL;
    }
    if (!place_enabled()) return;
    for (int64_t i = 0; i < order->n; i++)
        for (int k = 0; k < order->v[i]->ninputs; k++) {
            lm_array *in = order->v[i]->inputs[k];
            if (in->buf) continue;
            lm_node_of(in)->eval_uses++;
            lm_node_of(in)->eval_last = i;
        }
    for (int64_t i = 0; i < order->n; i++) {
        lm_array *c = order->v[i];
        lm_device *d = c->device;
        if (c->op != LM_OP_CONCAT || !d->backend->window || !d->backend->supports(d, c)) continue;
        for (int k = 0; k < c->ninputs; k++) {
            lm_array *in = c->inputs[k];
            if (in->buf || lm_node_of(in)->place_in || in->op == LM_OP_VIEW || in->device != d ||
                in->dtype != c->dtype || in->size == 0 || in->offset != 0 ||
                !lm_array_is_contiguous(in) || (in->flags & LM_ARRAY_KEPT) ||
                in->refcount != lm_node_of(in)->eval_uses)
                continue;
            int64_t off = concat_part(c, k);
            if (off < 0) break;
            lm_node_of(in)->place_in = c;
            lm_node_of(in)->place_at = off;
        }
    }
    /* A placed input holds the whole buffer of the outermost concat it
     * went into (the root) as long as it lives: one read again much later
     * (a long skip connection) would keep that buffer past the root's own
     * last use, so it is copied instead.  Concats come after their inputs
     * in the order: going backwards, a concat sent back to its own buffer
     * is the root its inputs see. */
    for (int64_t i = order->n - 1; i >= 0; i--) {
        lm_node *x = lm_node_of(order->v[i]);
        if (!x->place_in) continue;
        lm_node *r = lm_node_of(x->place_in);
        while (r->place_in) r = lm_node_of(r->place_in);
        bool held = r->a.refcount > r->eval_uses;   /* an output, kept, or a caller's */
        if (!held && x->eval_last > r->eval_last) x->place_in = NULL;
    }
}

/* The output buffer of a node about to run: a window of its concat's
 * buffer where the plan put it there (the concat's own buffer made first,
 * itself maybe a window of the next), else a buffer of its own. */
static lm_status node_buffer(lm_array *a)
{
    while (!a->buf) {
        lm_array *p = a;
        while (lm_node_of(p)->place_in && !lm_node_of(p)->place_in->buf) p = lm_node_of(p)->place_in;
        lm_node *pn = lm_node_of(p);
        lm_array *c = pn->place_in;
        pn->place_in = NULL;
        if (c && (p->buf = lm_buffer_window(c->buf, (size_t)pn->place_at, lm_array_nbytes(p))))
            last_stats.placed++;
        if (!p->buf) p->buf = lm_buffer_alloc(p->device, lm_array_nbytes(p));
        if (!p->buf) return lm_error_status();
    }
    return LM_OK;
}

static lm_status run_node(lm_array *a)
{
    char s[96];
    if (a->op == LM_OP_VIEW) {
        lm_array *base = a->inputs[0];
        a->buf = lm_buffer_retain(base->buf);
        return LM_OK;
    }
    lm_device *d = a->device;
    bool cross = a->op == LM_OP_COPY && a->inputs[0]->device != d;
    bool host = false;
    if (!cross && !d->backend->supports(d, a)) {
        lm_device *cpu = lm_device_cpu();
        host = fallback_get() != FALLBACK_OFF && d != cpu && a->op != LM_OP_FUSED && cpu->backend->supports(cpu, a);
        if (!host)
            return lm_error_set(LM_ERR_UNSUPPORTED, "%s: not supported on %s for %s",
                                lm_op_name(a->op), d->spec, lm_desc(s, sizeof s, a));
    }
    if (node_buffer(a) != LM_OK) return lm_error_prefix("%s %s", lm_op_name(a->op), lm_desc(s, sizeof s, a));
    if (a->op == LM_OP_CONCAT && !host) {
        /* nothing to copy where every producer wrote in place */
        int k = 0;
        while (k < a->ninputs && lm_concat_placed(a, k)) k++;
        if (k == a->ninputs) return LM_OK;
    }
    /* a transfer's rows are its copies' (lm_device_upload/download) */
    if (!cross) lm_profile_node_begin(a, host ? LM_PROFILE_FALLBACK : LM_PROFILE_KERNEL);
    lm_status st = cross ? transfer(a) : host ? run_on_host(a) : d->backend->run(d, a);
    if (!cross) lm_profile_node_end(st == LM_OK);
    if (st == LM_OK && !cross) lm_trace_after_node(a);
    last_stats.kernels++;
    if (cross) last_stats.transfers++;
    else if (host || d == lm_device_cpu()) last_stats.cpu_nodes++;
    kernel_total++;
    if (st != LM_OK) {
        lm_buffer_release(a->buf);
        a->buf = NULL;
        if (st == LM_ERR_CANCELLED) return st;
    }
    return st;
}

static void devices_of(const lm_vec *order, lm_device **devs, int *ndev)
{
    for (int64_t i = 0; i < order->n; i++) {
        lm_device *d = order->v[i]->device;
        int k = 0;
        while (k < *ndev && devs[k] != d) k++;
        if (k == *ndev && *ndev < 16) devs[(*ndev)++] = d;
    }
}

/* After a failure at order[i]: the nodes from i on did not run (and are
 * alive: their consumers or the outputs hold them).  A concat among them
 * whose buffer was made early for its producers gives it back (the windows
 * made keep the memory while their arrays live), so it is pending again. */
static void unplan(const lm_vec *order, int64_t i)
{
    for (int64_t j = i; j < order->n; j++) {
        lm_array *a = order->v[j];
        lm_node_of(a)->place_in = NULL;
        if (a->buf) {
            lm_buffer_release(a->buf);
            a->buf = NULL;
        }
    }
}

static int eval_depth;   /* lm_eval inside lm_eval (lm_eval_into) */

/* The profiler settles its nodes' times once the outermost evaluation has
 * synced its devices. */
static void profile_settle(void)
{
    if (lm_profile_depth()) lm_profile_eval_end(eval_depth == 0);
}

/* how an evaluation ends: waiting for its devices, queueing its work, or
 * (a recording, core/replay.c) leaving the work with the backend */
typedef enum { END_WAIT, END_QUEUE, END_KEEP } eval_end;

static lm_status eval_run(lm_array *const *arrays, int n, eval_end how)
{
    lm_vec order = {0};
    memset(&last_stats, 0, sizeof last_stats);
    lm_status st = topo_order(arrays, n, &order);
    if (st != LM_OK || order.n == 0) {
        free(order.v);
        return st;
    }
    /* The outputs must survive their own detach; hold them during the run. */
    for (int i = 0; i < n; i++) lm_array_retain(arrays[i]);
    lm_device *devs[16];
    int ndev = 0;
    devices_of(&order, devs, &ndev);
    eval_depth++;
    for (int k = 0; k < ndev && st == LM_OK; k++)
        if (devs[k]->backend->begin) st = devs[k]->backend->begin(devs[k]);
    if (st == LM_OK) plan_places(&order);
    for (int64_t i = 0; i < order.n && st == LM_OK; i++) {
        lm_array *a = order.v[i];
        if (lm_cancel_requested()) {
            st = lm_error_set(LM_ERR_CANCELLED, "eval: interrupted");
            unplan(&order, i);
            break;
        }
        st = run_node(a);
        last_stats.nodes++;
        if (st == LM_OK) lm_array_detach(a);   /* may free inputs: never touch them again */
        else unplan(&order, i);
    }
    /* without waiting only where nothing needs the results now: not
     * inside another evaluation, not while profiling (times are read after
     * the wait), not after a failure */
    bool queue = how != END_WAIT && st == LM_OK && eval_depth == 1 && !lm_profile_depth();
    for (int k = 0; k < ndev && !(how == END_KEEP && st == LM_OK); k++) {
        const lm_backend *b = devs[k]->backend;
        lm_status (*end)(lm_device *) = queue && b->submit ? b->submit : b->sync;
        if (!end) continue;
        lm_status s2 = end(devs[k]);
        if (st == LM_OK) st = s2;
    }
    eval_depth--;
    profile_settle();
    for (int i = 0; i < n; i++) lm_array_release(arrays[i]);
    free(order.v);
    return st;
}

lm_status lm_eval(lm_array *const *arrays, int n)
{
    return eval_run(arrays, n, END_WAIT);
}

lm_status lm_eval_async(lm_array *const *arrays, int n)
{
    return eval_run(arrays, n, END_QUEUE);
}

lm_status lm_eval_recorded(lm_array *const *arrays, int n)
{
    return eval_run(arrays, n, END_KEEP);
}

static lm_status eval_into(lm_array *node)
{
    lm_device *d = node->device;
    lm_status st = check_usable(node->inputs[0]);
    if (st == LM_OK) st = lm_array_eval(node->inputs[0]);
    if (st != LM_OK) return st;
    if (!d->backend->supports(d, node))
        return lm_error_set(LM_ERR_UNSUPPORTED, "assign: not supported on %s", d->spec);
    if (d->backend->begin && (st = d->backend->begin(d)) != LM_OK) return st;
    lm_profile_node_begin(node, LM_PROFILE_KERNEL);
    st = d->backend->run(d, node);
    lm_profile_node_end(st == LM_OK);
    kernel_total++;
    if (d->backend->sync) {
        lm_status s2 = d->backend->sync(d);
        if (st == LM_OK) st = s2;
    }
    return st;
}

/* Runs one node whose buffer the caller set (lm_array_assign); for the
 * profile its input's evaluation and the node are one evaluation. */
lm_status lm_eval_into(lm_array *node)
{
    eval_depth++;
    lm_status st = eval_into(node);
    eval_depth--;
    profile_settle();
    return st;
}
