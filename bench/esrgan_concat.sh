#!/bin/sh
# bench/esrgan_concat.sh - esrgan-thick x4 on a 64x64 tile on the CPU with
# the dense blocks' concats written in place by their producers beside
# LUMEN_CONCAT_INPLACE=0 (each concat a copy), runs alternated in one
# process (build/bench/esrgan_concat).  Needs `make models`.
#   ESRGAN_CONCAT_RUNS (5), ESRGAN_CONCAT_TILE (64), ESRGAN_CONCAT_DTYPE (f32)
BUILD=${BUILD:-build}
cd "$(dirname "$0")/.." || exit 1
json=${LUMEN_MODELS:-$BUILD/models}/esrgan-thick/models/x4/model.json
if [ ! -f "$json" ]; then echo "# esrgan_concat: $json missing (make models); skipped"; exit 0; fi
out=$(mktemp)
LUMEN_DEVICE=${LUMEN_DEVICE:-cpu} "$BUILD/bench/esrgan_concat" "$json" "${ESRGAN_CONCAT_RUNS:-5}" \
  "${ESRGAN_CONCAT_TILE:-64}" "${ESRGAN_CONCAT_DTYPE:-f32}" >"$out" ||
  { echo "bench/esrgan_concat failed" >&2; rm -f "$out"; exit 1; }
echo "# esrgan_concat, $(date -u +%Y-%m-%d) on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) threads"
/usr/bin/python3 bench/report.py <"$out"
rm -f "$out"
