/* device.c - the Vulkan instance, device discovery and registration.
 *
 * lm_vulkan_register() runs once from lm_init(): it creates the instance
 * (with the Khronos validation layer when LUMEN_VK_VALIDATE=1), lists the
 * physical devices with what they can do, orders them discrete, integrated,
 * virtual, CPU (lavapipe) and registers each as "vulkan:N".  A VkDevice is
 * only created when a device is first used, so starting is cheap and a
 * process that never touches the GPU never wakes it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "backends/vulkan/vk.h"
#include "core/profile.h"

extern const lm_backend lm_vk_backend;

VkInstance lm_vk_instance;
static VkDebugUtilsMessengerEXT messenger;
static int64_t validation_messages;
static char status_line[1800] = "not initialised";  /* long: the SPIR-V search */

const char *lm_vulkan_status(void) { return status_line; }
int64_t lm_vulkan_validation_messages(void) { return validation_messages; }

static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(
    VkDebugUtilsMessageSeverityFlagBitsEXT sev, VkDebugUtilsMessageTypeFlagsEXT type,
    const VkDebugUtilsMessengerCallbackDataEXT *data, void *ctx)
{
    (void)type; (void)ctx;
    if (sev < VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) return VK_FALSE;
    validation_messages++;
    fprintf(stderr, "lumen: vulkan validation: %s\n", data->pMessage);
    return VK_FALSE;
}

lm_status lm_vk_check(lm_vk_dev *v, VkResult r, const char *what)
{
    switch (r) {
    case VK_SUCCESS:
        return LM_OK;
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
    case VK_ERROR_OUT_OF_HOST_MEMORY:
        return lm_error_set(LM_ERR_NOMEM, "vulkan: out of %s memory in %s on %s",
                            r == VK_ERROR_OUT_OF_HOST_MEMORY ? "host" : "device", what,
                            v ? v->dev->name : "instance");
    case VK_ERROR_DEVICE_LOST:
        if (v) v->lost = true;
        return lm_error_set(LM_ERR_DEVICE, "vulkan: device lost in %s on %s", what,
                            v ? v->dev->name : "?");
    default:
        return lm_error_set(LM_ERR_DEVICE, "vulkan: %s failed (VkResult %d)", what, (int)r);
    }
}

static bool layer_present(const char *name)
{
    uint32_t n = 0;
    vkEnumerateInstanceLayerProperties(&n, NULL);
    VkLayerProperties *p = calloc(n ? n : 1, sizeof *p);
    if (!p) return false;
    vkEnumerateInstanceLayerProperties(&n, p);
    bool found = false;
    for (uint32_t i = 0; i < n; i++) found |= !strcmp(p[i].layerName, name);
    free(p);
    return found;
}

/* Vulkan 1.3 where the device has it (the effective version is the smaller
 * of this and the device's): the VK_NV_cooperative_matrix2 kernels are
 * SPIR-V 1.6, valid from 1.3 on; every other module is SPIR-V 1.5. */
static VkResult create_instance(bool validate)
{
    VkApplicationInfo app = {
        .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "lumen",
        .pEngineName = "lumen", .apiVersion = VK_API_VERSION_1_3,
    };
    const char *layers[] = {"VK_LAYER_KHRONOS_validation"};
    const char *exts[] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME};
    VkInstanceCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app,
        .enabledLayerCount = validate ? 1 : 0, .ppEnabledLayerNames = layers,
        .enabledExtensionCount = validate ? 1 : 0, .ppEnabledExtensionNames = exts,
    };
    VkResult r = vkCreateInstance(&ci, NULL, &lm_vk_instance);
    if (r != VK_SUCCESS || !validate) return r;
    PFN_vkCreateDebugUtilsMessengerEXT mk = (PFN_vkCreateDebugUtilsMessengerEXT)
        vkGetInstanceProcAddr(lm_vk_instance, "vkCreateDebugUtilsMessengerEXT");
    VkDebugUtilsMessengerCreateInfoEXT mi = {
        .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
        .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                           VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
        .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
        .pfnUserCallback = on_message,
    };
    if (mk) mk(lm_vk_instance, &mi, NULL, &messenger);
    return r;
}

static bool has_extension(VkPhysicalDevice p, const char *name)
{
    uint32_t n = 0;
    vkEnumerateDeviceExtensionProperties(p, NULL, &n, NULL);
    VkExtensionProperties *e = calloc(n ? n : 1, sizeof *e);
    if (!e) return false;
    vkEnumerateDeviceExtensionProperties(p, NULL, &n, e);
    bool found = false;
    for (uint32_t i = 0; i < n; i++) found |= !strcmp(e[i].extensionName, name);
    free(e);
    return found;
}

/* Lists the f16 x f16 + f32 -> f32 subgroup shapes the device offers for
 * cooperative matrices (in the driver's order, which is its preference);
 * matmul_coop.c picks among them at run time. */
