-- bench/gpu/conv.lua - Lumen's side of bench/gpu/conv.py: one conv2d per
-- argument, conv:N:CIN:COUT:HW:K:DTYPE (N images of HW x HW, KxK, stride 1,
-- 'same' padding, bias).  Prints "case gpu median min max": the GPU time
-- per call (timestamp queries, lm.profile: every kernel of the conv, the
-- split-K pass included), 5 profiles of 10 calls; with CONV_WALL=1 also
-- "wall median min max" (timed.lua, batches of OPS_BATCH_S seconds).
-- The kernel is the one the environment chooses (LUMEN_VK_CONV_*).
local lm = require "lumen"
local timed0 = dofile((arg[0]:match("^(.*/)") or "./") .. "timed.lua")

local gpu_timed = dofile((arg[0]:match("^(.*/)") or "./") .. "gpu_timed.lua")

for _, case in ipairs(arg) do
  local f = {}
  for p in case:gmatch("[^:]+") do f[#f + 1] = p end
  local n, cin, cout, hw, k, dt = tonumber(f[2]), tonumber(f[3]), tonumber(f[4]), tonumber(f[5]), tonumber(f[6]), f[7]
  local x = lm.randn({n, cin, hw, hw}, {seed = 1}):to("vulkan"):astype(dt):eval()
  local w = (lm.randn({cout, cin, k, k}, {seed = 2}) * (1 / math.sqrt(cin * k * k))):to("vulkan"):astype(dt):eval()
  local b = lm.randn({cout}, {seed = 3}):to("vulkan"):astype(dt):eval()
  local c = lm.compile(function(a) return lm.conv2d(a, w, b, {padding = k // 2}) end)
  local fn = function() return c(x) end
  fn():eval()
  print(string.format("%s gpu %.4f %.4f %.4f", case, gpu_timed(fn)))
  if os.getenv("CONV_WALL") == "1" then
    print(string.format("%s wall %.4f %.4f %.4f", case, timed0(fn, tonumber(os.getenv("OPS_BATCH_S") or "0.05"))))
  end
  if os.getenv("CONV_CHECK") == "1" then
    -- the same conv on the CPU in f32: normalized error of the GPU's result
    local y = fn():astype("f32"):to("cpu"):eval()
    local r = lm.conv2d(x:astype("f32"):to("cpu"), w:astype("f32"):to("cpu"), b:astype("f32"):to("cpu"),
                        {padding = k // 2}):eval()
    local e = ((y - r) ^ 2):sum():item() / (r ^ 2):sum():item()
    print(string.format("%s nmse %.3g", case, e))
  end
  io.stdout:flush()
  lm.clear_cache()
end
