build2/obj/core/compare.o: core/compare.c core/compare.h core/array.h \
 core/dtype.h core/error.h core/op.h core/io.h core/lumen.h core/device.h \
 core/ops.h core/random.h core/ops_nn.h core/compile.h
core/compare.h:
core/array.h:
core/dtype.h:
core/error.h:
core/op.h:
core/io.h:
core/lumen.h:
core/device.h:
core/ops.h:
core/random.h:
core/ops_nn.h:
core/compile.h:
