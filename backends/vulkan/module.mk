# backends/vulkan/module.mk - the Vulkan backend, built when VULKAN != 0 and
# both the Vulkan headers (pkg-config vulkan) and glslc are present: that is
# decided by mk/config.sh after the dependency step (VK_ENABLED in
# $(BUILD)/config.mk), not here.
#
# Shaders become SPIR-V at build time, so a machine without a shader
# compiler runs the result.  All modules go into one file,
# $(BUILD)/lumen-spirv.bin (tools/spvpack.c), that the library finds at run
# time (spirv.c: beside the program or library, its parent, ../share/lumen,
# the install prefix): embedded, they made every executable 36 MB.
# A module comes from shaders/NAME.comp, or is a variant in the table below:
# one .glsl source compiled with a few -D defines.  The tiles stay
# compile-time constants rather than specialization constants: with them as
# specialization constants the NVIDIA compiler kept matmul_f32's
# accumulators in local memory (shaders/matmul_f32.glsl), and the table
# gives byte-identical SPIR-V to the one-line .comp files it replaced.

ifeq ($(VK_ENABLED),yes)
VK_DIR     := backends/vulkan
VK_SPV_DIR := $(BUILD)/gen/spv
VK_PACK    := $(BUILD)/lumen-spirv.bin
VK_ID_H    := $(BUILD)/gen/vk_spirv_id.h
VK_PACKER  := $(BUILD)/gen/spvpack
GLSLC      ?= glslc
# SPIR-V 1.5 (Vulkan 1.2): subgroup operations, 8/16-bit storage.
GLSLC_FLAGS := --target-env=vulkan1.2 -O -I$(VK_DIR)/shaders

# Tiles built for measurements only (VK_BENCH_TILES=1): the attention tiles
# that nn_attn_fa.c takes only where LUMEN_VK_ATTN_KHR=<tile> or
# LUMEN_VK_ATTN_CM2=<tile> names one and lumen-spirv.bin holds it (its
# in_file), for bench/gpu/attn_khr.py and attn_cm2.py with tiles.  No
# test and no default path takes them, so the default build leaves them out
# (30 modules fewer to compile); `make VK_BENCH_TILES=1` builds them in.
VK_BENCH_TILES ?= 0

# VK_VARIANTS += NAME:SOURCE:DEFINES - module NAME is shaders/SOURCE.glsl
# compiled with -D for each comma-separated DEFINE (MACRO or MACRO=VALUE).
# The host asks for a pipeline by (NAME, specialization constants).
# matmul.glsl: small products; BM x BN tile, TM x TN per invocation
VK_VARIANTS += matmul:matmul:
VK_VARIANTS += matmul_big:matmul:BM=128,BN=128,TM=8,TN=8

# matmul_f32.glsl: f32-arithmetic GEMM; MM_CONV = conv through im2col
# (conv_gemm.glsl), tiles BM/BN/BK/TM/TN/NT, WT, PAD, RDB (see its header;
# the host names them in matmul.c and nn_conv.c)
VK_VARIANTS += conv_gemm:matmul_f32:MM_CONV
VK_VARIANTS += conv_gemm_128x256:matmul_f32:MM_CONV,BN=256,BK=8,TN=16,WT=1
VK_VARIANTS += conv_gemm_256x128:matmul_f32:MM_CONV,BM=256,BK=8,TM=16,WT=1
VK_VARIANTS += conv_gemm_k8w:matmul_f32:MM_CONV,BK=8,WT=1
VK_VARIANTS += conv_gemm_np:matmul_f32:MM_CONV,PAD=0
VK_VARIANTS += conv_gemm_t128:matmul_f32:MM_CONV,NT=128,TM=16,BK=8,WT=1
VK_VARIANTS += conv_gemm_w:matmul_f32:MM_CONV,WT=1
VK_VARIANTS += conv_gemm_w_np:matmul_f32:MM_CONV,WT=1,PAD=0
VK_VARIANTS += matmul_f32:matmul_f32:
VK_VARIANTS += matmul_f32_128x256:matmul_f32:BN=256,BK=8,TN=16,WT=1
VK_VARIANTS += matmul_f32_128x256k16:matmul_f32:BN=256,TN=16,WT=1,PAD=0
VK_VARIANTS += matmul_f32_128x256r:matmul_f32:BN=256,BK=8,TN=16,WT=1,RDB=1
VK_VARIANTS += matmul_f32_256x128:matmul_f32:BM=256,BK=8,TM=16,WT=1
VK_VARIANTS += matmul_f32_256x128k16:matmul_f32:BM=256,TM=16,WT=1,PAD=0
VK_VARIANTS += matmul_f32_64x128:matmul_f32:NT=128,BM=64,WT=1
VK_VARIANTS += matmul_f32_64x128k8:matmul_f32:NT=128,BM=64,BK=8,WT=1
VK_VARIANTS += matmul_f32_k8:matmul_f32:BK=8
VK_VARIANTS += matmul_f32_k8w:matmul_f32:BK=8,WT=1
VK_VARIANTS += matmul_f32_np:matmul_f32:PAD=0
VK_VARIANTS += matmul_f32_t128:matmul_f32:NT=128,TM=16,BK=8,WT=1
VK_VARIANTS += matmul_f32_t128k16:matmul_f32:NT=128,TM=16,WT=1
VK_VARIANTS += matmul_f32_t128n:matmul_f32:NT=128,TN=16,BK=8,WT=1
VK_VARIANTS += matmul_f32_t64:matmul_f32:NT=64,BM=64,TM=16,BK=8,WT=1
VK_VARIANTS += matmul_f32_w:matmul_f32:WT=1
VK_VARIANTS += matmul_f32_w_np:matmul_f32:WT=1,PAD=0
VK_VARIANTS += matmul_f32_wr:matmul_f32:WT=1,RDB=1

