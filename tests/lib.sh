# tests/lib.sh - what the shell suites share, sourced from the repository
# root (`. tests/lib.sh`): BUILD, the counts p and f, checks on a command's
# exit status with its output in $T/log (set T first) shown when it fails,
# other suites' "N passed, N failed" lines added to the counts, whether
# build/lumen opens a Vulkan device, and the closing line.  (tests/batch/lib.sh
# is the batch suites' harness: checks on a shell expression.)
BUILD=${BUILD:-build}
p=0 f=0

# check NAME COMMAND...: passes when the command succeeds
check() {
  name=$1; shift
  if "$@" >"$T/log" 2>&1; then p=$((p + 1)); echo "ok   $name"
  else f=$((f + 1)); echo "FAIL $name"; sed 's/^/     /' "$T/log"; fi
}

# fails NAME RC PATTERN COMMAND...: the command exits RC saying PATTERN
fails() {
  name=$1; want=$2; pat=$3; shift 3
  "$@" >"$T/log" 2>&1; rc=$?
  if [ $rc != "$want" ]; then f=$((f + 1)); echo "FAIL $name (exit $rc, not $want)"; sed 's/^/     /' "$T/log"
  elif grep -q -- "$pat" "$T/log"; then p=$((p + 1)); echo "ok   $name"
  else f=$((f + 1)); echo "FAIL $name (no \"$pat\")"; sed 's/^/     /' "$T/log"; fi
}

# relay COMMAND...: runs a suite that ends with "N passed, N failed", prints
# its output but that line (left in $line) and adds its counts to p and f;
# no such line is one failure (and status 1)
relay() {
  out=$("$@" 2>&1)
  echo "$out" | grep -v '^[0-9]* passed, [0-9]* failed$'
  line=$(echo "$out" | grep '^[0-9]* passed, [0-9]* failed$' | tail -1)
  if [ -z "$line" ]; then echo "no summary from: $*"; f=$((f + 1)); return 1; fi
  p=$((p + $(echo "$line" | cut -d' ' -f1)))
  f=$((f + $(echo "$line" | cut -d' ' -f3)))
}

# whether $BUILD/lumen opens a Vulkan device (lavapipe counts)
vulkan_device() {
  LUMEN_DEVICE=vulkan "$BUILD/lumen" -e 'assert(tostring(lm.device()):match("vulkan"))' >/dev/null 2>&1
}

# the closing line run_suites.sh counts; fails when anything did
summary() {
  echo "$p passed, $f failed"
  [ "$f" = 0 ]
}
