-- bench/gpu/ew2d.lua - issue 36's elementwise rows (2-D and more after
-- collapsing) from lm.profile of an SDXL 1024² image: a linear's bias add,
-- GEGLU's product of two column halves, the attention heads' copy.  GPU
-- time (gpu_timed.lua: medians of 5 x 10 calls), one row each:
--   ew2d DT SHAPE OP ms GB/s       (GB/s: bytes read + written)
--   lumen bench/gpu/ew2d.lua [LABEL]
-- LABEL (default "ew2d") starts each row: run once as is and once with
-- LUMEN_VK_VEC4=0 (the scalar path) to compare.  EW2D_DIV=d divides the
-- token counts (1024, 4096) by d, the inner dims stay (lavapipe: 16);
-- EW2D_DT the dtypes (default "f16"; "f16,bf16").
local lm = require "lumen"
local gpu_timed = dofile((arg[0]:match("^(.*/)") or "./") .. "gpu_timed.lua")
local label = arg[1] or "ew2d"
local div = tonumber(os.getenv("EW2D_DIV") or "1")
local dts = {}
for d in (os.getenv("EW2D_DT") or "f16"):gmatch("[%w]+") do dts[#dts + 1] = d end

local function line(fmt, ...)
  print(string.format(fmt, ...))
  io.stdout:flush()
end

local function rand(shape, seed, dt)
  return lm.randn(shape, {seed = seed}):to("vulkan"):astype(dt):eval()
end

for _, dt in ipairs(dts) do
  local t1, t4 = 1024 // div, 4096 // div
  -- {shape label, op label, build () -> (fn, bytes)}
  local rows = {
    {string.format("[2,%d,10240]+[10240]", t1), "add", function()
      local x, b = rand({2, t1, 10240}, 1, dt), rand({10240}, 2, dt)
      return function() return x + b end, (2 * 2 * t1 * 10240 + 10240) * 2
    end},
    {string.format("[2,%d,5120]x[2,%d,5120]", t1, t1), "mul", function()
      local h = rand({2, t1, 10240}, 3, dt):split(2, 3)   -- GEGLU's halves: views, row stride 10240
      local a, g = h[1], h[2]
      return function() return a * g end, 3 * 2 * t1 * 5120 * 2
    end},
    {string.format("[2,%d,1280]+[1280]", t1), "add", function()
      local x, b = rand({2, t1, 1280}, 4, dt), rand({1280}, 5, dt)
      return function() return x + b end, (2 * 2 * t1 * 1280 + 1280) * 2
    end},
    {string.format("[2,%d,20,64]", t1), "copy", function()
      local x = rand({2, t1, 1280}, 6, dt)
      return function() return x:reshape(2, t1, 20, 64):permute(1, 3, 2, 4):contiguous() end,
             2 * 2 * t1 * 1280 * 2
    end},
    {string.format("[2,%d,5120]+[5120]", t4), "add", function()
      local x, b = rand({2, t4, 5120}, 7, dt), rand({5120}, 8, dt)
      return function() return x + b end, (2 * 2 * t4 * 5120 + 5120) * 2
    end},
  }
  for _, r in ipairs(rows) do
    local fn, bytes = r[3]()
    fn():eval()
    local med = gpu_timed(fn)
    line("%s %s %s %s %.4f %.1f", label, dt, r[1], r[2], med, bytes / med / 1e6)
    lm.clear_cache()
  end
end
