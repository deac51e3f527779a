build2/obj/backends/cpu/reduce.o: backends/cpu/reduce.c \
 backends/cpu/cpu.h core/backend.h core/array.h core/dtype.h core/error.h \
 core/op.h core/device.h core/lumen.h core/ops.h core/random.h \
 core/ops_nn.h core/compile.h core/compile.h
backends/cpu/cpu.h:
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
core/compile.h:
