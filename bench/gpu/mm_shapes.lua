-- bench/gpu/mm_shapes.lua - the tensor-core GEMM at the models' shapes, at
-- GPU time (issue 36): each [Bx]M:K:N[t] case in DTYPE, x [B, M, K] times a
-- weight the batch shares (t: stored [N, K] and read transposed, as
-- lm.linear runs it; else [K, N]), the GPU time of one product by
-- lm.profile's timestamps over 10 calls (gpu_timed.lua), the kernel that ran
-- and TFLOP/s.  Run it under LUMEN_VK_COOP=<tile> (and any other knob) to
-- sweep the tiles; bench/gpu/mm_sweep36.sh does.  Prints
-- "mm DT BxMxKxN[t] KERNEL gpu median min max ms TFLOPS median".
--   lumen bench/gpu/mm_shapes.lua f16 2x1024:1280:1280t 2x77:2048:1280t
local lm = require "lumen"
local gpu_timed = dofile((arg[0]:match("^(.*/)") or "./") .. "gpu_timed.lua")
local dt = arg[1]
for i = 2, #arg do
  local b, m, k, n, t = arg[i]:match("^(%d+)x(%d+):(%d+):(%d+)(t?)$")
  if not b then
    m, k, n, t = arg[i]:match("^(%d+):(%d+):(%d+)(t?)$")
    b = 1
  end
  assert(m, "mm_shapes.lua: a case is [Bx]M:K:N[t], not " .. arg[i])
  b, m, k, n = tonumber(b), tonumber(m), tonumber(k), tonumber(n)
  local x = lm.randn({b, m, k}, {seed = 1}):to("vulkan"):astype(dt):eval()
  local w
  if t == "t" then w = lm.randn({n, k}, {seed = 2}):to("vulkan"):astype(dt):eval()
  else w = lm.randn({k, n}, {seed = 2}):to("vulkan"):astype(dt):eval() end
  local c = lm.compile(function(a) if t == "t" then return a:matmul(w:transpose()) end return a:matmul(w) end)
  local fn = function() return c(x) end
  fn():eval()
  local kernel = "?"
  local prof = lm.profile({print = false}, function() fn():eval() end)
  for _, r in ipairs(prof) do if r.timer == "gpu" and r.op == "matmul" then kernel = r.kernel end end
  local med, lo, hi = gpu_timed(fn)
  print(string.format("mm %s %dx%dx%dx%d%s %s gpu %.4f %.4f %.4f ms %.1f TFLOPS", dt, b, m, k, n, t, kernel,
                      med, lo, hi, 2 * b * m * k * n / (med * 1e9)))
  io.stdout:flush()
  lm.clear_cache()
end
