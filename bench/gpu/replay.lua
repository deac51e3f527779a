-- bench/gpu/replay.lua - a compiled esrgan-thick call driven from Lua, host
-- ms per call (until the call and lm.async_eval return, the work queued)
-- and wall ms (until lm.sync returns); run it with LUMEN_VK_REPLAY=0 and
-- without to compare (bench/gpu/replay.sh does).
--   build/lumen bench/gpu/replay.lua [SIZE [RUNS [DTYPE [SCALE]]]]
local lm = require "lumen"
local size = tonumber(arg and arg[1]) or 128
local runs = tonumber(arg and arg[2]) or 9
local dt = (arg and arg[3]) or "f16"
local scale = tonumber(arg and arg[4]) or 2
local m = lm.models.load("esrgan-thick", {scale = scale, dtype = dt})
local f = lm.compile(function(x) return m(x) end, {name = "esrgan"})
local x = lm.rand({1, 3, size, size}, {seed = 1}):astype(dt)
local host, wall, y = {}, {}, nil
for i = 1, runs + 2 do   -- the first call runs the ordinary way, the second records
  lm.sync()
  local t0 = lm.clock()
  y = f(x)
  lm.async_eval(y)
  local t1 = lm.clock()
  lm.sync()
  local t2 = lm.clock()
  if i > 2 then host[#host + 1] = (t1 - t0) * 1000; wall[#wall + 1] = (t2 - t0) * 1000 end
end
table.sort(host); table.sort(wall)
local mid = (#host + 1) // 2
print(string.format("RESULT esrgan_thick_x%d_%dpx_%s lua LUMEN_VK_REPLAY=%s host %.3f [%.3f-%.3f] ms wall %.3f [%.3f-%.3f] ms (output sum %.6g)",
  scale, size, dt, os.getenv("LUMEN_VK_REPLAY") or "1", host[mid], host[1], host[#host], wall[mid], wall[1],
  wall[#wall], y:astype("f32"):sum():item()))
