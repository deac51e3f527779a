-- bench/gpu/halo.lua - small-channel f16 convolutions (ESRGAN's dense blocks)
-- three ways, for the conv kernel chosen by the environment
-- (LUMEN_VK_CONV_HALO, LUMEN_VK_CONV_HALO_TILE, LUMEN_VK_CONV_TILE):
--   call:   one conv per evaluation (ops.lua's measure: submit and wait each)
--   stream: 16 convs of the same input with 16 weight sets in one evaluation,
--           per conv (what a model sees: no submit between kernels)
--   gpu:    the kernel's own GPU time (lm.profile's timestamps), median of 9
--   host:   the host's time recording the conv node (lm.profile), median of 9
-- Each argument: CIN:COUT:HW[:N] (3x3, stride 1, padding 1, bias; N images).
-- Prints "case call med min max stream med min max gpu med min max host" (ms),
-- after a "floor" line: one evaluation of a 16-element add.
local lm = require "lumen"
local dev = os.getenv("VAE_DEVICE") or "vulkan"
local timed = dofile((arg[0]:match("^(.*/)") or "./") .. "timed.lua")
local batch_s = tonumber(os.getenv("HALO_BATCH_S") or "0.05")
local R = 16

-- the floor of one evaluation on this device: a 16-element add, submitted
-- and waited for (what "call" pays besides the conv)
do
  local t = lm.zeros({16}):to(dev):eval()
  print(string.format("floor %.4f %.4f %.4f", timed(function() return t + 1 end, batch_s)))
end

for _, case in ipairs(arg) do
  local f = {}
  for p in case:gmatch("[^:]+") do f[#f + 1] = tonumber(p) end
  local cin, cout, hw, n = f[1], f[2], f[3], f[4] or 1
  local x = lm.randn({n, cin, hw, hw}, {seed = 1}):to(dev):astype("f16"):eval()
  local ws = {}
  for r = 1, R do ws[r] = (lm.randn({cout, cin, 3, 3}, {seed = 1 + r}) * 0.05):to(dev):astype("f16"):eval() end
  local b = lm.randn({cout}, {seed = 99}):to(dev):astype("f16"):eval()
  local one = function() return lm.conv2d(x, ws[1], b, {padding = 1}) end
  local cm, clo, chi = timed(one, batch_s)
  local all = function()
    local o = {}
    for r = 1, R do o[r] = lm.conv2d(x, ws[r], b, {padding = 1}) end
    return o
  end
  -- timed() evaluates one tensor: hand it a holder whose eval runs all R
  local holder = {eval = function(t) lm.eval(table.unpack(t.o)) end}
  local sm, slo, shi = timed(function() holder.o = all(); return holder end, batch_s)
  local g, h = {}, {}
  for i = 1, 9 do
    local _, prof = lm.profile({print = false}, one)
    for _, row in ipairs(prof) do
      if row.op == "conv" then g[#g + 1], h[#h + 1] = row.total_ms, row.host_ms end
    end
  end
  table.sort(g)
  table.sort(h)
  print(string.format("%s %.4f %.4f %.4f %.4f %.4f %.4f %.4f %.4f %.4f %.4f", case, cm, clo, chi,
                      sm / R, slo / R, shi / R, g[5] or -1, g[1] or -1, g[#g] or -1, h[5] or -1))
  io.stdout:flush()
  lm.clear_cache()
end
