build2/gen/spv/conv_direct.spv: backends/vulkan/shaders/conv_direct.comp backends/vulkan/shaders/vkops.h backends/vulkan/shaders/common.glsl
