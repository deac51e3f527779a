#!/bin/sh
# tests/suites_selftest.sh - tests/run_suites.sh counts honestly: a Vulkan
# suite made to find no device (VK_DRIVER_FILES pointing at nothing) is a
# failure where Vulkan could run, a skip when the build asked for no Vulkan;
# a crashing suite and one without a summary are failures; counts add up.
# Prints "N passed, N failed".
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
T=$(mktemp -d /tmp/lumen-suites.XXXXXX)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0
check() {  # check NAME EXPECTED-RC EXPECTED-LAST-LINE-REGEX -- runner args
  name=$1 want_rc=$2 want=$3; shift 4
  out=$(BUILD="$T/b" "$@" 2>&1); rc=$?
  last=$(echo "$out" | tail -1)
  if [ "$rc" = "$want_rc" ] && echo "$last" | grep -Eq "$want"; then pass=$((pass + 1))
  else fail=$((fail + 1)); echo "FAIL: $name (rc $rc, last line: $last)"; echo "$out" | tail -8 | sed 's/^/  | /'; fi
}
mkdir -p "$T/b"
printf 'echo "3 passed, 0 failed"\n' > "$T/ok.sh"
printf 'echo "2 passed, 1 failed, 4 skipped"; exit 1\n' > "$T/onefail.sh"
printf 'echo "all good"\n' > "$T/nosummary.sh"
printf 'echo "1 passed, 0 failed"; kill -SEGV $$\n' > "$T/crash.sh"
printf 'echo "needs vulkan: no Vulkan device; skipped"; exit 77\n' > "$T/vkskip.sh"
printf 'echo "no network here; skipped"; exit 77\n' > "$T/otherskip.sh"

check "sums passing suites" 0 '^6 passed, 0 failed, 0 skipped$' -- sh tests/run_suites.sh "$T/ok.sh" "$T/ok.sh"
check "a failed count fails the run" 1 '^5 passed, 1 failed, 4 skipped$' -- sh tests/run_suites.sh "$T/ok.sh" "$T/onefail.sh"
check "no summary is a failure" 1 '^0 passed, 1 failed, 0 skipped$' -- sh tests/run_suites.sh "$T/nosummary.sh"
check "a crash after a summary is a failure" 1 '^1 passed, 1 failed, 0 skipped$' -- sh tests/run_suites.sh "$T/crash.sh"
check "a non-Vulkan skip is a skip" 0 '^0 passed, 0 failed, 1 skipped$' -- sh tests/run_suites.sh "$T/otherskip.sh"
# (VULKAN_REQUESTED=1: `make VULKAN=0 test` exports 0 to every suite)
check "a Vulkan skip under LUMEN_REQUIRE_VULKAN fails" 1 '^0 passed, 1 failed, 0 skipped$' -- env VULKAN_REQUESTED=1 LUMEN_REQUIRE_VULKAN=1 sh tests/run_suites.sh "$T/vkskip.sh"
check "a Vulkan skip with VULKAN=0 is a skip" 0 '^0 passed, 0 failed, 1 skipped$' -- env VULKAN_REQUESTED=0 LUMEN_REQUIRE_VULKAN=1 sh tests/run_suites.sh "$T/vkskip.sh"

# the second lane: its suites are counted after the first lane's, failures too
printf 'sleep 1; echo "5 passed, 0 failed"\n' > "$T/slow.sh"
check "a second lane's passes are counted" 0 '^11 passed, 0 failed, 0 skipped$' -- env TEST_LANES=2 TEST_LANE2="slow.sh" sh tests/run_suites.sh "$T/slow.sh" "$T/ok.sh" "$T/ok.sh"
check "a second lane's failure fails the run" 1 '^5 passed, 1 failed, 4 skipped$' -- env TEST_LANES=2 TEST_LANE2="onefail.sh" sh tests/run_suites.sh "$T/onefail.sh" "$T/ok.sh"
check "a second lane's crash is a failure" 1 '^4 passed, 1 failed, 0 skipped$' -- env TEST_LANES=2 TEST_LANE2="crash.sh" sh tests/run_suites.sh "$T/crash.sh" "$T/ok.sh"
check "one lane when asked" 0 '^8 passed, 0 failed, 0 skipped$' -- env TEST_LANES=1 TEST_LANE2="slow.sh" sh tests/run_suites.sh "$T/slow.sh" "$T/ok.sh"

# The real thing: the Vulkan suite with its device hidden, where Vulkan could
# run (built with it, headers, glslc and a driver here).
if [ -x "$BUILD/tests/test_vulkan" ] && grep -q 'VK_ENABLED := yes' "$BUILD/config.mk" 2>/dev/null \
   && ls /usr/share/vulkan/icd.d/*.json >/dev/null 2>&1; then
  check "Vulkan made unavailable fails the run" 1 '^0 passed, 1 failed, 0 skipped$' -- \
    env VK_DRIVER_FILES=/nonexistent.json VK_ICD_FILENAMES=/nonexistent.json sh tests/run_suites.sh "$BUILD/tests/test_vulkan"
else
  echo "no Vulkan build or driver here: the hidden-device case is covered by the scripted ones"
fi
echo "$pass passed, $fail failed"
[ $fail = 0 ]
