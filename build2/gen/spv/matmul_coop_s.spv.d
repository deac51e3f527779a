build2/gen/spv/matmul_coop_s.spv: backends/vulkan/shaders/matmul_coop_s.comp backends/vulkan/shaders/vkops.h backends/vulkan/shaders/common.glsl backends/vulkan/shaders/matmul_coop.glsl
