#!/bin/sh
# tests/lua/run_grad_vulkan.sh - test_grad.lua again on Vulkan (lavapipe in
# CI): every backward rule, the optimisers and the short training run.
cd "$(dirname "$0")/../.." || exit 1
. tests/lib.sh   # BUILD, vulkan_device, relay, summary
if ! vulkan_device; then
  echo "no Vulkan device: test_grad.lua on Vulkan skipped"
  exit 77
fi
relay env LUMEN_DEVICE=vulkan "$BUILD/lumen" tests/lua/runner.lua tests/lua/test_grad.lua
echo "test_grad.lua with LUMEN_DEVICE=vulkan:"
summary
