/* cpu.c - the CPU backend: host memory, the device entry, op dispatch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "cpu.h"
#include "vmath.h"

/* buffers of at least this size sit on 2 MiB boundaries and ask for
 * transparent huge pages */
#define HUGE_MIN ((size_t)4 << 20)
#define HUGE_PAGE ((size_t)2 << 20)

/* madvise is advice only: refused, the memory runs on small pages */
void *lm_cpu_scratch(size_t bytes)
{
    size_t n = bytes ? (bytes + 63) & ~(size_t)63 : 64;
    bool huge = n >= HUGE_MIN;
    if (huge) n = (n + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    void *p = NULL;
    if (posix_memalign(&p, huge ? HUGE_PAGE : 64, n) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    if (huge) madvise(p, n, MADV_HUGEPAGE);
#endif
    return p;
}

static lm_status cpu_alloc(lm_device *d, size_t bytes, void **handle, void **host)
{
    (void)d;
    /* 64-byte alignment: whole cache lines, aligned vector loads.  Large
     * buffers (activations of a model call, weights) on huge pages where
     * the kernel gives them (THP "madvise" or "always"): a fresh buffer's
     * first touch faults once per 2 MiB instead of once per 4 KiB - the
     * faults made a model's first call slower than the next, whose
     * buffers come from the reuse cache - and large GEMMs miss the TLB
     * less.  Nothing else changes (the bits are the kernels'). */
    void *p = lm_cpu_scratch(bytes);
    if (!p) return lm_error_set(LM_ERR_NOMEM, "cpu: out of memory allocating %zu bytes", bytes);
    *handle = p;
    *host = p;
    return LM_OK;
}

static void cpu_free(lm_device *d, void *handle)
{
    (void)d;
    free(handle);
}

/* a window keeps the 64-byte alignment of every buffer (aligned vector
 * loads, whole cache lines per thread) */
static lm_status cpu_window(lm_device *d, void *handle, size_t off, size_t bytes, void **sub, void **host)
{
    (void)d;
    (void)bytes;
    if (off % 64)
        return lm_error_set(LM_ERR_UNSUPPORTED, "cpu: window at byte %zu is not 64-byte aligned", off);
    *sub = *host = (char *)handle + off;
    return LM_OK;
}

static lm_status cpu_upload(lm_device *d, void *handle, size_t off, const void *src, size_t n)
{
    (void)d;
    memcpy((char *)handle + off, src, n);
    return LM_OK;
}

static lm_status cpu_download(lm_device *d, void *handle, size_t off, void *dst, size_t n)
{
    (void)d;
    memcpy(dst, (char *)handle + off, n);
    return LM_OK;
}

/* every step of a compiled group has a kernel case in its compute dtype */
static bool fused_supported(const lm_fused *g)
{
    for (int s = 0; g && s < g->nsteps; s++) {
        const lm_fused_step *st = &g->steps[s];
        lm_dtype ct = lm_cpu_compute_type(st->dtype);
        if (lm_op_dtype_rule_of(st->op) == LM_DT_BOOL) ct = LM_F32;   /* compares: every type has them */
        if (!lm_cpu_ew_has(st->op, ct)) return false;
        /* integer // and % report a zero divisor from their own runner */
        if ((st->op == LM_OP_FLOOR_DIVIDE || st->op == LM_OP_MOD) && ct == LM_I64) return false;
    }
    return g != NULL;
}

/* Answers from what the kernels implement: elementwise ops by asking the
 * kernel switches themselves (lm_cpu_ew_has), so an op added to the table
 * without a CPU case is refused here, not computed as the identity. */
static bool cpu_supports(lm_device *d, const lm_array *node)
{
    (void)d;
    lm_op op = node->op;
    switch (lm_op_class_of(op)) {
    case LM_CLASS_NN: return lm_cpu_supports_nn(node);
    case LM_CLASS_VIEW: case LM_CLASS_NONE: return false;
    case LM_CLASS_UNARY:
        return lm_cpu_ew_has(op, lm_cpu_compute_type(lm_op_dtype_rule_of(op) == LM_DT_BOOL ? node->inputs[0]->dtype
                                                                                         : node->dtype));
    case LM_CLASS_BINARY: return lm_cpu_ew_has(op, lm_cpu_compute_type(node->inputs[0]->dtype));
    case LM_CLASS_OTHER:
        if (op == LM_OP_FUSED) return fused_supported(node->params.ext);
        return true;
    default: return true;
    }
}

static lm_status cpu_run(lm_device *d, lm_array *node)
{
    switch (lm_op_class_of(node->op)) {
    case LM_CLASS_CREATE: return lm_cpu_run_create(d, node);
    case LM_CLASS_UNARY: return lm_cpu_run_unary(d, node);
    case LM_CLASS_BINARY: return lm_cpu_run_binary(d, node);
    case LM_CLASS_TERNARY: return lm_cpu_run_where(d, node);
    case LM_CLASS_REDUCE: return lm_cpu_run_reduce(d, node);
    case LM_CLASS_NN: return lm_cpu_run_nn(d, node);
    case LM_CLASS_OTHER:
        if (node->op == LM_OP_MATMUL) return lm_cpu_run_matmul(d, node);
        if (node->op == LM_OP_FUSED) return lm_cpu_run_fused(d, node->params.ext, node);
        return lm_cpu_run_other(d, node);
    default:
        return lm_error_set(LM_ERR_UNSUPPORTED, "cpu: cannot run %s", lm_op_name(node->op));
    }
}

static const lm_backend cpu_backend = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .window = cpu_window,
    .upload = cpu_upload,
    .download = cpu_download,
    .supports = cpu_supports,
    .run = cpu_run,
    .run_fused = lm_cpu_run_fused,
};

static lm_device cpu_device;

static void cpu_name(char *buf, size_t n)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    snprintf(buf, n, "cpu");
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "model name", 10)) {
            char *p = strchr(line, ':');
            if (p) {
                p += 1 + (p[1] == ' ');
                p[strcspn(p, "\n")] = 0;
                snprintf(buf, n, "%s", p);
            }
            break;
        }
    }
    fclose(f);
}

lm_status lm_cpu_register(void)
{
    lm_device *d = &cpu_device;
    d->backend = &cpu_backend;
    snprintf(d->spec, sizeof d->spec, "cpu");
    snprintf(d->kind, sizeof d->kind, "cpu");
    cpu_name(d->name, sizeof d->name);
    lm_blas_init();
    lm_vmath_init();
    snprintf(d->info, sizeof d->info, "threads=%d isa=%s blas=OpenBLAS core=%s", lm_cpu_threads(),
             lm_vm->name, lm_blas_core());
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && psz > 0) d->mem.device_total = (size_t)pages * (size_t)psz;
    return lm_device_register(d);
}
