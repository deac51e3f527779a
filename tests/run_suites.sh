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

for suite in "$@"; do
  case $suite in
    *.sh) name=$suite ;;
    *)    name=$(basename "$suite") ;;
  esac
  log="$LOGDIR/$(echo "$name" | tr / _).log"
  echo "== $suite"
  ts=$(date +%s)
  case $suite in
    *.sh) sh "$suite" >"$log" 2>&1 ;;
    *)    "$suite" >"$log" 2>&1 ;;
  esac
  rc=$?
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
  if [ $rc = 77 ]; then
    reason=$(grep -i 'skip' "$log" | tail -1)
    [ -n "$reason" ] || reason="skipped (no reason given)"
    if echo "$suite $reason" | grep -qi vulkan && vulkan_could_run; then
      f=$((f + 1))
      failed_list="$failed_list$nl  $name: Vulkan could run here but the suite skipped: $reason"
    else
      s=$((s + 1))
      skipped_list="$skipped_list$nl  $name: $reason"
    fi
  elif [ $rc != 0 ] && [ $f = 0 ]; then
    f=1
    failed_list="$failed_list$nl  $name: exited with status $rc"
  elif [ $got = 0 ]; then
    f=$((f + 1))
    failed_list="$failed_list$nl  $name: printed no summary"
  elif [ $f != 0 ]; then
    failed_list="$failed_list$nl  $name: $f failed"
  fi
  secs=$(($(date +%s) - ts))
  echo "== $name: $p passed, $f failed, $s skipped ($secs s)"
  times="$times$nl$secs $name"
  total_p=$((total_p + p)) total_f=$((total_f + f)) total_s=$((total_s + s))
done

echo
# the slowest suites: the suite must stay well inside CI's time (.ci/run)
echo "slowest suites (seconds):$(echo "$times" | sort -rn | head -8 | sed 's/^/  /' | tr '\n' ' ')"
[ -n "$skipped_list" ] && echo "skipped suites:$skipped_list"
[ -n "$failed_list" ] && echo "failed suites:$failed_list"
echo "$total_p passed, $total_f failed, $total_s skipped"
[ $total_f = 0 ]
