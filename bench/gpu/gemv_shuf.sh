#!/bin/sh
# gemv_shuf.sh [CASE...] - issue 36's batch-1 products (B [N, K], a linear's
# weight) at GPU time (bench/gpu/gemv_gpu.lua: lm.profile's timestamps, the
# median, min and max of 5 x 10 calls, ms) on the GEMV kernel's B [n][k]
# paths (backends/vulkan/matmul_gemv.c): "old", the shared-memory tree
# (LUMEN_VK_GEMV_SHUF=0), and the subgroup-shuffle kernel
# (LUMEN_VK_GEMV_SHUF=1, shaders/matmul_gemv_shuf.comp) at its defaults
# (256 invocations a workgroup, at most 1056 workgroups), at 128 and 64
# invocations, at 8 units ahead, at 528 and 264 workgroups (4 and 2 of 256
# an SM of the H200's 132), and without the cap (one column a subgroup, as
# the old grid); then the old kernel at 8 units ahead.  f16 and bf16; one
# process a variant and dtype, rows "LABEL matmul_DT_MxKxNt gpu median min
# max".  Both kernels give the same bits (tests/test_vulkan_parity.c's
# test_matmul_gemv_shuf).  Cases as gemv_gpu.lua's (M:K:N[t]); the default
# is issue 36's four.  LUMEN (default build/lumen) runs them; run from the
# repository root; ends with the seconds it took.
#   sh bench/gpu/gemv_shuf.sh
#   LUMEN_VK_GEMV_LANES=16 sh bench/gpu/gemv_shuf.sh 1:3840:15360t
L=${LUMEN:-build/lumen}
[ $# -gt 0 ] || set -- 1:3840:15360t 1:9728:2560t 1:3840:3840t 1:2560:9728t
t0=$(date +%s)
run() {
  label=$1
  shift
  for dt in f16 bf16; do
    env "$@" "$L" bench/gpu/gemv_gpu.lua $dt $CASES | sed "s/^/$label /" || echo "$label $dt rc $?"
  done
}
CASES="$*"
run old LUMEN_VK_GEMV_SHUF=0
run shuf LUMEN_VK_GEMV_SHUF=1
run shuf-wg128 LUMEN_VK_GEMV_SHUF=1 LUMEN_VK_GEMV_SHUF_WG=128
run shuf-wg64 LUMEN_VK_GEMV_SHUF=1 LUMEN_VK_GEMV_SHUF_WG=64
run shuf-un8 LUMEN_VK_GEMV_SHUF=1 LUMEN_VK_GEMV_UN=8
run shuf-g528 LUMEN_VK_GEMV_SHUF=1 LUMEN_VK_GEMV_SHUF_GROUPS=528
run shuf-g264 LUMEN_VK_GEMV_SHUF=1 LUMEN_VK_GEMV_SHUF_GROUPS=264
run shuf-nocap LUMEN_VK_GEMV_SHUF=1 LUMEN_VK_GEMV_SHUF_GROUPS=1000000
run old-un8 LUMEN_VK_GEMV_SHUF=0 LUMEN_VK_GEMV_UN=8
echo "gemv_shuf.sh: $(($(date +%s) - t0)) s"
