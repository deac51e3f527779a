build2/gen/spv/reduce.spv: backends/vulkan/shaders/reduce.comp backends/vulkan/shaders/vkops.h backends/vulkan/shaders/common.glsl backends/vulkan/shaders/reduce.glsl
