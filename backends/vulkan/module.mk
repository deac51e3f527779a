# backends/vulkan/module.mk - the Vulkan backend, built when VULKAN != 0 and
# both the Vulkan headers (pkg-config vulkan) and glslc are present: that is
# decided by mk/config.sh after the dependency step (VK_ENABLED in
# $(BUILD)/config.mk), not here.
# Shaders under shaders/*.comp become SPIR-V at build time and are embedded
# in the library as byte arrays ($(BUILD)/gen/vk_shaders.c), so a machine
# without a shader compiler runs the result.

ifeq ($(VK_ENABLED),yes)
VK_DIR     := backends/vulkan
VK_SHADERS := $(wildcard $(VK_DIR)/shaders/*.comp)
VK_SPV     := $(VK_SHADERS:$(VK_DIR)/shaders/%.comp=$(BUILD)/gen/spv/%.spv)
VK_GEN     := $(BUILD)/gen/vk_shaders.c
VK_EMBED   := $(BUILD)/gen/vk_embed
GLSLC      ?= glslc
# SPIR-V 1.5 (Vulkan 1.2): subgroup operations, 8/16-bit storage.
GLSLC_FLAGS := --target-env=vulkan1.2 -O -I$(VK_DIR)/shaders

CORE_SRC  += $(wildcard $(VK_DIR)/*.c) $(VK_GEN)
CFLAGS    += -DLM_HAVE_VULKAN $(VK_CFLAGS)
LIB_EXTRA += $(VK_LIBS)

# fused_spec is left to the driver to optimise: spirv-opt would inline its
# 32 unspecialised steps into a 1.5 MB module (35 s to build); the driver
# folds them after specialization instead.
$(BUILD)/gen/spv/fused_spec.spv: GLSLC_FLAGS := --target-env=vulkan1.2 -I$(VK_DIR)/shaders

# glslc writes make dependencies for #included .glsl files (-MD).
$(BUILD)/gen/spv/%.spv: $(VK_DIR)/shaders/%.comp
	@mkdir -p $(dir $@)
	$(GLSLC) $(GLSLC_FLAGS) -MD -MF $@.d $< -o $@

$(VK_EMBED): $(VK_DIR)/tools/embed.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O1 -Wall -Wextra -Werror $< -o $@

$(VK_GEN): $(VK_SPV) $(VK_EMBED)
	$(VK_EMBED) $@ $(VK_SPV)

-include $(VK_SPV:=.d)
endif

# One more pass of the Vulkan tests under the validation layer.
ifeq ($(VK_ENABLED),yes)
TEST_SCRIPTS += tests/parity/validate.sh
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
