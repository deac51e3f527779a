#!/usr/bin/python3
"""issue36.py - the pieces of bench/gpu/issue36.sh that want Python:
  attn VKBENCH LUMEN_LOG PEER_LOG   attention at issue 36's shapes in Lumen
      (vkbench VKBENCH_ONLY=attn with VKBENCH_ATTN_SHAPES, as attn_khr.py runs
      it, with VKBENCH_ATTN_WARM=1: the GEMMs' warm-up first) and PyTorch's
      scaled_dot_product_attention in the same run, medians of 9 [min-max];
      each side's lines written as "name median [min-max] ms"; D = 512 three
      times: the default, and the two-product and SIMT paths forced (_gemm,
      _simt) beside the same SDPA figure; ISSUE36_ATTN_D=512 times those rows only
  nn-peer    compare.py's PyTorch figures of vkbench VKBENCH_ONLY=nn (conv 3x3
      128ch 512² f32 / f16, attention L4096 D128 f32 / f16 / causal), one
      "name median [min-max] unit" line each
  table OUTDIR    the compact table of every log issue36.sh left in OUTDIR: one
      line per row, name, Lumen median [min-max], peer median [min-max], ratio
      (> 1: Lumen faster; a rate's ratio is Lumen / peer, a time's peer / Lumen)
Usage: issue36.py attn|nn-peer|table ..."""
import json
import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# (B, H, L, D, dtype, causal): the table, the head dims it names, Z-Image's
# joint sequence and the SD / SDXL VAE's mid-block attention (one head of 512 at
# 512² and 1024², bf16 as Z-Image's VAE and f32 as SDXL's run: vkbench times
# those also on each path forced, _gemm and _simt)
ATTN = [(1, 24, 4096, 128, "f16", False), (1, 24, 4096, 128, "f16", True), (1, 24, 4096, 128, "bf16", False),
        (1, 24, 4096, 128, "bf16", True), (1, 24, 4096, 128, "f32", False), (1, 24, 4096, 64, "f16", False),
        (1, 24, 4096, 64, "bf16", False), (1, 30, 4224, 128, "bf16", False), (1, 1, 4096, 512, "f16", False),
        (1, 1, 16384, 512, "f16", False), (1, 1, 4096, 512, "bf16", False), (1, 1, 4096, 512, "f32", False)]
NUM = r"(-?[0-9.]+(?:[eE][-+]?[0-9]+)?)"


