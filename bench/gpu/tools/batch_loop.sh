#!/bin/sh
# bench/gpu/tools/batch_loop.sh - issue 36's "`lumen batch` of a generation at
# or above one-at-a-time pipe:generate", both measured the same way in one
# call: process wall (`date` around the command: start, Vulkan, the load,
# the first image, every PNG, the exit) and the per-image cadence (the
# interval between consecutive PNGs by their mtimes, bench/gpu/tools/
# cadence.py, the same for both).  The one-at-a-time peer is gen_loop.lua: a
# user's loop in one process (load, then per job pipe:generate, the copy to
# the host, lm.image.write_png with a parameters text), nothing left out;
# the earlier figure (gen_one.lua, docs/BENCHMARKS.md "Tools at the model's
# speed") counted neither the load, the first image, the PNGs nor the exit.
# Then `lumen batch` in the serial order (LUMEN_BATCH_SERIAL=1: each PNG
# written between two generations, as before 2026-11-29) against the
# default (each job's PNG written inside the next job's generation), their
# bytes compared; and --batch-size 4 stacked (one UNet call for 4 images)
# against batch size 1, with the kernels' size-dependent choices as they
# are and pinned (PIN below), their bytes compared (stacked runs write a
# group's PNGs together: their cadence is within a group; read their wall).
#   sh bench/gpu/tools/batch_loop.sh LUMEN WORKDIR [N]
# WORKDIR/sd15: the full-size SD 1.5 with random weights; made when absent
# by `python3 bench/gpu/sd_full.py LUMEN WORKDIR sd15 save-only` (torch and
# diffusers needed for that step only).  N: images a run (16).  Run from the
# repository root.  SIZE, STEPS and MODEL (a folder) override 512, 20 and
# WORKDIR/sd15 (a check on a small fixture).  Prints RESULT, CADENCE, TIMELINE and BYTES lines.
# ONLY=stack: the stacked comparison alone (warm-up unpinned, batch1, stk4,
# their bytes): with the nodes' share (lm_share_set, backends/vulkan/
# choice.h) stk4 should give batch1's bytes, 0 of N differ.
LUMEN=$1; W=$2; N=${3:-16}
SIZE=${SIZE:-512}; STEPS=${STEPS:-20}; M=${MODEL:-$W/sd15}
B=bench/gpu/tools
[ -x "$LUMEN" ] && [ -n "$W" ] || { echo "usage: sh $B/batch_loop.sh LUMEN WORKDIR [N]"; exit 2; }
mkdir -p "$W"
if [ ! -f "$M/model_index.json" ]; then
  python3 bench/gpu/sd_full.py "$LUMEN" "$W" sd15 save-only || exit 1
fi
P=$W/bl_params.jsonl; : > "$P"
i=1
while [ $i -le "$N" ]; do
  echo "{\"seed\": $i, \"prompt\": \"a lighthouse on a cliff at dusk, oil painting\", \"negative\": \"blurry\", \"steps\": $STEPS, \"cfg\": 7, \"sampler\": \"euler\", \"size\": \"${SIZE}x${SIZE}\"}" >> "$P"
  i=$((i + 1))
done
# the sample with stacked = true (one UNet call for a group), under the
# sample's name so the PNGs' text is the same
mkdir -p "$W/stk"
sed 's/batch = #ps,/batch = #ps, stacked = true,/' \
  samples/batch_generate.lua > "$W/stk/batch_generate.lua"
grep -q "stacked = true" "$W/stk/batch_generate.lua" || echo "batch_loop.sh: the sample changed: stk runs in lanes"
# the size-dependent kernel choices pinned (each otherwise depends on the
# batch: conv split-K parts, the GEMM tile and its split-K parts, the D=512
# attention split, the long-row norm split, the f32 tiles; backends/vulkan)
PIN="LUMEN_VK_CONV_SPLITK=1 LUMEN_VK_COOP=k64s1 LUMEN_VK_MM_SPLITK=1 LUMEN_VK_ATTN_SPLIT=0 LUMEN_VK_NORM_SPLIT=0 LUMEN_VK_MM_F32=128x128 LUMEN_VK_CONV_F32=128x128"
now() { date +%s.%N; }
wall() { awk -v n="$1" -v k="$2" -v a="$3" -v b="$4" -v rc="$5" \
  'BEGIN{printf "RESULT %s: rc %d, %d images, process wall %.2f s = %.3f images/s (%.1f ms an image)\n", n, rc, k, b-a, k/(b-a), (b-a)*1000/k}'; }
