-- bench/gpu/timed.lua - the timing loop of ops.lua and vae.lua:
--   local timed = dofile(<this folder> .. "timed.lua")
--   local median, min, max = timed(fn, batch_s)
-- fn() returns a tensor to evaluate; after two warm-up calls, 5 batches of
-- calls, each batch at least batch_s seconds long; ms per call.
local lm = require "lumen"
local now = lm.clock   -- monotonic wall clock (os.clock adds up every thread's CPU time)

return function(fn, batch_s)
  fn():eval(); fn():eval()
  local t0, reps = now(), 0
  repeat fn():eval(); reps = reps + 1 until now() - t0 >= batch_s
  local per = {}
  for b = 1, 5 do
    local s = now()
    for _ = 1, reps do fn():eval() end
    per[b] = (now() - s) * 1000 / reps
  end
  table.sort(per)
  return per[3], per[1], per[5]
end
