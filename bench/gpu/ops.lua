-- bench/gpu/ops.lua - Lumen's side of bench/gpu/ops.py: single ops at the
-- shapes of a VAE decoder and of ESRGAN, on the GPU.  Each argument names
-- one case: conv:CIN:COUT:HW:K:DTYPE (batch 1, KxK, stride 1, 'same'
-- padding, bias) or gn:C:HW:DTYPE (GroupNorm(32), affine, eps 1e-6).
-- Prints "case median min max" in ms (5 batches: timed.lua).
local lm = require "lumen"
local dev = os.getenv("VAE_DEVICE") or "vulkan"

-- median, min and max (ms) of 5 batches of calls of >= 0.2 s each
local timed0 = dofile((arg[0]:match("^(.*/)") or "./") .. "timed.lua")
local function timed(fn) return timed0(fn, 0.2) end

for _, case in ipairs(arg) do
  local f = {}
  for p in case:gmatch("[^:]+") do f[#f + 1] = p end
  local fn
  if f[1] == "conv" then
    local cin, cout, hw, k, dt = tonumber(f[2]), tonumber(f[3]), tonumber(f[4]), tonumber(f[5]), f[6]
    local x = lm.randn({1, cin, hw, hw}, {seed = 1}):to(dev):astype(dt):eval()
    local w = (lm.randn({cout, cin, k, k}, {seed = 2}) * 0.05):to(dev):astype(dt):eval()
    local b = lm.randn({cout}, {seed = 3}):to(dev):astype(dt):eval()
    local c = lm.compile(function(a) return lm.conv2d(a, w, b, {padding = k // 2}) end)
    fn = function() return c(x) end
  else
    local C, hw, dt = tonumber(f[2]), tonumber(f[3]), f[4]
    local x = lm.randn({1, C, hw, hw}, {seed = 1}):to(dev):astype(dt):eval()
    local w = (lm.randn({C}, {seed = 2}) * 0.1 + 1):to(dev):astype(dt):eval()
    local b = (lm.randn({C}, {seed = 3}) * 0.1):to(dev):astype(dt):eval()
    local c = lm.compile(function(a) return lm.group_norm(a, 32, w, b, 1e-6) end)
    fn = function() return c(x) end
  end
  print(string.format("%s %.4f %.4f %.4f", case, timed(fn)))
  lm.clear_cache()
end
