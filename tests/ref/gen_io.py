#!/usr/bin/python3
"""Fixtures for the file-format tests (tests/test_io_*.c).

Writes tests/ref/fixtures/io/: .npy files from numpy (every dtype, both byte
orders, Fortran order, format versions 1-3), .npz from numpy.savez and
savez_compressed, arrays made by PyTorch saved through numpy, safetensors
files from the small writer below (the format is 8 bytes of length, a JSON
header and raw bytes), PNGs written by PIL and by the tiny encoder below
(bit depths PIL does not write), and hand-made malformed files.

The element values are the ones tests/test_io_npy.c and test_io_safetensors.c
list; change both together.  Run: /usr/bin/python3 tests/ref/gen_io.py
"""
import json
import os
import struct
import zlib

import numpy as np
import torch
from PIL import Image

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "io")

# the six values of every dtype's [2, 3] fixture (C tests list them too)
VALUES = {
    "bool": [False, True, False, True, True, False],
    "int8": [0, 1, -2, 3, -128, 127],
    "uint8": [0, 1, 2, 3, 128, 255],
    "int16": [0, 1, -2, 3, -32768, 32767],
    "uint16": [0, 1, 2, 3, 32768, 65535],
    "int32": [0, 1, -2, 3, -2147483648, 2147483647],
    "uint32": [0, 1, 2, 3, 2147483648, 4294967295],
    "int64": [0, 1, -2, 3, -(2**62), 2**62],
    "uint64": [0, 1, 2, 3, 2**62, 2**63 - 1],
    "float16": [0.0, 1.0, -2.5, float("inf"), float("nan"), 65504.0],
    "float32": [0.0, 1.0, -2.5, float("inf"), float("nan"), 3.0e38],
    "float64": [0.0, 1.0, -2.5, float("inf"), float("nan"), 1.0e300],
}


def path(name):
    return os.path.join(OUT, name)


def arr(dtype):
    return np.array(VALUES[dtype], dtype=dtype).reshape(2, 3)


def write_npy_fixtures():
    for dt in VALUES:
        np.save(path(f"npy_{dt}.npy"), arr(dt))
    np.save(path("npy_be_f4.npy"), arr("float32").astype(">f4"))
    np.save(path("npy_be_i8.npy"), arr("int64").astype(">i8"))
    np.save(path("npy_be_f2.npy"), arr("float16").astype(">f2"))
    np.save(path("npy_be_u2.npy"), arr("uint16").astype(">u2"))
    f = np.asfortranarray(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    np.save(path("npy_fortran_f4.npy"), f)
    g = np.asfortranarray(np.arange(6, dtype=">i4").reshape(2, 3))
    np.save(path("npy_fortran_be_i4.npy"), g)
    for v in [(2, 0), (3, 0)]:
        with open(path(f"npy_v{v[0]}.npy"), "wb") as fh:
            np.lib.format.write_array(fh, arr("float64"), version=v)
    np.save(path("npy_scalar.npy"), np.float32(3.5))
    np.save(path("npy_empty.npy"), np.zeros((0, 3), dtype=np.float32))
    np.save(path("npy_1d.npy"), np.arange(5, dtype=np.int32))


def write_npz_fixtures():
    a = np.arange(6, dtype=np.float32).reshape(2, 3) / 4
    b = np.array([1, -2, 3, -4], dtype=np.int64)
    c = np.array([True, False, True])
    np.savez(path("npz_stored.npz"), a=a, b=b, c=c)
    np.savez_compressed(path("npz_deflated.npz"), a=a, b=b, c=c)
    # PyTorch tensors dumped through numpy: what a comparison session does
    torch.manual_seed(0)
    x = torch.randn(4, 5)
    w = torch.randn(3, 5)
    y = torch.nn.functional.gelu(x @ w.T)
    np.savez(path("torch_dump.npz"), x=x.numpy(), w=w.numpy(), y=y.numpy())
    np.save(path("torch_y.npy"), y.numpy())


# ---- safetensors ----
ST_DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "I64": "int64",
    "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
}


def st_write(fname, tensors, metadata=None, pad=True, raw_header=None):
    """tensors: list of (name, dtype string, shape, bytes)."""
    header, data, off = {}, b"", 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dt, shape, raw in tensors:
        header[name] = {"dtype": dt, "shape": list(shape),
                        "data_offsets": [off, off + len(raw)]}
        data += raw
        off += len(raw)
    h = raw_header if raw_header is not None else json.dumps(header).encode()
    if pad:
        h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    with open(path(fname), "wb") as fh:
        fh.write(struct.pack("<Q", len(h)) + h + data)


def bf16_bytes(values):
    t = torch.tensor(values, dtype=torch.float32).to(torch.bfloat16)
    return t.view(torch.int16).numpy().tobytes()


