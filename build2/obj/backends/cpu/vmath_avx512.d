build2/obj/backends/cpu/vmath_avx512.o: backends/cpu/vmath_avx512.c \
 backends/cpu/vmath_isa.h core/dtype.h backends/cpu/vmath.h
backends/cpu/vmath_isa.h:
core/dtype.h:
backends/cpu/vmath.h:
