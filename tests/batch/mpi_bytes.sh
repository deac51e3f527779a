#!/bin/sh
# tests/batch/mpi_bytes.sh - the samples' PNGs are the same bytes whatever
# the thread count and the MPI layout (docs/BATCH.md, "Reproducibility"):
# samples/batch_cppn.lua and samples/fashion_batch.lua rendered by one
# process at LUMEN_THREADS=1 (the reference), at 2 and 3 threads, by
# `mpirun -np 2` (each rank then runs on the cores it is bound to), by two
# ranks with different thread counts, and with --batch-size.  Until GEMM and
# conv were cut by problem size, 5 of 8 CPPN images differed between 1 and
# 2 threads, and under mpirun.  Runs on the CPU (LUMEN_DEVICE=cpu): across
# devices only tolerances are promised.
# Skips (77) when mpirun is missing or lumen was built without MPI.
# Prints "N passed, N failed".
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
LUMEN="$(pwd)/$BUILD/lumen"
if ! command -v mpirun >/dev/null 2>&1; then echo "skip: no mpirun (openmpi-bin)"; exit 77; fi
if ! grep -q '^MPI_ENABLED := yes' "$BUILD/config.mk" 2>/dev/null; then
  echo "skip: lumen built without MPI (no ompi-c from pkg-config)"; exit 77
fi
T=$(mktemp -d /tmp/lumen-mpi-bytes.XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(pwd)/tests/batch/lib.sh"
# lib.sh's same_set, also listing in $T/diff the PNGs that differ
same_set() {
  (cd "$1" && ls | grep '\.png$') > "$T/la"
  (cd "$2" && ls | grep '\.png$') > "$T/lb"
  : > "$T/diff"
  cmp -s "$T/la" "$T/lb" || { echo "other files: $(tr '\n' ' ' < "$T/lb")" > "$T/diff"; return 1; }
  [ -s "$T/la" ] || { echo "no images" > "$T/diff"; return 1; }
  while read -r f; do cmp -s "$1/$f" "$2/$f" || echo "$f differs" >> "$T/diff"; done < "$T/la"
  [ ! -s "$T/diff" ]
}

MPIRUN="mpirun --oversubscribe"
[ "$(id -u)" = 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
# as tests/batch/mpi.sh: OpenMPI's own components leak at exit
if grep -q fsanitize "$BUILD/flags.stamp" 2>/dev/null; then
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
  export ASAN_OPTIONS
  MPIRUN="$MPIRUN -x ASAN_OPTIONS"
fi
LUMEN_DEVICE=cpu
export LUMEN_DEVICE
unset LUMEN_THREADS

# sample NAME SCRIPT JOBS [-- ARGS]: every layout against one thread
sample() {
  name=$1; script=$2; jobs=$3; shift 3
  LUMEN_THREADS=1 "$LUMEN" batch "$script" $jobs -o "$T/$name-t1/%03d.png" --progress off "$@" > "$T/log" 2>&1
  check "$name: one process, one thread" '[ $? = 0 ] && [ "$(ls "$T/$name-t1" | grep -c "\.png$")" -gt 0 ]' "$T/log"
  for t in 2 3; do
    LUMEN_THREADS=$t "$LUMEN" batch "$script" $jobs -o "$T/$name-t$t/%03d.png" --progress off "$@" > "$T/log" 2>&1
    check "$name: LUMEN_THREADS=$t byte-identical to 1" '[ $? = 0 ] && same_set "$T/$name-t1" "$T/$name-t$t"' "$T/diff"
  done
  $MPIRUN -np 2 "$LUMEN" batch "$script" $jobs -o "$T/$name-np2/%03d.png" --progress lines "$@" > "$T/log" 2>&1
  check "$name: mpirun -np 2 byte-identical to one process" '[ $? = 0 ] && same_set "$T/$name-t1" "$T/$name-np2"' "$T/diff"
  grep "processes made" "$T/log"
  # two ranks that differ in threads (an MPMD launch; rank 0, which takes
  # most of a short run, at 3 threads, unbound: mpirun binds each rank to a
  # core by default, and OpenBLAS used to run on one thread there)
  $MPIRUN --bind-to none -np 1 env LUMEN_THREADS=3 "$LUMEN" batch "$script" $jobs -o "$T/$name-mix/%03d.png" --progress lines "$@" : \
    -np 1 env LUMEN_THREADS=1 "$LUMEN" batch "$script" $jobs -o "$T/$name-mix/%03d.png" --progress lines "$@" \
    > "$T/log" 2>&1
  check "$name: mpirun, ranks at 3 and 1 threads, byte-identical" '[ $? = 0 ] && same_set "$T/$name-t1" "$T/$name-mix"' "$T/diff"
  grep "processes made" "$T/log"
  $MPIRUN -np 2 "$LUMEN" batch "$script" $jobs -o "$T/$name-bs/%03d.png" --progress off --batch-size 3 "$@" \
    > "$T/log" 2>&1
  check "$name: mpirun -np 2 --batch-size 3 byte-identical" '[ $? = 0 ] && same_set "$T/$name-t1" "$T/$name-bs"' "$T/diff"
}

sample cppn samples/batch_cppn.lua "--seeds 1-8" -- 128
sample fashion samples/fashion_batch.lua "--seeds 1-6"

echo "$pass passed, $fail failed"
[ $fail = 0 ]
