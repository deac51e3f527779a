/* vkstats.c - what the driver says about Lumen's compute pipelines:
 * for each argument SHADER[:S0,S1,...] (an embedded shader and its
 * specialization constants 0, 1, ...), the pipeline is built with
 * VK_KHR_pipeline_executable_properties' statistics captured and every
 * statistic printed (on NVIDIA: registers, shared memory, spills), so
 * that register pressure in a kernel variant shows without a profiler.
 * Usage: vkstats matmul_coop:1,1,1,1,1,1,1,0,0,0,0,1,0,1 ...
 * (VKSTATS_IR=1 also prints the driver's internal representations) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vulkan/vulkan.h>
#include "backends/vulkan/shaders.h"

#define CHECK(x) do { VkResult r_ = (x); if (r_ != VK_SUCCESS) { \
    fprintf(stderr, "vkstats: %s: %d\n", #x, (int)r_); return 1; } } while (0)

int main(int argc, char **argv)
{
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .apiVersion = VK_API_VERSION_1_2};
    VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
    VkInstance inst;
    CHECK(vkCreateInstance(&ici, NULL, &inst));
    uint32_t n = 8;
    VkPhysicalDevice phys[8];
    CHECK(vkEnumeratePhysicalDevices(inst, &n, phys));
    if (n == 0) { fprintf(stderr, "vkstats: no device\n"); return 1; }
    VkPhysicalDevice pd = phys[0];
    VkPhysicalDeviceProperties props;
    vkGetPhysicalDeviceProperties(pd, &props);
    printf("device %s, maxComputeSharedMemorySize %u\n", props.deviceName,
           props.limits.maxComputeSharedMemorySize);
    /* every feature the device has, so any shader's capabilities are on */
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR pe = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};
    VkPhysicalDeviceCooperativeMatrixFeaturesNV cm = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV, .pNext = &pe};
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                            .pNext = &cm};
    VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
                                            .pNext = &f12};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f11};
    vkGetPhysicalDeviceFeatures2(pd, &f2);
    if (!pe.pipelineExecutableInfo) { fprintf(stderr, "vkstats: no pipeline statistics\n"); return 1; }
    const char *exts[2] = {VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME,
                           VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME};
    float prio = 1;
    VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueCount = 1,
                                   .pQueuePriorities = &prio};
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &f2,
                              .queueCreateInfoCount = 1, .pQueueCreateInfos = &qci,
                              .enabledExtensionCount = cm.cooperativeMatrix ? 2 : 1,
                              .ppEnabledExtensionNames = exts};
    VkDevice dev;
    CHECK(vkCreateDevice(pd, &dci, NULL, &dev));
    PFN_vkGetPipelineExecutablePropertiesKHR get_props =
        (PFN_vkGetPipelineExecutablePropertiesKHR)vkGetDeviceProcAddr(dev, "vkGetPipelineExecutablePropertiesKHR");
    PFN_vkGetPipelineExecutableStatisticsKHR get_stats =
        (PFN_vkGetPipelineExecutableStatisticsKHR)vkGetDeviceProcAddr(dev, "vkGetPipelineExecutableStatisticsKHR");
    PFN_vkGetPipelineExecutableInternalRepresentationsKHR get_ir =
        (PFN_vkGetPipelineExecutableInternalRepresentationsKHR)vkGetDeviceProcAddr(
            dev, "vkGetPipelineExecutableInternalRepresentationsKHR");
    VkDescriptorSetLayoutBinding b[5];
    for (int i = 0; i < 5; i++)
        b[i] = (VkDescriptorSetLayoutBinding){(uint32_t)i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1,
                                              VK_SHADER_STAGE_COMPUTE_BIT, NULL};
    VkDescriptorSetLayoutCreateInfo dl = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                          .bindingCount = 5, .pBindings = b};
    VkDescriptorSetLayout dsl;
    CHECK(vkCreateDescriptorSetLayout(dev, &dl, NULL, &dsl));
    VkPushConstantRange pr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, 128};
    VkPipelineLayoutCreateInfo pl = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, .setLayoutCount = 1,
                                     .pSetLayouts = &dsl, .pushConstantRangeCount = 1, .pPushConstantRanges = &pr};
    VkPipelineLayout layout;
    CHECK(vkCreatePipelineLayout(dev, &pl, NULL, &layout));
    for (int a = 1; a < argc; a++) {
        char name[128];
        snprintf(name, sizeof name, "%s", argv[a]);
        char *colon = strchr(name, ':');
        uint32_t spec[32];
        VkSpecializationMapEntry me[32];
        uint32_t ns = 0;
        if (colon) {
            *colon = 0;
            for (char *t = strtok(colon + 1, ","); t && ns < 32; t = strtok(NULL, ",")) {
                me[ns] = (VkSpecializationMapEntry){ns, ns * 4, 4};
                spec[ns++] = (uint32_t)strtoul(t, NULL, 0);
            }
        }
        const lm_vk_shader *s = lm_vk_shader_find(name);
        if (!s) { printf("%s: no such shader\n", name); continue; }
        VkShaderModuleCreateInfo mci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                        .codeSize = (size_t)s->words * 4, .pCode = s->code};
        VkShaderModule mod;
        CHECK(vkCreateShaderModule(dev, &mci, NULL, &mod));
        VkSpecializationInfo si = {ns, me, ns * 4, spec};
        VkComputePipelineCreateInfo ci = {
            .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
            .flags = VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR |
                     VK_PIPELINE_CREATE_CAPTURE_INTERNAL_REPRESENTATIONS_BIT_KHR,
            .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                      .stage = VK_SHADER_STAGE_COMPUTE_BIT, .module = mod, .pName = "main",
                      .pSpecializationInfo = ns ? &si : NULL},
            .layout = layout};
        VkPipeline pipe;
        VkResult r = vkCreateComputePipelines(dev, VK_NULL_HANDLE, 1, &ci, NULL, &pipe);
        if (r != VK_SUCCESS) { printf("%s: pipeline failed (%d)\n", argv[a], (int)r); continue; }
        VkPipelineInfoKHR pi = {.sType = VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR, .pipeline = pipe};
        uint32_t ne = 4;
        VkPipelineExecutablePropertiesKHR ep[4];
        for (int i = 0; i < 4; i++) ep[i] = (VkPipelineExecutablePropertiesKHR){
            .sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR};
        get_props(dev, &pi, &ne, ep);
        printf("%s:", argv[a]);
        for (uint32_t e = 0; e < ne; e++) {
            VkPipelineExecutableInfoKHR ei = {.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR,
                                              .pipeline = pipe, .executableIndex = e};
            uint32_t nst = 32;
            VkPipelineExecutableStatisticKHR st[32];
            for (int i = 0; i < 32; i++) st[i] = (VkPipelineExecutableStatisticKHR){
                .sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR};
            get_stats(dev, &ei, &nst, st);
            for (uint32_t i = 0; i < nst; i++) {
                printf(" | %s=", st[i].name);
                switch (st[i].format) {
                case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: printf("%u", st[i].value.b32); break;
                case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: printf("%lld", (long long)st[i].value.i64); break;
                case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR: printf("%llu", (unsigned long long)st[i].value.u64); break;
                default: printf("%g", st[i].value.f64);
                }
            }
        }
        printf("\n");
        /* VKSTATS_IR=1: the driver's internal representations too (on
         * NVIDIA the machine code, where it gives it), to check for HMMA
         * and LDSM in a tensor-core kernel */
        const char *ir = getenv("VKSTATS_IR");
        for (uint32_t e = 0; ir && *ir == '1' && e < ne; e++) {
            VkPipelineExecutableInfoKHR ei = {.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR,
                                              .pipeline = pipe, .executableIndex = e};
            uint32_t nr = 0;
            get_ir(dev, &ei, &nr, NULL);
            VkPipelineExecutableInternalRepresentationKHR *irs = calloc(nr ? nr : 1, sizeof *irs);
            for (uint32_t i = 0; i < nr; i++) irs[i].sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INTERNAL_REPRESENTATION_KHR;
            get_ir(dev, &ei, &nr, irs);
            for (uint32_t i = 0; i < nr; i++) irs[i].pData = calloc(1, irs[i].dataSize + 1);
            get_ir(dev, &ei, &nr, irs);
            for (uint32_t i = 0; i < nr; i++) {
                printf("--- %s (%s, %zu bytes)\n", irs[i].name, irs[i].description, irs[i].dataSize);
                if (irs[i].isText) fwrite(irs[i].pData, 1, strnlen(irs[i].pData, irs[i].dataSize), stdout);
                printf("\n");
                free(irs[i].pData);
            }
            free(irs);
        }
        fflush(stdout);
        vkDestroyPipeline(dev, pipe, NULL);
        vkDestroyShaderModule(dev, mod, NULL);
    }
    vkDestroyPipelineLayout(dev, layout, NULL);
    vkDestroyDescriptorSetLayout(dev, dsl, NULL);
    vkDestroyDevice(dev, NULL);
    vkDestroyInstance(inst, NULL);
    return 0;
}
