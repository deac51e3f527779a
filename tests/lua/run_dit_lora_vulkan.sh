#!/bin/sh
# tests/lua/run_dit_lora_vulkan.sh - test_dit_lora.lua again on Vulkan (lavapipe in
# CI): LoRA on the DiT families, merged on the device.
cd "$(dirname "$0")/../.." || exit 1
. tests/lib.sh   # BUILD, vulkan_device, relay, summary
if ! vulkan_device; then
  echo "no Vulkan device: test_dit_lora.lua on Vulkan skipped"
  exit 77
fi
relay env LUMEN_DEVICE=vulkan "$BUILD/lumen" tests/lua/runner.lua tests/lua/test_dit_lora.lua
echo "test_dit_lora.lua with LUMEN_DEVICE=vulkan:"
summary
