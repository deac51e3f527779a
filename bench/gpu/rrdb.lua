-- bench/gpu/rrdb.lua - one ESRGAN RRDB block (three residual dense blocks of
-- five 3x3 convs: 64 -> 32, 96 -> 32, 128 -> 32, 160 -> 32, 192 -> 64, leaky
-- ReLU 0.2, concatenations, residual scaling 0.2) in f16 on the GPU, batch
-- 1 at HW x HW, compiled; the peer is rrdb.py (the same block in PyTorch).
-- Weights from a fixed seed (each conv's scaled by 0.05).  Prints
-- "rrdb HW med min max" in ms per block (timed.lua's 5 batches), then the
-- block's kernels with lm.profile (one call) when RRDB_PROFILE=1.
--   build/lumen bench/gpu/rrdb.lua [HW...]
local lm = require "lumen"
local dev = os.getenv("VAE_DEVICE") or "vulkan"
local timed = dofile((arg[0]:match("^(.*/)") or "./") .. "timed.lua")

local ins = {64, 96, 128, 160, 192}
local outs = {32, 32, 32, 32, 64}
local W, B, seed = {}, {}, 10
for d = 1, 3 do
  W[d], B[d] = {}, {}
  for k = 1, 5 do
    seed = seed + 1
    W[d][k] = (lm.randn({outs[k], ins[k], 3, 3}, {seed = seed}) * 0.05):to(dev):astype("f16"):eval()
    B[d][k] = (lm.randn({outs[k]}, {seed = seed + 1000}) * 0.05):to(dev):astype("f16"):eval()
  end
end

local function rdb(x, d)
  local feats = {x}
  for k = 1, 5 do
    local inp = #feats == 1 and x or lm.concat(feats, 2)   -- axes count from 1: channels
    local y = lm.conv2d(inp, W[d][k], B[d][k], {padding = 1})
    if k < 5 then
      feats[#feats + 1] = y:leaky_relu(0.2)
    else
      return y * 0.2 + x
    end
  end
end

local block = lm.compile(function(x)
  local y = rdb(rdb(rdb(x, 1), 2), 3)
  return y * 0.2 + x
end)

for _, a in ipairs(#arg > 0 and arg or {"128"}) do
  local hw = tonumber(a)
  local x = lm.randn({1, 64, hw, hw}, {seed = 1}):to(dev):astype("f16"):eval()
  local m, lo, hi = timed(function() return block(x) end, 0.2)
  print(string.format("rrdb %d %.4f %.4f %.4f", hw, m, lo, hi))
  io.stdout:flush()
  if os.getenv("RRDB_PROFILE") == "1" then lm.profile({rows = 12, by = "kernel"}, block, x) end
  lm.clear_cache()
end
