#!/bin/sh
# bench/gpu/sd_mpi_resume.sh - a multi-GPU `lumen batch` killed midway and run
# again: one rank is SIGKILLed AFTER seconds into the run (mpirun then stops the
# others), the same command is run again (a resume: finished images are kept),
# and the result is compared with a one-process run's images.
#   sh bench/gpu/sd_mpi_resume.sh LUMEN WORKDIR NP AFTER
# WORKDIR holds sd15/ and params.jsonl (bench/gpu/sd_mpi.sh made them) and
# np1/ (its one-process images).
LUMEN=$1; W=$2; NP=${3:-2}; AFTER=${4:-10}
MPIRUN=${MPIRUN:-mpirun}
out=$W/resume$NP
rm -rf "$out"; mkdir -p "$out"
run() {
  $MPIRUN --allow-run-as-root --oversubscribe -np "$NP" -x LD_LIBRARY_PATH -x VK_DRIVER_FILES -x XDG_CACHE_HOME \
    -x NCCL_NVLS_ENABLE "$LUMEN" batch samples/batch_generate.lua --params "$W/params.jsonl" \
    -o "$out/{index}_{seed}.png" --progress off -- "$W/sd15" >> "$W/resume.log" 2>&1
}
run &
sleep "$AFTER"
victim=$(pgrep -f "lumen batch samples/batch_generate.lua" | tail -1)
echo "killing rank process $victim after $AFTER s; $(ls "$out" | grep -c '\.png$') images written"
kill -9 "$victim"
wait
echo "first run ended; $(ls "$out" | grep -c '\.png$') images; resuming"
s=$(date +%s.%N)
run
e=$(date +%s.%N)
n=$(ls "$out" | grep -c '\.png$')
echo "resumed run: $n images in $(awk -v s="$s" -v e="$e" 'BEGIN { printf "%.1f", e - s }') s"
d=0
for f in "$W/np1"/*.png; do cmp -s "$f" "$out/$(basename "$f")" || d=$((d + 1)); done
echo "resume np $NP: $d of $(ls "$W/np1" | grep -c '\.png$') images differ from one process"
