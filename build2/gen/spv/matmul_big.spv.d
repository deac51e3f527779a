build2/gen/spv/matmul_big.spv: backends/vulkan/shaders/matmul_big.comp backends/vulkan/shaders/vkops.h backends/vulkan/shaders/common.glsl backends/vulkan/shaders/matmul.glsl
