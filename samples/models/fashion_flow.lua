-- fashion_flow.lua - the class-conditional rectified-flow UNet of
-- samples/train_fashion.lua, shared by the trainer, the `lumen batch`
-- sampler (samples/fashion_batch.lua) and the training benchmark
-- (bench/train_flow.lua, whose PyTorch twin is bench/peer_train_flow.py).
--   local flow = dofile("samples/models/fashion_flow.lua")
--   local P = flow.init(16)                    -- or flow.load(path)
--   local x = flow.sample(P, x0, y)            -- Euler ODE, guidance 2
-- Classes are 1..10 (Fashion-MNIST's labels + 1); class 11 is "no class"
-- (classifier-free guidance).  The width C is read back from the weights.
local lm = require "lumen"
local flow = {NCLS = 10}

-- the shipped weights of width C, beside this file
local here = debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./"
function flow.weights_path(C) return string.format("%sfashion_flow_w%d.safetensors", here, C) end

-- ---- parameters (PyTorch's default initialisation: U(-1/sqrt(fan_in), ..)),
-- drawn from seeds 1, 2, ... in a fixed order ----
function flow.init(C)
  local NCLS, seed = flow.NCLS, 0
  local function uniform(shape, fan_in)
    seed = seed + 1
    local k = 1 / math.sqrt(fan_in)
    return (lm.rand(shape, {seed = seed}) * (2 * k) - k):eval()
  end
  local function conv(cin, cout, k)
    return {w = uniform({cout, cin, k, k}, cin * k * k), b = uniform({cout}, cin * k * k)}
  end
  local function lin(cin, cout) return {w = uniform({cout, cin}, cin), b = uniform({cout}, cin)} end
  local function block(cin, cout)   -- GroupNorm-SiLU-conv twice, with the embedding added between
    return {n1 = {w = lm.ones{cin}, b = lm.zeros{cin}}, c1 = conv(cin, cout, 3), e = lin(4 * C, cout),
            n2 = {w = lm.ones{cout}, b = lm.zeros{cout}}, c2 = conv(cout, cout, 3),
            skip = cin ~= cout and conv(cin, cout, 1) or nil}
  end
  -- the order of these calls fixes the seeds: keep it
  local P = {}
  P.t1 = lin(C, 4 * C); P.t2 = lin(4 * C, 4 * C); P.cls = {w = uniform({NCLS + 1, 4 * C}, 1)}
  P.inp = conv(1, C, 3)
  P.d1 = block(C, C); P.down1 = conv(C, 2 * C, 3)            -- 28 -> 14
  P.d2 = block(2 * C, 2 * C); P.down2 = conv(2 * C, 2 * C, 3)  -- 14 -> 7
  P.mid = block(2 * C, 2 * C)
  P.u2 = block(4 * C, 2 * C); P.u1 = block(3 * C, C)
  P.outn = {w = lm.ones{C}, b = lm.zeros{C}}; P.outc = conv(C, 1, 3)
  return P
end

-- weights saved by lm.optim.save (the trainer's format) of width C
function flow.load(path, C)
  C = C or tonumber(tostring(path):match("_w(%d+)%.safetensors$")) or 16
  return lm.optim.load(path, flow.init(C))
end

function flow.count(P)
  local n = 0
  for _, v in pairs(lm.optim.flatten(P)) do n = n + v.size end
  return n
end

local function gn(p, x) return lm.group_norm(x, 8, p.w, p.b) end
local function cv(p, x, stride) return lm.conv2d(x, p.w, p.b, {stride = stride or 1, padding = (p.w.shape[3] - 1) // 2}) end
local function res(p, x, emb)
  local h = cv(p.c1, gn(p.n1, x):silu())
  h = h + lm.linear(emb, p.e.w, p.e.b):reshape{emb.shape[1], -1, 1, 1}
  h = cv(p.c2, gn(p.n2, h):silu())
  return h + (p.skip and cv(p.skip, x) or x)
end

-- v(x_t, t, class): x [N,1,28,28], t [N] in [0,1], y [N] i64 classes
function flow.model(p, x, t, y)
  local C = p.inp.w.shape[1]
  local te = lm.timestep_embedding(t * 1000, C)
  local emb = lm.linear(lm.linear(te, p.t1.w, p.t1.b):silu(), p.t2.w, p.t2.b) + lm.embedding(y, p.cls.w)
  emb = emb:silu()
  local h0 = cv(p.inp, x)
  local h1 = res(p.d1, h0, emb)
  local h2 = res(p.d2, cv(p.down1, h1, 2), emb)
  local m = res(p.mid, cv(p.down2, h2, 2), emb)
  local u = lm.interpolate(m, {scale_factor = 2})
  u = res(p.u2, lm.concat({u, h2}, 2), emb)
  u = lm.interpolate(u, {scale_factor = 2})
  u = res(p.u1, lm.concat({u, h1}, 2), emb)
  return cv(p.outc, gn(p.outn, u):silu())
end

-- the rectified-flow loss: x1 data in [-1,1], x0 noise, t [N] times
function flow.loss(p, x1, y, x0, t)
  local tb = t:reshape{-1, 1, 1, 1}
  local xt = x0 * (1 - tb) + x1 * tb
  local v = flow.model(p, xt, t, y)
  return (v - (x1 - x0)):square():mean()
end

-- Euler ODE from noise x0 (t = 0) to data (t = 1) with classifier-free
-- guidance; y [N] i64 classes; returns x [N,1,28,28] (about -1..1), evaluated
function flow.sample(p, x0, y, opts)
  opts = opts or {}
  local nsteps, scale = opts.steps or 20, opts.guidance or 2.0
  local n = x0.shape[1]
  local ynull = lm.full({n}, flow.NCLS + 1, {dtype = "i64"})
  local x = x0
  for i = 0, nsteps - 1 do
    local t = lm.full({n}, i / nsteps)
    local vc, vu = flow.model(p, x, t, y), flow.model(p, x, t, ynull)
    x = (x + (vu + (vc - vu) * scale) * (1 / nsteps)):eval()
  end
  return x
end

return flow
