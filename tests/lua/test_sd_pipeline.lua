-- test_sd_pipeline.lua - the Stable Diffusion pipeline from Lua
-- (lua/l_diffusion.c over models/sd_pipeline.c; tests/test_sd_pipeline.c
-- checks every sampler, SD 2.x and SDXL against diffusers): lm.models.load on
-- the tiny SD 1.x folder of tests/ref/diffusion/, its stages (tokenizer,
-- encode_prompt, unet, vae) and a whole 4-step run against diffusers'
-- outputs, a batch equal to single runs, the sampler table's rows (each runs
-- under both its names), help() docstrings, errors.
local T, lm = ...
local test, eq, ok, raises = T.test, T.eq, T.ok, T.raises
local D = "tests/ref/diffusion/"
local f = io.open(D .. "ref_pipe.safetensors", "rb")
if not f then
  print("test_sd_pipeline.lua: tests/ref/diffusion fixtures absent (tests/ref/gen_diffusion.py): skipped")
  return
end
f:close()

local PROMPT, NEGATIVE = "a photo of an astronaut riding a horse", "blurry, low quality"
local function maxerr(a, b) return (a:astype("f32") - b:astype("f32")):abs():max():item() end
local ref, pipe
local function setup()
  if pipe then return end
  ref = lm.load(D .. "ref_pipe.safetensors")
  pipe = lm.models.load(D .. "sd1", {dtype = "f32", device = "cpu", tiling = "off"})
end