def write_safetensors_fixtures():
    ts = []
    for code, dt in ST_DTYPES.items():
        v = VALUES[dt] if dt != "uint64" else None
        ts.append((code.lower(), code, (2, 3), arr(dt).astype("<" + arr(dt).dtype.str[1:]).tobytes()))
    ts.append(("bf16", "BF16", (2, 3), bf16_bytes([0.0, 1.0, -2.5, float("inf"), float("nan"), 3.0e38])))
    ts.append(("scalar", "F32", (), np.float32(7.25).tobytes()))
    ts.append(("empty", "F32", (0, 4), b""))
    meta = {"format": "pt", "note": "h\u00e9llo \"quoted\" \\ \u4e2d\U0001F600"}
    st_write("st_all.safetensors", ts, meta)
    # no padding: tensor data starts at an odd address, so Lumen must copy
    st_write("st_unaligned.safetensors", [("x", "F32", (3,), np.array([1, 2, 3], "<f4").tobytes())],
             pad=False, raw_header=b'{"x":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}}')
    st_write("st_empty.safetensors", [])
    st_write("st_unsigned.safetensors", [
        ("u16", "U16", (2, 3), arr("uint16").astype("<u2").tobytes()),
        ("u32", "U32", (2, 3), arr("uint32").astype("<u4").tobytes()),
        ("u64", "U64", (2, 3), arr("uint64").astype("<u8").tobytes())])
    # torch-made values for the comparison session
    torch.manual_seed(1)
    w = torch.randn(8, 4)
    st_write("st_torch.safetensors", [("w", "F32", (8, 4), w.numpy().tobytes()),
                                      ("w_bf16", "BF16", (8, 4), w.to(torch.bfloat16).view(torch.int16).numpy().tobytes())])
    np.save(path("st_torch_w.npy"), w.numpy())
    np.save(path("st_torch_w_bf16.npy"), w.to(torch.bfloat16).float().numpy())


# ---- PNG ----
def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_encode(rows, width, height, depth, ctype, extra=b""):
    """rows: list of packed scanlines (without filter bytes)."""
    raw = b"".join(b"\x00" + r for r in rows)
    ihdr = struct.pack(">IIBBBBB", width, height, depth, ctype, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + extra +
            png_chunk(b"IDAT", zlib.compress(raw)) + png_chunk(b"IEND", b""))


def pack_bits(values, depth):
    out, acc, n = bytearray(), 0, 0
    for v in values:
        acc = (acc << depth) | v
        n += depth
        if n == 8:
            out.append(acc)
            acc, n = 0, 0
    if n:
        out.append(acc << (8 - n))
    return bytes(out)


def save_expected(name, pixels):
    """pixels: H x W x C integers, saved as <i4 for the C test."""
    np.save(path(name + ".expected.npy"), np.asarray(pixels, dtype="<i4"))


