-- bench/gpu/conv_err.lua - the error of Lumen's f32 3x3 conv on the GPU
-- against the CPU's f64 sum: one line per argument conv:N:CIN:COUT:HW
-- (N images of HW x HW, 'same' padding, bias; x ~ randn, weights ~ randn
-- / sqrt(9 CIN) as a trained layer's scale), "case kernel max_abs max_rel
-- nmse" with max_rel the largest error over the largest |output|.  The
-- kernel is the one the environment chooses: run it once as it is and
-- once with LUMEN_VK_CONV_F32=winograd to compare the two (docs/VULKAN.md).
local lm = require "lumen"

for _, case in ipairs(arg) do
  local f = {}
  for p in case:gmatch("[^:]+") do f[#f + 1] = p end
  local n, cin, cout, hw = tonumber(f[2]), tonumber(f[3]), tonumber(f[4]), tonumber(f[5])
  local x = lm.randn({n, cin, hw, hw}, {seed = 1})
  local w = lm.randn({cout, cin, 3, 3}, {seed = 2}) * (1 / math.sqrt(9 * cin))
  local b = lm.randn({cout}, {seed = 3})
  local ref = lm.conv2d(x:to("cpu"):astype("f64"), w:to("cpu"):astype("f64"), b:to("cpu"):astype("f64"),
                        {padding = 1}):eval()
  local xv, wv, bv = x:to("vulkan"):eval(), w:to("vulkan"):eval(), b:to("vulkan"):eval()
  local y = lm.conv2d(xv, wv, bv, {padding = 1}):astype("f32"):to("cpu"):astype("f64"):eval()
  local d = (y - ref):abs():max():item()
  local nmse = ((y - ref) ^ 2):sum():item() / (ref ^ 2):sum():item()
  local kernel = os.getenv("LUMEN_VK_CONV_F32") or ""
  print(string.format("%s %s %.3g %.3g %.3g", case, kernel ~= "" and kernel or "default", d,
                      d / ref:abs():max():item(), nmse))
  io.stdout:flush()
  lm.clear_cache()
end
