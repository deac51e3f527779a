#!/bin/sh
# tests/repl/run.sh - drives build/lumen through a pseudo-terminal (tmux on
# a private socket) and through pipes: completion, history, continuation,
# auto-print, Ctrl-C, help and commands, and piped-mode exit codes.
# Prints "N passed, N failed".
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
LUMEN=${LUMEN:-"$(pwd)/$BUILD/lumen"}
TMPD=$(mktemp -d /tmp/lumen-repl.XXXXXX)
HIST="$TMPD/history"
SOCK="lumen-test-$$-0"
nsession=0
pass=0; fail=0

T() { tmux -L "$SOCK" -f /dev/null "$@"; }
cleanup() { T kill-server 2>/dev/null; rm -rf "$TMPD"; }
# a fresh tmux server (own socket) per session: reusing a socket races
# with the old server shutting down
trap cleanup EXIT

ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; if [ -n "$2" ]; then echo "$2" | tail -15 | sed 's/^/  | /'; fi; }

screen() { T capture-pane -p -t r -S -300 2>/dev/null; }
# waits up to ~15 s for a line of the screen to match the grep pattern (a
# loaded CI machine can take seconds to start the REPL or run a line)
wait_for() {
  i=0
  while [ $i -lt 150 ]; do
    screen | grep -q -- "$1" && return 0
    sleep 0.1; i=$((i + 1))
  done
  return 1
}
expect() { if wait_for "$2"; then ok; else bad "$1" "$(screen)"; fi; }
# counts matching lines now
count() { screen | grep -c -- "$1"; }
send() { T send-keys -t r -l "$1"; }
key() { T send-keys -t r "$@"; }
line() { send "$1"; key Enter; }
# waits up to ~15 s for an empty prompt as the screen's last line: keys typed
# while the last line still runs are echoed before the prompt is drawn (a
# loaded machine), which a completion check anchored at "> " would miss
ready() {
  i=0
  while [ $i -lt 150 ]; do
    [ "$(screen | grep -v '^$' | tail -1)" = ">" ] && return 0
    sleep 0.1; i=$((i + 1))
  done
  return 1
}
# types $1 at a fresh prompt and presses Tab
tab() { ready; send "$1"; key Tab; }

start() {
  T kill-server 2>/dev/null
  nsession=$((nsession + 1)); SOCK="lumen-test-$$-$nsession"
  # wide enough for :profile's table (an alloc row widens its op column)
  T new-session -d -s r -x 140 -y 50 \
    "cd '$TMPD' && env LUMEN_HISTORY='$HIST' TERM=xterm NO_COLOR=1 '$LUMEN' $*; echo EXIT=\$?; sleep 600"
  wait_for '^>' || bad "REPL starts" "$(screen)"
}

# ---- auto-print, ;, _, errors ----
start
line '1 + 2'
expect "expression prints its value" '^3$'
line 'x = 5'
line 'x * 2 \;'
line 'x * 3'
expect "auto-print after a suppressed line" '^15$'
if [ "$(count '^10$')" = 0 ]; then ok; else bad "trailing ; suppresses printing" "$(screen)"; fi
line '_ + 1'
expect "_ holds the last value" '^16$'
line '40 + 2 \;'
line '_ * 10'
expect "_ is the last value shown: a line ending in ; leaves it (IPython's rule)" '^160$'
line 'lm.ones{2} + lm.ones{3}'
expect "op errors name the shapes" '\[2\].*\[3\]'
line 'lm.tensor{1, 2} * 2'
expect "session usable after an error" '^\[2., 4.\]$'
line 'lm.save("x.npy", lm.zeros{1}, {bitz = 1})'
expect "an unknown option names the function and the option" "lm.save: unknown option 'bitz'"
line 'lm.ones{2}:gelu("tanh")'
expect "a positional gelu string is an error" 'gelu: approximate is given by name'
line 'lm.zeros({2}, "f32", 3)'
expect "extra arguments name the function" 'lm.zeros: too many arguments'
line 'lm.tensor{3, 4} * 2'
expect "session usable after option errors" '^\[6., 8.\]$'
expect "tensor footer" '^<tensor f32 \[2\] [a-z0-9:]*>$'
line 'lm.zeros{3, 64, 65}.shape'
expect "a shape shows as {3, 64, 65}" '^{3, 64, 65}$'
line 'print(lm.zeros{3, 64, 66}.shape, #lm.zeros{7}.shape)'
expect "print(t.shape) prints {3, 64, 66}, not table: 0x..." '^{3, 64, 66}[[:space:]]*1$'

