-- esrgan_profile.lua - lm.profile of esrgan-thick on the default device
--   LUMEN_DEVICE=vulkan LUMEN_FALLBACK=0 build/lumen bench/gpu/esrgan_profile.lua
-- (device_run.sh esrgan; the models folder is $LUMEN_MODELS or build/models)
-- one profiled call per dtype after two warm-up calls; x4 at 256x256 in f32
-- and f16 unless ESRGAN_SCALE, ESRGAN_SIZE, ESRGAN_DTYPES (comma-separated)
-- and ESRGAN_ROWS (table rows, default 12) say otherwise (bench/gpu/limits.sh:
-- x2 at 512 in f32, issue 25's target)
local scale = tonumber(os.getenv("ESRGAN_SCALE") or "") or 4
local size = tonumber(os.getenv("ESRGAN_SIZE") or "") or 256
local rows = tonumber(os.getenv("ESRGAN_ROWS") or "") or 12
for dt in (os.getenv("ESRGAN_DTYPES") or "f32,f16"):gmatch("[^,]+") do
  local m = lm.models.load("esrgan-thick", {scale = scale, dtype = dt})
  local x = lm.rand({1, 3, size, size}, {seed = 1})
  m(x):eval(); m(x):eval()
  print(string.format("== esrgan-thick x%d %d %s", scale, size, dt))
  lm.profile({by = "kernel", rows = rows}, function() return m(x) end)
  m:free()
end
