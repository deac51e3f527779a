build2/gen/spv/create.spv: backends/vulkan/shaders/create.comp backends/vulkan/shaders/common.glsl backends/vulkan/shaders/vkops.h backends/vulkan/shaders/create.glsl
