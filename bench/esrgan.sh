#!/bin/sh
# bench/esrgan.sh - esrgan-thick x4 on a 256x256 image: Lumen CPU beside the
# same network in PyTorch CPU (bench/peer_esrgan.py, built from model.json,
# same weights; outputs checked equal).  Needs `make models`.
BUILD=${BUILD:-build}
cd "$(dirname "$0")/.." || exit 1
LUMEN_MODELS=${LUMEN_MODELS:-$BUILD/models}
export LUMEN_MODELS
json=$LUMEN_MODELS/esrgan-thick/models/x4/model.json
if [ ! -f "$json" ]; then echo "# esrgan: $json missing (make models); skipped"; exit 0; fi
runs=${ESRGAN_RUNS:-2}
d=$(mktemp -d)
out=$d/report
"$BUILD/bench/esrgan" "$LUMEN_MODELS" "$d" "$runs" >>"$out" || { echo "bench/esrgan failed" >&2; rm -rf "$d"; exit 1; }
/usr/bin/python3 bench/peer_esrgan.py "$json" "$d" "$runs" >>"$out" || echo "peer_esrgan.py failed" >&2
echo "# esrgan-thick x4 256x256, $(date -u +%Y-%m-%d) on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) threads, $runs runs after a warm-up"
/usr/bin/python3 bench/report.py <"$out"
rm -rf "$d"
