#!/bin/sh
# tests/batch/timeline.sh - `lumen batch --timeline FILE` (issue 39: where
# each process's time goes): one JSON line a process with every stage, the
# stages adding up to the wall time, the images each made; the summary of
# lm.batch carries its own; a bad value is a usage error.  Under mpirun
# (when built with MPI and mpirun is there) rank 0 writes both ranks' lines,
# their images adding up to the run's; and the DiT families (Z-Image,
# FLUX.2-klein, tiny fixtures) through samples/batch_generate.lua (klein:
# tests/batch/klein_job.lua, its test encoder's text layers given) are the
# same bytes under mpirun -np 2 and --batch-size 2 as in one process.
# A generation's files written inside the next generation (issue 36), the
# bytes and records of the serial order; a signal during that write.
# Runs on the CPU.  Prints "N passed, N failed".
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
LUMEN="$(pwd)/$BUILD/lumen"
JOB="$(pwd)/tests/batch/job.lua"
T=$(mktemp -d /tmp/lumen-batch-timeline.XXXXXX)
trap 'rm -rf "$T"' EXIT
. tests/batch/lib.sh
LUMEN_DEVICE=cpu
export LUMEN_DEVICE

# field NAME LINE: a number or string field of one JSON line
field() { echo "$2" | sed -n "s/.*\"$1\":\"\{0,1\}\([^,\"}]*\).*/\1/p"; }
# the stages of a line add up to its wall time, within the rounding of its
# eight printed figures (%.3f each: 8 x 0.5 ms; CI's 0.092 against 0.094
# failed a 2 ms bound)
adds_up() {
  echo "$1" | awk -F'[:,}]' '{
    for (i = 1; i < NF; i++) v[$i] = $(i + 1)
    s = v["\"start_s\""] + v["\"load_s\""] + v["\"render_s\""] + v["\"wait_s\""] + v["\"write_s\""] + v["\"idle_s\""] + v["\"other_s\""]
    d = s - v["\"wall_s\""]; if (d < 0) d = -d
    exit !(d < 0.0041 && v["\"generate_s\""] + 0 >= 0 && v["\"wall_s\""] + 0 > 0) }'
}

"$LUMEN" batch "$JOB" --seeds 1-12 -o "$T/one/%03d.png" --progress lines --timeline "$T/one.jsonl" > "$T/log" 2>&1
check "one process: the run succeeds with --timeline" '[ $? = 0 ] && [ "$(count_png "$T/one")" = 12 ]' "$T/log"
check "one process: one line in the file" '[ "$(wc -l < "$T/one.jsonl")" = 1 ]' "$T/one.jsonl"
L1=$(cat "$T/one.jsonl")
for k in rank local_rank device images groups start_s load_s generate_s render_s wait_s write_s idle_s other_s wall_s; do
  check "one process: the line has $k" '[ -n "$(field $k "$L1")" ]' "$T/one.jsonl"
done
check "one process: rank 0 on the cpu made the 12 images in 12 groups" \
  '[ "$(field rank "$L1")" = 0 ] && [ "$(field device "$L1")" = cpu ] && [ "$(field images "$L1")" = 12 ] && [ "$(field groups "$L1")" = 12 ]' "$T/one.jsonl"
check "one process: the stages add up to the wall time" 'adds_up "$L1"' "$T/one.jsonl"
check "one process: generate = render + wait" \
  'echo "$L1" | awk -F"[:,}]" "{for (i = 1; i < NF; i++) v[\$i] = \$(i + 1); d = v[\"\\\"render_s\\\"\"] + v[\"\\\"wait_s\\\"\"] - v[\"\\\"generate_s\\\"\"]; exit !(d < 0.002 && d > -0.002)}"' "$T/one.jsonl"
check "one process: the stderr line" 'grep -q "^batch: timeline: rank 0 (cpu): start .* 12 images in " "$T/log"' "$T/log"

# --batch-size 4: 3 groups; resume: no images made, no groups
"$LUMEN" batch "$JOB" --seeds 1-12 -o "$T/b4/%03d.png" --batch-size 4 --progress off --timeline "$T/b4.jsonl" > "$T/log" 2>&1
check "--batch-size 4: 12 images in 3 groups" '[ "$(field groups "$(cat "$T/b4.jsonl")")" = 3 ] && [ "$(field images "$(cat "$T/b4.jsonl")")" = 12 ]' "$T/b4.jsonl"
"$LUMEN" batch "$JOB" --seeds 1-12 -o "$T/one/%03d.png" --progress off --timeline "$T/again.jsonl" > "$T/log" 2>&1
check "a resumed run with nothing left: 0 images, 0 groups" \
  '[ "$(field images "$(cat "$T/again.jsonl")")" = 0 ] && [ "$(field groups "$(cat "$T/again.jsonl")")" = 0 ]' "$T/again.jsonl"

# lm.batch's summary carries the process's timeline, with or without the file
"$LUMEN" -e "local r = lm.batch{script = '$JOB', seeds = '1-3', out = '$T/lua/%d.png', progress = 'off'}
  local t = r.timeline
  print(t.images, t.groups, t.rank, t.generate >= 0 and t.write >= 0 and t.wall > 0)" > "$T/log" 2>&1
