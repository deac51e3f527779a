/* replay.c - compiled calls replayed from recorded device work.  See replay.h.
 *
 * Per compiled function a few recordings, one per input signature (device,
 * dtypes, shapes), least recently used out.  The first call with a
 * signature runs the ordinary way: it makes what a kernel makes once and
 * keeps (pipelines, packed weights hung on the constants' buffers), which a
 * recording must not repeat on every run.  The second records: its inputs
 * are copied into buffers of the recording's own, the graph is built on
 * those and evaluated with the device recording instead of submitting, and
 * every buffer freed meanwhile goes to the recording's pool (buffer_pool.c), so
 * it is reused inside the recording as in an evaluation and given to no one
 * else.  That call and every later one then queue: copies of the inputs in,
 * the recording, copies of the outputs out into fresh buffers (the caller's
 * outputs outlive the next call).
 *
 * A recording reads the constants' buffers and what the backend derived
 * from them (lm_derived): one freed or written since (its buffer, or the
 * head of its derived list, changed) drops the recording, and the call runs
 * the ordinary way and records again next time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "buffer_pool.h"
#include "capture.h"
#include "profile.h"
#include "replay.h"

#define MAX_RECORDINGS 4
/* A replay copies its inputs in and its outputs out; it saves the host's
 * work on every kernel.  A call is recorded when it launches two kernels
 * or more and moves at most 1 MiB per kernel that way: on a GPU a kernel's
 * host cost (several microseconds) is worth megabytes of copying, and a
 * one-kernel function over a gigabyte (an elementwise chain) would only pay
 * for the copies. */
#define MIN_KERNELS 2
#define COPY_BYTES_PER_KERNEL ((size_t)1 << 20)

typedef struct snap {
    const lm_buffer *buf;
    const lm_derived *derived;
} snap;

typedef struct entry {
    lm_device *device;
    int nin, nout, nconst, kernels;
    lm_capture_sig sig;    /* the inputs' dtypes and shapes */
    int calls;             /* ordinary calls made with this signature */
    bool never;            /* recording failed: the ordinary way from now on */
    void *rec;             /* the backend's recording, or NULL */
    lm_array **in, **out;  /* the recording's own inputs and outputs */
    bool out_kept;         /* the outputs kept (a whole recording's only) */
    snap *consts;
    lm_buffer_pool pool;
    uint64_t used;
} entry;

struct lm_replays {
    entry e[MAX_RECORDINGS];
    int n;
    uint64_t clock;
};

static int64_t recorded, replayed;
int64_t lm_replay_recorded_count(void) { return recorded; }
int64_t lm_replay_replayed_count(void) { return replayed; }

/* the recording's own arrays are kept (so that lm_sweep leaves them):
 * unkept here where it kept them */
static void release_arrays(lm_array **a, int n, bool kept)
{
    for (int k = 0; a && k < n; k++) {
        if (kept) lm_array_unkeep(a[k]);
        lm_array_release(a[k]);
    }
    free(a);
}

/* the recording and its memory; the signature stays */
static void drop_recording(entry *e)
{
    if (e->rec) e->device->backend->record_free(e->device, e->rec);
    e->rec = NULL;
    release_arrays(e->in, e->nin, true);
    release_arrays(e->out, e->nout, e->out_kept);
    e->in = e->out = NULL;
    e->out_kept = false;
    lm_buffer_pool_release(&e->pool);
    free(e->consts);
    e->consts = NULL;
}

static void entry_free(entry *e)
{
    drop_recording(e);
    lm_capture_sig_free(&e->sig);
    memset(e, 0, sizeof *e);
}

void lm_replays_free(lm_replays *rs)
{
    if (!rs) return;
    for (int i = 0; i < rs->n; i++) entry_free(&rs->e[i]);
    free(rs);
}

static bool same_signature(const entry *e, lm_device *d, int nin, lm_array *const *in)
{
    if (e->device != d || e->nin != nin) return false;
    for (int k = 0; k < nin; k++)
        if (!lm_capture_sig_shape(&e->sig, k, in[k])) return false;
    return true;
}

