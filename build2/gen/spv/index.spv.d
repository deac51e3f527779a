build2/gen/spv/index.spv: backends/vulkan/shaders/index.comp backends/vulkan/shaders/vkops.h backends/vulkan/shaders/common.glsl
