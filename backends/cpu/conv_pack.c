/* conv_pack.c - weights prepared once: what a kernel derives from a weight
 * (Winograd's transformed filters, an f32 copy of f16 weights) kept for the
 * next call with the same weight.
 *
 * An entry hangs on the weight's buffer as core derived data (lm_derived,
 * core/device.h), so it is dropped when the buffer is written in place
 * (lm_array_assign) or released, and a buffer that the core's reuse cache
 * hands to a later array never carries an old entry.  Within a buffer an
 * entry is found by the weight's geometry (offset, shape, strides, dtype)
 * and the kind of derivation.  All entries sit on one list, most recently
 * used first, under a cap (LUMEN_CONV_PACK_MB, default a quarter of the
 * machine's memory, at most a quarter of the device's memory limit if
 * set).  A new entry past the cap takes the room of stale entries only
 * (least recently used first); where there are none it is not kept (its
 * caller derives into a temporary and frees it).  Evicting the least
 * recently used entry whatever its age made a model whose filters exceed
 * the cap (SD 1.5's ~3.9 GB on a machine of 8-15 GB) miss on every conv of
 * every call: it walks its weights in a cycle longer than the cache, so
 * each entry went just before its next use.  Refusing instead keeps the
 * first filters of the cycle and derives the rest each call.  Stale: not
 * used within the last 2 x the longest recent reuse distance + 4 x the
 * entries + 256 lookups (a tick per lookup), so the weights of a model no
 * longer run make room for the next one's.  LUMEN_CONV_PACK=0 turns the cache off (every call
 * derives into a temporary, as before).  The bytes are the cache's own,
 * not counted in lm_device_memory's active bytes. */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
#include "nn.h"

typedef struct pack_entry {
    lm_derived link;                  /* first: the core hands it back */
    lm_buffer *buf;                   /* not retained: the entry dies first */
    struct pack_entry *prev, *next;   /* LRU, most recent first */
    int kind;
    lm_dtype dtype;
    int ndim;
    int64_t offset, shape[LM_MAX_DIMS], strides[LM_MAX_DIMS];
    size_t bytes;
    int64_t used;                     /* the tick of its last lookup */
    void *data;
} pack_entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pack_entry *head, *tail;
static size_t total;
static int64_t hits, misses;
static int64_t tick;          /* lookups so far */
static int64_t reuse_max;     /* the longest recent distance between two lookups of an entry */
static int64_t nentries;

static void lru_unlink(pack_entry *e)
{
    if (e->prev) e->prev->next = e->next;
    else head = e->next;
    if (e->next) e->next->prev = e->prev;
    else tail = e->prev;
    e->prev = e->next = NULL;
    total -= e->bytes;
    nentries--;
}

static void lru_push(pack_entry *e)
{
    e->prev = NULL;
    e->next = head;
    if (head) head->prev = e;
    head = e;
    if (!tail) tail = e;
    total += e->bytes;
    nentries++;
}

/* not looked up for long enough to make room for a new entry (under the lock) */
static bool stale(const pack_entry *e)
{
    return tick - e->used > 2 * reuse_max + 4 * nentries + 256;
}

/* the core drops an entry: its buffer was written or released */
static void pack_drop(lm_derived *d)
{
    pack_entry *e = (pack_entry *)d;
    pthread_mutex_lock(&lock);
    lru_unlink(e);
    pthread_mutex_unlock(&lock);
    free(e->data);
    free(e);
}

static bool same_weight(const pack_entry *e, const lm_array *w, int kind)
{
    if (e->kind != kind || e->dtype != w->dtype || e->ndim != w->ndim || e->offset != w->offset) return false;
    for (int d = 0; d < w->ndim; d++)
        if (e->shape[d] != w->shape[d] || e->strides[d] != w->strides[d]) return false;
    return true;
}

/* LUMEN_CONV_PACK_MB, by default a quarter of the machine's memory (at
 * least 256 MiB), and at most a quarter of the weight's device's memory
 * limit when one is set (whoever bounds the arrays' memory bounds this
 * too).  The default was a flat 256 MiB: SD 1.5's UNet alone has about
 * 3.9 GB of transformed filters, and a model called block by block walks its
 * weights in a cycle, which an LRU smaller than the cycle never hits, so
 * every call transformed every filter again. */
static size_t default_cap(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    size_t quarter = pages > 0 && page > 0 ? (size_t)pages / 4 * (size_t)page : 0;
    return quarter > ((size_t)256 << 20) ? quarter : (size_t)256 << 20;
}

static size_t cap_bytes(const lm_device *d)
{
    const char *s = getenv("LUMEN_CONV_PACK_MB");
    long mb = s && *s ? strtol(s, NULL, 10) : -1;
    size_t cap = mb > 0 ? (size_t)mb << 20 : mb < 0 ? default_cap() : 0;
    if (d && d->mem.limit && cap > d->mem.limit / 4) cap = d->mem.limit / 4;
    return cap;
}

static bool enabled(void)
{
    const char *s = getenv("LUMEN_CONV_PACK");
    return !(s && !strcmp(s, "0"));
}

const void *nn_pack(const lm_array *w, int kind, size_t bytes, nn_pack_fill fill, void *ctx, void **owned)
{
    *owned = NULL;
    lm_buffer *b = w->buf;
    size_t cap = enabled() && b ? cap_bytes(b->device) : 0;
    if (cap && b) {
        pthread_mutex_lock(&lock);
        tick++;
        for (lm_derived *d = b->derived; d; d = d->next) {
            pack_entry *e = (pack_entry *)d;
            if (d->drop != pack_drop || !same_weight(e, w, kind)) continue;
            lru_unlink(e);
            lru_push(e);
            hits++;
            /* the recent maximum, decaying by 1/16 a hit */
            int64_t dist = tick - e->used, decayed = reuse_max - reuse_max / 16;
            reuse_max = dist > decayed ? dist : decayed;
            e->used = tick;
            pthread_mutex_unlock(&lock);
            return e->data;
        }
        pthread_mutex_unlock(&lock);
    }
    void *data = lm_cpu_scratch(bytes);
    if (!data) {
        lm_error_set(LM_ERR_NOMEM, "conv: out of host memory for %zu bytes of prepared weights", bytes);
        return NULL;
    }
    if (fill(data, w, ctx) != LM_OK) {
        free(data);
        return NULL;
    }
    pack_entry *e = cap && b && bytes <= cap ? calloc(1, sizeof *e) : NULL;
    if (!e) {   /* off, too large for the cache, or no memory for the entry: the caller frees it */
        *owned = data;
        return data;
    }
    e->link.drop = pack_drop;
    e->buf = b;
    e->kind = kind;
    e->dtype = w->dtype;
    e->ndim = w->ndim;
    e->offset = w->offset;
    memcpy(e->shape, w->shape, sizeof e->shape);
    memcpy(e->strides, w->strides, sizeof e->strides);
    e->bytes = bytes;
    e->data = data;
    pthread_mutex_lock(&lock);
    e->used = tick;
    /* room first: stale entries go, least recently used first */
    while (tail && total + bytes > cap && stale(tail)) {
        pack_entry *old = tail;
        lru_unlink(old);
        lm_buffer_detach(old->buf, &old->link);
        free(old->data);
        free(old);
    }
    if (total + bytes > cap) {   /* the cache is full of weights in use: not kept */
        pthread_mutex_unlock(&lock);
        free(e);
        *owned = data;
        return data;
    }
    misses++;
    lru_push(e);
    lm_buffer_attach(b, &e->link);
    pthread_mutex_unlock(&lock);
    return data;
}

void lm_cpu_pack_stats(int64_t *nhits, int64_t *nmisses, int64_t *entries, size_t *bytes)
{
    pthread_mutex_lock(&lock);
    int64_t n = 0;
    for (pack_entry *e = head; e; e = e->next) n++;
    if (nhits) *nhits = hits;
    if (nmisses) *nmisses = misses;
    if (entries) *entries = n;
    if (bytes) *bytes = total;
    pthread_mutex_unlock(&lock);
}
