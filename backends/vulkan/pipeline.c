/* pipeline.c - compute pipelines, made on first use and kept.
 *
 * A pipeline is a shader plus its specialization constants (op, dtypes,
 * dims, tile sizes).  Making one is the slow part of a first run, so new
 * ones are made on compile threads while the evaluation goes on recording
 * (below, "compile threads"), and the driver's VkPipelineCache is loaded
 * from and saved to $XDG_CACHE_HOME/lumen/ (or ~/.cache/lumen/), one file
 * per device and driver version.  The file is the driver's data behind a
 * header of Lumen's own (magic, length, checksum), written to a file of the
 * process's own, flushed to disk and renamed over the old one: a process
 * killed while writing leaves the old file whole (and a stray temporary
 * file, removed by the next start once its process is gone), and a file
 * that is short or damaged anyway is not handed to the driver -- the start
 * is then cold, not broken.  The driver itself rejects a stale or foreign
 * file. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/profile.h"
#include "backends/vulkan/vk.h"

static void cache_path(lm_vk_dev *v)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char dir[400];
    if (xdg && *xdg) snprintf(dir, sizeof dir, "%s/lumen", xdg);
    else if (home && *home) snprintf(dir, sizeof dir, "%s/.cache/lumen", home);
    else { v->pcache_path[0] = 0; return; }
    /* make both levels; failure only means no cache file */
    char parent[400];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (slash) { *slash = 0; mkdir(parent, 0755); }
    if (mkdir(dir, 0755) && errno != EEXIST) { v->pcache_path[0] = 0; return; }
    snprintf(v->pcache_path, sizeof v->pcache_path, "%s/vulkan-%04x-%04x-%08x.cache", dir,
             v->props.vendorID, v->props.deviceID, v->props.driverVersion);
}

/* the file: "LMVKPC01", the data's length (u64, little-endian as the
 * host writes it), FNV-1a 64 of the data, then the data */
#define PC_MAGIC "LMVKPC01"
enum { PC_HEADER = 24 };

static uint64_t fnv64(const unsigned char *d, size_t n)
{
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++) h = (h ^ d[i]) * 1099511628211ull;
    return h;
}

/* the driver's data in the file at path, or NULL when it is absent, short,
 * too large or does not match its checksum */
static void *read_cache(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char hdr[PC_HEADER];
    uint64_t len = 0, sum = 0;
    void *data = NULL;
    if (fread(hdr, 1, PC_HEADER, f) == PC_HEADER && !memcmp(hdr, PC_MAGIC, 8)) {
        memcpy(&len, hdr + 8, 8);
        memcpy(&sum, hdr + 16, 8);
        if (len > 0 && len < (256ull << 20) && (data = malloc((size_t)len)) &&
            (fread(data, 1, (size_t)len, f) != (size_t)len || fgetc(f) != EOF ||
             fnv64(data, (size_t)len) != sum)) {
            free(data);
            data = NULL;
        }
    }
    fclose(f);
    *n = (size_t)len;
    return data;
}

/* "<cache>.<pid>.tmp" files whose process is gone (it was killed while
 * writing): removed */
static void remove_stale(const char *path)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) return;
    *slash = 0;
    const char *base = path + (slash + 1 - dir);   /* the file name, in path */
    size_t nb = strlen(base);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *nm = e->d_name;
        if (strncmp(nm, base, nb) || nm[nb] != '.') continue;
        char *end;
        long pid = strtol(nm + nb + 1, &end, 10);
        if (end == nm + nb + 1 || strcmp(end, ".tmp") || pid <= 0) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;   /* alive, or not ours to judge */
        char full[1100];
        snprintf(full, sizeof full, "%s/%s", dir, nm);
        remove(full);
    }
    closedir(d);
}

lm_status lm_vk_pipeline_init(lm_vk_dev *v)
{
    cache_path(v);
    size_t n = 0;
    void *data = NULL;
    if (v->pcache_path[0]) {
        remove_stale(v->pcache_path);
        data = read_cache(v->pcache_path, &n);
    }
    VkPipelineCacheCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO,
                                    .initialDataSize = data ? n : 0, .pInitialData = data};
    VkResult r = vkCreatePipelineCache(v->device, &ci, NULL, &v->pcache);
    if (r != VK_SUCCESS && data) {       /* refused by the driver: start empty */
        ci.initialDataSize = 0;
        ci.pInitialData = NULL;
        r = vkCreatePipelineCache(v->device, &ci, NULL, &v->pcache);
    }
    free(data);
    return lm_vk_check(v, r, "vkCreatePipelineCache");
}

