-- bench/gpu/vae.lua - Lumen's side of bench/gpu/vae.py: the SD-style VAE
-- decoder from the weights vae.py saved (safetensors, diffusers names),
-- moved to the GPU, compiled whole and per stage, timed in f32 and f16,
-- its output compared with PyTorch's f32 output (max abs).
--   build/lumen bench/gpu/vae.lua WEIGHTS IO
-- IO holds the latent and PyTorch's outputs.  Prints "name median min max"
-- in ms per line (f32_total, f32_conv_in, ...) and f32_maxabs/f16_maxabs.
-- VAE_PROFILE=1 adds lm.profile's table of one whole call per dtype.
local lm = require "lumen"
local wpath, iopath = arg[1], arg[2]
local dev = os.getenv("VAE_DEVICE") or "vulkan"
local check_only = os.getenv("VAE_CHECK_ONLY") == "1"   -- outputs only, no timing (a local smoke run)

-- median, min and max (ms) of 5 batches of calls, each batch long enough
-- to time well (>= 0.3 s), after two warm-up calls
local timed0 = dofile((arg[0]:match("^(.*/)") or "./") .. "timed.lua")
local function timed(fn) return timed0(fn, 0.3) end

local W = lm.load(wpath)
local IO = lm.load(iopath)

local function decoder(dtype)
  local w = {}
  for k, t in pairs(W) do w[k:gsub("^decoder%.", "")] = t:to(dev):astype(dtype):eval() end
  local function gn(x, p) return lm.group_norm(x, 32, w[p .. ".weight"], w[p .. ".bias"], 1e-6) end
  local function conv(x, p, pad)
    return lm.conv2d(x, w[p .. ".weight"], w[p .. ".bias"], {padding = pad or 1})
  end
  local function resnet(p)
    return function(x)
      local h = conv(gn(x, p .. ".norm1"):silu(), p .. ".conv1")
      h = conv(gn(h, p .. ".norm2"):silu(), p .. ".conv2")
      if w[p .. ".conv_shortcut.weight"] then x = conv(x, p .. ".conv_shortcut", 0) end
      return x + h
    end
  end
  local function attention(p)
    local function lin(x, n) return lm.linear(x, w[p .. "." .. n .. ".weight"], w[p .. "." .. n .. ".bias"]) end
    return function(x)
      local s = x.shape
      local b, c, hw = s[1], s[2], s[3] * s[4]
      local t = gn(x, p .. ".group_norm"):reshape{b, c, hw}:transpose(2, 3)
      local q, k, v = lin(t, "to_q"), lin(t, "to_k"), lin(t, "to_v")
      local o = lm.attention(q:reshape{b, 1, hw, c}, k:reshape{b, 1, hw, c}, v:reshape{b, 1, hw, c})
      o = lin(o:reshape{b, hw, c}, "to_out.0"):transpose(2, 3):reshape{b, c, s[3], s[4]}
      return x + o
    end
  end
  local function up(i)
    local r = {resnet("up_blocks." .. i .. ".resnets.0"), resnet("up_blocks." .. i .. ".resnets.1"),
               resnet("up_blocks." .. i .. ".resnets.2")}
    local has_up = w["up_blocks." .. i .. ".upsamplers.0.conv.weight"] ~= nil
    return function(x)
      for j = 1, 3 do x = r[j](x) end
      if has_up then
        x = conv(lm.upsample(x, {scale_factor = 2, mode = "nearest"}), "up_blocks." .. i .. ".upsamplers.0.conv")
      end
      return x
    end
  end
  local stages = {
    {"conv_in", function(x) return conv(x, "conv_in") end},
    {"mid.resnet0", resnet("mid_block.resnets.0")},
    {"mid.attention", attention("mid_block.attentions.0")},
    {"mid.resnet1", resnet("mid_block.resnets.1")},
    {"up0", up(0)}, {"up1", up(1)}, {"up2", up(2)}, {"up3", up(3)},
    {"out", function(x) return conv(gn(x, "conv_norm_out"):silu(), "conv_out") end},
  }
  local function whole(x)
    for _, s in ipairs(stages) do x = s[2](x) end
    return x
  end
  return whole, stages
end

local ref = IO["out_f32"]
for _, dtype in ipairs{"f32", "f16"} do
  local whole, stages = decoder(dtype)
  local z = IO["latent"]:to(dev):astype(dtype):eval()
  local dec = lm.compile(whole)
  local y = dec(z):eval()
  local r = lm.compare(y:astype("f32"):to("cpu"), ref)
  print(string.format("%s_maxabs %.6g", dtype, r.max_abs))
  -- VAE_PROFILE=1: the kernels of one call (after the first, which made the
  -- pipelines), longest first (docs/PROFILE.md)
  if os.getenv("VAE_PROFILE") == "1" then lm.profile({rows = 30}, function() return dec(z) end) end
  if check_only then goto continue end
  print(string.format("%s_total %.3f %.3f %.3f", dtype, timed(function() return dec(z) end)))
  local h = z
  for _, s in ipairs(stages) do
    local f = lm.compile(s[2])
    local x = h
    print(string.format("%s_%s %.3f %.3f %.3f", dtype, s[1], timed(function() return f(x) end)))
    h = f(x):eval()
  end
  print(string.format("# %s: %s kernels per call on %s", dtype, tostring(dec:kernels()), y.device))
  ::continue::
end
