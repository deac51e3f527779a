#!/usr/bin/env python3
"""PIL's Image.resize(..., LANCZOS) on small random 8-bit images, for Lumen's
lm_sd_resize_lanczos_u8 (models/sd_inpaint.c: A1111's "Only masked" and
diffusers' padding_mask_crop resize with it).  Plain Python and Pillow
(Debian python3-pil):
    python3 tests/ref/gen_lanczos.py tests/ref/inpaint/lanczos.json
Each case: mode, input (h, w), output (h, w), the input and PIL's output as
planar byte lists (channel by channel).
"""
import json
import random
import sys

import PIL
from PIL import Image

CASES = [("L", 12, 12, 32, 32), ("RGB", 32, 32, 12, 12), ("L", 10, 14, 32, 32), ("L", 32, 32, 9, 13),
         ("L", 7, 5, 3, 20), ("L", 20, 3, 20, 9), ("RGB", 6, 8, 6, 17)]


def planar(im):
    return [b for c in range(len(im.getbands())) for b in im.getchannel(c).tobytes()]


def main():
    random.seed(5)
    out = {"pillow": PIL.__version__, "cases": []}
    for mode, ih, iw, oh, ow in CASES:
        C = len(mode)
        data = bytes(random.randrange(256) for _ in range(ih * iw * C))
        im = Image.frombytes(mode, (iw, ih), data)
        r = im.resize((ow, oh), resample=Image.LANCZOS)
        out["cases"].append({"mode": mode, "in": [ih, iw], "out": [oh, ow], "src": planar(im), "want": planar(r)})
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
