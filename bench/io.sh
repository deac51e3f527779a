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
smooth = np.stack([128 + 100 * np.sin(x * 0.01) * np.cos(y * 0.013), x // 4, (x * y) >> 12], -1)
img = Image.fromarray(smooth.astype(np.uint8))
best = 1e9
for _ in range(5):
    t = time.perf_counter(); img.save("/tmp/lumen-bench-pil.png"); best = min(best, time.perf_counter() - t)
print("  peer: PIL write 1024x1024 RGB PNG, smooth, default %8.3f ms" % (best * 1e3))
PY
rm -f /tmp/lumen-bench-pil.png
