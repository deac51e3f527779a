-- bench/gpu/stream36.lua - issue 36's memory streaming: the GEMV kernel
-- (B stored [N][K], a linear's weight) beside elementwise passes over the
-- same weight, GPU time (lm.profile timestamps, gpu_timed.lua: medians of
-- 5 x 10 calls).  bench/gpu/stream36.sh runs it once a variant (the
-- kernels' knobs are environment variables read at dispatch).
--   lumen bench/gpu/stream36.lua LABEL [gemv] [ew]
-- For f16 and bf16 at M x K x N = 1 x 3840 x 3840, 1 x 3840 x 15360,
-- 1 x 9728 x 2560 and 1 x 2560 x 9728, and at M = 32 (the GEMM kernel
-- unless LUMEN_VK_GEMV=1), prints
--   LABEL gemv DT MxKxN MS GB/s         (GB/s: B's bytes read)
-- and with `ew`, over the weight [N][K] itself:
--   LABEL ew DT KxN w*2|copy|f32x2 MS GB/s   (bytes read + written; f32x2:
--   x * 2 over an f32 array of the same bytes, the four-wide f32 path)
-- STREAM36_DIV=d divides K and N by d (lavapipe: 16), STREAM36_ROWS the
-- row counts (default "1,32").
local lm = require "lumen"
local gpu_timed = dofile((arg[0]:match("^(.*/)") or "./") .. "gpu_timed.lua")
local label = arg[1] or "default"
local want = {}
for i = 2, #arg do want[arg[i]] = true end
if not want.gemv and not want.ew then want.gemv, want.ew = true, true end
local div = tonumber(os.getenv("STREAM36_DIV") or "1")
local rows = {}
for r in (os.getenv("STREAM36_ROWS") or "1,32"):gmatch("%d+") do rows[#rows + 1] = tonumber(r) end
local shapes = {{3840, 3840}, {3840, 15360}, {9728, 2560}, {2560, 9728}}   -- K, N

local function line(fmt, ...)
  print(string.format(fmt, ...))
  io.stdout:flush()
end

for _, dt in ipairs({"f16", "bf16"}) do
  for _, s in ipairs(shapes) do
    local k, n = s[1] // div, s[2] // div
    local w = lm.randn({n, k}, {seed = 2}):to("vulkan"):astype(dt):eval()
    local bytes = k * n * 2
    if want.gemv then
      local c = lm.compile(function(a) return a:matmul(w:transpose()) end)
      for _, m in ipairs(rows) do
        local x = lm.randn({m, k}, {seed = 1}):to("vulkan"):astype(dt):eval()
        local fn = function() return c(x) end
        fn():eval()
        local med = gpu_timed(fn)
        line("%s gemv %s %dx%dx%d %.4f %.1f", label, dt, m, k, n, med, bytes / med / 1e6)
      end
    end
    if want.ew then
      local twice = lm.compile(function(a) return a * 2 end)
      local wf = lm.randn({n * k // 2}, {seed = 3}):to("vulkan"):eval()   -- f32, the same bytes
      local cases = {{"w*2", function() return twice(w) end}, {"copy", function() return w:copy() end},
                     {"f32x2", function() return twice(wf) end}}
      for _, cs in ipairs(cases) do
        cs[2]():eval()
        local med = gpu_timed(cs[2])
        line("%s ew %s %dx%d %s %.4f %.1f", label, dt, k, n, cs[1], med, 2 * bytes / med / 1e6)
      end
    end
    lm.clear_cache()
  end
end
