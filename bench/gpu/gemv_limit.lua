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
local dir = arg[0]:match("^(.*/)") or "./"
local gpu_timed = dofile(dir .. "gpu_timed.lua")
local mm_case = dofile(dir .. "mm_case.lua")
local dt = arg[1]
local esize = (dt == "f32") and 4 or 2
for i = 2, #arg do
  local c = assert(mm_case(dt, arg[i]))
  local w = c.w
  local med = gpu_timed(c.fn)
  local bytes = c.k * c.n * esize
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
