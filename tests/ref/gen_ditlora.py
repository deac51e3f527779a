#!/usr/bin/env python3
"""gen_ditlora.py OUT: LoRA fixtures for the DiT families (issue 37), made with
PEFT and diffusers on the tiny Z-Image and FLUX.2-klein fixtures of
gen_dit.py (tests/ref/dit/zimage, tests/ref/dit/klein; found beside this
script as dit/ or ref/dit/).

Random rank-4 adapters (PEFT's LoraConfig on the transformer, the factors
then drawn from a seeded normal) written in the layouts users download:
  zi_peft.safetensors    diffusers / PEFT: transformer.<diffusers name>.lora_A / lora_B
  zi_comfy.safetensors   ComfyUI / ai-toolkit: diffusion_model.<name>.lora_down / lora_up /
                         alpha (alpha 8, rank 4), attention.to_out.0 under the original
                         name attention.out
  zi_kohya.safetensors   kohya: lora_unet_<name with _>.lora_down / lora_up / alpha (alpha 2)
  zi_qkv.safetensors     a LoRA on the original fused attention.qkv ([r, dim] down,
                         [3 dim, r] up, alpha 8) under diffusion_model.; diffusers' Z-Image
                         converter has no fused-qkv rule, so its reference is the
                         split diffusers adapter written here (to_q / to_k / to_v sharing
                         the down factor, the up factor in thirds), as diffusers' FLUX.2
                         converter splits one
  kl_peft.safetensors    FLUX.2 diffusers / PEFT (transformer.*, lora_A / lora_B)
  kl_comfy.safetensors   FLUX.2 ai-toolkit: diffusion_model.double_blocks.N.img_attn.qkv
                         (fused), .proj, img_mlp.0 / .2, txt_*, single_blocks.N.linear1 /
                         linear2 (lora_A / lora_B), loaded by diffusers' own converter
  kl_kohya.safetensors   FLUX.2 kohya: lora_unet_double_blocks_N_img_attn_qkv ... with
                         lora_down / lora_up / alpha (alpha 8), diffusers' converter
Each is loaded by the pipeline's load_lora_weights (a fresh pipeline from the
fixture folder) and fused with fuse_lora(lora_scale=SCALE).

ref_ditlora.safetensors (f32):
  zi.x [1, 16, H, W], zi.t [1], zi.cap [L, 16]: a Z-Image transformer call's inputs
    (Lumen's pipe.transformer(x, t, cap)); zi.base its output without an adapter;
  kl.x [1, 16, h, w], kl.t [1], kl.ctx [1, L, 32]: klein's (pipe.transformer(x, t, ctx):
    packed, ids from _prepare_latent_ids / _prepare_text_ids, unpacked); kl.base;
  V.out the output with adapter V fused; V.w.<weight> a few fused weights.
ditlora.json: the cases, their scale, the weights recorded, and the log.
CPU, f32, seeded; a few seconds.
"""
import json
import os
import sys
import traceback

import torch
from safetensors.torch import load_file, save_file

from diffusers import Flux2KleinPipeline, ZImagePipeline
from peft import LoraConfig, inject_adapter_in_model
from peft.utils import get_peft_model_state_dict

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)
DIT = next(p for p in (os.path.join(HERE, "dit"), os.path.join(HERE, "ref", "dit")) if os.path.isdir(p))
torch.set_grad_enabled(False)
SCALE = 0.75
R = 4

ref = {}
cases = {}
log = []


def say(*a):
    s = " ".join(str(x) for x in a)
    print(s)
    log.append(s)


def save(name, d):
    save_file({k: v.detach().float().contiguous().cpu() for k, v in d.items()}, os.path.join(OUT, name))


