-- test_prompt.lua - A1111's prompt syntax from Lua (models/prompt.c through
-- lua/l_diffusion.c; tests/test_prompt.c checks the parser, the tags and the
-- chunking against tests/ref/gen_prompt.py's A1111 reference):
-- lm.diffusion.parse_prompt / extra_networks / prompt_chunks, and the
-- weighted, chunked conditioning of pipe:encode_prompt{prompt_syntax=true}
-- and pipe:generate against an A1111-formula reference computed here with
-- the pipeline's own text encoders (each chunk encoded alone, the hidden
-- states times the token weights, scaled back to their mean, the chunks
-- joined along the sequence; SDXL's penultimate layers of both encoders and
-- the first chunk's pooled output), on the tiny SD 1.x, 2.x and SDXL models.
local T, lm = ...
local test, eq, ok, raises = T.test, T.eq, T.ok, T.raises
local D = "tests/ref/diffusion/"

local function same(a, b, what)
  eq(#a, #b, what .. ": length")
  for i = 1, #a do
    if type(a[i]) == "table" then same(a[i], b[i], what .. "[" .. i .. "]")
    else eq(a[i], b[i], what .. "[" .. i .. "]") end
  end
end

test("prompt: parse_prompt gives A1111's pairs", function()
  same(lm.diffusion.parse_prompt("an (important) word"), {{"an ", 1.0}, {"important", 1.1}, {" word", 1.0}}, "emphasis")
  same(lm.diffusion.parse_prompt("a (((house:1.3)) [on] a (hill:0.5), sun, (((sky)))."),
       {{"a ", 1.0}, {"house", 1.5730000000000004}, {" ", 1.1}, {"on", 1.0}, {" a ", 1.1},
        {"hill", 0.55}, {", sun, ", 1.1}, {"sky", 1.4641000000000006}, {".", 1.1}}, "A1111's doctest")
  same(lm.diffusion.parse_prompt("\\(literal\\]"), {{"(literal]", 1.0}}, "escapes")
  same(lm.diffusion.parse_prompt("(unbalanced"), {{"unbalanced", 1.1}}, "unbalanced")
  same(lm.diffusion.parse_prompt("a BREAK b"), {{"a", 1.0}, {"BREAK", -1}, {"b", 1.0}}, "BREAK")
  same(lm.diffusion.parse_prompt(""), {{"", 1.0}}, "empty")
  raises(function() lm.diffusion.parse_prompt("(a:1.2.3)") end, "'1.2.3'")
end)

test("prompt: extra_networks removes <kind:args> tags", function()
  local clean, tags = lm.diffusion.extra_networks("(masterpiece:1.2), a fox <lora:watercolor:0.8><lyco:x:1:0.5>")
  eq(clean, "(masterpiece:1.2), a fox ", "clean text")
  eq(#tags, 2, "tags")
  eq(tags[1].kind, "lora"); same(tags[1].args, {"watercolor", "0.8"}, "lora args")
  eq(tags[2].kind, "lyco"); same(tags[2].args, {"x", "1", "0.5"}, "lyco args")
  local c2, t2 = lm.diffusion.extra_networks("<lora x:1> <:y>")
  eq(c2, "<lora x:1> <:y>", "not tags"); eq(#t2, 0, "no tags")
end)

local f = io.open(D .. "ref_pipe.safetensors", "rb")
if not f then
  print("test_prompt.lua: tests/ref/diffusion fixtures absent (tests/ref/gen_diffusion.py): pipeline tests skipped")
  return
end
f:close()

local pipes = {}
local function pipe(name)
  pipes[name] = pipes[name] or lm.models.load(D .. name, {dtype = "f32", device = "cpu", tiling = "off"})
  return pipes[name]
end
local function maxerr(a, b) return (a:astype("f32") - b:astype("f32")):abs():max():item() end
local function rel(a, b) return maxerr(a, b) / b:abs():max():item() end

-- the tokens of text without bos / eos
local function tokens(tok, text)
  local ids = tok:encode(text, {pad = false})
  local r = {}
  for i = 2, #ids - 1 do r[#r + 1] = ids[i] end
  return r
end

-- 100 words of one token each in the tiny vocabulary: two chunks
local LONG, WORDS = {}, {"cat", "fox", "photo", "horse"}
for i = 1, 100 do LONG[i] = WORDS[(i * 7) % 4 + 1] end
LONG = table.concat(LONG, " ")
-- tokens() of a text over 75 tokens: word by word (the pre-tokenizer splits at spaces)
local function long_tokens(tok, text)
  local r = {}
  for w in text:gmatch("%S+") do for _, id in ipairs(tokens(tok, w)) do r[#r + 1] = id end end
  return r
end

test("prompt: prompt_chunks splits long prompts in 75 tokens, BREAK, the comma backtrack", function()
  local tok = pipe("sd1").tokenizer
  local t = long_tokens(tok, LONG)
  eq(#t, 100, "100 tokens")
  ok(#t > 75 and #t <= 150, "the long prompt has " .. #t .. " tokens")
  local ids, w = lm.diffusion.prompt_chunks(tok, LONG)
  eq(#ids, 2, "two chunks")
  eq(#ids[1], 77, "77 ids")
  eq(ids[1][1], tok.bos); eq(ids[1][77], tok.eos)
  for i = 1, 75 do eq(ids[1][i + 1], t[i], "chunk 1 id " .. i) end
  for i = 76, #t do eq(ids[2][i - 74], t[i], "chunk 2 id " .. (i - 75)) end
  eq(ids[2][#t - 74 + 1], tok.eos, "chunk 2's eos")
  eq(w[1][2], 1.0, "weight 1")
  -- BREAK: a chunk of its own even when short
  local b = lm.diffusion.prompt_chunks(tok, "a fox BREAK a cat")
  eq(#b, 2, "BREAK makes two chunks")
  same({b[1][2], b[1][3], b[1][4]}, {tokens(tok, "a fox")[1], tokens(tok, "a fox")[2], tok.eos}, "chunk 1")
  same({b[2][2], b[2][3], b[2][4]}, {tokens(tok, "a cat")[1], tokens(tok, "a cat")[2], tok.eos}, "chunk 2")
  -- a comma within 20 tokens of the full chunk: what follows it moves on
  local comma = tokens(tok, ",")
  eq(#comma, 1, "one comma token")
  local words = {}
  local n = 0
  while n < 70 do
    words[#words + 1] = "x"
    n = n + #tokens(tok, "x")
  end
  local text = table.concat(words, " ") .. ", " .. LONG
  local c = lm.diffusion.prompt_chunks(tok, text)
  local at
  for i = 2, 76 do if c[1][i] == comma[1] then at = i end end
  ok(at ~= nil, "the comma ends chunk 1")
  for i = at + 1, 76 do eq(c[1][i], tok.eos, "padding after the comma") end
  eq(c[2][2], t[1], "chunk 2 starts after the comma")
  -- weights ride with their tokens
  local _, ww = lm.diffusion.prompt_chunks(tok, "a (fox:1.5)")
  local fw = math.abs(ww[1][3] - 1.5) < 1e-6 or math.abs(ww[1][4] - 1.5) < 1e-6
  ok(fw, "fox weighs 1.5")
  -- SD 2.x's tokenizer pads with "!" after the first eos
  local tok2 = pipe("sd2").tokenizer
  local i2 = lm.diffusion.prompt_chunks(tok2, "a fox")
  ok(tok2.pad ~= tok2.eos, "sd2 pads with its own id")
  eq(i2[1][4], tok2.eos, "eos"); eq(i2[1][5], tok2.pad, "then pad"); eq(i2[1][77], tok2.pad, "to the end")
end)

-- the A1111 formula, from the pipeline's encoders (encoder e: 1 or 2)
local function reference(p, text, e, penultimate)
  local tok = e == 1 and p.tokenizer or p.tokenizer_2
  local enc = e == 1 and p.text_encoder or p.text_encoder_2
  local ids, w = lm.diffusion.prompt_chunks(tok, text)
  local zs, pooled = {}, nil
  for k = 1, #ids do
    local out = enc({ids[k]})
    local z = penultimate and out.hidden_states[#out.hidden_states - 1] or out.last_hidden_state
    local m = lm.tensor(w[k]):reshape{1, 77, 1}
    local zw = z * m
    zs[k] = zw * (z:mean() / zw:mean())
    if k == 1 then pooled = out.text_embeds end
  end
  return lm.concat(zs, 2), pooled
end

local WEIGHTED = "a (red:1.3) fox, [blurry], (((masterpiece))) BREAK a [[cat]] " .. LONG

test("prompt: SD 1.x / 2.x weighted, chunked embeddings against the A1111 formula", function()
  for _, name in ipairs({"sd1", "sd2"}) do
    local p = pipe(name)
    local got = p:encode_prompt(WEIGHTED, {prompt_syntax = true})
    local want = reference(p, WEIGHTED, 1, false)
    same(got.shape, want.shape, name .. " shape")
    eq(got.shape[2], 77 * 3, name .. ": three chunks")
    local r = rel(got, want)
    ok(r < 1e-5, name .. ": relative error " .. r)
    -- the weights matter: the same text unweighted differs
    local plain = reference(p, "a red fox, blurry, masterpiece BREAK a cat " .. LONG, 1, false)
    ok(rel(plain, want) > 1e-3, name .. ": weights change the embeddings")
  end
end)

test("prompt: SDXL both encoders and the first chunk's pooled output", function()
  local p = pipe("sdxl")
  local got, pooled = p:encode_prompt(WEIGHTED, {prompt_syntax = true})
  local a = reference(p, WEIGHTED, 1, true)
  local b, pb = reference(p, WEIGHTED, 2, true)
  local want = lm.concat({a, b}, 3)
  same(got.shape, want.shape, "shape")
  local r = rel(got, want)
  ok(r < 1e-5, "relative error " .. r)
  local rp = rel(pooled, pb)
  ok(rp < 1e-5, "pooled relative error " .. rp)
end)

test("prompt: a plain prompt gives the bytes of the old path; a batch pads with empty chunks", function()
  local p = pipe("sd1")
  local text = "a photo of an astronaut riding a horse"
  eq(maxerr(p:encode_prompt(text, {prompt_syntax = true}), p:encode_prompt(text)), 0, "plain prompt")
  local xl = pipe("sdxl")
  local e1, p1 = xl:encode_prompt(text, {prompt_syntax = true})
  local e2, p2 = xl:encode_prompt(text)
  eq(maxerr(e1, e2), 0, "SDXL plain prompt"); eq(maxerr(p1, p2), 0, "SDXL pooled")
  -- a short and a long prompt: the short one's second chunk is the empty chunk's encoding
  local both = p:encode_prompt({text, LONG}, {prompt_syntax = true})
  same(both.shape, {2, 154, both.shape[3]}, "padded to two chunks")
  local empty = p:encode_prompt("")
  local r = rel(both[{{1, 1}, {78, 154}}], empty)
  ok(r < 1e-6, "empty chunk: relative error " .. r)
  local r2 = rel(both[{{1, 1}, {1, 77}}], p:encode_prompt(text))
  ok(r2 < 1e-6, "first chunk: relative error " .. r2)
end)

test("prompt: pipe:generate parses by default, prompt_syntax = false does not", function()
  local p = pipe("sd1")
  local base = {steps = 2, sampler = "euler", size = 32, seed = 7}
  local function gen(prompt, syntax)
    local a = {prompt = prompt, prompt_syntax = syntax}
    for k, v in pairs(base) do a[k] = v end
    return p:generate(a)
  end
  local plain = "a photo of an astronaut riding a horse"
  eq(maxerr(gen(plain), gen(plain, false)), 0, "a plain prompt: the same image")
  local w = "a photo of an (astronaut:1.4) riding a horse"
  ok(maxerr(gen(w), gen(w, false)) > 0, "a weighted prompt: another image")
  ok(maxerr(gen(w .. " <lora:none:1>"), gen(w)) == 0, "a <lora:> tag is removed")
  raises(function() gen("(a:1.2.3)") end, "not a number")
  -- a batch of a short and a long prompt: each image as alone (lanes are encoded apart)
  local b = p:generate{prompt = {plain, LONG}, batch = 2, steps = 2, sampler = "euler", size = 32, seed = 7}
  eq(maxerr(b[{{1, 1}}], gen(plain)), 0, "batch image 1 as alone")
  local a2 = {prompt = LONG, steps = 2, sampler = "euler", size = 32, seed = 8}
  eq(maxerr(b[{{2, 2}}], p:generate(a2)), 0, "batch image 2 (two chunks) as alone")
end)

-- a prompt of two chunks and a negative of one: A1111 (pad_cond_uncond off,
-- its default) runs the UNet on each apart instead of padding the negative
test("prompt: a negative of fewer chunks than the prompt is not padded (the UNet runs apart)", function()
  for _, name in ipairs({"sd1", "sdxl"}) do
    local p = pipe(name)
    local base = {prompt = LONG, steps = 2, sampler = "euler", size = 32, seed = 3, cfg = 5}
    local function gen(neg, extra)
      local a = {negative = neg}
      for k, v in pairs(base) do a[k] = v end
      for k, v in pairs(extra or {}) do a[k] = v end
      return p:generate(a)
    end
    local apart = gen("blurry")
    -- "blurry BREAK BREAK" is "blurry" and an empty chunk: two chunks, as the prompt, so
    -- one call with the negative padded, which the webui's default does not do
    local padded = gen("blurry BREAK BREAK")
    -- (were the negative padded, both would be the same conditioning and image)
    ok(maxerr(apart, padded) > 1e-4, name .. ": not the padded negative's image")
    -- a batch: each image as alone, and stacked (one call per half) within the CPU's rounding
    local two = gen({"blurry", "dark"}, {batch = 2, prompt = {LONG, LONG}})
    eq(maxerr(two[{{1, 1}}], apart), 0, name .. ": batch image 1 as alone")
    local st = gen({"blurry", "dark"}, {batch = 2, prompt = {LONG, LONG}, stacked = true})
    local e = maxerr(st, two)
    ok(e < 1e-3, name .. ": stacked within " .. e)
    -- SDXL's None negative (zeros) of one chunk beside a two-chunk prompt
    if name == "sdxl" then
      local z = gen(nil)
      ok(z.shape[1] == 3, "SDXL: a None negative beside a long prompt runs")
    end
  end
end)

-- ... against the webui's rule computed here: one DDIM step (the tiny SD 1.x
-- scheduler: leading spacing, steps_offset 1, so t = 1 and alphas_cumprod[1]
-- to alphas_cumprod[0]) from given latents with u = unet(x, negative's 77) and
-- c = unet(x, prompt's 154), each called alone, and with the padded negative
test("prompt: the apart UNet calls against a DDIM step by hand (A1111's default, not the padding)", function()
  local p = pipe("sd1")
  local x = (lm.arange(1024):astype("f32") * 0.37):sin():reshape{1, 4, 16, 16}
  local cfg = 5
  local img = p:generate{prompt = LONG, negative = "blurry", steps = 1, sampler = "ddim", cfg = cfg, latents = x}
  local function by_hand(neg)
    local cu = p:encode_prompt(neg, {prompt_syntax = true})
    local cc = p:encode_prompt(LONG, {prompt_syntax = true})
    local t = lm.tensor({1})
    local u, c = p.unet(x, t, cu), p.unet(x, t, cc)
    local eps = u + (c - u) * cfg
    local s0, s1 = math.sqrt(0.00085), math.sqrt(0.012)
    local a0 = 1 - s0 * s0
    local a1 = a0 * (1 - (s0 + (s1 - s0) / 999) ^ 2)
    local x0 = (x - eps * math.sqrt(1 - a1)) / math.sqrt(a1)
    return p:decode_latents(x0 * math.sqrt(a0) + eps * math.sqrt(1 - a0)):reshape(img.shape)
  end
  local apart, padded = by_hand("blurry"), by_hand("blurry BREAK BREAK")
  local e, gap = maxerr(img, apart), maxerr(apart, padded)
  print(string.format("    apart UNet calls: image error %.3g (the padded negative's image is %.3g away)", e, gap))
  ok(e < 1e-5, "image error " .. e)
  ok(gap > 100 * e, "the padded negative is told apart: " .. gap)
end)

-- textual inversion: an embedding whose vectors are the token embeddings of
-- "red fox" must encode as the words do (the vectors replace the token
-- embeddings before the position embeddings, as A1111's EmbeddingsWithFixes)
local function token_rows(file, tok, text)
  local w
  for k, v in pairs(lm.load(file)) do if k:find("token_embedding") then w = v end end
  local rows = {}
  for i, id in ipairs(tokens(tok, text)) do rows[i] = w[{{id + 1, id + 1}}] end
  return lm.concat(rows, 1)
end

local TMP = os.getenv("BUILD") or "build"
TMP = TMP .. "/test-prompt-ti"
os.execute("rm -rf '" .. TMP .. "' && mkdir -p '" .. TMP .. "/sd1' '" .. TMP .. "/sdxl' '" .. TMP .. "/bad'")

test("prompt: a textual-inversion embedding stands for its vectors (SD 1.x, one-tensor files)", function()
  local plain = pipe("sd1")
  local v = token_rows(D .. "sd1/text_encoder/model.safetensors", plain.tokenizer, "red fox")
  lm.save(TMP .. "/sd1/foxemb.safetensors", {emb_params = v})
  lm.save(TMP .. "/sd1/other.safetensors", {["string_to_param.*"] = v[{{1, 1}}]})
  local p = lm.models.load(D .. "sd1", {dtype = "f32", device = "cpu", tiling = "off", embeddings = TMP .. "/sd1"})
  local function enc(pp, t) return pp:encode_prompt(t, {prompt_syntax = true}) end
  eq(maxerr(enc(p, "a foxemb cat"), enc(plain, "a red fox cat")), 0, "the embedding is its words")
  eq(maxerr(enc(p, "a (foxemb:1.3), cat"), enc(plain, "a (red fox:1.3), cat")), 0, "weighted")
  ok(maxerr(enc(p, "a foxemb cat"), enc(plain, "a foxemb cat")) > 0, "without the folder the name is words")
  eq(maxerr(enc(p, "a photo of a cat"), enc(plain, "a photo of a cat")), 0, "prompts without it unchanged")
  -- an SDXL file is skipped on SD 1.x (its widths are SDXL's), as A1111 skips it
  lm.save(TMP .. "/sd1/xlemb.safetensors", {clip_l = v, clip_g = v})
  local p2 = lm.models.load(D .. "sd1", {dtype = "f32", device = "cpu", tiling = "off", embeddings = TMP .. "/sd1"})
  eq(maxerr(enc(p2, "a xlemb cat"), enc(plain, "a xlemb cat")), 0, "SDXL file skipped on SD 1.x")
  lm.save(TMP .. "/bad/two.safetensors", {a = v, b = v})
  raises(function() lm.models.load(D .. "sd1", {device = "cpu", embeddings = TMP .. "/bad"}) end, "two.safetensors: 2 tensors (a, b)")
  raises(function() lm.models.load(D .. "sd1", {device = "cpu", embeddings = TMP .. "/none"}) end, "embeddings folder")
end)

test("prompt: SDXL embeddings (clip_l + clip_g) in both encoders, the pooled output too", function()
  local plain = pipe("sdxl")
  local l = token_rows(D .. "sdxl/text_encoder/model.safetensors", plain.tokenizer, "red fox")
  local g = token_rows(D .. "sdxl/text_encoder_2/model.safetensors", plain.tokenizer_2, "red fox")
  lm.save(TMP .. "/sdxl/foxemb.safetensors", {clip_l = l, clip_g = g})
  local p = lm.models.load(D .. "sdxl", {dtype = "f32", device = "cpu", tiling = "off", embeddings = TMP .. "/sdxl"})
  local e1, p1 = p:encode_prompt("a foxemb cat", {prompt_syntax = true})
  local e2, p2 = plain:encode_prompt("a red fox cat", {prompt_syntax = true})
  eq(maxerr(e1, e2), 0, "embeds"); eq(maxerr(p1, p2), 0, "pooled")
end)

-- the same conditioning and image on a Vulkan device (lavapipe here) as on the CPU
local VK
for _, d in ipairs(lm.devices()) do if d.backend == "vulkan" then VK = d.spec; break end end
if VK then
  test("prompt: weights, BREAK, chunks and an embedding on " .. VK .. " as on the CPU", function()
    for _, name in ipairs({"sd1", "sdxl"}) do
      local o = {dtype = "f32", tiling = "off", embeddings = TMP .. "/" .. name}
      o.device = "cpu"
      local c = lm.models.load(D .. name, o)
      o.device = VK
      local v = lm.models.load(D .. name, o)
      local text = "a (red:1.3) foxemb, [blurry] BREAK (((masterpiece))) cat fox photo horse"
      local a = c:encode_prompt(text, {prompt_syntax = true})
      local b = v:encode_prompt(text, {prompt_syntax = true})
      eq(a.shape[2], 154, name .. ": two chunks")
      local r = rel(b:to("cpu"), a)
      ok(r < 1e-5, name .. ": conditioning relative error " .. r)
      local args = {prompt = text, steps = 2, size = 32, sampler = "euler", seed = 1}
      local e = maxerr(c:generate(args), v:generate(args):to("cpu"))
      ok(e < 1e-4, name .. ": image max abs error " .. e)
    end
  end)
else
  print("test_prompt.lua: no Vulkan device: the device comparison skipped")
end

-- diffusers' community lpw_stable_diffusion (tests/ref/gen_prompt_lpw.py, run
-- on the GPU machine) where it agrees with A1111: weighted prompts of one
-- chunk, and unweighted ones of two and three chunks
local LPW = "tests/ref/prompt/lpw.safetensors"
local lf = io.open(LPW, "rb")
if lf then
  lf:close()
  test("prompt: SD 1.x embeddings against diffusers' lpw_stable_diffusion", function()
    local ref = lm.load(LPW)
    local p = pipe("sd1")
    local ONE = {"cat", "fox", "photo", "horse"}
    local function words(n, k)
      local w = {}
      for i = 1, n do w[i] = ONE[(i * k) % 4 + 1] end
      return table.concat(w, " ")
    end
    local prompts = {"a (red:1.3) fox, [blurry], (((masterpiece)))",
                     "(masterpiece:1.2), a [[cat]] on a (mat:0.8)",
                     "an (important) word and \\(literal\\) brackets",
                     "a photo of an astronaut riding a horse", words(100, 7), words(180, 3)}
    local worst = 0
    for i, text in ipairs(prompts) do
      local want = ref["p" .. i]
      local got = p:encode_prompt(text, {prompt_syntax = true})
      same(got.shape, want.shape, "p" .. i .. " shape")
      local r = rel(got, want)
      worst = math.max(worst, r)
      ok(r < 1e-4, "p" .. i .. ": relative error " .. r)
    end
    print(string.format("    lpw_stable_diffusion: 6 prompts, largest relative error %.3g", worst))
  end)
else
  print("test_prompt.lua: " .. LPW .. " absent (tests/ref/gen_prompt_lpw.py): the lpw comparison skipped")
end