static void coopmat_nv_shapes(VkPhysicalDevice p, lm_vk_features *ft)
{
    ft->ncoop = 0;
    if (!has_extension(p, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME)) return;
    PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV get =
        (PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV)vkGetInstanceProcAddr(
            lm_vk_instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV");
    if (!get) return;
    uint32_t n = 0;
    if (get(p, &n, NULL) != VK_SUCCESS || !n) return;
    VkCooperativeMatrixPropertiesNV *c = calloc(n, sizeof *c);
    if (!c) return;
    for (uint32_t i = 0; i < n; i++) c[i].sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV;
    if (get(p, &n, c) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && ft->ncoop < 8; i++)
            if (c[i].AType == VK_COMPONENT_TYPE_FLOAT16_NV && c[i].BType == VK_COMPONENT_TYPE_FLOAT16_NV &&
                c[i].CType == VK_COMPONENT_TYPE_FLOAT32_NV && c[i].DType == VK_COMPONENT_TYPE_FLOAT32_NV &&
                c[i].scope == VK_SCOPE_SUBGROUP_NV && c[i].MSize <= 255 && c[i].NSize <= 255 &&
                c[i].KSize <= 255) {
                uint8_t *s = ft->coop_mnk[ft->ncoop++];
                s[0] = (uint8_t)c[i].MSize; s[1] = (uint8_t)c[i].NSize; s[2] = (uint8_t)c[i].KSize;
            }
    free(c);
}

/* VK_KHR_cooperative_matrix: Debian 12's headers (1.3.239) predate it, so
 * the few names used here are declared where the headers lack them (values
 * from the Vulkan registry; its component types and scopes are the NV
 * extension's) */
#ifndef VK_KHR_cooperative_matrix
#define VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME "VK_KHR_cooperative_matrix"
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR ((VkStructureType)1000506000)
#define VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR ((VkStructureType)1000506001)
typedef struct VkCooperativeMatrixPropertiesKHR {
    VkStructureType sType;
    void *pNext;
    uint32_t MSize, NSize, KSize;
    VkComponentTypeNV AType, BType, CType, ResultType;
    VkBool32 saturatingAccumulation;
    VkScopeNV scope;
} VkCooperativeMatrixPropertiesKHR;
typedef struct VkPhysicalDeviceCooperativeMatrixFeaturesKHR {
    VkStructureType sType;
    void *pNext;
    VkBool32 cooperativeMatrix, cooperativeMatrixRobustBufferAccess;
} VkPhysicalDeviceCooperativeMatrixFeaturesKHR;
typedef VkResult(VKAPI_PTR *PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR)(
    VkPhysicalDevice, uint32_t *, VkCooperativeMatrixPropertiesKHR *);
#endif

/* The same list through VK_KHR_cooperative_matrix (what AMD RDNA3 and Intel
 * Arc offer too), for the KHR build of the GEMM (matmul_coop.c) */
static void coopmat_khr_shapes(VkPhysicalDevice p, lm_vk_features *ft)
{
    ft->ncoop_khr = 0;
    if (!has_extension(p, VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME)) return;
    VkPhysicalDeviceCooperativeMatrixFeaturesKHR cf = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR};
    VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &cf};
    vkGetPhysicalDeviceFeatures2(p, &f);
    if (!cf.cooperativeMatrix) return;
    PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR get =
        (PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR)vkGetInstanceProcAddr(
            lm_vk_instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR");
    if (!get) return;
    uint32_t n = 0;
    if (get(p, &n, NULL) != VK_SUCCESS || !n) return;
    VkCooperativeMatrixPropertiesKHR *c = calloc(n, sizeof *c);
    if (!c) return;
    for (uint32_t i = 0; i < n; i++) c[i].sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR;
    if (get(p, &n, c) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && ft->ncoop_khr < 8; i++)
            if (c[i].AType == VK_COMPONENT_TYPE_FLOAT16_NV && c[i].BType == VK_COMPONENT_TYPE_FLOAT16_NV &&
                c[i].CType == VK_COMPONENT_TYPE_FLOAT32_NV && c[i].ResultType == VK_COMPONENT_TYPE_FLOAT32_NV &&
                !c[i].saturatingAccumulation && c[i].scope == VK_SCOPE_SUBGROUP_NV && c[i].MSize <= 255 &&
                c[i].NSize <= 255 && c[i].KSize <= 255) {
                uint8_t *s = ft->coop_khr_mnk[ft->ncoop_khr++];
                s[0] = (uint8_t)c[i].MSize; s[1] = (uint8_t)c[i].NSize; s[2] = (uint8_t)c[i].KSize;
            }
    /* bf16 x bf16 + f32 shapes (VK_KHR_shader_bfloat16's entries) */
    ft->ncoop_bf16 = 0;
    if (get(p, &n, c) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && ft->ncoop_bf16 < 8; i++)
            if ((uint32_t)c[i].AType == LM_VK_COMPONENT_TYPE_BFLOAT16 &&
                (uint32_t)c[i].BType == LM_VK_COMPONENT_TYPE_BFLOAT16 &&
                c[i].CType == VK_COMPONENT_TYPE_FLOAT32_NV && c[i].ResultType == VK_COMPONENT_TYPE_FLOAT32_NV &&
                !c[i].saturatingAccumulation && c[i].scope == VK_SCOPE_SUBGROUP_NV && c[i].MSize <= 255 &&
                c[i].NSize <= 255 && c[i].KSize <= 255) {
                uint8_t *s = ft->coop_bf16_mnk[ft->ncoop_bf16++];
                s[0] = (uint8_t)c[i].MSize; s[1] = (uint8_t)c[i].NSize; s[2] = (uint8_t)c[i].KSize;
            }
    free(c);
}

