build2/tests/test_cpu_vmath: tests/test_cpu_vmath.c tests/testutil.h \
 core/lumen.h core/error.h core/dtype.h core/op.h core/array.h \
 core/device.h core/ops.h core/random.h core/ops_nn.h core/compile.h \
 backends/cpu/vmath.h core/dtype.h
tests/testutil.h:
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
backends/cpu/vmath.h:
core/dtype.h:
