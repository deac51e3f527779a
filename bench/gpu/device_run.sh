#!/bin/sh
# device_run.sh - one call on a lent GPU machine (see docs/BENCHMARKS.md, GPU
# section): the parity tests under the validation layer, the VAE decoder
# and the single-op table, with and without the tensor-core convolution.
# Run from a folder W laid out as the repository (bench/gpu/*, build/lumen,
# build/bench/vkbench, build/tests/test_vulkan_*) beside the Debian
# packages it needs (DEBS: libvulkan1, vulkan-validationlayers, liblua5.4-0,
# libcmocka0, libpng16-16, libreadline8, ...), unpacked here, not in /.
#   DEBS=/path/to/debs OUT=/path/to/logs sh bench/gpu/device_run.sh [steps]
# steps: any of test (test-conv: the conv tests only; test-all: test_vulkan and
# test_vulkan_parity too) vae ops, vae-base ops-base (before 2026-11-25's changes:
# f32-arithmetic f16 convs, element-wise im2col gathers, a workgroup per
# norm row), vae-nosplit (D = 512 attention in one workgroup per query block),
# vae-simt (the mid block's D = 512 attention on the SIMT kernels instead of
# the two products: LUMEN_VK_ATTN512=simt)
# sweep (bench/gpu/mm_sweep.sh: tensor-core matmul/conv variants; SWEEP= picks parts)
# mm36 (bench/gpu/mm_sweep36.sh: the GEMM tiles and split-K at the SD / SDXL / Z-Image shapes)
# profile (test_profile under the validation layer, then lm.profile's table of one
# whole VAE decoder call in f32 and f16: docs/PROFILE.md)
# esrgan (esrgan-thick x4 256x256 beside PyTorch CUDA, then its lm.profile table;
# needs the package's models/x4 folder under $LUMEN_MODELS/esrgan-thick: 28 MB)
# unmapped (test_vulkan's small-upload and transfer cases under the validation layer)
# (default: test vae ops vae-base ops-base)
DEBS=${DEBS:-..}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" "$DEBS/root"
for f in "$DEBS"/*.deb; do dpkg -x "$f" "$DEBS/root"; done
export LD_LIBRARY_PATH="$(cd "$DEBS/root/usr/lib/x86_64-linux-gnu" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export VK_LAYER_PATH="$(cd "$DEBS/root/usr/share/vulkan/explicit_layer.d" && pwd)"
for j in /usr/share/vulkan/icd.d/nvidia_icd.json /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json \
         /etc/vulkan/icd.d/nvidia_icd.json; do
    [ -f "$j" ] && { export VK_DRIVER_FILES="$j"; break; }
done
export XDG_CACHE_HOME=/tmp/lumen-cache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
date -u +"date: %Y-%m-%d %H:%M UTC"
steps=${*:-test vae ops vae-base ops-base}
BASE="LUMEN_VK_CONV_COOP=0 LUMEN_VK_NORM_SPLIT=0"
for s in $steps; do
    echo "=== $s"
    case $s in
    test|test-conv|test-all)
        # every log into one file (few files come back from the device)
        T="$OUT/tests.log"
        runs="test_vulkan_nn_norm:1:1 test_vulkan_nn_conv:1:1 test_vulkan_nn_conv:0:1 test_vulkan_nn_conv:1:0"
        [ $s = test ] && runs="$runs test_vulkan_nn_norm:1:0"
        [ $s = test-conv ] && runs="test_vulkan_nn_conv:1:1 test_vulkan_nn_conv:1:0"
        [ $s = test-all ] && runs="$runs test_vulkan_nn_norm:1:0 test_vulkan:1:1 test_vulkan:1:0 test_vulkan_parity:1:1
                                    test_vulkan_parity:1:0"
        for run in $runs; do
            run=$(echo $run | tr : ' ')
            set -- $run
            echo "##### $1 LUMEN_VK_CONV_COOP=$2 validated=$3" >>"$T"
            if [ "$3" = 1 ]; then
                LUMEN_VK_CONV_COOP=$2 LUMEN_VK_VALIDATE=1 PARITY_QUICK=1 build/tests/$1 >"$OUT/t.log" 2>&1
            else
                LUMEN_VK_CONV_COOP=$2 build/tests/$1 >"$OUT/t.log" 2>&1
            fi
            echo "$1 coop=$2 validated=$3: rc $? $(grep -h 'parity:' "$OUT/t.log")"
            grep -h "FAIL\|validation:" "$OUT/t.log" | cut -c 1-300 | head -5
            cat "$OUT/t.log" >>"$T"
        done
        rm -f "$OUT/t.log"
        echo "##### VAE 8x8 validated" >>"$T"
        VAE_CHECK_ONLY=1 LUMEN_VK_VALIDATE=1 python3 bench/gpu/vae.py build/lumen quick >>"$T" 2>&1
        echo "VAE 8x8 under the validation layer: rc $?"; tail -40 "$T" | grep -i "validation\|max abs\|error" | cut -c 1-300 | head -5
        ;;
    vae) python3 bench/gpu/vae.py build/lumen 2>&1 | tee "$OUT/vae.log" ;;
    vae-base) env $BASE python3 bench/gpu/vae.py build/lumen 2>&1 | tee "$OUT/vae_base.log" ;;
    vae-nosplit) LUMEN_VK_ATTN_SPLIT=0 LUMEN_VK_ATTN512=simt python3 bench/gpu/vae.py build/lumen 2>&1 | tee "$OUT/vae_nosplit.log" ;;
    vae-simt) LUMEN_VK_ATTN512=simt python3 bench/gpu/vae.py build/lumen 2>&1 | tee "$OUT/vae_simt.log" ;;
    ops) python3 bench/gpu/ops.py build/lumen 2>&1 | tee "$OUT/ops.log" ;;
    ops-base) env $BASE python3 bench/gpu/ops.py build/lumen 2>&1 | tee "$OUT/ops_base.log" ;;
    sweep) OUT="$OUT" sh bench/gpu/mm_sweep.sh 2>&1 | tee "$OUT/sweep.log" ;;
    mm36) sh bench/gpu/mm_sweep36.sh build/bench/vkbench "$OUT/mm36" 2>&1 | tee "$OUT/mm36.log" ;;
    profile)
        LUMEN_VK_VALIDATE=1 build/tests/test_profile 2>&1 | grep -E "PASSED|FAIL|validation" | tee "$OUT/profile.log"
        VAE_PROFILE=1 VAE_CHECK_ONLY=1 python3 bench/gpu/vae.py build/lumen 2>&1 | tee -a "$OUT/profile.log" ;;
    esrgan)
        M=${LUMEN_MODELS:-build/models}
        LUMEN_MODELS=$M LUMEN_DEVICE=vulkan LUMEN_FALLBACK=0 build/lumen bench/gpu/esrgan.lua 2>&1 | tee "$OUT/esrgan.log"
        python3 bench/gpu/peer_esrgan_cuda.py "$M/esrgan-thick/models/x4/model.json" bench 2>&1 | tee -a "$OUT/esrgan.log"
        LUMEN_MODELS=$M LUMEN_DEVICE=vulkan LUMEN_FALLBACK=0 build/lumen bench/gpu/esrgan_profile.lua 2>&1 | tee -a "$OUT/esrgan.log" ;;
    unmapped)
        LUMEN_VK_VALIDATE=1 build/tests/test_vulkan 2>&1 | grep -E "PASSED|FAIL|ERROR|validation" | tee "$OUT/unmapped.log" ;;
    ops-noruns) LUMEN_VK_CONV_RUNS=0 python3 bench/gpu/ops.py build/lumen 2>&1 | tee "$OUT/ops_noruns.log" ;;
    esac
done
