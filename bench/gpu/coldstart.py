#!/usr/bin/env python3
"""coldstart.py - issue 36's cold start on the GPU machine: the first image of a
fresh process with every cache empty, against the second image of the same
process, for one or two Lumen binaries (before / after) and the full-size
random-weight SD 1.5 (512², 20 steps, f16), SDXL (1024², 20 steps, f16) and
Z-Image (1024², 9 steps, bf16) folders that sd_full.py and zimage_pipe.py build
(their builders, with the weights initialised on the GPU).

Each run gets fresh empty directories for Lumen's pipeline cache
(XDG_CACHE_HOME) and the NVIDIA driver's shader disk cache
(__GL_SHADER_DISK_CACHE_PATH, and HOME for ~/.nv); "warm" runs the last binary
again on the cache its cold run left (a second start of a new install).  With
LUMEN_VK_PIPELINE_LOG=1 a binary that has compile threads prints each
pipeline's compile time: summed here (count, total, largest, top shaders).
COLD_WARM_KINDS (default all): the kinds that get the warm run.
COLD_SERIAL_KINDS=sd15,...: those kinds also run the last binary cold with one
compile thread (each pipeline's time alone).
Usage: PYTHONPATH=diffusers/src coldstart.py WORKDIR KINDS NAME=LUMEN[:VAR=VALUE...]...
(the VAR=VALUE pairs go into that binary's environment, e.g.
lazy=lumen:LUMEN_VK_COMPILE_THREADS=0 for the lazy path of before, or
noprewarm=lumen:LUMEN_PREWARM=0 for the compile threads without the dry run
at load; with the prewarm, "planned" is the pipelines the load's plan started
and "unplanned" those the images then met that it had not)
KINDS: comma-separated sd15,sdxl,zimage.  Prints one line per run and a JSON
summary; the first images' sha256 tell whether the binaries' bytes agree.
"""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

CONF = {"sd15": ("f16", 512, 20, 7), "sdxl": ("f16", 1024, 20, 7), "zimage": ("bf16", 1024, 9, 0)}


def build(kind, d):
    t0 = time.time()
    if os.environ.get("COLD_REUSE") == "1" and os.path.exists(os.path.join(d, "model_index.json")):
        return  # a folder an earlier run built (the weights are seeded: the same)
    if kind == "zimage":
        import zimage_pipe
        zimage_pipe.build(d)
    else:
        import sd_full
        with torch.device("cuda"):
            p = sd_full.build(kind)
        shutil.rmtree(d, ignore_errors=True)
        p.save_pretrained(d, safe_serialization=True)
        del p
        torch.cuda.empty_cache()
    print("%s: built and saved in %.1f s" % (kind, time.time() - t0), flush=True)


def run(lumen, kind, d, cache, log, extra=None):
    dt, size, steps, cfg = CONF[kind]
    out = os.path.join(cache, "img.safetensors")
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(cache, "xdg"), HOME=os.path.join(cache, "home"),
               __GL_SHADER_DISK_CACHE_PATH=os.path.join(cache, "nv"), LUMEN_FALLBACK="0")
    for k in ("xdg", "home", "nv"):
        os.makedirs(os.path.join(cache, k), exist_ok=True)
    if log:
        env["LUMEN_VK_PIPELINE_LOG"] = "1"
    env.update(extra or {})
    t0 = time.time()
    r = subprocess.run([lumen, os.path.join(HERE, "coldstart.lua"), d, dt, str(size), str(steps), str(cfg), out],
                       capture_output=True, text=True, env=env, timeout=300)
    res = {"rc": r.returncode, "process_s": round(time.time() - t0, 2)}
    for key in ("load", "first_image_s", "second_image_s"):
        m = re.search(r"^%s ([0-9.]+)" % key, r.stdout, re.M)
        if m:
            res[key] = float(m.group(1))
    if os.path.exists(out):
        res["sha256"] = hashlib.sha256(open(out, "rb").read()).hexdigest()[:16]
    pl = [(m.group(1), float(m.group(2))) for m in
          re.finditer(r"^lumen: pipeline (\S+) \(\d+ constants\) ([0-9.]+) ms", r.stderr, re.M)]
    # the prewarm at load (models/sd_pipeline.c): pipelines its plan started,
    # and those the images had to start themselves (not "planned")
    m = re.search(r"^lumen: plan on \S+: (\d+) pipelines started", r.stderr, re.M)
    if m:
        res["planned"] = int(m.group(1))
        res["unplanned"] = [m.group(1) for m in re.finditer(
            r"^lumen: pipeline (\S+) \(\d+ constants\) [0-9.]+ ms$", r.stderr, re.M)]
    if pl:
        by = {}
        for s, ms in pl:
            n, t = by.get(s, (0, 0.0))
            by[s] = (n + 1, t + ms)
        top = sorted(by.items(), key=lambda kv: -kv[1][1])[:8]
        res["pipelines"] = {"count": len(pl), "sum_ms": round(sum(t for _, t in pl)),
                            "max_ms": round(max(t for _, t in pl), 1),
                            "top": ["%s x%d %.0f ms" % (s, n, t) for s, (n, t) in top]}
    if r.returncode:
        res["stderr"] = r.stderr[-1500:]
    return res


def main():
    work, kinds = sys.argv[1], sys.argv[2].split(",")
    bins = []
    for a in sys.argv[3:]:   # NAME=LUMEN[:VAR=VALUE...]
        name, rest = a.split("=", 1)
        path, *env = rest.split(":")
        bins.append((name, path, dict(e.split("=", 1) for e in env)))
    report = {}
    for kind in kinds:
        d = os.path.join(work, kind)
        build(kind, d)
        for name, lumen, extra in bins:
            cache = tempfile.mkdtemp(prefix="cold-", dir=work)
            r = run(lumen, kind, d, cache, True, extra)
            print(kind, name, "cold", json.dumps(r), flush=True)
            report["%s %s cold" % (kind, name)] = r
        if kind in os.environ.get("COLD_WARM_KINDS", "sd15,sdxl,zimage").split(","):
            # the last binary again, on the cache it left
            r = run(bins[-1][1], kind, d, cache, False, bins[-1][2])
            print(kind, bins[-1][0], "warm", json.dumps(r), flush=True)
            report["%s %s warm" % (kind, bins[-1][0])] = r
        if kind in os.environ.get("COLD_SERIAL_KINDS", "").split(","):
            # the last binary with one compile thread: the lazy path's order and
            # each pipeline's compile time alone (the profile of the cold start)
            cache = tempfile.mkdtemp(prefix="cold-", dir=work)
            r = run(bins[-1][1], kind, d, cache, True, {"LUMEN_VK_COMPILE_THREADS": "1"})
            print(kind, bins[-1][0], "cold-1-thread", json.dumps(r), flush=True)
            report["%s %s cold-1-thread" % (kind, bins[-1][0])] = r
        shutil.rmtree(d, ignore_errors=True)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
