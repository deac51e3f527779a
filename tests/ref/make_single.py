#!/usr/bin/env python3
"""Writes an original-layout ("single-file") Stable Diffusion checkpoint from a
diffusers folder: the UNet under model.diffusion_model.*, the VAE under
first_stage_model.*, and the text encoders as SD 1.x (cond_stage_model.transformer.*,
transformers' CLIP names), SD 2.x (cond_stage_model.model.*, OpenCLIP names with fused
qkv) or SDXL (conditioner.embedders.0.transformer.* and conditioner.embedders.1.model.*)
checkpoints hold them.

    python3 tests/ref/make_single.py FOLDER sd1|sd2|sdxl OUT.safetensors

Only numpy: `make test` runs it to build the single-file fixtures from the committed
folders (tests/ref/diffusion/*), so the repository holds the weights once.
tests/ref/gen_diffusion.py runs it too, on the machine with diffusers, and checks its
UNet names against diffusers' own conversion script.

The mapping is written from the architecture (ldm's openaimodel.py / model.py and
open_clip's text tower), for any number of levels and layers per block.
"""
import json
import os
import struct
import sys

import numpy as np

DT = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "I64": np.int64}
TD = {np.dtype(v): k for k, v in DT.items()}


def read_st(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(data[a:b], dtype=DT[v["dtype"]]).reshape(v["shape"]).copy()
    return out


def write_st(path, tensors):
    head, off, blobs = {}, 0, []
    for k in sorted(tensors):
        t = np.ascontiguousarray(tensors[k])
        b = t.tobytes()
        head[k] = {"dtype": TD[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
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


def component(folder, name, stem):
    d = os.path.join(folder, name)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    return cfg, read_st(os.path.join(d, stem + ".safetensors"))


RES = [("in_layers.0.", "norm1."), ("in_layers.2.", "conv1."), ("out_layers.0.", "norm2."),
       ("out_layers.3.", "conv2."), ("emb_layers.1.", "time_emb_proj."), ("skip_connection.", "conv_shortcut.")]


def unet_names(cfg, names):
    """diffusers UNet2DConditionModel name -> openaimodel.py name (without the
    model.diffusion_model. prefix)."""
    lpb = cfg["layers_per_block"]
    L = len(cfg["block_out_channels"])
    pre = {"time_embedding.linear_1.": "time_embed.0.", "time_embedding.linear_2.": "time_embed.2.",
           "add_embedding.linear_1.": "label_emb.0.0.", "add_embedding.linear_2.": "label_emb.0.2.",
           "conv_in.": "input_blocks.0.0.", "conv_norm_out.": "out.0.", "conv_out.": "out.2.",
           "mid_block.resnets.0.": "middle_block.0.", "mid_block.attentions.0.": "middle_block.1.",
           "mid_block.resnets.1.": "middle_block.2."}
    resnet_pre = {"mid_block.resnets.0.", "mid_block.resnets.1."}
    k = 1
    for i in range(L):
        for j in range(lpb):
            pre["down_blocks.%d.resnets.%d." % (i, j)] = "input_blocks.%d.0." % k
            resnet_pre.add("down_blocks.%d.resnets.%d." % (i, j))
            pre["down_blocks.%d.attentions.%d." % (i, j)] = "input_blocks.%d.1." % k
            k += 1
        if i < L - 1:
            pre["down_blocks.%d.downsamplers.0.conv." % i] = "input_blocks.%d.0.op." % k
            k += 1
    k = 0
    for i in range(L):
        has_attn = any(n.startswith("up_blocks.%d.attentions." % i) for n in names)
        for j in range(lpb + 1):
            pre["up_blocks.%d.resnets.%d." % (i, j)] = "output_blocks.%d.0." % k
            resnet_pre.add("up_blocks.%d.resnets.%d." % (i, j))
            pre["up_blocks.%d.attentions.%d." % (i, j)] = "output_blocks.%d.1." % k
            if j == lpb and i < L - 1:
                pre["up_blocks.%d.upsamplers.0." % i] = "output_blocks.%d.%d." % (k, 2 if has_attn else 1)
            k += 1
    out = {}
    for n in names:
        best = max((p for p in pre if n.startswith(p)), key=len, default=None)
        if best is None:
            raise SystemExit("make_single: no original name for UNet weight " + n)
        rest = n[len(best):]
        if best in resnet_pre:
            for a, b in RES:
                if rest.startswith(b):
                    rest = a + rest[len(b):]
                    break
        out[n] = pre[best] + rest
    return out


def vae_keys(cfg, w):
    L = len(cfg["block_out_channels"])
    out = {}
    for n, t in w.items():
        m = n
        for side in ("encoder.", "decoder."):
            if not m.startswith(side):
                continue
            r = m[len(side):]
            if r.startswith("down_blocks."):
                i, rest = r[len("down_blocks."):].split(".", 1)
                rest = rest.replace("resnets.", "block.", 1).replace("downsamplers.0.", "downsample.", 1)
                r = "down.%s.%s" % (i, rest)
            elif r.startswith("up_blocks."):
                i, rest = r[len("up_blocks."):].split(".", 1)
                rest = rest.replace("resnets.", "block.", 1).replace("upsamplers.0.", "upsample.", 1)
                r = "up.%d.%s" % (L - 1 - int(i), rest)
            elif r.startswith("mid_block.resnets."):
                j, rest = r[len("mid_block.resnets."):].split(".", 1)
                r = "mid.block_%d.%s" % (int(j) + 1, rest)
            elif r.startswith("mid_block.attentions.0."):
                rest = r[len("mid_block.attentions.0."):]
                for a, b in (("group_norm.", "norm."), ("to_q.", "q."), ("to_k.", "k."), ("to_v.", "v."),
                             ("to_out.0.", "proj_out.")):
                    if rest.startswith(a):
                        rest = b + rest[len(a):]
                if rest.endswith("weight") and t.ndim == 2:
                    t = t.reshape(t.shape + (1, 1))
                r = "mid.attn_1." + rest
            elif r.startswith("conv_norm_out."):
                r = "norm_out." + r[len("conv_norm_out."):]
            m = side + r
        m = m.replace("conv_shortcut.", "nin_shortcut.")
        out["first_stage_model." + m] = t
    return out


def clip_prefixed(w):
    return {(k if k.startswith("text_model.") or k.startswith("text_projection") else "text_model." + k): v
            for k, v in w.items()}


def openclip(cfg, w, prefix, extra_layer_seed=None):
    sd = clip_prefixed(w)
    o = {prefix + "token_embedding.weight": sd["text_model.embeddings.token_embedding.weight"],
         prefix + "positional_embedding": sd["text_model.embeddings.position_embedding.weight"]}
    n = cfg["num_hidden_layers"]
    for i in range(n):
        a = "text_model.encoder.layers.%d." % i
        b = prefix + "transformer.resblocks.%d." % i
        for x, y in (("layer_norm1", "ln_1"), ("layer_norm2", "ln_2"), ("self_attn.out_proj", "attn.out_proj"),
                     ("mlp.fc1", "mlp.c_fc"), ("mlp.fc2", "mlp.c_proj")):
            o[b + y + ".weight"] = sd[a + x + ".weight"]
            o[b + y + ".bias"] = sd[a + x + ".bias"]
        o[b + "attn.in_proj_weight"] = np.concatenate([sd[a + "self_attn.%s_proj.weight" % c] for c in "qkv"])
        o[b + "attn.in_proj_bias"] = np.concatenate([sd[a + "self_attn.%s_proj.bias" % c] for c in "qkv"])
    if extra_layer_seed is not None:
        # SD 2.x checkpoints hold every OpenCLIP block and condition on the penultimate
        # one (diffusers' converted text encoder has one layer fewer): add a last block
        # that a correct loader never uses.
        rng = np.random.default_rng(extra_layer_seed)
        src = prefix + "transformer.resblocks.%d." % (n - 1)
        dst = prefix + "transformer.resblocks.%d." % n
        for k in [k for k in o if k.startswith(src)]:
            v = o[k]
            o[dst + k[len(src):]] = (v.astype(np.float32) + rng.standard_normal(v.shape).astype(np.float32) * 0.05).astype(v.dtype)
    o[prefix + "ln_final.weight"] = sd["text_model.final_layer_norm.weight"]
    o[prefix + "ln_final.bias"] = sd["text_model.final_layer_norm.bias"]
    if "text_projection.weight" in sd:
        o[prefix + "text_projection"] = np.ascontiguousarray(sd["text_projection.weight"].T)
    else:
        h = cfg["hidden_size"]
        rng = np.random.default_rng(77)
        o[prefix + "text_projection"] = (rng.standard_normal((h, h)) * 0.02).astype(np.float16)
    o[prefix + "logit_scale"] = np.array(4.6052, dtype=np.float32)
    return o


def convert(folder, kind):
    ucfg, uw = component(folder, "unet", "diffusion_pytorch_model")
    vcfg, vw = component(folder, "vae", "diffusion_pytorch_model")
    names = unet_names(ucfg, list(uw))
    out = {"model.diffusion_model." + names[k]: v for k, v in uw.items()}
    out.update(vae_keys(vcfg, vw))
    tcfg, tw = component(folder, "text_encoder", "model")
    if kind == "sd1":
        out.update({"cond_stage_model.transformer." + k: v for k, v in clip_prefixed(tw).items()})
    elif kind == "sd2":
        out.update(openclip(tcfg, tw, "cond_stage_model.model.", extra_layer_seed=5))
    elif kind == "sdxl":
        out.update({"conditioner.embedders.0.transformer." + k: v for k, v in clip_prefixed(tw).items()})
        t2cfg, t2w = component(folder, "text_encoder_2", "model")
        out.update(openclip(t2cfg, t2w, "conditioner.embedders.1.model."))
    else:
        raise SystemExit("make_single: kind must be sd1, sd2 or sdxl")
    # a buffer real checkpoints carry that a loader skips (the DDPM schedule)
    out["alphas_cumprod"] = np.linspace(0.999, 0.005, 1000).astype(np.float32)
    return out


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    write_st(sys.argv[3], convert(sys.argv[1], sys.argv[2]))


if __name__ == "__main__":
    main()
