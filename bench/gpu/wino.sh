#!/bin/sh
# wino.sh [LUMEN] - the Winograd F(2x2,3x3) f32 conv (LUMEN_VK_CONV_F32=winograd,
# issue 36) on the GPU, in one call, from the repository's root with the
# device set up as issue36.sh's callers do:
#  1. conv.py: the f32 3x3 convs of ESRGAN (64->32, 192->64 at 128², 192->32,
#     64->64 at 256²), the 128->128 at 512² and the SD/SDXL VAE
#     decoder's (512 at 128² and 256², 256 at 512², 256->128 and 128->128 at
#     1024²) beside cuDNN: the default kernel, Winograd with the GEMM's 64-row
#     tile (LUMEN_VK_MM_F32=t64: most ESRGAN convs have 32 or 64 output
#     channels) and Winograd as matmul chooses (conv.py's own column), each
#     with its NMSE against the CPU's f32 conv (CONV_CHECK=1);
#  2. conv_err.lua: the error against the CPU's f64 sum, default and Winograd.
# WINO_CASES replaces step 1's cases, WINO_ERR step 2's; CONV_TORCH=0 leaves
# cuDNN out (a smoke run on lavapipe: WINO_CASES=conv:1:8:8:16:3:f32
# WINO_ERR=conv:1:8:8:8 CONV_TORCH=0 sh bench/gpu/wino.sh).
L=${1:-build/lumen}
B=$(dirname "$0")
CASES=${WINO_CASES:-conv:1:64:32:128:3:f32,conv:1:192:64:128:3:f32,conv:1:192:32:256:3:f32,conv:1:64:64:256:3:f32,conv:1:128:128:512:3:f32,conv:1:512:512:128:3:f32,conv:1:512:512:256:3:f32,conv:1:256:256:512:3:f32,conv:1:256:128:1024:3:f32,conv:1:128:128:1024:3:f32}
ERR=${WINO_ERR:-conv:1:128:128:256 conv:1:256:256:128 conv:1:512:512:64 conv:1:64:32:128}
echo "== wino.sh $(git log -1 --format=%h 2>/dev/null) $(date -u +'%Y-%m-%d %H:%M UTC')"
CONV_CHECK=1 CONV_CASES=$CASES CONV_VARIANTS=";LUMEN_VK_CONV_F32=winograd LUMEN_VK_MM_F32=t64" \
    timeout 450 python3 "$B/conv.py" "$L"
echo "conv.py rc $?"
echo "== conv_err.lua: case kernel max_abs max_rel nmse (against the CPU's f64 sum)"
LUMEN_FALLBACK=0 timeout 60 "$L" "$B/conv_err.lua" $ERR
LUMEN_FALLBACK=0 LUMEN_VK_CONV_F32=winograd timeout 60 "$L" "$B/conv_err.lua" $ERR
echo "conv_err.lua rc $?"
