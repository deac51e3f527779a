#!/bin/sh
# tests/sweep/run.sh - the second hostile sweep of issue 23, automated:
# concurrent runs into one folder or one file, signals at random moments
# with a resume after each, odd files (FIFOs, folders, /dev/zero, empty,
# truncated, odd names), odd options of every CLI tool, and the Lua API
# cases that once hung or answered wrong.  tests/sweep/CASES.md lists every
# case that was tried by hand and what it showed.  Every command runs under
# a timeout, so a hang is a failure, never a stuck suite.
# LUMEN=path runs another build.  Prints "N passed, N failed".
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
LUMEN=${LUMEN:-"$(pwd)/$BUILD/lumen"}
JOB="$(pwd)/tests/batch/job.lua"
LUMEN_MODELS=${LUMEN_MODELS:-"$(pwd)/$BUILD/models"}
export LUMEN_MODELS LUMEN_DEVICE=${LUMEN_DEVICE:-cpu}
T=$(mktemp -d /tmp/lumen-sweep.XXXXXX)
trap 'rm -rf "$T"' EXIT
pass=0; fail=0
bad() { fail=$((fail + 1)); echo "FAIL: $1"; [ -f "$T/log" ] && tail -8 "$T/log" | sed 's/^/  | /'; }
check() { if eval "$2"; then pass=$((pass + 1)); else bad "$1"; fi; }
# to S CMD...: the command under a timeout of S seconds (KILL 2 s later)
to() { s=$1; shift; timeout -k 2 "$s" "$@"; }
L() { to 30 "$LUMEN" "$@"; }
count_png() { ls "$1" 2>/dev/null | grep -c '\.png$'; }
no_tmp() { [ "$(ls -A "$1" 2>/dev/null | grep -c 'tmp')" = 0 ]; }
# every PNG in a folder decodes
all_decode() {
  L -e "for _, f in ipairs(lm._batch.listdir('$1', '.png')) do lm.image.read_png('$1/' .. f) end" >> "$T/log" 2>&1
}
same_set() {
  for f in "$1"/*.png; do cmp -s "$f" "$2/$(basename "$f")" || return 1; done
  [ "$(count_png "$1")" = "$(count_png "$2")" ]
}

L batch "$JOB" --seeds 1-24 -o "$T/ref/%03d.png" --progress off > "$T/log" 2>&1
check "the reference batch runs" '[ $? = 0 ] && [ "$(count_png "$T/ref")" = 24 ]'

# ---- concurrent runs ----
BATCH_DELAY_MS=20 L batch "$JOB" --seeds 1-24 -o "$T/two/%03d.png" --progress off > "$T/log.a" 2>&1 & pa=$!
i=0; while [ $i -lt 100 ] && [ ! -e "$T/two/.lumen-batch.lock" ]; do sleep 0.05; i=$((i + 1)); done
L batch "$JOB" --seeds 1-24 -o "$T/two/x_%03d.png" --progress off > "$T/log" 2>&1; rb=$?
L batch "$JOB" --seeds 1-24 -o "$T/two/%03d.png" --progress off > "$T/log.c" 2>&1; rc=$?
wait $pa; ra=$?
check "a second and a third run into a folder in use are refused, naming the holder ($rb, $rc)" \
  '[ $rb = 1 ] && [ $rc = 1 ] && grep -q "in use by another run (pid [0-9]* on host" "$T/log" && grep -q "in use" "$T/log.c"'
check "the holder finishes undisturbed ($ra) with no temporary left" \
  '[ $ra = 0 ] && same_set "$T/two" "$T/ref" && no_tmp "$T/two"'
L batch "$JOB" --seeds 1-24 -o "$T/two/%03d.png" --progress off > "$T/log" 2>&1
check "a resume afterwards counts all 24 as existing" '[ $? = 0 ] && [ "$(grep -c "\"status\":\"exists\"" "$T/two/manifest.jsonl")" = 24 ]'

for k in 1 2 3; do
  L -e "local t = lm.full({512, 512}, $k); for i = 1, 4 do lm.save('$T/one.safetensors', {t = t}) end" > "$T/log.$k" 2>&1 &
done
wait
L -e "local t = lm.load('$T/one.safetensors').t
      local lo, hi = t:min():item(), t:max():item()
      assert(lo == hi and lo >= 1 and lo <= 3, 'mixed: ' .. lo .. ' ' .. hi)" > "$T/log" 2>&1
check "three processes saving one path leave one whole file" '[ $? = 0 ] && no_tmp "$T"'
for k in 1 2; do
  L -e "for i = 1, 6 do lm.image.write_png('$T/one.png', lm.full({3, 64, 64}, $k / 4)) end" > "$T/log.$k" 2>&1 &
done
wait
L -e "local v = lm.image.read_png('$T/one.png', {dtype = 'f32'}); assert(v:min():item() == v:max():item())" > "$T/log" 2>&1
check "two processes writing one PNG leave one whole image" '[ $? = 0 ] && no_tmp "$T"'

# ---- signals at random moments, then a resume ----
bad_sig=0; n_sig=0
for k in 1 2 3 4 5 6 7 8 9; do
  case $((k % 3)) in 0) sig=INT ;; 1) sig=TERM ;; *) sig=KILL ;; esac
  # not under timeout: the signal must reach lumen itself
  BATCH_DELAY_MS=15 "$LUMEN" batch "$JOB" --seeds 1-24 -o "$T/sig/%03d.png" --progress off > "$T/log" 2>&1 &
  pid=$!
  sleep "0.$(awk "BEGIN { srand($k * 7919 + $$); printf \"%02d\", rand() * 40 + 5 }")"
  kill -$sig $pid 2>/dev/null
  i=0; while [ $i -lt 200 ] && kill -0 $pid 2>/dev/null; do sleep 0.05; i=$((i + 1)); done
  kill -KILL $pid 2>/dev/null   # a hang: the status below shows it
  wait $pid; rc=$?
  # INT and TERM remove their temporaries; KILL cannot, the resume does
  if [ $sig != KILL ] && ! no_tmp "$T/sig"; then bad_sig=$((bad_sig + 1)); echo "  $sig left a temporary"; fi
  if [ $rc != 0 ] && [ $rc != 130 ] && [ $rc != 143 ] && [ $rc != 137 ]; then
    bad_sig=$((bad_sig + 1)); echo "  $sig: status $rc"; fi
  L batch "$JOB" --seeds 1-24 -o "$T/sig/%03d.png" --progress off > "$T/log" 2>&1
  if [ $? != 0 ] || ! same_set "$T/sig" "$T/ref" || ! no_tmp "$T/sig"; then
    bad_sig=$((bad_sig + 1)); echo "  resume after $sig: not the reference set"; fi
  n_sig=$((n_sig + 1))
  # the next round starts from a partial set: drop every third file
  for f in $(ls "$T/sig" | grep '\.png$' | awk "NR % 3 == $((k % 3))"); do rm -f "$T/sig/$f"; done
done
check "$n_sig signals at random moments: honest statuses, no temporary, each resume completes" '[ $bad_sig = 0 ]'

# ---- odd files ----
L -e "lm.save('$T/g.safetensors', {a = lm.rand{8, 8}}); lm.save('$T/g.npy', lm.rand{8})
      lm.save('$T/g.npz', {a = lm.rand{4}}); lm.image.write_png('$T/g.png', lm.rand{3, 8, 8})" > "$T/log" 2>&1
for e in safetensors npy npz png; do
  mkfifo "$T/fifo.$e"; mkdir "$T/dir.$e"; ln -s /dev/zero "$T/dz.$e"; : > "$T/empty.$e"
  head -c 40 "$T/g.$e" > "$T/trunc.$e"
done
odd_bad=0
for f in fifo dir dz empty trunc; do
  for e in safetensors npy npz png; do
    fn=lm.load; [ $e = png ] && fn=lm.image.read_png
    to 10 "$LUMEN" -e "local ok, err = pcall($fn, '$T/$f.$e')
      assert(not ok, 'loaded'); assert(tostring(err):find('$f.$e', 1, true), 'message names no file: ' .. tostring(err))" > "$T/log" 2>&1 \
      || { odd_bad=$((odd_bad + 1)); echo "  $fn $f.$e:"; tail -2 "$T/log"; }
    to 10 "$LUMEN" inspect "$T/$f.$e" > "$T/log" 2>&1
    [ $? = 2 ] || { odd_bad=$((odd_bad + 1)); echo "  inspect $f.$e: not status 2"; }
  done
done
check "20 odd files to lm.load/read_png and 20 to inspect: an error naming the file, no hang" '[ $odd_bad = 0 ]'
mkdir -p "$T/tk"; printf '{"a":1' > "$T/tk/vocab.json"; mkfifo "$T/tk/merges.txt"
L -e "local ok, e = pcall(lm.diffusion.tokenizer, '$T/tk'); assert(not ok and e:find('vocab.json', 1, true), e)" > "$T/log" 2>&1
check "a broken tokenizer folder (bad JSON, FIFO merges) is an error" '[ $? = 0 ]'
mkfifo "$T/p.csv"; ln -s /dev/zero "$T/p.jsonl"
L batch "$JOB" --params "$T/p.csv" -o "$T/pp/%d.png" > "$T/log" 2>&1; r1=$?
L batch "$JOB" --params "$T/p.jsonl" -o "$T/pp/%d.png" > "$T/log" 2>&1; r2=$?
check "params from a FIFO or /dev/zero are refused ($r1, $r2)" '[ $r1 = 1 ] && [ $r2 = 1 ]'
mkdir -p "$T/fo"; mkfifo "$T/fo/002.png"
L batch "$JOB" --seeds 1-3 -o "$T/fo/%03d.png" --progress off > "$T/log" 2>&1; rc=$?
check "a FIFO at an output name does not block the run ($rc)" '[ $rc != 124 ] && [ $rc != 137 ]'
odd="$T/sp ace/ünï €/-x"
L batch "$JOB" --seeds 1-2 -o "$odd/%03d.png" --progress off > "$T/log" 2>&1
check "an output folder with spaces, unicode and a leading dash" '[ $? = 0 ] && [ "$(count_png "$odd")" = 2 ]'
L -e "lm.save('$T/-n.npy', lm.rand{2}); lm.save('$T/a\nb.npy', lm.rand{2}); assert(lm.load('$T/a\nb.npy'))" > "$T/log" 2>&1
check "lm.save to names with a leading dash and a newline" '[ $? = 0 ] && [ -e "$T/-n.npy" ]'
(cd "$T" && L inspect -- -n.npy && L compare -- -n.npy -n.npy) > "$T/log" 2>&1
check "inspect and compare take -- before a file named -n.npy" '[ $? = 0 ]'

# ---- odd options ----
opt_bad=0
expect() {  # expect STATUS PATTERN CMD...: status and message
  want=$1; pat=$2; shift 2
  to 30 "$@" > "$T/log" 2>&1; got=$?
  if [ $got != "$want" ] || ! grep -q -- "$pat" "$T/log"; then
    opt_bad=$((opt_bad + 1)); echo "  want $want '$pat', got $got: $*"; tail -2 "$T/log" | sed 's/^/    /'; fi
}
B() { w=$1; p=$2; shift 2; expect "$w" "$p" "$LUMEN" batch "$JOB" -o "$T/opt/%03d.png" --progress off "$@"; }
B 2 "bad seed range" --seeds 3-1
B 2 "cannot read 'abc'" --seeds abc
B 2 "cannot read 'nan'" --seeds nan
B 2 "cannot read '1e3'" --seeds 1e3
B 2 "no seeds" --seeds ,
B 2 "more than 10000000 jobs" --seeds 1-99999999999
B 2 "more than 10000000 jobs" --seeds=-9223372036854775808-9223372036854775806
B 2 "is not a whole number" --seeds 99999999999999999999
B 2 "not a job index" --only 0
B 2 "wants an integer" --only abc
B 2 "positive integer" --batch-size 0
B 2 "wants an integer" --batch-size nan
B 2 "progress must be" --progress loud
B 2 "unknown option" --frobnicate x
B 2 "needs a value" --seeds
B 2 "width of %d is at most 99" -o "$T/opt/%999d.png"
expect 2 "names one file for 2 jobs" "$LUMEN" batch "$JOB" --seeds 1-2 -o "$T/opt/%s.png"
expect 2 "no parameter 'nope'" "$LUMEN" batch "$JOB" --seeds 1-2 -o "$T/opt/{nope}.png"
L -e "lm.image.write_png('$T/s.png', lm.rand{3, 8, 8})" > "$T/log" 2>&1
U() { w=$1; p=$2; shift 2; expect "$w" "$p" "$LUMEN" upscale "$T/s.png" -o "$T/u.png" "$@"; }
U 2 "scale 0" --scale 0
U 2 "scale -1" --scale -1
U 2 "tile -5" --tile -5
U 2 "tile nan" --tile nan
U 2 "overlap abc" --overlap abc
U 2 "dtype f64" --dtype f64
U 2 "range 1,255" --range 1,255
U 2 "no device 'gpu9'" --device gpu9
U 2 "unknown option --frob" --frob x
expect 2 "needs a value" "$LUMEN" upscale "$T/s.png" -o
expect 2 "non-negative number" "$LUMEN" compare "$T/g.npy" "$T/g.npy" --rtol -1
expect 2 "non-negative number" "$LUMEN" compare "$T/g.npy" "$T/g.npy" --atol nan
expect 2 "compare takes two files" "$LUMEN" compare "$T/g.npy"
expect 2 "unknown option '--bogus'" "$LUMEN" inspect "$T/g.npy" --bogus
expect 2 "inspect takes one file" "$LUMEN" inspect
expect 0 "lumen convert IN OUT" "$LUMEN" convert --help
expect 2 "takes an input and an output file" "$LUMEN" convert esrgan-slim
check "odd options of batch, upscale, compare, inspect and convert: each refused with its status and a message naming it" \
  '[ $opt_bad = 0 ]'

# upscale races itself and a batch (needs an installed model)
if [ -f "$LUMEN_MODELS/esrgan-slim/package.json" ]; then
  L -e "lm.image.write_png('$T/big.png', lm.rand{3, 96, 96})" > "$T/log" 2>&1
  mkdir -p "$T/ur"
  L upscale "$T/big.png" -o "$T/ur/x.png" --quiet > "$T/log.a" 2>&1 & pa=$!
  L upscale "$T/big.png" -o "$T/ur/x.png" --quiet > "$T/log.b" 2>&1; rb=$?
  wait $pa; ra=$?
  check "two upscales to one output: one writes, the other refuses ($ra, $rb)" \
    '[ $((ra + rb)) = 1 ] && grep -q "exists" "$T/log.a" "$T/log.b" && all_decode "$T/ur" && no_tmp "$T/ur"'
  cp "$T/ref/001.png" "$T/ur/keep.png"
  L upscale "$T/big.png" -o "$T/ur/keep.png" --quiet > "$T/log" 2>&1
  check "upscale does not replace an existing file" '[ $? = 1 ] && cmp -s "$T/ur/keep.png" "$T/ref/001.png"'
  L convert esrgan-slim "$T/g.safetensors" > "$T/log" 2>&1
  check "convert does not replace an existing file" '[ $? = 1 ] && grep -q "exists" "$T/log" && L -e "assert(lm.load(\"$T/g.safetensors\").a)" >/dev/null 2>&1'
else
  echo "models absent: the upscale and convert races are skipped"
fi

# ---- the Lua API ----
L -e "
  local function i32(v) return lm.full({1}, v, {dtype = 'i32'}) end
  assert((i32(16777217) // 1):item() == 16777217, 'i32 // 1')
  assert((i32(-7) // 2):item() == -4, 'floor, not truncation')
  assert(not pcall(function() return (i32(7) // 0):item() end), 'integer // 0 is an error')
  assert(not pcall(lm.one_hot, lm.tensor({0, 1}, {dtype = 'u8'}) + 0, 10), 'lazy index 0')
  assert(not pcall(function() return lm.tensor{1, 2, 3}:index_select(1, lm.tensor({1, 4}, {dtype = 'i32'}) + 0) end))
  assert(not pcall(function() return lm.tensor{1, 2, 3}[0] end))
  assert(not pcall(function() return lm.tensor{1, 2, 3}[0 / 0] end))
  assert(not pcall(lm.randn, {2, seed = 'x'}))
  assert(not pcall(lm.zeros, {2, bogus = 1}))
  assert(lm.zeros{2, dtype = 'f16'}.dtype == 'f16')
  local ok, e = pcall(lm.models.load, 'no-such-model')
  assert(not ok and e:find('no-such-model', 1, true), e)
  assert(not pcall(lm.models.load, '/dev/zero'))
  assert(not pcall(lm.cat, {}))
  ok, e = pcall(lm.ones, {2}, {dtype = {}})
  assert(not ok and not e:find('#-1', 1, true), e)
  ok, e = pcall(function() return lm.tensor{1, 2}:view('a') end)
  assert(not ok and not e:find('#-1', 1, true), e)" > "$T/log" 2>&1
check "Lua API: integer //, lazy and bad indices, options in the shape table, bad model names, torch aliases" '[ $? = 0 ]'

# ---- a plain script stopped by a signal ----
mkdir -p "$T/sig"
printf 'local t = lm.randn{2048, 2048}\nfor i = 1, 100000 do lm.save("%s/sig/out.safetensors", {t = t}) end\n' "$T" > "$T/save.lua"
for sig in TERM INT; do
  # the signal goes to lumen itself (timeout(1) would answer SIGINT itself);
  # a watchdog kills it if it never stops
  "$LUMEN" "$T/save.lua" > "$T/log" 2>&1 & p=$!
  (sleep 60; kill -9 $p) 2>/dev/null & w=$!
  i=0; while [ $i -lt 200 ] && [ ! -e "$T/sig/out.safetensors" ]; do sleep 0.05; i=$((i + 1)); done
  sleep 0.3; kill -$sig $p; wait $p; r=$?
  kill $w 2>/dev/null
  want=143; [ $sig = INT ] && want=130
  check "SIG$sig during lm.save in a script: exit $want ($r), no temporary left, the file whole" \
    '[ $r = $want ] && no_tmp "$T/sig" && L -e "assert(lm.load(\"$T/sig/out.safetensors\").t.size == 4194304)" >> "$T/log" 2>&1'
done

# Ctrl-C before the script runs (here while its file, a FIFO nobody writes,
# is being opened) quits with 130; it was "cannot open ...: Interrupted
# system call" and status 1, and during the module's opening it was taken
# for a Ctrl-C at a REPL prompt and lost (issue 34's third sweep)
mkfifo "$T/wait.lua"
"$LUMEN" "$T/wait.lua" > "$T/log" 2>&1 & p=$!
i=0; while [ $i -lt 100 ] && [ "$(cat /proc/$p/wchan 2>/dev/null)" != wait_for_partner ]; do sleep 0.1; i=$((i + 1)); done
kill -INT $p
i=0; while [ $i -lt 100 ] && kill -0 $p 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
kill -KILL $p 2>/dev/null; wait $p; r=$?
check "SIGINT while a script is being opened: exit 130 ($r)" '[ $r = 130 ]'

# ---- the training sample keeps the shipped weights ----
w=samples/models/fashion_flow_w16.safetensors
if [ -f "$w" ]; then
  sum=$(cksum < "$w")
  L samples/train_fashion.lua 1 "$T/grid.png" > "$T/log" 2>&1; r=$?
  check "train_fashion.lua refuses to replace the shipped weights ($r)" \
    '[ $r = 1 ] && grep -q "FLOW_OVERWRITE=1" "$T/log" && [ "$(cksum < "$w")" = "$sum" ]'
fi

echo "$pass passed, $fail failed"
[ $fail = 0 ]
