#!/bin/sh
# quant.sh - one device call for the quantized kernels on Vulkan
# (backends/vulkan/quant.c): tests/test_vk_quant.c under the Khronos
# validation layer with CPU fallback forbidden, then bench/gpu/quant.c's
# figures (quantized GEMM beside Lumen's f16 GEMM, GEMV as GB/s of the
# quantized bytes).  Runs from the repository root with build/ holding
# lumen-spirv.bin, tests/test_vk_quant and bench/vkquant; DEBS names the
# Debian packages' folder (libvulkan1, the validation layers, ...).
#   DEBS=... OUT=... STEPS="test bench" REPS=11 sh bench/gpu/quant.sh
DEBS=${DEBS:-.gl/debs}
OUT=${OUT:-/tmp/out}
STEPS=${STEPS:-test bench}
mkdir -p "$OUT" /tmp/root
for f in "$DEBS"/*.deb; do dpkg -x "$f" /tmp/root; done
export LD_LIBRARY_PATH=/tmp/root/usr/lib/x86_64-linux-gnu:/tmp/root/usr/lib/x86_64-linux-gnu/openblas-pthread
export VK_LAYER_PATH=/tmp/root/usr/share/vulkan/explicit_layer.d
for j in /usr/share/vulkan/icd.d/nvidia_icd.json /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json \
         /etc/vulkan/icd.d/nvidia_icd.json; do
    [ -f "$j" ] && { export VK_DRIVER_FILES="$j"; break; }
done
export XDG_CACHE_HOME=/tmp/lumen-cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>/dev/null
date -u +"date: %Y-%m-%d %H:%M:%S UTC"
for s in $STEPS; do
    case $s in
    test)
        echo "=== test_vk_quant (LUMEN_VK_VALIDATE=1 LUMEN_FALLBACK=0)"
        LUMEN_VK_VALIDATE=1 LUMEN_FALLBACK=0 timeout ${TEST_T:-150} build/tests/test_vk_quant > "$OUT/test.log" 2>&1
        echo "rc $?"
        grep -E "PASSED|FAILED|ERROR|error|qlinear:|parity:|alidation" "$OUT/test.log" | grep -v "^\[       OK" | head -30 | cut -c1-300
        ;;
    bench)
        echo "=== vkquant"
        timeout ${BENCH_T:-240} build/bench/vkquant 2>&1 | tee "$OUT/bench.log"
        echo "rc $?"
        ;;
    esac
done