/* VK_KHR_shader_bfloat16: 1.4.309's headers predate it (values from the
 * Vulkan registry: the structure type and VK_COMPONENT_TYPE_BFLOAT16_KHR
 * are both 1000141000) */
#define LM_VK_BF16_EXTENSION_NAME "VK_KHR_shader_bfloat16"
#define LM_VK_STRUCTURE_TYPE_SHADER_BFLOAT16_FEATURES ((VkStructureType)1000141000)
typedef struct lm_vk_bf16_features {
    VkStructureType sType;
    void *pNext;
    VkBool32 shaderBFloat16Type, shaderBFloat16DotProduct, shaderBFloat16CooperativeMatrix;
} lm_vk_bf16_features;

/* bf16 cooperative matrices (the _bf kernels of module.mk): the extension
 * with shaderBFloat16Type and shaderBFloat16CooperativeMatrix, a bf16 shape
 * and the f16 KHR path they are built on; LUMEN_VK_BF16=0 (or
 * LUMEN_VK_COOP_BF16=0) leaves the extension off */
static bool bf16_coop(VkPhysicalDevice p, const lm_vk_features *ft)
{
    const char *e = getenv("LUMEN_VK_BF16"), *c = getenv("LUMEN_VK_COOP_BF16");
    if ((e && !strcmp(e, "0")) || (c && !strcmp(c, "0"))) return false;
    if (!ft->coopmat_khr || !ft->ncoop_bf16 || !has_extension(p, LM_VK_BF16_EXTENSION_NAME)) return false;
    lm_vk_bf16_features bf = {.sType = LM_VK_STRUCTURE_TYPE_SHADER_BFLOAT16_FEATURES};
    VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &bf};
    vkGetPhysicalDeviceFeatures2(p, &f);
    return bf.shaderBFloat16Type && bf.shaderBFloat16CooperativeMatrix;
}

/* VK_NV_cooperative_matrix2: Debian 12's headers lack it too (values from
 * the Vulkan registry, as in 1.4.309's vulkan_core.h) */
#ifndef VK_NV_cooperative_matrix2
#define VK_NV_COOPERATIVE_MATRIX_2_EXTENSION_NAME "VK_NV_cooperative_matrix2"
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_FEATURES_NV ((VkStructureType)1000593000)
#define VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_PROPERTIES_NV ((VkStructureType)1000593001)
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_PROPERTIES_NV ((VkStructureType)1000593002)
typedef struct VkCooperativeMatrixFlexibleDimensionsPropertiesNV {
    VkStructureType sType;
    void *pNext;
    uint32_t MGranularity, NGranularity, KGranularity;
    VkComponentTypeNV AType, BType, CType, ResultType;
    VkBool32 saturatingAccumulation;
    VkScopeNV scope;
    uint32_t workgroupInvocations;
} VkCooperativeMatrixFlexibleDimensionsPropertiesNV;
typedef struct VkPhysicalDeviceCooperativeMatrix2FeaturesNV {
    VkStructureType sType;
    void *pNext;
    VkBool32 cooperativeMatrixWorkgroupScope, cooperativeMatrixFlexibleDimensions,
        cooperativeMatrixReductions, cooperativeMatrixConversions, cooperativeMatrixPerElementOperations,
        cooperativeMatrixTensorAddressing, cooperativeMatrixBlockLoads;
} VkPhysicalDeviceCooperativeMatrix2FeaturesNV;
typedef struct VkPhysicalDeviceCooperativeMatrix2PropertiesNV {
    VkStructureType sType;
    void *pNext;
    uint32_t cooperativeMatrixWorkgroupScopeMaxWorkgroupSize, cooperativeMatrixFlexibleDimensionsMaxDimension,
        cooperativeMatrixWorkgroupScopeReservedSharedMemory;
} VkPhysicalDeviceCooperativeMatrix2PropertiesNV;
typedef VkResult(VKAPI_PTR *PFN_vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV)(
    VkPhysicalDevice, uint32_t *, VkCooperativeMatrixFlexibleDimensionsPropertiesNV *);