check "lm.batch's summary: timeline with images, groups, rank and the stages" '[ "$(cat "$T/log")" = "3	3	0	true" ]' "$T/log"

# a generation (samples/batch_generate.lua on the tiny SD 1.x folder): each
# job's files are written inside the next job's pipe:generate, once its
# first step is queued (the summary's beside), the same bytes and manifest
# records as the serial order, and the stages still add up (the write's
# seconds are write's, not render's)
SD=tests/ref/diffusion/sd1
if [ -f "$SD/model_index.json" ]; then
  for i in 1 2 3; do echo "{\"seed\": $i, \"prompt\": \"a red fox\", \"negative\": \"blurry\", \"steps\": 2, \"size\": \"64x64\"}"; done > "$T/sd.jsonl"
  for mode in piped serial; do
    "$LUMEN" -e "local r = lm.batch{script = 'samples/batch_generate.lua', args = {'$SD'}, params = '$T/sd.jsonl',
      out = '$T/sd-$mode/%d.png', progress = 'off', serial = ('$mode' == 'serial'), timeline = '$T/sd-$mode.jsonl'}
      print(r.made, r.overlapped, r.beside)" > "$T/log-$mode" 2>&1
  done
  check "a generation: 3 images, each of the first 2 written inside the next one's generation" \
    '[ "$(grep -v timeline "$T/log-piped")" = "3	2	2" ]' "$T/log-piped"
  check "a generation, serial: 3 images, none written beside the next" '[ "$(grep -v timeline "$T/log-serial")" = "3	0	0" ]' "$T/log-serial"
  check "a generation: the same bytes as the serial order" 'same_set "$T/sd-piped" "$T/sd-serial"'
  check "a generation: the same manifest records as the serial order" \
    'sed "s/sd-piped/sd-serial/g" "$T/sd-piped/manifest.jsonl" | cmp -s - "$T/sd-serial/manifest.jsonl"'
  check "a generation: the stages add up to the wall time" 'adds_up "$(cat "$T/sd-piped.jsonl")"' "$T/sd-piped.jsonl"
fi

# the write run inside a generation is outside the job for signals: a
# signal during it counts and lets it finish, then stops the job it
# returns to (lm._batch.outside_job inside lm._batch.run_job; SIGTERM, as
# os.execute's wait ignores SIGINT)
"$LUMEN" -e "local B = lm._batch
  local pid = io.open('/proc/self/stat'):read('l'):match('^(%d+)')
  local done, after = 'no', 'no'
  B.sigint(true)
  local ok, res = B.run_job(function()
    B.outside_job(function()
      os.execute('kill -TERM ' .. pid)
      local n = 0
      for i = 1, 100000 do n = n + i end
      done = n
    end)
    after = 'yes'
  end)
  print(done, after, B.sigint(), ok, (tostring(res):gsub('^.*: ', '')))
  B.sigint(false)" > "$T/log" 2>&1
check "a signal inside outside_job: the work finishes, the job then stops" \
  '[ "$(cat "$T/log")" = "5000050000	no	1	false	interrupted" ]' "$T/log"
"$LUMEN" batch "$JOB" --seeds 1-2 -o "$T/bad/%03d.png" --timeline "" > "$T/log" 2>&1
rc=$?
check "--timeline '': a usage error (status 2, $rc)" '[ $rc = 2 ] && grep -q "timeline must be a file name" "$T/log"' "$T/log"
"$LUMEN" batch "$JOB" --seeds 1-2 -o "$T/nodir/%03d.png" --progress off --timeline "$T/no/such/dir/t.jsonl" > "$T/log" 2>&1
rc=$?
check "a timeline that cannot be written is reported, the images still made ($rc)" \
  '[ $rc = 0 ] && grep -q "batch: timeline $T/no/such/dir/t.jsonl: " "$T/log" && [ "$(count_png "$T/nodir")" = 2 ]' "$T/log"

if ! grep -q '^MPI_ENABLED := yes' "$BUILD/config.mk" 2>/dev/null || ! command -v mpirun >/dev/null 2>&1; then
  echo "note: mpirun checks skipped (no mpirun, or lumen built without MPI)"
