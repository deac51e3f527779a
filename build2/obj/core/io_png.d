build2/obj/core/io_png.o: core/io_png.c core/io_internal.h core/io.h \
 core/array.h core/dtype.h core/error.h core/op.h core/lumen.h \
 core/device.h core/ops.h core/random.h core/ops_nn.h core/compile.h
core/io_internal.h:
core/io.h:
core/array.h:
core/dtype.h:
core/error.h:
core/op.h:
core/lumen.h:
core/device.h:
core/ops.h:
core/random.h:
core/ops_nn.h:
core/compile.h:
