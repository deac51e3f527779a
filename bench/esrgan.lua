-- bench/esrgan.lua OUT_DIR - esrgan-thick x4 on a 256x256 image on the CPU,
-- wall-clock seconds per run (after a warm-up run).  Writes the input and
-- Lumen's output to OUT_DIR (in.npy, out.npy) so bench/peer_esrgan.py runs
-- the same input and checks its output against Lumen's.  Run by
-- bench/esrgan.sh.
local lm = require "lumen"
local dir, runs = arg[1], tonumber(arg[2] or "2")
local function now()   -- wall clock (os.clock adds up every thread's CPU time)
  local f = io.open("/proc/uptime")
  local t = f and tonumber(f:read("*l"):match("^(%S+)"))
  if f then f:close() end
  return t or os.time()
end
local m = lm.models.load("esrgan-thick", {scale = 4, device = "cpu"})
local img = lm.image.read_png(lm.models.dir() .. "/esrgan-thick/assets/fixture.png", {dtype = "f32"})
local x = lm.upsample(img:slice(1, 1, 3):reshape{1, 3, 128, 128}, {scale_factor = 2, mode = "bilinear"}):eval()
lm.save(dir .. "/in.npy", x)
local y = m(x):eval()          -- warm-up (and the output the peer checks)
lm.save(dir .. "/out.npy", y)
local t0 = now()
for _ = 1, runs do y = m(x):eval() end
local s = (now() - t0) / runs
print(("RESULT esrgan_thick_x4_256px %.4g s"):format(s))
