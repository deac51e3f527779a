-- batch_upscale.lua - every PNG of a folder, upscaled:
--   build/lumen batch samples/batch_upscale.lua --params photos/ -o 'up/{stem}.png' \
--       --sheet up/sheet.png [-- FACTOR]
-- A folder given to --params is one job per .png in it (in name order), with
-- p.path, p.file and p.stem.  Bilinear interpolation stands in here for a
-- super-resolution network: put the model's forward pass in upscale() (an
-- ESRGAN, once its weights load) and the runner gives it resume, failures,
-- the manifest and MPI as for any other batch.
local lm = require "lumen"
local FACTOR = tonumber((...)) or 2

local function upscale(x)   -- x [1, C, H, W] in 0..1
  return lm.upsample(x, {scale_factor = FACTOR, mode = "bilinear"})
end

return function(p)
  local img = lm.image.read_png(p.path, {dtype = "f32"})   -- [C, H, W]
  local c, h, w = img.shape[1], img.shape[2], img.shape[3]
  return upscale(img:reshape{1, c, h, w}):reshape{c, h * FACTOR, w * FACTOR}:clamp(0, 1)
end
