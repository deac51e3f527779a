#!/bin/sh
# bench/esrgan.sh - esrgan-thick x4 on a 256x256 image: Lumen CPU beside the
# same network in PyTorch CPU (bench/peer_esrgan.py, built from model.json,
# same weights; outputs checked equal) and beside UpscalerJS's own way, the
# model on TensorFlow.js with the wasm backend in Node
# (bench/peer_esrgan_tfjs.js; bench/tfjs/package.json pins the versions,
# installed into build/bench-tfjs by npm on first use).  Needs `make models`.
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
node_dir=$BUILD/bench-tfjs
if [ ! -d "$node_dir/node_modules/@tensorflow/tfjs-backend-wasm" ] && command -v npm >/dev/null 2>&1; then
  mkdir -p "$node_dir" && cp bench/tfjs/package.json "$node_dir/" &&
    (cd "$node_dir" && npm install --no-audit --no-fund --silent >/dev/null 2>&1) ||
    echo "npm install of the TF.js peer failed" >&2
fi
if [ -d "$node_dir/node_modules/@tensorflow/tfjs-backend-wasm" ] && command -v node >/dev/null 2>&1; then
  NODE_PATH=$node_dir/node_modules node bench/peer_esrgan_tfjs.js "$json" "$d" "$runs" >>"$out" ||
    echo "peer_esrgan_tfjs.js failed" >&2
else
  echo "# esrgan: no node/npm: the TF.js wasm peer is not measured" >&2
fi
echo "# esrgan-thick x4 256x256, $(date -u +%Y-%m-%d) on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) threads, $runs runs after a warm-up"
/usr/bin/python3 bench/report.py <"$out"
rm -rf "$d"
