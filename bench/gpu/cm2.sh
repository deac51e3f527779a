#!/bin/sh
# cm2.sh - one device call for the VK_NV_cooperative_matrix2 GEMM
# (backends/vulkan/matmul_cm2.c): matmul parity with LUMEN_VK_GEMM=cm2 under
# the validation layer and without it (LUMEN_PROFILE=total counts the
# matmul_cm2 dispatches, so a run that silently fell back shows 0), each cm2
# tile's parity, then f16 GEMM figures of cm2, khr, nv and plain beside
# PyTorch's cuBLAS (bench/gpu/mm_peer.py), and the cm2 tiles.
# Runs from the repository root with build/ holding lumen, lumen-spirv.bin,
# tests/test_vulkan_parity and bench/vkbench; DEBS names the Debian packages'
# folder (libvulkan1, ...), VVL a folder holding a validation-layer package
# that knows the extension (Debian 13's 1.4.309: 12's 1.3.239 predates it).
#   DEBS=... VVL=... OUT=... STEPS="parity bench tiles ptiles" sh bench/gpu/cm2.sh
# (ptiles: test_matmul with each cm2 tile forced, PTILES=...; the defaults
# pick 64x64 for the tests' small products).  Parity logs go to $OUT/tests.log.
DEBS=${DEBS:-.gl/debs}
VVL=${VVL:-}
OUT=${OUT:-/tmp/out}
STEPS=${STEPS:-parity bench tiles ptiles}
SIZES=${SIZES:-2048,4096,8192}
TILES=${TILES:-128x128 128x256 256x128 128x256k32 64x64}
mkdir -p "$OUT" /tmp/root
for f in "$DEBS"/*.deb; do dpkg -x "$f" /tmp/root; done
LIBS=/tmp/root/usr/lib/x86_64-linux-gnu:/tmp/root/usr/lib/x86_64-linux-gnu/openblas-pthread
export VK_LAYER_PATH=/tmp/root/usr/share/vulkan/explicit_layer.d
if [ -n "$VVL" ]; then
    mkdir -p /tmp/vvl && for f in "$VVL"/*.deb; do dpkg -x "$f" /tmp/vvl; done
    LIBS=/tmp/vvl/usr/lib/x86_64-linux-gnu:$LIBS
    export VK_LAYER_PATH=/tmp/vvl/usr/share/vulkan/explicit_layer.d
fi
export LD_LIBRARY_PATH=$LIBS
for j in /usr/share/vulkan/icd.d/nvidia_icd.json /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json \
         /etc/vulkan/icd.d/nvidia_icd.json; do
    [ -f "$j" ] && { export VK_DRIVER_FILES="$j"; break; }
done
export XDG_CACHE_HOME=/tmp/lumen-cache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
date -u +"date: %Y-%m-%d %H:%M:%S UTC"
VKBENCH_ONLY=mm VKBENCH_SIZES=256 VKBENCH_REPS=1 build/bench/vkbench 2>&1 | grep "^device"
# tp NAME ENV...: one test_matmul run; its failures, validation lines (the
# 1.3.239 loader asking a 1.4 layer for a video name is known: counted
# apart) and cm2 dispatches
tp() {
    name=$1; shift
    env "$@" LUMEN_PROFILE=total PARITY_ONLY=test_matmul timeout 200 build/tests/test_vulkan_parity \
        >"$OUT/t.log" 2>&1
    rc=$?
    echo "$name: rc $rc, $(grep -c 'PARITY FAIL' "$OUT/t.log") failures," \
         "$(grep 'validation' "$OUT/t.log" | grep -vc 'VideoEncodeQualityLevel') validation lines" \
         "(+$(grep -c 'VideoEncodeQualityLevel' "$OUT/t.log") loader), cm2 dispatches:" \
         "$(grep -E '^ +matmul +matmul_cm2' "$OUT/t.log" | awk '{s += $6} END {print s + 0}')" \
         "$(grep -E '^ +matmul +matmul_cm2' "$OUT/t.log" | awk '{print $2}' | sort -u | tr '\n' ' ')"
    grep -h "FAIL\|alidation\|LUMEN_VK_GEMM" "$OUT/t.log" | grep -v VideoEncodeQuality | sort | uniq -c | head -6 | cut -c 1-400
    cat "$OUT/t.log" >>"$OUT/tests.log"
}
for s in $STEPS; do
    echo "=== $s"
    case $s in
    parity)
        tp "cm2 validated (quick)" LUMEN_VK_GEMM=cm2 LUMEN_VK_VALIDATE=1 PARITY_QUICK=1
        tp "cm2" LUMEN_VK_GEMM=cm2
        ;;
    ptiles)
        for t in ${PTILES:-128x256 128x128 256x128 128x256k32}; do tp "cm2 tile $t" LUMEN_VK_GEMM=cm2 LUMEN_VK_CM2=$t; done
        ;;
    bench)
        for g in cm2 khr nv plain; do
            echo "--- LUMEN_VK_GEMM=$g"
            LUMEN_VK_GEMM=$g VKBENCH_ONLY=mm VKBENCH_SIZES=$SIZES timeout 120 build/bench/vkbench 2>&1 | grep -v "^device"
        done
        echo "--- PyTorch"
        timeout 120 python3 bench/gpu/mm_peer.py f16 "$SIZES"
        ;;
    tiles)
        for t in $TILES; do
            echo "--- LUMEN_VK_CM2=$t"
            LUMEN_VK_GEMM=cm2 LUMEN_VK_CM2=$t VKBENCH_ONLY=mm VKBENCH_SIZES=$SIZES timeout 60 build/bench/vkbench 2>&1 |
                grep -v "^device\|^#"
        done
        ;;
    esac
done
rm -f "$OUT/t.log"
date -u +"date: %Y-%m-%d %H:%M:%S UTC"
