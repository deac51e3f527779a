build2/gen/spv/nn_norm_split.spv: backends/vulkan/shaders/nn_norm_split.comp backends/vulkan/shaders/vkops.h backends/vulkan/shaders/common.glsl
