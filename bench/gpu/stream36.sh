#!/bin/sh
# stream36.sh [LUMEN] - issue 36's streaming table (bench/gpu/stream36.lua):
# the GEMV kernel's default and each variant of its B [N][K] path
# (backends/vulkan/matmul_gemv.c's knobs: LUMEN_VK_GEMV_LANES invocations a
# column, LUMEN_VK_GEMV_UN units loaded ahead, LUMEN_VK_GEMV_ASH A staged in
# shared memory), beside elementwise passes over the same weight (w * 2 on
# the 16-bit vector path, a copy, an f32 x * 2 of the same bytes) with the
# vector path (default), without it (LUMEN_VK_VEC4=0, the scalar path as
# before) and at 4 units an invocation (LUMEN_VK_EW_ITEMS=4).  One process
# a variant; rows "LABEL gemv DT MxKxN ms GB/s" and "LABEL ew DT KxN pass ms
# GB/s".  Labels: "default" (M = 32 on the GEMM kernel, as choice.h picks),
# "gemv-LANES-UN-ASH" (LUMEN_VK_GEMV=1: M = 32 on the GEMV kernel too).
# STREAM36_DIV=16 shrinks the shapes (lavapipe).  Run from the repository
# root; ends with the seconds it took.
L=${1:-build/lumen}
t0=$(date +%s)
"$L" bench/gpu/stream36.lua default || echo "default rc $?"
LUMEN_VK_VEC4=0 "$L" bench/gpu/stream36.lua scalar ew || echo "scalar rc $?"
LUMEN_VK_EW_ITEMS=4 "$L" bench/gpu/stream36.lua items4 ew || echo "items4 rc $?"
for lanes in 32 16 8; do
  for un in 4 8; do
    for ash in 0 1; do
      LUMEN_VK_GEMV=1 LUMEN_VK_GEMV_LANES=$lanes LUMEN_VK_GEMV_UN=$un LUMEN_VK_GEMV_ASH=$ash \
        "$L" bench/gpu/stream36.lua "gemv-$lanes-$un-$ash" gemv || echo "gemv-$lanes-$un-$ash rc $?"
    done
  done
done
echo "stream36: $(( $(date +%s) - t0 )) s"
