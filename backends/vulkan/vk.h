/* vk.h - internals shared by the Vulkan backend's files.
 *
 * One lm_vk_dev per physical device (lm_device.impl), created when the
 * registry starts and brought up (VkDevice, queue, pools) on first use.
 * Buffers handed to the core are lm_vk_mem ranges sub-allocated from large
 * VkDeviceMemory blocks (memory.c).  Kernels are recorded into one command
 * buffer per evaluation (exec.c), with pipelines made on first use and kept
 * in a VkPipelineCache on disk (pipeline.c).  Single-threaded: one thread
 * evaluates on a device at a time; the compile threads (pipeline.c) touch
 * only the pipelines queued to them, under the pool's lock. */
#ifndef LM_VK_H
#define LM_VK_H

#include <string.h>
#include <vulkan/vulkan.h>
#include "core/backend.h"
#include "core/lumen.h"
#include "backends/vulkan/shaders.h"
#include "backends/vulkan/vulkan.h"
#include "backends/vulkan/choice.h"
#include "backends/vulkan/shaders/vkops.h"

#define LM_VK_BINDINGS 4          /* storage buffers per kernel */
#define LM_VK_WIDE_BINDINGS 18    /* for "fused*" shaders: 16 inputs, out, program */
#define LM_VK_PUSH_BYTES 128      /* the Vulkan minimum maxPushConstantsSize */
#define LM_VK_MAX_SPEC 128        /* specialization constants per pipeline (fused_spec: 115) */
#define LM_VK_MAX_SHADERS 256     /* embedded shader modules (one per .comp file) */
#define LM_VK_BATCH 1024          /* dispatches per submit, at most */
#define LM_VK_RING 3              /* command buffers in flight, at most */

typedef struct lm_vk_range { VkDeviceSize off, size; } lm_vk_range;

typedef struct lm_vk_block {
    VkDeviceMemory mem;
    VkBuffer buf;
    VkDeviceSize size;
    void *map;                    /* persistently mapped when host-visible */
    bool dedicated;               /* one allocation, freed when empty */
    lm_vk_range *free;            /* sorted, coalesced free ranges */
    int nfree, capfree;
    VkDeviceSize used;
    struct lm_vk_block *next;
} lm_vk_block;

/* the handle a core lm_buffer holds */
typedef struct lm_vk_mem {
    lm_vk_block *block;
    VkDeviceSize off, size;
    struct lm_vk_mem *next_deferred;
} lm_vk_mem;

typedef struct lm_vk_pipeline {
    char shader[32];
    uint32_t spec[LM_VK_MAX_SPEC];
    VkPipeline pipe;
    struct lm_vk_pipeline *next;
    /* made on a compile thread (pipeline.c): until `ready` (under the
     * pool's lock) pipe is not to be used; res is its VkResult */
    bool ready, reported;
    bool seen;                         /* ready, as the evaluating thread saw it (no lock needed) */
    bool planned;                      /* started in plan mode (lm_vk_plan) */
    bool taken;                        /* out of the compile queue, being made (under the pool's lock) */
    int nspec;
    VkResult res;
    VkComputePipelineCreateInfo ci;    /* the job, while queued */
    VkSpecializationMapEntry me[LM_VK_MAX_SPEC];
    VkSpecializationInfo si;
    struct lm_vk_pipeline *qnext;      /* the compile queue */
} lm_vk_pipeline;

/* VkComponentTypeKHR's bf16 (VK_KHR_shader_bfloat16, after 1.4.309's headers) */
#define LM_VK_COMPONENT_TYPE_BFLOAT16 1000141000u

