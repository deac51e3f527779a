#!/bin/sh
# validate.sh - the Vulkan tests once more under the Khronos validation layer
# (LUMEN_VK_VALIDATE=1): any validation message fails the run, one printed
# at exit too.  The parity harness runs a sixth of its cases here
# (PARITY_QUICK=1): the layer is slow.
# Some run a second time with device memory left unmapped (LUMEN_VK_NO_MAP=1),
# as on a discrete GPU: transfers through the staging block, small uploads
# recorded into the command buffer (backends/vulkan/memory.c).
# Exits 77 (skipped, see tests/run_suites.sh) when the build has no Vulkan or
# the machine has no device.
BUILD=${BUILD:-build}
pass=0 fail=0 skip=0
# run TEST LOG-SUFFIX WHAT [VAR=VALUE...]
run() {
    t=$1 suffix=$2 what=$3
    shift 3
    bin="$BUILD/tests/$t"
    [ -x "$bin" ] || return 0
    log="$BUILD/$t.$suffix.log"
    env "$@" LUMEN_VK_VALIDATE=1 PARITY_QUICK=1 XDG_CACHE_HOME="$BUILD/cache" "$bin" >"$log" 2>&1
    rc=$?
    # a message after the test's own count (the device taken down at exit,
    # backends/vulkan/device.c: objects left at vkDestroyDevice) is in the log only
    [ $rc = 0 ] && grep -q "vulkan validation" "$log" && rc=1
    if [ $rc = 0 ]; then
        pass=$((pass + 1))
    elif [ $rc = 77 ]; then
        skip=$((skip + 1))
        tail -1 "$log"
    else
        fail=$((fail + 1))
        echo "FAIL: $t $what (log: $log)"
        grep -E "validation|FAIL" "$log" | head -20
    fi
}
for t in test_vulkan test_vulkan_parity test_vulkan_nn_norm test_vulkan_nn_conv test_vulkan_nn_index test_vk_quant test_vk_upload test_vk_replay \
         test_vk_prewarm; do
    run $t validate "under the validation layer"
done
# (the transfers are the same whatever a suite computes: the conv suite's
# cases, unmapped, are left to the mapped run above)
for t in test_vulkan test_vulkan_placement test_profile test_vk_upload test_vk_replay; do
    run $t nomap "with unmapped device memory, validated" LUMEN_VK_NO_MAP=1
done
if [ $pass = 0 ] && [ $fail = 0 ]; then
    echo "validate.sh: no Vulkan device or no Vulkan build; skipped"
    exit 77
fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
