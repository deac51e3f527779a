-- bench/gpu/gemv_gpu.lua - batch-1 products at GPU time (issue 36): each
-- M:K:N[t] case (t: B stored [N, K], a linear's weight, as lm.linear runs
-- it) in DTYPE (f16 or bf16), the GPU time of one product by lm.profile's
-- timestamps over 10 calls (gpu_timed.lua), without the host's submit and
-- wait that vkbench's wall time counts.  Prints "matmul_DT_MxKxN[t] gpu
-- median min max" in ms.  LUMEN_VK_GEMV=0 times the GEMM tiles instead.
--   lumen bench/gpu/gemv_gpu.lua f16 1:2560:9728t 1:3840:3840t
local lm = require "lumen"
local dir = arg[0]:match("^(.*/)") or "./"
local gpu_timed = dofile(dir .. "gpu_timed.lua")
local mm_case = dofile(dir .. "mm_case.lua")
local dt = arg[1]
for i = 2, #arg do
  local c = assert(mm_case(dt, arg[i]))
  print(string.format("matmul_%s_%dx%dx%d%s gpu %.4f %.4f %.4f", dt, c.m, c.k, c.n, c.t, gpu_timed(c.fn)))
  io.stdout:flush()
  lm.clear_cache()
end
