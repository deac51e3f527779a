-- esrgan-thick x4 on 256x256 through Lumen on the default device, f32 and f16
-- (bench/gpu/peer_esrgan_cuda.py is its PyTorch CUDA peer)
--   LUMEN_DEVICE=vulkan LUMEN_FALLBACK=0 build/lumen bench/gpu/esrgan.lua
--   /usr/bin/python3 bench/gpu/peer_esrgan_cuda.py build/models/esrgan-thick/models/x4/model.json bench
for _, dt in ipairs{"f32", "f16"} do
  local m = lm.models.load("esrgan-thick", {scale = 4, dtype = dt})
  local x = lm.rand({1, 3, 256, 256}, {seed = 1})
  local ts = {}
  for i = 1, 7 do
    lm.sync(); local t0 = lm.clock()
    local y = m(x):eval()
    lm.sync(); ts[#ts + 1] = lm.clock() - t0
  end
  local s = {table.unpack(ts, 3)}; table.sort(s)
  print(string.format("RESULT esrgan_thick_x4_256 lumen-%s %s %.2f ms", tostring(m.device), dt, s[3] * 1000))
  m:free()
end
