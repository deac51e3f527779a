-- bench/gpu/mm_case.lua - one product for the GPU-time scripts
-- (gemv_gpu.lua, gemv_limit.lua, mm_shapes.lua):
--   local mm_case = dofile(<this folder> .. "mm_case.lua")
--   local c = mm_case(dt, "2x77:2048:1280t")
-- A case is [Bx]M:K:N[t]: x [M, K] (with the Bx prefix [B, M, K]) times a
-- weight every batch entry shares, stored [N, K] and read transposed where
-- t is given (as lm.linear runs it), else [K, N]; both made on the Vulkan
-- device in DT and evaluated.  c.fn() returns the compiled product to
-- evaluate (run once here); c.w is the weight, c.b, c.m, c.k, c.n the sizes
-- (b 1 without the prefix), c.t "t" or "".  nil and a message for a case
-- that does not parse.
local lm = require "lumen"
return function(dt, case)
  local b, m, k, n, t = case:match("^(%d+)x(%d+):(%d+):(%d+)(t?)$")
  if not b then m, k, n, t = case:match("^(%d+):(%d+):(%d+)(t?)$") end
  if not m then return nil, "a case is [Bx]M:K:N[t], not " .. case end
  m, k, n = tonumber(m), tonumber(k), tonumber(n)
  local xs = b and {tonumber(b), m, k} or {m, k}
  local x = lm.randn(xs, {seed = 1}):to("vulkan"):astype(dt):eval()
  local w = (t == "t" and lm.randn({n, k}, {seed = 2}) or lm.randn({k, n}, {seed = 2})):to("vulkan"):astype(dt):eval()
  local c = lm.compile(function(a) if t == "t" then return a:matmul(w:transpose()) end return a:matmul(w) end)
  local fn = function() return c(x) end
  fn():eval()
  return {fn = fn, w = w, b = tonumber(b) or 1, m = m, k = k, n = n, t = t}
end
