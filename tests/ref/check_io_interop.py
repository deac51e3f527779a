#!/usr/bin/python3
"""Reads the files tests/io_tool.c wrote with independent readers: PIL for
PNG, numpy for .npy/.npz, a hand-written reader (+ torch for bf16) for
safetensors.  Usage: check_io_interop.py DIR.  Prints "N passed, N failed"."""
import json
import math
import struct
import sys

import numpy as np
import torch
from PIL import Image

DIR = sys.argv[1]
passed = failed = 0
DTYPES = ["f32", "f16", "bf16", "f64", "i8", "u8", "i16", "i32", "i64", "bool"]
NUMPY = {"f32": "<f4", "f16": "<f2", "bf16": "<f4", "f64": "<f8", "i8": "|i1", "u8": "|u1",
         "i16": "<i2", "i32": "<i4", "i64": "<i8", "bool": "|b1"}
ST = {"f32": "F32", "f16": "F16", "bf16": "BF16", "f64": "F64", "i8": "I8", "u8": "U8",
      "i16": "I16", "i32": "I32", "i64": "I64", "bool": "BOOL"}


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)


def value(dt, i):
    if dt == "bool":
        return i % 3 == 0
    if dt == "u8":
        return (i * 37) % 11 + 200
    v = (i * 37) % 11 - 3
    return v + 0.5 if dt in ("f32", "f16", "bf16", "f64") else v


def expected(dt):
    return np.array([value(dt, i) for i in range(12)]).reshape(2, 3, 2)


def decode_png(path):
    """A minimal independent PNG decoder (non-interlaced, no palette): checks
    every chunk CRC, inflates IDAT and undoes the five filters.  PIL narrows
    16-bit colour images to 8 bits, so 16-bit files are checked with this."""
    import zlib
    raw = open(path, "rb").read()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, ihdr = 8, b"", None
    while pos < len(raw):
        n = struct.unpack(">I", raw[pos:pos + 4])[0]
        kind, body = raw[pos + 4:pos + 8], raw[pos + 8:pos + 8 + n]
        crc = struct.unpack(">I", raw[pos + 8 + n:pos + 12 + n])[0]
        assert zlib.crc32(kind + body) == crc, "chunk CRC"
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, ctype, _, _, interlace = ihdr
    assert interlace == 0
    ch = {0: 1, 4: 2, 2: 3, 6: 4}[ctype]
    bpp = ch * depth // 8
    stride = w * bpp
    data = zlib.decompress(idat)
    out, prev = [], bytearray(stride)
    for y in range(h):
        ft, line = data[y * (stride + 1)], bytearray(data[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
            if ft == 1: line[i] = (line[i] + a) & 255
            elif ft == 2: line[i] = (line[i] + b) & 255
            elif ft == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif ft == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                pr = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pr) & 255
        out.append(bytes(line))
        prev = line
    dt = ">u2" if depth == 16 else "u1"
    return np.frombuffer(b"".join(out), dtype=dt).reshape(h, w, ch).astype(np.int64), depth, ch


def check_pngs():
    for c in range(1, 5):
        for bits in (8, 16):
            h, w, mx = 6, 9, (255 if bits == 8 else 65535)
            want = np.zeros((h, w, c), dtype=np.int64)
            for ch in range(c):
                for y in range(h):
                    for x in range(w):
                        want[y, x, ch] = (x * 7919 + y * 104729 + ch * 1299709) % (mx + 1)
            path = f"{DIR}/png_c{c}_{bits}.png"
            got, depth, nch = decode_png(path)
            check(depth == bits and nch == c, f"png c{c} {bits}: IHDR depth {depth} channels {nch}")
            check(np.array_equal(got, want), f"png c{c} {bits}: pixels (own decoder)")
            im = Image.open(path)
            im.load()
            if bits == 8:
                mode = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}[c]
                check(im.mode == mode, f"png c{c} {bits}: PIL mode {im.mode} want {mode}")
                pil = np.array(im).reshape(h, w, c).astype(np.int64)
                check(np.array_equal(pil, want), f"png c{c} {bits}: pixels (PIL)")
            elif c == 1:
                pil = np.array(im).astype(np.int64)
                check(np.array_equal(pil, want[..., 0]), f"png c1 16: pixels (PIL)")
    # several deflate bands: PIL reads 8-bit colour and 16-bit gray, the
    # decoder above the rest
    for c in (1, 3):
        for bits in (8, 16):
            h, w, mx = 181, 700, (255 if bits == 8 else 65535)
            y, x, ch = np.meshgrid(np.arange(h), np.arange(w), np.arange(c), indexing="ij")
            want = np.where(y < h // 2, (x * 7919 + y * 104729 + ch * 1299709 + x * x * y) % (mx + 1),
                            (x // 3 + y * 2 + ch * 50) % (mx + 1))
            path = f"{DIR}/png_big_c{c}_{bits}.png"
            if bits == 16 and c == 3:
                got, depth, nch = decode_png(path)
                check(depth == 16 and nch == 3 and np.array_equal(got, want), "big png c3 16: pixels (own decoder)")
            else:
                im = Image.open(path)
                im.load()
                pil = np.array(im).astype(np.int64).reshape(h, w, c)
                check(np.array_equal(pil, want), f"big png c{c} {bits}: pixels (PIL)")
    im = Image.open(f"{DIR}/png_float.png")
    check(im.mode == "RGB", "float png mode")
    f = np.array([(i % 17) / 16.0 * 1.2 - 0.1 for i in range(48)])
    f[5] = 0
    want = np.floor(np.clip(f, 0, 1) * 255 + 0.5).reshape(4, 4, 3)
    check(np.array_equal(np.array(im).astype(np.int64), want.astype(np.int64)), "float png pixels")
    check(im.text.get("Title") == "lumen" and im.text.get("Comment") == "interop", "png text")


def same(got, want):
    got = np.asarray(got, dtype=np.float64)
    return got.shape == want.shape and np.array_equal(got, want.astype(np.float64))


def check_npy():
    for dt in DTYPES:
        a = np.load(f"{DIR}/npy_{dt}.npy")
        check(a.dtype == np.dtype(NUMPY[dt]), f"npy {dt}: dtype {a.dtype}")
        check(same(a, expected(dt)), f"npy {dt}: values")
    for name in ("rt.npz", "rt_c.npz"):
        z = np.load(f"{DIR}/{name}")
        check(sorted(z.files) == sorted("t_" + d for d in DTYPES), f"{name}: names {z.files}")
        for dt in DTYPES:
            check(same(z["t_" + dt], expected(dt)), f"{name} {dt}: values")


def check_safetensors():
    raw = open(f"{DIR}/rt.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    check((8 + n) % 8 == 0, "safetensors header padded to 8")
    hdr = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    check(hdr.get("__metadata__") == {"format": "pt", "note": "caf\u00e9 \"q\""}, "metadata")
    end = 0
    for dt in DTYPES:
        e = hdr["t_" + dt]
        check(e["dtype"] == ST[dt] and e["shape"] == [2, 3, 2], f"st {dt}: entry {e}")
        b, f = e["data_offsets"]
        end = max(end, f)
        chunk = data[b:f]
        if dt == "bf16":
            t = torch.frombuffer(bytearray(chunk), dtype=torch.bfloat16).float().numpy()
        else:
            t = np.frombuffer(chunk, dtype=NUMPY[dt])
        check(same(t.reshape(2, 3, 2), expected(dt)), f"st {dt}: values")
    check(end == len(data), "safetensors data fully covered")


check_pngs()
check_npy()
check_safetensors()
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
