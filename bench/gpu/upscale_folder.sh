#!/bin/sh
# upscale_folder.sh - issue 25: `lumen upscale` over a folder beside the model
# alone.  For each dtype, medians of R runs:
#   model_whole / model_tiled  ms per image: bench/gpu/upscale_model.lua (warm, synced)
#   folder ms/image     the wall time of `lumen upscale` over N images, / N (startup:
#                       Vulkan, model load, pipelines, all included)
#   folder marginal     (T(N images) - T(1 image)) / (N - 1): the steady per-image
#                       cost, startup excluded; pipelined (default) and --serial
#   ratio               model_whole / marginal (issue 25's target: >= 0.7)
# The inputs are N SIZE^2 RGB PNGs of smooth noise (a photo's compressibility, not
# white noise's).  A warm-up run fills the pipeline cache first.
#   SIZE=512 N=8 R=3 MODEL=esrgan-thick SCALE=2 DTYPES="f16 f32" TILE=256 \
#     LUMEN_DEVICE=vulkan sh bench/gpu/upscale_folder.sh
# On lavapipe (tiny, to see it work):
#   SIZE=32 N=3 R=1 MODEL=esrgan-medium LUMEN_DEVICE=vulkan sh bench/gpu/upscale_folder.sh
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
L=${L:-$BUILD/lumen}
SIZE=${SIZE:-512} N=${N:-8} R=${R:-3} MODEL=${MODEL:-esrgan-thick} SCALE=${SCALE:-2}
DTYPES=${DTYPES:-"f16 f32"} TILE=${TILE:-256}
export LUMEN_MODELS=${LUMEN_MODELS:-$BUILD/models}
W=${TMPDIR:-/tmp}/lumen-upscale-folder.$$
trap 'rm -rf "$W"' EXIT INT TERM
mkdir -p "$W/in" || exit 1
"$L" -e "
  for i = 1, $N do
    local lo = lm.rand({1, 3, $SIZE // 8, $SIZE // 8}, {seed = i})
    local img = lm.interpolate(lo, {size = {$SIZE, $SIZE}, mode = 'bilinear'})
    img = (img + lm.rand({1, 3, $SIZE, $SIZE}, {seed = 100 + i}) * 0.05):squeeze(1)
    lm.image.write_png(('$W/in/img%02d.png'):format(i), img)
  end" || exit 1
now() { date +%s.%N; }
# folder_time K DTYPE [FLAGS...]: seconds for `lumen upscale` of the first K images
folder_time() {
  k=$1 dt=$2; shift 2
  rm -rf "$W/out"
  files=$(ls "$W"/in/*.png | head -n "$k")
  t0=$(now)
  "$L" upscale $files -o "$W/out/" --model "$MODEL" --scale "$SCALE" --dtype "$dt" --tile "$TILE" -q "$@" || echo "upscale failed" >&2
  t1=$(now)
  echo "$t0 $t1" | awk '{printf "%.4f\n", $2 - $1}'
}
median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
echo "upscale_folder: $MODEL x$SCALE, $N images of ${SIZE}x$SIZE, tile $TILE, device ${LUMEN_DEVICE:-default}, medians of $R"
for dt in $DTYPES; do
  mo=$("$L" bench/gpu/upscale_model.lua "$MODEL" "$SCALE" "$dt" "$SIZE" "$TILE" "$R") || exit 1
  echo "$mo"
  whole=$(echo "$mo" | awk '/model_whole/ {print $(NF-1)}')
  folder_time 1 "$dt" >/dev/null   # warm-up: the pipeline cache
  # the modes alternate within each repetition, so a machine's changing
  # load weighs on both alike
  : > "$W/t.pipelined.1"; : > "$W/t.pipelined.n"; : > "$W/t.serial.1"; : > "$W/t.serial.n"
  i=0
  while [ $i -lt "$R" ]; do
    for mode in pipelined serial; do
      flag=; [ $mode = serial ] && flag=--serial
      folder_time 1 "$dt" $flag >> "$W/t.$mode.1"
      folder_time "$N" "$dt" $flag >> "$W/t.$mode.n"
    done
    i=$((i + 1))
  done
  for mode in pipelined serial; do
    t1=$(median < "$W/t.$mode.1") tn=$(median < "$W/t.$mode.n")
    echo "$t1 $tn $N $whole" | awk -v dt="$dt" -v mode="$mode" -v m="$MODEL" -v s="$SIZE" '{
      per = $2 / $3 * 1000; marg = $3 > 1 ? ($2 - $1) / ($3 - 1) * 1000 : per
      printf "RESULT folder %s %s %s %d^2: 1 image %.1f ms, %d images %.1f ms = %.1f ms/image, marginal %.1f ms/image, model_whole/marginal %.2f\n",
             m, dt, mode, s, $1 * 1000, $3, $2 * 1000, per, marg, $4 / marg }'
  done
done
