# Lumen - plain GNU make.  `make` builds everything into build/, `make test`
# runs every test, `make check` runs them under ASan+UBSan, `make bench`
# prints benchmarks beside their peers, `make deps` installs Debian packages.
#
# Every target that builds first runs the dependency step (mk/deps.sh:
# installs missing Debian packages as root, else prints the apt-get line and
# stops), then decides the configuration (mk/config.sh writes
# $(BUILD)/config.mk; make rereads the makefiles when it changes), so one
# `make` on a fresh machine installs and builds everything.  The compiler
# flags are part of the build: objects depend on $(BUILD)/flags.stamp, which
# changes when CFLAGS or the configuration do.
#
# Switches: NATIVE=1 (-march=native), VULKAN=0 (build without Vulkan),
# SAN=1 (sanitizers; `make check` uses build/san), BUILD=dir.

BUILD   ?= build
NATIVE  ?= 0
SAN     ?= 0
VULKAN  ?= 1
PREFIX  ?= /usr/local
DESTDIR ?=

CC      ?= cc
CFLAGS_BASE := -std=c11 -O2 -g -Wall -Wextra -Werror -Wmissing-prototypes -Wshadow -fPIC -D_GNU_SOURCE -I. -Icore
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

# Debian packages the project needs (build, tests, references, set-up).
# TOOL=PKG+PKG: those packages unless the command TOOL is already on PATH.
DEPS_PKGS := build-essential pkg-config libreadline-dev liblua5.4-dev lua5.4 \
  libopenblas-dev libpng-dev zlib1g-dev libcmocka-dev python3-numpy python3-torch \
  python3-pil tmux clang libclang-rt-14-dev libvulkan-dev glslc mesa-vulkan-drivers \
  vulkan-validationlayers libshaderc-dev \
  libsleef-dev libcjson-dev libopenmpi-dev openmpi-bin dataset-fashion-mnist libicu-dev \
  npm=nodejs+npm cmake libfreetype-dev fonts-dejavu-core libmicrohttpd-dev curl
# images in the terminal (lua/term_image.c: libchafa) and the terminals
# tests/show/run.sh draws them in
DEPS_PKGS += libchafa-dev libglib2.0-dev xvfb xterm kitty x11-apps

# Goals that need no configuration (and so install nothing).
NOCONFIG_GOALS := clean distclean deps fresh-check help
ifneq ($(MAKECMDGOALS),)
ifeq ($(filter-out $(NOCONFIG_GOALS),$(MAKECMDGOALS)),)
NO_CONFIG := 1
endif
endif

ifndef NO_CONFIG
include $(BUILD)/config.mk
# glslang 15 for the KHR cooperative-matrix shaders, built once (build/tools)
include mk/glslang.mk
endif

# Runs on every invocation; rewrites config.mk only when it changes.
$(BUILD)/config.mk: FORCE
	@sh mk/deps.sh $(DEPS_PKGS)
	@mkdir -p $(BUILD)
	@VULKAN=$(VULKAN) sh mk/config.sh > $@.tmp; \
	if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; echo "make: configuration written to $@"; fi

