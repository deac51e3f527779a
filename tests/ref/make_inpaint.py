#!/usr/bin/env python3
"""Builds a 9-channel inpainting model folder from a committed tiny diffusers
folder and the conv_in weight tests/ref/gen_inpaint.py wrote:

    python3 tests/ref/make_inpaint.py SRC_FOLDER REF.safetensors KEY OUT_FOLDER

SRC_FOLDER (tests/ref/diffusion/sd1 or sdxl) is copied to OUT_FOLDER with its
UNet's conv_in.weight replaced by REF's tensor KEY ("sd1.conv_in" /
"sdxl.conv_in", [C0,9,3,3] in the UNet file's dtype) and unet/config.json's
in_channels set to 9, as gen_inpaint.py built the UNets diffusers ran.
Plain Python (make test runs it), so the repository holds the UNets once.
"""
import json
import os
import shutil
import struct
import sys


def read_st(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    return head, data


def tensor(head, data, key):
    h = head[key]
    a, b = h["data_offsets"]
    return h, data[a:b]


def write_st(path, items, meta):
    """items: [(name, dtype, shape, bytes)] in order"""
    head, off = {}, 0
    if meta:
        head["__metadata__"] = meta
    for name, dt, shape, raw in items:
        head[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    hj = json.dumps(head, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for _, _, _, raw in items:
            f.write(raw)


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    src, ref, key, out = sys.argv[1:]
    rh, rd = read_st(ref)
    if key not in rh:
        sys.exit("make_inpaint.py: %s has no tensor %s" % (ref, key))
    wh, wraw = tensor(rh, rd, key)
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    ufile = os.path.join(tmp, "unet", "diffusion_pytorch_model.safetensors")
    uh, ud = read_st(ufile)
    old = uh["conv_in.weight"]
    if wh["dtype"] != old["dtype"] or wh["shape"][0] != old["shape"][0] or wh["shape"][1] != 9 \
            or wh["shape"][2:] != old["shape"][2:]:
        sys.exit("make_inpaint.py: %s %s is %s %s; the UNet's conv_in.weight %s %s (expected [%d,9,..])"
                 % (ref, key, wh["dtype"], wh["shape"], old["dtype"], old["shape"], old["shape"][0]))
    meta = uh.pop("__metadata__", None)
    items = []
    for name in sorted(uh, key=lambda k: uh[k]["data_offsets"][0]):
        h, raw = tensor(uh, ud, name)
        if name == "conv_in.weight":
            items.append((name, wh["dtype"], wh["shape"], wraw))
        else:
            items.append((name, h["dtype"], h["shape"], raw))
    write_st(ufile, items, meta)
    cpath = os.path.join(tmp, "unet", "config.json")
    with open(cpath) as f:
        cfg = json.load(f)
    cfg["in_channels"] = 9
    with open(cpath, "w") as f:
        json.dump(cfg, f, indent=2)
    os.utime(os.path.join(tmp, "model_index.json"))   # make's target: newer than its inputs
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)


if __name__ == "__main__":
    main()
