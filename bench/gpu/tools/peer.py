# peer.py WORK N: builds the full-size SD 1.5 (bench/gpu/sd_full.py's random
# weights), saves it for Lumen, then times diffusers one image at a time
# (warm, f16, SDPA, 512², 20 Euler steps, CFG 7, as sd_mpi.sh's jobs)
import os, sys, time, statistics, torch
sys.path.insert(0, os.path.join(os.getcwd(), "bench", "gpu"))
import sd_full
work, n = sys.argv[1], int(sys.argv[2])
t0 = time.time()
p = sd_full.build("sd15")
p.save_pretrained(os.path.join(work, "sd15"), safe_serialization=True)
print("built and saved in %.1f s" % (time.time() - t0), flush=True)
p.set_progress_bar_config(disable=True)
def gen(seed):
    g = torch.Generator("cuda").manual_seed(seed)
    return p("a lighthouse on a cliff at dusk, oil painting", negative_prompt="blurry", num_inference_steps=20,
             guidance_scale=7, height=512, width=512, generator=g).images[0]
gen(100); torch.cuda.synchronize()
per = []
s = time.perf_counter()
for i in range(n):
    a = time.perf_counter(); gen(i + 1); torch.cuda.synchronize(); per.append(time.perf_counter() - a)
el = time.perf_counter() - s
print("RESULT diffusers_one_at_a_time: %d images %.2f s = %.3f images/s, per image median %.1f ms [%.1f-%.1f]" %
      (n, el, n / el, statistics.median(per) * 1e3, min(per) * 1e3, max(per) * 1e3), flush=True)
