build2/gen/spv/create_f64.spv: backends/vulkan/shaders/create_f64.comp backends/vulkan/shaders/common.glsl backends/vulkan/shaders/vkops.h backends/vulkan/shaders/create.glsl
