/* device.c - the device registry and the default device.
 *
 * The backends the build compiled in (core/backend.h, lm_backend_registry):
 * the CPU always, Vulkan devices when built with it.  The default is a real
 * GPU when one is present, else the CPU; a CPU-type Vulkan driver (lavapipe)
 * is used only when asked for by LUMEN_DEVICE=vulkan or vulkan:N. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "profile.h"

#define MAX_DEVICES 16
static lm_device *devices[MAX_DEVICES];
static int ndevices;
static lm_device *default_device;
static int initialised;

lm_status lm_device_register(lm_device *d)
{
    if (ndevices == MAX_DEVICES)
        return lm_error_set(LM_ERR_DEVICE, "too many devices (%d)", MAX_DEVICES);
    d->index = ndevices;
    if (!d->mem.cache_limit) {
        /* 1 GiB, or a quarter of a GPU's memory: GPU work reuses buffers of
         * hundreds of MiB, and a fresh device allocation costs far more than
         * a host malloc */
        size_t lim = (size_t)1 << 30;
        if (strcmp(d->kind, "cpu") && d->mem.device_total / 4 > lim) lim = d->mem.device_total / 4;
        const char *env = getenv("LUMEN_CACHE_LIMIT");
        if (env) lim = (size_t)strtoull(env, NULL, 10);
        d->mem.cache_limit = lim;
    }
    devices[ndevices++] = d;
    return LM_OK;
}

static bool is_real_gpu(const lm_device *d)
{
    return !strcmp(d->kind, "discrete-gpu") || !strcmp(d->kind, "integrated-gpu");
}

lm_status lm_init(void)
{
    if (initialised) return LM_OK;
    initialised = 1;
    for (const lm_backend_entry *b = lm_backend_registry; b->name; b++) {
        lm_status st = b->register_devices();
        if (st == LM_OK) continue;
        if (b->required) {
            initialised = 0;
            return st;
        }
        lm_error_clear();   /* e.g. no Vulkan: the others still serve */
    }
    if (!ndevices) {
        initialised = 0;
        return lm_error_set(LM_ERR_DEVICE, "no backend registered a device");
    }
    default_device = devices[0];
    for (int i = 0; i < ndevices; i++)
        if (is_real_gpu(devices[i])) { default_device = devices[i]; break; }
    const char *env = getenv("LUMEN_DEVICE");
    if (env && *env) {
        lm_device *d = lm_device_find(env);
        if (d) default_device = d;
        else fprintf(stderr, "lumen: LUMEN_DEVICE=%s: %s; using %s\n", env,
                     lm_error_message(), default_device->spec);
    }
    lm_profile_init_env();
    return LM_OK;
}

int lm_device_count(void)
{
    lm_init();
    return ndevices;
}

lm_device *lm_device_at(int i)
{
    lm_init();
    return i >= 0 && i < ndevices ? devices[i] : NULL;
}

lm_device *lm_device_find(const char *spec)
{
    lm_init();
    if (!spec) spec = "";
    for (int i = 0; i < ndevices; i++)
        if (!strcmp(devices[i]->spec, spec)) return devices[i];
    /* "vulkan" alone: the first Vulkan device, lavapipe included */
    size_t n = strlen(spec);
    for (int i = 0; n && i < ndevices; i++)
        if (!strncmp(devices[i]->spec, spec, n) && devices[i]->spec[n] == ':')
            return devices[i];
    char *end;
    long idx = strtol(spec, &end, 10);
    if (*spec && !*end && idx >= 0 && idx < ndevices) return devices[idx];
    char list[256] = "";
    for (int i = 0; i < ndevices; i++) {
        strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
        strncat(list, devices[i]->spec, sizeof list - strlen(list) - 1);
    }
    lm_error_set(LM_ERR_DEVICE, "no device '%s' (have: %s)", spec, list);
    return NULL;
}

lm_device *lm_device_default(void)
{
    if (lm_init() != LM_OK) return NULL;
    return default_device;
}

void lm_device_set_default(lm_device *d)
{
    lm_init();
    if (d) default_device = d;
}

lm_device *lm_device_cpu(void)
{
    lm_init();
    return devices[0];
}

lm_status lm_device_sync(lm_device *d)
{
    if (!d) return lm_error_set(LM_ERR_ARG, "sync: no device");
    return d->backend->sync ? d->backend->sync(d) : LM_OK;
}

lm_status lm_device_plan(lm_device *d, bool on)
{
    if (!d) return lm_error_set(LM_ERR_ARG, "plan: no device");
    if (!d->backend->plan)
        return lm_error_set(LM_ERR_UNSUPPORTED, "plan: %s (%s) prepares no kernels ahead", d->spec,
                            d->backend->name);
    return d->backend->plan(d, on);
}

/* While profiling, a transfer is timed after the device's pending work is
 * done (the backend would wait for it anyway), so the row is the copy's own
 * time.  Copies into CPU memory are memcpy, not transfers: not rows. */
static lm_status transfer(lm_device *d, void *handle, size_t off, void *host, size_t n, bool up)
{
    bool timed = lm_profile_depth() && d != lm_device_cpu();
    lm_status st = timed ? lm_device_sync(d) : LM_OK;
    double t0 = timed ? lm_profile_now_ms() : 0;
    if (st == LM_OK)
        st = up ? d->backend->upload(d, handle, off, host, n) : d->backend->download(d, handle, off, host, n);
    if (timed && st == LM_OK) lm_profile_host(up ? "upload" : "download", "", d, lm_profile_now_ms() - t0, (int64_t)n);
    return st;
}

lm_status lm_device_upload(lm_device *d, void *handle, size_t off, const void *src, size_t n)
{
    return transfer(d, handle, off, (void *)src, n, true);
}

lm_status lm_device_download(lm_device *d, void *handle, size_t off, void *dst, size_t n)
{
    return transfer(d, handle, off, dst, n, false);
}

/* At unload (dlclose of lumen.so, or exit) hand the CPU's cached buffers
 * back, so leak checkers see only real leaks.  Other backends may already
 * have torn down their devices by then; their caches die with the process. */
__attribute__((destructor)) static void lm_release_caches(void)
{
    for (int i = 0; i < ndevices; i++)
        if (!strcmp(devices[i]->backend->name, "cpu")) lm_device_clear_cache(devices[i]);
}
