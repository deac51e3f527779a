#!/bin/sh
# bench/gpu/sd_mpi.sh - `lumen batch` of a seed sweep with the full-size SD 1.5
# architecture (random weights, made by sd_full.py save-only) on 1 GPU and
# under mpirun on 2 and 4 GPUs (one GPU per rank, from its node-local rank):
# images/s of each, and whether every rank count wrote the same bytes.
#   sh bench/gpu/sd_mpi.sh LUMEN WORKDIR "1 2 4" [JOBS] [SIZE] [STEPS]
# MPIRUN (default mpirun) may name a relocated OpenMPI (see device runs in
# docs/BENCHMARKS.md).
LUMEN=$1; W=$2; NPS=${3:-"1 2"}; JOBS=${4:-16}; SIZE=${5:-512}; STEPS=${6:-20}
MPIRUN=${MPIRUN:-mpirun}
P=$W/params.jsonl
: > "$P"
i=1
while [ $i -le "$JOBS" ]; do
  echo "{\"seed\": $i, \"prompt\": \"a lighthouse on a cliff at dusk, oil painting\", \"negative\": \"blurry\", \"steps\": $STEPS, \"cfg\": 7, \"sampler\": \"euler\", \"size\": \"${SIZE}x${SIZE}\"}" >> "$P"
  i=$((i + 1))
done
for np in $NPS; do
  out=$W/np$np
  rm -rf "$out"; mkdir -p "$out"
  s=$(date +%s.%N)
  if [ "$np" = 1 ]; then
    "$LUMEN" batch samples/batch_generate.lua --params "$P" -o "$out/{index}_{seed}.png" -- "$W/sd15" > "$W/np$np.log" 2>&1
  else
    $MPIRUN --allow-run-as-root --oversubscribe -np "$np" -x LD_LIBRARY_PATH -x VK_DRIVER_FILES -x XDG_CACHE_HOME -x NCCL_NVLS_ENABLE \
      "$LUMEN" batch samples/batch_generate.lua --params "$P" -o "$out/{index}_{seed}.png" -- "$W/sd15" > "$W/np$np.log" 2>&1
  fi
  rc=$?
  e=$(date +%s.%N)
  n=$(ls "$out" | grep -c '\.png$')
  awk -v np="$np" -v rc="$rc" -v n="$n" -v s="$s" -v e="$e" \
    'BEGIN { printf "np %s: rc %s, %d images in %.1f s, %.3f images/s\n", np, rc, n, e - s, n / (e - s) }'
  tail -3 "$W/np$np.log"
  if [ "$np" != 1 ] && [ -d "$W/np1" ]; then
    d=0
    for f in "$W/np1"/*.png; do cmp -s "$f" "$out/$(basename "$f")" || d=$((d + 1)); done
    echo "np $np: $d of $(ls "$W/np1" | grep -c '\.png$') images differ from one process"
  fi
done
