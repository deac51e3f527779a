-- decoder.lua - a toy image decoder in the shape of a VAE decoder's tail
-- (conv, group norm, SiLU, 2x upsampling, conv to RGB), compiled once and
-- run over a batch of latents, each written to a PNG.  The weights come
-- from a safetensors file, as a real decoder's would: the first run writes
-- random ones to <outdir>/decoder.safetensors (the images are coloured
-- noise with structure); pass a real file as the third argument.  Loaded
-- weights belong to the default device (uploaded once, on first use).
--   build/lumen samples/decoder.lua [count] [outdir] [weights.safetensors]
--   LUMEN_DEVICE=vulkan build/lumen samples/decoder.lua
local lm = require "lumen"
local count = tonumber(arg and arg[1]) or 4
local outdir = arg and arg[2] or "."
local wpath = arg and arg[3] or (outdir .. "/decoder.safetensors")

local C, H = 32, 64   -- channels, latent height/width
if not io.open(wpath, "rb") then
  lm.save(wpath, {
    conv_in = lm.randn({C, 4, 3, 3}, {seed = 1, std = 0.2}),
    conv_mid = lm.randn({C, C, 3, 3}, {seed = 2, std = 0.06}),
    conv_out = lm.randn({3, C, 3, 3}, {seed = 3, std = 0.06}),
    bias_out = lm.zeros({3}),
  })
  print("wrote random weights to " .. wpath)
end
local w = lm.load(wpath)
for _, t in pairs(w) do t:keep() end   -- weights outlive lm.sweep()

local function decode(z)
  local h = lm.conv2d(z, w.conv_in, nil, {padding = 1})
  h = lm.group_norm(h, 8):silu()
  h = lm.upsample(h, {scale_factor = 2, mode = "nearest"})
  h = lm.conv2d(h, w.conv_mid, nil, {padding = 1})
  h = lm.group_norm(h, 8):silu()
  return lm.conv2d(h, w.conv_out, w.bias_out, {padding = 1}):sigmoid()
end

local decode_c = lm.compile(decode)
for i = 1, count do
  local z = lm.randn({1, 4, H, H}, {seed = 100 + i})
  local img = decode_c(z)
  local path = string.format("%s/decoder_%02d.png", outdir, i)
  lm.image.write_png(path, img[1], {layout = "CHW", range = {0, 1}})
  print(string.format("%s  mean %.3f", path, img:mean():item()))
end
print("device: " .. lm.device() .. ", weights on " .. w.conv_in.device)