# ---- continuation ----
line 'for i = 1, 2 do'
expect "incomplete chunk gives .. prompt" '^\.\.'
line 'print(i * 10)'
line 'end'
expect "continued chunk runs" '^20$'

# ---- completion (never evaluates) ----
tab 'lm.zer'; key Enter
expect "completes module fields" '^> lm\.zeros$'
tab 'lm.softm'; key Enter
expect "completes NN functions" '^> lm\.softmax$'
tab 'lm.scaled_dot'; key Enter
expect "completes long NN names" '^> lm\.scaled_dot_product_attention$'
line 'z = lm.ones{2} + 1'
tab 'z:resh'; send '{2, 1}.shape[1]'; key Enter
expect "completes tensor methods" '^> z:reshape{2, 1}.shape\[1\]$'
tab 'z.evalu'; key Enter
expect "completes tensor properties without evaluating" '^false$'
tab 'z:log_so'; send '()[2]:exp():item()'; key Enter
expect "completes NN tensor methods" '^> z:log_softmax()\[2\]:exp():item()$'
line 'my_long_global_name = 1'
tab 'my_long_gl'; key Enter
expect "completes globals" '^> my_long_global_name$'
: > "$TMPD/lumen_target_file.txt"
tab 'io.open("lumen_tar'; send ')'; key Enter
expect "completes file names in strings" 'lumen_target_file.txt")$'

# ---- tables of lazy tensors, bracketed paste ----
line 'tb = {lm.ones{2} + 1, n = 3}'
line 'tb'
expect "a table prints its tensors briefly" '^{<tensor f32 \[2\] [a-z0-9:]* lazy>, n = 3}$'
line 'tb[1].evaluated'
expect "printing a table does not evaluate its tensors" '^false$'
T set-buffer "$(printf 'p1 = 20\np2 = p1 + 1')"
T paste-buffer -p -t r
key Enter
line 'p2 * 2'
expect "a bracketed paste runs as one chunk" '^42$'

# ---- help and commands ----
line '?lm.zeros'
expect "?name prints the docstring" 'A tensor of zeros'
line 'help(lm.ones)'
expect "help(f) prints the docstring" 'A tensor of ones'
line ':time lm.ones{100}:sum()'
expect ":time reports wall time" '^wall time: '
line ':mem'
expect ":mem shows memory" '^cpu .*active'
line ':profile lm.ones{3, 3}:matmul(lm.ones{3, 3}):sum()'
expect ":profile prints the kernel table" '^  matmul  *sgemm  *cpu  *f32  *host  *1  '
expect ":profile shows the values" '^27\.'
line ':profile error("inside the profile")'
expect ":profile reports an error" 'inside the profile'
line ':profile lm.ones{5}:exp()'
expect "the session profiles again after an error" '^  exp  .*cpu  *f32  *host  *1  .*\[5\] -> \[5\]'
line ':profile lm.tensor{9} * 11 \;'
expect ":profile with ; prints the table" '^  mul '
if [ "$(count '^\[99\.\]$')" = 0 ]; then ok; else bad ":profile expr; does not print the value" "$(screen)"; fi