#endif

/* the cm2 features the GEMM (shaders/matmul_cm2.glsl) uses: workgroup-scope
 * matrices of the listed flexible sizes, tensor layouts, and a per-element
 * operation (the f16 rounding) */
static bool cm2_features(VkPhysicalDevice p, VkPhysicalDeviceCooperativeMatrix2FeaturesNV *cf)
{
    *cf = (VkPhysicalDeviceCooperativeMatrix2FeaturesNV){
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_FEATURES_NV};
    if (!has_extension(p, VK_NV_COOPERATIVE_MATRIX_2_EXTENSION_NAME)) return false;
    VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = cf};
    vkGetPhysicalDeviceFeatures2(p, &f);
    return cf->cooperativeMatrixWorkgroupScope && cf->cooperativeMatrixFlexibleDimensions &&
           cf->cooperativeMatrixTensorAddressing && cf->cooperativeMatrixPerElementOperations;
}

/* The workgroup-scope f16 x f16 shapes of VK_NV_cooperative_matrix2 (with
 * an f32 or f16 accumulator), for matmul_cm2.c; ft->coopmat2 is set by the
 * caller once the KHR extension it builds on is known to be there too. */
static void coopmat2_shapes(VkPhysicalDevice p, lm_vk_features *ft)
{
    ft->ncm2 = 0;
    ft->cm2_reduce = ft->cm2_bf16 = false;
    VkPhysicalDeviceCooperativeMatrix2FeaturesNV cf;
    if (!cm2_features(p, &cf)) return;
    VkPhysicalDeviceCooperativeMatrix2PropertiesNV cp = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_PROPERTIES_NV};
    VkPhysicalDeviceProperties2 pp = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &cp};
    vkGetPhysicalDeviceProperties2(p, &pp);
    ft->cm2_max_invocations = cp.cooperativeMatrixWorkgroupScopeMaxWorkgroupSize;
    ft->cm2_max_dim = cp.cooperativeMatrixFlexibleDimensionsMaxDimension;
    PFN_vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV get =
        (PFN_vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV)vkGetInstanceProcAddr(
            lm_vk_instance, "vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV");
    if (!get) return;
    uint32_t n = 0;
    if (get(p, &n, NULL) != VK_SUCCESS || !n) return;
    VkCooperativeMatrixFlexibleDimensionsPropertiesNV *c = calloc(n, sizeof *c);
    if (!c) return;
    for (uint32_t i = 0; i < n; i++) c[i].sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_PROPERTIES_NV;
    /* nn_attn_cm2 (nn_attn_fa.c) also reduces rows and converts between uses */
    ft->cm2_reduce = cf.cooperativeMatrixReductions && cf.cooperativeMatrixConversions;
    if (get(p, &n, c) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && ft->ncm2 < 16; i++) {
            /* a bf16 x bf16 + f32 workgroup shape: the _bf attention kernels */
            if ((uint32_t)c[i].AType == LM_VK_COMPONENT_TYPE_BFLOAT16 &&
                (uint32_t)c[i].BType == LM_VK_COMPONENT_TYPE_BFLOAT16 &&
                c[i].CType == VK_COMPONENT_TYPE_FLOAT32_NV && c[i].scope == VK_SCOPE_WORKGROUP_NV &&
                c[i].MGranularity && c[i].MGranularity <= 64 && c[i].NGranularity && c[i].NGranularity <= 64 &&
                c[i].KGranularity && c[i].KGranularity <= 64)
                ft->cm2_bf16 = true;
            bool acc32 = c[i].CType == VK_COMPONENT_TYPE_FLOAT32_NV && c[i].ResultType == VK_COMPONENT_TYPE_FLOAT32_NV;
            bool acc16 = c[i].CType == VK_COMPONENT_TYPE_FLOAT16_NV && c[i].ResultType == VK_COMPONENT_TYPE_FLOAT16_NV;
            if (c[i].AType == VK_COMPONENT_TYPE_FLOAT16_NV && c[i].BType == VK_COMPONENT_TYPE_FLOAT16_NV &&
                (acc32 || acc16) && !c[i].saturatingAccumulation && c[i].scope == VK_SCOPE_WORKGROUP_NV &&
                c[i].MGranularity && c[i].NGranularity && c[i].KGranularity && c[i].MGranularity <= 256 &&
                c[i].NGranularity <= 256 && c[i].KGranularity <= 256 && c[i].workgroupInvocations <= 4096) {
                ft->cm2[ft->ncm2].m = (uint16_t)c[i].MGranularity;
                ft->cm2[ft->ncm2].n = (uint16_t)c[i].NGranularity;
                ft->cm2[ft->ncm2].k = (uint16_t)c[i].KGranularity;
                ft->cm2[ft->ncm2].invocations = (uint16_t)c[i].workgroupInvocations;
                ft->cm2[ft->ncm2++].f16_acc = acc16;
            }
        }
    free(c);
}

