#!/bin/sh
# tests/samples/run.sh - runs each image sample in samples/ at a small size on
# the CPU and on Vulkan (lavapipe here) and checks its picture: the PNG has
# the asked size and is not constant, the same seed gives the same bytes
# twice, another seed another picture, the Gray-Scott field has a pattern,
# and Vulkan's picture matches the CPU's within one 8-bit step (1/255) at
# every value (Julia and Gray-Scott, chaotic iterations, at all but 0.5% of
# the values).  Ends with "N passed, N failed, N skipped".
# Where the build has no Vulkan the Vulkan checks are skipped (and counted);
# where it has Vulkan and no device answers, they fail.
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
LUMEN="$BUILD/lumen"
OUT="$BUILD/test-samples"
CHECK="tests/samples/check.lua"
rm -rf "$OUT" && mkdir -p "$OUT" || exit 1

passed=0 failed=0 skipped=0
ok()   { passed=$((passed + 1)); echo "ok   $1"; }
bad()  { failed=$((failed + 1)); echo "FAIL $1"; }
# t NAME COMMAND...: one check; its output is shown when it fails
t() {
  name=$1; shift
  if log=$("$@" 2>&1); then ok "$name"; else bad "$name"; echo "$log" | sed 's/^/     /'; fi
}
check() { "$LUMEN" "$CHECK" "$@"; }
# run DEVICE LOG ENV... -- SAMPLE ARGS...: one sample run, its output in LOG
run() {
  dev=$1 log=$2; shift 2
  env LUMEN_DEVICE="$dev" "$@" >"$log" 2>&1
}

vulkan=no
grep -q 'VK_ENABLED := yes' "$BUILD/config.mk" 2>/dev/null && vulkan=yes
devices="cpu"
if [ $vulkan = yes ]; then
  devices="cpu vulkan"
  t "a Vulkan device answers" env LUMEN_DEVICE=vulkan "$LUMEN" \
    -e 'assert(lm.device():match("^vulkan"), "default device " .. lm.device())' </dev/null
fi

# sample runs: NAME, the environment and the command line per device
for dev in $devices; do
  d="$OUT/$dev"; mkdir -p "$d"
  t "$dev: cppn.lua seed 5 at 96x64" run $dev "$d/cppn.log" CPPN_WIDTH=96 CPPN_HEIGHT=64 \
    "$LUMEN" samples/cppn.lua 5 "$d/cppn5.png"
  t "$dev: julia.lua at 96x64" run $dev "$d/julia.log" JULIA_SIZE=96 JULIA_ITERS=64 \
    "$LUMEN" samples/julia.lua "$d/julia.png"
  t "$dev: julia.lua mandelbrot at 96x64" run $dev "$d/mandel.log" JULIA_SIZE=96 JULIA_ITERS=64 \
    "$LUMEN" samples/julia.lua "$d/mandel.png" mandelbrot
  t "$dev: grayscott.lua 64x64, 600 steps" run $dev "$d/gs.log" GS_SIZE=64 GS_STEPS=600 \
    "$LUMEN" samples/grayscott.lua "$d/gs.png" 2
  t "$dev: noise.lua 64x64" run $dev "$d/noise.log" NOISE_SIZE=64 \
    "$LUMEN" samples/noise.lua "$d/noise.png" 3
done
[ $vulkan = yes ] || { skipped=$((skipped + 5)); echo "skip Vulkan runs: Vulkan is not built"; }

# the pictures on the CPU
c="$OUT/cpu"
t "cppn: 96x64" check size "$c/cppn5.png" 96 64
t "cppn: not constant" check varied "$c/cppn5.png" 0.05
t "julia: 96x64" check size "$c/julia.png" 96 64
t "julia: not constant" check varied "$c/julia.png" 0.05
t "mandelbrot: 96x64" check size "$c/mandel.png" 96 64
t "mandelbrot: not the julia picture" sh -c "! cmp -s '$c/julia.png' '$c/mandel.png'"
t "grayscott: 64x64" check size "$c/gs.png" 64 64
t "grayscott: a pattern formed" check pattern "$c/gs.png"
t "noise: 64x64" check size "$c/noise.png" 64 64
t "noise: not constant" check varied "$c/noise.png" 0.05

