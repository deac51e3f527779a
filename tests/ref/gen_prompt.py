#!/usr/bin/env python3
"""tests/ref/gen_prompt.py OUT_DIR - writes OUT_DIR/prompts.json, the fixture
tests/test_prompt.c compares models/prompt.c with.

THIS FILE IS THE REFERENCE, for fixture generation only.  It holds a
transcription, in our own words, of three pure-Python pieces of
AUTOMATIC1111's stable-diffusion-webui (the behaviour, not the code):
  - modules/prompt_parser.py parse_prompt_attention (its re_attention and
    re_break regular expressions, the bracket stacks, the BREAK split, the
    merge of equal-weight neighbours);
  - modules/extra_networks.py parse_prompt (<name:arg:arg...> tags removed
    from the text and collected);
  - modules/sd_hijack_clip.py tokenize_line's chunking (75 tokens a chunk,
    BREAK, comma_padding_backtrack 20), given the token ids of each parsed
    fragment (the tokenizer itself is not reimplemented here: test_prompt.c
    feeds the same per-fragment ids to lm_prompt_chunk_tokens).
It needs Python 3 with `re` only (no torch, no lark).  When run with a
second argument, the path of A1111's modules/prompt_parser.py, it also
executes that file's own parse_prompt_attention (its lark import stubbed)
on every prompt and fails if the transcription disagrees.
"""
import json
import os
import random
import re
import sys
import types

# ---- the reference: parse_prompt_attention ----
TOKEN = re.compile(r"""
\\\(| \\\)| \\\[| \\\]| \\\\| \\|
\(| \[|
:([+-]?[.\d]+)\)|
\)| \]|
[^\\()\[\]:]+|
:
""", re.X)
BREAK_SPLIT = re.compile(r"\s*\bBREAK\b\s*", re.S)


def ref_parse(text):
    out = []
    round_open, square_open = [], []

    def scale(start, m):
        for k in range(start, len(out)):
            out[k][1] *= m

    for m in TOKEN.finditer(text):
        s, w = m.group(0), m.group(1)
        if s.startswith("\\"):
            out.append([s[1:], 1.0])
        elif s == "(":
            round_open.append(len(out))
        elif s == "[":
            square_open.append(len(out))
        elif w is not None and round_open:
            scale(round_open.pop(), float(w))
        elif s == ")" and round_open:
            scale(round_open.pop(), 1.1)
        elif s == "]" and square_open:
            scale(square_open.pop(), 1 / 1.1)
        else:
            for k, part in enumerate(BREAK_SPLIT.split(s)):
                if k:
                    out.append(["BREAK", -1])
                out.append([part, 1.0])
    for start in round_open:
        scale(start, 1.1)
    for start in square_open:
        scale(start, 1 / 1.1)
    if not out:
        out = [["", 1.0]]
    k = 0
    while k + 1 < len(out):
        if out[k][1] == out[k + 1][1]:
            out[k][0] += out[k + 1][0]
            del out[k + 1]
        else:
            k += 1
    return out


# ---- the reference: extra_networks.parse_prompt ----
EXTRA = re.compile(r"<(\w+):([^>]+)>")


def ref_extra(text):
    found = []

    def take(m):
        found.append([m.group(1)] + m.group(2).split(":"))
        return ""

    return EXTRA.sub(take, text), found


# ---- the reference: tokenize_line's chunks from per-fragment ids ----
def ref_chunks(parsed, tokenized, bos, eos, comma, backtrack=20, length=75):
    chunks = []
    cur_t, cur_m = [], []
    last_comma = -1

    def close():
        nonlocal cur_t, cur_m, last_comma
        add = length - len(cur_t)
        if add > 0:
            cur_t += [eos] * add
            cur_m += [1.0] * add
        chunks.append(([bos] + cur_t + [eos], [1.0] + cur_m + [1.0]))
        cur_t, cur_m = [], []
        last_comma = -1

    for ids, (text, weight) in zip(tokenized, parsed):
        if text == "BREAK" and weight == -1:
            close()
            continue
        for tok in ids:
            if tok == comma:
                last_comma = len(cur_t)
            elif (backtrack and len(cur_t) == length and last_comma != -1
                  and len(cur_t) - last_comma <= backtrack):
                cut = last_comma + 1
                move_t, move_m = cur_t[cut:], cur_m[cut:]
                cur_t, cur_m = cur_t[:cut], cur_m[:cut]
                close()
                cur_t, cur_m = move_t, move_m
            if len(cur_t) == length:
                close()
            cur_t.append(tok)
            cur_m.append(weight)
    if cur_t or not chunks:
        close()
    return chunks