# matmul_coop.glsl: tensor-core GEMM; MM_CONV+MM_COOP = conv, MM_SCALED =
# bf16 with scales, tiles BM/BN/BK, warp tile WM/WN, fragment FM/FN/FK, STAGES
VK_VARIANTS += conv_coop:matmul_coop:MM_CONV,MM_COOP
VK_VARIANTS += conv_coop_m32:matmul_coop:MM_CONV,MM_COOP,BM=32,BN=128,BK=32,WM=32,WN=32
VK_VARIANTS += conv_coop_m32n256:matmul_coop:MM_CONV,MM_COOP,BM=32,BN=256,BK=32,WM=32,WN=64
VK_VARIANTS += conv_coop_m64:matmul_coop:MM_CONV,MM_COOP,BM=64,BN=128,BK=32,WM=32,WN=64
VK_VARIANTS += conv_coop_m64w8:matmul_coop:MM_CONV,MM_COOP,BM=64,BN=128,BK=32,WM=32,WN=32
VK_VARIANTS += conv_coop_n64:matmul_coop:MM_CONV,MM_COOP,BM=128,BN=64,BK=32,WM=32,WN=32
VK_VARIANTS += matmul_coop:matmul_coop:
VK_VARIANTS += matmul_coop_128x128w32:matmul_coop:BM=128,BN=128,BK=32,WM=32,WN=64
VK_VARIANTS += matmul_coop_128x256:matmul_coop:BM=128,BN=256,BK=16,WM=64,WN=64
VK_VARIANTS += matmul_coop_128x256n8:matmul_coop:FM=16,FN=8,FK=16,BM=128,BN=256,BK=16,WM=64,WN=64
VK_VARIANTS += matmul_coop_128x256s1:matmul_coop:BM=128,BN=256,BK=32,WM=64,WN=64,STAGES=1
VK_VARIANTS += matmul_coop_256x128:matmul_coop:BM=256,BN=128,BK=16,WM=64,WN=64
VK_VARIANTS += matmul_coop_256x128s1:matmul_coop:BM=256,BN=128,BK=32,WM=64,WN=64,STAGES=1
VK_VARIANTS += matmul_coop_bf16:matmul_coop:MM_SCALED,BM=128,BN=256,BK=32,WM=64,WN=64,STAGES=1
VK_VARIANTS += matmul_coop_bf16_k64s1:matmul_coop:MM_SCALED,BM=128,BN=128,BK=64,WM=64,WN=32,STAGES=1
VK_VARIANTS += matmul_coop_k64s1:matmul_coop:BM=128,BN=128,BK=64,WM=64,WN=32,STAGES=1
VK_VARIANTS += matmul_coop_n8:matmul_coop:FM=16,FN=8,FK=16
VK_VARIANTS += matmul_coop_w4:matmul_coop:BM=128,BN=128,BK=32,WM=64,WN=64
VK_VARIANTS += matmul_coop_w4k64s1:matmul_coop:BM=128,BN=128,BK=64,WM=64,WN=64,STAGES=1

