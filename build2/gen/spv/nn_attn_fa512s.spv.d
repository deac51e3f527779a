build2/gen/spv/nn_attn_fa512s.spv: backends/vulkan/shaders/nn_attn_fa512s.comp backends/vulkan/shaders/vkops.h backends/vulkan/shaders/common.glsl backends/vulkan/shaders/nn_attn_fa.glsl
