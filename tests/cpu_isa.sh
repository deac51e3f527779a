#!/bin/sh
# tests/cpu_isa.sh - the CPU backend's math at every instruction-set level
# this machine runs (LUMEN_ISA=sse2|avx2|avx512, backends/cpu/vmath.h): the
# elementwise, fused, NN, layout and vmath suites and the Lua NN and compile
# tests, on the CPU device, once per level.  Ends with "N passed, N failed" (run_suites.sh).
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)
has() { case " $flags " in *" $1 "*) return 0 ;; esac; return 1; }
levels=sse2
has avx2 && has fma && has f16c && levels="$levels avx2"
has avx512f && has avx2 && has fma && has f16c && levels="$levels avx512"
suites="test_cpu_vmath test_cpu_layout test_cpu_conv test_ops_ref test_compile test_nn_norm test_nn_attention test_nn_conv test_grad test_array test_gguf"
p=0 f=0
for isa in $levels; do
  for s in $suites; do
    out=$(LUMEN_ISA=$isa LUMEN_DEVICE=cpu "$BUILD/tests/$s" 2>&1)
    rc=$?
    n=$(echo "$out" | sed -n 's/^\[  PASSED  \] \([0-9][0-9]*\) test(s)\.$/\1/p' | tail -1)
    if [ $rc = 0 ] && [ -n "$n" ]; then
      p=$((p + n))
    else
      echo "$out" | tail -20
      echo "FAIL: LUMEN_ISA=$isa $s (exit $rc)"
      f=$((f + 1))
    fi
  done
  out=$(LUMEN_ISA=$isa LUMEN_DEVICE=cpu "$BUILD/lumen" tests/lua/runner.lua \
        tests/lua/test_nn.lua tests/lua/test_compile.lua 2>&1)
  line=$(echo "$out" | grep '^[0-9]* passed, [0-9]* failed$' | tail -1)
  if [ -n "$line" ]; then
    p=$((p + $(echo "$line" | cut -d' ' -f1)))
    f=$((f + $(echo "$line" | cut -d' ' -f3)))
    [ "$(echo "$line" | cut -d' ' -f3)" = 0 ] || echo "$out" | tail -20
  else
    echo "$out" | tail -20
    echo "FAIL: LUMEN_ISA=$isa Lua suites (no summary)"
    f=$((f + 1))
  fi
  echo "  LUMEN_ISA=$isa: done"
done
echo "levels: $levels"
echo "$p passed, $f failed"
[ $f = 0 ]
