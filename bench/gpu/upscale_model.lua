-- upscale_model.lua - the model alone, for bench/gpu/upscale_folder.sh:
-- medians over REPS calls (after 2 warm-up calls) of
--   whole: m(x):eval() on one [1,3,SIZE,SIZE] image, synced (as bench/gpu/esrgan.lua)
--   tiled: m:upscale(img, {tile=TILE}) of a [3,SIZE,SIZE] image (lumen upscale's
--          model part: tiles, uploads, downloads; no PNG)
--   lumen bench/gpu/upscale_model.lua MODEL SCALE DTYPE SIZE TILE REPS
local model, scale, dt = arg[1] or "esrgan-thick", tonumber(arg[2] or 2), arg[3] or "f16"
local size, tile, reps = tonumber(arg[4] or 512), tonumber(arg[5] or 256), tonumber(arg[6] or 5)
local m = lm.models.load(model, {scale = scale, dtype = dt})
local function median(f)
  local ts = {}
  for i = 1, reps + 2 do
    lm.sync(); local t0 = lm.clock()
    f()
    lm.sync(); ts[#ts + 1] = lm.clock() - t0
  end
  local s = {table.unpack(ts, 3)}; table.sort(s)
  return s[(#s + 1) // 2] * 1000
end
local x = lm.rand({1, 3, size, size}, {seed = 1}):eval()
local img = lm.rand({3, size, size}, {seed = 2}):eval()
print(string.format("RESULT model_whole %s %s x%d %d^2 %.2f ms", model, dt, scale, size,
                    median(function() m(x):eval() end)))
print(string.format("RESULT model_tiled %s %s x%d %d^2 tile=%d %.2f ms", model, dt, scale, size, tile,
                    median(function() m:upscale(img, {tile = tile}) end)))
m:free()