typedef struct lm_vk_features {
    bool f16, f64, int8, int16;
    bool coopmat_nv;              /* some f16 x f16 + f32 shape, subgroup scope */
    bool vk_memory_model;         /* vulkanMemoryModel (the coop shaders use it) */
    bool vk_memory_model_device;  /* vulkanMemoryModelDeviceScope */
    int ncoop;                    /* those shapes (M, N, K), the driver's order */
    uint8_t coop_mnk[8][3];
    bool coopmat_khr;             /* the same through VK_KHR_cooperative_matrix */
    int ncoop_khr;
    uint8_t coop_khr_mnk[8][3];
    /* bf16 x bf16 + f32 KHR shapes, and whether VK_KHR_shader_bfloat16 is
     * on with its types and cooperative matrices (device.c's bf16_coop) */
    int ncoop_bf16;
    uint8_t coop_bf16_mnk[8][3];
    bool coop_bf16;
    /* VK_NV_cooperative_matrix2 (matmul_cm2.c): workgroup-scope f16 x f16
     * shapes of vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV
     * (granularity M, N, K; invocations; f16 or f32 accumulator) */
    bool coopmat2;
    uint32_t cm2_max_invocations; /* cooperativeMatrixWorkgroupScopeMaxWorkgroupSize */
    uint32_t cm2_max_dim;         /* cooperativeMatrixFlexibleDimensionsMaxDimension */
    int ncm2;
    struct { uint16_t m, n, k, invocations; bool f16_acc; } cm2[16];
    /* the same extension for nn_attn_cm2 (nn_attn_fa.c: probed where
     * LUMEN_VK_ATTN_CM2 asks for it): row reductions and conversions, and a
     * bf16 workgroup shape (with coop_bf16: the _bf kernels) */
    bool cm2_reduce, cm2_attn, cm2_bf16;
    bool subgroup_arith;
    bool subgroup_shuffle;        /* subgroupShuffle/Xor in compute (matmul_gemv_shuf.comp) */
    uint32_t subgroup_size;
    /* LUMEN_VK_STATS=1 on a device with VK_KHR_pipeline_executable_properties:
     * each pipeline created prints the driver's statistics (pipeline.c) */
    bool exec_stats;
    VkDeviceSize max_range;       /* maxStorageBufferRange */
    VkDeviceSize align;           /* minStorageBufferOffsetAlignment */
    VkDeviceSize max_alloc;       /* maxMemoryAllocationSize */
    uint32_t max_groups[3];
    uint32_t max_shared;
    uint32_t max_storage_buffers; /* per stage and per set, the smaller */
} lm_vk_features;

/* bf16 kernels recorded on bf16 cooperative matrices (matmul_coop.c,
 * nn_attn_fa.c; lm_vulkan_bf16_coop_count) */
extern int64_t lm_vk_bf16_runs;

