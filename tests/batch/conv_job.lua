-- conv_job.lua [SIZE [WIDTH [LAYERS [UP]]]] - a small convolutional net as a
-- batch job, for measuring `lumen batch`'s pipeline (docs/BENCHMARKS.md,
-- "lumen batch pipeline (lavapipe)"): seeded noise [3, SIZE, SIZE] (128)
-- through LAYERS (4) 3x3 convolutions of WIDTH (32) channels with ReLU, a
-- 3-channel head, sigmoid, and an UPx (2) bilinear upsample: a [3, UP*SIZE,
-- UP*SIZE] image, so the device has a model's work and the host a real
-- PNG to encode per job.  The weights are drawn once, from fixed seeds.
local lm = require "lumen"
local args = {...}
local SIZE = tonumber(args[1]) or 128
local WIDTH = tonumber(args[2]) or 32
local LAYERS = tonumber(args[3]) or 4
local UP = tonumber(args[4]) or 2

local ws, cin = {}, 3
for l = 1, LAYERS do
  ws[l] = (lm.randn({WIDTH, cin, 3, 3}, {seed = 7000 + l}) * math.sqrt(2 / (cin * 9))):eval():keep()
  cin = WIDTH
end
local head = (lm.randn({3, WIDTH, 3, 3}, {seed = 7999}) * math.sqrt(1 / (WIDTH * 9))):eval():keep()

return function(p)
  local h = lm.randn({1, 3, SIZE, SIZE}, {seed = p.seed})
  for l = 1, LAYERS do h = lm.conv2d(h, ws[l], {padding = 1}):relu() end
  h = lm.conv2d(h, head, {padding = 1}):sigmoid()
  return lm.upsample(h, {scale_factor = UP, mode = "bilinear"}):reshape{3, UP * SIZE, UP * SIZE}
end
