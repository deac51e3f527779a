#!/bin/sh
# bench/io.sh - file benchmarks (bench/bench_io.c) beside a peer: PIL writing
# the same kind of PNG at its default level.
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
echo "== files (safetensors mmap, PNG)"
"$BUILD/bench/bench_io" || exit 1
/usr/bin/python3 - <<'PY' 2>/dev/null || echo "  peer: PIL not available"
import time, numpy as np
from PIL import Image
y, x = np.mgrid[0:1024, 0:1024]
rng = np.random.default_rng(1)
n = rng.integers(0, 16, (1024, 1024))
img = Image.fromarray(np.stack([(x // 4 + n) % 256, (y // 4 + n) % 256, ((x + y) // 8) % 256], -1).astype(np.uint8))
best = 1e9
for _ in range(5):
    t = time.perf_counter(); img.save("/tmp/lumen-bench-pil.png"); best = min(best, time.perf_counter() - t)
print("  peer: PIL write 1024x1024 RGB PNG      %8.3f ms" % (best * 1e3))
PY
rm -f /tmp/lumen-bench-pil.png
