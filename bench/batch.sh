#!/bin/sh
# bench/batch.sh - `lumen batch`: images/s of the CPPN sample at 512x512 on
# one and two processes (mpirun), --batch-size 8 against 1 (128x128), the runner's overhead per image against a
# bare render + write_png loop (256x256, ~50 ms images here, and
# 8x8, where the absolute cost per image shows), and RSS after 100
# and 10,000 tiny images.  BATCH_BENCH_N: images of the 512x512 runs (16).
BUILD=${BUILD:-build}
cd "$(dirname "$0")/.." || exit 1
L="$BUILD/lumen"
T=$(mktemp -d /tmp/lumen-bench-batch.XXXXXX)
trap 'rm -rf "$T"' EXIT
N=${BATCH_BENCH_N:-16}
rate() { sed -n 's/^batch: [0-9]*\/[0-9]*  \([0-9.]*\) img\/s.*elapsed.*/\1/p' "$1" | tail -1; }
echo "# lumen batch, $(date -u +%Y-%m-%d\ %H:%M) UTC, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| benchmark | Lumen | peer | peer figure | ratio |"
echo "|---|---|---|---|---|"
"$L" batch samples/batch_cppn.lua --seeds 1-$N -o "$T/one/%05d.png" --manifest none --progress lines -- 512 2> "$T/log1" || cat "$T/log1"
r1=$(rate "$T/log1")
if command -v mpirun >/dev/null 2>&1 && grep -q '^MPI_ENABLED := yes' "$BUILD/config.mk"; then
  MPIRUN="mpirun --oversubscribe"
  [ "$(id -u)" = 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
  $MPIRUN -np 2 "$L" batch samples/batch_cppn.lua --seeds 1-$N -o "$T/two/%05d.png" --manifest none --progress lines -- 512 2> "$T/log2" || cat "$T/log2"
  r2=$(rate "$T/log2")
  echo "| 512x512 CPPN, $N images, 2 processes (mpirun) | $r2 img/s | 1 process | $r1 img/s | $(echo "$r2 $r1" | awk '{ printf "%.2fx", $1 / $2 }') |"
else
  echo "| 512x512 CPPN, $N images, 1 process | $r1 img/s | | | |"
fi
"$L" batch samples/batch_cppn.lua --seeds 1-48 -o "$T/b1/%05d.png" --manifest none --progress lines -- 128 2> "$T/logb1" || cat "$T/logb1"
"$L" batch samples/batch_cppn.lua --seeds 1-48 -o "$T/b8/%05d.png" --manifest none --progress lines --batch-size 8 -- 128 2> "$T/logb8" || cat "$T/logb8"
b1=$(rate "$T/logb1"); b8=$(rate "$T/logb8")
echo "| 128x128 CPPN, 48 images, --batch-size 8 | $b8 img/s | --batch-size 1 | $b1 img/s | $(echo "$b8 $b1" | awk '{ printf "%.2fx", $1 / $2 }') |"
"$L" bench/batch_overhead.lua "$T/ovh" 256 12 6
rm -rf "$T/ovh"
"$L" bench/batch_overhead.lua "$T/ovh" 8 500 4
rm -rf "$T/ovh"
"$L" tests/batch/rss.lua "$T/rss" 10000 > "$T/rss.log"
r100=$(sed -n 's/.* rss100 \([0-9]*\) .*/\1/p' "$T/rss.log")
rN=$(sed -n 's/.* rss10000 \([0-9]*\)$/\1/p' "$T/rss.log")
echo "| RSS after 10,000 8x8 images | $(awk "BEGIN { printf \"%.1f MiB\", $rN / 1048576 }") | after 100 | $(awk "BEGIN { printf \"%.1f MiB\", $r100 / 1048576 }") | $(awk "BEGIN { printf \"%+.2f MiB\", ($rN - $r100) / 1048576 }") |"
