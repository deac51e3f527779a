build2/obj/backends/cpu/vmath_avx2.o: backends/cpu/vmath_avx2.c \
 backends/cpu/vmath_isa.h core/dtype.h backends/cpu/vmath.h
backends/cpu/vmath_isa.h:
core/dtype.h:
backends/cpu/vmath.h:
