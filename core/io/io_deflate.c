/* io_deflate.c - one zlib stream from fixed-size bands compressed on
 * several threads (the way pigz does it), for the PNG writer.
 *
 * zlib's deflate is single-threaded: a 1024x1024 RGB image took 35-100 ms
 * to compress at level 1, longer than the GPU takes to make it, so a batch
 * or an upscale of many images waited on one core.  Here the input is cut
 * into bands of a size fixed by the caller (never by the thread count);
 * each band is raw deflate seeded with the 32 KiB before it as its
 * dictionary (the window a single stream would have had, so back
 * references stay legal), ended with a sync flush on a byte boundary, the
 * last one with the final block.  The bands concatenate into one valid
 * deflate stream under a zlib header, with the checksum joined by
 * adler32_combine.  The bytes depend on the input, the band size and the
 * level only: any thread count writes the same file. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include "io_internal.h"
#include "lumen.h"

#define WINDOW 32768
#define MAX_WORKERS 64

typedef struct band {
    const unsigned char *in;
    size_t n, dict;          /* dict: bytes before in that seed the window */
    bool last;
    unsigned char *out;
    size_t outn;
    uLong adler;
    int zerr;                /* 0, or the zlib error */
} band;

typedef struct job {
    void (*fn)(void *ctx, size_t k);
    void *ctx;
    size_t n, next;          /* next: taken under mu */
    pthread_mutex_t mu;
} job;

static int compress_band(band *b, int level)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    int rc = deflateInit2(&z, level, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY);
    if (rc != Z_OK) return rc;
    if (b->dict) rc = deflateSetDictionary(&z, b->in - b->dict, (uInt)b->dict);
    /* the bound of a finished stream, plus the sync flush's empty block */
    size_t cap = deflateBound(&z, (uLong)b->n) + 16;
    b->out = rc == Z_OK ? malloc(cap) : NULL;
    if (rc == Z_OK && !b->out) rc = Z_MEM_ERROR;
    if (rc == Z_OK) {
        z.next_in = (Bytef *)b->in;
        z.avail_in = (uInt)b->n;
        z.next_out = b->out;
        z.avail_out = (uInt)cap;
        rc = deflate(&z, b->last ? Z_FINISH : Z_SYNC_FLUSH);
        /* all of it in one call: the buffer holds the bound */
        bool done = b->last ? rc == Z_STREAM_END : rc == Z_OK && z.avail_in == 0 && z.avail_out > 0;
        rc = done ? Z_OK : (rc == Z_OK || rc == Z_STREAM_END ? Z_BUF_ERROR : rc);
        b->outn = cap - z.avail_out;
    }
    deflateEnd(&z);
    b->adler = adler32_z(1, b->in, b->n);
    return rc;
}

static void *worker(void *arg)
{
    job *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        size_t k = j->next < j->n ? j->next++ : j->n;
        pthread_mutex_unlock(&j->mu);
        if (k == j->n) return NULL;
        j->fn(j->ctx, k);
    }
}

/* LUMEN_THREADS where set (lumen batch sets it per rank), else the cores */
static int io_threads(void)
{
    const char *env = getenv("LUMEN_THREADS");
    long n = env ? strtol(env, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > MAX_WORKERS ? MAX_WORKERS : (int)n;
}

void lm_io_parallel(size_t n, void (*fn)(void *ctx, size_t k), void *ctx)
{
    job j = {.fn = fn, .ctx = ctx, .n = n};
    pthread_mutex_init(&j.mu, NULL);
    int want = io_threads();
    size_t nw = (size_t)want < n ? (size_t)want : n;
    pthread_t tid[MAX_WORKERS];
    size_t started = 0;
    /* the caller is one of the workers; a thread that cannot start leaves
     * its share to the others */
    for (size_t i = 1; i < nw; i++)
        if (pthread_create(&tid[started], NULL, worker, &j) == 0) started++;
    worker(&j);
    for (size_t i = 0; i < started; i++) pthread_join(tid[i], NULL);
    pthread_mutex_destroy(&j.mu);
}

typedef struct bands { band *b; int level; } bands;

static void compress_one(void *ctx, size_t k)
{
    bands *bs = ctx;
    bs->b[k].zerr = compress_band(&bs->b[k], bs->level);
}

lm_status lm_io_deflate_bands(const unsigned char *in, size_t n, size_t band_bytes, int level,
                              unsigned char **out, size_t *outn, const char *what)
{
    *out = NULL;
    *outn = 0;
    if (band_bytes < WINDOW) band_bytes = WINDOW;
    if (band_bytes > (size_t)1 << 30) band_bytes = (size_t)1 << 30;   /* uInt counts */
    size_t nb = n ? (n + band_bytes - 1) / band_bytes : 1;
    bands bs = {.b = calloc(nb, sizeof(band)), .level = level};
    if (!bs.b) return lm_error_set(LM_ERR_NOMEM, "%s: out of memory", what);
    for (size_t k = 0; k < nb; k++) {
        band *b = &bs.b[k];
        size_t at = k * band_bytes;
        b->in = in + at;
        b->n = n - at < band_bytes ? n - at : band_bytes;
        b->dict = at < WINDOW ? at : WINDOW;
        b->last = k == nb - 1;
    }
    lm_io_parallel(nb, compress_one, &bs);

    lm_status st = LM_OK;
    size_t total = 2 + 4;
    for (size_t k = 0; k < nb && st == LM_OK; k++) {
        if (bs.b[k].zerr == Z_MEM_ERROR)
            st = lm_error_set(LM_ERR_NOMEM, "%s: out of memory", what);
        else if (bs.b[k].zerr != Z_OK)
            st = lm_error_set(LM_ERR_IO, "%s: zlib error %d", what, bs.b[k].zerr);
        total += bs.b[k].outn;
    }
    unsigned char *z = st == LM_OK ? malloc(total) : NULL;
    if (st == LM_OK && !z) st = lm_error_set(LM_ERR_NOMEM, "%s: out of memory", what);
    if (st == LM_OK) {
        /* CMF: deflate with a 32 KiB window; FLG: the level's class, no
         * preset dictionary, and the check bits making CMF*256+FLG % 31 == 0 */
        int flevel = level == 1 ? 0 : level >= 2 && level <= 5 ? 1 : level == 6 || level < 0 ? 2 : 3;
        z[0] = 0x78;
        z[1] = (unsigned char)(flevel << 6);
        z[1] = (unsigned char)(z[1] + (31 - (z[0] * 256 + z[1]) % 31) % 31);
        size_t at = 2;
        uLong adler = 1;
        for (size_t k = 0; k < nb; k++) {
            memcpy(z + at, bs.b[k].out, bs.b[k].outn);
            at += bs.b[k].outn;
            adler = k ? adler32_combine(adler, bs.b[k].adler, (z_off_t)bs.b[k].n)
                      : bs.b[k].adler;
        }
        for (int i = 0; i < 4; i++) z[at + (size_t)i] = (unsigned char)(adler >> (24 - 8 * i));
        *out = z;
        *outn = total;
    }
    for (size_t k = 0; k < nb; k++) free(bs.b[k].out);
    free(bs.b);
    return st;
}
