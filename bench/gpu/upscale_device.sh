#!/bin/sh
# upscale_device.sh - one `run` call on the H100 for issue 25, from the
# repository root of the device's copy, with G the folder upscale_stage.sh
# filled (carry [".gl/debs", G]):
#   G=.gl/h-upscale sh .gl/h-upscale/bench/upscale_device.sh
# 1. test_vk_upload under the validation layer with synchronization
#    validation, unmapped (the H100's own) memory: recorded uploads
# 2. bench/gpu/upscale_folder.sh: esrgan-thick x2, 8 images of 512^2, f16
#    then f32, model alone vs lumen upscale (pipelined and --serial)
# Logs under $OUT.
G=${G:-.gl/h-upscale}; O=${OUT:-/tmp/out}; mkdir -p "$O" build/tests bench/gpu
for f in $(cd "$G/build" && find . -name '*.xz'); do xz -dc "$G/build/$f" > "build/${f%.xz}"; done
chmod +x build/lumen build/tests/*
cp "$G"/bench/upscale_folder.sh "$G"/bench/upscale_model.lua bench/gpu/
mkdir -p /tmp/root && for f in .gl/debs/*.deb; do dpkg -x "$f" /tmp/root; done
V=$(ls .gl/s3/vulkan-validationlayers_1.4*.deb .gl/debs/vulkan-validationlayers_*.deb 2>/dev/null | head -1)
mkdir -p /tmp/vvl && [ -n "$V" ] && dpkg -x "$V" /tmp/vvl
export LD_LIBRARY_PATH=/tmp/vvl/usr/lib/x86_64-linux-gnu:/tmp/root/usr/lib/x86_64-linux-gnu:/tmp/root/usr/lib/x86_64-linux-gnu/openblas-pthread
export VK_LAYER_PATH=/tmp/vvl/usr/share/vulkan/explicit_layer.d
for j in /usr/share/vulkan/icd.d/nvidia_icd.json /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json; do [ -f "$j" ] && { export VK_DRIVER_FILES="$j"; break; }; done
export XDG_CACHE_HOME=/tmp/lumen-cache LUMEN_MODELS="$G/models" LUMEN_DEVICE=vulkan LUMEN_FALLBACK=0
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; date -u
LUMEN_VK_VALIDATE=1 VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT \
  timeout 60 build/tests/test_vk_upload > "$O/vk_upload.log" 2>&1
echo "== test_vk_upload rc $?"; grep -E "PASSED|FAILED|alidation" "$O/vk_upload.log" | head -5
SIZE=${SIZE:-512} N=${N:-8} R=${R:-3} DTYPES=${DTYPES:-"f16 f32"} timeout ${BENCH_TIMEOUT:-400} \
  sh bench/gpu/upscale_folder.sh 2>&1 | tee "$O/upscale_folder.log"
date -u
