-- test_diffusion.lua - lm.diffusion (lua/l_diffusion.c): the CLIP tokenizer
-- and text encoder of tests/ref/clip/tiny from Lua give what the C API gives
-- (tests/test_clip.c checks those against transformers): ids as a table or a
-- tensor, truncation count, the encoder's outputs from a table, rows or a
-- tensor of ids, fields, help() docstrings, errors as Lua errors.
local T, lm = ...
local test, eq, ok, raises, near = T.test, T.eq, T.ok, T.raises, T.near
local TINY = "tests/ref/clip/tiny/"

test("diffusion: tokenizer ids, table and tensor", function()
  local tok = lm.diffusion.tokenizer(TINY .. "tokenizer")
  eq(tok.max_length, 77, "max_length"); eq(tok.bos, 827, "bos"); eq(tok.eos, 828, "eos")
  local ids, n = tok:encode("a photo of an astronaut riding a horse on mars")
  eq(#ids, 77, "padded"); eq(n, 12, "untruncated length")
  eq(ids[1], 827, "bos first"); eq(ids[12], 828, "eos"); eq(ids[77], 828, "pad")
  local short = tok:encode("a cat", {pad = false})
  eq(#short, 4, "unpadded")
  local t = tok:encode("a cat", {tensor = true})
  eq(t.dtype, "i64", "tensor dtype"); eq(t.shape[1], 77, "tensor length")
  eq(t[1]:item(), 827, "tensor bos")
  local _, long = tok:encode(string.rep("word ", 300))
  eq(long, 902, "over-long prompt: length before truncation")
  raises(function() tok:encode("x", {bogus = 1}) end, "unknown option")
  tok:free()
  raises(function() tok:encode("x") end, "freed")
end)

test("diffusion: text encoder from ids", function()
  local tok = lm.diffusion.tokenizer(TINY .. "tokenizer")
  local enc = lm.diffusion.text_encoder(TINY .. "text_encoder")
  eq(enc.hidden_size, 32, "hidden_size"); eq(enc.num_layers, 2, "layers")
  eq(enc.hidden_act, "quick_gelu", "act"); eq(enc.projection_dim, 0, "no projection")
  local ids = tok:encode("a cat, (dog:1.2)")
  local out = enc(ids)
  eq(out.last_hidden_state.shape[1], 1, "batch"); eq(out.last_hidden_state.shape[2], 77, "length")
  eq(#out.hidden_states, 3, "hidden states")
  eq(out.pooled.shape[2], 32, "pooled width")
  eq(out.text_embeds, nil, "no projection")
  -- rows and a tensor give the same numbers
  local two = enc({ids, ids})
  local tt = enc(lm.tensor(ids):reshape{1, 77})
  near((two.pooled[2] - out.pooled[1]):abs():max():item(), 0, 1e-6, "row 2 = row 1")
  near((tt.last_hidden_state - out.last_hidden_state):abs():max():item(), 0, 1e-6, "tensor ids")
  local enc2 = lm.diffusion.text_encoder(TINY .. "text_encoder_2")
  local o2 = enc2(ids)
  eq(o2.text_embeds.shape[2], 24, "projection")
  raises(function() enc({1, 2, 100000}) end, "outside the vocabulary")
  raises(function() lm.diffusion.text_encoder(TINY .. "tokenizer") end, "config.json")
  ok(lm.help and true, "help exists")
end)
