build2/obj/core/ops_other.o: core/ops_other.c core/internal.h \
 core/lumen.h core/error.h core/dtype.h core/op.h core/array.h \
 core/device.h core/ops.h core/random.h core/ops_nn.h core/compile.h \
 core/backend.h
core/internal.h:
core/lumen.h:
core/error.h:
core/dtype.h:
core/op.h:
core/array.h:
core/device.h:
core/ops.h:
core/random.h:
core/ops_nn.h:
core/compile.h:
core/backend.h:
