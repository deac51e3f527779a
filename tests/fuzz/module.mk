# tests/fuzz/module.mk - libFuzzer harnesses for the file readers.
# `make fuzz` builds the core with clang + ASan/UBSan into build/fuzz and
# runs each harness for FUZZ_TIME seconds, seeded with the fixtures and the
# committed regression inputs (tests/fuzz/regress/<target>/).  A crash
# leaves build/fuzz/crash-<target>-*: commit it to regress/<target>/.
FUZZ_CC     ?= clang
FUZZ_TIME   ?= 30
FUZZ_DIR    := $(BUILD)/fuzz
FUZZ_CFLAGS := -std=c11 -O1 -g -D_GNU_SOURCE -I. -Icore -fno-omit-frame-pointer \
  -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
FUZZ_TARGETS ?= safetensors npy png tfjs gguf tokenizer_json tokenizer_bpe
# the core sources (CPU only) as the top Makefile lists them before this file
FUZZ_SRC = $(filter core/% models/% backends/cpu/%,$(CORE_SRC))
FUZZ_REGISTRY = $(FUZZ_DIR)/gen/backends.c
FUZZ_OBJ = $(FUZZ_SRC:%.c=$(FUZZ_DIR)/obj/%.o) $(FUZZ_DIR)/obj/gen/backends.o

# the CPU alone in the fuzzers' registry
$(FUZZ_REGISTRY): mk/backends.sh
	@mkdir -p $(dir $@)
	sh mk/backends.sh cpu:required > $@
$(FUZZ_DIR)/obj/gen/backends.o: $(FUZZ_REGISTRY)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@

.PHONY: fuzz fuzz-build

# -MMD: a changed header rebuilds the objects that include it
$(FUZZ_DIR)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -MMD -MP -c $< -o $@
-include $(FUZZ_OBJ:.o=.d)

$(FUZZ_DIR)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_OBJ)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $< $(FUZZ_OBJ) -o $@ -lpng16 -lz -lsleef -lcjson -licuuc -licudata -lm -lpthread -ldl

fuzz-build: $(FUZZ_TARGETS:%=$(FUZZ_DIR)/fuzz_%)

fuzz: fuzz-build
	@set -e; for t in $(FUZZ_TARGETS); do \
	  c=$(FUZZ_DIR)/corpus/$$t; mkdir -p $$c; \
	  case $$t in safetensors) pat='*.safetensors';; npy) pat='*.np[yz]';; png) pat='*.png';; tfjs) pat='model.json';; gguf) pat='*.gguf';; \
	    tokenizer_json) pat='tokenizer.json';; tokenizer_bpe) pat='-';; esac; \
	  find tests/ref/fixtures/io tests/ref/fixtures/tfjs tests/ref/gguf tests/ref/clip -name "$$pat" -exec cp {} $$c/ \; ; \
	  if [ $$t = tokenizer_bpe ]; then d=tests/ref/clip/tiny/tokenizer; \
	    { cat $$d/vocab.json; printf '\0'; cat $$d/merges.txt; } > $$c/tiny; fi; \
	  echo "== fuzz_$$t for $(FUZZ_TIME) s"; \
	  ASAN_OPTIONS=detect_leaks=1 $(FUZZ_DIR)/fuzz_$$t -max_total_time=$(FUZZ_TIME) \
	    -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
	    -artifact_prefix=$(FUZZ_DIR)/crash-$$t- $$c tests/fuzz/regress/$$t 2>&1 \
	    | grep -E '^(#[0-9]+ *DONE|==|SUMMARY|stat::number_of_executed_units|Done)' || true; \
	  if ls $(FUZZ_DIR)/crash-$$t-* >/dev/null 2>&1; then echo "fuzz_$$t: crash inputs in $(FUZZ_DIR)"; exit 1; fi; \
	done; echo "make fuzz: clean"
.SECONDARY: $(FUZZ_OBJ)