line ':diff (lm.ones{4} * 70000):sum()'
expect ":diff finds the f16 overflow at the mul of line 1" '^first  *1  mul  *stdin:1 '
line 'ev = (lm.ones{4} * 70000):sum():eval()'
line ':diff ev'
expect ":diff of an evaluated value says nothing was compared" '^nothing compared: the function returned tensors already evaluated'
if [ "$(count 'no divergence')" = 0 ]; then ok; else bad ":diff of an evaluated value claims no divergence" "$(screen)"; fi
line ':time lm.tensor{7} * 11 \;'
expect ":time with ; reports the time" '^wall time: .*' 
if [ "$(count '^\[77\.\]$')" = 0 ]; then ok; else bad ":time expr; does not print the value" "$(screen)"; fi

# ---- Ctrl-C ----
send 'abc'; key C-c
sleep 0.2
line '40 + 3'
expect "Ctrl-C at the prompt clears the line" '^43$'
line 'while true do end'
sleep 0.5
key C-c
expect "Ctrl-C interrupts a running loop" 'interrupted'
sleep 1.2
line 'for i = 1, 1e9 do local t = lm.ones{4} + i end'
sleep 0.5
key C-c
sleep 1.2
line 'x + 100'
expect "the session survives Ctrl-C" '^105$'
line 'hist_marker = 42'
line ':q'
expect ":q quits with status 0" '^EXIT=0$'

# ---- history ----
if grep -q 'hist_marker = 42' "$HIST" 2>/dev/null; then ok; else bad "history file written" "$(cat "$HIST" 2>&1)"; fi
start
key Up; key Up
expect "history recalled with Up" '^> hist_marker = 42$'
key C-u
key C-d
expect "Ctrl-D quits" '^EXIT=0$'

# ---- a second Ctrl-C within a second quits ----
start
# the second is sent once the first shows: two SIGINTs pending together
# are one signal (they coalesce), and a loaded machine delays the handler
key C-c; wait_for '^\^C'; key C-c
expect "double Ctrl-C quits" '^EXIT='

# ---- -i runs a script, then stays ----
echo 'pre = 6 * 7' > "$TMPD/pre.lua"
start -i pre.lua
line 'pre'
expect "-i script then the REPL" '^42$'

# ---- piped mode ----
out=$(echo 'print(1 + 1)' | "$LUMEN" 2>&1); rc=$?
if [ $rc = 0 ] && [ "$out" = 2 ]; then ok; else bad "piped script runs without prompt" "rc=$rc out=$out"; fi
out=$(echo 'error("boom")' | "$LUMEN" 2>&1); rc=$?
if [ $rc != 0 ] && echo "$out" | grep -q boom; then ok; else bad "piped failure exits non-zero" "rc=$rc out=$out"; fi
out=$(echo 'x = (' | "$LUMEN" 2>&1); rc=$?
if [ $rc != 0 ]; then ok; else bad "piped syntax error exits non-zero" "rc=$rc out=$out"; fi
out=$(echo 'print(lm.ones{2}:sum():item())' | "$LUMEN" - 2>&1); rc=$?
if [ $rc = 0 ] && [ "$out" = 2.0 ]; then ok; else bad "lumen - reads stdin" "rc=$rc out=$out"; fi
printf 'print(..., #arg, arg[0] ~= nil)\nos.exit(tonumber(arg[2]))\n' > "$TMPD/s.lua"
out=$("$LUMEN" "$TMPD/s.lua" a 3 2>&1); rc=$?
if [ $rc = 3 ] && [ "$out" = "$(printf 'a\t2\ttrue')" ]; then ok; else bad "script gets arg and ..." "rc=$rc out=$out"; fi
out=$("$LUMEN" -e 'print(lm.arange(3):sum():item())' 2>&1); rc=$?
if [ $rc = 0 ] && [ "$out" = 3 ]; then ok; else bad "-e runs code" "rc=$rc out=$out"; fi
"$LUMEN" -e 'lm.ones{2}:matmul(lm.ones{3})' 2>/dev/null </dev/null; rc=$?
if [ $rc != 0 ]; then ok; else bad "-e failure exits non-zero"; fi
"$LUMEN" "$TMPD/missing.lua" 2>/dev/null; rc=$?
if [ $rc != 0 ]; then ok; else bad "missing script exits non-zero"; fi

