-- bench/gpu/gpu_timed.lua - the GPU-time loop of ops.lua and conv.lua:
--   local gpu_timed = dofile(<this folder> .. "gpu_timed.lua")
--   local median, min, max = gpu_timed(fn)
-- fn() returns a tensor to evaluate; 5 profiles of 10 calls each, the GPU
-- time per call (timestamp queries, lm.profile: every kernel of the call).
local lm = require "lumen"

return function(fn)
  local per = {}
  for b = 1, 5 do
    local prof = lm.profile({print = false}, function()
      for _ = 1, 10 do fn():eval() end
    end)   -- the function returns nothing: the profile comes first
    local t = 0
    for _, r in ipairs(prof) do if r.timer == "gpu" then t = t + r.total_ms end end
    per[b] = t / 10
  end
  table.sort(per)
  return per[3], per[1], per[5]
end