/* Whether the driver can tell a pipeline's statistics (registers, shared
 * memory, spills on NVIDIA): LUMEN_VK_STATS=1 asks for them, to see what
 * limits a kernel without a vendor profiler.  Without it: a line saying so. */
static bool exec_stats_feature(VkPhysicalDevice p)
{
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR pe = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};
    if (has_extension(p, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME)) {
        VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &pe};
        vkGetPhysicalDeviceFeatures2(p, &f);
    }
    if (!pe.pipelineExecutableInfo) {
        VkPhysicalDeviceProperties props;
        vkGetPhysicalDeviceProperties(p, &props);
        fprintf(stderr, "lumen: LUMEN_VK_STATS: %s has no pipeline statistics "
                "(VK_KHR_pipeline_executable_properties)\n", props.deviceName);
    }
    return pe.pipelineExecutableInfo;
}

/* Fills v->feat; false (with a reason) when the device lacks what every
 * kernel needs (Vulkan 1.2, 64-bit integers, 8/16-bit storage). */
static bool probe(lm_vk_dev *v, char *why, size_t nwhy)
{
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, .pNext = &f12};
    VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f11};
    VkPhysicalDeviceSubgroupProperties sg = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceMaintenance3Properties m3 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES, .pNext = &sg};
    VkPhysicalDeviceProperties2 p = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &m3};
    vkGetPhysicalDeviceProperties2(v->phys, &p);
    v->props = p.properties;
    vkGetPhysicalDeviceMemoryProperties(v->phys, &v->memprops);
    if (v->props.apiVersion < VK_API_VERSION_1_2) { snprintf(why, nwhy, "Vulkan < 1.2"); return false; }
    vkGetPhysicalDeviceFeatures2(v->phys, &f);
    if (!f.features.shaderInt64 || !f11.storageBuffer16BitAccess || !f12.storageBuffer8BitAccess) {
        snprintf(why, nwhy, "lacks int64 or 8/16-bit storage");
        return false;
    }
    lm_vk_features *ft = &v->feat;
    ft->f16 = f12.shaderFloat16;
    ft->f64 = f.features.shaderFloat64;
    ft->int8 = f12.shaderInt8;
    ft->int16 = f.features.shaderInt16;
    ft->subgroup_size = sg.subgroupSize;
    ft->subgroup_arith = (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                         (sg.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
    ft->subgroup_shuffle = (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                           (sg.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
    ft->vk_memory_model = f12.vulkanMemoryModel;
    ft->vk_memory_model_device = f12.vulkanMemoryModelDeviceScope;
    coopmat_nv_shapes(v->phys, ft);
    /* the cooperative-matrix shaders need f16 arithmetic and the Vulkan
     * memory model (glslang declares it for GL_KHR_memory_scope_semantics) */
    ft->coopmat_nv = ft->f16 && ft->vk_memory_model && ft->ncoop > 0;
    coopmat_khr_shapes(v->phys, ft);
    ft->coopmat_khr = ft->f16 && ft->vk_memory_model && ft->ncoop_khr > 0;
    ft->coop_bf16 = bf16_coop(v->phys, ft);
    /* cm2 builds on the KHR extension and is SPIR-V 1.6 (Vulkan 1.3); it
     * is opt-in (LUMEN_VK_GEMM=cm2) until it has run on such a device, so
     * otherwise the extension is not even enabled */
    const char *gemm = getenv("LUMEN_VK_GEMM");
    /* the attention kernel on it (nn_attn_fa.c's cm2_shader) is opt-in too
     * (LUMEN_VK_ATTN_CM2=1 or a tile): 4-5x slower than the KHR kernel on
     * driver 580 (docs/BENCHMARKS.md) */
    const char *attn = getenv("LUMEN_VK_ATTN_CM2");
    bool cm2_gemm = gemm && !strcmp(gemm, "cm2"), cm2_attn = attn && *attn && strcmp(attn, "0");
    if (cm2_gemm || cm2_attn) coopmat2_shapes(v->phys, ft);
    bool cm2 = ft->coopmat_khr && ft->ncm2 > 0 && v->props.apiVersion >= VK_API_VERSION_1_3;
    ft->coopmat2 = cm2 && cm2_gemm;
    ft->cm2_attn = cm2 && cm2_attn && ft->cm2_reduce;
    const char *stats = getenv("LUMEN_VK_STATS");
    if (stats && !strcmp(stats, "1")) ft->exec_stats = exec_stats_feature(v->phys);
    ft->max_range = v->props.limits.maxStorageBufferRange;
    ft->align = v->props.limits.minStorageBufferOffsetAlignment;
    ft->max_alloc = m3.maxMemoryAllocationSize;
    for (int i = 0; i < 3; i++) ft->max_groups[i] = v->props.limits.maxComputeWorkGroupCount[i];
    ft->max_shared = v->props.limits.maxComputeSharedMemorySize;
    ft->max_storage_buffers = v->props.limits.maxPerStageDescriptorStorageBuffers;
    if (v->props.limits.maxDescriptorSetStorageBuffers < ft->max_storage_buffers)
        ft->max_storage_buffers = v->props.limits.maxDescriptorSetStorageBuffers;
    return true;
}

static const char *kind_name(VkPhysicalDeviceType t)
{
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete-gpu";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated-gpu";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual-gpu";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu-gpu";
    default: return "other-gpu";
    }
}

static int type_rank(VkPhysicalDeviceType t)
{
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
    default: return 4;
    }
}

static size_t device_local_bytes(const VkPhysicalDeviceMemoryProperties *m)
{
    size_t best = 0;
    for (uint32_t i = 0; i < m->memoryHeapCount; i++)
        if ((m->memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) && m->memoryHeaps[i].size > best)
            best = m->memoryHeaps[i].size;
    return best;
}

static lm_status register_one(VkPhysicalDevice phys, int n)
{
    lm_device *d = calloc(1, sizeof *d);
    lm_vk_dev *v = calloc(1, sizeof *v);
    if (!d || !v) { free(d); free(v); return lm_error_set(LM_ERR_NOMEM, "vulkan: out of host memory"); }
    v->phys = phys;
    v->dev = d;
    char why[96];
    if (!probe(v, why, sizeof why)) {
        fprintf(stderr, "lumen: vulkan: skipping a device: %s\n", why);
        free(d); free(v);
        return LM_OK;
    }
    const lm_vk_features *ft = &v->feat;
    char coop_list[64] = "";
    const uint8_t(*shapes)[3] = ft->coopmat_nv ? ft->coop_mnk : ft->coop_khr_mnk;
    int nshapes = ft->coopmat_nv ? ft->ncoop : ft->coopmat_khr ? ft->ncoop_khr : 0;
    for (int i = 0; i < nshapes && i < 4; i++)
        snprintf(coop_list + strlen(coop_list), sizeof coop_list - strlen(coop_list), "%s%ux%ux%u",
                 i ? "," : "", shapes[i][0], shapes[i][1], shapes[i][2]);
    d->backend = &lm_vk_backend;
    d->impl = v;
    snprintf(d->name, sizeof d->name, "%.127s", v->props.deviceName);
    snprintf(d->spec, sizeof d->spec, "vulkan:%d", n);
    snprintf(d->kind, sizeof d->kind, "%s", kind_name(v->props.deviceType));
    snprintf(d->info, sizeof d->info,
             "Vulkan %u.%u.%u; fp16 %s, fp64 %s, bf16 storage (f32 math), "
             "cooperative matrix %s%s%s%s, subgroup %u",
             VK_API_VERSION_MAJOR(v->props.apiVersion), VK_API_VERSION_MINOR(v->props.apiVersion),
             VK_API_VERSION_PATCH(v->props.apiVersion), ft->f16 ? "yes" : "no",
             ft->f64 ? "yes" : "no",
             ft->coopmat_nv && ft->coopmat_khr ? "NV+KHR f16 " : ft->coopmat_nv ? "NV f16 " : ft->coopmat_khr ? "KHR f16 " : "no",
             coop_list, ft->coopmat2 || ft->cm2_attn ? " +NV2 (workgroup scope)" : "", ft->coop_bf16 ? " +bf16" : "",
             ft->subgroup_size);
    d->mem.device_total = device_local_bytes(&v->memprops);
    lm_status st = lm_device_register(d);
    if (st != LM_OK) { free(d); free(v); }
    return st;
}

lm_status lm_vulkan_register(void)
{
    static bool done;
    if (done) return LM_OK;
    done = true;
    const char *val = getenv("LUMEN_VK_VALIDATE");
    bool validate = val && *val && strcmp(val, "0");
    if (validate && !layer_present("VK_LAYER_KHRONOS_validation")) {
        fprintf(stderr, "lumen: LUMEN_VK_VALIDATE set but the validation layer is missing\n");
        validation_messages++;      /* a validated run that cannot validate fails */
        validate = false;
    }
    VkResult r = create_instance(validate);
    if (r != VK_SUCCESS) {
        snprintf(status_line, sizeof status_line, "no Vulkan driver (vkCreateInstance: %d)", (int)r);
        lm_vk_instance = VK_NULL_HANDLE;
        return LM_OK;
    }
    uint32_t n = 0;
    vkEnumeratePhysicalDevices(lm_vk_instance, &n, NULL);
    VkPhysicalDevice *pd = calloc(n ? n : 1, sizeof *pd);
    if (!pd) return lm_error_set(LM_ERR_NOMEM, "vulkan: out of host memory");
    vkEnumeratePhysicalDevices(lm_vk_instance, &n, pd);
    if (n && lm_vk_spirv_load() != LM_OK) {
        /* no kernels: offer no Vulkan device, so the CPU stays the default
         * and LUMEN_DEVICE=vulkan says why.  Said at once where Vulkan was
         * wanted (a real GPU or LUMEN_DEVICE=vulkan), not on every CPU run
         * of a machine that has only lavapipe. */
        snprintf(status_line, sizeof status_line, "%s", lm_error_message());
        const char *want = getenv("LUMEN_DEVICE");
        bool wanted = want && !strncmp(want, "vulkan", 6);
        for (uint32_t i = 0; i < n && !wanted; i++) {
            VkPhysicalDeviceProperties p;
            vkGetPhysicalDeviceProperties(pd[i], &p);
            wanted = type_rank(p.deviceType) < type_rank(VK_PHYSICAL_DEVICE_TYPE_CPU);
        }
        if (wanted) fprintf(stderr, "lumen: Vulkan not used: %s\n", status_line);
        free(pd);
        lm_error_clear();
        return LM_OK;
    }
    int registered = 0;
    for (int rank = 0; rank <= 4; rank++)
        for (uint32_t i = 0; i < n; i++) {
            VkPhysicalDeviceProperties p;
            vkGetPhysicalDeviceProperties(pd[i], &p);
            if (type_rank(p.deviceType) != rank) continue;
            int before = lm_device_count();
            lm_status st = register_one(pd[i], registered);
            if (st != LM_OK) { free(pd); return st; }
            registered += lm_device_count() > before;
        }
    free(pd);
    snprintf(status_line, sizeof status_line, "%d Vulkan device%s", registered,
             registered == 1 ? "" : "s");
    return LM_OK;
}

static VkResult create_device(lm_vk_dev *v)
{
    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(v->phys, &nq, NULL);
    VkQueueFamilyProperties qp[32];
    if (nq > 32) nq = 32;
    vkGetPhysicalDeviceQueueFamilyProperties(v->phys, &nq, qp);
    v->qfam = UINT32_MAX;
    for (uint32_t i = 0; i < nq && v->qfam == UINT32_MAX; i++)
        if (qp[i].queueFlags & VK_QUEUE_COMPUTE_BIT) v->qfam = i;
    if (v->qfam == UINT32_MAX) return VK_ERROR_FEATURE_NOT_PRESENT;
    v->ts_bits = qp[v->qfam].timestampValidBits;
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                  .queueFamilyIndex = v->qfam, .queueCount = 1,
                                  .pQueuePriorities = &prio};
    VkPhysicalDeviceCooperativeMatrixFeaturesNV cm = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV,
        .cooperativeMatrix = VK_TRUE};
    VkPhysicalDeviceCooperativeMatrixFeaturesKHR cmk = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR,
        .pNext = v->feat.coopmat_nv ? &cm : NULL, .cooperativeMatrix = VK_TRUE};
    /* cm2: every feature the device offers (the kernel needs four of them:
     * coopmat2_shapes), chained before the KHR struct it builds on */
    VkPhysicalDeviceCooperativeMatrix2FeaturesNV cm2;
    bool use_cm2 = v->feat.coopmat2 || v->feat.cm2_attn;
    if (use_cm2) {
        cm2_features(v->phys, &cm2);
        cm2.pNext = &cmk;
    }
    bool coop = v->feat.coopmat_nv || v->feat.coopmat_khr;
    /* bf16 cooperative matrices: first in the chain */
    lm_vk_bf16_features bf = {.sType = LM_VK_STRUCTURE_TYPE_SHADER_BFLOAT16_FEATURES,
                              .shaderBFloat16Type = VK_TRUE, .shaderBFloat16CooperativeMatrix = VK_TRUE};
    VkPhysicalDeviceVulkan12Features f12 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
        .pNext = use_cm2 ? (void *)&cm2 : v->feat.coopmat_khr ? (void *)&cmk
               : v->feat.coopmat_nv ? (void *)&cm : NULL,
        .storageBuffer8BitAccess = VK_TRUE, .shaderFloat16 = v->feat.f16,
        .vulkanMemoryModel = coop,
        /* with the memory model on, the status reports' device-scope
         * atomics (nn_elem, index, ...) need this too (the validation layer
         * says so: VUID-RuntimeSpirv-vulkanMemoryModel-06265) */
        .vulkanMemoryModelDeviceScope = coop && v->feat.vk_memory_model_device,
        .shaderInt8 = v->feat.int8};
    VkPhysicalDeviceVulkan11Features f11 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, .pNext = &f12,
        .storageBuffer16BitAccess = VK_TRUE};
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR pe = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR,
        .pNext = &f11, .pipelineExecutableInfo = VK_TRUE};
    VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                   .pNext = v->feat.exec_stats ? (void *)&pe : (void *)&f11};
    f.features.shaderInt64 = VK_TRUE;
    f.features.shaderFloat64 = v->feat.f64;
    f.features.shaderInt16 = v->feat.int16;
    if (v->feat.coop_bf16) {
        bf.pNext = f12.pNext;
        f12.pNext = &bf;
    }
    const char *exts[5];
    uint32_t nexts = 0;
    if (v->feat.coop_bf16) exts[nexts++] = LM_VK_BF16_EXTENSION_NAME;
    if (v->feat.exec_stats) exts[nexts++] = VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME;
    if (v->feat.coopmat_nv) exts[nexts++] = VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME;
    if (v->feat.coopmat_khr) exts[nexts++] = VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME;
    if (use_cm2) exts[nexts++] = VK_NV_COOPERATIVE_MATRIX_2_EXTENSION_NAME;
    VkDeviceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &f,
                             .queueCreateInfoCount = 1, .pQueueCreateInfos = &qi,
                             .enabledExtensionCount = nexts, .ppEnabledExtensionNames = exts};
    VkResult r = vkCreateDevice(v->phys, &ci, NULL, &v->device);
    if (r == VK_SUCCESS) vkGetDeviceQueue(v->device, v->qfam, 0, &v->queue);
    return r;
}

