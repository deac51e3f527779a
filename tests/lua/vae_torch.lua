-- tests/lua/vae_torch.lua - Lumen's side of a comparison with PyTorch:
-- the VAE decoder of bench/gpu/vae.py (bench/gpu/vae.lua's graph) from the
-- weights vae.py's make() saved, its layers named after the PyTorch
-- module names with lm.name_scope, held by lm.diff against the dump
-- tools/torch_dump.py made of the PyTorch module (tests/lua/diff_vae.sh).
--   build/lumen tests/lua/vae_torch.lua WEIGHTS LATENT TORCH_DUMP [LUMEN_DUMP]
-- Prints one row per PyTorch tensor (paired Lumen node, max_abs, cosine),
-- then "N passed, N failed".
local lm = require "lumen"
local wpath, zpath, dpath, tpath = arg[1], arg[2], arg[3], arg[4]

local w = {}
for k, t in pairs(lm.load(wpath)) do w[k:gsub("^decoder%.", "")] = t end
-- the PyTorch module p's output is the last node built under scope p
local function scoped(name, f, ...)
  local prev = lm.name_scope(name)
  local y = f(...)
  lm.name_scope(prev)
  return y
end
local function gn(x, p)
  return scoped(p, lm.group_norm, x, 32, w[p .. ".weight"], w[p .. ".bias"], 1e-6)
end
local function conv(x, p, pad)
  return scoped(p, lm.conv2d, x, w[p .. ".weight"], w[p .. ".bias"], {padding = pad or 1})
end
local function lin(x, p) return scoped(p, lm.linear, x, w[p .. ".weight"], w[p .. ".bias"]) end
local function resnet(x, p)
  lm.name_scope(p)
  local h = conv(gn(x, p .. ".norm1"):silu(), p .. ".conv1")
  h = conv(gn(h, p .. ".norm2"):silu(), p .. ".conv2")
  if w[p .. ".conv_shortcut.weight"] then x = conv(x, p .. ".conv_shortcut", 0) end
  return x + h
end
local function attention(x, p)
  lm.name_scope(p)
  local s = x.shape
  local b, c, hw = s[1], s[2], s[3] * s[4]
  local t = gn(x, p .. ".group_norm"):reshape{b, c, hw}:transpose(2, 3)
  local q, k, v = lin(t, p .. ".to_q"), lin(t, p .. ".to_k"), lin(t, p .. ".to_v")
  local o = lm.attention(q:reshape{b, 1, hw, c}, k:reshape{b, 1, hw, c}, v:reshape{b, 1, hw, c})
  o = lin(o:reshape{b, hw, c}, p .. ".to_out.0"):transpose(2, 3):reshape{b, c, s[3], s[4]}
  return x + o
end
local function decoder(z)
  local x = conv(z, "conv_in")
  x = resnet(x, "mid_block.resnets.0")
  x = attention(x, "mid_block.attentions.0")
  x = resnet(x, "mid_block.resnets.1")
  for i = 0, 3 do
    for j = 0, 2 do x = resnet(x, ("up_blocks.%d.resnets.%d"):format(i, j)) end
    local p = ("up_blocks.%d.upsamplers.0"):format(i)
    if w[p .. ".conv.weight"] then
      -- the interpolation gets a name of its own: the upsampler's output
      -- is its conv's, and torch_dump.py records that tensor once
      x = conv(scoped(p .. ".interpolate", lm.upsample, x, {scale_factor = 2, mode = "nearest"}), p .. ".conv")
    end
  end
  x = gn(x, "conv_norm_out")
  lm.name_scope(nil)
  return conv(x:silu(), "conv_out")
end

local z = lm.load(zpath).latent
local r = lm.diff(decoder, {z}, {reference = dpath, rtol = 1e-3, atol = 1e-4})
local paired = {}
for _, n in ipairs(r.nodes) do if n.reference then paired[n.reference] = n end end
local ref = lm.load(dpath)
local names = {}
for k in pairs(ref) do names[#names + 1] = k end
table.sort(names)
local pass, fail = 0, 0
local function check(ok, what)
  if ok then pass = pass + 1 else fail = fail + 1; print("FAIL " .. what) end
end
print(string.format("%-48s %-6s %-10s %-10s %s", "PyTorch tensor", "node", "max_abs", "max|ref|", "cosine"))
local unpaired = 0
for _, k in ipairs(names) do
  local n = paired[k]
  if n then
    local big = ref[k]:abs():max():item()
    print(string.format("%-48s %-6d %-10.3g %-10.3g %.9f", k, n.index, n.max_abs, big, n.cosine))
    -- f32 rounding: a few ulps of the layer's largest value per
    -- accumulation, far below any real difference in the model
    check(n.max_abs <= 1e-4 * math.max(big, 1) and n.cosine > 0.999999, k .. ": max_abs " .. n.max_abs)
  else
    print(string.format("%-48s UNPAIRED", k))
    check(false, k .. " has no Lumen node")
    unpaired = unpaired + 1
  end
end
print(string.format("%d PyTorch tensors, %d paired, %d unpaired; %d Lumen nodes; first: %s",
  #names, #names - unpaired, unpaired, #r.nodes, r.first and (r.first.index .. " " .. r.first.where) or "none"))
check(#names >= 84, "the dump holds every PyTorch layer (84): " .. #names)
check(r.nan == nil, "no NaN/Inf")
if tpath then check(lm.trace(decoder, {z}, tpath) == #r.nodes, "lm.trace dumps every node") end
print(string.format("%d passed, %d failed", pass, fail))
os.exit(fail == 0 and 0 or 1)
