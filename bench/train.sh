#!/bin/sh
# bench/train.sh - training-step time of Lumen (lm.value_and_grad +
# lm.optim.sgd) beside PyTorch CPU on the same models and batch sizes.
BUILD=${BUILD:-build}
cd "$(dirname "$0")/.." || exit 1
out=$(mktemp)
"$BUILD/lumen" bench/train_step.lua >>"$out" || { echo "train_step.lua failed" >&2; rm -f "$out"; exit 1; }
/usr/bin/python3 bench/peer_train.py >>"$out" || echo "peer_train.py failed" >&2
echo "# training steps, $(date -u +%Y-%m-%d) on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) threads"
/usr/bin/python3 bench/report.py <"$out"
rm -f "$out"
