build2/obj/backends/cpu/vmath_sse2.o: backends/cpu/vmath_sse2.c \
 backends/cpu/vmath_isa.h core/dtype.h backends/cpu/vmath.h
backends/cpu/vmath_isa.h:
core/dtype.h:
backends/cpu/vmath.h:
