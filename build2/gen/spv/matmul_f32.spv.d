build2/gen/spv/matmul_f32.spv: backends/vulkan/shaders/matmul_f32.comp backends/vulkan/shaders/vkops.h backends/vulkan/shaders/common.glsl backends/vulkan/shaders/matmul_f32.glsl
