-- bench/gpu/gemv_gpu.lua - batch-1 products at GPU time (issue 36): each
-- M:K:N[t] case (t: B stored [N, K], a linear's weight, as lm.linear runs
-- it) in DTYPE (f16 or bf16), the GPU time of one product by lm.profile's
-- timestamps over 10 calls (gpu_timed.lua), without the host's submit and
-- wait that vkbench's wall time counts.  Prints "matmul_DT_MxKxN[t] gpu
-- median min max" in ms.  LUMEN_VK_GEMV=0 times the GEMM tiles instead.
--   lumen bench/gpu/gemv_gpu.lua f16 1:2560:9728t 1:3840:3840t
local lm = require "lumen"
local gpu_timed = dofile((arg[0]:match("^(.*/)") or "./") .. "gpu_timed.lua")
local dt = arg[1]
for i = 2, #arg do
  local m, k, n, t = arg[i]:match("^(%d+):(%d+):(%d+)(t?)$")
  m, k, n = tonumber(m), tonumber(k), tonumber(n)
  local x = lm.randn({m, k}, {seed = 1}):to("vulkan"):astype(dt):eval()
  local w
  if t == "t" then w = lm.randn({n, k}, {seed = 2}):to("vulkan"):astype(dt):eval()
  else w = lm.randn({k, n}, {seed = 2}):to("vulkan"):astype(dt):eval() end
  local c = lm.compile(function(a) if t == "t" then return a:matmul(w:transpose()) end return a:matmul(w) end)
  local fn = function() return c(x) end
  fn():eval()
  print(string.format("matmul_%s_%dx%dx%d%s gpu %.4f %.4f %.4f", dt, m, k, n, t, gpu_timed(fn)))
  io.stdout:flush()
  lm.clear_cache()
end
