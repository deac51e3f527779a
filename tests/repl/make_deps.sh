#!/bin/sh
# tests/repl/make_deps.sh - `make build/lumen` brings build/lumen.so up to
# date too: the two link the same lua/ objects, and the stock lua5.4 runs
# of tests/lua/run.sh (and anyone's require "lumen") load the .so, so a
# `make build/lumen` after editing lua/*.c left a stale module behind.
# Asks make what it would do (-n) for an empty build folder of its own
# (the real one's config.mk and flags stamp are never rewritten; VULKAN=0
# needs no shader tools).  Prints "N passed, N failed".
cd "$(dirname "$0")/../.." || exit 1
T=$(mktemp -d /tmp/lumen-makedeps.XXXXXX)
trap 'rm -rf "$T"' EXIT
pass=0; fail=0
check() {   # what, target, pattern the plan must contain
  if env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL ${MAKE:-make} -n BUILD="$T/b" VULKAN=0 "$T/b/$2" > "$T/plan" 2>&1 &&
     grep -q -- "$3" "$T/plan"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1)); echo "FAIL: $1"; tail -5 "$T/plan" | cut -c1-200 | sed 's/^/  | /'
  fi
}
check "make \$BUILD/lumen links \$BUILD/lumen.so too" lumen "-shared .*-o $T/b/lumen.so "
check "make \$BUILD/lumen links the binary" lumen "-o $T/b/lumen "
check "make \$BUILD/lumen.so links the module" lumen.so "-shared .*-o $T/b/lumen.so "
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
