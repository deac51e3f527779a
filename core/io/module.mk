# core/io/module.mk - the files room: libpng/zlib for everything that links
# liblumen.a, the PNG/numpy interop test script and its helper tool, fuzzing
# and benchmarks.  Included from the top Makefile.
LIB_EXTRA += -lpng16 -lz
TEST_SCRIPTS += tests/io_interop.sh
ALL_TARGETS += $(BUILD)/tests/io_tool

$(BUILD)/tests/io_tool: tests/io_tool.c $(BUILD)/liblumen.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests $< -o $@ $(LIB) $(LDFLAGS) $(LIBS) $(LIB_EXTRA)

include tests/fuzz/module.mk
include bench/io.mk
