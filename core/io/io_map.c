/* io_map.c - a tensor file mapped once and shared by the arrays made over
 * its bytes (safetensors and GGUF read this way; see io_internal.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "device.h"
#include "io_internal.h"

void lm_io_map_unref(void *ctx)
{
    lm_io_map *m = ctx;
    /* buffers may be released on any thread, as the core's own are */
    if (__atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
    munmap(m->base, m->size);
    free(m);
}

lm_status lm_io_map_file(const char *path, size_t min, lm_io_map **out, size_t *size)
{
    *out = NULL;
    *size = 0;
    int fd = lm_io_open_read(path);
    if (fd < 0) return lm_error_status();
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int err = errno;
        close(fd);
        return lm_error_set(LM_ERR_IO, "%s: cannot stat: %s", path, strerror(err));
    }
    *size = (size_t)sb.st_size;
    if (*size < (min ? min : 1)) {   /* mmap cannot map 0 bytes */
        close(fd);
        return LM_OK;
    }
    lm_io_map *m = calloc(1, sizeof *m);
    if (!m) { close(fd); return lm_error_set(LM_ERR_NOMEM, "%s: out of memory", path); }
    m->size = *size;
    m->refs = 1;
    /* private + writable: an in-place write to a loaded tensor copies the
     * page instead of faulting, and never reaches the file */
    m->base = mmap(NULL, m->size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m->base == MAP_FAILED) {
        free(m);
        return lm_error_set(LM_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
    }
    *out = m;
    return LM_OK;
}

lm_array *lm_io_map_array(lm_io_map *m, const void *p, size_t nbytes, lm_dtype dt, int ndim,
                          const int64_t *shape)
{
    lm_buffer *b = lm_buffer_wrap(lm_device_cpu(), (void *)(uintptr_t)p, nbytes, lm_io_map_unref, m);
    if (!b) return NULL;
    __atomic_add_fetch(&m->refs, 1, __ATOMIC_RELAXED);
    lm_array *a = lm_array_from_buffer(b, dt, ndim, shape);
    lm_buffer_release(b);   /* the array holds its own reference */
    return a;
}
