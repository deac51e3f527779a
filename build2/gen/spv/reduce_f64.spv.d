build2/gen/spv/reduce_f64.spv: backends/vulkan/shaders/reduce_f64.comp backends/vulkan/shaders/vkops.h backends/vulkan/shaders/common.glsl backends/vulkan/shaders/reduce.glsl
