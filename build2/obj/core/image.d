build2/obj/core/image.o: core/image.c core/image.h core/array.h \
 core/dtype.h core/error.h core/op.h core/io.h core/internal.h \
 core/lumen.h core/device.h core/ops.h core/random.h core/ops_nn.h \
 core/compile.h core/backend.h
core/image.h:
core/array.h:
core/dtype.h:
core/error.h:
core/op.h:
core/io.h:
core/internal.h:
core/lumen.h:
core/device.h:
core/ops.h:
core/random.h:
core/ops_nn.h:
core/compile.h:
core/backend.h:
