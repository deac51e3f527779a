#!/bin/sh
# limits.sh - issue 25's "for a target not met, the profile that shows the
# limit": one run per unmet target with LUMEN_PROFILE=total (each kernel's GPU
# time, docs/PROFILE.md) and LUMEN_VK_STATS=1 (each pipeline's registers,
# shared memory and spills from the driver, docs/VULKAN.md), in one call.
# Run from the repository root on the GPU machine, after the usual set-up
# (LD_LIBRARY_PATH, VK_DRIVER_FILES; see bench/gpu/device_run.sh):
#   OUT=/path/to/logs sh bench/gpu/limits.sh [steps]
# steps (default all): mm (f16 and bf16 GEMM 2048-8192, vkbench), attn (the
# D128 attention shapes, vkbench), conv (3x3 128->128 at 512² in f16, the
# ESRGAN-sized f32 convs, conv.lua), vae (the SD VAE decoder whole, vae.py
# with VAE_PROFILE=1: needs python3 with torch), esrgan (esrgan-thick x2 at
# 512² in f32 and f16, esrgan_profile.lua: needs $LUMEN_MODELS/esrgan-thick),
# upscale (`lumen upscale` of 4 512² images, x2 f16, profiled: host work
# against GPU work).
# Each step's log is $OUT/limits-STEP.log; the summary after each step lists
# the profile's top rows and the statistics of the pipelines the step made.
# LIMITS_QUICK=1: small sizes (a smoke run on lavapipe, which has no
# statistics and says so).
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
OUT=${OUT:-/tmp/out}
L="$BUILD/lumen"
export LUMEN_MODELS=${LUMEN_MODELS:-$BUILD/models}
mkdir -p "$OUT" || exit 1
q=${LIMITS_QUICK:-0}
steps=${*:-mm attn conv vae esrgan upscale}
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
date -u +"date: %Y-%m-%d %H:%M UTC"
git log -1 --format="commit: %h" 2>/dev/null || cat "$BUILD/commit" 2>/dev/null

# step NAME CMD...: CMD under the profile and the statistics, its log kept
step() {
    name=$1
    shift
    log="$OUT/limits-$name.log"
    t0=$(date +%s)
    env LUMEN_DEVICE=vulkan LUMEN_FALLBACK=0 LUMEN_VK_STATS=1 LUMEN_PROFILE=total "$@" >"$log" 2>&1
    rc=$?
    echo "=== $name: rc $rc in $(( $(date +%s) - t0 )) s ($log)"
    # the whole-run table: its header line and the rows after it
    awk '/^lumen profile: .* in all/ {p = 1; n = 0} p && n < 12 {print; n++}' "$log" | tail -12
    # one line per pipeline made (the shader, its constants, the driver's numbers)
    grep "^lumen: vulkan:[0-9]* pipeline " "$log" | sed 's/^lumen: //' | cut -c1-300 | sort -u | head -40
    grep "has no pipeline statistics\|fallback" "$log" | sort | uniq -c | head -5
}

for s in $steps; do
    case $s in
    mm)
        sizes=2048,4096,8192
        [ "$q" = 1 ] && sizes=256
        step mm VKBENCH_ONLY=mm VKBENCH_SIZES=$sizes VKBENCH_DTYPE=f16,bf16 "$BUILD/bench/vkbench" $([ "$q" = 1 ] && echo quick) ;;
    attn)
        step attn VKBENCH_ONLY=attn VKBENCH_ATTN_D=128 "$BUILD/bench/vkbench" $([ "$q" = 1 ] && echo quick) ;;
    conv)
        hw=512
        [ "$q" = 1 ] && hw=32
        step conv "$L" bench/gpu/conv.lua conv:1:128:128:$hw:3:f16 conv:1:64:32:$hw:3:f32 \
            conv:1:96:32:$hw:3:f32 conv:1:192:64:$hw:3:f32 conv:1:64:64:$hw:3:f32 ;;
    vae)
        step vae VAE_PROFILE=1 python3 bench/gpu/vae.py "$L" $([ "$q" = 1 ] && echo quick) ;;
    esrgan)
        size=512
        [ "$q" = 1 ] && size=16
        step esrgan ESRGAN_SCALE=2 ESRGAN_SIZE=$size ESRGAN_DTYPES=f32,f16 ESRGAN_ROWS=16 \
            "$L" bench/gpu/esrgan_profile.lua ;;
    upscale)
        size=512
        [ "$q" = 1 ] && size=32
        w=${TMPDIR:-/tmp}/lumen-limits.$$
        mkdir -p "$w/in" || exit 1
        "$L" -e "for i = 1, 4 do
            local img = lm.interpolate(lm.rand({1, 3, $size // 8, $size // 8}, {seed = i}),
                                       {size = {$size, $size}, mode = 'bilinear'}):squeeze(1)
            lm.image.write_png(('$w/in/img%d.png'):format(i), img)
          end" || exit 1
        step upscale "$L" upscale "$w"/in/img1.png "$w"/in/img2.png "$w"/in/img3.png "$w"/in/img4.png \
            -o "$w/out/" --model esrgan-thick --scale 2 --dtype f16 -q
        rm -rf "$w" ;;
    *) echo "limits.sh: unknown step $s" >&2; exit 2 ;;
    esac
done
