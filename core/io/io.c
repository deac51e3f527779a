/* io.c - what the file formats share: tensor sets, whole-file reads of
 * regular files only, and atomic writes (a private temporary beside the
 * target, renamed into place).  The readers build on it; the dispatcher
 * that picks a reader by content is load.c. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "io_internal.h"
#include "lumen.h"

void lm_tensor_set_free(lm_tensor_set *s)
{
    if (!s) return;
    for (int i = 0; i < s->count; i++) {
        free(s->names[i]);
        lm_array_release(s->arrays[i]);
    }
    for (int i = 0; i < s->nmeta; i++) {
        free(s->meta[i].key);
        free(s->meta[i].value);
    }
    free(s->names);
    free(s->arrays);
    free(s->meta);
    memset(s, 0, sizeof *s);
}

int lm_tensor_set_find(const lm_tensor_set *s, const char *name)
{
    for (int i = 0; i < s->count; i++)
        if (!strcmp(s->names[i], name)) return i;
    return -1;
}

lm_status lm_io_set_add(lm_tensor_set *s, const char *name, lm_array *a)
{
    if (s->count % 16 == 0) {
        size_t cap = (size_t)s->count + 16;
        char **nn = realloc(s->names, cap * sizeof *nn);
        if (nn) s->names = nn;
        lm_array **na = realloc(s->arrays, cap * sizeof *na);
        if (na) s->arrays = na;
        if (!nn || !na) {
            lm_array_release(a);
            return lm_error_set(LM_ERR_NOMEM, "load: out of memory for tensor names");
        }
    }
    char *copy = strdup(name);
    if (!copy) {
        lm_array_release(a);
        return lm_error_set(LM_ERR_NOMEM, "load: out of memory for tensor names");
    }
    s->names[s->count] = copy;
    s->arrays[s->count++] = a;
    return LM_OK;
}

lm_status lm_io_set_meta(lm_tensor_set *s, const char *key, size_t klen,
                         const char *value, size_t vlen)
{
    if (s->nmeta % 16 == 0) {
        lm_kv *m = realloc(s->meta, ((size_t)s->nmeta + 16) * sizeof *m);
        if (!m) return lm_error_set(LM_ERR_NOMEM, "load: out of memory for metadata");
        s->meta = m;
    }
    char *k = strndup(key, klen), *v = strndup(value, vlen);
    if (!k || !v) {
        free(k);
        free(v);
        return lm_error_set(LM_ERR_NOMEM, "load: out of memory for metadata");
    }
    s->meta[s->nmeta].key = k;
    s->meta[s->nmeta++].value = v;
    return LM_OK;
}

lm_status lm_tensor_set_place(lm_tensor_set *s, lm_device *dev)
{
    if (!dev && !(dev = lm_device_default())) return lm_error_status();
    for (int i = 0; i < s->count; i++) {
        if (s->arrays[i]->device == dev) continue;
        lm_array *t = lm_array_to(s->arrays[i], dev);
        if (!t) return lm_error_prefix("load: tensor '%s' to %s", s->names[i], dev->spec);
        lm_array_release(s->arrays[i]);
        s->arrays[i] = t;
    }
    return LM_OK;
}

/* What a non-regular file is, for the message that refuses it. */
static const char *file_kind(mode_t m)
{
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO (named pipe)";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    return "not a regular file";
}

const char *lm_io_kind_of(const unsigned char *h, size_t n)
{
#define HAS(off, lit) (n >= (off) + sizeof lit - 1 && !memcmp(h + (off), lit, sizeof lit - 1))
    if (HAS(0, "\x89PNG\r\n\x1a\n")) return "a PNG image";
    if (HAS(0, "\xff\xd8\xff")) return "a JPEG image";
    if (HAS(0, "GIF87a") || HAS(0, "GIF89a")) return "a GIF image";
    if (HAS(0, "RIFF") && HAS(8, "WEBP")) return "a WebP image";
    if (HAS(0, "II*\0") || HAS(0, "MM\0*")) return "a TIFF image";
    if (HAS(0, "BM") && n >= 26 && h[14] >= 12 && h[15] == 0 && h[16] == 0 && h[17] == 0)
        return "a BMP image";
    if (HAS(0, "qoif")) return "a QOI image";
    if (HAS(4, "ftypavif") || HAS(4, "ftypavis")) return "an AVIF image";
    if (HAS(4, "ftypheic") || HAS(4, "ftypheix") || HAS(4, "ftypmif1")) return "a HEIF image";
    if (HAS(0, "\0\0\0\x0cjP  ") || HAS(0, "\xff\x4f\xff\x51")) return "a JPEG 2000 image";
    if (n >= 3 && h[0] == 'P' && h[1] >= '1' && h[1] <= '7' && (h[2] == '\n' || h[2] == ' ' ||
                                                              h[2] == '\r' || h[2] == '\t'))
        return "a PNM (PBM/PGM/PPM/PAM) image";
    if (HAS(0, "\x93NUMPY")) return "a NumPy .npy file";
    if (HAS(0, "PK\3\4") || HAS(0, "PK\5\6")) return "a ZIP archive";
    if (HAS(0, "GGUF")) return "a GGUF file";
    if (HAS(0, "\x1f\x8b")) return "a gzip file";
    if (n >= 9 && h[8] == '{' && lm_io_le64(h) > 1 && lm_io_le64(h) < ((uint64_t)1 << 40))
        return "a safetensors file";
    return NULL;
#undef HAS
}