# The same GEMM on VK_KHR_cooperative_matrix (MM_KHR), compiled by glslang
# 15 (mk/glslang.mk) where it could be built: the KHR variants are left
# out otherwise, and matmul_coop.c keeps the NV kernel.
ifneq ($(GLSLANG15),)
VK_KHR_VARIANTS += matmul_coop_khr_128x256s1:matmul_coop:MM_KHR,BM=128,BN=256,BK=32,WM=64,WN=64,STAGES=1
VK_KHR_VARIANTS += matmul_coop_khr_k64s1:matmul_coop:MM_KHR,BM=128,BN=128,BK=64,WM=64,WN=32,STAGES=1
VK_KHR_VARIANTS += matmul_coop_khr_n8:matmul_coop:MM_KHR,FM=16,FN=8,FK=16
VK_KHR_VARIANTS += matmul_coop_khr_128x128:matmul_coop:MM_KHR
VK_KHR_VARIANTS += matmul_coop_khr_w4:matmul_coop:MM_KHR,BM=128,BN=128,BK=32,WM=64,WN=64
VK_KHR_VARIANTS += matmul_coop_khr_128x128w32:matmul_coop:MM_KHR,BM=128,BN=128,BK=32,WM=32,WN=64
VK_KHR_VARIANTS += matmul_coop_khr_128x256:matmul_coop:MM_KHR,BM=128,BN=256,BK=16,WM=64,WN=64
VK_KHR_VARIANTS += matmul_coop_khr_256x128:matmul_coop:MM_KHR,BM=256,BN=128,BK=16,WM=64,WN=64
VK_KHR_VARIANTS += matmul_coop_khr_256x128s1:matmul_coop:MM_KHR,BM=256,BN=128,BK=32,WM=64,WN=64,STAGES=1
VK_KHR_VARIANTS += matmul_coop_khr_w4k64s1:matmul_coop:MM_KHR,BM=128,BN=128,BK=64,WM=64,WN=64,STAGES=1
VK_KHR_VARIANTS += matmul_coop_khr_128x256n8:matmul_coop:MM_KHR,FM=16,FN=8,FK=16,BM=128,BN=256,BK=16,WM=64,WN=64
VK_KHR_VARIANTS += matmul_coop_khr_bf16:matmul_coop:MM_KHR,MM_SCALED,BM=128,BN=256,BK=32,WM=64,WN=64,STAGES=1
VK_KHR_VARIANTS += matmul_coop_khr_bf16_k64s1:matmul_coop:MM_KHR,MM_SCALED,BM=128,BN=128,BK=64,WM=64,WN=32,STAGES=1
# nn_attn_khr.glsl: tensor-core attention on KHR cooperative matrices for
# head dims up to HD (nn_attn_fa.c's khr_shader); _m: with a mask; _n8: 8
# subgroups (128 queries a workgroup; the default at HD 64), else 4.
VK_KHR_VARIANTS += nn_attn_khr32:nn_attn_khr:HD=32
VK_KHR_VARIANTS += nn_attn_khr32_m:nn_attn_khr:HD=32,MASK
VK_KHR_VARIANTS += nn_attn_khr48:nn_attn_khr:HD=48
VK_KHR_VARIANTS += nn_attn_khr48_m:nn_attn_khr:HD=48,MASK
VK_KHR_VARIANTS += nn_attn_khr64_n8:nn_attn_khr:HD=64,NSG=8
VK_KHR_VARIANTS += nn_attn_khr64_m:nn_attn_khr:HD=64,MASK
VK_KHR_VARIANTS += nn_attn_khr80:nn_attn_khr:HD=80
VK_KHR_VARIANTS += nn_attn_khr80_m:nn_attn_khr:HD=80,MASK
VK_KHR_VARIANTS += nn_attn_khr96:nn_attn_khr:HD=96
VK_KHR_VARIANTS += nn_attn_khr96_m:nn_attn_khr:HD=96,MASK
VK_KHR_VARIANTS += nn_attn_khr128:nn_attn_khr:HD=128
VK_KHR_VARIANTS += nn_attn_khr128_m:nn_attn_khr:HD=128,MASK
VK_KHR_VARIANTS += nn_attn_khr160:nn_attn_khr:HD=160
VK_KHR_VARIANTS += nn_attn_khr160_m:nn_attn_khr:HD=160,MASK
VK_KHR_VARIANTS += nn_attn_khr256:nn_attn_khr:HD=256,BK=32
VK_KHR_VARIANTS += nn_attn_khr256_m:nn_attn_khr:HD=256,BK=32,MASK
# Tiles for measurements (LUMEN_VK_ATTN_KHR=<suffix>, VK_BENCH_TILES=1):
# n4/n8 subgroups, ps = P through shared memory, tab = the component rows
# and columns from tables (registers) instead of constants, k32 = 32-key
# steps, qs = Q through shared memory, ea = every key block tested
ifeq ($(VK_BENCH_TILES),1)
VK_KHR_VARIANTS += nn_attn_khr64_n4:nn_attn_khr:HD=64
VK_KHR_VARIANTS += nn_attn_khr64_ps:nn_attn_khr:HD=64,PMODE=2
VK_KHR_VARIANTS += nn_attn_khr64_tab:nn_attn_khr:HD=64,NOLANEMAP
VK_KHR_VARIANTS += nn_attn_khr64_n8tab:nn_attn_khr:HD=64,NSG=8,NOLANEMAP
VK_KHR_VARIANTS += nn_attn_khr128_n8:nn_attn_khr:HD=128,NSG=8
VK_KHR_VARIANTS += nn_attn_khr128_ps:nn_attn_khr:HD=128,PMODE=2
VK_KHR_VARIANTS += nn_attn_khr128_tab:nn_attn_khr:HD=128,NOLANEMAP
VK_KHR_VARIANTS += nn_attn_khr128_n8tab:nn_attn_khr:HD=128,NSG=8,NOLANEMAP
VK_KHR_VARIANTS += nn_attn_khr128_k32:nn_attn_khr:HD=128,BK=32
VK_KHR_VARIANTS += nn_attn_khr128_n8k32:nn_attn_khr:HD=128,NSG=8,BK=32
VK_KHR_VARIANTS += nn_attn_khr128_qs:nn_attn_khr:HD=128,QSH
VK_KHR_VARIANTS += nn_attn_khr128_qsk32:nn_attn_khr:HD=128,BK=32,QSH
VK_KHR_VARIANTS += nn_attn_khr64_n8qs:nn_attn_khr:HD=64,NSG=8,QSH
VK_KHR_VARIANTS += nn_attn_khr128_ea:nn_attn_khr:HD=128,EDGEALL
VK_KHR_VARIANTS += nn_attn_khr64_n8ea:nn_attn_khr:HD=64,NSG=8,EDGEALL
endif
# conv_coop's tiles on KHR (nn_conv.c's conv_tiles)
VK_KHR_VARIANTS += conv_coop_khr:matmul_coop:MM_KHR,MM_CONV,MM_COOP
VK_KHR_VARIANTS += conv_coop_khr_m32:matmul_coop:MM_KHR,MM_CONV,MM_COOP,BM=32,BN=128,BK=32,WM=32,WN=32
VK_KHR_VARIANTS += conv_coop_khr_m32n256:matmul_coop:MM_KHR,MM_CONV,MM_COOP,BM=32,BN=256,BK=32,WM=32,WN=64
VK_KHR_VARIANTS += conv_coop_khr_m64:matmul_coop:MM_KHR,MM_CONV,MM_COOP,BM=64,BN=128,BK=32,WM=32,WN=64
VK_KHR_VARIANTS += conv_coop_khr_m64w8:matmul_coop:MM_KHR,MM_CONV,MM_COOP,BM=64,BN=128,BK=32,WM=32,WN=32
VK_KHR_VARIANTS += conv_coop_khr_n64:matmul_coop:MM_KHR,MM_CONV,MM_COOP,BM=128,BN=64,BK=32,WM=32,WN=32
VK_KHR_VARIANTS += conv_coop_khr_k64s1:matmul_coop:MM_KHR,MM_CONV,MM_COOP,BM=128,BN=128,BK=64,WM=64,WN=32,STAGES=1
VK_KHR_VARIANTS += conv_coop_khr_128x256s1:matmul_coop:MM_KHR,MM_CONV,MM_COOP,BM=128,BN=256,BK=32,WM=64,WN=64,STAGES=1
endif