# ---- command-line help, version, compare's 1-based indices ----
for sub in compare inspect; do
  for h in -h --help; do
    out=$("$LUMEN" $sub $h 2>/dev/null); rc=$?
    if [ $rc = 0 ] && echo "$out" | grep -q "usage: lumen compare"; then ok; else bad "lumen $sub $h prints usage, exit 0" "rc=$rc out=$out"; fi
  done
done
out=$("$LUMEN" --version 2>&1); rc=$?
if [ $rc = 0 ] && echo "$out" | grep -q '^lumen [0-9]'; then ok; else bad "lumen --version" "rc=$rc out=$out"; fi
out=$("$LUMEN" --help 2>/dev/null); rc=$?
if [ $rc = 0 ] && echo "$out" | grep -q -- '--version'; then ok; else bad "lumen --help on stdout" "rc=$rc out=$out"; fi
"$LUMEN" -e "lm.save('$TMPD/ca.npy', lm.tensor{{1, 2, 3}, {4, 5, 6}}); lm.save('$TMPD/cb.npy', lm.tensor{{1, 2, 3}, {4, 5, 7}})"
out=$("$LUMEN" compare "$TMPD/ca.npy" "$TMPD/cb.npy" 2>&1); rc=$?
lua_out=$("$LUMEN" -e "print(lm.compare(lm.load('$TMPD/ca.npy'), lm.load('$TMPD/cb.npy')))" 2>&1)
if [ $rc = 1 ] && echo "$out" | grep -q 'worst \[2,3\]: 6 vs 7' && echo "$lua_out" | grep -q 'worst *\[2,3\]: 6 vs 7'; then ok
else bad "lumen compare's worst index counts from 1, as lm.compare's" "rc=$rc out=$out lua=$lua_out"; fi
# nothing compared is no success (as lm.diff's): two files with no tensors, an --only matching none
"$LUMEN" -e "lm.save('$TMPD/ce.safetensors', {})"
out=$("$LUMEN" compare "$TMPD/ce.safetensors" "$TMPD/ce.safetensors" 2>&1); rc=$?
if [ $rc = 1 ] && echo "$out" | grep -q "^lumen compare: $TMPD/ce.safetensors against $TMPD/ce.safetensors: nothing compared: neither side holds a tensor" &&
   echo "$out" | grep -q '^nothing compared: neither side holds a tensor (0 missing, 0 extra)'; then ok
else bad "lumen compare of two files with no tensors says nothing was compared, exit 1" "rc=$rc out=$out"; fi
out=$("$LUMEN" compare "$TMPD/ca.npy" "$TMPD/ca.npy" --only nomatch 2>&1); rc=$?
if [ $rc = 1 ] && echo "$out" | grep -q 'nothing compared: only "nomatch" selects no name on either side'; then ok
else bad "lumen compare --only matching nothing says so, exit 1" "rc=$rc out=$out"; fi
# tolerances: inf as lm.compare's math.huge; NaN, negatives and an overflow refused
out=$("$LUMEN" compare "$TMPD/ca.npy" "$TMPD/cb.npy" --rtol inf --atol inf 2>&1); rc=$?
if [ $rc = 0 ] && echo "$out" | grep -q '^ok: 1 compared'; then ok
else bad "lumen compare --rtol inf --atol inf passes (lm.compare takes math.huge)" "rc=$rc out=$out"; fi
for v in nan -1 -inf 1e309 x; do
  out=$("$LUMEN" compare "$TMPD/ca.npy" "$TMPD/cb.npy" --atol "$v" 2>&1); rc=$?
  if [ $rc = 2 ] && echo "$out" | grep -q 'take a non-negative number (inf too)'; then ok
  else bad "lumen compare --atol $v refused" "rc=$rc out=$out"; fi
done

echo "$pass passed, $fail failed"
[ $fail = 0 ]
