#!/bin/sh
# tests/batch/run.sh - `lumen batch` and lm.batch: a 200-image run stopped
# midway by SIGINT (once, twice) and by SIGKILL, then resumed, ends with the
# same bytes as an uninterrupted run and never a partial file under a final
# name; --only, --batch-size and LUMEN_THREADS give the same bytes; failures
# are recorded and the rest go on; params files (CSV, JSON Lines, a
# manifest); the PNG text; the progress bar and lines; the contact sheet;
# flat memory over 10,000 images; the pipeline (job k+1 queued before job
# k is written) against LUMEN_BATCH_SERIAL=1, on the CPU and on Vulkan:
# same bytes and manifest, the order traced; MPI (tests/batch/mpi.sh).
# Prints "N passed, N failed".
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
LUMEN="$(pwd)/$BUILD/lumen"
JOB="$(pwd)/tests/batch/job.lua"
T=$(mktemp -d /tmp/lumen-batch.XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(pwd)/tests/batch/lib.sh"
# finals_ok DIR REF: every PNG under a final name in DIR equals REF's
finals_ok() {
  for f in "$1"/*.png; do
    [ -e "$f" ] || continue
    cmp -s "$f" "$2/$(basename "$f")" || return 1
  done
}
no_tmp() { [ "$(ls "$1" | grep -c '\.tmp$')" = 0 ]; }
# waits (up to 120 s) until DIR holds at least N PNGs or PID has ended
wait_count() {
  i=0
  while [ $i -lt 1200 ] && [ "$(count_png "$1")" -lt "$2" ] && kill -0 "$3" 2>/dev/null; do
    sleep 0.1; i=$((i + 1))
  done
}
# manifest FILE N STATUSES: N records, indices 1..N in order, statuses from
# the comma-separated list
manifest() {
  /usr/bin/python3 - "$@" <<'EOF'
import json, sys
path, n, allowed = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
recs = [json.loads(l) for l in open(path)]
assert len(recs) == n, f"{len(recs)} records, want {n}"
for i, r in enumerate(recs, 1):
    assert r["index"] == i, f"record {i} has index {r['index']}"
    assert r["status"] in allowed, f"record {i}: status {r['status']}"
    assert "params" in r and "seed" in r["params"]
EOF
}

run() { "$LUMEN" batch "$JOB" "$@"; }

# ---- an uninterrupted run: the reference ----
run --seeds 1-200 -o "$T/ref/%05d.png" > "$T/log" 2>&1
check "a 200-image run succeeds" '[ $? = 0 ]' "$T/log"
check "it writes 200 images" '[ "$(count_png "$T/ref")" = 200 ]' "$T/log"
check "its manifest has 200 ok records in order" 'manifest "$T/ref/manifest.jsonl" 200 ok 2>"$T/err"' "$T/err"
check "plain progress lines when stderr is not a terminal" 'grep -q "^batch: 200/200 .*img/s.*failed 0" "$T/log"' "$T/log"
cp -r "$T/ref" "$T/ref2"
run --seeds 1-200 -o "$T/ref2/%05d.png" > "$T/log" 2>&1
check "a rerun of a complete set succeeds" '[ $? = 0 ]' "$T/log"
check "a rerun skips every output" 'manifest "$T/ref2/manifest.jsonl" 200 exists 2>"$T/err"' "$T/err"
check "a rerun leaves the files as they were" 'same_set "$T/ref" "$T/ref2"'

# ---- Ctrl-C midway, then resume ----
interrupt_test() {   # NAME SIGNALS...: signals sent one after the other
  name=$1; shift
  d="$T/$name"
  BATCH_DELAY_MS=20 "$LUMEN" batch "$JOB" --seeds 1-200 -o "$d/%05d.png" > "$T/log.$name" 2>&1 &
  pid=$!
  wait_count "$d" 40 $pid
  for s in "$@"; do kill -"$s" $pid 2>/dev/null; sleep 0.05; done
  wait $pid
  rc=$?
  n=$(count_png "$d")
  case $1 in
    KILL) check "$name: SIGKILL ends the run (status $rc)" '[ $rc = 137 ]' "$T/log.$name" ;;
    *) check "$name: the run exits with status 130 (got $rc)" '[ $rc = 130 ]' "$T/log.$name" ;;
  esac
  check "$name: stopped midway ($n of 200 made)" '[ "$n" -ge 40 ] && [ "$n" -lt 200 ]'
  check "$name: every file under a final name is complete" 'finals_ok "$d" "$T/ref"'
  if [ "$1" = INT ] && [ $# = 1 ]; then
    check "$name: the manifest records the rest as pending" \
      'manifest "$d/manifest.jsonl" 200 ok,pending 2>"$T/err" && grep -q pending "$d/manifest.jsonl"' "$T/err"
    check "$name: the message says how to finish" 'grep -q "run the same command again" "$T/log.$name"' "$T/log.$name"
  fi
  run --seeds 1-200 -o "$d/%05d.png" > "$T/log.$name" 2>&1
  check "$name: the resumed run succeeds" '[ $? = 0 ]' "$T/log.$name"
  check "$name: resumed set is byte-identical to the uninterrupted one" 'same_set "$d" "$T/ref"'
  check "$name: the resumed manifest is complete" 'manifest "$d/manifest.jsonl" 200 ok,exists 2>"$T/err"' "$T/err"
  check "$name: no temporary file is left" 'no_tmp "$d"'
}
interrupt_test sigint INT
interrupt_test sigint2 INT INT
interrupt_test sigkill KILL

# ---- lm.batch from a script: Ctrl-C returns, the script goes on ----
BATCH_DELAY_MS=20 "$LUMEN" tests/batch/lua_api.lua "$T/lua" > "$T/log.lua" 2>&1 &
pid=$!
wait_count "$T/lua" 40 $pid
kill -INT $pid
wait $pid
rc=$?
check "lm.batch: a Ctrl-C ends the call with interrupted = true (script status $rc)" \
  '[ $rc = 0 ] && grep -q "^first	[0-9]*	[1-9][0-9]*	true$" "$T/log.lua"' "$T/log.lua"
check "lm.batch: a second call in the same script finishes the set" \
  'grep -q "^second	200	0	false$" "$T/log.lua" && same_set "$T/lua" "$T/ref"' "$T/log.lua"

# ---- same bytes: --only, batch size, thread count ----
run --seeds 1-200 -o "$T/only/%05d.png" --only 37 > "$T/log" 2>&1
check "--only 37 makes one image" '[ $? = 0 ] && [ "$(count_png "$T/only")" = 1 ]' "$T/log"
check "--only 37 regenerates the same bytes" 'cmp -s "$T/only/00037.png" "$T/ref/00037.png"'
check "--only writes no manifest unless asked" '[ ! -e "$T/only/manifest.jsonl" ]'
run --params "$T/ref/manifest.jsonl" -o "$T/fromman/%05d.png" --only 123 > "$T/log" 2>&1
check "a manifest is a params file: --only 123 from it gives the same bytes" \
  'cmp -s "$T/fromman/00123.png" "$T/ref/00123.png"' "$T/log"
run --seeds 1-200 -o "$T/bs/%05d.png" --batch-size 7 > "$T/log" 2>&1
check "--batch-size 7 gives the same bytes" '[ $? = 0 ] && same_set "$T/bs" "$T/ref"' "$T/log"
BATCH_PX=64 run --seeds 1-12 -o "$T/t0/%05d.png" > "$T/log" 2>&1
BATCH_PX=64 LUMEN_THREADS=1 run --seeds 1-12 -o "$T/t1/%05d.png" > "$T/log" 2>&1
check "LUMEN_THREADS=1 gives the same bytes (64x64)" 'same_set "$T/t0" "$T/t1"' "$T/log"
BATCH_PX=64 LUMEN_THREADS=2 run --seeds 1-12 -o "$T/t2/%05d.png" --batch-size 5 > "$T/log" 2>&1
check "LUMEN_THREADS=2 with --batch-size 5 gives the same bytes (64x64)" 'same_set "$T/t0" "$T/t2"' "$T/log"

# ---- across devices: CPU and Vulkan within a tolerance ----
BATCH_PX=32 "$LUMEN" tests/batch/devices.lua > "$T/log" 2>&1
if grep -q '^VK_ENABLED := yes' "$BUILD/config.mk" 2>/dev/null && ls /usr/share/vulkan/icd.d/*.json >/dev/null 2>&1; then
  check "Vulkan renders the jobs within 1e-5 of the CPU" '[ "$(grep -c "^seed [0-9] ok " "$T/log")" = 4 ]' "$T/log"
fi

# ---- the pipeline: job k+1 is queued before job k is written ----
TRACED="$(pwd)/tests/batch/traced.lua"
have_vk() { grep -q '^VK_ENABLED := yes' "$BUILD/config.mk" 2>/dev/null && ls /usr/share/vulkan/icd.d/*.json >/dev/null 2>&1; }
# piped_order TRACE N LAST: all N jobs written, each but those of the last
# group (LAST jobs) after a later job was queued (traced.lua's trace)
piped_order() {
  awk -v n="$2" -v last="$3" '/^queued /{ if ($2 > q) q = $2 } /^write /{ w++; if ($2 <= n - last && q <= $2) bad = 1 }
    END { exit !(w == n && !bad) }' "$1"
}
# serial_order TRACE: nothing queued ahead; job k written before job k+1 renders
serial_order() {
  awk '/^queued /{ bad = 1 } /^write /{ w[$2] = 1 } /^render /{ if ($2 > 1 && !w[$2 - 1]) bad = 1 } END { exit bad }' "$1"
}
# the manifest's records without the output directory
records() { sed 's|"file":"[^"]*/|"file":"|' "$1"; }
# pipe_vs_serial NAME SCRIPT ARGS...: the pipelined and the serial run of a
# script write the same files (bytes) and the same manifest records, with
# the same exit status; the traces are $T/NAME.p.trace and .s.trace
pipe_vs_serial() {
  name=$1; script=$2; shift 2
  BATCH_TRACE="$T/$name.p.trace" "$LUMEN" batch "$script" -o "$T/$name.p/%05d.png" "$@" > "$T/log.$name.p" 2>&1
  rp=$?
  BATCH_TRACE="$T/$name.s.trace" LUMEN_BATCH_SERIAL=1 "$LUMEN" batch "$script" -o "$T/$name.s/%05d.png" "$@" > "$T/log.$name.s" 2>&1
  rs=$?
  records "$T/$name.p/manifest.jsonl" > "$T/$name.p.rec"
  records "$T/$name.s/manifest.jsonl" > "$T/$name.s.rec"
  check "$name: pipelined and serial give the same files, manifest and status ($rp, $rs)" \
    '[ $rp = $rs ] && [ "$(count_png "$T/$name.p")" -gt 0 ] && same_set "$T/$name.p" "$T/$name.s" && [ -s "$T/$name.p.rec" ] && cmp -s "$T/$name.p.rec" "$T/$name.s.rec"' "$T/log.$name.p"
}
pipe_vs_serial cpu "$TRACED" --seeds 1-12
check "cpu: job k is written after job k+1 was queued" 'piped_order "$T/cpu.p.trace" 12 1' "$T/cpu.p.trace"
check "cpu: LUMEN_BATCH_SERIAL=1 writes each job before the next renders" 'serial_order "$T/cpu.s.trace"' "$T/cpu.s.trace"
BATCH_TRACE="$T/flag.trace" "$LUMEN" batch "$TRACED" --seeds 1-4 -o "$T/flag/%05d.png" --serial > "$T/log" 2>&1
check "--serial is LUMEN_BATCH_SERIAL=1" '[ $? = 0 ] && serial_order "$T/flag.trace" && [ "$(count_png "$T/flag")" = 4 ]' "$T/log"
pipe_vs_serial cpu_bs "$TRACED" --seeds 1-12 --batch-size 5
check "cpu_bs: a group of 5 is written after the next group was queued" 'piped_order "$T/cpu_bs.p.trace" 12 2' "$T/cpu_bs.p.trace"
check "cpu_bs: the files are those of one job at a time" 'same_set "$T/cpu_bs.p" "$T/cpu.p"'
pipe_vs_serial cpu_fail tests/batch/failing.lua --seeds 1-8 --nan-check
pipe_vs_serial cpu_bfail tests/batch/batch_fail.lua --seeds 1-8 --batch-size 4
# job 3 fails while job 2 waits to be written: 2 is written, then 3 recorded
"$LUMEN" batch tests/batch/failing.lua --seeds 1-3 -o "$T/okfail/%05d.png" > "$T/log" 2>&1
check "a job failing after a good one: the good one's file is there, the manifest says ok, ok, failed" \
  '[ $? = 1 ] && [ "$(count_png "$T/okfail")" = 2 ] && [ "$(sed -n "s/.*\"status\":\"\([a-z]*\)\".*/\1/p" "$T/okfail/manifest.jsonl" | tr "\n" " ")" = "ok ok failed " ]' "$T/okfail/manifest.jsonl"
"$LUMEN" -e "for _, s in ipairs{false, true} do local r = lm.batch{script = '$JOB', seeds = '1-6', out = '$T/sum' .. tostring(s) .. '/%d.png', progress = 'off', serial = s}; print(r.made, r.serial, r.overlapped) end" > "$T/log" 2>&1
check "lm.batch's summary: 5 of 6 jobs written while the next was queued; serial = true: none" \
  '[ "$(tr "\t\n" " ;" < "$T/log")" = "6 false 5;6 true 0;" ]' "$T/log"
if have_vk; then
  export LUMEN_DEVICE=vulkan
  pipe_vs_serial vk "$TRACED" --seeds 1-12
  check "vk: job k is written after job k+1 was queued" 'piped_order "$T/vk.p.trace" 12 1' "$T/vk.p.trace"
  pipe_vs_serial vk_bs "$TRACED" --seeds 1-12 --batch-size 5
  check "vk_bs: the files are those of one job at a time" 'same_set "$T/vk_bs.p" "$T/vk.p"'
  pipe_vs_serial vk_fail tests/batch/failing.lua --seeds 1-8 --nan-check
  check "vk_fail: the NaN image is recorded failed on the device too" 'grep "\"index\":5," "$T/vk_fail.p/manifest.jsonl" | grep -q NaN'
  pipe_vs_serial vk_bfail tests/batch/batch_fail.lua --seeds 1-8 --batch-size 4
  pipe_vs_serial vk_conv tests/batch/conv_job.lua --seeds 1-6 -- 32 8 2 4
  unset LUMEN_DEVICE
fi

# ---- failures ----
"$LUMEN" batch tests/batch/failing.lua --seeds 1-8 -o "$T/fail/%05d.png" --nan-check > "$T/log" 2>&1
rc=$?
check "a failed job makes the exit status 1 (got $rc)" '[ $rc = 1 ]' "$T/log"
check "the other jobs go on" '[ "$(count_png "$T/fail")" = 5 ]' "$T/log"
check "failures are recorded in the manifest" \
  'manifest "$T/fail/manifest.jsonl" 8 ok,failed 2>"$T/err" && [ "$(grep -c "\"status\":\"failed\"" "$T/fail/manifest.jsonl")" = 3 ]' "$T/err"
check "an error in the script is recorded with its message" 'grep -q "seed 3 is bad" "$T/fail/manifest.jsonl"'
check "--nan-check records a NaN image" 'grep "\"index\":5," "$T/fail/manifest.jsonl" | grep -q NaN'
check "a non-tensor result is recorded" 'grep "\"index\":7," "$T/fail/manifest.jsonl" | grep -q "not a tensor"'
check "failures are reported on stderr" 'grep -q "failed: job 3: .*seed 3 is bad" "$T/log"' "$T/log"
"$LUMEN" batch tests/batch/batch_fail.lua --seeds 1-8 -o "$T/bf4/%05d.png" --batch-size 4 > "$T/log" 2>&1
"$LUMEN" batch tests/batch/batch_fail.lua --seeds 1-8 -o "$T/bf1/%05d.png" > "$T/log1" 2>&1
check "a failing batch is retried job by job: only the bad job fails" \
  '[ "$(grep -c "\"status\":\"failed\"" "$T/bf4/manifest.jsonl")" = 1 ] && grep -q "seed 4 is bad" "$T/bf4/manifest.jsonl" && [ "$(count_png "$T/bf4")" = 7 ]' "$T/log"
check "and the others have the bytes of one-at-a-time rendering" 'same_set "$T/bf4" "$T/bf1"' "$T/log1"
"$LUMEN" batch tests/batch/failing.lua --seeds 1-8 -o "$T/nonan/%05d.png" > "$T/log" 2>&1
check "without --nan-check a NaN image is written" '[ -e "$T/nonan/00005.png" ]' "$T/log"
"$LUMEN" batch tests/batch/failing.lua --seeds 1-8 -o "$T/x.png" > "$T/log" 2>&1
check "an out pattern naming one file for many jobs is an error" '[ $? = 2 ] || grep -q "names one file" "$T/log"' "$T/log"
"$LUMEN" batch "$JOB" --seeds 1-8 --bogus > "$T/log" 2>&1
check "an unknown option is an error" '[ $? != 0 ] && grep -q "unknown option" "$T/log"' "$T/log"

# ---- several named images per job ----
"$LUMEN" batch tests/batch/named.lua --seeds 1-3 -o "$T/named/%03d.png" > "$T/log" 2>&1
check "named outputs: one file per name" '[ $? = 0 ] && [ -e "$T/named/002_color.png" ] && [ -e "$T/named/002_gray.png" ] && [ "$(count_png "$T/named")" = 6 ]' "$T/log"
cp "$T/named/002_gray.png" "$T/gray2.png"
rm "$T/named/002_gray.png"
"$LUMEN" batch tests/batch/named.lua --seeds 1-3 -o "$T/named/%03d.png" > "$T/log" 2>&1
check "named outputs: a job missing one of its files is made again" \
  'grep "\"index\":2," "$T/named/manifest.jsonl" | grep -q "\"status\":\"ok\"" && [ "$(grep -c exists "$T/named/manifest.jsonl")" = 2 ] && cmp -s "$T/gray2.png" "$T/named/002_gray.png"' "$T/named/manifest.jsonl"

# ---- params files and the PNG text ----
printf 'seed,scale,note\n4,2.5,"a, b"\n9,1,plain\n' > "$T/p.csv"
printf '{"seed":4,"scale":2.5,"note":"a, b"}\n\n{"seed":9,"scale":1,"note":"plain"}\n' > "$T/p.jsonl"
run --params "$T/p.csv" -o "$T/csv/{seed}.png" > "$T/log" 2>&1
check "a CSV params file runs" '[ $? = 0 ] && [ -e "$T/csv/4.png" ] && [ -e "$T/csv/9.png" ]' "$T/log"
run --params "$T/p.jsonl" -o "$T/jsonl/{seed}.png" > "$T/log" 2>&1
check "the same params as JSON Lines give the same bytes" 'same_set "$T/csv" "$T/jsonl"' "$T/log"
check "a params column changes the image" '! cmp -s "$T/csv/4.png" "$T/ref/00004.png"'
"$LUMEN" -e "local _, m = lm.image.read_png('$T/csv/4.png'); io.write(m.parameters, '\n', m.lumen, '\n')" > "$T/text" 2>&1
check "the PNG carries an A1111-style parameters text" \
  'grep -q "^Seed: 4, Size: 16x16, Index: 1, note: \"a, b\", scale: 2.5, Script: job.lua, Lumen: " "$T/text"' "$T/text"
check "and its parameters as JSON" 'grep -q "\"params\":{\"note\":\"a, b\",\"scale\":2.5,\"seed\":4}" "$T/text"' "$T/text"

# ---- a folder as the job list (samples/batch_upscale.lua) ----
mkdir -p "$T/in"
cp "$T/ref/00003.png" "$T/in/b.png"; cp "$T/ref/00001.png" "$T/in/a.PNG"; echo x > "$T/in/notes.txt"
"$LUMEN" batch samples/batch_upscale.lua --params "$T/in/" -o "$T/up/{stem}.png" -- bilinear 2 > "$T/log" 2>&1
check "a folder is one job per PNG in it" '[ $? = 0 ] && [ "$(count_png "$T/up")" = 2 ] && [ -e "$T/up/a.png" ] && [ -e "$T/up/b.png" ]' "$T/log"
check "jobs of a folder come in name order" 'grep -q "\"index\":1,\"params\":{\"file\":\"a.PNG\"" "$T/up/manifest.jsonl"' "$T/up/manifest.jsonl"
"$LUMEN" -e "local t = lm.image.read_png('$T/up/b.png'); print(t.shape[2], t.shape[3])" > "$T/size" 2>&1
check "the upscale sample doubles the size" 'grep -q "^32	32$" "$T/size"' "$T/size"
if [ -d "$BUILD/models/esrgan-slim" ]; then   # `make models` (make test prepares it)
  LUMEN_MODELS="$BUILD/models" "$LUMEN" batch samples/batch_upscale.lua --params "$T/in" -o "$T/esr/{stem}.png" -- esrgan-slim 2 > "$T/log" 2>&1
  "$LUMEN" -e "local t = lm.image.read_png('$T/esr/b.png'); print(t.shape[2], t.shape[3])" > "$T/size" 2>&1
  check "the upscale sample runs ESRGAN (esrgan-slim x2) over a folder" \
    '[ "$(count_png "$T/esr")" = 2 ] && grep -q "^32	32$" "$T/size"' "$T/log"
fi

# ---- progress bar on a terminal, contact sheet ----
script -qec "'$LUMEN' batch '$JOB' --seeds 1-30 -o '$T/tty/%05d.png' --sheet '$T/tty/sheet.png'" /dev/null > "$T/log" 2>&1
check "a terminal gets a progress bar" 'grep -q "\[#*\.*\] [0-9]*/30 .*img/s.*ETA" "$T/log"' "$T/log"
"$LUMEN" -e "local s = lm.image.read_png('$T/tty/sheet.png'); print(s.shape[1], s.shape[2], s.shape[3])" > "$T/sheet" 2>&1
check "the contact sheet is a 6x5 grid of labelled thumbnails" 'grep -q "^3	562	590$" "$T/sheet"' "$T/sheet"

# ---- flat memory ----
"$LUMEN" tests/batch/rss.lua "$T/rss" 10000 > "$T/log" 2>&1
made=$(sed -n 's/^made \([0-9]*\) failed 0 .*/\1/p' "$T/log")
r100=$(sed -n 's/.* rss100 \([0-9]*\) .*/\1/p' "$T/log")
rN=$(sed -n 's/.* rss10000 \([0-9]*\)$/\1/p' "$T/log")
check "10,000 tiny images all made" '[ "$made" = 10000 ]' "$T/log"
# AddressSanitizer holds freed memory in its quarantine (up to 256 MiB): RSS
# grows by design there, so flatness is checked in plain builds only
if grep -q fsanitize "$BUILD/flags.stamp" 2>/dev/null; then
  echo "note: RSS flatness not checked under sanitizers ($r100 -> $rN)"
else
  check "RSS after 10,000 images within 4 MiB of RSS after 100 ($r100 -> $rN)" \
    '[ -n "$r100" ] && [ -n "$rN" ] && [ $((rN - r100)) -lt 4194304 ]' "$T/log"
fi
rm -rf "$T/rss"

echo "$pass passed, $fail failed"
[ $fail = 0 ]
