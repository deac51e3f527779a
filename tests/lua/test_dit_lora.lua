-- test_dit_lora.lua - LoRA on the DiT families (Z-Image, FLUX.2-klein;
-- models/lora.c's DiT mapping) on the fixtures of tests/ref/gen_dit.py:
-- a LoRA changes the transformer's output and unloading gives it back byte
-- for byte; a LoRA on an original fused qkv equals the same LoRA split into
-- diffusers' to_q / to_k / to_v; kohya names and alpha; offload (the
-- transformer freed and read again) gives what the resident pipeline
-- gives; an unmatched key is an error naming it; a GGUF (q8_0)
-- transformer takes the adapters at run time (diffusers' to_q a third of
-- its fused qkv), as the float file merges them; and, where tests/ref/ditlora holds
-- tests/ref/gen_ditlora.py's fixture, every file there fused as diffusers'
-- load_lora_weights + fuse_lora fuses it (the transformer's output within
-- f32 noise).  On the CPU, and on Vulkan (lavapipe) by
-- tests/lua/run_dit_lora_vulkan.sh.
local T, lm = ...
local test, eq, ok, raises = T.test, T.eq, T.ok, T.raises
local D = "tests/ref/dit/"
-- the CPU, or Vulkan under LUMEN_DEVICE=vulkan (tests/lua/run_dit_lora_vulkan.sh)
local DEV = os.getenv("LUMEN_DEVICE") == "vulkan" and "vulkan" or "cpu"
local R = "tests/ref/ditlora/"
local f = io.open(D .. "zimage/model_index.json", "rb")
if not f then
  print("test_dit_lora.lua: tests/ref/dit absent: skipped")
  return
end
f:close()

local function maxerr(a, b) return (a:astype("f32") - b:astype("f32")):abs():max():item() end
local function maxabs(a) return a:astype("f32"):abs():max():item() end
local function tmp() local n = os.tmpname(); os.remove(n); return n .. ".safetensors" end
local function exists(p) local h = io.open(p, "rb"); if h then h:close() end; return h ~= nil end

-- Z-Image's inputs: x [1, 16, 8, 8], t, a caption [9, 16]
local zx, zcap = lm.randn({1, 16, 8, 8}, {seed = 1}), lm.randn({9, 16}, {seed = 2})
local function zcall(p) return p.transformer(zx, 0.4, zcap):astype("f32"):eval() end
local ZB = {"noise_refiner.0", "context_refiner.0", "layers.0", "layers.1"}