/* the entry for this signature, made (evicting the least recently used)
 * when there is none; NULL when out of memory */
static entry *find_entry(lm_replays *rs, lm_device *d, int nin, lm_array *const *in)
{
    for (int i = 0; i < rs->n; i++)
        if (same_signature(&rs->e[i], d, nin, in)) return &rs->e[i];
    int at = rs->n;
    if (rs->n == MAX_RECORDINGS) {
        at = 0;
        for (int i = 1; i < rs->n; i++)
            if (rs->e[i].used < rs->e[at].used) at = i;
        entry_free(&rs->e[at]);
    } else {
        rs->n++;
    }
    entry *e = &rs->e[at];
    memset(e, 0, sizeof *e);
    e->device = d;
    e->nin = nin;
    if (!lm_capture_sig_init(&e->sig, nin, in)) {
        entry_free(e);
        e->device = NULL;   /* matches nothing; reused next time */
        return NULL;
    }
    e->pool.device = d;
    return e;
}

/* Whether this call may go through recordings: every input and constant an
 * array of one device that can record, the inputs contiguous (a strided
 * one would cost a copy more than the ordinary call makes), nothing
 * quantized, no profile open (it times nodes, which a replay does not run). */
static lm_device *replay_device(int nin, lm_array *const *in, int nconst, lm_array *const *consts)
{
    if (nin < 1 || lm_profile_depth() || !in[0]) return NULL;
    lm_device *d = in[0]->device;
    const lm_backend *b = d->backend;
    if (!b->record_begin || !b->record_end || !b->replay || !b->record_free || !b->copy) return NULL;
    for (int k = 0; k < nin; k++)
        if (!in[k] || in[k]->device != d || (in[k]->flags & (LM_ARRAY_FREED | LM_ARRAY_TRACER)) ||
            lm_dtype_is_quant(in[k]->dtype) || !lm_array_is_contiguous(in[k]))
            return NULL;
    for (int k = 0; k < nconst; k++)
        if (consts[k]->device != d || !consts[k]->buf) return NULL;
    return d;
}

/* the inputs evaluated (queued), as new references in x */
static lm_status ready_inputs(int nin, lm_array *const *in, lm_array **x)
{
    for (int k = 0; k < nin; k++) x[k] = lm_array_retain(in[k]);
    return lm_eval_async(x, nin);
}

static size_t byte_offset(const lm_array *a) { return (size_t)a->offset * lm_dtype_size(a->dtype); }

/* queues copies src[k] -> dst[k] (whole arrays; same sizes) */
static lm_status copy_arrays(lm_device *d, int n, lm_array *const *src, lm_array *const *dst)
{
    void *s[64], *t[64];
    size_t off[64], bytes[64];
    lm_status st = LM_OK;
    for (int k0 = 0; k0 < n && st == LM_OK; k0 += 64) {
        int m = n - k0 < 64 ? n - k0 : 64;
        for (int j = 0; j < m; j++) {
            s[j] = src[k0 + j]->buf->handle;
            off[j] = byte_offset(src[k0 + j]);
            t[j] = dst[k0 + j]->buf->handle;
            bytes[j] = lm_array_nbytes(dst[k0 + j]);
        }
        st = d->backend->copy(d, m, s, off, t, bytes);
    }
    return st;
}

/* new evaluated arrays shaped as e's outputs, each in a fresh buffer */
static lm_status fresh_outputs(const entry *e, lm_array **outs)
{
    for (int k = 0; k < e->nout; k++) {
        const lm_array *o = e->out[k];
        lm_buffer *b = lm_buffer_alloc(e->device, lm_array_nbytes(o));
        outs[k] = b ? lm_array_from_buffer(b, o->dtype, o->ndim, o->shape) : NULL;
        lm_buffer_release(b);
        if (!outs[k]) {
            for (int j = 0; j < k; j++) lm_array_release(outs[j]);
            return lm_error_prefix("compiled function: replay outputs");
        }
    }
    return LM_OK;
}

