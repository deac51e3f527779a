build2/obj/backends/cpu/vmath.o: backends/cpu/vmath.c \
 backends/cpu/vmath.h
backends/cpu/vmath.h:
