#!/usr/bin/env python3
"""Fixtures for Lumen's LoRA / LyCORIS loader (issue 37), made with PEFT and diffusers.

Tiny random adapters for the tiny SD 1.x fixture model (tests/ref/diffusion/sd1, made by
gen_diffusion.py), in the file layouts users download:
  peft.safetensors   PEFT LoraConfig on the UNet and the text encoder, saved by diffusers'
                     save_lora_weights (keys unet.* / text_encoder.*, lora_A / lora_B)
  dora.safetensors   the same with use_dora=True (lora_magnitude_vector)
  kohya.safetensors  a PEFT LoRA written under kohya's names by hand from the mapping
                     (lora_unet_* / lora_te_*, lora_down / lora_up / alpha), alpha != rank
  loha.safetensors   PEFT LoHaConfig (use_effective_conv2d: hada_t1/t2 on the 3x3 conv)
                     under LyCORIS' kohya-style names (hada_w1_a ... , alpha)
  lokr.safetensors   PEFT LoKrConfig (lokr_w1, lokr_w2_a/b, lokr_t2 on the 3x3 conv)
Every adapter tensor is stored in f16 and the references use the f16-rounded values.

References (ref_lora.safetensors, f32): for each case C and each adapted layer L the first
ROWS rows of the weight flattened to [out, -1]:
  C.peft.w.L       PEFT's own merge (layer.merge(), user weight 1)
  C.diffusers.w.L  diffusers load_lora_weights + fuse_lora(lora_scale=SCALE[C]) (not LoHa/LoKr,
                   which diffusers does not load for SD)
and the outputs C.SRC.unet (UNet at x, t, ctx) and C.SRC.te (text encoder's last hidden
state at ids); base.* the same without an adapter.  Text-encoder layers are keyed by
transformers 4's names (text_model.encoder...) whichever transformers runs.  lora.json
lists the cases, scales, layers, each file's A1111 "addnet" hash (sha256 of the bytes after
the safetensors header) and what was checked here: a diffusers reference is dropped (and
logged) when a layer it should adapt is unchanged, or, for the LoRAs, when its fuse at
SCALE is not base + SCALE * (PEFT's merge - base) within 1e-5.

Run on the GPU machine (PyTorch, peft, transformers; diffusers' source on PYTHONPATH):
    python3 tests/ref/gen_lora.py OUTDIR
CPU only, f32, seeded; a few seconds.
"""
import hashlib
import json
import os
import re
import shutil
import sys
import traceback

import torch
from safetensors.torch import load_file, save_file

from diffusers import StableDiffusionPipeline
from peft import LoHaConfig, LoKrConfig, LoraConfig, inject_adapter_in_model
from peft.tuners.tuners_utils import BaseTunerLayer
from peft.utils import get_peft_model_state_dict

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "lora")
SD1 = next(p for p in (os.path.join(HERE, "diffusion", "sd1"), os.path.join(HERE, "sd1"))
           if os.path.isdir(p))
torch.set_grad_enabled(False)
torch.manual_seed(0)
ROWS = 4

UNET_LAYERS = [
    "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q",
    "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_out.0",
    "down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k",
    "down_blocks.0.attentions.0.transformer_blocks.0.ff.net.0.proj",
    "down_blocks.0.attentions.0.transformer_blocks.0.ff.net.2",
    "down_blocks.0.attentions.0.proj_in",           # 1x1 conv (use_linear_projection false)
    "down_blocks.0.resnets.0.conv1",                # 3x3 conv
    "down_blocks.0.resnets.0.time_emb_proj",
    "mid_block.attentions.0.transformer_blocks.0.attn2.to_v",
    "up_blocks.1.resnets.0.conv_shortcut",          # 1x1 conv
]
# the text encoder's modules without transformers 4's "text_model." (transformers 5's
# CLIPTextModel has none); TP is the prefix the loaded model has, found in main()
TE_LAYERS = [
    "encoder.layers.0.self_attn.q_proj",
    "encoder.layers.1.self_attn.out_proj",
    "encoder.layers.0.mlp.fc1",
    "encoder.layers.1.mlp.fc2",
]
TP = ""
SCALE = {"peft": 0.7, "dora": 0.6, "kohya": 0.8}
LOG = {"cases": {}, "errors": [], "dropped": []}


def regex(names):
    return "(" + "|".join(re.escape(n) for n in names) + ")"


def load_pipe():
    p = StableDiffusionPipeline.from_pretrained(SD1, torch_dtype=torch.float32, safety_checker=None,
                                                requires_safety_checker=False)
    p.set_progress_bar_config(disable=True)
    return p


