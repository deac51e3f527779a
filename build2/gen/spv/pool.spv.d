build2/gen/spv/pool.spv: backends/vulkan/shaders/pool.comp backends/vulkan/shaders/vkops.h backends/vulkan/shaders/common.glsl
