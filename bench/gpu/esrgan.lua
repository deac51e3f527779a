-- esrgan-thick through Lumen on the default device, f32 and f16: x4 at
-- 256x256 unless ESRGAN_SCALE / ESRGAN_SIZE / ESRGAN_RUNS say otherwise
-- (issue 25's target is x2 at 512); median of the runs after two warm-up
-- calls, with the range (bench/gpu/peer_esrgan_cuda.py is its PyTorch peer)
--   LUMEN_DEVICE=vulkan LUMEN_FALLBACK=0 build/lumen bench/gpu/esrgan.lua
--   /usr/bin/python3 bench/gpu/peer_esrgan_cuda.py build/models/esrgan-thick/models/x4/model.json bench
local scale = tonumber(os.getenv("ESRGAN_SCALE") or "") or 4
local size = tonumber(os.getenv("ESRGAN_SIZE") or "") or 256
local runs = tonumber(os.getenv("ESRGAN_RUNS") or "") or 7
for _, dt in ipairs{"f32", "f16"} do
  local m = lm.models.load("esrgan-thick", {scale = scale, dtype = dt})
  local x = lm.rand({1, 3, size, size}, {seed = 1})
  m(x):eval(); m(x):eval(); lm.sync()
  local ts = {}
  for i = 1, runs do
    lm.sync(); local t0 = lm.clock()
    local y = m(x):eval()
    lm.sync(); ts[#ts + 1] = (lm.clock() - t0) * 1000
  end
  table.sort(ts)
  print(string.format("RESULT esrgan_thick_x%d_%d lumen-%s %s %.2f ms [%.2f-%.2f] (median of %d)",
                      scale, size, tostring(m.device), dt, ts[(#ts + 1) // 2], ts[1], ts[#ts], #ts))
  m:free()
end