def attn(vk, lpath, ppath):
    import attn_khr
    os.environ.setdefault("VKBENCH_ATTN_WARM", "1")   # vkbench's warm-up before the 9 timed runs
    shapes = ATTN
    if os.environ.get("ISSUE36_ATTN_D"):   # one head dim only (ISSUE36_ATTN_D=512: the VAE rows)
        shapes = [s for s in ATTN if s[3] == int(os.environ["ISSUE36_ATTN_D"])]
    if os.environ.get("ISSUE36_QUICK"):   # a smoke run: small L
        shapes = [(b, h, max(L // 32, 16), d, dt, c) for b, h, L, d, dt, c in shapes]
    lum = attn_khr.lumen(vk, False, {}, shapes)
    with open(lpath, "w") as f:
        for k, (m, lo, hi) in lum.items():
            f.write(f"{k} {m:.4f} [{lo:.4f}-{hi:.4f}] ms\n")
    tor = {}
    if not os.environ.get("ISSUE36_NO_TORCH"):   # without the peer: Lumen's rows, SDPA 0
        tor = attn_khr.torch_figures(False, shapes)
        with open(ppath, "w") as f:
            for k, (m, lo, hi) in tor.items():
                f.write(f"{k} {m:.4f} [{lo:.4f}-{hi:.4f}] ms\n")
    for s in shapes:
        k = attn_khr.key(s)
        pm = tor.get(k, (0,))[0]
        # D over 256: the default, then each path forced (vkbench's _gemm, _simt)
        for v in ("", "_gemm", "_simt") if s[3] > 256 else ("",):
            lm = lum.get(k + v, [0])[0]
            print(f"{k + v:<37} Lumen {lm:9.4f} ms  SDPA {pm:9.4f} ms  ratio {pm / lm if lm else 0:.2f}")


def nn_peer():
    import compare
    out = compare.torch_nn_figures(False)
    for k, v in out.items():
        if k == "device":
            print("device", v[0])
        else:
            print(f"{k} {v[0]:.4g} [{v[1]:.4g}-{v[2]:.4g}] {v[3]}")


# ---- the table ----

def read(out, name):
    p = os.path.join(out, name)
    try:
        with open(p, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def vkstyle(text):
    """name -> (median, lo, hi, unit) from "name median [a-b] unit" lines"""
    res = {}
    for line in (text or "").splitlines():
        m = re.match(r"^(\S+) " + NUM + r" \[" + NUM + "-" + NUM + r"\] (\S+)", line)
        if m:
            a, b = sorted((float(m.group(3)), float(m.group(4))))
            res[m.group(1)] = (float(m.group(2)), a, b, m.group(5))
    return res


def g(v):
    return f"{v:.0f}" if abs(v) >= 1e4 else f"{v:.4g}"


def cell(f, unit=""):
    if f is None:
        return "-"
    if len(f) == 1 or f[1] is None:
        return f"{g(f[0])}{' ' + unit if unit else ''}"
    return f"{g(f[0])} [{g(f[1])}-{g(f[2])}]{' ' + unit if unit else ''}"


ROWS = []


def row(name, lum, peer, unit, higher_better=False, note=""):
    """lum / peer: (median, lo, hi) or (value,) or None"""
    if not lum and not peer:
        return
    r = "-"
    if lum and peer and lum[0] and peer[0]:
        r = f"{(lum[0] / peer[0]) if higher_better else (peer[0] / lum[0]):.2f}"
    ROWS.append((name, cell(lum, unit), cell(peer, unit), r, note))


def med3(vals):
    vals = sorted(vals)
    return (statistics.median(vals), vals[0], vals[-1]) if vals else None


def kernels(out):
    for side in ("mm", "attn", "nn"):
        lum, peer = vkstyle(read(out, f"k_{side}_lumen.log")), vkstyle(read(out, f"k_{side}_peer.log"))
        for k, v in lum.items():
            # attention's forced paths (_gemm, _simt) beside the shape's one peer figure
            p = peer.get(k) or (peer.get(re.sub(r"_(gemm|simt)$", "", k)) if side == "attn" else None)
            rate = v[3] != "ms"
            name = {"mm": "GEMM ", "attn": "attention ", "nn": "wall: "}[side] + k
            row(name, v[:3], p[:3] if p else None, v[3], higher_better=rate)
    t = read(out, "k_conv.log")
    if t:
        peer, lum, wino, section = {}, {}, {}, None
        for line in t.splitlines():
            m = re.match(r"^(conv:\S+)\s+PyTorch (\w+) " + NUM + r" ms \[" + NUM + "-" + NUM + r"\]", line)
            if m:
                peer[m.group(1)] = (float(m.group(3)), float(m.group(4)), float(m.group(5)))
                continue
            m = re.match(r"^== Lumen ([^ :]+)", line)
            if m:
                section = m.group(1)
                continue
            m = re.match(r"^(conv:\S+)\s+" + NUM + r" ms \[" + NUM + "-" + NUM + r"\]", line)
            if m and section in ("default", "winograd"):
                (lum if section == "default" else wino)[m.group(1)] = (float(m.group(2)), float(m.group(3)),
                                                                      float(m.group(4)))
        for c, v in lum.items():
            _, n, ci, co, hw, k, dt = c.split(":")
            row(f"GPU time: conv {k}x{k} {ci}->{co} {hw}² x{n} {dt}", v, peer.get(c), "ms")
            if c in wino:   # conv.py's LUMEN_VK_CONV_F32=winograd run of the f32 3x3 cases
                row(f"GPU time: conv {k}x{k} {ci}->{co} {hw}² x{n} {dt} winograd", wino[c], peer.get(c), "ms")
    t = read(out, "k_vae.log")
    if t:
        for line in t.splitlines():
            m = re.match(r"^(f16|f32)_(total|mid\.attention)\s+" + NUM + r" \[" + NUM + "-" + NUM + r"\]\s+" + NUM +
                         r" \[" + NUM + "-" + NUM + r"\]", line)
            if m:
                lv = tuple(float(m.group(i)) for i in (3, 4, 5))
                pv = tuple(float(m.group(i)) for i in (6, 7, 8))
                row(f"SD VAE decoder 512² {m.group(1)} {m.group(2)}", lv, pv, "ms")


def lumen_ms(text):
    """lumen_NAME_ms median (lo-hi) lines -> NAME: (median, lo, hi)"""
    res = {}
    for line in (text or "").splitlines():
        m = re.match(r"^lumen_(\w+)_ms " + NUM + r" \(" + NUM + "-" + NUM + r"\)", line)
        if m:
            res[m.group(1)] = tuple(float(m.group(i)) for i in (2, 3, 4))
    return res


def sd(out):
    for kind, label, size in (("sd15", "SD 1.5", 512), ("sdxl", "SDXL", 1024)):
        t = read(out, f"sd_full_{kind}.log")
        if not t:
            continue
        dj = {}
        for line in t.splitlines():
            if line.startswith(kind + " {"):
                dj = json.loads(line[len(kind) + 1:])
        lum = lumen_ms(t)
        d = lambda k: tuple(dj[k]) if k in dj else None  # noqa: E731
        row(f"{label} {size}² 20 steps, whole image (pipeline call, pt, TF32 off)", lum.get("20step"),
            d("diffusers_20step_ms"), "ms")
        if "diffusers_20step_user_ms" in dj:
            row(f"{label} {size}² 20 steps, whole image (diffusers as a user runs it: PIL, default TF32)",
                lum.get("20step"), d("diffusers_20step_user_ms"), "ms")
        row(f"{label} UNet call, CFG batch 2", lum.get("unet"), d("diffusers_unet_ms"), "ms")
        vae_note = "Lumen f32 (force_upcast), diffusers f16: not alike" if kind == "sdxl" else ""
        row(f"{label} VAE decode", lum.get("vae"), d("diffusers_vae_ms"), "ms", note=vae_note)
        if "diffusers_vae_f32_ms" in dj:
            row(f"{label} VAE decode, f32 both (diffusers' upcast, TF32 off)", lum.get("vae"),
                d("diffusers_vae_f32_ms"), "ms")
        row(f"{label} text encoders, prompt + negative", lum.get("text"), d("diffusers_text_ms"), "ms")
    t = read(out, "zimage.log")
    if t:
        dj = {}
        for line in t.splitlines():
            if line.startswith("diffusers {"):
                dj = json.loads(line[len("diffusers "):])
        lum = lumen_ms(t)
        d = lambda k: tuple(dj[k]) if k in dj else None  # noqa: E731
        row("Z-Image-Turbo 1024² 9 steps, whole image", lum.get("image"), d("diffusers_image_ms"), "ms")
        row("Z-Image transformer call", lum.get("transformer"), d("diffusers_transformer_ms"), "ms")
        row("Z-Image VAE decode 1024²", lum.get("vae_decode"), d("diffusers_vae_decode_ms"), "ms")
        row("Z-Image prompt encoding", lum.get("encode"), d("diffusers_encode_ms"), "ms")
    for kind, label in (("sd15", "SD 1.5"), ("sdxl", "SDXL"), ("zimage", "Z-Image")):
        t = read(out, f"cold_{kind}.log")
        if not t:
            continue
        f = dict((m.group(1), float(m.group(2))) for m in re.finditer(r"^(first_image_s|second_image_s) " + NUM, t, re.M))
        p = re.search(r"process_s " + NUM, t)
        w = read(out, f"warm_{kind}.log") or ""
        wf = re.search(r"^first_image_s " + NUM, w, re.M)
        if "first_image_s" in f and "second_image_s" in f:
            over = f["first_image_s"] - f["second_image_s"]
            note = (f"first - warm = {over:.2f} s (target <= 3 s: {'met' if over <= 3 else 'not met'}); process "
                    f"{p.group(1) if p else '?'} s; second start on that cache: first image "
                    f"{wf.group(1) if wf else '?'} s")
            ROWS.append((f"{label} first image, fresh process, empty caches", f"{g(f['first_image_s'])} s",
                         f"warm {g(f['second_image_s'])} s", "-", note))


def tools(out):
    t = read(out, "t_batch.log")
    one = re.search(r"RESULT pipe_generate_one_at_a_time: .*= " + NUM + r" images/s, per image median " + NUM +
                    r" ms \[" + NUM + "-" + NUM, read(out, "t_gen_one.log") or "")
    dif = re.search(r"RESULT diffusers_one_at_a_time: .*= " + NUM + r" images/s, per image median " + NUM +
                    r" ms \[" + NUM + "-" + NUM, read(out, "t_peer.log") or "")
    onev = (float(one.group(1)),) if one else None
    difv = (float(dif.group(1)),) if dif else None
    if t:
        runs = {}
        for m in re.finditer(r"^batch_(\w+) run \d+: rc (\d+), (\d+) images, process wall " + NUM + r" s = " + NUM, t, re.M):
            if m.group(2) == "0" and m.group(3) == "16":
                runs.setdefault(m.group(1), []).append(float(m.group(5)))
        bytes_ = dict((m.group(1), m.group(2)) for m in re.finditer(r"^bytes (\w+): (\d+) of 16 differ", t, re.M))
        for n, label in (("bs1", "--batch-size 1"), ("bs4", "--batch-size 4 (lanes)"),
                         ("stk4", "--batch-size 4, stacked = true")):
            if n in runs:
                note = f"{bytes_[n]} of 16 images differ from bs1" if n in bytes_ else ""
                row(f"lumen batch 16 SD 1.5 images {label}, process wall, vs pipe:generate one at a time",
                    med3(runs[n]), onev, "images/s", higher_better=True, note=note)
                row(f"lumen batch 16 SD 1.5 images {label}, process wall, vs diffusers one at a time",
                    med3(runs[n]), difv, "images/s", higher_better=True)
    if one:
        row("pipe:generate one at a time, per image", tuple(float(one.group(i)) for i in (2, 3, 4)),
            tuple(float(dif.group(i)) for i in (2, 3, 4)) if dif else None, "ms")
    mo = re.search(r"RESULT model_whole .* " + NUM + " ms", read(out, "t_upscale_model.log") or "")
    mt = re.search(r"RESULT model_tiled .* " + NUM + " ms", read(out, "t_upscale_model.log") or "")
    t = read(out, "t_upscale.log")
    if t and mo:
        w = {1: [], 32: []}
        for m in re.finditer(r"^upscale_(\d+): rc 0, wall " + NUM + " s", t, re.M):
            w.setdefault(int(m.group(1)), []).append(float(m.group(2)))
        model = (float(mo.group(1)),)
        if w[32]:
            per = med3([v * 1000 / 32 for v in w[32]])
            row("lumen upscale 32 images 512² x2 f16, process wall per image, vs the model alone (whole image)",
                per, model, "ms")
            if w[1]:
                marg = (statistics.median(w[32]) - statistics.median(w[1])) * 1000 / 31
                row("lumen upscale, marginal image (T32 - T1) / 31, vs the model alone (whole image)", (marg,), model,
                    "ms", note=f"model tiled {mt.group(1)} ms" if mt else "")


def cpu(out):
    t = read(out, "cpu.log")
    if not t:
        return
    def first_next(who):
        m = re.search(r"^%s_unet_first_ms " % who + NUM + " next_ms " + NUM + r" \(" + NUM + "-" + NUM, t, re.M)
        return ((float(m.group(1)),), tuple(float(m.group(i)) for i in (2, 3, 4))) if m else (None, None)
    lf, ln = first_next("lumen")
    df, dn = first_next("diffusers")
    row("CPU: SD 1.5 UNet call, CFG batch 2, 64² latent, f32, first of the process", lf, df, "ms")
    row("CPU: SD 1.5 UNet call, next", ln, dn, "ms")
    for what, label in (("vae_decode_512", "CPU: SD 1.5 VAE decode 512²"), ("20step_512", "CPU: SD 1.5 512² 20 steps, whole image")):
        lm = re.search(r"^lumen_%s_ms " % what + NUM, t, re.M)
        dm = re.search(r"^diffusers_%s_ms " % what + NUM, t, re.M)
        row(label + " (one run)", (float(lm.group(1)),) if lm else None, (float(dm.group(1)),) if dm else None, "ms")


def table(out):
    for f in (kernels, sd, tools, cpu):
        f(out)
    if not ROWS:
        print("issue36.py table: no logs in", out)
        return 1
    w = max(len(r[0]) for r in ROWS)
    wl = max(max(len(r[1]) for r in ROWS), 5)
    wp = max(max(len(r[2]) for r in ROWS), 4)
    print(f"{'row':<{w}}  {'Lumen':>{wl}}  {'peer':>{wp}}  ratio")
    for name, lc, pc, r, note in ROWS:
        print(f"{name:<{w}}  {lc:>{wl}}  {pc:>{wp}}  {r:>5}" + (f"  ({note})" if note else ""))
    print("medians [min-max]; ratio > 1: Lumen faster (rates Lumen / peer, times peer / Lumen)")
    return 0


def main():
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "attn":
        return attn(sys.argv[2], sys.argv[3], sys.argv[4])
    if what == "nn-peer":
        return nn_peer()
    if what == "table":
        return table(sys.argv[2])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