LIB     := $(BUILD)/liblumen.a
CORE_SRC := $(wildcard core/*.c core/io/*.c models/*.c) $(wildcard backends/cpu/*.c)
# NAME:required|optional, in the order lm_init registers them; each backend's
# module.mk adds itself, and the build writes the registry from the list
# (mk/backends.sh), so the core names no backend.
BACKENDS := cpu:required
C_TESTS_SRC := $(wildcard tests/test_*.c)
TEST_SCRIPTS := tests/suites_selftest.sh tests/docs_figures.sh tests/clang.sh tests/apt_mirror.sh
BENCH_SCRIPTS :=
ALL_TARGETS :=

# Each room of the house adds itself here (sources, rules, tests).  Rules in
# the fragments may name $(LIB) and $(BUILD) as prerequisites (defined above).
include backends/cpu/module.mk
include backends/vulkan/module.mk
include lua/module.mk
include repl/module.mk
include bench/module.mk
include core/io/module.mk
include tests/samples/module.mk
include models.mk
include models/module.mk

REGISTRY_C := $(BUILD)/gen/backends.c
CORE_OBJ := $(CORE_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/gen/backends.o
C_TESTS  := $(C_TESTS_SRC:tests/%.c=$(BUILD)/tests/%)

.PHONY: all deps test check bench run install clean distclean fresh-check FORCE
.DEFAULT_GOAL := all

all: $(LIB) $(C_TESTS) $(ALL_TARGETS)

deps:
	@sh mk/deps.sh $(DEPS_PKGS)

# The flags stamp: rewritten (and so newer than every object) only when
# the compiler, the flags or the libraries change.
FLAGS_STAMP := $(BUILD)/flags.stamp

$(BUILD)/obj/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

# The CPU kernels' block loops vectorise only where GCC may version them for
# aliasing, which its -O2 cost model ("very-cheap") refuses; elementwise
# results do not change (no reassociation).
VECT_FLAG := $(shell $(CC) -fvect-cost-model=dynamic -Werror -E -x c /dev/null >/dev/null 2>&1 && echo -fvect-cost-model=dynamic)
$(BUILD)/obj/backends/cpu/%.o: CFLAGS += $(VECT_FLAG)

# the registry: rewritten only when the list of backends changes
$(REGISTRY_C): FORCE
	@mkdir -p $(dir $@)
	@sh mk/backends.sh $(BACKENDS) > $@.tmp && \
	if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi

$(BUILD)/obj/gen/backends.o: $(REGISTRY_C) $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(LIB): $(CORE_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/tests/%: tests/%.c $(LIB) $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -MMD -MP -MF $@.d $< -o $@ $(LIB) $(LDFLAGS) -lcmocka $(LIBS) $(LIB_EXTRA)

# tests/run_suites.sh runs every suite, counts what each reports and ends
# with one line "N passed, N failed, N skipped" over all of them.
test: all $(TEST_PREREQS)
	@BUILD=$(BUILD) VULKAN_REQUESTED=$(VULKAN_REQUESTED) VK_ENABLED=$(VK_ENABLED) \
	  VK_REASON="$(VK_REASON)" sh tests/run_suites.sh $(C_TESTS) $(TEST_SCRIPTS)

# LeakSanitizer ignores leaks inside the Vulkan driver (lavapipe keeps
# allocations alive past exit); leaks in Lumen's own code still fail.
check: export LSAN_OPTIONS = suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0
check:
	$(MAKE) BUILD=build/san SAN=1 test

bench: all
	@for s in $(BENCH_SCRIPTS); do BUILD=$(BUILD) sh $$s || exit 1; done

# build/tools (glslang 15, mk/glslang.mk) is kept: it depends on no flag
# and costs a download and a minute of compiling; `make distclean` drops it.
clean:
	@if [ -d build ]; then find build -mindepth 1 -maxdepth 1 ! -name tools -exec rm -rf {} +; fi

distclean:
	rm -rf build

# Optional, not in CI: a clean Debian 12 chroot (debootstrap) with only make
# and gcc runs the README's two commands on a fresh clone of HEAD.
fresh-check:
	sh mk/fresh-check.sh

FORCE:

ifndef NO_CONFIG
$(shell mkdir -p $(BUILD))
$(file >$(FLAGS_STAMP).new,$(CC) $(CFLAGS) | $(LDFLAGS) | $(LIBS) $(LIB_EXTRA) | $(VK_ENABLED))
$(shell cmp -s $(FLAGS_STAMP).new $(FLAGS_STAMP) && rm -f $(FLAGS_STAMP).new || mv -f $(FLAGS_STAMP).new $(FLAGS_STAMP))
endif

-include $(CORE_OBJ:.o=.d) $(C_TESTS:=.d)
