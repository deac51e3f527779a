#!/usr/bin/python3
"""Fixtures for tests/test_clip.c: a tiny CLIP tokenizer and tiny CLIP text
encoders in the diffusers layout, with transformers' own token ids and
hidden states for them.

Nothing here is pretrained.  The vocabulary is built deterministically: the
256 byte symbols and their "</w>" forms (as CLIP's 49408-entry vocab starts),
then merges learned by a few hundred steps of plain BPE counting over the
CORPUS below (ties broken by the pair's text, so every run gives the same
files), then <|startoftext|> and <|endoftext|> last (as in CLIP).  Weights are
random (torch.manual_seed), so all values are seeded.

Writes, under OUTDIR (default tests/ref/clip):
  tiny/model_index.json
  tiny/tokenizer/    vocab.json merges.txt tokenizer_config.json
                     special_tokens_map.json (as SD 1.x ships them; pad = eos)
  tiny/tokenizer_2/  the same vocabulary with pad "!" (as SD 2.x / SDXL)
  tiny/tokenizer_json/ what transformers' save_pretrained writes (tokenizer.json)
  tiny/text_encoder/   CLIPTextModel, quick_gelu, eos_token_id 2 (the legacy
                       argmax pooling), model.safetensors
  tiny/text_encoder_2/ CLIPTextModelWithProjection, gelu, the real eos id,
                       sharded (model.safetensors.index.json)
  tiny/text_encoder_fp16/ the first encoder stored as model.fp16.safetensors
  tokens.json   [{text, ids (77, padded), ids_2 (pad "!"), n (untruncated
                length with bos/eos)}], every prompt
  outputs.safetensors  ids [B,77] (i32) and, per encoder, last hidden state,
                       every hidden state, pooled / projected output; ids_short
                       [1,L] and the first encoder's outputs for it
Run on a machine with torch + transformers (the GPU machine), CPU only:
  python3 tests/ref/gen_clip.py [OUTDIR]
"""
import json
import os
import sys
from collections import Counter

import regex as re
import torch
import transformers
from safetensors.torch import save_file
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "clip")
TINY = os.path.join(OUT, "tiny")
torch.manual_seed(24)

CORPUS = """
a photo of an astronaut riding a horse on mars, highly detailed, digital painting,
artstation, concept art, smooth, sharp focus, illustration, art by greg rutkowski
masterpiece best quality portrait of a beautiful woman with long hair in a garden,
landscape with mountains and a lake at sunset, trending on artstation, 4k, 8k,
photorealistic cinematic lighting, octane render, unreal engine, studio ghibli style
the cat sat on the mat and the dog is sleeping in the house; it's a dog's life
they're going there, we've been here, i'm sure you'll like it, he'd said so
cafe creme brulee, naive facade, the quick brown fox jumps over the lazy dog
painting drawing rendering lighting shading texture colorful vibrant beautiful
caf\u00e9 cr\u00e8me br\u00fbl\u00e9e na\u00efve fa\u00e7ade caf\u00e9 \u6771\u4eac \u6771\u4eac \u591c\u666f
"""

BYTES = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
    list(range(ord("\xae"), ord("\xff") + 1))


