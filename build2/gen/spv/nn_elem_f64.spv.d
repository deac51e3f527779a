build2/gen/spv/nn_elem_f64.spv: backends/vulkan/shaders/nn_elem_f64.comp backends/vulkan/shaders/vkops.h backends/vulkan/shaders/common.glsl backends/vulkan/shaders/nn_elem.glsl
