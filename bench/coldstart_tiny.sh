#!/bin/sh
# bench/coldstart_tiny.sh [REPS [STEPS]] - issue 36's cold start on the first Vulkan
# device here (lavapipe on the build machine) with the tiny test pipelines:
# bench/gpu/coldstart.lua (load, first and second image) in fresh processes,
# each cold run on an empty Lumen pipeline cache and an empty Mesa shader
# cache, with the prewarm at load (the default) and without
# (LUMEN_PREWARM=0), REPS times each (default 2), then one warm run (the
# cache the last cold run left).  One line a run: the times coldstart.lua
# prints, the pipelines the load's plan started and those the images then
# met that it had not (LUMEN_VK_PIPELINE_LOG=1), and the first image's
# sha256 (the same in every run of a model: the prewarm changes no byte).
# Tiny SD 1.x: 64x64, STEPS (default 4) steps of euler, cfg 7, f32; tiny
# Z-Image: 64x64, STEPS steps, cfg 0, f32 (lavapipe takes seconds a step).
# Times on a shared 2-core machine are noisy: compare within one run.
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
L="$BUILD/lumen"
REPS=${1:-1}
STEPS=${2:-4}
T=$(mktemp -d "${TMPDIR:-/tmp}/lumen-coldtiny.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
export LUMEN_FALLBACK=0 LUMEN_DEVICE=vulkan
one() {   # one NAME DIR DTYPE SIZE STEPS CFG CACHE [VAR=VALUE]
  name=$1 dir=$2 dt=$3 size=$4 steps=$5 cfg=$6 c=$7
  shift 7
  mkdir -p "$c/xdg" "$c/mesa"
  t0=$(date +%s.%N)
  env XDG_CACHE_HOME="$c/xdg" MESA_SHADER_CACHE_DIR="$c/mesa" LUMEN_VK_PIPELINE_LOG=1 "$@" \
    "$L" bench/gpu/coldstart.lua "$dir" "$dt" "$size" "$steps" "$cfg" "$T/img.st" > "$T/out" 2> "$T/err"
  rc=$?
  t1=$(date +%s.%N)
  load=$(sed -n 's/^load \([0-9.]*\) s.*/\1/p' "$T/out")
  first=$(sed -n 's/^first_image_s //p' "$T/out")
  second=$(sed -n 's/^second_image_s //p' "$T/out")
  planned=$(sed -n 's/^lumen: plan on [^:]*:[0-9]*: \([0-9]*\) pipelines started/\1/p' "$T/err")
  compiled=$(grep -c '^lumen: pipeline .* ms' "$T/err")
  unplanned=$(grep -c '^lumen: pipeline .* ms$' "$T/err")
  sha=$(sha256sum "$T/img.st" 2>/dev/null | cut -c1-16)
  printf '%-8s %-10s rc %s  load %s  first %s  second %s  process %.2f  compiled %s  planned %s  unplanned %s  sha %s\n' \
    "$name" "$mode" "$rc" "$load" "$first" "$second" "$(echo "$t1 - $t0" | bc)" "$compiled" "${planned:--}" \
    "$unplanned" "$sha"
}
for m in "sd1 tests/ref/diffusion/sd1 f32 64 $STEPS 7" "zimage tests/ref/dit/zimage f32 64 $STEPS 0"; do
  set -- $m
  for r in $(seq "$REPS"); do
    for mode in prewarm noprewarm; do
      c="$T/c-$1-$mode-$r"
      if [ $mode = prewarm ]; then one "$@" "$c"; else one "$@" "$c" LUMEN_PREWARM=0; fi
    done
  done
  mode=warm
  one "$@" "$T/c-$1-prewarm-$REPS"
done
