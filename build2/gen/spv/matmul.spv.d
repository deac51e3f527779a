build2/gen/spv/matmul.spv: backends/vulkan/shaders/matmul.comp backends/vulkan/shaders/vkops.h backends/vulkan/shaders/common.glsl backends/vulkan/shaders/matmul.glsl
