-- julia.lua - a Julia set (or the Mandelbrot set) by escape time, with
-- smooth colouring and a cosine palette.  Every pixel iterates z = z^2 + c
-- as two real tensors (the real and imaginary parts); a compiled step runs
-- several iterations as fused elementwise kernels.
--
--   build/lumen samples/julia.lua [out.png] [c_re c_im]
--   build/lumen samples/julia.lua mandelbrot.png mandelbrot
--   LUMEN_DEVICE=vulkan build/lumen samples/julia.lua
-- Environment: JULIA_SIZE (width, 768; height is 2/3 of it), JULIA_ITERS (128),
-- JULIA_ZOOM (1.0), JULIA_CENTER ("re,im", 0,0 or -0.6,0 for Mandelbrot).
local lm = require "lumen"

local out = arg and arg[1] or "julia.png"
local mandelbrot = arg and arg[2] == "mandelbrot"
local c_re = tonumber(arg and arg[2]) or -0.8
local c_im = tonumber(arg and arg[3]) or 0.156
local W = tonumber(os.getenv("JULIA_SIZE")) or 768
local H = W * 2 // 3
local iters = tonumber(os.getenv("JULIA_ITERS")) or 128
local zoom = tonumber(os.getenv("JULIA_ZOOM")) or 1.0
local cx, cy = (os.getenv("JULIA_CENTER") or (mandelbrot and "-0.6,0" or "0,0"))
  :match("([^,]+),([^,]+)")
cx, cy = tonumber(cx), tonumber(cy)

-- the plane: 3 units wide at zoom 1, y up
local half_w, half_h = 1.6 / zoom, 1.6 / zoom * H / W
local re = lm.linspace(cx - half_w, cx + half_w, W):reshape{1, W}:broadcast_to{H, W}
local im = lm.linspace(cy + half_h, cy - half_h, H):reshape{H, 1}:broadcast_to{H, W}

-- z escapes once |z|^2 passes R2; escaped points stop moving (so nothing
-- overflows) and stop counting.  A large R2 makes the smooth count exact.
local R2 = 256.0
local UNROLL = 8
local step = lm.compile(function(zr, zi, cr, ci, n)
  for _ = 1, UNROLL do
    local zr2, zi2 = zr * zr, zi * zi
    local alive = (zr2 + zi2):lt(R2)
    local next_re = zr2 - zi2 + cr
    local next_im = zr * zi * 2 + ci
    zr = lm.where(alive, next_re, zr)
    zi = lm.where(alive, next_im, zi)
    n = n + alive:astype("f32")
  end
  return zr, zi, n
end)

local zr, zi, cr, ci
if mandelbrot then
  zr, zi, cr, ci = lm.zeros{H, W}, lm.zeros{H, W}, re, im
else
  zr, zi, cr, ci = re, im, lm.full({H, W}, c_re), lm.full({H, W}, c_im)
end
local n = lm.zeros{H, W}
for _ = 1, math.ceil(iters / UNROLL) do
  zr, zi, n = lm.eval(step(zr, zi, cr, ci, n))
end

-- smooth iteration count: n + 1 - log2(log|z|); points that never escaped
-- are black
local mag2 = zr * zr + zi * zi
local escaped = mag2:ge(R2)
local mu = n + 1 - (mag2:log() * 0.5):log() / math.log(2)
local t = (mu:maximum(0) + 1):log():reshape{1, H, W}

-- Inigo Quilez's cosine palette: a + b cos(2 pi (c t + d)), per channel
local function col(v) return lm.tensor(v):reshape{3, 1, 1} end
local a, b = col{0.5, 0.5, 0.5}, col{0.5, 0.5, 0.5}
local c, d = col{1.0, 1.0, 1.0}, col{0.0, 0.10, 0.20}
local rgb = a + b * ((c * t + d) * (2 * math.pi)):cos()
rgb = lm.where(escaped:reshape{1, H, W}, rgb, 0)

lm.image.write_png(out, rgb, {level = 6})
print(string.format("%s  %dx%d  %s  %d iterations  %.1f%% escaped  device %s",
  out, W, H, mandelbrot and "mandelbrot" or
  string.format("julia c=%g%+gi", c_re, c_im), iters,
  100 * escaped:astype("f32"):mean():item(), lm.device()))
