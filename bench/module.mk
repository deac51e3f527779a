# Benchmarks: every bench/bench_*.c becomes build/bench/bench_*; bench/run.sh
# runs each with its peer script (bench/peer_*.py) and prints ratios.
BENCH_SRC := $(wildcard bench/bench_*.c)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)
ALL_TARGETS += $(BENCH_BIN)
BENCH_SCRIPTS += bench/run.sh

$(BUILD)/bench/%: bench/%.c bench/bench.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Ibench $< -o $@ $(LIB) $(LDFLAGS) $(LIBS) $(LIB_EXTRA)

# The STREAM-style peer loops are compiled as the CPU kernels are (with
# GCC's dynamic vectoriser cost model), so they run at full vector width.
$(BUILD)/bench/%: CFLAGS += $(VECT_FLAG)