else
  MPIRUN="mpirun --oversubscribe"
  [ "$(id -u)" = 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
  if grep -q fsanitize "$BUILD/flags.stamp" 2>/dev/null; then
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
    export ASAN_OPTIONS
    MPIRUN="$MPIRUN -x ASAN_OPTIONS"
  fi
  BATCH_DELAY_MS=5 $MPIRUN -np 2 "$LUMEN" batch "$JOB" --seeds 1-40 -o "$T/np2/%03d.png" --progress lines \
    --timeline "$T/np2.jsonl" > "$T/log" 2>&1
  check "mpirun -np 2 --timeline: succeeds, byte-identical" '[ $? = 0 ] && "$LUMEN" batch "$JOB" --seeds 1-40 -o "$T/np1/%03d.png" --progress off > /dev/null 2>&1 && same_set "$T/np1" "$T/np2"' "$T/log"
  check "mpirun -np 2: two lines, ranks 0 and 1 in order" \
    '[ "$(wc -l < "$T/np2.jsonl")" = 2 ] && [ "$(field rank "$(sed -n 1p "$T/np2.jsonl")")" = 0 ] && [ "$(field rank "$(sed -n 2p "$T/np2.jsonl")")" = 1 ]' "$T/np2.jsonl"
  check "mpirun -np 2: the ranks' images add up to 40, each as the progress summary says" \
    'a=$(field images "$(sed -n 1p "$T/np2.jsonl")"); b=$(field images "$(sed -n 2p "$T/np2.jsonl")"); [ $((a + b)) = 40 ] && grep -q "^batch: 2 processes made $a + $b images" "$T/log"' "$T/log"
  check "mpirun -np 2: local ranks 0 and 1, each line adding up" \
    '[ "$(field local_rank "$(sed -n 2p "$T/np2.jsonl")")" = 1 ] && adds_up "$(sed -n 1p "$T/np2.jsonl")" && adds_up "$(sed -n 2p "$T/np2.jsonl")"' "$T/np2.jsonl"
  check "mpirun -np 2: both ranks' stderr lines, from rank 0" \
    '[ "$(grep -c "^batch: timeline: rank [01] " "$T/log")" = 2 ]' "$T/log"

  # a rank that mpirun bound to one core by default (Open MPI does when np
  # <= 2) while the node has more runs unbound on its share, and says so;
  # one the user bound (--bind-to core) stays bound (issue 39: GPU ranks
  # wrote their PNGs on one core)
  NCPU=$(nproc)   # the CPUs this process may use (a container may allow fewer than are online)
  if [ "$NCPU" -ge 2 ]; then
    $MPIRUN -np 1 "$LUMEN" batch "$JOB" --seeds 1-3 -o "$T/bind1/%03d.png" --progress off --timeline "$T/bind1.jsonl" > "$T/log" 2>&1
    L=$(cat "$T/bind1.jsonl")
    check "mpirun -np 1 (bound to a core by default): unbound, on all $NCPU CPUs, with $NCPU threads" \
      '[ "$(field unbound "$L")" = 1 ] && [ "$(field cpus "$L")" = "$NCPU" ] && [ "$(field threads "$L")" = "$NCPU" ] && grep -q "CPUs $NCPU, threads $NCPU (unbound from 1)" "$T/log"' "$T/log"
    $MPIRUN -np 1 --bind-to core "$LUMEN" batch "$JOB" --seeds 1-3 -o "$T/bind2/%03d.png" --progress off --timeline "$T/bind2.jsonl" > "$T/log" 2>&1
    L=$(cat "$T/bind2.jsonl")
    check "mpirun -np 1 --bind-to core: stays on its one CPU, one thread" \
      '[ "$(field unbound "$L")" = 0 ] && [ "$(field cpus "$L")" = 1 ] && [ "$(field threads "$L")" = 1 ]' "$T/log"
  else
    echo "note: the binding checks skipped (one CPU)"
  fi

  # the DiT families across ranks (issue 39): the bytes of one process
  i=1; : > "$T/dit.jsonl"
  while [ $i -le 5 ]; do
    echo "{\"seed\": $i, \"prompt\": \"a red cube on a table $i\", \"steps\": 2, \"size\": \"64x64\"}" >> "$T/dit.jsonl"
    i=$((i + 1))
  done
  for fam in zimage klein; do
    M="$(pwd)/tests/ref/dit/$fam"
    S=samples/batch_generate.lua
    [ $fam = klein ] && S=tests/batch/klein_job.lua
    "$LUMEN" batch $S --params "$T/dit.jsonl" -o "$T/$fam-1/%03d.png" --progress off -- "$M" > "$T/log" 2>&1
    check "$fam: one process, 5 images" '[ $? = 0 ] && [ "$(count_png "$T/$fam-1")" = 5 ]' "$T/log"
    $MPIRUN -np 2 "$LUMEN" batch $S --params "$T/dit.jsonl" -o "$T/$fam-np2/%03d.png" \
      --progress lines -- "$M" > "$T/log" 2>&1
    # (how the 5 jobs split between the ranks depends on timing: printed)
    check "$fam: mpirun -np 2 byte-identical to one process" \
      '[ $? = 0 ] && same_set "$T/$fam-1" "$T/$fam-np2"' "$T/log"
    grep "processes made" "$T/log"
    $MPIRUN -np 2 "$LUMEN" batch $S --params "$T/dit.jsonl" -o "$T/$fam-bs/%03d.png" \
      --batch-size 2 --progress off -- "$M" > "$T/log" 2>&1
    check "$fam: mpirun -np 2 --batch-size 2 byte-identical to one process" \
      '[ $? = 0 ] && same_set "$T/$fam-1" "$T/$fam-bs"' "$T/log"
  done
fi

echo "$pass passed, $fail failed"
[ $fail = 0 ]
