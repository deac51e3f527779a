-- test_hires.lua - issue 37's hires fix and variation seeds from Lua
-- (pipe:generate{hires=, variation_seed=, variation_strength=} over
-- models/sd_hires.c and models/sd_pipeline.c; tests/test_sd_hires.c checks
-- them in C): the hires fix against diffusers' txt2img -> interpolate ->
-- img2img composition (tests/ref/gen_hires.py, its draws replayed through
-- noise=), its target sizes and upscalers, a variation of strength 1 equal
-- to the variation seed's image, the options' errors.
local T, lm = ...
local test, eq, ok, raises, same = T.test, T.eq, T.ok, T.raises, T.same
local D, H = "tests/ref/diffusion/", "tests/ref/hires/"
local f = io.open(D .. "sd1/model_index.json", "rb")
if not f then
  print("test_hires.lua: tests/ref/diffusion fixtures absent: skipped")
  return
end
f:close()

local PROMPT, NEGATIVE = "a photo of an astronaut riding a horse", "blurry, low quality"
local function maxerr(a, b) return (a:astype("f32") - b:astype("f32")):abs():max():item() end
local pipe
local function setup()
  if pipe then return end
  pipe = lm.models.load(D .. "sd1", {dtype = "f32", device = "cpu", tiling = "off"})
end
local function opts(t)
  local o = {prompt = PROMPT, negative = NEGATIVE, steps = 4, cfg = 7, sampler = "dpm++2m", size = 64}
  for k, v in pairs(t) do o[k] = v end
  return o
end

test("hires: against diffusers' txt2img -> interpolate -> img2img (latent nearest x2, bilinear x1.5)", function()
  setup()
  local ref = lm.load(H .. "ref_hires.safetensors")
  for _, c in ipairs{{"nearest", "latent-nearest", 2, 4, 0.5, 64}, {"bilinear", "latent", 1.5, 6, 0.55, 48}} do
    local name, up, scale, steps, denoise, size = table.unpack(c)
    local img = pipe:generate(opts{latents = ref["latents"],
      hires = {scale = scale, steps = steps, denoise = denoise, upscaler = up},
      noise = function(k, shape) if k == 0 then return ref[name .. ".noise"]:reshape(shape) end end})
    same(img.shape, {3, size, size}, name .. " size")
    local e = maxerr(img, ref[name .. ".image"])
    ok(e <= 1e-3, ("%s: max abs error %g"):format(name, e))
  end
  -- the check can fail: the other latent mode is far from the nearest reference
  local other = pipe:generate(opts{latents = ref["latents"], hires = {scale = 2, steps = 4, denoise = 0.5},
    noise = function(k, shape) if k == 0 then return ref["nearest.noise"]:reshape(shape) end end})
  ok(maxerr(other, ref["nearest.image"]) > 1e-2, "bilinear against the nearest reference")
end)

test("hires: size= and the upscalers give the target size; 1.3 rounds down to the VAE's scale", function()
  setup()
  same(pipe:generate(opts{seed = 1, steps = 2, hires = {size = "80x0", denoise = 0.5}}).shape, {3, 80, 80})
  -- the tiny VAE's scale is 2: 64 * 1.3 = 83.2 -> 83 -> 82 (A1111's target // 8 on SD's 8)
  same(pipe:generate(opts{seed = 1, steps = 2, hires = {scale = 1.3, denoise = 0.5}}).shape, {3, 82, 82})
  local m = pipe:generate(opts{seed = 1, steps = 2, hires = {scale = 2, denoise = 0.5,
                                                             upscaler = "tests/ref/fixtures/tfjs/model.json"}})
  same(m.shape, {3, 128, 128})
end)

test("variation seeds: strength 1 is the variation seed's image, 0 the seed's", function()
  setup()
  local v1 = pipe:generate(opts{seed = 1, steps = 3, variation_seed = 9, variation_strength = 1})
  local s9 = pipe:generate(opts{seed = 9, steps = 3})
  eq(maxerr(v1, s9), 0, "strength 1")
  local v0 = pipe:generate(opts{seed = 1, steps = 3, variation_seed = 9, variation_strength = 0})
  local s1 = pipe:generate(opts{seed = 1, steps = 3})
  eq(maxerr(v0, s1), 0, "strength 0")
  ok(maxerr(pipe:generate(opts{seed = 1, steps = 3, variation_seed = 9, variation_strength = 0.5}), s1) > 0.01)
  -- seed_resize_from: the image's own size is the plain image, another size another
  eq(maxerr(pipe:generate(opts{seed = 1, steps = 3, seed_resize_from = "64x64"}), s1), 0, "resize from own size")
  ok(maxerr(pipe:generate(opts{seed = 1, steps = 3, seed_resize_from = "32x48"}), s1) > 0.01, "resize from 32x48")
end)

test("hires, variation: errors name the option", function()
  setup()
  raises(function() pipe:generate(opts{hires = {scal = 2}}) end, "hires: unknown option 'scal'")
  raises(function() pipe:generate(opts{hires = {scale = 0}}) end, "scale 0")
  raises(function() pipe:generate(opts{hires = {denoise = 0.1}}) end, "strength 0.1 of 4 steps")
  raises(function() pipe:generate(opts{hires = {upscaler = "no-such-upscaler"}}) end, "no-such-upscaler")
  raises(function() pipe:generate(opts{hires = {size = "big"}}) end, "size big")
  raises(function() pipe:generate(opts{variation_strength = 2}) end, "variation strength 2")
  raises(function() pipe:generate(opts{variation_seed = -1}) end, "variation_seed")
  raises(function() pipe:generate(opts{seed_resize_from = "64x"}) end, "seed_resize_from")
end)
