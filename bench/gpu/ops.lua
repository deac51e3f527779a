-- bench/gpu/ops.lua - Lumen's side of bench/gpu/ops.py: single ops at the
-- shapes of a VAE decoder and of ESRGAN, on the GPU.  Each argument names
-- one case: conv:CIN:COUT:HW:K:DTYPE (batch 1, KxK, stride 1, 'same'
-- padding, bias), gn:C:HW:DTYPE (GroupNorm(32), affine, eps 1e-6),
-- ln:ROWS:LEN:DTYPE (LayerNorm over the last axis, affine), rms:ROWS:LEN:DTYPE
-- (RMSNorm, weight), sm:ROWS:LEN:DTYPE (softmax over the last axis) or
-- copy:N:DTYPE (x:copy() of N elements).
-- Prints "case median min max" in ms (5 batches: timed.lua; OPS_BATCH_S
-- seconds each, default 0.2), then, on the GPU, "gpu median min max": the
-- GPU time (timestamp queries, lm.profile) per call, 5 profiles of 10 calls.
local lm = require "lumen"
local dev = os.getenv("VAE_DEVICE") or "vulkan"

-- median, min and max (ms) of 5 batches of calls of >= 0.2 s each
local timed0 = dofile((arg[0]:match("^(.*/)") or "./") .. "timed.lua")
local batch_s = tonumber(os.getenv("OPS_BATCH_S") or "0.2")
local function timed(fn) return timed0(fn, batch_s) end

-- median, min and max over 5 profiles of the GPU time per call (ms)
local gpu_timed = dofile((arg[0]:match("^(.*/)") or "./") .. "gpu_timed.lua")

local function row_case(kind, rows, len, dt)
  local x = lm.randn({rows, len}, {seed = 1, device = dev}):astype(dt):eval()
  if kind == "copy" then return function() return x:copy() end end
  local w = (lm.randn({len}, {seed = 2, device = dev}) * 0.1 + 1):astype(dt):eval()
  local b = (lm.randn({len}, {seed = 3, device = dev}) * 0.1):astype(dt):eval()
  local c
  if kind == "ln" then c = lm.compile(function(a) return lm.layer_norm(a, {len}, w, b, 1e-5) end)
  elseif kind == "rms" then c = lm.compile(function(a) return lm.rms_norm(a, {len}, w, 1e-6) end)
  else c = lm.compile(function(a) return a:softmax(-1) end) end
  return function() return c(x) end
end

for _, case in ipairs(arg) do
  local f = {}
  for p in case:gmatch("[^:]+") do f[#f + 1] = p end
  local fn
  if f[1] == "conv" then
    local cin, cout, hw, k, dt = tonumber(f[2]), tonumber(f[3]), tonumber(f[4]), tonumber(f[5]), f[6]
    local x = lm.randn({1, cin, hw, hw}, {seed = 1}):to(dev):astype(dt):eval()
    local w = (lm.randn({cout, cin, k, k}, {seed = 2}) * 0.05):to(dev):astype(dt):eval()
    local b = lm.randn({cout}, {seed = 3}):to(dev):astype(dt):eval()
    local c = lm.compile(function(a) return lm.conv2d(a, w, b, {padding = k // 2}) end)
    fn = function() return c(x) end
  elseif f[1] == "copy" then
    fn = row_case("copy", 1, tonumber(f[2]), f[3])
  elseif f[1] ~= "gn" then
    fn = row_case(f[1], tonumber(f[2]), tonumber(f[3]), f[4])
  else
    local C, hw, dt = tonumber(f[2]), tonumber(f[3]), f[4]
    local x = lm.randn({1, C, hw, hw}, {seed = 1, device = dev}):astype(dt):eval()
    local w = (lm.randn({C}, {seed = 2}) * 0.1 + 1):to(dev):astype(dt):eval()
    local b = (lm.randn({C}, {seed = 3}) * 0.1):to(dev):astype(dt):eval()
    local c = lm.compile(function(a) return lm.group_norm(a, 32, w, b, 1e-6) end)
    fn = function() return c(x) end
  end
  print(string.format("%s %.4f %.4f %.4f", case, timed(fn)))
  if dev ~= "cpu" then print(string.format("gpu %.4f %.4f %.4f", gpu_timed(fn))) end
  io.stdout:flush()
  lm.clear_cache()
end