static bool consts_unchanged(const entry *e, lm_array *const *consts)
{
    for (int k = 0; k < e->nconst; k++)
        if ((consts[k]->flags & LM_ARRAY_FREED) || consts[k]->buf != e->consts[k].buf ||
            consts[k]->buf->derived != e->consts[k].derived)
            return false;
    return true;
}

static size_t bytes_of(lm_array *const *a, int n)
{
    size_t b = 0;
    for (int k = 0; k < n; k++) b += lm_array_nbytes(a[k]);
    return b;
}

/* queues inputs in (unless already there), the recording, outputs out */
static int run_recording(entry *e, lm_array *const *x, lm_array **outs)
{
    lm_device *d = e->device;
    lm_status st = x ? copy_arrays(d, e->nin, x, e->in) : LM_OK;
    if (st != LM_OK) return -1;
    if ((st = d->backend->replay(d, e->rec)) != LM_OK) return -1;
    if (fresh_outputs(e, outs) != LM_OK) return -1;
    /* the copies out go to the device now, as lm_eval_async's work would:
     * nothing else may submit them soon (the outputs are evaluated) */
    st = copy_arrays(d, e->nout, e->out, outs);
    if (st == LM_OK && d->backend->submit) st = d->backend->submit(d);
    if (st != LM_OK) {
        for (int k = 0; k < e->nout; k++) {
            lm_array_release(outs[k]);
            outs[k] = NULL;
        }
        return -1;
    }
    replayed++;
    return e->nout;
}

static bool among(const lm_array *a, lm_array *const *v, int n)
{
    for (int k = 0; k < n; k++)
        if (v[k] == a) return true;
    return false;
}

/* An output a replay can copy out: an array of this evaluation's (not an
 * input or a constant passed through) in a buffer of its own, whole. */
static bool copyable(const entry *e, const lm_array *o, int nconst, lm_array *const *consts)
{
    return o->buf && !o->buf->parent && !o->buf->release && o->offset == 0 && lm_array_is_contiguous(o) &&
           !lm_dtype_is_quant(o->dtype) && !among(o, e->in, e->nin) && !among(o, consts, nconst);
}

/* The recording call: the graph built on inputs of the entry's own and
 * evaluated into a recording.  Returns as lm_replay_call. */
