-- test_inpaint.lua - issue 37's inpainting from Lua (pipe:generate{init=,
-- mask=, mask_blur=, mask_overlay=} over models/sd_inpaint.c;
-- tests/test_sd_inpaint.c checks every case in C): a 9-channel and a
-- 4-channel case against diffusers' inpaint pipelines (tests/ref/gen_inpaint.py,
-- its draws replayed through noise=: -1 the init image's VAE sample, 0 the
-- noise, -2 the masked image's), the overlay keeping the init image's pixels
-- outside the mask, the options' errors.
local T, lm = ...
local test, ok, raises, same = T.test, T.ok, T.raises, T.same
local D, B, R = "tests/ref/diffusion/", (os.getenv("BUILD") or "build") .. "/ref/diffusion/",
  "tests/ref/inpaint/ref_inpaint.safetensors"
local f = io.open(B .. "sd1_inpaint/model_index.json", "rb")
if not f then
  print("test_inpaint.lua: " .. B .. "sd1_inpaint absent (make inpaint-fixtures): skipped")
  return
end
f:close()

local PROMPT, NEGATIVE = "a photo of an astronaut riding a horse", "blurry, low quality"
local function maxerr(a, b) return (a:astype("f32") - b:astype("f32")):abs():max():item() end
local ref, sd4, sd9
local function setup()
  if ref then return end
  ref = lm.load(R)
  sd4 = lm.models.load(D .. "sd1", {dtype = "f32", device = "cpu", tiling = "off"})
  sd9 = lm.models.load(B .. "sd1_inpaint", {dtype = "f32", device = "cpu", tiling = "off"})
end
local function case(name, sampler, strength, t)
  local keys = {[-1] = ".init_sample", [0] = ".noise", [-2] = ".masked_sample"}
  local o = {prompt = PROMPT, negative = NEGATIVE, steps = 4, cfg = 7, sampler = sampler, strength = strength,
             init = ref["init"], mask = ref["mask"],
             noise = function(k, shape) return ref[name .. keys[k]]:reshape(shape) end}
  for k, v in pairs(t or {}) do o[k] = v end
  return o
end

test("inpaint: 9-channel and 4-channel against diffusers' StableDiffusionInpaintPipeline", function()
  setup()
  for _, c in ipairs{{sd9, "sd9_s06", "euler", 0.6}, {sd4, "sd4_dpm", "dpm++2m", 0.75}} do
    local p, name, sampler, strength = table.unpack(c)
    local img = p:generate(case(name, sampler, strength))
    same(img.shape, {3, 32, 32}, name .. " size")
    local e = maxerr(img, ref[name .. ".image"])
    ok(e <= 1e-3, ("%s: max abs error %g"):format(name, e))
  end
  -- the check can fail: without the mask the 4-channel run is plain img2img
  local plain = case("sd4_dpm", "dpm++2m", 0.75)
  plain.mask = nil
  ok(maxerr(sd4:generate(plain), ref["sd4_dpm.image"]) > 1e-2, "img2img against the inpainting reference")
end)

test("inpaint: mask_overlay keeps the init image outside the mask; mask_blur is the blurred mask's case", function()
  setup()
  local img = sd4:generate(case("sd4_blur", "euler", 0.6, {mask_blur = 2}))
  ok(maxerr(img, ref["sd4_blur.image"]) <= 1e-3, "mask_blur 2")
  local ov = sd4:generate(case("sd4_s06", "euler", 0.6, {mask_overlay = true}))
  -- rows 23 to 31 (0-based) are outside the mask (its lowest row, 22, is 120/255: kept)
  local d = (ov - ref["init"])[{{}, {24, 32}, {}}]:abs():max():item()
  ok(d == 0, "outside the mask: the init image's pixels, max abs difference " .. d)
  ok((ov - ref["init"])[{{}, {8, 22}, {11, 27}}]:abs():max():item() > 1e-2, "inside: repainted")
end)

test("inpaint: inpaint_full_res keeps the init image outside the mask's padded box", function()
  setup()
  local m = lm.zeros{1, 32, 32}
  m[{{}, {13, 20}, {14, 21}}] = 1
  local img = sd9:generate{prompt = PROMPT, steps = 3, sampler = "euler", strength = 1, seed = 2, init = ref["init"],
                           mask = m, inpaint_full_res = true, inpaint_padding = 3}
  same(img.shape, {3, 32, 32}, "the init's size")
  local d = (img - ref["init"])[{{}, {1, 9}, {}}]:abs():max():item()
  ok(d == 0, "rows above the box: the init's pixels, max abs difference " .. d)
  ok((img - ref["init"])[{{}, {13, 20}, {14, 21}}]:abs():max():item() > 1e-2, "the mask repainted")
end)

test("inpaint: a mask and an init image of other sizes are resized (A1111's Just resize)", function()
  setup()
  -- a 16x32 mask resized to the init image's 32x32; the init resized to width and height
  local img = sd4:generate{prompt = "a", steps = 2, seed = 1, init = ref["init"], mask = lm.zeros{1, 16, 32} + 1}
  same(img.shape, {3, 32, 32}, "the init image's size")
  local big = sd4:generate{prompt = "a", steps = 2, seed = 1, init = ref["init"], size = "64x48"}
  same(big.shape, {3, 48, 64}, "size= resizes the init image")
end)

test("inpaint: errors name what is wrong", function()
  setup()
  raises(function() sd4:generate{prompt = "a", steps = 2, mask = ref["mask"]} end, "a mask without an init image")
  raises(function() sd9:generate{prompt = "a", steps = 2, size = 32} end, "its UNet takes 9 input channels")
  raises(function() sd4:generate{prompt = "a", steps = 2, init = ref["init"], mask = lm.zeros{1, 0, 32}} end,
         "mask: empty")
  raises(function() sd4:generate{prompt = "a", steps = 2, init = ref["init"], mask = ref["mask"], mask_blur = 300} end,
         "mask blur 300")
  raises(function() sd4:generate{prompt = "a", steps = 2, init = ref["init"], mask = "m.png"} end, "mask: expected a tensor")
  raises(function() sd4:generate{prompt = "a", steps = 2, init = ref["init"], inpaint_full_res = true} end,
         "inpaint_full_res) without a mask")
  raises(function() sd4:generate{prompt = "a", steps = 2, init = ref["init"], mask = lm.zeros{1, 32, 32},
                                 inpaint_full_res = true} end, "the mask has no white pixel")
end)
