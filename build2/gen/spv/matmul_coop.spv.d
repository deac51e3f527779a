build2/gen/spv/matmul_coop.spv: backends/vulkan/shaders/matmul_coop.comp backends/vulkan/shaders/vkops.h backends/vulkan/shaders/common.glsl backends/vulkan/shaders/matmul_coop.glsl
