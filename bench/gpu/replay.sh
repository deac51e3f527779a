#!/bin/sh
# bench/gpu/replay.sh - a compiled model call replayed from its recorded
# command buffer (core/replay.c) against the same call recorded afresh
# (LUMEN_VK_REPLAY=0), and the CUDA peer eager and through a CUDA graph
# (bench/gpu/peer_replay_cuda.py), on esrgan-thick x2, from C (build/bench/vkreplay)
# and from Lua (bench/gpu/replay.lua): host ms per call
# (until the call returns with its work queued), the calling thread's CPU
# ms, and wall ms until the device is idle; medians [min-max].
#   REPLAY_RUNS (9), REPLAY_SIZE (128), REPLAY_DTYPE (f16), REPLAY_SCALE (2)
# Needs `make models` (or LUMEN_MODELS), build/bench/vkreplay and build/lumen; the peer
# runs where python3 has torch with CUDA.
BUILD=${BUILD:-build}
cd "$(dirname "$0")/../.." || exit 1
LUMEN_MODELS=${LUMEN_MODELS:-$BUILD/models}
json=$LUMEN_MODELS/esrgan-thick/models/x${REPLAY_SCALE:-2}/model.json
if [ ! -f "$json" ]; then echo "# replay: $json missing (make models); skipped"; exit 0; fi
runs=${REPLAY_RUNS:-9} size=${REPLAY_SIZE:-128} dt=${REPLAY_DTYPE:-f16}
echo "# esrgan-thick x${REPLAY_SCALE:-2} ${size}x${size} $dt, $(date -u '+%Y-%m-%d %H:%M UTC'), $(git rev-parse --short HEAD 2>/dev/null)"
LUMEN_DEVICE=${LUMEN_DEVICE:-vulkan} LUMEN_FALLBACK=0 "$BUILD/bench/vkreplay" "$json" "$runs" "$size" "$dt" ||
  echo "bench/vkreplay failed" >&2
# the same call driven from Lua (lm.compile over the model), replay off and on
for r in 0 1; do
  LUMEN_VK_REPLAY=$r LUMEN_MODELS=$LUMEN_MODELS LUMEN_DEVICE=${LUMEN_DEVICE:-vulkan} LUMEN_FALLBACK=0 \
    "$BUILD/lumen" bench/gpu/replay.lua "$size" "$runs" "$dt" "${REPLAY_SCALE:-2}" || echo "replay.lua failed" >&2
done
if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  python3 bench/gpu/peer_replay_cuda.py "$json" bench "$runs" "$size" "$dt" || echo "peer_replay_cuda.py failed" >&2
else
  echo "# replay: no torch with CUDA here: the peer is not measured"
fi