# bf16 on the tensor cores (VK_KHR_shader_bfloat16): the f16 KHR kernels
# compiled as they are (glslang 15 has no GL_EXT_bfloat16) with BF16
# defined, then rewritten by spvpack --bf16 (tools/spvpack.c: the 16-bit
# float becomes bfloat16; a module that computes on it fails the build).
# nn_attn_fa.c and matmul_coop.c take them where the device lists bf16
# cooperative-matrix shapes (device.c).
ifneq ($(GLSLANG15),)
VK_BF16_VARIANTS += nn_attn_khr64_n8_bf:nn_attn_khr:BF16,HD=64,NSG=8
VK_BF16_VARIANTS += nn_attn_khr64_m_bf:nn_attn_khr:BF16,HD=64,MASK
VK_BF16_VARIANTS += nn_attn_khr128_bf:nn_attn_khr:BF16,HD=128
VK_BF16_VARIANTS += nn_attn_khr128_m_bf:nn_attn_khr:BF16,HD=128,MASK
ifeq ($(VK_BENCH_TILES),1)   # LUMEN_VK_ATTN_KHR=n8's bf16 tile
VK_BF16_VARIANTS += nn_attn_khr128_n8_bf:nn_attn_khr:BF16,HD=128,NSG=8
endif
VK_BF16_VARIANTS += nn_attn_khr256_bf:nn_attn_khr:BF16,HD=256,BK=32
VK_BF16_VARIANTS += nn_attn_khr256_m_bf:nn_attn_khr:BF16,HD=256,BK=32,MASK
VK_BF16_VARIANTS += matmul_coop_khr_bf_128x256s1:matmul_coop:BF16,MM_KHR,BM=128,BN=256,BK=32,WM=64,WN=64,STAGES=1
VK_BF16_VARIANTS += matmul_coop_khr_bf_k64s1:matmul_coop:BF16,MM_KHR,BM=128,BN=128,BK=64,WM=64,WN=32,STAGES=1
VK_BF16_VARIANTS += matmul_coop_khr_bf_n8:matmul_coop:BF16,MM_KHR,FM=16,FN=8,FK=16
# conv_coop's tiles that nn_conv.c's conv_tile picks, with bf16 fragments
VK_BF16_VARIANTS += conv_coop_khr_bf:matmul_coop:BF16,MM_KHR,MM_CONV,MM_COOP
VK_BF16_VARIANTS += conv_coop_khr_bf_m64w8:matmul_coop:BF16,MM_KHR,MM_CONV,MM_COOP,BM=64,BN=128,BK=32,WM=32,WN=32
VK_BF16_VARIANTS += conv_coop_khr_bf_n64:matmul_coop:BF16,MM_KHR,MM_CONV,MM_COOP,BM=128,BN=64,BK=32,WM=32,WN=32
VK_BF16_VARIANTS += conv_coop_khr_bf_k64s1:matmul_coop:BF16,MM_KHR,MM_CONV,MM_COOP,BM=128,BN=128,BK=64,WM=64,WN=32,STAGES=1
endif

