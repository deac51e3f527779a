-- bench/gpu/gemv_limit.lua - where the GEMV kernel's time goes (issue 36):
-- for each M:K:N[t] case in DTYPE, the kernel's GPU time (lm.profile,
-- gpu_timed.lua) at its own split and at LUMEN_VK_GEMV_PARTS of 1 to 32
-- (set per case by re-running this file: the knob is read at dispatch), and
-- beside it an elementwise pass over the same weight (w * 2: its bytes read
-- once and written once) as the device's streaming rate for that many bytes
-- in one dispatch.  Prints "case parts P gpu ms (GB/s of B read)" and
-- "case stream gpu ms (GB/s read + written)".
--   LUMEN_VK_GEMV_PARTS=4 lumen bench/gpu/gemv_limit.lua f16 1:3840:15360t
local lm = require "lumen"
local gpu_timed = dofile((arg[0]:match("^(.*/)") or "./") .. "gpu_timed.lua")
local dt = arg[1]
local esize = (dt == "f32") and 4 or 2
for i = 2, #arg do
  local m, k, n, t = arg[i]:match("^(%d+):(%d+):(%d+)(t?)$")
  m, k, n = tonumber(m), tonumber(k), tonumber(n)
  local x = lm.randn({m, k}, {seed = 1}):to("vulkan"):astype(dt):eval()
  local w = (t == "t" and lm.randn({n, k}, {seed = 2}) or lm.randn({k, n}, {seed = 2})):to("vulkan"):astype(dt):eval()
  local c = lm.compile(function(a) if t == "t" then return a:matmul(w:transpose()) end return a:matmul(w) end)
  local fn = function() return c(x) end
  fn():eval()
  local med = gpu_timed(fn)
  local bytes = k * n * esize
  print(string.format("%s parts %s gpu %.4f ms (%.0f GB/s of B)", arg[i], os.getenv("LUMEN_VK_GEMV_PARTS") or "own",
                      med, bytes / med / 1e6))
  if not os.getenv("LUMEN_VK_GEMV_PARTS") then
    local s = lm.compile(function(a) return a * 2 end)
    local sf = function() return s(w) end
    sf():eval()
    local sm = gpu_timed(sf)
    print(string.format("%s stream gpu %.4f ms (%.0f GB/s read + written)", arg[i], sm, 2 * bytes / sm / 1e6))
  end
  io.stdout:flush()
  lm.clear_cache()
end
