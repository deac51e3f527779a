#!/usr/bin/env python3
"""Writes a diffusers Z-Image or FLUX.2 transformer folder (config.json +
diffusion_pytorch_model.safetensors, f32) as one file in the original layout:
the key names of the released single files that ComfyUI (diffusion_models/) and
stable-diffusion.cpp load, and of the GGUF files ComfyUI-GGUF writes.

    python3 tests/ref/make_dit_single.py TRANSFORMER_DIR OUT.safetensors [--prefix]
    python3 tests/ref/make_dit_single.py TRANSFORMER_DIR OUT.gguf --q8_0

The maps are the inverses of diffusers' convert_z_image_transformer_checkpoint_
to_diffusers and convert_flux2_transformer_checkpoint_to_diffusers
(loaders/single_file_utils.py, scripts/convert_flux2_to_diffusers.py):

  Z-Image   all_x_embedder.2-1. -> x_embedder., all_final_layer.2-1. -> final_layer.,
            attention.to_q/to_k/to_v -> attention.qkv (rows concatenated),
            attention.to_out.0 -> attention.out, attention.norm_q/norm_k ->
            attention.q_norm/k_norm, plus norm_final.weight (ones: the
            released files hold it, diffusers drops it)
  FLUX.2    x_embedder -> img_in, context_embedder -> txt_in,
            time_guidance_embed.timestep_embedder.linear_1/2 -> time_in.in_layer/out_layer,
            *_modulation*.linear -> .lin, proj_out -> final_layer.linear,
            norm_out.linear -> final_layer.adaLN_modulation.1 (its two halves swapped),
            transformer_blocks.N -> double_blocks.N (attn.to_q/k/v -> img_attn.qkv,
            attn.add_q/k/v_proj -> txt_attn.qkv, norm_q/k -> img_attn.norm.query/key_norm.scale,
            norm_added_q/k -> txt_attn.norm.query/key_norm.scale, to_out.0 -> img_attn.proj,
            to_add_out -> txt_attn.proj, ff[_context].linear_in/out -> img/txt_mlp.0/.2),
            single_transformer_blocks.N -> single_blocks.N (attn.to_qkv_mlp_proj -> linear1,
            attn.to_out -> linear2, attn.norm_q/k -> norm.query/key_norm.scale)

--prefix puts every key under model.diffusion_model. (a checkpoint's layout; ComfyUI's
diffusion_models files and ComfyUI-GGUF's have none).  --q8_0 writes GGUF v3 as
ComfyUI-GGUF's convert.py does: general.architecture "lumina2" (Z-Image) or "flux",
1-D tensors and (FLUX.2) img_in / txt_in / time_in / final_layer kept F32, every
other 2-D weight Q8_0 where its rows are whole 32-element blocks (else F32, as its
quantizer falls back).  Z-Image's x_pad_token [1, dim] is Q8_0 as ComfyUI-GGUF wrote it
before it kept the pad tokens in F32; cap_pad_token is F32 [dim], the shape older
checkpoints have.  Q8_0 is ggml's reference quantizer (d = amax / 127
as f16, codes round(x / d) half away from zero).

Plain Python (struct, json): `make test` runs it (models.mk) to build
$(BUILD)/ref/dit/ from the committed folders, so the repository holds the weights once.
"""
import json
import math
import os
import struct
import sys