/* LUMEN_VK_CACHE_STOP_AT=N (tests/vk_coldstart.sh): the process stops itself
 * (SIGKILL) once N bytes of the new file are written, as a crash there
 * would; nothing else reads it */
static long stop_at(void)
{
    const char *e = getenv("LUMEN_VK_CACHE_STOP_AT");
    return e && *e ? strtol(e, NULL, 10) : -1;
}

static bool write_all(FILE *f, const void *p, size_t n, long *left)
{
    const unsigned char *c = p;
    if (*left >= 0 && (size_t)*left < n) {   /* the crash a test asks for */
        fwrite(c, 1, (size_t)*left, f);
        fflush(f);
        raise(SIGKILL);
    }
    if (*left >= 0) *left -= (long)n;
    return fwrite(c, 1, n, f) == n;
}

void lm_vk_pipeline_save(lm_vk_dev *v)
{
    v->pcache_dirty = false;
    if (!v->pcache_path[0] || !v->pcache) return;
    size_t n = 0;
    if (vkGetPipelineCacheData(v->device, v->pcache, &n, NULL) != VK_SUCCESS || !n) return;
    void *data = malloc(n);
    if (!data) return;
    if (vkGetPipelineCacheData(v->device, v->pcache, &n, data) == VK_SUCCESS) {
        char tmp[600];
        snprintf(tmp, sizeof tmp, "%s.%d.tmp", v->pcache_path, (int)getpid());
        unsigned char hdr[PC_HEADER];
        uint64_t len = n, sum = fnv64(data, n);
        memcpy(hdr, PC_MAGIC, 8);
        memcpy(hdr + 8, &len, 8);
        memcpy(hdr + 16, &sum, 8);
        long left = stop_at();
        FILE *f = fopen(tmp, "wb");
        if (f) {
            bool ok = write_all(f, hdr, PC_HEADER, &left) && write_all(f, data, n, &left);
            ok &= !fflush(f) && !fsync(fileno(f));   /* on disk before the rename makes it the cache */
            ok &= !fclose(f);
            if (!ok || rename(tmp, v->pcache_path)) remove(tmp);
        }
    }
    free(data);
}

static void pool_stop(lm_vk_dev *v);

void lm_vk_pipeline_shutdown(lm_vk_dev *v)
{
    if (!v->device) return;
    pool_stop(v);
    if (v->pcache_dirty) lm_vk_pipeline_save(v);
    for (int b = 0; b < 256; b++)
        while (v->pipes[b]) {
            lm_vk_pipeline *p = v->pipes[b];
            v->pipes[b] = p->next;
            vkDestroyPipeline(v->device, p->pipe, NULL);
            free(p);
        }
    for (int i = 0; i < LM_VK_MAX_SHADERS; i++)
        if (v->modules[i]) vkDestroyShaderModule(v->device, v->modules[i], NULL);
    vkDestroyPipelineCache(v->device, v->pcache, NULL);
}

static lm_status get_module(lm_vk_dev *v, const char *shader, VkShaderModule *out)
{
    lm_status st = lm_vk_spirv_load();
    if (st != LM_OK) return st;
    const lm_vk_shader *s = lm_vk_shader_find(shader);
    if (!s) return lm_error_set(LM_ERR_UNSUPPORTED, "vulkan: no shader '%s' in %s", shader,
                                lm_vk_spirv_path());
    int idx = s->index;
    if (!v->modules[idx]) {
        VkShaderModuleCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                       .codeSize = (size_t)s->words * 4, .pCode = s->code};
        st = lm_vk_check(v, vkCreateShaderModule(v->device, &ci, NULL, &v->modules[idx]),
                         "vkCreateShaderModule");
        if (st != LM_OK) return st;
    }
    *out = v->modules[idx];
    return LM_OK;
}

/* over the constants given: the rest are zero (the key compares them all) */
static unsigned hash_key(const char *shader, const uint32_t *spec, int nspec)
{
    unsigned h = 2166136261u;
    for (const char *c = shader; *c; c++) h = (h ^ (unsigned char)*c) * 16777619u;
    for (int i = 0; i < nspec; i++) h = (h ^ spec[i]) * 16777619u;
    return h & 255u;
}

/* LUMEN_VK_STATS=1: the driver's statistics of a pipeline just created, one
 * line on stderr (on NVIDIA: registers a thread, shared memory, spilled
 * bytes), so a benchmark's log says what bounds each kernel it ran.  Only
 * reading: a query that fails prints what it has. */
static void print_stats(lm_vk_dev *v, const char *shader, const uint32_t *spec, int nspec, VkPipeline pipe)
{
    PFN_vkGetPipelineExecutablePropertiesKHR get_props = (PFN_vkGetPipelineExecutablePropertiesKHR)
        vkGetDeviceProcAddr(v->device, "vkGetPipelineExecutablePropertiesKHR");
    PFN_vkGetPipelineExecutableStatisticsKHR get_stats = (PFN_vkGetPipelineExecutableStatisticsKHR)
        vkGetDeviceProcAddr(v->device, "vkGetPipelineExecutableStatisticsKHR");
    if (!get_props || !get_stats) return;
    char line[1024];
    size_t k = (size_t)snprintf(line, sizeof line, "lumen: %s pipeline %s", v->dev->spec, shader);
    for (int i = 0; i < nspec && k < sizeof line; i++)
        k += (size_t)snprintf(line + k, sizeof line - k, "%s%u", i ? "," : " [", spec[i]);
    if (nspec > 0 && k < sizeof line) k += (size_t)snprintf(line + k, sizeof line - k, "]");
    VkPipelineInfoKHR pi = {.sType = VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR, .pipeline = pipe};
    VkPipelineExecutablePropertiesKHR ep[4];
    for (int i = 0; i < 4; i++)
        ep[i] = (VkPipelineExecutablePropertiesKHR){.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR};
    uint32_t ne = 4;
    VkResult r = get_props(v->device, &pi, &ne, ep);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) ne = 0;
    for (uint32_t e = 0; e < ne; e++) {
        VkPipelineExecutableInfoKHR ei = {.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR,
                                          .pipeline = pipe, .executableIndex = e};
        VkPipelineExecutableStatisticKHR st[32];
        for (int i = 0; i < 32; i++)
            st[i] = (VkPipelineExecutableStatisticKHR){.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR};
        uint32_t nst = 32;
        r = get_stats(v->device, &ei, &nst, st);
        if (r != VK_SUCCESS && r != VK_INCOMPLETE) continue;
        for (uint32_t i = 0; i < nst && k < sizeof line; i++) {
            const char *sep = i || e ? " | " : ": ";
            switch (st[i].format) {
            case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR:
                k += (size_t)snprintf(line + k, sizeof line - k, "%s%s=%u", sep, st[i].name, st[i].value.b32);
                break;
            case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR:
                k += (size_t)snprintf(line + k, sizeof line - k, "%s%s=%lld", sep, st[i].name,
                                      (long long)st[i].value.i64);
                break;
            case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR:
                k += (size_t)snprintf(line + k, sizeof line - k, "%s%s=%llu", sep, st[i].name,
                                      (unsigned long long)st[i].value.u64);
                break;
            default:
                k += (size_t)snprintf(line + k, sizeof line - k, "%s%s=%g", sep, st[i].name, st[i].value.f64);
            }
        }
    }
    fprintf(stderr, "%s\n", line);
}

/* ---- compile threads ----
 * A pipeline new to this process is made on one of a few threads
 * (vkCreateComputePipelines may be called from several threads at once, and
 * a VkPipelineCache made without the externally-synchronized flag locks
 * itself), so a first evaluation's dozens of kernels compile side by side
 * while the evaluating thread goes on recording (exec.c keeps its dispatches
 * until their pipelines are ready, and records them in order: the command
 * stream is the one the lazy path records; a pipeline the evaluation must
 * wait for that no thread has taken yet it makes itself).  LUMEN_VK_COMPILE_THREADS=N
 * sets how many (default: the online CPUs, at most 16; 0: each pipeline made
 * on the evaluating thread when first dispatched, as before). */
