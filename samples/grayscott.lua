-- grayscott.lua - Gray-Scott reaction-diffusion: two chemicals U and V on
-- a torus, U + 2V -> 3V, U fed at rate F, V removed at rate F + k.  One
-- compiled step (a 3x3 Laplacian as a grouped convolution, then the
-- reaction as fused elementwise kernels) runs thousands of times.
--
--   build/lumen samples/grayscott.lua [out.png] [seed]
--   LUMEN_DEVICE=vulkan build/lumen samples/grayscott.lua
-- Environment: GS_SIZE (256), GS_STEPS (4000), GS_F (0.037), GS_K (0.06);
-- F/k pairs to try: 0.037/0.06 (labyrinth), 0.055/0.062 (coral),
-- 0.03/0.062 (spots), 0.014/0.054 (moving waves).
local lm = require "lumen"

local out = arg and arg[1] or "grayscott.png"
local seed = tonumber(arg and arg[2]) or 1
local N = tonumber(os.getenv("GS_SIZE")) or 256
local steps = tonumber(os.getenv("GS_STEPS")) or 4000
local F = tonumber(os.getenv("GS_F")) or 0.037
local K = tonumber(os.getenv("GS_K")) or 0.06
local Du, Dv = 1.0, 0.5          -- diffusion rates (Karl Sims's settings)

-- the 3x3 Laplacian (centre -1, sides 0.2, corners 0.05), once per chemical
local lap = lm.tensor{{0.05, 0.2, 0.05}, {0.2, -1, 0.2}, {0.05, 0.2, 0.05}}
local kernel = lap:reshape{1, 1, 3, 3}:broadcast_to{2, 1, 3, 3}:contiguous()
local rates = lm.tensor{Du, Dv}:reshape{1, 2, 1, 1}

-- wrap one row/column around each edge so the field is a torus
local function wrap(x)
  x = lm.concat({x:slice(3, -1, -1), x, x:slice(3, 1, 1)}, 3)
  return lm.concat({x:slice(4, -1, -1), x, x:slice(4, 1, 1)}, 4)
end

local UNROLL = 10
local step = lm.compile(function(uv)        -- uv: [1, 2, N, N]
  for _ = 1, UNROLL do
    local diffusion = lm.conv2d(wrap(uv), kernel, nil, {groups = 2}) * rates
    local u, v = uv:slice(2, 1, 1), uv:slice(2, 2, 2)
    local uvv = u * v * v
    local du = uvv:neg() + (1 - u) * F
    local dv = uvv - v * (F + K)
    uv = uv + diffusion + lm.concat({du, dv}, 2)
  end
  return uv
end)

-- start: U = 1 everywhere, V = 1 in a few random 8x8 blocks and the middle one
local blocks = lm.rand({1, 1, N // 8, N // 8}, {seed = seed}):gt(0.93):astype("f32"):eval()
blocks[{1, 1, N // 16 + 1, N // 16 + 1}] = 1
local v0 = lm.upsample(blocks, {scale_factor = 8, mode = "nearest"})
local uv = lm.concat({1 - v0 * 0.5, v0 * 0.25}, 2)
for _ = 1, math.ceil(steps / UNROLL) do
  uv = step(uv):eval()
end

-- colour V: dark blue where it is absent, through teal to warm white
local v = (uv[1][2] * 3):clamp(0, 1):reshape{1, N, N}
local low = lm.tensor{0.02, 0.05, 0.15}:reshape{3, 1, 1}
local mid = lm.tensor{0.05, 0.55, 0.60}:reshape{3, 1, 1}
local high = lm.tensor{1.00, 0.93, 0.75}:reshape{3, 1, 1}
local lower = low + (mid - low) * (v * 2):clamp(0, 1)
local rgb = lower + (high - mid) * (v * 2 - 1):clamp(0, 1)
lm.image.write_png(out, rgb, {level = 6})
print(string.format("%s  %dx%d  %d steps  F=%g k=%g  V mean %.4f std %.4f  device %s",
  out, N, N, steps, F, K, uv[1][2]:mean():item(), uv[1][2]:std():item(),
  lm.device()))
