-- test_lora.lua - LoRA adapters from Lua (lua/l_lora.c over models/lora.c;
-- tests/test_lora.c checks the formats against PEFT and diffusers): a kohya
-- file made here merged into the tiny SD 1.x pipeline changes the UNet's
-- output, pipe:loras() lists it with its hash, unloading gives the output
-- back byte for byte, strict=false skips an unmatched key, errors name it.
local T, lm = ...
local test, eq, ok, raises = T.test, T.eq, T.ok, T.raises
local D = "tests/ref/diffusion/"
local f = io.open(D .. "sd1/model_index.json", "rb")
if not f then
  print("test_lora.lua: tests/ref/diffusion/sd1 absent: skipped")
  return
end
f:close()

local Q = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q"

test("lora: load, list, unload on the tiny SD 1.x pipeline", function()
  local pipe = lm.models.load(D .. "sd1", {dtype = "f32", device = "cpu", tiling = "off"})
  local path = os.tmpname() .. ".safetensors"
  lm.save(path, {
    [Q .. ".lora_down.weight"] = lm.randn({2, 32}, {seed = 1}),
    [Q .. ".lora_up.weight"] = lm.randn({32, 2}, {seed = 2}),
    [Q .. ".alpha"] = lm.tensor(1.0),
  })
  local x, t, ctx = lm.randn({1, 4, 8, 8}, {seed = 3}), lm.tensor({500.0}), lm.randn({1, 8, 64}, {seed = 4})
  local base = pipe.unet(x, t, ctx):eval()
  local info = pipe:load_lora(path, {scale = 0.5, name = "fox"})
  eq(info.name, "fox", "name"); eq(info.format, "lora", "format"); eq(info.modules, 1, "modules")
  eq(#info.hash, 12, "A1111's short hash"); eq(info.scale, 0.5, "scale")
  eq(#pipe:loras(), 1, "one loaded")
  local merged = pipe.unet(x, t, ctx)
  ok((merged - base):abs():max():item() > 1e-4, "the LoRA changes the output")
  pipe:unload_loras()
  eq(#pipe:loras(), 0, "none loaded")
  local again = pipe.unet(x, t, ctx)
  eq((again - base):abs():max():item(), 0, "unloaded: the same output")
  -- an unmatched key: an error naming it; strict=false skips it
  lm.save(path, {
    [Q .. ".lora_down.weight"] = lm.randn({2, 32}, {seed = 1}),
    [Q .. ".lora_up.weight"] = lm.randn({32, 2}, {seed = 2}),
    ["lora_unet_no_such_block.lora_down.weight"] = lm.randn({2, 32}, {seed = 1}),
  })
  raises(function() pipe:load_lora(path) end, "lora_unet_no_such_block.lora_down.weight")
  eq(#pipe:loras(), 0, "nothing loaded after the error")
  local i2 = lm.diffusion.load_lora(pipe, path, {strict = false})
  eq(i2.unmatched, 1, "one skipped"); ok(i2.unmatched_keys:find("no_such_block", 1, true), "listed")
  raises(function() pipe:load_lora(path, {weight = 1}) end, "weight")
  lm.diffusion.unload_loras(pipe)
  os.remove(path)
  pipe:free()
  raises(function() pipe:loras() end, "freed")
end)

test("lora: lm.diffusion.lora_tags", function()
  local text, tags = lm.diffusion.lora_tags("a fox <lora:water:0.8>, snow <lora:ink>")
  eq(text, "a fox , snow ", "the text without the tags")
  eq(#tags, 2, "two tags"); eq(tags[1].name, "water", "name"); eq(tags[1].weight, 0.8, "weight")
  eq(tags[2].name, "ink", "name"); eq(tags[2].weight, 1, "a missing weight is 1")
  raises(function() lm.diffusion.lora_tags("<lora:a:much>") end, "not a number")
end)
