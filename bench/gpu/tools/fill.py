# fill.py STATS.json OUT.safetensors: esrgan-thick x2's topology with random
# weights of each tensor's mean and std (the real weights do not fit the carry)
import json, sys, torch
from safetensors.torch import save_file
st = json.load(open(sys.argv[1]))
g = torch.Generator().manual_seed(0)
ts = {k: torch.randn(v["shape"], generator=g) * v["std"] + v["mean"] for k, v in st["tensors"].items()}
save_file(ts, sys.argv[2], metadata=st["__metadata__"])