# conv_halo.glsl: direct conv with a halo tile; HALO_SIMT (no tensor cores),
# XQUAD, WGLOBAL (weights from global memory), TH/WARPS/CK/MFMAX tiles
VK_VARIANTS += conv_halo:conv_halo:
VK_VARIANTS += conv_halo_g:conv_halo:WGLOBAL,CK=32
VK_VARIANTS += conv_halo_gq:conv_halo:WGLOBAL,XQUAD,CK=32
VK_VARIANTS += conv_halo_h16:conv_halo:TH=16,WARPS=8
VK_VARIANTS += conv_halo_h16q:conv_halo:XQUAD,TH=16,WARPS=8
VK_VARIANTS += conv_halo_h16w4q:conv_halo:XQUAD,TH=16,WARPS=4
VK_VARIANTS += conv_halo_h4:conv_halo:TH=4,WARPS=4
VK_VARIANTS += conv_halo_h4g:conv_halo:WGLOBAL,TH=4,WARPS=4,CK=32
VK_VARIANTS += conv_halo_h4gq:conv_halo:WGLOBAL,XQUAD,TH=4,WARPS=4,CK=32
VK_VARIANTS += conv_halo_h4k32:conv_halo:TH=4,WARPS=4,CK=32,MFMAX=2
VK_VARIANTS += conv_halo_k32:conv_halo:CK=32,MFMAX=2
VK_VARIANTS += conv_halo_q:conv_halo:XQUAD
VK_VARIANTS += conv_halo_simt:conv_halo:HALO_SIMT
VK_VARIANTS += conv_halo_simt_g:conv_halo:HALO_SIMT,WGLOBAL,CK=32
VK_VARIANTS += conv_halo_simt_gq:conv_halo:HALO_SIMT,WGLOBAL,XQUAD,CK=32
VK_VARIANTS += conv_halo_simt_k32:conv_halo:HALO_SIMT,CK=32,MFMAX=2
VK_VARIANTS += conv_halo_simt_q:conv_halo:HALO_SIMT,XQUAD
VK_VARIANTS += conv_halo_w8gq:conv_halo:WGLOBAL,XQUAD,TH=8,WARPS=8,CK=32

# nn_attn.glsl: attention; BQ queries a workgroup, D and Dv up to DMAX
# (nn_attn512: 8 queries, so the q rows still fit 16 KiB of shared memory)
VK_VARIANTS += nn_attn:nn_attn:BQ=16,DMAX=256
VK_VARIANTS += nn_attn512:nn_attn:BQ=8,DMAX=512

# nn_attn_coop.glsl: tensor-core attention for head dim HD; REGS = softmax
# in registers with NSG subgroups
VK_VARIANTS += nn_attn_coop128:nn_attn_coop:HD=128
VK_VARIANTS += nn_attn_coop128_r4:nn_attn_coop:HD=128,REGS,NSG=4
VK_VARIANTS += nn_attn_coop64:nn_attn_coop:HD=64
VK_VARIANTS += nn_attn_coop64_r4:nn_attn_coop:HD=64,REGS,NSG=4

# nn_attn_fa.glsl: flash attention for head dim HD (fa512s: two workgroups
# per query block, HV = 256 output columns each)
VK_VARIANTS += nn_attn_fa128:nn_attn_fa:HD=128
VK_VARIANTS += nn_attn_fa256:nn_attn_fa:HD=256
VK_VARIANTS += nn_attn_fa512:nn_attn_fa:HD=512
VK_VARIANTS += nn_attn_fa512s:nn_attn_fa:HD=512,HV=256
VK_VARIANTS += nn_attn_fa64:nn_attn_fa:HD=64

# f32 and f64 (LM_F64) builds of the same kernels
VK_VARIANTS += create:create:
VK_VARIANTS += create_f64:create:LM_F64=1
VK_VARIANTS += nn_elem:nn_elem:
VK_VARIANTS += nn_elem_f64:nn_elem:LM_F64=1
VK_VARIANTS += reduce:reduce:
VK_VARIANTS += reduce_f64:reduce:LM_F64=1

# quant*.glsl: ggml's block types decoded in the shader (quant.c):
# dequantize, qlinear's GEMV (M <= 8), its GEMM in 64x64 and 128x128 tiles
# and on NV cooperative matrices
VK_VARIANTS += quant_deq:quant_deq:
VK_VARIANTS += quant_gemv:quant_gemv:
VK_VARIANTS += quant_gemm:quant_gemm:
VK_VARIANTS += quant_gemm_big:quant_gemm:BM=128,BN=128,TM=8,TN=8,BK=16
VK_VARIANTS += quant_gemm_coop:quant_gemm_coop:


