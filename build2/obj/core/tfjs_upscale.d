build2/obj/core/tfjs_upscale.o: core/tfjs_upscale.c core/lumen.h \
 core/error.h core/dtype.h core/op.h core/array.h core/device.h \
 core/ops.h core/random.h core/ops_nn.h core/compile.h core/tfjs.h \
 core/io.h
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
core/tfjs.h:
core/io.h:
