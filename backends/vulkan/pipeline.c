/* pipeline.c - compute pipelines, made on first use and kept.
 *
 * A pipeline is a shader plus its specialization constants (op, dtypes,
 * dims, tile sizes).  Making one is the slow part of a first run, so the
 * driver's VkPipelineCache is loaded from and saved to
 * $XDG_CACHE_HOME/lumen/ (or ~/.cache/lumen/), one file per device and
 * driver version; the driver itself rejects a stale or foreign file. */
#include <errno.h>
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

static void *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    void *data = NULL;
    long len;
    if (!fseek(f, 0, SEEK_END) && (len = ftell(f)) > 0 && len < (256L << 20) && !fseek(f, 0, SEEK_SET)) {
        data = malloc((size_t)len);
        if (data && fread(data, 1, (size_t)len, f) != (size_t)len) { free(data); data = NULL; }
        *n = (size_t)len;
    }
    fclose(f);
    return data;
}

lm_status lm_vk_pipeline_init(lm_vk_dev *v)
{
    cache_path(v);
    size_t n = 0;
    void *data = v->pcache_path[0] ? read_file(v->pcache_path, &n) : NULL;
    VkPipelineCacheCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO,
                                    .initialDataSize = data ? n : 0, .pInitialData = data};
    VkResult r = vkCreatePipelineCache(v->device, &ci, NULL, &v->pcache);
    if (r != VK_SUCCESS && data) {       /* a damaged file: start empty */
        ci.initialDataSize = 0;
        ci.pInitialData = NULL;
        r = vkCreatePipelineCache(v->device, &ci, NULL, &v->pcache);
    }
    free(data);
    return lm_vk_check(v, r, "vkCreatePipelineCache");
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
        FILE *f = fopen(tmp, "wb");
        if (f) {
            bool ok = fwrite(data, 1, n, f) == n;
            ok &= !fclose(f);
            if (!ok || rename(tmp, v->pcache_path)) remove(tmp);
        }
    }
    free(data);
}

void lm_vk_pipeline_shutdown(lm_vk_dev *v)
{
    if (!v->device) return;
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

lm_status lm_vk_pipeline_get(lm_vk_dev *v, const char *shader, const uint32_t *spec_in,
                             int nspec, VkPipeline *out)
{
    uint32_t spec[LM_VK_MAX_SPEC] = {0};
    if (nspec > LM_VK_MAX_SPEC) return lm_error_set(LM_ERR_ARG, "vulkan: too many constants");
    if (nspec > 0) memcpy(spec, spec_in, (size_t)nspec * sizeof *spec);   /* spec_in may be NULL */
    unsigned h = hash_key(shader, spec, nspec);
    for (lm_vk_pipeline *p = v->pipes[h]; p; p = p->next)
        if (!strcmp(p->shader, shader) && !memcmp(p->spec, spec, sizeof spec)) {
            *out = p->pipe;
            return LM_OK;
        }
    double t0 = lm_profile_depth() ? lm_profile_now_ms() : 0;   /* a first use: a profile row */
    VkShaderModule mod = VK_NULL_HANDLE;
    lm_status st = get_module(v, shader, &mod);
    if (st != LM_OK) return st;
    VkSpecializationMapEntry me[LM_VK_MAX_SPEC];
    for (int i = 0; i < nspec; i++)
        me[i] = (VkSpecializationMapEntry){(uint32_t)i, (uint32_t)i * 4, 4};
    VkSpecializationInfo si = {.mapEntryCount = (uint32_t)nspec, .pMapEntries = me,
                               .dataSize = (size_t)nspec * 4, .pData = spec};
    VkComputePipelineCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .flags = v->feat.exec_stats ? VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR : 0,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT, .module = mod, .pName = "main",
                  .pSpecializationInfo = nspec ? &si : NULL},
        .layout = lm_vk_wide(shader) ? v->layout_wide : v->layout,
    };
    if (!ci.layout) return lm_error_set(LM_ERR_UNSUPPORTED, "vulkan: %s needs more buffer bindings than %s has",
                                        shader, v->dev->name);
    lm_vk_pipeline *p = calloc(1, sizeof *p);
    if (!p) return lm_error_set(LM_ERR_NOMEM, "vulkan: out of host memory");
    st = lm_vk_check(v, vkCreateComputePipelines(v->device, v->pcache, 1, &ci, NULL, &p->pipe),
                     "vkCreateComputePipelines");
    if (st != LM_OK) { free(p); return lm_error_prefix("shader %s", shader); }
    snprintf(p->shader, sizeof p->shader, "%s", shader);
    memcpy(p->spec, spec, sizeof spec);
    p->next = v->pipes[h];
    v->pipes[h] = p;
    v->pcache_dirty = true;
    *out = p->pipe;
    if (v->feat.exec_stats) print_stats(v, shader, spec, nspec, p->pipe);
    if (lm_profile_depth()) lm_profile_host("pipeline", shader, v->dev, lm_profile_now_ms() - t0, 0);
    return LM_OK;
}
