build2/gen/spv/nn_attn512.spv: backends/vulkan/shaders/nn_attn512.comp backends/vulkan/shaders/vkops.h backends/vulkan/shaders/common.glsl backends/vulkan/shaders/nn_attn.glsl
