#!/bin/sh
# tests/batch/safety.sh - `lumen batch` never loses or mixes a file (issue
# 23): two runs into one folder (the second is refused, naming the holder),
# SIGTERM and a second signal leave no temporary file, a resume removes the
# temporaries of dead runs and makes again a torn or replaced file, jobs
# that would share a file are refused before anything is made, {name} from
# a params column, CSV with a byte order mark and multi-line quoted fields,
# a CSV column named twice,
# an unbounded seed range, a render function that returns no image, exit
# statuses (2 for a bad command line, 130 Ctrl-C, 143 SIGTERM); SIGTERM at
# chosen points of the pipeline (a job queued, a job being written).
# LUMEN=path runs another build.  Prints "N passed, N failed".
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
LUMEN=${LUMEN:-"$(pwd)/$BUILD/lumen"}
JOB="$(pwd)/tests/batch/job.lua"
T=$(mktemp -d /tmp/lumen-batch-safety.XXXXXX)
trap 'rm -rf "$T"' EXIT
. tests/batch/lib.sh
# no temporary file of any kind, hidden ones included
no_tmp() { [ "$(ls -A "$1" 2>/dev/null | grep -c 'tmp')" = 0 ]; }
wait_count() {
  i=0
  while [ $i -lt 1200 ] && [ "$(count_png "$1")" -lt "$2" ] && kill -0 "$3" 2>/dev/null; do
    sleep 0.1; i=$((i + 1))
  done
}
run() { "$LUMEN" batch "$JOB" "$@"; }

run --seeds 1-60 -o "$T/ref/%05d.png" > "$T/log" 2>&1
check "the reference run succeeds" '[ $? = 0 ] && [ "$(count_png "$T/ref")" = 60 ]' "$T/log"

# ---- two runs into one folder ----
BATCH_DELAY_MS=30 "$LUMEN" batch "$JOB" --seeds 1-60 -o "$T/two/%05d.png" > "$T/log.a" 2>&1 &
pa=$!
wait_count "$T/two" 3 $pa
run --seeds 1-60 -o "$T/two/%05d.png" > "$T/log.b" 2>&1
rb=$?
check "a second run into a folder in use is refused (status $rb)" '[ $rb = 1 ]' "$T/log.b"
check "the refusal names the holder (pid $pa, host, start time)" \
  'grep -q "in use by another run (pid $pa on host .* since [0-9-]* [0-9:]*)" "$T/log.b"' "$T/log.b"
"$LUMEN" batch tests/batch/named.lua --seeds 1-3 -o "$T/two/other_%03d.png" > "$T/log.c" 2>&1
check "a run with another pattern into the same folder is refused too" '[ $? = 1 ] && grep -q "in use" "$T/log.c"' "$T/log.c"
wait $pa
ra=$?
check "the first run is not disturbed (status $ra)" '[ $ra = 0 ] && same_set "$T/two" "$T/ref"' "$T/log.a"
check "and its manifest is whole" '[ "$(grep -c "\"status\":\"ok\"" "$T/two/manifest.jsonl")" = 60 ]' "$T/log.a"
run --seeds 1-60 -o "$T/two/%05d.png" > "$T/log.b" 2>&1
check "once it ended, the folder is free" '[ $? = 0 ] && grep -q "(60 existed)" "$T/log.b"' "$T/log.b"
# the issue's case: both started at once; one makes the set, the other is refused
BATCH_DELAY_MS=50 "$LUMEN" batch "$JOB" --seeds 1-40 -o "$T/mix/%03d.png" > "$T/log.a" 2>&1 & pa=$!
BATCH_DELAY_MS=50 "$LUMEN" batch tests/batch/failing.lua --seeds 1-40 -o "$T/mix/%03d.png" > "$T/log.b" 2>&1 & pb=$!
wait $pa; ra=$?; wait $pb; rb=$?
check "two runs started together: one is refused ($ra, $rb)" \
  '{ [ $ra = 1 ] && grep -q "in use" "$T/log.a"; } || { [ $rb = 1 ] && grep -q "in use" "$T/log.b"; }' "$T/log.a"
check "and the folder holds one run's files, complete, no temporary" \
  '[ "$(count_png "$T/mix")" -ge 37 ] && no_tmp "$T/mix" && [ "$(wc -l < "$T/mix/manifest.jsonl")" = 40 ]'

