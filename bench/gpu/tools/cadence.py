# cadence.py DIR [NAME]: the interval between consecutive PNGs of DIR (named
# INDEX_SEED.png or INDEX.png) by the time each was renamed into place (its mtime):
# the per-image cadence of a run, the same measure for `lumen batch` and
# gen_loop.lua; prints the median [min-max] in ms of the intervals after
# the first image
import os, re, sys, statistics
d = sys.argv[1]
fs = sorted((int(re.match(r"\d+", f).group()), f) for f in os.listdir(d) if re.match(r"\d+.*\.png$", f))
t = [os.stat(os.path.join(d, f)).st_mtime_ns / 1e6 for _, f in fs]
iv = [b - a for a, b in zip(t, t[1:])]
if iv:
    print("%s: %d images, interval median %.1f ms [%.1f-%.1f]" % (sys.argv[2] if len(sys.argv) > 2 else d, len(t),
          statistics.median(iv), min(iv), max(iv)))
