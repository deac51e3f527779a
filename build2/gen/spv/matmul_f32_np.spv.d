build2/gen/spv/matmul_f32_np.spv: backends/vulkan/shaders/matmul_f32_np.comp backends/vulkan/shaders/vkops.h backends/vulkan/shaders/common.glsl backends/vulkan/shaders/matmul_f32.glsl
