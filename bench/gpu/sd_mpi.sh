#!/bin/sh
# bench/gpu/sd_mpi.sh - `lumen batch` of a seed sweep with a full-size
# architecture (random weights: SD 1.5 / SDXL made by sd_full.py save-only,
# Z-Image-Turbo by zimage_pipe.py build-only) on 1 GPU and under mpirun on 2
# and 4 GPUs (one GPU per rank, from its node-local rank): images/s of each,
# each process's timeline (--timeline: start, load, generate, write, idle),
# and whether every rank count wrote the same bytes.
#   sh bench/gpu/sd_mpi.sh LUMEN WORKDIR "1 2 4" [JOBS] [SIZE] [STEPS] [MODEL]
# MODEL: the folder under WORKDIR (sd15, the default; sdxl; zimage_full, which
# runs at guidance 0 as Turbo does).  The images of NP processes go to
# WORKDIR/MODEL-npNP (sd15: WORKDIR/npNP, as before).  MPIRUN (default
# mpirun) may name a relocated OpenMPI (see device runs in docs/BENCHMARKS.md).
LUMEN=$1; W=$2; NPS=${3:-"1 2"}; JOBS=${4:-16}; SIZE=${5:-512}; STEPS=${6:-20}; MODEL=${7:-sd15}
MPIRUN=${MPIRUN:-mpirun}
P=$W/params.jsonl; tag=np
[ "$MODEL" = sd15 ] || { P=$W/$MODEL-params.jsonl; tag=$MODEL-np; }
case $MODEL in
  zimage*) extra='"cfg": 0' ;;
  *) extra='"negative": "blurry", "cfg": 7' ;;
esac
: > "$P"
i=1
while [ $i -le "$JOBS" ]; do
  echo "{\"seed\": $i, \"prompt\": \"a lighthouse on a cliff at dusk, oil painting\", $extra, \"steps\": $STEPS, \"sampler\": \"euler\", \"size\": \"${SIZE}x${SIZE}\"}" >> "$P"
  i=$((i + 1))
done
for np in $NPS; do
  out=$W/$tag$np
  rm -rf "$out"; mkdir -p "$out"
  tl=$W/$tag$np.timeline.jsonl; rm -f "$tl"
  s=$(date +%s.%N)
  if [ "$np" = 1 ]; then
    "$LUMEN" batch samples/batch_generate.lua --params "$P" -o "$out/{index}_{seed}.png" --progress off --timeline "$tl" -- "$W/$MODEL" > "$W/$tag$np.log" 2>&1
  else
    $MPIRUN --allow-run-as-root --oversubscribe -np "$np" -x LD_LIBRARY_PATH -x VK_DRIVER_FILES -x XDG_CACHE_HOME -x NCCL_NVLS_ENABLE -x LUMEN_SPIRV \
      "$LUMEN" batch samples/batch_generate.lua --params "$P" -o "$out/{index}_{seed}.png" --progress off --timeline "$tl" -- "$W/$MODEL" > "$W/$tag$np.log" 2>&1
  fi
  rc=$?
  e=$(date +%s.%N)
  n=$(ls "$out" | grep -c '\.png$')
  awk -v m="$MODEL" -v np="$np" -v rc="$rc" -v n="$n" -v s="$s" -v e="$e" \
    'BEGIN { printf "%s np %s: rc %s, %d images in %.1f s, %.3f images/s\n", m, np, rc, n, e - s, n / (e - s) }'
  tail -2 "$W/$tag$np.log"
  cat "$tl" 2>/dev/null
  if [ "$np" != 1 ] && [ -d "$W/${tag}1" ]; then
    d=0
    for f in "$W/${tag}1"/*.png; do cmp -s "$f" "$out/$(basename "$f")" || d=$((d + 1)); done
    echo "$MODEL np $np: $d of $(ls "$W/${tag}1" | grep -c '\.png$') images differ from one process"
  fi
done