# the same seed gives the same bytes; another seed another picture
same() { # NAME FILE ENV... -- the command that remade FILE into FILE.again
  name=$1 file=$2; shift 2
  if run cpu "$file.log" "$@" && cmp "$file" "$file.again"; then ok "$name"
  else bad "$name"; cat "$file.log"; fi
}
same "cppn: seed 5 twice, same bytes" "$c/cppn5.png" CPPN_WIDTH=96 CPPN_HEIGHT=64 \
  "$LUMEN" samples/cppn.lua 5 "$c/cppn5.png.again"
same "grayscott: seed 2 twice, same bytes" "$c/gs.png" GS_SIZE=64 GS_STEPS=600 \
  "$LUMEN" samples/grayscott.lua "$c/gs.png.again" 2
same "noise: seed 3 twice, same bytes" "$c/noise.png" NOISE_SIZE=64 \
  "$LUMEN" samples/noise.lua "$c/noise.png.again" 3
run cpu "$c/cppn6.log" CPPN_WIDTH=96 CPPN_HEIGHT=64 "$LUMEN" samples/cppn.lua 6 "$c/cppn6.png"
t "cppn: seed 6 is another picture" sh -c "! cmp -s '$c/cppn5.png' '$c/cppn6.png'"
run cpu "$c/noise4.log" NOISE_SIZE=64 "$LUMEN" samples/noise.lua "$c/noise4.png" 4
t "noise: seed 4 is another picture" sh -c "! cmp -s '$c/noise.png' '$c/noise4.png'"
t "cppn: generate(params) from another script" check generate samples/cppn.lua
# lumen batch loads cppn.lua as a module: same pixels as the script, and no
# picture of its own (cppn_1.png) in the working directory
b="$OUT/batch"; mkdir -p "$b"
lumen_abs="$(cd "$BUILD" && pwd)/lumen"
t "cppn: lumen batch seeds 5-6 run" sh -c "cd '$b' && CPPN_WIDTH=96 CPPN_HEIGHT=64 \
  '$lumen_abs' batch '$PWD/samples/cppn.lua' --seeds 5-6 -o %d.png --progress off"
t "cppn: lumen batch job 1 (seed 5) is the script's picture" check close "$b/1.png" "$c/cppn5.png" 0 0
t "cppn: lumen batch wrote only its outputs" sh -c "cd '$b' && test ! -e cppn_1.png && test -s 2.png"

# Vulkan against the CPU
if [ $vulkan = yes ]; then
  v="$OUT/vulkan"
  t "vulkan: cppn within 1/255 of the CPU" check close "$v/cppn5.png" "$c/cppn5.png" 0.0040 0
  t "vulkan: julia within 1/255 at 99.5%" check close "$v/julia.png" "$c/julia.png" 0.0040 0.005
  t "vulkan: mandelbrot within 1/255 at 99.5%" check close "$v/mandel.png" "$c/mandel.png" 0.0040 0.005
  t "vulkan: grayscott within 1/255 at 99.5%" check close "$v/gs.png" "$c/gs.png" 0.0040 0.005
  t "vulkan: grayscott a pattern formed" check pattern "$v/gs.png"
  t "vulkan: noise within 1/255 of the CPU" check close "$v/noise.png" "$c/noise.png" 0.0040 0
  t "vulkan: generate(params) on the device" env LUMEN_DEVICE=vulkan "$LUMEN" "$CHECK" \
    generate samples/cppn.lua
  t "compare_backends.lua: 2 seeds agree, exit 0" env CMP_SIZE=48 \
    "$LUMEN" samples/compare_backends.lua "$OUT" 1 2
  t "compare_backends.lua: sheets and diff written" sh -c \
    "for f in cpu vulkan diff; do test -s '$OUT'/compare_\$f.png || exit 1; done"
else
  skipped=$((skipped + 9)); echo "skip Vulkan comparisons: Vulkan is not built"
fi

echo "$passed passed, $failed failed, $skipped skipped"
[ $failed = 0 ]
