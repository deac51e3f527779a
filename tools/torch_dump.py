#!/usr/bin/python3
"""torch_dump.py - dump a PyTorch module's intermediates for a Lumen
comparison session (docs/COMPARE.md "Comparison sessions").

Forward hooks on the chosen submodules record each output, in the order the
forward pass produces them, into one safetensors file (F32) under the names
Lumen's dumps use: "NNNN.op.where" - NNNN counts from 1 in execution order,
op is the module's class name in lower case, where is the module's qualified
name ("decoder.mid_block.resnets.0").  On the Lumen side, name the same
layers with lm.name_scope("decoder.mid_block.resnets.0") while building them;
lm.diff(fn, args, {reference = "torch.safetensors"}) then holds the last node
of each named layer against the tensor of the same where, and
`lumen diff lumen.safetensors torch.safetensors` pairs tensors by index and op.

Library:
    from torch_dump import dump
    dump(model, (x,), "torch.safetensors", leaves=False, prefix="")
Command line:
    torch_dump.py FILE.py:FACTORY OUT.safetensors [--leaves] [--prefix P]
                  [--randn SHAPE [--seed N]]
        FACTORY() returns (module, inputs tuple), or a module whose input
        is torch.randn(SHAPE) from a generator seeded N (default 0), as
        bench/gpu/vae.py makes its latent:
        torch_dump.py bench/gpu/vae.py:make vae_torch.safetensors --randn 1,4,64,64 --seed 1
    torch_dump.py --selftest OUT.safetensors
        no torch needed: writes the dump of a two-layer toy model computed in
        plain Python, through the same naming and writer (tests/lua/test_diff.lua
        holds Lumen's run of the same toy model against it).
A module whose output is the very tensor recorded just before (its last
child's) is not recorded again.
Modules hooked: every submodule with a qualified name that has no children
(--leaves), else the direct children of the modules listed in the module's
`dump_modules` attribute when present, else every named submodule.
"""
import importlib.util
import json
import os
import struct
import sys
import tempfile


def dump_name(index, op, where):
    """the stable name of the index-th (1-based) tensor: Lumen's lm_trace_name"""
    return "%04d.%s.%s" % (index, op.lower(), where if where else "-")


def write_safetensors(path, tensors):
    """tensors: list of (name, shape, little-endian f32 bytes), in order.
    Written to a temporary beside path and renamed into place."""
    header, offset = {"__metadata__": {"format": "pt", "writer": "tools/torch_dump.py"}}, 0
    for name, shape, data in tensors:
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(struct.pack("<Q", len(h)))
            f.write(h)
            for _, _, data in tensors:
                f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def dump(model, inputs, path, leaves=False, prefix=""):
    """runs model(*inputs) under no_grad with forward hooks and writes the
    outputs of the hooked modules to path; returns the names written"""
    import torch

    named = [(n, m) for n, m in model.named_modules() if n]
    if leaves:
        named = [(n, m) for n, m in named if not any(True for _ in m.children())]
    recorded, handles, last = [], [], [None]

    def hook_for(name):
        def hook(module, args, out):
            if isinstance(out, (tuple, list)):
                out = out[0]
            # a module that returns the very tensor recorded last (an
            # Upsampler returning its conv's output, a block its last
            # child's) adds nothing: Lumen has no node of its own for it
            if not torch.is_tensor(out) or out is last[0]:
                return
            last[0] = out
            t = out.detach().to("cpu", torch.float32).contiguous()
            recorded.append((dump_name(len(recorded) + 1, type(module).__name__, prefix + name),
                             tuple(t.shape), t.numpy().astype("<f4").tobytes()))
        return hook

    for n, m in named:
        handles.append(m.register_forward_hook(hook_for(n)))
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        for h in handles:
            h.remove()
    write_safetensors(path, recorded)
    return [r[0] for r in recorded]


def selftest(path):
    """the toy model of tests/lua/test_diff.lua: layer1 = 2x + 1, layer2 =
    layer1 squared, on x = 1, 2, 3"""
    x = [1.0, 2.0, 3.0]
    l1 = [2 * v + 1 for v in x]
    l2 = [v * v for v in l1]
    pack = lambda v: struct.pack("<%df" % len(v), *v)
    tensors = [(dump_name(1, "Linear", "layer1"), (3,), pack(l1)),
               (dump_name(2, "Square", "layer2"), (3,), pack(l2))]
    assert tensors[0][0] == "0001.linear.layer1" and tensors[1][0] == "0002.square.layer2"
    write_safetensors(path, tensors)
    return [t[0] for t in tensors]


def main(argv):
    if len(argv) == 3 and argv[1] == "--selftest":
        print("\n".join(selftest(argv[2])))
        return 0
    if len(argv) < 3 or ":" not in argv[1]:
        sys.stderr.write(__doc__)
        return 2
    file, factory = argv[1].rsplit(":", 1)
    leaves = "--leaves" in argv[3:]
    prefix = argv[argv.index("--prefix") + 1] if "--prefix" in argv[3:] else ""
    spec = importlib.util.spec_from_file_location("dumped_model", file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    made = getattr(mod, factory)()
    if isinstance(made, tuple):
        model, inputs = made
    else:
        import torch
        if "--randn" not in argv[3:]:
            sys.stderr.write("torch_dump.py: %s returned a module: give its input with --randn SHAPE\n" % factory)
            return 2
        shape = [int(v) for v in argv[argv.index("--randn") + 1].split(",")]
        seed = int(argv[argv.index("--seed") + 1]) if "--seed" in argv[3:] else 0
        model, inputs = made, (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)),)
    for name in dump(model, inputs, argv[2], leaves=leaves, prefix=prefix):
        print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