# Hand-written modules: the rest.  (eltwise*.comp and fused*.comp stay files
# for now: their owner is changing them.)
VK_COMP    := $(wildcard $(VK_DIR)/shaders/*.comp)
VK_VAR_NAMES := $(foreach v,$(VK_VARIANTS) $(VK_KHR_VARIANTS) $(VK_BF16_VARIANTS),$(firstword $(subst :, ,$(v))))
VK_SPV     := $(VK_COMP:$(VK_DIR)/shaders/%.comp=$(VK_SPV_DIR)/%.spv) $(VK_VAR_NAMES:%=$(VK_SPV_DIR)/%.spv)

CORE_SRC  += $(wildcard $(VK_DIR)/*.c)
BACKENDS  += vulkan:optional
CFLAGS    += -DLM_HAVE_VULKAN $(VK_CFLAGS)
LIB_EXTRA += $(VK_LIBS)
ALL_TARGETS += $(VK_PACK)

# fused_spec is left to the driver to optimise: spirv-opt would inline its
# 32 unspecialised steps into a 1.5 MB module (35 s to build); the driver
# folds them after specialization instead.
$(VK_SPV_DIR)/fused_spec.spv: GLSLC_FLAGS := --target-env=vulkan1.2 -I$(VK_DIR)/shaders

# glslc writes make dependencies for #included .glsl files (-MD).
$(VK_SPV_DIR)/%.spv: $(VK_DIR)/shaders/%.comp
	@mkdir -p $(dir $@)
	$(GLSLC) $(GLSLC_FLAGS) -MD -MF $@.d $< -o $@

# A variant's defines are kept in NAME.defs, rewritten (at parse time, no
# shell) only when its table line changes, so editing one line rebuilds
# that module alone.  Its make dependencies go to NAME.vd: an older build's
# NAME.spv.d names the NAME.comp this table replaced.
$(shell mkdir -p $(VK_SPV_DIR))
vk_comma := ,
vk_defs = $(VK_SPV_DIR)/$(1).defs
define vk_variant
$(if $(and $(wildcard $(call vk_defs,$(1))),$(filter x$(3),x$(file <$(call vk_defs,$(1))))),,$(file >$(call vk_defs,$(1)),$(3)))
$(VK_SPV_DIR)/$(1).spv: $(VK_DIR)/shaders/$(2).glsl $(call vk_defs,$(1))
	$$(GLSLC) $$(GLSLC_FLAGS) -fshader-stage=compute -std=450 $(addprefix -D,$(subst $(vk_comma), ,$(3))) -MD -MF $(VK_SPV_DIR)/$(1).vd $$< -o $$@
endef
$(foreach v,$(VK_VARIANTS),$(eval $(call vk_variant,$(word 1,$(subst :, ,$(v))),$(word 2,$(subst :, ,$(v))),$(word 3,$(subst :, ,$(v))))))

# glslang 15's spelling of the same: no spirv-opt in it (ENABLE_OPT=OFF),
# the driver optimises; SPIR-V 1.5 as glslc's
GLSLANG15_FLAGS := -V --target-env vulkan1.2 -S comp --quiet --glsl-version 450 -I$(VK_DIR)/shaders \
  "-P\#extension GL_GOOGLE_include_directive : require"
define vk_khr_variant
$(if $(and $(wildcard $(call vk_defs,$(1))),$(filter x$(3),x$(file <$(call vk_defs,$(1))))),,$(file >$(call vk_defs,$(1)),$(3)))
$(VK_SPV_DIR)/$(1).spv: $(VK_DIR)/shaders/$(2).glsl $(call vk_defs,$(1)) | $(GLSLANG15)
	$$(GLSLANG15) $$(GLSLANG15_FLAGS) $(addprefix -D,$(subst $(vk_comma), ,$(3))) --depfile $(VK_SPV_DIR)/$(1).vd -o $$@ $$<
endef
$(foreach v,$(VK_KHR_VARIANTS),$(eval $(call vk_khr_variant,$(word 1,$(subst :, ,$(v))),$(word 2,$(subst :, ,$(v))),$(word 3,$(subst :, ,$(v))))))

# the bf16 variants: compiled to NAME.spv16, then rewritten
define vk_bf16_variant
$(if $(and $(wildcard $(call vk_defs,$(1))),$(filter x$(3),x$(file <$(call vk_defs,$(1))))),,$(file >$(call vk_defs,$(1)),$(3)))
$(VK_SPV_DIR)/$(1).spv: $(VK_DIR)/shaders/$(2).glsl $(call vk_defs,$(1)) $(VK_PACKER) | $(GLSLANG15)
	$$(GLSLANG15) $$(GLSLANG15_FLAGS) $(addprefix -D,$(subst $(vk_comma), ,$(3))) --depfile $(VK_SPV_DIR)/$(1).vd -o $(VK_SPV_DIR)/$(1).spv16 $$<
	sed -i 's|\.spv16:|.spv:|' $(VK_SPV_DIR)/$(1).vd
	$(VK_PACKER) --bf16 $(VK_SPV_DIR)/$(1).spv16 $$@
endef
$(foreach v,$(VK_BF16_VARIANTS),$(eval $(call vk_bf16_variant,$(word 1,$(subst :, ,$(v))),$(word 2,$(subst :, ,$(v))),$(word 3,$(subst :, ,$(v))))))

# matmul_cm2.glsl: the GEMM on VK_NV_cooperative_matrix2 (matmul_cm2.c:
# workgroup-scope matrices, tensor layouts), compiled by glslang 15 for
# SPIR-V 1.6, which GL_NV_cooperative_matrix2 needs (device.c's instance
# asks for Vulkan 1.3 so such modules are valid where a device has 1.3).
# Left out with the KHR variants where glslang 15 is not available.
# BM x BN tile, depth BK, NT invocations, UNROLL whole steps a loop trip.
ifneq ($(GLSLANG15),)
VK_CM2_VARIANTS += matmul_cm2_128x128:matmul_cm2:BM=128,BN=128,BK=64
VK_CM2_VARIANTS += matmul_cm2_128x256:matmul_cm2:BM=128,BN=256,BK=64
VK_CM2_VARIANTS += matmul_cm2_256x128:matmul_cm2:BM=256,BN=128,BK=64
VK_CM2_VARIANTS += matmul_cm2_128x256k32:matmul_cm2:BM=128,BN=256,BK=32,UNROLL=8
VK_CM2_VARIANTS += matmul_cm2_64x64:matmul_cm2:BM=64,BN=64,BK=64,NT=128
# nn_attn_khr.glsl with P converted by cooperative matrix 2 (nn_attn_fa.c's
# tiles for measurements, LUMEN_VK_ATTN_KHR=cv, n8cv; VK_BENCH_TILES=1)
ifeq ($(VK_BENCH_TILES),1)
VK_CM2_VARIANTS += nn_attn_khr64_cv:nn_attn_khr:HD=64,PMODE=3
VK_CM2_VARIANTS += nn_attn_khr128_cv:nn_attn_khr:HD=128,PMODE=3
VK_CM2_VARIANTS += nn_attn_khr128_n8cv:nn_attn_khr:HD=128,NSG=8,PMODE=3
endif
# nn_attn_cm2.glsl: flash attention on workgroup-scope matrices (nn_attn_fa.c's
# cm2_shader), head dims up to HD, BQ queries x BC keys a step, NT
# invocations; the first of each head dim is the default, the others are
# tiles for measurements (LUMEN_VK_ATTN_CM2=<tile>, VK_BENCH_TILES=1; =1 the
# default tile: the kernel is opt-in, slower than nn_attn_khr on driver 580);
# _bf: bf16 (spvpack --bf16)
VK_CM2_VARIANTS += nn_attn_cm2_64:nn_attn_cm2:HD=64,BQ=64,BC=64,NT=128
VK_CM2_VARIANTS += nn_attn_cm2_128:nn_attn_cm2:HD=128,BQ=64,BC=64,NT=128
VK_CM2_BF16_VARIANTS += nn_attn_cm2_64_bf:nn_attn_cm2:HD=64,BQ=64,BC=64,NT=128,BF16
VK_CM2_BF16_VARIANTS += nn_attn_cm2_128_bf:nn_attn_cm2:HD=128,BQ=64,BC=64,NT=128,BF16
ifeq ($(VK_BENCH_TILES),1)
VK_CM2_VARIANTS += nn_attn_cm2_64_q128:nn_attn_cm2:HD=64,BQ=128,BC=64,NT=256
VK_CM2_VARIANTS += nn_attn_cm2_128_q128:nn_attn_cm2:HD=128,BQ=128,BC=64,NT=256
VK_CM2_VARIANTS += nn_attn_cm2_128_c32:nn_attn_cm2:HD=128,BQ=64,BC=32,NT=128
VK_CM2_VARIANTS += nn_attn_cm2_128_c128:nn_attn_cm2:HD=128,BQ=64,BC=128,NT=128
VK_CM2_VARIANTS += nn_attn_cm2_128_q128c128:nn_attn_cm2:HD=128,BQ=128,BC=128,NT=256
VK_CM2_VARIANTS += nn_attn_cm2_128_q32:nn_attn_cm2:HD=128,BQ=32,BC=64,NT=128
VK_CM2_VARIANTS += nn_attn_cm2_128_nw:nn_attn_cm2:HD=128,BQ=64,BC=64,NT=128,NARROW
VK_CM2_VARIANTS += nn_attn_cm2_128_q32nw:nn_attn_cm2:HD=128,BQ=32,BC=64,NT=128,NARROW
VK_CM2_VARIANTS += nn_attn_cm2_128_q128nw:nn_attn_cm2:HD=128,BQ=128,BC=64,NT=256,NARROW
VK_CM2_VARIANTS += nn_attn_cm2_128_q32t64:nn_attn_cm2:HD=128,BQ=32,BC=64,NT=64
VK_CM2_BF16_VARIANTS += nn_attn_cm2_128_q128_bf:nn_attn_cm2:HD=128,BQ=128,BC=64,NT=256,BF16
endif
endif
VK_CM2_NAMES := $(foreach v,$(VK_CM2_VARIANTS) $(VK_CM2_BF16_VARIANTS),$(firstword $(subst :, ,$(v))))
VK_VAR_NAMES += $(VK_CM2_NAMES)
VK_SPV += $(VK_CM2_NAMES:%=$(VK_SPV_DIR)/%.spv)
GLSLANG15_CM2_FLAGS := $(subst vulkan1.2,vulkan1.3,$(GLSLANG15_FLAGS))
define vk_cm2_variant
$(if $(and $(wildcard $(call vk_defs,$(1))),$(filter x$(3),x$(file <$(call vk_defs,$(1))))),,$(file >$(call vk_defs,$(1)),$(3)))
$(VK_SPV_DIR)/$(1).spv: $(VK_DIR)/shaders/$(2).glsl $(call vk_defs,$(1)) | $(GLSLANG15)
	$$(GLSLANG15) $$(GLSLANG15_CM2_FLAGS) $(addprefix -D,$(subst $(vk_comma), ,$(3))) --depfile $(VK_SPV_DIR)/$(1).vd -o $$@ $$<
endef
$(foreach v,$(VK_CM2_VARIANTS),$(eval $(call vk_cm2_variant,$(word 1,$(subst :, ,$(v))),$(word 2,$(subst :, ,$(v))),$(word 3,$(subst :, ,$(v))))))
# the bf16 ones: compiled to NAME.spv16, then rewritten (as vk_bf16_variant)
define vk_cm2_bf16_variant
$(if $(and $(wildcard $(call vk_defs,$(1))),$(filter x$(3),x$(file <$(call vk_defs,$(1))))),,$(file >$(call vk_defs,$(1)),$(3)))
$(VK_SPV_DIR)/$(1).spv: $(VK_DIR)/shaders/$(2).glsl $(call vk_defs,$(1)) $(VK_PACKER) | $(GLSLANG15)
	$$(GLSLANG15) $$(GLSLANG15_CM2_FLAGS) $(addprefix -D,$(subst $(vk_comma), ,$(3))) --depfile $(VK_SPV_DIR)/$(1).vd -o $(VK_SPV_DIR)/$(1).spv16 $$<
	sed -i 's|\.spv16:|.spv:|' $(VK_SPV_DIR)/$(1).vd
	$(VK_PACKER) --bf16 $(VK_SPV_DIR)/$(1).spv16 $$@
endef
$(foreach v,$(VK_CM2_BF16_VARIANTS),$(eval $(call vk_cm2_bf16_variant,$(word 1,$(subst :, ,$(v))),$(word 2,$(subst :, ,$(v))),$(word 3,$(subst :, ,$(v))))))

$(VK_PACKER): $(VK_DIR)/tools/spvpack.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O1 -Wall -Wextra -Werror $< -o $@

# The modules' names, rewritten (at parse time) only when the list changes,
# so switching VK_BENCH_TILES rebuilds the pack without the modules left out.
VK_PACK_LIST := $(VK_SPV_DIR)/pack.list
ifneq ($(file <$(VK_PACK_LIST)),$(notdir $(VK_SPV)))
$(file >$(VK_PACK_LIST),$(notdir $(VK_SPV)))
endif

# The file and the id compiled into the library come from one run.
$(VK_PACK) $(VK_ID_H) &: $(VK_SPV) $(VK_PACKER) $(VK_PACK_LIST)
	$(if $(GLSLANG15),,@echo "make: no KHR cooperative-matrix (nor cooperative-matrix-2) kernels in $(VK_PACK): $(or $(GLSLANG15_WHY),glslang 15 not known)")
	$(VK_PACKER) $(VK_PACK) $(VK_ID_H) $(VK_SPV)

# The install prefix, where an installed library looks last; rewritten only
# when PREFIX changes.
VK_PREFIX_H := $(BUILD)/gen/vk_spirv_prefix.h
VK_PREFIX_LINE := \#define LM_VK_SPIRV_INSTALL_DIR "$(PREFIX)/share/lumen"
ifneq ($(file <$(VK_PREFIX_H)),$(VK_PREFIX_LINE))
$(file >$(VK_PREFIX_H),$(VK_PREFIX_LINE))
endif
$(BUILD)/obj/$(VK_DIR)/spirv.o: $(VK_ID_H) $(VK_PREFIX_H)
$(BUILD)/obj/$(VK_DIR)/spirv.o: CFLAGS += -I$(BUILD)/gen

install: install-spirv
.PHONY: install-spirv
install-spirv: $(VK_PACK)
	install -d $(DESTDIR)$(PREFIX)/share/lumen
	install -m 644 $(VK_PACK) $(DESTDIR)$(PREFIX)/share/lumen/lumen-spirv.bin

-include $(VK_COMP:$(VK_DIR)/shaders/%.comp=$(VK_SPV_DIR)/%.spv.d) $(VK_VAR_NAMES:%=$(VK_SPV_DIR)/%.vd)
endif

# One more pass of the Vulkan tests under the validation layer; where the
# SPIR-V file is found, and what happens when it is not.
ifeq ($(VK_ENABLED),yes)
TEST_SCRIPTS += tests/parity/validate.sh tests/parity/spirv.sh tests/parity/spvpack_bf16.sh tests/parity/spirv_layout.sh
endif

# The GPU benchmark binary (bench/gpu/run.sh sets it beside PyTorch CUDA).
ifeq ($(VK_ENABLED),yes)
ALL_TARGETS += $(BUILD)/bench/vkbench
$(BUILD)/bench/vkbench: bench/gpu/vkbench.c $(BUILD)/liblumen.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(BUILD)/liblumen.a $(LDFLAGS) $(LIBS) $(LIB_EXTRA)
endif

# Driver statistics (registers, spills) of the kernels' pipelines.
ifeq ($(VK_ENABLED),yes)
ALL_TARGETS += $(BUILD)/bench/vkstats
$(BUILD)/bench/vkstats: bench/gpu/vkstats.c $(BUILD)/liblumen.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(BUILD)/liblumen.a $(LDFLAGS) $(LIBS) $(LIB_EXTRA)
endif

# Quantized GEMM/GEMV figures (bench/gpu/quant.sh).
ifeq ($(VK_ENABLED),yes)
ALL_TARGETS += $(BUILD)/bench/vkquant
$(BUILD)/bench/vkquant: bench/gpu/quant.c $(BUILD)/liblumen.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(BUILD)/liblumen.a $(LDFLAGS) $(LIBS) $(LIB_EXTRA)
endif

# Compiled calls replayed from recorded command buffers against recorded
# afresh (bench/gpu/replay.sh).
ifeq ($(VK_ENABLED),yes)
ALL_TARGETS += $(BUILD)/bench/vkreplay
$(BUILD)/bench/vkreplay: bench/gpu/replay.c $(BUILD)/liblumen.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(BUILD)/liblumen.a $(LDFLAGS) $(LIBS) $(LIB_EXTRA)
endif

# the pipeline cache's crash safety and the compile threads' bytes (skips
# itself without a Vulkan device)
TEST_SCRIPTS += tests/vk/coldstart.sh
