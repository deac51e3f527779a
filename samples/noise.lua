-- noise.lua - fractal (fBm) value noise, coloured as a map of islands.
-- Each octave is a random lattice smoothly interpolated to the image: the
-- interpolation is separable, so an octave is two matrix products,
-- noise = Ay * lattice * Ax^T, where Ax[x, j] is the smoothstep weight of
-- lattice column j at pixel x.  Octaves double the frequency and halve
-- the amplitude.
--
--   build/lumen samples/noise.lua [out.png] [seed]
--   LUMEN_DEVICE=vulkan build/lumen samples/noise.lua
-- Environment: NOISE_SIZE (512), NOISE_OCTAVES (7), NOISE_CELLS (lattice
-- cells across the first octave, 4), NOISE_STYLE (map, marble or clouds).
local lm = require "lumen"

local out = arg and arg[1] or "noise.png"
local seed = tonumber(arg and arg[2]) or 1
local N = tonumber(os.getenv("NOISE_SIZE")) or 512
local octaves = tonumber(os.getenv("NOISE_OCTAVES")) or 7
local cells = tonumber(os.getenv("NOISE_CELLS")) or 4
local style = os.getenv("NOISE_STYLE") or "map"

-- [n, cells + 1] weights: pixel i sits at u = i * cells / n on the lattice;
-- weight of lattice point j is 1 - S(|u - j|) within one cell, S the smoothstep
local function weights(n, c)
  local u = (lm.arange(n):astype("f32") * (c / n)):reshape{n, 1}
  local j = lm.arange(c + 1):astype("f32"):reshape{1, c + 1}
  local d = (u - j):abs():minimum(1)
  return 1 - d * d * (3 - 2 * d)
end

local function octave(c, octave_seed)
  local lattice = lm.rand({c + 1, c + 1}, {seed = octave_seed})
  local w = weights(N, c)
  return w:matmul(lattice):matmul(w.T)
end

local h, amp, total = lm.zeros{N, N}, 1.0, 0.0
for o = 1, octaves do
  local n = octave(cells * 2 ^ (o - 1), seed * 100 + o)
  h, total, amp = h + n * amp, total + amp, amp * 0.5
end
h = (h / total):reshape{1, N, N}
-- stretch to use the full range
h = (h - h:min()) / (h:max() - h:min())
if style == "marble" then
  -- Perlin's marble: stripes along x, bent by the noise
  local x = lm.linspace(0, 1, N):reshape{1, 1, N}
  h = ((x * 6 + h * 3) * math.pi):sin():abs():sqrt()
end

-- a colour ramp: stops (height, r, g, b), linear between them
local ramps = {
  map = {{0.00, 0.02, 0.05, 0.25}, {0.45, 0.10, 0.35, 0.70}, {0.50, 0.85, 0.80, 0.55},
    {0.56, 0.25, 0.55, 0.20}, {0.72, 0.15, 0.35, 0.12}, {0.85, 0.45, 0.40, 0.35},
    {0.95, 0.97, 0.97, 1.00}},
  marble = {{0.0, 0.12, 0.10, 0.10}, {0.5, 0.55, 0.50, 0.46}, {1.0, 0.96, 0.94, 0.90}},
  clouds = {{0.0, 0.25, 0.45, 0.85}, {0.5, 0.55, 0.7, 0.95}, {1.0, 1.0, 1.0, 1.0}},
}
local ramp = assert(ramps[style], "NOISE_STYLE: map, marble or clouds")
local function rgb_of(stop)
  return lm.tensor{stop[2], stop[3], stop[4]}:reshape{3, 1, 1}
end
local rgb = rgb_of(ramp[1]) * 1
for k = 1, #ramp - 1 do
  local a, b = ramp[k], ramp[k + 1]
  local t = ((h - a[1]) / (b[1] - a[1])):clamp(0, 1)
  rgb = rgb + (rgb_of(b) - rgb_of(a)) * t
end

lm.image.write_png(out, rgb, {level = 6})
print(string.format("%s  %dx%d  %d octaves  %s  mean height %.3f  device %s",
  out, N, N, octaves, style, h:mean():item(), lm.device()))
