#!/bin/sh
# Runs every benchmark binary and its Python peer, then prints the table.
# Usage: bench/run.sh [name...]   (names as in bench/bench_<name>.c)
BUILD=${BUILD:-build}
cd "$(dirname "$0")/.." || exit 1
out=$(mktemp)
names="$*"
[ -n "$names" ] || names=$(ls bench/bench_*.c | sed 's|bench/bench_||; s|\.c$||')
for n in $names; do
  echo "== bench $n" >&2
  "$BUILD/bench/bench_$n" >>"$out" || { echo "bench_$n failed" >&2; rm -f "$out"; exit 1; }
  if [ -f "bench/peer_$n.py" ]; then
    /usr/bin/python3 "bench/peer_$n.py" >>"$out" || echo "peer_$n.py failed" >&2
  fi
done
echo "# $(date -u +%Y-%m-%d) on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) threads"
/usr/bin/python3 bench/report.py <"$out"
rm -f "$out"
