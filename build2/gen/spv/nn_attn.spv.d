build2/gen/spv/nn_attn.spv: backends/vulkan/shaders/nn_attn.comp backends/vulkan/shaders/vkops.h backends/vulkan/shaders/common.glsl backends/vulkan/shaders/nn_attn.glsl