def peft_adapter(model, regex, seed):
    """A PEFT LoRA (rank R, alpha R) on a copy of model's Linear modules whose names match
    regex, the factors drawn from N(0, 0.2^2): its state dict under diffusers' names.
    Where PEFT fails, the same keys drawn by hand (logged)."""
    import copy
    import re
    names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and re.fullmatch(regex, n)]
    g = torch.Generator().manual_seed(seed)
    try:
        m = copy.deepcopy(model)
        inject_adapter_in_model(LoraConfig(r=R, lora_alpha=R, target_modules=names, init_lora_weights=False), m)
        sd = get_peft_model_state_dict(m)
    except Exception:
        say("PEFT failed, the adapter drawn by hand:", traceback.format_exc())
        mods = dict(model.named_modules())
        sd = {}
        for n in names:
            sd[n + ".lora_A.weight"] = torch.zeros(R, mods[n].in_features)
            sd[n + ".lora_B.weight"] = torch.zeros(mods[n].out_features, R)
    say("adapter", seed, len(names), "modules")
    return {k: torch.randn(v.shape, generator=g) * 0.2 for k, v in sorted(sd.items())}


# ---------------------------------------------------------------- Z-Image
ZW = ["layers.0.attention.to_q.weight", "layers.0.attention.to_v.weight", "layers.1.attention.to_out.0.weight",
      "layers.1.feed_forward.w2.weight", "context_refiner.0.attention.to_k.weight",
      "noise_refiner.0.adaLN_modulation.0.weight"]


def zi_pipe():
    return ZImagePipeline.from_pretrained(os.path.join(DIT, "zimage"), torch_dtype=torch.float32)


torch.manual_seed(11)
zx = torch.randn(1, 16, 8, 8)
zt = torch.tensor([0.4])
zcap = torch.randn(9, 16)
ref["zi.x"] = zx; ref["zi.t"] = zt; ref["zi.cap"] = zcap


def zi_call(p):
    y = p.transformer(list(zx.unsqueeze(2).unbind(0)), zt, [zcap], return_dict=False)[0]
    return y[0].squeeze(1).unsqueeze(0)


def fused_weight(sd, k):
    """k from a state dict, PEFT's wrapper (base_layer) or not"""
    return sd[k] if k in sd else sd[k[:-len(".weight")] + ".base_layer.weight"]


def zi_case(name, file_sd, diffusers_sd=None):
    """file_sd is saved as name.safetensors (what Lumen loads); diffusers loads
    diffusers_sd (default: the file's own tensors)."""
    try:
        save_file({k: v.contiguous() for k, v in file_sd.items()}, os.path.join(OUT, name + ".safetensors"))
        p = zi_pipe()
        before = {k: p.transformer.state_dict()[k].clone() for k in ZW}
        p.load_lora_weights(dict(diffusers_sd if diffusers_sd is not None else file_sd), adapter_name=name)
        p.fuse_lora(lora_scale=SCALE)
        out = zi_call(p)
        p.unload_lora_weights()   # the fused weights stay, the LoRA layers go
        ref[name + ".out"] = out
        say(name, "after unload_lora_weights: the same output:", torch.equal(out, zi_call(p)))
        sd = p.transformer.state_dict()
        changed = []
        for k in ZW:
            ref[name + ".w." + k] = fused_weight(sd, k)
            if not torch.equal(fused_weight(sd, k), before[k]): changed.append(k)
        cases[name] = {"family": "zimage", "scale": SCALE, "weights": ZW, "changed": changed}
        say(name, "ok; changed:", changed)
    except Exception:
        say(name, "FAILED:", traceback.format_exc())


try:
    p = zi_pipe()
    ref["zi.base"] = zi_call(p)
    base_tr = p.transformer
    # adaLN_modulation.0 is the blocks' linear (the final layer's .0 is a SiLU)
    zre = (r".*(attention\.to_q|attention\.to_k|attention\.to_v|attention\.to_out\.0|feed_forward\.w[123]|"
           r"(layers|noise_refiner)\.\d+\.adaLN_modulation\.0)$")
except Exception:
    say("zimage base FAILED:", traceback.format_exc())
try:
    A = peft_adapter(base_tr, zre, 1)
    # diffusers / PEFT
    zi_case("zi_peft", {"transformer." + k: v for k, v in A.items()})
except Exception:
    say("zi_peft FAILED:", traceback.format_exc())
try:
    # ComfyUI: diffusion_model., lora_down / lora_up / alpha, attention.out
    B = peft_adapter(base_tr, zre, 2)
    comfy = {}
    for k, v in B.items():
        mod, role = k.rsplit(".lora_", 1)
        orig = mod.replace(".attention.to_out.0", ".attention.out")
        comfy["diffusion_model." + orig + (".lora_down.weight" if role.startswith("A") else ".lora_up.weight")] = v
        comfy["diffusion_model." + orig + ".alpha"] = torch.tensor(8.0)
    zi_case("zi_comfy", comfy)
except Exception:
    say("zi_comfy FAILED:", traceback.format_exc())
try:
    # kohya: lora_unet_ + the diffusers name with _
    C = peft_adapter(base_tr, zre, 3)
    kohya = {}
    for k, v in C.items():
        mod, role = k.rsplit(".lora_", 1)
        kk = "lora_unet_" + mod.replace(".", "_")
        kohya[kk + (".lora_down.weight" if role.startswith("A") else ".lora_up.weight")] = v
        kohya[kk + ".alpha"] = torch.tensor(2.0)
    zi_case("zi_kohya", kohya)
except Exception:
    say("zi_kohya FAILED:", traceback.format_exc())
try:
    # the original fused qkv
    g = torch.Generator().manual_seed(4)
    D = base_tr.config.dim
    fused, split = {}, {}
    for blk in ["noise_refiner.0", "context_refiner.0", "layers.0", "layers.1"]:
        dn = torch.randn(R, D, generator=g) * 0.2
        up = torch.randn(3 * D, R, generator=g) * 0.2
        alpha = 8.0
        fused[f"diffusion_model.{blk}.attention.qkv.lora_down.weight"] = dn
        fused[f"diffusion_model.{blk}.attention.qkv.lora_up.weight"] = up
        fused[f"diffusion_model.{blk}.attention.qkv.alpha"] = torch.tensor(alpha)
        for i, part in enumerate(("to_q", "to_k", "to_v")):
            split[f"transformer.{blk}.attention.{part}.lora_A.weight"] = dn * (alpha / R)
            split[f"transformer.{blk}.attention.{part}.lora_B.weight"] = up[i * D:(i + 1) * D].clone()
    zi_case("zi_qkv", fused, split)
except Exception:
    say("zimage FAILED:", traceback.format_exc())

# ---------------------------------------------------------------- FLUX.2-klein
KW = ["transformer_blocks.0.attn.to_k.weight", "transformer_blocks.0.attn.add_v_proj.weight",
      "transformer_blocks.0.attn.to_out.0.weight", "transformer_blocks.0.ff.linear_in.weight",
      "single_transformer_blocks.0.attn.to_qkv_mlp_proj.weight", "single_transformer_blocks.0.attn.to_out.weight"]


def kl_pipe():
    return Flux2KleinPipeline.from_pretrained(os.path.join(DIT, "klein"), torch_dtype=torch.float32)


torch.manual_seed(12)
kx = torch.randn(1, 16, 4, 6)
kt = torch.tensor([0.6])
kctx = torch.randn(1, 10, 32)
ref["kl.x"] = kx; ref["kl.t"] = kt; ref["kl.ctx"] = kctx


def kl_call(p):
    B, C, h, w = kx.shape
    hs = kx.reshape(B, C, h * w).permute(0, 2, 1)
    img_ids = p._prepare_latent_ids(kx)
    txt_ids = p._prepare_text_ids(kctx)
    y = p.transformer(hidden_states=hs, encoder_hidden_states=kctx, timestep=kt, img_ids=img_ids,
                      txt_ids=txt_ids, guidance=None, return_dict=False)[0]
    return y.permute(0, 2, 1).reshape(B, -1, h, w)


def kl_case(name, file_sd):
    try:
        save_file({k: v.contiguous() for k, v in file_sd.items()}, os.path.join(OUT, name + ".safetensors"))
        p = kl_pipe()
        before = {k: p.transformer.state_dict()[k].clone() for k in KW}
        p.load_lora_weights(dict(file_sd), adapter_name=name)
        p.fuse_lora(lora_scale=SCALE)
        out = kl_call(p)
        p.unload_lora_weights()   # the fused weights stay, the LoRA layers go
        ref[name + ".out"] = out
        say(name, "after unload_lora_weights: the same output:", torch.equal(out, kl_call(p)))
        sd = p.transformer.state_dict()
        changed = []
        for k in KW:
            ref[name + ".w." + k] = fused_weight(sd, k)
            if not torch.equal(fused_weight(sd, k), before[k]): changed.append(k)
        cases[name] = {"family": "klein", "scale": SCALE, "weights": KW, "changed": changed}
        say(name, "ok; changed:", changed)
    except Exception:
        say(name, "FAILED:", traceback.format_exc())


try:
    p = kl_pipe()
    ref["kl.base"] = kl_call(p)
    tr = p.transformer
    kre = (r".*(attn\.to_q|attn\.to_k|attn\.to_v|attn\.to_out\.0|attn\.add_q_proj|attn\.add_k_proj|"
           r"attn\.add_v_proj|attn\.to_add_out|ff\.linear_in|ff\.linear_out|ff_context\.linear_in|"
           r"ff_context\.linear_out|attn\.to_qkv_mlp_proj|single_transformer_blocks\.\d+\.attn\.to_out|"
           r"double_stream_modulation_img\.linear|x_embedder|proj_out)$")
    A = peft_adapter(tr, kre, 5)
    kl_case("kl_peft", {"transformer." + k: v for k, v in A.items()})
    # the original (BFL) names, fused qkv
    sdw = tr.state_dict()
    g = torch.Generator().manual_seed(6)
    nd, ns = tr.config.num_layers, tr.config.num_single_layers

    def pair(out_f, in_f):
        return torch.randn(R, in_f, generator=g) * 0.2, torch.randn(out_f, R, generator=g) * 0.2

    orig = {}
    for l in range(nd):
        b = f"transformer_blocks.{l}"
        for o, shape_of in (("img_attn.qkv", None), ("txt_attn.qkv", None),
                            ("img_attn.proj", f"{b}.attn.to_out.0.weight"),
                            ("txt_attn.proj", f"{b}.attn.to_add_out.weight"),
                            ("img_mlp.0", f"{b}.ff.linear_in.weight"), ("img_mlp.2", f"{b}.ff.linear_out.weight"),
                            ("txt_mlp.0", f"{b}.ff_context.linear_in.weight"),
                            ("txt_mlp.2", f"{b}.ff_context.linear_out.weight")):
            if shape_of is None:
                w = sdw[f"{b}.attn.to_q.weight"]
                orig[f"double_blocks.{l}.{o}"] = pair(3 * w.shape[0], w.shape[1])
            else:
                w = sdw[shape_of]
                orig[f"double_blocks.{l}.{o}"] = pair(w.shape[0], w.shape[1])
    for l in range(ns):
        b = f"single_transformer_blocks.{l}"
        for o, shape_of in (("linear1", f"{b}.attn.to_qkv_mlp_proj.weight"), ("linear2", f"{b}.attn.to_out.weight")):
            w = sdw[shape_of]
            orig[f"single_blocks.{l}.{o}"] = pair(w.shape[0], w.shape[1])
    w = sdw["x_embedder.weight"]
    orig["img_in"] = pair(w.shape[0], w.shape[1])
    comfy = {}
    for k, (dn, up) in orig.items():
        comfy[f"diffusion_model.{k}.lora_A.weight"] = dn
        comfy[f"diffusion_model.{k}.lora_B.weight"] = up
    kl_case("kl_comfy", comfy)
    kohya = {}
    for k, (dn, up) in orig.items():
        kk = "lora_unet_" + k.replace(".", "_")
        kohya[kk + ".lora_down.weight"] = dn * 0.5
        kohya[kk + ".lora_up.weight"] = up
        kohya[kk + ".alpha"] = torch.tensor(8.0)
    kl_case("kl_kohya", kohya)
except Exception:
    say("klein FAILED:", traceback.format_exc())

save("ref_ditlora.safetensors", ref)
import diffusers, peft
say("diffusers", diffusers.__version__, "peft", peft.__version__, "torch", torch.__version__)
json.dump({"scale": SCALE, "rank": R, "cases": cases, "log": log}, open(os.path.join(OUT, "ditlora.json"), "w"),
          indent=1)
