-- batch_upscale.lua - every PNG of a folder, upscaled:
--   build/lumen batch samples/batch_upscale.lua --params photos/ -o 'up/{stem}.png' \
--       --sheet up/sheet.png [-- MODEL [SCALE]]
-- A folder given to --params is one job per .png in it (in name order), with
-- p.path, p.file and p.stem.  MODEL: an ESRGAN package fetched by `make
-- models` (esrgan-slim, esrgan-medium, esrgan-thick; docs/MODELS.md) or a
-- converted .safetensors, run tile by tile; "bilinear" (the default)
-- interpolates instead.  SCALE: 2 (default), 3 or 4.  The runner adds
-- resume, failures, the manifest and MPI as for any other batch.
local lm = require "lumen"
local MODEL, SCALE = ...
MODEL, SCALE = MODEL or "bilinear", tonumber(SCALE) or 2
local model = MODEL ~= "bilinear" and lm.models.load(MODEL, {scale = SCALE}) or nil

return function(p)
  local img = lm.image.read_png(p.path, {dtype = "f32"})   -- [C, H, W] in 0..1
  -- tiles of 256 input pixels: the model's working memory is one tile's
  if model then return model:upscale(img, {tile = 256, overlap = 16}):clamp(0, 1) end
  local c, h, w = img.shape[1], img.shape[2], img.shape[3]
  return lm.upsample(img:reshape{1, c, h, w}, {scale_factor = SCALE, mode = "bilinear"})
    :reshape{c, h * SCALE, w * SCALE}:clamp(0, 1)
end