struct lm_vk_pool {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    lm_vk_pipeline *head, *tail;       /* queued, not yet taken */
    bool stop;
    int nthreads;
    pthread_t threads[16];
};

/* LUMEN_VK_PIPELINE_LOG=1: each pipeline's compile time on stderr, from
 * whichever thread made it, "planned" after those a plan started
 * (bench/gpu/coldstart.py sums them) */
static bool log_on(void)
{
    const char *e = getenv("LUMEN_VK_PIPELINE_LOG");
    return e && !strcmp(e, "1");
}

static void log_time(const lm_vk_pipeline *p, double ms)
{
    fprintf(stderr, "lumen: pipeline %s (%d constants) %.1f ms%s\n", p->shader, p->nspec, ms,
            p->planned ? " planned" : "");
}

/* makes p, which the caller took off the queue (pl->mu not held), and
 * publishes it to the threads waiting for it; returns with pl->mu held */
static void make_taken(lm_vk_dev *v, struct lm_vk_pool *pl, lm_vk_pipeline *p, bool log)
{
    VkPipeline pipe = VK_NULL_HANDLE;
    double t0 = log ? lm_profile_now_ms() : 0;
    VkResult r = vkCreateComputePipelines(v->device, v->pcache, 1, &p->ci, NULL, &pipe);
    if (log) log_time(p, lm_profile_now_ms() - t0);
    pthread_mutex_lock(&pl->mu);
    p->pipe = pipe;
    p->res = r;
    p->ready = true;
    pthread_cond_broadcast(&pl->done);
}

static void *compile_thread(void *arg)
{
    lm_vk_dev *v = arg;
    struct lm_vk_pool *pl = v->pool;
    bool log = log_on();
    pthread_mutex_lock(&pl->mu);
    for (;;) {
        while (!pl->head && !pl->stop) pthread_cond_wait(&pl->work, &pl->mu);
        if (pl->stop) break;
        lm_vk_pipeline *p = pl->head;
        pl->head = p->qnext;
        if (!pl->head) pl->tail = NULL;
        p->taken = true;
        pthread_mutex_unlock(&pl->mu);
        make_taken(v, pl, p, log);
    }
    pthread_mutex_unlock(&pl->mu);
    return NULL;
}

