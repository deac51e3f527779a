build2/gen/spv/sort.spv: backends/vulkan/shaders/sort.comp backends/vulkan/shaders/sort.glsl backends/vulkan/shaders/vkops.h backends/vulkan/shaders/common.glsl
