-- esrgan_profile.lua - lm.profile of esrgan-thick x4 at 256x256 on the default device
--   LUMEN_DEVICE=vulkan LUMEN_FALLBACK=0 build/lumen bench/gpu/esrgan_profile.lua
-- (device_run.sh esrgan; the models folder is $LUMEN_MODELS or build/models)
-- one profiled call of esrgan-thick x4 at 256x256 per dtype, after two warm-up calls
for _, dt in ipairs{"f32", "f16"} do
  local m = lm.models.load("esrgan-thick", {scale = 4, dtype = dt})
  local x = lm.rand({1, 3, 256, 256}, {seed = 1})
  m(x):eval(); m(x):eval()
  print("== esrgan-thick x4 256 " .. dt)
  lm.profile({by = "kernel", rows = 12}, function() return m(x) end)
  m:free()
end
