#!/bin/sh
# coldwarm.sh - issue 25's stability check: the same matmul measurement
# (vkbench VKBENCH_ONLY=mm: medians of 7 after a warm-up) in two processes
# one after the other, the first with the pipeline cache folder emptied (as
# on a fresh machine, in CI, after a driver update); each figure of the
# cold process must lie within 15% of the warm one's.  Prints both tables,
# one line per figure, and "N passed, N failed".
#   sh bench/gpu/coldwarm.sh          (f16, bf16, f32 at 1024-8192)
#   DTYPES=f16 SIZES=2048,4096 VKBENCH_WARM_MS=0 sh bench/gpu/coldwarm.sh
# OUT=dir keeps the logs (and, where nvidia-smi exists, the SM clock
# sampled every 100 ms: clocks.csv).
BUILD=${BUILD:-build}
BIN="$BUILD/bench/vkbench"
[ -x "$BIN" ] || { echo "coldwarm.sh: $BIN missing: run make first" >&2; exit 1; }
O=${OUT:-$(mktemp -d)}
mkdir -p "$O"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/lumen"
clk=
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,pstate,utilization.gpu,power.draw \
    --format=csv,noheader -lms 100 > "$O/clocks.csv" 2>&1 &
  clk=$!
fi
run() {
  s=$(date +%s%N)
  VKBENCH_ONLY=mm VKBENCH_DTYPE=${DTYPES:-f16,bf16,f32} VKBENCH_SIZES=${SIZES:-1024,2048,4096,8192} \
    "$BIN" > "$O/$1.txt" 2>&1
  rc=$?
  echo "=== $1 process (rc $rc, $(( ($(date +%s%N) - s) / 1000000 )) ms; $(date -u +%H:%M:%S.%N | cut -c1-12) UTC at the end)"
  grep -v "^device" "$O/$1.txt"
}
rm -rf "$CACHE"
run cold
run warm
[ -n "$clk" ] && kill "$clk"
# pair the medians by name
awk '
  FNR == 1 { f++ }
  /^matmul_/ { v[f, $1] = $2; if (f == 1) names[++n] = $1 }
  END {
    ok = bad = 0
    for (i = 1; i <= n; i++) {
      k = names[i]; c = v[1, k]; w = v[2, k]
      r = (w > 0) ? c / w : 0
      good = r >= 0.85 && r <= 1 / 0.85
      printf "%s cold %.1f warm %.1f TFLOP/s ratio %.2f %s\n", k, c, w, r, good ? "ok" : "FAIL (over 15%)"
      if (good) ok++; else bad++
    }
    printf "%d passed, %d failed\n", ok, bad
    exit bad > 0
  }' "$O/cold.txt" "$O/warm.txt"