typedef struct lm_vk_dev {
    lm_device *dev;
    VkPhysicalDevice phys;
    VkPhysicalDeviceProperties props;
    VkPhysicalDeviceMemoryProperties memprops;
    lm_vk_features feat;
    bool up;                      /* VkDevice created */
    bool lost;                    /* VK_ERROR_DEVICE_LOST seen */
    bool down;                    /* taken down at exit (device.c): not brought up again */
    VkDevice device;
    VkQueue queue;
    uint32_t qfam;
    uint32_t mt_device, mt_host;  /* memory type indices */
    bool unified;                 /* device-local memory is host-visible */
    bool no_map;                  /* LUMEN_VK_NO_MAP=1: device blocks unmapped (tests) */
    bool in_transfer;             /* recording a host transfer's copies (not profiled as kernels) */
    /* memory */
    lm_vk_block *blocks;
    VkDeviceSize block_size;
    size_t reserved;              /* bytes held from the driver */
    lm_vk_block *staging;
    lm_vk_mem *dummy;             /* bound to unused bindings */
    lm_vk_mem *status;            /* host-visible: index errors found by kernels */
    bool status_armed;            /* a recorded kernel may report one */
    char status_op[32];
    int64_t status_axis, status_len;
    lm_vk_mem *deferred;          /* freed while GPU work was pending */
    /* execution */
    VkCommandPool cmdpool;
    VkCommandBuffer cb;           /* the open slot's (ring below) */
    VkFence fence;
    bool recording;
    int ndispatch;                /* in the open command buffer */
    int batch_limit;              /* dispatches before it is submitted */
    VkDescriptorPool dpool;
    /* the ring (exec.c): command buffers submitted without waiting, so
     * the GPU runs one while the host records the next */
    int ring;                     /* slots in use: 1 = submit and wait (LUMEN_VK_RING=0) */
    int slot;                     /* the slot being recorded */
    int inflight;                 /* slots submitted and not yet waited for */
    struct lm_vk_slot {
        VkCommandBuffer cb;
        VkFence fence;
        VkDescriptorPool dpool;
        lm_vk_mem *deferred;      /* freed before it was submitted: released after its fence */
        bool pending;
    } slots[LM_VK_RING];
    struct lm_vk_rec *capture;    /* the recording being made (replay.c), or NULL */
    VkDescriptorSetLayout dsl;
    VkPipelineLayout layout;
    VkDescriptorSetLayout dsl_wide;    /* VK_NULL_HANDLE where the device has too few bindings */
    VkPipelineLayout layout_wide;
    struct lm_vk_fzcache *fz;          /* fused programs on the device (fused.c) */
    lm_vk_mem written[64], read[64];   /* ranges touched since the last barrier */
    int nwritten, nread;
    /* profiling (core/profile.h): set per command buffer, off otherwise */
    bool prof;                         /* this command buffer is profiled */
    bool stamping;                     /* ... with timestamps (else host time per submit) */
    uint32_t ts_bits;                  /* the queue's timestampValidBits (0: cannot time) */
    VkQueryPool qpool;                 /* 2 timestamps per dispatch, made on first use */
    int nstamps;                       /* dispatches timed in the open command buffer */
    int64_t stamp_entry[LM_VK_BATCH];  /* the profiler's entry of each */
    /* pipelines */
    VkPipelineCache pcache;
    bool pcache_dirty;
    char pcache_path[512];
    lm_vk_pipeline *pipes[256];
    struct lm_vk_pool *pool;      /* compile threads, made on first need (pipeline.c) */
    bool pool_off;                /* LUMEN_VK_COMPILE_THREADS=0, or the threads could not start */
    bool plan;                    /* plan mode (lm_device_plan): dispatches only start their pipelines */
    int64_t planned;              /* pipelines started in plan mode, this plan */
    struct lm_vk_pend *pend;      /* dispatches waiting for their pipelines (exec.c) */
    int npend;
    VkShaderModule modules[LM_VK_MAX_SHADERS];   /* by index in lm_vk_shaders */
    const lm_vk_shader *module_src[LM_VK_MAX_SHADERS];
} lm_vk_dev;

/* one operand of a dispatch: a buffer range and whether the kernel writes it */
typedef struct lm_vk_arg {
    const lm_vk_mem *mem;
    bool write;
} lm_vk_arg;

static inline lm_vk_dev *lm_vk_of(lm_device *d) { return (lm_vk_dev *)d->impl; }
static inline const lm_vk_mem *lm_vk_mem_of(const lm_array *a) { return (const lm_vk_mem *)a->buf->handle; }
/* a CPU device (lavapipe): choices measured on GPUs (the Winograd conv, the
 * f32 two-product attention) keep their older default there, where they
 * were measured slower or only parity-tested */
static inline bool lm_vk_cpu_device(const lm_vk_dev *v) { return v->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU; }

/* device.c */
lm_status lm_vk_check(lm_vk_dev *v, VkResult r, const char *what);
lm_status lm_vk_ensure_up(lm_vk_dev *v);
extern VkInstance lm_vk_instance;

/* memory.c */
lm_status lm_vk_mem_init(lm_vk_dev *v);
void lm_vk_mem_shutdown(lm_vk_dev *v);
lm_status lm_vk_alloc(lm_device *d, size_t bytes, void **handle, void **host);
void lm_vk_free(lm_device *d, void *handle);
lm_status lm_vk_window(lm_device *d, void *handle, size_t off, size_t bytes, void **sub, void **host);
void lm_vk_window_free(lm_device *d, void *sub);
lm_status lm_vk_upload(lm_device *d, void *handle, size_t off, const void *src, size_t n);
lm_status lm_vk_download(lm_device *d, void *handle, size_t off, void *dst, size_t n);
void lm_vk_release_deferred(lm_vk_dev *v);
/* the host-visible status words kernels report index errors in */
lm_status lm_vk_status_init(lm_vk_dev *v);