def byte_chars():
    """CLIP's (GPT-2's) reversible byte -> printable character table."""
    bs, cs, n = BYTES[:], BYTES[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = byte_chars()
PAT = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+""")


def learn_merges(n):
    words = Counter()
    for w in PAT.findall(re.sub(r"\s+", " ", CORPUS).lower()):
        sym = [B2U[b] for b in w.encode("utf-8")]
        sym[-1] += "</w>"
        words[tuple(sym)] += 1
    merges = []
    for _ in range(n):
        pairs = Counter()
        for w, c in words.items():
            for p in zip(w, w[1:]):
                pairs[p] += c
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        nw = Counter()
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            nw[tuple(out)] += c
        words = nw
    return merges


def write_tokenizer(d, merges, vocab, pad):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False, indent=2)
    with open(os.path.join(d, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write(f"{a} {b}\n")

    def tok(s):
        return {"content": s, "lstrip": False, "normalized": True, "rstrip": False, "single_word": False}
    special = {"bos_token": tok("<|startoftext|>"), "eos_token": tok("<|endoftext|>"),
               "pad_token": pad, "unk_token": tok("<|endoftext|>")}
    with open(os.path.join(d, "special_tokens_map.json"), "w") as f:
        json.dump(special, f, indent=2)
    cfg = dict(special, add_prefix_space=False, do_lower_case=True, errors="replace",
               model_max_length=77, tokenizer_class="CLIPTokenizer")
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


LONG = ", ".join(["highly detailed painting of a cat"] * 16)
PROMPTS = [
    "a photo of an astronaut riding a horse on mars",
    "A Photo Of An ASTRONAUT Riding A HORSE",
    "  extra   spaces\tand\ttabs\nand newlines  ",
    "(masterpiece:1.2), best quality, [lowres], {detailed}",
    "((cat)) (dog:0.8) [bird|fish] <lora:foo:0.7> [cat:dog:0.5]",
    "it's a dog's life, we're here, they've gone, i'm ok, you'll see, he'd go",
    "IT'S DON'T WE'RE THEY'VE I'M YOU'LL HE'D",
    "rock'n'roll 'quoted' word' ''s '''t it\u2019s",
    "caf\u00e9 cr\u00e8me br\u00fbl\u00e9e, na\u00efve fa\u00e7ade, \u00c5ngstr\u00f6m, Stra\u00dfe",
    "cafe\u0301 decomposed e\u0301 and A\u030a",
    "\u0130stanbul \u03a3\u039f\u03a6\u0399\u0391 \u039f\u0394\u039f\u03a3 \u0131\u015f\u0131k",
    "\u6771\u4eac\u306e\u591c\u666f, \u4e2d\u6587\u63d0\u793a, \ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
    "emoji \U0001f431\U0001f680 family \U0001f468\u200d\U0001f469\u200d\U0001f467 flag \U0001f1ef\U0001f1f5",
    "numbers 12345 3.14159 1,000,000 2nd 1080p 4k 8K",
    "html &amp; &lt;tag&gt; &quot;quoted&quot; &#39;apos&#39;",
    "punctuation!!! ??? ... --- *** ___ ~~~ @#$%^&",
    "",
    "   ",
    "a",
    "cat",
    LONG,
    " ".join(["word"] * 300),
    "<|startoftext|> inside <|endoftext|> text",
    "\ufb01ne \ufb02ower ligatures",
    "\uff21\uff22\uff23\uff11\uff12\uff13 full width",
    "\u0939\u093f\u0928\u094d\u0926\u0940 \u0926\u0947\u0935\u0928\u093e\u0917\u0930\u0940",
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u05e2\u05d1\u05e8\u05d9\u05ea",
    "x\u00b2 \u00bd \u216b \u2460 superscripts",
    "zero\u200bwidth non\u00a0breaking ideographic\u3000space line\u2028sep",
    "bell\u0007char tab\u000bvertical",
    "\u00c0\u00c9\u00ce\u00d5\u00dc UPPER ACCENTS",
    "\u041f\u0440\u0438\u0432\u0435\u0442 \u041c\u0418\u0420",
    "math \u2211\u222b\u221a\u221e\u2248\u2260",
    "the quick brown fox jumps over the lazy dog",
    "THE QUICK BROWN FOX",
    "landscape with mountains and a lake at sunset, trending on artstation",
    "photorealistic, cinematic lighting, octane render, unreal engine",
    "studio ghibli style portrait, 4k, 8k, uhd",
    "ugly, blurry, low quality, deformed, bad anatomy, extra fingers",
    "a\u0308\u0308\u0308 stacked marks",
    "tabs\t\t\tonly\t",
    "newline\r\nwindows\rmac",
    "under_score snake_case kebab-case CamelCase",
    "email@example.com https://example.com/path?q=1&r=2",
    "version v1.5 sd-2.1 sdxl_base_1.0",
    "$100 \u20ac50 \u00a330 \u00a5999",
    "quotes \"double\" \u201ccurly\u201d \u00abguillemets\u00bb",
    "mixed\u00e9CASE\u00c9 w\u00d6rds",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "the the the the the",
    "hello, world! hello world hello-world",
    "painting drawing rendering lighting shading texture",
    "\U0001d400\U0001d401 math bold",
    "\u1100\u1161 jamo and \u3131",
    "dog's cats' it''s",
]


def main():
    print("transformers", transformers.__version__, "torch", torch.__version__)
    merges = learn_merges(400)
    vocab = {}
    for c in B2U.values():
        vocab[c] = len(vocab)
    for c in B2U.values():
        vocab[c + "</w>"] = len(vocab)
    for a, b in merges:
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
    vocab["<|startoftext|>"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    V = len(vocab)
    eos = vocab["<|endoftext|>"]
    bos = vocab["<|startoftext|>"]
    print("vocab", V, "merges", len(merges))

    write_tokenizer(os.path.join(TINY, "tokenizer"), merges, vocab, {
        "content": "<|endoftext|>", "lstrip": False, "normalized": True, "rstrip": False,
        "single_word": False})
    write_tokenizer(os.path.join(TINY, "tokenizer_2"), merges, vocab, "!")
    tok = CLIPTokenizer.from_pretrained(os.path.join(TINY, "tokenizer"))
    tok2 = CLIPTokenizer.from_pretrained(os.path.join(TINY, "tokenizer_2"))
    print("tokenizer class", type(tok).__name__, "pad", tok.pad_token_id, tok2.pad_token_id)
    tj = os.path.join(TINY, "tokenizer_json")
    tok.save_pretrained(tj)
    for f in ("vocab.json", "merges.txt"):   # keep only what the tokenizer.json form needs
        p = os.path.join(tj, f)
        if os.path.exists(p) and os.path.exists(os.path.join(tj, "tokenizer.json")):
            os.remove(p)
    print("tokenizer_json files", sorted(os.listdir(tj)))
    tokj = CLIPTokenizer.from_pretrained(tj)

    def ids_of(t, s):
        return t(s, padding="max_length", max_length=77, truncation=True).input_ids

    rows, mism = [], 0
    for s in PROMPTS:
        ids = ids_of(tok, s)
        if ids_of(tokj, s) != ids:
            mism += 1
            print("tokenizer.json form differs on", repr(s))
        rows.append({"text": s, "ids": ids, "ids_2": ids_of(tok2, s), "n": len(tok(s).input_ids),
                     "tokens": tok.convert_ids_to_tokens(tok(s).input_ids)[:20]})
    print("prompts", len(rows), "tokenizer.json mismatches", mism)
    with open(os.path.join(OUT, "tokens.json"), "w", encoding="utf-8") as f:
        json.dump(rows, f, ensure_ascii=False, indent=0)

    common = dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=4, max_position_embeddings=77, layer_norm_eps=1e-5,
                  bos_token_id=bos, pad_token_id=1, attn_implementation="eager")
    # SD 1.x text_encoder/config.json says eos_token_id 2: transformers then pools at argmax(ids)
    cfg_a = CLIPTextConfig(hidden_act="quick_gelu", eos_token_id=2, **common)
    cfg_b = CLIPTextConfig(hidden_act="gelu", eos_token_id=eos, projection_dim=24, **common)
    ma = CLIPTextModel(cfg_a).eval()
    mb = CLIPTextModelWithProjection(cfg_b).eval()
    # random init gives layer norms weight 1, bias 0: perturb them so they are tested
    with torch.no_grad():
        for m in (ma, mb):
            for n, p in m.named_parameters():
                if "norm" in n:
                    p.add_(0.1 * torch.randn_like(p))
    ma.save_pretrained(os.path.join(TINY, "text_encoder"))
    mb.save_pretrained(os.path.join(TINY, "text_encoder_2"), max_shard_size="100KB")
    mh = CLIPTextModel(cfg_a).eval()
    mh.load_state_dict(ma.state_dict())
    mh = mh.half()
    mh.save_pretrained(os.path.join(TINY, "text_encoder_fp16"), variant="fp16")
    mh = mh.float()
    for d in ("text_encoder", "text_encoder_2", "text_encoder_fp16"):
        print(d, sorted(os.listdir(os.path.join(TINY, d))))
    with open(os.path.join(TINY, "model_index.json"), "w") as f:
        json.dump({"_class_name": "StableDiffusionXLPipeline", "_diffusers_version": "0.30.0",
                   "text_encoder": ["transformers", "CLIPTextModel"],
                   "text_encoder_2": ["transformers", "CLIPTextModelWithProjection"],
                   "tokenizer": ["transformers", "CLIPTokenizer"],
                   "tokenizer_2": ["transformers", "CLIPTokenizer"]}, f, indent=2)

    picks = [0, 4, 8, 11, 16, 20]     # plain, emphasis, accents, CJK, empty, over-long
    ids = torch.tensor([rows[i]["ids"] for i in picks], dtype=torch.long)
    out = {"ids": ids.to(torch.int32).contiguous()}
    with torch.no_grad():
        ra = ma(ids, output_hidden_states=True)
        rb = mb(ids, output_hidden_states=True)
        rh = mh(ids, output_hidden_states=True)
        short = torch.tensor([tok("a cat, (dog:1.2)").input_ids], dtype=torch.long)
        rs = ma(short, output_hidden_states=True)
    out["a.last"] = ra.last_hidden_state
    out["a.pooled"] = ra.pooler_output
    for i, h in enumerate(ra.hidden_states):
        out[f"a.hidden.{i}"] = h
    out["b.last"] = rb.last_hidden_state
    out["b.embeds"] = rb.text_embeds
    for i, h in enumerate(rb.hidden_states):
        out[f"b.hidden.{i}"] = h
    out["h.last"] = rh.last_hidden_state
    out["h.pooled"] = rh.pooler_output
    out["ids_short"] = short.to(torch.int32)
    out["s.last"] = rs.last_hidden_state
    out["s.pooled"] = rs.pooler_output
    out["s.hidden.1"] = rs.hidden_states[1]
    save_file({k: v.float().contiguous() if v.is_floating_point() else v.contiguous()
               for k, v in out.items()}, os.path.join(OUT, "outputs.safetensors"))
    print("pooled rows a", (ids.argmax(-1)).tolist(), "b",
          (ids == eos).int().argmax(-1).tolist())
    print("outputs", sorted(out))


if __name__ == "__main__":
    main()
