-- bench/gpu/zimage_full.lua DIR REF DTYPE - Lumen's side of bench/gpu/zimage_full.py:
-- loads the pipeline DIR (the full-size random-weight Z-Image transformer) on the
-- GPU, runs one transformer call at REF's inputs, compares it with diffusers' f32
-- output (and diffusers' bf16 output with it), times the call (median of 5 with
-- min-max) and prints lm.profile's table of one call.
local lm = require "lumen"
local dir, refpath, dt = arg[1], arg[2], arg[3] or "bf16"
local timed = dofile((arg[0]:match("^(.*/)") or "./") .. "timed.lua")
local now = lm.clock

local t0 = now()
local pipe = lm.models.load(dir, {dtype = dt})
print(string.format("load %.1f s on %s (%s, family %s)", now() - t0, tostring(pipe.device), dt, pipe.family))
print(string.format("memory after load: %.0f MiB", (lm.memory and lm.memory().active or 0) / 2 ^ 20))
local R = lm.load(refpath)
local dev = pipe.device
local x = R.x:to(dev):astype(dt):eval()
local cap = R.cap:to(dev):astype(dt):eval()
local t = R.t:to(dev):astype("f32"):eval()
t0 = now()
local out = pipe.transformer(x, t, cap):astype("f32"):to("cpu"):eval()
print(string.format("first call %.1f s (pipelines created)", now() - t0))
local c = lm.compare(out, R.out)
local cb = lm.compare(R.out_bf16, R.out)
print(string.format("transformer_vs_diffusers_f32: max_abs %.4g cosine %.8f (diffusers bf16: max_abs %.4g cosine %.8f)",
  c.max_abs, c.cosine or -1, cb.max_abs, cb.cosine or -1))
local m, lo, hi = timed(function() return pipe.transformer(x, t, cap) end, 1.0)
print(string.format("lumen_transformer_ms %.2f (%.2f-%.2f)", m, lo, hi))
lm.profile(function() return pipe.transformer(x, t, cap) end, {rows = 25, by = "kernel"})
