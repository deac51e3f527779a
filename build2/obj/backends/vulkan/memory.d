build2/obj/backends/vulkan/memory.o: backends/vulkan/memory.c \
 backends/vulkan/vk.h core/backend.h core/array.h core/dtype.h \
 core/error.h core/op.h core/device.h core/lumen.h core/ops.h \
 core/random.h core/ops_nn.h core/compile.h backends/vulkan/shaders.h \
 backends/vulkan/vulkan.h core/device.h backends/vulkan/shaders/vkops.h
backends/vulkan/vk.h:
core/backend.h:
core/array.h:
core/dtype.h:
core/error.h:
core/op.h:
core/device.h:
core/lumen.h:
core/ops.h:
core/random.h:
core/ops_nn.h:
core/compile.h:
backends/vulkan/shaders.h:
backends/vulkan/vulkan.h:
core/device.h:
backends/vulkan/shaders/vkops.h:
