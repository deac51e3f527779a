#!/usr/bin/python3
"""Lines up RESULT/PEER lines (see bench/bench.h) into a Markdown table with
ratios: Lumen / peer for rates, peer / Lumen for times, so > 1 means Lumen
is faster."""
import sys

results, peers, order, info = {}, {}, [], []
for line in sys.stdin:
    f = line.split()
    if not f:
        continue
    if f[0] == "RESULT" and len(f) >= 4:
        results[f[1]] = (float(f[2]), f[3])
        if f[1] not in order:
            order.append(f[1])
    elif f[0] == "PEER" and len(f) >= 5:
        peers.setdefault(f[1], []).append((f[2], float(f[3]), f[4]))
        if f[1] not in order:
            order.append(f[1])
    elif f[0] == "INFO":
        info.append(" ".join(f[1:]))

for i in info:
    print("# " + i)
print("| benchmark | Lumen | peer | peer figure | ratio |")
print("|---|---|---|---|---|")
for key in order:
    val, unit = results.get(key, (None, ""))
    lum = f"{val:.4g} {unit}" if val is not None else "-"
    ps = peers.get(key, [])
    if not ps:
        print(f"| {key} | {lum} | | | |")
    for name, pv, pu in ps:
        ratio = ""
        if val is not None and pv > 0 and val > 0:
            r = val / pv if unit in ("GFLOP/s", "GB/s", "Gelem/s", "ex/s") else pv / val
            ratio = f"{r:.2f}x"
        print(f"| {key} | {lum} | {name} | {pv:.4g} {pu} | {ratio} |")
