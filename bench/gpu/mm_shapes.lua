-- bench/gpu/mm_shapes.lua - the tensor-core GEMM at the models' shapes, at
-- GPU time (issue 36): each [Bx]M:K:N[t] case in DTYPE (mm_case.lua: x
-- [B, M, K], or [M, K] without the prefix, times a weight the batch shares;
-- t: stored [N, K] and read transposed, as lm.linear runs it; else [K, N]),
-- the GPU time of one product by lm.profile's timestamps over 10 calls
-- (gpu_timed.lua), the kernel that ran and TFLOP/s.  Run it once under
-- each LUMEN_VK_COOP=<tile> and LUMEN_VK_MM_SPLITK=<parts> to sweep them
-- (bench/gpu/mm_sweep36.sh times the same shapes by vkbench's wall time).
-- Prints "mm DT BxMxKxN[t] KERNEL gpu median min max ms TFLOPS median".
--   lumen bench/gpu/mm_shapes.lua f16 2x1024:1280:1280t 2x77:2048:1280t
local lm = require "lumen"
local dir = arg[0]:match("^(.*/)") or "./"
local gpu_timed = dofile(dir .. "gpu_timed.lua")
local mm_case = dofile(dir .. "mm_case.lua")
local dt = arg[1]
for i = 2, #arg do
  local c = assert(mm_case(dt, arg[i]))
  local kernel = "?"
  local prof = lm.profile({print = false}, function() c.fn():eval() end)
  for _, r in ipairs(prof) do if r.timer == "gpu" and r.op == "matmul" then kernel = r.kernel end end
  local med, lo, hi = gpu_timed(c.fn)
  print(string.format("mm %s %dx%dx%dx%d%s %s gpu %.4f %.4f %.4f ms %.1f TFLOPS", dt, c.b, c.m, c.k, c.n, c.t, kernel,
                      med, lo, hi, 2 * c.b * c.m * c.k * c.n / (med * 1e9)))
  io.stdout:flush()
  lm.clear_cache()
end