# ---- signals: nothing temporary is left ----
BATCH_DELAY_MS=20 "$LUMEN" batch "$JOB" --seeds 1-200 -o "$T/term/%05d.png" > "$T/log" 2>&1 &
pid=$!
wait_count "$T/term" 20 $pid
kill -TERM $pid; wait $pid; rc=$?
check "SIGTERM stops the run with status 143 (got $rc)" '[ $rc = 143 ]' "$T/log"
check "SIGTERM leaves no temporary file" 'no_tmp "$T/term"' "$T/log"
check "SIGTERM writes the manifest, the rest pending" 'grep -q "\"status\":\"pending\"" "$T/term/manifest.jsonl"'
BATCH_DELAY_MS=20 "$LUMEN" batch "$JOB" --seeds 1-200 -o "$T/int2/%05d.png" > "$T/log" 2>&1 &
pid=$!
wait_count "$T/int2" 20 $pid
kill -INT $pid; kill -TERM $pid; wait $pid; rc=$?
check "a second signal stops at once (status $rc) and leaves no temporary file" \
  '[ $rc -gt 128 ] && no_tmp "$T/int2"' "$T/log"

# SIGTERM at 20 spread-out moments of a run of fast jobs (most of the time
# spent between jobs): each run stops with 143 and writes its manifest.  A
# signal landing just before or after a job's protected call once raised
# "interrupted" outside it (status 1, no manifest: about 1 run in 60 here).
# A signal that lands before the run has written anything (a loaded machine
# can take longer than the first moment, 0.1 s, to start) leaves no image
# and no manifest, and that is right: it stopped before it began.
# sigterm_moments DEVICE N FROM: N runs on DEVICE ("": the environment's),
# each sent SIGTERM at a spread-out moment counted from the start
# (FROM=start) or from the first image (FROM=image); sets bad to the runs
# that did not end 143, left a temporary, or wrote images without a
# manifest (the last one's log in $T/log.stbad)
sigterm_moments() {
  bad=0; n=1
  while [ $n -le "$2" ]; do
    env ${1:+LUMEN_DEVICE=$1} "$LUMEN" batch "$JOB" --seeds 1-20000 -o "$T/st$n/%05d.png" > "$T/log.st" 2>&1 & pid=$!
    if [ "$3" = image ]; then wait_count "$T/st$n" 1 $pid; sleep 0.$(( (n * 37) % 9 ))
    else sleep 0.$(( (n * 37) % 9 + 1 )); fi
    kill -TERM $pid 2>/dev/null; wait $pid; rc=$?
    if [ $rc != 143 ] || ! no_tmp "$T/st$n" ||
       { [ ! -s "$T/st$n/manifest.jsonl" ] && [ "$(count_png "$T/st$n")" -gt 0 ]; }; then
      bad=$((bad + 1)); cp "$T/log.st" "$T/log.stbad"
    fi
    rm -rf "$T/st$n"; n=$((n + 1))
  done
}
sigterm_moments "" 20 start
check "SIGTERM at 20 moments: status 143, a manifest wherever images were written, no temporary each time ($bad bad)" '[ $bad = 0 ]' "$T/log.stbad"

