#!/bin/sh
# tests/batch/mpi.sh - `mpirun -np 2 lumen batch` on the CPU: the same
# bytes as one process, one complete manifest, work shared by both ranks,
# resume across rank counts (a one-process run killed midway finished by two
# processes, and the other way round; one rank of two killed midway, two
# finish), failures counted by rank 0, the
# output folder held by rank 0 for the whole run.
# Skips (77) when lumen was built without MPI or mpirun is missing.
# Prints "N passed, N failed".
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
LUMEN="$(pwd)/$BUILD/lumen"
JOB="$(pwd)/tests/batch/job.lua"
if ! grep -q '^MPI_ENABLED := yes' "$BUILD/config.mk" 2>/dev/null; then
  echo "skip: lumen built without MPI (no ompi-c from pkg-config)"; exit 77
fi
if ! command -v mpirun >/dev/null 2>&1; then echo "skip: no mpirun (openmpi-bin)"; exit 77; fi
T=$(mktemp -d /tmp/lumen-batch-mpi.XXXXXX)
trap 'rm -rf "$T"' EXIT
. tests/batch/lib.sh
# the manifest's records without the output directory (it differs per run)
records() { sed 's|"file":"[^"]*/|"file":"|' "$1"; }

MPIRUN="mpirun --oversubscribe"
[ "$(id -u)" = 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
# OpenMPI's components leak at exit from modules it has unloaded (no symbols
# for a suppression); Lumen's own leaks are checked by tests/batch/run.sh
if grep -q fsanitize "$BUILD/flags.stamp" 2>/dev/null; then
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
  export ASAN_OPTIONS
  MPIRUN="$MPIRUN -x ASAN_OPTIONS"
fi
np() { n=$1; shift; $MPIRUN -np "$n" "$LUMEN" batch "$JOB" "$@"; }

"$LUMEN" batch "$JOB" --seeds 1-100 -o "$T/one/%05d.png" > "$T/log" 2>&1
check "one process: 100 images" '[ $? = 0 ] && [ "$(count_png "$T/one")" = 100 ]' "$T/log"
BATCH_DELAY_MS=5 np 2 --seeds 1-100 -o "$T/two/%05d.png" > "$T/log" 2>&1
check "mpirun -np 2: succeeds" '[ $? = 0 ]' "$T/log"
check "mpirun -np 2: byte-identical to one process" 'same_set "$T/one" "$T/two"' "$T/log"
check "mpirun -np 2: one manifest, the same records as one process" \
  'records "$T/one/manifest.jsonl" > "$T/m1" && records "$T/two/manifest.jsonl" > "$T/m2" && cmp -s "$T/m1" "$T/m2"' "$T/log"
check "mpirun -np 2: one progress summary, from rank 0" '[ "$(grep -c "^batch: 100/100 " "$T/log")" = 1 ]' "$T/log"
check "mpirun -np 2: both ranks made images" 'grep -Eq "^batch: 2 processes made [1-9][0-9]* \+ [1-9][0-9]* images" "$T/log"' "$T/log"

BATCH_DELAY_MS=2 np 2 --seeds 1-100 -o "$T/twob/%05d.png" --batch-size 3 > "$T/log" 2>&1
check "mpirun -np 2 --batch-size 3: byte-identical to one process, one at a time" \
  '[ $? = 0 ] && same_set "$T/one" "$T/twob"' "$T/log"

# resume across rank counts: one process killed midway, two finish
BATCH_DELAY_MS=20 "$LUMEN" batch "$JOB" --seeds 1-100 -o "$T/r1/%05d.png" > "$T/log" 2>&1 &
pid=$!
i=0
while [ $i -lt 1200 ] && [ "$(count_png "$T/r1")" -lt 30 ] && kill -0 $pid 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
kill -KILL $pid; wait $pid 2>/dev/null
n=$(count_png "$T/r1")
check "a one-process run killed midway ($n made)" '[ "$n" -ge 30 ] && [ "$n" -lt 100 ]'
np 2 --seeds 1-100 -o "$T/r1/%05d.png" > "$T/log" 2>&1
check "two processes finish it, byte-identical" '[ $? = 0 ] && same_set "$T/one" "$T/r1"' "$T/log"
check "and its manifest lists every job made or existing" \
  '[ "$(grep -c "\"status\":\"ok\"\|\"status\":\"exists\"" "$T/r1/manifest.jsonl")" = 100 ]' "$T/r1/manifest.jsonl"
# one rank of a two-process run killed midway (issue 39: a GPU's process
# lost): mpirun ends the run, a second run over two ranks finishes it with
# the same bytes, no temporary left
BATCH_DELAY_MS=20 np 2 --seeds 1-100 -o "$T/rk/%05d.png" > "$T/log.k" 2>&1 &
pk=$!
i=0
while [ $i -lt 1200 ] && [ "$(count_png "$T/rk")" -lt 20 ] && kill -0 $pk 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
# rank 1: the lumen whose environment says so (OpenMPI sets OMPI_COMM_WORLD_RANK)
r1=
for p in $(pgrep -f "$LUMEN batch"); do
  if tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1'; then r1=$p; fi
done
[ -n "$r1" ] && kill -KILL "$r1"
timeout 120 sh -c "while kill -0 $pk 2>/dev/null; do sleep 0.1; done"
wait $pk; rk=$?
n=$(count_png "$T/rk")
check "mpirun -np 2 with rank 1 killed midway ends nonzero ($n made, status $rk)" \
  '[ -n "$r1" ] && [ $rk != 0 ] && [ "$n" -ge 20 ] && [ "$n" -lt 100 ]' "$T/log.k"
np 2 --seeds 1-100 -o "$T/rk/%05d.png" > "$T/log" 2>&1
check "a second mpirun -np 2 finishes it, byte-identical, no temporary" \
  '[ $? = 0 ] && same_set "$T/one" "$T/rk" && [ "$(ls -A "$T/rk" | grep -c tmp)" = 0 ]' "$T/log"
check "and its manifest lists every job made or existing" \
  '[ "$(grep -c "\"status\":\"ok\"\|\"status\":\"exists\"" "$T/rk/manifest.jsonl")" = 100 ]' "$T/rk/manifest.jsonl"

# two processes on half the jobs, one process finishes all
np 2 --seeds 1-100 -o "$T/r2/%05d.png" > "$T/log" 2>&1
rm -f "$T"/r2/0000[0-9].png "$T"/r2/0005*.png
"$LUMEN" batch "$JOB" --seeds 1-100 -o "$T/r2/%05d.png" > "$T/log" 2>&1
check "one process completes a two-process set, byte-identical" '[ $? = 0 ] && same_set "$T/one" "$T/r2"' "$T/log"
check "it made only the missing ones" 'grep -q "^batch: 100/100 .*(81 existed)" "$T/log"' "$T/log"

# failures on any rank reach rank 0's manifest and the exit status
$MPIRUN -np 2 "$LUMEN" batch tests/batch/failing.lua --seeds 1-8 -o "$T/f/%05d.png" --nan-check > "$T/log" 2>&1
rc=$?
check "mpirun -np 2 with failing jobs exits nonzero (got $rc)" '[ $rc != 0 ]' "$T/log"
check "its manifest records the three failures" '[ "$(grep -c "\"status\":\"failed\"" "$T/f/manifest.jsonl")" = 3 ]' "$T/log"

# an error outside the jobs ends every rank (no rank waits forever)
timeout 120 $MPIRUN -np 2 "$LUMEN" batch "$JOB" --seeds 1-5-x -o "$T/bad/%05d.png" > "$T/log" 2>&1
rc=$?
check "mpirun -np 2 with a bad seed list fails and ends (status $rc)" '[ $rc != 0 ] && [ $rc != 124 ] && grep -q "cannot read" "$T/log"' "$T/log"
timeout 120 $MPIRUN -np 2 "$LUMEN" batch tests/batch/rank1_fails.lua --seeds 1-50 -o "$T/bad1/%05d.png" > "$T/log" 2>&1
rc=$?
check "mpirun -np 2 where rank 1 cannot start fails and ends (status $rc)" '[ $rc != 0 ] && [ $rc != 124 ] && grep -q "rank 1 cannot start" "$T/log"' "$T/log"

# the output set belongs to one run: rank 0 holds it for all ranks
BATCH_DELAY_MS=20 $MPIRUN -np 2 "$LUMEN" batch "$JOB" --seeds 1-100 -o "$T/lk/%05d.png" > "$T/log.a" 2>&1 &
pa=$!
i=0
while [ $i -lt 1200 ] && [ "$(count_png "$T/lk")" -lt 5 ] && kill -0 $pa 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
"$LUMEN" batch "$JOB" --seeds 1-100 -o "$T/lk/%05d.png" > "$T/log" 2>&1
check "a run into the folder of an mpirun run is refused" '[ $? = 1 ] && grep -q "in use by another run (pid" "$T/log"' "$T/log"
timeout 120 $MPIRUN -np 2 "$LUMEN" batch "$JOB" --seeds 1-100 -o "$T/lk/%05d.png" > "$T/log" 2>&1
rc=$?
check "an mpirun run into it is refused and ends (status $rc)" \
  '[ $rc != 0 ] && [ $rc != 124 ] && grep -q "in use by another run" "$T/log"' "$T/log"
wait $pa
check "the holder finishes, byte-identical to one process, no temporary" \
  '[ $? = 0 ] && same_set "$T/one" "$T/lk" && [ "$(ls -A "$T/lk" | grep -c tmp)" = 0 ]' "$T/log.a"

echo "$pass passed, $fail failed"
[ $fail = 0 ]