# ---- the prompts ----
HAND = [
    "", "normal text", "an (important) word", "(unbalanced", "\\(literal\\]",
    "(unnecessary)(parens)", "a (((house:1.3)) [on] a (hill:0.5), sun, (((sky))).",
    "(masterpiece:1.2), a fox", "[[[faint]]]", "((a)) [b] (c:0) [d:2]", "(a:-1.5) (b:+.5)",
    "(a:1.) (b:.25) (c:1.2.3x", "x:1.5) y", "(x:1.5", "a ] b ) c", "\\\\ back \\ slash \\x",
    "a BREAK b", "BREAK", "aBREAK b", "a BREAKb", "a  \n BREAK\t c", "(a BREAK b)", "[BREAK]",
    "BREAK BREAK", "x BREAK", "é BREAK ü", "éBREAK", "BREAK_x", "_BREAK", "1BREAK 2",
    "a\u3000BREAK\u3000b", "a\u00a0BREAK\u00a0b", "(日本:1.3) 語", "emoji 🦊 (🦊:0.7)",
    "(a:\u0661.\u0665)", "(x:\u0661)", ":", "::", "(:)", "(a:)", "(a::1.2)", "[a:b:0.5]",
    "[a|b]", "<lora:watercolor:0.8> a fox", "(nested (deeper (deepest)))",
    "((a) b) [c [d]]", "a, b, c, (d, e:1.1), f", "\\(a:1.2\\)", "(a\\):1.2)", "((a:1.2):0.5)",
    "[(a:1.5)]", "(a][b)", "][)(", "(((((((((x)))))))))", "[[[[[[[[[x]]]]]]]]]",
    "a (b:1.21) c (d:1.21)", "(a:1e3) (b:1.5e)", "(a:1.5) ", " (a) ", "a\\", "(a\\", "BREAK(a)",
    "(a)BREAK(b)", "a\nb", "word (: 1.3)", "(a: 1.3)", "(a :1.3)", "(a:1.3 )", "(a:" + "1" * 40 + ".5)",
]

ALPHABET = ["a", "b c", " ", "(", ")", "[", "]", ":", ":1.3)", ":0.5)", ":-2)", ":.)", "\\(",
            "\\)", "\\[", "\\]", "\\\\", "\\", "BREAK", " BREAK ", ",", "é", "日", "٣", "_",
            "\n", "\u3000", "🦊", "<", ">", "x:", "1", ".", "lora"]


def random_prompts(rng, count):
    res = []
    for _ in range(count):
        n = rng.randint(1, 14)
        res.append("".join(rng.choice(ALPHABET) for _ in range(n)))
    return res


EXTRA_HAND = [
    "<lora:watercolor:0.8> a fox", "a <lora:x:1> b <lyco:y:0.5:0.25> c", "<hypernet:h:1>",
    "<lora:a>", "<lora:>", "<:x>", "<lora x:1>", "<lora:a:b:c:d>", "<lora:a\n:1>",
    "<<lora:a:1>>", "<lora:<x:1>", "<lora:a:1", "<é:n:1>", "<lora_2:n:1> (x:1.2)",
    "<lora:a:1><lora:b:2>", "no tags", "",
]


def chunk_cases(rng, count):
    """per-fragment token lists from a fake vocabulary: id 267 is the comma"""
    bos, eos, comma = 498, 499, 267
    cases = []
    for c in range(count):
        nfrag = rng.randint(1, 6)
        parsed, tokenized = [], []
        for _ in range(nfrag):
            if rng.random() < 0.15:
                parsed.append(["BREAK", -1])
                tokenized.append([1, 2])
                continue
            n = rng.choice([0, 1, 5, 30, 60, 74, 75, 76, 80, 110])
            ids = [comma if rng.random() < 0.08 else rng.randint(300, 400) for _ in range(n)]
            parsed.append(["t%d" % len(parsed), rng.choice([1.0, 1.1, 0.5, 1.21])])
            tokenized.append(ids)
        # the hand cases: a comma 20 and 21 tokens from the end of a full chunk
        if c == 0:
            parsed, tokenized = [["x", 1.0]], [[300] * 55 + [comma] + [301] * 25]
        if c == 1:
            parsed, tokenized = [["x", 1.0]], [[300] * 54 + [comma] + [301] * 25]
        if c == 2:
            parsed, tokenized = [["x", 1.0]], [[300] * 74 + [comma] + [301] * 3]
        chunks = ref_chunks(parsed, tokenized, bos, eos, comma)
        cases.append({"parsed": parsed, "tokens": tokenized, "bos": bos, "eos": eos,
                      "comma": comma, "chunks": [c[0] for c in chunks],
                      "mults": [c[1] for c in chunks]})
    return cases


def parse_entry(p):
    try:
        return {"prompt": p, "pairs": ref_parse(p)}
    except ValueError as e:   # float() of a weight such as ".": A1111 raises too
        return {"prompt": p, "error": str(e)}


def check_real(path, prompts):
    """runs A1111's own parse_prompt_attention from its file (not kept)"""
    src = open(path, encoding="utf-8").read()
    sys.modules.setdefault("lark", types.SimpleNamespace(Lark=lambda *a, **k: None))
    sys.modules.setdefault("torch", types.ModuleType("torch"))
    mod = types.ModuleType("a1111_prompt_parser")
    exec(compile(src, path, "exec"), mod.__dict__)
    bad = 0
    for p in prompts:
        try:
            want = mod.parse_prompt_attention(p)
        except ValueError:
            want = "error"
        got = parse_entry(p)
        got = got.get("pairs", "error")
        if got != want:
            bad += 1
            print("differs:", repr(p), got, want)
    print("checked against %s: %d prompts, %d differ" % (path, len(prompts), bad))
    return bad


def main():
    out = sys.argv[1]
    rng = random.Random(37)
    prompts = HAND + random_prompts(rng, 160)
    data = {
        "source": "tests/ref/gen_prompt.py (A1111 parse_prompt_attention, extra_networks."
                  "parse_prompt, sd_hijack_clip tokenize_line chunking)",
        "parse": [parse_entry(p) for p in prompts],
        "extra": [dict(zip(("prompt", "clean", "tags"), (p,) + ref_extra(p)))
                  for p in EXTRA_HAND + random_prompts(rng, 20)],
        "chunks": chunk_cases(rng, 20),
    }
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "prompts.json"), "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    if len(sys.argv) > 2 and check_real(sys.argv[2], prompts):
        sys.exit(1)


if __name__ == "__main__":
    main()
