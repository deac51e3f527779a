build2/tests/test_nn_norm: tests/test_nn_norm.c tests/test_nn_util.h \
 tests/testutil.h core/lumen.h core/error.h core/dtype.h core/op.h \
 core/array.h core/device.h core/ops.h core/random.h core/ops_nn.h \
 core/compile.h
tests/test_nn_util.h:
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
