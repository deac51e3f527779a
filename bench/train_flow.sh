#!/bin/sh
# bench/train_flow.sh [STEPS=12] - training throughput (examples/s) of the
# Fashion-MNIST flow UNet (samples/models/fashion_flow.lua) in Lumen
# (bench/train_flow.lua) and in PyTorch (bench/peer_train_flow.py) from the
# same initial weights on the same batches; prints both loss curves and
# their agreement, and fails when the first step's losses disagree.
# LUMEN_DEVICE=vulkan runs Lumen on Vulkan; PEER_DEVICE=cuda runs PyTorch on CUDA.
BUILD=${BUILD:-build}
STEPS=${1:-12}
cd "$(dirname "$0")/.." || exit 1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
out="$dir/out"
"$BUILD/lumen" bench/train_flow.lua "$dir" "$STEPS" >>"$out" || { echo "train_flow.lua failed" >&2; exit 1; }
status=0
/usr/bin/python3 bench/peer_train_flow.py "$dir" "$STEPS" --device "${PEER_DEVICE:-cpu}" >>"$out" || status=1
# and PyTorch on one thread: its threads spin-wait, which a loaded machine punishes
[ "${PEER_DEVICE:-cpu}" = cpu ] && [ "$(nproc)" -gt 1 ] &&
  /usr/bin/python3 bench/peer_train_flow.py "$dir" "$STEPS" --threads 1 | grep '^PEER' >>"$out"
echo "# flow UNet training, $(date -u +%Y-%m-%d) on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) threads"
/usr/bin/python3 bench/report.py <"$out"
exit $status