/* ---- teardown at exit ----
 * Each device that came up is taken down when the process exits (exit()
 * or a return from main; lumen.so is never unloaded): its queued work finished,
 * the compile threads joined, the pipeline cache written if it changed (a
 * process that ends with work only queued, t:eval{wait = false}, had its
 * new pipelines lost), then the pipelines, shader modules and cache, the
 * command objects and the memory destroyed before the VkDevice, so the
 * validation layer checks at vkDestroyDevice that nothing was left.  The
 * handler is registered once the first VkDevice exists, after the driver
 * was loaded and made it, so it runs before the driver's own exit handlers
 * (exit runs them last registered, first run).  Work on
 * another thread still running at exit is not waited for: Lumen's
 * programs join theirs first (lumen serve's worker) or leave with _exit
 * (a second Ctrl-C); a forked child leaves the parent's devices alone. */
static pid_t up_pid;

static void device_down(lm_vk_dev *v)
{
    if (!v->up || !v->device) return;
    if (!v->lost) lm_vk_flush(v);   /* the queued work run, the cache saved if dirty */
    vkDeviceWaitIdle(v->device);
    lm_vk_pipeline_shutdown(v);
    lm_vk_exec_shutdown(v);
    lm_vk_mem_shutdown(v);
    vkDestroyDevice(v->device, NULL);
    v->device = VK_NULL_HANDLE;
    v->up = false;
    v->down = true;
    lm_error_clear();   /* a failure at exit has nobody to tell */
}

