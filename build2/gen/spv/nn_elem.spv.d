build2/gen/spv/nn_elem.spv: backends/vulkan/shaders/nn_elem.comp backends/vulkan/shaders/vkops.h backends/vulkan/shaders/common.glsl backends/vulkan/shaders/nn_elem.glsl
