-- bench/gpu/coldstart.lua DIR DTYPE SIZE STEPS CFG OUT - one process's first and
-- second image (issue 36's cold start): loads the pipeline DIR, makes a whole
-- SIZE x SIZE image (STEPS steps, euler, seed 1) twice and prints each one's
-- wall time; the first one's includes making every pipeline it needs (run it
-- with the pipeline cache and the driver's shader cache emptied: coldstart.py
-- does); the load's, the pipelines its dry run starts.  The first image is saved to OUT (f32 [3,H,W]) so that two binaries'
-- bytes can be compared.
local lm = require "lumen"
local dir, dt, size, steps, cfg, out = arg[1], arg[2], tonumber(arg[3]), tonumber(arg[4]), tonumber(arg[5]), arg[6]
local now = lm.clock
local t0 = now()
-- the load's dry run (prewarm, models/sd_pipeline.c) plans this size and
-- sampler; LUMEN_PREWARM=0 switches it off
local pipe = lm.models.load(dir, {dtype = dt, prewarm_size = size, prewarm_sampler = cfg > 0 and "euler" or nil})
print(string.format("load %.2f s on %s (%s, family %s)", now() - t0, tostring(pipe.device), dt, pipe.family))
local opts = {prompt = "a photo of an astronaut riding a horse", steps = steps, cfg = cfg, seed = 1, size = size}
if cfg > 0 then opts.negative, opts.sampler = "blurry, low quality", "euler" end   -- SD: as sd_full.lua
local function gen() return pipe:generate(opts):astype("f32"):to("cpu"):eval() end
t0 = now()
local img = gen()
print(string.format("first_image_s %.3f", now() - t0))
lm.save(out, {image = img})
t0 = now()
gen()
print(string.format("second_image_s %.3f", now() - t0))