test("sd pipeline: lm.models.load on a diffusers folder, fields", function()
  setup()
  eq(pipe.family, "sd1", "family"); eq(pipe.dtype, "f32", "dtype"); eq(pipe.name, "sd1", "name")
  eq(pipe.latent_channels, 4, "latent channels"); eq(pipe.vae_scale, 2, "vae scale")
  eq(pipe.tokenizer_2, nil, "no second tokenizer on SD 1.x")
  local ids = pipe.tokenizer:encode(PROMPT)
  eq(#ids, 77, "77 ids")
end)

test("sd pipeline: encode_prompt, unet and vae against diffusers", function()
  setup()
  local e = pipe:encode_prompt({NEGATIVE, PROMPT})
  local err = maxerr(e, ref["sd1.prompt_embeds"])
  ok(err <= 1e-4, "prompt embeds error " .. err)
  local u = lm.load(D .. "ref_unet.safetensors")
  local out = pipe.unet(u["sd1.x"], u["sd1.t"], u["sd1.ctx"])
  local uerr = maxerr(out, u["sd1.out"]) / u["sd1.out"]:abs():max():item()
  ok(uerr <= 1e-4, "unet relative error " .. uerr)
  local v = lm.load(D .. "ref_vae.safetensors")
  local mean = pipe.vae:encode(v["sd1.img"])
  ok(maxerr(mean, v["sd1.mean"]) <= 1e-3, "vae mean")
  ok(maxerr(pipe.vae:decode(v["sd1.z"]), v["sd1.dec"]) <= 1e-3, "vae decode")
end)

test("sd pipeline: generate equals diffusers (euler a, its draws)", function()
  setup()
  local draws = ref["sd1.euler_a.noise"]
  local steps = 0
  local img = pipe:generate{prompt = PROMPT, negative = NEGATIVE, steps = 4, cfg = 7,
                            sampler = "euler_a", latents = ref["sd1.latents"]:reshape{1, 4, 8, 8},
                            noise = function(k, shape) return draws[k]:reshape(shape) end,
                            progress = function(i, n) steps = n; eq(i <= n, true) end}
  eq(img.ndim, 3, "one image is [3,H,W]"); eq(img.shape[2], 16, "height: 8x8 latents, a VAE of scale 2")
  eq(steps, 4, "progress saw 4 steps")
  local err = maxerr(img, ref["sd1.euler_a.image"])
  print(string.format("    sd1 euler_a from Lua: image max abs error %.3g", err))
  ok(err <= 1e-3, "image error " .. err)
end)

test("sd pipeline: a batch gives the bytes of single runs", function()
  setup()
  local args = {prompt = PROMPT, negative = NEGATIVE, steps = 2, sampler = "euler_a", size = 64}
  args.seed, args.batch = {21, 22}, 2
  local both = pipe:generate(args)
  eq(both.ndim, 4, "batch= gives [B,3,H,W]")
  args.batch = nil
  for i, s in ipairs({21, 22}) do
    args.seed = s
    eq(maxerr(both[i], pipe:generate(args)), 0, "image " .. i)
  end
end)

test("sd pipeline: lm.diffusion.samplers() lists the table, generate takes every row", function()
  setup()
  local rows, seen = lm.diffusion.samplers(), {}
  ok(#rows >= 8, "rows: " .. #rows)
  for _, r in ipairs(rows) do
    ok(not seen[r.name], "name once: " .. r.name)
    seen[r.name] = r
    ok(type(r.a1111) == "string" and type(r.schedule) == "string" and type(r.kind) == "string",
       "names of " .. r.name)
    ok(r.order_min >= 1 and r.order_min <= r.order_max, "orders of " .. r.name)
    ok(#r.predictions >= 1 and r.predictions[1] == "epsilon", "predictions of " .. r.name)
    ok(r.diffusers:find("Scheduler", 1, true), "diffusers class of " .. r.name)
    -- both of its names run (2 steps; ancestral rows draw from the seed)
    local a1111 = r.a1111 .. (r.sigmas == "karras" and " Karras" or r.sigmas == "exponential" and " Exponential" or "")
    local img = pipe:generate{prompt = PROMPT, steps = 2, sampler = a1111, size = 64, seed = 5}
    eq(maxerr(img, pipe:generate{prompt = PROMPT, steps = 2, sampler = r.name, size = 64, seed = 5}), 0,
       r.name .. " and " .. a1111)
  end
  eq(seen.lms.a1111, "LMS", "lms's A1111 name"); eq(seen.lms_karras.schedule, "Karras", "its schedule type")
  eq(seen.lms.order_max, 4, "LMS's order"); eq(seen.euler_a.ancestral, true, "euler_a is ancestral")
  eq(seen.ddim.sigmas, "none", "ddim has no sigmas"); eq(seen["dpm++2m_karras"].kind, "dpm++2m", "kind")
  eq(seen.euler_exponential.sigmas, "exponential", "euler_exponential's sigmas")
  eq(seen["dpm++2m_sde_karras"].a1111, "DPM++ 2M SDE", "the SDE's A1111 name"); eq(seen.heun.order_min, 2, "Heun's order")
end)

test("sd pipeline: help and errors", function()
  setup()
  ok(lm.diffusion.pipeline ~= nil and lm.diffusion.generate ~= nil, "functions")
  raises(function() pipe:generate{prompt = "x", sampler = "dpm++3m_sde", steps = 1} end, "unknown sampler")
  raises(function() pipe:generate{prompt = "x", sampler = "dpm++3m_sde", steps = 1} end, "generate: unknown sampler", "no doubled colon (lm_error_prefix adds it)")
  raises(function() pipe:generate{prompt = "x", size = 61, steps = 1} end, "multiples of")
  raises(function() pipe:generate{prompt = "x", bogus = 1} end, "unknown option")
  raises(function() pipe:generate{prompt = "x", steps = 1, sampler = "euler_a", size = 64,
                                  noise = function() error("boom") end} end, "boom")
  raises(function() lm.models.load(D .. "no_such_model") end)
  local p2 = lm.diffusion.pipeline(D .. "sd1", {dtype = "f32", device = "cpu"})
  local unet = p2.unet
  p2:free()
  raises(function() unet(ref["sd1.latents"], 1, ref["sd1.prompt_embeds"]) end, "freed")
end)

-- issue 34, item 4: a value out of range, or not a whole number, is an error
-- naming the option and its range (models/family.h's table, the check the
-- CLI and the core make too), never narrowed or read as the default
test("sd pipeline: options out of range are errors naming the option and the range", function()
  setup()
  local base = {prompt = "x", sampler = "euler", size = 16}
  local function gen(extra)
    local a = {}
    for k, v in pairs(base) do a[k] = v end
    for k, v in pairs(extra) do a[k] = v end
    return pipe:generate(a)
  end
  raises(function() gen{steps = 4294967298} end, "steps 4294967298: expected a whole number from 1 to 10000")
  raises(function() gen{steps = 0} end, "steps 0: expected a whole number from 1 to 10000")
  raises(function() gen{steps = 2, batch = 4294967297} end, "batch 4294967297: expected a whole number from 1 to 4096")
  raises(function() gen{steps = 2, clip_skip = 2^32} end, "clip_skip 4294967296: expected a whole number from 0 to 63")
  raises(function() gen{steps = 2, clip_skip = -1} end, "clip_skip -1")
  raises(function() gen{steps = 2, cfg = -1} end, "cfg -1: expected a number from 0 to 1000")
  raises(function() gen{steps = 2, strength = 0} end, "strength 0: expected a number in (0, 1]")
  raises(function() gen{steps = 2, seed = -1} end, "seed -1: expected a whole number >= 0")
  raises(function() gen{steps = 2, seed = {1.5}} end, "seeds[1] = 1.5")
  raises(function() gen{steps = 2, size = {-40, -40}} end, "size -40: expected a whole number from 8 to 65536")
  raises(function() gen{steps = 2, size = 0} end, "size 0: expected a whole number from 8 to 65536")
  raises(function() gen{steps = 2, size = {64.5, 64}} end, "size 64.5: expected")
  for _, s in ipairs({"0x0", "-64x-64", "64x64junk", "64x", "x64", "", "64 x 64"}) do
    raises(function() gen{steps = 2, size = s} end, 'size "' .. s .. '": expected WxH or N')
  end
  raises(function() pipe:encode_prompt("x", {clip_skip = 2^32}) end, "clip_skip 4294967296")
  -- a size table is {W, H} or {N}; a tensor option that is not one names the option
  raises(function() gen{steps = 2, size = {8, 8, 8}} end, "pipe:generate: size: a table of 3 values: expected {W, H} or {N}")
  raises(function() gen{steps = 2, size = {}} end, "size: a table of 0 values")
  raises(function() gen{steps = 2, init = 5} end,
         "pipe:generate: init: expected a tensor [3,H,W] or [B,3,H,W] in 0..1, got 5")
  raises(function() gen{steps = 2, latents = "x"} end, 'pipe:generate: latents: expected a tensor [B,C,h,w] (the initial latents), got "x" (a string)')
  raises(function() gen{steps = 2, refs = {lm.zeros{3, 16, 16}, true}} end, "pipe:generate: refs[2]: expected a tensor [3,H,W] in 0..1, got boolean")
  raises(function() gen{steps = 2, refs = 5} end, "pipe:generate: refs: expected a tensor")
  -- the load's prewarm plans a size and a sampler: checked as generate's
  raises(function() lm.models.load(D .. "sd1", {device = "cpu", prewarm_size = 4}) end,
         "lm.diffusion.pipeline: prewarm_size 4: expected a whole number from 8 to 65536")
  raises(function() lm.models.load(D .. "sd1", {device = "cpu", prewarm_sampler = "dpm++3m_sde"}) end,
         'lm.diffusion.pipeline: prewarm_sampler: unknown sampler "dpm++3m_sde"')
  raises(function() lm.models.load(D .. "sd1", {tokenizer = D .. "sd1"}) end,
         "sd1 is a diffusers folder, which has its own tokenizer: tokenizer = DIR (" .. D .. "sd1) is for single-file checkpoints")
  -- in range: "WxH", "N" and {N} are squares or the given size
  eq(gen{steps = 1, size = "16"}.shape[3], 16, '"16" is 16x16')
  eq(gen{steps = 1, size = "16x32"}.shape[3], 16, '"16x32" is 16 wide')
  eq(gen{steps = 1, size = {16}}.shape[2], 16, "{16} is 16x16")
end)

test("sd pipeline: pipe.defaults is the family's row", function()
  setup()
  local d = pipe.defaults
  eq(d.steps, 20, "steps"); eq(d.cfg, 7, "cfg"); eq(d.sampler, "dpm++2m_karras", "sampler")
  eq(d.strength, 0.8, "strength"); eq(d.clip_skip, 0, "clip_skip"); eq(d.size, pipe.default_size, "size")
end)

-- issue 34, item 11: a false entry of negative = {...} is that image's None
-- (zeros on SDXL, as a missing negative), "" the empty prompt encoded; a
-- batch mixing them gives the bytes of single runs
test("sd pipeline: negative false is None, \"\" the empty prompt (SDXL tells them apart)", function()
  local xl = lm.models.load(D .. "sdxl", {dtype = "f32", device = "cpu"})
  local a = {prompt = PROMPT, steps = 2, sampler = "euler", seed = 3}
  local none, empty = xl:generate(a), xl:generate{prompt = PROMPT, steps = 2, sampler = "euler", seed = 3, negative = ""}
  ok(maxerr(none, empty) > 0, "None and \"\" differ on SDXL")
  local both = xl:generate{prompt = PROMPT, steps = 2, sampler = "euler", seed = {3, 3}, batch = 2,
                           negative = {false, ""}}
  eq(maxerr(both[1], none), 0, "false is None")
  eq(maxerr(both[2], empty), 0, "\"\" is the empty prompt")
  raises(function() xl:generate{prompt = {true}, steps = 1} end, "entry 1 is not a string")
  raises(function() xl:generate{prompt = PROMPT, steps = 1, negative = {1}} end, "not a string or false")
  xl:free()
end)

-- issue 34, items 5 and 12: NaN an error naming the stage (the weights made
-- NaN in place), seeds named by their value, a batch's seeds in range
test("sd pipeline: NaN names its stage; seeds named by value", function()
  setup()
  raises(function() pipe:generate{prompt = "x", steps = 1, size = 16, seed = 2.5} end, "seed 2.5: expected a whole number")
  raises(function() pipe:generate{prompt = "x", steps = 1, size = 16, seed = math.maxinteger - 1, batch = 3} end,
         "the last image's seed would be 9223372036854775808")
  eq(pipe:generate{prompt = "x", steps = 1, size = 16, seed = math.maxinteger - 1, batch = 2}.shape[1], 2,
     "a batch ending on the largest seed runs")
  -- a copy of the folder whose VAE decoder ends in a NaN bias
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("cp -r " .. D .. "sd1 " .. dir))
  local f = dir .. "/vae/diffusion_pytorch_model.safetensors"
  local w = lm.load(f)
  w["decoder.conv_out.bias"] = lm.full(w["decoder.conv_out.bias"].shape, 0 / 0, w["decoder.conv_out.bias"].dtype)
  os.remove(f)
  lm.save(f, w)
  local p2 = lm.models.load(dir, {dtype = "f32", device = "cpu"})
  raises(function() p2:generate{prompt = "x", steps = 2, size = 16, seed = 1} end,
         "generate: the VAE decoder (its input: the latents / scaling_factor 0.18215) produced NaN; no image is given")
  p2:free()
  os.execute("rm -rf " .. dir)
end)