static int record(entry *e, lm_array *const *x, int nconst, lm_array *const *consts, int nout,
                  lm_replay_build_fn build, void *ctx, lm_array **outs)
{
    lm_device *d = e->device;
    e->nout = nout;
    e->in = calloc((size_t)e->nin, sizeof *e->in);
    e->out = calloc((size_t)nout + 1, sizeof *e->out);
    e->consts = calloc((size_t)nconst + 1, sizeof *e->consts);
    if (!e->in || !e->out || !e->consts) {
        drop_recording(e);
        lm_error_set(LM_ERR_NOMEM, "compile: out of host memory");
        return -1;
    }
    for (int k = 0; k < e->nin; k++) {
        lm_buffer *b = lm_buffer_alloc(d, lm_array_nbytes(x[k]));
        e->in[k] = b ? lm_array_from_buffer(b, x[k]->dtype, x[k]->ndim, x[k]->shape) : NULL;
        lm_buffer_release(b);
        if (!e->in[k]) {
            drop_recording(e);
            return -1;
        }
        lm_array_keep(e->in[k]);
    }
    if (copy_arrays(d, e->nin, x, e->in) != LM_OK) {
        drop_recording(e);
        return -1;
    }
    lm_buffer_pool_capture(&e->pool);
    lm_status st = d->backend->record_begin(d);
    if (st != LM_OK) {   /* switched off, or the device cannot start */
        lm_buffer_pool_capture(NULL);
        drop_recording(e);
        return st == LM_ERR_UNSUPPORTED ? LM_REPLAY_NOT_HANDLED : -1;
    }
    int r = build(ctx, e->in, e->out);
    if (r >= 0 && r != nout) r = -1;
    if (r >= 0) st = lm_eval_recorded(e->out, nout);
    lm_buffer_pool_capture(NULL);
    /* the failure's own message outlives record_end's */
    lm_status why = r < 0 || st != LM_OK ? lm_error_status() : LM_OK;
    char msg[512] = "";
    if (why != LM_OK) snprintf(msg, sizeof msg, "%s", lm_error_message());
    void *rec = NULL;
    lm_status se = d->backend->record_end(d, &rec);
    e->rec = rec;
    if (why != LM_OK) {
        drop_recording(e);
        if (r >= 0 && (why == LM_ERR_NOMEM || why == LM_ERR_LIMIT)) {
            /* the recording holds its inputs besides the caller's: the
             * ordinary way may still fit */
            e->never = true;
            return LM_REPLAY_NOT_HANDLED;
        }
        lm_error_set(why, "%s", msg);
        return r < 0 ? r : -1;
    }
    if (se != LM_OK && se != LM_ERR_UNSUPPORTED) {
        /* the work ran and failed (an index error found, a device lost) */
        drop_recording(e);
        e->never = true;
        return -1;
    }
    bool ok = se == LM_OK && rec &&
              bytes_of(e->in, e->nin) + bytes_of(e->out, nout) <= (size_t)e->kernels * COPY_BYTES_PER_KERNEL;
    for (int k = 0; k < nout && ok; k++) ok = copyable(e, e->out[k], nconst, consts);
    if (!ok) {
        /* computed the ordinary way, or recorded with an output that
         * cannot be copied out (a view): then run once; the outputs are the
         * caller's, and this signature is not recorded again */
        st = rec ? d->backend->replay(d, rec) : LM_OK;
        for (int k = 0; k < nout; k++) outs[k] = st == LM_OK ? lm_array_retain(e->out[k]) : NULL;
        drop_recording(e);
        e->never = true;
        return st == LM_OK ? nout : -1;
    }
    for (int k = 0; k < nout; k++) lm_array_keep(e->out[k]);   /* lm_sweep leaves them */
    e->out_kept = true;
    e->nconst = nconst;
    for (int k = 0; k < nconst; k++) e->consts[k] = (snap){consts[k]->buf, consts[k]->buf->derived};
    recorded++;
    return run_recording(e, NULL, outs);
}

int lm_replay_call(lm_replays **rs, int nin, lm_array *const *inputs, int nconst, lm_array *const *consts,
                   int nout, int kernels, lm_replay_build_fn build, void *ctx, lm_array **outs)
{
    lm_device *d = replay_device(nin, inputs, nconst, consts);
    if (!d || nout < 1 || kernels < MIN_KERNELS || d->backend->replay(d, NULL) != LM_OK ||
        bytes_of(inputs, nin) > (size_t)kernels * COPY_BYTES_PER_KERNEL)
        return LM_REPLAY_NOT_HANDLED;
    if (!*rs && !(*rs = calloc(1, sizeof **rs))) return LM_REPLAY_NOT_HANDLED;
    entry *e = find_entry(*rs, d, nin, inputs);
    if (!e || e->never) return LM_REPLAY_NOT_HANDLED;
    e->used = ++(*rs)->clock;
    e->kernels = kernels;
    if (e->rec && !consts_unchanged(e, consts)) {
        drop_recording(e);
        e->calls = 0;
    }
    if (!e->rec && e->calls++ == 0) return LM_REPLAY_NOT_HANDLED;   /* the first call makes what lasts */
    lm_array *x[64], **xs = nin <= 64 ? x : calloc((size_t)nin, sizeof *xs);
    if (!xs) return LM_REPLAY_NOT_HANDLED;
    int r = ready_inputs(nin, inputs, xs) != LM_OK ? -1
          : e->rec ? run_recording(e, xs, outs)
                   : record(e, xs, nconst, consts, nout, build, ctx, outs);
    for (int k = 0; k < nin; k++) lm_array_release(xs[k]);
    if (xs != x) free(xs);
    return r;
}