G = torch.Generator().manual_seed(37)
X = torch.randn(1, 4, 8, 8, generator=G)
T = torch.tensor([500.0])
CTX = torch.randn(1, 8, 64, generator=G)
IDS = torch.randint(3, 827, (1, 16), generator=G)


def outputs(pipe_or_parts):
    unet, te = pipe_or_parts
    u = unet(X, T, encoder_hidden_states=CTX).sample
    h = te(IDS, output_hidden_states=False).last_hidden_state
    return u, h


def rows(w):
    return w.detach().reshape(w.shape[0], -1)[:ROWS].clone()


def record(R, tag, unet, te, get):
    for n in UNET_LAYERS:
        R[f"{tag}.w.unet.{n}"] = rows(get(unet, n))
    for n in TE_LAYERS:   # keyed by the transformers 4 name, which Lumen uses
        R[f"{tag}.w.te.text_model.{n}"] = rows(get(te, TP + n))
    u, h = outputs((unet, te))
    R[f"{tag}.unet"], R[f"{tag}.te"] = u, h


def plain_weight(model, name):
    return model.get_submodule(name).weight


def base_weight(model, name):
    m = model.get_submodule(name)
    return m.get_base_layer().weight if isinstance(m, BaseTunerLayer) else m.weight


def randomize(model, seed):
    """Every adapter parameter random (f16-rounded); DoRA magnitudes near the norms PEFT set."""
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        if "lora_magnitude_vector" in name:
            p.data = (p.data * (1 + 0.2 * torch.randn(p.shape, generator=g))).half().float()
        elif any(k in name for k in ("lora_", "hada_", "lokr_")):
            p.data = (0.15 * torch.randn(p.shape, generator=g)).half().float()


def tuner_layers(model):
    return [(n, m) for n, m in model.named_modules() if isinstance(m, BaseTunerLayer)]


def merge_all(model):
    for _, m in tuner_layers(model):
        m.merge()


def kohya_name(prefix, module):
    if prefix.startswith("lora_te") and not module.startswith("text_model."):
        module = "text_model." + module   # kohya's names are transformers 4's
    return prefix + module.replace(".", "_")


def write_kohya(path, parts, kind, alpha):
    """parts: [(prefix, model)]; LoRA as lora_down / lora_up, LyCORIS as its own names."""
    sd = {}
    for prefix, model in parts:
        for name, m in tuner_layers(model):
            k = kohya_name(prefix, name)
            if kind == "lora":
                sd[k + ".lora_down.weight"] = m.lora_A["default"].weight
                sd[k + ".lora_up.weight"] = m.lora_B["default"].weight
            else:
                for pn in m.adapter_layer_names:
                    d = getattr(m, pn)
                    if "default" in d:
                        sd[k + "." + pn] = d["default"]
            sd[k + ".alpha"] = torch.tensor(float(alpha))
    save_file({k: v if k.endswith(".alpha") else v.detach().half().contiguous()
               for k, v in sd.items()}, path)


