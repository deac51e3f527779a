build2/gen/spv/sort_merge.spv: backends/vulkan/shaders/sort_merge.comp backends/vulkan/shaders/sort.glsl backends/vulkan/shaders/vkops.h backends/vulkan/shaders/common.glsl