int lm_io_open_read(const char *path)
{
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
     * writer, forever if none comes; fstat then refuses it */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        lm_error_set(LM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int err = errno;
        close(fd);
        lm_error_set(LM_ERR_IO, "%s: cannot stat: %s", path, strerror(err));
        return -1;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        lm_error_set(LM_ERR_IO, "%s: is %s; only regular files are read", path,
                     file_kind(sb.st_mode));
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

lm_status lm_io_read_all(const char *path, void **data, size_t *size)
{
    *data = NULL;
    *size = 0;
    int fd = lm_io_open_read(path);
    if (fd < 0) return lm_error_status();
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return lm_error_set(LM_ERR_NOMEM, "%s: cannot open: %s", path, strerror(errno));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        fclose(f);
        return lm_error_set(LM_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    }
    size_t n = (size_t)sb.st_size;
    unsigned char *buf = malloc(n + 1);
    if (!buf) {
        fclose(f);
        return lm_error_set(LM_ERR_NOMEM, "%s: cannot allocate %zu bytes to read it", path, n);
    }
    size_t got = fread(buf, 1, n, f);
    int err = ferror(f) ? errno : 0;
    fclose(f);
    if (got != n || err) {
        free(buf);
        return lm_error_set(LM_ERR_IO, "%s: read failed (%zu of %zu bytes)%s%s", path, got, n,
                            err ? ": " : "", err ? strerror(err) : "");
    }
    buf[n] = 0;
    *data = buf;
    *size = n;
    return LM_OK;
}

/* The temporaries of writes in progress, for a signal handler about to
 * _exit (lm_io_unlink_temporaries): fixed slots, so the handler reads no
 * memory the writer may free.  A slot is claimed (1), then ready (2). */
#define TMP_SLOTS 32
static struct {
    atomic_int state;
    char path[4096];
} tmp_slots[TMP_SLOTS];

static int tmp_claim(void)
{
    for (int i = 0; i < TMP_SLOTS; i++) {
        int free_slot = 0;
        if (atomic_compare_exchange_strong(&tmp_slots[i].state, &free_slot, 1)) return i;
    }
    return -1;   /* more writes at once than slots: that one is not tracked */
}

/* A name no other writer uses: pid, a per-process count and clock bits,
 * so two processes (or threads) writing one path never share a
 * temporary; O_EXCL makes sure of it, and a clash draws another name.
 * The name is listed in its slot before the file exists, so a signal
 * arriving on any thread at any moment finds it (unlinking a name not
 * yet made, or one only this pid can have made, harms nothing). */
/* A signal handler about to _exit sets tmp_exiting, waits for the temporaries
 * being created on other threads (tmp_creating) and unlinks every listed
 * one: a thread that saw no exit yet has its file made before the handler
 * unlinks it, one that sees the exit makes none.  (Unlinking first and
 * letting another core's open() run after it left a temporary behind.) */
static atomic_int tmp_exiting, tmp_creating;
static int create_temp_listed(const char *path, char *tmp, size_t cap, int *slot);

static int create_temp(const char *path, char *tmp, size_t cap, int *slot)
{
    atomic_fetch_add(&tmp_creating, 1);
    int fd = -1;
    if (atomic_load(&tmp_exiting)) {
        atomic_fetch_sub(&tmp_creating, 1);
        *slot = -1;
        errno = EINTR;
        return -1;
    }
    fd = create_temp_listed(path, tmp, cap, slot);
    atomic_fetch_sub(&tmp_creating, 1);
    return fd;
}

static int create_temp_listed(const char *path, char *tmp, size_t cap, int *slot)
{
    static atomic_uint counter;
    *slot = strlen(path) + 64 <= sizeof tmp_slots[0].path ? tmp_claim() : -1;
    for (int tries = 0; tries < 100; tries++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        unsigned k = atomic_fetch_add(&counter, 1);
        snprintf(tmp, cap, "%s.%ld-%u-%lx.tmp", path, (long)getpid(), k,
                 (unsigned long)ts.tv_nsec & 0xfffff);
        if (*slot >= 0) {
            atomic_store(&tmp_slots[*slot].state, 1);
            strcpy(tmp_slots[*slot].path, tmp);
            atomic_store(&tmp_slots[*slot].state, 2);
        }
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0 || errno != EEXIST) {
            if (fd < 0 && *slot >= 0) {
                atomic_store(&tmp_slots[*slot].state, 0);
                *slot = -1;
            }
            return fd;
        }
    }
    if (*slot >= 0) atomic_store(&tmp_slots[*slot].state, 0);
    *slot = -1;
    errno = EEXIST;
    return -1;
}

bool lm_io_temp_base(const char *name, size_t *n)
{
    size_t len = strlen(name);
    if (len < 4 || strcmp(name + len - 4, ".tmp")) return false;
    const char *p = name + len - 4;
    int part = 0;   /* hex, then k, then pid, from the end */
    while (p > name) {
        char c = p[-1];
        bool digit = c >= '0' && c <= '9', hex = digit || (c >= 'a' && c <= 'f');
        if (c == '-' && part < 2) part++;
        else if (c == '.' && part == 2) break;
        else if (!(part == 0 ? hex : digit)) return false;
        p--;
    }
    if (p == name || part != 2) return false;
    *n = (size_t)(p - 1 - name);
    return true;
}

void lm_io_unlink_temporaries(void)
{
    atomic_store(&tmp_exiting, 1);
    /* the creations under way on other threads finish (bounded: the signal
     * may have landed on the creating thread itself, which never resumes) */
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do clock_gettime(CLOCK_MONOTONIC, &t);
    while (atomic_load(&tmp_creating) > 0 &&
           (t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 200000000L);
    for (int i = 0; i < TMP_SLOTS; i++)
        if (atomic_load(&tmp_slots[i].state) == 2) unlink(tmp_slots[i].path);
}

lm_status lm_io_out_open(lm_io_out *o, const char *path)
{
    memset(o, 0, sizeof *o);
    o->slot = -1;
    o->path = path;
    /* the rename would replace a FIFO or device node (or fail on a
     * directory) after the whole write: refuse before writing anything */
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return lm_error_set(LM_ERR_IO, "%s: is %s; only regular files are written", path,
                            file_kind(sb.st_mode));
    size_t n = strlen(path) + 64;
    o->tmp = malloc(n);
    if (!o->tmp) return lm_error_set(LM_ERR_NOMEM, "%s: out of memory", path);
    int fd = create_temp(path, o->tmp, n, &o->slot);
    o->f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!o->f) {
        lm_status st = lm_error_set(LM_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(o->tmp);
        }
        if (o->slot >= 0) atomic_store(&tmp_slots[o->slot].state, 0);
        o->slot = -1;
        free(o->tmp);
        o->tmp = NULL;
        return st;
    }
    return LM_OK;
}

bool lm_io_out_write(lm_io_out *o, const void *p, size_t n)
{
    if (!o->failed && n && fwrite(p, 1, n, o->f) != n) {
        o->failed = true;
        o->err = errno;
    }
    return !o->failed;
}

lm_status lm_io_out_close(lm_io_out *o, bool ok)
{
    lm_status st = LM_OK;
    if (!o->f) return lm_error_set(LM_ERR_IO, "%s: not open", o->path);
    /* the last buffered bytes reach the file here: their error counts */
    if (fflush(o->f) != 0 && !o->failed) {
        o->failed = true;
        o->err = errno;
    }
    if (fclose(o->f) != 0 && !o->failed) {
        o->failed = true;
        o->err = errno;
    }
    o->f = NULL;
    if (ok && o->failed)
        st = lm_error_set(LM_ERR_IO, "%s: write failed: %s", o->path,
                          strerror(o->err ? o->err : EIO));
    if (ok && !o->failed && rename(o->tmp, o->path) != 0)
        st = lm_error_set(LM_ERR_IO, "%s: cannot rename into place: %s", o->path,
                          strerror(errno));
    if (!ok || st != LM_OK) unlink(o->tmp);
    if (o->slot >= 0) atomic_store(&tmp_slots[o->slot].state, 0);
    free(o->tmp);
    o->tmp = NULL;
    return ok ? st : lm_error_status();
}

void *lm_io_array_bytes(lm_array *a)
{
    size_t n = lm_array_nbytes(a);
    void *buf = malloc(n ? n : 1);
    if (!buf) {
        lm_error_set(LM_ERR_NOMEM, "save: cannot allocate %zu bytes", n);
        return NULL;
    }
    if (lm_array_read(a, buf, a->dtype) != LM_OK) {
        free(buf);
        return NULL;
    }
    return buf;
}

void lm_io_byteswap(void *data, size_t n, size_t es)
{
    unsigned char *p = data;
    if (es < 2) return;
    for (size_t i = 0; i < n; i++, p += es)
        for (size_t a = 0, b = es - 1; a < b; a++, b--) {
            unsigned char t = p[a];
            p[a] = p[b];
            p[b] = t;
        }
}
