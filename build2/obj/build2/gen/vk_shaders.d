build2/obj/build2/gen/vk_shaders.o: build2/gen/vk_shaders.c \
 backends/vulkan/shaders.h
backends/vulkan/shaders.h:
