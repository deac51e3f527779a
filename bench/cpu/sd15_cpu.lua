-- bench/cpu/sd15_cpu.lua DIR REF MODE CALLS - Lumen's side of bench/cpu/sd15_cpu.py:
-- loads the random-weight SD 1.5 folder DIR on the CPU in f32, times the
-- first UNet call of the process (the CFG batch of 2 at REF's inputs) and
-- the next ones (median, min-max), compares the output with diffusers'
-- (REF's out), times one VAE decode of a 64x64 latent; MODE "imageSIZExSTEPS"
-- adds a whole SIZE x SIZE image of STEPS steps,
-- "profile" lm.profile's table of one UNet call (comma-separated, "-" for
-- neither); CALLS UNet calls (4 by default; 0: no UNet calls, no VAE decode,
-- REF unread, only the image).  Each figure's line ends with the machine's
-- load average (/proc/loadavg's first field).
local lm = require "lumen"
local dir, refpath, mode, calls = arg[1], arg[2], arg[3] or "-", tonumber(arg[4] or "4")
local now = lm.clock
local function load_avg()
  local f = io.open("/proc/loadavg")
  local s = f and f:read("l") or "?"
  if f then f:close() end
  return "load " .. (s:match("^(%S+)") or "?")
end
local t0 = now()
local pipe = lm.models.load(dir, {dtype = "f32", device = "cpu"})
print(string.format("load %.1f s on %s, LUMEN_THREADS %s", now() - t0, tostring(pipe.device), os.getenv("LUMEN_THREADS") or "unset (all cores)"))
local R = calls > 0 and lm.load(refpath) or nil
local x, t, ctx
if R then x, t, ctx = R.x:eval(), R.t:eval(), R.ctx:eval() end
local per, out = {}, nil
for i = 1, calls do
  local s = now()
  out = pipe.unet(x, t, ctx):eval()
  per[i] = (now() - s) * 1000
  print(string.format("lumen_unet_call%d_ms %.1f %s", i, per[i], load_avg()))
  io.stdout:flush()
end
if calls > 0 then
  local nxt = {table.unpack(per, calls > 1 and 2 or 1)}
  table.sort(nxt)
  print(string.format("lumen_unet_first_ms %.1f next_ms %.1f (%.1f-%.1f)", per[1], nxt[(#nxt + 1) // 2], nxt[1],
    nxt[#nxt]))
  local c = lm.compare(out, R.out)
  print(string.format("unet_vs_diffusers_f32: max_abs %.4g cosine %.8f", c.max_abs, c.cosine or -1))
  io.stdout:flush()
  local z = lm.randn({1, 4, 64, 64}, {seed = 3}):eval()
  local s0 = now()
  pipe:decode_latents(z):eval()
  print(string.format("lumen_vae_decode_512_ms %.1f (one run) %s", (now() - s0) * 1000, load_avg()))
  io.stdout:flush()
end
local size, steps = mode:match("image(%d+)x(%d+)")
if size then
  size, steps = tonumber(size), tonumber(steps)
  local s = now()
  pipe:generate{prompt = "a photo of an astronaut riding a horse", negative = "blurry, low quality",
                steps = steps, cfg = 7, sampler = "euler", seed = 1, size = size}:eval()
  print(string.format("lumen_%dstep_%d_ms %.1f (one run%s) %s", steps, size, (now() - s) * 1000,
                      calls > 0 and ", after the UNet calls" or "", load_avg()))
  io.stdout:flush()
end
if mode:find("profile") and x then lm.profile({rows = 30}, function() return pipe.unet(x, t, ctx) end) end
