-- bench/gpu/sd_full.lua DIR REF DTYPE SIZE - Lumen's side of bench/gpu/sd_full.py:
-- loads the full-size random-weight pipeline DIR (diffusers layout) on the GPU,
-- runs one UNet call (the CFG batch of 2) at REF's inputs and compares it with
-- diffusers' f32 output, then times (median of 5 with min-max) the text
-- encoding of both prompts, one UNet call, the VAE decode and a whole 20-step
-- SIZE x SIZE image (SD_FULL_IMAGE_REPS of them, default 3), and prints
-- lm.profile's table of one generation.
local lm = require "lumen"
local dir, refpath, dt, size = arg[1], arg[2], arg[3] or "f16", tonumber(arg[4] or "512")
local timed = dofile((arg[0]:match("^(.*/)") or "./") .. "timed.lua")
local now = lm.clock

local t0 = now()
local pipe = lm.models.load(dir, {dtype = dt})
print(string.format("load %.1f s on %s (%s, family %s)", now() - t0, tostring(pipe.device), dt, pipe.family))

local R = lm.load(refpath)
local dev = pipe.device
local function put(x) return x and x:to(dev):astype(dt):eval() or nil end
local x, t, ctx = put(R.x), R.t:to(dev):astype("f32"):eval(), put(R.ctx)
local te, ti = put(R.text_embeds), put(R.time_ids)
local out = pipe.unet(x, t, ctx, te, ti):astype("f32"):to("cpu"):eval()
local c = lm.compare(out, R.out)
local c16 = lm.compare(R.out_f16, R.out)
print(string.format("unet_vs_diffusers_f32: max_abs %.4g max_rel %.4g cosine %.8f (diffusers f16: max_abs %.4g cosine %.8f)",
  c.max_abs, c.max_rel or -1, c.cosine or -1, c16.max_abs, c16.cosine or -1))

local function ms(name, fn, batch)
  local m, lo, hi = timed(fn, batch or 0.5)
  print(string.format("lumen_%s_ms %.2f (%.2f-%.2f)", name, m, lo, hi))
end
ms("unet", function() return pipe.unet(x, t, ctx, te, ti) end)
local lat = size // 8
local z = lm.randn({1, 4, lat, lat}, {seed = 3}):to(dev):astype(dt):eval()
ms("vae", function() return pipe:decode_latents(z) end)
ms("text", function()
  local e = pipe:encode_prompt({"a photo of an astronaut riding a horse", "blurry, low quality"})
  return e
end)
local function gen()
  return pipe:generate{prompt = "a photo of an astronaut riding a horse", negative = "blurry, low quality",
                       steps = 20, cfg = 7, sampler = "euler", seed = 1, size = size}
end
gen():eval()
local per, reps = {}, tonumber(os.getenv("SD_FULL_IMAGE_REPS") or "3")
for i = 1, reps do
  local s = now()
  gen():eval()
  per[i] = (now() - s) * 1000
end
table.sort(per)
print(string.format("lumen_20step_ms %.1f (%.1f-%.1f)", per[(reps + 1) // 2], per[1], per[reps]))
-- device memory: what the loaded pipeline holds, and the peak of one whole
-- generation above it (lm.memory's active bytes: tensors, not the
-- allocator's cache; diffusers' peer is torch.cuda.max_memory_allocated)
collectgarbage(); collectgarbage()
local m0 = lm.memory(dev)
lm.reset_peak(dev)
gen():eval()
local m1 = lm.memory(dev)
print(string.format("lumen_memory_mb resident %.0f peak %.0f (cache %.0f)", m0.active / 2^20, m1.peak / 2^20,
  m1.cache / 2^20))
if os.getenv("SD_PROFILE") ~= "0" then lm.profile({rows = 25}, gen) end
