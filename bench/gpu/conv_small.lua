-- bench/gpu/conv_small.lua - convs with few output channels on Vulkan:
-- conv_small.comp against conv_direct.comp (LUMEN_VK_CONV_SMALL=0) at the
-- two shapes it was written for and a small one, each setting in its own process (the
-- kernel is chosen from the environment):
--   vae_conv_out  [1,128,512,512] * [3,128,3,3]  -> [1,3,512,512]   f16, f32
--   esrgan_last   [1,64,272,272]  * [12,64,3,3]  -> [1,12,272,272]  f16
--   unet_conv_out [2,320,64,64]   * [4,320,3,3]  -> [2,4,64,64]     f16
-- (3x3, padding 1, bias; the last: the SD UNet's conv_out, a small grid).
--   LUMEN_DEVICE=vulkan build/lumen bench/gpu/conv_small.lua
-- prints per setting and shape "RESULT <shape> <dtype> <setting> <median> ms
-- [<min>-<max>] <kernel> sum=<checksum>": GPU time per call from lm.profile's
-- timestamps (every kernel of the conv), median of SAMPLES profiles of CALLS
-- calls each, and the f32 sum of the output, which is the same number in
-- every setting where the bits are.  Settings: old (conv_direct), new (the
-- defaults), px1, px2, px4 (LUMEN_VK_CONV_SMALL_PX: pixels per invocation),
-- wg64, wg128 (LUMEN_VK_CONV_SMALL_WG: invocations per workgroup; 256 is
-- the default at these shapes).
-- Environment: CONV_SMALL_SAMPLES (9), CONV_SMALL_CALLS (5),
-- CONV_SMALL_SETTINGS ("old new px1 px2 px4 wg64 wg128"), CONV_SMALL_SHAPES
-- (all; or names).
local lm = require "lumen"

local shapes = {
  {name = "vae_conv_out", x = {1, 128, 512, 512}, w = {3, 128, 3, 3}, dtypes = {"f16", "f32"}},
  {name = "esrgan_last", x = {1, 64, 272, 272}, w = {12, 64, 3, 3}, dtypes = {"f16"}},
  -- a small grid (the workgroup shrinks to 64): must not lose to conv_direct
  {name = "unet_conv_out", x = {2, 320, 64, 64}, w = {4, 320, 3, 3}, dtypes = {"f16"}},
}
local settings = {
  old = "LUMEN_VK_CONV_SMALL=0", new = "",
  px1 = "LUMEN_VK_CONV_SMALL_PX=1", px2 = "LUMEN_VK_CONV_SMALL_PX=2", px4 = "LUMEN_VK_CONV_SMALL_PX=4",
  wg64 = "LUMEN_VK_CONV_SMALL_WG=64", wg128 = "LUMEN_VK_CONV_SMALL_WG=128",
}

local function words(s)
  local t = {}
  for w in s:gmatch("%S+") do t[#t + 1] = w end
  return t
end

-- one setting, in this process: every shape and dtype
local function child(setting)
  local samples = tonumber(os.getenv("CONV_SMALL_SAMPLES") or "9")
  local calls = tonumber(os.getenv("CONV_SMALL_CALLS") or "5")
  local only = os.getenv("CONV_SMALL_SHAPES")
  for _, s in ipairs(shapes) do
    if not only or only:find(s.name, 1, true) then
      for _, dt in ipairs(s.dtypes) do
        local x = lm.randn(s.x, {seed = 1}):to("vulkan"):astype(dt):eval()
        local w = (lm.randn(s.w, {seed = 2}) * (1 / math.sqrt(s.w[2] * 9))):to("vulkan"):astype(dt):eval()
        local b = lm.randn({s.w[1]}, {seed = 3}):to("vulkan"):astype(dt):eval()
        local fn = function() return lm.conv2d(x, w, b, {padding = 1}) end
        local y = fn():eval()                        -- pipelines made outside the timing
        local sum = y:astype("f32"):sum():item()
        local per, kernel = {}, "?"
        for i = 1, samples do
          local prof = lm.profile({print = false}, function()
            for _ = 1, calls do fn():eval() end
          end)
          local t = 0
          for _, r in ipairs(prof) do
            if r.timer == "gpu" then
              t = t + r.total_ms
              if r.op == "conv2d" or r.kernel:find("conv") then kernel = r.kernel end
            end
          end
          per[i] = t / calls
        end
        table.sort(per)
        print(string.format("RESULT %s %s %s %.4f ms [%.4f-%.4f] %s sum=%.9g", s.name, dt, setting,
                            per[(samples + 1) // 2], per[1], per[samples], kernel, sum))
        io.stdout:flush()
        x:free(); w:free(); b:free(); y:free()
        lm.clear_cache()
      end
    end
  end
end

if arg[1] == "child" then
  child(arg[2])
else
  local lumen, script = arg[-1] or "lumen", arg[0]
  local q = function(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
  local list = words(os.getenv("CONV_SMALL_SETTINGS") or "old new px1 px2 px4 wg64 wg128")
  for _, name in ipairs(list) do
    local env = settings[name]
    if not env then error("conv_small.lua: unknown setting " .. name) end
    local cmd = string.format("env %s %s %s child %s 2>&1", env, q(lumen), q(script), name)
    local p = assert(io.popen(cmd))
    for line in p:lines() do print(line) end
    local ok, how, code = p:close()
    if not ok then print(string.format("conv_small.lua: setting %s: %s %s", name, how, tostring(code))) end
    io.stdout:flush()
  end
end