def addnet_hash(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        f.seek(8 + n)
        return hashlib.sha256(f.read()).hexdigest()


def peft_case(R, case, cfg_u, cfg_t, seed, alpha, kind):
    """Injects the configs into a fresh model, randomizes, writes the file, records PEFT's merge."""
    pipe = load_pipe()
    unet, te = pipe.unet, pipe.text_encoder
    for cfg, model in ((cfg_u, unet), (cfg_t, te)):
        inject_adapter_in_model(cfg, model, adapter_name="default")
        if not getattr(model, "peft_config", None):   # get_peft_model_state_dict reads it
            model.peft_config = {"default": cfg}
    randomize(unet, seed)
    randomize(te, seed + 1)
    path = os.path.join(OUT, case + ".safetensors")
    if kind == "peft":
        StableDiffusionPipeline.save_lora_weights(
            OUT, unet_lora_layers={k: v.half() for k, v in get_peft_model_state_dict(unet).items()},
            text_encoder_lora_layers={k: v.half() for k, v in get_peft_model_state_dict(te).items()},
            weight_name=case + ".safetensors", safe_serialization=True)
    else:
        write_kohya(path, [("lora_unet_", unet), ("lora_te_", te)], kind, alpha)
    keys = sorted(load_file(path).keys())
    LOG["cases"][case] = {"file": case + ".safetensors", "keys": len(keys), "first_keys": keys[:6],
                          "scale": SCALE.get(case, 1.0), "alpha": alpha,
                          "addnet_hash": addnet_hash(path)}
    merge_all(unet)
    merge_all(te)
    record(R, case + ".peft", unet, te, base_weight)


def drop(R, tag, why):
    for k in [k for k in R if k.startswith(tag + ".")]:
        del R[k]
    LOG["dropped"].append(tag + ": " + why)
    print("dropped", tag, ":", why, flush=True)


def diffusers_case(R, case):
    tag = case + ".diffusers"
    try:
        pipe = load_pipe()
        pipe.load_lora_weights(OUT, weight_name=case + ".safetensors", adapter_name="a")
        pipe.fuse_lora(lora_scale=SCALE[case], components=["unet", "text_encoder"])
        record(R, tag, pipe.unet, pipe.text_encoder, base_weight)
    except Exception:
        LOG["dropped"].append(tag + ": " + traceback.format_exc())
        print(LOG["dropped"][-1], flush=True)
        return
    # every adapted layer must have changed (a part diffusers skipped silently is no reference)
    for k in [k for k in R if k.startswith(tag + ".w.")]:
        if torch.equal(R[k], R["base.w." + k[len(tag + ".w."):]]):
            return drop(R, tag, "diffusers left " + k + " as it was")
    # a LoRA's delta is linear in its weight: diffusers' fuse at SCALE against PEFT's merge at 1
    if case in ("peft", "kohya") and case + ".peft.unet" in R:
        worst = 0.0
        for k in [k for k in R if k.startswith(tag + ".w.")]:
            rest = k[len(tag + ".w."):]
            base = R["base.w." + rest]
            want = base + SCALE[case] * (R[case + ".peft.w." + rest] - base)
            worst = max(worst, float((R[k] - want).abs().max() / want.abs().max()))
        LOG["cases"][case]["diffusers_vs_peft_rel"] = worst
        if worst > 1e-5:
            drop(R, tag, "diffusers' fuse and PEFT's merge differ by %g" % worst)


def main():
    global TP
    os.makedirs(OUT, exist_ok=True)
    R = {"x": X, "t": T, "ctx": CTX, "ids": IDS.float()}
    pipe = load_pipe()
    TP = "text_model." if hasattr(pipe.text_encoder, "text_model") else ""
    LOG["te_prefix"] = TP
    record(R, "base", pipe.unet, pipe.text_encoder, plain_weight)
    ru, rt = regex(UNET_LAYERS), regex([TP + n for n in TE_LAYERS])
    cases = [
        ("peft", LoraConfig(r=4, lora_alpha=4, target_modules=ru, init_lora_weights=False),
         LoraConfig(r=4, lora_alpha=4, target_modules=rt, init_lora_weights=False), 101, 4, "peft"),
        ("dora", LoraConfig(r=4, lora_alpha=4, target_modules=ru, use_dora=True),
         LoraConfig(r=4, lora_alpha=4, target_modules=rt, use_dora=True), 202, 4, "peft"),
        ("kohya", LoraConfig(r=4, lora_alpha=2, target_modules=ru),
         LoraConfig(r=4, lora_alpha=2, target_modules=rt), 303, 2, "lora"),
        ("loha", LoHaConfig(r=4, alpha=8, target_modules=ru, use_effective_conv2d=True),
         LoHaConfig(r=4, alpha=8, target_modules=rt), 404, 8, "lycoris"),
        ("lokr", LoKrConfig(r=2, alpha=2, target_modules=ru, use_effective_conv2d=True),
         LoKrConfig(r=2, alpha=2, target_modules=rt), 505, 2, "lycoris"),
    ]
    for case, cu, ct, seed, alpha, kind in cases:
        try:
            peft_case(R, case, cu, ct, seed, alpha, kind)
        except Exception:
            LOG["errors"].append(case + ": " + traceback.format_exc())
            print(LOG["errors"][-1], flush=True)
            continue
        if case in SCALE:
            diffusers_case(R, case)
    R = {k: v.detach().float().contiguous() for k, v in R.items()}
    save_file(R, os.path.join(OUT, "ref_lora.safetensors"))
    LOG.update({"rows": ROWS, "unet_layers": UNET_LAYERS, "te_layers": TE_LAYERS,
                "torch": torch.__version__})
    try:
        import peft, diffusers
        LOG["peft"], LOG["diffusers"] = peft.__version__, diffusers.__version__
    except Exception:
        pass
    with open(os.path.join(OUT, "lora.json"), "w") as f:
        json.dump(LOG, f, indent=1)
    print(json.dumps({k: v for k, v in LOG.items() if k != "errors"}, indent=1))
    print("errors:", len(LOG["errors"]), "diffusers references dropped:", len(LOG["dropped"]))
    # a PEFT reference that failed is a failure; a diffusers one dropped is logged
    return 1 if LOG["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