test("ditlora: Z-Image: a diffusers LoRA merges, is listed, unloads byte for byte", function()
  local p = lm.models.load(D .. "zimage", {dtype = "f32", device = DEV})
  local base = zcall(p)
  local path = tmp()
  local t = {}
  for i, b in ipairs(ZB) do
    t["transformer." .. b .. ".attention.to_k.lora_A.weight"] = lm.randn({4, 32}, {seed = 10 + i}) * 0.2
    t["transformer." .. b .. ".attention.to_k.lora_B.weight"] = lm.randn({32, 4}, {seed = 20 + i}) * 0.2
    t["transformer." .. b .. ".feed_forward.w2.lora_A.weight"] = lm.randn({4, 85}, {seed = 30 + i}) * 0.2
    t["transformer." .. b .. ".feed_forward.w2.lora_B.weight"] = lm.randn({32, 4}, {seed = 40 + i}) * 0.2
  end
  lm.save(path, t)
  local info = p:load_lora(path, {scale = 0.5, name = "zi"})
  eq(info.modules, 8, "eight weights"); eq(info.format, "lora", "format"); eq(#info.hash, 12, "hash")
  local merged = zcall(p)
  ok(maxerr(merged, base) > 1e-3, "the LoRA changes the output: " .. maxerr(merged, base))
  -- twice the scale: a different output; scale 0.5 twice = scale 1 within rounding
  p:load_lora(path, {scale = 0.5, name = "zi2"})
  eq(#p:loras(), 2, "two loaded")
  local twice = zcall(p)
  p:unload_loras()
  eq(maxerr(zcall(p), base), 0, "unloaded: the same output, byte for byte")
  p:load_lora(path, {scale = 1.0})
  ok(maxerr(zcall(p), twice) < 1e-4, "0.5 + 0.5 = 1: " .. maxerr(zcall(p), twice))
  p:unload_loras()
  eq(maxerr(zcall(p), base), 0, "unloaded again")
  -- an unmatched key names it; strict=false skips it
  t["transformer.layers.0.attention.to_z.lora_A.weight"] = lm.randn({4, 32}, {seed = 1})
  lm.save(path, t)
  raises(function() p:load_lora(path) end, "transformer.layers.0.attention.to_z.lora_A.weight")
  eq(#p:loras(), 0, "nothing loaded after the error")
  eq(maxerr(zcall(p), base), 0, "the weights as they were")
  local i2 = p:load_lora(path, {strict = false})
  eq(i2.unmatched, 1, "one skipped"); ok(i2.unmatched_keys:find("to_z", 1, true), "listed")
  -- a misshaped factor names the key and the weight
  lm.save(path, {["transformer.layers.0.attention.to_q.lora_A.weight"] = lm.randn({4, 31}, {seed = 1}),
                 ["transformer.layers.0.attention.to_q.lora_B.weight"] = lm.randn({32, 4}, {seed = 1})})
  raises(function() p:load_lora(path) end, "layers.0.attention.to_q")
  os.remove(path)
  p:free()
end)

test("ditlora: Z-Image: the original fused attention.qkv = the same LoRA on to_q / to_k / to_v", function()
  local p = lm.models.load(D .. "zimage", {dtype = "f32", device = DEV})
  local fused, split, kohya = {}, {}, {}
  for i, b in ipairs(ZB) do
    local dn = lm.randn({4, 32}, {seed = 50 + i}) * 0.2
    local up = lm.randn({96, 4}, {seed = 60 + i}) * 0.2
    fused["diffusion_model." .. b .. ".attention.qkv.lora_down.weight"] = dn
    fused["diffusion_model." .. b .. ".attention.qkv.lora_up.weight"] = up
    fused["diffusion_model." .. b .. ".attention.qkv.alpha"] = lm.tensor(8.0)
    local k = "lora_unet_" .. b:gsub("%.", "_") .. "_attention_qkv"
    kohya[k .. ".lora_down.weight"] = dn
    kohya[k .. ".lora_up.weight"] = up
    kohya[k .. ".alpha"] = lm.tensor(8.0)
    for j, part in ipairs({"to_q", "to_k", "to_v"}) do
      split["transformer." .. b .. ".attention." .. part .. ".lora_A.weight"] = dn * 2   -- alpha / rank
      split["transformer." .. b .. ".attention." .. part .. ".lora_B.weight"] =
        up:slice(1, 32 * (j - 1) + 1, 32 * j):contiguous()
    end
  end
  local pf, ps, pk = tmp(), tmp(), tmp()
  lm.save(pf, fused); lm.save(ps, split); lm.save(pk, kohya)
  local base = zcall(p)
  p:load_lora(ps, {scale = 0.75})
  local want = zcall(p)
  ok(maxerr(want, base) > 1e-3, "the split LoRA changes the output")
  p:unload_loras()
  local info = p:load_lora(pf, {scale = 0.75})
  eq(info.modules, 12, "one fused key pair adapts three weights, four blocks")
  local got = zcall(p)
  ok(maxerr(got, want) < 1e-5, "fused = split: " .. maxerr(got, want))
  p:unload_loras()
  p:load_lora(pk, {scale = 0.75})
  ok(maxerr(zcall(p), want) < 1e-5, "kohya's lora_unet_*_attention_qkv too: " .. maxerr(zcall(p), want))
  p:unload_loras()
  eq(maxerr(zcall(p), base), 0, "unloaded")
  -- the original's attention.out is diffusers' to_out.0
  lm.save(pf, {["diffusion_model.layers.1.attention.out.lora_down.weight"] = lm.randn({4, 32}, {seed = 7}),
               ["diffusion_model.layers.1.attention.out.lora_up.weight"] = lm.randn({32, 4}, {seed = 8})})
  lm.save(ps, {["transformer.layers.1.attention.to_out.0.lora_A.weight"] = lm.randn({4, 32}, {seed = 7}),
               ["transformer.layers.1.attention.to_out.0.lora_B.weight"] = lm.randn({32, 4}, {seed = 8})})
  p:load_lora(pf); local a = zcall(p); p:unload_loras()
  p:load_lora(ps); local b = zcall(p); p:unload_loras()
  eq(maxerr(a, b), 0, "attention.out = attention.to_out.0")
  ok(maxerr(a, base) > 1e-3, "... and it changes the output")
  os.remove(pf); os.remove(ps); os.remove(pk)
  p:free()
end)

-- klein's inputs: x [1, 16, 4, 6], t, context [1, 10, 32]
local kx, kctx = lm.randn({1, 16, 4, 6}, {seed = 3}), lm.randn({1, 10, 32}, {seed = 4})
local function kcall(p) return p.transformer(kx, 0.6, kctx):astype("f32"):eval() end

test("ditlora: FLUX.2-klein: BFL names (fused qkv, linear1), kohya's and diffusers' agree", function()
  local p = lm.models.load(D .. "klein", {dtype = "f32", device = DEV})
  local base = kcall(p)
  local dn, up = lm.randn({4, 32}, {seed = 70}) * 0.2, lm.randn({96, 4}, {seed = 71}) * 0.2
  local d1, u1 = lm.randn({4, 32}, {seed = 72}) * 0.2, lm.randn({288, 4}, {seed = 73}) * 0.2
  local bfl = {
    ["diffusion_model.double_blocks.0.img_attn.qkv.lora_A.weight"] = dn,
    ["diffusion_model.double_blocks.0.img_attn.qkv.lora_B.weight"] = up,
    ["diffusion_model.double_blocks.0.txt_attn.qkv.lora_A.weight"] = dn * 0.5,
    ["diffusion_model.double_blocks.0.txt_attn.qkv.lora_B.weight"] = up,
    ["diffusion_model.single_blocks.0.linear1.lora_A.weight"] = d1,
    ["diffusion_model.single_blocks.0.linear1.lora_B.weight"] = u1,
  }
  local kohya = {}
  for k, v in pairs(bfl) do
    local mod, role = k:match("^diffusion_model%.(.-)%.lora_(%a)%.weight$")
    local kk = "lora_unet_" .. mod:gsub("%.", "_")
    kohya[kk .. (role == "A" and ".lora_down.weight" or ".lora_up.weight")] = role == "A" and v * 0.5 or v
    kohya[kk .. ".alpha"] = lm.tensor(8.0)   -- alpha / rank 2 undoes the 0.5
  end
  local dif = {}
  local parts = {img = {"to_q", "to_k", "to_v"}, txt = {"add_q_proj", "add_k_proj", "add_v_proj"}}
  for s, names in pairs(parts) do
    for j, n in ipairs(names) do
      dif["transformer.transformer_blocks.0.attn." .. n .. ".lora_A.weight"] = s == "img" and dn or dn * 0.5
      dif["transformer.transformer_blocks.0.attn." .. n .. ".lora_B.weight"] =
        up:slice(1, 32 * (j - 1) + 1, 32 * j):contiguous()
    end
  end
  dif["transformer.single_transformer_blocks.0.attn.to_qkv_mlp_proj.lora_A.weight"] = d1
  dif["transformer.single_transformer_blocks.0.attn.to_qkv_mlp_proj.lora_B.weight"] = u1
  local pb, pk, pd = tmp(), tmp(), tmp()
  lm.save(pb, bfl); lm.save(pk, kohya); lm.save(pd, dif)
  p:load_lora(pd, {scale = 0.8}); local want = kcall(p); p:unload_loras()
  ok(maxerr(want, base) > 1e-3, "the LoRA changes the output: " .. maxerr(want, base))
  local info = p:load_lora(pb, {scale = 0.8})
  eq(info.modules, 7, "two fused qkv (three weights each) and linear1")
  ok(maxerr(kcall(p), want) < 1e-5, "BFL names = diffusers': " .. maxerr(kcall(p), want))
  p:unload_loras()
  p:load_lora(pk, {scale = 0.8})
  ok(maxerr(kcall(p), want) < 1e-5, "kohya's = diffusers': " .. maxerr(kcall(p), want))
  p:unload_loras()
  eq(maxerr(kcall(p), base), 0, "unloaded: byte for byte")
  -- the original's final modulation holds (shift, scale), diffusers' norm_out (scale, shift)
  local fd, fu = lm.randn({4, 32}, {seed = 74}) * 0.2, lm.randn({64, 4}, {seed = 75}) * 0.2
  lm.save(pb, {["diffusion_model.final_layer.adaLN_modulation.1.lora_A.weight"] = fd,
               ["diffusion_model.final_layer.adaLN_modulation.1.lora_B.weight"] = fu})
  lm.save(pd, {["transformer.norm_out.linear.lora_A.weight"] = fd,
               ["transformer.norm_out.linear.lora_B.weight"] =
                 lm.concat({fu:slice(1, 33, 64), fu:slice(1, 1, 32)}, 1):contiguous()})
  p:load_lora(pb); local sa = kcall(p); p:unload_loras()
  p:load_lora(pd); local sb = kcall(p); p:unload_loras()
  ok(maxerr(sa, base) > 1e-3, "a LoRA on the final modulation changes the output")
  eq(maxerr(sa, sb), 0, "final_layer.adaLN_modulation.1 = norm_out.linear with the halves swapped")
  -- a fused key with the wrong number of rows names it
  lm.save(pb, {["diffusion_model.double_blocks.0.img_attn.qkv.lora_A.weight"] = dn,
               ["diffusion_model.double_blocks.0.img_attn.qkv.lora_B.weight"] = lm.randn({32, 4}, {seed = 1})})
  raises(function() p:load_lora(pb) end, "img_attn.qkv")
  os.remove(pb); os.remove(pk); os.remove(pd)
  p:free()
end)

test("ditlora: offload = true: the LoRA merged again into the transformer read again", function()
  local a = lm.models.load(D .. "zimage", {dtype = "f32", device = DEV})
  local b = lm.models.load(D .. "zimage", {dtype = "f32", device = DEV, offload = true})
  local path = tmp()
  lm.save(path, {["transformer.layers.0.feed_forward.w1.lora_A.weight"] = lm.randn({4, 32}, {seed = 80}),
                 ["transformer.layers.0.feed_forward.w1.lora_B.weight"] = lm.randn({85, 4}, {seed = 81}),
                 ["transformer.layers.1.attention.to_v.lora_A.weight"] = lm.randn({4, 32}, {seed = 82}),
                 ["transformer.layers.1.attention.to_v.lora_B.weight"] = lm.randn({32, 4}, {seed = 83})})
  local lat = lm.randn({1, 16, 8, 8}, {seed = 5}):astype("f32")
  local o = {prompt = "dance monkey", latents = lat, steps = 2, cfg = 0, max_sequence_length = 32}
  local plain = a:generate(o)
  a:load_lora(path, {scale = 0.7})
  b:load_lora(path, {scale = 0.7})
  local x = a:generate(o)
  ok(maxerr(x, plain) > 1e-4, "the LoRA changes the image")
  eq(maxerr(x, b:generate(o)), 0, "offloaded + LoRA = resident + LoRA")
  eq(maxerr(x, b:generate(o)), 0, "... again, the transformer read again")
  local cap = b:encode_prompt("x")   -- the transformer freed for the encoder
  eq(maxerr(a.transformer(lat, 0.5, cap), b.transformer(lat, 0.5, cap)), 0, "the transformer call")
  b:encode_prompt("x")
  b:unload_loras()                  -- while the transformer is freed
  eq(maxerr(plain, b:generate(o)), 0, "unloaded under offload: the plain image")
  b:encode_prompt("x")
  b:load_lora(path, {scale = 0.7})  -- while the transformer is freed
  eq(maxerr(x, b:generate(o)), 0, "loaded while freed")
  os.remove(path)
  a:free(); b:free()
end)

test("ditlora: pipe:generate removes <lora:...> tags, reads (word:1.2) literally", function()
  local p = lm.models.load(D .. "zimage", {dtype = "f32", device = DEV})
  local lat = lm.randn({1, 16, 8, 8}, {seed = 6}):astype("f32")
  local function gen(prompt, syntax)
    return p:generate{prompt = prompt, latents = lat, steps = 1, cfg = 0, max_sequence_length = 32,
                      prompt_syntax = syntax}
  end
  local plain = gen("dance monkey")
  eq(maxerr(plain, gen("dance <lora:fox:0.8>monkey")), 0, "the tag removed (not loaded: pipe:load_lora does that)")
  ok(maxerr(plain, gen("dance <lora:fox:0.8>monkey", false)) > 0, "prompt_syntax=false keeps it in the text")
  local w = gen("(dance:1.2) monkey")
  ok(maxerr(w, plain) > 0, "(dance:1.2) is text, not a weight on plain 'dance'")
  eq(maxerr(w, gen("(dance:1.2) monkey", false)), 0, "... the same with prompt_syntax=false")
  p:free()
end)

test("ditlora: a GGUF (q8_0) transformer: the adapters at run time, as on the float file", function()
  local g, z = (os.getenv("BUILD") or "build") .. "/ref/dit/zimage_q8_0.gguf", (os.getenv("BUILD") or "build") .. "/ref/dit/zimage.safetensors"
  if not exists(g) or not exists(z) then print("  (build/ref/dit absent: make dit-fixtures)"); return end
  local q = lm.diffusion.pipeline(g, {dtype = "f32", device = DEV, tokenizer = D .. "zimage"})
  local f = lm.models.load(z, {dtype = "f32", device = DEV, tokenizer = D .. "zimage"})
  local path = tmp()
  local function pair(t, k, out, inn, seed)
    t[k .. ".lora_A.weight"] = lm.randn({4, inn}, {seed = seed}) * 0.3
    t[k .. ".lora_B.weight"] = lm.randn({out, 4}, {seed = seed + 1}) * 0.3
  end
  local t = {}
  pair(t, "transformer.layers.0.attention.to_q", 32, 32, 100)      -- a third of the fused q8_0 qkv
  pair(t, "transformer.layers.1.attention.to_v", 32, 32, 102)
  pair(t, "diffusion_model.noise_refiner.0.attention.qkv", 96, 32, 104)   -- the fused one itself
  pair(t, "transformer.layers.0.feed_forward.w2", 32, 85, 106)
  pair(t, "diffusion_model.layers.1.attention.out", 32, 32, 108)
  lm.save(path, t)
  local qb, fb = zcall(q), zcall(f)
  local info = q:load_lora(path, {scale = 0.8})
  eq(info.modules, 5, "five weights (three thirds of qkv on one fused weight each)")
  local qe = zcall(q) - qb
  f:load_lora(path, {scale = 0.8})
  local fe = zcall(f) - fb
  ok(maxabs(fe) > 1e-2, "the LoRA changes the float model's output: " .. maxabs(fe))
  -- q8_0's own noise on this tiny model: its output differs from the float one's by
  -- ~1% of the output; a wrong mapping (another third) would miss by the effect's size
  local e, noise = maxerr(qe, fe), maxerr(qb, fb)
  ok(e < 3 * noise and e < 0.1 * maxabs(fe), "its effect on q8_0 as on the float model: " .. e ..
     " (q8_0 vs f32 without it: " .. noise .. ", the effect: " .. maxabs(fe) .. ")")
  q:unload_loras()
  eq(maxerr(zcall(q), qb), 0, "unloaded: the q8_0 output byte for byte")
  -- to_k on the fused q8_0 qkv = the fused key with zero rows around it, exactly
  local A, B = lm.randn({4, 32}, {seed = 7}), lm.randn({32, 4}, {seed = 8})
  lm.save(path, {["transformer.layers.0.attention.to_k.lora_A.weight"] = A,
                 ["transformer.layers.0.attention.to_k.lora_B.weight"] = B})
  q:load_lora(path); local a = zcall(q); q:unload_loras()
  lm.save(path, {["diffusion_model.layers.0.attention.qkv.lora_A.weight"] = A,
                 ["diffusion_model.layers.0.attention.qkv.lora_B.weight"] =
                   lm.concat({lm.zeros{32, 4}, B, lm.zeros{32, 4}}, 1)})
  q:load_lora(path); local b = zcall(q); q:unload_loras()
  ok(maxerr(a, qb) > 1e-2, "to_k's LoRA changes the q8_0 output")
  eq(maxerr(a, b), 0, "to_k = the middle third of the fused qkv's")
  lm.save(path, t)
  -- forced at run time on the float model: the merged output within f32 noise
  f:unload_loras()
  f:load_lora(path, {scale = 0.8, runtime = true})
  local r = zcall(f)
  ok(maxerr(r, fb + fe) < 1e-5, "run time = merged on f32: " .. maxerr(r, fb + fe))
  f:unload_loras()
  eq(maxerr(zcall(f), fb), 0, "unloaded")
  -- offload: the run-time terms set again on the q8_0 transformer read again
  local qo = lm.diffusion.pipeline(g, {dtype = "f32", device = DEV, tokenizer = D .. "zimage", offload = true})
  local lat = lm.randn({1, 16, 8, 8}, {seed = 9}):astype("f32")
  local o = {prompt = "dance monkey", latents = lat, steps = 2, cfg = 0, max_sequence_length = 32}
  q:load_lora(path, {scale = 0.8}); qo:load_lora(path, {scale = 0.8})
  local want = q:generate(o)
  eq(maxerr(want, qo:generate(o)), 0, "q8_0 offloaded + LoRA = resident + LoRA")
  eq(maxerr(want, qo:generate(o)), 0, "... again")
  qo:free()
  os.remove(path)
  q:free(); f:free()
end)

test("ditlora: a Z-Image single file (original names) takes the same LoRAs", function()
  local z = (os.getenv("BUILD") or "build") .. "/ref/dit/zimage.safetensors"
  if not exists(z) then print("  (build/ref/dit absent: make dit-fixtures)"); return end
  local a = lm.models.load(D .. "zimage", {dtype = "f32", device = DEV})
  local s = lm.models.load(z, {dtype = "f32", device = DEV, tokenizer = D .. "zimage"})
  local path = tmp()
  lm.save(path, {["diffusion_model.layers.0.attention.qkv.lora_down.weight"] = lm.randn({4, 32}, {seed = 90}),
                 ["diffusion_model.layers.0.attention.qkv.lora_up.weight"] = lm.randn({96, 4}, {seed = 91}),
                 ["diffusion_model.final_layer.linear.lora_down.weight"] = lm.randn({4, 32}, {seed = 92}),
                 ["diffusion_model.final_layer.linear.lora_up.weight"] = lm.randn({64, 4}, {seed = 93})})
  a:load_lora(path); s:load_lora(path)
  eq(maxerr(zcall(a), zcall(s)), 0, "folder + LoRA = single file + LoRA")
  a:free(); s:free()
  os.remove(path)
end)

-- against diffusers (tests/ref/gen_ditlora.py)
if not exists(R .. "ref_ditlora.safetensors") then
  print("test_dit_lora.lua: " .. R .. "ref_ditlora.safetensors absent: the diffusers comparison skipped")
  return
end
local ref = lm.load(R .. "ref_ditlora.safetensors", {device = DEV})

test("ditlora: every fixture LoRA fused as diffusers' load_lora_weights + fuse_lora", function()
  local fams = {
    zi = {dir = "zimage", call = function(p) return p.transformer(ref["zi.x"], ref["zi.t"], ref["zi.cap"]) end},
    kl = {dir = "klein", call = function(p) return p.transformer(ref["kl.x"], ref["kl.t"], ref["kl.ctx"]) end},
  }
  local n = 0
  for fam, F in pairs(fams) do
    local p = lm.models.load(D .. F.dir, {dtype = "f32", device = DEV})
    local base = F.call(p):astype("f32"):eval()
    ok(maxerr(base, ref[fam .. ".base"]) < 2e-5, fam .. ": no LoRA = diffusers: " .. maxerr(base, ref[fam .. ".base"]))
    local names = {}
    for k in pairs(ref) do
      local name = k:match("^(" .. fam .. "_%w+)%.out$")
      if name then names[#names + 1] = name end
    end
    table.sort(names)
    if #names == 0 then
      print("  " .. fam .. ": the fixture holds no LoRA case (gen_ditlora.py's were not run for it): skipped")
    end
    for _, name in ipairs(names) do
      p:load_lora(R .. name .. ".safetensors", {scale = 0.75})
      local got, want = F.call(p), ref[name .. ".out"]
      local e = maxerr(got, want)
      ok(maxerr(want, ref[fam .. ".base"]) > 1e-2, name .. ": diffusers' LoRA changes the output")
      ok(e < 2e-5 * math.max(1, maxabs(want)), name .. " = diffusers: " .. e)
      p:unload_loras()
      eq(maxerr(F.call(p), base), 0, name .. ": unloaded byte for byte")
      n = n + 1
    end
    p:free()
  end
  ok(n >= 3, "the fixture's cases ran: " .. n)
end)
