"""bench/cpu/hubshim.py - lets diffusers' pure-Python source import where
huggingface_hub and safetensors are not installed (Debian 12's python3-torch
machine): install() puts stand-ins in sys.modules before diffusers is
imported.  Nothing is downloaded or read from a hub: the bench builds its
models from their configs with random weights, so diffusers' hub functions
are never called; a stand-in function returns None (or, used as a
decorator, the function it decorates), a name ending in Error or Exception
is an exception class, an upper-case name a constant (a string).  Where
safetensors is absent, its stand-in's torch.save_file/load_file (this file's)
write and read the format themselves (an 8-byte header length, a JSON
header, the raw little-endian data; f32/f16/bf16/i64).
"""
import importlib.abc
import importlib.machinery
import json
import struct
import sys
import types


def _member(modname, name):
    if name.startswith("__"):
        raise AttributeError(name)
    if name.endswith("Error") or name.endswith("Exception") or name.endswith("Warning"):
        return type(name, (Exception,), {})
    if name.isupper():
        return {"HF_HUB_OFFLINE": True, "HF_HUB_DISABLE_TELEMETRY": True}.get(name, "/tmp/hubshim-" + name.lower())
    if name[:1].isupper():
        return type(name, (), {"__init__": lambda self, *a, **k: None})
    if name == "__version__":
        return "0.99.0"

    def stand_in(*a, **k):
        return a[0] if len(a) == 1 and callable(a[0]) and not k else None
    stand_in.__name__ = name
    return stand_in


class _Stub(types.ModuleType):
    def __getattr__(self, name):
        v = _member(self.__name__, name)
        setattr(self, name, v)
        return v


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots):
        self.roots = roots

    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _Stub(spec.name)
        m.__path__ = []
        m.__version__ = "0.99.0"
        if spec.name == "safetensors.torch":
            m.save_file, m.load_file = save_file, load_file
        return m

    def exec_module(self, module):
        pass


_DT = {"F32": ("float32", 4), "F16": ("float16", 2), "I64": ("int64", 8), "BF16": ("bfloat16", 2)}


def save_file(tensors, path, metadata=None):
    import torch
    names = {torch.float32: "F32", torch.float16: "F16", torch.int64: "I64", torch.bfloat16: "BF16"}
    head, blobs, off = {}, [], 0
    for k in sorted(tensors):
        t = tensors[k].detach().contiguous().cpu()
        b = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        head[k] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata:
        head["__metadata__"] = metadata
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load_file(path, device="cpu"):
    import torch
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        dt = getattr(torch, _DT[v["dtype"]][0])
        raw = torch.frombuffer(bytearray(data[a:b]), dtype=torch.uint8) if b > a else torch.empty(0, dtype=torch.uint8)
        out[k] = raw.view(dt).reshape(v["shape"]).to(device)
    return out


def install():
    roots = []
    for name in ("huggingface_hub", "safetensors"):
        try:
            importlib.import_module(name)
        except ImportError:
            roots.append(name)
    if roots:
        sys.meta_path.insert(0, _Finder(roots))


class _Any(types.ModuleType):
    """torch.xpu / torch.mps on an older torch: every member a no-op function"""
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if name[:1].isupper():
            return type(name, (), {})
        def stand_in(*a, **k):
            if len(a) == 1 and callable(a[0]) and not k:
                return a[0]     # a decorator
            return 0 if name.endswith("count") else False if name.startswith("is_") else None
        return stand_in


class _TorchFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """last on the path: a torch submodule that this torch lacks is a stand-in"""
    def find_spec(self, fullname, path, target=None):
        if fullname.startswith("torch."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _Any(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, module):
        pass


def torch_compat():
    """what diffusers' source reads from a newer torch than Debian 12's 1.13"""
    import torch
    for name in ("xpu", "mps"):
        if not hasattr(torch, name) or not hasattr(getattr(torch, name), "empty_cache"):
            setattr(torch, name, _Any("torch." + name))
    dist = torch.distributed
    if not hasattr(dist, "device_mesh"):   # annotations only
        dist.device_mesh = types.ModuleType("torch.distributed.device_mesh")
        dist.device_mesh.DeviceMesh = type("DeviceMesh", (), {})
    sys.meta_path.append(_TorchFinder())
    if not hasattr(torch, "compiler"):
        c = torch.compiler = types.ModuleType("torch.compiler")
        c.disable = lambda fn=None, **k: fn if fn is not None else (lambda f: f)
        c.is_compiling = lambda: False
        c.cudagraph_mark_step_begin = lambda: None
    for name in ("float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64"):
        if not hasattr(torch, name):    # only compared against, never made here
            setattr(torch, name, "torch." + name + " (absent)")
