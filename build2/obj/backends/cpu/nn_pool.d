build2/obj/backends/cpu/nn_pool.o: backends/cpu/nn_pool.c \
 backends/cpu/nn.h backends/cpu/cpu.h core/backend.h core/array.h \
 core/dtype.h core/error.h core/op.h core/device.h core/lumen.h \
 core/ops.h core/random.h core/ops_nn.h core/compile.h core/compile.h
backends/cpu/nn.h:
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