/* exec.c */
lm_status lm_vk_exec_init(lm_vk_dev *v);
void lm_vk_exec_shutdown(lm_vk_dev *v);
lm_status lm_vk_begin(lm_device *d);
lm_status lm_vk_sync(lm_device *d);
/* submits what is recorded and waits (no-op when nothing is) */
lm_status lm_vk_flush(lm_vk_dev *v);
lm_status lm_vk_submit(lm_device *d);
/* records one kernel: args bind to 0..nargs-1 (unused bindings get a dummy),
 * push constants pc (<= LM_VK_PUSH_BYTES), groups gx*gy*gz */
lm_status lm_vk_dispatch(lm_vk_dev *v, const char *shader, const uint32_t *spec,
                         int nspec, const lm_vk_arg *args, int nargs, const void *pc,
                         size_t pcsize, uint32_t gx, uint32_t gy, uint32_t gz);
/* records a buffer-to-buffer copy (same device), ordered like a dispatch */
lm_status lm_vk_copy_buffer(lm_vk_dev *v, const lm_vk_mem *src, VkDeviceSize soff,
                            const lm_vk_mem *dst, VkDeviceSize doff, VkDeviceSize n);
/* records an update of n bytes (multiple of 4, <= 65536) at byte offset 0
 * of dst from host memory, ordered like a dispatch that writes dst */
lm_status lm_vk_update_buffer(lm_vk_dev *v, const lm_vk_mem *dst, const void *data, size_t n);
/* shaders named "fused..." and "nn_attn", "nn_attn512", "nn_norm_split",
 * "nn_norm_vec", "nn_attn_khr..." (five buffers) bind LM_VK_WIDE_BINDINGS buffers */
static inline bool lm_vk_wide(const char *shader)
{
    return !strncmp(shader, "fused", 5) || !strcmp(shader, "nn_attn") || !strcmp(shader, "nn_attn512") ||
           !strcmp(shader, "nn_norm_split") || !strcmp(shader, "nn_norm_vec") || !strncmp(shader, "nn_attn_khr", 11) ||
           !strncmp(shader, "nn_attn_cm2", 11);
}
/* replayed command buffers (replay.c; exec.c keeps the ring's side):
 * while v->capture is set, dispatches are recorded into the recording's
 * command buffer with descriptor sets from its pools, nothing is submitted,
 * and anything that needs the work done (a flush, a host transfer) first
 * ends the capture ("breaks" it): what was recorded is submitted like any
 * command buffer and the recording is not replayable. */
typedef struct lm_vk_rec lm_vk_rec;
lm_status lm_vk_record_begin(lm_device *d);
lm_status lm_vk_record_end(lm_device *d, void **rec);
lm_status lm_vk_replay(lm_device *d, void *rec);
void lm_vk_record_free(lm_device *d, void *rec);
lm_status lm_vk_copy(lm_device *d, int n, void *const *src, const size_t *src_off, void *const *dst,
                     const size_t *bytes);
/* the capture's descriptor pool with room for one more set */
lm_status lm_vk_capture_pool(lm_vk_dev *v, VkDescriptorPool *pool);
/* n bytes (<= 4096, whole words) of constant data the captured kernels
 * read (a fused program), in memory of the recording's own, written by the
 * recording itself */
lm_status lm_vk_capture_const(lm_vk_dev *v, const void *data, size_t n, const lm_vk_mem **out);
/* exec.c: starts recording into cb for v->capture (the ring's open command
 * buffer submitted first); stops it (*whole: nothing broke it and it may be
 * replayed); submits the ring's open command buffer and then cb, and moves
 * to the next slot */
lm_status lm_vk_capture_start(lm_vk_dev *v, lm_vk_rec *r, VkCommandBuffer cb);
lm_status lm_vk_capture_stop(lm_vk_dev *v, bool *whole);
lm_status lm_vk_submit_after(lm_vk_dev *v, VkCommandBuffer cb);
/* groups for n invocations of `local` threads, capped (kernels loop) */
uint32_t lm_vk_groups(lm_vk_dev *v, uint64_t n, uint32_t local);

/* pipeline.c */
lm_status lm_vk_pipeline_init(lm_vk_dev *v);
void lm_vk_pipeline_shutdown(lm_vk_dev *v);
void lm_vk_pipeline_save(lm_vk_dev *v);
/* the pipeline of shader + spec, started on a compile thread where it is
 * new and the device has them (*ready false: lm_vk_pipeline_wait before
 * binding it); without threads, made here as lm_vk_pipeline_get does */
lm_status lm_vk_pipeline_start(lm_vk_dev *v, const char *shader, const uint32_t *spec, int nspec,
                               lm_vk_pipeline **out, bool *ready);
lm_status lm_vk_pipeline_wait(lm_vk_dev *v, lm_vk_pipeline *p, VkPipeline *out);
/* whether compile threads may be used now (not while profiling or capturing) */
bool lm_vk_pipeline_async(lm_vk_dev *v);
/* the backend's plan entry: plan mode on where the compile threads can
 * take the pipelines (else LM_ERR_UNSUPPORTED: a plan would compile them
 * one at a time, on the calling thread), off */
lm_status lm_vk_plan(lm_device *d, bool on);
lm_status lm_vk_pipeline_get(lm_vk_dev *v, const char *shader, const uint32_t *spec,
                             int nspec, VkPipeline *out);

/* kernels, by family */
bool lm_vk_supports_elementwise(lm_vk_dev *v, const lm_array *node);
lm_status lm_vk_run_elementwise(lm_vk_dev *v, lm_array *node);
bool lm_vk_supports_create(lm_vk_dev *v, const lm_array *node);
lm_status lm_vk_run_create(lm_vk_dev *v, lm_array *node);
bool lm_vk_supports_reduce(lm_vk_dev *v, const lm_array *node);
lm_status lm_vk_run_reduce(lm_vk_dev *v, lm_array *node);
bool lm_vk_supports_matmul(lm_vk_dev *v, const lm_array *node);
lm_status lm_vk_run_matmul(lm_vk_dev *v, lm_array *node);
/* matmul's push constants (shaders/matmul.glsl, matmul_coop.glsl) */
typedef struct lm_vk_mm_pc {
    int32_t M, N, K, nb;
    int32_t off_a, off_b;
    int32_t sam, sak, sbk, sbn;
    int32_t bshape[4], bsa[4], bsb[4];
} lm_vk_mm_pc;
/* shaders/conv_splitk.comp's push constants: n outputs, each the sum in
 * part order of the f32 partial sums of M x N x G slabs, the bias at
 * off_bias with stride s_bias (-1: none); nn_conv.c's split-K and
 * matmul_gemv.c's parts add through it */
typedef struct lm_vk_splitk_pc {
    uint32_t n;
    int32_t M, N, G, off_bias, s_bias;
    int32_t parts;
} lm_vk_splitk_pc;
/* matmul.c: the SPLITK specialization constant (matmul_pc.glsl) of a
 * tensor-core tile kernel run in `parts` parts over a grid of entries x
 * parts along z: 1 unsplit, 0 (the count read off the grid: one pipeline
 * for every count) where entries is the product of the nb dims of bshape,
 * else parts.  The f32 tiles, which split only where forced, pass parts */
uint32_t lm_vk_splitk_spec(int parts, const int32_t *bshape, int nb, int64_t entries);
/* matmul.c: split-K of the GEMM tiles (matmul_f32.glsl, matmul_coop.glsl;
 * matmul_pc.glsl's SPLITK) and of the GEMV kernel.  lm_vk_mm_splitk_env:
 * LUMEN_VK_MM_SPLITK's forced parts (1: none), 0 where unset or "auto"
 * (the rule: choice.h's lm_vk_coop_choose on tensor cores, one part on the
 * f32 tiles).  lm_vk_mm_parts_fit: parts cut so that every part has steps
 * (none empty), the slabs index in 32 bits and batch x parts fits the
 * grid.  lm_vk_mm_split_begin: where the product writes, *out: node's
 * memory for one part, else the f32 slabs of `parts` batch x M x N parts
 * in *scratch (none in plan mode, where nothing is recorded: *out NULL).
 * lm_vk_splitk_run: conv_splitk.comp's pass, the slabs of scratch added
 * into node in part order with bias's values where pc places them (NULL:
 * none; nn_conv.c's split-K passes the conv's bias).  lm_vk_mm_split_sum:
 * that pass over n sums of each slab, no bias.  lm_vk_mm_split_end: that pass for the GEMM
 * tiles (counted: lm_vulkan_mm_split_count), then the slabs released. */
int lm_vk_mm_splitk_env(void);
int lm_vk_mm_parts_fit(const lm_vk_dev *v, int parts, int64_t steps, const lm_vk_mm_pc *pc, int64_t batch);
lm_status lm_vk_mm_split_begin(lm_vk_dev *v, lm_array *node, int parts, const lm_vk_mm_pc *pc, int64_t batch,
                               lm_buffer **scratch, const lm_vk_mem **out);
lm_status lm_vk_splitk_run(lm_vk_dev *v, lm_array *node, lm_buffer *scratch, const lm_vk_splitk_pc *pc,
                           const lm_array *bias);
lm_status lm_vk_mm_split_sum(lm_vk_dev *v, lm_array *node, lm_buffer *scratch, int parts, int64_t n);
lm_status lm_vk_mm_split_end(lm_vk_dev *v, lm_array *node, lm_buffer *scratch, int parts, const lm_vk_mm_pc *pc,
                             int64_t batch, lm_status st);
/* matmul_coop.c: the tensor-core kernel, for f16 inputs on devices with
 * cooperative matrices (and bf16 through scaled f16 copies); whether it
 * takes this node, and running it */
/* a tile of the f32-arithmetic matmul (matmul.c), shared with conv_gemm */
typedef struct {
    const char *name, *shader, *conv;   /* conv: the conv_gemm build, or NULL */
    const char *small;                  /* the tile to use where `shared` does not fit */
    int bm, bn;
    uint32_t shared;                    /* bytes of shared memory */
    int bk;                             /* depth (split-K's steps) */
} lm_vk_f32_tile;
/* the tile for an M x N (x batch) product: LUMEN_VK_MM_F32 / _CONV_F32, or by
 * the size of one image's part (share: lm_array_share, choice.h) */
const lm_vk_f32_tile *lm_vk_f32_pick(const lm_vk_dev *v, bool conv, int64_t m, int64_t n, int64_t batch,
                                     int share);
bool lm_vk_coop_fits(lm_vk_dev *v, const lm_array *node, const lm_vk_mm_pc *pc, int64_t batch, int share);
lm_status lm_vk_run_matmul_coop(lm_vk_dev *v, lm_array *node, const lm_vk_mm_pc *pc, int64_t batch, int share);
/* matmul_gemv.c: products of few rows (M <= 8, choice.h), tried first
 * (LUMEN_VK_GEMV=0|1) */
bool lm_vk_gemv_fits(lm_vk_dev *v, const lm_vk_mm_pc *pc, int64_t batch, int share);
lm_status lm_vk_run_matmul_gemv(lm_vk_dev *v, lm_array *node, const lm_vk_mm_pc *pc, int64_t batch);
/* matmul_cm2.c: the GEMM on VK_NV_cooperative_matrix2 for f16 inputs, tried
 * before matmul_coop (LUMEN_VK_GEMM=cm2|khr|nv|plain) */
bool lm_vk_cm2_fits(lm_vk_dev *v, const lm_array *node, const lm_vk_mm_pc *pc, int64_t batch, int share);
lm_status lm_vk_run_matmul_cm2(lm_vk_dev *v, lm_array *node, const lm_vk_mm_pc *pc, int64_t batch, int share);
/* matmul.c: C = A B over buffers (a kernel's scratch: nn_attn_fa.c's GEMM
 * attention, nn_conv.c's Winograd products), through the kernels a matmul node of these dtypes, sizes and
 * strides takes (cm2, KHR/NV tensor cores, the f32-arithmetic tiles); C is
 * contiguous [batch][M][N] from the start of c, A and B are read at pc's
 * offsets and strides.  Size-dependent choices as `share` says (choice.h:
 * 1 where the batch is already one image's). */
typedef struct lm_vk_gemm {
    const lm_vk_mem *a, *b, *c;
    lm_dtype ta, tb, tc;
    lm_vk_mm_pc pc;        /* M, N, K, offsets, strides, batch dims */
    int64_t batch;         /* the product of pc.bshape[0 .. nb-1] */
    int share;
} lm_vk_gemm;
/* false where one dispatch cannot cover it; *tensor_cores (when given):
 * whether it would run on a cooperative-matrix kernel */
bool lm_vk_gemm_fits(lm_vk_dev *v, const lm_vk_gemm *g, bool *tensor_cores);
lm_status lm_vk_gemm_run(lm_vk_dev *v, const lm_vk_gemm *g);
bool lm_vk_supports_other(lm_vk_dev *v, const lm_array *node);
lm_status lm_vk_run_other(lm_vk_dev *v, lm_array *node);
/* nn.c: the neural-network ops (core/ops_nn.h's node contract), routed to
 * the family files nn_norm.c (softmax, norms, attention, rope, tril/triu,
 * one_hot), nn_conv.c (convolution, pooling, resampling) and nn_index.c
 * (sort/argsort/topk, scatter) */
bool lm_vk_supports_nn(lm_vk_dev *v, const lm_array *node);
lm_status lm_vk_run_nn(lm_vk_dev *v, lm_array *node);
bool lm_vk_supports_nn_norm(lm_vk_dev *v, const lm_array *node);
lm_status lm_vk_run_nn_norm(lm_vk_dev *v, lm_array *node);
/* nn_attn_fa.c: the tiled attention kernels for no mask or causal, D = Dv
 * in {64, 128, 256, 512} (on tensor cores for f16 at 64 and 128 where the
 * device has them); the shader to use, or NULL where none applies */
const char *lm_vk_attn_fast_shader(lm_vk_dev *v, const lm_array *node);
lm_status lm_vk_run_attn_fast(lm_vk_dev *v, lm_array *node, const char *shader);
bool lm_vk_supports_nn_conv(lm_vk_dev *v, const lm_array *node);
lm_status lm_vk_run_nn_conv(lm_vk_dev *v, lm_array *node);
bool lm_vk_supports_nn_index(lm_vk_dev *v, const lm_array *node);
lm_status lm_vk_run_nn_index(lm_vk_dev *v, lm_array *node);
bool lm_vk_supports_fused(lm_vk_dev *v, const lm_array *node);
lm_status lm_vk_run_fused(lm_device *d, lm_fused *group, lm_array *out);
/* elementwise.c: the shader's codes for an op (-1: none) and the arithmetic
 * kind for value dtypes vals[0..n) and output dtype out */
int lm_vk_unary_code(lm_op op);
int lm_vk_binary_code(lm_op op);
int lm_vk_kind_for(const lm_dtype *vals, int n, lm_dtype out);
/* copies a (any strides) into dst, an array of dtype dt at element offset
 * doff with strides dst_strides[0..a->ndim) (bit-exact when the dtypes agree) */
lm_status lm_vk_move(lm_vk_dev *v, const lm_array *a, const lm_vk_mem *dst, lm_dtype dt,
                     int64_t doff, const int64_t *dst_strides);
/* a's elements copied into a new core buffer in row-major order (*out, the
 * caller's reference: counted, limited and cached like any other; release
 * it once the kernel that reads it is recorded, since exec.c's barriers
 * order a later user of the buffer after that kernel) */
lm_status lm_vk_contiguous_copy(lm_vk_dev *v, const lm_array *a, lm_buffer **out);
/* row-major strides of shape; the same-width raw dtype that moves t's bits */
void lm_vk_contiguous_strides(int ndim, const int64_t *shape, int64_t *out);
lm_dtype lm_vk_raw_dtype(lm_dtype t);
/* fills n elements of dst (dtype dt) with value, converted as the CPU does */
lm_status lm_vk_fill(lm_vk_dev *v, const lm_vk_mem *dst, lm_dtype dt, int64_t n, double value);

/* shape helpers (shape.c): merges adjacent dims that are contiguous in every
 * operand; returns the new ndim (>= 1) */
int lm_vk_collapse(int ndim, int64_t *shape, int nops, int64_t (*strides)[LM_MAX_DIMS]);
bool lm_vk_fits_i32(const lm_array *a);
bool lm_vk_dtype_ok(lm_vk_dev *v, lm_dtype t);

#endif
