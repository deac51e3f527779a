# bench/io.mk - file benchmarks (included from core/io/module.mk).
BENCH_SCRIPTS += bench/io.sh
ALL_TARGETS += $(BUILD)/bench/bench_io

$(BUILD)/bench/bench_io: bench/bench_io.c $(BUILD)/liblumen.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(BUILD)/liblumen.a $(LDFLAGS) $(LIBS) $(LIB_EXTRA)
