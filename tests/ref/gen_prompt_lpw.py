#!/usr/bin/env python3
"""tests/ref/gen_prompt_lpw.py OUT_DIR - weighted, chunked prompt embeddings of
the tiny SD 1.x text encoder from diffusers' community
lpw_stable_diffusion.get_weighted_text_embeddings (PyTorch, transformers),
for tests/lua/test_prompt.lua to compare pipe:encode_prompt(text,
{prompt_syntax = true}) with where lpw and A1111 agree:
  - prompts of at most 75 tokens with weights (one chunk: lpw's mean over the
    whole prompt is A1111's mean over its one chunk; SD 1.x pads with its eos,
    so lpw's [bos, tokens, pad..., eos] is A1111's [bos, tokens, eos, eos...]);
  - longer prompts without weights, commas or BREAK (chunks of 75 with bos
    and eos each, as both cut them).
Writes OUT_DIR/lpw.safetensors (one [1, 77*K, 64] tensor per prompt, named
p1, p2, ...) and OUT_DIR/lpw.json (the prompts, the names, which code made
them).

The model: the folder sd1/ beside this script (its text_encoder/ and
tokenizer/), else tests/ref/diffusion/sd1 under the current folder.  lpw is
found as examples/community/lpw_stable_diffusion.py above an importable
diffusers; when it is not there the script stops (exit 1) rather than
computing the embeddings another way.  CPU, f32, seconds.
"""
import importlib.util
import json
import os
import sys
import types

import torch
from safetensors.torch import save_file
from transformers import CLIPTextModel, CLIPTokenizer

ONE = "cat fox photo horse".split()
LONG = " ".join(ONE[(i * 7) % 4] for i in range(1, 101))         # 100 tokens: 2 chunks
LONGER = " ".join(ONE[(i * 3) % 4] for i in range(1, 181))       # 180 tokens: 3 chunks
PROMPTS = [
    "a (red:1.3) fox, [blurry], (((masterpiece)))",
    "(masterpiece:1.2), a [[cat]] on a (mat:0.8)",
    "an (important) word and \\(literal\\) brackets",
    "a photo of an astronaut riding a horse",
    LONG,
    LONGER,
]


def find_lpw():
    import diffusers
    d = os.path.dirname(os.path.abspath(diffusers.__file__))
    for _ in range(5):
        cand = os.path.join(d, "examples", "community", "lpw_stable_diffusion.py")
        if os.path.exists(cand):
            return cand
        d = os.path.dirname(d)
    for p in sys.path:
        cand = os.path.join(p, "examples", "community", "lpw_stable_diffusion.py")
        if os.path.exists(cand):
            return cand
    return None


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    here = os.path.dirname(os.path.abspath(__file__))
    model = os.path.join(here, "sd1")
    if not os.path.isdir(model):
        model = os.path.join("tests", "ref", "diffusion", "sd1")
    path = find_lpw()
    if not path:
        print("lpw_stable_diffusion.py not found above", sys.path)
        sys.exit(1)
    spec = importlib.util.spec_from_file_location("lpw_stable_diffusion", path)
    lpw = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lpw)
    tok = CLIPTokenizer.from_pretrained(os.path.join(model, "tokenizer"))
    enc = CLIPTextModel.from_pretrained(os.path.join(model, "text_encoder"), torch_dtype=torch.float32).eval()
    if not hasattr(enc, "text_model"):
        # transformers 5 flattened CLIPTextModel (embeddings, encoder and
        # final_layer_norm are its own children); lpw reads them through
        # .text_model: the same module, set without registering a submodule
        object.__setattr__(enc, "text_model", enc)
    pipe = types.SimpleNamespace(tokenizer=tok, text_encoder=enc, device=torch.device("cpu"))
    tensors, names = {}, []
    with torch.no_grad():
        for i, p in enumerate(PROMPTS):
            e, _ = lpw.get_weighted_text_embeddings(pipe, p, max_embeddings_multiples=3)
            name = "p%d" % (i + 1)
            tensors[name] = e.float().contiguous()
            names.append(name)
            print(name, tuple(e.shape), repr(p[:60]))
    save_file(tensors, os.path.join(out, "lpw.safetensors"))
    with open(os.path.join(out, "lpw.json"), "w") as f:
        json.dump({"source": path, "prompts": PROMPTS, "names": names,
                   "torch": torch.__version__}, f, indent=1)


if __name__ == "__main__":
    main()