# SIGTERM at chosen points of the pipeline (tests/batch/traced.lua sends
# it): while job 4 renders, job 3 is on the host, not yet written: it is
# recorded pending and not written (a signal stops at once; a rerun makes
# it); while job 3 is written, it is abandoned and pending, and job 4, queued
# on the device, pending too.  On the CPU and on Vulkan (lavapipe).
# STATUSES DIR: the manifest's statuses, space-separated
statuses() { sed -n 's/.*"status":"\([a-z]*\)".*/\1/p' "$1/manifest.jsonl" | tr '\n' ' '; }
kill_at() {   # DEVICE POINT STATUSES FILES
  d="$T/kill_$1_$2"
  BATCH_KILL_AT=$2 BATCH_TRACE="$T/trace.kill" LUMEN_DEVICE=$1 "$LUMEN" batch tests/batch/traced.lua --seeds 1-6 \
    -o "$d/%05d.png" > "$T/log" 2>&1
  rc=$? want_st=$3 want_f=$4
  check "$1, SIGTERM at $2: status 143 ($rc), manifest '$3', files '$4', no temporary" \
    '[ $rc = 143 ] && [ "$(statuses "$d")" = "$want_st" ] && [ "$(ls "$d" | grep "\.png$" | tr "\n" " ")" = "$want_f" ] && no_tmp "$d"' "$T/log"
}
devs=cpu
if grep -q '^VK_ENABLED := yes' "$BUILD/config.mk" 2>/dev/null && ls /usr/share/vulkan/icd.d/*.json >/dev/null 2>&1; then
  devs="cpu vulkan"
fi
for dev in $devs; do
  kill_at $dev render:4 "ok ok pending pending pending pending " "00001.png 00002.png "
  kill_at $dev write:3 "ok ok pending pending pending pending " "00001.png 00002.png "
  kill_at $dev render:1 "pending pending pending pending pending pending " ""
  # the last job is written after the jobs ran out: the signal there must
  # not step the job list past its end (it did: status 1, "l_batch.lua:71:
  # attempt to index a nil value", seen once in CI's sweep)
  kill_at $dev write:6 "ok ok ok ok ok pending " "00001.png 00002.png 00003.png 00004.png 00005.png "
done
# SIGTERM at the manifest's rename, after the last job: the run's handlers
# are still in place there, so the signal only counts, the manifest takes its
# name and no temporary is left (the REPL's handler, back before the rename,
# stopped the run there and left the manifest's temporary: "INT left a
# temporary", seen once in CI's sweep)
d="$T/kill_manifest"
BATCH_KILL_AT=manifest:0 BATCH_TRACE="$T/trace.kill" "$LUMEN" batch tests/batch/traced.lua --seeds 1-6 \
  -o "$d/%05d.png" > "$T/log" 2>&1
rc=$?
check "SIGTERM at the manifest's rename: status $rc, all 6 recorded ok, no temporary" \
  '{ [ $rc = 0 ] || [ $rc = 143 ]; } && [ "$(statuses "$d" 2>/dev/null)" = "ok ok ok ok ok ok " ] && no_tmp "$d"' "$T/log"
# the 20-moment stress above, fewer moments, on Vulkan, counted from the
# first image (Vulkan's start takes over a second under sanitizers, and a
# signal before the run has its handlers is the script-loading case)
if [ "$devs" != cpu ]; then
  sigterm_moments vulkan 6 image
  check "Vulkan: SIGTERM at 6 moments: status 143, a manifest, no temporary each time ($bad bad)" '[ $bad = 0 ]' "$T/log.stbad"
fi

# ---- resume: stale temporaries, torn and replaced files ----
d="$T/res"
run --seeds 1-60 -o "$d/%05d.png" > "$T/log" 2>&1
head -c 100 "$d/00003.png" > "$T/torn"; cp "$T/torn" "$d/00003.png"
cp "$d/00009.png" "$d/00004.png"                      # a whole PNG, the wrong one
echo junk > "$d/00005.png.lumen-somehost-999999999-1.tmp"   # a dead run's temporary
echo junk > "$d/00006.png.lumen-somehost-999999999-2.tmp.tmp"
echo junk > "$d/00007.png.lumen-somehost-999999999-3.tmp.999999999-0-a3f0.tmp"   # its PNG writer's
echo mine > "$d/other.png.12-0-ff.tmp"                # another program's write: kept
echo mine > "$d/notes.tmp"                            # not batch's: kept
run --seeds 1-60 -o "$d/%05d.png" > "$T/log" 2>&1
check "a resume makes again a torn file and one whose crc32 differs from the manifest's" \
  '[ $? = 0 ] && same_set "$d" "$T/ref" && grep -q "(58 existed)" "$T/log"' "$T/log"
check "a resume removes the temporaries of dead runs, and only those" \
  '[ "$(ls -A "$d" | grep -c "lumen-.*tmp")" = 0 ] && [ -e "$d/notes.tmp" ] && [ -e "$d/other.png.12-0-ff.tmp" ]' "$T/log"
run --seeds 1-60 -o "$T/nom/%05d.png" --manifest none > "$T/log" 2>&1
cp "$T/torn" "$T/nom/00003.png"
run --seeds 1-60 -o "$T/nom/%05d.png" --manifest none > "$T/log" 2>&1
check "without a manifest, a PNG that does not end in IEND is made again" \
  'same_set "$T/nom" "$T/ref" && grep -q "(59 existed)" "$T/log"' "$T/log"

# ---- distinct names ----
printf 'seed,scale\n4,1\n4,2\n' > "$T/dup.csv"
run --params "$T/dup.csv" -o "$T/dup/{seed}.png" > "$T/log" 2>&1
rc=$?
check "jobs that would write one file are refused (status $rc), nothing made" \
  '[ $rc = 2 ] && grep -q "jobs 1 and 2 would both write .*dup/4.png" "$T/log" && [ "$(count_png "$T/dup")" = 0 ]' "$T/log"
"$LUMEN" batch tests/batch/named.lua --seeds 1-2 -o "$T/dupn/%03d" > "$T/log" 2>&1
check "a job whose named outputs share a file is refused" '[ $? = 2 ] && grep -q "job 1 writes .* twice" "$T/log"' "$T/log"
printf 'seed,name\n4,alice\n9,bob\n' > "$T/names.csv"
run --params "$T/names.csv" -o "$T/nm/{name}.png" > "$T/log" 2>&1
check "{name} expands to a params column called name" \
  '[ $? = 0 ] && [ -e "$T/nm/alice.png" ] && [ -e "$T/nm/bob.png" ]' "$T/log"

# ---- CSV ----
printf '\357\273\277seed,scale\r\n4,2.5\r\n9,1\r\n' > "$T/bom.csv"
run --params "$T/bom.csv" -o "$T/bom/%d.png" > "$T/log" 2>&1
check "a CSV with a UTF-8 byte order mark keeps its first column" \
  '[ $? = 0 ] && grep -q "\"params\":{\"scale\":2.5,\"seed\":4}" "$T/bom/manifest.jsonl"' "$T/log"
printf 'seed,note\r\n4,"two\r\nlines, ""quoted"""\r\n9,plain\r\n' > "$T/ml.csv"
run --params "$T/ml.csv" -o "$T/ml/%d.png" > "$T/log" 2>&1
check "a quoted CSV field may span lines" \
  '[ $? = 0 ] && grep -q "\"note\":\"two\\\\nlines, \\\\\"quoted\\\\\"\",\"seed\":4" "$T/ml/manifest.jsonl" && [ "$(count_png "$T/ml")" = 2 ]' "$T/ml/manifest.jsonl"
printf 'seed,note\n4,"open\n' > "$T/open.csv"
run --params "$T/open.csv" -o "$T/open/%d.png" > "$T/log" 2>&1
check "an unclosed quote is an error naming the line" '[ $? != 0 ] && grep -q "open.csv:2: a quoted field is not closed" "$T/log"' "$T/log"
printf '{"seed": 4}\n[1, 2]\n' > "$T/arr.jsonl"
run --params "$T/arr.jsonl" -o "$T/arr/%d.png" > "$T/log" 2>&1
check "a JSON Lines line that is an array is refused, naming the line (it was 'l_batch.lua:728: json: object keys must be strings')" \
  '[ $? = 1 ] && grep -q "arr.jsonl:2: not a JSON object" "$T/log"' "$T/log"
printf '\n\nseed,scale,note,scale\n4,1,a,2\n' > "$T/twice.csv"
run --params "$T/twice.csv" -o "$T/twice/%d.png" > "$T/log" 2>&1
check "a column named twice is refused, naming the column and the line (it kept the last value)" \
  '[ $? = 1 ] && grep -q "twice.csv:3: column .scale. is named twice in the header (columns 2 and 4)" "$T/log" && [ "$(count_png "$T/twice")" = 0 ]' "$T/log"

# ---- unbounded work, usage errors ----
timeout 20 "$LUMEN" batch "$JOB" --seeds 1-99999999999 -o "$T/big/%d.png" > "$T/log" 2>&1
rc=$?
check "--seeds 1-99999999999 is refused at once (status $rc), stating the bound" \
  '[ $rc = 2 ] && grep -q "more than 10000000 jobs" "$T/log" && [ "$(count_png "$T/big")" = 0 ]' "$T/log"
run --seeds 1-5-x -o "$T/u/%d.png" > "$T/log" 2>&1
check "a bad seed list exits 2" '[ $? = 2 ]' "$T/log"
run --seeds 1-5 --progress loud -o "$T/u/%d.png" > "$T/log" 2>&1
check "a bad --progress exits 2" '[ $? = 2 ]' "$T/log"
run --seeds 1-5 --only 9 -o "$T/u/%d.png" > "$T/log" 2>&1
check "--only beyond the jobs exits 2" '[ $? = 2 ]' "$T/log"

# ---- the second sweep (issue 23): seed ranges at the integer limits, FIFOs ----
timeout -k 2 20 "$LUMEN" batch "$JOB" --seeds=-9223372036854775808-9223372036854775806 -o "$T/lim/%d.png" > "$T/log" 2>&1
rc=$?
check "a seed range whose count wraps around is refused at once (status $rc)" \
  '[ $rc = 2 ] && grep -q "more than 10000000 jobs" "$T/log"' "$T/log"
timeout -k 2 20 "$LUMEN" batch "$JOB" --seeds 9223372036854775806-9223372036854775807 -o "$T/max/{seed}.png" > "$T/log" 2>&1
rc=$?
check "seeds up to 2^63-1 make their jobs and end (status $rc)" \
  '[ $rc = 0 ] && [ -e "$T/max/9223372036854775807.png" ] && [ "$(count_png "$T/max")" = 2 ]' "$T/log"
timeout -k 2 20 "$LUMEN" batch "$JOB" --seeds 99999999999999999999 -o "$T/u/%d.png" > "$T/log" 2>&1
check "a seed past 2^63 names itself" '[ $? = 2 ] && grep -q "seeds: 99999999999999999999 is not a whole number" "$T/log"' "$T/log"
mkfifo "$T/fifo.csv" && ln -s /dev/zero "$T/zero.jsonl"
timeout -k 2 20 "$LUMEN" batch "$JOB" --params "$T/fifo.csv" -o "$T/u/%d.png" > "$T/log" 2>&1
check "a params FIFO is refused, not read for ever" '[ $? = 1 ] && grep -q "fifo.csv is a FIFO" "$T/log"' "$T/log"
timeout -k 2 20 "$LUMEN" batch "$JOB" --params "$T/zero.jsonl" -o "$T/u/%d.png" > "$T/log" 2>&1
check "a params link to /dev/zero is refused" '[ $? = 1 ] && grep -q "zero.jsonl is a device" "$T/log"' "$T/log"
mkdir -p "$T/ff" && mkfifo "$T/ff/002.png"
timeout -k 2 20 "$LUMEN" batch "$JOB" --seeds 1-3 -o "$T/ff/%03d.png" > "$T/log" 2>&1
rc=$?
check "a FIFO where an output goes does not block the resume check (status $rc)" '[ $rc != 124 ] && [ $rc != 137 ]' "$T/log"
run --seeds 1-2 -o "$T/u/%999d.png" > "$T/log" 2>&1
check "a %d width over 99 is a usage error, not an internal one" \
  '[ $? = 2 ] && grep -q "width of %d is at most 99" "$T/log" && ! grep -q "l_batch.lua" "$T/log"' "$T/log"
mkdir -p "$T/sheetdir"
run --seeds 1-2 -o "$T/sh/%d.png" --sheet "$T/sheetdir" --progress off > "$T/log" 2>&1
check "a --sheet that is a folder: the message names it" '[ $? = 1 ] && grep -q "cannot write .*sheetdir: Is a directory" "$T/log"' "$T/log"

# ---- messages ----
"$LUMEN" batch tests/batch/not_image.lua --seeds 1-2 -o "$T/ni/%d.png" > "$T/log" 2>&1
check "a 1-D result: the job fails with a message naming the shape" \
  '[ $? = 1 ] && grep -q "failed: job 1: the render function returned a tensor of shape \[16\], not an image" "$T/log" && ! grep -q "concatenate" "$T/log"' "$T/log"
"$LUMEN" batch tests/batch/failing.lua --seeds 1-8 -o "$T/fl/%d.png" > "$T/log" 2>&1
check "a failure message names its job once" \
  'grep -q "failed: job 7: the render function returned a number" "$T/log" && ! grep -q "job 7: job 7" "$T/log"' "$T/log"

# ---- Ctrl-C while the script loads ----
"$LUMEN" batch tests/batch/slow_load.lua --seeds 1-2 -o "$T/sl/%d.png" > "$T/log" 2>&1 &
pid=$!
i=0; while [ $i -lt 200 ] && ! grep -q loading "$T/log"; do sleep 0.05; i=$((i + 1)); done
sleep 0.2
kill -INT $pid; wait $pid; rc=$?
check "Ctrl-C while the script loads exits 130 (got $rc)" '[ $rc = 130 ]' "$T/log"

echo "$pass passed, $fail failed"
[ $fail = 0 ]