/* LUMEN_VK_TIMES=1: the start and the shutdown of each device on stderr
 * (where a short process's fixed time goes) */
static bool times_on(void)
{
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("LUMEN_VK_TIMES");
        on = e && *e && strcmp(e, "0");
    }
    return on;
}

static void devices_down(void)
{
    if (getpid() != up_pid) return;
    for (int i = 0; i < lm_device_count(); i++) {
        lm_device *d = lm_device_at(i);
        if (!d || d->backend != &lm_vk_backend) continue;
        double t0 = lm_profile_now_ms();
        device_down(lm_vk_of(d));
        if (times_on()) fprintf(stderr, "lumen: %s shut down in %.1f ms\n", d->name, lm_profile_now_ms() - t0);
    }
}

lm_status lm_vk_ensure_up(lm_vk_dev *v)
{
    if (v->lost) return lm_error_set(LM_ERR_DEVICE, "vulkan: device %s was lost", v->dev->name);
    if (v->down) return lm_error_set(LM_ERR_DEVICE, "vulkan: device %s was shut down (the process is exiting)",
                                     v->dev->name);
    if (v->up) return LM_OK;
    double t0 = lm_profile_now_ms();
    lm_status st = lm_vk_check(v, create_device(v), "vkCreateDevice");
    if (st != LM_OK) return st;
    v->up = true;
    if (!up_pid) {   /* after vkCreateDevice: before what the driver registered there */
        up_pid = getpid();
        atexit(devices_down);
    }
    double t1 = lm_profile_now_ms();
    if ((st = lm_vk_mem_init(v)) != LM_OK || (st = lm_vk_exec_init(v)) != LM_OK ||
        (st = lm_vk_pipeline_init(v)) != LM_OK) {
        v->lost = true;     /* half up: refuse further use rather than crash */
        return lm_error_prefix("vulkan: starting %s", v->dev->name);
    }
    if (times_on())
        fprintf(stderr, "lumen: %s up in %.1f ms (vkCreateDevice %.1f ms, memory, queues and pipeline "
                "cache %.1f ms)\n", v->dev->name, lm_profile_now_ms() - t0, t1 - t0, lm_profile_now_ms() - t1);
    return LM_OK;
}
