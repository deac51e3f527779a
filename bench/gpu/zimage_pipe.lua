-- bench/gpu/zimage_pipe.lua DIR REF MODE PROMPT STEPS - Lumen's side of
-- bench/gpu/zimage_pipe.py: the full-size random Z-Image pipeline DIR on the GPU,
-- bf16; MODE "default" (every stage resident) or "offload" (the text encoder freed
-- after each encoding); a whole 1024x1024 image from REF's latents (first call,
-- then the median of 5 with the spread), each stage alone, the peak memory, and
-- the image compared with diffusers'.
local lm = require "lumen"
local dir, refpath, mode, prompt, steps = arg[1], arg[2], arg[3], arg[4], tonumber(arg[5])
local timed = dofile((arg[0]:match("^(.*/)") or "./") .. "timed.lua")
local now = lm.clock
local MiB = 2 ^ 20

if mode == "offload" then       -- a 24 GB card: Lumen's buffers held to 22 GiB, its reuse cache to 1 GiB
  lm.set_memory_limit(22 * 2 ^ 30)
  lm.set_cache_limit(2 ^ 30)
elseif mode == "offload16" then -- a 16 GB card: 14 GiB and 0.5 GiB
  lm.set_memory_limit(14 * 2 ^ 30)
  lm.set_cache_limit(2 ^ 29)
end
local t0 = now()
local pipe = lm.models.load(dir, {dtype = "bf16", offload = mode ~= "default"})
local dev = pipe.device
print(string.format("%s: load %.1f s on %s; memory after load %.0f MiB", mode, now() - t0, tostring(dev),
  lm.memory(dev).active / MiB))
local R = lm.load(refpath)
local lat = R.latents:to(dev):astype("bf16"):eval()
local opts = {prompt = prompt, latents = lat, steps = steps, cfg = 0}
lm.reset_peak(dev)
t0 = now()
local img = pipe:generate(opts):astype("f32"):to("cpu"):eval()   -- one image: [3, H, W]
print(string.format("first image %.2f s (pipelines created)", now() - t0))
local c = lm.compare(img, R.image[1])
print(string.format("image_vs_diffusers (its latents, f32 VAE): max_abs %.4g mean_abs %.4g cosine %.6f",
  c.max_abs, (img - R.image[1]):abs():mean():item(), c.cosine or -1))
local m, lo, hi
if mode == "default" then
  m, lo, hi = timed(function() return pipe:generate(opts) end, 1.0)
else                            -- each image reads both networks again: 3 images, one at a time
  local ts = {}
  for i = 1, 3 do
    local s = now()
    pipe:generate(opts):eval()
    ts[i] = (now() - s) * 1000
  end
  table.sort(ts)
  m, lo, hi = ts[2], ts[1], ts[3]
end
print(string.format("lumen_image_ms %.1f (%.1f-%.1f)", m, lo, hi))
local mem = lm.memory(dev)
print(string.format("lumen_peak_mib %.0f (active now %.0f, cache %.0f)", mem.peak / MiB, mem.active / MiB,
  mem.cache / MiB))
if mode == "default" then
  local cap = pipe:encode_prompt(prompt)
  m, lo, hi = timed(function() return pipe:encode_prompt(prompt) end, 1.0)
  print(string.format("lumen_encode_ms %.2f (%.2f-%.2f)", m, lo, hi))
  local t = lm.tensor({0.5}):to(dev)
  m, lo, hi = timed(function() return pipe.transformer(lat, t, cap) end, 1.0)
  print(string.format("lumen_transformer_ms %.2f (%.2f-%.2f)", m, lo, hi))
  m, lo, hi = timed(function() return pipe.vae:decode(lat) end, 1.0)
  print(string.format("lumen_vae_decode_ms %.2f (%.2f-%.2f)", m, lo, hi))
end
