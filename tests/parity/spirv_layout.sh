#!/bin/sh
# spirv_layout.sh - every SPIR-V module of the build free of what the
# validation layer rejects on the H200 (tests/parity/spirv_layout.py says
# what and why).  Exits 77 (skipped) when the build has no Vulkan.
BUILD=${BUILD:-build}
if [ ! -d "$BUILD/gen/spv" ]; then
    echo "spirv_layout.sh: no Vulkan build ($BUILD/gen/spv); skipped"
    exit 77
fi
exec python3 "$(dirname "$0")/spirv_layout.py" "$BUILD/gen/spv"
