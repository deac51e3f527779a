#!/bin/sh
# tests/lua/run_grad_vulkan.sh - test_dit_lora.lua again on Vulkan (lavapipe in
# CI): LoRA on the DiT families, merged on the device.
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
if ! LUMEN_DEVICE=vulkan "$BUILD/lumen" -e 'assert(tostring(lm.device()):match("vulkan"))' >/dev/null 2>&1; then
  echo "no Vulkan device: test_dit_lora.lua on Vulkan skipped"
  exit 77
fi
out=$(LUMEN_DEVICE=vulkan "$BUILD/lumen" tests/lua/runner.lua tests/lua/test_dit_lora.lua 2>&1)
echo "$out" | grep -v '^[0-9]* passed, [0-9]* failed$'
line=$(echo "$out" | grep '^[0-9]* passed, [0-9]* failed$' | tail -1)
[ -n "$line" ] || { echo "no summary"; echo "0 passed, 1 failed"; exit 1; }
echo "test_dit_lora.lua with LUMEN_DEVICE=vulkan:"
echo "$line"
[ "$(echo "$line" | cut -d' ' -f3)" = 0 ]
