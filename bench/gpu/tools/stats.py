# stats.py MODEL.safetensors STATS.json - each tensor's shape, mean and std of a
# converted upscaler (`lumen convert esrgan-thick thick2.safetensors --scale 2`)
# and its metadata, for fill.py on the device (bench/gpu/tools/run.sh)
# stats: per-tensor mean/std of the real weights; skeleton: header only
import json, struct, sys, array, math
src, stats = sys.argv[1], sys.argv[2]
f = open(src, 'rb'); n = struct.unpack('<Q', f.read(8))[0]; hdr = json.loads(f.read(n)); data = f.read()
st = {"__metadata__": hdr["__metadata__"], "tensors": {}}
for k, v in hdr.items():
    if k == "__metadata__": continue
    s, e = v["data_offsets"]
    a = array.array('f'); a.frombytes(data[s:e])
    m = sum(a) / len(a); sd = math.sqrt(sum((x - m) ** 2 for x in a) / len(a))
    st["tensors"][k] = {"shape": v["shape"], "mean": m, "std": sd, "off": s}
json.dump(st, open(stats, "w"))
