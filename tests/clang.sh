#!/bin/sh
# tests/clang.sh - every C file of the project compiles with clang too
# (clang -fsyntax-only, the project's warning flags and -Werror): the fuzz
# build (make fuzz) uses clang, and GCC alone let a non-constant intrinsic
# index through (backends/cpu/quant_dot_avx2.c).  The include paths are the
# union of the modules' (the generated headers in $BUILD/gen need a build
# first); the SIMD files get their module.mk flags; the fuzz harnesses the
# fuzz build's flags.  Prints "N passed, N failed"; CLANG=clang-N picks one.
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
CLANG=${CLANG:-clang}
if ! command -v "$CLANG" >/dev/null 2>&1; then
  echo "$CLANG not installed: the clang check is skipped"
  echo "0 passed, 1 failed"
  exit 1
fi
flag() { sed -n "s/^VMATH_FLAGS_$1 *:= *//p" backends/cpu/module.mk; }
LUA_CFLAGS=$(pkg-config --cflags lua5.4 2>/dev/null || echo -I/usr/include/lua5.4)
MPI_CFLAGS=$(sed -n 's/^MPI_CFLAGS := //p' "$BUILD/config.mk" 2>/dev/null)
BASE="-std=c11 -O2 -Wall -Wextra -Werror -Wmissing-prototypes -Wshadow -fPIC -D_GNU_SOURCE -I. -Icore
  -DLM_HAVE_VULKAN -I$BUILD/gen -Itests -Ibench -I/usr/include/cjson $LUA_CFLAGS"
FUZZ="-std=c11 -O1 -D_GNU_SOURCE -I. -Icore"
pass=0; fail=0; skipped=; novk=
for f in $(find core backends models lua repl tests bench tools -name '*.c' 2>/dev/null | sort); do
  # ggml is no dependency: its benchmark and reference writers are built by hand
  if grep -q '^#include "ggml' "$f"; then skipped="$skipped $f"; continue; fi
  # the SPIR-V headers are written by a Vulkan build only (VULKAN=0 has none)
  if grep -q '^#include "vk_spirv_' "$f" && [ ! -f "$BUILD/gen/vk_spirv_id.h" ]; then
    novk="$novk $f"; continue
  fi
  case "$f" in
    tests/fuzz/*) flags=$FUZZ ;;
    backends/cpu/vmath_sse2.c) flags="$BASE $(flag sse2)" ;;
    backends/cpu/vmath_avx512.c) flags="$BASE $(flag avx512)" ;;
    backends/cpu/vmath_avx2.c|backends/cpu/quant_dot_avx2.c) flags="$BASE $(flag avx2)" ;;
    repl/batch.c) flags="$BASE -DLM_HAVE_MPI $MPI_CFLAGS" ;;
    lua/term_image.c) flags="$BASE $(sed -n 's/^CHAFA_CFLAGS := //p' "$BUILD/config.mk" 2>/dev/null)" ;;
    lua/xyz_grid.c) flags="$BASE $(pkg-config --cflags freetype2 2>/dev/null || echo -I/usr/include/freetype2)" ;;
    *) flags=$BASE ;;
  esac
  # shellcheck disable=SC2086
  if out=$("$CLANG" $flags -fsyntax-only "$f" 2>&1); then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL $f"
    echo "$out" | head -8
  fi
done
[ -n "$skipped" ] && echo "not compiled (they need ggml's headers):$skipped"
[ -n "$novk" ] && echo "not compiled (they need the SPIR-V headers a Vulkan build writes in $BUILD/gen):$novk"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
