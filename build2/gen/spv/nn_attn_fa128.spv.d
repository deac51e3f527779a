build2/gen/spv/nn_attn_fa128.spv: backends/vulkan/shaders/nn_attn_fa128.comp backends/vulkan/shaders/vkops.h backends/vulkan/shaders/common.glsl backends/vulkan/shaders/nn_attn_fa.glsl
