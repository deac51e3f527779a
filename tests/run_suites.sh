#!/bin/sh
# tests/run_suites.sh SUITE... - runs every test suite `make test` names and
# ends with one line, "N passed, N failed, N skipped", counted over all of
# them.  A suite is a cmocka program (its "[  PASSED  ] N test(s)." lines are
# counted) or a shell script that ends with "N passed, N failed" (", N
# skipped" may follow).  A suite that skips itself as a whole exits 77 after
# printing its reason.  A suite that fails without counting a failure, or
# prints no summary, counts as one failure.
#
# Skipped Vulkan suites: a skip is honest only when Vulkan cannot run here.
# Where the build asked for Vulkan (VULKAN_REQUESTED != 0) and the machine
# could run it (headers, glslc and a Vulkan driver such as lavapipe), or when
# LUMEN_REQUIRE_VULKAN=1 (CI), a Vulkan suite that skips is a failure.
BUILD=${BUILD:-build}
export BUILD
LOGDIR="$BUILD/test-logs"
# pipeline caches and the like stay inside the build (test_vulkan checks
# that the cache is written when XDG_CACHE_HOME is set)
XDG_CACHE_HOME=${XDG_CACHE_HOME:-$(pwd)/$BUILD/cache}
export XDG_CACHE_HOME
mkdir -p "$LOGDIR"

vulkan_could_run() {
  [ "${VULKAN_REQUESTED:-1}" != 0 ] || return 1
  [ "${LUMEN_REQUIRE_VULKAN:-0}" = 1 ] && return 0
  pkg-config --exists vulkan 2>/dev/null || return 1
  command -v glslc >/dev/null 2>&1 || return 1
  ls /usr/share/vulkan/icd.d/*.json >/dev/null 2>&1
}

total_p=0 total_f=0 total_s=0
times=
skipped_list=
failed_list=
nl='
'

# Two lanes where the machine has two or more processors: the long Vulkan
# suites below (each one process, mostly on one core: lavapipe compiles a
# pipeline on the calling thread) run one after another in a second lane
# beside the rest.  They share no file with any other suite (their logs are
# their own; the pipeline caches are written through a temporary name and a
# rename), and their output is printed, and counted, after the first lane's.
# TEST_LANES=1 runs everything in one lane, in the order given; TEST_LANE2
# names the second lane's suites (their file names).  The two lanes'
# seconds in a fresh-clone CI (2026-11-30, decca15, lavapipe, 2 cores):
# the first five 952, the rest of the suites 1338; the seven after them
# (187 s there, C programs that read their fixtures and write no file)
# even the lanes out.
LANE2=${TEST_LANE2-test_vk_quant test_ops_all test_vulkan_nn_norm test_vulkan_parity test_vulkan_nn_conv
       test_sd_hires test_ops_ref test_vk_prewarm test_vulkan_fused test_vk_share test_vae test_sd_inpaint}
ncpu=$(nproc 2>/dev/null || echo 1)
[ "${TEST_LANES:-2}" -ge 2 ] 2>/dev/null && [ "$ncpu" -ge 2 ] || LANE2=

suite_name() {
  case $1 in
    *.sh) echo "$1" ;;
    *)    basename "$1" ;;
  esac
}
suite_log() { echo "$LOGDIR/$(suite_name "$1" | tr / _).log"; }

# run_one SUITE: runs it; its output goes to its log, its exit status and
# its seconds beside it
run_one() {
  log=$(suite_log "$1")
  ts=$(date +%s)
  case $1 in
    *.sh) sh "$1" >"$log" 2>&1 ;;
    *)    "$1" >"$log" 2>&1 ;;
  esac
  echo $? >"$log.rc"
  echo $(($(date +%s) - ts)) >"$log.secs"
}

in_lane2() {
  for l in $LANE2; do [ "$(basename "$1")" = "$l" ] && return 0; done
  return 1
}

# account SUITE: prints its log and counts what it reported
account() {
  suite=$1
  name=$(suite_name "$suite")
  log=$(suite_log "$suite")
  rc=$(cat "$log.rc" 2>/dev/null || echo 1)
  secs=$(cat "$log.secs" 2>/dev/null || echo 0)
  rm -f "$log.rc" "$log.secs"
  cat "$log"
  p=0 f=0 s=0 got=0
  # cmocka: one summary per group
  for n in $(sed -n 's/^\[  PASSED  \] \([0-9][0-9]*\) test(s)\.$/\1/p' "$log"); do p=$((p + n)); got=1; done
  for n in $(sed -n 's/^\[  FAILED  \] \([0-9][0-9]*\) test(s), listed below:$/\1/p' "$log"); do f=$((f + n)); got=1; done
  for n in $(sed -n 's/^\[  SKIPPED \] \([0-9][0-9]*\) test(s), listed below:$/\1/p' "$log"); do s=$((s + n)); got=1; done
  # scripts: the last plain summary line
  if [ $got = 0 ]; then
    line=$(grep -E '^([A-Za-z_-]+: )?[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$' "$log" | tail -1)
    if [ -n "$line" ]; then
      got=1
      set -- $(echo "${line#*: }" | tr -d ',')
      p=$1 f=$3 s=${5:-0}
      shift $#
    fi
  fi
  reason=
  if [ "$rc" = 77 ]; then
    reason=$(grep -i 'skip' "$log" | tail -1)
    [ -n "$reason" ] || reason="skipped (no reason given)"
    if echo "$suite $reason" | grep -qi vulkan && vulkan_could_run; then
      f=$((f + 1))
      failed_list="$failed_list$nl  $name: Vulkan could run here but the suite skipped: $reason"
    else
      s=$((s + 1))
      skipped_list="$skipped_list$nl  $name: $reason"
    fi
  elif [ "$rc" != 0 ] && [ $f = 0 ]; then
    f=1
    failed_list="$failed_list$nl  $name: exited with status $rc"
  elif [ $got = 0 ]; then
    f=$((f + 1))
    failed_list="$failed_list$nl  $name: printed no summary"
  elif [ $f != 0 ]; then
    failed_list="$failed_list$nl  $name: $f failed"
  fi
  echo "== $name: $p passed, $f failed, $s skipped ($secs s)"
  times="$times$nl$secs $name"
  total_p=$((total_p + p)) total_f=$((total_f + f)) total_s=$((total_s + s))
}

lane2_list=
lane1_list=
for suite in "$@"; do
  if in_lane2 "$suite"; then lane2_list="$lane2_list $suite"; else lane1_list="$lane1_list $suite"; fi
done
lane2_pid=
if [ -n "$lane2_list" ]; then
  echo "== second lane:$lane2_list"
  ( for suite in $lane2_list; do run_one "$suite"; done ) &
  lane2_pid=$!
fi
t_all=$(date +%s)
for suite in $lane1_list; do
  echo "== $suite"
  run_one "$suite"
  account "$suite"
done
if [ -n "$lane2_pid" ]; then
  wait "$lane2_pid"
  for suite in $lane2_list; do
    echo "== $suite (second lane)"
    account "$suite"
  done
fi

echo
# the slowest suites: the suite must stay well inside CI's time (.ci/run)
echo "slowest suites (seconds):$(echo "$times" | sort -rn | head -8 | sed 's/^/  /' | tr '\n' ' ')"
[ -n "$skipped_list" ] && echo "skipped suites:$skipped_list"
[ -n "$failed_list" ] && echo "failed suites:$failed_list"
echo "all suites: $(($(date +%s) - t_all)) s of wall time"
echo "$total_p passed, $total_f failed, $total_s skipped"
[ $total_f = 0 ]
