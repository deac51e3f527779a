-- test_dit.lua - the DiT families (Z-Image, FLUX.2-klein) from Lua: the
-- stages of a pipeline (pipe.tokenizer:chat / encode / decode,
-- pipe:encode_prompt, pipe.transformer, pipe.vae, pipe:decode_latents)
-- compose into the image pipe:generate makes, byte for byte, on the
-- fixtures of tests/ref/gen_dit.py (tests/test_dit_pipeline.c checks
-- pipe:generate against diffusers); the rows' defaults and errors.
local T, lm = ...
local test, eq, ok, raises = T.test, T.eq, T.ok, T.raises
local D = "tests/ref/dit/"

local function maxerr(a, b) return (a:astype("f32") - b:astype("f32")):abs():max():item() end

test("dit: Z-Image's stages compose into pipe:generate", function()
  local p = lm.models.load(D .. "zimage", {dtype = "f32", device = "cpu"})
  eq(p.family, "zimage", "family"); eq(p.defaults.steps, 9, "Turbo's steps"); eq(p.defaults.cfg, 0, "no guidance")
  eq(p.unet, nil, "no UNet"); ok(p.transformer ~= nil, "a transformer")
  local tok = p.tokenizer
  eq(tok:chat("dance monkey"), "<|im_start|>user\ndance monkey<|im_end|>\n<|im_start|>assistant\n",
     "Z-Image's chat text (thinking on: no think block)")
  ok(tok:chat("x", {thinking = false}):find("<think>\n\n</think>\n\n", 1, true), "thinking off")
  local ids = tok:encode(tok:chat("dance monkey"))
  eq(tok:decode(ids), tok:chat("dance monkey"), "decode(encode(x))")
  local padded, mask = tok:encode("dance", {max_length = 8})
  eq(#padded, 8, "padded"); eq(mask[8], 0, "mask 0 at the padding"); eq(padded[8], tok.pad, "pad id")
  local cap = p:encode_prompt("dance monkey", {max_sequence_length = 32})
  eq(cap.shape[1], #ids, "the prompt's tokens only"); eq(cap.shape[2], 16, "cap_feat_dim")
  -- one image by hand: the flow-matching loop of ZImagePipeline at 2 steps, 32x32
  local lat = lm.randn{1, 16, 16, 16}:astype("f32")
  local want = p:generate{prompt = "dance monkey", latents = lat, steps = 2, cfg = 0, max_sequence_length = 32}
  -- the fixture's scheduler is diffusers' default (shift 1, no dynamic
  -- shifting): the pipeline's sigmas linspace(1, 1/2, 2) as they are
  local x = lat
  local sig = {1.0, 0.5, 0}
  for i = 1, 2 do
    local t = sig[i] * 1000
    local v = p.transformer(x, (1000 - t) / 1000, cap)
    x = x + (-v:astype("f32")) * (sig[i + 1] - sig[i])
  end
  local img = p:decode_latents(x)[1]
  ok(maxerr(img, want) < 1e-5, "by hand = pipe:generate: " .. maxerr(img, want))
  raises(function() p:generate{prompt = "x", steps = 1, size = 30} end, "multiples of 4")
  raises(function() p:generate{prompt = "x", steps = 1, size = 32, cfg_truncation = 2} end, "cfg_truncation")
  p:free()
end)

test("dit: FLUX.2-klein's stages", function()
  local p = lm.models.load(D .. "klein", {dtype = "f32", device = "cpu"})
  eq(p.family, "klein-base", "is_distilled false: the base row"); eq(p.defaults.cfg, 4, "base cfg")
  ok(p.tokenizer:chat("a"):find("<think>\n\n</think>\n\n", 1, true), "Klein: thinking off")
  local e = p:encode_prompt("a dog is dancing", {max_sequence_length = 32, text_layers = {1, 2}})
  eq(e.shape[2], 32, "every token"); eq(e.shape[3], 32, "two layers of 16")
  local two = p:encode_prompt({"a", "b"}, {max_sequence_length = 8, text_layers = {1, 2}})
  eq(#two, 2, "a table for a table")
  local x = lm.randn{1, 16, 4, 4}:astype("f32")
  local v = p.transformer(x, 0.5, e)
  eq(v.shape[2], 16, "patchified channels back"); eq(v.shape[3], 4, "grid back")
  raises(function() p.transformer(x, 0.5, lm.zeros{32}) end, "context")
  raises(function() p:encode_prompt("a") end, "hidden state 9 does not exist")
  -- reference-image editing from Lua: refs = a tensor or a list, text_layers given
  local ref = lm.rand{3, 64, 64}
  local one = p:generate{prompt = "a dog", refs = ref, steps = 2, cfg = 1, size = 32, seed = 1,
                         text_layers = {1, 2}, max_sequence_length = 8}
  local list = p:generate{prompt = "a dog", refs = {ref}, steps = 2, cfg = 1, size = 32, seed = 1,
                          text_layers = {1, 2}, max_sequence_length = 8}
  eq(maxerr(one, list), 0, "a tensor and a list of one give the same image")
  local none = p:generate{prompt = "a dog", steps = 2, cfg = 1, size = 32, seed = 1, text_layers = {1, 2},
                          max_sequence_length = 8}
  ok(maxerr(one, none) > 0, "the reference image changes the image")
  raises(function() p:generate{prompt = "a", refs = lm.rand{3, 32, 32}, steps = 1, text_layers = {1, 2}} end, "64")
  p:free()
  raises(function() return p.tokenizer end, "freed")
end)

test("dit: offload = true frees the text encoder between prompts, the same bytes", function()
  local a = lm.models.load(D .. "zimage", {dtype = "f32", device = "cpu"})
  local b = lm.models.load(D .. "zimage", {dtype = "f32", device = "cpu", offload = true})
  local lat = lm.randn{1, 16, 8, 8}:astype("f32")
  local o = {prompt = "dance monkey", latents = lat, steps = 2, cfg = 0, max_sequence_length = 32}
  local x = a:generate(o)
  eq(maxerr(x, b:generate(o)), 0, "offloaded = resident")
  eq(maxerr(x, b:generate(o)), 0, "... again, the encoder read back")
  local cap = b:encode_prompt("x")   -- offload: the transformer freed for the encoder
  eq(maxerr(a:encode_prompt("x"), cap), 0, "encode_prompt")
  eq(maxerr(a.transformer(lat, 0.5, cap), b.transformer(lat, 0.5, cap)), 0, "the transformer read again")
  raises(function() lm.models.load(D .. "zimage", {offload = 1}) end, "offload: expected a boolean")
  raises(function() lm.models.load("tests/ref/diffusion/sd1", {offload = true}) end, "only the DiT families")
  a:free(); b:free()
end)

-- lm.models.load hands a transformer file to the pipeline as it does an SD
-- checkpoint: before, only files naming model.diffusion_model.* (an SD
-- UNet, or the Z-Image fixture written with that prefix) got there, and a
-- ComfyUI-GGUF or ComfyUI transformer file (no prefix) went to the TF.js
-- loader ("unknown option 'tokenizer'")
test("dit: lm.models.load takes a Z-Image or FLUX.2 transformer file (.safetensors, .gguf)", function()
  local B = (os.getenv("BUILD") or "build") .. "/ref/dit/"
  local h = io.open(B .. "klein_q8_0.gguf", "rb")
  if not h then print("  (" .. B .. " absent: make dit-fixtures)"); return end
  h:close()
  local inputs = {zimage = {lm.randn({1, 16, 8, 8}, {seed = 1}), lm.randn({9, 16}, {seed = 2}), 0.4},
                  klein = {lm.randn({1, 16, 4, 6}, {seed = 3}), lm.randn({1, 10, 32}, {seed = 4}), 0.6}}
  for _, name in ipairs{"zimage.safetensors", "zimage_q8_0.gguf", "klein.safetensors", "klein_q8_0.gguf"} do
    local fam = name:match("^%a+")
    local o = {dtype = "f32", device = "cpu", tokenizer = D .. fam}
    local p = lm.models.load(B .. name, o)
    local q = lm.diffusion.pipeline(B .. name, o)
    eq(p.family, q.family, name .. ": the family")
    local x, ctx, t = table.unpack(inputs[fam])
    eq(maxerr(p.transformer(x, t, ctx), q.transformer(x, t, ctx)), 0, name .. ": the same transformer")
    raises(function() lm.models.load(B .. name) end, "holds the transformer only")
    p:free(); q:free()
  end
  -- a GGUF that is no transformer still goes to the TF.js loader
  raises(function() lm.models.load("tests/ref/gguf/types.gguf") end, "not valid JSON")
end)
