build2/gen/spv/scatter.spv: backends/vulkan/shaders/scatter.comp backends/vulkan/shaders/vkops.h backends/vulkan/shaders/common.glsl
