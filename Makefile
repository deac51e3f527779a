# Lumen - plain GNU make.  `make` builds everything into build/, `make test`
# runs every test, `make check` runs them under ASan+UBSan, `make bench`
# prints benchmarks beside their peers, `make deps` installs Debian packages.
#
# Switches: NATIVE=1 (-march=native), VULKAN=0 (build without Vulkan),
# SAN=1 (sanitizers; `make check` uses build/san), BUILD=dir.

BUILD   ?= build
NATIVE  ?= 0
SAN     ?= 0
PREFIX  ?= /usr/local
DESTDIR ?=

CC      ?= cc
CFLAGS_BASE := -std=c11 -O2 -g -Wall -Wextra -Werror -fPIC -D_GNU_SOURCE -I. -Icore
ifeq ($(NATIVE),1)
CFLAGS_BASE += -march=native
endif
ifeq ($(SAN),1)
CFLAGS_BASE += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS_BASE += -fsanitize=address,undefined
endif
CFLAGS  ?=
CFLAGS  += $(CFLAGS_BASE)
LDFLAGS += $(LDFLAGS_BASE)
LIBS    := -lm -lpthread -ldl

# Debian packages the project needs (build, tests, references).
DEPS_PKGS := build-essential pkg-config libreadline-dev liblua5.4-dev lua5.4 \
  libopenblas-dev libpng-dev zlib1g-dev libcmocka-dev python3-numpy python3-torch \
  python3-pil tmux clang libclang-rt-14-dev libvulkan-dev glslc mesa-vulkan-drivers \
  vulkan-validationlayers libshaderc-dev \
  libsleef-dev libcjson-dev libopenmpi-dev openmpi-bin dataset-fashion-mnist

LIB     := $(BUILD)/liblumen.a
CORE_SRC := $(wildcard core/*.c) $(wildcard backends/cpu/*.c)
C_TESTS_SRC := $(wildcard tests/test_*.c)
TEST_SCRIPTS :=
BENCH_SCRIPTS :=
ALL_TARGETS :=

# Each room of the house adds itself here (sources, rules, tests).  Rules in
# the fragments may name $(LIB) and $(BUILD) as prerequisites (defined above).
-include backends/vulkan/module.mk
-include lua/module.mk
-include repl/module.mk
-include tests/module.mk
-include bench/module.mk
-include core/io.mk

CORE_OBJ := $(CORE_SRC:%.c=$(BUILD)/obj/%.o)
C_TESTS  := $(C_TESTS_SRC:tests/%.c=$(BUILD)/tests/%)

.PHONY: all deps test check bench run install clean test-c
.DEFAULT_GOAL := all

all: $(BUILD)/.deps $(LIB) $(C_TESTS) $(ALL_TARGETS)

# The dependency step: cheap when everything is installed (one dpkg-query).
$(BUILD)/.deps: Makefile
	@$(MAKE) --no-print-directory deps
	@mkdir -p $(BUILD) && touch $@

deps:
	@missing=$$(dpkg-query -W -f='$${Package} $${Status}\n' $(DEPS_PKGS) 2>/dev/null \
	  | awk '$$NF=="installed"{print $$1}' | sort > /tmp/lumen-have.$$$$; \
	  for p in $(DEPS_PKGS); do grep -qx "$$p" /tmp/lumen-have.$$$$ || echo $$p; done; rm -f /tmp/lumen-have.$$$$); \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then \
	  echo "make deps: installing:" $$missing; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing || exit 1; \
	else \
	  echo "make deps: missing Debian packages; run as root:"; \
	  echo "  apt-get install -y" $$missing; exit 1; \
	fi

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

# The CPU kernels' block loops vectorise only where GCC may version them for
# aliasing, which its -O2 cost model ("very-cheap") refuses; elementwise
# results do not change (no reassociation).
VECT_FLAG := $(shell $(CC) -fvect-cost-model=dynamic -Werror -E -x c /dev/null >/dev/null 2>&1 && echo -fvect-cost-model=dynamic)
$(BUILD)/obj/backends/cpu/%.o: CFLAGS += $(VECT_FLAG)

$(LIB): $(CORE_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/tests/%: tests/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -MMD -MP -MF $@.d $< -o $@ $(LIB) $(LDFLAGS) -lcmocka $(LIBS) $(LIB_EXTRA)

test: all
	@fail=0; for t in $(C_TESTS); do echo "== $$t"; $$t || fail=1; done; \
	for s in $(TEST_SCRIPTS); do echo "== $$s"; BUILD=$(BUILD) sh $$s || fail=1; done; \
	if [ $$fail = 0 ]; then echo "make test: all suites passed"; else echo "make test: FAILURES"; fi; \
	exit $$fail

# LeakSanitizer ignores leaks inside the Vulkan driver (lavapipe keeps
# allocations alive past exit); leaks in Lumen's own code still fail.
check: export LSAN_OPTIONS = suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0
check:
	$(MAKE) BUILD=build/san SAN=1 test

bench: all
	@for s in $(BENCH_SCRIPTS); do BUILD=$(BUILD) sh $$s || exit 1; done

clean:
	rm -rf build

-include $(CORE_OBJ:.o=.d) $(C_TESTS:=.d)
