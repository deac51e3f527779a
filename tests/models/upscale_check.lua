-- tests/models/upscale_check.lua DIR MODELS - checks the files
-- tests/models/upscale.sh made with `lumen upscale` and `lumen convert`.
local T, M = arg[1], arg[2]
local function png(name)
  local t, text = lm.image.read_png(T .. "/" .. name, {dtype = "f32"})
  return t, text
end
local input = png("in16.png")
local tiled, text = png("tiled.png")
local whole = png("whole.png")
local conv = png("conv.png")
-- shapes: RGBA kept, scale 2
assert(tiled.shape[1] == 4 and tiled.shape[2] == 180 and tiled.shape[3] == 200,
       "tiled output shape " .. tostring(tiled))
-- 16-bit in, 16-bit out: values off the 8-bit grid exist
local raw = lm.image.read_png(T .. "/tiled.png")
assert(raw.dtype == "i32", "16-bit output expected, got " .. raw.dtype)
-- tiles match the untiled run within 1/255
local seam = (tiled - whole):abs():max():item()
assert(seam <= 1 / 255, ("tiled vs untiled: %g > 1/255"):format(seam))
print(("tiled vs untiled max %.3g (in 8-bit units %.3g)"):format(seam, seam * 255))
-- alpha: the ramp, bilinearly resized (mean and ends kept)
local a_in, a_out = input:slice(1, 4, 4), tiled:slice(1, 4, 4)
assert(math.abs(a_in:mean():item() - a_out:mean():item()) < 2e-3, "alpha mean changed")
assert(math.abs(a_out:min():item() - 0.2) < 0.01 and math.abs(a_out:max():item() - 1) < 0.01,
       "alpha range changed")
-- tEXt chunks
assert(text["lumen.model"] == "esrgan-medium", "tEXt lumen.model: " .. tostring(text["lumen.model"]))
assert(text["lumen.scale"] == "2", "tEXt lumen.scale: " .. tostring(text["lumen.scale"]))
-- the converted model gives the same pixels
assert((conv - whole):abs():max():item() == 0, "converted model differs")
-- the folder holds both files
local f1 = io.open(T .. "/outdir/in16.png", "rb")
local f2 = io.open(T .. "/outdir/fixture.png", "rb")
assert(f1 and f2, "outdir lacks a file")
f1:close(); f2:close()
-- lm.models from Lua: model(x) on [C,H,W] and [N,C,H,W] agrees with upscale
local m <close> = lm.models.load("esrgan-medium", {scale = 2})
assert(m.scale == 2 and m.range == 255 and m.layers == 64, "fields " .. tostring(m))
local rgb = input:slice(1, 1, 3)
local y3 = m(rgb)
local y4 = m(rgb:reshape{1, 3, 90, 100})
assert(y3.shape[1] == 3 and y3.shape[2] == 180, "model(x) shape")
assert((y4:reshape{3, 180, 200} - y3):abs():max():item() == 0, "batched call differs")
assert((y3:clamp(0, 1) - whole:slice(1, 1, 3)):abs():max():item() < 1e-5, "model(x) differs from upscale")
local back <close> = lm.models.load(T .. "/medium2.safetensors")
assert(back.range == 255 and back.scale == 2, "converted metadata")
assert((back(rgb) - y3):abs():max():item() == 0, "converted model(x) differs")
print("all checks passed")