def write_png_fixtures():
    h, w = 5, 7
    yy, xx = np.mgrid[0:h, 0:w]
    rgb = np.stack([xx * 36, yy * 60, (xx + yy) * 20], axis=-1).astype(np.uint8)
    Image.fromarray(rgb, "RGB").save(path("pil_rgb.png"))
    save_expected("pil_rgb", rgb)
    rgba = np.concatenate([rgb, (yy * 50 + 5)[..., None].astype(np.uint8)], axis=-1)
    Image.fromarray(rgba, "RGBA").save(path("pil_rgba.png"))
    save_expected("pil_rgba", rgba)
    gray = (xx * 30 + yy * 7).astype(np.uint8)
    Image.fromarray(gray, "L").save(path("pil_gray8.png"))
    save_expected("pil_gray8", gray[..., None])
    la = np.stack([gray, 255 - gray], axis=-1)
    Image.fromarray(la, "LA").save(path("pil_la.png"))
    save_expected("pil_la", la)
    g16 = (xx * 9000 + yy * 301).astype(np.uint16)
    Image.fromarray(g16, "I;16").save(path("pil_gray16.png"))
    save_expected("pil_gray16", g16[..., None])
    bw = ((xx + yy) % 2).astype(bool)
    Image.fromarray(bw).save(path("pil_gray1.png"))
    save_expected("pil_gray1", (bw * 255)[..., None])
    pal = Image.fromarray(rgb, "RGB").quantize(colors=16)
    pal.save(path("pil_palette.png"))
    save_expected("pil_palette", np.array(pal.convert("RGB")))
    palt = pal.copy()
    palt.info["transparency"] = 0
    palt.save(path("pil_palette_trns.png"), transparency=0)
    save_expected("pil_palette_trns", np.array(Image.open(path("pil_palette_trns.png")).convert("RGBA")))
    im = Image.fromarray(rgb, "RGB")
    from PIL import PngImagePlugin
    info = PngImagePlugin.PngInfo()
    info.add_text("Title", "lumen test")
    info.add_text("Comment", "made by PIL")
    im.save(path("pil_text.png"), pnginfo=info)
    # bit depths and types PIL does not write: the encoder above
    for depth in (2, 4):
        vals = (xx * 3 + yy) % (1 << depth)
        rows = [pack_bits(list(vals[y]), depth) for y in range(h)]
        with open(path(f"enc_gray{depth}.png"), "wb") as fh:
            fh.write(png_encode(rows, w, h, depth, 0))
        save_expected(f"enc_gray{depth}", (vals * (255 // ((1 << depth) - 1)))[..., None])
    rgb16 = np.stack([xx * 9000, yy * 12000 + 5, (xx * yy) * 1000 + 7], axis=-1).astype(">u2")
    rows = [rgb16[y].tobytes() for y in range(h)]
    with open(path("enc_rgb16.png"), "wb") as fh:
        fh.write(png_encode(rows, w, h, 16, 2))
    save_expected("enc_rgb16", rgb16.astype(np.int64))
    # Adam7 interlaced RGB: seven passes, each its own filtered scanlines
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
    raw = b""
    for x0, y0, dx, dy in passes:
        for y in range(y0, h, dy):
            xs = list(range(x0, w, dx))
            if xs:
                raw += b"\x00" + b"".join(bytes(rgb[y, x]) for x in xs)
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 1)
    with open(path("enc_rgb_interlaced.png"), "wb") as fh:
        fh.write(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) +
                 png_chunk(b"IDAT", zlib.compress(raw)) + png_chunk(b"IEND", b""))
    save_expected("enc_rgb_interlaced", rgb)
    # a 4-bit palette
    pal4 = Image.fromarray(rgb, "RGB").quantize(colors=8)
    pal4.save(path("pil_palette4.png"), bits=4)
    save_expected("pil_palette4", np.array(Image.open(path("pil_palette4.png")).convert("RGB")))
    # gray with a tRNS colour key: becomes gray+alpha
    rows = [bytes(gray[y]) for y in range(h)]
    trns = png_chunk(b"tRNS", struct.pack(">H", int(gray[0, 0])))
    with open(path("enc_gray_trns.png"), "wb") as fh:
        fh.write(png_encode(rows, w, h, 8, 0, extra=trns))
    save_expected("enc_gray_trns", np.stack([gray, np.where(gray == gray[0, 0], 0, 255)], axis=-1))


# ---- malformed files: each must give its own clear error ----
def write_malformed():
    good = open(path("st_all.safetensors"), "rb").read()
    open(path("bad_st_truncated.safetensors"), "wb").write(good[: len(good) - 10])
    open(path("bad_st_short.safetensors"), "wb").write(b"\x10\x00\x00")
    open(path("bad_st_huge_header.safetensors"), "wb").write(struct.pack("<Q", 1 << 40) + b"{}")
    open(path("bad_st_header_past_end.safetensors"), "wb").write(struct.pack("<Q", 1000) + b'{"a":1}')

    def hdr(obj_bytes, data=b""):
        h = obj_bytes + b" " * ((8 - (8 + len(obj_bytes)) % 8) % 8)
        return struct.pack("<Q", len(h)) + h + data

    def bad(name, header, data=b""):
        open(path(name), "wb").write(hdr(header, data))

    bad("bad_st_offsets_past_end.safetensors",
        b'{"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}', b"\0" * 8)
    bad("bad_st_dtype.safetensors",
        b'{"x":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}}', b"\0" * 4)
    bad("bad_st_negative_shape.safetensors",
        b'{"x":{"dtype":"F32","shape":[-1,4],"data_offsets":[0,16]}}', b"\0" * 16)
    bad("bad_st_overlap.safetensors",
        b'{"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},'
        b'"y":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}}', b"\0" * 24)
    bad("bad_st_size_mismatch.safetensors",
        b'{"x":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}}', b"\0" * 16)
    bad("bad_st_json.safetensors", b'{"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]', b"\0" * 16)
    bad("bad_st_duplicate.safetensors",
        b'{"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
        b'"x":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', b"\0" * 2)
    bad("bad_st_metadata.safetensors", b'{"__metadata__":{"a":1}}')
    bad("bad_st_u64_overflow.safetensors",
        b'{"x":{"dtype":"U64","shape":[1],"data_offsets":[0,8]}}', struct.pack("<Q", 2**63))
    bad("bad_st_missing_key.safetensors", b'{"x":{"dtype":"F32","shape":[4]}}')
    bad("bad_st_too_many_dims.safetensors",
        b'{"x":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}}', b"\0")

    npy = open(path("npy_float32.npy"), "rb").read()
    open(path("bad_npy_truncated.npy"), "wb").write(npy[:-5])
    open(path("bad_npy_magic.npy"), "wb").write(b"\x93NUMPX" + npy[6:])
    hl = npy[:8] + struct.pack("<H", 60000) + npy[10:]
    open(path("bad_npy_header_past_end.npy"), "wb").write(hl)
    big = b"\x93NUMPY\x02\x00" + struct.pack("<I", 1 << 30) + b"{}"
    open(path("bad_npy_huge_header.npy"), "wb").write(big)

    def npy_hdr(d, data=b""):
        h = d.encode()
        h += b" " * ((64 - (10 + len(h) + 1) % 64) % 64) + b"\n"
        return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + data

    open(path("bad_npy_descr.npy"), "wb").write(
        npy_hdr("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", b"\0" * 16))
    open(path("bad_npy_negative_shape.npy"), "wb").write(
        npy_hdr("{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 2), }", b"\0" * 8))
    open(path("bad_npy_structured.npy"), "wb").write(
        npy_hdr("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", b"\0" * 8))
    open(path("bad_npy_version.npy"), "wb").write(b"\x93NUMPY\x09\x00" + npy[8:])
    open(path("bad_npy_u8_overflow.npy"), "wb").write(
        npy_hdr("{'descr': '<u8', 'fortran_order': False, 'shape': (1,), }",
                struct.pack("<Q", 2**63)))

    npz = open(path("npz_stored.npz"), "rb").read()
    open(path("bad_npz_truncated.npz"), "wb").write(npz[: len(npz) // 2])
    z = bytearray(npz)
    i = z.find(b"\x93NUMPY", 0)
    z[i + 140] ^= 0xFF          # inside member a's data: CRC must catch it
    open(path("bad_npz_crc.npz"), "wb").write(bytes(z))
    # a deflated member claiming 4 GB from a few bytes (bomb guard)
    dz = bytearray(open(path("npz_deflated.npz"), "rb").read())
    cd = dz.find(b"PK\x01\x02")
    dz[cd + 24: cd + 28] = struct.pack("<I", 0xFFFFFFF0)
    open(path("bad_npz_bomb.npz"), "wb").write(bytes(dz))
    # two central directory entries pointing at one member: overlap
    eocd = npz.rfind(b"PK\x05\x06")
    cd_off = struct.unpack("<I", npz[eocd + 16: eocd + 20])[0]
    first_len = 46 + struct.unpack("<H", npz[cd_off + 28: cd_off + 30])[0] + \
        struct.unpack("<H", npz[cd_off + 30: cd_off + 32])[0]
    entry = npz[cd_off: cd_off + first_len]
    dup = entry.replace(b"a.npy", b"d.npy")
    new_cd = npz[cd_off:eocd] + dup
    e = bytearray(npz[eocd:])
    n = struct.unpack("<H", e[10:12])[0] + 1
    e[8:10] = struct.pack("<H", n)
    e[10:12] = struct.pack("<H", n)
    e[12:16] = struct.pack("<I", len(new_cd))
    open(path("bad_npz_overlap.npz"), "wb").write(npz[:cd_off] + new_cd + bytes(e))
    open(path("bad_npz_empty.npz"), "wb").write(b"PK\x05\x06")

    png = open(path("pil_rgb.png"), "rb").read()
    open(path("bad_png_truncated.png"), "wb").write(png[: len(png) - 30])
    p = bytearray(png)
    p[45] ^= 0x55               # inside the first chunk after IHDR: CRC error
    open(path("bad_png_crc.png"), "wb").write(bytes(p))
    ihdr = struct.pack(">IIBBBBB", 100000, 100000, 8, 6, 0, 0, 0)
    open(path("bad_png_huge.png"), "wb").write(
        b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) +
        png_chunk(b"IDAT", zlib.compress(b"\0" * 100)) + png_chunk(b"IEND", b""))
    open(path("bad_png_signature.png"), "wb").write(b"\x89PNX\r\n\x1a\n" + png[8:])
    ihdr = struct.pack(">IIBBBBB", 4, 4, 3, 2, 0, 0, 0)   # depth 3 is invalid
    open(path("bad_png_ihdr.png"), "wb").write(
        b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IEND", b""))
    open(path("bad_unknown.bin"), "wb").write(b"hello, this is not a tensor file at all\n")


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    write_npy_fixtures()
    write_npz_fixtures()
    write_safetensors_fixtures()
    write_png_fixtures()
    write_malformed()
    print("wrote", len(os.listdir(OUT)), "files to", OUT)