loop() { # name
  rm -rf "$W/o_$1"; a=$(now)
  timeout 120 "$LUMEN" $B/gen_loop.lua "$M" "$N" "$W/o_$1" "$SIZE" "$STEPS" > "$W/log_$1" 2>&1; rc=$?; b=$(now)
  wall "$1" "$(ls "$W/o_$1" | grep -c png)" "$a" "$b" $rc; grep RESULT "$W/log_$1" | sed 's/^RESULT/  /'
  python3 $B/cadence.py "$W/o_$1" "CADENCE $1"
}
batch() { # name script batch-size [env...]
  n=$1 s=$2 bs=$3; shift 3; rm -rf "$W/o_$n"; a=$(now)
  env "$@" timeout 120 "$LUMEN" batch "$s" --params "$P" -o "$W/o_$n/{index}_{seed}.png" --batch-size "$bs" \
    --progress off --timeline "$W/tl_$n.jsonl" -- "$M" > "$W/log_$n" 2>&1; rc=$?; b=$(now)
  wall "$n" "$(ls "$W/o_$n" | grep -c png)" "$a" "$b" $rc; grep timeline: "$W/log_$n" | sed 's/^batch: timeline:/  TIMELINE/'
  python3 $B/cadence.py "$W/o_$n" "CADENCE $n"
}
bytes() { # a b
  d=0; for f in "$W/o_$1"/*.png; do cmp -s "$f" "$W/o_$2/$(basename "$f")" || d=$((d + 1)); done
  echo "BYTES $2 against $1: $d of $(ls "$W/o_$1" | grep -c png) differ"
}
echo "== $(date -u) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null) $(git rev-parse --short HEAD 2>/dev/null)"
# warm-up: the pipeline cache filled (one image and a stacked 4, pinned
# or not), the weights in the page cache
PINS='"" "$PIN"'; [ "$ONLY" = stack ] && PINS='""'
eval "set -- $PINS"
for pin in "$@"; do
  cat > "$W/warm.lua" <<'L'
local pipe = lm.models.load(arg[1])
pipe:generate{prompt = "x", negative = "blurry", steps = 1, cfg = 7, sampler = "euler", seed = 1, size = tonumber(arg[2])}:to("cpu"):eval()
pipe:generate{prompt = {"x", "y", "z", "w"}, negative = {"b", "b", "b", "b"}, seed = {1, 2, 3, 4}, batch = 4, steps = 1,
              cfg = 7, sampler = "euler", size = tonumber(arg[2]), stacked = true}:to("cpu"):eval()
L
  env $pin timeout 120 "$LUMEN" "$W/warm.lua" "$M" "$SIZE" > /dev/null 2>&1
done
if [ "$ONLY" = stack ]; then
  batch batch1 samples/batch_generate.lua 1
  batch stk4 "$W/stk/batch_generate.lua" 4
  bytes batch1 stk4
  echo "== end $(date -u)"
  exit 0
fi
for r in 1 2; do
  loop loop$r
  batch batch$r samples/batch_generate.lua 1
done
batch serial samples/batch_generate.lua 1 LUMEN_BATCH_SERIAL=1
bytes serial batch1
bytes batch1 batch2
batch stk4 "$W/stk/batch_generate.lua" 4
bytes batch1 stk4
batch bs1_pin samples/batch_generate.lua 1 $PIN
batch stk4_pin "$W/stk/batch_generate.lua" 4 $PIN
bytes bs1_pin stk4_pin
bytes batch1 bs1_pin
echo "== end $(date -u)"