static int compile_threads(void)
{
    const char *e = getenv("LUMEN_VK_COMPILE_THREADS");
    long n = e && *e ? strtol(e, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
    return n < 0 ? 0 : n > 16 ? 16 : (int)n;
}

/* the threads, started on first need; false where there are none */
static bool pool_up(lm_vk_dev *v)
{
    if (v->pool) return true;
    if (v->pool_off) return false;
    int n = compile_threads();
    struct lm_vk_pool *pl = n > 0 ? calloc(1, sizeof *pl) : NULL;
    if (!pl) { v->pool_off = true; return false; }
    pthread_mutex_init(&pl->mu, NULL);
    pthread_cond_init(&pl->work, NULL);
    pthread_cond_init(&pl->done, NULL);
    v->pool = pl;
    for (int i = 0; i < n; i++) {
        if (pthread_create(&pl->threads[i], NULL, compile_thread, v)) break;
        pl->nthreads++;
    }
    if (!pl->nthreads) {   /* no thread could start: the lazy path */
        v->pool = NULL;
        pthread_cond_destroy(&pl->work);
        pthread_cond_destroy(&pl->done);
        pthread_mutex_destroy(&pl->mu);
        free(pl);
        v->pool_off = true;
        return false;
    }
    return true;
}

static void pool_stop(lm_vk_dev *v)
{
    struct lm_vk_pool *pl = v->pool;
    if (!pl) return;
    pthread_mutex_lock(&pl->mu);
    pl->stop = true;
    pthread_cond_broadcast(&pl->work);
    pthread_mutex_unlock(&pl->mu);
    for (int i = 0; i < pl->nthreads; i++) pthread_join(pl->threads[i], NULL);
    pthread_cond_destroy(&pl->work);
    pthread_cond_destroy(&pl->done);
    pthread_mutex_destroy(&pl->mu);
    free(pl);
    v->pool = NULL;
}

bool lm_vk_pipeline_async(lm_vk_dev *v)
{
    return !v->capture && !lm_profile_depth() && !v->feat.exec_stats && !v->pool_off;
}

/* pipelines new to the process, and those started in plan mode (vulkan.h) */
static int64_t started, planned;

int64_t lm_vulkan_pipelines_started(void) { return started; }
int64_t lm_vulkan_pipelines_planned(void) { return planned; }

/* Plan mode: exec.c's lm_vk_dispatch starts the pipeline and records
 * nothing (and nn_conv.c's packed weights are neither made nor kept), so a
 * dry run of a model's first call queues every pipeline it needs on the
 * compile threads in the time it takes to build its graphs.  Only where
 * the threads can take them: without, the plan would compile them one at
 * a time here, which the real call does as well. */
lm_status lm_vk_plan(lm_device *d, bool on)
{
    lm_vk_dev *v = lm_vk_of(d);
    if (!on) {
        if (v->plan && log_on())
            fprintf(stderr, "lumen: plan on %s: %lld pipelines started\n", d->spec, (long long)v->planned);
        v->plan = false;
        return LM_OK;
    }
    lm_status st = lm_vk_ensure_up(v);
    if (st != LM_OK) return st;
    if (v->capture) return lm_error_set(LM_ERR_STATE, "vulkan: plan: a recording is being made on %s", d->spec);
    if (!lm_vk_pipeline_async(v) || !pool_up(v))
        return lm_error_set(LM_ERR_UNSUPPORTED, "vulkan: plan: %s has no compile threads now "
                            "(LUMEN_VK_COMPILE_THREADS=0, a profile or LUMEN_VK_STATS)", d->spec);
    v->plan = true;
    v->planned = 0;
    return LM_OK;
}

static lm_vk_pipeline *find(lm_vk_dev *v, const char *shader, const uint32_t *spec, unsigned h)
{
    for (lm_vk_pipeline *p = v->pipes[h]; p; p = p->next)
        if (!strcmp(p->shader, shader) && !memcmp(p->spec, spec, sizeof p->spec)) return p;
    return NULL;
}

/* p, still in the compile queue, taken out of it (the pool's lock held) */
static void unqueue(struct lm_vk_pool *pl, lm_vk_pipeline *p)
{
    lm_vk_pipeline *prev = NULL;
    for (lm_vk_pipeline *q = pl->head; q && q != p; q = q->qnext) prev = q;
    if (prev) prev->qnext = p->qnext;
    else pl->head = p->qnext;
    if (pl->tail == p) pl->tail = prev;
    p->qnext = NULL;
    p->taken = true;
}

/* waits for p if it is being made; its status, named by shader.  One still
 * queued (behind a plan's others, or while every thread is busy) is made
 * here rather than waited for: the evaluation needs it now */
lm_status lm_vk_pipeline_wait(lm_vk_dev *v, lm_vk_pipeline *p, VkPipeline *out)
{
    if (!p->seen) {
        struct lm_vk_pool *pl = v->pool;
        pthread_mutex_lock(&pl->mu);
        if (!p->ready && !p->taken) {
            unqueue(pl, p);
            pthread_mutex_unlock(&pl->mu);
            make_taken(v, pl, p, log_on());
        }
        while (!p->ready) pthread_cond_wait(&pl->done, &pl->mu);
        pthread_mutex_unlock(&pl->mu);
        p->seen = true;
    }
    if (p->res != VK_SUCCESS) {
        lm_vk_check(v, p->res, "vkCreateComputePipelines");
        return lm_error_prefix("shader %s", p->shader);
    }
    if (!p->reported && v->feat.exec_stats) print_stats(v, p->shader, p->spec, p->nspec, p->pipe);
    p->reported = true;
    *out = p->pipe;
    return LM_OK;
}

lm_status lm_vk_pipeline_start(lm_vk_dev *v, const char *shader, const uint32_t *spec_in, int nspec,
                               lm_vk_pipeline **out, bool *ready)
{
    uint32_t spec[LM_VK_MAX_SPEC] = {0};
    if (nspec > LM_VK_MAX_SPEC) return lm_error_set(LM_ERR_ARG, "vulkan: too many constants");
    if (nspec > 0) memcpy(spec, spec_in, (size_t)nspec * sizeof *spec);   /* spec_in may be NULL */
    unsigned h = hash_key(shader, spec, nspec);
    lm_vk_pipeline *p = find(v, shader, spec, h);
    if (p) {
        *out = p;
        if (p->seen) {
            *ready = true;
            return LM_OK;
        }
        pthread_mutex_lock(&v->pool->mu);
        *ready = p->ready;
        pthread_mutex_unlock(&v->pool->mu);
        return LM_OK;
    }
    double t0 = lm_profile_depth() ? lm_profile_now_ms() : 0;   /* a first use: a profile row */
    VkShaderModule mod = VK_NULL_HANDLE;
    lm_status st = get_module(v, shader, &mod);
    if (st != LM_OK) return st;
    VkPipelineLayout layout = lm_vk_wide(shader) ? v->layout_wide : v->layout;
    if (!layout) return lm_error_set(LM_ERR_UNSUPPORTED, "vulkan: %s needs more buffer bindings than %s has",
                                     shader, v->dev->name);
    p = calloc(1, sizeof *p);
    if (!p) return lm_error_set(LM_ERR_NOMEM, "vulkan: out of host memory");
    snprintf(p->shader, sizeof p->shader, "%s", shader);
    memcpy(p->spec, spec, sizeof spec);
    p->nspec = nspec;
    p->planned = v->plan;
    for (int i = 0; i < nspec; i++)
        p->me[i] = (VkSpecializationMapEntry){(uint32_t)i, (uint32_t)i * 4, 4};
    p->si = (VkSpecializationInfo){.mapEntryCount = (uint32_t)nspec, .pMapEntries = p->me,
                                   .dataSize = (size_t)nspec * 4, .pData = p->spec};
    p->ci = (VkComputePipelineCreateInfo){
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .flags = v->feat.exec_stats ? VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR : 0,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT, .module = mod, .pName = "main",
                  .pSpecializationInfo = nspec ? &p->si : NULL},
        .layout = layout,
    };
    if (lm_vk_pipeline_async(v) && pool_up(v)) {
        struct lm_vk_pool *pl = v->pool;
        pthread_mutex_lock(&pl->mu);
        if (pl->tail) pl->tail->qnext = p;
        else pl->head = p;
        pl->tail = p;
        pthread_cond_signal(&pl->work);
        pthread_mutex_unlock(&pl->mu);
        *ready = false;
    } else {
        double tc = log_on() ? lm_profile_now_ms() : 0;
        st = lm_vk_check(v, vkCreateComputePipelines(v->device, v->pcache, 1, &p->ci, NULL, &p->pipe),
                         "vkCreateComputePipelines");
        if (st == LM_OK && log_on()) log_time(p, lm_profile_now_ms() - tc);
        if (st != LM_OK) { free(p); return lm_error_prefix("shader %s", shader); }
        p->res = VK_SUCCESS;
        p->ready = p->seen = true;
        *ready = true;
    }
    p->next = v->pipes[h];
    v->pipes[h] = p;
    v->pcache_dirty = true;
    started++;
    if (v->plan) {
        planned++;
        v->planned++;
    }
    *out = p;
    if (*ready && v->feat.exec_stats) {
        print_stats(v, shader, spec, nspec, p->pipe);
        p->reported = true;
    }
    if (*ready && lm_profile_depth()) lm_profile_host("pipeline", shader, v->dev, lm_profile_now_ms() - t0, 0);
    return LM_OK;
}

lm_status lm_vk_pipeline_get(lm_vk_dev *v, const char *shader, const uint32_t *spec,
                             int nspec, VkPipeline *out)
{
    lm_vk_pipeline *p;
    bool ready;
    lm_status st = lm_vk_pipeline_start(v, shader, spec, nspec, &p, &ready);
    return st == LM_OK ? lm_vk_pipeline_wait(v, p, out) : st;
}