def read_st(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        if v["dtype"] != "F32":
            raise SystemExit("%s: %s is %s (the maker reads f32 folders)" % (path, k, v["dtype"]))
        a, b = v["data_offsets"]
        out[k] = (list(v["shape"]), data[a:b])
    return out


def write_st(path, tensors):
    head, off, blobs = {}, 0, []
    for k in sorted(tensors):
        shape, b = tensors[k]
        head[k] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(head, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def cat_rows(*ts):
    """row-major tensors [r_i, c] stacked along the rows"""
    cols = ts[0][0][1:]
    for t in ts:
        if t[0][1:] != cols:
            raise SystemExit("cat_rows: shapes %s" % [t[0] for t in ts])
    return [sum(t[0][0] for t in ts)] + cols, b"".join(t[1] for t in ts)


def swap_halves(t):
    shape, b = t
    h = len(b) // 2
    return shape, b[h:] + b[:h]


def zimage(w):
    out = {}
    for k, t in w.items():
        n = k
        for a, b in (("all_x_embedder.2-1.", "x_embedder."), ("all_final_layer.2-1.", "final_layer."),
                     (".attention.to_out.0.", ".attention.out."),
                     (".attention.norm_q.weight", ".attention.q_norm.weight"),
                     (".attention.norm_k.weight", ".attention.k_norm.weight")):
            n = n.replace(a, b)
        if n.endswith(".attention.to_q.weight"):
            base = k[: -len("to_q.weight")]
            n = n[: -len("to_q.weight")] + "qkv.weight"
            t = cat_rows(w[base + "to_q.weight"], w[base + "to_k.weight"], w[base + "to_v.weight"])
        elif n.endswith(".attention.to_k.weight") or n.endswith(".attention.to_v.weight"):
            continue
        out[n] = t
    dim = w["cap_embedder.1.weight"][0][0]
    out["norm_final.weight"] = ([dim], struct.pack("<%df" % dim, *([1.0] * dim)))
    return out


FLUX2_TOP = {
    "x_embedder.weight": "img_in.weight",
    "context_embedder.weight": "txt_in.weight",
    "time_guidance_embed.timestep_embedder.linear_1.weight": "time_in.in_layer.weight",
    "time_guidance_embed.timestep_embedder.linear_2.weight": "time_in.out_layer.weight",
    "double_stream_modulation_img.linear.weight": "double_stream_modulation_img.lin.weight",
    "double_stream_modulation_txt.linear.weight": "double_stream_modulation_txt.lin.weight",
    "single_stream_modulation.linear.weight": "single_stream_modulation.lin.weight",
    "proj_out.weight": "final_layer.linear.weight",
}
FLUX2_DOUBLE = {
    "attn.norm_q.weight": "img_attn.norm.query_norm.scale",
    "attn.norm_k.weight": "img_attn.norm.key_norm.scale",
    "attn.norm_added_q.weight": "txt_attn.norm.query_norm.scale",
    "attn.norm_added_k.weight": "txt_attn.norm.key_norm.scale",
    "attn.to_out.0.weight": "img_attn.proj.weight",
    "attn.to_add_out.weight": "txt_attn.proj.weight",
    "ff.linear_in.weight": "img_mlp.0.weight",
    "ff.linear_out.weight": "img_mlp.2.weight",
    "ff_context.linear_in.weight": "txt_mlp.0.weight",
    "ff_context.linear_out.weight": "txt_mlp.2.weight",
}
FLUX2_SINGLE = {
    "attn.to_qkv_mlp_proj.weight": "linear1.weight",
    "attn.to_out.weight": "linear2.weight",
    "attn.norm_q.weight": "norm.query_norm.scale",
    "attn.norm_k.weight": "norm.key_norm.scale",
}
FLUX2_QKV = {"attn.to_q.weight": ("img_attn.qkv.weight", "attn.to_%s.weight"),
             "attn.add_q_proj.weight": ("txt_attn.qkv.weight", "attn.add_%s_proj.weight")}
FLUX2_QKV_PARTS = {"attn.to_k.weight", "attn.to_v.weight", "attn.add_k_proj.weight", "attn.add_v_proj.weight"}


def flux2(w):
    out = {}
    for k, t in w.items():
        if k in FLUX2_TOP:
            out[FLUX2_TOP[k]] = t
        elif k == "norm_out.linear.weight":
            out["final_layer.adaLN_modulation.1.weight"] = swap_halves(t)
        elif k.startswith("transformer_blocks."):
            _, l, rest = k.split(".", 2)
            if rest in FLUX2_QKV:
                name, part = FLUX2_QKV[rest]
                base = "transformer_blocks.%s." % l
                out["double_blocks.%s.%s" % (l, name)] = cat_rows(*(w[base + part % x] for x in "qkv"))
            elif rest in FLUX2_QKV_PARTS:
                continue
            else:
                out["double_blocks.%s.%s" % (l, FLUX2_DOUBLE[rest])] = t
        elif k.startswith("single_transformer_blocks."):
            _, l, rest = k.split(".", 2)
            out["single_blocks.%s.%s" % (l, FLUX2_SINGLE[rest])] = t
        else:
            raise SystemExit("flux2: no original name for %s" % k)
    return out


# ---- GGUF (v3) ----

GGML_F32, GGML_Q8_0 = 0, 8


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def q8_0(b):
    n = len(b) // 4
    x = struct.unpack("<%df" % n, b)
    out = bytearray()
    for i in range(0, n, 32):
        blk = x[i:i + 32]
        amax = max(abs(v) for v in blk)
        d = f32(amax / 127.0)
        inv = f32(1.0 / d) if d else 0.0
        qs = []
        for v in blk:
            y = f32(v * inv)
            q = int(math.floor(abs(y) + 0.5)) * (1 if y >= 0 else -1)
            qs.append(q)
        out += struct.pack("<e", d) + struct.pack("<32b", *qs)
    return bytes(out)


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def write_gguf(path, tensors, arch, keep_f32):
    names = sorted(tensors)
    infos, blobs, off = [], [], 0
    for k in names:
        shape, b = tensors[k]
        quant = len(shape) == 2 and shape[-1] % 32 == 0 and not keep_f32(k)
        data = q8_0(b) if quant else b
        dims = list(reversed(shape))     # ggml: innermost first
        info = gstr(k) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        info += struct.pack("<IQ", GGML_Q8_0 if quant else GGML_F32, off)
        infos.append(info)
        pad = (32 - len(data) % 32) % 32
        blobs.append(data + b"\0" * pad)
        off += len(data) + pad
    kv = gstr("general.architecture") + struct.pack("<I", 8) + gstr(arch)
    kv += gstr("general.file_type") + struct.pack("<I", 4) + struct.pack("<I", 7)   # MOSTLY_Q8_0
    head = b"GGUF" + struct.pack("<IQQ", 3, len(names), 2) + kv + b"".join(infos)
    head += b"\0" * ((32 - len(head) % 32) % 32)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(head)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


FLUX_F32 = ("time_in.", "txt_in.", "img_in.", "guidance_in.", "final_layer.")


def main(argv):
    if len(argv) < 3:
        raise SystemExit(__doc__)
    folder, out = argv[1], argv[2]
    opts = set(argv[3:])
    with open(os.path.join(folder, "config.json")) as f:
        cls = json.load(f)["_class_name"]
    w = read_st(os.path.join(folder, "diffusion_pytorch_model.safetensors"))
    if cls == "ZImageTransformer2DModel":
        t, arch = zimage(w), "lumina2"
        keep = lambda k: k == "cap_pad_token"
    elif cls == "Flux2Transformer2DModel":
        t, arch = flux2(w), "flux"
        keep = lambda k: any(p in k for p in FLUX_F32)
    else:
        raise SystemExit("%s: _class_name %s (ZImageTransformer2DModel or Flux2Transformer2DModel)" % (folder, cls))
    if "--q8_0" in opts:
        if "cap_pad_token" in t:
            t["cap_pad_token"] = (t["cap_pad_token"][0][1:], t["cap_pad_token"][1])
        write_gguf(out, t, arch, keep)
    else:
        if "--prefix" in opts:
            t = {"model.diffusion_model." + k: v for k, v in t.items()}
        write_st(out, t)


if __name__ == "__main__":
    main(sys.argv)
