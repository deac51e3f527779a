-- bench/diff_vae.lua - lm.diff on the SD-style VAE decoder of
-- bench/gpu/vae.lua (random weights, seeded, the same layout), one run
-- against another: prints the per-stage table and the session's peak memory.
--   build/lumen bench/diff_vae.lua [LATENT] [A] [B] [check]
-- LATENT: the latent's side (64 gives a 512x512 image; default 8); A and B
-- name the two configurations ("cpu", "f16", "vulkan", "vulkan:f16";
-- default cpu against f16 on the CPU); A = "plain" evaluates the decoder
-- once, without a session, for its memory.  "check" (tests/lua/diff_vae.sh)
-- then checks the report: a per-stage row for each of the 20 stages, every
-- metric finite, a worst node named, no NaN/Inf; "N passed, N failed".
local lm = require "lumen"
local side = tonumber(arg[1] or "8")
local function cfg(s)
  local c = {}
  for part in (s or ""):gmatch("[^:]+") do
    if part == "f16" or part == "f32" or part == "bf16" then c.dtype = part
    elseif part == "compiled" then c.compile = true
    else c.device = part end
  end
  return c
end
local A, B = cfg(arg[2] or "cpu"), cfg(arg[3] or "cpu:f16")

local seed = 0
local function param(shape, scale)
  seed = seed + 1
  return (lm.randn(shape, {seed = seed}) * scale):eval()
end
local function gn_p(c) return {w = (lm.ones{c} + param({c}, 0.05)):eval(), b = param({c}, 0.05)} end
local function conv_p(cin, cout, k) return {w = param({cout, cin, k, k}, 1 / math.sqrt(cin * k * k)), b = param({cout}, 0.02)} end
local function gn(x, p) return lm.group_norm(x, 32, p.w, p.b, 1e-6) end
local function conv(x, p, pad) return lm.conv2d(x, p.w, p.b, {padding = pad == nil and 1 or pad}) end

local function resnet(name, cin, cout)
  local p = {n1 = gn_p(cin), c1 = conv_p(cin, cout, 3), n2 = gn_p(cout), c2 = conv_p(cout, cout, 3),
             sc = cin ~= cout and conv_p(cin, cout, 1) or nil}
  return function(x)
    lm.name_scope(name)
    local h = conv(gn(x, p.n1):silu(), p.c1)
    h = conv(gn(h, p.n2):silu(), p.c2)
    if p.sc then x = conv(x, p.sc, 0) end
    return x + h
  end
end
local function attention(name, c)
  local function lin_p() return {w = param({c, c}, 1 / math.sqrt(c)), b = param({c}, 0.02)} end
  local p = {n = gn_p(c), q = lin_p(), k = lin_p(), v = lin_p(), o = lin_p()}
  return function(x)
    lm.name_scope(name)
    local s = x.shape
    local b, hw = s[1], s[3] * s[4]
    local t = gn(x, p.n):reshape{b, c, hw}:transpose(2, 3)
    local function lin(u, q) return lm.linear(u, q.w, q.b) end
    local q, k, v = lin(t, p.q), lin(t, p.k), lin(t, p.v)
    local o = lm.attention(q:reshape{b, 1, hw, c}, k:reshape{b, 1, hw, c}, v:reshape{b, 1, hw, c})
    o = lin(o:reshape{b, hw, c}, p.o):transpose(2, 3):reshape{b, c, s[3], s[4]}
    return x + o
  end
end

local CH = {512, 512, 256, 128}
local stages = {}
local cin_p = conv_p(4, 512, 3)
stages[#stages + 1] = function(x) lm.name_scope("conv_in"); return conv(x, cin_p) end
stages[#stages + 1] = resnet("mid.resnet0", 512, 512)
stages[#stages + 1] = attention("mid.attention", 512)
stages[#stages + 1] = resnet("mid.resnet1", 512, 512)
local prev = 512
for i = 1, 4 do
  for j = 1, 3 do
    stages[#stages + 1] = resnet(("up%d.resnet%d"):format(i - 1, j - 1), j == 1 and prev or CH[i], CH[i])
  end
  prev = CH[i]
  if i < 4 then
    local up = conv_p(CH[i], CH[i], 3)
    local name = ("up%d.upsample"):format(i - 1)
    stages[#stages + 1] = function(x)
      lm.name_scope(name)
      return conv(lm.upsample(x, {scale_factor = 2, mode = "nearest"}), up)
    end
  end
end
local norm_out, conv_out = gn_p(128), conv_p(128, 3, 3)
stages[#stages + 1] = function(x) lm.name_scope("out"); return conv(gn(x, norm_out):silu(), conv_out) end

local function decoder(z)
  for _, s in ipairs(stages) do z = s(z) end
  lm.name_scope(nil)
  return z
end

local z = lm.randn({1, 4, side, side}, {seed = 99})
if arg[2] == "plain" then   -- one ordinary evaluation, for the memory it takes
  print(decoder(z):sum():item())
  return
end
local t0 = os.clock()
local r = lm.diff(decoder, {z}, {a = A, b = B, rtol = 1e-2, atol = 1e-2})
print(r)
local peak = 0
for _, m in pairs(lm.memory()) do if type(m) == "table" and m.peak then peak = peak + m.peak end end
print(string.format("latent %dx%d -> image %dx%d: %d nodes, peak device memory %.2f GB, cpu time %.0f s",
  side, side, side * 8, side * 8, #r.nodes, peak / 2 ^ 30, os.clock() - t0))
if arg[4] == "check" then
  local pass, fail = 0, 0
  local function check(ok, what)
    if ok then pass = pass + 1 else fail = fail + 1; print("FAIL " .. what) end
  end
  local function finite(v) return type(v) == "number" and v == v and v < math.huge end
  check(#r.stages == #stages, "one per-stage row per stage: " .. #r.stages)
  for _, st in ipairs(r.stages) do
    check(finite(st.max_abs) and finite(st.nmse) and finite(st.added) and st.cosine > 0.999,
      "stage " .. tostring(st.where) .. ": finite, close metrics")
  end
  check(r.nan == nil, "no NaN/Inf on either side")
  check(r.worst ~= nil and r.worst.where ~= "?", "worst node named")
  check(r.text:match("\nworst ") and r.text:match("per location"), "table printed")
  print(string.format("first: %s; worst: %s", r.first and (r.first.index .. " " .. r.first.op .. " " .. r.first.where) or "none",
    r.worst and (r.worst.index .. " " .. r.worst.op .. " " .. r.worst.where) or "none"))
  print(string.format("%d passed, %d failed", pass, fail))
  os.exit(fail == 0 and 0 or 1)
end
