build2/gen/spv/nn_rows.spv: backends/vulkan/shaders/nn_rows.comp backends/vulkan/shaders/vkops.h backends/vulkan/shaders/common.glsl
